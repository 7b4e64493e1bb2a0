"""Typed options of the positional encodings and of SASRec (torch-free).

One frozen dataclass per option set, read from params.yaml's `encodings: {<name>: {...}}`
(and `models: {sasrec: {...}}`) through `pipeline.params.from_dict`, so an unknown or
mistyped key fails naming it. Sizes shared by every encoding (dim, max_len, heads,
layers) come from TrainParams; these hold only what is particular to one encoding.
`check()` raises ParamsError for values of the right type but out of range.
"""
from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any, Optional

from pipeline.errors import ParamsError
from pipeline.params import MAX_WIDTH, check_option_ranges, from_dict


def _check_pos_dim(name: str, pos_dim: int, fix: str) -> None:
    if not 0 <= pos_dim <= MAX_WIDTH:
        raise ParamsError(f"encodings.{name}.pos_dim must be in 0..{MAX_WIDTH}, got {pos_dim}", fix)


CON_INITS = ("default", "identity")


def _check_con(name: str, pos_dim: int, init: str) -> None:
    """The options every 004 Eq. 6 (+Con) encoding shares: the PE width and the projection's start."""
    _check_pos_dim(name, pos_dim, "use 0 for the model dim")
    if init not in CON_INITS:
        raise ParamsError(f"encodings.{name}.init must be one of {', '.join(CON_INITS)}, got {init!r}",
                          "default: PyTorch's Linear initialisation, as the study's code; "
                          "identity: the item half starts as the identity and the bias at 0")


@dataclass(frozen=True)
class NoOptions:
    """The encoding takes no options."""

    def check(self, name: str) -> None:
        pass


@dataclass(frozen=True)
class SinusoidConfig:
    """Sinusoidal tables (000 Eq. 1, 004 Eqs. 3-4): frequency 1 / base^(2i/d)."""
    base: float = 10000.0             # wavelength base of the sinusoids

    def check(self, name: str) -> None:
        if self.base <= 1.0:
            raise ParamsError(f"encodings.{name}.base must be > 1, got {self.base}", "use e.g. 10000")


@dataclass(frozen=True)
class ConcatConfig:
    """Concatenated encodings (004 Eq. 6): [x ; PE] then a Linear layer back to d."""
    pos_dim: int = 0                  # width of the concatenated PE (0 = the model dim)
    base: float = 10000.0             # sinusoid base
    init: str = "default"             # default (nn.Linear's, the study's) | identity (item half = I, bias 0)

    def check(self, name: str) -> None:
        _check_con(name, self.pos_dim, self.init)
        SinusoidConfig(self.base).check(name)


@dataclass(frozen=True)
class LearnedConcatConfig:
    """Concatenated learned encoding (004 §3 CLE): [x ; Embed[pos]] then a Linear layer back to d."""
    pos_dim: int = 0                  # width of the concatenated PE (0 = the model dim)
    init: str = "default"             # as ConcatConfig.init

    def check(self, name: str) -> None:
        _check_con(name, self.pos_dim, self.init)


@dataclass(frozen=True)
class RotatoryConfig:
    """Rotatory (004 §3, the study's code): PE[2i] = sin(a_2i), PE[2i + 1] = cos(a_2i), a = 2 pi Embed[l - 1 - pos]
    / scale (sines and cosines interleaved, from the even columns' learned angles)."""
    scale: float = 10000.0            # divisor of the learned angles (the code's 10000.0)

    def check(self, name: str) -> None:
        if self.scale <= 0.0:
            raise ParamsError(f"encodings.{name}.scale must be > 0, got {self.scale}", "use e.g. 10000 (the study's)")


@dataclass(frozen=True)
class RotatoryConConfig(RotatoryConfig):
    """Rotatory + Con (004 §3 with Eq. 6): Linear([x ; rotatory PE]) back to d."""
    pos_dim: int = 0                  # width of the concatenated PE (0 = the model dim)
    init: str = "default"             # as ConcatConfig.init

    def check(self, name: str) -> None:
        super().check(name)
        _check_con(name, self.pos_dim, self.init)


