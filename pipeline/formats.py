"""Import and export of the prepared formats other code bases read and write.

srgnn   SR-GNN-family pickles in one folder: `all_train_seq.txt` (train sessions),
        `test.txt` (prefix-augmented test samples), optional `train.txt` (augmented train).
        Read only through `pipeline.unpickle` (no globals, lists/tuples/ints only);
        written with pickle protocol 3, the default of the Python 3.6 that SR-GNN's
        `datasets/preprocess.py` ran on, which reproduces the published files byte for byte.
sasrec  SASRec / S3-Rec text (leave-one-out protocol, REFERENCE.md §3), in either layout,
        told apart by content: S3-Rec's one line per user, `user item item ...` in time order;
        or Kang & McAuley's (SASRec's `data/*.txt`, also pmixer/SASRec.pytorch's): one
        interaction `user item` per line, each user's lines in time order (their
        `data_partition` appends in file order). A file whose every line is `user item` and
        that repeats a user is the second; one that never repeats a user reads the same both
        ways; a file that repeats a user on longer lines mixes them and is refused.

`import_dataset` writes a seqpe sessions folder (so `seqpe augment` works on it) and a
samples folder (so `seqpe train` works without `augment`), both with stage "import"
manifests; its samples are built by the augment stage's own functions, so they are
byte-identical to `seqpe augment` of the imported sessions. Decisions:

- srgnn: train sessions are all_train_seq.txt numbered 1..T, and valid is carved from its
  most recent ones exactly as `pipeline.protocols.srgnn` does (`valid_count`); a valid_fraction
  that carves none (0, or below 1/T) is refused, as `seqpe train` needs valid. test.txt is
  already augmented; its sessions are rebuilt (a session starts after each prefix of length
  1; exact whenever the file was written by SR-GNN's `process_seqs`), else every sample
  becomes a session prefix + [target] under augment mode "last". Either way the stored
  test samples equal test.txt, and the manifest records that test came as samples.
- sasrec: session_id is the file's user id, rows in file order (Kang & McAuley's layout:
  in the order of each user's first line); users with fewer than 3 items cannot give
  train, valid and test and are dropped and counted (as the leave-one-out protocol does;
  S3-Rec's files are 5-core, so none are).
- both: item ids are kept as they are and n_items is the largest one (exported files stay byte-identical),
  so a file whose largest id is far above its distinct ids (> 2 x distinct + SPARSE_IDS) is refused,
  asking for items renumbered 1..N (`_check_dense_ids`).

kuaivideo_x1 / amazonelectronics_x1  CTR files in the layout of the BARS benchmark of that name
        (reczoo's train.csv and test.csv, columns as `pipeline.datasets.ctr` reads them): one's own
        logs or a subset, under a new name. They go through the same CTR protocol, options (valid
        rule, vocabulary) and augment stage as `seqpe preprocess kuaivideo` / `amazon_electronics`,
        so the published files imported this way give the samples those stages give (tested). Only
        the published md5 check is not made, which is why a registered name is refused: data named
        `kuaivideo` is the published data, downloaded and checked by `seqpe download`.

`export_dataset` turns a sessions folder back into SR-GNN pickles (train.txt from train +
valid = the protocol's train set) or S3-Rec text (every user's full sequence: its test row, or the
train row of a user kept for training only, as CARCA keeps users with < 3 interactions), built
in memory and swapped in as one folder, with export.json (the files' sha256); it replaces only an
earlier export whose files are unchanged, never a folder of other or edited files.
"""
from __future__ import annotations

import math
import pickle
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Optional

import polars as pl

from . import sniff, unpickle
from .augment import last_samples, prefix_samples, shifted_samples
from .errors import DataError, ParamsError, unknown
from .io import (MANIFEST, SPLITS, atomic_dir, atomic_dirs, claim_dir, claims_released, read_manifest, read_split,
                 refuse_nested, require_kind, sha256_file, shard_entry, special_kind, verify_shards, write_bytes,
                 write_json, write_parquet, write_split)
from .params import IMPORT_FORMATS, IMPORT_NAME, Params, to_dict
from .protocols import AUGMENT_READS, read_keys
from .protocols.srgnn import valid_count

FORMATS = tuple(IMPORT_FORMATS)
EXPORT_FORMATS = ("srgnn", "sasrec")   # the CTR formats import (user, item, label) rows: nothing exports them
PICKLE_PROTOCOL = 3          # what SR-GNN's preprocess.py wrote (Python 3.6 default): same bytes
SRGNN_FILES = ("all_train_seq.txt", "test.txt", "train.txt")
_NO_CLOBBER = "pick a new or empty folder (export replaces the whole folder)"
SPARSE_IDS = 100_000         # unused ids an import may carry beyond 2 x its distinct ones (_check_dense_ids)


@dataclass
class Imported:
    """Everything an importer found, before anything is written."""
    protocol: str
    sessions: dict[str, pl.DataFrame]     # split -> session_id, items
    samples: dict[str, pl.DataFrame]      # split -> session_id, prefix, target
    items: pl.DataFrame                   # item_id, raw_id, count
    n_items: int
    augment: dict[str, str]
    steps: list[dict]
    source: dict[str, str]                # file name -> sha256
    params: dict
    summary: dict
    max_len: int                          # prefix cut applied to the samples (0 = whole prefixes)
    info: dict = field(default_factory=dict)  # the manifest's "protocol_info"


# --------------------------------------------------------------------------- import

def _raw_files_of(folder: Path) -> Optional[tuple[str, list[str]]]:
    """(dataset, its raw files found) when `folder` holds two or more of a registered download's own files
    (MovieLens' users.dat and movies.dat), the dataset with the most found; else None."""
    from .datasets import all_datasets
    best = None
    for name, spec in sorted(all_datasets().items()):
        if spec.source.archive == "generated":
            continue
        found = [f for f in spec.source.files if (folder / Path(f).name).is_file()]
        if len(found) >= 2 and (best is None or len(found) > len(best[1])):
            best = (name, found)
    return best


