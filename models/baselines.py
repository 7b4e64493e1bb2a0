"""Non-neural session baselines: POP, S-POP and Item-KNN (000 Table 2).

Notation used for tensor shapes:
    B  batch, L  padded length (left padding, 0 = pad), N  n_items + 1, K  neighbours
    S  training samples

They are fitted, not trained (`needs_fit = True`): `fit(seqs, targets)` sees every
training sample at once, and the state lives in fixed-size buffers so a checkpoint
restores it. Scores are float64 and strictly ordered: every model breaks its ties by
global popularity and then by item id (a lower id first), because the ranking metric
counts only strictly greater scores and ties would otherwise flatter the target.
"""
from __future__ import annotations

import torch

from .base import ModelSpec, Recommender, register_model
from .model_config import ItemKNNConfig, PopConfig, model_options


def item_counts(seqs: torch.Tensor, targets: torch.Tensor, n_items: int) -> torch.Tensor:
    """Clicks per item over prefixes and targets (N,) float64; column 0 stays 0."""
    ids = torch.cat([seqs[seqs != 0], targets])                         # (total,)
    counts = torch.zeros(n_items + 1, dtype=torch.float64, device=seqs.device)
    return counts.index_add_(0, ids, torch.ones_like(ids, dtype=torch.float64))


def popularity_order(counts: torch.Tensor) -> torch.Tensor:
    """A strict score per item in (0, 1]: more clicks first, then a lower id (N,) float64."""
    N = counts.shape[0]
    ids = torch.arange(N, device=counts.device)
    order = torch.argsort(counts * N - ids, descending=True, stable=True)  # (N,) best first (exact in float64)
    score = torch.empty(N, dtype=torch.float64, device=counts.device)
    score[order] = torch.arange(N, 0, -1, dtype=torch.float64, device=counts.device) / N
    return score


class _Fitted(Recommender):
    needs_fit = True

    def __init__(self, n_items: int):
        super().__init__()
        self.n_items = n_items
        self.register_buffer("pop", torch.zeros(n_items + 1, dtype=torch.float64))  # (N,) tie-break scores

    def fit(self, seqs: torch.Tensor, targets: torch.Tensor) -> None:
        self.pop.copy_(popularity_order(item_counts(seqs, targets, self.n_items)))

    def _finish(self, scores: torch.Tensor) -> torch.Tensor:
        scores[:, 0] = float("-inf")
        return scores


class Pop(_Fitted):
    """POP: the same ranking for every session, by training click count."""

    def forward(self, seqs: torch.Tensor) -> torch.Tensor:
        return self._finish(self.pop.expand(seqs.shape[0], -1).clone())  # (B, N)


class SessionPop(_Fitted):
    """S-POP: items of the current session by their count in it, then by global popularity."""

    def forward(self, seqs: torch.Tensor) -> torch.Tensor:
        B = seqs.shape[0]
        in_session = torch.zeros(B, self.n_items + 1, dtype=torch.float64, device=seqs.device)
        in_session.scatter_add_(1, seqs, (seqs != 0).double())          # (B, N)
        return self._finish(in_session + self.pop[None, :])             # pop in (0, 1]: only breaks ties


class ItemKNN(_Fitted):
    """Item-KNN: the K items most similar to the session's last item.

    c_ij = # training samples where item i is in the prefix and j is the target (with
    prefix augmentation: # sessions where i precedes j); sim_ij = c_ij / (n_i^a n_j^(1-a)),
    n = click counts (a = 0.5: cosine). Items outside the K neighbours score 0.
    """

    def __init__(self, n_items: int, cfg: ItemKNNConfig):
        super().__init__(n_items)
        self.cfg = cfg
        k = cfg.neighbours
        self.register_buffer("nbr", torch.zeros(n_items + 1, k, dtype=torch.long))       # (N, K)
        self.register_buffer("sim", torch.zeros(n_items + 1, k, dtype=torch.float64))    # (N, K)

    def fit(self, seqs: torch.Tensor, targets: torch.Tensor) -> None:
        super().fit(seqs, targets)
        N, K = self.n_items + 1, self.cfg.neighbours
        counts = item_counts(seqs, targets, self.n_items)               # (N,)
        # one (i, target) pair per distinct item of each prefix: unique (sample, item) keys
        rows = torch.arange(seqs.shape[0], device=seqs.device)[:, None].expand_as(seqs)  # (S, L)
        mask = seqs != 0
        per_row = torch.unique(rows[mask] * N + seqs[mask])             # (P,) sorted, distinct
        i, j = per_row % N, targets[per_row // N]                       # (P,)
        pair, c = torch.unique(i * N + j, return_counts=True)          # (Q,)
        i, j = pair // N, pair % N                                      # (Q,)
        a = self.cfg.alpha
        sim = c.double() / (counts[i].pow(a) * counts[j].pow(1 - a))    # (Q,)
        # keep the K best per row: sort by similarity (desc), then stably by row
        by_sim = torch.argsort(sim - 1e-12 * self.pop[j], descending=True, stable=True)
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
        # a similarity is >= 1 / (max clicks) >> 1e-9: popularity (<= 1e-9) only breaks ties
        return self._finish(scores + 1e-9 * self.pop[None, :])


def _build_pop(cls):
    def build(n_items: int, max_len: int, train, options=None, encoding=None) -> Recommender:
        model_options(PopConfig, cls.__name__.lower(), options)
        return cls(n_items)
    return build


def build_itemknn(n_items: int, max_len: int, train, options=None, encoding=None) -> Recommender:
    return ItemKNN(n_items, model_options(ItemKNNConfig, "itemknn", options))


register_model(ModelSpec("pop", _build_pop(Pop), "POP: global popularity", "000 Table 2", uses_encoding=False))
register_model(ModelSpec("spop", _build_pop(SessionPop), "S-POP: session popularity, then global",
                         "000 Table 2", uses_encoding=False))
register_model(ModelSpec("itemknn", build_itemknn, "Item-KNN: co-occurrence neighbours of the last item",
                         "000 Table 2", uses_encoding=False))