@dataclass(frozen=True)
class RMHAConfig:
    """Shaw et al. relative keys and values (004 Eqs. 7-8), clipped at `clip` (RMHA-4)."""
    clip: int = 4                     # distances beyond `clip` share one embedding

    def check(self, name: str) -> None:
        if self.clip < 1:
            raise ParamsError(f"encodings.{name}.clip must be >= 1, got {self.clip}", "use e.g. 4 (RMHA-4)")


@dataclass(frozen=True)
class CAPEConfig:
    """CAPE (001 Eqs. 1-8): gated fusion into a smaller position space of width d_pos."""
    pos_dim: int = 16                 # d_pos of Eq. 5, W: d -> d_pos (001 §5.1.5 grid: 16, 32, 64; 0 = d)

    def check(self, name: str) -> None:
        _check_pos_dim(name, self.pos_dim, "use e.g. 16")


@dataclass(frozen=True)
class FPARecConfig:
    """FPARec (003 Eq. 7): R = R1 R2^T with R1, R2 of shape (n, k)."""
    rank: int = 20                    # factorising dimension k (003 Table 5: robust for k >= 20)

    def check(self, name: str) -> None:
        if self.rank < 1:
            raise ParamsError(f"encodings.{name}.rank must be >= 1, got {self.rank}", "use e.g. 20")


@dataclass(frozen=True)
class ExponentialConfig:
    """Exponential annealing (003 Eq. 14): weight of the item k steps back proportional to rate^k."""
    rate: float = math.exp(-1)        # in (0, 1]; 003's e^(j - i) is rate 1/e; 1 = average

    def check(self, name: str) -> None:
        if not 0.0 < self.rate <= 1.0:
            raise ParamsError(f"encodings.{name}.rate must be in (0, 1], got {self.rate}", "use e.g. 0.5")


@dataclass(frozen=True)
class SASRecConfig:
    """SASRec (Kang & McAuley 2018) options beyond the shared TrainParams sizes."""
    norm: str = "pre"                 # pre: LayerNorm before each sub-layer | post: after the residual | kang:
                                      # Kang & McAuley's released block (queries normalised, keys and values
                                      # not; residuals from the normalised input; models/attention.py)
    ffn_dim: int = 0                  # hidden size of the position-wise FFN (0 = train.dim)
    out_proj: bool = True             # output projection W_O after the heads (Vaswani et al.); Kang &
                                      # McAuley's S = Attention(E W_Q, E W_K, E W_V) has none (003 Table 1:
                                      # 3d^2 per layer): the `paper` preset sets False

    def check(self, name: str) -> None:
        if self.norm not in ("pre", "post", "kang"):
            raise ParamsError(f"models.{name}.norm must be 'pre', 'post' or 'kang', got {self.norm!r}",
                              "use pre, post or kang")
        if self.norm == "kang" and name not in ("sasrec", "linear_attention"):
            raise ParamsError(f"models.{name}.norm 'kang' is SASRec's attention block (queries from LayerNorm(x), "
                              f"keys and values from x); {name}'s token mixer takes one input", "use pre or post")
        if self.ffn_dim < 0:
            raise ParamsError(f"models.{name}.ffn_dim must be >= 0, got {self.ffn_dim}", "use 0 for train.dim")


@dataclass(frozen=True)
class TokenMixingConfig:
    """003's Token Mixing baseline: SASRec with its self-attention replaced by a causal MLP-Mixer
    token-mixing MLP (models/token_mixing.py); the blocks keep SASRec's norm and FFN options."""
    norm: str = "pre"                 # pre | post, as SASRecConfig
    ffn_dim: int = 0                  # hidden size of the position-wise FFN (0 = train.dim)

    def check(self, name: str) -> None:
        SASRecConfig(norm=self.norm, ffn_dim=self.ffn_dim).check(name)


def parse_options(cls: type, section: str, name: str, options: Optional[dict[str, Any]]) -> Any:
    """Validate `options` (params.yaml `<section>.<name>`) against `cls`; unknown keys fail."""
    cfg = from_dict(cls, dict(options or {}), f"{section}.{name}")
    check_option_ranges(cfg, f"{section}.{name}")
    cfg.check(name)
    return cfg
