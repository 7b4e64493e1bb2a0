"""Sampled ranking losses for the backbones' own objectives (`Recommender.training_loss`).

Notation used for tensor shapes:
    B  batch, L  padded length, T  predictions in the batch (B rows, or the real positions of
    a whole-sequence batch), D  hidden size, M  negatives, N  n_items + 1

r_i is the score of a prediction's target, r_j those of its negatives (valid: j != i's item).

    bpr        Rendle et al. 2009, BPR-Opt (and FPMC's S-BPR, Rendle et al. 2010; GRU4Rec's BPR,
               Hidasi et al. 2016): mean_j -log sigmoid(r_i - r_j)
    top1       Hidasi et al. 2016: mean_j sigmoid(r_j - r_i) + sigmoid(r_j^2)
    bpr_max    Hidasi & Karatzoglou 2018 (ranking-max family): with s_j = softmax_j(r_j) over the
               negatives, -log sum_j s_j sigmoid(r_i - r_j) + lambda sum_j s_j r_j^2
    top1_max   same paper: sum_j s_j (sigmoid(r_j - r_i) + sigmoid(r_j^2))

The last terms are the papers' score regularisation (lambda = `bpreg` for BPR-max; TOP1-max's
sigmoid(r_j^2) is built in). Each loss is averaged over the T predictions (one without any valid
negative adds 0). Written here rather
than taken from a library: torch has no sampled pairwise ranking losses, and the masking of
accidental hits (a negative equal to the target) must follow the batch's own targets.

Negatives (`negatives`): GRU4Rec's are the other predictions' targets of the mini-batch (so
drawn by popularity) plus `extra` items shared by the batch; Hidasi & Karatzoglou draw the extra
ones with probability ~ support^alpha, seqpe uniformly (alpha = 0: the model sees no counts).
BPR's LearnBPR draws one uniform negative per (user, item) pair: `per_row` negatives (T, M).
All draws come from the trainer's `generator`, so a seed fixes them.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

LOSSES = ("bpr", "top1", "bpr_max", "top1_max")


def predictions(model, seqs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The session vectors (T, D) to score and their targets (T,): one per row for targets (B,),
    or one per real position for whole sequences, targets (B, L) with 0 where none (the model's
    `hidden`, as the trainer's sequence objective reads it)."""
    if targets.dim() == 2:
        where = targets != 0                                            # (B, L)
        return model.hidden(seqs)[where], targets[where]               # (T, D), (T,)
    return model.encode(seqs), targets                                  # (B, D), (B,)


def draw(n_items: int, shape: tuple, generator: torch.Generator, device) -> torch.Tensor:
    """Uniform items in 1..n_items of `shape`, drawn on the generator's device, moved to `device`."""
    return torch.randint(1, n_items + 1, shape, generator=generator, device=generator.device).to(device)


def batch_negatives(targets: torch.Tensor, n_items: int, extra: int, generator: torch.Generator) -> torch.Tensor:
    """GRU4Rec's shared negatives (M,) = the batch's targets (T,) then `extra` uniform items."""
    return torch.cat((targets, draw(n_items, (extra,), generator, targets.device)))  # (T + extra,)


def sampled_scores(h: torch.Tensor, items: torch.Tensor, targets: torch.Tensor,
                   negatives: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scores of the targets (T,) and of the negatives (T, M), and which negatives count (T, M).

    h (T, D) session vectors; items (N, D) the scoring table; negatives (M,) shared by every
    prediction or (T, M) per prediction. A negative equal to the prediction's target is masked."""
    pos = (h * items[targets]).sum(-1)                                  # (T,)
    if negatives.dim() == 1:
        neg = h @ items[negatives].t()                                  # (T, M)
        valid = negatives[None, :] != targets[:, None]                  # (T, M)
    else:
        neg = torch.einsum("td,tmd->tm", h, items[negatives])           # (T, M)
        valid = negatives != targets[:, None]                           # (T, M)
    return pos, neg, valid


def _softmax(neg: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Softmax over the valid negatives of each row (T, M); 0 elsewhere and on rows with none."""
    low = torch.finfo(neg.dtype).min                                    # finite: no NaN gradients
    return torch.softmax(neg.masked_fill(~valid, low), -1) * valid      # (T, M)


def bpr(pos: torch.Tensor, neg: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """BPR-Opt's data term: mean over predictions of mean_j -log sigmoid(r_i - r_j)."""
    per_pair = -F.logsigmoid(pos[:, None] - neg) * valid                # (T, M)
    return (per_pair.sum(-1) / valid.sum(-1).clamp(min=1)).mean()


def top1(pos: torch.Tensor, neg: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """GRU4Rec's TOP1: mean_j sigmoid(r_j - r_i) + sigmoid(r_j^2) (the second term regularises)."""
    per_pair = (torch.sigmoid(neg - pos[:, None]) + torch.sigmoid(neg.pow(2))) * valid  # (T, M)
    return (per_pair.sum(-1) / valid.sum(-1).clamp(min=1)).mean()


def bpr_max(pos: torch.Tensor, neg: torch.Tensor, valid: torch.Tensor, reg: float) -> torch.Tensor:
    """BPR-max with score regularisation: -log sum_j s_j sigmoid(r_i - r_j) + reg sum_j s_j r_j^2."""
    s = _softmax(neg, valid)                                            # (T, M)
    hit = (s * torch.sigmoid(pos[:, None] - neg)).sum(-1)               # (T,)
    per_row = -torch.log(hit + 1e-24) + reg * (s * neg.pow(2)).sum(-1)  # (T,)
    return (per_row * valid.any(-1)).mean()                             # a row without negatives adds 0


def top1_max(pos: torch.Tensor, neg: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """TOP1-max: sum_j s_j (sigmoid(r_j - r_i) + sigmoid(r_j^2))."""
    s = _softmax(neg, valid)                                            # (T, M)
    return (s * (torch.sigmoid(neg - pos[:, None]) + torch.sigmoid(neg.pow(2)))).sum(-1).mean()


def ranking_loss(kind: str, pos: torch.Tensor, neg: torch.Tensor, valid: torch.Tensor,
                 reg: Optional[float] = None) -> torch.Tensor:
    """One of LOSSES by name (reg: BPR-max's lambda)."""
    if kind == "bpr":
        return bpr(pos, neg, valid)
    if kind == "top1":
        return top1(pos, neg, valid)
    if kind == "bpr_max":
        return bpr_max(pos, neg, valid, 0.0 if reg is None else reg)
    assert kind == "top1_max", f"unknown ranking loss {kind}"
    return top1_max(pos, neg, valid)
