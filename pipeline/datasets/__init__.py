"""Dataset registry: name -> DatasetSpec (raw source, protocol, reader).

Several datasets can share one raw source (yoochoose_1_64, yoochoose_1_4 and
yoochoose all read `yoochoose-clicks.dat`). Each family lives in its own module
and contributes entries to `DATASETS`; `get(name)` fails listing the known names.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from ..errors import unknown


@dataclass(frozen=True)
class SourceSpec:
    """Where a raw source comes from and how to check it."""
    name: str                          # e.g. "diginetica"
    filename: str                      # file name of the archive / file at the source
    archive: str                       # zip | 7z | gz | none | generated
    files: tuple[str, ...]             # files the reader needs after unpacking
    url: Optional[str] = None          # None when the host needs a login (see `manual`)
    mirrors: tuple[str, ...] = ()      # alternative full URLs, tried after the user mirror and before `url`
    sha256: Optional[str] = None       # of the archive as downloaded, when known
    md5: Optional[str] = None          # published md5 (only where that is all there is)
    size: Optional[int] = None         # bytes of the archive, when known
    manual: Optional[str] = None       # how to get it by hand when there is no public URL ({dataset}: the name asked)
    homepage: Optional[str] = None
    file_md5: dict = field(default_factory=dict)   # published md5 of unpacked members
    # other single files the reader accepts in place of `files` (Amazon: the ratings-only CSV);
    # `download --from` one of them installs it under its own name (no checksum is published)
    alternates: tuple[str, ...] = ()
    generate: Optional[Callable] = None  # archive == "generated": generate(dst_file: Path, section) writes the archive,
    generate_params: str = "sample"      # section = the params.preprocess subsection named here (sample | sample_ctr)


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    source: SourceSpec
    protocol: str                      # srgnn | leave_one_out | ctr
    description: str
    reader: Callable                   # (raw_dir: Path) -> polars.LazyFrame in the protocol's input schema
    options: dict = field(default_factory=dict)   # protocol constants (split_days, fraction, ...)
    paper_size: str = ""               # e.g. "1,235,380 clicks, 310,324 sessions"
    # A dataset whose published files are already filtered, numbered and split by their authors (CARCA's)
    # builds its ProtocolResult itself: build(spec, raw_dir, params) -> ProtocolResult, following `protocol`'s
    # output contract (splits, augment modes); None = the protocol module builds it from `reader`.
    build: Optional[Callable] = None
    # locate(raw_dir) -> the first line of the raw file that does not parse, said in words, or None: called once a
    # read has failed, so that the error names the line (Polars' names only a column)
    locate: Optional[Callable] = None


DATASETS: dict[str, DatasetSpec] = {}
SOURCES: dict[str, SourceSpec] = {}


def register(spec: DatasetSpec) -> DatasetSpec:
    DATASETS[spec.name] = spec
    SOURCES.setdefault(spec.source.name, spec.source)
    return spec


def get(name: str) -> DatasetSpec:
    _load_all()
    if name not in DATASETS:
        refuse_path(name)
        raise unknown("dataset", name, DATASETS)
    return DATASETS[name]


def refuse_path(name: str) -> None:
    """A folder or file given where a dataset's name goes (`seqpe stats data/samples/sample`): say that the
    name comes first, with the one that folder's record names, instead of "unknown dataset 'data/...'"."""
    path = Path(name)
    if "/" not in name and not path.exists():
        return
    from ..errors import UnknownNameError
    owner = None
    for record in ("manifest.json", "source.json", "run.json"):
        try:
            owner = json.loads((path / record).read_text(encoding="utf-8")).get("dataset")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(owner, str) and owner:
            break
        owner = None
    what = "a folder" if path.is_dir() else "a file" if path.exists() else "a path"
    raise UnknownNameError(f"'{name}' is {what}, not a dataset name (the first argument names the dataset)",
                           f"give the dataset first, then the folder: {owner or 'DATASET'} {name}")


_STAGES = (("raw", None), ("sessions", "seqpe preprocess {name}"), ("samples", "seqpe augment {name}"),
           ("runs", "seqpe train {name}"))      # each folder and the command that makes it from the one before


