"""Run folders and the state kept outside them.

    <runs>/<model>-<encoding>[-<tag>]/seed-<n>/      one seed's run (a DVC output per configuration)
        checkpoint.pt        {"model": state_dict (best epoch), "config": {...}, "epoch": best epoch}
        run.json             deterministic record: params, versions, fingerprint, valid history per epoch,
                             best epoch, valid and test metrics, device (same inputs + seed -> same bytes)
        test_samples.parquet per test sample, in the test split's order: (greater, ties) counts for
                             next-item runs, the logit for CTR runs (pipeline.significance reads them)
        timing.json          wall-clock figures (seconds per epoch, samples/s); listed in .dvcignore, so
                             DVC neither hashes nor caches it and `dvc.lock` stays reproducible

State that must survive DVC (which deletes a stage's outputs before it runs the stage again) lives
under the state root, `.seqpe/` in the working directory (env SEQPE_STATE overrides), ignored by git
and DVC:

    .seqpe/resume/<fingerprint>.pt   the loop state after the last finished epoch of an unfinished seed
    .seqpe/done/<fingerprint>/       a finished seed's run folder, until every seed of its configuration
                                     is finished (a crash in seed 2 does not retrain seed 1)
    .seqpe/locks/<fingerprint>       held (flock) while a process trains that seed, so a second `seqpe
                                     train` of the same seed from the same folder stops at once instead of
                                     training it again beside the first, both writing one resume file and
                                     one run folder. The kernel releases it when its process ends, however
                                     it ends: a killed run leaves no stale lock. The empty files go with
                                     the configuration's other state once every seed is finished (a seed
                                     locked after that finds its finished run and reuses it).

The fingerprint hashes everything a seed's result depends on (train params but time_limit, the
model's and encoding's options, evaluate params, the samples' dataset name and shard hashes, the seed, the libraries'
versions and a hash of seqpe's source, pipeline/versions.code_versions), so state is reused only by
the same inputs and the same code; a commit that touches no code (docs, benchmarks, tests) keeps it.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
from pathlib import Path
from typing import Optional

from ..errors import DataError
from ..io import atomic_dir, dumps_json, read_json, write_bytes, write_json
from ..params import Params, TrainParams, to_dict
from ..versions import code_versions

STATE_ENV = "SEQPE_STATE"
FILES = ("checkpoint.pt", "run.json", "test_samples.parquet", "timing.json")


def state_root() -> Path:
    return Path(os.environ.get(STATE_ENV) or ".seqpe")


def fingerprint(tp: TrainParams, params: Params, manifest: dict, seed: int, world: int = 1) -> str:
    """Hash of everything a run depends on: a resume file or a finished seed is used only by the same inputs.
    `world`, torchrun's process count, is one of them (W processes step on W batches at once, so the
    same seed trains another model): a seed trained by 2 processes is neither reused nor resumed by 1 or 3.
    It enters the key only when > 1, so one-process fingerprints are those of earlier versions."""
    train = {k: v for k, v in to_dict(tp).items() if k != "time_limit"}    # a longer limit continues it
    key = {"train": train, "model": params.models.get(tp.model, {}), "seed": seed,
           "encoding": params.encodings.get(tp.encoding, {}), "evaluate": to_dict(params.evaluate),
           "n_items": manifest.get("n_items"), "shards": manifest.get("shards"), "versions": code_versions(),
           "dataset": manifest.get("dataset")}     # one file imported under two names: two datasets' runs
    if world > 1:
        key["world_size"] = world
    return hashlib.sha256(dumps_json(key).encode("utf-8")).hexdigest()[:20]


def lock_seed(fp: str, label: str):
    """Hold the fingerprint's lock (module docstring) and return its open file (close it to release);
    a DataError naming the seed if another process holds it. None where the platform has no flock."""
    try:
        import fcntl  # noqa: F401
    except ImportError:                                  # pragma: no cover (not POSIX)
        return None
    handle = _try_lock(fp)
    if handle is None:
        raise DataError(f"{label} is being trained right now by another seqpe process started from this folder "
                        f"(it holds {state_root() / 'locks' / fp}); training it twice would race on its resume file "
                        "and run folder", "wait for that run to finish, then run this command again: it reuses the "
                        "finished seed")
    return handle


def _try_lock(fp: str):
    """The fingerprint's lock if no process holds it (an open file: close it to release), else None.
    A fingerprint without a lock file is free: it is returned locked all the same."""
    import fcntl
    path = state_root() / "locks" / fp
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


def state_entries() -> list[dict]:
    """What the state root holds, for `seqpe state`: one entry per resume file (an unfinished seed) and per
    finished copy, with what it is (dataset, configuration, seed), the last finished epoch, its size and age,
    and whether a process is training that seed now (its lock is held); then the spill maps, if any."""
    import datetime
    root = state_root()
    entries = []
    for path in sorted((root / "resume").glob("*.pt")):
        fp, info = path.stem, _resume_info(path)
        entries.append({"kind": "resume", "fingerprint": fp, "what": info.get("label"), "epoch": info.get("epoch"),
                        "epochs": info.get("epochs"), "path": str(path), "bytes": path.stat().st_size,
                        "modified": path.stat().st_mtime})
    for path in sorted(p for p in (root / "done").glob("*") if p.is_dir()):
        rec = _record(path) or {}
        what = (f"{rec.get('dataset')} {rec.get('name')} seed {rec.get('seed')}" if rec else None)
        entries.append({"kind": "finished", "fingerprint": path.name, "what": what, "epoch": rec.get("best_epoch"),
                        "epochs": None, "path": str(path), "bytes": _tree_bytes(path),
                        "modified": path.stat().st_mtime})
    for entry in entries:                # a training holds its lock file; none there: nothing trains that seed
        if (root / "locks" / entry["fingerprint"]).is_file():
            lock = _try_lock(entry["fingerprint"])
            entry["training"] = lock is None
            if lock is not None:
                lock.close()
        else:
            entry["training"] = False
    if (root / "spill").is_dir():
        spill = root / "spill"
        entries.append({"kind": "spill", "fingerprint": None, "what": "memory-mapped sample matrices "
                        "(train.memory_budget)", "epoch": None, "epochs": None, "path": str(spill),
                        "bytes": _tree_bytes(spill), "modified": spill.stat().st_mtime, "training": None})
    for entry in entries:
        entry["modified"] = datetime.datetime.fromtimestamp(entry["modified"], datetime.timezone.utc) \
            .strftime("%Y-%m-%d %H:%M UTC")
    return entries


def _resume_info(path: Path) -> dict:
    """The label, last finished epoch and planned epochs a resume file records ({} for one that does not
    say, written before seqpe recorded them, or damaged). Memory-mapped: the weights are not read."""
    import torch
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        return {"label": state.get("label"), "epoch": state["loop"]["epoch"], "epochs": state.get("epochs")}
    except Exception:               # damaged or foreign: listed all the same, with nothing known about it
        return {}


def prune_state() -> tuple[list[dict], list[dict]]:
    """Delete every resume file and finished copy no process is training now (each under its seed's lock, so
    a `seqpe train` cannot start on state being deleted); returns (deleted, kept because in use). The
    spill maps are left alone: a training may map them at any moment (README: delete them by hand)."""
    deleted, kept = [], []
    for entry in state_entries():
        if entry["kind"] == "spill":
            continue
        lock = _try_lock(entry["fingerprint"])
        if lock is None:
            kept.append(entry)
            continue
        try:
            path = Path(entry["path"])
            if path.is_dir():                # renamed first: an interrupted prune leaves no half copy to reuse
                doomed = path.with_name(path.name + ".deleting")
                path.rename(doomed)
                shutil.rmtree(doomed)
            else:
                path.unlink(missing_ok=True)
            deleted.append(entry)
        finally:
            lock.close()
    finished = {e["fingerprint"] for e in deleted}
    forget(sorted(finished - {e["fingerprint"] for e in kept}))   # their locks and empty folders too
    return deleted, kept


def resume_path(fp: str) -> Path:
    return state_root() / "resume" / f"{fp}.pt"


def done_path(fp: str) -> Path:
    return state_root() / "done" / fp


def load_checkpoint(run_dir: Path) -> dict:
    """A run's checkpoint.pt (tensors only: torch's weights-only unpickler), or a one-line error: a file that is
    truncated, not torch's format, or not seqpe's {"model", "config"} record is named instead of torch's traceback."""
    import torch
    path = Path(run_dir) / "checkpoint.pt"
    if not path.is_file():
        raise DataError(f"no checkpoint.pt in {run_dir}", "pass a run folder written by `seqpe train`")
    fix = f"re-run `seqpe train` for it (or `dvc pull` / `dvc checkout` {run_dir})"
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:     # torch raises KeyError, RuntimeError, UnpicklingError, EOFError ... by damage
        raise DataError(f"{path} is not a readable torch checkpoint (damaged or truncated: "
                        f"{type(exc).__name__})", fix) from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("model"), dict) \
            or not isinstance(ckpt.get("config"), dict):
        raise DataError(f"{path} is not a seqpe checkpoint (it needs 'model' and 'config' entries)", fix)
    return ckpt


