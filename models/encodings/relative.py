"""Relative encodings inside attention: RMHA (Shaw et al., 004 Eqs. 7-8) and ALiBi.

Notation used for tensor shapes:
    B  batch, H  heads, Lq  queries, L  keys, E  head size, R = 2 * clip + 1 buckets

Both depend on positions only through the distance j - i (000 Eq. 3, g(P_ij)), so
shifting every position leaves the scores unchanged; by 000 Cor. 3.5 they are neither
forward- nor backward-aware. Distances use forward positions (the target query of
target attention sits at forward = length, right after the last item).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .base import PositionalEncoding, Positions, query_positions


def distances(pos: Positions, lq: int) -> torch.Tensor:
    """(B, Lq, L) long: key position minus query position, j - i."""
    fq, _ = query_positions(pos, lq)                                         # (B, Lq)
    return pos.forward[:, None, :] - fq[:, :, None]                          # (B, Lq, L)


def clipped_buckets(rel: torch.Tensor, clip: int) -> torch.Tensor:
    """Shaw et al.: clip(j - i, -k, k) + k, so every distance beyond k shares one bucket."""
    return rel.clamp(-clip, clip) + clip


class RMHA(PositionalEncoding):
    """RMHA-k (004 Eqs. 7-8, Shaw et al. 2018): learned a^K_ij, a^V_ij per layer and head
    (not shared among heads, as the study), indexed by clip(j - i, -k, k):

        logits_ij += q_i . a^K_ij / sqrt(E)      values: out_i += sum_j alpha_ij a^V_ij

    004's released RMHA (src/Attention_blocks.py) departs from its Eqs. 7-8 (walk 41e #3): it applies the
    softmax twice (weights = softmax(logits) * mask, then softmax again), so attention is nearly uniform and
    reaches padding keys (0.68 of a 3-item row's mass there); one table per layer is shared by the heads; and
    an output projection follows. seqpe computes Shaw's formula as the paper writes it (checked to 3e-17), so
    004's RMHA-4 numbers come from another function.
    """

    fusable = False         # overrides `values` (needs the attention probabilities)

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__()
        self.clip, head_dim = config.clip, dim // heads
        buckets = 2 * self.clip + 1
        self.key = nn.Parameter(torch.randn(layers, heads, buckets, head_dim) * 0.02)   # (layers, H, R, E)
        self.value = nn.Parameter(torch.randn(layers, heads, buckets, head_dim) * 0.02)  # (layers, H, R, E)

    def buckets(self, pos: Positions, lq: int) -> torch.Tensor:
        return clipped_buckets(distances(pos, lq), self.clip)              # (B, Lq, L)

    def bias(self, q, k, pos, layer, query_input=None, allowed=None):
        per_bucket = q @ self.key[layer].transpose(-1, -2)[None]            # (B, H, Lq, R)
        idx = self.buckets(pos, q.size(2))[:, None].expand(-1, q.size(1), -1, -1)  # (B, H, Lq, L)
        return per_bucket.gather(-1, idx) / math.sqrt(q.size(-1))          # (B, H, Lq, L)

    def values(self, probs, v, pos, layer):
        B, H, Lq, L = probs.shape[0], v.size(1), probs.size(2), probs.size(3)
        idx = self.buckets(pos, Lq)[:, None].expand(B, H, Lq, L)             # (B, H, Lq, L)
        mass = probs.new_zeros(B, H, Lq, 2 * self.clip + 1)                 # (B, H, Lq, R)
        mass = mass.scatter_add(-1, idx, probs.expand(B, H, Lq, L))         # (B, H, Lq, R)
        return mass @ self.value[layer][None]                               # (B, H, Lq, E)


def alibi_slopes(heads: int) -> torch.Tensor:
    """Press et al. 2022: geometric slopes 2^(-8h/H), h = 1..H."""
    return 2.0 ** (-8.0 * torch.arange(1, heads + 1, dtype=torch.float32) / heads)  # (H,)


class ALiBi(PositionalEncoding):
    """ALiBi (Press et al., ICLR 2022; beyond the four papers): logits_ij -= m_h |i - j|."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(heads), persistent=False)  # (H,)

    def bias(self, q, k, pos, layer, query_input=None, allowed=None):
        dist = distances(pos, q.size(2)).abs().to(q.dtype)                  # (B, Lq, L)
        return -self.slopes.to(q.dtype)[None, :, None, None] * dist[:, None]  # (B, H, Lq, L)
