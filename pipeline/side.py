"""Side information of a dataset: item attributes and per-interaction context (CARCA, Rashed et al. 2022).

Absent for every dataset but those that carry it (CARCA's Amazon files, pipeline/datasets/carca.py):
nothing here runs, and no file or column exists, unless a dataset's build returns `ProtocolResult.side`.

On disk (sessions and samples folders alike; `seqpe augment` copies the table and cuts the columns):

    item_features.parquet   item_id Int32 (1..n_items, every item once, in order), features Array(Float32, A)
    manifest "side"         {"item_features": {"path": "item_features.parquet", "width": A},
                             "context": {"names": [...], "width": C}}   (either key may be missing)
    context columns         sessions: `context` List(Array(Float32, C)) aligned with `items`;
                            samples: shifted rows keep `context` (cut like `items`); (prefix, target) rows
                            have `prefix_context` (aligned with `prefix`) and `target_context` Array(Float32, C),
                            the context of the interaction being predicted (CARCA scores every candidate
                            with it: its code gives the negatives the positive's context)

In memory (pipeline/batches.Samples): context (S, L, C) float32 left-padded like seqs (0 at padding),
target_context (S, C); item features (N, A) float32 with row 0 (the padding item) zero. Only a model
that declares it (ModelSpec.side) gets them (pipeline/train/tasks.py); the others never load them.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import polars as pl

from . import io
from .errors import DataError

ITEM_FEATURES = "item_features.parquet"
FIX = "re-run `seqpe preprocess` and `seqpe augment` for this dataset"


@dataclass(frozen=True)
class SideInfo:
    """What a side-information model is built with (pipeline/train/tasks.py -> ModelSpec.build(side=...))."""
    item_features: Optional[np.ndarray] = None     # (N, A) float32, row 0 (padding) zero; None: no attributes
    context_names: tuple[str, ...] = field(default_factory=tuple)   # the C per-interaction features

    @property
    def context_width(self) -> int:
        return len(self.context_names)


# --------------------------------------------------------------------------- preprocess / augment

def write(root: Path, side: dict, n_items: int, splits: dict) -> tuple[dict, list[dict]]:
    """Write a ProtocolResult's side information under `root` (the sessions folder being built):
    (the manifest's "side" entry, shard entries of the files written). Checks its shape first."""
    out, entries = {}, []
    features = side.get("item_features")
    if features is not None:
        ids = features.get_column("item_id")
        if features.height != n_items or not ids.equals(pl.int_range(1, n_items + 1, dtype=ids.dtype, eager=True)):
            raise DataError(f"the item features cover {features.height} rows, not items 1..{n_items} in order",
                            "this is a bug in the dataset module: report it")
        width = features.schema["features"].size
        frame = features.select(pl.col("item_id").cast(pl.Int32), pl.col("features").cast(pl.Array(pl.Float32, width)))
        io.write_parquet(Path(root) / ITEM_FEATURES, frame)
        entries.append(io.shard_entry(root, ITEM_FEATURES))
        out["item_features"] = {"path": ITEM_FEATURES, "width": int(width)}
    names = side.get("context")
    if names:
        for split, df in splits.items():
            want = pl.List(pl.Array(pl.Float32, len(names)))
            if df.schema.get("context") != want:
                raise DataError(f"the {split} split has no `context` column of type {want}",
                                "this is a bug in the dataset module: report it")
        out["context"] = {"names": list(names), "width": len(names)}
    return out, entries


def copy_files(src: Path, dst: Path, side: dict) -> list[dict]:
    """Copy the side tables of sessions folder `src` into the samples folder `dst` being built."""
    entries = []
    if "item_features" in side:
        rel = side["item_features"]["path"]
        shutil.copyfile(Path(src) / rel, Path(dst) / rel)
        entries.append(io.shard_entry(dst, rel))
    return entries


def columns(names: list[str]) -> list[str]:
    """The session columns `seqpe augment` reads: session_id, items, and context when there."""
    return ["session_id", "items"] + (["context"] if "context" in names else [])


def sample_schema(mode: str, width: int) -> dict:
    """Extra columns of an empty samples shard whose sessions carry context of `width`."""
    array = pl.Array(pl.Float32, width)
    if mode == "shifted":
        return {"context": pl.List(array)}
    return {"prefix_context": pl.List(array), "target_context": array}


def last_context(sessions: pl.DataFrame, mode: str, max_len: int) -> pl.DataFrame:
    """The context columns of augment mode `last` (one sample per session of >= 2 items, in order):
    prefix_context = context[:-1] cut to its most recent max_len (0 = whole), target_context = context[-1]."""
    if mode != "last":
        raise DataError(f"per-interaction context is carried for leave-one-out rows (augment modes shifted and "
                        f"last), not for mode {mode!r}", FIX)
    n = pl.col("context").list.len()
    head = pl.col("context").list.head(n - 1)
    return (sessions.filter(pl.col("items").list.len() >= 2)
            .select(prefix_context=head.list.tail(max_len) if max_len > 0 else head,
                    target_context=pl.col("context").list.last()))


# --------------------------------------------------------------------------- training

def item_features(root: Path, manifest: dict) -> Optional[np.ndarray]:
    """The samples folder's item features as an (N, A) float32 matrix, row 0 (padding) zero; None if none."""
    entry = (manifest.get("side") or {}).get("item_features")
    if entry is None:
        return None
    n_items = int(manifest["n_items"])
    df = pl.read_parquet(Path(root) / entry["path"], glob=False)
    if df.height != n_items or df.get_column("item_id").to_numpy().tolist() != list(range(1, n_items + 1)):
        raise DataError(f"{Path(root) / entry['path']} does not hold items 1..{n_items} in order", FIX)
    out = np.zeros((n_items + 1, int(entry["width"])), dtype=np.float32)        # (N, A)
    out[1:] = df.get_column("features").to_numpy()
    return out


def context_names(manifest: dict) -> tuple[str, ...]:
    return tuple((manifest.get("side") or {}).get("context", {}).get("names", ()))


def flat_context(col: pl.Series, width: int) -> np.ndarray:
    """A List(Array(Float32, C)) column -> its (total, C) float32 values, rows concatenated."""
    flat = col.explode(empty_as_null=False)
    if flat.null_count():
        raise DataError("a samples shard holds a missing (null) context vector", FIX)
    values = flat.to_numpy() if flat.len() else np.zeros((0, width), dtype=np.float32)
    return np.asarray(values, dtype=np.float32).reshape(-1, width)


def pad_left_rows(values: np.ndarray, lengths: np.ndarray, max_len: int) -> np.ndarray:
    """Rows of concatenated lists `values` (total, C) right-aligned into (S, max_len, C), 0 at padding
    (pipeline.batches.pad_left for vectors)."""
    n, width = lengths.shape[0], values.shape[1]
    out = np.zeros((n, max_len, width), dtype=np.float32)                      # (S, L, C)
    if values.shape[0] == 0:
        return out
    lengths = lengths.astype(np.int64)
    rows = np.repeat(np.arange(n, dtype=np.int64), lengths)                    # (total,)
    starts = np.cumsum(lengths) - lengths
    cols = (max_len - lengths)[rows] + (np.arange(values.shape[0], dtype=np.int64) - starts[rows])  # (total,)
    out[rows, cols] = values
    return out


def prefix_context(df: pl.DataFrame, lengths: np.ndarray, max_len: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(prefix, target) rows with prefix_context / target_context -> (context (S, L, C), target_context (S, C)),
    the prefix context cut to its most recent max_len like the prefix (pipeline.batches.frame_to_samples)."""
    cut = df.get_column("prefix_context").list.tail(max_len)
    if not np.array_equal(cut.list.len().to_numpy(), lengths):
        raise DataError("a sample's prefix_context is not aligned with its prefix", FIX)
    target = df.get_column("target_context")
    if target.null_count():
        raise DataError("a sample has no target_context", FIX)
    tvalues = target.to_numpy() if target.len() else np.zeros((0, width), dtype=np.float32)
    return (pad_left_rows(flat_context(cut, width), lengths, max_len),
            np.array(tvalues, dtype=np.float32).reshape(-1, width))            # a writable copy


def expand_shifted(rows: pl.DataFrame, max_len: int, width: int) -> dict[str, np.ndarray]:
    """Shifted rows (session_id, items, context) -> every (prefix, next item) pair with its context, as
    the arrays of pipeline.batches.Samples, in the order (and with the cuts) of
    `augment.prefix_samples` + `frame_to_samples`: seqs (S, L), targets (S,), lengths (S,),
    context (S, L, C), target_context (S, C). Positions come from augment's own `plan`."""
    from .augment import plan
    p = plan(rows.select("session_id", "items"), "prefixes", max_len)           # pairs as flat positions
    ctx = flat_context(rows.get_column("context"), width)                        # (T, C) aligned with p.flat
    if ctx.shape[0] != p.flat.shape[0]:
        raise DataError("a shifted row's context is not aligned with its items", FIX)
    start, end = p.start, p.end                                                  # (S,), (S,)
    slot = end[:, None] - max_len + np.arange(max_len, dtype=np.int64)[None, :]  # (S, L) flat index per column
    real = slot >= start[:, None]                                                # (S, L)
    slot = np.where(real, slot, 0)
    return {"seqs": np.where(real, p.flat[slot], 0).astype(np.int32),            # (S, L)
            "targets": p.flat[end].astype(np.int32),                             # (S,)
            "lengths": (end - start).astype(np.int32),                           # (S,)
            "context": np.where(real[..., None], ctx[slot], 0).astype(np.float32),  # (S, L, C)
            "target_context": ctx[end]}                                          # (S, C)
