"""Contextual positions: CoPE (Golovneva et al. 2024) and CAPE (001 Eqs. 1-8).

Notation used for tensor shapes:
    B  batch, H  heads, Lq  queries, L  keys, E  head size, D  model size (item width d of 001)
    P  position space width (d_pos), n  largest position (max_len); integer positions 0..n have
    embeddings

A position is not an index but a count of the keys that "matter" between a key and the query
(the target). 001 §4, line by line, for target attention (the query is the target item t; in
self-attention query i plays the target, 001: "can be easily extended to self-attention"):

    Eq. 1  g_j = 1 - sigmoid(sim(t, h_j))            `CAPE.gates`: dissimilarity gate per key. sim is
                                                     the attention's own item similarity: q.k / sqrt(E)
                                                     in dot-product attention (`bias`), DIN's activation
                                                     unit or DIEN's bilinear form elsewhere
                                                     (`score_bias`, 001 Eq. 4's sim_item)
    Eq. 2  p_j = sum_{k=j}^{n} g_k                    `contextual_positions`: summed from the target
                                                     backwards over the allowed keys (causal
                                                     self-attention: k <= i; bidirectional or target
                                                     attention: every real key up to the end)
    Eq. 3  e[p_j] = (p_j - floor p_j) e[ceil p_j] + (1 - p_j + floor p_j) e[floor p_j]
                                                     never materialised: Eqs. 6-7 interpolate the
                                                     scores instead (the same number, since the
                                                     score is linear in e)
    Eq. 4  a_j = softmax(sim_item(t, f(h_j, e[p_j])))  the fusion f is Eqs. 5-8 below
    Eq. 5  t' = SiLU(W t + b),  W: d -> d_pos         `CAPE.scores`: W acts on the target / query ITEM
                                                     embedding t (`query_input`, what the attention's
                                                     queries are projected from), not on a per-head
                                                     projected query; one W and b per layer
    Eq. 6  z[p] = sim_pos(t', e[p]) = t' . e[p]       `CAPE.scores`: for every integer p = 0..n
    Eq. 7  z[p_j] = (p_j - floor p_j) z[ceil p_j] + (1 - p_j + floor p_j) z[floor p_j]
                                                     `interpolate`
    Eq. 8  a_j = exp(sim(t, h_j) + z[p_j]) / sum_i exp(sim(t, h_i) + z[p_i])
                                                     `bias` / `score_bias` return z[p_j]; the
                                                     attention adds it to its logits (an attention
                                                     without softmax, DIN's, adds it to its weights)

Readings where 001's text is loose (walk 41g #5): Eq. 6 numbers positions 1..n, here 0..n, since the last
key's count can be below 1 (its own gate); the remark that every gate 1 gives "p_j = j + 1" reads n - j + 1
for Eq. 2's backward sum, which is what is computed; and §4.2's "dot production as the sim_item" is, as in
the authors' CAPE code, the attention's own score (DIN's unit, DIEN's bilinear form; q.k in dot-product
attention).

With every gate 1, p_j = (keys from j to the target): plain relative positions (001, remark after
Eq. 2), so neither forward- nor backward-aware (000 Cor. 3.5). CoPE is the same machinery with
similarity gates g = sigmoid(q.k / sqrt(E)) and z[p] = q . e[p] per head, with one position table e of
the head size E shared by the heads, as CoPE's code has it (a (head_dim, npos_max) table for all heads).
001 §5.1.1's "the dimension of position embedding is same as item embedding" holds with one head; with
H heads (BST, DMIN's interests, SASRec with heads > 1) the table is D / H wide (walk 41g #4). The gates
divide by sqrt(E) as CoPE's published code does (facebookresearch/RAM, projects/cope: sigmoid of the
gate logits over sqrt(head_dim)), though its paper writes sigmoid(q.k) (walk 39b #4 checked). z is added
to the already scaled logits, the code's `--cope-nodiv`; its default divides q.k + z by sqrt(E)
together, which differs only by the scale of the learnt e (a reparametrisation).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .base import PositionalEncoding, Positions, allowed_keys


def contextual_positions(gates: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """001 Eq. 2: p_ij = sum over allowed keys k >= j of g_ik; (B, H, Lq, L) -> (B, H, Lq, L)."""
    g = gates * allowed.to(gates.dtype)                                      # (B, H, Lq, L)
    return g.flip(-1).cumsum(-1).flip(-1)                                    # (B, H, Lq, L)


def interpolate(z: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """001 Eqs. 3 / 7: z[p] = (p - floor p) z[ceil p] + (1 - p + floor p) z[floor p].

    z (..., n + 1) values at integer positions 0..n; p (..., L) fractional positions,
    clamped to [0, n]. Returns (..., L).
    """
    n = z.size(-1) - 1
    p = p.clamp(0, n)
    lo = p.detach().floor()
    w = p - lo                                                               # (..., L), grad flows to p
    lo_i = torch.nan_to_num(lo, nan=0.0).long()    # a NaN position (a diverged model) reads slot 0 and stays NaN
    hi_i = (lo_i + 1).clamp(max=n)                  # through w: the loss check says "diverged", not an index error
    return (1 - w) * z.gather(-1, lo_i) + w * z.gather(-1, hi_i)             # (..., L)


class _Contextual(PositionalEncoding):
    """Shared by CoPE and CAPE: logits_ij += z_i[p_ij] (001 Eq. 8)."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__()
        self.dim, self.head_dim, self.n = dim, dim // heads, max_len

    def gates(self, sim: torch.Tensor) -> torch.Tensor:                   # (B, H, Lq, L) -> same
        raise NotImplementedError

    def scores(self, q: torch.Tensor, layer: int,
               query_input: Optional[torch.Tensor] = None) -> torch.Tensor:  # (B, H|1, Lq, n + 1)
        raise NotImplementedError

    def positions(self, sim: torch.Tensor, pos: Positions, allowed: Optional[torch.Tensor] = None) -> torch.Tensor:
        """p_ij (B, H, Lq, L) from the item similarities sim (B, H, Lq, L) (Eqs. 1-2)."""
        if allowed is None:
            allowed = allowed_keys(pos, sim.size(2))                         # (B, 1, Lq, L), causal
        return contextual_positions(self.gates(sim), allowed)                 # (B, H, Lq, L)

    def score_bias(self, scores, q, pos, layer, query_input=None, allowed=None):
        p = self.positions(scores, pos, allowed)                             # (B, H, Lq, L)
        z = self.scores(q, layer, query_input)                               # (B, H|1, Lq, n+1)
        return interpolate(z.expand(*p.shape[:-1], -1), p)                   # (B, H, Lq, L), Eq. 7

    def bias(self, q, k, pos, layer, query_input=None, allowed=None):
        sim = q @ k.transpose(-1, -2) / self.head_dim ** 0.5                 # (B, H, Lq, L)
        return self.score_bias(sim, q, pos, layer, query_input, allowed)


