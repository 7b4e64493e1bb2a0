"""Run folders and the state kept outside them.

    <runs>/<model>-<encoding>[-<tag>]/seed-<n>/      one seed's run (a DVC output per configuration)
        checkpoint.pt        {"model": state_dict (best epoch), "config": {...}, "epoch": best epoch}
        run.json             deterministic record: params, versions, fingerprint, valid history per epoch,
                             best epoch, valid and test metrics, device (same inputs + seed -> same bytes)
        test_samples.parquet per test sample, in the test split's order: (greater, ties) counts for
                             next-item runs, the logit for CTR runs (pipeline.significance reads them)
        timing.json          wall-clock figures (seconds per epoch, samples/s) and the git checkout; listed
                             in .dvcignore, so DVC neither hashes nor caches it and `dvc.lock` stays
                             reproducible

State that must survive DVC (which deletes a stage's outputs before it runs the stage again) lives
under the state root, `.seqpe/` in the working directory (env SEQPE_STATE overrides), ignored by git
and DVC:

    .seqpe/resume/<fingerprint>.pt   the loop state after the last finished epoch of an unfinished seed
    .seqpe/done/<fingerprint>/       a finished seed's run folder, until every seed of its configuration
                                     is finished (a crash in seed 2 does not retrain seed 1)
    .seqpe/locks/                    per-seed locks held while a seed trains (pipeline/train/state.py,
                                     which also lists and prunes this state: `seqpe state`)

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
import sys
from pathlib import Path
from typing import Optional

from ..errors import DataError
from ..io import (atomic_dir, dumps_json, machine_locks, read_json, sha256_file, spelt_like, sweep_leftovers,
                  unlink_unheld, write_bytes, write_json)
from ..params import Params, TrainParams, to_dict
from ..versions import code_versions

STATE_ENV = "SEQPE_STATE"
FILES = ("checkpoint.pt", "run.json", "test_samples.parquet", "timing.json")
CODE_JSON = "code.json"     # beside a finished copy in the state root (not a run file): the code versions it has


def state_root() -> Path:
    return Path(os.environ.get(STATE_ENV) or ".seqpe")


def lock_path(name: str) -> Path:
    """Where the lock file `name` lives: a fingerprint's under the state root (its resume file and finished copy
    are there); a run folder's (`dir-<hash of its absolute path>`) in the user's lock folder for the machine,
    so that two commands writing the same run folder exclude each other whatever their working folder or
    SEQPE_STATE (walk 35b: from two folders, the later replaced the other's run without a word)."""
    if name.startswith("dir-") and (machine := machine_locks()) is not None:
        return machine / name
    return state_root() / "locks" / name


def fingerprint_inputs(tp: TrainParams, params: Params, manifest: dict, seed: int, world: int = 1) -> dict:
    """Everything a run depends on, the key `fingerprint` hashes. `world`, torchrun's process count, is one
    of them (W processes step on W batches at once, so the same seed trains another model): a seed trained
    by 2 processes is neither reused nor resumed by 1 or 3. It enters the key only when > 1, so
    one-process fingerprints are those of earlier versions.
    train.time_limit is left out (a longer limit continues a run), and so is train.memory_budget (chunked
    loading gives the same batches, so the same weights: a user who ran out of RAM adds a budget and goes on
    from the resume file, or keeps the finished seeds); train.device enters as the device it picks (auto
    and cpu on a machine without CUDA are one run). Threads and evaluate.batch_size stay: they can change
    floating-point sums, so the bits of the result."""
    from .setup import pick_device
    train = {k: v for k, v in to_dict(tp).items() if k not in ("time_limit", "memory_budget")}
    train["device"] = pick_device(tp.device).type
    key = {"train": train, "model": params.models.get(tp.model, {}), "seed": seed,
           "encoding": params.encodings.get(tp.encoding, {}), "evaluate": to_dict(params.evaluate),
           "n_items": manifest.get("n_items"), "shards": manifest.get("shards"), "versions": code_versions(),
           "dataset": manifest.get("dataset")}     # one file imported under two names: two datasets' runs
    if world > 1:
        key["world_size"] = world
    return key


def fingerprint(tp: TrainParams, params: Params, manifest: dict, seed: int, world: int = 1) -> str:
    """Hash of everything a run depends on: a resume file or a finished seed is used only by the same inputs."""
    return hash_inputs(fingerprint_inputs(tp, params, manifest, seed, world))


def hash_inputs(key: dict) -> str:
    return hashlib.sha256(dumps_json(key).encode("utf-8")).hexdigest()[:20]


def samples_digest(manifest: dict) -> Optional[str]:
    """A short digest of a samples folder's shards (their paths, rows and hashes in its manifest): runs of one
    name trained on other data (a re-import, a re-augment) differ in it even where the split sizes agree."""
    shards = manifest.get("shards")
    return _shards_digest(shards) if shards else None


def _shards_digest(shards) -> str:
    return hashlib.sha256(dumps_json(shards).encode("utf-8")).hexdigest()[:12]


def shown_inputs(key: dict) -> dict:
    """The fingerprint's inputs as a resume file keeps them, to say later why another command cannot resume
    it: the samples' shard list (a hash per shard) shortened to one digest."""
    return {**key, "shards": _shards_digest(key.get("shards"))}


def inputs_change(old: Optional[dict], new: dict) -> str:
    """Where a resume file's shown inputs differ from `new` (a fingerprint_inputs key), e.g. "train.lr: 0.001
    vs 0.002; seqpe's source code (another checkout or version)"."""
    if not isinstance(old, dict):
        return "other settings or another seqpe version (written before resume files kept their inputs)"
    from ..report import _differences
    old = {**old, "train": _as_recorded_now(old.get("train"), new.get("train") or {})}
    found = _differences(old, shown_inputs(new))
    named = {"versions.seqpe_code": "seqpe's source code (another checkout or version)",
             "shards": "the samples (their shards)", "n_items": "the samples' item count"}
    found = sorted((named.get(f.split(":")[0], f) for f in found), key=lambda f: f not in named.values())
    return "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")   # code, data first


