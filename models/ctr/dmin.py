"""DMIN (Xiao et al., "Deep Multi-Interest Network for Click-through Rate Prediction", CIKM 2020)
with an injected positional encoding, as CAPE runs it (001 §5.1.2).

Notation used for tensor shapes:
    B  batch, L  history length (LEFT padding), D  item width F * E, H  heads = interests
    (train.heads), E_h = D / H  one interest's width, S  side width

The formulation implemented, read from the paper's description (its "Behavior Refiner Layer" and
"Multi-Interest Extractor Layer") and its authors' released TensorFlow model (the DMIN user module
in mengxiaozhibo's DUMN code), stated exactly because the paper is short:

1. Behavior Refiner Layer: one multi-head self-attention block over the behaviour embeddings
   e_1..e_L, causal as in the authors' code (models/attention.py's TransformerBlock: attention +
   point-wise FFN of width 2 D, residuals, LayerNorm `norm`), giving refined z_1..z_L. Its
   auxiliary loss is DIEN's: z_t scores e_{t+1} above a negative behaviour (another user's, from
   the batch), L = L_target + alpha L_aux (alpha = `aux_weight`; train mode only).
2. Multi-Interest Extractor Layer: a second causal multi-head self-attention over z with H heads
   and NO output projection, so head h yields its own sequence I^h_1..I^h_L (width E_h); each head
   gets its own point-wise FFN with a residual (one grouped 1x1 convolution; the authors' code
   gives every head its own dense layers, "heads do not share parameters").
3. Interest h = sum_j w^h_j I^h_j with w^h = softmax_j(a_h([I^h_j, t_h, I^h_j - t_h, I^h_j * t_h]))
   a DIN-style unit per head (its own MLP) against t_h, the target projected into head h's
   subspace (one Linear D -> D split into heads).
4. logit = MLP([side, t, interest_1 .. interest_H]).

The paper feeds a learned position embedding p_j into step 3's unit. Under CAPE's protocol that is
DMIN's own PE, removed for "None" (001 §5.1.1: "If a backbone originally contains a PE method, we
will remove the related code"; §5.1.2: "We add PE in both target attention and self attention
with same position embedding dimension"), so positions come from the injected encoding only:
    naive PE (lpe)   added to the behaviour embeddings before the refiner
    RoPE / CoPE / CAPE / others   in both self-attention layers (layers 0, 1) through
                     models/attention.py, and in step 3's units (layer 2) through
                     models/ctr/layers.py:hooked_scores: RoPE rotates t_h and I^h per head, CoPE /
                     CAPE add z[p_j] to each unit's score (001 Eq. 8, gates from that score, Eq. 1);
                     CAPE fuses the raw target t (Eq. 5)
Encodings acting only through q.k (RMHA, ALiBi, PARec family) are refused (step 3 is not q.k).
"""
from __future__ import annotations

from typing import Optional, Union

import torch
from torch import nn

from ..attention import MultiHeadAttention, TransformerBlock
from ..base import ModelSpec, register_model
from ..dropout import Dropout
from .base import CTRBatch, CTREmbedding, CTRModel, CTROutput, CTRSchema, EncodingChoice, encoding_choice, paper_preset
from .config import DMINConfig, ctr_options
from .layers import MLP, ActivationUnit, check_heads, check_unit_encoding, hooked_scores, masked_softmax, next_behaviour_loss


