"""Ranking and CTR metrics, batched on the device and exact.

Notation used for tensor shapes:
    B  batch size
    N  n_items + 1 (column 0 is the padding item and is never ranked)
    S  number of scored samples (CTR)

Ranking (PROTOCOLS.md §5, full ranking over all items):
    rank    = 1 + #{items i >= 1 : score_i > score_target}   (ties never count against the target)
    HR@K    = mean [rank <= K]                  (= Recall@K with a single target)
    MRR@K   = mean 1/rank        if rank <= K else 0
    NDCG@K  = mean 1/log2(rank+1) if rank <= K else 0
Values are in [0, 1]; tables show them x100 the way the papers do.

`RankingMetrics` keeps running sums on the device (float64) so evaluation streams batches of
(B, N) scores and never holds a (samples x items) matrix, on the device or on the host.

CTR (for the CTR models, CAPE 001 Table 2 / BARS): AUC with ties counted one half
(Mann-Whitney U with average ranks), gAUC = per-user AUC weighted by the user's sample
count over users that have both classes, and logloss (binary cross-entropy of probabilities).
"""
from __future__ import annotations

import math
from typing import Iterable

import torch

RANKING = ("hr", "mrr", "ndcg")


def metric_keys(ks: Iterable[int]) -> list[str]:
    """Keys in a fixed order: hr@5, hr@10, ..., mrr@5, ..., ndcg@20."""
    ks = sorted(set(int(k) for k in ks))
    return [f"{m}@{k}" for m in RANKING for k in ks]


def target_ranks(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """1-based rank of each target among items 1..N-1: 1 + #(scores strictly greater).

    scores (B, N) with column 0 the padding item (excluded whatever its value);
    targets (B,) item ids in 1..N-1. Returns (B,) long.
    """
    assert scores.dim() == 2 and targets.shape == scores.shape[:1], \
        f"scores {tuple(scores.shape)} and targets {tuple(targets.shape)} do not match"
    items = scores[:, 1:]                                           # (B, N-1) padding excluded
    target_scores = scores.gather(1, targets.long()[:, None])       # (B, 1)
    # NaN scores rank as -inf: a NaN item never beats the target (NaN > x is False) and a
    # NaN target is beaten by every finite item, never flattered to rank 1.
    target_scores = torch.nan_to_num(target_scores, nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))
    return 1 + (items > target_scores).sum(1)                       # (B,)


def mask_seen(scores: torch.Tensor, seqs: torch.Tensor) -> torch.Tensor:
    """`evaluate.mask_history`: scores (B, N) with every item of each row's input seqs (B, L) set
    to -inf (0 = padding, already -inf), so an item the user has just had is never recommended.
    A target that is itself in the input cannot be hit then: use it on repeat-free data (the
    Amazon leave-one-out files) as full-ranking code that excludes history items does."""
    return scores.scatter(1, seqs.long(), float("-inf"))


def rank_gains(ranks: torch.Tensor, k: int) -> dict[str, torch.Tensor]:
    """Per-sample HR / MRR / NDCG contributions at cut-off k; ranks (B,) -> each (B,) float64."""
    r = ranks.to(torch.float64)                                     # (B,)
    hit = (ranks <= k).to(torch.float64)                            # (B,)
    return {"hr": hit, "mrr": hit / r, "ndcg": hit / torch.log2(r + 1.0)}


