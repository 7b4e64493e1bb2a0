"""Building blocks shared by the CTR backbones: activations, the MLP tower, DIN's activation unit,
target attention through the encoding hooks, and the next-behaviour auxiliary loss.

Notation used for tensor shapes:
    B  batch, L  history length (LEFT padding), N  rows of a flattened batch, C  channels
    H  heads (1 for DIN / DIEN), E  width per head, D  item width

Papers:
    DIN  Zhou et al., KDD 2018 (arXiv 1706.06978): the local activation unit a(e_j, v_A) of Eq. (3)
         and its weighted sum pooling; "Data Adaptive Activation Function": PReLU
         f(s) = p(s) s + (1 - p(s)) alpha s with p(s) = 1[s > 0], and Dice with
         p(s) = 1 / (1 + exp(-(s - E[s]) / sqrt(Var[s] + eps))), eps = 1e-8, E and Var over the
         mini-batch in training and moving averages at inference.
    DIEN Zhou et al., AAAI 2019 (arXiv 1809.03672): the auxiliary loss of the Interest Extractor
         Layer, L_aux = -1/N sum_i sum_t [log sigma(h_t, e_b[t+1]) + log(1 - sigma(h_t, ê_b[t+1]))],
         sigma(x1, x2) = sigmoid of the inner product; DMIN reuses it for its refined behaviours.
    001  CAPE §4-5: how an encoding enters an attention whose similarity is not a dot product.

`BatchNorm` is written out instead of nn.BatchNorm1d because the built-in refuses a training batch
of one row (a DIN batch may hold a single real behaviour); it is the same computation otherwise.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.errors import ParamsError

from ..dropout import Dropout
from ..encodings.base import PositionalEncoding, Positions

ACTIVATIONS = ("dice", "prelu", "relu", "leaky_relu")


class BatchNorm(nn.Module):
    """Batch normalisation over rows (N, C): batch statistics in training (biased variance; the
    running variance is the unbiased one, as nn.BatchNorm1d), running averages in eval."""

    def __init__(self, width: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.register_buffer("running_mean", torch.zeros(width))
        self.register_buffer("running_var", torch.ones(width))
        self.weight = nn.Parameter(torch.ones(width)) if affine else None
        self.bias = nn.Parameter(torch.zeros(width)) if affine else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:                  # (N, C) -> (N, C)
        dtype = x.dtype                        # statistics in float32 under bf16 autocast, as torch's batch_norm,
        if x.size(0) == 0:                     # no row (a batch without one real behaviour in a sequence: DIN's
            return x                           # packed rows): the mean of nothing was NaN, and went into the
        x = x.to(torch.promote_types(dtype, torch.float32))   # running statistics (walk 40f #1); and in float64
        if self.training:                                      # in a .double() model (walk 37d D1)
            mean, var = x.mean(0), x.var(0, unbiased=False)               # (C,), (C,)
            n = x.size(0)
            if n > 1:                          # one row: no unbiased variance (torch's BatchNorm refuses it)
                with torch.no_grad():
                    self.running_mean.lerp_(mean.detach(), self.momentum)
                    self.running_var.lerp_(var.detach() * n / (n - 1), self.momentum)
        else:
            mean, var = self.running_mean, self.running_var
        y = (x - mean) / torch.sqrt(var + self.eps)                         # (N, C)
        return (y if self.weight is None else y * self.weight + self.bias).to(dtype)


class Dice(nn.Module):
    """DIN's Dice: f(s) = p(s) s + (1 - p(s)) alpha s, p(s) = sigmoid of the batch-normalised s
    (eps 1e-8, no affine), alpha learned per channel and starting at 0."""

    def __init__(self, width: int):
        super().__init__()
        self.norm = BatchNorm(width, eps=1e-8, affine=False)
        self.alpha = nn.Parameter(torch.zeros(width))

    def forward(self, s: torch.Tensor) -> torch.Tensor:                  # (N, C) -> (N, C)
        p = torch.sigmoid(self.norm(s))
        return p * s + (1 - p) * self.alpha * s


def activation(name: str, width: int) -> nn.Module:
    if name == "dice":
        return Dice(width)
    if name == "prelu":
        return nn.PReLU(width)                                           # DIN's PReLU, one alpha per channel
    if name == "relu":
        return nn.ReLU()
    assert name == "leaky_relu", f"activation {name!r} not in {ACTIVATIONS}"
    return nn.LeakyReLU()


def check_activation(name: str, where: str) -> None:
    if name not in ACTIVATIONS:
        raise ParamsError(f"{where} must be one of {', '.join(ACTIVATIONS)}, got {name!r}", "use e.g. dice")


class MLP(nn.Module):
    """Linear -> [BatchNorm] -> activation -> dropout for each hidden width, then Linear to `out`."""

    def __init__(self, in_dim: int, hidden: Sequence[int], out: int = 1, act: str = "relu",
                 dropout: float = 0.0, batch_norm: bool = False):
        super().__init__()
        layers: list[nn.Module] = []
        for width in hidden:
            layers.append(nn.Linear(in_dim, width))
            if batch_norm:
                layers.append(BatchNorm(width))
            layers += [activation(act, width), Dropout(dropout)]
            in_dim = width
        layers.append(nn.Linear(in_dim, out))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:                  # (N, in) -> (N, out)
        return self.net(x)


class ActivationUnit(nn.Module):
    """DIN Eq. (3)'s a(e_j, v_A): an MLP over [h_j, t, h_j - t, h_j * t] -> one score per behaviour.

    Computed on the real behaviours only (packed rows), so padding neither costs time nor enters
    Dice's batch statistics; padding scores are 0.
    """

    def __init__(self, dim: int, hidden: Sequence[int], act: str = "dice", dropout: float = 0.0):
        super().__init__()
        self.mlp = MLP(4 * dim, hidden, 1, act, dropout)

    def forward(self, t: torch.Tensor, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """t (B, E) the target, h (B, L, E) the behaviours, mask (B, L) -> scores (B, L)."""
        rows, cols = mask.nonzero(as_tuple=True)                          # (N,), (N,)
        hj, tj = h[rows, cols], t[rows]                                   # (N, E), (N, E)
        s = self.mlp(torch.cat([hj, tj, hj - tj, hj * tj], dim=-1))[:, 0]  # (N,)
        return s.new_zeros(mask.shape).index_put((rows, cols), s)         # (B, L) (s's dtype: bf16 under autocast)


def hooked_scores(score: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], q: torch.Tensor, k: torch.Tensor,
                  pos: Positions, enc: PositionalEncoding, layer: int, target: torch.Tensor) -> torch.Tensor:
    """Logits (B, H, 1, L) of a target attention whose similarity `score(q, k)` is not a scaled dot
    product (DIN's unit, DIEN's bilinear form, DMIN's per-interest units), with the encoding's
    attention hooks: q (B, H, 1, E) and k (B, H, L, E) rotated first (RoPE; the target sits right
    after the last behaviour), then `score_bias` added (CoPE / CAPE: 001 Eq. 8 with sim = this
    attention's own score, Eq. 4; CAPE fuses the raw target embedding `target` (B, D), Eq. 5).
    Input-stage encodings (naive PE) enter before, through `embed` on the keys."""
    pos = pos.as_target()
    q, k = enc.rotate(q, k, pos, layer)                                   # (B, H, 1, E), (B, H, L, E)
    s = score(q, k)                                                       # (B, H, 1, L)
    bias = enc.score_bias(s, q, pos, layer, query_input=target[:, None])  # (B, H|1, 1, L) or None
    return s if bias is None else s + bias


def masked_softmax(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim where `mask`; 0 elsewhere, and all 0 for a row without keys
    (an empty history) instead of NaN, so gradients stay finite."""
    filled = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
    return torch.softmax(filled, dim=-1) * mask.to(logits.dtype)


def pool(scores: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, softmax: bool) -> torch.Tensor:
    """Weighted sum pooling (DIN Eq. 3): scores (B, L), values (B, L, C), mask (B, L) -> (B, C).
    softmax=False keeps the raw unit outputs as weights (DIN abandons the normalisation)."""
    w = masked_softmax(scores, mask) if softmax else scores * mask.to(scores.dtype)  # (B, L)
    return (w.unsqueeze(-1) * values).sum(1)                              # (B, C)


def check_heads(schema, train, model: str) -> None:
    """The item width D = F * E must split into train.heads heads."""
    D = train.dim * len(schema.fields)
    if D % train.heads:
        raise ParamsError(f"{model}: the item width {D} (train.dim {train.dim} x {len(schema.fields)} fields) "
                          f"is not divisible by train.heads ({train.heads})", "change train.heads or train.dim")


def _overrides(enc: PositionalEncoding, hook: str) -> bool:
    return getattr(type(enc), hook) is not getattr(PositionalEncoding, hook)


def check_unit_encoding(enc: PositionalEncoding, model: str) -> None:
    """Refuse an encoding that a non-dot-product target attention cannot apply: one that only acts
    through q.k-specific hooks (RMHA's relative keys/values, ALiBi) or replaces q.k (PARec family)."""
    lost = [h for h in ("values", "weights") if _overrides(enc, h)]
    if _overrides(enc, "bias") and not _overrides(enc, "score_bias"):
        lost.append("bias")
    if lost or not enc.needs_qk:
        raise ParamsError(f"encoding '{enc.name}' cannot enter {model}'s target attention (it acts through "
                          f"{', '.join(lost) or 'its own attention weights'}, which need q.k attention)",
                          "use none, lpe, rope, cope, cape or another input-stage encoding")


def other_behaviours(mask: torch.Tensor, generator: Optional[torch.Generator] = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """For each (row b, step t < L - 1) a behaviour drawn uniformly from the OTHER rows' real
    behaviours (never padding, never row b's own): (B, L-1) indices into the flattened (B * L)
    sequence, and (B,) whether row b has any other behaviour to draw from."""
    B, L = mask.shape
    real = mask.reshape(-1).nonzero().squeeze(1)                          # (N,) flat index of real behaviours
    counts = mask.sum(1)                                                  # (B,)
    others = real.numel() - counts                                        # (B,) real behaviours of other rows
    starts = counts.cumsum(0) - counts                                    # (B,) where each row's block begins
    u = torch.rand(B, L - 1, generator=generator, device=mask.device)     # (B, L-1)
    j = (u * others[:, None]).long()                                      # uniform over the others
    j = j + (j >= starts[:, None]) * counts[:, None]                      # skip the row's own block
    return real[j.clamp(max=max(real.numel() - 1, 0))], others > 0       # clamp: rows without any, unused


def next_behaviour_loss(states: torch.Tensor, behaviours: torch.Tensor, mask: torch.Tensor,
                        generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """DIEN's L_aux: state t scores the next behaviour e[t+1] above a negative ê[t+1], another user's
    behaviour from the batch (`other_behaviours`).

    states, behaviours (B, L, D) left-padded, mask (B, L). Returns the mean over every (user, t)
    with a real next behaviour and an available negative (0 when there is none): the paper's
    1/N sum_i sum_t, taken per pair so that long histories do not outweigh the click loss.
    """
    B, L, D = states.shape
    if not bool(mask.any()):
        return states.new_zeros(())
    idx, available = other_behaviours(mask, generator)                    # (B, L-1), (B,)
    pairs = mask[:, :-1] & mask[:, 1:] & available[:, None]               # (B, L-1)
    if not bool(pairs.any()):
        return states.new_zeros(())
    neg = behaviours.reshape(B * L, D)[idx]                               # (B, L-1, D)
    h, nxt = states[:, :-1], behaviours[:, 1:]                            # (B, L-1, D) each
    loss = F.softplus(-(h * nxt).sum(-1)) + F.softplus((h * neg).sum(-1))  # -log s(pos) - log(1 - s(neg))
    return loss[pairs].mean()
