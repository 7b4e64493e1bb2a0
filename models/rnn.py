"""Recurrent session baselines: GRU4Rec and NARM (000 Table 2).

Notation used for tensor shapes:
    B  batch, L  padded length (left padding, 0 = pad), D  embedding size, H  GRU hidden size
    N  n_items + 1

The GRU runs on packed sequences, so padding never enters the recurrence: extra left
padding leaves every prediction unchanged. Neither model uses a positional encoding
(the recurrence is their notion of order).

GRU4Rec's own objectives (`models.gru4rec.loss`): cross-entropy over all items (`ce`, the
trainer's loss; GRU4Rec's later "XE" loss), the 2016 paper's pairwise `bpr` and `top1`, or the
ranking-max losses of Hidasi & Karatzoglou 2018, `bpr_max` (with its score regularisation,
`bpreg`) and `top1_max`, all over the other targets of the mini-batch plus `negatives` extra
items (models/ranking_losses.py; negatives = 0 is the 2016 paper's mini-batch sampling), returned
by `training_loss`. Scores are the plain dot products (the reference's optional final activations are not offered)
and the extra negatives are uniform, where the reference draws them ~ support^alpha.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from pipeline.errors import ParamsError

from .base import ModelSpec, Recommender, item_table, register_model
from .dropout import Dropout
from .model_config import GRU4RecConfig, NARMConfig, model_options
from .ranking_losses import batch_negatives, predictions, ranking_loss, sampled_scores

GRU4REC_LOSSES = ("ce", "bpr", "top1", "bpr_max", "top1_max")


def run_gru(gru: nn.GRU, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Run `gru` over the real steps of left-padded inputs x (B, L, D), mask (B, L).

    Returns (states (B, L, H) right-aligned like the input with zeros at padding,
    last state (B, H)).
    """
    B, L, _ = x.shape
    lengths = mask.sum(1).clamp(min=1)                                  # (B,)
    col = torch.arange(L, device=x.device)
    to_right = (col[None, :] + (L - lengths)[:, None]) % L              # (B, L) left-aligned view
    x_left = x.gather(1, to_right[:, :, None].expand_as(x))             # (B, L, D) real steps first
    packed = pack_padded_sequence(x_left, lengths.cpu(), batch_first=True, enforce_sorted=False)
    out, h_n = gru(packed)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=L)  # (B, L, H) left-aligned
    back = (col[None, :] - (L - lengths)[:, None]) % L                  # (B, L) inverse rotation
    states = out.gather(1, back[:, :, None].expand_as(out)) * mask[:, :, None]  # (B, L, H)
    return states, h_n[-1]                                              # h_n: (layers, B, H)


class GRU4Rec(Recommender):
    """GRU4Rec (Hidasi et al. 2016): item embeddings -> GRU -> last state; tied output weights."""

    def __init__(self, n_items: int, dim: int, dropout: float, cfg: GRU4RecConfig):
        super().__init__()
        self.n_items, self.cfg = n_items, cfg
        self.emb = item_table(n_items, dim)                             # (N, D) inputs and tied outputs
        self.drop = Dropout(dropout)
        self.gru = nn.GRU(dim, dim, num_layers=cfg.gru_layers, batch_first=True,
                          dropout=dropout if cfg.gru_layers > 1 else 0.0)

    def hidden(self, seqs: torch.Tensor) -> torch.Tensor:
        states, _ = run_gru(self.gru, self.drop(self.emb(seqs)), seqs != 0)  # (B, L, D), zero at padding
        return states

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:
        _, last = run_gru(self.gru, self.drop(self.emb(seqs)), seqs != 0)    # (B, D) last state
        return last

    def item_weights(self) -> torch.Tensor:
        return self.emb.weight                                          # (N, D)

    def training_loss(self, seqs: torch.Tensor, targets: torch.Tensor, generator: torch.Generator):
        """The configured ranking loss (bpr, top1, bpr_max, top1_max) over in-batch + extra negatives;
        None for `ce` (the trainer's loss)."""
        if self.cfg.loss == "ce":
            return None
        h, t = predictions(self, seqs, targets)                         # (T, D), (T,)
        neg = batch_negatives(t, self.n_items, self.cfg.negatives, generator)  # (T + extra,)
        pos, scores, valid = sampled_scores(h, self.emb.weight, t, neg)  # (T,), (T, M), (T, M)
        return ranking_loss(self.cfg.loss, pos, scores, valid, self.cfg.bpreg)


