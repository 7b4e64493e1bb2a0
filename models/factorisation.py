"""Factorisation baselines of 000 Table 2: BPR-MF and FPMC, applied to anonymous sessions.

Notation used for tensor shapes:
    B  batch, L  padded length (left padding, 0 = pad), D  factors, N  n_items + 1,
    T  predictions in a batch

BPR-MF (Rendle et al. 2009, UAI), as 000 §5.1.3 applies it "following [22]" (NARM; GRU4Rec,
Hidasi et al. 2016, introduced the adaptation): a session has no user factor, so the session is
the MEAN of the latent vectors of its items, scored against the same item vectors, plus an item
bias (session-rec's BPR-MF, algorithms/baselines/bpr.py, predicts this way):

    score(s, j) = < (1/|s|) sum_{i in s} h_i , h_j > + b_j

Difference from session-rec: there a free vector per TRAINING session is learned and the mean is
used only at prediction time; seqpe trains the prediction-time function itself (its samples carry
no session id, and a per-session vector would never be used on new sessions). Repeated items
count as often as they occur. Trained with BPR-Opt (`loss: bpr`, Rendle et al. 2009 §4: the sum
of -ln sigmoid(x_si - x_sj) over (session, next item i, negative j), j drawn uniformly as LearnBPR
does, `negatives` per prediction; the prior's lambda ||Theta||^2 is train.weight_decay) through
`Recommender.training_loss`, or with the trainer's cross-entropy (`loss: ce`). Order-blind: the
mean does not know which item came last.

FPMC (Rendle et al. 2010, WWW), with the user part omitted "following [22]" (000 §5.1.3):
x_{u,l,i} = <v^{U,I}_u, v^{I,U}_i> + (1/|B_{t-1}|) sum_{l in B_{t-1}} <v^{I,L}_i, v^{L,I}_l>
loses its first term; a click is a basket of one item, so B_{t-1} = {last item} and

    score(s, j) = < v^{L,I}_{last(s)} , v^{I,L}_j >

a factorised first-order Markov chain of the transitions from the last item. Trained with the
paper's S-BPR (BPR over (previous basket, next item, uniform negative) triples), or cross-entropy.

Both are causal (the state after item t is the mean of items <= t, or item t's factor), so they
also train on whole sequences (train.objective: sequence). Neither takes a positional encoding.
The bias of BPR-MF rides in the contract's dot product: encode = [u ; 1], item_weights = [H ; b].
"""
from __future__ import annotations

import torch
from torch import nn

from pipeline.errors import ParamsError

from .base import ModelSpec, Recommender, item_table, register_model
from .model_config import FactorisationConfig, model_options
from .ranking_losses import bpr, draw, predictions, sampled_scores


class _Pairwise(Recommender):
    """BPR-trained factor model: `training_loss` draws `negatives` uniform items per prediction."""

    cfg: FactorisationConfig

    def training_loss(self, seqs: torch.Tensor, targets: torch.Tensor, generator: torch.Generator):
        if self.cfg.loss == "ce":
            return None
        h, t = predictions(self, seqs, targets)                         # (T, D'), (T,)
        neg = draw(self.n_items, (t.numel(), self.cfg.negatives), generator, t.device)  # (T, M) per prediction
        pos, scores, valid = sampled_scores(h, self.item_weights(), t, neg)  # (T,), (T, M), (T, M)
        return bpr(pos, scores, valid)


class BPRMF(_Pairwise):
    def __init__(self, n_items: int, dim: int, cfg: FactorisationConfig):
        super().__init__()
        self.n_items, self.cfg = n_items, cfg
        self.items = item_table(n_items, dim)                           # (N, D) h_i: session mean and scores
        self.bias = nn.Parameter(torch.zeros(n_items + 1))              # (N,) b_j

    def hidden(self, seqs: torch.Tensor) -> torch.Tensor:
        """(B, L) -> (B, L, D + 1): [mean of h over items <= t ; 1] at every real position t."""
        mask = (seqs != 0).to(self.items.weight.dtype)                  # (B, L)
        total = self.items(seqs).cumsum(1)                              # (B, L, D) padding rows are 0
        count = mask.cumsum(1).clamp(min=1)[..., None]                  # (B, L, 1)
        u = total / count * mask[..., None]                             # (B, L, D)
        return torch.cat((u, mask[..., None]), dim=-1)                  # (B, L, D + 1)

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:
        return self.hidden(seqs)[:, -1]                                 # (B, D + 1) left padding: last column

    def item_weights(self) -> torch.Tensor:
        return torch.cat((self.items.weight, self.bias[:, None]), dim=-1)  # (N, D + 1) [h_j ; b_j]


class FPMC(_Pairwise):
    def __init__(self, n_items: int, dim: int, cfg: FactorisationConfig):
        super().__init__()
        self.n_items, self.cfg = n_items, cfg
        self.last = item_table(n_items, dim)                            # (N, D) v^{L,I}: the previous item
        self.next = item_table(n_items, dim)                            # (N, D) v^{I,L}: the candidate

    def hidden(self, seqs: torch.Tensor) -> torch.Tensor:
        return self.last(seqs)                                          # (B, L, D) state after item t; 0 at padding

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:
        return self.last(seqs[:, -1])                                   # (B, D) left padding: the last item

    def item_weights(self) -> torch.Tensor:
        return self.next.weight                                         # (N, D)


def _builder(cls, name: str):
    def build(n_items: int, max_len: int, train, options=None, encoding=None) -> Recommender:
        cfg = model_options(FactorisationConfig, name, options)
        if cfg.loss not in ("bpr", "ce"):
            raise ParamsError(f"models.{name}.loss must be 'bpr' or 'ce', got {cfg.loss!r}", "use bpr (the paper's) or ce")
        if cfg.negatives < 1:
            raise ParamsError(f"models.{name}.negatives must be >= 1, got {cfg.negatives}", "use e.g. 1 (LearnBPR)")
        return cls(n_items, train.dim, cfg)
    return build


def _ignores(options: dict) -> tuple:
    """The train keys a factor model does not read: the network sizes (it has factors of train.dim and nothing
    else) and, with its own BPR loss (the default), the trainer's loss settings (train.loss, ce_impl,
    negatives); with models.<name>.loss ce it trains with them."""
    bpr = (options or {}).get("loss", FactorisationConfig.loss) != "ce"
    return ("layers", "heads", "dropout") + (("loss", "ce_impl", "negatives") if bpr else ())


def _unread(name: str):
    def unread(cfg: FactorisationConfig) -> dict:
        """models.<name>.negatives is BPR's: under loss ce (the trainer's loss) it is not read."""
        return {"negatives": (f"models.{name}.loss ce trains with the trainer's loss (train.loss)",
                              f"models.{name}.loss=bpr")} if cfg.loss == "ce" else {}
    return unread


register_model(ModelSpec("bprmf", _builder(BPRMF, "bprmf"), "BPR-MF: session = mean of its item factors, BPR loss",
                         "Rendle et al. 2009 (000 Table 2)", uses_encoding=False, causal=True, ignores=_ignores,
                         unread_options=_unread("bprmf")), options=FactorisationConfig)
register_model(ModelSpec("fpmc", _builder(FPMC, "fpmc"), "FPMC without users: factorised transition from the last item",
                         "Rendle et al. 2010 (000 Table 2)", uses_encoding=False, causal=True, ignores=_ignores,
                         unread_options=_unread("fpmc")), options=FactorisationConfig)
