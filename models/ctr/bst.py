"""BST (Chen et al., "Behavior Sequence Transformer for E-commerce Recommendation in Alibaba",
DLP-KDD 2019, arXiv 1905.06874) with an injected positional encoding, as CAPE runs it (001 §5.1.2).

Notation used for tensor shapes:
    B  batch, L  history length (LEFT padding), T = L + 1 (history then target), D  item width F * E
    S  side width

The target joins the behaviour sequence as its last item, and `train.layers` Transformer layers
(BST §2.2; the paper finds one best) read [history ; target] bidirectionally:
    S' = LayerNorm(S + Dropout(MH(S)))                              BST's self-attention layer
    F  = LayerNorm(S' + Dropout(LeakyReLU(S' W1 + b1) W2 + b2))      its point-wise FFN
then `pooling` of the outputs (mean over the real ones: FuxiCTR's default, which 001 ran; target:
the target's output; concat: every slot flattened, the BST paper's, padded to max_len + 1 slots)
and an MLP (LeakyReLU, BST §2.3) over [side, target, pooled] -> logit.

How the encoding enters: BST's own "position" feature (a time gap) is CAPE's "None" baseline
removed (001 §5.1.1: "If a backbone originally contains a PE method, we will remove the related
code"); the injected encoding takes its place. Input-stage ones (naive PE) are added to
[history ; target] at positions 0..n (the target at n, right after the last behaviour); RoPE,
CoPE, CAPE and the others act inside each layer's attention through models/attention.py (CAPE's
fusion takes the layer input of each query, 001 Eq. 5; its positions count from the sequence
end, Eq. 2, since the attention is bidirectional).
"""
from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.errors import ParamsError

from ..attention import MultiHeadAttention
from ..base import ModelSpec, register_model
from ..dropout import Dropout
from ..encodings.base import PositionalEncoding, Positions
from .base import CTRBatch, CTREmbedding, CTRModel, CTROutput, CTRSchema, EncodingChoice, encoding_choice, paper_preset
from .config import BSTConfig, ctr_options
from .layers import MLP, check_heads


class BSTLayer(nn.Module):
    """BST §2.2: post-LayerNorm multi-head self-attention and a LeakyReLU FFN, bidirectional."""

    def __init__(self, dim: int, heads: int, dropout: float, *, layer: int, ffn_dim: int, qk: bool):
        super().__init__()
        self.attn = MultiHeadAttention(dim, heads, dropout, layer=layer, causal=False, qk=qk)
        self.fc1, self.fc2 = nn.Linear(dim, ffn_dim), nn.Linear(ffn_dim, dim)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.drop = Dropout(dropout)

    def forward(self, x: torch.Tensor, pos: Positions, encoding: PositionalEncoding) -> torch.Tensor:
        x = self.ln1(x + self.drop(self.attn(x, pos, encoding)))          # (B, T, D)
        x = self.ln2(x + self.drop(self.fc2(F.leaky_relu(self.fc1(x))))) # (B, T, D)
        return x * pos.mask[..., None].to(x.dtype)                        # padding rows stay 0


class BST(CTRModel):
    def __init__(self, schema: CTRSchema, *, field_dim: int, max_len: int, heads: int, layers: int,
                 dropout: float, cfg: BSTConfig, encoding: Optional[EncodingChoice] = None):
        super().__init__()
        self.schema, self.cfg, self.max_len = schema, cfg, max_len
        self.embedding = CTREmbedding(schema, field_dim)
        D = self.embedding.dim
        self.encoding = (encoding or EncodingChoice()).build(dim=D, max_len=max_len + 1, heads=heads, layers=layers)
        if layers == 0 and self.encoding.name != "none" and type(self.encoding).embed is PositionalEncoding.embed:
            # no layer, no attention: an encoding that acts only there trained `none` under its own name
            # (predictions byte-identical to bst-none, reported as a comparison), as SASRec refuses
            raise ParamsError(f"train.layers is 0, so bst has no attention layer, and {self.encoding.name} acts only "
                              "inside them: the run would be --encoding none under another name",
                              "use train.layers 1 or more, or --encoding none")
        self.drop = Dropout(dropout)
        self.layers = nn.ModuleList(BSTLayer(D, heads, dropout, layer=i, ffn_dim=cfg.ffn_dim or D,
                                             qk=self.encoding.needs_qk) for i in range(layers))
        pooled = D * (max_len + 1) if cfg.pooling == "concat" else D
        self.dnn = MLP(self.embedding.side_dim + D + pooled, cfg.dnn_hidden, 1, cfg.activation, dropout,
                       cfg.batch_norm)

    def encode(self, batch: CTRBatch) -> tuple[torch.Tensor, torch.Tensor, Positions]:
        """(target (B, D), outputs over [history ; target] (B, T, D), their positions)."""
        t = self.embedding.target(batch)                                  # (B, D)
        h = self.embedding.history(batch)                                 # (B, L, D)
        assert h.size(1) <= self.max_len, f"history of {h.size(1)} > max_len {self.max_len}"
        mask = torch.cat([batch.mask, batch.mask.new_ones(len(batch), 1)], dim=1)  # (B, T)
        pos = Positions.from_mask(mask)                                   # target: forward = length
        x = self.encoding.embed(torch.cat([h, t[:, None]], dim=1), pos)   # (B, T, D)
        x = self.drop(x) * mask[..., None].to(x.dtype)
        for layer in self.layers:
            x = layer(x, pos, self.encoding)                              # (B, T, D)
        return t, x, pos

    def forward(self, batch: CTRBatch) -> CTROutput:
        t, x, pos = self.encode(batch)
        if self.cfg.pooling == "mean":
            keep = pos.mask[..., None].to(x.dtype)                        # (B, T, 1)
            pooled = (x * keep).sum(1) / keep.sum(1)                      # (B, D); the target is always real
        elif self.cfg.pooling == "target":
            pooled = x[:, -1]                                             # (B, D)
        else:
            slots = self.max_len + 1
            pooled = F.pad(x, (0, 0, slots - x.size(1), 0)).flatten(1)    # (B, (max_len + 1) D), left-padded
        return CTROutput(self.dnn(torch.cat([t, pooled, self.embedding.side(batch)], dim=-1))[:, 0])


def build(*, schema: CTRSchema, train, options: Optional[dict] = None,
          encoding: Union[EncodingChoice, str, None] = None) -> BST:
    cfg: BSTConfig = ctr_options(BSTConfig, "bst", options)
    check_heads(schema, train, "bst")
    return BST(schema, field_dim=train.dim, max_len=train.max_len, heads=train.heads, layers=train.layers,
               dropout=train.dropout, cfg=cfg, encoding=encoding_choice(encoding))


# 001 §5.1.5; one Transformer layer (BST's experiments find b = 1 layer best; CAPE's BST config: 1).
register_model(ModelSpec(name="bst", build=build, task="ctr", paper="Chen et al., DLP-KDD 2019 (BST)",
                         description="Transformer over [history ; target], pooled outputs + MLP",
                         presets={"paper": paper_preset(train={"layers": 1})}), options=BSTConfig)
