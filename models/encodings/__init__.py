"""Positional encodings: one file per family, one explicit dict registry `ENCODINGS`."""
from __future__ import annotations

from .base import Positions, PositionalEncoding  # noqa: F401

ENCODINGS: dict = {}   # name -> EncodingSpec (filled by the family modules)
