"""SASRec (Kang & McAuley, ICDM 2018) in the CTR setting, as CAPE runs it (001 §5.1.2, Fig. 1: "the
target attention ... can be seen as calculating the attention output of last item in self-attention").

Notation used for tensor shapes:
    B  batch, L  history length (LEFT padding), D  item width F * E, S  side width

    x       = encoding.embed(history)                     naive PE added before the network (001 §5.1.1)
    x       = `train.layers` causal Transformer blocks    models/attention.py's TransformerBlock (SASRec's
                                                          self-attention block + point-wise FFN), then
                                                          LayerNorm (pre-norm)
    o       = MHA(query = target t, keys = values = x)    target attention, the target right after the
                                                          last behaviour (query_positions, Lq = 1)
    logit   = MLP([side, t, o])

The encoding's attention hooks act in every block AND in the target attention (its layer index is
`train.layers`): RoPE rotates the target query and the block outputs (001 §5.1.1), CoPE / CAPE
add z[p_j] to its logits with positions counted back from the target (001 Eqs. 1-8; CAPE fuses
the raw target embedding t, Eq. 5). Encodings that replace q.k (the PARec family) only serve
self-attention and are refused. A history without behaviours attends to one padding key and
its output is zeroed (a softmax over no keys is NaN).
"""
from __future__ import annotations

from typing import Optional, Union

import torch
from torch import nn

from pipeline.errors import ParamsError

from ..attention import MultiHeadAttention, TransformerBlock
from ..base import ModelSpec, register_model
from ..dropout import Dropout
from ..encodings.base import Positions
from .base import CTRBatch, CTREmbedding, CTRModel, CTROutput, CTRSchema, EncodingChoice, encoding_choice, paper_preset
from .config import SASRecCTRConfig, ctr_options
from .layers import MLP, check_heads


def with_fallback_key(pos: Positions) -> tuple[Positions, torch.Tensor]:
    """Positions where an empty history gets its last (padding) slot as a key, and (B, 1) 1.0 / 0.0
    for rows that have / lack behaviours."""
    has = pos.mask.any(1, keepdim=True)                                   # (B, 1)
    last = torch.zeros_like(pos.mask)
    last[:, -1] = True
    return Positions.from_mask(pos.mask | (last & ~has)), has.float()


class SASRecCTR(CTRModel):
    def __init__(self, schema: CTRSchema, *, field_dim: int, max_len: int, heads: int, layers: int,
                 dropout: float, cfg: SASRecCTRConfig, encoding: Optional[EncodingChoice] = None):
        super().__init__()
        self.schema, self.cfg, self.max_len = schema, cfg, max_len
        self.embedding = CTREmbedding(schema, field_dim)
        D = self.embedding.dim
        self.encoding = (encoding or EncodingChoice()).build(dim=D, max_len=max_len, heads=heads,
                                                             layers=layers + 1)  # blocks + target attention
        if not self.encoding.needs_qk:
            raise ParamsError(f"encoding '{self.encoding.name}' replaces q.k attention and serves self-attention "
                              "only; sasrec_ctr's target attention needs q.k", "use none, lpe, rope, cope or cape")
        self.drop = Dropout(dropout)
        self.blocks = nn.ModuleList(TransformerBlock(D, heads, dropout, layer=i, causal=True, norm=cfg.norm,
                                                     ffn_dim=cfg.ffn_dim) for i in range(layers))
        self.final_norm = nn.LayerNorm(D) if cfg.norm == "pre" else nn.Identity()
        self.target_attention = MultiHeadAttention(D, heads, dropout, layer=layers, causal=False)
        self.dnn = MLP(self.embedding.side_dim + 2 * D, cfg.dnn_hidden, 1, cfg.activation, dropout, cfg.batch_norm)

    def forward(self, batch: CTRBatch) -> CTROutput:
        t = self.embedding.target(batch)                                  # (B, D)
        h = self.embedding.history(batch)                                 # (B, L, D)
        assert h.size(1) <= self.max_len, f"history of {h.size(1)} > max_len {self.max_len}"
        pos = batch.positions()
        keep = pos.mask[..., None].to(h.dtype)                            # (B, L, 1)
        x = self.drop(self.encoding.embed(h, pos)) * keep                 # (B, L, D)
        for block in self.blocks:
            x = block(x, pos, self.encoding)                              # (B, L, D)
        x = self.final_norm(x) * keep                                     # (B, L, D)
        tpos, has = with_fallback_key(pos)
        o = self.target_attention(x, tpos, self.encoding, query=t[:, None])[:, 0] * has  # (B, D)
        return CTROutput(self.dnn(torch.cat([t, o, self.embedding.side(batch)], dim=-1))[:, 0])


def build(*, schema: CTRSchema, train, options: Optional[dict] = None,
          encoding: Union[EncodingChoice, str, None] = None) -> SASRecCTR:
    cfg: SASRecCTRConfig = ctr_options(SASRecCTRConfig, "sasrec_ctr", options)
    check_heads(schema, train, "sasrec_ctr")
    return SASRecCTR(schema, field_dim=train.dim, max_len=train.max_len, heads=train.heads, layers=train.layers,
                     dropout=train.dropout, cfg=cfg, encoding=encoding_choice(encoding))


# 001 §5.1.5; two blocks (SASRec's default); CAPE 64 wide, the best of 001's grid with SASRec (§5.4.2).
register_model(ModelSpec(name="sasrec_ctr", takes="q.k ones (not the PARec family)", build=build, task="ctr", paper="Kang & McAuley, ICDM 2018 (SASRec)",
                         description="causal self-attention blocks, then target attention; CTR head",
                         presets={"paper": paper_preset(train={"layers": 2}, encodings={"cape": {"pos_dim": 64}})}),
               options=SASRecCTRConfig)
