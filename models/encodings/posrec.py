"""PosRec's absolute encodings (000 §3-4, Appendices A-B): input-stage tables P^l.

Notation used for tensor shapes:
    B  batch, L  padded length (LEFT padding), D  model size

Each encoding defines the per-item table P^l_pos (`table`, (B, L, D)) and adds it to the
item embeddings (`embed`). pos = forward position (0 = first item), l - 1 - pos = the
backward position (0 = last item), l = session length; all read from `Positions`.
"""
from __future__ import annotations

import torch
from torch import nn

from .base import PositionalEncoding, Positions


def sinusoid(positions: torch.Tensor, n: int, d_ref: int, base: float = 10000.0) -> torch.Tensor:
    """000 Eq. 1: P[2i] = sin(pos / base^(2i/d_ref)), P[2i+1] = cos(...); (...) -> (..., n).

    `d_ref` is the d of the frequency f(i) (000 Eq. 5 keeps the full d for each half;
    Eq. 24 uses 10000^(4i/d), i.e. d_ref = d/2). An odd n drops the last cosine. Computed in float64, returned
    in float32 (the encodings' `table`s are float32, which a float64 model adds as such: within ~1e-7).
    """
    pairs = (n + 1) // 2
    i = torch.arange(pairs, device=positions.device, dtype=torch.float64)
    inv_freq = base ** (-2.0 * i / d_ref)                                    # (pairs,)
    angles = positions.to(torch.float64)[..., None] * inv_freq             # (..., pairs)
    out = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)    # (..., 2 * pairs)
    return out[..., :n].to(torch.float32)


def swap_pairs(p: torch.Tensor) -> torch.Tensor:
    """Exchange dims 2i and 2i+1 (000 Eq. 16: cos at 2i, sin at 2i+1)."""
    n = p.size(-1) - p.size(-1) % 2
    swapped = p[..., :n].unflatten(-1, (-1, 2)).flip(-1).flatten(-2)      # (..., n)
    return torch.cat((swapped, p[..., n:]), dim=-1)


class AdditiveEncoding(PositionalEncoding):
    """x + P^l: subclasses define `table`."""

    def __init__(self, dim: int, max_len: int, heads: int = 1, layers: int = 1, config=None):
        super().__init__()
        self.dim, self.max_len, self.config = dim, max_len, config

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        return x + self.table(pos).to(x.dtype)                              # (B, L, D)

    def _sin(self, positions: torch.Tensor, n: int, d_ref: int) -> torch.Tensor:
        return sinusoid(positions, n, d_ref, self.config.base)


class NoEncoding(PositionalEncoding):
    """No positional information (000 Figs. 3-4 'base'; 004 'None'): every hook a no-op."""

    def __init__(self, dim: int = 0, max_len: int = 0, heads: int = 1, layers: int = 1, config=None):
        super().__init__()


class SPE(AdditiveEncoding):
    """Sinusoidal PE over forward positions, 000 Eq. 1 (Vaswani et al.). Forward-aware only (000 Thm. 3.4)."""

    def table(self, pos):
        return self._sin(pos.forward, self.dim, self.dim)                   # (B, L, D)


class RSPE(AdditiveEncoding):
    """Reverse sinusoidal PE, 000 Eq. 4: sinusoids of l - pos - 1. Backward-aware only (000 Cor. 3.6)."""

    def table(self, pos):
        return self._sin(pos.backward, self.dim, self.dim)                  # (B, L, D)


class DPE(AdditiveEncoding):
    """Dual PE, 000 Eq. 5: first half SPE of pos, second half of l - pos - 1 (f(i) with the full d).
    Forward- and backward-aware (000 Thm. 4.1)."""

    def table(self, pos):
        h = self.dim // 2
        return torch.cat((self._sin(pos.forward, h, self.dim),
                          self._sin(pos.backward, self.dim - h, self.dim)), dim=-1)  # (B, L, D)