class NARM(Recommender):
    """NARM (Li et al. 2017): c = [h_t ; sum_j a_tj h_j], a_tj = v^T sigmoid(A1 h_t + A2 h_j);
    score_i = emb_i B c (bilinear decoder)."""

    def __init__(self, n_items: int, dim: int, cfg: NARMConfig):
        super().__init__()
        self.n_items = n_items
        self.emb = nn.Embedding(n_items + 1, dim, padding_idx=0)
        self.emb_drop = Dropout(cfg.emb_dropout)
        self.gru = nn.GRU(dim, dim, batch_first=True)
        self.a1 = nn.Linear(dim, dim, bias=False)
        self.a2 = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, 1, bias=False)
        self.ct_drop = Dropout(cfg.ct_dropout)
        self.b = nn.Linear(2 * dim, dim, bias=False)

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:
        mask = seqs != 0                                                # (B, L)
        x = self.emb_drop(self.emb(seqs))                               # (B, L, D)
        states, last = run_gru(self.gru, x, mask)                       # (B, L, D), (B, D)
        alpha = self.v(torch.sigmoid(self.a1(last)[:, None, :] + self.a2(states))).squeeze(-1)  # (B, L)
        alpha = alpha * mask                                            # padding does not attend
        local = (alpha[:, :, None] * states).sum(1)                     # (B, D)
        c = self.ct_drop(torch.cat([last, local], dim=-1))              # (B, 2D)
        return self.b(c)                                                # (B, D)

    def item_weights(self) -> torch.Tensor:
        return self.emb.weight                                          # (N, D)


def build_gru4rec(n_items: int, max_len: int, train, options=None, encoding=None) -> Recommender:
    cfg = model_options(GRU4RecConfig, "gru4rec", options)
    if cfg.loss not in GRU4REC_LOSSES:
        raise ParamsError(f"models.gru4rec.loss must be one of {', '.join(GRU4REC_LOSSES)}, got {cfg.loss!r}",
                          "use ce, bpr, top1, bpr_max or top1_max")
    if cfg.negatives < 0 or cfg.bpreg < 0 or cfg.gru_layers < 1:
        raise ParamsError(f"models.gru4rec needs negatives >= 0, bpreg >= 0 and gru_layers >= 1, got "
                          f"{cfg.negatives}, {cfg.bpreg}, {cfg.gru_layers}", "use e.g. 2048, 1.0, 1")
    if cfg.loss != "ce" and cfg.negatives == 0 and train.batch_size < 2 and train.objective != "sequence":
        raise ParamsError(f"models.gru4rec.loss {cfg.loss} with negatives 0 takes its negatives from the batch's "
                          "other targets, and train.batch_size is 1: no prediction has one, and the loss stays 0",
                          # (walk 45c #1: the untrained model's metrics were recorded)
                          "set models.gru4rec.negatives 1 or more, or train.batch_size 2 or more")
    return GRU4Rec(n_items, train.dim, train.dropout, cfg)


def build_narm(n_items: int, max_len: int, train, options=None, encoding=None) -> Recommender:
    return NARM(n_items, train.dim, model_options(NARMConfig, "narm", options))


def _gru4rec_ignores(options: dict) -> tuple:
    """The train keys GRU4Rec does not read: attention sizes (its depth is models.gru4rec.gru_layers) and, under
    one of its ranking losses, the trainer's loss settings (walk 32c)."""
    loss = (options or {}).get("loss", GRU4RecConfig.loss)
    ranking = loss != "ce" and loss in GRU4REC_LOSSES       # a misspelt loss: named by build_gru4rec (walk 43b #4)
    return ("layers", "heads") + (("loss", "ce_impl", "negatives") if ranking else ())


def _gru4rec_unread(cfg: GRU4RecConfig) -> dict:
    """The GRU4Rec options its loss leaves unread: negatives and bpreg under ce (the trainer's loss), bpreg
    under the losses other than bpr_max. None for a loss that is not one (build_gru4rec names it first)."""
    if cfg.loss not in GRU4REC_LOSSES:
        return {}
    if cfg.loss == "ce":
        why = "models.gru4rec.loss ce trains with the trainer's loss (train.loss)"
        return {"negatives": (why, "models.gru4rec.loss=bpr_max"), "bpreg": (why, "models.gru4rec.loss=bpr_max")}
    if cfg.loss != "bpr_max":
        return {"bpreg": (f"models.gru4rec.loss {cfg.loss} has no score regularisation", "models.gru4rec.loss=bpr_max")}
    return {}


register_model(ModelSpec("gru4rec", build_gru4rec, "GRU4Rec: GRU over the session, last state",
                         "Hidasi et al. 2016 (000 Table 2)", uses_encoding=False, causal=True,
                         ignores=_gru4rec_ignores, unread_options=_gru4rec_unread), options=GRU4RecConfig)
register_model(ModelSpec("narm", build_narm, "NARM: GRU + attentive local encoder, bilinear decoder",
                         "Li et al. 2017 (000 Table 2)", uses_encoding=False,
                         ignores=("layers", "heads", "dropout")), options=NARMConfig)   # its own two dropouts
