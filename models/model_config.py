"""Typed options of the session backbones and baselines (torch-free).

One frozen dataclass per model, read from params.yaml's `models: {<name>: {...}}`
through `pipeline.params.from_dict`, so an unknown or mistyped key fails naming it.
Sizes shared by every backbone (dim, layers, heads, dropout, max_len) live in
TrainParams; these hold only what is particular to one model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from pipeline.params import check_option_ranges, from_dict


@dataclass(frozen=True)
class PosRecConfig:
    """PosRec (000 §4.3). The readout has `train.layers` bidirectional Transformer layers."""
    gnn_steps: int = 1            # PGGNN propagation steps (paper: one layer)
    anchors: bool = True          # anchor-node aggregation; False = PosRec-ANC (000 Figs. 5-6)
    lambda0: float = 1.0          # weight of X'_last (Eq. 10)
    lambda1: float = 1.0          # weight of H_last
    lambda2: float = 1.0          # weight of H_first (paper: 1 on Diginetica, 0.5 on Yoochoose)
    norm: str = "post"            # readout LayerNorm: post (Vaswani et al.'s Transformer) | pre
    bias: bool = True             # the edge Linears' bias (SR-GNN's code); False = Eq. 7, no bias (`paper`).
    # On the embedded sample, `seqpe train sample --model posrec --preset paper --seed 1 --seed 2 --seed 3
    # [--set models.posrec.bias=true]` (raw weights, threads 1): test HR@10 66.15 +- 1.02 without the bias vs
    # 66.82 +- 3.00 with it, MRR@10 40.65 +- 0.49 vs 41.42 +- 3.18 (95% CIs): no difference there.
    normalise: bool = True        # divide each node's in/out message weights by their sum (SR-GNN's degree
                                  # normalisation); False = Eq. 7's raw weighted sums (the `paper` preset).
    # Why the option exists: with anchors, Eq. 7's raw weights add hop distances (up to n - 1) to the
    # transition counts, so the GRU's message grows with the session: on the embedded sample's train
    # prefixes the raw row sums have median 7, mean 18, p99 111 and max 218 (normalised: 1). Dividing
    # by the sum keeps every message a weighted mean. On the sample, `seqpe train sample --model posrec
    # --preset paper [--set models.posrec.normalise=true]`, seeds 1-3: test HR@10 0.750 normalised vs
    # 0.668 raw, MRR@10 0.485 vs 0.415. So the default (no preset) normalises; the paper's is raw.


@dataclass(frozen=True)
class StampConfig:
    """STAMP (Liu et al. 2018); an injected encoding is added to the item embeddings (000 Table 3)."""
    init_std: float = 0.05        # normal init of the weight matrices (STAMP's config: stddev 0.05)
    emb_std: float = 0.002        # normal init of the item embeddings (emb_stddev 0.002); biases start at 0
    mean_residual: bool = False   # m_a = sum_i a_i x_i + m_s, as STAMP's released code and RecBole compute it;
                                  # the paper's m_a has no m_s (models/stamp.py)
    emb_max_norm: float = 0.0     # > 0: each looked-up input embedding is scaled down to this L2 norm at most,
                                  # as the released code's lookup (max_norm=1.5); the scoring table is not clipped


@dataclass(frozen=True)
class PARecConfig:
    """PARec / FPARec blocks (003 §3.1); the attention weights come from the injected encoding."""
    ffn_dim: int = 0              # hidden size of the position-wise FFN (0 = train.dim)


@dataclass(frozen=True)
class GRU4RecConfig:
    """GRU4Rec (Hidasi et al. 2016) with item embeddings and tied output weights."""
    gru_layers: int = 1
    loss: str = "ce"              # ce: the trainer's loss (train.loss) | bpr | top1 (Hidasi et al. 2016) |
                                  # bpr_max | top1_max (Hidasi & Karatzoglou 2018), over in-batch + extra negatives
    negatives: int = 2048         # ranking losses: extra uniform negatives shared by the batch, on top of the
                                  # batch's other targets (2018: 2048 additional samples; 2016: 0)
    bpreg: float = 1.0            # bpr_max: weight of the score regularisation sum_j s_j r_j^2


@dataclass(frozen=True)
class FactorisationConfig:
    """BPR-MF / FPMC (Rendle et al. 2009 / 2010; models/factorisation.py)."""
    loss: str = "bpr"             # bpr: the papers' pairwise BPR (S-BPR for FPMC) | ce: the trainer's loss
    negatives: int = 1            # bpr: uniform negatives drawn per prediction (LearnBPR draws one)


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
    anchors: bool = False         # add PosRec's anchor-node edges (000 §4.3.2) to the GGNN's neighbourhoods,
                                  # as 000 §5.4 / Figs. 5-6 do for SR-GNN ("SR-GNN+ANC")


@dataclass(frozen=True)
class GCSANConfig:
    """GC-SAN (Xu et al. 2019): SR-GNN's GGNN + `train.layers` self-attention layers (train.heads heads)."""
    steps: int = 1                # GGNN propagation steps
    binary_adjacency: bool = True  # edge presence (the SR-GNN code GC-SAN builds on) rather than frequency
    anchors: bool = False         # PosRec's anchor-node edges in the GGNN (000 §5.4, "GC-SAN+ANC")
    weight: float = 0.6           # w of Eq. 9: S_f = w E_last + (1 - w) h_last (the paper sweeps it; 0.6 is
                                  # RecBole's default for GC-SAN)


@dataclass(frozen=True)
class FGNNConfig:
    """FGNN (Qiu et al. 2019): WGAT layers + Set2Set-style attentive readout."""
    wgat_layers: int = 3          # weighted graph attention layers
    wgat_heads: int = 8           # heads per layer, averaged
    readout_steps: int = 3        # GRU steps of the readout (q*_T after T steps)
    negative_slope: float = 0.2   # LeakyReLU slope of the attention logits


@dataclass(frozen=True)
class PopConfig:
    """POP / S-POP: no options (ties broken by global popularity, then by item id)."""


@dataclass(frozen=True)
class ItemKNNConfig:
    """Item-KNN: cosine similarity of co-occurrence (an item in the prefix -> the target)."""
    neighbours: int = 100         # most similar items kept per item
    alpha: float = 0.5            # asymmetric cosine: c_ij / ((n_i + shrink)^alpha * (n_j + shrink)^(1-alpha))
    shrink: float = 0.0           # lambda of session-rec's / GRU4Rec's Item-KNN (their default 20): discounts
                                  # the similarity of rarely seen items (000 §5.1.3 "regularization"); 0 here
                                  # (plain cosine, as runs before it recorded), 20 under --preset paper


def model_options(cls: type, name: str, options: Optional[dict[str, Any]]) -> Any:
    """Validate `options` (params.yaml `models.<name>`) against `cls`; unknown keys fail, and so do values out of
    the ranges their names share (`check_option_ranges`)."""
    cfg = from_dict(cls, dict(options or {}), f"models.{name}")
    check_option_ranges(cfg, f"models.{name}")
    return cfg
