"""003's "Linear Attention" baseline (Luo et al. §4.2, Table 3): SASRec with its self-attention
replaced by the linearised attention of Katharopoulos et al. 2020 ("Transformers are RNNs", 003
ref. [8]).

Notation used for tensor shapes:
    B  batch, L  padded length (LEFT padding), D  model size, H  heads, E  head size (D // H)

Katharopoulos et al. write attention with a general similarity (their Eq. 2,
V'_i = sum_j sim(Q_i, K_j) V_j / sum_j sim(Q_i, K_j)) and linearise it with a kernel feature map,
sim(q, k) = phi(q)^T phi(k) with phi(x) = elu(x) + 1 (§3.2); the causal form sums over j <= i only
(§3.3, their S_i = sum_{j<=i} phi(K_j) V_j^T and Z_i = sum_{j<=i} phi(K_j)):

    V'_i = phi(Q_i)^T S_i / phi(Q_i)^T Z_i

seqpe evaluates the same function in its quadratic form, [phi(Q) phi(K)^T masked to j <= i and real
keys] normalised per row, times V: identical values, and for seqpe's windows (n <= 200 items,
head size E ~ 50) the n x n weights are smaller than the n E^2 running sums of the recurrent form.
No 1/sqrt(d) scaling (the kernel replaces exp(q.k / sqrt(d))). Everything else is SASRec
(models/sasrec.py): item embedding * sqrt(d), the injected input-stage encoding, its blocks with
the point-wise FFN (`models.linear_attention.norm`: pre-LN by default), Q, K, V projections and, in
the `paper` preset, SASRec's own: no W_O and Kang & McAuley's block (`norm: kang`, queries from
LayerNorm(x), keys and values from x), since 003 §4.2 swaps only the attention of the authors'
SASRec (pre-LN before session 41, walk 41b #1).
Causal, so it trains on whole sequences like SASRec (003 Eq. 11). Encodings that act inside
softmax attention (RoPE, RMHA, ALiBi, CoPE, CAPE, PARec) have no logits to act on here and are
refused.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.errors import ParamsError

from .base import ModelSpec, Recommender, register_model
from .config import SASRecConfig, parse_options
from .dropout import Dropout
from .encodings.base import PositionalEncoding, Positions, allowed_keys
from .sasrec import _PRESETS as SASREC_PRESETS
from .sasrec import SASRec, require_input_stage


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1 > 0 (Katharopoulos et al. §3.2)."""
    return F.elu(x) + 1.0


def linear_attention_weights(q: torch.Tensor, k: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Row-normalised kernel weights phi(q_i).phi(k_j) over the allowed keys (B, H, Lq, L)."""
    sim = (feature_map(q) @ feature_map(k).transpose(-1, -2)) * allowed  # (B, H, Lq, L), >= 0
    return sim / sim.sum(-1, keepdim=True).clamp(min=1e-12)


class LinearAttention(nn.Module):
    """Causal linearised multi-head attention with SASRec's call (x, pos, encoding) -> (B, L, D)."""

    def __init__(self, dim: int, heads: int, dropout: float = 0.0, *, out_proj: bool = True):
        super().__init__()
        assert dim % heads == 0, f"dim {dim} must be divisible by heads {heads}"
        self.dim, self.heads = dim, heads
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim) if out_proj else nn.Identity()
        self.drop = Dropout(dropout)

    def _split(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, D) -> (B, H, L, E)
        B, L, _ = x.shape
        return x.view(B, L, self.heads, self.dim // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, pos: Positions, encoding: Optional[PositionalEncoding] = None,
                query: Optional[torch.Tensor] = None, *, self_query: bool = False) -> torch.Tensor:
        """`query` (B, L, D): the queries' input where it is not x, a per-position transform of it (the `kang`
        block's LayerNorm(x), `self_query`; keys and values still read x), as MultiHeadAttention takes it."""
        B, L, _ = x.shape
        assert query is None or (self_query and query.shape == x.shape), "queries are a per-position transform of x"
        allowed = allowed_keys(pos, L, causal=True)                      # (B, 1, L, L)
        q = self._split(self.q(x if query is None else query))           # (B, H, L, E)
        k, v = self._split(self.k(x)), self._split(self.v(x))            # (B, H, L, E) each
        probs = self.drop(linear_attention_weights(q, k, allowed))       # (B, H, L, L)
        out = (probs @ v).transpose(1, 2).reshape(B, L, self.dim)        # (B, L, D)
        return self.out(out)


def build_linear_attention(n_items: int, max_len: int, train, options=None,
                           encoding: Optional[PositionalEncoding] = None) -> Recommender:
    cfg: SASRecConfig = parse_options(SASRecConfig, "models", "linear_attention", options)
    if train.dim % train.heads:
        raise ParamsError(f"train.dim ({train.dim}) must be divisible by train.heads ({train.heads})",
                          "change train.dim or train.heads")
    require_input_stage(encoding, "linear_attention")
    return SASRec(n_items, max_len, dim=train.dim, heads=train.heads, layers=train.layers, dropout=train.dropout,
                  encoding=encoding, norm=cfg.norm, ffn_dim=cfg.ffn_dim, out_proj=cfg.out_proj,
                  mixer=lambda layer: LinearAttention(train.dim, train.heads, train.dropout, out_proj=cfg.out_proj))


# 003 §4.2: SASRec with the attention swapped, its other settings "following author's suggestion":
# SASRec's `paper` preset (models/sasrec.py), options under this model's name.
_PRESETS = {"paper": {**SASREC_PRESETS["paper"], "models": {"linear_attention": SASREC_PRESETS["paper"]["models"]["sasrec"]}}}

register_model(ModelSpec("linear_attention", build_linear_attention,
                         "SASRec with linearised causal attention (elu + 1 feature map); input-stage encodings",
                         "Katharopoulos et al. 2020; 003 Table 3", causal=True, presets=_PRESETS,
                         takes="input-stage only (no q.k logits)"), options=SASRecConfig)
