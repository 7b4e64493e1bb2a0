"""CARCA (Rashed, Elsayed & Schmidt-Thieme, "CARCA: Context and Attribute-Aware Next-Item Recommendation
via Cross-Attention", RecSys 2022), the backbone the PE study 004 ran every encoding on (004 §4.2).

Notation used for tensor shapes:
    B  batch, L  padded profile length (LEFT padding, item 0), D  model size d, G  attribute width g,
    A  item attributes, C  context features, H  heads, E  head size (D // H), M  candidate items,
    N  n_items + 1 (column 0 = the padding item, never ranked)

CARCA §4 (the equations as its code, CARCA.py, computes them; 004's PyTorch port departs from it in its
encoder block, see below):

    embedding (profile items; candidates the same, with phi(j) unscaled in CARCA.py: scale_candidates)
        e(i, c) = W_w [ phi(i) sqrt(d) ; W_psi [a_i ; c] + b_psi ] + b_w          phi: (N, D) id table,
                  a_i the item's attributes (A), c the interaction's context (C), W_psi: A + C -> G
                  (g = 5d), W_w: D + G -> D; no activation in between
    profile branch (self-attention blocks, bidirectional: the code's causality=False)
        x = dropout(encoding.embed(e(i_t, c_t), pos)) * mask
        per block:  q = LN(x);  s = MHA(queries q, keys/values x) * q;  s' = LN(s);  x = (FFN(s') + s') * mask
                    (Q, K and V projections followed by the activation, no output projection; FFN:
                    Linear -> activation -> dropout -> Linear -> dropout, width d; a multiplicative
                    residual around the attention, an additive one around the FFN)
        h = LN(x)
    cross-attention scoring (one block, its own weights): each candidate j, embedded with the context
    of the interaction being predicted (the code gives the negatives the positive's context),
        z = MHA(queries o_j = e(j, c_target), keys/values h, padding keys masked);  z = z * o_j if residual
        score_j = w^T z + b           (logit; sigma(score) is the probability of Y_j = 1)
    training (004 §4.2's loss, the code's): binary cross-entropy of the target against one sampled
        negative per prediction, -log sigma(s+) - log(1 - sigma(s-)), plus l2_emb / 2 ||phi||^2
        (`training_loss`: CARCA always trains with it, whatever train.loss says; it has no dot-product
        head for the trainer's losses).

The injected positional encoding acts exactly as in SASRec (models/sasrec.py): `embed` on the profile
input, the attention hooks (rotate / bias / values / weights) in every profile self-attention block
(models/attention.py, with the block's LN(x) as the query input). CARCA itself uses none (`none`, its
code's `self.seq += t` is commented out; its §5 ablation found absolute embeddings worse): 004 compares
encodings on exactly this slot. The cross-attention block takes no encoding (candidates have no position).

Side information arrives as a fixed (N, A) attribute buffer (built from the samples folder, not saved in
checkpoints) and, per batch, the context of every profile interaction (B, L, C) and of the target
(B, C) (pipeline/side.py). Without attributes and context (any other dataset) the psi branch has no
input and is dropped, so e(i) = W_w phi(i) sqrt(d) + b_w: CARCA degenerates to a bidirectional
attention encoder over item ids with the same cross-attention scorer.

Scoring all items (the default full-ranking evaluation) embeds the catalogue once per call (a linear
map of the id and attribute tables, cached across inference calls until a weight changes) and runs the
cross-attention over item chunks of at most CHUNK_CELLS elements of attention logits. The split
e = item part + context part is exact because W_psi and W_w are linear (W_psi [a ; c] = W_a a + W_c c).

Departures from the reference code (`ahmedrashed-ml/CARCA`): negatives are uniform over the items other
than the target (the code also avoids the user's other items; pipeline sampling needs no per-user set);
training reads (prefix, next item) samples (train.objective prefixes; the code reads whole sequences
through the non-causal encoder, where each position's target is visible to the earlier positions);
PyTorch default initialisation except the normal(0, 0.01) of the code's embedding and logit layers
(`init_std`); Adam with
torch's betas (the code: beta2 0.98). The candidates' id embeddings are scaled by sqrt(d) like the
profile's by default, as 004's port does; CARCA.py looks them up in the unscaled table, which the `paper`
preset follows (`models.carca.scale_candidates: false`; walk 41e #5). `max_norm` is 004's "nmax" (its port
bounds the id embedding's rows with nn.Embedding(max_norm)): `_phi` and `_project_rows`.

Where 004's released port (researcher1741/Position_encoding_SRS) differs from CARCA.py and from its own
paper, seqpe follows the paper and CARCA.py (walk 41e, read from that code): its encoder block's
feed-forward computes FF(s * FF(s)) (an if / else falls through) with an identity in place of the leaky
ReLU; it adds the positional encoding to the candidates too, by their slot in the candidate row (the
target is always slot 0 at evaluation: an offset no negative gets); its BCE is half CARCA's (divided by
positives plus negatives; Adam does not see the factor), trained by AdamW with warm-up; it ranks float32
sigmoids (ties at 1.0 go to the target) and casts evaluation context to integers. Its RoPE / RopeOne and
RMHA are discussed in models/encodings (rotary.py, relative.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.errors import ParamsError

from .attention import MultiHeadAttention
from .base import ModelSpec, Recommender, item_table, register_model
from .config import parse_options
from .dropout import Dropout
from .encodings.base import PositionalEncoding, Positions
from .losses import sample_negatives

CHUNK_CELLS = 1 << 25        # attention logits (B x H x M x L) per scoring chunk: 128 MB in float32
ACTIVATIONS = {"leaky_relu": lambda: nn.LeakyReLU(0.2), "silu": nn.SiLU}   # TF's leaky_relu slope is 0.2


@dataclass(frozen=True)
class CARCAConfig:
    """CARCA options beyond the shared TrainParams sizes (train.dim = d, layers, heads, dropout)."""
    attr_dim: int = 0                 # g, width of the attribute/context projection (0 = 5 d, the code's)
    residual: bool = True             # multiplicative residual in the cross-attention block (004 Table 11:
                                      # yes on Beauty and Games, no on Men and Fashion)
    activation: str = "leaky_relu"    # after the Q/K/V projections and inside the FFN (004 also ran silu)
    negatives: int = 1                # sampled negatives per target in the BCE objective (CARCA: 1)
    l2_emb: float = 0.0               # l2_emb / 2 ||phi||^2 added to the loss (the code's "L2 reg. weight")
    max_norm: float = 0.0             # 004's nmax: id-embedding rows kept at L2 norm <= max_norm (0 = off; _phi)
    scale_candidates: bool = True     # candidates' id embeddings times sqrt(d) like the profile's (004's port);
                                      # CARCA's code looks them up in the unscaled table (`paper`: false)
    init_std: float = 0.01            # normal(0, init_std) init of the embedding layers and the logit layer (the
                                      # code's 0.01); 0 = PyTorch's default. 0.01 keeps the attribute / context
                                      # path ~1e-4 of the scale and needs the code's small lr and many epochs

    def check(self, name: str) -> None:
        if self.activation not in ACTIVATIONS:
            raise ParamsError(f"models.{name}.activation must be one of {', '.join(ACTIVATIONS)}, got "
                              f"{self.activation!r}", "use leaky_relu or silu")
        if min(self.attr_dim, self.l2_emb, self.max_norm, self.init_std) < 0 or self.negatives < 1:
            raise ParamsError(f"models.{name} needs attr_dim, l2_emb, max_norm, init_std >= 0 and negatives >= 1, got "
                              f"{self.attr_dim}, {self.l2_emb}, {self.max_norm}, {self.init_std}, {self.negatives}",
                              "use e.g. 0, 0.0001, 0, 0.01, 1")


def _projection(dim: int, act: str) -> nn.Module:
    return nn.Sequential(nn.Linear(dim, dim), ACTIVATIONS[act]())


def _normal(layer: nn.Linear, std: float) -> nn.Linear:
    """The code's dense layers of the embedding and the logit: normal(0, std) weights, zero bias (std 0:
    PyTorch's default init kept)."""
    if std > 0:
        nn.init.normal_(layer.weight, std=std)
        if layer.bias is not None:
            nn.init.zeros_(layer.bias)
    return layer


