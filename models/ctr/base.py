"""The contract every CTR backbone follows (CAPE 001 §5.1.5, BARS/FuxiCTR feature layout).

Notation used for tensor shapes:
    B  batch size
    L  history length (LEFT-padded with id 0, most recent behaviour last)
    F  fields of an item representation (AmazonElectronics: item, cate -> 2; KuaiVideo: item -> 1)
    E  width of one field's embedding (001 §5.1.5: 64)
    D  width of an item representation, F * E (the concatenation; 128 on AmazonElectronics)
    S  width of the side input to the final MLP (pooled extra sequences + other features)

A CTR sample is (user, target item [+ category], behaviour history [+ categories], label); some
datasets carry more (KuaiVideo: the sequence of items the user did NOT click, and a user-id
feature). `CTRSchema` says which, from the samples manifest; `CTRBatch` carries one mini-batch on
the device; `CTREmbedding` embeds it the same way for every backbone:

    target(batch)   (B, D)      the target's field embeddings, concatenated
    history(batch)  (B, L, D)   the behaviours' field embeddings, concatenated (0 rows at padding)
    side(batch)     (B, S)      masked means of each extra sequence (item table) and the embeddings
                                of the other categorical features, concatenated (FuxiCTR puts
                                these straight into the MLP input)

Ids: 0 is padding in every table, 1 is the out-of-vocabulary id (ids rarer than the dataset's
min count in train share it; BARS min_categr_count), real ids start at 2.

A backbone maps a batch to `CTROutput(logits (B,), aux_loss)`: logits of P(click), and the
auxiliary loss of the backbones that have one (DIEN's next-behaviour loss, DMIN's refiner loss;
None otherwise, and None in eval mode). The trainer adds `aux_loss` to the BCE loss; the
weight is the backbone's own option.

Encodings: `ModelSpec.build(schema=, train=, options=, encoding=)` receives an `EncodingChoice`
(name + params.yaml `encodings.<name>` options), not a built module, because the width it acts
on (D, or E for an extra sequence) and the number of attention layers that call it belong to
the backbone; the backbone builds it (`EncodingChoice.build`). A plain name or None ("none")
is accepted too. `paper_preset` holds CAPE's training settings (001 §5.1.5) shared by every
backbone's `presets={"paper": ...}`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Optional, Union

import torch
from torch import nn

from ..encodings.base import PositionalEncoding, Positions


@dataclass(frozen=True)
class CTRSchema:
    """What a CTR dataset's samples hold (read from the samples manifest by the trainer)."""
    fields: tuple[str, ...] = ("item", "cate")        # fields of the target / history, in this order
    vocab: dict[str, int] = field(default_factory=dict)  # table name -> rows (padding 0 and OOV 1 included)
    extra: tuple[str, ...] = ()                        # other behaviour sequences of item ids (KuaiVideo: neg items)
    features: tuple[str, ...] = ()                     # other categorical features (KuaiVideo: user), own tables
    max_len: int = 100                                 # history length L (001 §5.1.5: context 100)

    def rows(self, table: str) -> int:
        assert table in self.vocab, f"no vocabulary for '{table}' in {sorted(self.vocab)}"
        return self.vocab[table]


@dataclass
class CTRBatch:
    label: torch.Tensor                     # (B,) float32 in {0, 1}
    group: torch.Tensor                     # (B,) long: the user, for gAUC
    target: torch.Tensor                    # (B, F) long
    history: torch.Tensor                   # (B, L, F) long, left-padded with 0
    extra: dict[str, torch.Tensor] = field(default_factory=dict)   # name -> (B, L') long, left-padded
    features: Optional[torch.Tensor] = None  # (B, K) long, K = len(schema.features); None when K = 0

    def __len__(self) -> int:
        return int(self.label.shape[0])

    @property
    def mask(self) -> torch.Tensor:         # (B, L) bool, True at real behaviours
        return self.history[..., 0] != 0

    def positions(self) -> Positions:
        return Positions.from_mask(self.mask)

    def to(self, device, non_blocking: bool = False) -> "CTRBatch":
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)  # noqa: E731
        return replace(self, label=move(self.label), group=move(self.group), target=move(self.target),
                       history=move(self.history), extra={k: move(v) for k, v in self.extra.items()},
                       features=move(self.features))


class CTROutput(NamedTuple):
    logits: torch.Tensor                    # (B,) logits of P(click)
    aux_loss: Optional[torch.Tensor] = None  # () auxiliary loss (training only), already weighted


@dataclass(frozen=True)
class EncodingChoice:
    """Which positional encoding a CTR backbone injects, and its options (params.yaml
    `encodings.<name>`); the backbone builds it at its own width and layer count."""
    name: str = "none"
    options: dict[str, Any] = field(default_factory=dict)

    def build(self, *, dim: int, max_len: int, heads: int = 1, layers: int = 1) -> PositionalEncoding:
        from ..encodings import build_encoding
        return build_encoding(self.name, dim=dim, max_len=max_len, heads=heads, layers=layers,
                              options=dict(self.options))