def _as_recorded_now(train, new: dict):
    """A resume file's train inputs as `seqpe train` keys them today (walk 44a #2: an old file's `auto` and its
    unread lr_gamma were named as differences, and the code, the one that was, came after "and 4 more"): `auto`
    was recorded unresolved before session 33 / walk 43d (what it picks is `new`'s on this machine), and keys
    another setting leaves unread with a value before session 31."""
    if not isinstance(train, dict):
        return train
    import models
    from .stage import unread_train_keys
    out = {k: (new.get(k) if v == "auto" and k in ("ce_impl", "precision", "select_metric") else v)
           for k, v in train.items()}
    spec = models.MODELS.get(out.get("model"))
    return {**out, **{k: None for k in unread_train_keys(spec, out)}} if spec is not None else out


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
        seeds = sorted(Path(run_dir).glob("seed-*/checkpoint.pt"), key=lambda p: (len(p.parent.name), p.parent.name))
        raise DataError(f"no checkpoint.pt in {run_dir}" + (", a configuration's folder of seeds" if seeds else ""),
                        f"pass one of its seeds' run folders, e.g. {seeds[0].parent}" if seeds else
                        "pass a run folder written by `seqpe train`")
    fix = f"re-run `seqpe train` for it (or `dvc pull` / `dvc checkout` {run_dir})"
    check_recorded(Path(run_dir), _record(Path(run_dir)), "checkpoint.pt")   # walk 39d #1: recommend used it
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
        write_parquet(tmp / "test_samples.parquet", per_sample)
        sums = {name: sha256_file(tmp / name) for name in CHECKED}     # `finished` reuses only these bytes
        write_bytes(tmp / "run.json", dumps_json({**record, "sha256": sums}).encode("utf-8"))
        write_json(tmp / "timing.json", timing)
    _copy_tree(run_dir, done_path(record["fingerprint"]))
    write_json(done_path(record["fingerprint"]) / CODE_JSON, code_versions())   # `seqpe state`: which code wrote it


