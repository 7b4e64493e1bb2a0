"""Epochs with model selection on valid, early stopping, a time limit and resume: task-agnostic.

The loop asks the task (tasks.py) for shuffled batches, a loss and valid metrics. After every epoch
the valid metrics are computed, the best epoch's weights (on the select metric, in the task's
direction) are kept, training stops after `patience` epochs without improvement (or `epochs`, or
the epoch that reaches `time_limit` minutes), and the best weights are left in the model for the
one test scoring.

Numbers that cannot be trusted stop the run: a NaN or infinite training loss raises Diverged (a TrainingError)
naming the epoch and batch, and so do an epoch's mean loss far above the untrained model's (`diverged`) and a
weight past WEIGHT_LIMIT (`largest_weight`: a bounded loss hides divergence); NaN or infinite scores raise NonFiniteScores (models/metrics.py) with
the epoch and split added. Nothing is written for such a seed.

Resume: after every epoch the whole loop state (weights, optimiser, schedule, RNG states, history)
goes to the resume file, so a killed run restarted with the same inputs continues where it stopped
and ends with the same weights as an uninterrupted one. `time_limit` counts the train + valid
seconds of every epoch run so far, resumed ones included.
"""
from __future__ import annotations

import io
import math
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from ..errors import Diverged, NonFiniteScores
from ..io import check_interrupt, write_bytes
from ..params import TrainParams
from ..progress import EpochProgress
from .distributed import Dist
from .setup import autocast, matmul_precision


def _make_scheduler(opt, tp: TrainParams, maximise: bool):
    import torch
    if tp.lr_schedule == "step":
        return torch.optim.lr_scheduler.StepLR(opt, step_size=tp.lr_step, gamma=tp.lr_gamma)
    if tp.lr_schedule == "plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="max" if maximise else "min",
                                                          factor=tp.lr_gamma, patience=tp.lr_step)
    return None


def make_optimizer(net, tp: TrainParams):
    """Adam (Kingma & Ba 2015, L2 `weight_decay` added to the gradient, as every paper here trains),
    with torch's fused kernel where every parameter allows it (float, on the CPU or a CUDA GPU): one
    pass over each tensor instead of the single-tensor loop's ~10 ops, 4.3x faster on the CPU for
    a 37k x 100 item table (bench/results/train.md, "Session 8") and one launch instead of hundreds
    on a GPU. Same update rule; floats differ from the loop's only in the last bits."""
    import torch
    params = list(net.parameters())
    fused = bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.Adam(params, lr=tp.lr, weight_decay=tp.weight_decay, fused=fused or None)


def loss_module(net, task):
    """The training step's forward as one module, so DDP (and torch.compile) see the whole loss:
    the task's loss may call any of the backbone's methods (hidden, encode, item_weights)."""
    from torch import nn

    class LossModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, batch, generator):
            return task.loss(self.net, batch, generator)              # (loss (), predictions in the batch)

    return LossModule()


# Steps between two reads of the training loss, by device type. Reading a loss back (`float(loss)`) waits
# for the GPU to finish every queued kernel, so a read per step stops the host from queueing the next step
# while the GPU runs this one, and leaves the GPU idle until the host has queued the next step's first
# kernels. (On an H100 the effect was within the noise: Diginetica SASRec steps are host-bound at batch
# 256 and nearly all kernel time at 4,096; bench/results/train.md, "Session 19".) On a GPU the losses
# stay on the device and are read together every SYNC_EVERY steps and at the epoch's end; a NaN still
# stops the run naming its batch (the steps queued after it change nothing: nothing is written for the
# seed). On the CPU a loss is computed by the time it is read, so it is read every step, as before.
SYNC_EVERY = {"cuda": 32}


