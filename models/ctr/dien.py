"""DIEN (Zhou et al., "Deep Interest Evolution Network for Click-Through Rate Prediction", AAAI 2019,
arXiv 1809.03672) with an injected positional encoding, as CAPE runs it (001 §5.1.2).

Notation used for tensor shapes:
    B  batch, L  history length (LEFT padding), D  item width F * E (also the GRU width), S  side width

Interest Extractor Layer: a GRU over the behaviours e_b[t] gives interest states h_t
    u_t = s(W_u e_t + U_u h_{t-1} + b_u),  r_t = s(W_r e_t + U_r h_{t-1} + b_r)
    h~_t = tanh(W_h e_t + r_t o U_h h_{t-1} + b_h),  h_t = (1 - u_t) o h_{t-1} + u_t o h~_t
(torch.nn.GRU, the same cell up to where it puts the reset gate's bias), run over the real
behaviours only (packed), supervised by the auxiliary loss L_aux (models/ctr/layers.py:
next_behaviour_loss; negatives are other users' behaviours of the batch) with
L = L_target + alpha L_aux (alpha = `aux_weight`, DIEN: 1; returned in train mode only).

Interest Evolving Layer: target attention a_t = exp(h_t W e_a) / sum_j exp(h_j W e_a) (the bilinear
form, W starting at the identity; `attention: din` uses DIN's activation unit instead, as the
BARS DIEN config), then AUGRU (`augru_step`, written out because torch has no attentional GRU):
    u'_t = a_t * u_t,   h'_t = (1 - u'_t) o h'_{t-1} + u'_t o h~'_t
whose final state h'_T, the target and the side features feed the MLP. With left padding a_t = 0
at padding, so h' stays 0 there: AUGRU skips padding exactly.

How the encoding enters (001 §5.1.2: "DIEN do not use PE method, and we add PE method into
attention unit"): only the attention scores a_t change; the GRUs read the raw sequences.
    naive PE (lpe)  added to the interest states the attention compares, h_t + P_t
    RoPE            W e_a (or e_a) and the states rotated before the score (target after the last)
    CoPE / CAPE     z[p_t] added to the score (001 Eq. 8), gates from that score (Eq. 1 with the
                    bilinear / DIN similarity, Eq. 4); CAPE fuses the raw target e_a (Eq. 5)
"""
from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..base import ModelSpec, register_model
from .base import CTRBatch, CTREmbedding, CTRModel, CTROutput, CTRSchema, EncodingChoice, encoding_choice, paper_preset
from .config import DIENConfig, ctr_options
from .layers import MLP, ActivationUnit, check_unit_encoding, hooked_scores, masked_softmax, next_behaviour_loss


def augru_step(x: torch.Tensor, h: torch.Tensor, a: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor,
               bias: torch.Tensor) -> torch.Tensor:
    """One AUGRU step: x (B, In), h (B, H), attention a (B,); weights stacked [update; reset; new]:
    w_ih (3H, In), w_hh (3H, H), bias (3H,). Returns h' (B, H). With a = 1 it is the GRU above."""
    xu, xr, xn = F.linear(x, w_ih, bias).chunk(3, dim=-1)                  # (B, H) each
    hu, hr, hn = F.linear(h, w_hh).chunk(3, dim=-1)                       # (B, H) each
    u = torch.sigmoid(xu + hu)                                            # update gate u_t
    r = torch.sigmoid(xr + hr)                                            # reset gate r_t
    n = torch.tanh(xn + r * hn)                                           # candidate h~_t
    u = a[:, None] * u                                                    # u'_t = a_t * u_t
    return (1 - u) * h + u * n                                            # (B, H)


