"""Stage `augment`: prepared sessions -> (prefix, target) samples.

Modes (chosen per split by the protocol, recorded in the sessions manifest's "augment"):

    prefixes  a session s of length n gives n-1 samples (s[:-i], s[-i]) for i = 1..n-1, longest
              prefix first (PROTOCOLS.md §2 step 10, SR-GNN's `process_seqs`); for leave-one-out
              train rows these are the shifted next-item targets (§3)
    last      one sample (s[:-1], s[-1])  (leave-one-out valid / test rows)
    rows      the rows are copied as they are (CTR samples are already samples)

Prefixes are kept whole under the srgnn protocol (its samples are defined that way); under the
other protocols they keep their most recent `augment.max_len` items (0 = keep all).
Yoochoose fractions need nothing here: preprocess already cut the train sessions so that their
prefix samples are exactly the canonical 1/64 (1/4) (see `pipeline.protocols.srgnn`).

Vectorised in Polars (int ranges + explode + list slicing), in bounded memory: one input
shard at a time, cut into batches of at most `BATCH_CELLS` prefix items, written as fixed-size
output shards (row boundaries do not depend on the batching, and each shard is rechunked, so
the bytes do not either).
"""
from __future__ import annotations

from pathlib import Path

import polars as pl

from . import io
from .datasets import get
from .errors import DataError
from .params import Params, to_dict

MODES = ("prefixes", "last", "rows")
BATCH_CELLS = 20_000_000  # prefix items materialised at once (~80 MB of Int32 + copies)
SAMPLE_SCHEMA = {"session_id": pl.Int64, "prefix": pl.List(pl.Int32), "target": pl.Int32}


def prefix_samples(sessions: pl.DataFrame, max_len: int = 0) -> pl.DataFrame:
    """All (prefix, target) samples of `sessions` (session_id, items), longest prefix first.

    Session s of length n -> rows (s[max(0, k - max_len):k], s[k]) for k = n-1, ..., 1
    (max_len 0 keeps whole prefixes).
    """
    k = pl.col("k")
    start = pl.lit(0, pl.Int64) if max_len <= 0 else (k - max_len).clip(lower_bound=0)
    return (sessions.lazy()
            .select("session_id", "items",
                    pl.int_ranges(pl.col("items").list.len() - 1, 0, -1, dtype=pl.Int64).alias("k"))
            .explode("k")
            .select("session_id",
                    pl.col("items").list.slice(start, k - start).cast(pl.List(pl.Int32)).alias("prefix"),
                    pl.col("items").list.get(k).cast(pl.Int32).alias("target"))
            .collect())


def last_samples(sessions: pl.DataFrame, max_len: int = 0) -> pl.DataFrame:
    """One sample per session: (s[:-1], s[-1]) (prefix cut to its most recent max_len items)."""
    n = pl.col("items").list.len().cast(pl.Int64)  # list.len() is UInt32: n - 1 - max_len must not wrap
    start = pl.lit(0, pl.Int64) if max_len <= 0 else (n - 1 - max_len).clip(lower_bound=0)
    return (sessions.lazy().filter(n >= 2)
            .select("session_id",
                    pl.col("items").list.slice(start, n - 1 - start).cast(pl.List(pl.Int32)).alias("prefix"),
                    pl.col("items").list.last().cast(pl.Int32).alias("target"))
            .collect())


class ShardWriter:
    """Writes frames as `<split>/part-NNNNN.parquet` shards of exactly `rows` rows (the last one
    shorter; one empty shard when nothing came), whatever the sizes of the frames added."""

    def __init__(self, root: Path, split: str, rows: int, schema: dict):
        self.root, self.split, self.rows, self.schema = Path(root), split, rows, schema
        self.buffer: list[pl.DataFrame] = []
        self.buffered = 0
        self.entries: list[dict] = []
        (self.root / split).mkdir(parents=True, exist_ok=True)

    def _write(self, df: pl.DataFrame) -> None:
        rel = f"{self.split}/part-{len(self.entries):05d}.parquet"
        io.write_parquet(self.root / rel, df.rechunk())
        self.entries.append({"path": rel, "rows": df.height, "sha256": io.sha256_file(self.root / rel)})

    def add(self, df: pl.DataFrame) -> None:
        self.buffer.append(df)
        self.buffered += df.height
        while self.buffered >= self.rows:
            whole = pl.concat(self.buffer, how="vertical")
            self._write(whole.slice(0, self.rows))
            rest = whole.slice(self.rows)
            self.buffer, self.buffered = [rest], rest.height

    def close(self) -> list[dict]:
        if self.buffered or not self.entries:
            whole = pl.concat(self.buffer, how="vertical") if self.buffer else pl.DataFrame(schema=self.schema)
            self._write(whole)
        return self.entries