def detect_format(src: str | Path) -> str:
    """What `seqpe import` without --format reads `src` as, from what it is: a folder is SR-GNN's
    (its pickles) or, holding train.csv, BARS CTR files (told apart by their header), a text file
    SASRec's / S3-Rec's; anything else is an error naming what it is."""
    src = Path(src)
    csvs = ([src / "train.csv"] if (src / "train.csv").is_file() else sorted(src.glob("*/train.csv"))) \
        if src.is_dir() else []                                        # BARS' zip holds a folder
    if len(csvs) == 1:
        return _ctr_format(csvs[0])
    packed = sorted(p.name for p in src.glob("train.csv.*")) if src.is_dir() and not csvs else []
    if packed:                      # BARS CSVs compressed one by one: it was "has no all_train_seq.txt"
        raise DataError(f"{src} holds {packed[0]}, a compressed train.csv", "unpack train.csv and test.csv in "
                        f"that folder first (e.g. `gunzip {src / packed[0]}`), then import it")
    if src.is_dir():
        from .io import _owner
        kind, owner = _owner(src)         # (import_dataset has refused seqpe's other folders before)
        if kind == "raw":                 # a download of a registered dataset: its own stage reads it
            raise DataError(f"{src} holds {owner}'s raw data (source.json), which no import format reads",
                            f"run `seqpe preprocess {owner} {src}`")
        texts = [] if any((src / f).exists() for f in ("all_train_seq.txt", "train.txt", "test.txt")) else \
            [f for f in sorted(src.iterdir()) if f.is_file() and sniff.describe(sniff.head(f, 4096)) == "text"
             and not sniff.starts_as_json(f)]   # a manifest.json beside the data
        raw = _raw_files_of(src) if texts else None
        if raw is not None:    # e.g. MovieLens' ml-1m/ folder: its download reads it
            name, found = raw
            raise DataError(f"{src} holds {name}'s raw files ({', '.join(found)}), which no import format reads",
                            f"run `seqpe download {name} --from {src}`, then `seqpe preprocess {name}`")
        seqs = [f for f in texts if sniff.sasrec_text(f)]
        if texts:   # e.g. S3-Rec's data/ folder, passed where its Beauty.txt was meant
            raise DataError(f"{src} is a folder without SR-GNN's all_train_seq.txt, but it holds text files"
                            + (f", {len(seqs)} of them SASRec / S3-Rec text" if seqs else
                               ", none of them SASRec / S3-Rec text (lines of whole numbers)"),
                            f"pass the SASRec / S3-Rec text file itself, e.g. {seqs[0]}" if seqs else
                            "pass SR-GNN's folder (all_train_seq.txt, train.txt, test.txt) or a SASRec / S3-Rec "
                            "text file")
        return "srgnn"
    if not src.exists():
        raise DataError(f"{src} does not exist", "pass the SR-GNN folder or the SASRec / S3-Rec text file")
    if not src.is_file():     # checked before reading: reading a FIFO waits for a writer forever
        raise DataError(f"{src} is {special_kind(src)}, not a file or a folder",
                        "pass the SR-GNN folder or the SASRec / S3-Rec text file itself (seqpe reads regular files)")
    _require_text_file(src)
    return "sasrec"


_FOLLOW = {"sessions": "augment", "samples": "train"}    # what reads a seqpe folder of that kind


def _refuse_seqpe_folder(src: Path) -> None:
    """A folder seqpe wrote (sessions, samples, a run, a report) is no file of a paper's code: `seqpe
    import x13 data/sessions/sample` suggested its manifest.json as the SASRec text file."""
    from .io import _WHAT, _owner
    kind, owner = _owner(src)
    if kind in (None, "raw"):          # a download's raw folder holds the files as published (BARS' CSVs import)
        return
    step, whose = _FOLLOW.get(kind), f"{owner}'s " if owner else ""
    raise DataError(f"{src} holds {whose}{_WHAT[kind]}, written by seqpe: nothing to "
                    "import", (f"use it as it is: `seqpe {step} {owner or 'DATASET'} {src}`" if step else
                           "pass an SR-GNN folder, a SASRec / S3-Rec text file or a folder of BARS CSVs"))


def _require_text_file(src: Path) -> None:
    """A DataError naming what `src` is unless it is text (or empty: the reader says so)."""
    if src.is_file() and sniff.starts_as_json(src):
        raise DataError(f"{src} is JSON, not SASRec / S3-Rec text" + (" (a seqpe folder's record)" if src.name in
                        (MANIFEST, "source.json", "run.json", "summary.json") else ""),
                        "pass the `user item item ...` (or `user item`) text file, or an SR-GNN folder")
    found = sniff.describe(sniff.head(src))
    if found == "a Python pickle":
        raw = _raw_files_of(src.resolve().parent)
        if raw is not None:     # one of CARCA's feature / context pickles (walk 32a: the fix pointed at import)
            raise DataError(f"{src} is a Python pickle, one of {raw[0]}'s raw files, not SASRec / S3-Rec text",
                            f"`seqpe download {raw[0]} --from {src.resolve().parent}` reads that folder")
        raise DataError(f"{src} is a Python pickle (a file of an SR-GNN folder), not SASRec / S3-Rec text",
                        f"import the folder that holds it with all_train_seq.txt and test.txt ({src.resolve().parent})")
    if found not in ("text", "empty"):
        raise DataError(f"{src} is {found}, not SASRec / S3-Rec text",
                        "pass the `user item item ...` (or `user item`) text file, or an SR-GNN folder")


CTR_FORMATS = {"kuaivideo_x1": "kuaivideo", "amazonelectronics_x1": "amazon_electronics"}   # -> the dataset


def _ctr_format(path: Path) -> str:
    """The BARS format whose columns `path`'s header has, or a DataError naming both layouts."""
    from .datasets.ctr import COLUMNS, header
    cols = header(path, own=True)
    for fmt, name in CTR_FORMATS.items():
        if sorted(cols) == sorted(COLUMNS[name]):
            return fmt
    raise DataError(f"{path} has the columns {','.join(cols)[:200]}, neither BARS CTR layout",
                    "give train.csv and test.csv with KuaiVideo_x1's columns (" + ",".join(COLUMNS["kuaivideo"])
                    + ") or AmazonElectronics_x1's (" + ",".join(COLUMNS["amazon_electronics"]) + ")")


