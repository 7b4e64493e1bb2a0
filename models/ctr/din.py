"""DIN (Zhou et al., "Deep Interest Network for Click-Through Rate Prediction", KDD 2018) with an
injected positional encoding, as CAPE runs it (001 §5.1.2).

Notation used for tensor shapes:
    B  batch, L  history length (LEFT padding), L' an extra sequence's length
    E  field width (train.dim), D  item width F * E, S  side width (extra sequences + features)

    v_U(A) = sum_j a(e_j, v_A) e_j                  DIN Eq. (3): the local activation unit a(.) is an
                                                    MLP over [e_j, v_A, e_j - v_A, e_j * v_A] with Dice
                                                    (or PReLU); its raw outputs are the weights (no
                                                    softmax: DIN drops the normalisation; option)
    logit  = MLP([side, v_A, v_U(A)])               the target, the pooled history, the other features

Extra behaviour sequences (KuaiVideo's not-clicked items, schema.extra) get their own activation
unit against the target's item field, as the BARS DIN config does (din_sequence_field lists
pos_items and neg_items); they embed through the item table at width E.

How the encoding enters (001 §5.1.2: "DIN do not use PE method, and we add PE methods into the
attention unit"; §4, Eq. 4: the similarity may be DIN's attention): every encoding changes only
the unit's weights; the pooled values stay the raw behaviours.
    naive PE (lpe, any input-stage table)  added to the behaviours the unit reads, h_j + P_j
                                           (001 §5.1.1: "add item and position embedding")
    RoPE     target and behaviours rotated before the unit (the target right after the last
             behaviour, a fixed angle; 001 §5.1.1 rotates the context items in target attention)
    CoPE / CAPE  z[p_j] added to the unit's output score (001 Eq. 8) with gates from that score
             (Eq. 1, sim = the DIN unit, as 001 Eq. 4 allows); CAPE fuses the raw target (Eq. 5)
Encodings acting only through q.k (RMHA, ALiBi, PARec family) are refused at build time.
"""
from __future__ import annotations

from typing import Optional, Union

import torch
from torch import nn

from ..base import ModelSpec, register_model
from ..encodings.base import PositionalEncoding, Positions
from .base import CTRBatch, CTREmbedding, CTRModel, CTROutput, CTRSchema, EncodingChoice, encoding_choice, paper_preset
from .config import DINConfig, ctr_options
from .layers import MLP, ActivationUnit, check_unit_encoding, hooked_scores, pool


class DIN(CTRModel):
    def __init__(self, schema: CTRSchema, *, field_dim: int, max_len: int, dropout: float,
                 cfg: DINConfig, encoding: Optional[EncodingChoice] = None):
        super().__init__()
        choice = encoding if encoding is not None else EncodingChoice()
        self.schema, self.cfg, self.max_len = schema, cfg, max_len
        self.embedding = CTREmbedding(schema, field_dim)
        D, E = self.embedding.dim, field_dim
        self.encoding = choice.build(dim=D, max_len=max_len)               # one unit, one layer
        self.extra_encoding = (choice.build(dim=E, max_len=max_len, layers=len(schema.extra))  # one layer per
                               if schema.extra else None)                                    # extra unit
        check_unit_encoding(self.encoding, "din")
        unit = lambda d: ActivationUnit(d, cfg.attention_hidden, cfg.attention_activation,  # noqa: E731
                                        cfg.attention_dropout)
        self.unit = unit(D)
        self.extra_units = nn.ModuleList(unit(E) for _ in schema.extra)
        self.dnn = MLP(self.embedding.side_dim + 2 * D, cfg.dnn_hidden, 1, cfg.activation, dropout, cfg.batch_norm)

    def attend(self, unit: ActivationUnit, enc: PositionalEncoding, layer: int, t: torch.Tensor,
               h: torch.Tensor, pos: Positions) -> torch.Tensor:
        """DIN Eq. (3) with the encoding's hooks: t (B, C), h (B, L, C) -> pooled (B, C)."""
        mask = pos.mask
        assert h.size(1) <= self.max_len, f"history of {h.size(1)} > max_len {self.max_len}"
        keys = enc.embed(h, pos)                                          # (B, L, C): h_j + P_j (naive PE)
        score = lambda q, k: unit(q[:, 0, 0], k[:, 0], mask)[:, None, None]  # noqa: E731  (B, 1, 1, L)
        s = hooked_scores(score, t[:, None, None], keys[:, None], pos, enc, layer, t)[:, 0, 0]  # (B, L)
        return pool(s, h, mask, self.cfg.softmax)                         # (B, C): raw behaviours pooled

    def forward(self, batch: CTRBatch) -> CTROutput:
        t = self.embedding.target(batch)                                  # (B, D)
        pooled = self.attend(self.unit, self.encoding, 0, t, self.embedding.history(batch), batch.positions())
        parts = [t, pooled]                                               # (B, D) each
        t_item = self.embedding.items(batch.target[:, 0])                 # (B, E): the target's item field
        for i, name in enumerate(self.schema.extra):
            seq = batch.extra[name]                                       # (B, L')
            parts.append(self.attend(self.extra_units[i], self.extra_encoding, i, t_item,
                                     self.embedding.items(seq), Positions.from_mask(seq != 0)))  # (B, E)
        parts.append(self.embedding.features(batch))                      # (B, K * E)
        return CTROutput(self.dnn(torch.cat(parts, dim=-1))[:, 0])        # (B,)


def build(*, schema: CTRSchema, train, options: Optional[dict] = None,
          encoding: Union[EncodingChoice, str, None] = None) -> DIN:
    cfg: DINConfig = ctr_options(DINConfig, "din", options)
    return DIN(schema, field_dim=train.dim, max_len=train.max_len, dropout=train.dropout, cfg=cfg,
               encoding=encoding_choice(encoding))


# 001 §5.1.5, and CAPE's released DIN config (yjdy/CAPE experiment/config/DIN_*_tuner_config.yaml:
# din_use_softmax: True) for the weights.
register_model(ModelSpec(name="din", takes="q.k ones: input-stage, rope, cope, cape (not RMHA, ALiBi, PARec)", build=build, task="ctr", ignores=("layers", "heads"), paper="Zhou et al., KDD 2018 (DIN)",
                         description="target attention by DIN's activation unit; encoding in the unit",
                         presets={"paper": paper_preset(models={"din": {"softmax": True}})}), options=DINConfig)
