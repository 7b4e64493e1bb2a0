"""The training state's guards and housekeeping: per-seed locks, the state root's checks, `seqpe state`.

Locks (flock): while a seed trains its process holds two, one on the seed's fingerprint (its resume file
and finished copy are keyed by it; `<state root>/locks/`) and one on its run folder (two commands with
different settings, or from different folders or state roots, write the same MODEL-ENCODING[-TAG]/seed-N;
in the user's lock folder for the machine, `runs.lock_path`). A second `seqpe train` that needs
either stops at once, in one line, writing nothing. The kernel drops a lock when its process ends,
however it ends, so a killed run leaves no stale lock. The fingerprint lock file holds what is being
trained (dataset, configuration, seed, pid), so `seqpe state` can say which finished copies belong to a
configuration still training. Lock files are empty or tiny; they go with the configuration's other
state once every seed is finished (a seed locked after that finds its finished run and reuses it), or
with `seqpe state --prune` when no process holds them.

`seqpe state` lists the resume files and finished copies (only entries named by a fingerprint, 20 hex
digits, and for a copy a run.json that says so: anything else under the root is not seqpe's and is
neither listed nor ever deleted). `--prune` deletes those no command of this checkout will read (other
code's, damaged ones, copies of time-limited runs) and `--prune --all` also the work it would go on from
(resumable seeds, finished seeds kept for their configuration), never what a running training holds or
needs; each under its seed's lock, a copy renamed before it goes, so that no `seqpe train` can start on
half-deleted state.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Callable, Optional

from ..errors import DataError
from ..io import _require_writable, flock, machine_locks, refuse_nested, unlink_unheld
from . import runs

_FP = re.compile(r"[0-9a-f]{20}")
_DIR_LOCK = re.compile(r"dir-[0-9a-f]{20}")
_CFG_LOCK = re.compile(r"cfg-[0-9a-f]{20}")        # a train command's configuration (`hold_config`)
_OUT_LOCK = re.compile(r"(?:out|w)-[0-9a-f]{20}")   # io.atomic_dirs' swaps (out-), io.claim_dir's writers (w-)


def _named() -> str:
    """How the user set the state root, for messages."""
    value = os.environ.get(runs.STATE_ENV)
    return f"{runs.STATE_ENV}={value}" if value else f"{runs.state_root()} (the state root; {runs.STATE_ENV} moves it)"


def check_root(writing: bool = True) -> Path:
    """The state root, or a DataError naming SEQPE_STATE: a file; a folder another stage writes or one inside
    it (a samples, sessions, raw or report folder, a run, a configuration's folder of seeds: each is replaced
    whole, and the state with it); a runs folder; or, when `writing`, a place that cannot be written (`seqpe
    state` lists from a read-only folder too: walk 45a #6)."""
    root = runs.state_root()
    fix = f"point {runs.STATE_ENV} at a folder of its own (or unset it: .seqpe in the working folder)"
    if root.exists() and not root.is_dir():
        raise DataError(f"{_named()} is a file, not a folder", fix)
    try:
        refuse_nested(root, f"training state ({runs.STATE_ENV})", "a folder of its own", itself=True)
    except DataError as e:
        raise DataError(e.problem, fix) from None
    here = root.absolute()
    if here.is_dir() and any(here.glob("*/seed-*/run.json")):
        raise DataError(f"{_named()} is a runs folder: the state would sit among its configurations", fix)
    for folder in (here, here.parent):                 # a configuration folder is a DVC output, replaced whole
        if folder.is_dir() and any(folder.glob("seed-*/run.json")):
            raise DataError(f"{_named()} is {'inside ' if folder != here else ''}a configuration's runs folder "
                            f"({folder}), which DVC replaces whole, and the state with it", fix)
    if not writing:
        return root
    try:
        _require_writable(root / "locks")            # probes the root, or the nearest folder above it
    except DataError as e:
        raise DataError(f"{_named()} cannot be written: {e.problem.split(': ', 1)[-1]}", fix) from None
    return root


def _lock_file(name: str, create: bool = True):
    """The lock file `name` opened and flocked, or None if another process holds it (or, with `create` false, if
    it does not exist: then nothing holds it)."""
    path = runs.lock_path(name)
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    return flock(path, create=create)


def dir_lock(run_dir: Path) -> str:
    """The lock file name of a run folder (its real path hashed: every spelling of the folder, through a linked
    parent too, shares one lock; walk 35c)."""
    return "dir-" + hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:20]