@claims_released()
def import_dataset(dataset: str, src: str | Path, fmt: str, sessions_dst: str | Path,
                   samples_dst: str | Path, params: Params) -> dict:
    """Import `src` (SR-GNN folder, S3-Rec text file, BARS CTR folder) as seqpe sessions and samples;
    `fmt` "auto" tells them apart (detect_format)."""
    if Path(src).is_dir():
        _refuse_seqpe_folder(Path(src))
    if fmt == "auto":
        fmt = detect_format(src)
    if fmt not in FORMATS:
        raise unknown("format", fmt, ("auto",) + FORMATS)
    check_import_name(dataset, fmt)
    src, sessions_dst, samples_dst = Path(src), Path(sessions_dst), Path(samples_dst)
    _refuse_nested_outputs(dataset, sessions_dst, samples_dst)
    for kind, dst in (("sessions", sessions_dst), ("samples", samples_dst)):     # walk 35b: written among the
        if fmt != "sasrec" and src.is_dir() and src.resolve() in (dst.resolve(), *dst.resolve().parents):   # user's
            raise DataError(f"the {kind} folder {dst} is inside the folder being imported, {src}: the import would "
                            "write among the files it reads",                                           # files
                            f"pass --sessions and --samples folders outside it, or run the command from a folder "
                            f"outside it (the defaults, data/sessions/{dataset} and data/samples/{dataset}, are under "
                            f"the working folder)")
    claim_dir(sessions_dst, dataset, "sessions", command="import")
    claim_dir(samples_dst, dataset, "samples", command="import")
    if fmt in CTR_FORMATS:
        return _import_ctr(dataset, src, fmt, sessions_dst, samples_dst, params)
    imp = _import_srgnn(src, params) if fmt == "srgnn" else _import_sasrec(src, params)
    _write(dataset, imp, sessions_dst, samples_dst, params)
    return {**imp.summary, "sessions folder": str(sessions_dst), "samples folder": str(samples_dst)}


def _refuse_nested_outputs(dataset: str, sessions_dst: Path, samples_dst: Path) -> None:
    """Each output folder is swapped in whole (io.atomic_dir), so one inside the other would be deleted
    by the other's swap (`--sessions D/x --samples D/x/a` exited 0 without D/x/a; the reverse failed
    half-way with the samples written): refused before anything is written."""
    if sessions_dst.resolve() == samples_dst.resolve():
        raise DataError(f"sessions and samples would both go to {sessions_dst}",
                        "pass different --sessions and --samples folders")
    folders = {"sessions": sessions_dst, "samples": samples_dst}
    for inner, outer in (("samples", "sessions"), ("sessions", "samples")):
        if folders[outer].resolve() in folders[inner].resolve().parents:
            raise DataError(f"the {inner} folder {folders[inner]} is inside the {outer} folder {folders[outer]}: "
                            "each is replaced whole, so writing one would delete the other",
                            f"pass --sessions and --samples folders side by side, e.g. data/sessions/{dataset} "
                            f"and data/samples/{dataset}")


def check_import_name(dataset: str, fmt: str) -> None:
    """The name labels every output and names the default data/ folders, so it must be folder-safe
    (`../x` would write data/x); a registered name may take an import only of its own protocol
    (S3-Rec's Beauty as `beauty`; not leave-one-out files as `diginetica`, whose protocol, presets
    and reports are srgnn's)."""
    from .datasets import all_datasets
    if not IMPORT_NAME.fullmatch(dataset):
        raise DataError(f"'{dataset}' is not a usable dataset name",
                        "use lower-case letters, digits, '_' and '-' (it names data/ folders)")
    spec = all_datasets().get(dataset)
    if spec is not None and fmt in CTR_FORMATS and spec.source.archive == "generated":
        raise DataError(f"'{dataset}' is a registered dataset that seqpe generates (`seqpe download {dataset}`), "
                        f"and --format {fmt} files are imported under a name of their own",
                        f"import under another name, e.g. {dataset}_own")
    if spec is not None and fmt in CTR_FORMATS:
        raise DataError(f"'{dataset}' is a registered dataset: its published files are fetched and checked (md5) "
                        f"by `seqpe download {dataset}`, and --format {fmt} files are imported under a name of "
                        "their own", f"import under another name, e.g. {dataset}_own (the published zip or its "
                                     f"files: `seqpe download {dataset} --from PATH`)")
    if spec is not None and spec.build is not None:     # CARCA's files: attributes, context and their own split
        raise DataError(f"'{dataset}' is a registered dataset built from its authors' files (item attributes, "
                        f"interaction context, and their split, which trains on users with fewer than 3 items), "
                        f"and --format {fmt} files are imported under a name of their own",
                        f"`seqpe download {dataset} --from PATH` reads those files; or import under another name, "
                        f"e.g. {dataset}_own")
    if spec is not None and spec.protocol != IMPORT_FORMATS[fmt]:
        raise DataError(f"'{dataset}' is a registered {spec.protocol} dataset, but --format {fmt} files follow "
                        f"the {IMPORT_FORMATS[fmt]} protocol", f"import under another name, e.g. {dataset}_{fmt}")


def _import_ctr(dataset: str, src: Path, fmt: str, sessions_dst: Path, samples_dst: Path, params: Params) -> dict:
    """BARS CTR files -> sessions (the CTR protocol of the dataset whose layout they have, under `dataset`'s
    name, stage "import") and samples (the augment stage itself). Both are built in temporary folders and
    swapped in together, as `_write` does for the other formats."""
    import dataclasses

    from . import augment
    from .datasets import get
    from .datasets.ctr import BARS_FILES, find_bars_file
    from .preprocess import write_result
    from .protocols import ctr
    if not src.is_dir():
        raise DataError(f"{src} {'is not a folder' if src.exists() else 'does not exist'}",
                        f"pass the folder that holds train.csv and test.csv (--format {fmt})")
    files = {}
    for name in BARS_FILES:
        try:
            path = find_bars_file(src, name)
        except DataError:
            raise DataError(f"{name} not found in {src}", f"--format {fmt} reads a folder holding train.csv and "
                                                          "test.csv (BARS' layout)") from None
        found = _ctr_format(path)
        if found != fmt:
            raise DataError(f"{path} has {found}'s columns, not {fmt}'s", f"pass --format {found}")
        files[name] = path
    spec = dataclasses.replace(get(CTR_FORMATS[fmt]), name=dataset)
    source = {name: sha256_file(path) for name, path in files.items()}
    try:
        with atomic_dirs(sessions_dst, samples_dst) as (s_tmp, a_tmp):     # swapped in together
            result = ctr.build(spec, files["train.csv"].parent, params, own_files=True)
            result.extra["format"] = fmt         # as the other imports record theirs (`seqpe datasets`; walk 32b)
            manifest = write_result(dataset, spec, result, source, s_tmp, params, stage="import")
            augment.run(dataset, s_tmp, a_tmp, params)
    except DataError as e:     # the readers' fixes speak of a download: these files are the user's own
        if e.fix and "download" in e.fix:
            raise DataError(e.problem, f"check {files['train.csv'].parent}'s train.csv and test.csv: whole, and "
                                       f"in {fmt}'s layout (`seqpe import --help`)") from None
        raise
    splits = manifest["splits"]
    return {"format": fmt, "rows (train / valid / test)": " / ".join(f"{splits[s]['rows']:,}" for s in SPLITS),
            "clicks (label 1)": f"{sum(splits[s]['clicks'] for s in SPLITS):,}",
            "target items": f"{result.items.height:,} (ids up to {result.n_items - 1:,})",
            "sessions folder": str(sessions_dst), "samples folder": str(samples_dst)}