class ProfileBlock(nn.Module):
    """One self-attention block of the profile branch (module docstring): the encoding's attention
    hooks run inside `attn` (models/attention.py) exactly as in SASRec's blocks."""

    def __init__(self, dim: int, heads: int, dropout: float, layer: int, act: str, qk: bool):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim, eps=1e-8), nn.LayerNorm(dim, eps=1e-8)
        self.attn = MultiHeadAttention(dim, heads, dropout, layer=layer, causal=False, qk=qk, out_proj=False)
        if self.attn.q is not None:                                       # CARCA: activated projections
            self.attn.q, self.attn.k = _projection(dim, act), _projection(dim, act)
        self.attn.v = _projection(dim, act)
        self.ffn = nn.Sequential(nn.Linear(dim, dim), ACTIVATIONS[act](), Dropout(dropout),
                                 nn.Linear(dim, dim), Dropout(dropout))

    def forward(self, x: torch.Tensor, pos: Positions, encoding: PositionalEncoding) -> torch.Tensor:
        keep = pos.mask[..., None].to(x.dtype)                            # (B, L, 1)
        q = self.ln1(x)                                                   # (B, L, D)
        s = self.ln2(self.attn(x, pos, encoding, query=q, self_query=True) * q)   # (B, L, D) multiplicative residual
        return (self.ffn(s) + s) * keep                                   # (B, L, D)


