"""Stage `preprocess`: raw files -> split sessions under the dataset's protocol.

Writes, atomically (all or nothing), into `dst`:

    {train,valid,test}/part-NNNNN.parquet   sessions in protocol order (see the protocol module)
    items.parquet                           item_id Int32 (new id), raw_id String, count Int64
    item_features.parquet                   only for datasets with side information (pipeline/side.py)
    users.parquet                           leave-one-out only: session_id Int64 (new user id), raw_id String
    history_overflow.parquet                CTR only: history tokens max_history cut off train.csv's rows,
                                            counted (pipeline/protocols/ctr.py `overflow`)
    manifest.json                           protocol, params, source hashes, step counts, shards

The protocol module (`pipeline.protocols.<spec.protocol>`) does the work and returns a
`ProtocolResult`; this module only validates inputs, writes and describes the outputs.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import polars as pl

from . import io
from .datasets import get
from .errors import DataError
from .params import Params, to_dict
from .protocols import ProtocolResult, build_protocol

SOURCE_JSON = "source.json"


def read_source(dataset: str, src: Path, source_name: str | None = None) -> dict:
    """The raw folder's source.json reduced to what identifies the input (no paths, no times).
    `source_name`: the registry's source of `dataset`; a folder downloaded from another source is
    refused (datasets sharing one, yoochoose and its fractions, may share a raw folder)."""
    path = Path(src) / SOURCE_JSON
    if not path.is_file() and (Path(src) / io.MANIFEST).is_file():
        raise DataError(f"{src} holds prepared data (manifest.json), but `seqpe preprocess` reads a raw folder",
                        f"pass data/raw/{dataset} (written by `seqpe download {dataset}`)")
    if Path(src).is_file():
        raise DataError(f"{src} is a file, not a raw folder: `seqpe preprocess` reads the folder `seqpe download` "
                        f"wrote", f"pass data/raw/{dataset} (written by `seqpe download {dataset}`, which takes a "
                                  f"file with --from)")
    if not path.is_file():
        parts = sorted(p.name for p in Path(src).glob(".*.part")) if Path(src).is_dir() else []
        partial = (f" (an interrupted download left {parts[0]} there: `seqpe download {dataset}` resumes it)"
                   if parts else "")                                                      # walk 35b
        raise DataError(f"no {SOURCE_JSON} in {src}: the raw data of '{dataset}' has not been downloaded{partial}",
                        f"run `seqpe download {dataset}` (or `seqpe download {dataset} --from PATH`) first")
    meta = io.read_json(path)
    if source_name is not None and isinstance(meta.get("source"), str) and meta["source"] != source_name:
        owner = meta.get("dataset") if isinstance(meta.get("dataset"), str) else meta["source"]
        raise DataError(f"{src} holds the raw data of '{owner}' (source {meta['source']}), not of '{dataset}' "
                        f"(source {source_name})",
                        (f"pass data/raw/{dataset} (written by `seqpe download {dataset}`)"
                         if Path(src) != Path("data") / "raw" / dataset else
                         f"delete {src} and run `seqpe download {dataset}`")      # not the folder refused (walk 36c)
                        + (f", or preprocess it as `seqpe preprocess {owner} {src} ...`" if _registered(owner)
                           else ""))                           # not `seqpe preprocess bench ml_1m x0.01` (walk 40h #6)
    _verify_raw(dataset, Path(src), meta)
    keep = ("source", "filename", "origin", "sha256", "md5", "bytes", "files", "generator")
    return {k: meta[k] for k in keep if k in meta}


def _registered(name: str) -> bool:
    from .datasets import DATASETS, _load_all
    _load_all()
    return name in DATASETS


def _verify_raw(dataset: str, src: Path, meta: dict) -> None:
    """Every raw file source.json lists that is on disk has its recorded size and sha256: the sessions
    manifest copies these hashes as its provenance, so a raw file cut short or edited since the download
    (a truncation at a line boundary parses cleanly and loses the last days) is refused instead of
    preprocessed under the original's name. Costs one read of the raw files (about 1.6 s for Yoochoose's
    1.5 GB at 0.9 GB/s); a file that is missing is left to the reader, which names it."""
    files = meta.get("files")
    if not isinstance(files, dict):
        return
    again = f"delete {src} and download it again (`seqpe download {dataset}`, or `--from` a good copy)"
    for name, entry in sorted(files.items()):
        path = src / str(name)
        if Path(str(name)).name != name or not isinstance(entry, dict) or not path.is_file():
            continue
        why = io.file_mismatch(path, entry)
        if why is not None:
            raise DataError(f"raw file {path} {why}: it changed since it was downloaded", again)


def _count_column(df: pl.DataFrame) -> tuple[str, int, int]:
    """("sessions"|"rows", rows, clicks) of one split frame: a session's clicks are its items, CTR rows'
    their positive labels."""
    if "items" in df.columns and df.schema["items"] == pl.List(pl.Int32):
        clicks = int(df.get_column("items").list.len().sum()) if df.height else 0
        return "sessions", df.height, clicks
    return "rows", df.height, _positives(df.lazy()) if "label" in df.columns else df.height


def _positives(rows: pl.LazyFrame) -> int:
    """CTR rows' clicks: how many have label 1."""
    return int(rows.select((pl.col("label") == 1).sum()).collect().item() or 0)