def train_epoch(net, step, opt, task, generator, epoch: int, label: str, dist: Dist, amp, bar=None,
                first: Optional[list] = None, graphs: bool = False) -> float:
    """One pass over this process's share of the task's shuffled train batches (`step`: the loss
    module, DDP-wrapped and/or compiled); returns the mean loss per prediction, over every process's
    batches when distributed. `first`: an empty list
    gets the first batch's loss, the untrained model's (`diverged` measures against it).

    `graphs` (train.compile: reduce-overhead): `step` replays captured CUDA graphs, whose outputs live in
    memory the next replay overwrites, so each step is announced to torch's CUDA-graph trees and the
    losses kept for a later read are copies."""
    import torch
    net.train()
    total, count = 0.0, 0
    pending: list = []                  # (batch number, loss () detached, predictions: int or () tensor) unread

    def read() -> None:
        nonlocal total, count
        values = torch.stack([loss.float() for _, loss, _ in pending]).tolist()     # one wait for all of them
        ns = [int(n) for _, _, n in pending]
        for (b, _, _), value, n in zip(pending, values, ns):
            if not math.isfinite(value):
                raise Diverged(f"{label}: the training loss is {value} at epoch {epoch}, batch {b} (the model "
                                    "diverged); nothing was written for this seed",
                                    "lower train.lr (or train.weight_decay, if it is large), then run again")
            if first is not None and not first:
                first.append(value)
            total += value * n
            count += n
            if bar is not None:
                bar.advance(n, total / count)
        pending.clear()

    for b, batch in enumerate(dist.shard(task.batches(generator), f"{label}: epoch {epoch}"), start=1):
        check_interrupt()                      # a SIGTERM whose raise Python dropped (in a finaliser) ends here
        opt.zero_grad(set_to_none=True)
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with amp():
            loss, n = step(batch, generator)
        kept = loss.detach()
        if graphs:
            kept, n = kept.clone(), (n.clone() if isinstance(n, torch.Tensor) else n)
        pending.append((b, kept, n))
        if len(pending) >= SYNC_EVERY.get(loss.device.type, 1):
            read()                                                  # on the CPU: before this batch's backward
        loss.backward()
        opt.step()
    if pending:
        read()
    total, count = dist.total(total, count)         # every rank's batches: rank 0's share alone was recorded
    return total / max(count, 1)


DIVERGED = 10.0       # an epoch's mean loss above DIVERGED x (|the untrained model's| + 1) stops the run


def diverged(loss: float, start: Optional[float]) -> bool:
    """Whether an epoch's mean training loss shows a diverged model though it stayed finite: far above the
    untrained model's loss `start` (its first batch), which a model that learns anything only falls from.
    `train.lr=50` on SASRec went from ln(78) = 4.4 to 49,990 and was reported as a result; a CTR model
    with log loss 4e12 likewise. The margin (10x, + 1 for losses that start near 0) is far beyond the
    rises of a run that trains (tests/test_train.py)."""
    return start is not None and math.isfinite(start) and loss > DIVERGED * (abs(start) + 1.0)


WEIGHT_LIMIT = 1e4    # a weight whose magnitude passes this after an epoch stops the run


def largest_weight(net) -> tuple[float, str]:
    """The largest |weight| of `net` after an epoch, and the parameter it is in (NaN where one is not finite).
    A bounded loss cannot show a diverged model: GRU4Rec's TOP1 stays near 1 whatever the scores (walk 44c #2:
    `train.lr=1e6` left weights of 8.5e6 and HR@10 at chance, recorded without a word, where `diverged` needs a
    loss 10x the untrained one's). The weights then grow without bound; those of a model that trains stay far
    below WEIGHT_LIMIT (SASRec, GRU4Rec, BPR-MF and the CTR models on `sample` at their defaults: under 10;
    GRU4Rec TOP1 at lr 100, where it still learns: 2e3; at lr 1e3, at chance: 1.3e4)."""
    import torch
    worst, where = 0.0, ""
    with torch.no_grad():
        for name, p in net.named_parameters():
            if not p.is_floating_point() or p.numel() == 0:
                continue
            low, high = (float(v) for v in torch.aminmax(p.detach()))      # no |p| copy of a large table
            if not (math.isfinite(low) and math.isfinite(high)):
                return math.nan, name
            top = max(-low, high)
            if top > worst:
                worst, where = top, name
    return worst, where


