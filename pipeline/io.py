"""The only place that writes and reads shards and manifests.

Every write goes to a temporary path in the destination folder and is renamed into
place, so a crash or Ctrl-C never leaves a half-written file where a later stage
would read it. A whole output folder is built in a sibling temporary folder and
swapped in with `atomic_dir`.

Layout of a prepared folder (sessions or samples)::

    <root>/manifest.json
    <root>/items.parquet                 (sessions only: new id, raw id, count)
    <root>/<split>/part-00000.parquet    (split in train, valid, test)
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from .errors import DataError, as_os_error
from .lazy import lazy

pl = lazy("polars")  # imported on first use: `seqpe download` never needs it

SPLITS = ("train", "valid", "test")
MANIFEST = "manifest.json"
SHARD_ROWS = 1_000_000  # rows per Parquet shard
# Parquet options fixed here so the same frame always gives the same bytes.
_PARQUET = dict(compression="zstd", compression_level=3, statistics=True, use_pyarrow=False)


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _publish_mode(path: Path, directory: bool) -> None:
    """mkstemp/mkdtemp create owner-only entries; give published ones the usual umask mode."""
    with contextlib.suppress(OSError):
        os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


def _temp_prefix(dst: Path) -> str:
    """`.NAME.p<pid>.`: the temporary entries of a write to `dst` carry the writer's pid, so a
    later run can tell a dead run's leftovers from a live one's work (`sweep_leftovers`)."""
    return f".{dst.name}.p{os.getpid()}."


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:      # someone else's process: alive
        return True
    except OSError:
        return False
    return True


LEFTOVER_SUFFIXES = (".tmp", ".old", ".gen")


_TEMP_NAME = re.compile(r"\.(.+)\.p\d+\.[^./]+(?:" + "|".join(map(re.escape, LEFTOVER_SUFFIXES)) + ")")


def user_path(path: str | Path) -> str:
    """`path` as the user named it: a temporary entry of an atomic write (`.NAME.p<pid>.<rand>.tmp`, and what
    lies inside one) is shown as NAME, the destination the user gave, in an error message."""
    parts = [(_TEMP_NAME.fullmatch(p).group(1) if _TEMP_NAME.fullmatch(p) else p) for p in Path(path).parts]
    return str(Path(*parts)) if parts else str(path)


def _mtime(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0


def _dead_writers(dst: Path) -> Iterator[Path]:
    """The `.NAME.p<pid>.<random>.{tmp,old,gen}` entries next to `dst` (the exact names `_temp_prefix` with
    mkstemp / mkdtemp gives: 8 characters of a-z, 0-9, _) whose writer is gone, `.old` ones first and newest
    first. Nothing else is ever taken for a leftover: pid-less `.NAME.*.old` names (written before runs carried
    a pid) matched a user's own `mv sess .sess.old` backup, which a writer deleted and a reader renamed into
    the output (walk 41d #1)."""
    parent = dst.parent
    try:                    # a training that finished may remove the state root's emptied folder between another's
        entries = list(parent.iterdir())     # mkdir and this look (bench_stability.sh's parallel seeds in CI)
    except (FileNotFoundError, NotADirectoryError):
        return
    shape = re.compile(re.escape(f".{dst.name}.") + r"p(\d+)\.[a-z0-9_]{8}(?:" +
                       "|".join(map(re.escape, LEFTOVER_SUFFIXES)) + ")")
    for entry in sorted(entries, key=lambda e: (not e.name.endswith(".old"), -_mtime(e), e.name)):
        found = shape.fullmatch(entry.name)
        if found is None:
            continue
        pid = int(found.group(1))
        if pid == os.getpid() or _pid_alive(pid):
            continue
        yield entry


def put_back(dst: str | Path) -> Optional[Path]:
    """When `dst` is missing and a dead writer's `.old` folder lies beside it (killed between its two renames,
    where the file system has no exchange), rename that previous output back; returns it (None when nothing was
    put back). Readers call it too: they said the folder did not exist while its only copy sat beside it
    (walk 35c #9), which only the next writer's sweep put back."""
    dst = Path(dst)
    if dst.is_symlink() and not dst.exists():   # a link whose target a writer swapped at (through_link): the
        dst = dst.resolve()                     # previous output lies beside the target (walk 36c #8a)
    if os.path.lexists(dst):
        return None
    for entry in _dead_writers(dst):
        if entry.name.endswith(".old") and entry.is_dir() and not entry.is_symlink():
            try:
                os.replace(entry, dst)
            except OSError:
                continue
            return entry
    return None


def put_back_noted(src: str | Path) -> None:
    """`put_back` for a reader (a note on stderr says what it did)."""
    if (old := put_back(src)) is not None:
        sys.stderr.write(f"note: put back {src} from {old.name} beside it: the previous output, which a writer killed "
                         f"as it swapped in a new one left there\n")


def sweep_leftovers(dst: str | Path) -> int:
    """Remove what killed runs left next to `dst`: `.NAME.p<pid>.<8 random>.{tmp,old,gen}` entries whose
    process is gone (exactly those names, `_dead_writers`: never a user's `.NAME.old`).
    A live run's entries (another process writing the same destination) are left alone.
    Returns the number of entries removed. A dead writer's `.old` folder is put back instead when `dst` is
    missing: the writer was killed between its two renames (`_swap_in` without an exchange), and that folder is
    the previous output, the only copy (it was deleted here)."""
    dst = Path(dst)
    put_back(dst)
    removed = 0
    for entry in _dead_writers(dst):
        if entry.name.endswith(".old") and entry.is_dir() and not entry.is_symlink() and not os.path.lexists(dst):
            continue                                 # could not be put back: never deleted
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                entry.unlink()
        removed += 1
    return removed


@contextlib.contextmanager
def cleanup_new_folders(path: str | Path) -> Iterator[None]:
    """Folders on the way to `path` (itself included) that do not exist when the block starts are
    removed again, deepest first, if the block fails and they are empty: a failed or interrupted
    stage leaves no empty folders behind (`seqpe download D /tmp/x/raw/y` offline leaves no /tmp/x)."""
    missing, p = [], Path(path).absolute()
    while not p.exists() and not p.is_symlink() and p != p.parent:
        missing.append(p)
        p = p.parent
    try:
        yield
    except BaseException:
        for folder in missing:                    # deepest first; stop at the first that holds something
            try:
                folder.rmdir()
            except FileNotFoundError:
                continue
            except OSError:
                break
        raise


def _unwound(path: str | Path) -> Path:
    """`path` with each `NAME/..` whose NAME does not exist taken out: making the parents of `out/./x/../sess`
    made an empty `x` only to step back out of it (walk 35b). A `..` after an existing entry stays, as the
    kernel resolves it (through a link, `link/..` is the link target's parent)."""
    parts: list[str] = []
    for part in Path(path).parts:
        if part == ".." and parts and parts[-1] not in ("..", "/") \
                and not os.path.lexists(os.path.join(*parts)):
            parts.pop()
        else:
            parts.append(part)
    return Path(*parts) if parts else Path(".")


def through_link(dst: str | Path) -> Path:
    """`dst`, or where it points when it is a symbolic link to a folder (`data/sessions/X -> /mnt/big/X`): a
    folder output is swapped in at the link's target, so the link stays and the output lands where it points
    (the swap replaced the link itself with a real folder, and left the target as it was). Files are not
    written through (atomic_path): a file link may be DVC's link into its cache, which must never change."""
    dst = Path(dst)
    return dst.resolve() if dst.is_symlink() else dst


def made_in(parent: Path, make):
    """`make()`, which creates something in the folder `parent` (mkstemp, mkdtemp, open), made again after
    `parent` is re-made, when another process removed it in between: a finished training removes the state
    root's empty folders (`runs.forget`), and a second training between its `mkdir` and its file got
    FileNotFoundError on `.../state/done` (walk 43b #10). Once the file is made the folder is not empty, and stays."""
    for attempt in range(5):
        try:
            return make()
        except FileNotFoundError:
            if attempt == 4 or parent.is_dir():          # not the folder gone: raise as it is
                raise
            parent.mkdir(parents=True, exist_ok=True)


@contextlib.contextmanager
def atomic_path(dst: str | Path) -> Iterator[Path]:
    """Yield a temporary file path next to `dst`; rename it onto `dst` on success.

    On any exception the temporary file is removed and `dst` is left untouched. What a killed
    earlier write left next to `dst` is swept first (`sweep_leftovers`).
    """
    dst = _unwound(dst)      # a link here is replaced, not written through: it may point into DVC's cache
    with cleanup_new_folders(dst.parent):
        dst.parent.mkdir(parents=True, exist_ok=True)
        sweep_leftovers(dst)
        fd, tmp = made_in(dst.parent, lambda: tempfile.mkstemp(prefix=_temp_prefix(dst), suffix=".tmp",
                                                               dir=dst.parent))
        os.close(fd)
        tmp_path = Path(tmp)
        try:
            yield tmp_path
            _publish_mode(tmp_path, directory=False)
            os.replace(tmp_path, dst)
            _fsync_dir(dst.parent)
        except BaseException as e:
            with contextlib.suppress(FileNotFoundError):
                tmp_path.unlink()
            _raise_named(e, dst)
            raise


def _raise_named(e: BaseException, dst: Path) -> None:
    """Raise the OSError behind `e` named after `dst` where `e` does not name its file (a full disk in
    `write()`, or in Polars' writer, whose ComputeError carries "(os error 28)"); return to re-raise `e`."""
    named = as_os_error(e, dst) if isinstance(e, Exception) else None
    if named is not None and named is not e:
        raise named from None


@contextlib.contextmanager
def scratch_dir(dst: str | Path, suffix: str = ".gen") -> Iterator[Path]:
    """A temporary working folder next to `dst` (named like atomic_dir's, so a killed run's is
    swept by the next run), removed afterwards whatever happens."""
    dst = _unwound(dst)
    with cleanup_new_folders(dst.parent):
        dst.parent.mkdir(parents=True, exist_ok=True)
        sweep_leftovers(dst)
        tmp = Path(made_in(dst.parent, lambda: tempfile.mkdtemp(prefix=_temp_prefix(dst), suffix=suffix,
                                                                dir=dst.parent)))
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def flock(path: Path, wait: bool = False, create: bool = True, shared: bool = False):
    """`path` opened and flocked exclusively (`shared`: a shared lock, which other shared holders do not exclude;
    made when missing, unless not `create`: then None), or None when another process holds it and not `wait`. Once locked, the path must still name the file locked: `seqpe state
    --prune` deletes the lock files nobody holds, and a process that opened one just before it was deleted would
    hold a lock on a file nobody else can find (then it opens the path again)."""
    import fcntl
    while True:
        try:
            handle = made_in(path.parent, lambda: open(path, "a+")) if create else open(path, "r")   # (a flock
            # needs no write access: `seqpe state` lists a read-only folder's state, walk 45a #6)
        except FileNotFoundError:
            if create:
                raise
            return None
        try:
            fcntl.flock(handle, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            handle.close()
            return None
        try:
            now, held = os.stat(path), os.fstat(handle.fileno())
            if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                return handle
        except FileNotFoundError:
            pass
        handle.close()


def unlink_unheld(path: Path) -> bool:
    """Delete the lock file `path` unless another process holds it, and only while holding it (`flock`, so a file
    swapped in meanwhile is the one checked); whether it was deleted."""
    handle = flock(path, create=False)
    if handle is None:                             # held, or gone already
        return False
    try:
        path.unlink(missing_ok=True)
        return True
    finally:
        handle.close()


def machine_locks() -> Optional[Path]:
    """The user's lock folder for the whole machine (`<tmp>/seqpe-<uid>/locks`): locks on output folders, which
    must hold whatever the working folder or SEQPE_STATE of the commands that write them. None where it cannot
    be one of the user's own (made by someone else, not a folder, not writable)."""
    folder = Path(tempfile.gettempdir()) / f"seqpe-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
            return None
        (folder / "locks").mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    return folder / "locks"


@contextlib.contextmanager
def _swap_locks(dsts: list[Path]) -> Iterator[None]:
    """Folders that change together: hold a lock on each (the machine's lock folder, by absolute path; in a
    fixed order, waiting) while they are swapped in, so that two processes writing the same pair at once swap
    theirs one pair after the other. Two `seqpe import` of one name interleaved their four swaps and left the
    sessions of one source beside the samples of the other (walk 35b). Nothing where flock or the folder is
    missing."""
    folder = machine_locks() if len(dsts) > 1 else None
    try:
        import fcntl
    except ImportError:                                  # pragma: no cover (not POSIX)
        folder = None
    if folder is None:
        yield
        return
    handles = []
    try:
        for dst in sorted({str(d.resolve()) for d in dsts}):          # every spelling of a folder: one lock
            handles.append(flock(folder / ("out-" + hashlib.sha256(dst.encode()).hexdigest()[:20]), wait=True))
        yield
    finally:
        for handle in handles:
            handle.close()


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2
_renameat2: Any = None


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing entries in one step: Linux's renameat2(RENAME_EXCHANGE), through ctypes because the
    standard library has no call for it. With two renames (dst to a side name, then the new folder to dst) a
    SIGKILL between them left no folder at dst at all, and the next run's sweep deleted the side copy, the only
    one (walk 35b). False where libc, the kernel or the file system lacks the call: the caller renames twice."""
    import ctypes
    global _renameat2
    if _renameat2 is None:
        try:
            fn = ctypes.CDLL(None, use_errno=True).renameat2
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            fn.restype = ctypes.c_int
            _renameat2 = fn
        except (OSError, AttributeError):
            _renameat2 = False
    if not _renameat2:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (38, 22, 95):          # ENOSYS, EINVAL (not on this file system), EOPNOTSUPP
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _swap_in(tmp: Path, dst: Path) -> Optional[Path]:
    """Put the folder `tmp` at `dst` and return where dst's previous content now is (None: there was none).
    One exchange where the system has it; else dst goes to a `.old` side name first (`sweep_leftovers` puts
    a dead writer's `.old` back when dst is missing)."""
    if not dst.exists():
        os.replace(tmp, dst)
        return None
    if _exchange(tmp, dst):
        return tmp
    old = Path(tempfile.mkdtemp(prefix=_temp_prefix(dst), suffix=".old", dir=dst.parent))
    os.rmdir(old)
    os.replace(dst, old)
    try:
        os.replace(tmp, dst)
    except BaseException:
        if old.exists() and not dst.exists():
            os.replace(old, dst)      # the swap failed half-way (another process took dst): put it back
        raise
    return old


def _swap_back(dst: Path, old: Optional[Path]) -> None:
    """Undo `_swap_in`: dst's previous content (at `old`; None: there was none) back at dst, the new removed."""
    if old is None:
        shutil.rmtree(dst, ignore_errors=True)
        return
    if not _exchange(old, dst):
        new = Path(tempfile.mkdtemp(prefix=_temp_prefix(dst), suffix=".tmp", dir=dst.parent))
        os.rmdir(new)
        os.replace(dst, new)
        os.replace(old, dst)
        old = new
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(dst: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder next to `dst`; swap it in for `dst` on success.

    The previous content of `dst` (if any) is replaced only once the new one is
    complete; on failure the temporary folder is removed and `dst` is untouched. Callers
    check first that `dst` is theirs to replace (`claim_dir`): this only swaps folders.
    What a killed earlier run left next to `dst` is swept first (`sweep_leftovers`).
    """
    with atomic_dirs(dst) as (tmp,):
        yield tmp


def _not_the_working_folder(dst: Path) -> None:
    """Refuse to replace the folder a command runs in (or one above it): `seqpe download sample .` in an empty
    folder failed with "Device or resource busy: ..p16208.1frv69uv.tmp" (walk 44i #2: `.`'s parent is `.`, so
    the new folder was made inside the one it was to replace), and replacing it would leave the user's shell
    in a deleted folder."""
    try:
        here, there = Path.cwd().resolve(), dst.resolve()
    except OSError:
        return
    if here == there or there in here.parents:
        raise DataError(f"{dst} is the folder this command runs in{'' if here == there else ' (or above it)'}, and "
                        "a stage replaces its output folder whole", "pass a subfolder, e.g. data/raw/DATASET, "
                        "or run from another folder")


@contextlib.contextmanager
def atomic_dirs(*dsts: str | Path) -> Iterator[list[Path]]:
    """`atomic_dir` for folders that change together (an import's sessions and samples): one temporary folder
    each, all built before any is swapped in; then every swap, one after the other with nothing between them
    (the old copies are deleted only once all are in: the old samples' deletion sat between the two swaps, so a
    SIGKILL there left the new samples beside the old sessions, walk 35b), with a Ctrl-C or SIGTERM held back
    until they are done (`deferred_interrupt`). A swap that fails puts back the ones made before it. What is left
    is the instant between two exchanges, two system calls: a SIGKILL exactly there leaves the first folder new
    and the second old (a rerun of the command mends it)."""
    dsts = [through_link(_unwound(d)) for d in dsts]
    for dst in dsts:
        if dst.exists() and not dst.is_dir():
            raise DataError(f"{dst} is a file, not a folder", "pass a folder path (a file is never replaced)")
        _not_the_working_folder(dst)
    with contextlib.ExitStack() as stack:
        tmps: list[Path] = []
        for dst in dsts:
            stack.enter_context(cleanup_new_folders(dst.parent))
            dst.parent.mkdir(parents=True, exist_ok=True)
            sweep_leftovers(dst)
        try:
            for dst in dsts:
                tmps.append(Path(made_in(dst.parent, lambda: tempfile.mkdtemp(prefix=_temp_prefix(dst), suffix=".tmp",
                                                                              dir=dst.parent))))
            yield tmps
        except BaseException as e:
            for tmp in tmps:
                shutil.rmtree(tmp, ignore_errors=True)
            _raise_named(e, dsts[-1])
            raise
        with deferred_interrupt(), _swap_locks(dsts):
            done: list[tuple[Path, Optional[Path]]] = []
            try:
                for tmp in tmps:
                    _publish_mode(tmp, directory=True)
                for tmp, dst in zip(tmps, dsts):          # back to back: one renameat2 each where the system has it
                    done.append((dst, _swap_in(tmp, dst)))
                for parent in dict.fromkeys(dst.parent for dst in dsts):
                    _fsync_dir(parent)
            except BaseException as e:
                for dst, old in reversed(done):
                    with contextlib.suppress(OSError):
                        _swap_back(dst, old)
                for tmp in tmps:
                    shutil.rmtree(tmp, ignore_errors=True)
                _raise_named(e, dsts[len(done)] if len(done) < len(dsts) else dsts[-1])
                raise
            for _, old in done:
                if old is not None:
                    shutil.rmtree(old, ignore_errors=True)


# --------------------------------------------------------------------------- whose folder is it

KINDS = ("raw", "sessions", "samples", "run", "report")
_WHAT = {"raw": "raw data (source.json)", "sessions": "sessions (manifest.json)",
         "samples": "samples (manifest.json)", "run": "training run (run.json)",
         "report": "evaluation report (summary.json)"}


def _a_what(kind: str) -> str:
    """_WHAT[kind] with its article: "a training run (run.json)", "sessions (manifest.json)"."""
    return {"run": "a ", "report": "an "}.get(kind, "") + _WHAT[kind]


_MAKER = {"raw": "download", "sessions": "preprocess", "samples": "augment", "run": "train", "report": "evaluate"}


def manifest_kind(manifest: dict) -> Optional[str]:
    """"sessions" | "samples" for a manifest seqpe wrote (None when it says neither). Manifests carry
    `kind`; older ones are read from their stage (import writes both: samples name their sessions)."""
    kind = manifest.get("kind")
    if kind in ("sessions", "samples"):
        return kind
    stage = manifest.get("stage")
    if stage == "preprocess":
        return "sessions"
    if stage == "augment":
        return "samples"
    if stage == "import":
        return "samples" if "sessions_manifest" in manifest else "sessions"
    return None


def _owner(folder: Path) -> tuple[Optional[str], Optional[str]]:
    """(kind, dataset) of a folder seqpe wrote, from its source.json / manifest.json / run.json /
    summary.json (an evaluate report: one with the report's `configs`)."""
    for name, kind in (("source.json", "raw"), (MANIFEST, None), ("run.json", "run"), ("summary.json", "report")):
        path = folder / name
        if not path.is_file():
            continue
        try:
            rec = read_json(path)
        except (DataError, OSError):
            return None, None
        if not isinstance(rec, dict) or (kind == "report" and "configs" not in rec):
            return None, None
        return (kind or manifest_kind(rec)), rec.get("dataset")
    return None, None


def not_runs(folder: Path, dataset: Optional[str] = None) -> Optional[DataError]:
    """What `folder`, given where a runs folder belongs (`seqpe evaluate DATASET RUNS`, `seqpe report RUNS`), is
    instead, as the DataError naming the folder to pass; None when it may be a runs folder. One seed's folder,
    one configuration's seeds, or another stage's output (samples, sessions, raw data, a report) was blamed on
    missing runs, with the fix to train them again (walk 34a)."""
    folder = Path(folder)
    kind, owner = _owner(folder)
    if kind == "run":
        return DataError(f"{folder} is one seed's folder ({folder.parent.name}/{folder.name}), not a runs folder",
                         f"pass the runs folder above it, {folder.parent.parent}")
    if kind is not None:
        return DataError(f"{folder} holds {owner or 'a dataset'}'s {_WHAT[kind]}, not runs",
                         f"pass its runs folder, e.g. data/runs/{owner or dataset or 'DATASET'}")
    if any(p.is_file() for p in folder.glob("seed-*/run.json")):
        return DataError(f"{folder} holds the seeds of one configuration ({folder.name}), not a runs folder",
                         f"pass the runs folder above it, {folder.parent}")
    return None


def spelt_like(path: Path, given: Path) -> str:
    """`path` (absolute) as the user spelt `given`: relative to the working folder when `given` was relative
    (walk 35c: `../p3/runs/rep is inside /tmp/w/p4/../p3/runs`), else normalised."""
    return os.path.normpath(path) if Path(given).is_absolute() else os.path.relpath(path)


def refuse_nested(dst: str | Path, what: str, instead: str, *, itself: bool = False) -> None:
    """A DataError when `dst` lies inside a folder another seqpe stage wrote (raw data, sessions, samples,
    a run, a report): each is replaced whole when its stage runs again, or by `dvc repro` and `dvc
    checkout`, which would delete `what` with it; a samples folder is also a DVC output whose hash it
    would change. `seqpe train data/samples/X data/samples/X` used to write its runs there. `instead`:
    the kind of folder to pass (the fix); `itself`: `dst` may not be such a folder either (a runs folder,
    whose seed folders go inside it)."""
    dst = Path(dst)
    here = dst.absolute()
    for parent in ([here] if itself else []) + list(here.parents):
        owner_kind, owner_dataset = _owner(parent)
        shown = spelt_like(parent, dst)
        if owner_kind is not None and owner_dataset is not None:
            where = f"{dst}" if parent == here else f"{dst} is inside {shown}, which"
            raise DataError(f"{where} holds {owner_dataset}'s {_WHAT[owner_kind]}: "
                            f"`seqpe {_MAKER[owner_kind]}` replaces that folder whole, and the {what} with it",
                            f"pass a folder outside it ({instead})")
        own_seed = parent == here.parent and re.fullmatch(r"seed-\d+", here.name)   # train's own run folder
        if what != "runs" and parent != here and not own_seed and (config := _configuration(parent)) is not None:
            # (a runs folder there: train.runs.check_runs_dir names it, with the runs folder's own fix)
            raise DataError(f"{dst} is inside {shown}, which holds {config}'s seeds of one configuration "
                            f"(seed-N/run.json): `dvc repro` replaces that folder whole (a train stage's output), "
                            f"and the {what} with it", f"pass a folder outside it ({instead})")
    if what not in ("runs", "curves") and _configuration(here) is None \
            and (dataset := _runs_folder(here.parent)) is not None:      # (a configuration's folder: said apart)
        # walk 43c #2: `report --out data/runs/sample/rep.md` was written there, beside the configurations (a
        # SEQPE_STATE too, walk 43i #5). Curves (--live) kept with their runs stay accepted, by design: a folder of
        # seed-N curves without run.json is no configuration to the reports
        dvc = f", and DVC's evaluate@{dataset} depends on all of it" if here.parent.parent.name == "runs" else ""
        raise DataError(f"{dst} is inside {spelt_like(here.parent, dst)}, which holds {dataset}'s runs "
                        f"(MODEL-ENCODING/seed-N): `seqpe train` and the reports read that folder as runs only{dvc}",
                        f"pass a path outside it ({instead})")


def _runs_folder(folder: Path) -> Optional[str]:
    """The dataset of a runs folder (a configuration's seeds folder among its first 2,000 entries), else None."""
    try:
        for i, child in enumerate(folder.iterdir()):
            if i >= 2000:
                break
            if child.is_dir() and not child.name.startswith(".") and (found := _configuration(child)) is not None:
                return found
    except OSError:
        return None
    return None


def _configuration(folder: Path) -> Optional[str]:
    """The dataset of a configuration's seeds folder (RUNS/MODEL-ENCODING: seed-N/run.json inside), else None.
    `seqpe evaluate X RUNS RUNS/sasrec-none/rep` wrote its report into a train stage's DVC output."""
    try:
        for seed in sorted(folder.glob("seed-*")):
            if re.fullmatch(r"seed-\d+", seed.name) and (seed / "run.json").is_file():
                try:
                    rec = read_json(seed / "run.json")
                except (DataError, OSError):
                    continue
                if isinstance(rec, dict) and isinstance(rec.get("dataset"), str) and rec.get("name") == folder.name:
                    return rec["dataset"]                # (a seed folder copied elsewhere does not make its parent one)
    except OSError:
        return None
    return None


_PLURAL = {"raw": "raw", "sessions": "sessions", "samples": "samples", "run": "runs", "report": "reports"}


def _require_writable(dst: Path) -> None:
    """A DataError now when the folder the output is swapped into cannot take a new entry (a read-only disk, no
    permission): `seqpe train` found out only after its last epoch. Probed with a temporary file in the nearest
    existing folder above `dst`; a path through a file (a runs folder that is a file) is refused as well."""
    here = through_link(dst).absolute().parent
    while not here.exists() and here != here.parent:
        here = here.parent
    if not here.is_dir():
        raise DataError(f"{dst} cannot be made: {here} is a file, not a folder",
                        "pass a path whose parent folders are folders (or move that file)")
    try:
        fd, probe = tempfile.mkstemp(prefix=".seqpe-probe.", dir=here)
    except OSError as e:
        raise DataError(f"{dst} cannot be written: {e.strerror} ({here})",
                        f"pass a destination on a writable disk, or make {here} writable") from None
    os.close(fd)
    os.unlink(probe)


_WRITERS: dict[str, Any] = {}          # folder (real path) -> the flocked handle of its writer lock, this process's


def _claim_writer(dst: Path, kind: str, command: Optional[str]) -> None:
    """Hold the machine-wide writer lock of the output folder `dst` (`w-` + its real path hashed) until the stage
    ends (`claims_released`), or raise a DataError naming the process that holds it. Two `seqpe preprocess` of one
    dataset at once both reported success while the last swap silently replaced the other's folder (walk 44g #2):
    the swap locks order only the swaps. Nothing where flock or the machine's lock folder is missing; a folder this
    process already holds is not locked twice (flock would refuse its own second handle)."""
    folder = machine_locks()
    try:
        import fcntl  # noqa: F401 (flock)
    except ImportError:                                  # pragma: no cover (not POSIX)
        folder = None
    key = str(through_link(dst).resolve())
    if folder is None or key in _WRITERS:
        return
    path = folder / ("w-" + hashlib.sha256(key.encode()).hexdigest()[:20])
    handle = flock(path)
    if handle is None:
        try:
            said = json.loads(path.read_text())
        except (OSError, ValueError):
            said = {}
        said = said if isinstance(said, dict) else {}
        who = f"another seqpe {said['command']}" if isinstance(said.get("command"), str) else "another seqpe command"
        pid = f" (pid {said['pid']})" if isinstance(said.get("pid"), int) else ""
        raise DataError(f"{dst} is being written right now by {who}{pid}; two writers of one folder would replace "
                        "each other's output", "wait for it to finish, then run this command again (or pass another "
                        "destination)")
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps({"pid": os.getpid(), "command": command or _MAKER[kind], "folder": key}))
    handle.flush()
    _WRITERS[key] = handle


@contextlib.contextmanager
def claims_released() -> Iterator[None]:
    """The writer locks `claim_dir` takes inside this block are released when it ends (a stage's entry function
    is decorated with it): a Python session that ran a stage does not keep its folder from the next command."""
    before = set(_WRITERS)
    try:
        yield
    finally:
        for key in [k for k in _WRITERS if k not in before]:
            _WRITERS.pop(key).close()


def claim_dir(dst: str | Path, dataset: Optional[str], kind: str, *, allow: tuple[str, ...] = (),
              command: Optional[str] = None) -> None:
    """Refuse to replace `dst` unless seqpe wrote it: a stage replaces only a folder that is missing,
    empty, or holds its own `kind` output for `dataset` (source.json for raw, a manifest of that
    kind, run.json for a run). Anything else (a user's files, the project root, another dataset's or
    another stage's folder, a file) raises DataError and nothing is touched. `allow` names entries
    that do not count (e.g. a resumable `.FILE.part` in a raw folder). `command`: the command that writes
    the folder, where it is not the kind's own stage (`import` writes sessions and samples)."""
    assert kind in KINDS, kind
    dst = Path(dst)
    refuse_nested(dst, f"{kind} output", f"e.g. data/{_PLURAL[kind]}/{dataset or 'DATASET'}")
    _require_writable(dst)
    if kind != "run":                   # a run folder has its seed's own locks (train/state.py)
        _claim_writer(dst, kind, command)
    if not dst.exists() and not dst.is_symlink():
        return
    if dst.is_symlink() and not dst.exists():      # was "is a file, not a folder" (walk 34b)
        raise DataError(f"{dst} is a link to {os.readlink(dst)}, which does not exist",
                        f"make the folder it points to, or pass another destination (or remove the link {dst})")
    if not dst.is_dir():
        raise DataError(f"{dst} is a file, not a folder", "pass a folder path for the output (a file is never replaced)")
    entries = [e.name for e in dst.iterdir() if e.name not in allow]
    if not entries:
        return
    owner_kind, owner_dataset = _owner(dst)
    if owner_kind == kind and (dataset is None or owner_dataset in (dataset, None)):
        extra = _unlisted(dst, kind, allow)
        if extra:
            shown = ", ".join(extra[:3]) + (", ..." if len(extra) > 3 else "")
            raise DataError(f"{dst} holds {_a_what(kind)} and files seqpe did not write ({shown}); `seqpe "
                            f"{command or _MAKER[kind]}` replaces that folder whole, which would delete them",
                            f"move {shown} out of {dst}, then run the command again")
        return
    if owner_kind is not None:
        whose = f"{owner_dataset}'s " if owner_dataset else ""
        problem = f"{dst} holds {whose}{_WHAT[owner_kind]}, not the {kind} of '{dataset}'" if dataset else \
            f"{dst} holds {whose}{_WHAT[owner_kind]}, not a {kind} folder"
    elif (held := _held(dst)) is not None:
        raise DataError(f"{dst} holds {held}; seqpe replaces only a missing or empty folder or its own "
                        f"{_WHAT[kind]} there", "pass a new or empty folder for the output")
    elif inner := sorted(e for e in entries if (dst / e).is_dir() and _owner(dst / e)[0] == kind):
        shown = ", ".join(inner[:3]) + (", ..." if len(inner) > 3 else "")       # data/reports for data/reports/X
        raise DataError(f"{dst} holds the {_PLURAL[kind]} folders of datasets ({shown}), not one dataset's "
                        f"{_WHAT[kind]}",
                        f"pass one dataset's folder inside it, e.g. {dst / (dataset or inner[0])}")
    elif kind != "run" and (runs := sorted({p.parts[-4] for p in dst.glob("*/*/seed-*/run.json")})):
        shown = ", ".join(runs[:3]) + (", ..." if len(runs) > 3 else "")          # data/runs for a report
        raise DataError(f"{dst} holds training runs ({shown}), which seqpe never replaces with its {kind} output",
                        f"pass a folder of its own for the output, e.g. data/{_PLURAL[kind]}/{dataset or 'DATASET'}")
    else:
        shown = ", ".join(sorted(entries)[:3]) + (", ..." if len(entries) > 3 else "")
        problem = f"{dst} holds files seqpe did not write ({shown})"
    project = any((dst / p).exists() for p in (".git", ".dvc", "params.yaml", "dvc.yaml")) or \
        dst.resolve() in (Path.cwd().resolve(), *Path.cwd().resolve().parents, Path.home().resolve()) or \
        any((dst / e).is_dir() for e in entries)    # data/, data/sessions, /work: folders of work (walk 40e #4)
    raise DataError(f"{problem}; seqpe replaces only a missing or empty folder or its own {_WHAT[kind]} there",
                    "pass a new or empty folder for the output" + ("" if project else    # never "delete ." (walk 40b)
                                                                    f" (or delete {dst} yourself if nothing in it "
                                                                    "is needed)"))


def _unlisted(folder: Path, kind: str, allow: tuple[str, ...] = ()) -> list[str]:
    """Files inside seqpe's `kind` folder that its record does not list (sorted relative paths): a
    manifest lists its shards, source.json its files, a run has runs.FILES. `seqpe preprocess` used to
    replace data/sessions/X whole with a user's notes.txt in it. Entries under `allow` do not count."""
    if kind in ("sessions", "samples", "raw"):
        try:
            rec = read_json(folder / (MANIFEST if kind != "raw" else "source.json"))
        except (DataError, OSError):
            return []                                    # unreadable: claim_dir has already named the owner
        if kind == "raw":
            listed = {"source.json", *(rec.get("files") or {})}
        else:
            listed = {MANIFEST, *(e.get("path") for e in rec.get("shards") or [] if isinstance(e, dict))}
    elif kind == "run":
        from .train.runs import FILES
        listed = set(FILES)
    else:                   # a report folder: evaluate swaps it in whole (walk 39c #3: a user's notes.txt went)
        from .evaluate import REPORT_FILES
        listed = set(REPORT_FILES)
    parents = {rel.rsplit("/", 1)[0] for rel in listed if isinstance(rel, str) and "/" in rel}
    parents |= {p.rsplit("/", i)[0] for p in list(parents) for i in range(1, p.count("/") + 1)}
    # a file or a link, and a folder of no file (an empty one, walk 40a #7): the swap removes those too
    return sorted(rel for path in folder.rglob("*")
                  if (rel := path.relative_to(folder).as_posix()) not in listed and rel.split("/")[0] not in allow
                  if path.is_symlink() or not path.is_dir() or (rel not in parents and not any(path.iterdir())))


def claim_file(dst: str | Path, what: str, ours: Callable[[Path], bool], example: str,
               older: Optional[Callable[[Path], Optional[str]]] = None) -> None:
    """Refuse to replace an existing file `dst` unless its content shows it is seqpe's own `what` (`ours`
    reads it; any error reading it counts as not ours): `seqpe report --out README.md` and `train
    --metrics notes.md` used to overwrite the user's file. A folder is refused too. `example`: a path
    to suggest in the fix. `older(dst)`: why a file of an earlier seqpe that lacks today's mark is refused
    (said instead of "not a ... seqpe wrote"), or None."""
    dst = Path(dst)
    if dst.is_dir():
        raise DataError(f"{dst} is a folder, not a {what}", f"pass a file path, e.g. {example}")
    if not dst.exists():
        _require_writable(dst)                          # its folder can be made and written (it was found at the end)
        return
    try:
        mine = bool(ours(dst))
    except Exception:                                   # unreadable, not UTF-8, not Parquet: not ours
        mine = False
    why = None
    if not mine and older is not None:
        try:
            why = older(dst)
        except Exception:
            why = None
    if why:
        raise DataError(f"{dst} exists and {why}", f"pass a new file path, e.g. {example}, or delete {dst} yourself")
    if not mine:
        raise DataError(f"{dst} exists and is not a {what} seqpe wrote; seqpe replaces only its own",
                        f"pass a new file path, e.g. {example} (or delete {dst} yourself if it is not needed)")


def special_kind(path: Path) -> str:
    """What an existing `path` that is not a regular file is, for a message ("a named pipe (FIFO)", "a
    folder", ...): a pipe passed as an input file used to hang the reader waiting for a writer."""
    mode = Path(path).stat().st_mode
    for test, what in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return what
    return "not a regular file"


def starts_with(path: Path, *heads: str) -> bool:
    """Whether the text file `path` begins with one of `heads` (UTF-8; a file claim_file checks)."""
    with open(path, "rb") as f:
        first = f.read(max(len(h.encode()) for h in heads)).decode("utf-8", errors="replace")
    return any(first.startswith(h) for h in heads)


def locked_output(path: str | Path, lock: Path = Path("dvc.lock")) -> bool:
    """Whether the project's dvc.lock (in the working folder) records `path`, a folder holding it, or an output
    inside it (a runs folder of recorded configurations) as a stage's output: a missing one is then a `dvc pull` away, which the "does not exist" errors say first (walk 41c #3:
    they offered only retraining or recomputing to a teammate who had not pulled)."""
    try:
        import yaml
        stages = (yaml.safe_load(lock.read_text()) or {}).get("stages") or {}
        here = Path(os.path.normpath(Path(path).absolute()))
        root = lock.absolute().parent
        for stage in stages.values():
            for out in (stage or {}).get("outs") or []:
                where = Path(os.path.normpath(root / str((out or {}).get("path", ""))))
                if here == where or where in here.parents or here in where.parents:   # dvc.yaml's train stage
                    return True                              # records data/runs/D/MODEL-ENC, inside data/runs/D
    except Exception:       # a lock seqpe cannot read (a YAML error, another shape): nothing to say from it
        return False
    return False


def pull_hint(path: str | Path) -> str:
    """"`dvc pull` it (dvc.lock records it), or " when `path` is a recorded output, else ""."""
    return "`dvc pull` it (dvc.lock records it), or " if locked_output(path) else ""


def missing(path: str | Path, default: str = "does not exist") -> str:
    """Why `path` cannot be opened, for a message: a link loop or a dangling link said as such (walk 41d #4: a
    loop given to --from or --params read "does not exist" / "not found"), else `default`."""
    path = Path(path)
    if path.is_symlink():
        try:
            os.stat(path)
        except OSError as e:
            import errno
            if e.errno == errno.ELOOP:
                return "is a symbolic link loop (it points, through links, at itself)"
            return f"is a link to {os.readlink(path)}, which does not exist"
    return default


def absent(folder: str | Path) -> str:
    """Why a folder that must exist is not there, for a message: "does not exist", or "is a file, not a folder"
    (`seqpe evaluate D runs.csv` said a file that was there did not exist)."""
    return "is a file, not a folder" if Path(folder).exists() else "does not exist"


def _first_steps(kind: str, dataset: str) -> str:
    """The commands that make a registered dataset's missing `kind` folder, from the first whose default output
    (data/raw/D, data/sessions/D) is not there: `seqpe train amazon_electronics` said "run `seqpe augment ...`
    (or `seqpe import`)", augment then named preprocess, and import refuses a registered name (walk 41i #3)."""
    chain = {"sessions": ("download", "preprocess"), "samples": ("download", "preprocess", "augment")}.get(kind)
    if chain is None:
        return f"run `seqpe {_MAKER.get(kind, 'train')} {dataset}` first (or `dvc repro`)"
    made_by = {"download": Path("data") / "raw" / dataset / "source.json",
               "preprocess": Path("data") / "sessions" / dataset / MANIFEST}
    steps = list(chain)
    for i in range(len(chain) - 2, -1, -1):          # after the last stage whose output is there (41j #7)
        if made_by[chain[i]].is_file():
            steps = list(chain[i + 1:])
            break
    return "run " + ", then ".join(f"`seqpe {step} {dataset}`" for step in steps) + " (or `dvc repro`)"


def require_kind(src: str | Path, kind: str, dataset: str, stage: str, usage: Optional[str] = None) -> dict:
    """The manifest of `src`, which `stage` reads as a `kind` ("sessions" | "samples") folder; a
    missing manifest or a folder of another kind is a DataError naming the folder to pass. `usage`: how the
    command takes the folder, `{owner}` the dataset it holds (default `seqpe STAGE {owner} SRC ...`; export's
    second argument is its output)."""
    from .datasets import all_datasets
    src = Path(src)
    maker = _MAKER[kind] if dataset in all_datasets() else "import"     # an imported name: preprocess knows none
    right = f"data/{kind}/{dataset} (written by `seqpe {maker} {dataset}{' ...' if maker == 'import' else ''}`)"
    put_back_noted(src)
    if not src.exists():
        if maker == "import" and ("/" in dataset or Path(dataset).exists() and not (Path("data") / kind / dataset)
                                  .is_dir()):                    # `seqpe train data/samples/x x`: swapped arguments
            from .datasets import refuse_path                     # (walk 38b D1); no dataset name has a slash
            refuse_path(dataset)
        if maker == "import" and not (Path("data") / kind / dataset).is_dir():
            # neither registered nor prepared here: a misspelt name (`digenetica`) was told to run
            # `seqpe augment digenetica`, which refuses the name in turn
            from .errors import did_you_mean
            close = did_you_mean(dataset, all_datasets())
            raise DataError(f"{kind} folder {src} does not exist, and '{dataset}' is no dataset seqpe registers"
                            + (f" (did you mean '{close}'?)" if close else ""),
                            f"pass the {kind} folder that `seqpe {_MAKER[kind]} DATASET` or `seqpe import {dataset} "
                            f"...` wrote, with its dataset's name (`seqpe datasets` lists both)")
        made = pull_hint(src) + (_first_steps(kind, dataset) if maker != "import" else
                                 f"run `seqpe import {dataset} FILES` first (or `dvc repro`, for an imports: entry)")
        raise DataError(f"{kind} folder {src} does not exist",
                        made if src == Path("data") / kind / dataset else f"{made}, or pass {right}")
    if src.is_file():                   # its manifest.json, a shard: "no manifest.json in .../manifest.json" (38b D2)
        raise DataError(f"{src} is a file, not a {kind} folder", _near_miss(src) or f"pass {right}")
    if not (src / MANIFEST).is_file():
        found, _ = _owner(src) if src.is_dir() else (None, None)
        if found is None and src.is_dir() and any(src.glob("*/seed-*/run.json")):
            found = "run"
        if found is not None:
            raise DataError(f"{src} holds {_WHAT[found]}, but `seqpe {stage}` reads {kind}", f"pass {right}")
        raise DataError(f"no {MANIFEST} in {src}: it is not a {kind} folder seqpe prepared",
                        _near_miss(src) or f"run `seqpe {_MAKER[kind]} {dataset}` first (or `seqpe import`), or pass {right}")
    manifest = read_json(src / MANIFEST)
    found = manifest_kind(manifest) if isinstance(manifest, dict) else None
    if found != kind:
        raise DataError(f"{src} holds {found or 'an unknown kind of data'}, but `seqpe {stage}` reads {kind}",
                        f"pass {right}")
    usage = usage or f"`seqpe {stage} {{owner}} {src} ...`"
    other = f"pass {right}" if src != Path("data") / kind / dataset else \
        f"delete {src} and make {dataset}'s own with `seqpe {maker} {dataset}{' ...' if maker == 'import' else ''}`"
    require_dataset(src, manifest, dataset, f"name the dataset it holds ({usage}), or {other}")
    return manifest


def require_dataset(src: str | Path, manifest: dict, dataset: str, fix: str) -> None:
    """A DataError when the prepared folder `src` (its `manifest`) holds another dataset than the one
    the command names: the name picks the protocol, the preset's dataset variant and the label every
    output carries. `{owner}` in `fix` becomes the dataset the folder holds."""
    owner = manifest.get("dataset")
    if isinstance(owner, str) and owner != dataset:
        raise DataError(f"{src} holds {owner}'s {manifest_kind(manifest) or 'data'}, but the command names "
                        f"'{dataset}'", fix.replace("{owner}", owner))


def stale_samples(samples_dir: str | Path, manifest: dict) -> Optional[str]:
    """A sentence when the sessions folder beside a samples folder (data/samples/X beside data/sessions/X) is not
    the one the samples were made from: its manifest.json differs from the sha256 the samples recorded (preprocess
    or import re-run without augment, or an import stopped between its two folders). None when they match, when
    there is no such sibling, or for samples that recorded none. Training on the samples is still consistent in
    itself (their item ids are their own), so callers note it rather than refuse."""
    samples_dir = Path(samples_dir)
    made_from = manifest.get("sessions_manifest")
    if samples_dir.parent.name != "samples" or not isinstance(made_from, str):
        return None
    sessions = samples_dir.parent.parent / "sessions" / samples_dir.name
    try:
        if not (sessions / MANIFEST).is_file() or sha256_file(sessions / MANIFEST) == made_from:
            return None
    except OSError:
        return None
    name = manifest.get("dataset") if isinstance(manifest.get("dataset"), str) else samples_dir.name
    again = f"`seqpe import {name} ...`" if manifest.get("stage") == "import" else f"`seqpe augment {name}`"
    return (f"{samples_dir} was not made from the sessions {sessions} holds now (their manifest.json differs from "
            f"the one the samples recorded: re-made since, or the samples came from another folder); rerun {again} "
            "to use the sessions there")


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """A Ctrl-C (SIGINT) or SIGTERM during the block takes effect when the block ends: files that belong
    together (evaluate's reports), each written atomically, are then never left half old, half new.
    Only in the main thread, and only for a signal that has a Python handler (the CLI's)."""
    import signal
    import threading
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
    previous = {sig: handler for sig, handler in previous.items() if callable(handler)}
    if not previous:
        yield
        return
    caught: list = []
    for sig in previous:
        signal.signal(sig, lambda signum, frame: caught.append((signum, frame)))
    done = False
    try:
        yield
        done = True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if caught:
            INTERRUPT.wrote = done      # the CLI's note then says the new output is complete, not "unchanged"
            signum, frame = caught[0]
            previous[signum](signum, frame)


class _Interrupt:
    wrote = False                       # a Ctrl-C held back by deferred_interrupt until its block had written
    pending = 0                         # the signal the CLI's handler raised for (0: none); main() clears it


INTERRUPT = _Interrupt()


def check_interrupt() -> None:
    """Raise again a Ctrl-C or SIGTERM whose exception Python dropped. The CLI's handler raises where the main
    thread happens to be; in a finaliser or a weakref or garbage-collector callback Python prints "Exception
    ignored" and goes on. `seqpe train` then ran for minutes after a SIGTERM (a scheduler's time limit) until the
    job was killed. Long loops (every training batch, every epoch) call this; a signal that went through as an
    exception is never seen here, since the loop is left. Only where the handler for it is still a Python one
    (the CLI's, or deferred_interrupt's, which holds it back as it would any other)."""
    import signal
    sig = INTERRUPT.pending
    if sig and callable(signal.getsignal(sig)):
        signal.raise_signal(sig)


def write_bytes(dst: str | Path, data: bytes) -> None:
    with atomic_path(dst) as tmp:
        tmp.write_bytes(data)


def dumps_json(obj: Any) -> str:
    """Canonical JSON (sorted keys, fixed indent, trailing newline): same object, same bytes."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_json(dst: str | Path, obj: Any) -> None:
    write_bytes(dst, dumps_json(obj).encode("utf-8"))


def read_json(path: str | Path) -> Any:
    """A JSON file seqpe wrote (manifest.json, source.json, run.json); damage is a DataError."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path} is not valid JSON ({e.__class__.__name__}: {e})",
                        "it is damaged: re-run the stage that writes it (or `dvc checkout` it)") from None


def write_parquet(dst: str | Path, df: pl.DataFrame, metadata: Optional[dict[str, str]] = None) -> None:
    """Write one Parquet file atomically with the fixed options (byte-identical output); `metadata`: the file's
    key-value metadata (a writer's mark, e.g. recommend's top-K files)."""
    with atomic_path(dst) as tmp:
        df.write_parquet(tmp, **_PARQUET, **({"metadata": metadata} if metadata else {}))


def _compact(df: pl.DataFrame) -> pl.DataFrame:
    """`df` copied into one chunk of fresh buffers. Polars' Parquet writer lays out pages from the
    buffers it is given: a frame in several chunks, or a slice of a larger frame (whose list
    column still holds the whole frame's values), gives other bytes than the same rows built
    anew. Only a gathered copy is canonical (`rechunk` keeps a one-chunk slice's buffers)."""
    return df.select(pl.all().gather(pl.int_range(pl.len())))


def write_split(root: str | Path, split: str, df: pl.DataFrame, rows_per_shard: int = SHARD_ROWS) -> list[dict]:
    """Write `df` as `<root>/<split>/part-NNNNN.parquet` shards; return their manifest entries.

    `root` is normally the temporary folder of an `atomic_dir` block. Always at least
    one shard (possibly empty) so readers can rely on the schema. Shards are written from
    compact copies (`_compact`), so the same rows give the same bytes however `df` was built.
    """
    root = Path(root)
    (root / split).mkdir(parents=True, exist_ok=True)
    entries = []
    n = df.height
    starts = range(0, max(n, 1), rows_per_shard)
    for i, start in enumerate(starts):
        part = _compact(df.slice(start, rows_per_shard))
        rel = f"{split}/part-{i:05d}.parquet"
        write_parquet(root / rel, part)
        entries.append({"path": rel, "rows": part.height, "sha256": sha256_file(root / rel)})
    return entries


def sink_split(root: str | Path, split: str, lf: pl.LazyFrame, rows_per_shard: int = SHARD_ROWS) -> list[dict]:
    """Stream a LazyFrame into `<root>/<split>/part-NNNNN.parquet` shards in bounded memory.

    The query runs once on the streaming engine into a staging file (row order kept), which
    is then cut into shards of `rows_per_shard` rows written like `write_split` writes them
    (same options, so the same rows give the same bytes). The staging file is removed.
    """
    root = Path(root)
    (root / split).mkdir(parents=True, exist_ok=True)
    stage = root / f".{split}.staging.parquet"
    try:
        try:
            lf.sink_parquet(stage, compression="zstd", compression_level=1, maintain_order=True)
        except (pl.exceptions.ComputeError, pl.exceptions.InvalidOperationError) as e:
            if as_os_error(e) is not None:      # the disk, not the raw files: atomic_dir names the folder
                raise
            raise DataError(f"the {split} split could not be built from the raw files ({str(e).splitlines()[0]})",
                            "check the raw files are complete and undamaged (re-download them)") from None
        n = pl.scan_parquet(stage, glob=False).select(pl.len()).collect().item()
        entries = []
        for i, start in enumerate(range(0, max(n, 1), rows_per_shard)):
            part = _compact(pl.scan_parquet(stage, glob=False).slice(start, rows_per_shard).collect())
            rel = f"{split}/part-{i:05d}.parquet"
            write_parquet(root / rel, part)
            entries.append({"path": rel, "rows": part.height, "sha256": sha256_file(root / rel)})
        return entries
    finally:
        stage.unlink(missing_ok=True)


def shard_entry(root: str | Path, rel: str) -> dict:
    """Manifest entry for an already written file under `root`."""
    path = Path(root) / rel
    return {"path": rel, "rows": pl.scan_parquet(path, glob=False).select(pl.len()).collect().item(),
            "sha256": sha256_file(path)}


def read_manifest(root: str | Path, stage_hint: str = "preprocess") -> dict:
    path = Path(root) / MANIFEST
    if Path(root).exists() and not Path(root).is_dir():     # a file where a folder was meant: say so, not "prepare it"
        raise DataError(f"{root} is a file, not a folder of prepared sessions or samples",
                        "pass a sessions or samples folder, e.g. data/sessions/DATASET or data/samples/DATASET")
    if not path.is_file():
        held = _held(Path(root))
        if held is not None:                # raw data, a run, a runs folder: say what it is, not "prepare it"
            raise DataError(f"{root} holds {held}, not prepared sessions or samples (no {MANIFEST})",
                            "pass a sessions or samples folder, e.g. data/sessions/DATASET or data/samples/DATASET")
        raise DataError(f"no {MANIFEST} in {root}: that folder has not been prepared",
                        _near_miss(Path(root)) or f"run `seqpe {stage_hint}` for this dataset first")
    return read_json(path)


def _held(folder: Path) -> Optional[str]:
    """What seqpe output other than a manifest folder `folder` holds (raw data, a run, a report, a runs
    folder), in words, or None."""
    if not folder.is_dir():
        return None
    kind, _ = _owner(folder)
    if kind is not None:
        return _a_what(kind)
    if any(folder.glob("*/seed-*/run.json")):
        return "training runs (MODEL-ENCODING/seed-N/run.json)"
    return None


def _near_miss(root: Path) -> str | None:
    """For a folder without a manifest, a prepared folder one level up (a split folder was passed)
    or one level down (the folder of all datasets was passed): the fix naming it, else None."""
    def prepared(folder: Path) -> bool:
        try:
            return (folder / MANIFEST).is_file()
        except OSError:  # an unreadable folder is simply not the one to suggest
            return False
    if prepared(root.parent):
        return (f"pass the prepared folder {root.parent} itself (its {root.name}{'' if root.is_file() else '/'} is "
                "one part of it)")
    try:
        inside = sorted(d.name for d in root.iterdir() if prepared(d)) if root.is_dir() else []
    except OSError:
        inside = []
    if inside:
        shown = ", ".join(str(root / name) for name in inside[:3]) + (", ..." if len(inside) > 3 else "")
        return f"pass one dataset's folder inside it: {shown}"
    return None


def scan_split(root: str | Path, split: str) -> pl.LazyFrame:
    """Lazy scan of one split's shards."""
    d = Path(root) / split
    files = sorted(d.glob("part-*.parquet"))
    if not files:
        raise DataError(f"no shards in {d}", "re-run the stage that writes this folder")
    return pl.scan_parquet(files, glob=False)


def read_split(root: str | Path, split: str) -> pl.DataFrame:
    return scan_split(root, split).collect()


def file_mismatch(path: Path, entry: dict) -> Optional[str]:
    """Why the file at `path` is not the one a record ({"bytes", "sha256"}, as source.json keeps them)
    describes, or None when it is: the size is compared first (no read), then the sha256."""
    size = path.stat().st_size
    if isinstance(entry.get("bytes"), int) and size != entry["bytes"]:
        return f"has {size:,} bytes, but source.json records {entry['bytes']:,}"
    if isinstance(entry.get("sha256"), str) and sha256_file(path) != entry["sha256"]:
        return "does not match the sha256 source.json records"
    return None


def verify_shards(root: str | Path, manifest: dict | None = None, only: tuple[str, ...] = ()) -> None:
    """Check every shard listed in the manifest (or only those whose path is in `only`) against its sha256."""
    manifest = manifest or read_manifest(root)
    for entry in manifest.get("shards", []):
        if only and entry.get("path") not in only:
            continue
        path = Path(root) / entry["path"]
        if not path.is_file() or sha256_file(path) != entry["sha256"]:
            raise DataError(f"shard {path} is missing or does not match its manifest sha256",
                            "re-run the stage that wrote it (or `dvc pull`)")
