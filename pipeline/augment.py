"""Stage `augment`: prepared sessions -> (prefix, target) samples.

Modes (chosen per split by the protocol, recorded in the sessions manifest's "augment"):

    prefixes  a session s of length n gives n-1 samples (s[:-i], s[-i]) for i = 1..n-1, longest
              prefix first (REFERENCE.md §2 step 10, SR-GNN's `process_seqs`)
    shifted   one row per session holding its most recent `augment.max_len` + 1 items: inputs
              items[:-1], shifted targets items[1:] (REFERENCE.md §3, leave-one-out train rows:
              "a user's train sequence predicts every next item, truncated to the most recent
              max_len"); training expands a row into its (prefix, target) pairs
              (`pipeline.batches`), so the rows stay O(clicks) on disk however long the users
    last      one sample (s[:-1], s[-1])  (leave-one-out valid / test rows)
    rows      CTR rows are already samples: every id goes through the dataset's vocabularies,
              fitted first on train.csv's rows (train + valid, or train only: augment.ctr_vocab;
              `pipeline.ctr_vocab`: BARS/FuxiCTR min-count rule,
              0 padding, 1 out-of-vocabulary); the mappings are written to vocab/<table>.parquet
              and the manifest's `ctr` section says what the trainer needs (fields, tables, sizes)

Side information (pipeline/side.py; only datasets that have it): the item-features table is copied,
and a sessions `context` column is cut like `items` (shifted) or split into prefix_context /
target_context (last).

Prefixes are kept whole under the srgnn protocol (its samples are defined that way); under the
other protocols they keep their most recent `augment.max_len` items (0 = keep all).
Yoochoose fractions need nothing here: preprocess already cut the train sessions so that their
prefix samples are exactly the canonical 1/64 (1/4) (see `pipeline.protocols.srgnn`).

Vectorised in numpy over the Arrow buffers of the `items` column, never copying a session
per sample: every sample is a pair of positions (start, end) in the flat item array (prefix
flat[start:end], target flat[end]); the prefix values are gathered in small index blocks and
the list column is assembled from offsets + values (`pyarrow.LargeListArray.from_arrays`, no
copy into Polars). Bounded memory: one input shard at a time, planned in batches of at most
`BATCH_SAMPLES` samples, built in pieces of at most `BATCH_CELLS` prefix items that end where
an output shard ends (so a shard is usually one piece and is written without a copy). Output
shards have fixed row counts and are always written from freshly built arrays (one piece, or
pieces concatenated and rechunked; never a sliced view, whose list pages Polars' writer splits
differently), so neither rows nor bytes depend on the batching.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl
import pyarrow as pa

from . import ctr_vocab, io, side
from .datasets import get
from .errors import DataError
from .params import Params, to_dict
from .protocols import AUGMENT_READS, read_keys

MODES = ("prefixes", "shifted", "last", "rows")
BATCH_SAMPLES = 4_000_000  # samples planned at once (three int64 positions each + transients)
BATCH_CELLS = 1 << 27  # prefix items built at once (512 MB of Int32): an output shard up to this is one piece
GATHER_CELLS = 1 << 16  # prefix items gathered per index block (the int64 block stays in cache)
SAMPLE_SCHEMA = {"session_id": pl.Int64, "prefix": pl.List(pl.Int32), "target": pl.Int32}
SHIFTED_SCHEMA = {"session_id": pl.Int64, "items": pl.List(pl.Int32)}


class Plan(NamedTuple):
    """Samples of a batch of sessions as positions in its flat item array: sample j is
    (ids[j], flat[start[j]:end[j]], flat[end[j]])."""
    ids: pl.Series  # session_id of each sample (input dtype)
    flat: np.ndarray  # (clicks,) int32: the sessions' items, concatenated
    start: np.ndarray  # (samples,) int64
    end: np.ndarray  # (samples,) int64

    def __len__(self) -> int:
        return len(self.end)


class _ArrowArray:
    """Hands an Arrow array to Polars through the Arrow PyCapsule interface (zero-copy; unlike
    `pl.from_arrow`, it does not import pyarrow.compute, ~0.06 s of every augment process)."""

    def __init__(self, array: pa.Array):
        self.array = array

    def __arrow_c_array__(self, requested_schema=None):
        return self.array.__arrow_c_array__(requested_schema)


def _flat(items: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """List column -> (offsets (n+1,) int64 into flat, flat values int32), from its Arrow buffers."""
    if items.dtype != pl.List(pl.Int32):
        items = items.cast(pl.List(pl.Int32))
    arr = items.rechunk().to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    offsets = arr.offsets.to_numpy().astype(np.int64, copy=False)  # already shifted by the array's offset
    values = arr.values.slice(0, int(offsets[-1]))  # offsets index the unsliced values
    if arr.null_count or values.slice(int(offsets[0])).null_count:
        raise DataError("a sessions shard has a missing (null) item list or item id",
                        "re-run `seqpe preprocess` (or the import) that wrote it")
    return offsets, values.to_numpy(zero_copy_only=True)


def plan(sessions: pl.DataFrame, mode: str, max_len: int = 0) -> Plan:
    """Positions of the samples of `sessions` (session_id, items) under mode prefixes / last.

    A session with items at flat[o:o+n] gives, for k = n-1, ..., 1 (prefixes) or k = n-1 only
    (last, n >= 2), end = o + k and start = max(o, end - max_len) (max_len 0 keeps all).
    """
    offsets, flat = _flat(sessions.get_column("items"))
    n = np.diff(offsets)
    if mode == "prefixes":
        m = np.maximum(n - 1, 0)  # (sessions,) samples per session
        total = int(m.sum())
        row = np.repeat(np.arange(len(n), dtype=np.int64), m)  # (samples,) session of each sample
        first = np.cumsum(m) - m  # index of each session's first sample
        end = np.repeat(offsets[:-1] + n - 1 + first, m) - np.arange(total, dtype=np.int64)  # o + k, k falling
    else:
        row = np.flatnonzero(n >= 2)
        end = offsets[1:][row] - 1
    begin = offsets[:-1][row]
    start = begin if max_len <= 0 else np.maximum(begin, end - max_len)
    return Plan(sessions.get_column("session_id").gather(row), flat, start, end)


def build(p: Plan, a: int = 0, b: int | None = None) -> pl.DataFrame:
    """Samples a..b of plan `p` as a frame (session_id, prefix List(Int32), target Int32)."""
    b = len(p) if b is None else b
    start, end = p.start[a:b], p.end[a:b]
    lens = end - start
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    cells = int(offsets[-1])
    values = np.empty(cells, dtype=np.int32)
    # value i of sample j is flat[start[j] + i - offsets[j]]: indices made and used block by block
    delta = start - offsets[:-1]
    cuts = np.unique(np.append(np.searchsorted(offsets, np.arange(0, cells, GATHER_CELLS), side="right") - 1,
                               len(lens)))
    if len(cuts) > 1:
        ramp = np.arange(int(np.diff(offsets[cuts]).max()), dtype=np.int64)
        for j0, j1 in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
            lo, hi = int(offsets[j0]), int(offsets[j1])
            idx = np.repeat(delta[j0:j1] + lo, lens[j0:j1])  # (hi - lo,) int64
            idx += ramp[:hi - lo]
            np.take(p.flat, idx, out=values[lo:hi])
    prefix = pl.Series("prefix", _ArrowArray(pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))))
    return pl.DataFrame([p.ids.slice(a, b - a).alias("session_id"), prefix.alias("prefix"),
                         pl.Series("target", p.flat[end], dtype=pl.Int32)])


def prefix_samples(sessions: pl.DataFrame, max_len: int = 0) -> pl.DataFrame:
    """All (prefix, target) samples of `sessions` (session_id, items), longest prefix first.

    Session s of length n -> rows (s[max(0, k - max_len):k], s[k]) for k = n-1, ..., 1
    (max_len 0 keeps whole prefixes).
    """
    return build(plan(sessions, "prefixes", max_len))


def shifted_samples(sessions: pl.DataFrame, max_len: int = 0) -> pl.DataFrame:
    """One row (session_id, items) per session of >= 2 items, keeping its most recent max_len + 1
    items (max_len 0 keeps all): inputs items[:-1], targets items[1:]. A `context` column (side
    information, pipeline/side.py) is kept and cut alike."""
    cut = (lambda e: e.list.tail(max_len + 1)) if max_len > 0 else (lambda e: e)
    cols = [pl.col("session_id").cast(pl.Int64), cut(pl.col("items").cast(pl.List(pl.Int32)))]
    if "context" in sessions.columns:
        cols.append(cut(pl.col("context")))
    return sessions.lazy().filter(pl.col("items").list.len() >= 2).select(cols).collect()


def last_samples(sessions: pl.DataFrame, max_len: int = 0) -> pl.DataFrame:
    """One sample per session: (s[:-1], s[-1]) (prefix cut to its most recent max_len items)."""
    return build(plan(sessions, "last", max_len))


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


def _batches(shard: pl.DataFrame, mode: str, budget: int):
    """Consecutive row slices of `shard` giving at most ~`budget` samples each (a session with
    more samples is a slice of its own)."""
    if shard.height == 0:
        return
    n = shard.get_column("items").list.len().cast(pl.Int64)
    count = (n - 1).clip(lower_bound=0) if mode == "prefixes" else (n >= 2).cast(pl.Int64)
    batch = (count.cum_sum() - 1) // budget  # non-decreasing batch number per row
    start = 0
    for length in batch.rle().struct.field("len").to_list():
        yield shard.slice(start, length)
        start += length


def _pieces(p: Plan, filled: int, rows: int):
    """Sample ranges (a, b) of plan `p` that end where an output shard of `rows` rows ends (the
    current one has `filled` rows already) and hold at most ~BATCH_CELLS prefix items."""
    cells = np.zeros(len(p) + 1, dtype=np.int64)
    np.cumsum(p.end - p.start, out=cells[1:])
    a = 0
    while a < len(p):
        cap = int(np.searchsorted(cells, cells[a] + BATCH_CELLS, side="right")) - 1
        b = min(len(p), a + rows - filled, max(a + 1, cap))
        yield a, b
        filled = (filled + b - a) % rows
        a = b


def _split_files(src: Path, manifest: dict, split: str) -> list[Path]:
    files = [src / e["path"] for e in manifest.get("shards", []) if e["path"].startswith(f"{split}/")]
    return files or sorted((src / split).glob("part-*.parquet"))


@io.claims_released()
def run(dataset: str, src: Path, dst: Path, params: Params) -> dict:
    """Augment the sessions folder `src` of `dataset` into the samples folder `dst`.

    `dataset` is a registered name, or the name a `seqpe import` gave the sessions (their manifest
    says stage "import" and carries the protocol and augment modes, which is all augment reads)."""
    src, dst = Path(src), Path(dst)
    peek = io.read_json(src / io.MANIFEST) if (src / io.MANIFEST).is_file() else None
    named = peek.get("dataset") if isinstance(peek, dict) else None
    # an imported name is known by its manifest alone; a folder of another dataset is said by require_kind
    # (it was "unknown dataset 'sample_rt'" for an imported name given with another dataset's folder)
    if not (isinstance(named, str) and (named != dataset or peek.get("stage") == "import")):
        get(dataset)
    sessions_manifest = io.require_kind(src, "sessions", dataset, "augment")
    io.claim_dir(dst, dataset, "samples")
    io.verify_shards(src, sessions_manifest)
    protocol = sessions_manifest["protocol"]
    max_len = 0 if protocol in ("srgnn", "ctr") else params.augment.max_len   # CTR: preprocess.max_history cuts
                                                                                   # (walk 43d #2: recorded as applied)
    modes = sessions_manifest.get("augment", {})
    side_info = sessions_manifest.get("side") or {}      # item attributes / interaction context (pipeline/side.py)
    manifest = {
        "stage": "augment", "kind": "samples", "dataset": dataset, "protocol": protocol,
        "params": {"augment": read_keys(to_dict(params.augment), AUGMENT_READS.get(protocol, ())),
                   "max_len_applied": max_len,
                   "preprocess": sessions_manifest.get("params", {})},
        "source": sessions_manifest.get("source", {}), "steps": sessions_manifest.get("steps", []),
        "n_items": sessions_manifest["n_items"], "augment": dict(modes), "splits": {}, "shards": [],
        "sessions_manifest": io.sha256_file(src / io.MANIFEST),
    }
    longest = 0
    ctr = None
    if protocol == "ctr":  # vocabularies first: counted on train.csv's rows (augment.ctr_vocab), applied to every split
        layout = ctr_vocab.Layout.from_manifest(sessions_manifest, dataset)
        counted = ctr_vocab.COUNTED_ON[params.augment.ctr_vocab]
        files = [f for split in counted for f in _split_files(src, sessions_manifest, split)]
        cut = ctr_vocab.overflow_counts(src, sessions_manifest, counted)
        ctr = (layout, ctr_vocab.fit(files, layout, cut), {s: ctr_vocab.Tally() for s in io.SPLITS}, counted)
    with io.atomic_dir(dst) as tmp:
        for split in io.SPLITS:
            mode = modes.get(split)
            if mode not in MODES:
                raise DataError(f"sessions manifest of '{dataset}' gives augment mode {mode!r} for {split}, "
                                f"expected one of {', '.join(MODES)}", f"re-run `seqpe preprocess {dataset}`")
            files = _split_files(src, sessions_manifest, split)
            schema = {"rows": None, "shifted": SHIFTED_SCHEMA}.get(mode, SAMPLE_SCHEMA)
            if "context" in side_info and mode != "rows":
                schema = {**schema, **side.sample_schema(mode, side_info["context"]["width"])}
            writer = ShardWriter(tmp, split, params.augment.rows_per_shard, schema or {})
            n_sessions = clicks = targets = 0
            for path in files:
                shard = pl.read_parquet(path, glob=False)
                if mode == "rows":
                    if ctr is not None:
                        shard = ctr_vocab.remap(shard, *ctr[:2], ctr[2][split])
                    writer.schema = dict(shard.schema)
                    writer.add(shard)
                    continue
                n_sessions += shard.height
                clicks += int(shard.get_column("items").list.len().sum() or 0)
                keep = side.columns(shard.columns)
                if mode == "shifted":
                    rows_ = shifted_samples(shard.select(keep), max_len)
                    n = rows_.get_column("items").list.len()
                    targets += int((n - 1).sum() or 0)
                    longest = max(longest, int((n - 1).max() or 0))
                    writer.add(rows_)
                    continue
                for batch in _batches(shard.select(keep), mode, BATCH_SAMPLES):
                    p = plan(batch, mode, max_len)
                    ctx = side.last_context(batch, mode, max_len) if "context" in keep else None
                    if len(p):
                        longest = max(longest, int((p.end - p.start).max()))
                    for a, b in _pieces(p, writer.buffered, writer.rows) if len(p) else [(0, 0)]:
                        writer.add(build(p, a, b) if ctx is None else build(p, a, b).hstack(ctx.slice(a, b - a)))
            entries = writer.close()
            rows = sum(e["rows"] for e in entries)
            manifest["shards"] += entries
            if mode == "rows":
                manifest["splits"][split] = {"rows": rows}
            elif mode == "shifted":  # samples = (prefix, target) pairs the rows expand to
                manifest["splits"][split] = {"samples": targets, "rows": rows, "sessions": n_sessions,
                                             "clicks": clicks}
            else:
                manifest["splits"][split] = {"samples": rows, "sessions": n_sessions, "clicks": clicks}
        if side_info:
            manifest["side"] = side_info
            manifest["shards"] += side.copy_files(src, tmp, side_info)
        manifest["max_len"] = longest
        if ctr is not None:
            layout, vocabs, tallies, counted = ctr
            manifest["shards"] += ctr_vocab.write_vocabs(tmp, vocabs, layout)
            manifest["ctr"] = ctr_vocab.manifest_section(
                layout, vocabs, tallies, int(sessions_manifest.get("protocol_info", {}).get("max_history", 0)), counted)
            manifest["max_len"] = manifest["ctr"]["longest_history"]
        io.write_json(tmp / io.MANIFEST, manifest)
    return manifest