def checked(evaluate: Callable[[], dict], where: str) -> dict:
    """Run `evaluate`; a NonFiniteScores from it names `where` (epoch and split)."""
    try:
        return evaluate()
    except NonFiniteScores as e:
        raise NonFiniteScores(f"{e.problem} ({where})", e.fix) from None


def fit_epochs(net, task, tp: TrainParams, select: str, seed: int, label: str, generator, device, progress: bool,
               history: list, timing: list, resume_path: Optional[Path],
               on_epoch: Optional[Callable[[list], None]] = None, dist: Optional[Dist] = None,
               inputs: Optional[dict] = None, run_dir: Optional[Path] = None) -> tuple[int, str, int, Optional[str]]:
    """Train `net` on `task`; leaves the best weights in `net`. Returns (best epoch, why training
    stopped: "epochs" | "patience" | "time_limit", the epoch a resumed run went on from or 0, why it learnt
    nothing (`not_learnt`) or None).
    `on_epoch(history)` is called after each epoch (curves), also for the epochs a resumed run restored.
    `inputs` (runs.shown_inputs) and `run_dir` (the seed's folder) go into the resume file, so that a command
    of other inputs can say why it does not go on from it (one of the same folder only: stage._note_other_resume)."""
    import torch
    dist = dist or Dist()
    maximise = task.higher_is_better(select)
    step = dist.wrap(loss_module(net, task))
    graphs = tp.compile == "reduce-overhead"
    if graphs:
        net.static_shapes = True                # session graphs with L node slots and no host reads
    if tp.compile:
        step = torch.compile(step, dynamic=True, **({"mode": "reduce-overhead"} if graphs else {}))
    amp = lambda: autocast(tp, device)  # noqa: E731
    opt = make_optimizer(net, tp)
    sched = _make_scheduler(opt, tp, maximise)
    sign = 1.0 if maximise else -1.0
    loop = {"epoch": 0, "best_epoch": 0, "best_value": float("-inf"), "best_state": None, "stale": 0,
            "start_loss": None}
    resumed = 0
    LAST_SAVED.clear()                                  # this seed's own, from its resume file or its epochs
    # rank 0 reads the resume file and hands it to every rank: each reading its own went on from epoch 1 on the node
    # that had the file and from scratch on one that had none (a node-local SEQPE_STATE), and DDP then averaged the
    # gradients of two models until the ranks fell out of step and hung (walk 42b #1)
    saved = dist.broadcast_object(_load_resume(resume_path, label) if dist.main else None)
    if saved is not None:
        try:
            _restore(saved, net, opt, sched, generator, dist, tp, select, inputs)
        except ValueError as e:          # a file torch reads that is not this run's state (walk 39c #2): it was a
            if dist.main:                                  # traceback at every rerun, or "epoch 7 of 2"
                resume_path.unlink(missing_ok=True)
                sys.stderr.write(f"note: {label}: its resume file {resume_path} does not fit this run ({e}) and is "
                                 "deleted; the seed starts afresh from epoch 1\n")
            saved = None
    if saved is not None:
        loop.update(saved["loop"])
        resumed = loop["epoch"]
        LAST_SAVED[:] = [label, resumed, run_dir, resume_path]
        if dist.main:        # said in a log too: an epoch count or time that starts above 1 is then no surprise
            sys.stderr.write(f"note: {label}: going on from its last finished epoch, {resumed} of {tp.epochs} (resume "
                             f"file {resume_path}; `seqpe state` lists it)\n")
        history += saved["history"]
        timing += saved["timing"]
        if on_epoch is not None and history:
            on_epoch(history)
    prog = EpochProgress(label, tp.epochs, task.n_train, enabled=progress and dist.main)   # stderr (pipeline/progress.py)

    def stop_reason() -> Optional[str]:
        if tp.patience > 0 and loop["stale"] >= tp.patience:
            return "patience"
        spent = sum(t["train_s"] + t["valid_s"] for t in timing)
        if tp.time_limit > 0 and spent >= 60 * tp.time_limit and loop["epoch"] < tp.epochs:
            return "time_limit"
        return None

    def decide() -> Optional[str]:                 # rank 0's clock decides for every rank
        return dist.broadcast_object(stop_reason())

    stopped = "epochs"
    try:
        for epoch in range(loop["epoch"] + 1, tp.epochs + 1):
            if (why := decide()) is not None:                            # stopped before a restart
                stopped = why
                break
            lr = opt.param_groups[0]["lr"]
            prog.start(epoch)
            t0 = time.perf_counter()
            first: list = []
            with matmul_precision(tp, device):                      # tf32: steps only, scoring in fp32
                loss = train_epoch(net, step, opt, task, generator, epoch, label, dist, amp, prog,
                                   first if loop.get("start_loss") is None else None, graphs=graphs)
            if first:
                loop["start_loss"] = first[0]
            if dist.broadcast_object(diverged(loss, loop.get("start_loss"))):       # rank 0's numbers decide
                raise Diverged(f"{label}: the training loss rose to {loss:.4g} at epoch {epoch}, from the untrained "
                                    f"model's {loop['start_loss']:.4g} (the model diverged); nothing was written "
                                    "for this seed", "lower train.lr (or train.weight_decay, if it is large), then run again")
            top, name = largest_weight(net)
            if dist.broadcast_object(not top <= WEIGHT_LIMIT):
                raise Diverged(f"{label}: the weights grew to {top:.4g} at epoch {epoch} ({name}; a model that trains "
                               f"keeps them far below {WEIGHT_LIMIT:g}): the model diverged; nothing was written for "
                               "this seed", "lower train.lr, then run again")
            train_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            dist.sync_buffers(net)                      # score with the buffers of the model rank 0 saves
            valid = checked(lambda: task.evaluate(net, "valid"), f"{label}, epoch {epoch}, valid split")
            history.append({"epoch": epoch, "loss": loss, "lr": lr, "valid": valid})
            timing.append({"epoch": epoch, "train_s": train_s, "valid_s": time.perf_counter() - t0,
                           "samples_per_s": task.n_train / max(train_s, 1e-9)})
            value = sign * valid[select]
            loop["epoch"] = epoch
            if value > loop["best_value"] or loop["best_state"] is None:
                loop.update(best_epoch=epoch, best_value=value, stale=0,
                            best_state={k: v.detach().to("cpu", copy=True) for k, v in net.state_dict().items()})
            else:
                loop["stale"] += 1
            prog.epoch(f"epoch {epoch}: loss {loss:.4f}, valid {select} {valid[select]:.4f}, best epoch "
                       f"{loop['best_epoch']}, {timing[-1]['samples_per_s']:,.0f} samples/s")
            if tp.lr_schedule == "plateau":
                sched.step(valid[select])
            elif sched is not None:
                sched.step()
            rngs = dist.gather_objects(torch.get_rng_state())               # each rank's dropout stream
            if resume_path is not None and dist.main:
                _save_resume(resume_path, {
                    "model": net.state_dict(), "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict() if sched is not None else None,
                    "torch_rng": rngs if dist.active else rngs[0], "generator": generator.get_state(),
                    "cuda_rng": torch.cuda.get_rng_state_all() if device.type == "cuda" else None,
                    "loop": loop, "history": history, "timing": timing,
                    "label": label, "epochs": tp.epochs, "world": dist.world,     # for `seqpe state`
                    "inputs": inputs, "run_dir": str(Path(run_dir).resolve()) if run_dir is not None else None})
                LAST_SAVED[:] = [label, epoch, run_dir, resume_path]    # what a Ctrl-C's note names
            if on_epoch is not None and dist.main:
                on_epoch(history)
            check_interrupt()
            if (why := decide()) is not None:
                stopped = why
                break
    finally:
        prog.done()                                                      # an error: the display just stops
    spent = sum(t["train_s"] + t["valid_s"] for t in timing)
    best = next(h for h in history if h["epoch"] == loop["best_epoch"])
    prog.done(f"{loop['epoch']} epoch(s), best epoch {loop['best_epoch']} (valid {select} "
              f"{best['valid'][select]:.4f}), stopped by {stopped}, {spent:.1f} s")
    caveat = not_learnt(history, loop.get("start_loss"), getattr(task, "chance_loss", lambda: None)())
    if dist.main and caveat is not None:
        sys.stderr.write(f"note: {label}: {caveat}, so read its metrics with care (run.json and `seqpe report` "
                         "say so too)\n")
    net.load_state_dict(loop["best_state"])
    return loop["best_epoch"], stopped, resumed, caveat