def _import_srgnn(src: Path, params: Params) -> Imported:
    """SR-GNN folder -> sessions (train/valid from all_train_seq, test rebuilt from test.txt)."""
    if not src.is_dir():
        raise DataError(f"{src} {'is not a folder' if src.exists() else 'does not exist'}",
                        "pass the folder that holds all_train_seq.txt and test.txt")
    for name in SRGNN_FILES:
        path = src / name
        if path.exists() and not path.is_file():
            raise DataError(f"{path} is {special_kind(path)}, not a file",
                            f"put SR-GNN's {name} pickle there (seqpe reads regular files)")
        if name != "train.txt" and not path.is_file():
            raise DataError(f"{src} has no {name}", "an SR-GNN folder needs all_train_seq.txt and test.txt")
    seqs = unpickle.load_sessions(src / "all_train_seq.txt")
    if not seqs:
        raise DataError(f"{src / 'all_train_seq.txt'} holds no sessions", "re-create it")
    train_all = pl.DataFrame({"session_id": pl.int_range(1, len(seqs) + 1, dtype=pl.Int64, eager=True),
                              "items": list_column(seqs)})
    del seqs
    train_all, cut, train_txt = _check_train_txt(src, train_all)

    prefixes, labels = unpickle.load_samples(src / "test.txt")
    if not labels:
        raise DataError(f"{src / 'test.txt'} holds no samples", "re-create it: the test set cannot be empty")
    given = pl.DataFrame({"prefix": list_column(prefixes), "target": pl.Series(labels, dtype=pl.Int32)})
    del prefixes, labels
    test, test_mode = sessions_from_samples(given, first_id=train_all.height + 1)
    test_samples = augment(test, test_mode)
    if not test_samples.select("prefix", "target").equals(given):  # guards sessions_from_samples
        raise DataError(f"{src / 'test.txt'} could not be stored as sessions without change",
                        "report this file to the seqpe maintainers")
    n_items, n_distinct = max(_max_id(train_all), _max_id(test)), _distinct(train_all, test)
    _check_dense_ids(src, n_items, n_distinct)
    n_valid = _valid_count(src / "all_train_seq.txt", train_all.height, params.preprocess.valid_fraction)
    train = train_all.slice(0, train_all.height - n_valid)
    valid = train_all.slice(train_all.height - n_valid)
    samples = {"train": augment(train, "prefixes"), "valid": augment(valid, "prefixes"), "test": test_samples}
    steps = [_step("read all_train_seq.txt", train_all),
             _step(f"read test.txt: {given.height} samples as sessions ({test_mode})", test),
             _step("train (after carving valid)", train),
             _step(f"valid: most recent {n_valid:,} train sessions", valid)]
    summary = {"format": "srgnn",
               "train sessions (train+valid)": train_all.height,
               "train sessions": train.height, "valid sessions": valid.height, "test sessions": test.height,
               "train samples (train+valid)": samples["train"].height + samples["valid"].height,
               "train samples": samples["train"].height, "valid samples": samples["valid"].height,
               "test samples": test_samples.height,
               "items": n_distinct, "n_items (max id)": n_items,
               "train clicks (train+valid)": _clicks(train_all), "train.txt": train_txt}
    info = {"format": "srgnn", "test_came_as": "samples", "test_sessions": _TEST_NOTES[test_mode],
            "train_txt": train_txt, "session_ids": "positions: all_train_seq.txt from 1, then test sessions",
            "valid_rule": "valid = the most recent floor(T * valid_fraction) of the T sessions of "
                          "all_train_seq.txt (as pipeline.protocols.srgnn); train + valid == all_train_seq"}
    if cut:
        info["fraction_cut"] = {"cut": cut}
    return Imported(
        protocol=IMPORT_FORMATS["srgnn"], sessions={"train": train, "valid": valid, "test": test}, samples=samples,
        items=_items(train_all, n_items), n_items=n_items,
        augment={"train": "prefixes", "valid": "prefixes", "test": test_mode}, steps=steps,
        source={n: sha256_file(src / n) for n in SRGNN_FILES if (src / n).is_file()},
        params={"preprocess": read_keys(to_dict(params.preprocess), ("valid_fraction", "rows_per_shard"))},
        summary=summary, max_len=0, info=info)


def _valid_count(path: Path, n_sessions: int, fraction: float) -> int:
    """How many of the `n_sessions` of all_train_seq.txt (`path`) go to valid. None (valid_fraction 0, or
    below 1 / n) is refused here, before anything is written: `seqpe train` picks its best epoch on valid,
    so such an import failed only there, naming `seqpe preprocess` as the command to re-run."""
    n_valid = valid_count(n_sessions, fraction)
    if n_valid == 0:
        if n_sessions < 2:
            raise DataError(f"{path} holds 1 session: none is left to carve a valid session from",
                            "import a folder whose all_train_seq.txt holds every train session (valid is "
                            "carved from them)")
        at_least = 0.1 if n_sessions >= 10 else math.ceil(100 / n_sessions) / 100
        raise ParamsError(f"preprocess.valid_fraction={fraction} carves no valid session out of the {n_sessions:,} "
                          f"sessions of all_train_seq.txt, and `seqpe train` picks its best epoch on valid",
                          f"import with --set preprocess.valid_fraction={at_least} or more")
    return n_valid


_TEST_NOTES = {"prefixes": "rebuilt from its prefix samples (exact)",
               "last": "one session per sample, prefix + [target] (exact under augment mode 'last')"}


