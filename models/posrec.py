"""PosRec (Qiu et al., TOIS 2021; 000 §4.3): PGGNN + bidirectional Transformer readout.

Notation used for tensor shapes:
    B  batch, L  padded length (left padding, 0 = pad), n  node slots (unique items),
    D  hidden size, N  n_items + 1

    1. session graph (§4.3.1): one node per unique item, frequency-weighted directed
       edges (models/graph.py, batched on the device)
    2. PGGNN (§4.3.2): GGNN message passing (Eqs. 7-8) whose in-/out-neighbourhoods also
       hold the anchors: the first item joins every N_in, the last item every N_out,
       repeated items both, weighted by hop distance on the undirected graph. An anchor that is
       also a neighbour sends both messages (its transition count and its distance: 000 writes
       N'_in as a set union, whose weight for such a node it does not give; models/graph.py).
       Eq. 7 has no bias: `--preset paper` builds none (models.posrec.bias: false); the default
       keeps the edge Linear's bias of SR-GNN's code (models/graph.py GatedGraphLayer)
    3. readout (§4.3.3): H = Transformer(X' + P) over the NODES, bidirectional, where P
       is the injected encoding of the node positions: a repeated item takes the forward
       part of its first appearance and the backward part of its last (Eq. 9)
    4. h = l0 X'_last + l1 H_last + l2 H_first (Eq. 10); scores = X h (Eq. 11)

The encoding is an injected object (default LDPE), so 000 Figs. 3-4 re-run with any
encoding of the library: `seqpe train diginetica --model posrec --encoding spe`.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from pipeline.errors import ParamsError

from .attention import TransformerBlock
from .base import ModelSpec, Recommender, item_table, register_model
from .dropout import Dropout
from .encodings.base import PositionalEncoding
from .graph import GatedGraphLayer, build_graph, neighbour_weights
from .model_config import PosRecConfig, model_options


def at_slot(x: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    """x (B, n, D) at one node slot per row (B,) -> (B, D)."""
    return x.gather(1, slot[:, None, None].expand(-1, 1, x.size(-1))).squeeze(1)


class PosRec(Recommender):
    def __init__(self, n_items: int, dim: int, heads: int, layers: int, dropout: float,
                 cfg: PosRecConfig, encoding: PositionalEncoding):
        super().__init__()
        self.n_items, self.cfg = n_items, cfg
        self.emb = item_table(n_items, dim)                             # (N, D) X: nodes and scores
        self.drop = Dropout(dropout)
        self.pggnn = GatedGraphLayer(dim, edge_bias=cfg.bias)           # shared over the steps (GGNN)
        self.encoding = encoding
        qk = encoding.needs_qk
        self.blocks = nn.ModuleList(
            TransformerBlock(dim, heads, dropout, layer=i, causal=False, norm=cfg.norm, qk=qk)
            for i in range(layers))

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:
        g = build_graph(seqs, static=self.static_step, max_len=self.max_len)
        w_in, w_out = neighbour_weights(g, anchors=self.cfg.anchors, normalise=self.cfg.normalise)  # (B, n, n)
        keep = g.mask[:, :, None].to(self.emb.weight.dtype)             # (B, n, 1)
        x = self.drop(self.emb(g.items))                                # (B, n, D)
        for _ in range(self.cfg.gnn_steps):
            x = self.pggnn(x, w_in, w_out) * keep                       # (B, n, D) X'
        h = self.encoding.embed(x, g.positions) * keep                  # (B, n, D) X' + P
        for block in self.blocks:
            h = block(h, g.positions, self.encoding)                    # (B, n, D) H
        c = self.cfg
        return (c.lambda0 * at_slot(x, g.last) + c.lambda1 * at_slot(h, g.last)
                + c.lambda2 * at_slot(h, g.first))                      # (B, D) Eq. 10

    def item_weights(self) -> torch.Tensor:
        return self.emb.weight                                          # (N, D) X of Eq. 11


def build_posrec(n_items: int, max_len: int, train, options=None,
                 encoding: Optional[PositionalEncoding] = None) -> Recommender:
    cfg = model_options(PosRecConfig, "posrec", options)
    if cfg.norm not in ("pre", "post"):
        raise ParamsError(f"models.posrec.norm must be 'pre' or 'post', got {cfg.norm!r}", "use pre or post")
    if cfg.gnn_steps < 1:
        raise ParamsError(f"models.posrec.gnn_steps must be >= 1, got {cfg.gnn_steps}", "use 1 (the paper's)")
    if encoding is None:
        from .encodings import build_encoding
        encoding = build_encoding("ldpe", dim=train.dim, max_len=train.max_len, heads=train.heads,
                                  layers=train.layers)
    return PosRec(n_items, train.dim, train.heads, train.layers, train.dropout, cfg, encoding)


# 000 §5.1.5 with pipeline/REFERENCE.md §6: one PGGNN layer, one attention layer, Adam lr 1e-3 x0.1
# every 3 epochs, batch 100, embedding 100, L2 (SR-GNN's 1e-5), 4 epochs, LDPE,
# lambda0 = lambda1 = 1; lambda2 = 1 on Diginetica and 0.5 on Yoochoose; Eq. 7's raw message
# sums (normalise false, see PosRecConfig.normalise). `paper` picks the
# variant from the dataset name (pipeline/presets.py); --preset paper_diginetica / paper_yoochoose
# name it for datasets called otherwise (presets.resolve: recorded in run.json as preset paper with
# that variant, as every model's NAME_VARIANT is). Other datasets get lambda2 = 1.
_PAPER_TRAIN = {"encoding": "ldpe", "epochs": 4, "batch_size": 100, "dim": 100, "layers": 1, "heads": 1,
                "lr": 1e-3, "weight_decay": 1e-5, "lr_schedule": "step", "lr_step": 3, "lr_gamma": 0.1,
                "dropout": 0.0, "patience": 0, "max_len": 200}
_LAMBDAS = {"diginetica": {"lambda0": 1.0, "lambda1": 1.0, "lambda2": 1.0},
            "yoochoose": {"lambda0": 1.0, "lambda1": 1.0, "lambda2": 0.5}}
_LAMBDAS = {ds: {**lam, "normalise": False, "bias": False} for ds, lam in _LAMBDAS.items()}   # Eq. 7: raw weighted
                                                                                # sums, no bias
_PRESETS = {
    "paper": {"train": _PAPER_TRAIN, "models": {"posrec": _LAMBDAS["diginetica"]},
              "datasets": {ds: {"models": {"posrec": lam}} for ds, lam in _LAMBDAS.items()}},
}

register_model(ModelSpec("posrec", build_posrec, "PosRec: position-aware gated GNN + bidirectional "
                         "Transformer readout with (L)DPE", "000 §4.3", uses_encoding=True,
                         presets=_PRESETS), options=PosRecConfig)
