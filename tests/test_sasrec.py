"""SASRec with every registered encoding: shapes, padding, positions, gradients, devices."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from models import MODELS, build_model
from models.encodings import ENCODINGS, build_encoding
from models.encodings.base import Positions
from pipeline.errors import ParamsError
from pipeline.params import TrainParams

D, H, LAYERS, MAX_LEN, N_ITEMS = 16, 2, 2, 8, 20
TRAIN = TrainParams(dim=D, heads=H, layers=LAYERS, dropout=0.1, max_len=MAX_LEN)


def model(name: str, device: str = "cpu", **options):
    torch.manual_seed(0)
    enc = build_encoding(name, dim=D, max_len=MAX_LEN, heads=H, layers=LAYERS, options={})
    return build_model("sasrec", n_items=N_ITEMS, max_len=MAX_LEN, train=TRAIN, options=options,
                       encoding=enc).to(device)


SEQS = torch.tensor([[0, 0, 0, 3, 4, 5, 6, 7],
                     [1, 2, 3, 4, 5, 6, 7, 8],
                     [0, 0, 0, 0, 0, 0, 0, 9]])


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_shapes_dtypes_and_gradients(name):
    m = model(name).train()
    scores = m(SEQS)                                                        # (B, N)
    assert scores.shape == (3, N_ITEMS + 1) and scores.dtype == torch.float32
    assert torch.all(scores[:, 0] == float("-inf")) and torch.isfinite(scores[:, 1:]).all()
    loss = torch.nn.functional.cross_entropy(scores, torch.tensor([8, 9, 10]))
    loss.backward()
    for pname, p in m.named_parameters():
        assert p.grad is not None, pname
        assert torch.isfinite(p.grad).all(), pname
    enc_grads = [p.grad.abs().sum() for p in m.encoding.parameters()]
    assert all(g > 0 for g in enc_grads), name                              # every encoding weight learns
    assert ENCODINGS[name].learnable == bool(enc_grads)


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_left_padding_never_changes_real_positions(name):
    m = model(name).eval()
    with torch.no_grad():
        short = m.hidden(torch.tensor([[3, 4, 5, 6]]))                      # (1, 4, D)
        padded = m.hidden(torch.tensor([[0, 0, 0, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7]]))  # (2, 7, D)
        assert torch.allclose(padded[0, 3:], short[0], atol=1e-5)
        assert torch.all(padded[0, :3] == 0)
        explicit = m.encode(SEQS, Positions.from_mask(SEQS != 0))
        assert torch.equal(explicit, m.encode(SEQS))                        # explicit positions = default


@pytest.mark.parametrize("name", ["none", "lpe", "rope", "cape", "fparec"])
def test_later_items_never_change_earlier_states(name):
    m = model(name).eval()
    a, b = SEQS[1:2].clone(), SEQS[1:2].clone()
    b[0, 6] = 19                                                            # change the 7th item
    with torch.no_grad():
        ha, hb = m.hidden(a), m.hidden(b)
    assert torch.allclose(ha[0, :6], hb[0, :6], atol=1e-6)                  # causal: the past is untouched
    assert not torch.allclose(ha[0, 6:], hb[0, 6:])


def test_registered_with_options_checked():
    assert "sasrec" in MODELS
    assert model("none", norm="post").final_norm.__class__.__name__ == "Identity"
    with pytest.raises(ParamsError, match="models.sasrec.nrom"):
        model("none", nrom="post")
    with pytest.raises(ParamsError, match="'pre', 'post' or 'kang'"):
        model("none", norm="mid")
    with pytest.raises(ParamsError, match="divisible"):
        build_model("sasrec", n_items=5, max_len=4, train=TrainParams(dim=10, heads=3), options={}, encoding=None)


@pytest.mark.parametrize("n, d, items", [(50, 50, 12101), (200, 50, 3416), (7, 12, 30)])
def test_paper_sasrec_has_003_table_1_parameter_count(n, d, items):
    """003 Table 1: SASRec's attention layer holds 3d^2 weights (W_Q, W_K, W_V; no W_O). With the
    `paper` preset (2 blocks, lrpe) the whole model counts, exactly:
        (items + 1) d                 item table, row 0 = padding
        (n + 1) d                     lrpe table (one spare row: every seqpe learned table has max_len + 1)
        2 x [3d^2 + 3d                attention: Table 1's 3d^2 + the biases of the reference code's dense layers
             + 2d^2 + 2d              point-wise FFN (two d x d layers with biases)
             + 4d]                    two LayerNorms
        + 2d                          final LayerNorm
    (n, d, items) = Beauty's and ML-1m's settings in 003 Tables 2-3, and a small odd case."""
    from pipeline.presets import resolve
    from pipeline.train import resolve_train
    res = resolve(MODELS["sasrec"].presets, "paper", "sasrec", "beauty")
    assert res.models == {"sasrec": {"out_proj": False, "norm": "kang"}}
    tp = resolve_train(TrainParams(), MODELS["sasrec"], "paper", "sasrec", None)
    tp = dataclasses.replace(tp, dim=d, max_len=n)
    enc = build_encoding(tp.encoding, dim=d, max_len=n, heads=tp.heads, layers=tp.layers, options={})
    m = build_model("sasrec", n_items=items, max_len=n, train=tp, options=res.models["sasrec"], encoding=enc)
    for block in m.blocks:
        weights = [p for p in block.attn.parameters() if p.dim() == 2]
        assert sum(p.numel() for p in weights) == 3 * d * d                  # Table 1
        assert sum(p.numel() for p in block.attn.parameters()) == 3 * d * d + 3 * d
    per_layer = 3 * d * d + 3 * d + 2 * d * d + 2 * d + 4 * d
    assert sum(p.numel() for p in m.parameters()) == (items + 1) * d + (n + 1) * d + 2 * per_layer + 2 * d
    default = build_model("sasrec", n_items=items, max_len=n, train=tp, options={}, encoding=enc)
    assert sum(p.numel() for p in default.blocks[0].attn.parameters()) == 4 * d * d + 4 * d   # seqpe's W_O


@pytest.mark.parametrize("dataset, dropout, max_len", [("beauty", 0.5, 50), ("ml_1m", 0.2, 200)])
def test_original_preset_is_kang_mcauley_training(dataset, dropout, max_len):
    """`original` = `paper`'s model trained as Kang & McAuley's code does: one-negative BCE for a fixed
    200 epochs (no early stopping; patience stopped a Beauty seed in BCE's early sag), same variants."""
    from pipeline.train import resolve_train
    paper = resolve_train(TrainParams(), MODELS["sasrec"], "paper", "sasrec", None, dataset)
    orig = resolve_train(TrainParams(), MODELS["sasrec"], "original", "sasrec", None, dataset)
    assert (orig.loss, orig.epochs, orig.patience, orig.dropout, orig.max_len) == ("bce", 200, 0, dropout, max_len)
    assert dataclasses.replace(orig, loss="ce", patience=10) == paper
    from pipeline.presets import resolve
    assert resolve(MODELS["sasrec"].presets, "original", "sasrec", dataset).models == {
        "sasrec": {"out_proj": False, "norm": "kang"}}


def test_output_projection_option_changes_the_function():
    a, b = model("lpe", out_proj=True).eval(), model("lpe", out_proj=False).eval()
    assert isinstance(b.blocks[0].attn.out, torch.nn.Identity)
    with torch.no_grad():
        assert not torch.allclose(a(SEQS)[:, 1:], b(SEQS)[:, 1:])
    with pytest.raises(ParamsError, match="models.sasrec.out_proj"):
        model("lpe", out_proj="no")


def test_learns_a_tiny_next_item_task():
    torch.manual_seed(0)
    m = build_model("sasrec", n_items=N_ITEMS, max_len=MAX_LEN, train=TRAIN, options={},
                    encoding=build_encoding("ldpe", dim=D, max_len=MAX_LEN, heads=H, layers=LAYERS, options={}))
    seqs = torch.stack([torch.arange(s, s + 4) for s in range(1, 12)])      # next item = last + 1
    seqs = torch.cat((torch.zeros(11, 2, dtype=torch.long), seqs), 1)
    targets = seqs[:, -1] + 1
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    losses = []
    for _ in range(40):
        loss = torch.nn.functional.cross_entropy(m(seqs), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.25 * losses[0]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_cpu_and_cuda_agree(name):
    cpu, gpu = model(name).eval(), model(name, "cuda").eval()
    with torch.no_grad():
        a, b = cpu(SEQS)[:, 1:], gpu(SEQS.cuda())[:, 1:].cpu()
    assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_double_precision_follows_the_model(name):
    m = model(name).double().eval()
    with torch.no_grad():
        scores = m(SEQS)
    assert scores.dtype == torch.float64 and torch.isfinite(scores[:, 1:]).all()


def test_kang_block_is_the_reference_codes_layout():
    """Walk 37a: Kang & McAuley's released block (and pmixer/SASRec.pytorch's) is not pre-norm. It projects the
    queries from LayerNorm(x) and the keys and values from x, and both residuals start from the normalised input:
        h = LN1(x);  a = h + Attn(h W_Q, x W_K, x W_V);  g = LN2(a);  out = g + FFN(g);  then a final LayerNorm."""
    import math
    m = model("none", norm="kang", out_proj=False).eval()
    x = torch.randn(2, 5, D)
    pos = Positions.from_mask(torch.ones(2, 5, dtype=torch.bool))
    block = m.blocks[0]
    h = block.ln1(x)
    split = lambda t: t.view(2, 5, H, D // H).transpose(1, 2)               # noqa: E731  (B, H, L, E)
    q, k, v = split(block.attn.q(h)), split(block.attn.k(x)), split(block.attn.v(x))
    logits = q @ k.transpose(-1, -2) / math.sqrt(D // H)
    logits = logits.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))
    a = h + (torch.softmax(logits, -1) @ v).transpose(1, 2).reshape(2, 5, D)
    g = block.ln2(a)
    expect = g + block.ffn(g)
    with torch.no_grad():
        assert torch.allclose(block(x, pos, m.encoding), expect, atol=1e-5)
        pre = model("none", norm="pre", out_proj=False).eval()
        pre.load_state_dict(m.state_dict())                                 # the same weights, another layout
        assert not torch.allclose(pre.blocks[0](x, pos, pre.encoding), expect, atol=1e-3)
    assert m.final_norm.__class__.__name__ == "LayerNorm"


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_kang_block_keeps_padding_and_causality_with_every_encoding(name):
    m = model(name, norm="kang").eval()
    with torch.no_grad():
        short = m.hidden(torch.tensor([[3, 4, 5, 6]]))
        padded = m.hidden(torch.tensor([[0, 0, 0, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7]]))
        assert torch.allclose(padded[0, 3:], short[0], atol=1e-5) and torch.all(padded[0, :3] == 0)
        a, b = SEQS[1:2].clone(), SEQS[1:2].clone()
        b[0, 6] = 19
        ha, hb = m.hidden(a), m.hidden(b)
    assert torch.allclose(ha[0, :6], hb[0, :6], atol=1e-6) and not torch.allclose(ha[0, 6:], hb[0, 6:])
