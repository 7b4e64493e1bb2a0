"""Ranking and CTR metrics, batched on the device and exact.

Notation used for tensor shapes:
    B  batch size
    N  n_items + 1 (column 0 is the padding item and is never ranked)
    C  number of cut-offs K
    S  number of scored samples (CTR)
    R  runs of tied scores (CTR), G  groups (users)

Ranking (pipeline/REFERENCE.md §5, full ranking over all items). For one case
    g = #{items i >= 1 : score_i > score_target}        strictly above the target
    t = #{items i >= 1, i != target : score_i = score_target}   tied with it
Ties are broken uniformly at random *in expectation*, computed exactly: the target's rank is
uniform on r = g+1 .. g+t+1, so
    HR@K   = clamp((K - g) / (t + 1), 0, 1)               (= Recall@K with a single target)
    MRR@K  = mean over those r of 1/r           (0 for r > K) = (H[min(g+t+1, K)] - H[min(g, K)]) / (t+1)
    NDCG@K = mean over those r of 1/log2(r+1)   (0 for r > K) = (D[min(g+t+1, K)] - D[min(g, K)]) / (t+1)
with the prefix sums H[n] = sum_{r<=n} 1/r and D[n] = sum_{r<=n} 1/log2(r+1) tabulated over
0..max K (a tie run may reach past K, up to r = n_items: the min() cuts it off). With t = 0 the
per-sample gains are computed as 1/r and 1/log2(r+1) directly, so they equal the usual
rank = 1 + g values bit for bit. A constant-score model gets HR@K = K / n_items, never 1.
A NaN or infinite item score is an error (`NonFiniteScores`: the model diverged), never a rank.
Values are in [0, 1]; tables show them x100 the way the papers do.

`RankingMetrics` keeps running float64 sums on the device, vectorised over every cut-off at
once, so evaluation streams batches of (B, N) scores and never holds a (samples x items)
matrix; `update` also returns each sample's (g, t), the input of the per-sample significance
tests (pipeline.significance).

CTR (CAPE 001 Table 2 / BARS, pipeline/REFERENCE.md §4): `CTRMetrics` keeps the batches' logits,
labels and users (tensors only) and computes
    AUC     Mann-Whitney U / (n_pos n_neg), a tied positive/negative pair counting one half
    gAUC    per-user AUC weighted by the user's sample count, users with one class skipped
    logloss mean of -log sigmoid(+-logit) in float64 (softplus written with log1p(exp(-|z|)):
            no clipping, no saturation at large |logit|)
U is counted, not derived from rank sums: after one sort by (user, logit), each run of tied
logits adds pos_run * (2 neg_below + neg_run) to 2U (neg_below = the user's negatives in lower
runs), all in int64 with segment sums over contiguous runs, so AUC is exact up to the final
division. Ranking on logits rather than sigmoid(logits) keeps float32 saturation from inventing
ties. Written here rather than taken from sklearn.metrics: it stays on the device, serves 10k
users' AUCs from one sort, and counts exactly. Measured on a shared 2-core CPU (torch 2.13,
2 threads), 13.7M random rows (KuaiVideo's size), 10,000 users, float32 logits: `compute()`
takes 5.0-7.6 s and peaks at 1.67 GB RSS, 1.24 GB above the 0.43 GB held before it (the kept
inputs + torch).
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Iterable, Optional

import torch

from pipeline.errors import NonFiniteScores

RANKING = ("hr", "mrr", "ndcg")

DIVERGED_FIX = ("the model diverged: lower train.lr, check the inputs for NaN, or pick an earlier checkpoint; "
                "NaN/inf scores have no rank, so no metric is reported for them")


def metric_keys(ks: Iterable[int]) -> list[str]:
    """Keys in a fixed order: hr@5, hr@10, ..., mrr@5, ..., ndcg@20."""
    ks = sorted(set(int(k) for k in ks))
    return [f"{m}@{k}" for m in RANKING for k in ks]


def ranked_precision(scores: torch.Tensor) -> torch.Tensor:
    """Scores as they are ranked: fp32, or float64 where the model scores in it (Item-KNN's and S-POP's sums).
    Cast to fp32, Item-KNN's scores on `sample` changed the rank of 132 of 1,758 test targets and tied 317 that
    its popularity tie-break tells apart (walk 44c #1): the metrics were not the model's own."""
    return scores if scores.dtype == torch.float64 else scores.float()


def greater_and_ties(scores: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per case: g = items (1..N-1) scored strictly above the target, t = OTHER items tied with it.

    scores (B, N) with column 0 the padding item (excluded whatever its value); targets (B,) item
    ids in 1..N-1. Returns (g (B,), t (B,)) long. Raises NonFiniteScores on a NaN/inf item score.
    """
    assert scores.dim() == 2 and targets.shape == scores.shape[:1], \
        f"scores {tuple(scores.shape)} and targets {tuple(targets.shape)} do not match"
    items = scores[:, 1:]                                           # (B, N-1) padding excluded
    targets = targets.long()
    # a NaN/inf item makes its row's sum non-finite: a cheap pass first, the exact test only then
    # (a finite row can overflow the sum; float16 rows are summed in float32)
    row_sums = items.sum(1, dtype=torch.promote_types(items.dtype, torch.float32))  # (B,)
    in_range = (targets >= 1) & (targets < scores.shape[1])         # (B,)
    if not bool((torch.isfinite(row_sums) & in_range).all()):       # one host sync per batch
        if not bool(in_range.all()):                   # a data check, so not an assert (`python -O` drops those)
            raise ValueError(f"targets must be item ids in 1..{scores.shape[1] - 1}")
        bad = int((~torch.isfinite(items).all(1)).sum())
        if bad:
            raise NonFiniteScores(f"scores are not finite (NaN or +-inf in {bad} of {scores.shape[0]} rows of a "
                                  "batch)", DIVERGED_FIX)
    target_scores = scores.gather(1, targets[:, None])              # (B, 1)
    greater = (items > target_scores).sum(1)                        # (B,)
    ties = (items == target_scores).sum(1) - 1                      # (B,) the target itself left out
    return greater, ties


def mask_seen(scores: torch.Tensor, seqs: torch.Tensor) -> torch.Tensor:
    """`evaluate.mask_history`: scores (B, N) with every item of each row's input seqs (B, L) set
    to the lowest finite value of the dtype, below every real score, so an item the user has just
    had is never recommended. Finite on purpose: an infinite score is an error (a diverged model).
    A target that is itself in the input ranks behind every unseen item, tied with the other
    masked ones (tie rule): use it on repeat-free data (the Amazon leave-one-out files) as
    full-ranking code that excludes history items does."""
    return scores.scatter(1, seqs.long(), torch.finfo(scores.dtype).min)


@lru_cache(maxsize=None)
def _gain_tables(k_max: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """H[n] = sum_{r=1..n} 1/r and D[n] = sum_{r=1..n} 1/log2(r+1) for n = 0..k_max; each (k_max+1,) float64."""
    r = torch.arange(1, k_max + 1, dtype=torch.float64)
    zero = torch.zeros(1, dtype=torch.float64)
    H = torch.cat([zero, torch.cumsum(1.0 / r, 0)])
    D = torch.cat([zero, torch.cumsum(1.0 / torch.log2(r + 1.0), 0)])
    return H.to(device), D.to(device)


def tie_gains(greater: torch.Tensor, ties: torch.Tensor, ks: torch.Tensor) -> torch.Tensor:
    """Expected HR / MRR / NDCG at each cut-off under the tie rule: (3, B, C) float64.

    greater, ties (B,) long; ks (C,) long on the same device.
    """
    H, D = _gain_tables(int(ks.max()), str(ks.device))
    g, t = greater[:, None], ties[:, None]                          # (B, 1)
    lo = torch.minimum(g, ks)                                       # (B, C) ranks <= K above the tie run
    hi = torch.minimum(g + t + 1, ks)                               # (B, C) ... up to its end
    n = (t + 1).to(torch.float64)                                   # (B, 1)
    hr = (hi - lo).to(torch.float64) / n                            # (B, C) = clamp((K - g)/(t+1), 0, 1)
    mrr = (H[hi] - H[lo]) / n                                       # (B, C)
    ndcg = (D[hi] - D[lo]) / n                                      # (B, C)
    r = (g + 1).to(torch.float64)                                   # (B, 1) the rank when t = 0
    hit = (g < ks).to(torch.float64)                                # (B, C)
    single = t == 0                                                 # (B, 1) exact usual definitions
    mrr = torch.where(single, hit / r, mrr)
    ndcg = torch.where(single, hit / torch.log2(r + 1.0), ndcg)
    return torch.stack([hr, mrr, ndcg])                             # (3, B, C)


class RankingMetrics:
    """Running sums of HR@K, MRR@K, NDCG@K (tie rule) over batches, kept on the scores' device.

        acc = RankingMetrics([5, 10, 20])
        for seqs, targets in batches:
            g, t = acc.update(model(seqs), targets)   # (B, N), (B,) -> per-sample (B,), (B,)
        acc.compute()                                 # {"hr@5": ..., "ndcg@20": ...}
    """

    def __init__(self, ks: Iterable[int]):
        self.ks = sorted(set(int(k) for k in ks))
        if not self.ks or self.ks[0] < 1:
            raise ValueError(f"cut-offs must be positive integers, got {self.ks}")
        self.sums: Optional[torch.Tensor] = None                    # (3, C) float64 on the device
        self.count = 0
        self._ks: dict[torch.device, torch.Tensor] = {}              # (C,) per device, made once

    def update(self, scores: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add one batch: scores (B, N), targets (B,). Returns the batch's (greater (B,), ties (B,))."""
        greater, ties = greater_and_ties(scores, targets)           # (B,), (B,)
        self.update_counts(greater, ties)
        return greater, ties

    def update_counts(self, greater: torch.Tensor, ties: torch.Tensor) -> None:
        """Add per-sample (g, t) computed elsewhere (e.g. gathered from other processes)."""
        ks = self._ks.get(greater.device)
        if ks is None:
            ks = self._ks[greater.device] = torch.tensor(self.ks, dtype=torch.long, device=greater.device)  # (C,)
        total = tie_gains(greater.long(), ties.long(), ks).sum(1)   # (3, C)
        self.sums = total if self.sums is None else self.sums + total
        self.count += int(greater.numel())

    def update_ranks(self, ranks: torch.Tensor) -> None:
        """Add 1-based ranks of distinct scores (t = 0)."""
        self.update_counts(ranks.long() - 1, torch.zeros_like(ranks, dtype=torch.long))

    def compute(self) -> dict[str, float]:
        """Means over every sample seen, as Python floats, keys in `metric_keys` order."""
        if self.count == 0:                  # a 0.0 would read as a metric (walk 40c #5)
            raise ValueError("no samples were scored: ranking metrics are undefined")
        means = (self.sums / self.count).cpu().tolist()             # [[hr@k...], [mrr@k...], [ndcg@k...]]
        return {f"{m}@{k}": means[i][j] for i, m in enumerate(RANKING) for j, k in enumerate(self.ks)}


def ranking_from_counts(greater: torch.Tensor, ties: torch.Tensor, ks: Iterable[int]) -> dict[str, float]:
    """Exact HR / MRR / NDCG means from every sample's (g, t), independent of how the samples were
    batched or split across processes: per-sample gains (tie rule) summed with math.fsum, which is
    correctly rounded whatever the order, so one process and N processes give the same bits."""
    ks = sorted(set(int(k) for k in ks))
    if not ks or ks[0] < 1:
        raise ValueError(f"cut-offs must be positive integers, got {ks}")
    if greater.numel() == 0:                 # a 0.0 would read as a metric (walk 40c #5)
        raise ValueError("no samples were scored: ranking metrics are undefined")
    g, t = greater.to("cpu", torch.long), ties.to("cpu", torch.long)
    if bool((g < 0).any()) or bool((t < 0).any()) or g.shape != t.shape:
        raise ValueError("greater and ties must be non-negative counts of one shape")
    gains = tie_gains(g, t, torch.tensor(ks, dtype=torch.long))     # (3, S, C)
    n = g.numel()
    return {f"{m}@{k}": math.fsum(gains[i, :, j].tolist()) / n for i, m in enumerate(RANKING) for j, k in enumerate(ks)}


# --------------------------------------------------------------------------- CTR metrics

def _segment_sums(x: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """Sums of x over contiguous segments ending (inclusive) at `ends` (sorted, last = len - 1)."""
    c = torch.cumsum(x, 0)[ends]
    return c - torch.cat([c.new_zeros(1), c[:-1]])


def _u_sorted(s: torch.Tensor, y: torch.Tensor, g: Optional[torch.Tensor] = None):
    """Mann-Whitney counts of rows already sorted by (group, score): s (S,) scores, y (S,) labels,
    g (S,) groups or None (one group). Returns (u2, n_pos, n_neg), each (G,) int64, where
    u2 = 2U: each positive/negative pair with the positive above counts 2, a tied pair 1."""
    change = s[1:] != s[:-1]                                        # (S-1,) a new run of tied scores
    if g is not None:
        change |= g[1:] != g[:-1]
    last = torch.full((1,), s.numel() - 1, dtype=torch.long, device=s.device)
    ends = torch.cat([torch.nonzero(change).flatten(), last])       # (R,) last row of each run
    pos_run = _segment_sums(y.long(), ends)                         # (R,)
    neg_run = torch.diff(ends, prepend=ends.new_full((1,), -1)) - pos_run   # (R,) run length - positives
    neg_below = torch.cumsum(neg_run, 0) - neg_run                  # (R,) negatives in lower runs (all groups)
    if g is None:
        group_ends = ends.new_full((1,), ends.numel() - 1)          # (1,)
    else:
        gr = g[ends]                                                # (R,) group of each run, sorted
        group_ends = torch.cat([torch.nonzero(gr[1:] != gr[:-1]).flatten(), ends.new_full((1,), ends.numel() - 1)])
        neg_g = _segment_sums(neg_run, group_ends)                  # (G,)
        run_group = torch.searchsorted(group_ends, torch.arange(ends.numel(), device=s.device))  # (R,)
        neg_below = neg_below - (torch.cumsum(neg_g, 0) - neg_g)[run_group]   # (R,) within the run's group
    u2_run = pos_run * (2 * neg_below + neg_run)                    # (R,)
    return (_segment_sums(u2_run, group_ends), _segment_sums(pos_run, group_ends),
            _segment_sums(neg_run, group_ends))


def _sorted_by_score(labels: torch.Tensor, scores: torch.Tensor, groups: Optional[torch.Tensor] = None):
    """One sort by score (rows of equal scores in any order: they form one run either way)."""
    s, order = torch.sort(scores)                                   # (S,), (S,)
    return s, labels[order], None if groups is None else groups[order]


def _by_group(s: torch.Tensor, y: torch.Tensor, g: torch.Tensor):
    """Rows sorted by score -> sorted by (group, score): a stable sort on the group."""
    g, order = torch.sort(g, stable=True)                           # (S,), (S,)
    return s[order], y[order], g


def _auc_from(u2: torch.Tensor, n_pos: torch.Tensor, n_neg: torch.Tensor) -> float:
    p, n = int(n_pos[0]), int(n_neg[0])
    return int(u2[0]) / (2 * p * n) if p and n else math.nan


def _gauc_from(u2: torch.Tensor, n_pos: torch.Tensor, n_neg: torch.Tensor) -> float:
    valid = (n_pos > 0) & (n_neg > 0)                               # (G,) one-class users skipped
    if not bool(valid.any()):
        return math.nan
    per_user = u2[valid].double() / (2 * n_pos[valid] * n_neg[valid]).double()   # (G',)
    w = (n_pos + n_neg)[valid].double()                             # (G',) the user's sample count
    return float(((per_user * w).sum() / w.sum()).item())


def mann_whitney(labels: torch.Tensor, scores: torch.Tensor, groups: Optional[torch.Tensor] = None):
    """Per group: (u2 (G,), n_pos (G,), n_neg (G,)) int64, u2 = 2 x Mann-Whitney U of the positives.
    labels (S,) in {0, 1}, scores (S,), groups (S,) ids or None (one group); groups in id order."""
    s, y, g = _sorted_by_score(labels, scores, groups)
    return _u_sorted(s, y) if g is None else _u_sorted(*_by_group(s, y, g))


def auc(labels: torch.Tensor, scores: torch.Tensor) -> float:
    """ROC AUC; labels (S,) in {0, 1}, scores (S,). Tied scores count one half. NaN if one class."""
    _check_logits(scores)
    return _auc_from(*mann_whitney(labels, scores)) if labels.numel() else math.nan


def gauc(users: torch.Tensor, labels: torch.Tensor, scores: torch.Tensor) -> float:
    """Group AUC: per-user AUC weighted by the user's sample count; one-class users skipped."""
    _check_logits(scores)
    return _gauc_from(*mann_whitney(labels, scores, users)) if labels.numel() else math.nan


def logloss_from_logits(labels: torch.Tensor, logits: torch.Tensor) -> float:
    """Mean binary cross-entropy of sigmoid(logits), from the logits in float64:
    -log sigmoid(z) = max(-z, 0) + log1p(exp(-|z|)) with z = +logit (label 1) or -logit (label 0)."""
    _check_logits(logits)
    if labels.numel() == 0:
        return math.nan
    z = logits.to(torch.float64) * (2 * labels.to(torch.float64) - 1)   # (S,) signed margin
    loss = torch.clamp(-z, min=0) + torch.log1p(torch.exp(-z.abs()))     # (S,)
    return float(loss.mean().item())


def _check_logits(logits: torch.Tensor) -> None:
    """Raise NonFiniteScores when a logit is NaN or +-inf (one host sync)."""
    finite = torch.isfinite(logits)
    if not bool(finite.all()):
        raise NonFiniteScores(f"logits are not finite (NaN or +-inf in {int((~finite).sum())} of "
                              f"{logits.numel()} samples of a batch)", DIVERGED_FIX)


class CTRMetrics:
    """AUC, gAUC and logloss over batches; inputs kept as tensors on their device.

        acc = CTRMetrics()
        for batch in batches:
            acc.update(model(batch).logits, batch.label, batch.group)   # (B,) each
        acc.compute()                                                   # {"auc", "gauc", "logloss"}
    """

    def __init__(self):
        self.logits: list[torch.Tensor] = []
        self.labels: list[torch.Tensor] = []
        self.groups: list[torch.Tensor] = []

    def update(self, logits: torch.Tensor, labels: torch.Tensor, groups: torch.Tensor) -> None:
        """Add one batch: logits (B,) float, labels (B,) in {0, 1}, groups (B,) user ids."""
        assert logits.dim() == 1 and labels.shape == logits.shape == groups.shape, \
            f"logits {tuple(logits.shape)}, labels {tuple(labels.shape)}, groups {tuple(groups.shape)} must be (B,)"
        _check_logits(logits)
        if not bool(((labels == 0) | (labels == 1)).all()):     # before the int8 cast: 257 became 1, 0.5 became 0
            raise ValueError("CTR labels must be 0 or 1")       # (walk 40c #4)
        self.logits.append(logits.detach())
        self.labels.append(labels.detach().to(torch.int8))
        self.groups.append(groups.detach().long())

    @property
    def count(self) -> int:
        return sum(x.numel() for x in self.logits)

    def compute(self) -> dict[str, float]:
        """{"auc", "gauc", "logloss"} over every sample seen (NaN where undefined); one score sort
        serves AUC and gAUC."""
        if not self.count:                   # no batch, or only empty ones (an IndexError; walk 40c #6)
            return {"auc": math.nan, "gauc": math.nan, "logloss": math.nan}
        logits = torch.cat(self.logits)                             # (S,)
        labels = torch.cat(self.labels)                             # (S,) int8
        if not bool(((labels == 0) | (labels == 1)).all()):
            raise ValueError("CTR labels must be 0 or 1")
        loss = logloss_from_logits(labels, logits)
        s, y, g = _sorted_by_score(labels, logits, torch.cat(self.groups))   # (S,) each
        del logits, labels
        out = {"auc": _auc_from(*_u_sorted(s, y))}
        out["gauc"] = _gauc_from(*_u_sorted(*_by_group(s, y, g)))
        out["logloss"] = loss
        return out
