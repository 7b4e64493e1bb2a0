"""The positional-encoding interface every encoding implements.

Notation used for tensor shapes:
    B  batch, L  padded length (LEFT padding: real items at the right end),
    D  model size, H  heads, E  head size (D // H)

Positions come from the padding mask once (`Positions.from_mask`) and every
encoding receives the same object. An encoding is an nn.Module that overrides
any of four hooks; the defaults do nothing, so a backbone calls all of them and
needs no flags (attention.py calls the attention hooks):

    embed(x, pos)                 input stage: additive / concatenated / learned (B, L, D) -> (B, L, D)
    rotate(q, k, pos, layer)      rotary: returns rotated (q, k), each (B, H, L, E)
    bias(q, k, pos, layer)        additive logits bias (B or 1, H or 1, L, L), or None
    values(probs, v, pos, layer)  extra value term added to the attention output (B, H, L, E), or None
    weights(probs, pos, layer)    replace / modify the attention probabilities (B, H, L, L) (PARec)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn


@dataclass
class Positions:
    mask: torch.Tensor      # (B, L) bool, True at real items
    forward: torch.Tensor   # (B, L) long, 0 for the first real item, ... len-1 for the last; 0 at padding
    backward: torch.Tensor  # (B, L) long, len-1 for the first real item, ... 0 for the last; 0 at padding
    lengths: torch.Tensor   # (B,) long, number of real items

    @staticmethod
    def from_mask(mask: torch.Tensor) -> "Positions":
        mask = mask.bool()
        lengths = mask.sum(1)                                      # (B,)
        fwd = (mask.long().cumsum(1) - 1).clamp(min=0)             # (B, L)
        bwd = (lengths[:, None] - 1 - fwd).clamp(min=0)            # (B, L)
        fwd = fwd.masked_fill(~mask, 0)
        bwd = bwd.masked_fill(~mask, 0)
        return Positions(mask=mask, forward=fwd, backward=bwd, lengths=lengths)

    @staticmethod
    def from_seqs(seqs: torch.Tensor) -> "Positions":
        return Positions.from_mask(seqs != 0)


class PositionalEncoding(nn.Module):
    """Base class: every hook is a no-op. Subclasses override what they need."""

    name: str = "none"

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        return x

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions, layer: int):
        return q, k

    def bias(self, q: torch.Tensor, k: torch.Tensor, pos: Positions, layer: int) -> Optional[torch.Tensor]:
        return None

    def values(self, probs: torch.Tensor, v: torch.Tensor, pos: Positions, layer: int) -> Optional[torch.Tensor]:
        return None

    def weights(self, probs: torch.Tensor, pos: Positions, layer: int) -> torch.Tensor:
        return probs
