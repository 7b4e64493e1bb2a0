"""Rotary position embedding (RoPE, Su et al. 2024) as the PE study uses it (004 Eqs. 9-10).

Notation used for tensor shapes:
    B  batch, H  heads, L  keys, Lq  queries, E  head size (even parts rotate in pairs)

Functional core: `rotary_angles` and `apply_rotary` are pure functions; the modules only
pick positions and blocks. q and k of each head are rotated pair-wise, (2i, 2i+1) by the
angle pos * base^(-2i/E), so q_i . k_j depends on positions only through i - j (the
scores are shift invariant; 000 Cor. 3.5: neither forward- nor backward-aware).
Positions are reversed as in 004 §3 (backward positions; the target query sits at -1).

004's released code (researcher1741/Position_encoding_SRS, src/Encoding.py RotaryPositionalEmbeddings)
does not rotate by position: its cache is sized and indexed by the first dimension of q and k, which
Attention_blocks.py has made batch x heads, so every vector of a row turns by one angle and q . k is
unchanged (walk 41e #1: its logits equal no encoding's to 4e-16). Its Rope and RopeOne rows are therefore
`none` trained again (004's Beauty table agrees: Rope 56.30, RopeOne 55.3-56.0, None 56.00 HR@10); seqpe's
`rope` / `rope_one` are the paper's Eqs. 9-10 (RoFormer's rotation, checked to 3e-16), so they are not
expected to reproduce those rows.
"""
from __future__ import annotations

import torch

from .base import PositionalEncoding, Positions, query_positions


def rotary_angles(positions: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """(...) positions -> (..., dim // 2) angles pos * base^(-2i/dim), in float64 (apply_rotary rounds them to
    the wider of float32 and its input's dtype: a float64 model rotates by exact angles, walk 39b #5)."""
    i = torch.arange(dim // 2, device=positions.device, dtype=torch.float64)
    inv_freq = base ** (-2.0 * i / dim)                                      # (dim/2,)
    return positions.to(torch.float64)[..., None] * inv_freq                # (..., dim/2)


def apply_rotary(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of x (..., dim) by angles (..., dim // 2) (004 Eq. 10).

    An odd last dim is left as is. Angles broadcast over leading dims (e.g. heads).
    """
    n = 2 * angles.size(-1)
    pairs = x[..., :n].unflatten(-1, (-1, 2))                               # (..., dim/2, 2)
    a, b = pairs[..., 0], pairs[..., 1]                                     # (..., dim/2)
    angles = angles.to(torch.promote_types(x.dtype, torch.float32))       # float32, float64 for a float64 x
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    rotated = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)  # (..., n)
    return torch.cat((rotated, x[..., n:]), dim=-1)


class RoPE(PositionalEncoding):
    """Rope (004 §3, Eqs. 9-10): q and k rotated by position in every block."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__()
        self.head_dim, self.base = dim // heads, config.base
        if self.head_dim < 2:              # no pair to turn: `none`'s bytes under this name (walk 45c #2)
            from pipeline.errors import ParamsError
            name = "rope_one" if isinstance(self, RoPEOne) else "rope"
            raise ParamsError(f"a width of {dim} over {heads} head{'s' * (heads != 1)} gives heads of width "
                              f"{self.head_dim}, and {name} rotates pairs of each head's dimensions: the run "
                              "would be --encoding none under another name",
                              "use train.dim of at least 2 x train.heads")

    def applies(self, layer: int) -> bool:
        return True

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions, layer: int):
        if not self.applies(layer):
            return q, k
        _, bq = query_positions(pos, q.size(2))                              # (B, Lq)
        aq = rotary_angles(bq, self.head_dim, self.base)[:, None]           # (B, 1, Lq, E/2)
        ak = rotary_angles(pos.backward, self.head_dim, self.base)[:, None]  # (B, 1, L, E/2)
        return apply_rotary(q, aq), apply_rotary(k, ak)                     # (B, H, Lq, E), (B, H, L, E)


class RoPEOne(RoPE):
    """RopeOne (004 §5, ablation): RoPE in the first block only."""

    def applies(self, layer: int) -> bool:
        return layer == 0