def _check_train_txt(src: Path, train_all: pl.DataFrame) -> tuple[pl.DataFrame, dict | None, str]:
    """train.txt is optional; when there it must be augment(all_train_seq) or a suffix of it.

    A suffix is what SR-GNN's Yoochoose fractions write when the 1/4 or 1/64 cut falls inside
    a session: `all_train_seq.txt` starts with that whole session, `train.txt` holds only its
    r shortest prefixes. As in `pipeline.protocols.srgnn`, that first session is then stored
    cut to its first r + 1 clicks (so `augment` of the sessions gives exactly train.txt), and
    its whole click list is kept in the manifest for `export`. Returns (sessions, cut, note).
    """
    path = src / "train.txt"
    if not path.is_file():
        return train_all, None, "absent: train samples built from all_train_seq.txt"
    prefixes, labels = unpickle.load_samples(path)
    given = pl.DataFrame({"prefix": list_column(prefixes), "target": pl.Series(labels, dtype=pl.Int32)})
    del prefixes, labels
    full = augment(train_all, "prefixes").select("prefix", "target")
    skip = full.height - given.height
    first = train_all["items"][0].to_list()
    if 0 <= skip < len(first) - 1 and full.slice(skip).equals(given):
        if skip == 0:
            return train_all, None, "checked: equals the prefix augmentation of all_train_seq.txt"
        kept = len(first) - skip  # r + 1 clicks, r = samples of the first session that train.txt keeps
        cut = {"session_id": 1, "clicks": len(first), "kept_clicks": kept, "items": first}
        head = pl.int_range(pl.len()) == 0
        train_all = train_all.with_columns(
            items=pl.when(head).then(pl.col("items").list.head(kept)).otherwise(pl.col("items")))
        return train_all, cut, (f"checked: the augmentation of all_train_seq.txt less the {skip} longest "
                                f"prefixes of its first session (a fraction cut inside a session)")
    raise DataError(f"{path} ({given.height:,} samples) is not the prefix augmentation of "
                    f"all_train_seq.txt ({full.height:,} samples)",
                    "remove train.txt to import the train sessions of all_train_seq.txt, "
                    "or bring the train.txt that belongs to this all_train_seq.txt")


def _import_sasrec(src: Path, params: Params) -> Imported:
    """S3-Rec text -> leave-one-out sessions; users with fewer than 3 items are dropped."""
    if not src.is_file():
        what = "does not exist" if not src.exists() else "is not a file" if src.is_dir() else \
            f"is {special_kind(src)}, not a file"
        raise DataError(f"{src} {what}", "pass the SASRec / S3-Rec text file, e.g. Beauty.txt")
    _require_text_file(src)
    try:
        text = src.read_text(encoding="utf-8-sig")   # a byte-order mark (Windows editors) is no part of the ids
    except UnicodeDecodeError as e:
        raise DataError(f"{src} is not UTF-8 text (byte {e.start})", "pass the S3-Rec .txt file") from None
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()  # the final newline, and blank lines after the last user (an editor's or export's): no data
    if not lines:
        raise DataError(f"{src} is empty", "pass a file with one line per user (`user item item ...`) or one "
                        "interaction per line (`user item`)")
    rows = (pl.DataFrame({"text": lines}).with_row_index("line", offset=1)
            .with_columns(tok=pl.col("text").str.replace_all(r"\s+", " ").str.strip_chars(" ").str.split(" ")))
    _check_lines(src, rows)
    ids = rows.select("line", ids=pl.col("tok").list.eval(pl.element().cast(pl.Int64)))
    users = ids.select("line", session_id=pl.col("ids").list.first(),
                       items=pl.col("ids").list.slice(1).cast(pl.List(pl.Int32)))
    dup = users.filter(pl.col("session_id").is_duplicated()).sort("session_id", "line", maintain_order=True)
    pairs = dup.height > 0 and bool((rows.get_column("tok").list.len() == 2).all())
    widths = rows.get_column("tok").list.len()
    if dup.height and not pairs and bool((widths == 3).all()):     # `user item timestamp`: a raw log
        raise DataError(f"{src}: every line has 3 fields and users repeat (user {dup['session_id'][0]} on lines "
                        f"{dup['line'][0]} and {dup['line'][1]}): a `user item timestamp` log, and --format sasrec "
                        "reads `user item` per line, each user's lines in time order",
                        "sort the lines by user then time, drop the third column, and import that file")
    if dup.height and not pairs:
        u, first, second = dup["session_id"][0], dup["line"][0], dup["line"][1]
        raise DataError(f"{src} line {second}: user {u} already had line {first}, and not every line is one "
                        "`user item` interaction", "use one layout: one line per user (`user item item ...`, "
                        "S3-Rec) or one interaction per line (`user item`, SASRec's data/*.txt)")
    if pairs:   # Kang & McAuley's layout: a user's lines in file order are the sequence
        users = (users.group_by("session_id", maintain_order=True)
                 .agg(pl.col("line").first(), pl.col("items").list.first()).select("line", "session_id", "items"))
    n_read, inter, n_items, n_distinct = users.height, _clicks(users), _max_id(users), _distinct(users)
    three = not pairs and bool((widths == 3).all())
    _check_dense_ids(src, n_items, n_distinct, "; if every line is `user item timestamp`, drop the third column "
                     "(after sorting by it)" if three else "")
    kept = users.filter(pl.col("items").list.len() >= 3).drop("line")
    if kept.height == 0:   # leave-one-out needs a train, a valid and a test item per user
        raise DataError(f"{src}: no user has 3 or more items ({n_read:,} read), so leave-one-out has "
                        "nothing to train, validate or test on", "import the whole dataset (each kept user needs 3 items)")
    n = pl.col("items").list.len()
    sessions = {"train": kept.with_columns(pl.col("items").list.slice(0, n - 2)),
                "valid": kept.with_columns(pl.col("items").list.slice(0, n - 1)),
                "test": kept}
    modes = {"train": "shifted", "valid": "last", "test": "last"}
    max_len = params.augment.max_len
    samples = {s: augment(sessions[s], modes[s], max_len) for s in SPLITS}
    if samples["train"].height == 0:     # every kept user has 3 items: one train item each, no (prefix, target)
        raise DataError(f"{src}: every kept user has exactly 3 items, so train (all but the last two) holds one "
                        "item per user and no (prefix, target) pair to learn from",
                        "import users with 4 or more items (the whole dataset, not an excerpt of short users)")
    steps = [_step(f"read {src.name}", users), _step("drop users with fewer than 3 items", kept)]
    summary = {"format": "sasrec", "users": n_read, "items": n_distinct, "interactions": inter,
               "n_items (max id)": n_items, "users dropped (< 3 items)": n_read - kept.height,
               **{f"{s} samples": _sample_counts(samples[s])["samples"] for s in SPLITS}}
    info = {"format": "sasrec", "file": src.name, "users_dropped_below_3_items": n_read - kept.height,
             "session_ids": "the file's user ids",
             "split": "leave-one-out: train = items[:-2], valid = items[:-1], test = all items"}
    if pairs:
        info["layout"] = "one `user item` interaction per line (Kang & McAuley's SASRec data)"
        summary = {"format": "sasrec", "layout": "user item per line (SASRec)", **summary}
    return Imported(
        protocol=IMPORT_FORMATS["sasrec"], sessions=sessions, samples=samples, items=_items(kept, n_items),
        n_items=n_items, augment=modes, steps=steps, source={src.name: sha256_file(src)},
        params={"preprocess": read_keys(to_dict(params.preprocess), ("rows_per_shard",))}, summary=summary,
        max_len=max_len, info=info)


