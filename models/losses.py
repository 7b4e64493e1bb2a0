"""Next-item losses over the item table that never build the (predictions x items) logits.

Notation used for tensor shapes:
    T  predictions (rows of h), D  model size, N  n_items + 1 (row / column 0 = the padding item),
    C  items per chunk, B  batch, L  padded length

Every function takes the hidden states h, the FULL item table `weight` (N, D) whose row 0 is
the padding item, and targets that are item ids 1..N-1; column 0 never enters the softmax and
gets exactly zero gradient, as in the trainer's `ce` loss (pipeline/train.py slices weight[1:]).

`linear_cross_entropy(h, weight, targets, impl=...)` = mean_t -log softmax(h W^T)_t[target_t]:

    plain    F.cross_entropy(h @ weight[1:].T, targets - 1): the reference; builds (T, N - 1) logits,
             their log-softmax and their gradient (half a CPU SASRec step on untrimmed Beauty batches,
             over 80% on the trimmed ones the trainer serves and on full-length ones:
             bench/results/train.md, Sessions 6-7)
    chunked  `chunked_cross_entropy`: the item axis in chunks of C items, log-sum-exp accumulated
             online (running max and sum per row: Milakov & Gimelshein 2018, the softmax of
             FlashAttention, Dao et al. 2022; Wijmans et al. 2024 (Cut Cross-Entropy) do the same in
             one GPU kernel). Backward recomputes each chunk's logits:
                 P_c = exp(h W_c^T - lse)      grad_h = sum_c P_c W_c - W[target]
                 grad_W_c = P_c^T h            grad_W[target] -= h         (all / T)
             so memory is O(T C) instead of O(T N), and the one-hot is two gathers, never a matrix.
             Written here (not a library) because the libraries below are CUDA/Triton only and the
             CPU needs it most; float32 maths also for bf16 / fp16 inputs (grads cast back).
    cce      Apple's cut-cross-entropy (`cut_cross_entropy.linear_cross_entropy`), CUDA only, bf16
    liger    Liger-Kernel's `LigerFusedLinearCrossEntropyLoss`, CUDA only

The two libraries are imported when asked for; without them (or off CUDA) the request fails
with a one-line ParamsError. cce runs with `filter_eps=None`: its default skips gradient blocks
whose softmax entries are all below a threshold (2.4e-4 in bf16), which a near-uniform softmax over
10^4 items (every entry ~1e-4, e.g. at initialisation) would zero almost entirely.

`sampled_bce` is SASRec's own objective (Kang & McAuley 2018, §III-E "Network Training"; the PE
study's loss, 004 §4.2): per prediction, binary cross-entropy of the target against ONE sampled
negative, -log sigma(h.w_target) - log(1 - sigma(h.w_neg)). The reference code draws the negative
outside the user's whole sequence; here it is uniform over the items other than the target (no
per-user set is needed, and the draw is one vectorised call on the caller's generator).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F

from pipeline.errors import ParamsError, unknown

# Items per chunk. On the CPU the (T, C) float32 logits block should stay near 1 MB (2^18 entries),
# so C follows the number of predictions T: bench/results/train.md, "Session 8" (1 thread, loss
# forward + backward): at T = 100 (a session batch: one prediction per sample) C = 2,048 takes 20% less
# time than C = 128 and 11% less than plain; at T = 256, 512-4,096 take 9% less than 128; at T = 665
# (a trimmed Beauty batch) 256-512 are best; at T = 6,400 (full-length batches, Session 6) 64-128.
# C = 2^18 / T, clamped to [64, 4,096] and rounded down to a multiple of 64, is within 1-2% of the
# best at every T measured. On CUDA a chunk must be large enough to fill the GPU (launch overhead
# dominates small GEMMs); 4,096 is a memory-bounded guess, not swept. One point was measured on an H100
# (train.md "Session 19", Diginetica SASRec, batch 4,096, fp32): chunked trained at 281,262 samples/s,
# half of plain's 550,227, so `auto` uses plain there and chunked is the GPU path only for memory.
CPU_BLOCK, CPU_CHUNK_MIN, CPU_CHUNK_MAX, CUDA_CHUNK = 2 ** 18, 64, 4096, 4096


def default_chunk(device: torch.device, rows: int = 1) -> int:
    """Items per chunk for `rows` predictions on `device` (the table above)."""
    if device.type == "cuda":
        return CUDA_CHUNK
    c = CPU_BLOCK // max(int(rows), 1)
    return max(CPU_CHUNK_MIN, min(CPU_CHUNK_MAX, c // 64 * 64))


# --------------------------------------------------------------------------- reference

def plain_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The trainer's `ce` loss: full (T, N - 1) logits without the padding column."""
    return F.cross_entropy(h @ weight[1:].t(), targets - 1)             # (T, N-1) logits


# --------------------------------------------------------------------------- chunked

