"""Non-neural session baselines: POP, S-POP and Item-KNN (000 Table 2).

Notation used for tensor shapes:
    B  batch, L  padded length (left padding, 0 = pad), N  n_items + 1, K  neighbours
    T  training clicks, P  distinct (session, item) pairs

They are fitted, not trained (ModelSpec.fitted): `fit(items, session)` sees every training
click at once, as whole sessions: `items` (T,) the clicks in order and `session` (T,) a
non-decreasing session index (pipeline.batches.load_sessions rebuilds them from the samples,
so a prefix-augmented session counts once, not once per prefix). The state lives in fixed-size
buffers so a checkpoint restores it. Scores are float64.

POP scores an item by its training clicks, nothing else: items with equal counts tie, and the
ranking metric counts those ties exactly (models.metrics, pipeline/REFERENCE.md §5: the target's rank is
averaged over the tie run), so no arbitrary order (e.g. by item id) decides who is hit. S-POP
orders by the count in the session, then by global clicks (its defined tie-break); items equal on
both still tie. Item-KNN breaks its ties by global popularity and then by item id.
"""
from __future__ import annotations

import torch

from pipeline.errors import ParamsError

from .base import ModelSpec, Recommender, register_model
from .model_config import ItemKNNConfig, PopConfig, model_options

PAIR_CHUNK = 1 << 24      # Item-KNN: (item, item) pairs materialised at once while counting co-occurrences


def item_counts(items: torch.Tensor, n_items: int) -> torch.Tensor:
    """Clicks per item (N,) float64 (repeats count); column 0 stays 0."""
    counts = torch.zeros(n_items + 1, dtype=torch.float64, device=items.device)
    return counts.index_add_(0, items, torch.ones_like(items, dtype=torch.float64))


def popularity_order(counts: torch.Tensor) -> torch.Tensor:
    """A strict score per item in (0, 1]: more clicks first, then a lower id (N,) float64."""
    N = counts.shape[0]
    ids = torch.arange(N, device=counts.device)
    order = torch.argsort(counts * N - ids, descending=True, stable=True)  # (N,) best first (exact in float64)
    score = torch.empty(N, dtype=torch.float64, device=counts.device)
    score[order] = torch.arange(N, 0, -1, dtype=torch.float64, device=counts.device) / N
    return score


def co_occurrence(items: torch.Tensor, session: torch.Tensor, n_items: int) -> tuple:
    """Sessions holding both i and j, for every ordered pair i != j that occurs, and sessions per item.

    Returns (i (Q,), j (Q,), c (Q,) sessions with both, support (N,) sessions with the item); pairs
    sorted by (i, j). Each session contributes its distinct items once (a binary session vector),
    so c is symmetric. Pairs are built per session (k distinct items -> k^2 - k pairs) in chunks
    of about PAIR_CHUNK (a few int64 temporaries of that size, ~1 GB at 2^24), and chunk tables are
    merged only when they outgrow the merged one, so long sequences (ML-1m windows of 201 items)
    stay within bounded memory and near-linear time.
    """
    N = n_items + 1
    key = torch.unique(session * N + items)                             # (P,) distinct (session, item), sorted
    s, it = key // N, key % N                                           # (P,)
    support = torch.bincount(it, minlength=N).double()                  # (N,)
    _, k = torch.unique_consecutive(s, return_counts=True)              # (S',) distinct items per session
    off = torch.cumsum(k, 0) - k                                        # (S',) offset into `it`
    sq = k * k                                                          # (S',) pairs per session (with i = j)
    ends = torch.cumsum(sq, 0)
    empty = torch.empty(0, dtype=torch.long, device=items.device)
    merged, pending = (empty, empty), []          # (pair keys, counts) so far; chunk results not merged yet
    first = 0
    while first < k.numel():
        base = int(ends[first - 1]) if first else 0
        last = max(int(torch.searchsorted(ends, base + PAIR_CHUNK, right=True)), first + 1)  # sessions [first, last)
        kk, oo, nn = k[first:last], off[first:last], sq[first:last]
        rep = torch.repeat_interleave(torch.arange(kk.numel(), device=items.device), nn)  # (M,) session of each pair
        r = torch.arange(int(nn.sum()), device=items.device) - (torch.cumsum(nn, 0) - nn)[rep]  # (M,) index in it
        a, b = oo[rep] + r // kk[rep], oo[rep] + r % kk[rep]            # (M,) positions in `it`
        keep = a != b
        pending.append(torch.unique(it[a[keep]] * N + it[b[keep]], return_counts=True))
        first = last
        if sum(p.numel() for p, _ in pending) > max(merged[0].numel(), PAIR_CHUNK) or first == k.numel():
            merged = _merge_counts([merged, *pending])               # amortised: only when pending outgrows it
            pending = []
    pairs, counts = merged
    return pairs // N, pairs % N, counts, support