def save_run(run_dir: Path, net, record: dict, timing: dict, per_sample) -> None:
    """checkpoint.pt, run.json, test_samples.parquet and timing.json, swapped into place together (atomic
    folder); a copy (hard links) goes to the state root until the configuration is finished."""
    import torch
    from ..io import write_parquet
    config = {k: record[k] for k in ("dataset", "model", "encoding", "n_items", "max_len", "train",
                                     "options", "encoding_options", "seed") if k in record}
    buf = io.BytesIO()   # saved in memory: torch.save would embed the temporary file name
    torch.save({"model": net.state_dict(), "config": config, "epoch": record["best_epoch"]}, buf)
    with atomic_dir(run_dir) as tmp:
        write_bytes(tmp / "checkpoint.pt", buf.getvalue())
        write_bytes(tmp / "run.json", dumps_json(record).encode("utf-8"))
        write_parquet(tmp / "test_samples.parquet", per_sample)
        write_json(tmp / "timing.json", timing)
    _copy_tree(run_dir, done_path(record["fingerprint"]))


def finished(run_dir: Path, fp: str) -> Optional[dict]:
    """The record of seed `fp` if it is already finished: in `run_dir` (a hand re-run, or a DVC output
    left in place), or in the state root (DVC deleted the output after a crash in a later seed), which
    is then put back in `run_dir`. A run stopped by train.time_limit is not finished."""
    for where in (run_dir, done_path(fp)):
        rec = _record(where)
        if rec is not None and rec.get("fingerprint") == fp and rec.get("stopped") != "time_limit" \
                and all((where / f).is_file() for f in FILES[:3]):
            if where != run_dir:
                _copy_tree(where, run_dir, atomic=True)
            return rec
    return None