def _batches(shard: pl.DataFrame, budget: int):
    """Consecutive row slices of `shard` holding at most ~`budget` prefix items each."""
    if shard.height == 0:
        return
    n = shard.get_column("items").list.len().cast(pl.Int64)
    cells = (n * (n - 1) // 2 + n).cum_sum()
    batch = (cells - 1) // budget  # non-decreasing batch number per row
    bounds = batch.rle()
    start = 0
    for length in bounds.struct.field("len").to_list():
        yield shard.slice(start, length)
        start += length


def _split_files(src: Path, manifest: dict, split: str) -> list[Path]:
    files = [src / e["path"] for e in manifest.get("shards", []) if e["path"].startswith(f"{split}/")]
    return files or sorted((src / split).glob("part-*.parquet"))


def run(dataset: str, src: Path, dst: Path, params: Params) -> dict:
    """Augment the sessions folder `src` of `dataset` into the samples folder `dst`."""
    get(dataset)
    src, dst = Path(src), Path(dst)
    if not (src / io.MANIFEST).is_file():
        raise DataError(f"no {io.MANIFEST} in {src}: the sessions of '{dataset}' have not been prepared",
                        f"run `seqpe preprocess {dataset}` first")
    sessions_manifest = io.read_json(src / io.MANIFEST)
    io.verify_shards(src, sessions_manifest)
    protocol = sessions_manifest["protocol"]
    max_len = 0 if protocol == "srgnn" else params.augment.max_len
    modes = sessions_manifest.get("augment", {})
    manifest = {
        "stage": "augment", "dataset": dataset, "protocol": protocol,
        "params": {"augment": to_dict(params.augment), "max_len_applied": max_len,
                   "preprocess": sessions_manifest.get("params", {})},
        "source": sessions_manifest.get("source", {}), "steps": sessions_manifest.get("steps", []),
        "n_items": sessions_manifest["n_items"], "augment": dict(modes), "splits": {}, "shards": [],
        "sessions_manifest": io.sha256_file(src / io.MANIFEST),
    }
    longest = 0
    with io.atomic_dir(dst) as tmp:
        for split in io.SPLITS:
            mode = modes.get(split)
            if mode not in MODES:
                raise DataError(f"sessions manifest of '{dataset}' gives augment mode {mode!r} for {split}, "
                                f"expected one of {', '.join(MODES)}", f"re-run `seqpe preprocess {dataset}`")
            files = _split_files(src, sessions_manifest, split)
            schema = SAMPLE_SCHEMA if mode != "rows" else None
            writer = ShardWriter(tmp, split, params.augment.rows_per_shard, schema or {})
            n_sessions = clicks = 0
            for path in files:
                shard = pl.read_parquet(path)
                if mode == "rows":
                    writer.schema = dict(shard.schema)
                    writer.add(shard)
                    continue
                n_sessions += shard.height
                clicks += int(shard.get_column("items").list.len().sum() or 0)
                for batch in _batches(shard.select("session_id", "items"), BATCH_CELLS):
                    samples = (prefix_samples if mode == "prefixes" else last_samples)(batch, max_len)
                    if samples.height:
                        longest = max(longest, int(samples.get_column("prefix").list.len().max()))
                    writer.add(samples)
            entries = writer.close()
            rows = sum(e["rows"] for e in entries)
            manifest["shards"] += entries
            manifest["splits"][split] = ({"rows": rows} if mode == "rows"
                                         else {"samples": rows, "sessions": n_sessions, "clicks": clicks})
        manifest["max_len"] = longest
        io.write_json(tmp / io.MANIFEST, manifest)
    return manifest
