"""Tasks: what the training loop trains on and how a model is scored. The loop (loop.py) never asks
which task it runs; it asks the task for batches, a loss and metrics.

    task.kind                 "next_item" | "ctr"
    task.sizes                predictions per split (run.json "samples")
    task.n_train              predictions per train epoch (progress, samples/s)
    task.metric_keys          metrics `evaluate` returns; task.default_select (train.select_metric: auto)
    task.higher_is_better(m)  direction of a metric for model selection
    task.build(params, encoding_fn) -> model        the backbone for the samples' vocabulary
    task.batches(generator)   shuffled train batches on the device (seeded by `generator`)
    task.loss(net, batch, generator) -> (loss, predictions in the batch)
    task.evaluate(net, split) -> metrics            valid / test metrics
    task.test(net) -> (metrics, per-sample frame)   the one test scoring (significance tests read the frame)

NextItemTask (srgnn / leave_one_out data): softmax cross-entropy over all items (`loss: ce`, FPARec
003 §3.3 / SASRec with full softmax), or sampled softmax over the target and `negatives` uniformly
drawn items shared by the batch (`loss: sampled`; uniform sampling needs no log-Q correction because
it shifts every logit alike); a backbone may bring its own objective (`Recommender.training_loss`:
GRU4Rec's BPR-max, BPR-MF). Objective `prefixes` trains on (prefix, next item) samples in
length-bucketed shuffled batches; `sequence` has a causal backbone read a whole leave-one-out train
sequence and predict the next item at every position (SASRec's training, 003 Eq. 11). Metrics:
full-ranking HR / MRR / NDCG at evaluate.ks with the exact tie rule (models/metrics.py); with
evaluate.candidates = N > 0, the rank among N sampled negatives per row instead (CARCA's / 004's
protocol, pipeline/train/candidates.py), never the default. A model that declares side information
(ModelSpec.side, e.g. CARCA) is built with the samples folder's item features and gets each batch's
interaction context (pipeline/side.py); other models never load either.

CTRTask (ctr data, CAPE 001 §5): pointwise binary cross-entropy on the click label plus the
backbone's auxiliary loss (DIEN, DMIN); metrics AUC, gAUC and logloss (models/metrics.py).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import numpy as np

from ..batches import Samples, batches, load_samples, load_sequences, load_sessions
from ..errors import DataError
from ..io import SPLITS, check_interrupt
from ..params import Params, TrainParams

# train.compile: reduce-overhead records one CUDA graph per batch shape: trimmed widths are rounded up to a
# multiple of this (Diginetica PosRec at max_len 200: at most 25 widths instead of up to 200). Models are
# padding-invariant, so only the work changes.
GRAPH_WIDTHS = 8


# --------------------------------------------------------------------------- next-item pieces

def _all_tied(greater, ties, candidates, dist=None) -> bool:
    """Whether a model scored each row's target and all its sampled candidates alike (walk 44c #5: HR@10 = 10 / 51
    was recorded under evaluate.candidates 50 for a model full ranking refused as constant): every row's target
    ties with every candidate, or, where mask_history took it out of the ranking, lies below them all while they
    tie (ties 0, greater = the row's candidates); the first kind in some row. Over every process's rows."""
    valid = (candidates != 0).sum(1)                                                  # (S,)
    tied = (greater == 0) & (ties == valid)
    mine = (bool((tied | ((ties == 0) & (greater == valid))).all()), bool(tied.any())) if len(valid) else None
    every = [m for m in ([mine] if dist is None else dist.gather_objects(mine)) if m is not None]
    return bool(every) and all(m[0] for m in every) and any(m[1] for m in every)


def score(net, samples: Samples, split: str, ks, batch_size: int, device, trim: bool = True,
          mask_history: bool = False, per_sample: bool = False, dist=None, amp=None, context: bool = False,
          candidates=None, history=None, probe: Optional[dict] = None):
    """Full-ranking metrics of `net` on one split; scores stay on the device, batch by batch, and are
    turned into every row's (greater, ties) counts; the metrics come from all rows' counts at once
    (models.metrics.ranking_from_counts: exact, independent of batching and of the number of
    processes). `mask_history` takes the items of each row's input out of the ranking
    (models.metrics.mask_seen): of its whole prefix where `history` (S, H) holds the rows' prefixes longer than
    the model's window (NextItemTask passes them), so what is excluded never depends on train.max_len. With `per_sample`, also return a frame of the rows' counts in file
    order (pipeline.significance reads them). `dist` (distributed.Dist): this process scores its
    share of the rows and the counts of every process are gathered. `amp`: an autocast context
    factory for the forward pass (the trainer passes none: a bf16 model's scores, cast to fp32 only after
    autocast, kept bf16's 8-bit mantissa, and thousands of items tied with the target; walk 40c #1).

    `context`: the model takes side information and the samples hold it (pipeline/side.py): it is
    passed to the model. `candidates` (S, M) int32 (evaluate.candidates > 0, pipeline/train/candidates.py):
    each row's target is ranked among its own M sampled items instead of all items.

    Rows are served sorted by prefix length (every row once, so the metrics are those of any
    order) so that trimmed batches carry little padding.

    `probe` (a dict): filled with "constant", whether every row got the scores of the
    first row served although their inputs differ (`Constancy`): a model that ignores its input, whose
    metrics are its item ranking's, whatever the session; with `candidates`, whether every row's target tied
    with all its candidates (`_all_tied`)."""
    import contextlib
    import torch
    from models.metrics import greater_and_ties, mask_seen, ranked_precision, ranking_from_counts
    from .candidates import counts
    n = len(samples)
    rows = dist.rows(n) if dist is not None else None
    part = samples if rows is None else samples.take(rows.numpy())
    if candidates is not None:
        candidates = torch.from_numpy(np.asarray(candidates if rows is None else candidates[rows.numpy()]))
    if history is not None and mask_history:
        history = torch.from_numpy(np.asarray(history if rows is None else history[rows.numpy()]))
    else:
        history = None
    greater = torch.zeros(len(part), dtype=torch.int64, device=device)
    ties = torch.zeros(len(part), dtype=torch.int64, device=device)
    same = Constancy() if probe is not None and candidates is None else None
    net.eval()
    with torch.inference_mode():
        for seqs, targets, *side, idx in batches(part, batch_size, device=device, trim=trim, by_length=trim,
                                                 with_index=True, context=context):
            check_interrupt()
            kw = {"context": side[0]} if side else {}
            seen = seqs if history is None else history[idx].to(device)      # (B, L) or (B, H): what mask_history masks
            if candidates is not None:
                with (amp() if amp is not None else contextlib.nullcontext()):
                    g, t = counts(net, seqs, targets, candidates[idx].to(device).long(), mask_history=mask_history,
                                  history=seen, **kw)
                idx = idx.to(device)
                greater[idx], ties[idx] = g, t
                continue
            with (amp() if amp is not None else contextlib.nullcontext()):
                scores = net(seqs, **kw)                                 # (B, N)
            scores = ranked_precision(scores)
            if same is not None:
                same.update(scores, idx)
            scores = mask_seen(scores, seen) if mask_history else scores
            g, t = greater_and_ties(scores, targets)                     # (B,), (B,): above / tied with target
            idx = idx.to(device)
            greater[idx], ties[idx] = g, t
    if probe is not None and candidates is not None:
        probe["constant"] = _all_tied(greater, ties, candidates.to(device), dist)
    if dist is not None:
        greater, ties = dist.gather_rows(greater, n), dist.gather_rows(ties, n)
    if same is not None:
        probe["constant"] = same.constant(part, dist)
    metrics = ranking_from_counts(greater, ties, ks)
    if not per_sample:
        return metrics
    import polars as pl
    return metrics, pl.DataFrame({"greater": greater.to("cpu", torch.int32).numpy(),
                                  "ties": ties.to("cpu", torch.int32).numpy()})


class Constancy:
    """Whether a next-item model scored every row alike: each batch's scores (B, N) against the first row's,
    until a row differs by more than 16 float32 steps at the first row's largest |score|, after which nothing
    more is computed (a model that reads its input differs in its first batch). No absolute floor, unlike
    CTR's CONSTANT_SPAN: STAMP after one epoch on a toy set scores ~1.4e-6, and its rows differ by as much; a
    model that ignores its input gives rows equal to the bit (one batch shape or another). Rows whose inputs are
    the first row's own are alike by right, so a split where no input differs is never called constant. The
    ranking metrics of a model that ignores its input are those of one fixed item order: HR@10 = 10/N when it
    scores every item alike, POP's when it kept only item biases. Fitted baselines such as POP are exempt
    (stage.train_one): they are input-independent by design."""

    def __init__(self):
        self.ref, self.first, self.varies = None, None, False   # the first row's finite scores, its row, ...
        self.cols, self.tol = None, 0.0                          # the columns it scores finitely, the tolerance

    @staticmethod
    def tolerance(ref) -> float:                        # ref: the first row's finite scores
        return 16 * float(np.spacing(np.float32(float(ref.abs().max()))))

    def update(self, scores, idx) -> None:                                  # (B, N), (B,) rows of the split
        import torch
        if self.varies:
            return
        if self.ref is None:                 # the columns the first row scores finitely (not padding's -inf)
            self.cols = torch.isfinite(scores[0])
            self.ref, self.first = scores[0, self.cols].clone(), int(idx[0])
            self.tol = self.tolerance(self.ref)
        self.varies = bool(((scores[:, self.cols] - self.ref).abs().amax(1) > self.tol).any())

    def constant(self, part: Samples, dist=None) -> bool:
        """True when no row scored differently while some row's input differs (over every process's rows)."""
        mine = None
        if self.ref is not None and self.varies:                              # the usual case: nothing to read
            mine = (True, True, None)
        elif self.ref is not None:                                            # this process scored rows alike
            first = self.first
            differ = bool((part.seqs != part.seqs[first]).any()) or (
                part.context is not None and bool((part.context != part.context[first]).any()))
            mine = (False, differ, (part.seqs[first].tobytes(), self.ref.cpu()))
        every = [m for m in ([mine] if dist is None else dist.gather_objects(mine)) if m is not None]
        if not every or any(m[0] for m in every):
            return False
        seq, ref = every[0][2]
        if any(m[2][1].shape != ref.shape or float((m[2][1] - ref).abs().max()) > self.tolerance(ref) for m in every[1:]):
            return False                                         # each process alike, but not like each other
        return any(m[1] for m in every) or any(m[2][0] != seq for m in every[1:])


def ce_impl(tp: TrainParams, device) -> str:
    """train.ce_impl with auto resolved: the chunked loss on CPU (bench/results/train.md: steps 1.7x
    faster on the Beauty batches the trainer serves, 2.1x on full-length ones, 1/34 to 1/113 of the
    loss's memory), the plain one on CUDA: on an H100 (train.md "Session 19", Diginetica SASRec at
    batch 4,096) plain trained 550,227 samples/s, chunked 281,262, and cce (bf16 only) 369,468 against
    plain's 424,218 in bf16; liger was slower still. cce / liger are for item tables whose logits do
    not fit, where memory, not speed, decides."""
    if tp.ce_impl != "auto":
        return tp.ce_impl
    return "plain" if device.type == "cuda" else "chunked"


def loss_fn(net, seqs, targets, tp: TrainParams, n_items: int, generator):
    """The trainer's objective on one batch (`train.loss`, models/losses.py):

        ce       softmax cross-entropy over all items (plain or chunked, `train.ce_impl`)
        sampled  softmax over the target and `negatives` uniform items shared by the batch
        bce      SASRec's sigmoid BCE, one uniform negative per prediction (Kang & McAuley 2018)

    targets (B,): one next item per row (objective prefixes). targets (B, L): the next item of every
    position, 0 where none (objective sequence): the causal backbone's hidden state at each real
    position is scored against its own target, all positions of the batch weighted alike."""
    import torch
    import torch.nn.functional as F
    from models.losses import linear_cross_entropy, sampled_bce
    w = net.item_weights()                                               # (N, D), row 0 = padding
    if targets.dim() == 2:
        h = net.hidden(seqs)                                             # (B, L, D)
        if tp.loss == "bce":
            return sampled_bce(h, w, targets, generator)
        where = targets != 0                                             # (B, L)
        h, targets = h[where], targets[where]                            # (T, D), (T,)
    else:
        h = net.encode(seqs)                                             # (B, D)
        if tp.loss == "bce":
            return sampled_bce(h, w, targets, generator)
    if tp.loss == "ce":
        return linear_cross_entropy(h.float(), w.float(), targets, impl=ce_impl(tp, h.device))
    neg = torch.randint(1, n_items + 1, (tp.negatives,), generator=generator).to(seqs.device)  # (M,)
    pos = (h * w[targets]).sum(-1, keepdim=True)                         # (B, 1)
    negs = h @ w[neg].t()                                                # (B, M)
    negs = negs.masked_fill(neg[None, :] == targets[:, None], float("-inf"))  # accidental hits
    logits = torch.cat([pos, negs], 1)                                   # (B, 1 + M)
    return F.cross_entropy(logits.float(), torch.zeros_like(targets))


def spill_dir(manifest: dict, split: str, max_len: int, kind: str) -> Path:
    """Where a split's memory-mapped matrices go under train.memory_budget: keyed by the split's shard
    hashes and the layout, so a changed dataset never reuses stale ones."""
    import hashlib
    from ..io import dumps_json
    from .runs import state_root
    shards = [e for e in manifest.get("shards", []) if e.get("path", "").startswith(f"{split}/")]
    key = hashlib.sha256(dumps_json({"shards": shards, "max_len": max_len, "kind": kind}).encode()).hexdigest()[:20]
    return state_root() / "spill" / key


def _id_range(d, rows: int = 1 << 16) -> tuple[int, int]:
    """(smallest real target, largest id of inputs and targets) of Samples `d`, read `rows` rows at a time: a
    split memory-mapped under train.memory_budget is never copied whole (the sequence objective's targets
    are (S, L), whose mask of real positions alone took S x L bytes; walk 40h #3)."""
    low, high = None, 0
    for start in range(0, len(d), rows):
        seqs, targets = np.asarray(d.seqs[start:start + rows]), np.asarray(d.targets[start:start + rows])
        high = max(high, int(seqs.max(initial=0)), int(targets.max(initial=0)))
        real = targets[targets != 0] if targets.ndim == 2 else targets
        if real.size:
            low = int(real.min()) if low is None else min(low, int(real.min()))
    return (0 if low is None else low), high


class NextItemTask:
    kind = "next_item"

    def __init__(self, samples_dir: Path, manifest: dict, tp: TrainParams, params: Params, spec, device, dist=None):
        from .. import side
        self.tp, self.ev, self.spec, self.device, self.dist = tp, params.evaluate, spec, device, dist
        self.n_items = int(manifest["n_items"])
        # side information (pipeline/side.py): loaded only for a model that declares it (ModelSpec.side)
        self.side = side.SideInfo(side.item_features(samples_dir, manifest), side.context_names(manifest)) \
            if getattr(spec, "side", False) else None
        width = self.side.context_width if self.side is not None else 0
        if width and tp.memory_budget and os.environ.get("RANK", "0") == "0":     # was silent (walk 33a)
            sys.stderr.write(f"note: train.memory_budget is {tp.memory_budget:g} MB, and '{spec.name}' reads each "
                             "interaction's context, whose samples are held in memory: the budget does not apply "
                             "to this run\n")
        self.manifest = manifest
        self.data = {}
        for split in SPLITS:
            loader = load_sequences if split == "train" and tp.objective == "sequence" else load_samples
            extra = {"context": width} if width and loader is load_samples else {}
            self.data[split] = loader(samples_dir, split, tp.max_len, tp.memory_budget,
                                      spill_dir(manifest, split, tp.max_len, loader.__name__), **extra)
        for split in SPLITS:
            d = self.data[split]
            if len(d) == 0:
                pre = (manifest.get("params") or {}).get("preprocess") or {}    # augment nests the sessions' params
                was = pre.get("valid_fraction", (pre.get("preprocess") or {}).get("valid_fraction"))
                fix = ("training picks its best epoch on valid: re-run `seqpe preprocess` with preprocess.valid_fraction "
                       f"above 0 (e.g. 0.1{'' if was is None else f'; it was {was}'}), then `seqpe augment`"
                       if not was else "training picks its best epoch on valid: re-run `seqpe preprocess` with a larger "
                       f"preprocess.valid_fraction (it was {was}) or more raw data, then `seqpe augment`") \
                    if split == "valid" else "check the dataset's protocol"
                raise DataError(f"the {split} split of {samples_dir} has no samples", fix)
            low, high = _id_range(d)
            if high > self.n_items or low < 1:
                raise DataError(f"{split} samples hold item ids outside 1..{self.n_items} (n_items)",
                                "re-run `seqpe augment` so samples and manifest agree")
        self.sessions = load_sessions(samples_dir, "train") if spec.fitted else None
        # the valid / test rows' whole stored prefixes, where some are longer than the model's window: what
        # evaluate.mask_history excludes and what candidates are drawn against, the same for every train.max_len
        whole = {split: self._whole_prefixes(samples_dir, split) for split in ("valid", "test")} \
            if self.ev.mask_history or self.ev.candidates > 0 else {}
        self.history = {split: rows.seqs for split, rows in whole.items() if rows is not None} \
            if self.ev.mask_history else {}
        self.candidates = self._candidates(samples_dir, whole) if self.ev.candidates > 0 else {}

    def _whole_prefixes(self, samples_dir: Path, split: str):
        """`split`'s rows with their whole stored prefixes (Samples, file order), or None when none is longer than
        train.max_len (the loaded rows are then whole)."""
        import polars as pl
        from ..io import scan_split
        lf = scan_split(samples_dir, split)
        longest = (lf.select(pl.col("prefix").list.len().max()).collect().item()
                   if "prefix" in lf.collect_schema().names() else None)
        if not longest or longest <= self.tp.max_len:
            return None
        return load_samples(samples_dir, split, int(longest), self.tp.memory_budget,
                            spill_dir(self.manifest, split, int(longest), "whole_prefixes"))

    def _candidates(self, samples_dir: Path, whole: dict) -> dict:
        """evaluate.candidates > 0: each valid / test row's sampled negatives (pipeline/train/candidates.py),
        drawn against the rows' whole stored prefixes (not cut to train.max_len), so that they depend on
        the samples folder only and every model ranks the same ones."""
        from ..batches import click_counts
        from .candidates import sample_candidates
        weights = None
        if self.ev.candidate_sampling == "popularity":
            weights = click_counts(samples_dir, "train", self.n_items)
        out = {}
        for split in ("valid", "test"):
            rows = whole[split] if whole[split] is not None else self.data[split]
            out[split] = sample_candidates(rows.seqs, rows.targets, self.n_items, self.ev.candidates,
                                           exclude_history=self.ev.mask_history, weights=weights)
        return out

    @property
    def _context(self) -> bool:
        return self.side is not None and self.side.context_width > 0

    # -- what the loop and the records read
    @property
    def sizes(self) -> dict[str, int]:
        return {s: self.data[s].n_targets for s in SPLITS}

    @property
    def n_train(self) -> int:
        return self.data["train"].n_targets

    @property
    def metric_keys(self) -> list[str]:
        from models.metrics import metric_keys
        return metric_keys(self.ev.ks)

    @property
    def default_select(self) -> str:
        return "ndcg@10" if 10 in self.ev.ks else f"ndcg@{max(self.ev.ks)}"

    def higher_is_better(self, metric: str) -> bool:
        return True

    # -- model, batches, loss, metrics
    def build(self, params: Params):
        """The backbone with its encoding object built at train.dim (None for models that take none)."""
        from models import build_model
        from . import setup
        tp = self.tp
        encoding = (setup.build_encoding(tp.encoding, tp, params.encodings.get(tp.encoding, {}))
                    if self.spec.uses_encoding else None)
        extra = {"side": self.side} if self.side is not None and getattr(self.spec, "side", False) else {}
        return build_model(tp.model, n_items=self.n_items, max_len=tp.max_len, train=tp,
                           options=params.models.get(tp.model, {}), encoding=encoding, **extra)

    def fit(self, net) -> None:
        """Fitted baselines (POP, S-POP, Item-KNN): one pass over the train sessions."""
        import torch
        items, session = self.sessions
        net.fit(torch.from_numpy(items).to(self.device), torch.from_numpy(session).to(self.device))

    def batches(self, generator):
        tp = self.tp
        return batches(self.data["train"], tp.batch_size, shuffle=True, generator=generator, device=self.device,
                       trim=tp.trim_padding, bucket=tp.bucket if tp.trim_padding else 0, context=self._context,
                       pad_to=GRAPH_WIDTHS if tp.compile == "reduce-overhead" else 1)

    def loss(self, net, batch, generator):
        seqs, targets, *side = batch
        own = net.training_loss(seqs, targets, generator, **({"context": side[0]} if side else {}))
        self.own_loss = own is not None                                  # its own objective: no chance_loss
        loss = own if own is not None else loss_fn(net, seqs, targets, self.tp, self.n_items, generator)
        n = (targets != 0).sum() if targets.dim() == 2 else len(targets)   # predictions (read with the loss)
        return loss, n

    def chance_loss(self) -> Optional[float]:
        """The training loss of a uniform guess, where the loss is the task's softmax (train.loss ce: ln N; sampled:
        ln(negatives + 1)); None for a model's own loss (`training_loss`) and BCE (loop.not_learnt)."""
        import math
        if getattr(self, "own_loss", True):             # a model's own objective (GRU4Rec's, CARCA's), or no step yet
            return None
        if self.tp.loss == "ce":
            return math.log(self.n_items)
        if self.tp.loss == "sampled" and self.tp.negatives:
            return math.log(self.tp.negatives + 1)
        return None

    def evaluate(self, net, split: str) -> dict[str, float]:
        ev = self.ev
        return score(net, self.data[split], split, ev.ks, ev.batch_size, self.device, trim=self.tp.trim_padding,
                     mask_history=ev.mask_history, dist=self.dist, context=self._context,     # fp32: no amp
                     candidates=self.candidates.get(split), history=self.history.get(split))

    def test(self, net):
        """The test metrics and per-sample counts; `self.constant` then says whether the model ignored its input
        (`Constancy`; with evaluate.candidates, whether it scored every row's candidates alike)."""
        ev, probe = self.ev, {}
        out = score(net, self.data["test"], "test", ev.ks, ev.batch_size, self.device, trim=self.tp.trim_padding,
                    mask_history=ev.mask_history, per_sample=True, dist=self.dist,
                    context=self._context, candidates=self.candidates.get("test"), history=self.history.get("test"),
                    probe=probe)
        self.constant = probe.get("constant", False)
        return out


# --------------------------------------------------------------------------- CTR

class CTRTask:
    kind = "ctr"
    METRICS = ("auc", "gauc", "logloss")

    def __init__(self, samples_dir: Path, manifest: dict, tp: TrainParams, params: Params, spec, device, dist=None):
        from ..ctr_batches import ctr_schema, load_ctr
        self.tp, self.ev, self.spec, self.device, self.dist = tp, params.evaluate, spec, device, dist
        self.schema = ctr_schema(manifest, tp.max_len)
        self.data = {split: load_ctr(samples_dir, split, tp.max_len) for split in SPLITS}
        for split in SPLITS:
            if len(self.data[split]) == 0:
                raise DataError(f"the {split} split of {samples_dir} has no rows", "check the dataset's protocol")
        self.no_gauc = self._check_labels(samples_dir, tp)

    def _check_labels(self, samples_dir: Path, tp: TrainParams) -> tuple[str, ...]:
        """The scored splits (valid, test) where gAUC is undefined: no user has both a click and a non-click
        (PROTOCOLS §5 skips one-class users). Their metrics leave gAUC out, said in a note, where NaN was recorded
        and every report then refused the run (walk 36b). A split of one label leaves AUC undefined: refused."""
        undefined = []
        for split in ("valid", "test"):
            y, users = self.data[split].label, self.data[split].group
            if y.min() == y.max():
                raise DataError(f"the {split} split of {samples_dir} holds only {'clicks' if y[0] else 'non-clicks'} "
                                f"({len(y):,} rows): AUC is undefined without both labels",
                                "check the dataset's protocol or source (a CTR split needs clicks and non-clicks)")
            _, at = np.unique(users, return_inverse=True)
            clicks, rows = np.bincount(at, weights=y), np.bincount(at)
            if not ((clicks > 0) & (clicks < rows)).any():
                undefined.append(split)
        if undefined and tp.select_metric == "gauc" and "valid" in undefined:
            raise DataError(f"train.select_metric is gauc, and no user of the valid split of {samples_dir} has both "
                            "a click and a non-click: gAUC is undefined there", "set train.select_metric auc")
        if undefined and (self.dist is None or self.dist.main):
            sys.stderr.write(f"note: no user of the {' and '.join(undefined)} split{'s' * (len(undefined) > 1)} of "
                             f"{samples_dir} has both a click and a non-click, so gAUC (per-user AUC) is undefined "
                             "there: those metrics record auc and logloss only\n")
        return tuple(undefined)

    @property
    def sizes(self) -> dict[str, int]:
        return {s: len(self.data[s]) for s in SPLITS}

    @property
    def n_train(self) -> int:
        return len(self.data["train"])

    metric_keys = list(METRICS)
    default_select = "auc"

    def higher_is_better(self, metric: str) -> bool:
        return metric != "logloss"

    def build(self, params: Params):
        """The backbone; it builds the encoding itself, at the width and layer count of the attention
        that uses it (models/ctr/base.py EncodingChoice)."""
        from models import build_model
        from models.ctr.base import EncodingChoice
        tp = self.tp
        return build_model(tp.model, schema=self.schema, train=tp, options=params.models.get(tp.model, {}),
                           encoding=EncodingChoice(tp.encoding, params.encodings.get(tp.encoding, {})))

    def batches(self, generator):
        from ..ctr_batches import ctr_batches
        return ctr_batches(self.data["train"], self.tp.batch_size, shuffle=True, generator=generator,
                           device=self.device, trim=self.tp.trim_padding)

    def loss(self, net, batch, generator):
        """Pointwise binary cross-entropy on the click (CAPE 001 §5.1.5) plus the backbone's auxiliary loss."""
        import torch.nn.functional as F
        out = net(batch)
        loss = F.binary_cross_entropy_with_logits(out.logits.float(), batch.label)
        if out.aux_loss is not None:
            loss = loss + out.aux_loss
        return loss, len(batch)

    def _score(self, net, split: str):
        """Every row's logit in file order, then the metrics from all rows at once. With train.trim_padding a
        batch's logits depend in their last bits on which rows share it (its width is its longest history's),
        so they are those of one evaluate.batch_size, not of any. Distributed, each process scores whole
        batches b = rank, rank + W, ... of that one-process batching and the logits are gathered: the same bits
        as one process for any number of processes."""
        import torch
        from models.metrics import CTRMetrics
        from ..ctr_batches import ctr_batches
        data = self.data[split]
        block = self.ev.batch_size
        rows = self.dist.rows(len(data), block) if self.dist is not None else None
        part = data if rows is None else data.take(rows.numpy())
        logits = []
        net.eval()
        with torch.inference_mode():
            for batch in ctr_batches(part, self.ev.batch_size, device=self.device, trim=self.tp.trim_padding):
                check_interrupt()
                out = net(batch).logits      # in fp32, not autocast: bf16 logits tied nearby pairs (walk 40c #1)
                logits.append(out.float())                                   # (B,) metrics in fp32 or better
        logits = torch.cat(logits) if logits else torch.zeros(0, device=self.device)
        if self.dist is not None:
            logits = self.dist.gather_rows(logits, len(data), block)
        logits = logits.cpu()
        acc = CTRMetrics()
        acc.update(logits, torch.from_numpy(data.label), torch.from_numpy(data.group))
        metrics = acc.compute()
        if split in self.no_gauc:                      # undefined there (`_check_labels`): not recorded as NaN
            del metrics["gauc"]
        return metrics, logits

    def evaluate(self, net, split: str) -> dict[str, float]:
        return self._score(net, split)[0]

    def test(self, net):
        import polars as pl
        metrics, logits = self._score(net, "test")
        return metrics, pl.DataFrame({"logit": logits.numpy().astype(np.float32)})


def selection(kind: str, params: Params) -> "NextItemTask | CTRTask":
    """The task of `kind` as far as train.select_metric needs it (kind, metric_keys, default_select, all read from
    params.evaluate), without loading a sample: `seqpe train --check` said ok for a select_metric the run then
    refused, also under a memory budget, where --check builds no task."""
    task = object.__new__(CTRTask if kind == "ctr" else NextItemTask)
    task.ev = params.evaluate
    return task


def make_task(kind: str, samples_dir: Path, manifest: dict, tp: TrainParams, params: Params, spec,
              device, dist=None) -> "NextItemTask | CTRTask":
    return (CTRTask if kind == "ctr" else NextItemTask)(Path(samples_dir), manifest, tp, params, spec, device, dist)