class CoPE(_Contextual):
    """CoPE (Golovneva et al. 2024; CAPE's baseline, 001 §5): similarity gates
    g_ij = sigmoid(sim_ij), z_i[p] = q_i . e[p] with e of the head size."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__(dim, max_len, heads, layers, config)
        self.emb = nn.Parameter(torch.randn(layers, max_len + 1, self.head_dim) * 0.02)  # (layers, n+1, E)

    def gates(self, sim):
        return torch.sigmoid(sim)                                            # (B, H, Lq, L)

    def scores(self, q, layer, query_input=None):
        return q @ self.emb[layer].t()                                       # (B, H, Lq, n+1)


class CAPE(_Contextual):
    """CAPE (001 Eqs. 1-8): dissimilarity gates g_j = 1 - sigmoid(sim(t, h_j)) (Eq. 1), positions
    summed from the target backwards (Eq. 2), gated fusion t' = SiLU(W t + b) of the query ITEM
    embedding t into a position space of width d_pos (Eq. 5), z[p] = t' . e[p] (Eq. 6) interpolated
    at fractional p (Eq. 7) and added to the logits (Eq. 8). One W, b and e per layer; z is shared
    by the heads, the positions are per head (each head's own sim)."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__(dim, max_len, heads, layers, config)
        self.pos_dim = config.pos_dim or dim
        self.fuse = nn.ModuleList(nn.Linear(dim, self.pos_dim) for _ in range(layers))   # W: d -> d_pos, b
        self.emb = nn.Parameter(torch.randn(layers, max_len + 1, self.pos_dim) * 0.02)  # (layers, n+1, P)

    def gates(self, sim):
        return 1 - torch.sigmoid(sim)                                        # (B, H, Lq, L), Eq. 1

    def scores(self, q, layer, query_input=None):
        assert query_input is not None, "CAPE fuses the query item's embedding (001 Eq. 5): pass query_input"
        assert query_input.size(-1) == self.dim, f"query_input width {query_input.size(-1)} != d = {self.dim}"
        t = F.silu(self.fuse[layer](query_input))                            # (B, Lq, P), Eq. 5
        return (t @ self.emb[layer].t())[:, None]                            # (B, 1, Lq, n+1), Eq. 6
