"""Positional encodings: one file per family, one explicit dict registry `ENCODINGS`.

The registry is torch-free metadata (so `seqpe encodings` never imports torch); each
entry's `build` imports its family module only when called. Awareness columns are the
PosRec definitions (000 Defs. 3.1 / 3.2) applied to the encoding's per-item table
P^l, verified numerically in tests/test_encodings.py:

    forward-aware   some dims of P^l at forward position pos are the same for every length
                    and differ between positions
    backward-aware  the same for the reverse position l - 1 - pos

Relative encodings (rope, rmha, alibi, cope, cape, handcrafted PARec patterns) have no
per-item table, only scores of i - j (000 Corollary 3.5): neither. PARec / FPARec index
their learned matrix by end-aligned slots (left padding, 003 §3.1): backward-aware.
2dspe / 2dlpe: the paper's prose (000 §3.4) calls them ineligible, but by Def. 3.1 their
position half (Eq. 24, sinusoids of pos) is forward-aware; nothing depends on l - pos - 1.

    papers: 000 PosRec (Qiu et al. 2021), 001 CAPE (Yuan et al. 2025),
            003 PARec/FPARec (Luo et al.), 004 PE study (Lopez-Avila et al. 2024)
"""
from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from pipeline.errors import unknown

from ..config import (CAPEConfig, ConcatConfig, ExponentialConfig, FPARecConfig, LearnedConcatConfig, NoOptions,
                      RMHAConfig, RotatoryConConfig, RotatoryConfig, SinusoidConfig, parse_options)

if TYPE_CHECKING:  # pragma: no cover
    from .base import PositionalEncoding


@dataclass(frozen=True)
class EncodingSpec:
    name: str
    paper: str                  # "000 Eq. 1" etc. (paper numbers: pipeline/REFERENCE.md §7)
    family: str                 # module in models/encodings/ that implements it
    learnable: bool
    forward_aware: bool         # 000 Def. 3.1
    backward_aware: bool        # 000 Def. 3.2
    config: type                # options dataclass (models/config.py)
    cls: str                    # class name in the family module
    description: str = ""

    @property
    def params(self) -> tuple[str, ...]:
        """Extra options this encoding reads from params.yaml `encodings.<name>`."""
        return tuple(f.name for f in dataclasses.fields(self.config))

    def build(self, *, dim: int, max_len: int, heads: int, layers: int, config: Any) -> "PositionalEncoding":
        module = importlib.import_module(f"{__name__}.{self.family}")
        enc = getattr(module, self.cls)(dim=dim, max_len=max_len, heads=heads, layers=layers, config=config)
        enc.name = self.name
        return enc


def _spec(name, paper, family, cls, learnable, fwd, bwd, config=NoOptions, description=""):
    return EncodingSpec(name, paper, family, learnable, fwd, bwd, config, cls, description)


