"""SR-GNN (Wu et al. 2019; 000 Table 2): gated GNN on the session graph + attention readout.

Notation used for tensor shapes:
    B  batch, L  padded length (left padding, 0 = pad), n  node slots, D  hidden size
    N  n_items + 1

s_l = v_last;  a_i = q^T sigmoid(W1 v_last + W2 v_i + c);  s_g = sum_i a_i v_i over the
sequence positions;  s_h = W3 [s_l ; s_g];  score_j = s_h . e_j. The graph comes from
models/graph.py (batched, degree-normalised, edge presence by default as SR-GNN's code).

`anchors: true` is 000 §5.4's ablation (Figs. 5-6: anchor-node aggregation added to SR-GNN): the
GGNN's in-/out-neighbourhoods also hold PosRec's anchors (first item in every N_in, last item in
every N_out, repeated items in both, weighted by hop distance; models/graph.py's anchor_weights,
the same code PosRec runs), and each row is then degree-normalised as SR-GNN's own edges are.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .base import ModelSpec, Recommender, register_model
from .graph import GatedGraphLayer, build_graph, neighbour_weights
from .model_config import SRGNNConfig, model_options


def node_states_at(h: torch.Tensor, alias: torch.Tensor) -> torch.Tensor:
    """Gather node states (B, n, D) back to sequence positions (B, L, D); padding -> 0."""
    h = F.pad(h, (0, 0, 0, 1))                                          # (B, n+1, D) slot n = zeros
    return h.gather(1, alias[:, :, None].expand(-1, -1, h.size(-1)))    # (B, L, D)


class SRGNN(Recommender):
    def __init__(self, n_items: int, dim: int, cfg: SRGNNConfig):
        super().__init__()
        self.n_items, self.cfg = n_items, cfg
        self.emb = nn.Embedding(n_items + 1, dim, padding_idx=0)
        self.gnn = GatedGraphLayer(dim, sum_bias=True)                  # shared over the steps (GGNN); SR-GNN's biases
        self.w1 = nn.Linear(dim, dim)
        self.w2 = nn.Linear(dim, dim, bias=False)
        self.q = nn.Linear(dim, 1, bias=False)
        self.w3 = nn.Linear(2 * dim, dim, bias=False)
        bound = 1.0 / math.sqrt(dim)                                    # SR-GNN's uniform init
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:
        g = build_graph(seqs, static=self.static_step, max_len=self.max_len)
        w_in, w_out = neighbour_weights(g, anchors=self.cfg.anchors, binary=self.cfg.binary_adjacency)  # (B, n, n)
        h = self.emb(g.items)                                           # (B, n, D)
        for _ in range(self.cfg.steps):
            h = self.gnn(h, w_in, w_out)                                # (B, n, D)
        seq_h = node_states_at(h, g.alias)                              # (B, L, D)
        last = seq_h[:, -1]                                             # (B, D) left padding
        alpha = self.q(torch.sigmoid(self.w1(last)[:, None, :] + self.w2(seq_h)))  # (B, L, 1)
        s_g = (alpha * (seqs != 0)[:, :, None] * seq_h).sum(1)          # (B, D)
        return self.w3(torch.cat([last, s_g], dim=-1))                  # (B, D)

    def item_weights(self) -> torch.Tensor:
        return self.emb.weight                                          # (N, D)


def build_srgnn(n_items: int, max_len: int, train, options=None, encoding=None) -> Recommender:
    return SRGNN(n_items, train.dim, model_options(SRGNNConfig, "srgnn", options))


register_model(ModelSpec("srgnn", build_srgnn, "SR-GNN: gated GNN on the session graph, attention readout",
                         "Wu et al. 2019 (000 Table 2)", uses_encoding=False,
                         ignores=("layers", "heads", "dropout"),    # models.srgnn.steps is its depth
                         # SR-GNN's main.py defaults; its --patience 10 too (params.yaml's 3 stopped a step-decayed
                         # run SR-GNN's code would go on with, walk 43b #8). It counts epochs without a better
                         # test Recall or MRR; seqpe's patience counts valid epochs, as everywhere
                         presets={"paper": {"epochs": 30, "batch_size": 100, "dim": 100, "lr": 1e-3,
                                            "weight_decay": 1e-5, "lr_schedule": "step", "lr_step": 3,
                                            "lr_gamma": 0.1, "max_len": 200, "patience": 10}}), options=SRGNNConfig)