def not_learnt(history: list, start: Optional[float], chance: Optional[float]) -> Optional[str]:
    """Why a run's training loss shows it learnt nothing of its objective, or None. Two signs:
    - its lowest epoch mean never fell below the untrained model's first batch (walk 42c #2: lr 1 took SASRec's
      loss from 4.17 to 14.9, under the divergence stop). Two epochs at least: one epoch's mean against its
      first batch named BPR-MF and NARM, which learnt (walk 42e #1);
    - its lowest epoch mean is above `chance`, the loss of a uniform guess over what the loss ranks (ln N for
      the full softmax, ln(M + 1) for M sampled negatives), and either not below its first batch or over twice
      `chance` (after one epoch: over twice `chance`, or 1.5 times the first batch's): a model that starts
      absurd never falls from its first batch far enough to be called diverged (STAMP at emb_std 1e4: 1.2e5;
      walk 44c #3), and one epoch of SASRec at lr 0.9 rose from 6.11 to 11.5, under twice ln N (walk 44k #2). A first epoch's mean a
      little above ln N is often a model that learns slowly, not one that does not (NARM on `sample`: 6.40
      against ln N 6.17, HR@10 0.38; a one-epoch SASRec with ALiBi in the DVC test: 4.75 against 4.67).
    Metrics are written (they are the model's), with this said in run.json ("not_learnt") and under the report."""
    losses = [h for h in history if isinstance(h.get("loss"), (int, float)) and math.isfinite(h["loss"])]
    if not losses:
        return None
    lowest = min(losses, key=lambda h: h["loss"])
    where = f"lowest epoch mean {lowest['loss']:.4g}, epoch {lowest['epoch']}"
    known = start is not None and math.isfinite(start)
    rose = known and lowest["loss"] >= start and len(losses) >= 2
    far = known and start > 0 and lowest["loss"] > 1.5 * start          # one epoch's mean far above its first batch
    if chance is not None and lowest["loss"] > chance and (rose or far or lowest["loss"] > 2 * chance):
        return (f"the training loss stayed above a uniform guess's ({chance:.4g}; {where}): it did not learn its own "
                "objective (a learning rate or initialisation too large, or data without a signal this model can use)")
    if rose:
        return (f"the training loss never fell below the untrained model's ({start:.4g}; {where}): it did not learn "
                "its own objective (a learning rate too high, or data without a signal this model can use)")
    return None