def _check_lines(src: Path, rows: pl.DataFrame) -> None:
    """Empty lines, lines without items, and tokens that are not ids 1..2**31-1 -> DataError."""
    bad = rows.filter(pl.col("text").str.strip_chars() == "").head(1)
    if bad.height:
        raise DataError(f"{src} line {bad['line'][0]} is empty", "remove it: every line is `user item item ...`")
    first = rows.head(1).get_column("text").to_list()
    names = [c.strip().lower() for c in first[0].lstrip("\ufeff").split(",")] if first else []
    if {"user_id", "item_id", "cate_id"} <= set(names) and "label" not in names:     # walk 42d #3: "line 2
        raise DataError(f"{src} is DIN's Amazon Electronics behaviour log (header {first[0].strip()[:60]}), which "
                        "seqpe does not import: its CTR split is the BARS files",    # separates ids by ','"
                        "`seqpe download amazon_electronics` (AmazonElectronics_x1, the split 001 and DIN use)")
    bad = rows.filter(pl.col("text").str.contains(r"\d[,;|]\d")).head(1)
    if bad.height:           # a CSV export: "1,23" would be read as one token
        sep = next(c for c in ",;|" if c in bad["text"][0])
        raise DataError(f"{src} line {bad['line'][0]} separates ids by '{sep}'",
                        "separate ids by spaces or tabs: every line is `user item item ...` (S3-Rec) or `user "
                        "item` (SASRec)")
    bad = rows.filter(pl.col("tok").list.len() < 2).head(1)
    if bad.height:
        raise DataError(f"{src} line {bad['line'][0]} has a user but no items",
                        "every line is `user item item ...`")
    toks = rows.select("line", "tok").explode("tok").with_columns(v=pl.col("tok").cast(pl.Int64, strict=False))
    bad = toks.filter(pl.col("v").is_null() | (pl.col("v") < 1) | (pl.col("v") > unpickle.MAX_ID)).head(1)
    if bad.height:
        line, tok, value = bad["line"][0], bad["tok"][0], bad["v"][0]
        text_line = lambda n: toks.filter(pl.col("line") == n).get_column("v").is_null().all()  # noqa: E731
        # a header is a line 1 of words over lines of ids; words on line 2 as well are ids that are not numbers
        header = line == 1 and text_line(1) and (rows.height == 1 or not toks.filter(pl.col("line") == 2)
                                                 .get_column("v").is_null().any())
        if header:
            fix = "remove the header line: the file holds ids only"
        elif value is None:
            fix = ("map every user and item to an integer id 1..N first (ids such as reviewer ids or ASINs are not "
                   "read)")
        elif value == 0:
            fix = "ids start at 1 (0 is the padding id): add 1 to every user and item id"
        else:
            fix = "every token must be a positive integer id"
        raise DataError(f"{src} line {line}: {tok[:40]!r} is not an id in 1..{unpickle.MAX_ID}", fix)


def _check_dense_ids(src: Path, n_items: int, n_distinct: int, hint: str = "") -> None:
    """Ids are kept as they are, so n_items is the largest id (and an export gives the files back byte for
    byte): a largest id far above the number of distinct ids would make a vocabulary (items.parquet, every
    model's embedding and score rows) of mostly unused ids. `1 1 2 20000000` gave 20,000,000 items for 3,
    and ids near 2**31 a traceback or an abort. The published files are dense 1..N with few gaps (SR-GNN's
    Yoochoose 1/64 keeps the 1/4's numbering: largest id 37,483 for 17,745 ids), and an excerpt of one keeps
    ids up to its N, hence the allowance: the largest id may be up to 2 x distinct + SPARSE_IDS."""
    if n_items > 2 * n_distinct + SPARSE_IDS:
        raise DataError(f"{src}: the largest item id is {n_items:,} but only {n_distinct:,} distinct ids occur, "
                        "and seqpe keeps ids as they are (n_items = the largest id, so exported files stay "
                        f"byte-identical): {n_items:,} item rows for {n_distinct:,} items",
                        f"renumber the items 1..N (N = {n_distinct:,}) and import the renumbered file{hint}")


# --------------------------------------------------------------------------- write

def _write(dataset: str, imp: Imported, sessions_dst: Path, samples_dst: Path, params: Params) -> None:
    """Both folders are built in full before either replaces what was there, and swapped in together
    (io.atomic_dirs: a Ctrl-C once both are built waits until both are in), so the pair always matches."""
    head = {"stage": "import", "dataset": dataset, "protocol": imp.protocol, "params": imp.params,
            "source": imp.source, "steps": imp.steps, "n_items": imp.n_items, "augment": imp.augment,
            "protocol_info": imp.info}
    with atomic_dirs(sessions_dst, samples_dst) as (s_tmp, a_tmp):
        shards = []
        for split in SPLITS:
            shards += write_split(s_tmp, split, imp.sessions[split].rechunk(), params.preprocess.rows_per_shard)
        write_parquet(s_tmp / "items.parquet", imp.items)
        shards.append(shard_entry(s_tmp, "items.parquet"))
        write_json(s_tmp / MANIFEST, {
            **head, "kind": "sessions", "shards": shards,
            "max_len": max(_max_len(imp.sessions[s], "items") for s in SPLITS),
            "splits": {s: {"sessions": imp.sessions[s].height, "clicks": _clicks(imp.sessions[s])}
                       for s in SPLITS}})
        shards = []
        for split in SPLITS:
            shards += write_split(a_tmp, split, imp.samples[split].rechunk(), params.augment.rows_per_shard)
        write_json(a_tmp / MANIFEST, {
            **head, "kind": "samples", "shards": shards, "sessions_manifest": sha256_file(s_tmp / MANIFEST),
            "params": {**imp.params, "augment": read_keys(to_dict(params.augment), AUGMENT_READS[imp.protocol]),
                       "max_len_applied": imp.max_len},
            "max_len": max(_longest(imp.samples[s]) for s in SPLITS),
            "splits": {s: {**_sample_counts(imp.samples[s]), "sessions": imp.sessions[s].height,
                           "clicks": _clicks(imp.sessions[s])} for s in SPLITS}})


