"""The SR-GNN session protocol (Diginetica, Yoochoose), bit-exact: REFERENCE.md §2 steps 1-9 (+ 11).

Reference: Wu et al., "Session-based Recommendation with Graph Neural Networks" (AAAI 2019),
`datasets/preprocess.py` after its 2019 fix; the same splits are used by NARM, STAMP, GC-SAN,
PosRec. Steps (numbers as in REFERENCE.md §2):

1. A session's date is the date of its last row in FILE order (Yoochoose: timestamp truncated
   to whole seconds, UTC; Diginetica: `eventdate`, a day).
2. Diginetica (`sort_by_time`): each session's clicks are stably sorted by `timeframe`
   (equal timeframes keep file order). Yoochoose keeps file order.
3. Sessions with exactly one click are dropped.
4. Items' click counts over the remaining sessions (repeats count).
5. Clicks on items with count < `min_item_count` (5) are dropped (one pass); then sessions
   with fewer than 2 clicks.
6. splitdate = maxdate - `split_days` days; train = date < splitdate, test = date > splitdate
   (sessions dated exactly splitdate are dropped).
7. Train and test are ordered by date; ties keep the order of first appearance in the file.
8. Items are numbered from 1 by first appearance walking the ordered train sessions.
9. Test clicks on items not numbered in 8 are dropped, then test sessions shorter than 2.
11. Yoochoose fractions (`fraction` = 64 or 4): of the N prefix samples of the train set (step
   10, longest prefix first), the most recent int(N / fraction) are kept. Here that cut is
   made on sessions: the sessions after the cut are kept whole, and the session the cut falls
   in is truncated to its first r + 1 clicks, r being the number of its samples the cut keeps;
   prefix augmentation of a truncated session s[:r+1] yields exactly the r shortest-prefix
   samples (s[:j], s[j]), j = r..1, of s, so `augment` of the kept sessions IS the canonical
   fraction. Test and the item numbering are those of the full train set.

Validation (not part of SR-GNN, which selects on test): `valid` = the most recent
floor(T * valid_fraction) of the T (ordered, after the fraction cut) train sessions, with
valid_fraction read as the decimal it is written as (0.1 -> exactly 1/10, so 30 sessions give
3); `train` = the T - floor(T * valid_fraction) older ones. train + valid (in this order) is
exactly the protocol's train set, and their prefix samples together are exactly the protocol's
train samples (for a fraction: exactly the canonical fraction). Items stay numbered over the
whole protocol train set (step 8), so `valid` never holds an unknown item.
"""
from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import polars as pl

from ..errors import DataError
from . import ProtocolResult, collect, locator, step

ID = pl.Int32  # dtype of new item ids
# spec.options["stamp"] -> how a reader's `stamp` column becomes seconds since the epoch (UTC);
# strict=False: text that is no date becomes null (the streaming path converts every row)
STAMP_SECONDS = {
    "day": lambda c, strict=True: c.cast(pl.Int64) * 86_400,  # a Date (Diginetica eventdate)
    "iso": lambda c, strict=True: (c.str.slice(0, 19)          # ISO-8601 text (Yoochoose), cut to whole seconds
                                   .str.to_datetime("%Y-%m-%dT%H:%M:%S", time_unit="ms", strict=strict)
                                   .dt.epoch("s")),
}


def valid_count(n_sessions: int, valid_fraction: float) -> int:
    """floor(n_sessions * valid_fraction), exact on the decimal written (0.1 * 30 -> 3, not 2)."""
    if not 0.0 <= valid_fraction < 1.0:
        from ..errors import ParamsError
        raise ParamsError(f"preprocess.valid_fraction must be in [0, 1), got {valid_fraction}",
                          "use e.g. 0.1 for the most recent 10% of train sessions")
    return int(Decimal(repr(valid_fraction)) * n_sessions)


def _stats(df: pl.DataFrame, col: str = "items") -> tuple[int, int, int]:
    """(sessions, clicks, distinct items) of a frame with a list column of item ids."""
    if df.height == 0:
        return 0, 0, 0
    flat = df.get_column(col).explode()
    return df.height, int(df.get_column(col).list.len().sum()), flat.drop_nulls().n_unique()


