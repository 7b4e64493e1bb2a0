"""Positional attention (003 PARec / FPARec) and its handcrafted patterns (003 §4.4).

Notation used for tensor shapes:
    B  batch, L  padded length (LEFT padding), n  max_len (slots of the learned matrix), k  rank

These encodings replace q.k attention (`needs_qk = False`): the weights hook returns

    Mask(softmax(R_l / sqrt(d)))          003 Eq. 6 (PARec), R_l = R1_l R2_l^T for FPARec (Eq. 7)

with the lower-triangular mask applied to the logits (future keys and padding get exactly
zero weight; rows renormalise over the real past). Sequences are left-padded to n slots
as in 003 §3.1, so an item's slot is n - 1 - (its backward position): the learned rows
are indexed from the end, independent of how much padding a batch has. Hence PARec and
FPARec are backward-aware (000 Def. 3.2) and not forward-aware. The average and exponential
patterns depend only on the distance i - j (relative: neither); linear annealing weighs key j by
its slot (Eq. 13), so it is backward-aware too. Self-attention only; the key mask is the
attention's own (causal in 003's blocks, bidirectional in PosRec's readout).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from .base import PositionalEncoding, Positions, allowed_keys


def slots(pos: Positions, n: int) -> torch.Tensor:
    """(B, L) slot of each item in the n-slot, end-aligned layout (padding -> slot n - 1, masked)."""
    if pos.lengths.device.type == "cpu":        # on a GPU the check would wait for it, in every layer of every step
        assert int(pos.lengths.max()) <= n, f"sequence of {int(pos.lengths.max())} items > max_len {n}"
    return n - 1 - pos.backward                                              # (B, L)


def positional_weights(logits: torch.Tensor, pos: Positions, allowed: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Masked softmax of positional logits (B|1, L, L) over allowed keys -> (B, 1, L, L).

    `allowed` is the attention's own key mask: causal in SASRec-style blocks (003), all real keys
    in a bidirectional readout (PosRec's, for its Figs. 3-4 with any encoding); default causal."""
    if allowed is None:
        allowed = allowed_keys(pos, pos.mask.size(1), causal=True)           # (B, 1, L, L)
    logits = logits[:, None].masked_fill(~allowed, float("-inf"))           # (B, 1, L, L)
    return torch.softmax(logits, dim=-1)


class _Positional(PositionalEncoding):
    needs_qk = False
    fusable = False         # overrides `weights`

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__()
        self.dim, self.n, self.config = dim, max_len, config

    def logits(self, pos: Positions, layer: int) -> torch.Tensor:           # (B, L, L)
        raise NotImplementedError

    def weights(self, probs, pos, layer, allowed=None):
        assert probs.size(-2) == probs.size(-1), "positional attention is self-attention only"
        return positional_weights(self.logits(pos, layer), pos, allowed).to(probs.dtype)  # (B, 1, L, L)


class PARec(_Positional):
    """PARec (003 Eq. 6): a learned n x n matrix R_l per layer, no queries or keys."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__(dim, max_len, heads, layers, config)
        self.R = nn.Parameter(torch.randn(layers, max_len, max_len) * 0.02)  # (layers, n, n)

    def matrix(self, layer: int) -> torch.Tensor:                           # (n, n)
        return self.R[layer]

    def logits(self, pos, layer):
        s = slots(pos, self.n)                                               # (B, L)
        R = self.matrix(layer)                                               # (n, n)
        return R[s[:, :, None], s[:, None, :]] / math.sqrt(self.dim)         # (B, L, L)

    def table(self, pos):
        """Per-item table: the row of R_0 for the item's slot (B, L, n)."""
        return self.matrix(0)[slots(pos, self.n)]


class FPARec(PARec):
    """FPARec (003 Eq. 7): R_l = R1_l R2_l^T with R1_l, R2_l of shape (n, k)."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        _Positional.__init__(self, dim, max_len, heads, layers, config)
        k = config.rank
        self.R1 = nn.Parameter(torch.randn(layers, max_len, k) / math.sqrt(k))  # (layers, n, k)
        self.R2 = nn.Parameter(torch.randn(layers, max_len, k) * 0.02)          # (layers, n, k)

    def matrix(self, layer):
        return self.R1[layer] @ self.R2[layer].t()                          # (n, n)


class _Handcrafted(_Positional):
    """A fixed pattern f(i - j) of the distance (003 §4.4); nothing learned."""

    def pattern(self, distance: torch.Tensor) -> torch.Tensor:             # (B, L, L) logits
        raise NotImplementedError

    def logits(self, pos, layer):
        distance = (pos.forward[:, :, None] - pos.forward[:, None, :]).clamp(min=0)  # (B, L, L)
        return self.pattern(distance)


class Average(_Handcrafted):
    """Average (003 §4.4): every previous item gets the same weight."""

    def pattern(self, distance):
        return torch.zeros(distance.shape, device=distance.device)


class LinearAnnealing(_Positional):
    """Linear annealing (003 Eq. 13): a_ij = j for j <= i, j the key's 1-based slot in the n-slot,
    end-aligned window, so weights rise linearly towards the present (and depend on the key's
    distance from the end: backward-aware, not relative); rows normalised by Eq. 15."""

    def logits(self, pos, layer):
        s = slots(pos, self.n).to(torch.float32) + 1.0                       # (B, L) 1..n
        return torch.log(s)[:, None, :].expand(-1, s.size(1), -1)           # (B, L, L) log a_ij

    def table(self, pos):
        """Per-item table: the key weight a_.j = slot + 1 of each item (B, L, 1)."""
        return (slots(pos, self.n).to(torch.float32) + 1.0)[..., None]


class ExponentialAnnealing(_Handcrafted):
    """Exponential annealing (003 Eq. 14): a_ij = e^(j - i), i.e. rate^(i - j) with rate = 1/e by default."""

    def pattern(self, distance):
        return distance.to(torch.float32) * math.log(self.config.rate)
