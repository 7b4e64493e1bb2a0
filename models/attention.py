"""Multi-head attention that takes an injected positional encoding.

Notation used for tensor shapes:
    B  batch, L  keys (padded sequence, LEFT padding), Lq  queries (L, or 1 for target attention)
    D  model size, H  heads, E  head size (D // H)

One module serves causal self-attention (SASRec), bidirectional self-attention
(PosRec's readout) and target attention (one query, e.g. a candidate or the last item,
attending over the sequence; CAPE 001 §4). The encoding's hooks are called in order
(models/encodings/base.py):

    q, k   = rotate(q, k, pos, layer)                 RoPE
    logits = q k^T / sqrt(E) + bias(q, k, pos, layer, query_input, allowed)
                                                      RMHA, ALiBi, CoPE, CAPE
    probs  = weights(softmax(logits), pos, layer)     PARec / FPARec (replace q.k entirely)
    out    = probs v + values(probs, v, pos, layer)   RMHA

`query_input` is what the queries are projected from (x, or `query` in target attention: the
target item's embedding), so CAPE's fusion acts on it (001 Eq. 5); `allowed` is the key mask.

An encoding with `needs_qk = False` (PARec family) gets no q/k projections: the
softmax it receives is uniform over the allowed keys and it returns its own weights.

Fast path: an encoding that acts only through rotate / bias (`fusable`, models/encodings/base.py)
runs as one `torch.nn.functional.scaled_dot_product_attention` call (flash / memory-efficient
kernels; `fused_attention`), the key mask and the bias folded into one float attn_mask, dropout
as its dropout_p; the others (PARec family: weights, RMHA: values) keep the explicit softmax. On
the CPU, training with dropout > 0 takes the explicit path too: SDPA's CPU kernel for that case is
the same explicit math with aten's slow `bernoulli_` mask, and the explicit path draws its mask
with models/dropout.py's (the same attention; its masks about 6x cheaper, forward and backward).
`SDPA = False` forces the explicit path everywhere (tests, debugging).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .dropout import Dropout, fast_on
from .encodings.base import PositionalEncoding, Positions, allowed_keys

_NONE = PositionalEncoding()
NORMS = ("pre", "post", "kang")     # TransformerBlock's LayerNorm placements
SDPA = True     # module switch: False runs every encoding through the explicit softmax path


def masked_softmax(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim where `allowed`; disallowed entries get exactly 0."""
    logits = logits.masked_fill(~allowed, float("-inf"))                 # (B, H, Lq, L)
    return torch.softmax(logits, dim=-1)