class AUGRU(nn.Module):
    """The attentional-update-gate GRU over a sequence; initialised as torch.nn.GRU (U(-k, k), k = H^-1/2)."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        k = hidden_size ** -0.5
        self.w_ih = nn.Parameter(torch.empty(3 * hidden_size, input_size).uniform_(-k, k))
        self.w_hh = nn.Parameter(torch.empty(3 * hidden_size, hidden_size).uniform_(-k, k))
        self.bias = nn.Parameter(torch.empty(3 * hidden_size).uniform_(-k, k))

    def forward(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """x (B, L, In), a (B, L) -> final state (B, H)."""
        h = x.new_zeros(x.size(0), self.w_hh.size(1))                     # (B, H)
        for t in range(x.size(1)):
            h = augru_step(x[:, t], h, a[:, t], self.w_ih, self.w_hh, self.bias)
        return h


def packed_gru(gru: nn.GRU, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Run `gru` over the real (right-most) rows of left-padded x (B, L, D); (B, L, D), 0 at padding."""
    B, L, _ = x.shape
    n = mask.sum(1)                                                       # (B,)
    steps = torch.arange(L, device=x.device)
    right = x.gather(1, ((steps + (L - n)[:, None]) % L)[..., None].expand_as(x))  # real rows first
    packed = pack_padded_sequence(right, n.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
    out, _ = pad_packed_sequence(gru(packed)[0], batch_first=True, total_length=L)  # (B, L, D)
    back = out.gather(1, ((steps + n[:, None]) % L)[..., None].expand_as(out))     # real rows last again
    return back * mask[..., None].to(back.dtype)                          # (B, L, D)


class DIEN(CTRModel):
    def __init__(self, schema: CTRSchema, *, field_dim: int, max_len: int, dropout: float,
                 cfg: DIENConfig, encoding: Optional[EncodingChoice] = None):
        super().__init__()
        self.schema, self.cfg, self.max_len = schema, cfg, max_len
        self.embedding = CTREmbedding(schema, field_dim)
        D = self.embedding.dim
        self.encoding = (encoding or EncodingChoice()).build(dim=D, max_len=max_len)  # one attention
        check_unit_encoding(self.encoding, "dien")
        self.extractor = nn.GRU(D, D, batch_first=True)
        if cfg.attention == "bilinear":
            self.bilinear = nn.Linear(D, D, bias=False)                   # W of h_t W e_a
            nn.init.eye_(self.bilinear.weight)
        else:
            self.unit = ActivationUnit(D, cfg.attention_hidden, cfg.attention_activation)
        self.evolution = AUGRU(D, D)
        self.dnn = MLP(self.embedding.side_dim + 2 * D, cfg.dnn_hidden, 1, cfg.activation, dropout, cfg.batch_norm)

    def attention(self, t: torch.Tensor, states: torch.Tensor, pos) -> torch.Tensor:
        """a_t (B, L) over the interest states (B, L, D) for the target t (B, D), encoding hooks applied."""
        keys = self.encoding.embed(states, pos)                           # (B, L, D): h_t + P_t (naive PE)
        if self.cfg.attention == "bilinear":
            q = self.bilinear(t)                                          # (B, D): W e_a
            score = lambda q4, k4: q4 @ k4.transpose(-1, -2)              # noqa: E731  (B, 1, 1, L)
        else:
            q = t
            score = lambda q4, k4: self.unit(q4[:, 0, 0], k4[:, 0], pos.mask)[:, None, None]  # noqa: E731
        s = hooked_scores(score, q[:, None, None], keys[:, None], pos, self.encoding, 0, t)[:, 0, 0]  # (B, L)
        return masked_softmax(s, pos.mask)                                # (B, L)

    def forward(self, batch: CTRBatch) -> CTROutput:
        t = self.embedding.target(batch)                                  # (B, D)
        e = self.embedding.history(batch)                                 # (B, L, D)
        assert e.size(1) <= self.max_len, f"history of {e.size(1)} > max_len {self.max_len}"
        pos = batch.positions()
        states = packed_gru(self.extractor, e, pos.mask)                  # (B, L, D)
        final = self.evolution(states, self.attention(t, states, pos))    # (B, D)
        logits = self.dnn(torch.cat([t, final, self.embedding.side(batch)], dim=-1))[:, 0]  # (B,)
        aux = None
        if self.training and self.cfg.aux_weight > 0:
            aux = self.cfg.aux_weight * next_behaviour_loss(states, e, pos.mask)
        return CTROutput(logits, aux)


def build(*, schema: CTRSchema, train, options: Optional[dict] = None,
          encoding: Union[EncodingChoice, str, None] = None) -> DIEN:
    cfg: DIENConfig = ctr_options(DIENConfig, "dien", options)
    return DIEN(schema, field_dim=train.dim, max_len=train.max_len, dropout=train.dropout, cfg=cfg,
                encoding=encoding_choice(encoding))


# 001 §5.1.5; the attention of BARS's tuned DIEN (din_attention with softmax), which FuxiCTR ran for 001.
register_model(ModelSpec(name="dien", takes="q.k ones: input-stage, rope, cope, cape (not RMHA, ALiBi, PARec)", build=build, task="ctr", ignores=("layers", "heads"), paper="Zhou et al., AAAI 2019 (DIEN)",
                         description="GRU interests + AUGRU evolution by target attention; aux next-behaviour loss",
                         presets={"paper": paper_preset(models={"dien": {"attention": "din"}})}), options=DIENConfig)
