"""FGNN (Qiu, Li, Huang, Yin, CIKM 2019 "Rethinking the Item Order in Session-based
Recommendation with Graph Neural Networks"; 000 Table 2, ref. [30]).

Notation used for tensor shapes:
    B  batch, L  padded length (left padding, 0 = pad), n  node slots, D  hidden size,
    K  heads, N  n_items + 1

    1. session graph (models/graph.py): one node per unique item, an edge v_t -> v_{t+1} weighted
       by its frequency w_ij, plus a self-loop of weight 1 on every node that has none
    2. WGAT, the weighted graph attention layer (`wgat_layers` of them, `wgat_heads` heads averaged):
           e_ij  = LeakyReLU(a^T [W x_i || W x_j || w_ij])          j in N(i): i itself and the items
           alpha = softmax_j(e_ij),   x'_i = mean_k sum_j alpha^k_ij W^k x_j + b      that follow it
    3. readout, FGNN's "item order" learner (a GRU-driven Set2Set, Vinyals et al. 2016):
           q_t = GRU(q*_{t-1}),  a_i = softmax_i(x_i . q_t),  r_t = sum_i a_i x_i,  q*_t = [q_t || r_t]
       for `readout_steps` steps from q*_0 = 0; session s = W_out q*_T (2D -> D, no bias)
    4. score_j = s . x_j with the input item table (softmax cross-entropy, the trainer's loss)

The formulation follows the authors' released PyTorch-Geometric code (github.com/RuihongQiu/FGNN:
WeightedGATConv with the edge weight appended to the attention input and self-loops added where
missing, GRUSet2Set with dot-product attention), as far as it is published: its model file for the
final FGNN is missing there, so the layer count, heads and readout steps (3, 8 averaged, 3) and
the absence of a nonlinearity between layers follow a public re-implementation of that code;
treat them as defaults, not as the paper's verified settings.

Direction: the released WeightedGATConv normalises its attention over edge_index[0], the sender
of an edge, as PyTorch-Geometric 1.0 (the version it was written for) also gathered messages at
edge_index[0]; with edges [senders, receivers] each item therefore attends over its successors.
It matters: with successors the last item is the one node that sees only itself, which is how the
order-free readout finds it. Gathering at the receivers instead (later PyG's convention), the
default model reaches train / held-out HR@1 0.52 / 0.21 on tests/test_models.py's rule data
(next item = f(last item)) after 25 epochs; attending over successors 0.85 / 0.83 (1.0 / 0.88
after 60 epochs, the test's budget). Written as dense batched tensors
(no PyG dependency): the graphs hold at most a few dozen nodes. No positional encoding; the
readout ignores node order by design (the paper's point: the GNN and readout learn the order).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.errors import ParamsError

from .base import ModelSpec, Recommender, item_table, register_model
from .dropout import Dropout
from .graph import build_graph
from .model_config import FGNNConfig, model_options


class WGAT(nn.Module):
    """One weighted graph attention layer over dense session graphs (heads averaged)."""

    def __init__(self, dim: int, heads: int, slope: float, dropout: float):
        super().__init__()
        self.dim, self.heads, self.slope = dim, heads, slope
        self.w = nn.Linear(dim, heads * dim, bias=False)                # W^k of every head
        self.att = nn.Parameter(torch.empty(heads, 2 * dim + 1))        # a^k over [W x_i || W x_j || w_ij]
        self.bias = nn.Parameter(torch.zeros(dim))
        self.drop = Dropout(dropout)
        nn.init.xavier_uniform_(self.w.weight)
        nn.init.xavier_uniform_(self.att)

    def forward(self, x: torch.Tensor, w: torch.Tensor, edge: torch.Tensor) -> torch.Tensor:
        """x (B, n, D) node features; w (B, n, n) weight of edge i -> j at [i, j] (j follows i, or j = i:
        the self-loop); edge (B, n, n) bool, the neighbours node i attends over."""
        B, n, D = x.shape
        z = self.w(x).view(B, n, self.heads, D)                         # (B, n, K, D)
        a_i = (z * self.att[:, :D]).sum(-1)                             # (B, n, K) receiver part
        a_j = (z * self.att[:, D:2 * D]).sum(-1)                        # (B, n, K) sender part
        e = a_i[:, :, None] + a_j[:, None] + w[..., None] * self.att[:, 2 * D]  # (B, n, n, K)
        e = F.leaky_relu(e, self.slope).masked_fill(~edge[..., None], torch.finfo(e.dtype).min)
        alpha = self.drop(torch.softmax(e, dim=2) * edge[..., None])    # (B, n, n, K) rows of empty slots: 0
        out = torch.einsum("bijk,bjkd->bikd", alpha, z)                 # (B, n, K, D)
        return out.mean(2) + self.bias                                  # (B, n, D)


class GRUSet2Set(nn.Module):
    """FGNN's readout: T GRU steps of content attention over the nodes, q*_T = [q_T || r_T] (B, 2D)."""

    def __init__(self, dim: int, steps: int):
        super().__init__()
        self.steps = steps
        self.gru = nn.GRUCell(2 * dim, dim)
        for p in (self.gru.weight_ih, self.gru.weight_hh):              # orthogonal, as the released code
            nn.init.orthogonal_(p)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, n, D = x.shape
        q_star = x.new_zeros(B, 2 * D)                                  # (B, 2D)
        h = x.new_zeros(B, D)                                           # (B, D)
        for _ in range(self.steps):
            h = self.gru(q_star, h)                                     # (B, D) q_t
            e = (x * h[:, None]).sum(-1).masked_fill(~mask, float("-inf"))  # (B, n)
            a = torch.softmax(e, dim=-1)                                # (B, n)
            r = (a[..., None] * x).sum(1)                               # (B, D)
            q_star = torch.cat((h, r), dim=-1)                          # (B, 2D)
        return q_star


