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
    bias(q, k, pos, layer, query_input=, allowed=)
                                  additive logits bias (B or 1, H or 1, L, L), or None
    values(probs, v, pos, layer)  extra value term added to the attention output (B, H, L, E), or None
    weights(probs, pos, layer)    replace / modify the attention probabilities (B, H, L, L) (PARec)
    score_bias(scores, q, pos, layer, query_input=, allowed=)
                                  bias for an attention whose similarity is NOT q.k (DIN's MLP unit,
                                  DIEN's bilinear form: 001 Eq. 4's sim_item), or None

`query_input` (B, Lq, D) is what the queries were projected from: the target item's embedding
in target attention, the block input in self-attention (CAPE fuses it, 001 Eq. 5). `allowed`
(B, 1, Lq, L) is the attention's own key mask (causal or bidirectional; None: causal).

An encoding that overrides `weights` or `values` declares `fusable = False`: attention then keeps
its explicit softmax; the others run through torch's fused scaled_dot_product_attention.

Attention hooks also serve TARGET attention (one query after the last item, Lq = 1):
`query_positions` says where the queries sit, `allowed_keys` which keys each may see.
`table(pos)` returns the per-item positional encoding P^l of PosRec Definitions 3.1/3.2
(000 §3.2) when the encoding defines one (None for purely relative encodings); the
awareness tests and `seqpe encodings inspect` read it.
"""
from __future__ import annotations

import dataclasses
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
    target: bool = False    # the queries are a target after the sequence (target attention), not its items:
                            # told by Lq == L before, which a one-slot history also met (walk 37d)

    def as_target(self) -> "Positions":
        """These positions for a target attention: one query, right after the last item."""
        return dataclasses.replace(self, target=True)

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


def query_positions(pos: Positions, lq: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(forward, backward) positions of the queries, each (B, Lq).

    Self-attention: the queries are the items themselves. Target attention (`pos.target`, Lq == 1):
    the query is the next item, right after the last one (forward = length, backward = -1), as in
    CAPE's target attention (001 §4). A history one slot wide (L == 1, ctr_batches' trimming) took the
    target for its one item: RoPE's offset was 0 instead of 1 (walk 37d).
    """
    if not pos.target and lq == pos.mask.size(1):
        return pos.forward, pos.backward
    assert lq == 1, f"target attention takes one query per sequence, got {lq}"
    return pos.lengths[:, None], torch.full_like(pos.lengths[:, None], -1)  # (B, 1) each


def allowed_keys(pos: Positions, lq: int, causal: bool = True) -> torch.Tensor:
    """(B, 1, Lq, L) bool: real keys, and in causal self-attention only keys j <= i.

    Rows of padded queries keep their own key so softmax never sees an empty row
    (their outputs are garbage that the backbone masks away).
    """
    mask = pos.mask[:, None, None, :]                                     # (B, 1, 1, L)
    L = pos.mask.size(1)
    if pos.target or lq != L:
        return mask.expand(-1, 1, lq, L)                                  # (B, 1, Lq, L)
    eye = torch.eye(L, dtype=torch.bool, device=mask.device)              # (L, L)
    allowed = mask & (torch.ones_like(eye).tril() if causal else True)    # (B, 1, L, L)
    return allowed | eye                                                  # (B, 1, L, L)


class PositionalEncoding(nn.Module):
    """Base class: every hook is a no-op. Subclasses override what they need."""

    name: str = "none"
    needs_qk: bool = True   # False: the encoding's `weights` replace q.k attention (PARec), so no q/k projections
    fusable: bool = True    # True: acts through rotate / bias only, so attention may run as one fused kernel
                            # (torch SDPA, models/attention.py); False if it overrides `weights` or `values`

    def table(self, pos: Positions) -> Optional[torch.Tensor]:
        """(B, L, m) per-item positional encoding P^l (000 Defs. 3.1/3.2), or None."""
        return None

    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        return x

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: Positions, layer: int):
        return q, k

    def bias(self, q: torch.Tensor, k: torch.Tensor, pos: Positions, layer: int,
             query_input: Optional[torch.Tensor] = None, allowed: Optional[torch.Tensor] = None) -> Optional[torch.Tensor]:
        return None

    def score_bias(self, scores: torch.Tensor, q: torch.Tensor, pos: Positions, layer: int,
                   query_input: Optional[torch.Tensor] = None,
                   allowed: Optional[torch.Tensor] = None) -> Optional[torch.Tensor]:
        """Bias (B|1, H|1, Lq, L) for the logits `scores` (B, H, Lq, L) of an attention whose item
        similarity is not q.k (001 Eq. 4: sim_item may be DIN's or a bilinear attention); q (B, H, Lq, E)
        is the (rotated) query when the attention has one. None: the encoding adds nothing there."""
        return None

    def values(self, probs: torch.Tensor, v: torch.Tensor, pos: Positions, layer: int) -> Optional[torch.Tensor]:
        return None

    def weights(self, probs: torch.Tensor, pos: Positions, layer: int,
                allowed: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Attention weights (B|1, H|1, Lq, L) from the q.k ones; `allowed` (B, 1, Lq, L) is the
        caller's key mask (causal or bidirectional; None: causal self-attention)."""
        return probs
