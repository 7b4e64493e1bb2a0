"""STAMP (Liu et al. 2018), optionally with a positional encoding (000 Table 3: STAMP+LDPE).

Notation used for tensor shapes:
    B  batch, L  padded length (left padding, 0 = pad), D  embedding size, N  n_items + 1

x_i = item embedding (+ the injected encoding's `embed`), m_s = mean_i x_i, m_t = x_last;
a_i = w0^T sigmoid(W1 x_i + W2 m_t + W3 m_s + b_a);  m_a = sum_i a_i x_i;
h_s = tanh(A m_a + b_s), h_t = tanh(B m_t + b_t);  score_j = <h_s, h_t, x_j> (trilinear),
so `encode` returns h_s * h_t and the item table is the embedding.

The defaults are the paper's equations. Two options give the forward pass of STAMP's released code
(uestcnlp/STAMP, model/STAMP_cikm.py), which differs from them in two places (RecBole's STAMP follows
the first): `models.stamp.mean_residual` adds the session mean to the attention's output
(m_a = sum_i a_i x_i + m_s, the code's `attout + pool_out`), and `models.stamp.emb_max_norm` scales
every looked-up input embedding down to that L2 norm (the code's `embedding_lookup(max_norm=1.5)`; the
table the scores are taken against is not clipped, as there). Neither is on by default: 000 does not
say which STAMP it ran, and seqpe's STAMP follows the paper (bench/results/reproduction.md measures
both against 000 Table 3).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from pipeline.errors import ParamsError

from .base import ModelSpec, Recommender, register_model
from .encodings.base import PositionalEncoding, Positions
from .model_config import StampConfig, model_options


class STAMP(Recommender):
    def __init__(self, n_items: int, dim: int, cfg: StampConfig, encoding: Optional[PositionalEncoding]):
        super().__init__()
        self.n_items = n_items
        self.emb = nn.Embedding(n_items + 1, dim, padding_idx=0)
        self.encoding = encoding if encoding is not None else PositionalEncoding()
        self.mean_residual = cfg.mean_residual
        self.emb_max_norm = cfg.emb_max_norm
        self.w0 = nn.Linear(dim, 1, bias=False)
        self.w1 = nn.Linear(dim, dim, bias=False)
        self.w2 = nn.Linear(dim, dim, bias=False)
        self.w3 = nn.Linear(dim, dim)                                   # its bias is b_a
        self.mlp_s = nn.Linear(dim, dim)
        self.mlp_t = nn.Linear(dim, dim)
        for name, p in self.named_parameters():            # STAMP's own initialisation
            if name.startswith("encoding."):
                continue
            if name == "emb.weight":
                nn.init.normal_(p, 0.0, cfg.emb_std)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)
            else:
                nn.init.normal_(p, 0.0, cfg.init_std)

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:
        pos = Positions.from_seqs(seqs)
        keep = pos.mask[:, :, None].to(self.emb.weight.dtype)           # (B, L, 1)
        e = self.emb(seqs)                                              # (B, L, D)
        if self.emb_max_norm > 0:                                       # the released code's clipped lookup
            e = e * (self.emb_max_norm / e.norm(dim=-1, keepdim=True).clamp(min=1e-12)).clamp(max=1.0)
        x = self.encoding.embed(e, pos) * keep                          # (B, L, D)
        m_s = x.sum(1) / pos.lengths.clamp(min=1)[:, None]              # (B, D)
        m_t = x[:, -1]                                                  # (B, D) left padding
        alpha = self.w0(torch.sigmoid(self.w1(x) + self.w2(m_t)[:, None] + self.w3(m_s)[:, None]))  # (B, L, 1)
        m_a = (alpha * keep * x).sum(1)                                 # (B, D)
        if self.mean_residual:
            m_a = m_a + m_s
        return torch.tanh(self.mlp_s(m_a)) * torch.tanh(self.mlp_t(m_t))  # (B, D)

    def item_weights(self) -> torch.Tensor:
        return self.emb.weight                                          # (N, D)


def build_stamp(n_items: int, max_len: int, train, options=None, encoding=None) -> Recommender:
    cfg = model_options(StampConfig, "stamp", options)
    if not cfg.emb_max_norm >= 0:
        raise ParamsError(f"models.stamp.emb_max_norm must be 0 (off) or a positive norm, got {cfg.emb_max_norm}",
                          "set models.stamp.emb_max_norm=1.5 (STAMP's released code) or 0")
    if encoding is not None and type(encoding).embed is PositionalEncoding.embed and encoding.name != "none":
        raise ParamsError(f"STAMP adds the encoding to its item embeddings, but '{encoding.name}' acts "
                          "inside attention and would change nothing",
                          "pick an input-stage encoding (e.g. ldpe, lpe, dpe) or none")
    return STAMP(n_items, train.dim, cfg, encoding)


register_model(ModelSpec("stamp", build_stamp, "STAMP: short-term attention/memory priority (+ optional encoding)",
                         "Liu et al. 2018; 000 Table 3", uses_encoding=True,
                         ignores=("layers", "heads", "dropout"),    # input-stage encodings only (read neither)
                         # 000's settings as PosRec's preset pins them, patience 0 included (every epoch runs, the
                         # best valid one is kept; params.yaml's 3 applied before, walk 43b #8)
                         presets={"paper": {"encoding": "ldpe", "epochs": 30, "batch_size": 100, "dim": 100,
                                            "lr": 1e-3, "weight_decay": 1e-5, "lr_schedule": "step",
                                            "lr_step": 3, "lr_gamma": 0.1, "max_len": 200, "patience": 0}},
                         takes="input-stage only (added to the item embeddings)"), options=StampConfig)
