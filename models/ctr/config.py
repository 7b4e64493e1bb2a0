"""Typed options of the CTR backbones (params.yaml `models.<name>`), one frozen dataclass each.

Read through `parse_options` (pipeline.params.from_dict), so an unknown or mistyped key fails
naming it; `check()` raises ParamsError for values of the right type but out of range. Sizes
shared by every backbone (train.dim = the per-field width E, train.layers, train.heads,
train.dropout, train.max_len = the history length) live in TrainParams. Tower defaults are the
BARS / FuxiCTR configs that CAPE (001 §5.1.2) ran: DNN [1024, 512, 256].
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from pipeline.errors import ParamsError

from ..config import parse_options
from .layers import check_activation


def _widths(values: list[int], where: str) -> None:
    if any(v < 1 for v in values):
        raise ParamsError(f"{where} must hold positive widths, got {values}", "use e.g. [1024, 512, 256]")


@dataclass(frozen=True)
class _Tower:
    dnn_hidden: list[int] = field(default_factory=lambda: [1024, 512, 256])  # final MLP's hidden widths
    activation: str = "relu"          # of the final MLP: dice | prelu | relu | leaky_relu
    batch_norm: bool = False          # BatchNorm after each hidden Linear of the final MLP

    def check(self, name: str) -> None:
        _widths(self.dnn_hidden, f"models.{name}.dnn_hidden")
        check_activation(self.activation, f"models.{name}.activation")


@dataclass(frozen=True)
class DINConfig(_Tower):
    """DIN (Zhou et al. 2018); widths of the BARS DIN configs (attention [512, 256], DNN [1024, 512, 256])."""
    activation: str = "dice"          # BARS DIN: Dice in the DNN too
    attention_hidden: list[int] = field(default_factory=lambda: [512, 256])
    attention_activation: str = "dice"  # dice | prelu (DIN's two) | relu | leaky_relu
    attention_dropout: float = 0.0
    softmax: bool = False             # DIN keeps the unit's raw outputs as weights (no softmax)

    def check(self, name: str) -> None:
        super().check(name)
        _widths(self.attention_hidden, f"models.{name}.attention_hidden")
        check_activation(self.attention_activation, f"models.{name}.attention_activation")


@dataclass(frozen=True)
class DIENConfig(_Tower):
    """DIEN (Zhou et al. 2019): GRU interest extractor + AUGRU, target attention `attention`."""
    attention: str = "bilinear"       # bilinear: a_t = softmax(h_t W e_a) (DIEN) | din: DIN's unit (BARS)
    attention_hidden: list[int] = field(default_factory=lambda: [256, 128])  # the din unit's (BARS DIEN)
    attention_activation: str = "dice"
    aux_weight: float = 1.0           # alpha of L = L_target + alpha L_aux (DIEN: 1); 0 = no aux loss

    def check(self, name: str) -> None:
        super().check(name)
        if self.attention not in ("bilinear", "din"):
            raise ParamsError(f"models.{name}.attention must be 'bilinear' or 'din', got {self.attention!r}",
                              "use bilinear (DIEN) or din (BARS)")
        _widths(self.attention_hidden, f"models.{name}.attention_hidden")
        check_activation(self.attention_activation, f"models.{name}.attention_activation")
        if self.aux_weight < 0:
            raise ParamsError(f"models.{name}.aux_weight must be >= 0, got {self.aux_weight}", "use 1 (DIEN)")


@dataclass(frozen=True)
class BSTConfig(_Tower):
    """BST (Chen et al. 2019): Transformer layers over [history ; target], then `pooling`."""
    activation: str = "leaky_relu"    # BST's MLP
    pooling: str = "mean"             # mean over the real outputs (FuxiCTR default, 001's runs) | target:
                                      # the target's output | concat: every slot flattened (BST paper)
    ffn_dim: int = 0                  # hidden size of the Transformer FFN (0 = D)

    def check(self, name: str) -> None:
        super().check(name)
        if self.pooling not in ("mean", "target", "concat"):
            raise ParamsError(f"models.{name}.pooling must be mean, target or concat, got {self.pooling!r}",
                              "use mean")
        if self.ffn_dim < 0:
            raise ParamsError(f"models.{name}.ffn_dim must be >= 0, got {self.ffn_dim}", "use 0 for D")


@dataclass(frozen=True)
class SASRecCTRConfig(_Tower):
    """SASRec blocks over the history, then target attention (001 §5.1.2's SASRec in the CTR setting)."""
    norm: str = "pre"                 # LayerNorm before (pre) or after (post) each sub-layer
    ffn_dim: int = 0                  # hidden size of the position-wise FFN (0 = D)

    def check(self, name: str) -> None:
        super().check(name)
        if self.norm not in ("pre", "post"):
            raise ParamsError(f"models.{name}.norm must be 'pre' or 'post', got {self.norm!r}", "use pre")
        if self.ffn_dim < 0:
            raise ParamsError(f"models.{name}.ffn_dim must be >= 0, got {self.ffn_dim}", "use 0 for D")


@dataclass(frozen=True)
class DMINConfig(_Tower):
    """DMIN (Xiao et al. 2020): behaviour refiner + multi-interest extractor (train.heads interests)."""
    activation: str = "dice"          # FuxiCTR DMIN's DNN
    attention_hidden: list[int] = field(default_factory=lambda: [80, 40])  # per-interest unit (DMIN code)
    attention_activation: str = "relu"
    norm: str = "pre"                 # the refiner block's LayerNorm placement
    ffn_dim: int = 0                  # refiner FFN hidden size (0 = 2 D, DMIN's code)
    aux_weight: float = 1.0           # weight of the refiner's next-behaviour loss; 0 = none

    def check(self, name: str) -> None:
        super().check(name)
        _widths(self.attention_hidden, f"models.{name}.attention_hidden")
        check_activation(self.attention_activation, f"models.{name}.attention_activation")
        if self.norm not in ("pre", "post"):
            raise ParamsError(f"models.{name}.norm must be 'pre' or 'post', got {self.norm!r}", "use pre")
        if self.ffn_dim < 0 or self.aux_weight < 0:
            raise ParamsError(f"models.{name}.ffn_dim and aux_weight must be >= 0", "use 0 and 1")


def ctr_options(cls: type, name: str, options: Optional[dict[str, Any]]) -> Any:
    """Validate params.yaml `models.<name>` against `cls`; unknown keys and bad values fail."""
    return parse_options(cls, "models", name, options)
