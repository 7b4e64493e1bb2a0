"""Typed options of the session backbones and baselines (torch-free).

One frozen dataclass per model, read from params.yaml's `models: {<name>: {...}}`
through `pipeline.params.from_dict`, so an unknown or mistyped key fails naming it.
Sizes shared by every backbone (dim, layers, heads, dropout, max_len) live in
TrainParams; these hold only what is particular to one model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from pipeline.params import from_dict


@dataclass(frozen=True)
class PosRecConfig:
    """PosRec (000 §4.3). The readout has `train.layers` bidirectional Transformer layers."""
    gnn_steps: int = 1            # PGGNN propagation steps (paper: one layer)
    anchors: bool = True          # anchor-node aggregation; False = PosRec-ANC (000 Figs. 5-6)
    lambda0: float = 1.0          # weight of X'_last (Eq. 10)
    lambda1: float = 1.0          # weight of H_last
    lambda2: float = 1.0          # weight of H_first (paper: 1 on Diginetica, 0.5 on Yoochoose)
    norm: str = "post"            # readout LayerNorm: post (Vaswani et al.'s Transformer) | pre
    normalise: bool = True        # divide each node's in/out message weights by their sum (SR-GNN's
                                  # degree normalisation, which 000 §4.3.1 follows); False = Eq. 7's raw sums


@dataclass(frozen=True)
class StampConfig:
    """STAMP (Liu et al. 2018); an injected encoding is added to the item embeddings (000 Table 3)."""
    init_std: float = 0.05        # normal init of the weight matrices (STAMP's config: stddev 0.05)
    emb_std: float = 0.002        # normal init of the item embeddings (emb_stddev 0.002); biases start at 0


@dataclass(frozen=True)
class PARecConfig:
    """PARec / FPARec blocks (003 §3.1); the attention weights come from the injected encoding."""
    ffn_dim: int = 0              # hidden size of the position-wise FFN (0 = train.dim)


@dataclass(frozen=True)
class GRU4RecConfig:
    """GRU4Rec (Hidasi et al. 2016) with item embeddings and tied output weights."""
    gru_layers: int = 1


@dataclass(frozen=True)
class NARMConfig:
    """NARM (Li et al. 2017): global GRU state + attentive local encoder, bilinear decoder."""
    emb_dropout: float = 0.25
    ct_dropout: float = 0.5


@dataclass(frozen=True)
class SRGNNConfig:
    """SR-GNN (Wu et al. 2019): GGNN on the session graph + soft-attention readout."""
    steps: int = 1                # GGNN propagation steps
    binary_adjacency: bool = True  # edge presence (SR-GNN's code) rather than frequency


@dataclass(frozen=True)
class PopConfig:
    """POP / S-POP: no options (ties broken by global popularity, then by item id)."""


@dataclass(frozen=True)
class ItemKNNConfig:
    """Item-KNN: cosine similarity of co-occurrence (an item in the prefix -> the target)."""
    neighbours: int = 100         # most similar items kept per item
    alpha: float = 0.5            # asymmetric cosine: c_ij / (n_i^alpha * n_j^(1-alpha))


def model_options(cls: type, name: str, options: Optional[dict[str, Any]]) -> Any:
    """Validate `options` (params.yaml `models.<name>`) against `cls`; unknown keys fail."""
    return from_dict(cls, dict(options or {}), f"models.{name}")