def _on_clicks(sessions: pl.DataFrame, item: pl.Expr) -> pl.DataFrame:
    """Replace every click by `item` (an expression of the exploded column "items"; null drops
    the click), keeping each session's click order; a session can be left with an empty list.

    Explode + top-level expression + regroup on the (sorted) session index: the hash tables (kept
    items, new ids) are built once, not once per session as inside `list.eval`, and grouping a
    sorted key is a linear pass."""
    lists = (sessions.lazy()
             .select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_i"), "items").explode("items")
             .with_columns(pl.col("_i").set_sorted(), item.alias("items"))
             .group_by("_i", maintain_order=True).agg(pl.col("items").drop_nulls())
             .collect())
    return sessions.with_columns(lists.get_column("items"))


def _iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _narrow(ids: pl.Series) -> pl.Series:
    """Int64 ids as Int32 when they all fit (Yoochoose's do), else unchanged."""
    lo, hi = ids.min(), ids.max()
    fits = lo is not None and -(2**31) <= lo and hi < 2**31
    return ids.cast(pl.Int32) if fits else ids


def check_times(frame: pl.DataFrame, what: str) -> None:
    """A DataError for rows without a timeframe (`time` null; `row` the file row): sorted first in their
    session without a word, where SR-GNN's script (`int(timeframe)`) stops (walk 34b: an empty field, or a row
    cut short, `1;NA;20`)."""
    nulls = frame.get_column("time").null_count()
    if nulls:
        first = frame.filter(pl.col("time").is_null()).get_column("row").min()
        raise DataError(f"{what} has {nulls:,} row(s) with an empty timeframe (the first on line {first + 1:,}: "
                        "a field left empty, or a row cut short)",
                        "use the unmodified original file (every row needs an integer timeframe)")


