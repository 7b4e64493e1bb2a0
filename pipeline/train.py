"""The train stage: samples -> one run folder per (model, encoding[, tag], seed).

    data/runs/<dataset>/<model>-<encoding>[-<tag>]/seed-<n>/
        checkpoint.pt   {"model": state_dict (best epoch), "config": {...}, "epoch": best epoch}
        run.json        deterministic record: params, valid history per epoch, best epoch,
                        valid and test metrics, device (same inputs + seed -> same bytes)
        timing.json     wall-clock figures (seconds per epoch, samples/s), kept apart so
                        run.json and the DVC metrics built from it stay reproducible

Model selection uses `valid` only: after every epoch the valid metrics are computed, the
best epoch's weights (on `train.select_metric`) are kept, training stops after `patience`
epochs without improvement, and `test` is scored ONCE, with the best weights.

Objective: `prefixes` trains on (prefix, next item) samples, any backbone and protocol, in
length-bucketed shuffled batches (`bucket`); `sequence` has a causal backbone read a whole
leave-one-out train sequence and predict the next item at every position (SASRec's training,
003 Eq. 11). Loss: softmax cross-entropy over all items (`loss: ce`, FPARec 003 §3.3 / SASRec with
full softmax), or sampled softmax over the target and `negatives` uniformly drawn items shared by
the batch (`loss: sampled`, for large catalogues; uniform sampling needs no log-Q correction
because it shifts every logit alike). Adam with L2 weight decay; optional step or plateau
learning-rate schedules (PosRec 000 §5.1: x0.1 every 3 epochs).

torch and the models are imported inside `run`, so `seqpe --help` and the data commands
stay torch-free.

Resumable: after every epoch the loop state goes to a hidden `<model>-<encoding>[-<tag>]/.seed-<n>.<hash>
.resume.pt` (hash of params, options and data shards); re-running the same command after a crash
continues from the last finished epoch and gives the same weights as an uninterrupted run. The
file is removed once the run folder is in place, except after a `train.time_limit` stop: the same
command with a longer limit then goes on from it (`time_limit` is left out of the hash).
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import re
import time
from pathlib import Path
from typing import Iterable, Optional

from . import presets
from .batches import Samples, batches, load_samples, load_sequences, load_sessions
from .errors import DataError, ParamsError, unknown
from .io import SPLITS, atomic_dir, claim_dir, dumps_json, require_kind, write_bytes, write_json
from .params import EvaluateParams, Params, TrainParams, from_dict, to_dict
from .report import config_name

LOSSES = ("ce", "sampled")
SCHEDULES = ("none", "step", "plateau")
OBJECTIVES = ("prefixes", "sequence")


# --------------------------------------------------------------------------- configuration

def samples_manifest(dataset: str, samples_dir: Path) -> dict:
    path = Path(samples_dir) / "manifest.json"
    manifest = require_kind(samples_dir, "samples", dataset, "train")
    modes = set((manifest.get("augment") or {}).values())
    if "rows" in modes:
        raise DataError(f"{samples_dir} holds CTR rows, not next-item samples",
                        "train a next-item model on a session or leave-one-out dataset")
    if not isinstance(manifest.get("n_items"), int) or manifest["n_items"] < 1:
        raise DataError(f"{path} has no positive integer n_items", "re-run `seqpe augment` for this dataset")
    return manifest


def resolve_train(train: TrainParams, spec, preset: Optional[str], model: str, encoding: Optional[str],
                  dataset: str = "", explicit: Iterable[str] = ()) -> TrainParams:
    """TrainParams after the model's preset (and its variant for `dataset`), the `explicit` keys of
    `train` (given by --set, kept over the preset) and the command-line model/encoding."""
    return _train_params(train, presets.resolve(spec.presets, preset, model, dataset).train, model, encoding,
                         explicit)


def resolve_run(params: Params, spec, preset: Optional[str], model: str, encoding: Optional[str], dataset: str,
                explicit: Iterable[str] = ()) -> tuple[TrainParams, Params, presets.Resolved]:
    """(TrainParams, Params with the preset's model/encoding options merged under the explicit ones,
    the preset applied); precedence in pipeline/presets.py."""
    res = presets.resolve(spec.presets, preset, model, dataset)
    tp = _train_params(params.train, res.train, model, encoding, explicit)
    params = dataclasses.replace(params, train=tp, models=presets.merge_options(res.models, params.models),
                                 encodings=presets.merge_options(res.encodings, params.encodings))
    return tp, params, res


def _train_params(train: TrainParams, preset_train: dict, model: str, encoding: Optional[str],
                  explicit: Iterable[str]) -> TrainParams:
    data = to_dict(train)
    data.update(preset_train)
    data.update({k: getattr(train, k) for k in explicit if hasattr(train, k)})
    data["model"] = model
    if encoding is not None:
        data["encoding"] = encoding
    tp = from_dict(TrainParams, data, "train")
    if tp.loss not in LOSSES:
        raise ParamsError(f"train.loss must be one of {', '.join(LOSSES)}, got '{tp.loss}'", "fix train.loss")
    if tp.lr_schedule not in SCHEDULES:
        raise ParamsError(f"train.lr_schedule must be one of {', '.join(SCHEDULES)}, got '{tp.lr_schedule}'",
                          "fix train.lr_schedule")
    for key in ("epochs", "batch_size", "max_len", "dim", "negatives", "lr_step"):
        if getattr(tp, key) < 1:
            raise ParamsError(f"train.{key} must be >= 1, got {getattr(tp, key)}", f"fix train.{key}")
    if tp.objective not in OBJECTIVES:
        raise ParamsError(f"train.objective must be one of {', '.join(OBJECTIVES)}, got '{tp.objective}'",
                          "fix train.objective")
    if tp.bucket < 0:
        raise ParamsError(f"train.bucket must be >= 0, got {tp.bucket}", "use 0 (plain shuffle) or e.g. 50")
    return tp


def check_select_metric(tp: TrainParams, ev: EvaluateParams) -> None:
    from models.metrics import metric_keys
    keys = metric_keys(ev.ks)
    if tp.select_metric not in keys:
        raise ParamsError(f"train.select_metric '{tp.select_metric}' is not computed",
                          f"use one of: {', '.join(keys)} (or add its K to evaluate.ks)")


def pick_device(name: str):
    import torch
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ParamsError(f"train.device is '{name}' but no CUDA device is available", "set train.device: auto")
    try:
        return torch.device(name)
    except RuntimeError:
        raise ParamsError(f"train.device '{name}' is not a device", "use auto, cpu, cuda or cuda:N") from None


def build_encoding(name: str, tp: TrainParams, options: dict):
    """The encoding object for `name` (models.encodings registry), or an unknown-name error."""
    import models.encodings as enc
    if hasattr(enc, "build_encoding"):
        return enc.build_encoding(name, dim=tp.dim, max_len=tp.max_len, heads=tp.heads,
                                  layers=tp.layers, options=options)
    if name not in enc.ENCODINGS:
        raise unknown("encoding", name, enc.ENCODINGS)
    return enc.ENCODINGS[name].build(dim=tp.dim, max_len=tp.max_len, heads=tp.heads,
                                     layers=tp.layers, options=options)


# --------------------------------------------------------------------------- one epoch, scoring

def score(net, samples: Samples, split: str, ks, batch_size: int, device, trim: bool = True,
          mask_history: bool = False) -> dict[str, float]:
    """Full-ranking metrics of `net` on one split; scores stay on the device, batch by batch.
    `mask_history` takes the items of each row's input out of the ranking (models.metrics.mask_seen).

    Rows are served sorted by prefix length (every row once, so the metrics are those of any
    order) so that trimmed batches carry little padding."""
    import torch
    from models.metrics import RankingMetrics, mask_seen
    acc = RankingMetrics(ks)
    net.eval()
    with torch.inference_mode():
        for seqs, targets in batches(samples, batch_size, device=device, trim=trim, by_length=trim):
            scores = net(seqs)                                           # (B, N)
            acc.update(mask_seen(scores, seqs) if mask_history else scores, targets)
    return acc.compute()


def loss_fn(net, seqs, targets, tp: TrainParams, n_items: int, generator):
    """Cross-entropy over all items, or sampled softmax over target + shared uniform negatives.

    targets (B,): one next item per row (objective prefixes). targets (B, L): the next item of every
    position, 0 where none (objective sequence): the causal backbone's hidden state at each real
    position is scored against its own target, all positions of the batch weighted alike."""
    import torch
    import torch.nn.functional as F
    if targets.dim() == 2:
        where = targets != 0                                             # (B, L)
        h, targets = net.hidden(seqs)[where], targets[where]             # (T, D), (T,)
        if tp.loss == "ce":                                              # column 0 (padding) left out, as
            return F.cross_entropy(h @ net.item_weights()[1:].t(), targets - 1)  # forward's -inf does
    elif tp.loss == "ce":
        return F.cross_entropy(net(seqs), targets)                       # (B, N) logits, col 0 = -inf
    else:
        h = net.encode(seqs)                                             # (B, D)
    w = net.item_weights()                                               # (N, D)
    neg = torch.randint(1, n_items + 1, (tp.negatives,), generator=generator).to(seqs.device)  # (M,)
    pos = (h * w[targets]).sum(-1, keepdim=True)                         # (B, 1)
    negs = h @ w[neg].t()                                                # (B, M)
    negs = negs.masked_fill(neg[None, :] == targets[:, None], float("-inf"))  # accidental hits
    logits = torch.cat([pos, negs], 1)                                   # (B, 1 + M)
    return F.cross_entropy(logits, torch.zeros_like(targets))


def train_epoch(net, opt, data: Samples, tp: TrainParams, n_items: int, generator, device, bar=None) -> float:
    """One pass over shuffled train samples; returns the mean loss."""
    net.train()
    total, count = 0.0, 0
    for seqs, targets in batches(data, tp.batch_size, shuffle=True, generator=generator, device=device,
                                 trim=tp.trim_padding, bucket=tp.bucket if tp.trim_padding else 0):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net, seqs, targets, tp, n_items, generator)
        loss.backward()
        opt.step()
        n = int((targets != 0).sum()) if targets.dim() == 2 else len(targets)   # predictions in the batch
        total += float(loss.detach()) * n
        count += n
        if bar is not None:
            bar.advance(n, total / count)
    return total / max(count, 1)


class _Bar:
    """A rich progress bar for one epoch (or nothing when progress is off)."""

    def __init__(self, progress, label: str, total: int):
        self.progress, self.task = progress, progress.add_task(label, total=total, loss=float("nan"))

    def advance(self, n: int, loss: float) -> None:
        self.progress.update(self.task, advance=n, loss=loss)


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("loss {task.fields[loss]:.4f}"), TimeRemainingColumn(), transient=True)


# --------------------------------------------------------------------------- one run

def _make_scheduler(opt, tp: TrainParams):
    import torch
    if tp.lr_schedule == "step":
        return torch.optim.lr_scheduler.StepLR(opt, step_size=tp.lr_step, gamma=tp.lr_gamma)
    if tp.lr_schedule == "plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="max", factor=tp.lr_gamma,
                                                          patience=tp.lr_step)
    return None


def fit_epochs(net, tp: TrainParams, data: dict[str, Samples], n_items: int, rank, seed: int,
               enc_name: str, generator, device, progress: bool, history: list, timing: list,
               resume_path: Optional[Path]) -> tuple[int, str]:
    """Epochs with selection on valid and early stopping; leaves the best weights in `net`.
    `rank(split)` gives the split's metrics (`score` with the evaluate settings). Returns
    (best epoch, why training stopped: "epochs" | "patience" | "time_limit").

    After every epoch the whole loop state (weights, optimiser, schedule, RNG states, history)
    goes to `resume_path`, so a killed run restarted with the same inputs continues where it
    stopped and ends with the same weights as an uninterrupted one. `train.time_limit` counts the
    train + valid seconds of every epoch run so far, resumed ones included.
    """
    import torch
    opt = torch.optim.Adam(net.parameters(), lr=tp.lr, weight_decay=tp.weight_decay)
    sched = _make_scheduler(opt, tp)
    loop = {"epoch": 0, "best_epoch": 0, "best_value": float("-inf"), "best_state": None, "stale": 0}
    saved = _load_resume(resume_path)
    if saved is not None:
        net.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        if sched is not None:
            sched.load_state_dict(saved["scheduler"])
        torch.set_rng_state(saved["torch_rng"])
        generator.set_state(saved["generator"])
        if saved.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(saved["cuda_rng"])
        loop.update(saved["loop"])
        history += saved["history"]
        timing += saved["timing"]
    prog = _progress() if progress else None
    if prog is not None:
        prog.start()

    def stop_reason() -> Optional[str]:
        if tp.patience > 0 and loop["stale"] >= tp.patience:
            return "patience"
        spent = sum(t["train_s"] + t["valid_s"] for t in timing)
        if tp.time_limit > 0 and spent >= 60 * tp.time_limit and loop["epoch"] < tp.epochs:
            return "time_limit"
        return None

    stopped = "epochs"
    try:
        for epoch in range(loop["epoch"] + 1, tp.epochs + 1):
            if (why := stop_reason()) is not None:                       # stopped before a restart
                stopped = why
                break
            lr = opt.param_groups[0]["lr"]
            bar = (_Bar(prog, f"{tp.model}-{enc_name} seed {seed} epoch {epoch}/{tp.epochs}", data["train"].n_targets)
                   if prog is not None else None)
            t0 = time.perf_counter()
            loss = train_epoch(net, opt, data["train"], tp, n_items, generator, device, bar)
            train_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            valid = rank("valid")
            history.append({"epoch": epoch, "loss": loss, "lr": lr, "valid": valid})
            timing.append({"epoch": epoch, "train_s": train_s, "valid_s": time.perf_counter() - t0,
                           "samples_per_s": data["train"].n_targets / max(train_s, 1e-9)})
            value = valid[tp.select_metric]
            loop["epoch"] = epoch
            if value > loop["best_value"] or loop["best_state"] is None:   # NaN never wins
                loop.update(best_epoch=epoch, best_value=value, stale=0,
                            best_state={k: v.detach().to("cpu", copy=True) for k, v in net.state_dict().items()})
            else:
                loop["stale"] += 1
            if prog is not None:
                prog.console.print(f"{tp.model}-{enc_name} seed {seed} epoch {epoch}: loss {loss:.4f}, valid "
                                   f"{tp.select_metric} {100 * value:.2f}, best epoch {loop['best_epoch']}, "
                                   f"{timing[-1]['samples_per_s']:,.0f} samples/s", highlight=False)
            if tp.lr_schedule == "plateau":
                sched.step(value)
            elif sched is not None:
                sched.step()
            if resume_path is not None:
                _save_resume(resume_path, {
                    "model": net.state_dict(), "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict() if sched is not None else None,
                    "torch_rng": torch.get_rng_state(), "generator": generator.get_state(),
                    "cuda_rng": torch.cuda.get_rng_state_all() if device.type == "cuda" else None,
                    "loop": loop, "history": history, "timing": timing})
            if (why := stop_reason()) is not None:
                stopped = why
                break
    finally:
        if prog is not None:
            prog.stop()
    net.load_state_dict(loop["best_state"])
    return loop["best_epoch"], stopped


def _load_resume(path: Optional[Path]) -> Optional[dict]:
    import torch
    if path is None or not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)


def _save_resume(path: Path, state: dict) -> None:
    import torch
    buf = io.BytesIO()
    torch.save(state, buf)
    write_bytes(path, buf.getvalue())


def train_one(spec, tp: TrainParams, params: Params, data: dict[str, Samples], manifest: dict,
              seed: int, device, progress: bool, resume_path: Optional[Path] = None,
              sessions: Optional[tuple] = None, tag: Optional[str] = None) -> tuple:
    """Train (or fit) one seed; return (net with the best weights, record, timing). Fitted baselines
    take `sessions`, the train split's whole sequences (pipeline.batches.load_sessions)."""
    import torch
    from models import build_model

    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)                      # batch order + negatives
    n_items = int(manifest["n_items"])
    enc_name = tp.encoding if spec.uses_encoding else "none"
    encoding = (build_encoding(tp.encoding, tp, params.encodings.get(tp.encoding, {}))
                if spec.uses_encoding else None)
    net = build_model(tp.model, n_items=n_items, max_len=tp.max_len, train=tp,
                      options=params.models.get(tp.model, {}), encoding=encoding).to(device)
    ev = params.evaluate

    def rank(split: str) -> dict[str, float]:
        return score(net, data[split], split, ev.ks, ev.batch_size, device, trim=tp.trim_padding,
                     mask_history=ev.mask_history)

    history, timing = [], []
    t_start = time.perf_counter()
    if spec.fitted:
        t0 = time.perf_counter()
        train = data["train"]
        assert sessions is not None, "fitted baselines need the train sessions (train.run loads them)"
        items, session = sessions
        net.fit(torch.from_numpy(items).to(device), torch.from_numpy(session).to(device))
        fit_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        valid = rank("valid")
        history.append({"epoch": 0, "loss": None, "lr": None, "valid": valid})
        timing.append({"epoch": 0, "train_s": fit_s, "valid_s": time.perf_counter() - t0,
                       "samples_per_s": len(train) / max(fit_s, 1e-9)})
        best_epoch, stopped = 0, "fitted"
    else:
        best_epoch, stopped = fit_epochs(net, tp, data, n_items, rank, seed, enc_name, generator, device, progress,
                                         history, timing, resume_path)
    t0 = time.perf_counter()
    test = rank("test")
    test_s = time.perf_counter() - t0
    best = next(h for h in history if h["epoch"] == best_epoch)
    record = {
        "name": config_name(tp.model, enc_name, tag), "dataset": manifest.get("dataset"),
        "protocol": manifest.get("protocol"), "model": tp.model, "encoding": enc_name, "tag": tag, "seed": seed, "n_items": n_items, "max_len": tp.max_len,
        "train": to_dict(tp), "options": params.models.get(tp.model, {}),
        "encoding_options": params.encodings.get(tp.encoding, {}) if spec.uses_encoding else {},
        "evaluate": to_dict(params.evaluate), "samples": {s: data[s].n_targets for s in SPLITS},
        "device": device.type, "parameters": sum(p.numel() for p in net.parameters()),
        "history": history, "epochs_run": 0 if spec.fitted else len(history),
        "best_epoch": best_epoch, "stopped": stopped,
        "select_metric": tp.select_metric, "valid": best["valid"], "test": test,
    }
    timing_rec = {"device": str(device), "threads": torch.get_num_threads(), "epochs": timing,
                  "test_s": test_s, "total_s": time.perf_counter() - t_start}
    return net, record, timing_rec


