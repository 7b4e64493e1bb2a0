"""CTR vocabularies and id remapping: the augment stage under protocol "ctr" (issue 11 item 2).

The BARS configs embed every categorical id through a vocabulary fitted on the training rows
(FuxiCTR's `Tokenizer`, `min_categr_count` per dataset: 1 for AmazonElectronics_x1, 10 for
KuaiVideo_x1). seqpe applies the same rule, exactly:

1. Each column is counted on its own, over the rows of the published train.csv (test never
   counts): a scalar column counts each row's id, a sequence column counts every token of every
   row, the whole raw history as FuxiCTR's `count_tokens` does (it cuts to max_len only when it
   encodes a row): the most recent `max_history` ids preprocess stored plus the older ones it cut,
   counted in the sessions' history_overflow.parquet (walk 39a #1; sessions preprocessed before it
   existed count the stored ids only). Which rows is
   `augment.ctr_vocab`:
   - "train_file" (default): train + valid, i.e. the whole train.csv, since seqpe's valid is
     carved out of it (pipeline.protocols.ctr). BARS fits its vocabularies on the whole train.csv
     (it validates on test.csv), so the tables keep BARS's ids: same sizes, same OOV tokens in
     test (numbered as point 4 says). Counting ids reads no label; an id that occurs only in valid
     rows gets an embedding row that training never updates, where "train" would send it to the
     trained OOV row.
   - "train": the train split only, as if valid were unseen data too (valid's own ids are OOV).
     On `sample_kuai` this keeps 693 items and 564 users instead of BARS's 751 and 640.
2. A column keeps the ids whose count in THAT column is >= min_count (counts of different
   columns are never added).
3. A table's vocabulary is the union of the kept ids of every column that shares it (FuxiCTR
   merges a shared sequence's vocabulary into the shared table, `Tokenizer.merge_vocab`): an id
   is kept if it passes in ANY of its table's columns.
4. Dense ids per table: 0 padding, 1 out-of-vocabulary (every id not kept, in any split),
   kept ids from 2 in ascending raw-id order (FuxiCTR orders by count; ascending ids make the
   numbering deterministic without ties).

Tables (from the dataset's options, `pipeline.datasets.ctr.OPTIONS`, as recorded in the sessions
manifest): one per field (item: the target item, the history items and the extra item
sequences; cate: the target and history categories) and one per other categorical feature
(KuaiVideo: user). The group column (the raw user id, gAUC's group) is copied, not embedded.

Sessions hold item / category ids as raw BARS id + 1 and users as raw ids (pipeline.protocols.ctr);
the mapping files `vocab/<table>.parquet` give raw_id (the BARS id), id (the vocab id) and the
count of every column of the table (over the splits counted), for kept ids only.

Memory: counting and remapping go one shard at a time, numpy over the Arrow buffers of each
column: counts by `np.bincount` (ids are dense in BARS files), ids through a lookup table indexed
by id; ids too large for either (>= LUT_LIMIT) are counted by `np.unique` and mapped by binary
search in the sorted kept ids. Both paths give the same ids.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from . import io
from .errors import DataError

LUT_LIMIT = 1 << 25   # largest id served by a lookup table (128 MB of int32); larger ids: binary search
COUNT_BLOCK = 1 << 24  # tokens counted per np.bincount call
PAD, OOV, FIRST = 0, 1, 2
FEATURE_PREFIX = "feature_"
RULE = ("FuxiCTR Tokenizer: each column counted separately on the splits in counted_on (sequence columns: "
        "every token of every row); a column keeps ids with count >= min_count; a table's vocabulary is the "
        "union of its columns' kept ids; 0 padding, 1 out-of-vocabulary, kept ids from 2 in ascending raw-id order")
COUNTED_ON = {"train_file": ("train", "valid"), "train": ("train",)}   # augment.ctr_vocab -> splits counted


@dataclass(frozen=True)
class Layout:
    """Which sessions columns make a CTR sample (a dataset's options["ctr"])."""
    min_count: int
    fields: tuple[str, ...]
    target: dict
    history: dict
    extra: dict = field(default_factory=dict)
    features: tuple[str, ...] = ()
    group: str = "user"
    label: str = "label"

    @classmethod
    def from_manifest(cls, manifest: dict, dataset: str) -> "Layout":
        opts = (manifest.get("params", {}).get("options") or {}).get("ctr")
        if not isinstance(opts, dict):
            raise DataError(f"the sessions manifest of '{dataset}' has no CTR layout (params.options.ctr)",
                            f"re-run `seqpe preprocess {dataset}` with this version of seqpe")
        try:
            layout = cls(min_count=int(opts["min_count"]), fields=tuple(opts["fields"]), target=dict(opts["target"]),
                         history=dict(opts["history"]), extra=dict(opts.get("extra", {})),
                         features=tuple(opts.get("features", ())), group=opts.get("group", "user"),
                         label=opts.get("label", "label"))
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"the CTR layout of '{dataset}' is incomplete ({e})",
                            "fix OPTIONS in pipeline/datasets/ctr.py and re-run `seqpe preprocess`") from None
        if not layout.fields or set(layout.fields) - set(layout.target) or set(layout.fields) - set(layout.history):
            raise DataError(f"the CTR layout of '{dataset}' names fields {list(layout.fields)} without a target and "
                            "history column each", "fix OPTIONS in pipeline/datasets/ctr.py")
        return layout

    def tables(self) -> dict[str, list[str]]:
        """table -> the sessions columns it maps (the first field's table also takes the extra sequences)."""
        out = {f: [self.target[f], self.history[f]] for f in self.fields}
        out[self.fields[0]] += list(self.extra.values())
        out.update({name: [name] for name in self.features})
        return out

    def shift(self, table: str) -> int:
        """raw id = sessions id - shift (fields hold raw + 1, features raw ids)."""
        return 1 if table in self.fields else 0