class SeedLock:
    """Both locks of one seed (module docstring); `release()` drops them."""

    def __init__(self, handles: list):
        self.handles = handles

    def release(self) -> None:
        for handle in reversed(self.handles):     # the run folder's first: a command waiting for the fingerprint
            handle.close()                        # (under DVC) then finds the folder's free (walk 35c)
        self.handles = []


def _seed_locks(fp: str, run_dir: Path, label: str) -> tuple[tuple[str, Callable[[], DataError]], ...]:
    """The seed's two lock files, each with how to build the DataError raised when another process holds it
    (built only then: the fingerprint's message reads the holder's pid from its lock file)."""
    fix = "wait for that run to finish, then run this command again (a finished seed with the same settings is reused)"
    race = "training it twice would race on its state and run folder"

    def fingerprint() -> DataError:
        said = _held(fp) or {}
        who = f"another seqpe process (pid {said['pid']})" if isinstance(said.get("pid"), int) \
            else "another seqpe process"
        return DataError(f"{label} is being trained right now by {who} with the same state root (it holds "
                         f"{runs.state_root() / 'locks' / fp}); {race}", fix)

    def folder() -> DataError:
        return DataError(f"{run_dir} is being written right now by another seqpe train (of {label}, with other "
                         f"settings, or from another folder or SEQPE_STATE); {race}", "pass --tag NAME to train these "
                         "settings beside that run; or wait for it to finish and run this command again, which then "
                         "replaces that run")
    return (fp, fingerprint), (dir_lock(run_dir), folder)


def hold_config(dataset: str, config: str):
    """A shared flock on the configuration's lock file (`cfg-` + dataset and configuration hashed, in the state's
    locks folder), held by a `seqpe train` command from before it loads its samples to its end; None where the
    platform has no flock. `state --prune --all` keeps what the configurations of held ones need: it deleted the
    resume file of a training that had started but not yet taken its seed's lock (that takes seconds of loading),
    or was between two seeds, and the seed started afresh without a word (walk 44g #3). Shared: every command of
    the configuration holds it at once (other seeds, DVC experiments sharing the state)."""
    try:
        import fcntl  # noqa: F401 (flock)
    except ImportError:                                  # pragma: no cover (not POSIX)
        return None
    path = runs.lock_path("cfg-" + hashlib.sha256(f"{dataset} {config}".encode()).hexdigest()[:20])
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = flock(path, wait=True, shared=True)        # waits only for a prune checking it, a moment
    if os.fstat(handle.fileno()).st_size == 0:          # the same text from every holder (appended twice at worst)
        handle.write(json.dumps({"dataset": dataset, "config": config}))
        handle.flush()
    return handle


def release_config(handle) -> None:
    """Drop `hold_config`'s lock, and its file and the state folders it leaves empty unless another command of the
    configuration holds it: a finished `seqpe train` left `.seqpe/locks/cfg-*` in the working folder (walk 45h #4),
    where before it left no `.seqpe` at all."""
    if handle is None:
        return
    name = Path(handle.name).name
    handle.close()
    runs.forget([], (name,))