def finished(run_dir: Path, fp: str, restore: bool = True) -> Optional[dict]:
    """The record of seed `fp` if it is already finished: in `run_dir` (a hand re-run, or a DVC output
    left in place), or in the state root (DVC deleted the output after a crash in a later seed), which
    is then put back in `run_dir` (unless `restore` is false: `train --check`). A run stopped by
    train.time_limit is not finished, nor one whose checkpoint.pt or test_samples.parquet is not the bytes its
    run.json recorded (walk 39c #1: a damaged file was reused as finished, and every fix looped back to it)."""
    damaged = None
    for where in (run_dir, done_path(fp)):
        rec = _record(where)
        if rec is not None and rec.get("fingerprint") == fp and rec.get("stopped") != "time_limit" \
                and all((where / f).is_file() for f in FILES[:3]):
            if (bad := _damaged(where, rec)) is not None:
                damaged = damaged or where / bad
                continue
            if where != run_dir and restore:
                _copy_tree(where, run_dir, atomic=True)
            elif restore:                        # reused as it is: what a killed rerun left beside it goes too
                sweep_leftovers(run_dir)         # (it stayed until the next write; walk 35c)
            if damaged is not None:
                _say_damaged(damaged, f"the run {'is' if restore else 'would be'} put back from its finished copy "
                                      "in the state root")
            return rec
    if damaged is not None:
        _say_damaged(damaged, f"the seed {'is' if restore else 'would be'} trained again")
    return None


def _say_damaged(path: Path, then: str) -> None:
    sys.stderr.write(f"note: {path} is damaged (not the bytes its run.json recorded): {then}\n")


CHECKED = ("checkpoint.pt", "test_samples.parquet")    # run.json's "sha256": what `seqpe train` reuses and
                                                        # evaluate / recommend read


def check_recorded(run_dir: Path, rec: Optional[dict], name: str) -> None:
    """A DataError when file `name` of a run folder is not the bytes its run.json (`rec`) recorded: what evaluate,
    report and recommend read, as `finished` refuses to reuse it. Nothing to check without a record of sums."""
    if rec is not None and _damaged(run_dir, rec, (name,)) is not None:
        raise DataError(f"{run_dir / name} is not the file its run.json recorded (another sha256: damaged or edited)",
                        "run that seed's `seqpe train` command again: it trains a seed whose files are damaged again "
                        f"(or `dvc pull` / `dvc checkout` {run_dir})")


def _damaged(folder: Path, rec: dict, names: tuple[str, ...] = CHECKED) -> Optional[str]:
    """The first of `names` in `folder` whose sha256 is not the one `rec` (its run.json) recorded, or None (also for
    a run written before run.json kept them)."""
    sums = rec.get("sha256")
    if not isinstance(sums, dict):
        return None
    for name in names:
        try:
            if sha256_file(folder / name) != sums.get(name):
                return name
        except OSError:
            return name
    return None


def forget(fps: list[str], locks: tuple[str, ...] = (), own: bool = False) -> None:
    """Drop the state of a finished configuration (its seeds' resume files, finished copies and locks, and
    the lock files named in `locks`). Lock files go only while no other process holds them; `own`: the caller
    holds them itself (a seed's locks, still taken), so they go as they are."""
    for fp in fps:
        resume_path(fp).unlink(missing_ok=True)
        shutil.rmtree(done_path(fp), ignore_errors=True)
    for name in (*fps, *locks):
        if own:
            lock_path(name).unlink(missing_ok=True)
        else:           # another training may hold it: a third then made a new file and wrote its run folder (36c)
            unlink_unheld(lock_path(name))
    # A root the user named (SEQPE_STATE) stays, empty: removing it would leave behind whatever parents
    # `mkdir -p` made for it, or delete a folder the user made; the default .seqpe goes with its contents.
    named = bool(os.environ.get(STATE_ENV))
    for folder in (state_root() / "resume", state_root() / "done", state_root() / "locks",
                   *(() if named else (state_root(),))):
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
    staging.mkdir(parents=True)          # parents: another training's forget() may have removed the empty done/
    fill(staging)
    os.replace(staging, dst)


PROJECT_MARKS = ("dvc.yaml", ".dvc", "params.yaml", ".git", "pyproject.toml")


