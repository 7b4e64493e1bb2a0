"""The SR-GNN protocol (`srgnn.py`, pipeline/REFERENCE.md §2) on raw files larger than memory: the same
steps and the same output, with memory bounded by the number of sessions and items, not clicks.

Clicks live on disk, in Parquet files under a scratch folder; what is held whole is the table of
the sessions kept by step 5 (id, first row, date, click count, partition, its number in the
partition: ~35 bytes a session) and tables of items. Passes (steps numbered as in `srgnn.py`):

1. spill   Polars' streaming engine reads the raw file once into P partitions (`sink_parquet` to
           a `PartitionBy` on a hash of the session id, so all clicks of a session land in one):
           session_id, item_id, row, [time,] date_s (every row's date in seconds, UTC).
2. facts   per partition, in memory (1/P of the clicks): each session's first row, the date of
           its last row in file order (step 1) and its click count; every item's click count
           over the sessions of >= 2 clicks (steps 3-4) = all its clicks - its one-click sessions.
3. keep    per partition: clicks on items clicked >= min_item_count times, per session; the
           sessions keeping >= 2 (step 5) make the session table.
4. order   on the session table: the date split, the order by (date, first row) (steps 6-7);
           the fraction cut (11) and valid are ranges of these ranks.
5. route   per partition: kept clicks get their session's (split, rank), looked up by the
           session's number in the partition (numbered as pass 3 numbered it), and their position
           in it (file order; Diginetica by (timeframe, row), step 2). An item's new id (step 8)
           is its place among items ordered by the least (rank, position) of its train clicks:
           its first appearance walking the ordered sessions, without sorting the clicks. The
           clicks of the sessions written out go to buckets of consecutive ranks (at most
           BUCKET_CLICKS clicks each, whole sessions).
6. emit    bucket by bucket in rank order: sort by (rank, position), renumber, regroup into
           sessions (step 9 on test; the session step 11 cuts) -> Parquet files in split order,
           which `pipeline.preprocess` cuts into the shards the in-memory path writes.

Why hashed partitions and in-memory group-bys rather than streaming group-bys over all clicks:
Polars' (2.1) streaming group-by of Yoochoose's 33M clicks by session (9.2M groups) peaked at
1.0 GB, ~110 bytes a session, so 10x Yoochoose would need ~10 GB for that alone; a partition
holds 1/P of the sessions, and re-reading it from Parquet is cheap. The streaming engine does
the part that touches every byte of the raw file (pass 1), with the per-row date conversion.
"""
from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np
import polars as pl

from ..errors import DataError
from . import ProtocolResult, collect, locator, reading, step
from .srgnn import (AUGMENT, ID, STAMP_SECONDS, STEP, check_times, fraction_plan, no_sessions_left, no_train_left,
                    protocol_info, undated, valid_count)

PART_BYTES = 256 << 20        # raw text per partition (Yoochoose: ~6M clicks, ~0.5 GB in memory)
BUCKET_CLICKS = 8_000_000     # clicks per emitted bucket (whole sessions; a longer session is one bucket)
MEMORY_FACTOR = 2             # in-memory peak / raw file size (Yoochoose: 2.6 GB for 1.5 GB), for `auto`
TRAIN, TEST, DROPPED = 0, 1, 2
SPLIT_SCHEMA = {"session_id": pl.Int64, "items": pl.List(ID), "date": pl.Date}
_WRITE = dict(compression="zstd", compression_level=1)  # click partitions: read 3 times, ~9 bytes a click
_BUCKET = dict(compression="uncompressed")               # bucket and split files: read once, fastest


def raw_bytes(spec, raw_dir: Path) -> int:
    """Size of the dataset's raw member files in `raw_dir` (0 for the ones missing)."""
    from ..datasets.sessions import find_file
    total = 0
    for name in spec.source.files:
        try:
            total += find_file(raw_dir, name).stat().st_size
        except DataError:
            pass
    return total


def available_memory() -> int:
    """Bytes of memory available to a new allocation: Linux MemAvailable (else all physical memory), and no more
    than the cgroup leaves (a container's limit: `docker --memory 4g` on a large host took the in-memory path
    and was killed for memory; walk 40h #4)."""
    found = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if found is None:
        found = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    left = cgroup_memory_left()
    return found if left is None else min(found, left)