def _is_sessions(lf: pl.LazyFrame) -> bool:
    """A lazy split of sessions (items: List(Int32)), as srgnn's streaming path returns, not CTR rows."""
    return lf.collect_schema().get("items") == pl.List(pl.Int32)


def _height(df: pl.DataFrame | pl.LazyFrame) -> int | None:
    """Rows of a split known before writing it: a frame's, or a lazy scan of sessions' (None: a
    CTR query, counted as it is written)."""
    if isinstance(df, pl.DataFrame):
        return df.height
    return df.select(pl.len()).collect().item() if _is_sessions(df) else None


def _max_len(result: ProtocolResult) -> int:
    lens = [int(df.get_column("items").list.len().max() or 0)
            for df in result.splits.values()
            if isinstance(df, pl.DataFrame) and "items" in df.columns and df.height]
    return max(lens, default=0)


def write_result(dataset: str, spec, result: ProtocolResult, source: dict, dst: Path, params: Params,
                 stage: str = "preprocess") -> dict:
    """Write shards, items.parquet and manifest.json into `dst` atomically; return the manifest. `stage`
    is "import" for `seqpe import` of CTR files (pipeline/formats.py)."""
    missing = [s for s in io.SPLITS if s not in result.splits]
    if missing:
        raise DataError(f"protocol {spec.protocol} returned no {', '.join(missing)} split",
                        "this is a bug in the protocol module: report it")
    empty = [s for s in ("train", "test") if _height(result.splits[s]) == 0]
    if empty:
        raise DataError(f"all sessions vanished under the filters of protocol {spec.protocol}: "
                        f"the {' and '.join(empty)} split of '{dataset}' is empty",
                        "check the raw file is complete (enough days and clicks), or relax the filters in "
                        "the preprocess section of params.yaml")
    fraction = params.preprocess.valid_fraction
    if fraction > 0 and spec.protocol != "leave_one_out" and _height(result.splits["valid"]) == 0:    # 10% of 5 sessions
        n_train = _height(result.splits["train"])
        at_least = math.ceil(100 / n_train) / 100 if n_train else 0.1
        unit = "row" if spec.protocol == "ctr" else "session"      # a note, not an error: `export` needs no valid
        sys.stderr.write(f"note: preprocess.valid_fraction={fraction} carves no valid {unit} out of the {n_train:,} "
                         f"train {unit}s of '{dataset}': `seqpe train` will refuse these samples (it picks its best "
                         f"epoch on valid); "
                         + (f"--set preprocess.valid_fraction={at_least} or more, or preprocess more raw data\n"
                            if at_least < 1 else "preprocess more raw data\n"))
    rows_per_shard = params.preprocess.rows_per_shard
    manifest = {
        "stage": stage, "kind": "sessions", "dataset": dataset, "protocol": spec.protocol,
        "params": {"preprocess": _generated_with(dataset, spec, source, params), "options": dict(spec.options)},
        "source": source, "steps": result.steps, "n_items": int(result.n_items),
        "max_len": _max_len(result), "augment": dict(result.augment), "splits": {}, "shards": [],
        "protocol_info": result.extra,
    }
    with io.atomic_dir(dst) as tmp:
        for split in io.SPLITS:
            df = result.splits[split]
            if isinstance(df, pl.LazyFrame) and _is_sessions(df):  # srgnn's streaming path: spilled sessions
                entries = io.sink_split(tmp, split, df, rows_per_shard)
                lens = io.scan_split(tmp, split).select(pl.col("items").list.len()).collect().to_series()
                manifest["splits"][split] = {"sessions": lens.len(), "clicks": int(lens.sum())}
                manifest["max_len"] = max(manifest["max_len"], int(lens.max() or 0))
                manifest["shards"] += entries
                continue
            if isinstance(df, pl.LazyFrame):  # large CTR splits: streamed, never held in memory
                entries = io.sink_split(tmp, split, df, rows_per_shard)
                n = sum(e["rows"] for e in entries)
                if n == 0 and split in ("train", "test"):
                    rule = (result.extra or {}).get("valid_rule")
                    valid = result.splits.get("valid")
                    took = valid.select(pl.len()).collect().item() if split == "train" and rule and \
                        isinstance(valid, pl.LazyFrame) else 0
                    if took:                 # the files were complete: the valid rule took them (walk 41i #2)
                        raise DataError(f"the train split of '{dataset}' is empty: the valid rule ({rule}) took all "
                                        f"{took:,} train rows, every user having one train position",
                                        "give each user at least two train positions (rows with distinct "
                                        "histories): the rule holds out each user's last one")
                    raise DataError(f"the {split} split of '{dataset}' is empty under protocol {spec.protocol}",
                                    "check the raw files are complete")
                manifest["splits"][split] = {"rows": n, "clicks": _positives(io.scan_split(tmp, split)) if n else 0}
                manifest["shards"] += entries
                continue
            kind, n, clicks = _count_column(df)
            manifest["splits"][split] = {kind: n, "clicks": clicks}
            manifest["shards"] += io.write_split(tmp, split, df, rows_per_shard)
        io.write_parquet(tmp / "items.parquet", result.items)
        manifest["shards"].append(io.shard_entry(tmp, "items.parquet"))
        if result.users is not None:      # leave-one-out: new user ids -> raw user ids
            io.write_parquet(tmp / "users.parquet", result.users)
            manifest["shards"].append(io.shard_entry(tmp, "users.parquet"))
        if result.overflow is not None:   # CTR: history tokens cut by max_history, for the vocabularies
            from .protocols.ctr import OVERFLOW_FILE
            io.write_parquet(tmp / OVERFLOW_FILE, result.overflow)
            manifest["shards"].append(io.shard_entry(tmp, OVERFLOW_FILE))
        if result.side:                  # item attributes / interaction context (pipeline/side.py)
            from . import side
            manifest["side"], entries = side.write(tmp, result.side, result.n_items, result.splits)
            manifest["shards"] += entries
        io.write_json(tmp / io.MANIFEST, manifest)
    return manifest