def check_runs_dir(runs_dir: Path, dataset: str) -> None:
    """A DataError when the runs folder `runs_dir` (MODEL-ENCODING/seed-N/run.json inside) holds another
    dataset's runs, or is the parent of runs folders (`data/runs`), a project's root or the folder of seqpe's
    data folders (`data`): a new seed there would be mixed into another dataset's reports, or into none
    (`seqpe train sample data/samples/sample data/runs` made data/runs/sasrec-none beside the datasets'
    folders, and the next `seqpe report` failed)."""
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
    marks = [name for name in PROJECT_MARKS if (runs_dir / name).exists()]
    if marks:          # `seqpe train sample SAMPLES .` wrote ./pop-none/seed-1 beside the project's own files
        raise DataError(f"{runs_dir} is a project's root (it holds {', '.join(marks)}), not a runs folder", fix)
    stages = sorted({p.parent.relative_to(runs_dir).as_posix() for name in ("manifest.json", "source.json")
                     for p in runs_dir.glob(f"*/*/{name}")})
    if stages:         # data/: its runs would sit beside data/samples and data/sessions
        shown = ", ".join(stages[:3]) + (", ..." if len(stages) > 3 else "")
        raise DataError(f"{runs_dir} holds seqpe's data folders ({shown}), not runs", fix)
    here = runs_dir.absolute()
    for folder in [here, *here.parents]:
        held = _study_output(folder, itself=folder == here, parent=folder == here.parent)
        if held is not None:
            where = f"{runs_dir} is" if folder == here else \
                f"{runs_dir} is inside {spelt_like(folder, runs_dir)}, which is"
            raise DataError(f"{where} {held}", fix)


def _seed_folders(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.glob("seed-*") if re.fullmatch(r"seed-\d+", p.name) and p.is_dir()]
    except OSError:                                       # an unreadable folder holds nothing of ours
        return []


def _study_output(folder: Path, itself: bool, parent: bool) -> Optional[str]:
    """What `folder` is when a runs folder may not be it (`itself`), or lie inside it (None when it is neither):
    a configuration's seeds (RUNS/MODEL-ENCODING, a DVC output of the study grid) or its curves (--live
    DATA/CONFIG), both replaced whole by their stage; as the runs folder's own parent, a runs folder (the runs
    would nest in another's, and it then holds "runs folders", refused); as the runs folder itself, the folder
    of the configurations' curves or metrics files, unless it already holds runs. `seqpe train sample_ctr
    SAMPLES data/runs/sample_ctr/din-cape` wrote din-cape/din-none/seed-3, and the next `dvc repro` of din-cape
    deleted it. Only seed-N folders of the parents are looked at, and no file is read there: a metrics file or a
    curves folder anywhere above (a project root, /tmp) says nothing about the runs folder."""
    seeds = _seed_folders(folder)
    try:
        if any((p / "run.json").is_file() for p in seeds):
            return (f"the seeds folder of the configuration {folder.name} (RUNS/{folder.name}), which its stage "
                    f"(and `dvc repro`) replaces whole, deleting the run; not a runs folder")
        if any((p / "plots" / "metrics").is_dir() for p in seeds):
            return f"the learning curves (--live) of {folder.name}, which train replaces seed by seed; not a runs folder"
        if parent and any(folder.glob("*/seed-*/run.json")):
            return (f"a runs folder: the runs would go inside another's runs, and `seqpe report` / `evaluate` of "
                    f"{folder.name} would then refuse it for holding runs folders")
        if not itself or any(folder.glob("*/seed-*/run.json")):
            return None
        if any(folder.glob("*/seed-*/plots/metrics")):
            return "a folder of learning curves (--live), not a runs folder"
        for path in sorted(folder.glob("*.json"))[:50]:
            if path.is_file() and path.stat().st_size < 1 << 20 and _metrics_file(path):
                return f"a folder of metrics files ({path.name}, --metrics), not a runs folder"
    except OSError:
        return None
    return None


def _metrics_file(path: Path) -> bool:
    try:
        return is_config_metrics(path)
    except (OSError, ValueError):
        return False