class CrossAttention(nn.Module):
    """The scoring block: candidates o (B|1, M, D) attend over the profile h (B, L, D) -> logits (B, M)."""

    def __init__(self, dim: int, heads: int, dropout: float, act: str, residual: bool, init_std: float):
        super().__init__()
        self.heads, self.residual = heads, residual
        self.q, self.k, self.v = _projection(dim, act), _projection(dim, act), _projection(dim, act)
        self.drop = Dropout(dropout)
        self.logit = _normal(nn.Linear(dim, 1), init_std)

    def _split(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, D) -> (B, H, T, E)
        B, T, D = x.shape
        return x.view(B, T, self.heads, D // self.heads).transpose(1, 2)

    def keys(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._split(self.k(h)), self._split(self.v(h))            # (B, H, L, E) each

    def forward(self, o: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q = self._split(self.q(o))                                        # (B|1, H, M, E)
        logits = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))          # (B, H, M, L)
        logits = logits.masked_fill(~mask[:, None, None, :], torch.finfo(logits.dtype).min)
        probs = self.drop(torch.softmax(logits, dim=-1))                  # (B, H, M, L)
        z = probs @ v                                                     # (B, H, M, E)
        z = z.transpose(1, 2).reshape(z.size(0), z.size(2), -1)           # (B, M, D)
        if self.residual:
            z = z * o                                                     # (B, M, D)
        return self.logit(z).squeeze(-1)                                  # (B, M)


class CARCA(Recommender):
    def __init__(self, n_items: int, max_len: int, *, dim: int = 64, heads: int = 1, layers: int = 2,
                 dropout: float = 0.2, encoding: Optional[PositionalEncoding] = None,
                 cfg: CARCAConfig = CARCAConfig(), attributes: Optional[torch.Tensor] = None, context_width: int = 0):
        super().__init__()
        self.n_items, self.max_len, self.dim, self.cfg = n_items, max_len, dim, cfg
        self.context_width = context_width
        self.items = item_table(n_items, dim)                             # phi (N, D)
        std = cfg.init_std
        self.w_phi = _normal(nn.Linear(dim, dim), std)                    # W_w on the id part (+ b_w)
        width = 0 if attributes is None else attributes.size(1)
        g = cfg.attr_dim or 5 * dim
        self.register_buffer("attributes", attributes, persistent=False)  # (N, A) data, not weights
        self.psi_a = _normal(nn.Linear(width, g), std) if width else None  # W_psi on the attributes (+ b_psi)
        self.psi_c = _normal(nn.Linear(context_width, g, bias=False), std) if context_width else None
        self.w_psi = _normal(nn.Linear(g, dim, bias=False), std) if width or context_width else None
        self.encoding = encoding if encoding is not None else PositionalEncoding()
        self.drop = Dropout(dropout)
        self.blocks = nn.ModuleList(ProfileBlock(dim, heads, dropout, i, cfg.activation, self.encoding.needs_qk)
                                    for i in range(layers))
        self.final_norm = nn.LayerNorm(dim, eps=1e-8)
        self.cross = CrossAttention(dim, heads, dropout, cfg.activation, cfg.residual, cfg.init_std)
        self._table_key, self._table = None, None

    # -- embeddings
    def _phi(self, ids: torch.Tensor, scale: bool = True) -> torch.Tensor:
        """The id embedding phi(ids) (..., D), times sqrt(d) where `scale`. Under max_norm (004's nmax), rows
        longer than it read as scaled down to it, the factor a constant of the gradient: the value and the
        gradient of nn.Embedding(max_norm), which rewrites the rows it reads, once `_project_rows` has put
        the stored rows inside the bound (every training step), without evaluation rewriting weights."""
        rows = self.items(ids)                                            # (..., D)
        if self.cfg.max_norm > 0:
            norm = rows.detach().norm(dim=-1, keepdim=True).clamp(min=1e-12)
            rows = rows * (self.cfg.max_norm / norm).clamp(max=1.0)
        return rows * math.sqrt(self.dim) if scale else rows

    def _project_rows(self) -> None:
        """max_norm > 0: scale the stored id rows longer than it down to it, in place (torch's
        embedding_renorm_, on every row). nn.Embedding(max_norm), which 004's port uses, does this to the rows
        a batch reads when it reads them: the same rows for every row a step reads; a row not read is
        projected earlier, which keeps torchrun's processes, each reading its own batch, on equal weights.
        Walk 41e #6: scaling on the fly alone left the stored rows at norm ~1, so an Adam step of ~lr barely
        turned them, where 004's rows of norm nmax turn fast."""
        if self.cfg.max_norm > 0:
            with torch.no_grad():
                w = self.items.weight
                w.mul_((self.cfg.max_norm / w.norm(dim=-1, keepdim=True).clamp(min=1e-12)).clamp(max=1.0))

    def item_part(self, ids: torch.Tensor, candidates: bool = False) -> torch.Tensor:
        """(...) ids -> (..., D): W_w[phi sqrt(d)] + b_w + W_w[W_a a + b_psi], the context-free part of e
        (`candidates`: items scored, whose phi is unscaled under models.carca.scale_candidates false)."""
        out = self.w_phi(self._phi(ids, scale=self.cfg.scale_candidates or not candidates))
        if self.psi_a is not None:
            out = out + self.w_psi(self.psi_a(self.attributes[ids]))
        return out

    def context_part(self, context: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """(..., C) -> (..., D) = W_w[W_c c], or None without context."""
        if self.psi_c is None:
            return None
        assert context is not None and context.size(-1) == self.context_width, \
            f"CARCA was built for {self.context_width} context features; pass them"
        return self.w_psi(self.psi_c(context.to(self.w_psi.weight.dtype)))

    def table(self) -> torch.Tensor:
        """item_part of every item (N, D); cached in inference until a weight or the buffer changes."""
        if torch.is_grad_enabled():
            return self.item_part(torch.arange(self.n_items + 1, device=self.items.weight.device), candidates=True)
        tensors = [self.items.weight, self.w_phi.weight, self.w_phi.bias] + (
            [self.attributes, self.psi_a.weight, self.psi_a.bias, self.w_psi.weight] if self.psi_a is not None else [])
        key = tuple((t.data_ptr(), t._version) for t in tensors)
        if key != self._table_key:
            self._table = self.item_part(torch.arange(self.n_items + 1, device=self.items.weight.device),
                                         candidates=True)
            self._table_key = key
        return self._table

    def train(self, mode: bool = True):
        self._table_key, self._table = None, None
        return super().train(mode)

    # -- profile branch
    def profile(self, seqs: torch.Tensor, context: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, Positions]:
        """(B, L) ids (+ (B, L, C) context) -> h (B, L, D), zero at padding, and the positions."""
        assert seqs.size(1) <= self.max_len, f"sequence length {seqs.size(1)} > max_len {self.max_len}"
        pos = Positions.from_seqs(seqs)
        keep = pos.mask[..., None].to(self.items.weight.dtype)           # (B, L, 1)
        x = self.item_part(seqs)                                          # (B, L, D)
        ctx = self.context_part(context)
        if ctx is not None:
            x = x + ctx                                                   # (B, L, D)
        x = self.encoding.embed(x, pos)                                   # (B, L, D)
        x = self.drop(x) * keep
        for block in self.blocks:
            x = block(x, pos, self.encoding)                              # (B, L, D)
        return self.final_norm(x) * keep, pos                             # (B, L, D)

    @staticmethod
    def _split_context(context) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        return (None, None) if context is None else (context[0], context[1])   # (B, L, C), (B, C)

    # -- scoring
    def score_items(self, seqs: torch.Tensor, items: torch.Tensor, context=None) -> torch.Tensor:
        """Logits of the candidates `items` (B, M) for each row: (B, M)."""
        prefix, target = self._split_context(context)
        h, pos = self.profile(seqs, prefix)
        k, v = self.cross.keys(h)
        o = self.item_part(items, candidates=True) if torch.is_grad_enabled() else self.table()[items]  # (B, M, D)
        row = self.context_part(target)
        if row is not None:
            o = o + row[:, None, :]
        return self.cross(o, k, v, pos.mask)                              # (B, M)

    def forward(self, seqs: torch.Tensor, context=None) -> torch.Tensor:
        """(B, L) -> (B, N): every item's logit, candidates in chunks; column 0 = -inf."""
        prefix, target = self._split_context(context)
        h, pos = self.profile(seqs, prefix)
        k, v = self.cross.keys(h)
        table = self.table()                                              # (N, D)
        row = self.context_part(target)                                   # (B, D) or None
        B, L = seqs.shape
        step = max(1, CHUNK_CELLS // (B * (self.cross.heads * L + 2 * self.dim)))
        parts = []
        for a in range(0, table.size(0), step):
            o = table[None, a:a + step]                                   # (1, M, D)
            if row is not None:
                o = o + row[:, None, :]                                   # (B, M, D)
            parts.append(self.cross(o, k, v, pos.mask))                   # (B, M)
        scores = torch.cat(parts, 1)                                      # (B, N)
        scores[:, 0] = float("-inf")
        return scores

    def training_loss(self, seqs: torch.Tensor, targets: torch.Tensor, generator: torch.Generator, context=None):
        """CARCA's objective on (prefix, next item) samples: mean over predictions of
        -log sigma(s_target) - sum_k log(1 - sigma(s_neg_k)) (+ the l2_emb penalty)."""
        assert targets.dim() == 1, "CARCA trains on (prefix, next item) samples (train.objective: prefixes)"
        self._project_rows()
        negatives = sample_negatives(targets[:, None].expand(-1, self.cfg.negatives), self.n_items, generator)
        items = torch.cat([targets[:, None], negatives], 1)               # (B, 1 + K)
        s = self.score_items(seqs, items, context)                        # (B, 1 + K)
        loss = F.softplus(-s[:, 0]).mean() + F.softplus(s[:, 1:]).sum(1).mean()
        if self.cfg.l2_emb > 0:
            loss = loss + 0.5 * self.cfg.l2_emb * self.items.weight.pow(2).sum()
        return loss


def build(*, n_items: int, max_len: int, train, options: Optional[dict] = None,
          encoding: Optional[PositionalEncoding] = None, side=None) -> CARCA:
    """ModelSpec.build: sizes from TrainParams, options from params.yaml `models.carca`, side information
    (pipeline.side.SideInfo) from the samples folder (None: plain item ids)."""
    cfg: CARCAConfig = parse_options(CARCAConfig, "models", "carca", options)
    if train.dim % train.heads:
        raise ParamsError(f"train.dim ({train.dim}) must be divisible by train.heads ({train.heads})",
                          "change train.dim or train.heads")
    features = None if side is None or side.item_features is None else torch.as_tensor(side.item_features)
    if features is not None and features.size(0) != n_items + 1:
        raise ParamsError(f"the item features have {features.size(0) - 1} items, the samples {n_items}",
                          "re-run `seqpe augment` so that features and samples agree")
    return CARCA(n_items, max_len, dim=train.dim, heads=train.heads, layers=train.layers, dropout=train.dropout,
                 encoding=encoding, cfg=cfg, attributes=features,
                 context_width=0 if side is None else side.context_width)


# CARCA's settings (its CARCA.py per dataset; 004 Table 11 "used in the original CARCA model"):
# 3 blocks, d = 90 (Beauty, Games) or 390 (Men, Fashion), g = 5d, heads 1 (Beauty) or 3, dropout 0.5 / 0.3,
# lr 1e-4 / 6e-6 (Men) / 1e-5 (Fashion), L 75 / 50 / 35 / 35, batch 128 (Fashion 100), L2 on the id
# embedding 1e-4 (0 on Games), residual cross-attention on Beauty and Games only, no positional
# encoding, 1,801 epochs on Beauty and 801 elsewhere (the code trains them all and reports the best test
# of every 20th epoch; seqpe selects on valid every epoch, so patience 0 = no early stop). CARCA ranks
# the target among 100 sampled items, 004's code among max_len - 1 (both uniform, the user's train items
# excluded): that protocol is evaluate.candidates with evaluate.mask_history: true, never a preset's.
_BASE = {"encoding": "none", "layers": 3, "dim": 90, "heads": 1, "dropout": 0.5, "lr": 1e-4, "batch_size": 128,
         "max_len": 75, "epochs": 1801, "patience": 0, "objective": "prefixes"}
_DATASETS = {
    "beauty": {},
    # Games: seqpe's carca_games, Amazon's Video_Games; not a bare "games" (S3-Rec's Toys_and_Games)
    **{name: {"train": {"heads": 3, "max_len": 50, "epochs": 801}, "models": {"carca": {"l2_emb": 0.0}}}
       for name in ("carca_games", "video_games")},
    "men": {"train": {"heads": 3, "dim": 390, "dropout": 0.3, "lr": 6e-6, "max_len": 35, "epochs": 801},
            "models": {"carca": {"residual": False}}},
    "fashion": {"train": {"heads": 3, "dim": 390, "dropout": 0.3, "lr": 1e-5, "max_len": 35, "epochs": 801,
                          "batch_size": 100},
                "models": {"carca": {"residual": False}}},
}
# `study`: 004's port of the same settings, which reads CARCA's "L2 reg. weight" as an upper bound on the
# embedding rows' norm (Table 11's note; nmax 1e-4, none on Games: "the default values" of its main tables,
# A.4 and §5) instead of an L2 term in the loss.
_STUDY_DATASETS = {name: {**variant, "models": {"carca": {**variant.get("models", {}).get("carca", {}),
                                                          **({"max_norm": 0.0} if "games" in name else {})}}}
                   for name, variant in _DATASETS.items()}
_PRESETS = {"paper": {"train": _BASE, "models": {"carca": {"residual": True, "l2_emb": 1e-4, "scale_candidates": False}},
                      "datasets": _DATASETS},
            "study": {"train": _BASE, "models": {"carca": {"residual": True, "l2_emb": 0.0, "max_norm": 1e-4}},
                      "datasets": _STUDY_DATASETS}}

register_model(ModelSpec(name="carca", build=build, paper="Rashed, Elsayed & Schmidt-Thieme, RecSys 2022 (004 §4.2)",
                         description="context- and attribute-aware self-attention + cross-attention scoring; "
                                     "any encoding",
                         presets=_PRESETS, side=True, side_options=("attr_dim",),   # psi's width (walk 43d #6)
                         # its own one-negative BCE, models.carca.negatives (walk 32a); train.loss bce, what it
                         # computes, is accepted (bench_stability.sh sets it for SASRec and CARCA alike)
                         ignores={"loss": "bce", "ce_impl": None, "negatives": None}),
               options=CARCAConfig)