@dataclass
class Vocab:
    """One table: kept ids (sessions id space, ascending) -> FIRST + rank; anything else -> OOV."""
    table: str
    keys: np.ndarray                 # (kept,) int64 ascending
    counts: pl.DataFrame             # key, count_<column>... (kept ids only)
    lut: np.ndarray | None = None    # (max key + 2,) int32, last entry OOV (ids beyond it are clipped to it)

    def __post_init__(self):
        if self.keys.size and int(self.keys[-1]) < LUT_LIMIT:
            self.lut = np.full(int(self.keys[-1]) + 2, OOV, dtype=np.int32)
            self.lut[self.keys] = np.arange(FIRST, FIRST + self.keys.size, dtype=np.int32)

    @property
    def rows(self) -> int:
        return FIRST + int(self.keys.size)

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """(n,) non-negative ids (any integer dtype) -> (n,) int32 vocab ids."""
        if self.lut is not None:
            return self.lut[np.minimum(ids, self.lut.size - 1)]
        if not self.keys.size:
            return np.full(ids.shape, OOV, dtype=np.int32)
        at = np.minimum(np.searchsorted(self.keys, ids), self.keys.size - 1)
        return np.where(self.keys[at] == ids, at + FIRST, OOV).astype(np.int32)


def _counts(files: list[Path], column: str) -> pl.DataFrame:
    """(key Int64, count Int64) of one column over the shard files (list columns: every token),
    one shard at a time: ids below LUT_LIMIT by np.bincount into one dense array, larger ones by
    np.unique, merged at the end. (A Polars streaming explode + group-by over all shards held the
    exploded column: 9.9 GB on KuaiVideo's 1.7 billion train tokens.)"""
    dense, sparse = np.zeros(0, dtype=np.int64), []
    for path in files:
        s = pl.read_parquet(path, columns=[column], glob=False).get_column(column)
        values = _list_parts(s)[1] if isinstance(s.dtype, pl.List) else s.drop_nulls().to_numpy()
        if not values.size:
            continue
        if int(values.max()) < LUT_LIMIT:
            top = int(values.max()) + 1
            if top > dense.size:
                dense = np.concatenate([dense, np.zeros(top - dense.size, dtype=np.int64)])
            for a in range(0, values.size, COUNT_BLOCK):     # bincount copies its input to int64
                dense[:top] += np.bincount(values[a:a + COUNT_BLOCK], minlength=top)
        else:
            keys, c = np.unique(values, return_counts=True)
            sparse.append(pl.DataFrame({"key": keys.astype(np.int64), "count": c.astype(np.int64)}))
    seen = np.flatnonzero(dense)
    frames = [pl.DataFrame({"key": seen.astype(np.int64), "count": dense[seen]})] + sparse
    return pl.concat(frames).group_by("key").agg(pl.col("count").sum()).sort("key")


def overflow_counts(src: Path, sessions_manifest: dict, counted: tuple[str, ...]) -> pl.DataFrame | None:
    """(column, key, count) of the history tokens preprocess cut off the rows of the `counted` splits, from the
    sessions folder's history_overflow.parquet; None where the sessions have none (older than the file)."""
    from .protocols.ctr import OVERFLOW_FILE
    if not any(e.get("path") == OVERFLOW_FILE for e in sessions_manifest.get("shards", [])):
        return None
    return (pl.read_parquet(Path(src) / OVERFLOW_FILE, glob=False).filter(pl.col("split").is_in(list(counted)))
              .group_by("column", "key").agg(pl.col("count").sum()))


def fit(files: list[Path], layout: Layout, cut: pl.DataFrame | None = None) -> dict[str, Vocab]:
    """The vocabularies of every table, counted on `files` (the shards of the splits counted) by the module's
    rule, plus `cut` (overflow_counts: the history tokens preprocess cut off those rows)."""
    vocabs = {}
    for table, columns in layout.tables().items():
        merged = None
        for col in columns:
            c = _counts(files, col)
            if cut is not None:
                extra = cut.filter(pl.col("column") == col).select("key", "count")
                if extra.height:
                    c = pl.concat([c, extra]).group_by("key").agg(pl.col("count").sum()).sort("key")
            c = c.rename({"count": f"count_{col}"})
            merged = c if merged is None else merged.join(c, on="key", how="full", coalesce=True)
        merged = merged.with_columns(pl.exclude("key").fill_null(0))
        kept = (merged.filter(pl.any_horizontal(pl.exclude("key") >= layout.min_count)).sort("key")
                      .select("key", *[f"count_{c}" for c in columns]))
        vocabs[table] = Vocab(table, kept.get_column("key").to_numpy().astype(np.int64), kept)
    return vocabs