def read_sessions(spec, raw_dir: Path) -> pl.DataFrame:
    """Steps 1-2: one row per raw session, in order of first appearance in the file.

    Columns: session_id, items List of raw ids (Int32 when all ids fit, else Int64; Diginetica
    sorted by timeframe, stable), first_row UInt32 (first row in the file), date_s Int64 (date of
    the last row in file order, seconds, UTC), date Date.
    """
    what = f"{spec.name} raw data in {raw_dir}"
    locate = locator(spec, raw_dir)
    sort = bool(spec.options.get("sort_by_time"))
    cols = ["session_id", "item_id", "row", *(["time"] if sort else [])]
    clicks = collect(spec.reader(raw_dir).select(*cols, "stamp"), what, locate)
    # keep the stamps of the rows that end a run of equal session ids (a session's last row in
    # file order always does): 9M of Yoochoose's 33M timestamp strings
    run_end = (pl.col("session_id") != pl.col("session_id").shift(-1)).fill_null(True)
    ends = clicks.select("row", "stamp").filter(clicks.select(run_end).to_series())
    # ids in the narrowest integer type that holds them (Yoochoose: Int32), to halve the lists
    clicks = clicks.drop("stamp").with_columns(_narrow(clicks.get_column("session_id")),
                                               _narrow(clicks.get_column("item_id")))
    if sort:  # 2. one global stable sort (session, time; ties keep the file row order) instead of a sort per group
        check_times(clicks.select("time", "row"), what)
        clicks = clicks.sort("session_id", "time", maintain_order=True)
    # Runs of equal session ids (whole sessions when a file keeps sessions contiguous, as the
    # real ones do) are grouped on a sorted key: much faster than hashing 33M session ids.
    run = pl.col("session_id").rle_id().set_sorted().alias("_run")
    aggs = [pl.col("item_id").alias("items"), pl.col("row").min().alias("first_row"),
            pl.col("row").max().alias("last_row"), pl.col("item_id").null_count().alias("null_items")]
    sessions = collect(clicks.lazy().with_columns(run).group_by("_run", maintain_order=True)
                       .agg(pl.col("session_id").first(), *aggs).drop("_run"), what)
    del clicks
    ids = sessions.get_column("session_id")
    # runs with increasing ids are distinct sessions (cheap check); else look for repeats
    if not ids.is_sorted() and ids.is_duplicated().any():  # a session in several runs
        sessions = (sessions.group_by("session_id", maintain_order=True)
                    .agg(pl.col("items").explode(), pl.col("first_row").min(), pl.col("last_row").max(),
                         pl.col("null_items").sum()))
    if not sessions.get_column("first_row").is_sorted():
        sessions = sessions.sort("first_row")  # order of first appearance in the file
    # 1. date = stamp of the session's last row in FILE order, converted for those rows only
    last_row = sessions.get_column("last_row")
    if ends.height == sessions.height and (ends.get_column("row") == last_row).all():
        last = ends.select("stamp")  # sessions are the file's runs, in file order
    else:
        last = ends.select(pl.col("stamp").gather(ends.get_column("row").search_sorted(last_row)))
    del ends
    date_s = collect(last.lazy().select(STAMP_SECONDS[spec.options["stamp"]](pl.col("stamp"))), what,
                     locate).to_series()
    sessions = sessions.with_columns(
        date_s.alias("date_s"), (date_s // 86_400).cast(pl.Int32).cast(pl.Date).alias("date"))
    if sessions.height == 0:
        raise DataError(f"{what} has no rows", "re-download it (`seqpe download DATASET`)")
    if sessions.get_column("session_id").null_count() or sessions.get_column("null_items").sum():
        raise DataError(f"{what} has rows with an empty session or item id",
                        "use the unmodified original file (every row needs integer ids)")
    if sessions.get_column("date_s").null_count():
        raise undated(what, sessions.filter(pl.col("date_s").is_null()).get_column("last_row"))
    return sessions.drop("null_items", "last_row")


def undated(what: str, last_rows: pl.Series) -> DataError:
    """Sessions whose last row in file order (`last_rows`, 0-based) has no date, the date SR-GNN's script reads
    (rows before it need none): their count and the first line, as for an empty timeframe (walk 36a)."""
    return DataError(f"{what} has {last_rows.len():,} session(s) whose last row has no date (the first on line "
                     f"{int(last_rows.min()) + 1:,}: a field left empty, or a row cut short)",
                     "use the unmodified original file (a session's last row needs its date)")


def fraction_plan(lengths: pl.Series, fraction: int) -> tuple[pl.Series, int, int]:
    """Step 11's arithmetic on the ordered train sessions' lengths: (samples in LATER sessions, per
    session; N samples in all; k = int(N / fraction) kept). The kept sessions are those with
    after < k (a suffix: `after` never rises); the first of them keeps k - after of its samples."""
    samples = lengths.cast(pl.Int64) - 1
    n = int(samples.sum())
    k = n // fraction  # == int(N / fraction) for every N a file can hold
    if k == 0:
        raise DataError(f"the 1/{fraction} cut keeps int({n} / {fraction}) = 0 of the {n} train samples",
                        f"use a raw file with at least {fraction} train samples, or the full `yoochoose` dataset "
                        f"(SR-GNN's script would keep all {n} here: its slice tr_seqs[-0:] is the whole list)")
    return samples.reverse().cum_sum().reverse() - samples, n, k


def _fraction_cut(train: pl.DataFrame, fraction: int) -> tuple[pl.DataFrame, dict]:
    """Step 11 on sessions: keep the sessions holding the most recent int(N / fraction) samples,
    truncating the one the cut falls in to its first r + 1 clicks (see the module docstring)."""
    after, n, k = fraction_plan(train.get_column("items").list.len(), fraction)
    keep = after < k  # sessions contributing at least one sample
    frac = train.with_columns(after=after).filter(keep)
    info = {"fraction": fraction, "train_samples_full": n, "train_samples_kept": k, "cut": None}
    if frac.height:
        r = k - int(frac.get_column("after")[0])  # samples the cut keeps from the first session
        first_len = frac.get_column("items").list.len()[0]
        if r < first_len - 1:
            info["cut"] = {"session_id": int(frac.get_column("session_id")[0]),
                           "clicks": int(first_len), "kept_clicks": r + 1,
                           # whole session (new ids): `export` writes it whole in all_train_seq.txt, as SR-GNN does
                           "items": frac.get_column("items")[0].to_list()}
            head = pl.int_range(pl.len()) == 0
            frac = frac.with_columns(
                items=pl.when(head).then(pl.col("items").list.head(r + 1)).otherwise(pl.col("items")))
    return frac.drop("after"), info


# the manifest's step names (`ProtocolResult.steps`), shared with the streaming path
STEP = {"read": "read", "length": "drop sessions of length 1",
        "frequent": "keep items clicked >= {min_count} times, sessions >= 2",
        "train": "train: date < splitdate", "dropped": "dropped: date == splitdate", "test": "test: date > splitdate",
        "known": "test: known items, length >= 2", "fraction": "train: most recent 1/{fraction} of the samples",
        "carved": "train (after carving valid)", "valid": "valid: most recent {n_valid} train sessions"}
AUGMENT = {"train": "prefixes", "valid": "prefixes", "test": "prefixes"}


def no_sessions_left(name: str, min_count: int) -> DataError:
    return DataError(f"all sessions of {name} vanished under the filters (length >= 2, items "
                     f"clicked >= {min_count} times)",
                     "check the raw file is complete, or lower preprocess.min_item_count")


def no_train_left(name: str, splitdate: int, split_days: int) -> DataError:
    return DataError(f"all sessions of {name} vanished under the filters: none is dated before "
                     f"the split date {_iso(splitdate)[:10]} ({split_days} day(s) before the last date)",
                     "the raw file must cover more days than the test window; check it is complete")


def protocol_info(split_days: int, maxdate: int, splitdate: int, min_count: int, fraction: int,
                  cut: dict | None) -> dict:
    """`ProtocolResult.extra`: the dates, options and rules of this run (`cut`: step 11's facts)."""
    extra = {"split_days": split_days, "maxdate": _iso(maxdate), "splitdate": _iso(splitdate),
             "min_item_count": min_count, "fraction": fraction,
             "session_order": "date of the last row in file order, ties by first appearance in the file"}
    if fraction > 1:
        extra["fraction_cut"] = cut
        extra["fraction_rule"] = (f"train = the sessions holding the most recent int(N/{fraction}) of the N prefix "
                                  "samples of the full train set; the session the cut falls in is cut to its first "
                                  "r+1 clicks (its r kept samples); test and item ids are the full set's; valid is "
                                  "then carved from the most recent of these sessions, so train + valid samples == "
                                  "the canonical fraction")
    extra["valid_rule"] = ("valid = the most recent floor(T * valid_fraction) of the T ordered train "
                           "sessions (valid_fraction read as written, in decimal); train + valid == the "
                           "protocol train set" + (" after the fraction cut" if fraction > 1 else ""))
    return extra


def build(spec, raw_dir: Path, params, scratch: Path | None = None) -> ProtocolResult:
    """Run steps 1-9 (and 11 for a Yoochoose fraction), then carve valid; see the module docstring.

    Files larger than memory (`preprocess.streaming`; `auto`: by the raw file's size against the
    memory available) take `srgnn_streaming.build`, which spills clicks to Parquet under `scratch`
    and returns the same splits as lazy scans of them."""
    from . import srgnn_streaming
    if srgnn_streaming.use_streaming(spec, raw_dir, params.preprocess.streaming):
        return srgnn_streaming.build(spec, raw_dir, params, scratch)
    return build_in_memory(spec, raw_dir, params)


def build_in_memory(spec, raw_dir: Path, params) -> ProtocolResult:
    """Steps 1-11 + valid on every click held in memory (fast; ~1.75x the raw file's size in RAM)."""
    opts = spec.options
    split_days = int(opts["split_days"])
    fraction = int(opts.get("fraction", 1))
    min_count = params.preprocess.min_item_count
    steps = []

    # 1-2. sessions in file order of first appearance (the tie order of step 7)
    sessions = read_sessions(spec, raw_dir)
    steps.append(step(STEP["read"], *_stats(sessions)))

    # 3. drop sessions with exactly one click
    sessions = sessions.filter(pl.col("items").list.len() > 1)

    # 4. click counts of every item over the remaining sessions
    counts = (sessions.select(pl.col("items").explode().alias("item_id"))
              .group_by("item_id").agg(pl.len().cast(pl.Int64).alias("count")))
    steps.append(step(STEP["length"], sessions.height, counts.get_column("count").sum(),
                      counts.height))
    frequent = counts.filter(pl.col("count") >= min_count).get_column("item_id")

    # 5. keep clicks on frequent items (one pass), then sessions with >= 2 clicks
    keep = pl.when(pl.col("items").is_in(frequent.implode())).then(pl.col("items"))
    sessions = _on_clicks(sessions, keep).filter(pl.col("items").list.len() >= 2)
    steps.append(step(STEP["frequent"].format(min_count=min_count), *_stats(sessions)))
    if sessions.height == 0:
        raise no_sessions_left(spec.name, min_count)

    # 6. split on dates; 7. order by (date, first appearance)
    maxdate = int(sessions.get_column("date_s").max())
    splitdate = maxdate - 86_400 * split_days
    by_date = ["date_s", "first_row"]
    train = sessions.filter(pl.col("date_s") < splitdate).sort(by_date)
    test = sessions.filter(pl.col("date_s") > splitdate).sort(by_date)
    dropped = sessions.filter(pl.col("date_s") == splitdate)
    if train.height == 0:
        raise no_train_left(spec.name, splitdate, split_days)
    # 8. number items by first appearance walking the ordered train sessions
    order = train.get_column("items").explode().unique(maintain_order=True)
    steps.append(step(STEP["train"], train.height,
                      train.get_column("items").list.len().sum(), order.len()))
    steps.append(step(STEP["dropped"], *_stats(dropped)))
    steps.append(step(STEP["test"], *_stats(test)))
    new_ids = pl.int_range(1, order.len() + 1, dtype=ID, eager=True)
    renumber = pl.col("items").replace_strict(order, new_ids, default=None, return_dtype=ID)
    train = _on_clicks(train, renumber)

    # 9. test: drop unknown items, then sessions shorter than 2
    test = _on_clicks(test, renumber).filter(pl.col("items").list.len() >= 2)
    steps.append(step(STEP["known"], *_stats(test)))

    # 11. Yoochoose fraction of the train samples
    info = None
    if fraction > 1:
        train, info = _fraction_cut(train, fraction)
        steps.append(step(STEP["fraction"].format(fraction=fraction), *_stats(train)))
        if train.height == 0:
            raise DataError(f"all sessions of {spec.name} vanished: 1/{fraction} of "
                            f"{info['train_samples_full']} train samples is none",
                            "use a larger raw file or a smaller fraction")

    # validation: the most recent valid_fraction of the ordered train sessions
    n_valid = valid_count(train.height, params.preprocess.valid_fraction)
    valid = train.slice(train.height - n_valid, n_valid)
    train = train.slice(0, train.height - n_valid)
    steps.append(step(STEP["carved"], *_stats(train)))
    steps.append(step(STEP["valid"].format(n_valid=f"{n_valid:,}"), *_stats(valid)))
    extra = protocol_info(split_days, maxdate, splitdate, min_count, fraction, info)

    items = (pl.DataFrame({"item_id": new_ids, "raw_id": order})
             .join(counts, left_on="raw_id", right_on="item_id", how="left", maintain_order="left")
             .select("item_id", pl.col("raw_id").cast(pl.String), "count"))
    out = lambda df: df.select(  # noqa: E731
        pl.col("session_id").cast(pl.Int64), pl.col("items").cast(pl.List(ID)), pl.col("date").cast(pl.Date))
    return ProtocolResult(
        splits={"train": out(train), "valid": out(valid), "test": out(test)},
        items=items, steps=steps, n_items=order.len(),
        augment=dict(AUGMENT), extra=extra)
