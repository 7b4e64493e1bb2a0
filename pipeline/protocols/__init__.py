"""Split protocols: raw rows -> train / valid / test sessions + item numbering.

Each protocol is a module `pipeline.protocols.<name>` exposing

    build(spec: DatasetSpec, raw_dir: Path, params: Params) -> ProtocolResult

and nothing that writes files: `pipeline.preprocess` writes what `build` returns
(shards, items.parquet, manifest.json) atomically. `DatasetSpec.protocol` names the
module; `build_protocol` dispatches to it.
"""
from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import polars as pl

from ..errors import unknown

PROTOCOLS = ("srgnn", "leave_one_out", "ctr")
AUGMENT_MODES = ("prefixes", "shifted", "last", "rows")

# The preprocess / augment keys a protocol reads. A manifest records only these (walk 43d #8): it recorded
# every key as if applied, so `preprocess.k_core`, which only leave-one-out data reads, changed Diginetica's
# manifest too, and under `dvc repro` its samples and every run trained on them were made again from the
# same rows. rows_per_shard lays out the shards, so it stays for every protocol; `streaming` is left out too, as
# it changes how srgnn computes its output, not the output (walk 44d #2: toggling it remade the samples).
PREPROCESS_READS = {"srgnn": ("valid_fraction", "min_item_count", "rows_per_shard"),
                    "leave_one_out": ("k_core", "rows_per_shard"),
                    "ctr": ("valid_fraction", "max_history", "rows_per_shard")}
AUGMENT_READS = {"srgnn": ("rows_per_shard",),                       # whole prefixes (max_len_applied 0)
                 "leave_one_out": ("max_len", "rows_per_shard"),
                 "ctr": ("rows_per_shard", "ctr_vocab")}              # preprocess.max_history cuts histories


def read_keys(section: dict, reads, unread=()) -> dict:
    """`section` (a params section as a dict) with only the keys in `reads`, less those in `unread` (a
    dataset's own exceptions: HLLM's k-core from its options, a CTR valid rule that takes no fraction)."""
    return {k: v for k, v in section.items() if k in reads and k not in unread}


def preprocess_unread(spec) -> tuple[str, ...]:
    """The keys of PREPROCESS_READS[spec.protocol] this dataset does not read after all."""
    if spec.build is not None:                      # files their authors filtered and split (CARCA's)
        return ("k_core", "valid_fraction", "min_item_count", "max_history")
    if spec.protocol == "leave_one_out" and spec.options.get("core") == "hllm":
        return ("k_core",)                          # options["k_core"] (HLLM's filter), recorded under options
    if spec.protocol == "ctr" and spec.options.get("valid", "tail") != "tail":
        return ("valid_fraction",)                  # last_per_user: no fraction
    return ()


@dataclass
class ProtocolResult:
    """What a protocol hands to `pipeline.preprocess`.

    splits   "train", "valid", "test" -> DataFrame with at least session_id: Int64 and
             items: List(Int32) (new ids 1..n_items, time order), rows in protocol order;
             extra columns (e.g. date: Date) are allowed. CTR frames follow their own schema.
    items    item_id: Int32 (new id from 1), raw_id: String, count: Int64 (one row per kept item,
             sorted by item_id).
    steps    [{"step": name, "sessions": int, "clicks": int, "items": int}, ...] in protocol order
             (counts after the step; None where a count does not apply); CTR steps also count "rows",
             and their clicks are the positive labels.
    n_items  number of item ids (the largest new id); 0 is padding.
    augment  split -> mode in AUGMENT_MODES: how `pipeline.augment` turns rows into samples.
    extra    protocol facts for the manifest (split dates, valid rule, options, ...); JSON-able.
    side     side information (pipeline/side.py), empty for every dataset without it: "item_features"
             (item_id Int32, features Array(Float32, A)) written next to items.parquet, and "context"
             (the names of the C per-interaction features; every split then has a `context` column
             List(Array(Float32, C)) aligned with `items`).
    users    leave-one-out only: session_id Int64 (the new user id), raw_id String (the user's raw id),
             sorted by session_id, written as users.parquet; None where session ids are the raw ones.
    overflow CTR only: the history tokens that preprocess.max_history cut off the train and valid rows,
             counted (split String, column String, key Int64 (sessions id), count Int64), for the
             vocabularies, which BARS fits on whole histories (pipeline/ctr_vocab.py); None elsewhere.
    """
    splits: dict[str, pl.DataFrame]
    items: pl.DataFrame
    steps: list[dict]
    n_items: int
    augment: dict[str, str]
    extra: dict[str, Any] = field(default_factory=dict)
    side: dict[str, Any] = field(default_factory=dict)
    overflow: Optional[pl.DataFrame] = None
    users: Optional[pl.DataFrame] = None