def _merge_counts(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum (keys, counts) tables into one, keys sorted and distinct."""
    keys, inv = torch.unique(torch.cat([p for p, _ in parts]), return_inverse=True)
    counts = torch.zeros(keys.numel(), dtype=torch.long, device=keys.device)
    return keys, counts.index_add_(0, inv, torch.cat([c for _, c in parts]))


class _Fitted(Recommender):
    def __init__(self, n_items: int):
        super().__init__()
        self.n_items = n_items
        self.register_buffer("pop", torch.zeros(n_items + 1, dtype=torch.float64))  # (N,) tie-break scores

    def fit(self, items: torch.Tensor, session: torch.Tensor) -> None:
        self.pop.copy_(popularity_order(item_counts(items, self.n_items)))

    def _finish(self, scores: torch.Tensor) -> torch.Tensor:
        scores[:, 0] = float("-inf")
        return scores


class Pop(_Fitted):
    """POP: the same ranking for every session, by training click count (`pop` holds the counts;
    equal counts tie)."""

    def fit(self, items: torch.Tensor, session: torch.Tensor) -> None:
        self.pop.copy_(item_counts(items, self.n_items))

    def forward(self, seqs: torch.Tensor) -> torch.Tensor:
        return self._finish(self.pop.expand(seqs.shape[0], -1).clone())  # (B, N)


class SessionPop(Pop):
    """S-POP: items of the current session by their count in it, then by global click count.

    score = count_in_session * (max_clicks + 1) + clicks: integers, exact in float64 (far below
    2^53), so global clicks only break ties of the session count and equal pairs tie."""

    def forward(self, seqs: torch.Tensor) -> torch.Tensor:
        B = seqs.shape[0]
        in_session = torch.zeros(B, self.n_items + 1, dtype=torch.float64, device=seqs.device)
        in_session.scatter_add_(1, seqs, (seqs != 0).double())          # (B, N)
        scale = self.pop.max() + 1                                      # () > every click count
        return self._finish(in_session * scale + self.pop[None, :])     # (B, N)


class ItemKNN(_Fitted):
    """Item-KNN (Hidasi et al. 2016; Ludewig & Jannach 2018): the K items most similar to the
    session's last item, similarity over binary session vectors:

        sim_ij = |S_i & S_j| / ((|S_i| + lambda)^a (|S_j| + lambda)^(1-a))
                                                        (i != j; a = 0.5, lambda = 0: cosine)

    S_i = the training sessions holding item i. Items outside the K neighbours score 0.
    lambda (`shrink`) is the regularisation 000 §5.1.3 mentions ("to avoid the rare high
    similarities for unvisited items"), in the form of session-rec's ItemKNN (algorithms/knn/
    iknn.py, from GRU4Rec's baselines, whose default is 20; seqpe's default is 0, plain cosine, and
    `--preset paper` sets 20): it is added to each support inside the
    normaliser, so a pair of items seen once together no longer scores 1. (The often quoted
    c_ij / (sqrt(n_i n_j) + lambda) is another shrinkage; this is the one the papers' code runs.)
    Unlike session-rec, supports count sessions, not clicks (binary session vectors).
    """

    def __init__(self, n_items: int, cfg: ItemKNNConfig):
        super().__init__(n_items)
        self.cfg = cfg
        k = cfg.neighbours
        self.register_buffer("nbr", torch.zeros(n_items + 1, k, dtype=torch.long))       # (N, K)
        self.register_buffer("sim", torch.zeros(n_items + 1, k, dtype=torch.float64))    # (N, K)

    def fit(self, items: torch.Tensor, session: torch.Tensor) -> None:
        super().fit(items, session)
        N, K = self.n_items + 1, self.cfg.neighbours
        i, j, c, support = co_occurrence(items, session, self.n_items)  # (Q,) each, (N,)
        a, lam = self.cfg.alpha, self.cfg.shrink
        sim = c.double() / ((support[i] + lam).pow(a) * (support[j] + lam).pow(1 - a))  # (Q,)
        # keep the K best per row: sort by similarity (desc; popularity breaks ties), then stably by row
        by_sim = torch.argsort(sim + 1e-12 * self.pop[j], descending=True, stable=True)
        i, j, sim = i[by_sim], j[by_sim], sim[by_sim]
        by_row = torch.argsort(i, stable=True)
        i, j, sim = i[by_row], j[by_row], sim[by_row]                    # (Q,) rows grouped, best first
        start = torch.searchsorted(i, torch.arange(N, device=i.device))  # (N,)
        slot = torch.arange(i.numel(), device=i.device) - start[i]       # (Q,) rank within the row
        keep = slot < K
        self.nbr.zero_()
        self.sim.zero_()
        self.nbr[i[keep], slot[keep]] = j[keep]
        self.sim[i[keep], slot[keep]] = sim[keep]

    def forward(self, seqs: torch.Tensor) -> torch.Tensor:
        last = seqs[:, -1]                                              # (B,) left padding: last column
        scores = torch.zeros(seqs.shape[0], self.n_items + 1, dtype=torch.float64, device=seqs.device)
        scores.scatter_add_(1, self.nbr[last], self.sim[last])          # (B, N) slot 0 of unused entries: item 0
        # a similarity is >= 1 / (sessions of the commonest item + shrink) >> 1e-9: popularity (<= 1e-9)
        # only breaks ties
        return self._finish(scores + 1e-9 * self.pop[None, :])


def _build_pop(cls):
    def build(n_items: int, max_len: int, train, options=None, encoding=None) -> Recommender:
        model_options(PopConfig, cls.__name__.lower(), options)
        return cls(n_items)
    return build


def build_itemknn(n_items: int, max_len: int, train, options=None, encoding=None) -> Recommender:
    cfg = model_options(ItemKNNConfig, "itemknn", options)
    if cfg.neighbours < 1 or cfg.shrink < 0 or not 0.0 <= cfg.alpha <= 1.0:
        raise ParamsError(f"models.itemknn needs neighbours >= 1, shrink >= 0 and alpha in [0, 1], got "
                          f"{cfg.neighbours}, {cfg.shrink}, {cfg.alpha}", "use e.g. neighbours 100, shrink 20, alpha 0.5")
    return ItemKNN(n_items, cfg)


# what a fitted baseline never reads: it counts the train sessions once, with no network, optimiser or epochs
# nor batches or compiles training rows (train.bucket, compile: walk 32c)
# nor picks a best epoch (select_metric; walk 43d #3: accepted with --set, recorded, and a new fingerprint for
# byte-identical test samples). POP computes in no precision either. POP's and Item-KNN's train.max_len and
# trim_padding change nothing as well (POP reads no session, Item-KNN only its last item), but the loader windows
# the samples by max_len, so they stay read (and fingerprinted) for now.
FITTED_IGNORES = ("epochs", "batch_size", "lr", "weight_decay", "dim", "layers", "heads", "dropout", "patience",
                  "loss", "ce_impl", "negatives", "lr_schedule", "lr_step", "lr_gamma", "bucket", "compile",
                  "select_metric")

register_model(ModelSpec("pop", _build_pop(Pop), "POP: global popularity", "000 Table 2", uses_encoding=False,
                         fitted=True, ignores=FITTED_IGNORES + ("precision",)),
               options=PopConfig)
register_model(ModelSpec("spop", _build_pop(SessionPop), "S-POP: session popularity, then global",
                         "000 Table 2", uses_encoding=False, fitted=True, ignores=FITTED_IGNORES), options=PopConfig)
# 000 Table 2's Item-KNN "[34] ... Regularization is also introduced": the GRU4Rec / session-rec
# implementation and its defaults (100 neighbours, lambda 20, alpha 0.5 = cosine).
register_model(ModelSpec("itemknn", build_itemknn, "Item-KNN: session co-occurrence neighbours of the last item",
                         "000 Table 2", uses_encoding=False, fitted=True, ignores=FITTED_IGNORES,
                         presets={"paper": {"models": {"itemknn": {"neighbours": 100, "shrink": 20.0, "alpha": 0.5}}}}), options=ItemKNNConfig)