# --------------------------------------------------------------------------- export

def export_dataset(sessions_dir: str | Path, out_dir: str | Path, fmt: str = "srgnn",
                   dataset: str | None = None) -> dict:
    """Write a sessions folder as SR-GNN pickles (or S3-Rec text) into `out_dir`, atomically.
    `dataset`: the name the command gave; the folder must then be that dataset's sessions."""
    if fmt not in EXPORT_FORMATS:
        raise unknown("export format", fmt, EXPORT_FORMATS,
                      f"use --format srgnn or --format sasrec ({fmt} is a format import reads, not one export "
                      "writes)" if fmt in FORMATS else None)
    sessions_dir, out_dir = Path(sessions_dir), Path(out_dir)
    refuse_nested(out_dir, "export", "e.g. a new folder next to data/")
    manifest = read_manifest(sessions_dir) if dataset is None else require_kind(
        sessions_dir, "sessions", dataset, "export", f"`seqpe export {{owner}} {out_dir} --sessions {sessions_dir}`")
    if manifest.get("protocol") == "ctr":      # (user, item, label) rows: no sessions to write as either format
        raise DataError(f"{sessions_dir} holds CTR data ({manifest.get('dataset')}): labelled (user, item) rows, "
                        "not sessions of items", "export a next-item dataset (srgnn or leave-one-out protocol)")
    verify_shards(sessions_dir, manifest)
    frames = {s: read_split(sessions_dir, s).select("session_id", "items") for s in SPLITS}
    modes = manifest.get("augment", {})
    if fmt == "srgnn":
        files, summary = _export_srgnn(sessions_dir, frames, modes, manifest)
    else:
        files, summary = _export_sasrec(sessions_dir, frames, modes, manifest)
    if out_dir.exists() and not out_dir.is_dir():
        raise DataError(f"{out_dir} is a file, and export writes a folder of files there",
                        "pass the path of a new folder (export writes train.txt / test.txt or DATASET.txt into it)")
    _check_previous_export(out_dir)
    import hashlib
    with atomic_dir(out_dir) as tmp:
        for name, data in files.items():
            write_bytes(tmp / name, data)
        write_json(tmp / EXPORT_RECORD, {"stage": "export", "format": fmt, "dataset": manifest.get("dataset"),
                                         "files": {n: hashlib.sha256(d).hexdigest() for n, d in sorted(files.items())}})
    return {**summary, "folder": str(out_dir), "files": ", ".join(sorted(files))}


EXPORT_RECORD = "export.json"      # in an export's folder: its files and their sha256


def _check_previous_export(out_dir: Path) -> None:
    """An existing, non-empty `out_dir` is replaced only when it is an earlier export, as its export.json says,
    with its files unchanged: a folder of the same names was taken for one, and a user's own SR-GNN pickles
    (the real all_train_seq.txt / test.txt an `imports:` entry reads) were replaced (walk 41d #2)."""
    from .io import read_json
    if not out_dir.exists() or not any(out_dir.iterdir()):
        return
    names = {p.name for p in out_dir.iterdir()}
    try:
        record = read_json(out_dir / EXPORT_RECORD) if EXPORT_RECORD in names else None
    except DataError:
        record = None
    listed = record.get("files") if isinstance(record, dict) and record.get("stage") == "export" else None
    if not isinstance(listed, dict):
        raise DataError(f"{out_dir} already holds files without the {EXPORT_RECORD} record `seqpe export` writes "
                        f"({', '.join(sorted(names)[:3])}{', ...' if len(names) > 3 else ''}): another tool's files, "
                        "or an export seqpe wrote before it kept that record (2026-11-29), which seqpe does not replace",
                        f"{_NO_CLOBBER}, or delete {out_dir} yourself if it is an export")
    if names - set(listed) - {EXPORT_RECORD}:
        raise DataError(f"{out_dir} already holds other files ({', '.join(sorted(names - set(listed) - {EXPORT_RECORD})[:3])})",
                        _NO_CLOBBER)
    gone = [n for n in listed if not (out_dir / n).is_file()]
    changed = [n for n, sha in listed.items() if n not in gone and sha256_file(out_dir / n) != sha]
    if gone or changed:
        what = "; ".join(part for part in (f"{', '.join(gone[:3])} deleted" if gone else "",
                                           f"{', '.join(changed[:3])} changed" if changed else "") if part)
        raise DataError(f"{out_dir} is an earlier export whose files were edited since it was written ({what})",
                        _NO_CLOBBER)


def _export_srgnn(src: Path, frames: dict, modes: dict, manifest: dict) -> tuple[dict, dict]:
    if modes.get("train") != "prefixes" or modes.get("valid") != "prefixes":
        raise DataError(f"{src} holds {manifest.get('protocol')} sessions (train/valid augment "
                        f"{modes.get('train')}/{modes.get('valid')}), not SR-GNN-style sessions",
                        "export --format srgnn needs a dataset under the srgnn protocol; "
                        "use --format sasrec for leave-one-out datasets")
    train_all = pl.concat([frames["train"], frames["valid"]])
    train = augment(train_all, "prefixes")
    test = augment(frames["test"], modes.get("test", "prefixes"))
    seqs = train_all["items"].to_list()
    cut = (manifest.get("protocol_info", {}).get("fraction_cut") or {}).get("cut") or {}
    if seqs and "items" in cut and cut.get("session_id") == train_all["session_id"][0]:
        seqs[0] = list(cut["items"])  # SR-GNN keeps the session a fraction cut falls in whole here
    objects = {"all_train_seq.txt": seqs,
               "train.txt": (train["prefix"].to_list(), train["target"].to_list()),
               "test.txt": (test["prefix"].to_list(), test["target"].to_list())}
    files = {name: pickle.dumps(obj, protocol=PICKLE_PROTOCOL) for name, obj in objects.items()}
    summary = {"format": "srgnn", "train sessions": train_all.height, "train samples": train.height,
               "test samples": test.height, "n_items": manifest.get("n_items"),
               "pickle protocol": PICKLE_PROTOCOL}
    return files, summary