ENCODINGS: dict[str, EncodingSpec] = {s.name: s for s in [
    # PosRec (000 §3-4, Appendices A-B)
    _spec("none", "000 (no PE)", "posrec", "NoEncoding", False, False, False, description="no positional information"),
    _spec("spe", "000 Eq. 1", "posrec", "SPE", False, True, False, SinusoidConfig, "sinusoidal, forward positions"),
    _spec("rspe", "000 Eq. 4", "posrec", "RSPE", False, False, True, SinusoidConfig, "sinusoidal, reverse positions"),
    _spec("lpe", "000 §3.3 (LPE)", "posrec", "LPE", True, True, False, description="learned, forward positions"),
    _spec("lrpe", "000 §3.3 (LRPE)", "posrec", "LRPE", True, False, True, description="learned, reverse positions"),
    _spec("dpe", "000 Eq. 5", "posrec", "DPE", False, True, True, SinusoidConfig, "half SPE, half RSPE"),
    _spec("ldpe", "000 Eq. 6", "posrec", "LDPE", True, True, True, description="half learned forward, half reverse"),
    _spec("aspe", "000 Eq. 17 (App. A)", "posrec", "ASPE", False, False, False, SinusoidConfig,
          "SPE + RSPE with sin/cos swapped"),
    _spec("alpe", "000 §3.4 (ALPE)", "posrec", "ALPE", True, False, False, description="learned forward + learned reverse"),
    _spec("2dspe", "000 Eq. 24 (App. B)", "posrec", "TwoDSPE", False, True, False, SinusoidConfig,
          "sinusoids of (position, length)"),
    _spec("2dlpe", "000 §3.4 (2DLPE)", "posrec", "TwoDLPE", True, True, False, description="learned (position, length)"),
    # PE study (004 §3): every encoding reversed, as the study does
    _spec("abs", "004 Eqs. 3-5", "study", "Abs", False, False, True, SinusoidConfig, "sinusoidal, reversed"),
    _spec("abs_con", "004 Eq. 6", "study", "AbsCon", True, False, True, ConcatConfig, "[x ; sinusoid] -> Linear"),
    _spec("none_con", "ablation of 004 Eq. 6 (beyond the papers)", "study", "NoneCon", True, False, False,
          LearnedConcatConfig, "[x ; 0] -> Linear: the +Con projection without a PE"),
    _spec("learnt", "004 §3 (LE)", "study", "Learnt", True, False, True, description="learned, reversed"),
    _spec("learnt_con", "004 §3 (CLE)", "study", "LearntCon", True, False, True, LearnedConcatConfig,
          "[x ; learned] -> Linear"),
    _spec("rotatory", "004 §3 (Rotatory; the study's code)", "study", "Rotatory", True, False, True, RotatoryConfig,
          "x + interleaved sin / cos of learned angles, reversed"),
    _spec("rotatory_con", "004 §3 (Rotatory+Con)", "study", "RotatoryCon", True, False, True, RotatoryConConfig,
          "[x ; rotatory PE] -> Linear"),
    _spec("rope", "004 Eqs. 9-10 (Su et al.)", "rotary", "RoPE", False, False, False, SinusoidConfig,
          "q, k rotated in every block"),
    _spec("rope_one", "004 §5 (RopeOne)", "rotary", "RoPEOne", False, False, False, SinusoidConfig,
          "q, k rotated in the first block only"),
    _spec("rmha", "004 Eqs. 7-8 (Shaw et al.)", "relative", "RMHA", True, False, False, RMHAConfig,
          "relative keys and values, clipped"),
    _spec("alibi", "Press et al. 2022 (beyond the papers)", "relative", "ALiBi", False, False, False,
          description="linear distance penalty per head"),
    # CAPE paper (001 §4)
    _spec("cope", "001 §5 baseline (Golovneva et al.)", "contextual", "CoPE", True, False, False,
          description="positions from similarity gates"),
    _spec("cape", "001 Eqs. 1-8", "contextual", "CAPE", True, False, False, CAPEConfig,
          "dissimilarity gates, gated fusion"),
    # PARec / FPARec (003 §3-4)
    _spec("parec", "003 Eq. 6", "parec", "PARec", True, False, True, description="learned n x n attention per layer"),
    _spec("fparec", "003 Eq. 7", "parec", "FPARec", True, False, True, FPARecConfig, "factorised R1 R2^T"),
    _spec("average", "003 Eq. 12", "parec", "Average", False, False, False, description="equal weight on the past"),
    _spec("linear_annealing", "003 Eq. 13", "parec", "LinearAnnealing", False, False, True,
          description="weight of key j = its slot j: rises linearly to the present"),
    _spec("exponential_annealing", "003 Eq. 14", "parec", "ExponentialAnnealing", False, False, False,
          ExponentialConfig, "weight falls as rate^distance (rate 1/e: e^(j-i))"),
]}


def get_spec(name: str) -> EncodingSpec:
    if name not in ENCODINGS:
        raise unknown("encoding", name, ENCODINGS)
    return ENCODINGS[name]


def check_encoding_options(name: str, options: Optional[dict] = None) -> Any:
    """Validate params.yaml `encodings.<name>` for encoding `name`; returns its config dataclass."""
    return parse_options(get_spec(name).config, "encodings", name, options)


def build_encoding(name: str, *, dim: int, max_len: int, heads: int = 1, layers: int = 1,
                   options: Optional[dict] = None) -> "PositionalEncoding":
    """Build encoding `name` for a backbone of width `dim`, `layers` blocks of `heads` heads,
    inputs of at most `max_len` items. Unknown names and bad options raise SeqpeError."""
    spec = get_spec(name)
    config = check_encoding_options(name, options)
    return spec.build(dim=dim, max_len=max_len, heads=heads, layers=layers, config=config)


def __getattr__(attr: str) -> Any:  # torch-backed names, imported on first use
    if attr in ("Positions", "PositionalEncoding"):
        return getattr(importlib.import_module(f"{__name__}.base"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")

