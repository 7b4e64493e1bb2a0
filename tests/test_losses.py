"""models/losses.py: the chunked cross-entropy equals the full-logits one (loss and gradients), the
dispatcher's errors, SASRec's sampled BCE; the fused CUDA libraries against plain on a GPU."""
from __future__ import annotations

import math
import sys

import pytest
import torch
import torch.nn.functional as F

from models import losses
from models.losses import chunked_cross_entropy, linear_cross_entropy, sample_negatives, sampled_bce
from pipeline.errors import ParamsError, SeqpeError, UnknownNameError

N, D = 23, 6                    # 22 real items + padding row 0


def inputs(T=9, scale=1.0, dtype=torch.float64, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    h = (torch.randn(T, D, generator=g, dtype=torch.float64) * scale).to(device, dtype)
    w = torch.randn(N, D, generator=g, dtype=torch.float64).to(device, dtype)
    targets = torch.randint(1, N, (T,), generator=g).to(device)
    return h, w, targets


def loss_and_grads(fn, h, w, targets, **kw):
    h, w = h.clone().requires_grad_(), w.clone().requires_grad_()
    loss = fn(h, w, targets, **kw)
    loss.backward()
    return loss.detach(), h.grad, w.grad


def full_logits(h, w, targets):   # what the trainer's `ce` does for the prefixes objective: column 0 at -inf
    logits = h @ w.t()
    logits[:, 0] = float("-inf")
    return F.cross_entropy(logits, targets)


@pytest.mark.parametrize("chunk", [1, 3, 5, 7, 21, 22, 100, None])
@pytest.mark.parametrize("T, scale", [(9, 1.0), (1, 1.0), (9, 300.0)])
def test_chunked_equals_full_softmax_loss_and_gradients(chunk, T, scale):
    """Chunk sizes that do not divide the 22 items, a single row, logits in the thousands."""
    h, w, targets = inputs(T, scale)
    ref = loss_and_grads(full_logits, h, w, targets)
    got = loss_and_grads(chunked_cross_entropy, h, w, targets, chunk=chunk)
    assert torch.isfinite(ref[0]) and torch.allclose(got[0], ref[0], rtol=1e-12, atol=1e-12)
    assert torch.allclose(got[1], ref[1], rtol=1e-10, atol=1e-12)
    assert torch.allclose(got[2], ref[2], rtol=1e-10, atol=1e-12)
    assert torch.all(got[2][0] == 0)                                     # padding row: no gradient


@pytest.mark.parametrize("rows, chunk", [(1, 4096), (64, 4096), (100, 2560), (256, 1024), (665, 384),
                                         (6400, 64), (10 ** 6, 64)])
def test_cpu_chunk_follows_the_number_of_predictions(rows, chunk):
    """About 2^18 logits per block (bench/results/train.md, Session 8), in [64, 4096], a multiple of 64;
    CUDA keeps its fixed size."""
    assert losses.default_chunk(torch.device("cpu"), rows) == chunk
    assert losses.default_chunk(torch.device("cuda"), rows) == losses.CUDA_CHUNK


def test_default_chunk_splits_a_large_table_and_still_equals_the_full_softmax(monkeypatch):
    """T = 100 rows take 2,560-item blocks: 6,000 items are three chunks, the last one narrower."""
    seen = []
    real = losses.default_chunk
    monkeypatch.setattr(losses, "default_chunk", lambda d, rows=1: seen.append(real(d, rows)) or seen[-1])
    g = torch.Generator().manual_seed(3)
    h, w = torch.randn(100, 8, generator=g, dtype=torch.float64), torch.randn(6001, 8, generator=g, dtype=torch.float64)
    targets = torch.randint(1, 6001, (100,), generator=g)
    ref = loss_and_grads(full_logits, h, w, targets)
    got = loss_and_grads(chunked_cross_entropy, h, w, targets)
    assert seen == [2560]
    for a, b in zip(got, ref):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("impl", ["plain", "chunked"])
def test_float32_agrees_with_float64(impl):
    h, w, targets = inputs(40, 3.0)
    ref = loss_and_grads(full_logits, h, w, targets)
    got = loss_and_grads(linear_cross_entropy, h.float(), w.float(), targets, impl=impl)
    assert got[0].dtype == got[1].dtype == got[2].dtype == torch.float32
    for a, b in zip(got, ref):
        assert torch.allclose(a.double(), b, rtol=1e-5, atol=1e-6)


def test_uniform_scores_give_log_items_and_padding_takes_no_part():
    h, w, targets = inputs(4)
    loss = chunked_cross_entropy(torch.zeros(4, D), w.float(), targets, chunk=5)
    assert loss.item() == pytest.approx(math.log(N - 1), rel=1e-6)     # 22 equally likely items
    moved = w.clone()
    moved[0] = 1e6                                                      # the padding row never counts
    assert chunked_cross_entropy(h, moved, targets, chunk=4) == chunked_cross_entropy(h, w, targets, chunk=4)


def test_every_column_when_padding_is_not_skipped():
    h, w, targets = inputs(7)
    targets[0] = 0
    plain = loss_and_grads(lambda a, b, t: F.cross_entropy(a @ b.t(), t), h, w, targets)
    got = loss_and_grads(chunked_cross_entropy, h, w, targets, chunk=4, skip_padding=False)
    for a, b in zip(got, plain):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("impl, keeps_logits", [("plain", True), ("chunked", False)])
def test_chunked_keeps_no_logits_for_backward(impl, keeps_logits):
    """What autograd holds between forward and backward: plain a (T, N - 1) matrix, chunked only
    h, the table, the targets and one log-sum-exp per row."""
    h, w, targets = inputs(9)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        linear_cross_entropy(h.requires_grad_(), w.requires_grad_(), targets, impl, chunk=4)
    assert ((9, N - 1) in saved) == keeps_logits
    if not keeps_logits:
        assert sorted(saved) == sorted([(9, D), (N, D), (9,), (9,)])


def test_gradient_only_for_what_requires_it_and_targets_checked():
    h, w, targets = inputs(5)
    hh = h.clone().requires_grad_()
    chunked_cross_entropy(hh, w, targets, chunk=4).backward()              # a frozen item table
    assert hh.grad is not None and w.grad is None
    with pytest.raises(AssertionError, match=r"column ids in \[1, 23\)"):
        chunked_cross_entropy(h, w, torch.zeros_like(targets))           # 0 is the padding item


def test_half_precision_inputs_accumulate_in_float32():
    h, w, targets = inputs(12, 2.0)
    hb, wb = h.bfloat16(), w.bfloat16()
    ref = loss_and_grads(full_logits, hb.double(), wb.double(), targets)   # the same bf16 values, exact maths
    got = loss_and_grads(chunked_cross_entropy, hb, wb, targets, chunk=5)
    assert got[0].dtype == torch.float32 and got[1].dtype == got[2].dtype == torch.bfloat16
    assert got[0].double().item() == pytest.approx(ref[0].item(), rel=1e-6)
    assert torch.allclose(got[1].double(), ref[1], rtol=1e-2, atol=1e-3)  # bf16 rounding of the result only
    assert torch.allclose(got[2].double(), ref[2], rtol=1e-2, atol=1e-3)


def test_plain_is_todays_loss():
    """impl plain = the trainer's two `ce` forms: weight[1:] with shifted targets, and -inf column 0."""
    h, w, targets = inputs(8)
    assert torch.allclose(linear_cross_entropy(h, w, targets, "plain"), full_logits(h, w, targets), rtol=1e-14)


def test_unknown_impl_and_cuda_only_impls_fail_in_one_line():
    h, w, targets = inputs(3, dtype=torch.float32)
    with pytest.raises(UnknownNameError, match="unknown loss implementation 'fused'. Fix: use one of: cce, chunked"):
        linear_cross_entropy(h, w, targets, "fused")
    for impl in ("cce", "liger"):
        with pytest.raises(ParamsError) as err:
            linear_cross_entropy(h, w, targets, impl)
        assert str(err.value) == (f"loss implementation '{impl}' runs on CUDA only, got tensors on cpu. "
                                  "Fix: use 'chunked' (any device) or 'plain'")


@pytest.mark.parametrize("impl, module, package", [("cce", "cut_cross_entropy", "cut-cross-entropy"),
                                                    ("liger", "liger_kernel", "liger-kernel")])
def test_missing_library_fails_in_one_line(monkeypatch, impl, module, package):
    monkeypatch.setattr(losses, "_require_cuda", lambda *a: None)       # as if on a GPU
    monkeypatch.setitem(sys.modules, module, None)                       # and the package absent
    h, w, targets = inputs(3, dtype=torch.float32)
    with pytest.raises(SeqpeError) as err:
        linear_cross_entropy(h, w, targets, impl)
    assert str(err.value) == (f"loss implementation '{impl}' needs the {package} package, which is not installed. "
                              f"Fix: pip install {package} (Linux with CUDA), or use 'chunked'")


# --------------------------------------------------------------------------- sampled BCE

def test_negatives_are_uniform_over_the_other_items_and_seeded():
    targets = torch.tensor([2, 4] * 3000)
    neg = sample_negatives(targets, 4, torch.Generator().manual_seed(0))
    assert torch.all(neg != targets) and neg.min() >= 1 and neg.max() <= 4
    for t, others in ((2, [1, 3, 4]), (4, [1, 2, 3])):
        counts = torch.bincount(neg[targets == t], minlength=5)[others]  # 3000 draws, ~1000 each
        assert counts.sum() == 3000 and counts.min() > 900 and counts.max() < 1100
    again = sample_negatives(targets, 4, torch.Generator().manual_seed(0))
    assert torch.equal(neg, again)
    assert not torch.equal(neg, sample_negatives(targets, 4, torch.Generator().manual_seed(1)))


def test_sampled_bce_exact_value_prefixes_objective():
    """Two items: the only negative of target 1 is item 2 and vice versa, so the loss is pinned."""
    w = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])              # (N=3, D=2)
    h = torch.tensor([[3.0, 1.0], [0.5, -1.0]])                         # (B, D)
    targets = torch.tensor([1, 2])
    loss = sampled_bce(h, w, targets, torch.Generator().manual_seed(0))
    pos, neg = torch.tensor([3.0, -2.0]), torch.tensor([2.0, 0.5])       # h.w_target, h.w_other
    expected = -(torch.log(torch.sigmoid(pos)) + torch.log(1 - torch.sigmoid(neg))).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_sampled_bce_sequence_objective_skips_positions_without_target():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(2, 4, D, generator=g, requires_grad=True)          # (B, L, D)
    w = torch.randn(N, D, generator=g)
    targets = torch.tensor([[0, 0, 5, 7], [3, 9, 9, 1]])                # 0: no prediction there
    loss = sampled_bce(h, w, targets, torch.Generator().manual_seed(3))
    loss.backward()
    assert torch.all(h.grad[0, :2] == 0) and torch.all(h.grad[0, 2:].abs().sum(-1) > 0)
    neg = sample_negatives(targets, N - 1, torch.Generator().manual_seed(3))
    where = targets != 0
    hw = h.detach()[where]
    pos, ng = (hw * w[targets[where]]).sum(-1), (hw * w[neg[where]]).sum(-1)
    expected = F.binary_cross_entropy_with_logits(torch.cat([pos, ng]), torch.cat([torch.ones(6), torch.zeros(6)]))
    assert loss.item() == pytest.approx(2 * expected.item(), rel=1e-6)   # mean over 6 predictions of two terms
    again = sampled_bce(h.detach(), w, targets, torch.Generator().manual_seed(3))
    assert again.item() == loss.item()                                  # the seed fixes the negatives