def _generated_with(dataset: str, spec, source: dict, params: Params) -> dict:
    """The preprocess params the manifest records. For a dataset seqpe generates (`sample`, `sample_ctr`,
    ...), its generator section (preprocess.sample or .sample_ctr) is the one the raw data was made with,
    from source.json's "generator", not the one in effect now: after `seqpe download sample --set
    preprocess.sample.sessions=30`, a plain `seqpe preprocess sample` reads 30 sessions' clicks and says so,
    with a note that the params in effect differ. A raw folder written before source.json kept the
    settings has none: the params in effect are recorded, as they always were.

    The generator sections no dataset of this one's reads are left out: `preprocess.sample_ctr.seed=5` changed
    the manifest of `sample`'s sessions (same shards), and `seqpe datasets` then called its samples stale
    (walk 36c #3). So are the keys its protocol does not read (protocols.PREPROCESS_READS, walk 43d #8)."""
    from .protocols import PREPROCESS_READS, preprocess_unread, read_keys
    full = to_dict(params.preprocess)
    pre = read_keys(full, PREPROCESS_READS[spec.protocol], preprocess_unread(spec))
    section, made = spec.source.generate_params, source.get("generator")
    generated = spec.source.archive == "generated"
    if generated and isinstance(full.get(section), dict):
        pre[section] = full[section]
    if not generated or not isinstance(made, dict) or not isinstance(pre.get(section), dict):
        return pre
    differ = [f"{k}={made[k]!r} (params: {pre[section].get(k)!r})" for k in sorted(made)
              if made[k] != pre[section].get(k)]
    if differ:
        sys.stderr.write(f"note: the raw data of '{dataset}' was generated with preprocess.{section}."
                         f"{', '.join(differ)}: the manifest records the settings it was generated with\n")
    pre[section] = dict(made)
    return pre


@io.claims_released()
def run(dataset: str, src: Path, dst: Path, params: Params) -> dict:
    """Preprocess `dataset` from its raw folder `src` into the sessions folder `dst`."""
    spec = get(dataset)
    src, dst = Path(src), Path(dst)
    io.claim_dir(dst, dataset, "sessions")
    source = read_source(dataset, src, spec.source.name)
    with io.scratch_dir(dst) as scratch:  # spill files of a protocol that streams (removed afterwards)
        try:
            result = build_protocol(spec, src, params, scratch=scratch)
        except DataError as e:
            raise DataError(e.problem, _named_fix(e.fix, dataset, src)) from None
        return write_result(dataset, spec, result, source, dst, params)


def _named_fix(fix: str | None, dataset: str, src: Path) -> str | None:
    """Readers only see a raw folder, so their fixes say DATASET; name it, and since a raw folder
    with a matching source.json counts as downloaded, a re-download starts by deleting it."""
    if not fix:
        return fix
    again = f"delete {src} and download it again (`seqpe download {dataset}`, or `--from` a good copy)"
    return fix.replace("re-download it (`seqpe download DATASET`)", again).replace("DATASET", dataset)