def dvc_output_of(folder: Path) -> Optional[tuple[str, Path]]:
    """(stage, output folder) when `folder` is, or lies inside, an output of a DVC stage, from the nearest dvc.lock
    above it; None when there is none, or seqpe runs as a stage (DVC sets DVC_STAGE). Paths are compared resolved
    (`data/runs/../runs/sample`, a link to the project's data/runs). A hand `seqpe train` of a configuration the
    study grid trains writes into the grid's folder, which the stage's next `dvc repro` replaces whole, the hand
    seed with it: train says so before it trains."""
    if os.environ.get("DVC_STAGE"):
        return None
    here = Path(folder).resolve()
    lock = next((d / "dvc.lock" for d in here.parents if (d / "dvc.lock").is_file()), None)
    if lock is None:
        return None
    try:
        import yaml
        stages = (yaml.safe_load(lock.read_text(encoding="utf-8")) or {}).get("stages") or {}
        for name, stage in stages.items():
            for out in (stage or {}).get("outs") or []:
                path = (lock.parent / str(out.get("path", ""))).resolve() if isinstance(out, dict) else None
                if path is not None and (path == here or path in here.parents):
                    return str(name), path
    except Exception:                                     # an unreadable lock file only costs the check
        return None
    return None


# --------------------------------------------------------------------------- per-configuration outputs

def write_config_metrics(path: Path, records: list[dict], configuration: str) -> dict:
    """The configuration's DVC metrics file, stable keys: {"test": {metric: mean over seeds}, "valid":
    {...}, "seeds": n, "protocol": label, "configuration": "DATASET MODEL-ENCODING[-TAG]"} (`dvc metrics diff` /
    `dvc exp show --sort-by test.ndcg@10` compare them; the configuration keeps another one's --metrics from
    replacing the file, walk 32b). The protocol is `seqpe report`'s label (the data protocol, and sampled candidates or a masked history
    where evaluate: sets them), since an HR@10 over 100 sampled candidates is not one over every item; DVC
    shows the label next to the numbers and `dvc metrics diff` its change."""
    import math

    from ..report import protocol_label
    def mean(split: str) -> dict:
        keys = sorted({k for r in records for k in r[split]})
        return {k: math.fsum(r[split][k] for r in records) / len(records) for k in keys}
    labels = sorted({protocol_label(r) for r in records})
    out = {"test": mean("test"), "valid": mean("valid"), "seeds": len(records), "protocol": "; ".join(labels),
           "configuration": configuration}
    write_json(path, out)
    return out


def is_config_metrics(path: Path) -> bool:
    """Whether `path` holds a metrics file write_config_metrics wrote (its keys; "protocol" and "configuration"
    since session 32)."""
    rec = json.loads(Path(path).read_text(encoding="utf-8"))
    return isinstance(rec, dict) and {"test", "valid", "seeds"} <= set(rec) <= {
        "test", "valid", "seeds", "protocol", "configuration"}


def metrics_configuration(path: Path) -> Optional[str]:
    """The configuration ("DATASET MODEL-ENCODING[-TAG]") whose metrics an existing file of seqpe's holds
    (None: no such file, or one written before the key)."""
    path = Path(path)
    if not path.is_file():
        return None
    found = json.loads(path.read_text(encoding="utf-8")).get("configuration")
    return found if isinstance(found, str) else None


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


def _curve(seed_dir: Path) -> Optional[list[tuple[int, float]]]:
    """(epoch, value) rows of a seed's curves as write_curves wrote them: its train loss, or (a fitted baseline,
    no loss) its first valid metric; None when they cannot be read."""
    metrics = seed_dir / "plots" / "metrics"
    path = metrics / "train" / "loss.tsv"
    if not path.is_file():
        path = next(iter(sorted((metrics / "valid").glob("*.tsv"))), None) if (metrics / "valid").is_dir() else None
    if path is None:
        return None
    try:
        lines = path.read_text(encoding="utf-8").splitlines()[1:]
        return [(int(step), float(value)) for step, value in (line.split("\t")[-2:] for line in lines if line)]
    except (OSError, ValueError):
        return None


def _history_curve(history: list, seed_dir: Path) -> list[tuple[int, float]]:
    """The rows `_curve` reads back from write_curves(history)."""
    if (seed_dir / "plots" / "metrics" / "train" / "loss.tsv").is_file():
        return [(h["epoch"], float(h["loss"])) for h in history if h.get("loss") is not None]
    files = sorted((seed_dir / "plots" / "metrics" / "valid").glob("*.tsv"))
    key = files[0].stem if files else None
    return [(h["epoch"], float(h["valid"][key])) for h in history if key in (h.get("valid") or {})]