def _export_sasrec(src: Path, frames: dict, modes: dict, manifest: dict) -> tuple[dict, dict]:
    """Leave-one-out sessions -> one text line per user, its full sequence: the test row, or for a user kept
    for training only (no test row: CARCA's users with fewer than 3 interactions, pipeline/datasets/carca.py)
    the train row, which holds the whole sequence. Every user is written, as the format holds any length
    (SASRec's `data_partition` keeps such users for training, as CARCA does); users in the order of the
    train split (the test split's for an import: the file's order)."""
    if modes.get("test") != "last" or manifest.get("protocol") != "leave_one_out":
        raise DataError(f"{src} holds {manifest.get('protocol')} sessions, not leave-one-out ones",
                        "export --format sasrec needs a leave-one-out dataset; use --format srgnn")
    train, test = frames["train"], frames["test"]
    only_train = train.join(test.select("session_id"), on="session_id", how="anti")
    order = pl.concat([train.select("session_id"), test.select("session_id")]).unique(maintain_order=True)
    users = order.join(pl.concat([test, only_train]), on="session_id", how="left", maintain_order="left")
    lines = users.select(pl.concat_str(pl.col("session_id").cast(pl.String),
                                       pl.col("items").list.eval(pl.element().cast(pl.String)).list.join(" "),
                                       separator=" "))
    text = "".join(f"{line}\n" for line in lines.to_series().to_list())
    name = f"{manifest.get('dataset', 'dataset')}.txt"
    summary = {"format": "sasrec", "users": users.height, "interactions": _clicks(users),
               "n_items": manifest.get("n_items")}
    if only_train.height:   # the file's users then differ from the test split's (seqpe's import drops them again)
        summary["of which train only (no valid / test)"] = only_train.height
    return {name: text.encode("utf-8")}, summary


# --------------------------------------------------------------------------- small helpers

def list_column(seqs: list) -> pl.Series:
    """Python lists of ids -> one List(Int32) Series, built from a flat buffer (no per-row work)."""
    if not seqs:
        return pl.Series("items", [], dtype=pl.List(pl.Int32))
    lengths = pl.Series(list(map(len, seqs)), dtype=pl.Int64)
    flat = pl.Series(list(chain.from_iterable(seqs)), dtype=pl.Int32)
    offsets = lengths.cum_sum() - lengths
    return (pl.DataFrame({"offset": offsets, "length": lengths})
            .select(pl.lit(flat).implode().list.slice(pl.col("offset"), pl.col("length")).alias("items"))
            .to_series())


def augment(sessions: pl.DataFrame, mode: str, max_len: int = 0) -> pl.DataFrame:
    """The `augment` stage's own sample builders, so imports equal `seqpe augment` of the sessions."""
    build = {"prefixes": prefix_samples, "shifted": shifted_samples, "last": last_samples}[mode]
    return build(sessions.select("session_id", "items"), max_len)


def sessions_from_samples(samples: pl.DataFrame, first_id: int) -> tuple[pl.DataFrame, str]:
    """Rebuild sessions from prefix-augmented samples (prefix, target), numbered from `first_id`.

    SR-GNN's samples of a session s are (s[:-1], s[-1]), (s[:-2], s[-2]), ..., (s[:1], s[1]): a
    session starts at the first sample and after each prefix of length 1, and it is its first
    prefix + [target]. When re-augmenting those sessions does not give the samples back (a
    file made some other way) each sample becomes its own session prefix + [target] with
    augment mode "last". Either way `augment` of the result is exactly `samples`.
    """
    n = pl.col("prefix").list.len()
    whole = pl.concat_list("prefix", "target").alias("items")
    starts = samples.filter(n.shift(1).fill_null(1) == 1).select(whole)
    sessions = starts.select(pl.int_range(first_id, first_id + pl.len(), dtype=pl.Int64).alias("session_id"),
                             "items")
    if augment(sessions, "prefixes").select("prefix", "target").equals(samples.select("prefix", "target")):
        return sessions, "prefixes"
    ids = pl.int_range(first_id, first_id + pl.len(), dtype=pl.Int64).alias("session_id")
    return samples.select(ids, whole), "last"


def _clicks(df: pl.DataFrame, col: str = "items") -> int:
    return int(df.select(pl.col(col).list.len().sum()).item() or 0)


def _max_id(df: pl.DataFrame) -> int:
    return int(df.select(pl.col("items").list.max().max()).item() or 0)


def _sample_counts(samples: pl.DataFrame) -> dict:
    """What `augment` records per split: (prefix, target) rows, or for shifted rows (session_id,
    items) the pairs they expand to plus the rows."""
    if "items" in samples.columns:
        return {"samples": int(samples.select((pl.col("items").list.len() - 1).sum()).item() or 0),
                "rows": samples.height}
    return {"samples": samples.height}


def _longest(samples: pl.DataFrame) -> int:
    """Longest prefix of a samples frame (shifted rows: len(items) - 1)."""
    if "items" in samples.columns:
        return max(_max_len(samples, "items") - 1, 0)
    return _max_len(samples, "prefix")


def _max_len(df: pl.DataFrame, col: str) -> int:
    return int(df.select(pl.col(col).list.len().max()).item() or 0)


def _distinct(*frames: pl.DataFrame) -> int:
    return pl.concat([f.select(pl.col("items").explode()) for f in frames]).n_unique()


def _step(name: str, df: pl.DataFrame) -> dict:
    return {"step": name, "sessions": df.height, "clicks": _clicks(df),
            "items": df.select(pl.col("items").explode().drop_nulls().n_unique()).item()}


def _items(df: pl.DataFrame, n_items: int) -> pl.DataFrame:
    """item_id 1..n_items, raw_id = the imported id as text, count = clicks in `df`."""
    counts = df.select(item_id=pl.col("items").explode()).drop_nulls().group_by("item_id").len("count")
    return (pl.DataFrame({"item_id": pl.int_range(1, n_items + 1, dtype=pl.Int32, eager=True)})
            .join(counts, on="item_id", how="left", maintain_order="left")
            .select("item_id", raw_id=pl.col("item_id").cast(pl.String),
                    count=pl.col("count").fill_null(0).cast(pl.Int64)))