def save_run(run_dir: Path, net, record: dict, timing: dict) -> None:
    """checkpoint.pt, run.json and timing.json, swapped into place together (atomic folder)."""
    import torch
    config = {k: record[k] for k in ("dataset", "model", "encoding", "n_items", "max_len", "train",
                                     "options", "encoding_options", "seed")}
    buf = io.BytesIO()   # saved in memory: torch.save would embed the temporary file name
    torch.save({"model": net.state_dict(), "config": config, "epoch": record["best_epoch"]}, buf)
    with atomic_dir(run_dir) as tmp:
        write_bytes(tmp / "checkpoint.pt", buf.getvalue())
        write_bytes(tmp / "run.json", dumps_json(record).encode("utf-8"))
        write_json(tmp / "timing.json", timing)


def fingerprint(tp: TrainParams, params: Params, manifest: dict, seed: int) -> str:
    """Hash of everything a run depends on: a resume file is used only by the same inputs."""
    train = {k: v for k, v in to_dict(tp).items() if k != "time_limit"}    # a longer limit continues it
    key = {"train": train, "model": params.models.get(tp.model, {}), "seed": seed,
           "encoding": params.encodings.get(tp.encoding, {}), "evaluate": to_dict(params.evaluate),
           "n_items": manifest.get("n_items"), "shards": manifest.get("shards")}
    return hashlib.sha256(dumps_json(key).encode("utf-8")).hexdigest()[:16]


