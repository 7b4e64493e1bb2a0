"""PARec / FPARec (Luo et al.; 003 §3.1): positional attention blocks.

Notation used for tensor shapes:
    B  batch, L  padded length (left padding, 0 = pad), D  hidden size, N  n_items + 1

    F_0      = item embeddings (dropout)
    V_l      = LayerNorm(F_{l-1}) W_V                                   (Eq. 5)
    F~_l     = Mask(softmax(R_l / sqrt(d))) V_l  + F_{l-1}              (Eqs. 6-7, residual)
    F_l      = FFN(LayerNorm(F~_l)) + F~_l                              (Eq. 8, residual)
    scores   = LayerNorm(F_L)[last] M^T                                 (Eqs. 9-10)

The attention has no queries or keys: its weights come from the injected encoding's
`weights` hook, which owns the positional matrices. The learned R_l (PARec), the
factorised R_1 R_2^T (FPARec) and the handcrafted patterns of the ablation (003 §4.4:
average, linear_annealing, exponential_annealing) are encodings of models/encodings/
parec.py, so the backbone is one class: "parec" and "fparec" differ only in the encoding
they default to. The blocks are models/attention.py's TransformerBlock with qk=False,
out_proj=False (no W_O: Table 1 counts d^2 + n^2 parameters per attention layer), pre-LayerNorm,
causal mask.

Two readings worth knowing. Mask(softmax(R)) is taken as softmax over the allowed (past, real)
keys, i.e. masked logits then softmax, so each row sums to 1 (Eq. 15 normalises the handcrafted
patterns the same way). And 003 Eq. 11 trains each user's sequence once, reading row t-1 for step
t: that is `train.objective: sequence` (the `paper` preset). With `prefixes` every training
prediction is read from the last row of an end-aligned prefix; the targets are the same, the rows
of R that carry the training signal differ.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from pipeline.errors import ParamsError

from .attention import TransformerBlock
from .base import ModelSpec, Recommender, item_table, register_model
from .dropout import Dropout
from .encodings.base import PositionalEncoding, Positions
from .model_config import PARecConfig, model_options

PATTERNS = ("average", "linear_annealing", "exponential_annealing")   # 003 §4.4 ablation


class PARec(Recommender):
    def __init__(self, n_items: int, dim: int, heads: int, layers: int, dropout: float,
                 cfg: PARecConfig, encoding: PositionalEncoding):
        super().__init__()
        self.n_items = n_items
        self.emb = item_table(n_items, dim)                             # (N, D) M, std d^-1/2
        self.scale = dim ** 0.5                                         # so F_0 keeps unit scale
        self.drop = Dropout(dropout)
        self.encoding = encoding
        self.blocks = nn.ModuleList(
            TransformerBlock(dim, heads, dropout, layer=i, causal=True, norm="pre", ffn_dim=cfg.ffn_dim, qk=False,
                             out_proj=False)                            # 003 Eq. 6: softmax(R) V, W_V only
            for i in range(layers))
        self.ln = nn.LayerNorm(dim)

    def _blocks(self, seqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = Positions.from_seqs(seqs)
        keep = pos.mask[:, :, None].to(self.emb.weight.dtype)           # (B, L, 1)
        x = self.encoding.embed(self.drop(self.emb(seqs) * self.scale), pos) * keep  # (B, L, D) F_0
        for block in self.blocks:
            x = block(x, pos, self.encoding)                            # (B, L, D) F_l
        return x, keep

    def hidden(self, seqs: torch.Tensor) -> torch.Tensor:
        x, keep = self._blocks(seqs)
        return self.ln(x) * keep                                        # (B, L, D) F^_L (Eq. 9)

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:
        return self.ln(self._blocks(seqs)[0][:, -1])                    # (B, D) last item (left padding)

    def item_weights(self) -> torch.Tensor:
        return self.emb.weight                                          # (N, D) M


def _builder(name: str, default_encoding: str):
    def build(n_items: int, max_len: int, train, options=None,
              encoding: Optional[PositionalEncoding] = None) -> Recommender:
        cfg = model_options(PARecConfig, name, options)
        if cfg.ffn_dim < 0:
            raise ParamsError(f"models.{name}.ffn_dim must be >= 0, got {cfg.ffn_dim}", "use 0 for train.dim")
        if encoding is None:
            from .encodings import build_encoding
            encoding = build_encoding(default_encoding, dim=train.dim, max_len=train.max_len,
                                      heads=train.heads or 1, layers=train.layers)
        if encoding.needs_qk:
            raise ParamsError(f"model '{name}' needs a positional-attention encoding, got '{encoding.name}'",
                              f"pass --encoding {default_encoding} (or " + ", ".join(
                                  e for e in ("parec", "fparec", *PATTERNS) if e != default_encoding) + ")")
        # train.heads is not read (ModelSpec.ignores): one positional matrix weighs every head's values alike,
        # and there is no output projection, so H heads compute what one does (walk 40d #3: byte-identical runs)
        return PARec(n_items, train.dim, 1, train.layers, train.dropout, cfg, encoding)
    return build


# 003 §4.2: 2 blocks, Adam, cross-entropy over all items, FPARec rank k = 40 (pipeline/REFERENCE.md §6),
# each user's sequence read once with a prediction at every position (Eq. 11: objective sequence,
# leave-one-out data). max_len 50 is the Amazon (Beauty, Sports, Toys) setting, from 003's range {50, 100,
# 200}; on ML-1m 003 searched {50, 200, 500}, and its Table 3 row (FPARec HR@10 0.2419, NDCG@10 0.1232) is
# Table 5's k = 40 row, "fixed at 500", and Table 6's 2-block row: the ML-1m variant below is 500. At 200
# 003 quotes FPARec 0.2351 and PARec 0.2243 (§4.7, Fig. 3): `--set train.max_len=200` for those.
_PAPER = {"epochs": 200, "layers": 2, "dim": 64, "lr": 1e-3, "dropout": 0.2, "max_len": 50,
          "loss": "ce", "patience": 10, "objective": "sequence"}
# both models take every encoding of the family (one backbone; the name picks the default): `seqpe models` said
# "parec (its own)" (walk 43b #5)
_TAKES = "the PARec family: parec, fparec, " + ", ".join(PATTERNS) + " (default {})"
_VARIANTS = {"ml_1m": {"train": {"max_len": 500}}, "movielens": {"train": {"max_len": 500}}}

register_model(ModelSpec("parec", _builder("parec", "parec"), "PARec: learned positional attention (values only)",
                         "003 Eq. 6", uses_encoding=True, causal=True, encoding="parec", ignores={"heads": 1},
                         takes=_TAKES.format("parec"),
                         presets={"paper": {"train": {**_PAPER, "encoding": "parec"}, "datasets": _VARIANTS}}), options=PARecConfig)
register_model(ModelSpec("fparec", _builder("fparec", "fparec"),
                         "FPARec: factorised positional attention; handcrafted patterns via --encoding",
                         "003 Eq. 7, §4.4", uses_encoding=True, causal=True, encoding="fparec", ignores={"heads": 1},
                         takes=_TAKES.format("fparec"),
                         presets={"paper": {"train": {**_PAPER, "encoding": "fparec"},
                                            "encodings": {"fparec": {"rank": 40}}, "datasets": _VARIANTS}}), options=PARecConfig)