def vocab_frame(v: Vocab, layout: Layout) -> pl.DataFrame:
    """What `vocab/<table>.parquet` holds: raw_id (BARS id), id (vocab id), counts per column (splits counted)."""
    return v.counts.select((pl.col("key") - layout.shift(v.table)).alias("raw_id"),
                           pl.int_range(FIRST, FIRST + v.counts.height, dtype=pl.Int32).alias("id"),
                           pl.exclude("key"))


def _list_parts(s: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """List column -> (offsets (n+1,) from 0, values) from its Arrow buffers."""
    arr = s.rechunk().to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    offsets = arr.offsets.to_numpy().astype(np.int64)
    if arr.null_count:
        raise DataError(f"a CTR sessions shard has a null {s.name} list", "re-run `seqpe preprocess` for this dataset")
    values = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0])).to_numpy(zero_copy_only=False)
    return offsets - offsets[0], values


@dataclass
class Tally:
    """OOV counts of one split, per table: tokens seen, tokens that became OOV, rows with an OOV."""
    tokens: dict = field(default_factory=dict)
    oov: dict = field(default_factory=dict)
    rows: dict = field(default_factory=dict)
    longest: int = 0

    def add(self, table: str, tokens: int, oov: int, rows: int) -> None:
        for d, v in ((self.tokens, tokens), (self.oov, oov), (self.rows, rows)):
            d[table] = d.get(table, 0) + int(v)


def remap(shard: pl.DataFrame, layout: Layout, vocabs: dict[str, Vocab], tally: Tally) -> pl.DataFrame:
    """A sessions shard -> samples rows: ids of every table column through its vocabulary, feature
    columns added as `feature_<name>` (Int32), the group and the other columns as they are."""
    out = {c: shard.get_column(c) for c in shard.columns}
    for table, columns in layout.tables().items():
        v, has_oov = vocabs[table], np.zeros(shard.height, dtype=bool)
        tokens = oov = 0
        for col in columns:
            s = shard.get_column(col)
            if isinstance(s.dtype, pl.List):
                offsets, values = _list_parts(s)
                ids = v.lookup(values)                                               # (tokens,) int32
                at = np.flatnonzero(ids == OOV)                                      # (oov,) token positions
                has_oov[np.searchsorted(offsets, at, side="right") - 1] = True       # their rows
                tally.longest = max(tally.longest, int(np.diff(offsets).max(initial=0)))
                arr = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(ids))
                new = pl.Series(col, arr).cast(pl.List(pl.Int32))
            else:
                if s.null_count():
                    raise DataError(f"a CTR sessions shard has a null {col}", "re-run `seqpe preprocess`")
                ids = v.lookup(s.to_numpy())
                has_oov |= ids == OOV
                new = pl.Series(col, ids, dtype=pl.Int32)
            tokens, oov = tokens + ids.size, oov + int(np.count_nonzero(ids == OOV))
            name = FEATURE_PREFIX + col if table in layout.features else col
            out[name] = new.alias(name)
        tally.add(table, tokens, oov, int(has_oov.sum()))
    return pl.DataFrame(list(out.values()))


def manifest_section(layout: Layout, vocabs: dict[str, Vocab], tallies: dict[str, Tally], max_history: int,
                     counted_on: tuple[str, ...]) -> dict:
    """The samples manifest's `ctr` section: everything the trainer needs to build CTRSchema / CTRBatch."""
    return {
        "label": layout.label,
        "group": layout.group,
        "fields": list(layout.fields),
        "target": {f: layout.target[f] for f in layout.fields},
        "history": {f: layout.history[f] for f in layout.fields},
        "extra": dict(layout.extra),
        "features": {name: FEATURE_PREFIX + name for name in layout.features},
        "vocab": {t: {"rows": v.rows, "kept": int(v.keys.size), "min_count": layout.min_count,
                      "columns": layout.tables()[t], "file": f"vocab/{t}.parquet",
                      "oov": {s: {"tokens": tl.tokens.get(t, 0), "oov_tokens": tl.oov.get(t, 0),
                                  "rows_with_oov": tl.rows.get(t, 0)} for s, tl in tallies.items()}}
                  for t, v in vocabs.items()},
        "rule": RULE,
        "counted_on": "+".join(counted_on),
        "max_history": max_history,
        "longest_history": max((tl.longest for tl in tallies.values()), default=0),
    }


def write_vocabs(root: Path, vocabs: dict[str, Vocab], layout: Layout) -> list[dict]:
    """Write vocab/<table>.parquet under `root`; return their manifest entries."""
    (Path(root) / "vocab").mkdir(parents=True, exist_ok=True)
    entries = []
    for table, v in vocabs.items():
        rel = f"vocab/{table}.parquet"
        io.write_parquet(Path(root) / rel, vocab_frame(v, layout))
        entries.append(io.shard_entry(root, rel))
    return entries