def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
                    bias: Optional[torch.Tensor], dropout_p: float = 0.0) -> torch.Tensor:
    """softmax(q k^T / sqrt(E) + bias over the allowed keys) v in one torch SDPA call.

    q (B, H, Lq, E), k and v (B, H, L, E), allowed (B, 1, Lq, L) bool, bias (B|1, H|1, Lq, L) or
    None. The mask is additive: 0 (+ bias) where allowed, -inf elsewhere. Returns (B, H, Lq, E).
    """
    bias = bias.to(q.dtype) if bias is not None else q.new_zeros(())
    mask = torch.where(allowed, bias, float("-inf"))                     # (B, H|1, Lq, L)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention (Vaswani et al. 2017) with encoding hooks.

    `layer` is the block index passed to the hooks (rope_one rotates only in block 0,
    PARec keeps one matrix per block). `out_proj=False` drops the output projection W_O
    (003 Eq. 6: the positional attention layer is softmax(R) V with W_V only, Table 1).
    """

    def __init__(self, dim: int, heads: int, dropout: float = 0.0, *, layer: int = 0,
                 causal: bool = True, qk: bool = True, out_proj: bool = True):
        super().__init__()
        assert dim % heads == 0, f"dim {dim} must be divisible by heads {heads}"
        self.dim, self.heads, self.layer, self.causal = dim, heads, layer, causal
        self.q = nn.Linear(dim, dim) if qk else None
        self.k = nn.Linear(dim, dim) if qk else None
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim) if out_proj else nn.Identity()
        self.drop = Dropout(dropout)

    def _split(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, D) -> (B, H, L, E)
        B, L, _ = x.shape
        return x.view(B, L, self.heads, self.dim // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, pos: Positions, encoding: Optional[PositionalEncoding] = None,
                query: Optional[torch.Tensor] = None, *, self_query: bool = False) -> torch.Tensor:
        """x (B, L, D) the sequence (keys and values); query (B, Lq, D) for target attention (default: x
        itself). `self_query`: the query is a per-position transform of x (Kang & McAuley's block projects the
        queries from LayerNorm(x), the keys and values from x; CARCA's profile block), so it is self-attention:
        the items' own positions, and the causal mask where the module is causal.

        Returns (B, Lq, D).
        """
        enc = encoding if encoding is not None else _NONE
        if query is not None and not self_query:
            pos = pos.as_target()                                         # the hooks place the query after the last
        q_in = x if query is None else query
        B, Lq, _ = q_in.shape
        allowed = allowed_keys(pos, Lq, self.causal and (query is None or self_query))   # (B, 1, Lq, L)
        v = self._split(self.v(x))                                        # (B, H, L, E)
        if self.q is not None and enc.needs_qk:
            q = self._split(self.q(q_in))                                 # (B, H, Lq, E)
            k = self._split(self.k(x))                                    # (B, H, L, E)
            q, k = enc.rotate(q, k, pos, self.layer)                      # (B, H, Lq, E), (B, H, L, E)
            bias = enc.bias(q, k, pos, self.layer, query_input=q_in, allowed=allowed)  # (B|1, H|1, Lq, L) or None
            p = self.drop.p if self.training else 0.0
            if SDPA and enc.fusable and (p == 0.0 or not fast_on(q.device)):
                return self._merge(fused_attention(q, k, v, allowed, bias, p))  # (B, Lq, D)
            logits = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))      # (B, H, Lq, L)
            if bias is not None:
                logits = logits + bias
        else:
            logits = torch.zeros(allowed.shape, dtype=v.dtype, device=v.device)  # (B, 1, Lq, L)
        probs = masked_softmax(logits, allowed)                           # (B, H|1, Lq, L)
        probs = enc.weights(probs, pos, self.layer, allowed)              # (B|1, H|1, Lq, L)
        probs = self.drop(probs)
        out = probs @ v                                                   # (B, H, Lq, E)
        extra = enc.values(probs, v, pos, self.layer)                     # (B, H, Lq, E) or None
        if extra is not None:
            out = out + extra
        return self._merge(out)

    def _merge(self, out: torch.Tensor) -> torch.Tensor:  # (B, H, Lq, E) -> (B, Lq, D), output projection
        B, _, Lq, _ = out.shape
        return self.out(out.transpose(1, 2).reshape(B, Lq, self.dim))


class FeedForward(nn.Module):
    """Position-wise FFN: Linear -> ReLU -> dropout -> Linear (SASRec's point-wise FFN)."""

    def __init__(self, dim: int, hidden: int, dropout: float = 0.0):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.drop = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, D) -> (B, L, D)
        return self.fc2(self.drop(F.relu(self.fc1(x))))


class TransformerBlock(nn.Module):
    """Attention + FFN with residuals; LayerNorm before (pre) or after (post) each sub-layer, or `kang`:
    the block of Kang & McAuley's released SASRec code (and of pmixer/SASRec.pytorch), which is neither:

        h = LN1(x);  x = h + Attn(queries h, keys and values x);  h = LN2(x);  x = h + FFN(h)

    The queries alone are normalised, and each residual starts from the normalised input, not from x."""

    def __init__(self, dim: int, heads: int, dropout: float, *, layer: int, causal: bool = True,
                 norm: str = "pre", ffn_dim: int = 0, qk: bool = True, out_proj: bool = True):
        super().__init__()
        assert norm in NORMS, f"norm must be one of {NORMS}, got {norm}"
        self.norm = norm
        self.attn = MultiHeadAttention(dim, heads, dropout, layer=layer, causal=causal, qk=qk, out_proj=out_proj)
        self.ffn = FeedForward(dim, ffn_dim or dim, dropout)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.drop = Dropout(dropout)

    def forward(self, x: torch.Tensor, pos: Positions, encoding: Optional[PositionalEncoding]) -> torch.Tensor:
        keep = pos.mask[..., None].to(x.dtype)                            # (B, L, 1)
        if self.norm == "pre":
            h = self.ln1(x)
            x = x + self.drop(self.attn(h, pos, encoding))                # (B, L, D)
            x = x + self.drop(self.ffn(self.ln2(x)))                      # (B, L, D)
        elif self.norm == "kang":
            h = self.ln1(x)                                               # (B, L, D) the queries only
            x = h + self.drop(self.attn(x, pos, encoding, query=h, self_query=True))  # (B, L, D)
            h = self.ln2(x)
            x = h + self.drop(self.ffn(h))                                # (B, L, D)
        else:
            x = self.ln1(x + self.drop(self.attn(x, pos, encoding)))      # (B, L, D)
            x = self.ln2(x + self.drop(self.ffn(x)))                      # (B, L, D)
        return x * keep                                                   # padding rows stay 0