def claim_seed_curves(seed_dir: Path, run_dir: Path, label: str) -> None:
    """Refuse to replace curves at `seed_dir` (--live FOLDER/seed-N) that are not this seed's: not those of the
    run in `run_dir` nor of a resume file kept for that folder (an interrupted run of it). `--live` of one
    folder for two configurations replaced the first one's seed-1 curves with the second's, without a word, where
    `--metrics` refuses another configuration's file (walk 34a)."""
    if not seed_dir.is_dir():
        return
    found = _curve(seed_dir)
    if found is None:
        return                                       # nothing of seqpe's to compare: claim_curves judged the folder
    def histories():                                 # run.json first: the resume files (torch loads) only if needed
        if (run_dir / "run.json").is_file():
            try:
                yield read_json(run_dir / "run.json").get("history") or []
            except Exception:
                pass
        from . import state
        for other in state.other_resumes(label, "", run_dir):
            yield state.resume_history(other["path"])

    for history in histories():
        try:
            mine = _history_curve(history, seed_dir)
        except (KeyError, TypeError, ValueError):
            continue
        if len(found) <= len(mine) and all(a[0] == b[0] and abs(a[1] - b[1]) <= 1e-12 * max(1.0, abs(b[1]))
                                           for a, b in zip(found, mine)):
            return                                   # its own (the whole run, or epochs an interrupted run wrote)
    raise DataError(f"--live {seed_dir.parent} holds curves in {seed_dir.name} that are not {label}'s (another "
                    f"configuration's, or of a run no longer in {run_dir.parent}): --live would replace them",
                    f"pass this configuration's own folder, e.g. data/live/{label.split()[0]}/{label.split()[1]} (or "
                    f"delete {seed_dir} if those curves are not needed: `seqpe train` with --live rewrites a "
                    "finished run's curves from its run.json)")


def _live(folder: Path):
    """dvclive's logger writing into `folder`, for its TSVs only (no DVC experiment, dvc.yaml or report), made
    without looking for the DVC project, which these curves do not need. Looking for it (dvclive's
    `get_dvc_repo`): in a git repository without a commit yet (`git init && dvc init && dvc repro`, a new
    project's first steps) dvclive 3 asked git for the current revision before it checked for an empty
    repository, and its SCMError ended the run after the seed had trained (walk 45a #3); in a git repository
    without DVC it ran `dvc init` at the git root and staged .dvc/ in the user's index (walk 45e #1)."""
    from dvclive import Live
    import dvclive.live
    options = dict(save_dvc_exp=False, dvcyaml=None, report=None, monitor_system=False)
    found = getattr(dvclive.live, "get_dvc_repo", None)
    if found is None:                                 # another dvclive: as it comes
        return Live(str(folder), **options)
    dvclive.live.get_dvc_repo = lambda: None
    try:
        return Live(str(folder), **options)
    finally:
        dvclive.live.get_dvc_repo = found


def write_curves(live_dir: Path, seed: int, history: list) -> None:
    """Per-epoch train loss and valid metrics of one seed, through dvclive (DVC plots read its TSVs):
    <live>/seed-<n>/plots/metrics/{train/loss,valid/<metric>}.tsv. Rewritten from the whole history each
    time (into a new folder swapped in whole), so a resumed run's curves are those of an uninterrupted
    one. dvclive's own summary (metrics.json) is dropped: the configuration's DVC metrics file holds the
    final numbers, and DVC would read a JSON file inside a plots folder as one more plot."""
    with atomic_dir(Path(live_dir) / f"seed-{seed}") as tmp:
        with _live(tmp) as live:
            for h in history:
                live.step = h["epoch"]
                if h.get("loss") is not None:
                    live.log_metric("train/loss", h["loss"])
                for k, v in h["valid"].items():
                    live.log_metric(f"valid/{k}", v)
        (tmp / "metrics.json").unlink(missing_ok=True)
