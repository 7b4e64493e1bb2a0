"""The contract every backbone follows, and the model registry.

Notation used for tensor shapes:
    B  batch size
    L  (padded) sequence length; sequences are LEFT-padded with item id 0
    D  hidden size
    N  n_items + 1 (column 0 is the padding item and never ranked)

A Recommender maps a batch of left-padded item-id sequences (B, L) to scores over
all items (B, N). Neural backbones implement `encode` (B, D) and expose their item
table through `item_weights` (N, D) so the trainer can also use sampled softmax;
`forward` = encode @ item_weights.T with column 0 set to -inf.
"""
from __future__ import annotations

import dataclasses

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import nn

from pipeline.errors import unknown


def item_table(n_items: int, dim: int) -> nn.Embedding:
    """The (N, D) item embedding a backbone both reads and scores with: N(0, 1/D), padding row 0.

    Scores are item . session vector; a session vector of norm ~sqrt(D) (a LayerNorm output)
    against unit-variance rows (nn.Embedding's default) gives logits of standard deviation ~sqrt(D)
    and an initial loss far above the uniform ln N (PosRec: 119 against 10.7 on Diginetica); rows
    of norm ~1 start the logits near 1 and the loss near ln N (tests/test_models.py checks it).
    """
    emb = nn.Embedding(n_items + 1, dim, padding_idx=0)
    nn.init.normal_(emb.weight, std=dim ** -0.5)
    with torch.no_grad():
        emb.weight[0].zero_()
    return emb


class Recommender(nn.Module):
    n_items: int           # real items are 1..n_items
    static_shapes = False  # True: while training, every tensor's shape follows from the input's and nothing
                           # is read back to the host (session-graph models: models/graph.py); the trainer
                           # sets it for train.compile: reduce-overhead, whose CUDA graphs hold no host read
    max_len: Optional[int] = None  # the longest input it was built for (build_model): bounds a static step's
                                   # session graph, whose hop search then runs a width-free number of doublings

    @property
    def static_step(self) -> bool:
        """Whether this forward must keep static shapes (`static_shapes`, in training mode only: scoring
        is not captured, and its graphs keep the batch's own node count)."""
        return self.static_shapes and self.training

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:  # (B, L) -> (B, D)
        raise NotImplementedError

    def hidden(self, seqs: torch.Tensor) -> torch.Tensor:  # (B, L) -> (B, L, D): only causal models
        raise NotImplementedError          # (ModelSpec.causal): state t sees items <= t only

    def item_weights(self) -> torch.Tensor:  # (N, D)
        raise NotImplementedError

    def forward(self, seqs: torch.Tensor) -> torch.Tensor:  # (B, L) -> (B, N)
        scores = self.encode(seqs) @ self.item_weights().t()  # (B, N)
        scores[:, 0] = float("-inf")
        return scores

    def fit(self, items: torch.Tensor, session: torch.Tensor) -> None:  # only fitted models (ModelSpec.fitted):
        raise NotImplementedError          # the train clicks (T,) and their session index (T,)

    def training_loss(self, seqs: torch.Tensor, targets: torch.Tensor, generator: torch.Generator):
        """A backbone's own training objective, or None for the trainer's (train.loss). seqs (B, L);
        targets (B,) next items, or (B, L) with 0 where none (train.objective: sequence). Returns a
        scalar loss averaged over the batch's predictions (e.g. GRU4Rec's BPR-max / TOP1-max, BPR-MF's
        pairwise loss); `generator` draws any negatives, so a seed fixes them."""
        return None


@dataclass(frozen=True)
class ModelSpec:
    name: str
    build: Callable[..., torch.nn.Module]  # next_item: build(n_items=, max_len=, train=TrainParams, options=dict,
                                         #   encoding=module|None) -> Recommender; ctr: build(schema=CTRSchema,
                                         #   train=, options=, encoding=EncodingChoice|name|None) -> CTRModel
                                         #   (models/ctr/base.py: the backbone builds its own encoding)
    description: str
    paper: str = ""
    uses_encoding: bool = True           # False: the model ignores --encoding (e.g. GRU4Rec, POP)
    fitted: bool = False                 # True: `fit` on the train sessions (POP, S-POP, Item-KNN), not trained
    causal: bool = False                 # True: `hidden` (B, L, D) at position t sees items <= t only, so it
                                         # trains on whole sequences (train.objective: sequence)
    presets: Optional[dict] = None       # name -> {"train", "models", "encodings", "datasets"} (e.g. "paper");
                                         # a flat dict = TrainParams overrides; see pipeline/presets.py
    task: str = "next_item"              # next_item: Recommender ranking all items (srgnn, leave_one_out data) |
                                         # ctr: models.ctr.base.CTRModel scoring (user, target) pairs (ctr data)
    ignores: object = ()                 # train keys the model never reads (DIN: layers, heads; a fitted baseline:
                                         # every training key), a mapping {key: the value it runs with} (PARec's
                                         # {"heads": 1}: that value is accepted with --set), or a function of its
                                         # options giving them (BPR-MF:
                                         # train.loss unless models.bprmf.loss is ce): refused when given with
                                         # --set, recorded as null from params.yaml (pipeline/train/stage.py)
    options: Optional[type] = None       # the dataclass of params.yaml `models.<name>` (its defaults: what a run
                                         # records only where an option differs from them, pipeline.train.setup)
    unread_options: Optional[Callable[[Any], dict]] = None  # a function of the options dataclass: the options
                                         # its other settings leave unread, {option: (why, the setting that reads
                                         # it)} (GRU4Rec's negatives under its loss ce): refused when given with
                                         # --set, left out of the record from params.yaml (pipeline/train/stage.py)
    encoding: Optional[str] = None       # the encoding a run takes without --encoding (or a preset's), in place of
                                         # the study grid's first: a model that needs one of its own kind (FPARec:
                                         # positional attention, which the grid's `none` is not)
    takes: str = ""                      # which encodings it takes where not any (`seqpe models`), e.g.
                                         # "input-stage only": the rule its build function enforces
    side: bool = False                   # True: takes side information (pipeline/side.py): build(..., side=SideInfo)
    side_options: tuple = ()             # options read only on samples with side information (CARCA's attr_dim):
                                         # unread options elsewhere, as unread_options' (pipeline/train/stage.py)
                                         # and, where the data has context, forward / training_loss /
                                         # score_items(..., context=(context (B, L, C), target_context (B, C)))


MODELS: dict[str, ModelSpec] = {}


def register_model(spec: ModelSpec, options: Optional[type] = None) -> ModelSpec:
    """Register `spec`; `options`: its options dataclass (ModelSpec.options)."""
    if options is not None:
        spec = dataclasses.replace(spec, options=options)
    MODELS[spec.name] = spec
    return spec


def build_model(name: str, **kwargs) -> Recommender:
    if name not in MODELS:
        raise unknown("model", name, MODELS)
    net = MODELS[name].build(**kwargs)
    if isinstance(net, Recommender) and kwargs.get("max_len") is not None:
        net.max_len = int(kwargs["max_len"])              # the static step's hop search (models/graph.py)
    return net