class ASPE(AdditiveEncoding):
    """Additive sinusoidal PE, 000 §3.4 and Eq. 17: SPE + RSPE with dims 2i / 2i+1 swapped
    (Eq. 16). Unique per (pos, l) but neither forward- nor backward-aware."""

    def table(self, pos):
        return self._sin(pos.forward, self.dim, self.dim) + swap_pairs(self._sin(pos.backward, self.dim, self.dim))


class TwoDSPE(AdditiveEncoding):
    """2D sinusoidal PE, 000 Eq. 24 (Appendix B): first half sinusoids of pos, second half of
    the length l, both with 10000^(4i/d). By Def. 3.1 its position half is forward-aware;
    nothing is a function of l - pos - 1, so it is not backward-aware."""

    def __init__(self, dim: int, max_len: int, heads: int = 1, layers: int = 1, config=None):
        super().__init__(dim, max_len, heads, layers, config)
        if dim < 2:                        # a position half of width 0: 10000^(0/0), NaN (walk 45c #3)
            from pipeline.errors import ParamsError
            raise ParamsError(f"2dspe splits its width into a position half and a length half, and a width of {dim} "
                              "has no position half", "use train.dim 2 or more")

    def table(self, pos):
        h = self.dim // 2
        length = pos.lengths[:, None].expand_as(pos.forward)                 # (B, L)
        return torch.cat((self._sin(pos.forward, h, h), self._sin(length, self.dim - h, h)), dim=-1)


class LearnedEncoding(AdditiveEncoding):
    """Learned tables: one (max_len, width) embedding per index kind."""

    def _table(self, width: int) -> nn.Embedding:
        emb = nn.Embedding(self.max_len + 1, width)
        nn.init.normal_(emb.weight, std=0.02)
        return emb

    @staticmethod
    def _index(emb: nn.Embedding, idx: torch.Tensor) -> torch.Tensor:
        return emb(idx)                                                     # IndexError beyond max_len


class LPE(LearnedEncoding):
    """Learned absolute PE (000 §3.3, SASRec/BERT4Rec): Embed[pos]. Forward-aware only."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__(dim, max_len, heads, layers, config)
        self.emb = self._table(dim)

    def table(self, pos):
        return self._index(self.emb, pos.forward)                           # (B, L, D)


class LRPE(LPE):
    """Learned reverse PE (000 §3.3): Embed[l - pos - 1]. Backward-aware only.

    SASRec's reference code, which embeds the slot index of a fixed left-padded window,
    amounts to this (up to an offset of the table), not to LPE."""

    def table(self, pos):
        return self._index(self.emb, pos.backward)                          # (B, L, D)


class LDPE(LearnedEncoding):
    """Learned dual PE, 000 Eq. 6: P[0:d/2] = Embed[pos], P[d/2:d] = Embed[l - pos - 1].
    Forward- and backward-aware."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__(dim, max_len, heads, layers, config)
        self.fwd, self.bwd = self._table(dim // 2), self._table(dim - dim // 2)

    def table(self, pos):
        return torch.cat((self._index(self.fwd, pos.forward), self._index(self.bwd, pos.backward)), dim=-1)


class ALPE(LDPE):
    """Additive learned PE (000 §3.4, the learned ASPE): Embed_f[pos] + Embed_b[l - pos - 1]
    over the full width (two tables, so it is not symmetric). Neither aware."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        LearnedEncoding.__init__(self, dim, max_len, heads, layers, config)
        self.fwd, self.bwd = self._table(dim), self._table(dim)

    def table(self, pos):
        return self._index(self.fwd, pos.forward) + self._index(self.bwd, pos.backward)


class TwoDLPE(LDPE):
    """2D learned PE (000 §3.4, learned Eq. 24): [Embed_p[pos] ; Embed_l[l]]. Forward-aware only."""

    def table(self, pos):
        length = pos.lengths[:, None].expand_as(pos.forward)                 # (B, L)
        return torch.cat((self._index(self.fwd, pos.forward), self._index(self.bwd, length)), dim=-1)
