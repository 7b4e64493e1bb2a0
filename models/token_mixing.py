"""003's "Token Mixing" baseline (Luo et al. §4.2, Table 3): SASRec with its self-attention layer
replaced by the token-mixing MLP of MLP-Mixer (Tolstikhin et al. 2021, 003 ref. [17]), masked so
no position reads the future ("we mask the future positional in token mixing layers").

Notation used for tensor shapes:
    B  batch, L  padded length (LEFT padding), D  model size, n  max_len (the window's slots)

MLP-Mixer's token mixing acts on each channel across the tokens (its Eq. 1):

    U_{*,c} = X_{*,c} + W_2 sigma(W_1 LayerNorm(X)_{*,c}),   sigma = GELU

with W_1 (D_S x n), W_2 (n x D_S). Causality: seqpe takes D_S = n and keeps only the lower
triangles of W_1 and W_2, so hidden unit t reads positions <= t and output t reads hidden units
<= t: output t depends on inputs <= t only. (003 does not say how it masked; this is the masking
that keeps MLP-Mixer's two-layer form.) The residual and LayerNorm are SASRec's pre-LN block
(models/attention.py's TransformerBlock), the channel-mixing MLP is SASRec's point-wise FFN. The
`paper` preset keeps pre-LN where SASRec's and Linear Attention's use Kang & McAuley's block
(`norm: kang`): that block is defined by its attention's split input (queries from LayerNorm(x),
keys and values from x), and the token-mixing MLP has one input, MLP-Mixer's LayerNorm(X) (Eq. 1),
which is what pre-LN gives it.

Positions: the weights are indexed by the slots of a window of n = max_len items aligned at its
end (the last item is slot n - 1), as SASRec's reference code pads; padding slots are zeroed
before and after the first layer, so extra left padding changes nothing. The mixer itself is
positional (like PARec's matrices), and SASRec's input-stage encoding is kept on top; encodings
acting inside softmax attention are refused.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.errors import ParamsError

from .base import ModelSpec, Recommender, register_model
from .config import TokenMixingConfig, parse_options
from .dropout import Dropout
from .encodings.base import PositionalEncoding, Positions
from .sasrec import _PRESETS as SASREC_PRESETS
from .sasrec import SASRec, require_input_stage


class CausalTokenMixing(nn.Module):
    """Causal token-mixing MLP over end-aligned slots, with SASRec's call (x, pos, encoding) -> (B, L, D)."""

    def __init__(self, max_len: int, dropout: float = 0.0):
        super().__init__()
        n = self.max_len = max_len
        bound = 1.0 / math.sqrt(n)                                      # nn.Linear's init for fan-in n
        self.w1 = nn.Parameter(torch.empty(n, n).uniform_(-bound, bound))   # (n, n) W_1, D_S = n
        self.b1 = nn.Parameter(torch.empty(n).uniform_(-bound, bound))
        self.w2 = nn.Parameter(torch.empty(n, n).uniform_(-bound, bound))   # (n, n) W_2
        self.b2 = nn.Parameter(torch.empty(n).uniform_(-bound, bound))
        self.register_buffer("causal", torch.ones(n, n, dtype=torch.bool).tril(), persistent=False)
        self.drop = Dropout(dropout)

    def forward(self, x: torch.Tensor, pos: Positions, encoding: Optional[PositionalEncoding] = None) -> torch.Tensor:
        B, L, D = x.shape
        assert L <= self.max_len, f"sequence length {L} > max_len {self.max_len}"
        s = slice(self.max_len - L, self.max_len)                       # the last L slots
        w1 = (self.w1 * self.causal)[s, s]                              # (L, L) lower-triangular
        w2 = (self.w2 * self.causal)[s, s]                              # (L, L)
        keep = pos.mask[..., None].to(x.dtype)                          # (B, L, 1)
        h = F.gelu(torch.einsum("ij,bjd->bid", w1, x * keep) + self.b1[s, None]) * keep  # (B, L, D) hidden
        return torch.einsum("ij,bjd->bid", w2, self.drop(h)) + self.b2[s, None]        # (B, L, D)


def build_token_mixing(n_items: int, max_len: int, train, options=None,
                       encoding: Optional[PositionalEncoding] = None) -> Recommender:
    cfg: TokenMixingConfig = parse_options(TokenMixingConfig, "models", "token_mixing", options)
    if max_len < 1:
        raise ParamsError(f"token_mixing needs train.max_len >= 1, got {max_len}", "set train.max_len")
    require_input_stage(encoding, "token_mixing")
    return SASRec(n_items, max_len, dim=train.dim, heads=1, layers=train.layers, dropout=train.dropout,  # no heads
                  encoding=encoding, norm=cfg.norm, ffn_dim=cfg.ffn_dim,
                  mixer=lambda layer: CausalTokenMixing(max_len, train.dropout))


# 003 §4.2: SASRec with the attention swapped, its other settings "following author's suggestion":
# SASRec's `paper` preset (models/sasrec.py) without its attention settings: the out_proj option, heads, and
# Kang & McAuley's block (`norm: kang`), which normalises the queries only and takes keys and values from the
# raw input; a token mixer has one input, so there is no such split and the blocks keep seqpe's pre-norm
# (TokenMixingConfig refuses kang; walk 43b #7).
_PRESETS = {"paper": {**{k: v for k, v in SASREC_PRESETS["paper"].items() if k != "models"},
                      "train": {k: v for k, v in SASREC_PRESETS["paper"]["train"].items() if k != "heads"}}}

register_model(ModelSpec("token_mixing", build_token_mixing,
                         "SASRec with a causal MLP-Mixer token-mixing MLP; input-stage encodings",
                         "Tolstikhin et al. 2021; 003 Table 3", causal=True, presets=_PRESETS,
                         ignores={"heads": 1},                      # one mixer, no heads: runs as 1
                         takes="input-stage only (no q.k logits)"), options=TokenMixingConfig)
