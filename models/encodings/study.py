"""The PE study's input-stage encodings (004 §3), all REVERSED as the study does.

Notation used for tensor shapes:
    B  batch, L  padded length (LEFT padding), D  model size, P  concatenated PE width

004 §3: "the encoding is reversed; the first item in the encoding order is the last
one" - every table here is indexed by the backward position l - 1 - pos, so all are
backward-aware and not forward-aware (000 Defs. 3.1/3.2). `_con` variants concatenate
the PE to the item vector and map back to D with a Linear layer (004 Eq. 6).

Rotatory / Rotatory + Con follow the study's released code (see `Rotatory`): a learned angle
table through sin / cos, added to (or concatenated with) the input. An earlier seqpe version
rotated the item vector itself by R(l - 1 - pos); no paper describes that encoding and it
carries no position for a zero input, so it is gone rather than kept under another name.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .base import Positions
from .posrec import AdditiveEncoding, LearnedEncoding, sinusoid


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


def con_projection(dim: int, pos_dim: int, init: str) -> nn.Linear:
    """004 Eq. 6's Linear(D + P -> D) over [x ; PE], shared by every +Con encoding.

    `init` picks the projection's start. `default` is nn.Linear's uniform(+-1/sqrt(D + P)),
    as the study's code. `identity` (beyond the papers) sets the item half W[:, :D] to the identity
    and the bias to 0 after that same draw, leaving the PE half as drawn: at step 0 the layer is
    x + W_pe PE, an additive projected PE, and `none_con` is exactly `none`. It tests whether the
    +Con gap is the default start (which shrinks the item vector; reproduction.md, "Is it the
    projection?") rather than the concatenation. The random stream is the same for both."""
    proj = nn.Linear(dim + pos_dim, dim)
    if init == "identity":
        with torch.no_grad():
            proj.weight[:, :dim].copy_(torch.eye(dim))
            proj.bias.zero_()
    return proj


class _Concat(LearnedEncoding):
    """004 Eq. 6: x = Linear([x ; PE]) with PE of width P (config.pos_dim, 0 = D)."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__(dim, max_len, heads, layers, config)
        self.pos_dim = config.pos_dim or dim
        self.proj = con_projection(dim, self.pos_dim, config.init)

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        pe = self.table(pos).to(x.dtype).expand(x.size(0), -1, -1)         # (B, L, P)
        return self.proj(torch.cat((x, pe), dim=-1))                        # (B, L, D)


class AbsCon(_Concat):
    """Concat absolute encoding CAE (004 Eq. 6): Linear([x ; PE(l - 1 - pos)])."""

    def table(self, pos):
        return sinusoid(pos.backward, self.pos_dim, self.pos_dim, self.config.base)  # (B, L, P)


class NoneCon(_Concat):
    """An ablation beyond the papers: 004 Eq. 6's projection with no position, Linear([x ; 0]).

    It isolates what the +Con variants add besides their PE: a fresh Linear(D + P -> D) on the
    (sqrt(D)-scaled) item vector, while SASRec still scores with the unprojected item table. The
    zero half keeps the layer's shape, so its initialisation (bound 1/sqrt(D + P)) and the random
    stream are those of `abs_con` for the same seed; the zero columns never receive a gradient.
    Neither forward- nor backward-aware."""

    def table(self, pos):
        return pos.mask.new_zeros(*pos.mask.shape, self.pos_dim, dtype=torch.float32)  # (B, L, P)


class LearntCon(_Concat):
    """Concatenated learnable encoding CLE (004 §3): Linear([x ; Embed[l - 1 - pos]])."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__(dim, max_len, heads, layers, config)
        self.emb = self._table(self.pos_dim)

    def table(self, pos):
        return self._index(self.emb, pos.backward)                          # (B, L, P)


def rotatory_table(angles: torch.Tensor, dim: int) -> torch.Tensor:
    """The study's rotatory vector (004 §3, released code): learned angles a (..., ceil(D/2)) ->
    (..., D) with sin(2 pi a / scale) at dims 2i and cos of the same angle at 2i + 1 (an odd D
    keeps the last sine). `angles` arrive already divided by the scale."""
    theta = 2 * math.pi * angles                                            # (..., ceil(D/2))
    out = torch.stack((theta.sin(), theta.cos()), dim=-1).flatten(-2)       # (..., 2 ceil(D/2))
    return out[..., :dim]                                                   # (..., D)


class Rotatory(LearnedEncoding):
    """Rotatory (004 §3, "applying the rotation matrices to the vector encodings added to the
    input items"), as the study's released code builds it (`RotaryPositionalEncoding` in
    src/Encoding.py of researcher1741/Position_encoding_SRS):

        a = Embed[l - 1 - pos] / scale               learned angles, one per pair of dims
        PE[2i] = sin(2 pi a_i),  PE[2i + 1] = cos(2 pi a_i)
        x -> x + PE                                  (added: a zero input still carries position)

    The table is indexed by the reversed position (004 reverses every encoding; the code's slot
    index in a left-padded window of fixed length is the same up to an offset of the table).
    Learned: 004 Table 1 marks Rotatory "not learnable", but the code's angles are an
    nn.Embedding trained with the model, so seqpe's registry says learnable. The angles start
    N(0, 1) (nn.Embedding's default, as in the code) and scale = 10000 (config.scale), so at
    initialisation 2 pi a ~ 6e-4: PE is close to (0, 1, 0, 1, ...) at every position and only
    drifts apart as the angles learn - a property of the study's encoding, kept on purpose.
    The odd dims of the code's embedding are overwritten and never used; seqpe stores only the
    ceil(D/2) angles that are."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__(dim, max_len, heads, layers, config)
        self.pos_dim = getattr(config, "pos_dim", 0) or dim
        self.angles = nn.Embedding(max_len + 1, (self.pos_dim + 1) // 2)   # N(0, 1), as the code
        self.scale = config.scale

    def table(self, pos):
        a = self._index(self.angles, pos.backward) / self.scale             # (B, L, ceil(P/2))
        return rotatory_table(a, self.pos_dim)                              # (B, L, P)


class RotatoryCon(Rotatory):
    """Rotatory + Con (004 §3 with Eq. 6): Linear([x ; PE]) with PE the rotatory vector above
    (width config.pos_dim, 0 = D), as the released code's concatenation branch."""

    def __init__(self, dim, max_len, heads=1, layers=1, config=None):
        super().__init__(dim, max_len, heads, layers, config)
        self.proj = con_projection(dim, self.pos_dim, config.init)

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        pe = self.table(pos).to(x.dtype)                                    # (B, L, P)
        return self.proj(torch.cat((x, pe), dim=-1))                        # (B, L, D)
