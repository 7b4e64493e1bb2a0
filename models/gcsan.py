"""GC-SAN (Xu et al., IJCAI 2019; 000 Table 2, §5.4): SR-GNN's gated GNN, then self-attention.

Notation used for tensor shapes:
    B  batch, L  padded length (left padding, 0 = pad), n  node slots, D  hidden size,
    N  n_items + 1

    1. session graph and GGNN as SR-GNN (Xu et al. §3.2 = SR-GNN Eqs. 1-5): node vectors h,
       gathered back to the session's positions H = [h_1, ..., h_l] (models/graph.py)
    2. self-attention layers (§3.3):
           F = softmax((H W_Q)(H W_K)^T / sqrt(d)) (H W_V)                     (Eq. 6)
           E = ReLU(F W_1 + b_1) W_2 + b_2 + F                                 (Eq. 7)
       stacked k = train.layers times, E^(j) = SAN(E^(j-1)) (Eq. 8); Q, K, V projections and no
       output projection; the residual only around the feed-forward part, no LayerNorm, as the
       equations are written (RecBole's GCSAN swaps in a standard Transformer encoder instead)
    3. prediction (§3.4): S_f = w E^(k)_last + (1 - w) h_last (Eq. 9); score_j = S_f . v_j (Eq. 10)

The paper is not among the four of pipeline/REFERENCE.md §7; the equations above are
written from it and cross-read with RecBole's GCSAN. No `paper` preset: its training settings
could not be checked here. The attention runs over the whole session (no causal mask: Eq. 6 has
none, and only the last position is read). GC-SAN has no positional encoding (uses_encoding False). `anchors: true` adds
PosRec's anchor-node edges to the GGNN (000 §5.4, Figs. 5-6, "GC-SAN+ANC").
"""
from __future__ import annotations

import math

import torch
from torch import nn

from pipeline.errors import ParamsError

from .attention import FeedForward, MultiHeadAttention
from .base import ModelSpec, Recommender, register_model
from .dropout import Dropout
from .encodings.base import Positions
from .graph import GatedGraphLayer, build_graph, neighbour_weights
from .model_config import GCSANConfig, model_options
from .srgnn import node_states_at


class SelfAttentionLayer(nn.Module):
    """GC-SAN Eqs. 6-7: F = Attention(E W_Q, E W_K, E W_V); E' = FFN(F) + F."""

    def __init__(self, dim: int, heads: int, dropout: float, layer: int):
        super().__init__()
        self.attn = MultiHeadAttention(dim, heads, dropout, layer=layer, causal=False, out_proj=False)
        self.ffn = FeedForward(dim, dim, dropout)
        self.drop = Dropout(dropout)

    def forward(self, e: torch.Tensor, pos: Positions) -> torch.Tensor:
        f = self.attn(e, pos)                                           # (B, L, D) Eq. 6
        return (self.drop(self.ffn(f)) + f) * pos.mask[..., None].to(f.dtype)  # (B, L, D) Eq. 7


class GCSAN(Recommender):
    def __init__(self, n_items: int, dim: int, heads: int, layers: int, dropout: float, cfg: GCSANConfig):
        super().__init__()
        self.n_items, self.cfg = n_items, cfg
        self.emb = nn.Embedding(n_items + 1, dim, padding_idx=0)        # (N, D) nodes and scores
        self.gnn = GatedGraphLayer(dim, sum_bias=True)                  # shared over the steps (GGNN); SR-GNN's biases
        self.layers = nn.ModuleList(SelfAttentionLayer(dim, heads, dropout, i) for i in range(layers))
        bound = 1.0 / math.sqrt(dim)                                    # SR-GNN's uniform init, as GC-SAN's code
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)
        with torch.no_grad():
            self.emb.weight[0].zero_()

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:
        g = build_graph(seqs, static=self.static_step, max_len=self.max_len)
        w_in, w_out = neighbour_weights(g, anchors=self.cfg.anchors, binary=self.cfg.binary_adjacency)  # (B, n, n)
        h = self.emb(g.items)                                           # (B, n, D)
        for _ in range(self.cfg.steps):
            h = self.gnn(h, w_in, w_out)                                # (B, n, D)
        seq_h = node_states_at(h, g.alias)                              # (B, L, D) H, 0 at padding
        pos = Positions.from_seqs(seqs)
        e = seq_h
        for layer in self.layers:
            e = layer(e, pos)                                           # (B, L, D) E^(j)
        w = self.cfg.weight
        return w * e[:, -1] + (1 - w) * seq_h[:, -1]                    # (B, D) Eq. 9, left padding

    def item_weights(self) -> torch.Tensor:
        return self.emb.weight                                          # (N, D)


def build_gcsan(n_items: int, max_len: int, train, options=None, encoding=None) -> Recommender:
    cfg = model_options(GCSANConfig, "gcsan", options)
    if not 0.0 <= cfg.weight <= 1.0:
        raise ParamsError(f"models.gcsan.weight must be in [0, 1], got {cfg.weight}", "use e.g. 0.6")
    if cfg.steps < 1 or train.layers < 1:
        raise ParamsError(f"GC-SAN needs models.gcsan.steps >= 1 and train.layers >= 1, got {cfg.steps}, "
                          f"{train.layers}", "use steps 1 and layers 1 or more")
    if train.dim % train.heads:
        raise ParamsError(f"train.dim ({train.dim}) must be divisible by train.heads ({train.heads})",
                          "change train.dim or train.heads")
    return GCSAN(n_items, train.dim, train.heads, train.layers, train.dropout, cfg)


register_model(ModelSpec("gcsan", build_gcsan, "GC-SAN: SR-GNN's gated GNN + self-attention layers",
                         "Xu et al. 2019 (000 Table 2)", uses_encoding=False), options=GCSANConfig)