class FGNN(Recommender):
    def __init__(self, n_items: int, dim: int, dropout: float, cfg: FGNNConfig):
        super().__init__()
        self.n_items, self.cfg = n_items, cfg
        self.emb = item_table(n_items, dim)                             # (N, D) node features and scores
        self.layers = nn.ModuleList(WGAT(dim, cfg.wgat_heads, cfg.negative_slope, dropout)
                                    for _ in range(cfg.wgat_layers))
        self.readout = GRUSet2Set(dim, cfg.readout_steps)
        self.out = nn.Linear(2 * dim, dim, bias=False)                  # q*_T -> session vector

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:
        g = build_graph(seqs, static=self.static_step, max_len=self.max_len)
        n = g.items.size(1)
        eye = torch.eye(n, dtype=torch.bool, device=seqs.device)
        real = g.mask[:, :, None] & g.mask[:, None, :]                  # (B, n, n)
        w = g.adj                                                       # (B, n, n) [i, j] = count of i -> j
        w = torch.where(eye & (w == 0), torch.ones_like(w), w) * real   # self-loops where missing
        edge = w > 0                                                    # (B, n, n)
        x = self.emb(g.items)                                           # (B, n, D)
        for layer in self.layers:
            x = layer(x, w, edge) * g.mask[..., None].to(x.dtype)       # (B, n, D)
        return self.out(self.readout(x, g.mask))                        # (B, D)

    def item_weights(self) -> torch.Tensor:
        return self.emb.weight                                          # (N, D)


def build_fgnn(n_items: int, max_len: int, train, options=None, encoding=None) -> Recommender:
    cfg = model_options(FGNNConfig, "fgnn", options)
    if min(cfg.wgat_layers, cfg.wgat_heads, cfg.readout_steps) < 1:
        raise ParamsError(f"models.fgnn needs wgat_layers, wgat_heads and readout_steps >= 1, got "
                          f"{cfg.wgat_layers}, {cfg.wgat_heads}, {cfg.readout_steps}", "use e.g. 3, 8, 3")
    return FGNN(n_items, train.dim, train.dropout, cfg)


register_model(ModelSpec("fgnn", build_fgnn, "FGNN: weighted graph attention + GRU Set2Set readout",
                         "Qiu et al. 2019 (000 Table 2)", uses_encoding=False,
                         ignores=("layers", "heads")), options=FGNNConfig)   # models.fgnn.wgat_layers, wgat_heads
