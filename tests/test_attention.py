"""models/attention.py: masking, hook order, target attention, PARec without q/k, the fused SDPA path."""
from __future__ import annotations

import pytest
import torch

from models import attention
from models.attention import MultiHeadAttention, TransformerBlock, masked_softmax
from models.encodings import ENCODINGS, build_encoding
from models.encodings.base import PositionalEncoding, Positions, allowed_keys, query_positions

D, H, L = 8, 2, 5


def enc(name, layers=2):
    torch.manual_seed(0)
    return build_encoding(name, dim=D, max_len=L, heads=H, layers=layers, options={})


def attn(**kw):
    torch.manual_seed(0)
    return MultiHeadAttention(D, H, 0.0, **kw).eval()


MASK = torch.tensor([[False, False, True, True, True], [True, True, True, True, True]])
POS = Positions.from_mask(MASK)
X = torch.randn(2, L, D, generator=torch.Generator().manual_seed(3))


def test_masked_softmax_and_allowed_keys():
    allowed = allowed_keys(POS, L)                                          # (2, 1, 5, 5)
    assert allowed[0, 0, 3].tolist() == [False, False, True, True, False]
    assert allowed[0, 0, 0].tolist() == [True, False, False, False, False]  # padded query keeps itself
    assert allowed_keys(POS, L, causal=False)[0, 0, 2].tolist() == [False, False, True, True, True]
    p = masked_softmax(torch.zeros(2, 1, L, L), allowed)
    assert torch.equal(p[0, 0, 4], torch.tensor([0, 0, 1 / 3, 1 / 3, 1 / 3])) and torch.isfinite(p).all()
    fq, bq = query_positions(POS, 1)
    assert fq.tolist() == [[3], [5]] and bq.tolist() == [[-1], [-1]]


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_causal_and_padding_masks(name):
    e, a = enc(name), attn(qk=enc(name).needs_qk)
    with torch.no_grad():
        out = a(X, POS, e)                                                  # (2, 5, D)
        future = X.clone()
        future[:, 4] += 1.0
        assert torch.allclose(a(future, POS, e)[:, :4], out[:, :4], atol=1e-6)
        pads = X.clone()
        pads[0, :2] = 5.0
        assert torch.allclose(a(pads, POS, e)[0, 2:], out[0, 2:], atol=1e-6)


def test_bidirectional_sees_the_future():
    a = attn(causal=False)
    with torch.no_grad():
        future = X.clone()
        future[:, 4] += 1.0
        assert not torch.allclose(a(future, POS)[:, 0], a(X, POS)[:, 0])


class Recorder(PositionalEncoding):
    fusable = False                                                         # overrides weights and values

    def __init__(self):
        super().__init__()
        self.calls = []

    def rotate(self, q, k, pos, layer):
        self.calls.append(("rotate", layer, tuple(q.shape), tuple(k.shape)))
        return q, k

    def bias(self, q, k, pos, layer, query_input=None, allowed=None):
        self.calls.append(("bias", layer, tuple(query_input.shape), tuple(allowed.shape)))
        return torch.zeros(1, 1, q.size(2), k.size(2))

    def weights(self, probs, pos, layer, allowed=None):
        self.calls.append(("weights", layer, tuple(probs.shape)))
        return probs

    def values(self, probs, v, pos, layer):
        self.calls.append(("values", layer))
        return torch.zeros_like(v[:, :, :probs.size(2)])