def step(name: str, sessions: int | None, clicks: int | None, items: int | None, rows: int | None = None) -> dict:
    """One entry of `ProtocolResult.steps` (plain ints so the manifest is canonical JSON); `rows` (CTR
    rows, whose clicks are the positive labels) only where given."""
    as_int = lambda v: None if v is None else int(v)  # noqa: E731
    counts = {"sessions": as_int(sessions), "clicks": as_int(clicks), "items": as_int(items)}
    return {"step": name, **counts} if rows is None else {"step": name, "rows": int(rows), **counts}


# protocols whose build also takes scratch=FOLDER: a folder next to the output for click-level
# spill files, alive until the result is written (srgnn on raw files larger than memory)
SPILLING = ("srgnn",)


def build_protocol(spec, raw_dir: Path, params, scratch: Path | None = None) -> ProtocolResult:
    """Run the protocol module named by `spec.protocol` on the raw folder (or the dataset's own
    `build`, for files its authors already split: the result follows the protocol's contract)."""
    if spec.protocol not in PROTOCOLS:
        raise unknown("protocol", spec.protocol, PROTOCOLS)
    if getattr(spec, "build", None) is not None:
        return spec.build(spec, Path(raw_dir), params)
    module = importlib.import_module(f"{__name__}.{spec.protocol}")
    if scratch is not None and spec.protocol in SPILLING:
        return module.build(spec, Path(raw_dir), params, scratch=Path(scratch))
    return module.build(spec, Path(raw_dir), params)


@contextlib.contextmanager
def reading(what: str, locate: Optional[Callable[[], Optional[str]]] = None):
    """Turn a Polars parse or schema error raised inside the block into a one-line `DataError`
    about `what` (e.g. the raw file); `locate()`, when given, names the file's first bad line in its place
    (DatasetSpec.locate), or None to keep Polars' words."""
    from ..errors import DataError
    try:
        yield
    except (pl.exceptions.ComputeError, pl.exceptions.InvalidOperationError, pl.exceptions.SchemaError,
            pl.exceptions.ShapeError, pl.exceptions.ColumnNotFoundError, pl.exceptions.NoDataError) as e:
        from ..errors import as_os_error
        if as_os_error(e) is not None:      # a disk that failed or filled (a streaming spill), not the file's content
            raise
        from ..errors import polars_said
        first = polars_said(str(e)) if str(e).strip() else type(e).__name__
        try:
            where = locate() if locate is not None else None
        except (OSError, DataError):        # the file went away meanwhile: Polars' words are all there is
            where = None
        raise DataError(f"could not read {what}: {where or first}",
                        "check that the raw file is the unmodified original (ids must be integers, "
                        "dates YYYY-MM-DD / ISO-8601)") from None


def locator(spec, raw_dir: Path) -> Optional[Callable[[], Optional[str]]]:
    """`reading`'s `locate` for a dataset: its DatasetSpec.locate on `raw_dir`, or None when it has none."""
    return (lambda: spec.locate(raw_dir)) if getattr(spec, "locate", None) else None


def collect(lf: pl.LazyFrame | list[pl.LazyFrame], what: str, locate: Optional[Callable[[], Optional[str]]] = None):
    """Collect one LazyFrame (or several at once, sharing their common sub-plans), turning a
    Polars parse or schema error into a one-line `DataError` about `what` (e.g. the raw file; `locate`: as
    `reading`'s)."""
    with reading(what, locate):
        if isinstance(lf, list):
            return pl.collect_all(lf)
        return lf.collect()