def _block(buf: torch.Tensor, cols: int) -> torch.Tensor:
    """A contiguous (T, cols) view at the start of the (T, C) buffer (the last chunk may be narrower)."""
    return buf.view(-1)[:buf.size(0) * cols].view(buf.size(0), cols)


class _ChunkedCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of softmax(h W[start:]^T) against `targets`, C columns at a time."""

    @staticmethod
    def forward(ctx, h, weight, targets, chunk: int, start: int):
        acc = torch.promote_types(torch.promote_types(h.dtype, weight.dtype), torch.float32)  # fp32 (fp64 kept)
        hf = h.to(acc)                                                   # (T, D)
        T, N = h.size(0), weight.size(0)
        m = hf.new_full((T,), float("-inf"))                             # (T,) running max
        s = hf.new_zeros(T)                                              # (T,) running sum of exp(logit - m)
        buf = hf.new_empty(T, min(chunk, N - start))                     # (T, C) reused logits block
        for c0 in range(start, N, chunk):
            w = weight[c0:c0 + chunk].to(acc)                            # (C, D)
            logits = torch.mm(hf, w.t(), out=_block(buf, w.size(0)))     # (T, C)
            m_new = torch.maximum(m, logits.amax(1))                     # (T,)
            s.mul_((m - m_new).exp_()).add_(logits.sub_(m_new[:, None]).exp_().sum(1))  # in place
            m = m_new
        lse = m + s.log()                                                # (T,) log-sum-exp over the items
        target_logit = (hf * weight[targets].to(acc)).sum(1)             # (T,)
        ctx.save_for_backward(h, weight, targets, lse)
        ctx.chunk, ctx.start = chunk, start
        return (lse - target_logit).mean()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        h, weight, targets, lse = ctx.saved_tensors
        need_h, need_w = ctx.needs_input_grad[:2]
        chunk, start = ctx.chunk, ctx.start
        acc = lse.dtype
        hf = h.to(acc)                                                   # (T, D)
        T, N = h.size(0), weight.size(0)
        grad_h = torch.zeros_like(hf) if need_h else None                # (T, D)
        grad_w = torch.empty(weight.shape, dtype=hf.dtype, device=hf.device) if need_w else None  # (N, D)
        if need_w:
            grad_w[:start].zero_()                                       # padding row: no gradient
        buf = hf.new_empty(T, min(chunk, N - start))                     # (T, C)
        neg_lse = -lse[:, None]                                          # (T, 1)
        for c0 in range(start, N, chunk):
            w = weight[c0:c0 + chunk].to(acc)                            # (C, D)
            p = torch.mm(hf, w.t(), out=_block(buf, w.size(0)))          # (T, C) logits
            p.add_(neg_lse).exp_()                                       # (T, C) softmax, in place
            if need_h:
                grad_h.addmm_(p, w)                                      # (T, D)
            if need_w:
                torch.mm(p.t(), hf, out=grad_w[c0:c0 + w.size(0)])       # (C, D)
        scale = grad_out.to(acc) / max(T, 1)                             # d mean / d row (T = 0: zero grads, as plain CE)
        if need_h:                                                       # minus the one-hot rows
            grad_h.sub_(weight[targets].to(acc)).mul_(scale)
            grad_h = grad_h.to(h.dtype)
        if need_w:
            grad_w.index_add_(0, targets, hf, alpha=-1.0).mul_(scale)
            grad_w = grad_w.to(weight.dtype)
        return grad_h, grad_w, None, None, None


def chunked_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                          chunk: Optional[int] = None, skip_padding: bool = True) -> torch.Tensor:
    """mean over rows of -log softmax(h @ weight.T)[target], never holding more than (T, chunk) logits.

    h (T, D) float; weight (N, D); targets (T,) long. skip_padding: column 0 (the padding item) is
    left out of the softmax and gets zero gradient, targets are item ids 1..N-1 (seqpe's layout);
    False: every column counts, targets 0..N-1. chunk: items per block (default by device and
    T, `default_chunk`). Differentiable in h and weight (once); float32 maths for half-precision inputs
    (float64 stays float64), gradients in the inputs' dtypes.
    """
    start = 1 if skip_padding else 0
    assert h.dim() == 2 and weight.dim() == 2 and h.size(1) == weight.size(1), \
        f"h (T, D) and weight (N, D) expected, got {tuple(h.shape)} and {tuple(weight.shape)}"
    assert targets.shape == h.shape[:1], f"targets {tuple(targets.shape)} do not match h {tuple(h.shape)}"
    assert weight.size(0) > start, "no item column to score"
    if not torch.compiler.is_compiling():      # a data-dependent check: a graph break (and its warnings) in compile
        assert bool(((targets >= start) & (targets < weight.size(0))).all()), \
            f"targets must be column ids in [{start}, {weight.size(0)})"
    chunk = chunk if chunk is not None else default_chunk(h.device, h.size(0))
    assert chunk >= 1, f"chunk must be >= 1, got {chunk}"
    return _ChunkedCrossEntropy.apply(h, weight, targets, int(chunk), start)


# --------------------------------------------------------------------------- fused CUDA libraries

def _require_cuda(impl: str, *tensors: torch.Tensor) -> None:
    devices = sorted({t.device.type for t in tensors})
    if devices != ["cuda"]:
        raise ParamsError(f"loss implementation '{impl}' runs on CUDA only, got tensors on {', '.join(devices)}",
                          "use 'chunked' (any device) or 'plain'")


def _missing(impl: str, package: str) -> ParamsError:
    return ParamsError(f"loss implementation '{impl}' needs the {package} package, which is not installed",
                       f"pip install {package} (Linux with CUDA), or use 'chunked'")


def cce_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Apple's Cut Cross-Entropy (Wijmans et al. 2024) on columns 1..N-1, exact gradients (no filter).

    Its backward kernel takes bf16 / fp16 embeddings only (cut-cross-entropy 25.1 asserts it; the
    trainer hands the loss float32, and an fp32 run with ce_impl cce failed at the first backward on
    an H100, bench/results/train.md "Session 19"), so float32 inputs are cast to bf16 for the kernel
    and their gradients come back float32: `cce` is a bf16 loss whatever train.precision says."""
    _require_cuda("cce", h, weight, targets)
    try:
        from cut_cross_entropy import linear_cross_entropy as cce
    except ImportError:
        raise _missing("cce", "cut-cross-entropy") from None
    if h.dtype == torch.float32:
        h = h.to(torch.bfloat16)
    if weight.dtype == torch.float32:
        weight = weight.to(torch.bfloat16)
    return cce(h, weight[1:], targets - 1, reduction="mean", filter_eps=None, impl="cce")


def liger_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Liger-Kernel's fused linear cross-entropy (row chunks, gradients in forward) on columns 1..N-1."""
    _require_cuda("liger", h, weight, targets)
    try:
        from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss
    except ImportError:
        raise _missing("liger", "liger-kernel") from None
    loss = LigerFusedLinearCrossEntropyLoss(reduction="mean", accum_dtype=torch.float32)
    return loss(weight[1:], h, targets - 1)


# --------------------------------------------------------------------------- dispatcher

IMPLS: dict[str, Callable[..., torch.Tensor]] = {
    "plain": plain_cross_entropy,
    "chunked": chunked_cross_entropy,
    "cce": cce_cross_entropy,
    "liger": liger_cross_entropy,
}


def linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, impl: str = "chunked",
                         *, chunk: Optional[int] = None) -> torch.Tensor:
    """Softmax cross-entropy of h (T, D) over items 1..N-1 of weight (N, D), targets (T,) in 1..N-1,
    averaged over the T rows, by implementation `impl` (IMPLS); `chunk` only for 'chunked' (default:
    `default_chunk` of the device). Unknown names and CUDA-only ones off CUDA raise SeqpeError."""
    if impl not in IMPLS:
        raise unknown("loss implementation", impl, IMPLS)
    if impl == "chunked":
        return chunked_cross_entropy(h, weight, targets, chunk=chunk)
    return IMPLS[impl](h, weight, targets)


