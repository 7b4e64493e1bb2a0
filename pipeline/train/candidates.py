"""Sampled-candidate evaluation (`evaluate.candidates: N`), the protocol of CARCA and of the PE study 004;
never the default (0 = full ranking over all items, pipeline/REFERENCE.md §5).

Each valid / test row ranks its target among N negatives drawn for it: CARCA's code draws 100, 004's port
max_len - 1, both uniformly and outside the user's train items (with replacement, the target not excluded).
Here, per row, N distinct items are drawn WITHOUT replacement from the eligible ones: never the padding
item or the target, and with `evaluate.mask_history` never an item of the row's stored prefix either
(as mask_history is for full ranking; the whole prefix as the samples folder keeps it, not the model's
train.max_len window, so the draw is the same for every model). That is close to CARCA's / 004's
exclusion, not equal: theirs is the user's train items, so a test row's valid item can be drawn there and
not here (walk 41e #9; one item of the catalogue).
`evaluate.candidate_sampling`: uniform (CARCA, 004) or popularity (probability proportional to the
item's count in the train split; never-seen items are never drawn). With N >= the eligible count every
eligible item is a candidate, so the metrics equal full ranking; with mask_history only where the target is
not an input item (full ranking keeps the input items, tied below every other, and ties a target among them
with them, where here they are left out and the target ranks alone below every candidate: the report labels
the two apart). A row with fewer eligible items than N keeps 0 (no candidate) in the remaining slots.

The draw is the Gumbel-top-k / Efraimidis-Spirakis key trick (Kool et al. 2019): keys u^(1/w) (uniform:
u), u ~ U(0, 1) i.i.d., and the N largest keys of the eligible items; it is a weighted sample without
replacement and vectorised over rows. Keys come from one CPU generator seeded with CANDIDATE_SEED, rows
in file order in blocks of ROWS_PER_DRAW: the candidates depend on the split's samples only, never on
the model, the run's seed, the batch size or the device, so every configuration ranks the same
candidates and comparisons stay paired.

Scoring: the target and its candidates are scored (a model's `score_items(seqs, items)` when it has
one, e.g. CARCA; else the full score row, gathered) and the target's (greater, ties) counts come from
models.metrics.greater_and_ties on that candidate set, so the exact tie rule is kept.

Where the released evaluations differ (walk 41e #7-#9): CARCA's and 004's code rank by
argsort().argsort(), which puts a target tied with candidates first (004 ranks float32 sigmoids, equal
at 1.0 from logits of about 17 up), where the tie rule here gives it its expected rank; they evaluate
10,000 sampled users (004 with replacement, never the last user), here every user; and they cast the
evaluation rows' context to integers (CARCA.py's int32 profile context, 004's also the candidates'), so
features in [0, 1) such as month / 12 read as 0, where here context stays as the data has it. Without
ties, on the same candidates and context, the metrics are the same (checked to 1e-17).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

CANDIDATE_SEED = 20220404      # fixed: the same candidates for every model and seed (paired comparisons)
ROWS_PER_DRAW = 64             # rows whose keys are drawn at once (fixed: the draw never depends on batching)
SAMPLINGS = ("uniform", "popularity")


def sample_candidates(seqs: np.ndarray, targets: np.ndarray, n_items: int, n: int, *, exclude_history: bool,
                      weights: Optional[np.ndarray] = None, seed: int = CANDIDATE_SEED) -> np.ndarray:
    """(S, n) int32 negatives per row (0 = no candidate), drawn as the module docstring says.

    seqs (S, L) the rows' inputs (0 = padding), targets (S,) item ids; weights (n_items + 1,) >= 0 for
    popularity sampling (None: uniform)."""
    import torch
    S = targets.shape[0]
    out = np.zeros((S, n), dtype=np.int32)
    g = torch.Generator().manual_seed(seed)
    w = None if weights is None else torch.from_numpy(np.asarray(weights, dtype=np.float64))  # (N,)
    k = min(n, n_items)
    for a in range(0, S, ROWS_PER_DRAW):
        b = min(S, a + ROWS_PER_DRAW)
        u = torch.rand(b - a, n_items + 1, generator=g, dtype=torch.float64)          # (R, N)
        keys = u if w is None else torch.log(u) / w                                     # (R, N) log u^(1/w)
        keys[:, 0] = -np.inf                                                            # the padding item
        keys.scatter_(1, torch.from_numpy(targets[a:b].astype(np.int64))[:, None], -np.inf)
        if exclude_history:
            keys.scatter_(1, torch.from_numpy(np.asarray(seqs[a:b]).astype(np.int64)), -np.inf)
        top = keys.topk(k, dim=1)                                                       # (R, k)
        picked = torch.where(torch.isfinite(top.values), top.indices, 0)
        out[a:b, :k] = picked.numpy()
    return out


def counts(net, seqs, targets, cands, *, mask_history: bool, context=None, history=None):
    """(greater, ties) of each row's target among its candidates (B, M) (0 = none); scores in fp32 (or float64).
    `history` (B, H): the rows' whole prefixes, where mask_history looks for the target (default `seqs`)."""
    import torch
    from models.metrics import greater_and_ties, ranked_precision
    kw = {} if context is None else {"context": context}
    items = torch.cat([targets[:, None], cands], 1)                                  # (B, 1 + M)
    if hasattr(net, "score_items"):
        s = ranked_precision(net.score_items(seqs, items, **kw))                     # (B, 1 + M)
    else:
        s = ranked_precision(net(seqs, **kw)).gather(1, items)                       # (B, 1 + M)
    low = torch.finfo(s.dtype).min
    if mask_history:                                                                 # as models.metrics.mask_seen
        seen = ((seqs if history is None else history) == targets[:, None]).any(1)  # (B,)
        s[:, 0] = torch.where(seen, torch.full_like(s[:, 0], low), s[:, 0])
    valid = cands != 0                                                               # (B, M)
    s = torch.cat([s[:, :1], torch.where(valid, s[:, 1:], torch.full_like(s[:, 1:], low))], 1)
    padded = torch.cat([torch.zeros_like(s[:, :1]), s], 1)                           # (B, 2 + M): column 0 = pad
    g, t = greater_and_ties(padded, torch.ones_like(targets))                        # the target is column 1
    t = t - ((~valid) & (s[:, 1:] == s[:, :1])).sum(1)                               # empty slots are no items
    return g, t