# --------------------------------------------------------------------------- GPU

PACKAGES = {"chunked": None, "cce": "cut_cross_entropy", "liger": "liger_kernel"}
# largest error relative to the largest reference entry: chunked runs torch's float32 GEMMs (no TF32 by
# default); the Triton kernels may multiply float32 in TF32; bf16 results are rounded to 8 bits
# cce computes in bf16 whatever it is given (its backward takes bf16 / fp16 only): on an H100 its bf16
# gradients were 3.3% of the largest gradient off plain's (5.7e-5 against 1.7e-3), over the 3% first guessed
TOLERANCE = {("chunked", torch.float32): 1e-5, ("cce", torch.float32): 5e-2, ("liger", torch.float32): 5e-3,
             ("chunked", torch.bfloat16): 1e-2, ("cce", torch.bfloat16): 5e-2, ("liger", torch.bfloat16): 3e-2}


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("impl", sorted(PACKAGES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_impls_equal_plain_on_the_gpu(impl, dtype):
    """Each GPU implementation against plain in float32 on the same (bf16-rounded) values."""
    if PACKAGES[impl]:
        pytest.importorskip(PACKAGES[impl])
    g = torch.Generator().manual_seed(0)
    T, n, d = 300, 5001, 64                                             # 5,000 items, chunks not dividing them
    h = torch.randn(T, d, generator=g).cuda().to(dtype)
    w = (torch.randn(n, d, generator=g) * d ** -0.5).cuda().to(dtype)
    targets = torch.randint(1, n, (T,), generator=g).cuda()
    if impl == "cce":                     # it rounds float32 inputs to bf16 itself: compare on the rounded values
        h, w = h.bfloat16().to(dtype), w.bfloat16().to(dtype)
    ref = loss_and_grads(linear_cross_entropy, h.float(), w.float(), targets, impl="plain")
    got = loss_and_grads(linear_cross_entropy, h, w, targets, impl=impl)
    tol = TOLERANCE[impl, dtype]
    for a, b in zip(got, ref):
        assert (a.float() - b).abs().max() <= tol * b.abs().max(), (impl, dtype)
    assert got[1].dtype == got[2].dtype == dtype and torch.all(got[2][0] == 0)


def test_chunked_cross_entropy_of_no_rows_has_zero_gradients_like_plain():
    """No prediction rows: the backward divided by T = 0 and gave the item table NaN gradients where plain
    cross-entropy gives zeros (walk 43e #7; the trainer never builds such a batch)."""
    grads = []
    for loss in (chunked_cross_entropy, losses.plain_cross_entropy):
        h = torch.zeros(0, 4, requires_grad=True)
        w = torch.randn(6, 4, generator=torch.Generator().manual_seed(0)).requires_grad_()
        out = loss(h, w, torch.zeros(0, dtype=torch.long))
        out.backward()
        assert math.isnan(out.item())                   # the mean of nothing, as F.cross_entropy says
        grads.append(w.grad)
    assert torch.equal(grads[0], grads[1]) and not grads[0].any()