class RankingMetrics:
    """Running sums of HR@K, MRR@K, NDCG@K over batches, kept on the scores' device.

        acc = RankingMetrics([5, 10, 20])
        for seqs, targets in batches:
            acc.update(model(seqs), targets)       # (B, N), (B,)
        acc.compute()                              # {"hr@5": ..., "ndcg@20": ...}
    """

    def __init__(self, ks: Iterable[int]):
        self.ks = sorted(set(int(k) for k in ks))
        if not self.ks or self.ks[0] < 1:
            raise ValueError(f"cut-offs must be positive integers, got {self.ks}")
        self.sums: dict[str, torch.Tensor] = {}
        self.count = 0

    def update(self, scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Add one batch: scores (B, N), targets (B,). Returns the batch's ranks (B,)."""
        ranks = target_ranks(scores, targets)                       # (B,)
        self.update_ranks(ranks)
        return ranks

    def update_ranks(self, ranks: torch.Tensor) -> None:
        for k in self.ks:
            for name, gain in rank_gains(ranks, k).items():
                key = f"{name}@{k}"
                total = gain.sum()                                  # () float64, on device
                self.sums[key] = self.sums[key] + total if key in self.sums else total
        self.count += int(ranks.numel())

    def compute(self) -> dict[str, float]:
        """Means over every sample seen, as Python floats, keys in `metric_keys` order."""
        if self.count == 0:
            return {key: 0.0 for key in metric_keys(self.ks)}
        return {key: float(self.sums[key].item()) / self.count for key in metric_keys(self.ks)}


# --------------------------------------------------------------------------- CTR metrics

def _average_ranks(keys: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort by (key, score); return the order and 1-based average ranks of scores within each key.

    keys, scores (S,). Tied scores inside a key share the mean of the ranks they span.
    """
    order = torch.argsort(scores, stable=True)                      # (S,) by score
    order = order[torch.argsort(keys[order], stable=True)]          # (S,) by key, then score
    k, s = keys[order], scores[order]                               # (S,)
    n = k.numel()
    idx = torch.arange(n, device=k.device)                          # (S,)
    new_key = torch.ones(n, dtype=torch.bool, device=k.device)
    new_key[1:] = k[1:] != k[:-1]
    new_tie = new_key.clone()
    new_tie[1:] |= s[1:] != s[:-1]
    key_start = torch.cummax(torch.where(new_key, idx, torch.zeros_like(idx)), 0).values  # (S,)
    tie_id = torch.cumsum(new_tie.long(), 0) - 1                    # (S,) group index
    n_ties = int(tie_id[-1].item()) + 1 if n else 0
    first = torch.zeros(n_ties, dtype=torch.long, device=k.device).scatter_reduce(
        0, tie_id, idx, reduce="amin", include_self=False)          # (T,)
    last = torch.zeros(n_ties, dtype=torch.long, device=k.device).scatter_reduce(
        0, tie_id, idx, reduce="amax", include_self=False)          # (T,)
    avg = (first[tie_id] + last[tie_id]).to(torch.float64) / 2 - key_start + 1  # (S,)
    return order, avg


def _grouped_auc(groups: torch.Tensor, labels: torch.Tensor, scores: torch.Tensor):
    """Per-group AUC (Mann-Whitney). Returns (auc (G,), n_samples (G,), valid (G,) bool)."""
    labels = labels.to(torch.float64)
    if labels.numel() == 0:
        empty = torch.zeros(0, dtype=torch.float64, device=scores.device)
        return empty, empty, empty.bool()
    order, avg = _average_ranks(groups, scores)
    g = groups[order]
    _, inverse = torch.unique(g, sorted=True, return_inverse=True)  # (S,) dense group ids
    n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    y = labels[order]                                               # (S,)
    zeros = torch.zeros(n_groups, dtype=torch.float64, device=scores.device)
    n_pos = zeros.index_add(0, inverse, y)                          # (G,)
    n_all = zeros.index_add(0, inverse, torch.ones_like(y))         # (G,)
    rank_pos = zeros.index_add(0, inverse, avg * y)                 # (G,) sum of positive ranks
    n_neg = n_all - n_pos
    valid = (n_pos > 0) & (n_neg > 0)
    auc = (rank_pos - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg).clamp(min=1)
    return auc, n_all, valid


def auc(labels: torch.Tensor, scores: torch.Tensor) -> float:
    """ROC AUC; labels (S,) in {0, 1}, scores (S,). Tied scores count one half. NaN if one class."""
    groups = torch.zeros_like(labels, dtype=torch.long)
    a, _, valid = _grouped_auc(groups, labels, scores)
    return float(a[0].item()) if valid.numel() and bool(valid[0]) else math.nan


def gauc(users: torch.Tensor, labels: torch.Tensor, scores: torch.Tensor) -> float:
    """Group AUC: per-user AUC weighted by the user's sample count; one-class users skipped."""
    a, n, valid = _grouped_auc(users.long(), labels, scores)
    w = n * valid                                                   # (G,)
    if float(w.sum()) == 0:
        return math.nan
    return float(((a * w).sum() / w.sum()).item())


def logloss(labels: torch.Tensor, probs: torch.Tensor, eps: float = 1e-7) -> float:
    """Mean binary cross-entropy of probabilities clipped to [eps, 1 - eps]."""
    p = probs.to(torch.float64).clamp(eps, 1 - eps)                 # (S,)
    y = labels.to(torch.float64)                                    # (S,)
    return float((-(y * torch.log(p) + (1 - y) * torch.log1p(-p))).mean().item())