def cgroup_memory_left(root: Path = Path("/sys/fs/cgroup"), membership: Path = Path("/proc/self/cgroup")) \
        -> Optional[int]:
    """Bytes this process's cgroup may still allocate, or None without a limit: the least, over the cgroup this
    process is in and its ancestors, of v2 memory.max - memory.current (v1: limit - usage). The process's
    cgroup is read from `membership` (/proc/self/cgroup: `0::/path` for v2, `N:memory:/path` for v1), so a
    limit set below the hierarchy's top (systemd-run, Slurm, a container runtime's `memory:/<id>` without a
    cgroup namespace) bounds it too: the top alone was read, and such a limit went unseen (walk 41a #5)."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        lines = []
    where = {"v2": "/", "v1": "/"}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[0] == "0" and parts[1] == "":
            where["v2"] = parts[2]
        elif len(parts) == 3 and "memory" in parts[1].split(","):
            where["v1"] = parts[2]
    found = []
    for bases, rel, limit, usage in (((root, root / "unified"), where["v2"], "memory.max", "memory.current"),
                                     ((root / "memory",), where["v1"], "memory.limit_in_bytes",
                                      "memory.usage_in_bytes")):
        for base in bases:
            names = [p for p in rel.strip("/").split("/") if p and p not in (".", "..")]
            for depth in range(len(names), -1, -1):           # the process's cgroup, then each ancestor
                left = _memory_left(base.joinpath(*names[:depth]), limit, usage)
                if left is not None:
                    found.append(left)
    return min(found) if found else None


def _memory_left(folder: Path, limit: str, usage: str) -> Optional[int]:
    """limit - usage of one cgroup folder, None without a limit (or without the files)."""
    try:
        text = (folder / limit).read_text().strip()
        if text == "max":
            return None
        cap, used = int(text), int((folder / usage).read_text().strip())
    except (OSError, ValueError):
        return None
    if cap >= 1 << 60:                     # cgroup v1's "no limit" is a page-rounded 2^63
        return None
    return max(0, cap - used)


def use_streaming(spec, raw_dir: Path, setting: bool | str) -> bool:
    """`preprocess.streaming`: true / false as given; auto = when the in-memory path would not fit."""
    if setting != "auto":
        return bool(setting)
    return raw_bytes(spec, raw_dir) * MEMORY_FACTOR > available_memory()


def build(spec, raw_dir: Path, params, scratch: Path | None = None) -> ProtocolResult:
    """`srgnn.build_in_memory`'s result, computed with clicks spilled under `scratch` (a folder that
    outlives the result: its splits are lazy scans of files there). Without one, a temporary folder
    is used and the splits are collected into memory before it is removed."""
    if scratch is not None:
        return _build(spec, Path(raw_dir), params, Path(scratch))
    with tempfile.TemporaryDirectory(prefix="seqpe-srgnn-") as tmp:
        result = _build(spec, Path(raw_dir), params, Path(tmp))
        result.splits = {k: v.collect() if isinstance(v, pl.LazyFrame) else v for k, v in result.splits.items()}
        return result


# --------------------------------------------------------------------------- pass 1: spill


class _Clicks:
    """The click partitions under `folder`: `p{P:05d}-{I:05d}.parquet`, in file order inside each."""

    def __init__(self, folder: Path, parts: int):
        self.folder, self.parts = folder, parts

    def read(self, p: int, columns: list[str] | None = None) -> pl.DataFrame | None:
        files = sorted(self.folder.glob(f"p{p:05d}-*.parquet"))
        return pl.read_parquet(files, columns=columns, glob=False) if files else None


def _spill(spec, raw_dir: Path, folder: Path, parts: int, what: str) -> _Clicks:
    sort = bool(spec.options.get("sort_by_time"))
    date = STAMP_SECONDS[spec.options["stamp"]](pl.col("stamp"), strict=False).alias("date_s")
    part = (pl.col("session_id").hash(0) % parts).alias("part")
    lf = spec.reader(raw_dir).select("session_id", "item_id", "row", *(["time"] if sort else []), date, part)
    name = lambda a: f"p{a.partition_keys.item():05d}-{a.index_in_partition:05d}.parquet"  # noqa: E731
    with reading(what, locator(spec, raw_dir)):
        lf.sink_parquet(pl.PartitionBy(folder, key="part", include_key=False, file_path_provider=name),
                        mkdir=True, **_WRITE)
    return _Clicks(folder, parts)


def _check_dates(spec, raw_dir: Path, rows: pl.Series, what: str) -> None:
    """Sessions whose last row has no date: raise the in-memory path's error for a stamp that is not
    a date (the rows' text converted strictly); an empty stamp is left to the caller."""
    locate = locator(spec, raw_dir)
    stamps = collect(spec.reader(raw_dir).filter(pl.col("row").is_in(rows.implode())).select("stamp"), what, locate)
    collect(stamps.lazy().select(STAMP_SECONDS[spec.options["stamp"]](pl.col("stamp"))), what, locate)


# --------------------------------------------------------------------------- passes 2-3: facts, keep


def _runs(ids: pl.Series) -> pl.Series | None:
    """Each click's run of equal session ids (UInt32, numbered in file order) when the runs are
    distinct sessions, as in the real files; None when a session comes back after another."""
    starts = (ids != ids.shift(1)).fill_null(True)
    firsts = ids.filter(starts)
    if firsts.is_sorted() or firsts.n_unique() == firsts.len():
        return starts.cast(pl.UInt32).cum_sum() - 1
    return None


def _session_index(ids: pl.Series) -> tuple[pl.Series, bool]:
    """Each click's session, numbered 0, 1, ... in order of first appearance in a partition's
    clicks (file order), and whether sessions are runs. Runs need one linear pass; only a file
    whose sessions come back after others pays for hashing the ids. Passes 3 and 5 both number
    the same clicks, so a session's number is its row in pass 3's table."""
    run = _runs(ids)
    if run is not None:
        return run.alias("_s"), True
    keys = ids.unique(maintain_order=True).to_frame().with_row_index("_s")
    return ids.to_frame().join(keys, on="session_id", how="left", maintain_order="left",
                               nulls_equal=True).get_column("_s"), False


def _per_session(c: pl.DataFrame, *aggs: pl.Expr) -> tuple[pl.DataFrame, pl.Series, bool]:
    """Aggregate a partition's clicks (in file order) per session: (table with session_id first,
    a row per session number, each click's session number, whether sessions are runs)."""
    index, runs = _session_index(c.get_column("session_id"))
    key = index.set_sorted() if runs else index  # a sorted key groups in one linear pass
    table = c.group_by(key, maintain_order=True).agg(pl.col("session_id").first(), *aggs).drop("_s")
    return table, index, runs


def _read_ordered(clicks: _Clicks, p: int, columns: list[str]) -> pl.DataFrame | None:
    c = clicks.read(p, columns)
    return c if c is None or c.get_column("row").is_sorted() else c.sort("row")


def _count(clicks: _Clicks, times: bool = False) -> dict:
    """Pass 2: sessions, clicks, null ids, and per item its clicks and its one-click sessions; with `times` (a
    protocol that sorts by timeframe), the rows without one ("no_time": time, row), part by part."""
    t = {"sessions": 0, "clicks": 0, "long": 0, "null_ids": 0, "null_items": 0, "all": [], "singles": [],
         "no_time": [pl.DataFrame({"time": [], "row": []})]}
    for p in range(clicks.parts):
        c = _read_ordered(clicks, p, ["session_id", "item_id", "row", *(["time"] if times else [])])
        if c is None:
            continue
        if times:
            t["no_time"].append(c.filter(pl.col("time").is_null()).select("time", "row"))
        f, _, _ = _per_session(c, pl.len().alias("n"), pl.col("item_id").first().alias("item"))
        t["sessions"] += f.height
        t["clicks"] += c.height
        t["long"] += f.filter(pl.col("n") > 1).height
        t["null_ids"] += c.get_column("session_id").null_count()
        t["null_items"] += c.get_column("item_id").null_count()
        t["all"].append(c.group_by("item_id").agg(pl.len()))
        t["singles"].append(f.filter(pl.col("n") == 1).group_by("item").agg(pl.len()))
    return t


def _counts(t: dict) -> tuple[pl.DataFrame, int]:
    """(item_id, count Int64) over the sessions of >= 2 clicks (step 4), and the distinct items read."""
    total = pl.concat(t["all"]).group_by("item_id").agg(pl.col("len").sum())
    singles = pl.concat(t["singles"]).group_by("item").agg(pl.col("len").sum().alias("single"))
    counts = (total.join(singles, left_on="item_id", right_on="item", how="left")
              .select("item_id", (pl.col("len").cast(pl.Int64) - pl.col("single").fill_null(0)).alias("count"))
              .filter(pl.col("count") > 0))
    return counts, total.get_column("item_id").drop_nulls().len()


def _keep(clicks: _Clicks, frequent: pl.Series) -> dict:
    """Pass 3 (steps 1, 5): the sessions keeping >= 2 clicks on frequent items (session_id,
    first_row, date_s of the last row, k = kept clicks, part, idx = its number in the partition),
    the distinct items they hold, the last rows of sessions without a date."""
    out = {"sessions": [], "items": [], "bad_rows": []}
    for p in range(clicks.parts):
        c = _read_ordered(clicks, p, ["session_id", "item_id", "row", "date_s"])
        if c is None:
            continue
        is_frequent = c.get_column("item_id").is_in(frequent.implode())
        f, index, _ = _per_session(
            c.with_columns(is_frequent.alias("_f")), pl.col("row").first().alias("first_row"),
            pl.col("row").last().alias("last_row"), pl.col("date_s").last(), pl.col("_f").sum().alias("k"))
        out["bad_rows"].append(f.filter(pl.col("date_s").is_null()).get_column("last_row"))
        kept = is_frequent & (f.get_column("k").gather(index) >= 2)
        out["items"].append(c.get_column("item_id").filter(kept).unique())
        out["sessions"].append(f.with_row_index("idx").filter(pl.col("k") >= 2).select(
            "session_id", "first_row", "date_s", "k", pl.lit(p, pl.UInt32).alias("part"), "idx"))
    return out


# --------------------------------------------------------------------------- passes 5-6: route, emit


def _buckets(k: pl.Series, first: int) -> pl.Series:
    """Bucket of each session (consecutive ranks, <= BUCKET_CLICKS clicks unless one session is longer)."""
    before = k.cast(pl.Int64).cum_sum() - k.cast(pl.Int64)
    return (before // BUCKET_CLICKS).rle_id().cast(pl.Int32) + first  # numbered 0, 1, ... without gaps


def _route(clicks: _Clicks, by_part: dict, frequent: pl.Series, sort: bool, bucket_dir: Path) -> dict:
    """Pass 5: bucket files `b{B:06d}/p{P:05d}.parquet` (key = rank * 2^32 + position, item_id), and
    per partition the least key of each item's train clicks, the items of test and dropped sessions.
    `by_part`: (partition,) -> its kept sessions' idx, split, rank, bucket (emptied as it goes)."""
    out = {"first": [], "test": [], "dropped": []}
    within = ["time", "row"] if sort else ["row"]
    for p in range(clicks.parts):
        plan = by_part.pop((p,), None)
        if plan is None:
            continue
        c = _read_ordered(clicks, p, ["session_id", "item_id", *within])
        index, runs = _session_index(c.get_column("session_id"))
        n = int(index.max()) + 1
        # the session's split / rank / bucket by its number: arrays over the partition's sessions
        dense = {name: np.full(n, fill, dtype) for name, fill, dtype in
                 (("split", 255, np.uint8), ("rank", 0, np.uint32), ("bucket", -1, np.int32))}
        idx = plan.get_column("idx").to_numpy()
        for name, values in dense.items():
            values[idx] = plan.get_column(name).to_numpy()
        c = (c.with_columns(index, *(pl.Series(name, v).gather(index) for name, v in dense.items()))
             .filter(pl.col("item_id").is_in(frequent.implode()) & (pl.col("split") != 255)))
        if sort or not runs:  # else: clicks already in file order, each session one run
            c = c.sort("_s", *within)
        i = pl.int_range(pl.len(), dtype=pl.UInt32)
        starts = (pl.col("_s") != pl.col("_s").shift(1)).fill_null(True)
        pos = i - pl.when(starts).then(i).forward_fill()
        c = c.select("item_id", "split", "bucket",
                     (pl.col("rank").cast(pl.UInt64) * (1 << 32) + pos.cast(pl.UInt64)).alias("key"))
        out["first"].append(c.filter(pl.col("split") == TRAIN).group_by("item_id").agg(pl.col("key").min()))
        out["test"].append(c.filter(pl.col("split") == TEST).get_column("item_id").unique())
        out["dropped"].append(c.filter(pl.col("split") == DROPPED).get_column("item_id").unique())
        emit = c.filter(pl.col("bucket") >= 0).select("bucket", "key", "item_id")
        for (b,), part in emit.partition_by("bucket", as_dict=True, include_key=False).items():
            (bucket_dir / f"b{b:06d}").mkdir(parents=True, exist_ok=True)
            part.write_parquet(bucket_dir / f"b{b:06d}" / f"p{p:05d}.parquet", **_BUCKET)
    return out


def _distinct(parts: list[pl.Series]) -> int:
    return pl.concat(parts).n_unique() if parts else 0


class _Tally:
    """Sessions, clicks and distinct new item ids written to one split."""

    def __init__(self, n_items: int):
        self.sessions, self.clicks, self.seen = 0, 0, np.zeros(n_items + 1, dtype=bool)

    def add(self, df: pl.DataFrame) -> None:
        self.sessions += df.height
        self.clicks += int(df.get_column("items").list.len().sum()) if df.height else 0
        self.seen[df.get_column("items").explode().drop_nulls().to_numpy()] = True

    def stats(self, *others: "_Tally") -> tuple[int, int, int]:
        tallies = (self, *others)
        seen = np.logical_or.reduce([t.seen for t in tallies])
        return sum(t.sessions for t in tallies), sum(t.clicks for t in tallies), int(seen.sum())


class _Emit:
    """Pass 6: bucket by bucket (in rank order), the split files `out/{split}/b{B:06d}.parquet`
    (session_id, items, date), their tallies, and the whole items of the session step 11 cuts."""

    def __init__(self, scratch: Path, order: pl.Series, new_ids: pl.Series, start: int, head: int | None,
                 valid_from: int):
        self.scratch, self.order, self.new_ids = scratch, order, new_ids
        self.start, self.head, self.valid_from = start, head, valid_from
        self.tally = {s: _Tally(order.len()) for s in ("train", "valid", "test")}
        self.files: dict[str, list[Path]] = {s: [] for s in self.tally}
        self.cut_items: list[int] | None = None

    def bucket(self, b: int, split: int, tables: dict[int, pl.DataFrame]) -> None:
        c = pl.read_parquet(sorted((self.scratch / "buckets" / f"b{b:06d}").glob("*.parquet")), glob=False).sort("key")
        c = c.select((pl.col("key") // (1 << 32)).cast(pl.UInt32).alias("rank"),
                     pl.col("item_id").replace_strict(self.order, self.new_ids, default=None, return_dtype=ID))
        lists = c.group_by(pl.col("rank").set_sorted(), maintain_order=True).agg(
            pl.col("item_id").drop_nulls().alias("items"))
        lo, hi = int(lists.get_column("rank")[0]), int(lists.get_column("rank")[-1])
        df = (tables[split].slice(lo, hi - lo + 1)
              .with_columns(pl.int_range(lo, hi + 1, dtype=pl.UInt32).alias("rank"))
              .join(lists, on="rank", maintain_order="left"))
        if split == TEST:  # 9. unknown items are gone (null ids dropped): keep sessions of >= 2
            df = df.filter(pl.col("items").list.len() >= 2)
        elif lo == self.start and self.head is not None:  # 11. the session the cut falls in
            self.cut_items = df.get_column("items")[0].to_list()
            first = pl.col("rank") == self.start
            df = df.with_columns(pl.when(first).then(pl.col("items").list.head(self.head)).otherwise(pl.col("items")))
        df = df.select(pl.col("session_id").cast(pl.Int64), pl.col("items").cast(pl.List(ID)),
                       (pl.col("date_s") // 86_400).cast(pl.Int32).cast(pl.Date).alias("date"), "rank")
        pieces = ({"test": df} if split == TEST else {"train": df.filter(pl.col("rank") < self.valid_from),
                                                       "valid": df.filter(pl.col("rank") >= self.valid_from)})
        for name, piece in pieces.items():
            if piece.height:
                piece = piece.drop("rank")
                self.tally[name].add(piece)
                path = self.scratch / "out" / name / f"b{b:06d}.parquet"
                path.parent.mkdir(parents=True, exist_ok=True)
                piece.write_parquet(path, **_BUCKET)
                self.files[name].append(path)


def _cut(train: pl.DataFrame, fraction: int) -> tuple[int, int | None, dict]:
    """Step 11 on the ordered train sessions' kept clicks `k`: (first rank kept, clicks kept of that
    session when the cut falls inside it, the manifest's facts; the cut session's items come later)."""
    after, n, k = fraction_plan(train.get_column("k"), fraction)
    start = int((after >= k).sum())
    r, first_len = k - int(after[start]), int(train.get_column("k")[start])
    info = {"fraction": fraction, "train_samples_full": n, "train_samples_kept": k, "cut": None}
    if r >= first_len - 1:
        return start, None, info
    info["cut"] = {"session_id": int(train.get_column("session_id")[start]), "clicks": first_len,
                   "kept_clicks": r + 1, "items": None}
    return start, r + 1, info


def _build(spec, raw_dir: Path, params, scratch: Path) -> ProtocolResult:
    opts = spec.options
    split_days = int(opts["split_days"])
    fraction = int(opts.get("fraction", 1))
    min_count = params.preprocess.min_item_count
    sort = bool(opts.get("sort_by_time"))
    what = f"{spec.name} raw data in {raw_dir}"
    parts = max(1, math.ceil(raw_bytes(spec, raw_dir) / PART_BYTES))

    # 1. every click to Parquet partitions; 3-4. item counts over the sessions of >= 2 clicks
    clicks = _spill(spec, raw_dir, scratch / "clicks", parts, what)
    t = _count(clicks, times=sort)
    check_times(pl.concat(t["no_time"], how="vertical_relaxed"), what)   # the rows without a timeframe
    if t["sessions"] == 0:
        raise DataError(f"{what} has no rows", "re-download it (`seqpe download DATASET`)")
    counts, n_read_items = _counts(t)
    frequent = counts.filter(pl.col("count") >= min_count).get_column("item_id")

    # 1. session dates; 5. sessions keeping >= 2 clicks on frequent items (errors as read_sessions raises them)
    kept = _keep(clicks, frequent)
    bad_rows = pl.concat(kept["bad_rows"])
    if bad_rows.len():
        _check_dates(spec, raw_dir, bad_rows, what)
    if t["null_ids"] or t["null_items"]:
        raise DataError(f"{what} has rows with an empty session or item id",
                        "use the unmodified original file (every row needs integer ids)")
    if bad_rows.len():
        raise undated(what, bad_rows)
    sessions = pl.concat(kept.pop("sessions"), rechunk=False)
    steps = [step(STEP["read"], t["sessions"], t["clicks"], n_read_items),
             step(STEP["length"], t["long"], counts.get_column("count").sum(), counts.height),
             step(STEP["frequent"].format(min_count=min_count), sessions.height, sessions.get_column("k").sum(),
                  pl.concat(kept["items"]).n_unique())]
    if sessions.height == 0:
        raise no_sessions_left(spec.name, min_count)

    # 6. split on dates; 7. order by (date, first appearance)
    maxdate = int(sessions.get_column("date_s").max())
    splitdate = maxdate - 86_400 * split_days
    # one sort: train (date < splitdate), dropped (==) and test (>) are consecutive slices of it
    sessions = sessions.sort("date_s", "first_row").select("session_id", "date_s", "k", "part", "idx")
    n_train, n_dropped = (sessions.get_column("date_s").search_sorted(splitdate, side=side) for side in ("left", "right"))
    n_dropped -= n_train
    train, dropped = sessions.slice(0, n_train), sessions.slice(n_train, n_dropped)
    test = sessions.slice(n_train + n_dropped)
    del sessions
    if train.height == 0:
        raise no_train_left(spec.name, splitdate, split_days)

    # 11. the fraction cut on the train sessions' lengths; valid: the most recent kept ones
    start, head, info = _cut(train, fraction) if fraction > 1 else (0, None, None)
    n_valid = valid_count(train.height - start, params.preprocess.valid_fraction)
    valid_from = train.height - n_valid

    # 5. route kept clicks: train ranks >= start and all test sessions are written out
    train_buckets = pl.concat([pl.repeat(-1, start, dtype=pl.Int32, eager=True),
                               _buckets(train.get_column("k").slice(start), 0)])
    n_train_buckets = int(train_buckets.max()) + 1
    test_buckets = _buckets(test.get_column("k"), n_train_buckets)
    by_part = pl.concat([
        train.select("idx", "part", pl.lit(TRAIN, pl.UInt8).alias("split"),
                     pl.int_range(pl.len(), dtype=pl.UInt32).alias("rank"), train_buckets.alias("bucket")),
        test.select("idx", "part", pl.lit(TEST, pl.UInt8).alias("split"),
                    pl.int_range(pl.len(), dtype=pl.UInt32).alias("rank"), test_buckets.alias("bucket")),
        dropped.select("idx", "part", pl.lit(DROPPED, pl.UInt8).alias("split"),
                       pl.lit(0, pl.UInt32).alias("rank"), pl.lit(-1, pl.Int32).alias("bucket"))
    ]).partition_by("part", as_dict=True, include_key=False)
    routed = _route(clicks, by_part, frequent, sort, scratch / "buckets")

    # 8. items numbered by their first train click in (rank, position) order
    order = pl.concat(routed["first"]).group_by("item_id").agg(pl.col("key").min()).sort("key").get_column("item_id")
    new_ids = pl.int_range(1, order.len() + 1, dtype=ID, eager=True)
    steps.append(step(STEP["train"], train.height, train.get_column("k").sum(), order.len()))
    steps.append(step(STEP["dropped"], dropped.height, dropped.get_column("k").sum() if dropped.height else 0,
                      _distinct(routed["dropped"])))
    steps.append(step(STEP["test"], test.height, test.get_column("k").sum() if test.height else 0,
                      _distinct(routed["test"])))

    # 6. emit the buckets in rank order (9. on test; 11. the cut session)
    n_buckets = {TRAIN: n_train_buckets, TEST: test_buckets.n_unique() if test_buckets.len() else 0}
    tables = {TRAIN: train.select("session_id", "date_s"), TEST: test.select("session_id", "date_s")}
    del train, test, dropped
    shutil.rmtree(scratch / "clicks")
    emitted = _Emit(scratch, order, new_ids, start, head, valid_from)
    for b in range(n_buckets[TRAIN] + n_buckets[TEST]):
        emitted.bucket(b, TRAIN if b < n_buckets[TRAIN] else TEST, tables)
    shutil.rmtree(scratch / "buckets", ignore_errors=True)
    tally, files = emitted.tally, emitted.files
    if head is not None:
        info["cut"]["items"] = emitted.cut_items

    steps.append(step(STEP["known"], *tally["test"].stats()))
    if fraction > 1:
        steps.append(step(STEP["fraction"].format(fraction=fraction), *tally["train"].stats(tally["valid"])))
    steps.append(step(STEP["carved"], *tally["train"].stats()))
    steps.append(step(STEP["valid"].format(n_valid=f"{n_valid:,}"), *tally["valid"].stats()))
    items = (pl.DataFrame({"item_id": new_ids, "raw_id": order})
             .join(counts, left_on="raw_id", right_on="item_id", how="left", maintain_order="left")
             .select("item_id", pl.col("raw_id").cast(pl.String), "count"))
    splits = {s: pl.scan_parquet(f, glob=False) if f else pl.DataFrame(schema=SPLIT_SCHEMA) for s, f in files.items()}
    return ProtocolResult(splits=splits, items=items, steps=steps, n_items=order.len(), augment=dict(AUGMENT),
                          extra=protocol_info(split_days, maxdate, splitdate, min_count, fraction, info))
