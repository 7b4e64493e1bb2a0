"""The PE study's input-stage encodings (004 §3), all REVERSED as the study does.

Notation used for tensor shapes:
    B  batch, L  padded length (LEFT padding), D  model size, P  concatenated PE width

004 §3: "the encoding is reversed; the first item in the encoding order is the last
one" - every table here is indexed by the backward position l - 1 - pos, so all are
backward-aware and not forward-aware (000 Defs. 3.1/3.2). `_con` variants concatenate
the PE to the item vector and map back to D with a Linear layer (004 Eq. 6).
"""
from __future__ import annotations

import torch
from torch import nn

from .base import PositionalEncoding, Positions
from .posrec import AdditiveEncoding, LearnedEncoding, sinusoid
from .rotary import apply_rotary, rotary_angles


class Abs(AdditiveEncoding):
    """Absolute sinusoidal encoding, 004 Eqs. 3-5, over reversed positions: x + PE(l - 1 - pos)."""

    def table(self, pos):
        return self._sin(pos.backward, self.dim, self.dim)                  # (B, L, D)


class Learnt(LearnedEncoding):
    """Learnable encoding LE (004 §3): x + Embed[l - 1 - pos]."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__(dim, max_len, heads, layers, config)
        self.emb = self._table(dim)

    def table(self, pos):
        return self._index(self.emb, pos.backward)                          # (B, L, D)


class _Concat(LearnedEncoding):
    """004 Eq. 6: x = Linear([x ; PE]) with PE of width P (config.pos_dim, 0 = D)."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__(dim, max_len, heads, layers, config)
        self.pos_dim = config.pos_dim or dim
        self.proj = nn.Linear(dim + self.pos_dim, dim)

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        pe = self.table(pos).to(x.dtype).expand(x.size(0), -1, -1)         # (B, L, P)
        return self.proj(torch.cat((x, pe), dim=-1))                        # (B, L, D)


class AbsCon(_Concat):
    """Concat absolute encoding CAE (004 Eq. 6): Linear([x ; PE(l - 1 - pos)])."""

    def table(self, pos):
        return sinusoid(pos.backward, self.pos_dim, self.pos_dim, self.config.base)  # (B, L, P)


class LearntCon(_Concat):
    """Concatenated learnable encoding CLE (004 §3): Linear([x ; Embed[l - 1 - pos]])."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__(dim, max_len, heads, layers, config)
        self.emb = self._table(self.pos_dim)

    def table(self, pos):
        return self._index(self.emb, pos.backward)                          # (B, L, P)


class Rotatory(PositionalEncoding):
    """Rotatory (004 §3): the RoPE rotation (004 Eqs. 9-10) applied to the input item
    vectors instead of q and k, by reversed position: x -> R(l - 1 - pos) x.
    Its table is the rotation itself, [cos ; sin] of the angles (B, L, D)."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__()
        self.dim, self.base = dim, config.base

    def _angles(self, pos: Positions) -> torch.Tensor:
        return rotary_angles(pos.backward, self.dim, self.base)            # (B, L, D/2)

    def table(self, pos):
        a = self._angles(pos)
        return torch.cat((a.cos(), a.sin()), dim=-1)                        # (B, L, 2 * D/2)

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        return apply_rotary(x, self._angles(pos))                           # (B, L, D)


class RotatoryCon(Rotatory):
    """Rotatory + Con (004 §3): Linear([x ; R(l - 1 - pos) x])."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__(dim, max_len, heads, layers, config)
        self.proj = nn.Linear(2 * dim, dim)

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        return self.proj(torch.cat((x, super().embed(x, pos)), dim=-1))     # (B, L, D)