def _held_configs(folder: Path) -> set[tuple]:
    """(dataset, configuration) of every `hold_config` lock a process holds now."""
    found = set()
    for lock in sorted(folder.glob("cfg-*")) if folder.is_dir() else []:
        if not _CFG_LOCK.fullmatch(lock.name):
            continue
        handle = flock(lock, create=False)
        if handle is not None:                          # nobody holds it
            handle.close()
            continue
        try:
            said, _ = json.JSONDecoder().raw_decode(lock.read_text())
            found.add((said["dataset"], said["config"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return found


def lock_seed(fp: str, run_dir: Path, what: dict) -> Optional[SeedLock]:
    """Take the seed's locks, or raise a DataError naming the seed (None where the platform has no flock).
    `what` (dataset, config, seed) goes into the fingerprint's lock file, for `seqpe state`. Under DVC (a stage's
    command: DVC_STAGE set) a fingerprint lock held elsewhere is waited for, not refused: two experiments of
    `dvc queue start -j 2` sharing a SEQPE_STATE train the same seed when their params differ only where it
    does not read (walk 35a); the one that waits then reuses the other's finished seed while the state still
    keeps it (a configuration that finished takes its state along: the seed is then trained again)."""
    try:
        import fcntl  # noqa: F401 (the locks below are flocks)
    except ImportError:                                  # pragma: no cover (not POSIX)
        return None
    handles = []
    label = f"{what['dataset']} {what['config']} seed {what['seed']}"
    for name, busy in _seed_locks(fp, run_dir, label):
        handle = _lock_file(name)
        if handle is None and name == fp and os.environ.get("DVC_STAGE"):
            sys.stderr.write(f"note: {busy().problem.split('; ')[0]}: waiting for it (under DVC), then going on from "
                             "what the state keeps of it\n")
            handle = flock(runs.lock_path(name), wait=True)
        if handle is None:
            for h in handles:
                h.close()
            raise busy()
        handles.append(handle)
    handles[0].seek(0)
    handles[0].truncate()
    handles[0].write(json.dumps({**what, "pid": os.getpid()}))
    handles[0].flush()
    return SeedLock(handles)


def probe_seed(fp: str, run_dir: Path, label: str) -> None:
    """`train --check`: the DataError lock_seed would raise if another process holds either lock of the
    seed now; nothing is created (a lock file that does not exist is held by no one)."""
    for name, busy in _seed_locks(fp, run_dir, label):
        if not runs.lock_path(name).is_file():
            continue
        handle = _lock_file(name, create=False)
        if handle is None:
            raise busy()
        handle.close()


def _held(name: str) -> Optional[dict]:
    """What a held fingerprint lock says is training ({} if it does not say), or None if nothing holds it."""
    handle = _lock_file(name, create=False)
    if handle is not None:
        handle.close()
        return None
    path = runs.state_root() / "locks" / name
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text()) or {}
    except (OSError, ValueError):
        return {}


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size


def _resume_info(path: Path) -> Optional[dict]:
    """Label, last finished epoch, planned epochs, process count and fingerprint inputs (runs.shown_inputs)
    of a resume file, memory-mapped (the weights are not read). An entry is None where the file predates
    seqpe recording it; the whole answer is None if the file cannot be read."""
    import torch
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        return {"what": state.get("label"), "epoch": state["loop"]["epoch"], "epochs": state.get("epochs"),
                "world": state.get("world"), "inputs": state.get("inputs"), "run_dir": state.get("run_dir")}
    except FileNotFoundError:
        raise
    except Exception:
        return None


def resume_history(path: Path) -> list:
    """The per-epoch history a resume file holds ([] when it cannot be read), memory-mapped."""
    import torch
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("history") or []
    except Exception:
        return []


def other_resumes(label: str, fp: str, run_dir: Optional[Path] = None) -> list[dict]:
    """Resume files of the seed `label` ("dataset config seed N") kept under another fingerprint: the same
    seed trained with other settings, samples or code, which a command with this fingerprint cannot go on
    from (newest first; each _resume_info's entries plus "path"); with `run_dir`, only those of that seed
    folder (and those written before resume files named theirs)."""
    here = str(Path(run_dir).resolve()) if run_dir is not None else None
    root = runs.state_root() / "resume"
    found = []
    for path in sorted(root.glob("*.pt")) if root.is_dir() else []:
        if path.stem == fp or not _FP.fullmatch(path.stem):
            continue
        try:
            info, modified = _resume_info(path), path.stat().st_mtime
        except FileNotFoundError:                      # finished and dropped meanwhile
            continue
        if info is not None and info["what"] == label and (here is None or info["run_dir"] in (None, here)):
            found.append({**info, "path": path, "modified": modified})
    return sorted(found, key=lambda e: (-e["modified"], str(e["path"])))


def entries() -> list[dict]:
    """What the state root holds (module docstring), each entry with a `status`:
    resume     "training now" | "kept: its configuration is training" (the running command goes on to it) |
               "resumable" | "resumable by other seqpe code" (another checkout or version wrote it: no
               command of this one goes on from it) | "damaged" (unreadable: train starts that seed afresh) |
               "its seed has finished" (its run folder holds the finished seed: DVC's run cache restored it)
    finished   "training now" (a rerun is copying it) | "kept: its configuration is training" (a crash there
               would otherwise retrain it) | "damaged" (not its run.json's bytes) | "finished by other seqpe code" |
               "stopped by train.time_limit" | "kept until its configuration finishes"
    spill      the memory-mapped sample matrices (train.memory_budget), listed, never pruned."""
    root = runs.state_root()
    found = []
    if not root.is_dir():
        return found
    training = {}                                       # fingerprint -> what its lock says, for held locks
    for lock in sorted((root / "locks").glob("*")) if (root / "locks").is_dir() else []:
        if _FP.fullmatch(lock.name) and (said := _held(lock.name)) is not None:
            training[lock.name] = said
    configs = {(w.get("dataset"), w.get("config")) for w in training.values()} | _held_configs(root / "locks")
    prefixes = tuple(f"{d} {c} seed " for d, c in configs)
    for path in sorted((root / "resume").glob("*.pt")) if (root / "resume").is_dir() else []:
        if not _FP.fullmatch(path.stem):
            continue
        try:
            info, stat = _resume_info(path), path.stat()
        except FileNotFoundError:                      # finished and dropped while being listed
            continue
        what = (info or {}).get("what")
        status = ("training now" if path.stem in training else
                  "kept: its configuration is training" if what and prefixes and what.startswith(prefixes) else
                  "damaged" if info is None else
                  "its seed has finished" if _finished_in(info.get("run_dir"), path.stem) else
                  "resumable by other seqpe code" if _other_code(info.get("inputs")) else "resumable")
        found.append({"kind": "resume", "fingerprint": path.stem, "what": what,
                      "epoch": (info or {}).get("epoch"), "epochs": (info or {}).get("epochs"),
                      "processes": (info or {}).get("world"), "run": (info or {}).get("run_dir"),
                      "status": status, "path": str(path),
                      "bytes": stat.st_size, "modified": stat.st_mtime})
    for path in sorted((root / "done").glob("*")) if (root / "done").is_dir() else []:
        rec = runs._record(path) if _FP.fullmatch(path.name) else None
        if rec is None or rec.get("fingerprint") != path.name:
            continue                                   # not a finished copy seqpe wrote: not listed, never pruned
        try:
            size, stat = _size(path), path.stat()
        except FileNotFoundError:
            continue
        status = ("training now" if path.name in training else
                  "kept: its configuration is training" if (rec.get("dataset"), rec.get("name")) in configs else
                  "damaged" if runs._damaged(path, rec) is not None else     # runs.finished never takes it
                  "finished by other seqpe code" if _other_code(_code_of(path)) else
                  "stopped by train.time_limit" if rec.get("stopped") == "time_limit" else
                  "kept until its configuration finishes")
        found.append({"kind": "finished", "fingerprint": path.name,
                      "what": f"{rec.get('dataset')} {rec.get('name')} seed {rec.get('seed')}",
                      "epoch": rec.get("epochs_run"), "epochs": (rec.get("train") or {}).get("epochs"),
                      "processes": rec.get("world_size"), "run": None, "status": status, "path": str(path),
                      "bytes": size,
                      "modified": stat.st_mtime})
    spill = root / "spill"
    if spill.is_dir():
        found.append({"kind": "spill", "fingerprint": None, "what": "memory-mapped sample matrices "
                      "(train.memory_budget)", "epoch": None, "epochs": None, "processes": None, "run": None,
                      "status": "delete by hand when no training runs", "path": str(spill), "bytes": _size(spill),
                      "modified": spill.stat().st_mtime})
    for entry in found:
        entry["modified"] = datetime.datetime.fromtimestamp(entry["modified"], datetime.timezone.utc) \
            .strftime("%Y-%m-%d %H:%M UTC")
    return found


def _finished_in(run_dir: Optional[str], fp: str) -> bool:
    """The seed folder a resume file names holds that seed finished (its run.json, same fingerprint, not stopped by
    train.time_limit): DVC's run cache put the stage's outputs back after a kill, so the command that would have
    deleted the resume file never ran (walk 39f #4: listed as resumable, kept by --prune)."""
    if not run_dir:
        return False
    folder = Path(run_dir)
    rec = runs._record(folder)                 # as runs.finished takes a seed: its files there and intact (a damaged
    return (rec is not None and rec.get("fingerprint") == fp and rec.get("stopped") != "time_limit"   # one is
            and all((folder / f).is_file() for f in runs.FILES[:3])            # trained again, from this file;
            and runs._damaged(folder, rec) is None)                            # walk 40e #3)


def _code_of(copy: Path) -> Optional[dict]:
    """{"versions": ...} of a finished copy, from the code.json save_run writes beside it (None when there is
    none, or it cannot be read: a copy written before copies kept it counts as this code's)."""
    try:
        return {"versions": json.loads((copy / runs.CODE_JSON).read_text(encoding="utf-8"))}
    except (OSError, ValueError):
        return None


def _other_code(inputs) -> bool:
    """Whether a resume file's fingerprint inputs name other libraries or seqpe source than this checkout's
    (False for a file written before resume files kept them: unknown)."""
    if not isinstance(inputs, dict) or not isinstance(inputs.get("versions"), dict):
        return False
    return inputs["versions"] != runs.code_versions()


# What no command of this checkout will ever read: resume files and finished copies of other code (the
# fingerprint includes the code), damaged files, and the copies of runs stopped by train.time_limit (only
# their resume file continues them; `runs.finished` never takes such a copy for a finished seed).
_UNUSABLE = ("resumable by other seqpe code", "damaged", "finished by other seqpe code", "stopped by train.time_limit",
             "its seed has finished")
# ... and, with --all, the work this checkout would go on from: an unfinished seed's resume file (it then
# starts afresh) and a finished seed kept for its configuration (it is then trained again).
PRUNABLE = (*_UNUSABLE, "resumable", "kept until its configuration finishes")


def prune(everything: bool = False) -> tuple[list[dict], list[dict], dict[str, int]]:
    """Delete the resume files and finished copies no command of this checkout will read (`_UNUSABLE`), or with
    `everything` also those it would go on from (`PRUNABLE`), then the lock files no process holds (a seed
    killed before its first epoch leaves one and nothing else); returns (deleted, kept, lock files removed per
    lock folder: the state root's and the machine's, `<tmp>/seqpe-<uid>/locks`, shared by every checkout).
    The entries a running training holds or needs stay either way (its command goes on to them). Each goes
    under its lock; a copy is renamed first, so an interrupted prune leaves nothing a rerun could take for a
    finished seed."""
    deleted, kept = [], []
    for entry in entries():
        if entry["kind"] == "spill":
            continue
        if entry["status"] not in (PRUNABLE if everything else _UNUSABLE):
            kept.append(entry)
            continue
        handle = _lock_file(entry["fingerprint"])
        if handle is None:                             # a training took it since the listing
            kept.append(entry)
            continue
        try:
            path = Path(entry["path"])
            if path.is_dir():
                doomed = path.with_name(path.name + ".deleting")
                path.rename(doomed)
                shutil.rmtree(doomed)
                deleted.append(entry)
            elif path.exists():
                path.unlink()
                deleted.append(entry)
        except FileNotFoundError:                      # gone meanwhile (its training finished)
            pass
        finally:
            handle.close()
    stale: dict[str, int] = {}                        # lock folder -> unheld lock files removed there
    folders = [runs.state_root() / "locks", machine_locks()]  # the machine's: run and output folders' (walk 35c #6)
    for path in sorted(p for f in folders if f is not None and f.is_dir() for p in f.glob("*")):
        if not any(p.fullmatch(path.name) for p in (_FP, _DIR_LOCK, _OUT_LOCK, _CFG_LOCK)):
            continue                                   # not seqpe's
        if unlink_unheld(path):                       # held: a training is on it; else the next lock makes it again
            stale[str(path.parent)] = stale.get(str(path.parent), 0) + 1
    runs.forget([])                                    # the emptied folders (the sweep took the deleted seeds' locks)
    return deleted, kept, stale


def note_state_above(out=sys.stderr) -> None:
    """For `seqpe state` run below a project: where the project's state is (nothing here)."""
    if os.environ.get(runs.STATE_ENV) or runs.state_root().exists():
        return
    for folder in Path.cwd().parents:
        if (folder / ".seqpe").is_dir():
            out.write(f"note: nothing here; {folder / '.seqpe'} holds the state of the project above: run "
                      f"`seqpe state` from {folder}\n")
            return