def forget(fps: list[str]) -> None:
    """Drop the state of a finished configuration (its seeds' resume files, finished copies and locks)."""
    for fp in fps:
        resume_path(fp).unlink(missing_ok=True)
        shutil.rmtree(done_path(fp), ignore_errors=True)
        (state_root() / "locks" / fp).unlink(missing_ok=True)
    for folder in (state_root() / "resume", state_root() / "done", state_root() / "locks", state_root()):
        try:
            folder.rmdir()                       # only when empty: another configuration's state stays
        except OSError:
            pass


def _record(folder: Path) -> Optional[dict]:
    path = folder / "run.json"
    if not path.is_file():
        return None
    try:
        rec = read_json(path)
    except Exception:
        return None
    return rec if isinstance(rec, dict) else None


def _copy_tree(src: Path, dst: Path, atomic: bool = False) -> None:
    """Hard-link (or copy, across file systems) the files of run folder `src` into `dst`."""
    def fill(target: Path) -> None:
        for name in FILES:
            if (src / name).is_file():
                try:
                    os.link(src / name, target / name)
                except OSError:
                    shutil.copy2(src / name, target / name)
    if atomic:
        with atomic_dir(dst) as tmp:
            fill(tmp)
        return
    shutil.rmtree(dst, ignore_errors=True)
    dst.parent.mkdir(parents=True, exist_ok=True)
    staging = dst.with_name(dst.name + f".p{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    fill(staging)
    os.replace(staging, dst)


def check_runs_dir(runs_dir: Path, dataset: str) -> None:
    """A DataError when the runs folder `runs_dir` (MODEL-ENCODING/seed-N/run.json inside) holds another
    dataset's runs, or is the parent of runs folders (`data/runs`): a new seed there would be mixed into
    another dataset's reports, or into none (`seqpe train sample data/samples/sample data/runs` made
    data/runs/sasrec-none beside the datasets' folders, and the next `seqpe report` failed)."""
    runs_dir = Path(runs_dir)
    fix = f"pass that dataset's own runs folder, e.g. data/runs/{dataset}"
    for path in sorted(runs_dir.glob("*/seed-*/run.json")):
        try:
            owner = read_json(path).get("dataset")
        except Exception:
            continue                                    # not a record: report names it
        if isinstance(owner, str) and owner != dataset:
            raise DataError(f"{runs_dir} holds {owner}'s runs ({path.parent.parent.name}), and this run is "
                            f"{dataset}'s: a runs folder holds one dataset's runs", fix)
    inner = sorted({p.parent.parent.parent.name for p in runs_dir.glob("*/*/seed-*/run.json")})
    if inner:
        shown = ", ".join(inner[:3]) + (", ..." if len(inner) > 3 else "")
        raise DataError(f"{runs_dir} holds runs folders ({shown}), not runs: seeds go inside one dataset's runs "
                        f"folder", fix)


# --------------------------------------------------------------------------- per-configuration outputs

def write_config_metrics(path: Path, records: list[dict]) -> dict:
    """The configuration's DVC metrics file, stable keys: {"test": {metric: mean over seeds}, "valid":
    {...}, "seeds": n} (`dvc metrics diff` / `dvc exp show --sort-by test.ndcg@10` compare them)."""
    import math
    def mean(split: str) -> dict:
        keys = sorted({k for r in records for k in r[split]})
        return {k: math.fsum(r[split][k] for r in records) / len(records) for k in keys}
    out = {"test": mean("test"), "valid": mean("valid"), "seeds": len(records)}
    write_json(path, out)
    return out


def is_config_metrics(path: Path) -> bool:
    """Whether `path` holds a metrics file write_config_metrics wrote (its three keys)."""
    rec = json.loads(Path(path).read_text(encoding="utf-8"))
    return isinstance(rec, dict) and set(rec) == {"test", "valid", "seeds"}


def claim_curves(live_dir: Path, example: str) -> None:
    """Refuse a --live folder that holds anything but seqpe's curves (seed-N/plots/metrics/**.tsv):
    write_curves replaces its seed-N folders whole, and `--live RUNS/sasrec-rope` used to delete the
    trained seed-1 there. A file, or a folder of other things (data/samples), is a one-line DataError."""
    live_dir = Path(live_dir)
    if not live_dir.exists():
        return
    if not live_dir.is_dir():
        raise DataError(f"--live {live_dir} is a file, not a folder", f"pass a folder for the curves, e.g. {example}")

    def curves(entry: Path) -> bool:
        return re.fullmatch(r"seed-\d+", entry.name) is not None and entry.is_dir() and all(
            p.is_dir() or (p.suffix == ".tsv" and p.relative_to(entry).parts[:2] == ("plots", "metrics"))
            for p in entry.rglob("*"))
    other = sorted(e.name for e in live_dir.iterdir() if not curves(e))
    if other:
        shown = ", ".join(other[:3]) + (", ..." if len(other) > 3 else "")
        raise DataError(f"--live {live_dir} holds {shown}, which are not seqpe's curves; --live replaces its "
                        f"seed-N folders whole", f"pass a new or empty folder for the curves, e.g. {example}")


def write_curves(live_dir: Path, seed: int, history: list) -> None:
    """Per-epoch train loss and valid metrics of one seed, through dvclive (DVC plots read its TSVs):
    <live>/seed-<n>/plots/metrics/{train/loss,valid/<metric>}.tsv. Rewritten from the whole history each
    time (into a new folder swapped in whole), so a resumed run's curves are those of an uninterrupted
    one. dvclive's own summary (metrics.json) is dropped: the configuration's DVC metrics file holds the
    final numbers, and DVC would read a JSON file inside a plots folder as one more plot."""
    from dvclive import Live
    with atomic_dir(Path(live_dir) / f"seed-{seed}") as tmp:
        with Live(str(tmp), save_dvc_exp=False, dvcyaml=None, report=None, monitor_system=False) as live:
            for h in history:
                live.step = h["epoch"]
                if h.get("loss") is not None:
                    live.log_metric("train/loss", h["loss"])
                for k, v in h["valid"].items():
                    live.log_metric(f"valid/{k}", v)
        (tmp / "metrics.json").unlink(missing_ok=True)
