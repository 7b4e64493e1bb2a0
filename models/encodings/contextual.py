"""Contextual positions: CoPE (Golovneva et al. 2024) and CAPE (001 Eqs. 1-8).

Notation used for tensor shapes:
    B  batch, H  heads, Lq  queries, L  keys, E  head size, P  position space width (d_pos)
    n  largest position (max_len); integer positions 0..n have embeddings

A position is not an index but a count of the keys that "matter" between a key and the
query (the target): gates g_ij in [0, 1] are summed from the query backwards,

    p_ij = sum_{k=j}^{i} g_ik                 (001 Eq. 2; keys k <= i that are real)

Fractional positions interpolate between the two nearest integer positions (001 Eqs.
3, 7). With every gate 1, p_ij = i - j + 1: plain relative positions (001, remark after
Eq. 2), so neither forward- nor backward-aware (000 Cor. 3.5). Used in causal
self-attention (query i = the target) or target attention (the query = the next item).
"""
from __future__ import annotations

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
    lo_i = lo.long()
    hi_i = (lo_i + 1).clamp(max=n)
    return (1 - w) * z.gather(-1, lo_i) + w * z.gather(-1, hi_i)             # (..., L)


class _Contextual(PositionalEncoding):
    """Shared by CoPE and CAPE: logits_ij += z_i[p_ij] (001 Eq. 8)."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__()
        self.head_dim, self.n = dim // heads, max_len

    def gates(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:     # (B, H, Lq, L)
        raise NotImplementedError

    def scores(self, q: torch.Tensor, layer: int) -> torch.Tensor:         # (B, H, Lq, n + 1)
        raise NotImplementedError

    def positions(self, q, k, pos: Positions) -> torch.Tensor:
        return contextual_positions(self.gates(q, k), allowed_keys(pos, q.size(2)))  # (B, H, Lq, L)

    def bias(self, q, k, pos, layer):
        return interpolate(self.scores(q, layer), self.positions(q, k, pos))  # (B, H, Lq, L)


class CoPE(_Contextual):
    """CoPE (Golovneva et al. 2024; CAPE's baseline, 001 §5): similarity gates
    g_ij = sigmoid(q_i . k_j / sqrt(E)), z_i[p] = q_i . e[p] with e of the head size."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__(dim, max_len, heads, layers, config)
        self.emb = nn.Parameter(torch.randn(layers, max_len + 1, self.head_dim) * 0.02)  # (layers, n+1, E)

    def gates(self, q, k):
        return torch.sigmoid(q @ k.transpose(-1, -2) / self.head_dim ** 0.5)  # (B, H, Lq, L)

    def scores(self, q, layer):
        return q @ self.emb[layer].t()                                       # (B, H, Lq, n+1)


class CAPE(_Contextual):
    """CAPE (001 Eqs. 1-8): dissimilarity gates g_j = 1 - sigmoid(sim(t, h_j)) (Eq. 1),
    positions summed from the target backwards (Eq. 2), gated fusion t' = SiLU(W t + b)
    into a position space of width d_pos (Eq. 5), z[p] = t' . e[p] (Eq. 6) interpolated
    at fractional p (Eq. 7) and added to the logits (Eq. 8). sim = q.k / sqrt(E)."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__(dim, max_len, heads, layers, config)
        self.pos_dim = config.pos_dim or self.head_dim
        self.fuse = nn.ModuleList(nn.Linear(self.head_dim, self.pos_dim) for _ in range(layers))
        self.emb = nn.Parameter(torch.randn(layers, max_len + 1, self.pos_dim) * 0.02)  # (layers, n+1, P)

    def gates(self, q, k):
        return 1 - torch.sigmoid(q @ k.transpose(-1, -2) / self.head_dim ** 0.5)  # (B, H, Lq, L)

    def scores(self, q, layer):
        t = F.silu(self.fuse[layer](q))                                      # (B, H, Lq, P)
        return t @ self.emb[layer].t()                                       # (B, H, Lq, n+1)