def _refuse_missing_stage(name: str, folder: Path) -> None:
    """A DataError when `name` is prepared in an earlier stage's folder next to the missing `folder`
    (data/sessions/NAME beside no data/samples/NAME): the name is known, this command's input is what is missing
    (walk 35b: "unknown dataset 'digi'" for an imported dataset whose samples folder was gone, while `seqpe
    datasets` listed it)."""
    kinds = [kind for kind, _ in _STAGES]
    if "/" in name or name.startswith(".") or folder.parent.name not in kinds:
        return
    root, at = folder.parent.parent, kinds.index(folder.parent.name)
    from ..errors import DataError
    if at == 0 and _imported(root / "sessions" / name):
        raise DataError(f"'{name}' was imported (`seqpe import`, which writes {root / 'sessions' / name} and its "
                        "samples): it has no raw data to download or preprocess",
                        f"go on with `seqpe train {name}`, or re-import it with `seqpe import {name} SRC`")
    for i in range(at - 1, -1, -1):
        there = root / kinds[i] / name
        if not there.is_dir():
            continue
        owner = _owner(there)
        if owner is not None and owner != name:            # a copied or renamed folder (walk 35c #8: the hint to
            raise DataError(f"{there} holds {owner}'s {kinds[i]}, not those of '{name}' (a copied or renamed "
                            f"folder), and "
                            f"{folder} does not exist", f"name the dataset it holds ('{owner}', whose own "
                            f"folder is data/{kinds[i]}/{owner}); to have '{name}', delete {there} and prepare "
                            f"'{name}' itself (e.g. `seqpe import {name} SRC --format FORMAT`)")   # augment it was
                                                                                           # refused by augment
        steps = [f"`{make.format(name=name)}`" for _, make in _STAGES[i + 1:at + 1]]
        if kinds[i] == "sessions" and _imported(there):          # import writes the samples with the sessions
            steps[0] = f"`seqpe import {name} SRC --format FORMAT` again (it writes the sessions and samples together)"
        has = "raw data" if kinds[i] == "raw" else kinds[i]
        raise DataError(f"{folder.parent.name} folder {folder} does not exist, though {there} does: '{name}' has "
                        f"{has} but no {folder.parent.name} yet (or that folder was deleted)",
                        "run " + ", then ".join(steps))


def _owner(folder: Path) -> Optional[str]:
    """The dataset a prepared folder's manifest.json (or a raw folder's source.json) names; None when unreadable."""
    for name in ("manifest.json", "source.json"):
        try:
            owner = json.loads((folder / name).read_text(encoding="utf-8")).get("dataset")
        except (OSError, ValueError, AttributeError):
            continue
        return owner if isinstance(owner, str) else None
    return None


def _imported(sessions: Path) -> bool:
    try:
        return json.loads((sessions / "manifest.json").read_text(encoding="utf-8")).get("stage") == "import"
    except (OSError, ValueError, AttributeError):
        return False


def check_name(name: str, folder: Path) -> None:
    """A dataset name given with its default folder `folder` (data/<kind>/<name>) must be a registered
    dataset or one prepared there (an imported name); else it is an unknown dataset, with a
    did-you-mean over the registered names and the folders prepared next to `folder`."""
    _load_all()
    folder = Path(folder)
    if "/" not in name and not name.startswith("."):      # a dead writer's previous output beside it (walk 36c)
        from ..io import put_back_noted
        put_back_noted(folder)
    if name in DATASETS or ("/" not in name and folder.exists()):   # data/samples/ + an absolute path: that path
        return
    refuse_path(name)
    _refuse_missing_stage(name, folder)
    parent = folder.parent
    prepared = {p.name for p in parent.iterdir() if p.is_dir() and not p.name.startswith(".")} \
        if parent.is_dir() else set()
    raise unknown("dataset", name, set(DATASETS) | prepared)


def all_datasets() -> dict[str, DatasetSpec]:
    _load_all()
    return dict(DATASETS)


_LOADED = False


def _load_all() -> None:
    """Import every family module once (each registers its datasets)."""
    global _LOADED
    if _LOADED:
        return
    import importlib
    import pkgutil
    for mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        importlib.import_module(f"{__name__}.{mod}")
    _LOADED = True