def encoding_choice(encoding: Union[EncodingChoice, str, None]) -> EncodingChoice:
    """What `ModelSpec.build(encoding=...)` may receive for a CTR backbone, as an EncodingChoice."""
    if encoding is None:
        return EncodingChoice()
    if isinstance(encoding, str):
        return EncodingChoice(encoding)
    if isinstance(encoding, EncodingChoice):
        return encoding
    raise TypeError(f"a CTR backbone builds its own encoding: pass EncodingChoice(name, options), "
                    f"not {type(encoding).__name__}")


def paper_preset(train: Optional[dict] = None, models: Optional[dict] = None,
                 encodings: Optional[dict] = None) -> dict:
    """CAPE's settings (001 §5.1.5) as a `presets["paper"]` entry (pipeline/presets.py format):
    64-wide field embeddings, context 100, Adam (the trainer's optimiser), early stopping with
    patience 3 on AUC (001 reports "the result with best AUC"); lr 5e-4 / batch 1024 on
    AmazonElectronics, lr 1e-3 / batch 4096 on KuaiVideo. 001 gives no epoch budget: 100, as
    the BARS configs, with early stopping ending the run. `train` / `models` / `encodings` add a
    backbone's own (CAPE's position width: 001 §5.4.2 names the best of its grid, 16 with DIN and 64
    with SASRec; the other backbones keep the default 16, 001 naming none for them)."""
    base = {"dim": 64, "max_len": 100, "patience": 3, "epochs": 100, "select_metric": "auc",
            "lr": 5e-4, "batch_size": 1024, **(train or {})}
    preset: dict[str, Any] = {"train": base,
                              "datasets": {"electronics": {"train": {"lr": 5e-4, "batch_size": 1024}},
                                           "kuai": {"train": {"lr": 1e-3, "batch_size": 4096}},        # sample_kuai
                                           "kuaivideo": {"train": {"lr": 1e-3, "batch_size": 4096}}}}
    if models:
        preset["models"] = models
    if encodings:
        preset["encodings"] = encodings
    return preset


def _table(rows: int, dim: int) -> nn.Embedding:
    emb = nn.Embedding(rows, dim, padding_idx=0)
    nn.init.normal_(emb.weight, std=1e-4)              # FuxiCTR's default embedding initialiser
    with torch.no_grad():
        emb.weight[0].zero_()
    return emb


class CTREmbedding(nn.Module):
    """Field embeddings shared by every backbone (item and category tables at E each, 001 §5.1.5)."""

    def __init__(self, schema: CTRSchema, field_dim: int = 64):
        super().__init__()
        self.schema, self.field_dim = schema, field_dim
        self.tables = nn.ModuleDict({f: _table(schema.rows(f), field_dim) for f in schema.fields})
        self.feature_tables = nn.ModuleDict({f: _table(schema.rows(f), field_dim) for f in schema.features})

    @property
    def dim(self) -> int:                    # D = F * E
        return self.field_dim * len(self.schema.fields)

    @property
    def side_dim(self) -> int:               # S
        return self.field_dim * (len(self.schema.extra) + len(self.schema.features))

    def fields(self, ids: torch.Tensor) -> torch.Tensor:
        """(..., F) ids -> (..., D): each field through its own table, concatenated."""
        assert ids.size(-1) == len(self.schema.fields), f"{ids.size(-1)} fields, schema has {self.schema.fields}"
        return torch.cat([self.tables[f](ids[..., i]) for i, f in enumerate(self.schema.fields)], dim=-1)

    def items(self, ids: torch.Tensor) -> torch.Tensor:
        """(...) item ids -> (..., E): the item table alone (extra sequences share it)."""
        return self.tables[self.schema.fields[0]](ids)

    def target(self, batch: CTRBatch) -> torch.Tensor:
        return self.fields(batch.target)                                   # (B, D)

    def history(self, batch: CTRBatch) -> torch.Tensor:
        return self.fields(batch.history)                                  # (B, L, D), 0 at padding

    def features(self, batch: CTRBatch) -> torch.Tensor:
        """(B, K * E): the embeddings of the other categorical features (K may be 0)."""
        parts = [self.feature_tables[name](batch.features[:, i]) for i, name in enumerate(self.schema.features)]
        if not parts:
            dtype = self.tables[self.schema.fields[0]].weight.dtype
            return batch.target.new_zeros((batch.target.size(0), 0), dtype=dtype)
        return torch.cat(parts, dim=-1)                                      # (B, K * E)

    def side(self, batch: CTRBatch) -> torch.Tensor:
        """(B, S): masked mean of each extra sequence's item embeddings, then the feature embeddings."""
        parts = []
        for name in self.schema.extra:
            seq = batch.extra[name]                                          # (B, L')
            emb = self.items(seq)                                            # (B, L', E)
            keep = (seq != 0).unsqueeze(-1).to(emb.dtype)                    # (B, L', 1)
            parts.append((emb * keep).sum(1) / keep.sum(1).clamp(min=1))     # (B, E)
        return torch.cat(parts + [self.features(batch)], dim=-1)             # (B, S)


class CTRModel(nn.Module):
    """Base class of the CTR backbones: `forward(batch) -> CTROutput`."""

    schema: CTRSchema

    def forward(self, batch: CTRBatch) -> CTROutput:  # pragma: no cover - the contract
        raise NotImplementedError