# --------------------------------------------------------------------------- SASRec's objective

def sample_negatives(targets: torch.Tensor, n_items: int, generator: torch.Generator) -> torch.Tensor:
    """One item per entry of targets (...), uniform over 1..n_items minus the target (...).

    Draws r in 1..n_items-1 on the generator's device and skips the target: r + (r >= target).
    Entries with target 0 (no prediction) get an item too (ignored by the caller), so the draw
    depends only on the shape: same generator state, same negatives."""
    assert n_items >= 2, f"a negative other than the target needs >= 2 items, got {n_items}"
    r = torch.randint(1, n_items, targets.shape, generator=generator, device=generator.device)  # (...)
    r = r.to(targets.device)
    return r + (r >= targets).long()                                     # (...) in 1..n_items


def sampled_bce(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                generator: torch.Generator) -> torch.Tensor:
    """SASRec's loss (Kang & McAuley 2018, §III-E): mean over predictions of
    -log sigmoid(h.w_target) - log(1 - sigmoid(h.w_negative)), one negative per prediction.

    Sequence objective: h (B, L, D), targets (B, L) with 0 where there is no prediction.
    Prefixes objective: h (B, D), targets (B,). weight (N, D) the item table (row 0 padding);
    negatives from `sample_negatives` on `generator`, so a seed fixes them."""
    assert h.shape[:-1] == targets.shape, f"h {tuple(h.shape)} does not match targets {tuple(targets.shape)}"
    negatives = sample_negatives(targets, weight.size(0) - 1, generator)  # (B, L) or (B,)
    where = targets != 0                                                 # (B, L) or (B,)
    hw = h[where]                                                        # (T, D)
    pos = (hw * weight[targets[where]]).sum(-1)                          # (T,)
    neg = (hw * weight[negatives[where]]).sum(-1)                        # (T,)
    return (F.softplus(-pos) + F.softplus(neg)).mean()                   # -log s(pos) - log(1 - s(neg))