def test_hooks_called_in_order_with_layer_and_shapes():
    r = Recorder()
    block = TransformerBlock(D, H, 0.0, layer=3)
    block(X, POS, r)
    assert r.calls == [("rotate", 3, (2, H, L, D // H), (2, H, L, D // H)), ("bias", 3, (2, L, D), (2, 1, L, L)),
                       ("weights", 3, (2, H, L, L)), ("values", 3)]


@pytest.mark.parametrize("name", [n for n, s in sorted(ENCODINGS.items()) if s.family != "parec"])
def test_target_attention(name):
    e, a = enc(name), attn()
    query = torch.randn(2, 1, D, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        out = a(X, POS, e, query=query)                                     # (2, 1, D)
        assert out.shape == (2, 1, D) and torch.isfinite(out).all()
        pads = X.clone()
        pads[0, :2] = -3.0
        assert torch.allclose(a(pads, POS, e, query=query)[0], out[0], atol=1e-6)


def test_positional_attention_builds_no_qk_and_uses_its_weights():
    e = enc("parec")
    a = attn(qk=e.needs_qk)
    assert a.q is None and a.k is None and not e.needs_qk
    with torch.no_grad():
        w = e.weights(torch.zeros(2, 1, L, L), POS, 0)                      # (2, 1, L, L)
        v = a._split(a.v(X))                                                # (2, H, L, E)
        expected = a.out((w @ v).transpose(1, 2).reshape(2, L, D))
        assert torch.allclose(a(X, POS, e), expected, atol=1e-6)


@pytest.mark.parametrize("name", ["parec", "fparec", "average"])
def test_positional_attention_follows_the_attentions_own_mask(name):
    """Causal blocks (003) give future keys zero weight; a bidirectional block (PosRec's readout)
    spreads the positional weights over every real key, padding still excluded."""
    e = enc(name)
    with torch.no_grad():
        causal = e.weights(torch.zeros(2, 1, L, L), POS, 0, allowed_keys(POS, L, causal=True))[:, 0]
        both = e.weights(torch.zeros(2, 1, L, L), POS, 0, allowed_keys(POS, L, causal=False))[:, 0]
        assert torch.equal(causal, e.weights(torch.zeros(2, 1, L, L), POS, 0)[:, 0])  # default: causal
        upper = torch.ones(L, L).triu(1).bool()                             # keys j > i
        assert torch.all(causal[:, upper] == 0) and torch.all(both[1][upper] > 0)
        assert torch.all(both[0, 2:, :2] == 0) and torch.allclose(both[:, 2:].sum(-1), torch.ones(2, 3))
        x2 = X.clone()
        x2[1, -1] += 1.0                                                     # change the last item
        for causal_flag, changes_first in ((True, False), (False, True)):
            a = attn(qk=e.needs_qk, causal=causal_flag)
            moved = (a(x2, POS, e)[1, 0] - a(X, POS, e)[1, 0]).abs().max() > 1e-6
            assert bool(moved) == changes_first


def test_post_norm_block_and_padding_rows_zero():
    block = TransformerBlock(D, H, 0.0, layer=0, norm="post").eval()
    out = block(X, POS, None)
    assert torch.all(out[0, :2] == 0) and out.shape == (2, L, D)


# --------------------------------------------------------------------------- fused (SDPA) path

def both_paths(monkeypatch, a, *args, **kw):
    """(fused, explicit) outputs of attention `a` on the same inputs."""
    with torch.no_grad():
        fused = a(*args, **kw)
        monkeypatch.setattr(attention, "SDPA", False)
        explicit = a(*args, **kw)
        monkeypatch.setattr(attention, "SDPA", True)
    return fused, explicit


def overrides(e, hook):
    return getattr(type(e), hook) is not getattr(PositionalEncoding, hook)


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_fusable_iff_weights_and_values_are_left_alone(name):
    e = enc(name)
    assert e.fusable == (not overrides(e, "weights") and not overrides(e, "values"))


@pytest.mark.parametrize("name", sorted(ENCODINGS))
@pytest.mark.parametrize("mode", ["causal", "bidirectional", "target"])
@pytest.mark.parametrize("layer", [0, 1])
def test_fused_path_equals_explicit_path(monkeypatch, name, mode, layer):
    e = enc(name)
    if mode == "target" and not e.needs_qk:
        pytest.skip("positional attention (PARec family) is self-attention only")
    torch.manual_seed(1)
    a = MultiHeadAttention(D, H, 0.0, layer=layer, causal=mode == "causal", qk=e.needs_qk).eval()
    calls = []
    spy = attention.fused_attention
    monkeypatch.setattr(attention, "fused_attention", lambda *args: calls.append(1) or spy(*args))
    query = torch.randn(2, 1, D, generator=torch.Generator().manual_seed(4)) if mode == "target" else None
    fused, explicit = both_paths(monkeypatch, a, X * 3, POS, e, query=query)   # (2, Lq, D)
    assert fused.shape == explicit.shape == (2, 1 if query is not None else L, D)
    assert torch.allclose(fused, explicit, atol=1e-5, rtol=1e-5), (fused - explicit).abs().max()
    assert len(calls) == (1 if e.fusable and e.needs_qk else 0)         # the fast path ran where it may


class Biased(PositionalEncoding):
    """A fusable encoding whose hooks record their calls; its bias must reach the fused kernel."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def rotate(self, q, k, pos, layer):
        self.calls.append("rotate")
        return q.flip(-1), k

    def bias(self, q, k, pos, layer, **hook_args):                         # any further hook arguments
        self.calls.append("bias")
        return torch.arange(L, dtype=q.dtype).repeat(q.size(2), 1)[None, None] * 0.7  # (1, 1, Lq, L)


def test_fused_path_calls_rotate_and_bias_and_uses_them(monkeypatch):
    e, a = Biased(), attn()
    fused, explicit = both_paths(monkeypatch, a, X, POS, e)
    assert e.calls == ["rotate", "bias", "rotate", "bias"]
    assert torch.allclose(fused, explicit, atol=1e-6)
    assert not torch.allclose(fused, a(X, POS, None), atol=1e-3)        # the bias and rotation matter


def test_fused_path_dropout_only_in_training():
    torch.manual_seed(0)
    a = MultiHeadAttention(D, H, 0.5, layer=0)
    e = enc("rope")
    a.train()
    assert not torch.allclose(a(X, POS, e), a(X, POS, e))               # dropout_p in training
    a.eval()
    assert torch.equal(a(X, POS, e), a(X, POS, e))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", [n for n in sorted(ENCODINGS) if enc(n).fusable])
def test_fused_path_on_the_gpu_equals_explicit_on_the_cpu(monkeypatch, name):
    e = enc(name)
    a = attn()
    monkeypatch.setattr(attention, "SDPA", False)
    with torch.no_grad():
        cpu = a(X, POS, e)
    monkeypatch.setattr(attention, "SDPA", True)
    pos = Positions.from_mask(MASK.cuda())
    with torch.no_grad():
        gpu = a.cuda()(X.cuda(), pos, e.cuda()).cpu()
    assert torch.allclose(gpu, cpu, atol=1e-4, rtol=1e-4), (gpu - cpu).abs().max()
