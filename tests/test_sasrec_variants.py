"""003's Linear Attention and Token Mixing baselines (SASRec with another token mixer)."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F

from models import MODELS, build_model
from models.encodings import build_encoding
from models.encodings.base import Positions
from models.linear_attention import LinearAttention, feature_map
from models.token_mixing import CausalTokenMixing
from pipeline.errors import ParamsError
from pipeline.params import TrainParams

D, H, N = 8, 2, 6
TP = TrainParams(dim=D, layers=2, heads=H, dropout=0.0, max_len=N)
SEQS = torch.tensor([[0, 0, 5, 3, 5, 7], [1, 2, 3, 4, 1, 6]])


def make(name, encoding="lpe", **options):
    torch.manual_seed(0)
    enc = build_encoding(encoding, dim=D, max_len=N, heads=H, layers=2)
    return build_model(name, n_items=9, max_len=N, train=TP, options=options, encoding=enc).eval()


def test_linear_attention_equals_the_causal_recurrent_form():
    """Katharopoulos et al. §3.3: V'_i = phi(Q_i)^T S_i / phi(Q_i)^T Z_i, S_i = sum_{j<=i} phi(K_j) V_j^T,
    Z_i = sum_{j<=i} phi(K_j), over real keys only (the first two slots are padding)."""
    torch.manual_seed(0)
    attn = LinearAttention(D, H, 0.0, out_proj=False).eval()
    x = torch.randn(1, N, D)
    mask = torch.tensor([[False, False, True, True, True, True]])
    with torch.no_grad():
        out = attn(x, Positions.from_mask(mask))                        # (1, N, D)
        q, k, v = (attn._split(f(x))[0] for f in (attn.q, attn.k, attn.v))   # (H, N, E)
        fk = feature_map(k) * mask[0, None, :, None]                    # padding keys add nothing
        S = torch.cumsum(fk[..., :, None] * v[..., None, :], dim=1)     # (H, N, E, E)
        Z = torch.cumsum(fk, dim=1)                                     # (H, N, E)
        fq = feature_map(q)
        rec = torch.einsum("hne,hnef->hnf", fq, S) / torch.einsum("hne,hne->hn", fq, Z)[..., None]  # (H, N, E)
        rec = rec.transpose(0, 1).reshape(N, D)
    assert torch.allclose(out[0, 2:], rec[2:], atol=1e-5)


def test_token_mixing_is_a_causal_two_layer_mlp_over_end_aligned_slots():
    """out_t = sum_{s<=t} W2[t, s] GELU(sum_{u<=s} W1[s, u] x_u + b1[s]) + b2[t], slots counted from
    the end of the max_len window, padded slots zeroed."""
    torch.manual_seed(0)
    mix = CausalTokenMixing(N).eval()
    x = torch.randn(1, 3, D)                                            # 3 columns: the last 3 slots
    mask = torch.tensor([[False, True, True]])
    with torch.no_grad():
        out = mix(x, Positions.from_mask(mask))
        s = [4, 5]                                                       # the real items' slots
        xr = x[0, 1:]                                                    # (2, D)
        hid = F.gelu(torch.tril(mix.w1)[s][:, s] @ xr + mix.b1[s, None])
        want = torch.tril(mix.w2)[s][:, s] @ hid + mix.b2[s, None]
    assert torch.allclose(out[0, 1:], want, atol=1e-6)
    assert sum(p.numel() for p in mix.parameters()) == 2 * N * N + 2 * N
    # only the lower triangles learn
    mix(torch.randn(1, N, D), Positions.from_mask(torch.ones(1, N, dtype=torch.bool))).sum().backward()
    assert torch.all(mix.w1.grad.triu(1) == 0) and torch.all(mix.w2.grad.triu(1) == 0)


@pytest.mark.parametrize("name", ["linear_attention", "token_mixing"])
def test_later_items_never_change_earlier_states(name):
    m = make(name)
    a, b = SEQS[1:].clone(), SEQS[1:].clone()
    b[0, 4] = 8
    with torch.no_grad():
        ha, hb = m.hidden(a), m.hidden(b)
    assert torch.allclose(ha[0, :4], hb[0, :4], atol=1e-6) and not torch.allclose(ha[0, 4:], hb[0, 4:])
    assert MODELS[name].causal and MODELS[name].uses_encoding


@pytest.mark.parametrize("name", ["linear_attention", "token_mixing"])
@pytest.mark.parametrize("encoding", ["rope", "rmha", "cape", "fparec"])
def test_encodings_acting_inside_softmax_attention_are_refused(name, encoding):
    with pytest.raises(ParamsError, match=f"model '{name}' mixes tokens without softmax.*'{encoding}'"):
        make(name, encoding=encoding)


def test_paper_presets_are_sasrecs_settings():
    from pipeline.presets import resolve
    sas = resolve(MODELS["sasrec"].presets, "paper", "sasrec", "beauty")
    la = resolve(MODELS["linear_attention"].presets, "paper", "linear_attention", "beauty")
    tm = resolve(MODELS["token_mixing"].presets, "paper", "token_mixing", "ml_1m")
    # 003 §4.2 swaps only the attention of the authors' SASRec: its block (kang) and no W_O (walk 41b #1)
    assert la.train == sas.train and la.models == {"linear_attention": {"out_proj": False, "norm": "kang"}}
    assert tm.train["max_len"] == 200 and tm.models == {}
    m = make("linear_attention", encoding="lrpe", out_proj=False)
    assert sum(p.numel() for p in m.blocks[0].attn.parameters()) == 3 * D * D + 3 * D   # Q, K, V as SASRec
    with pytest.raises(ParamsError, match="models.token_mixing.out_proj"):
        make("token_mixing", out_proj=False)
    with pytest.raises(ParamsError, match="models.token_mixing.norm 'kang'.*token mixer takes one input"):
        make("token_mixing", norm="kang")                                  # its MLP has no separate queries


def test_linear_attention_in_the_kang_block_takes_its_queries_from_the_normalised_input():
    """`norm: kang` (Kang & McAuley's block): the queries read LayerNorm(x), the keys and values x; causal and
    blind to extra left padding like the pre-LN block."""
    torch.manual_seed(0)
    attn = LinearAttention(D, H, 0.0, out_proj=False).eval()
    x, h = torch.randn(1, N, D), torch.randn(1, N, D)
    pos = Positions.from_mask(torch.ones(1, N, dtype=torch.bool))
    with torch.no_grad():
        got = attn(x, pos, query=h, self_query=True)
        assert not torch.allclose(attn(x, pos), got)                     # the queries' input is used
        later = x.clone()
        later[:, -1] += 1.0                                              # keys / values of the last slot only
        assert torch.equal(attn(later, pos, query=h, self_query=True)[:, :-1], got[:, :-1])    # causal
    m = make("linear_attention", encoding="lrpe", norm="kang", out_proj=False)
    assert m.blocks[0].norm == "kang"
    with torch.no_grad():                                                # extra left padding changes nothing
        assert torch.allclose(m.encode(torch.tensor([[0, 0, 0, 5, 3, 7]])), m.encode(torch.tensor([[0, 5, 3, 7]])),
                              atol=1e-6)


@pytest.mark.parametrize("name", ["linear_attention", "token_mixing"])
def test_trains_on_whole_sequences_through_the_trainer(tmp_path, name):
    """pipeline.train.run with objective sequence (003 Eq. 11) on the `next = item + 1` users."""
    from pipeline import train as stage
    from test_train import _shifted_toy, params
    samples = _shifted_toy(tmp_path)
    p = params(model=name, encoding="lrpe", epochs=15, lr=0.01, dim=32, layers=1, dropout=0.0, patience=0,
               objective="sequence", batch_size=16)
    [res] = stage.run("toy", samples, tmp_path / "runs", p, progress=False)
    assert res["test"]["hr@1"] > 0.95, res
    record = json.loads((tmp_path / "runs" / f"{name}-lrpe" / "seed-1" / "run.json").read_text())
    assert record["train"]["objective"] == "sequence"


def test_no_attention_block_refuses_an_encoding_that_acts_only_there():
    """train.layers=0 with RoPE wrote test_samples byte-identical to --encoding none, reported apart."""
    from pipeline.params import TrainParams
    from pipeline.train import setup
    tp = TrainParams(model="sasrec", layers=0, dim=16, heads=1, max_len=8)
    for name in ("rope", "rmha", "cope", "alibi"):
        with pytest.raises(ParamsError, match=f"train.layers is 0, so sasrec has no attention block, and {name} acts"):
            setup.build_encoding(name, tp, {})
    for name in ("none", "lpe", "abs_con", "ldpe"):                   # input-stage encodings still act
        setup.build_encoding(name, tp, {})
    setup.build_encoding("rope", dataclasses.replace(tp, layers=1), {})
    for model, name in (("parec", "parec"), ("fparec", "fparec"), ("fparec", "average")):   # walk 43b #6: accepted
        with pytest.raises(ParamsError, match=f"train.layers is 0, so {model} has no attention block, and {name} acts"
                                              r".*Fix: use train.layers 1 or more$"):      # none is no PARec model
            setup.build_encoding(name, dataclasses.replace(tp, model=model), {})