class DMIN(CTRModel):
    def __init__(self, schema: CTRSchema, *, field_dim: int, max_len: int, heads: int, dropout: float,
                 cfg: DMINConfig, encoding: Optional[EncodingChoice] = None):
        super().__init__()
        self.schema, self.cfg, self.max_len, self.heads = schema, cfg, max_len, heads
        self.embedding = CTREmbedding(schema, field_dim)
        D = self.embedding.dim
        self.encoding = (encoding or EncodingChoice()).build(dim=D, max_len=max_len, heads=heads, layers=3)
        check_unit_encoding(self.encoding, "dmin")
        self.drop = Dropout(dropout)
        self.refiner = TransformerBlock(D, heads, dropout, layer=0, causal=True, norm=cfg.norm,
                                        ffn_dim=cfg.ffn_dim or 2 * D)
        self.extractor = MultiHeadAttention(D, heads, dropout, layer=1, causal=True, out_proj=False)
        self.head_ffn = nn.Sequential(nn.Conv1d(D, 2 * D, 1, groups=heads), nn.ReLU(),
                                      nn.Conv1d(2 * D, D, 1, groups=heads))  # per-head FFN, E_h -> 2 E_h -> E_h
        self.target_proj = nn.Linear(D, D)                                # t -> [t_1 .. t_H]
        self.units = nn.ModuleList(ActivationUnit(D // heads, cfg.attention_hidden, cfg.attention_activation)
                                   for _ in range(heads))
        self.dnn = MLP(self.embedding.side_dim + 2 * D, cfg.dnn_hidden, 1, cfg.activation, dropout, cfg.batch_norm)

    def unit_scores(self, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Each head's own DIN unit: q (B, H, 1, E_h), k (B, H, L, E_h) -> (B, H, 1, L)."""
        return torch.stack([u(q[:, h, 0], k[:, h], mask) for h, u in enumerate(self.units)], dim=1)[:, :, None]

    def forward(self, batch: CTRBatch) -> CTROutput:
        t = self.embedding.target(batch)                                  # (B, D)
        e = self.embedding.history(batch)                                 # (B, L, D)
        B, L, D = e.shape
        assert L <= self.max_len, f"history of {L} > max_len {self.max_len}"
        pos = batch.positions()
        keep = pos.mask[..., None].to(e.dtype)                            # (B, L, 1)
        x = self.drop(self.encoding.embed(e, pos)) * keep                 # (B, L, D)
        z = self.refiner(x, pos, self.encoding)                           # (B, L, D), refined behaviours
        heads = self.extractor(z, pos, self.encoding)                     # (B, L, D) = [head_1 .. head_H]
        heads = heads + self.head_ffn(heads.transpose(1, 2)).transpose(1, 2)  # (B, L, D)
        interests = (heads * keep).view(B, L, self.heads, -1).transpose(1, 2)  # (B, H, L, E_h)
        q = self.target_proj(t).view(B, self.heads, 1, -1)                # (B, H, 1, E_h)
        score = lambda q4, k4: self.unit_scores(q4, k4, pos.mask)         # noqa: E731
        s = hooked_scores(score, q, interests, pos, self.encoding, 2, t)[:, :, 0]  # (B, H, L)
        w = masked_softmax(s, pos.mask[:, None])                          # (B, H, L)
        pooled = (w[..., None] * interests).sum(2).flatten(1)             # (B, D): H interests of E_h
        logits = self.dnn(torch.cat([t, pooled, self.embedding.side(batch)], dim=-1))[:, 0]  # (B,)
        aux = None
        if self.training and self.cfg.aux_weight > 0:
            aux = self.cfg.aux_weight * next_behaviour_loss(z, e, pos.mask)
        return CTROutput(logits, aux)


def build(*, schema: CTRSchema, train, options: Optional[dict] = None,
          encoding: Union[EncodingChoice, str, None] = None) -> DMIN:
    cfg: DMINConfig = ctr_options(DMINConfig, "dmin", options)
    check_heads(schema, train, "dmin")
    return DMIN(schema, field_dim=train.dim, max_len=train.max_len, heads=train.heads, dropout=train.dropout,
                cfg=cfg, encoding=encoding_choice(encoding))


# 001 §5.1.5; four interests (DMIN's and FuxiCTR's default num_heads; 001 grid-searches 1-8).
register_model(ModelSpec(name="dmin", takes="q.k ones: input-stage, rope, cope, cape (not RMHA, ALiBi, PARec)", build=build, task="ctr", ignores=("layers",), paper="Xiao et al., CIKM 2020 (DMIN)",
                         description="self-attention refiner + multi-head interests, each by target attention",
                         presets={"paper": paper_preset(train={"heads": 4})}), options=DMINConfig)