# --------------------------------------------------------------------------- the stage

def check_tag(tag: Optional[str]) -> None:
    if tag is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.=+]*", tag):
        raise ParamsError(f"run tag {tag!r} is not a folder-safe name",
                          "use letters, digits and _ . = + (e.g. --tag anc or --tag lambda2=0.5)")


def run(dataset: str, samples_dir: Path, runs_dir: Path, params: Params, *, model: Optional[str] = None,
        encoding: Optional[str] = None, seeds: Optional[list[int]] = None, preset: Optional[str] = None,
        progress: bool = True, overrides: Optional[list[str]] = None, tag: Optional[str] = None) -> list[dict]:
    """Train every seed of one (model, encoding) configuration; return one summary per run.

    Only the samples manifest describes the data (n_items, protocol): `dataset` need not be a
    registered name (`seqpe import diginetica_srgnn ...` then `seqpe train diginetica_srgnn`); it
    picks the preset's dataset variant. `overrides` are the command line's --set strings: their
    `train.*` keys win over the preset (pipeline/presets.py)."""
    import torch
    from models import MODELS

    name = model or params.train.model
    check_tag(tag)
    if name not in MODELS:
        raise unknown("model", name, MODELS)
    spec = MODELS[name]
    tp, params, applied = resolve_run(params, spec, preset, name, encoding, dataset,
                                      presets.explicit_train_keys(overrides))
    check_select_metric(tp, params.evaluate)
    if tp.objective == "sequence" and not spec.causal:
        causal = sorted(n for n, sp in MODELS.items() if sp.causal)
        raise ParamsError(f"train.objective sequence needs a causal backbone, and '{name}' is not one",
                          f"use one of: {', '.join(causal)}; or train.objective: prefixes")
    if spec.uses_encoding:
        import models.encodings as enc
        if tp.encoding not in enc.ENCODINGS:
            raise unknown("encoding", tp.encoding, enc.ENCODINGS)
    manifest = samples_manifest(dataset, Path(samples_dir))
    device = pick_device(tp.device)
    if tp.threads > 0:
        torch.set_num_threads(tp.threads)
    data = {split: (load_sequences if split == "train" and tp.objective == "sequence" else load_samples)(
        samples_dir, split, tp.max_len) for split in SPLITS}
    for split in SPLITS:
        if len(data[split]) == 0:
            raise DataError(f"the {split} split of {samples_dir} has no samples", "check the dataset's protocol")
        top = int(max(data[split].seqs.max(), data[split].targets.max()))
        real = data[split].targets[data[split].targets != 0] if data[split].targets.ndim == 2 else data[split].targets
        if top > manifest["n_items"] or int(real.min()) < 1:
            raise DataError(f"{split} samples hold item ids outside 1..{manifest['n_items']} (n_items)",
                            "re-run `seqpe augment` so samples and manifest agree")
    sessions = load_sessions(samples_dir, "train") if spec.fitted else None
    enc_name = tp.encoding if spec.uses_encoding else "none"
    results = []
    for seed in (seeds or tp.seeds):
        run_dir = Path(runs_dir) / config_name(name, enc_name, tag) / f"seed-{seed}"
        claim_dir(run_dir, None, "run")
        resume = run_dir.parent / f".seed-{seed}.{fingerprint(tp, params, manifest, seed)}.resume.pt"
        for old in sorted(run_dir.parent.glob(f".seed-{seed}.*.resume.pt")):
            if old != resume:    # left by a killed run with other inputs: cannot be continued
                old.unlink()
        net, record, timing = train_one(spec, tp, params, data, manifest, int(seed), device, progress, resume,
                                        sessions, tag)
        record["preset"] = applied.record()
        save_run(run_dir, net, record, timing)
        if record["stopped"] != "time_limit":        # kept: the same command with a longer limit goes on
            resume.unlink(missing_ok=True)
        results.append({"name": f"{config_name(name, enc_name, tag)}/seed-{seed}",
                        "config": config_name(name, enc_name, tag), "seed": seed,
                        "best_epoch": record["best_epoch"], "valid": record["valid"], "test": record["test"],
                        "epochs_run": record["epochs_run"], "stopped": record["stopped"], "run_dir": str(run_dir)})
    return results