def _load_resume(path: Optional[Path], label: Optional[str] = None) -> Optional[dict]:
    """The resume state at `path`, or None. A damaged one (the disk filled up, a truncated copy) is deleted
    and the seed starts afresh, saying so on stderr when `label` is given (rank 0)."""
    import torch
    if path is None or not path.is_file():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        path.unlink(missing_ok=True)
        if label is not None:
            sys.stderr.write(f"note: {label}: its resume file {path} was damaged (unreadable) and is deleted; the "
                             "seed starts afresh from epoch 1\n")
        return None


_LOOP_KEYS = ("epoch", "best_epoch", "best_value", "best_state", "stale", "start_loss")


def _restore(saved, net, opt, sched, generator, dist: Dist, tp: TrainParams, select: Optional[str] = None,
             inputs: Optional[dict] = None) -> None:
    """Put a resume file's weights, optimizer, scheduler and random streams into place, or raise ValueError saying
    what does not fit, with nothing changed: the settings it was written with against `inputs` (this run's
    runs.shown_inputs: a file copied from another configuration brought its lr along in the optimizer state),
    the weights and optimizer slots against the model's shapes, the loop state against train.epochs and its
    history, and what is applied anyway is put back on a failure."""
    import copy
    import torch
    if not isinstance(saved, dict):
        raise ValueError("it holds no training state")
    missing = [k for k in ("model", "optimizer", "torch_rng", "generator", "loop", "history", "timing")
               if k not in saved]
    if missing:
        raise ValueError(f"it has no {', '.join(missing)}")
    if isinstance(inputs, dict) and isinstance(saved.get("inputs"), dict) and saved["inputs"] != inputs:
        from ..report import _differences         # files before resume files kept their inputs: not compared
        found = _differences(saved["inputs"], inputs)
        raise ValueError("it was written by a run of other settings"
                         + (f" ({'; '.join(found[:3])})" if found else ""))
    loop = saved["loop"]
    if not isinstance(loop, dict) or any(k not in loop for k in _LOOP_KEYS):
        raise ValueError("its loop state is incomplete")
    epoch = loop["epoch"]
    if not _count(epoch) or not 1 <= epoch <= tp.epochs:
        raise ValueError(f"it is at epoch {epoch!r}, and this run trains epochs 1 to {tp.epochs}")
    for key in ("history", "timing"):
        if not isinstance(saved[key], list) or len(saved[key]) != epoch or \
                not all(isinstance(x, dict) for x in saved[key]):
            raise ValueError(f"its {key} is not one record per epoch")
    if [h.get("epoch") for h in saved["history"]] != list(range(1, epoch + 1)) or any(
            not isinstance(h.get("valid"), dict) or (select is not None and not _number(h["valid"].get(select)))
            for h in saved["history"]):
        raise ValueError(f"its history is not epochs 1 to {epoch}, each with its valid {select or 'metrics'}")
    best = loop["best_epoch"]                    # a best epoch outside its epochs was a StopIteration at the end
    if not _count(best) or not 1 <= best <= epoch or not _number(loop["best_value"]) or \
            loop["stale"] != epoch - best or \
            not (loop["start_loss"] is None or _number(loop["start_loss"])):
        raise ValueError(f"its loop state (best epoch {best!r}, best value {loop['best_value']!r}, stale "
                         f"{loop['stale']!r}) is not one of its {epoch} epoch(s)")
    shapes = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    for what, state in (("weights", saved["model"]), ("best weights", loop["best_state"])):
        if not isinstance(state, dict) or \
                {k: tuple(getattr(v, "shape", (None,))) for k, v in state.items()} != shapes:
            raise ValueError(f"its {what} are not this model's (names or shapes differ)")
    params = [p for group in opt.param_groups for p in group["params"]]
    kept = saved["optimizer"]
    slots = kept.get("state") if isinstance(kept, dict) else None
    if not isinstance(slots, dict) or any(
            not isinstance(i, int) or not 0 <= i < len(params) or not isinstance(slot, dict)
            or any(torch.is_tensor(v) and v.dim() > 0 and tuple(v.shape) != tuple(params[i].shape)
                   for v in slot.values()) for i, slot in slots.items()):
        raise ValueError("its optimizer state is not this model's")
    if sched is not None and not isinstance(saved.get("scheduler"), dict):
        raise ValueError("it has no learning-rate schedule state")
    before = (copy.deepcopy(net.state_dict()), copy.deepcopy(opt.state_dict()),
              sched.state_dict() if sched is not None else None, torch.get_rng_state(), generator.get_state())
    try:
        net.load_state_dict(saved["model"])
        opt.load_state_dict(kept)
        if sched is not None:
            sched.load_state_dict(saved["scheduler"])
        rng = saved["torch_rng"]
        torch.set_rng_state(rng[dist.rank] if isinstance(rng, list) else rng)
        generator.set_state(saved["generator"])
        if saved.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(saved["cuda_rng"])
    except (RuntimeError, TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
        net.load_state_dict(before[0])
        opt.load_state_dict(before[1])
        if sched is not None:
            sched.load_state_dict(before[2])
        torch.set_rng_state(before[3])
        generator.set_state(before[4])
        raise ValueError(f"{type(e).__name__} restoring it") from None


def _count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


LAST_SAVED: list = []      # [label, epoch, run folder, resume file] of the last resume file this process wrote
#                             (the Ctrl-C note names it)


def _save_resume(path: Path, state: dict) -> None:
    import torch
    buf = io.BytesIO()
    torch.save(state, buf)
    write_bytes(path, buf.getvalue())
