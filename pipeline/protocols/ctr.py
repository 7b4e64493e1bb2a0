"""CTR protocol "ctr" (CAPE's setting, BARS files): REFERENCE.md §4.

One sample = (user, target item, target category, history items, history categories, label).
The reczoo/BARS files come split into train.csv and test.csv, with no validation file (the
BARS configs validate on test.csv; seqpe never does): valid is carved from train by the
dataset's rule `spec.options["valid"]`:

- "last_per_user" (AmazonElectronics_x1, DIN's construction: per user, one positive and one
  sampled negative per position, the last position held out as test): valid = each user's
  train rows with the longest history, i.e. the user's last train position (its positive and
  its negative). This mirrors how test was built, one step earlier; on the real files every
  user (5-core) has train rows, so valid should hold 2 x 192,403 = 384,806 rows, as test does,
  leaving 2,223,958 train rows.
- "tail" (KuaiVideo_x1, train.csv sorted by timestamp): valid = the last
  int(valid_fraction * N) rows of train.csv in file order, the most recent ones.

Input (a `DatasetSpec.reader`): a LazyFrame with `split` ("train"|"test"), `row` (row number
in its file), `label`, `user`, `item` (Int64), optionally `cate` (Int64) and `timestamp`, and
history columns `hist_*` holding raw ids joined by "^" (oldest first; empty = no history).

Output (one row per sample, protocol order = file order): label Int8, user Int64 (raw id),
item Int32, [cate Int32], hist_* List(Int32) truncated to the most recent
`params.preprocess.max_history`, [timestamp Int64]. Ids: BARS ids are already dense
non-negative integers (DIN's remap; ALPINE's indices, which also key KuaiVideo's visual
embeddings), so new id = raw id + 1 and 0 stays padding. hist_cates shares the cate ids,
every other hist_* shares the item ids. Splits are LazyFrames: `pipeline.preprocess` streams
them into shards, so KuaiVideo's 13.7M rows never sit in memory at once.

The tokens the cut drops from train.csv's rows (train and valid) are counted into
`history_overflow.parquet` (`overflow`): BARS fits its vocabularies on whole histories.

These sessions ids are not yet embedding rows: the augment stage counts the train split and maps
every id through the dataset's BARS vocabularies (min count, 0 padding, 1 out-of-vocabulary;
`pipeline.ctr_vocab`, layout in `pipeline.datasets.ctr.OPTIONS`, recorded here in the sessions
manifest's params.options).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import polars as pl

from ..errors import DataError
from . import ProtocolResult, step

HIST_PREFIX = "hist_"
CATE_HISTORIES = ("hist_cates",)
_INT32_MAX = 2**31 - 1


def hist_columns(schema) -> list[str]:
    return [c for c in schema if c.startswith(HIST_PREFIX)]


def _id_lists(col: str, dtype=pl.Int32) -> pl.Expr:
    """'^'-joined raw ids -> List(dtype); null or "" -> null here, which `parse_history` (the only caller that
    writes) turns into an empty list, so the stored splits hold `[]` for no history, never null. Strict: a token
    that is not an integer ("x", "" from "3^^4") raises InvalidOperationError instead of passing silently."""
    text = pl.col(col)
    return pl.when(text == "").then(None).otherwise(text).str.split("^").cast(pl.List(dtype), strict=True)


def _first_bad_token(lf: pl.LazyFrame, hists: list[str], columns: dict) -> Optional[str]:
    """Where the first history token that is not an integer id is ("train.csv line 21, pos_items: '3^^4'"), for
    the error; polars' own message names no line and an empty column (walk 32b). Only run once parsing failed."""
    for col in hists:
        text = pl.col(col)
        bad = (text != "") & text.str.split("^").list.eval(~pl.element().str.contains(r"^-?\d+$")).list.any()
        found = lf.filter(bad.fill_null(False)).select("split", "row", col).head(1).collect(engine="streaming")
        if found.height:
            split, row, value = found.row(0)
            shown = value if len(value) <= 60 else value[:57] + "..."
            return f"{split}.csv line {row + 2}, {columns.get(col, col)}: {shown!r}"    # file line = row + 2 (the header is line 1)
    return None


def parse_history(col: str, max_history: int) -> pl.Expr:
    """'^'-joined raw ids -> List(Int32) of new ids (raw + 1), most recent `max_history` kept."""
    parsed = _id_lists(col).fill_null(pl.lit([], dtype=pl.List(pl.Int32)))
    if max_history > 0:
        parsed = parsed.list.tail(max_history)
    return (parsed + 1).alias(col)


def samples(lf: pl.LazyFrame, max_history: int) -> pl.LazyFrame:
    """Raw CTR rows -> output schema (module docstring), row order kept."""
    schema = lf.collect_schema()
    cols = [pl.col("label").cast(pl.Int8), pl.col("user").cast(pl.Int64),
            (pl.col("item") + 1).cast(pl.Int32).alias("item")]
    if "cate" in schema:
        cols.append((pl.col("cate") + 1).cast(pl.Int32).alias("cate"))
    cols += [parse_history(c, max_history) for c in hist_columns(schema)]
    if "timestamp" in schema:
        cols.append(pl.col("timestamp").cast(pl.Int64))
    return lf.select(cols)


OVERFLOW_FILE = "history_overflow.parquet"     # in the sessions folder (pipeline/preprocess.py)


def overflow(splits: dict[str, pl.LazyFrame], max_history: int) -> pl.DataFrame:
    """The history tokens `parse_history` cuts off (all but the most recent `max_history`) in the rows of
    `splits`, counted per (split, column, key): key is the sessions id (raw + 1). The vocabularies count them
    (pipeline/ctr_vocab.py), as FuxiCTR's Tokenizer counts every token of the raw column and cuts each
    sequence to its max_len only when encoding it (walk 39a #1: a KuaiVideo item seen 6 times in the cut
    part and 5 times in the kept 100 missed min count 10). Only rows longer than max_history are parsed."""
    frames = []
    for split, lf in splits.items():
        for col in hist_columns(lf.collect_schema()):
            n = pl.col(col).str.count_matches("^", literal=True) + 1
            cut = (lf.filter((pl.col(col) != "") & (n > max_history))
                     .select(_id_lists(col, pl.Int64).alias("ids"))
                     .select(pl.col("ids").list.head(pl.col("ids").list.len() - max_history))
                     .explode("ids").drop_nulls()
                     .group_by("ids").agg(pl.len().cast(pl.Int64).alias("count"))
                     .select(pl.lit(split).alias("split"), pl.lit(col).alias("column"),
                             (pl.col("ids") + 1).alias("key"), "count"))
            frames.append(cut)
    schema = {"split": pl.String, "column": pl.String, "key": pl.Int64, "count": pl.Int64}
    if not frames:
        return pl.DataFrame(schema=schema)
    out = pl.concat(pl.collect_all(frames, engine="streaming"))
    return out.cast(schema).sort("split", "column", "key")


_REQUIRED = ("label", "user", "item")


def _blank() -> pl.Expr:
    """A row whose every field is empty: how Polars reads a blank line of the CSV."""
    return pl.all_horizontal([pl.col(c).is_null() for c in _REQUIRED])


def _stats(lf: pl.LazyFrame, name: str, columns: Optional[dict] = None) -> dict:
    """One streaming pass over the raw rows: counts per split, id ranges, malformed values
    (history tokens are cast strictly, so "3^x" or "3^^4" fails here, before anything is written).
    Blank lines are counted apart (`build` drops those that end a file; one inside a file is refused),
    and so are empty fields: a null user fell out of both train and valid (the last_per_user join),
    a null label passed every check. `columns` names the CSV's columns in messages (protocol -> raw)."""
    schema = lf.collect_schema()
    hists = hist_columns(schema)
    item_lists = [c for c in hists if c not in CATE_HISTORIES]
    cate_lists = [c for c in hists if c in CATE_HISTORIES]
    negative = pl.sum_horizontal([pl.col(c).str.contains("-", literal=True).fill_null(False) for c in hists] or [0])
    as_ints = lambda c: _id_lists(c, pl.Int64)  # noqa: E731
    blank = _blank()
    train = pl.col("split") == "train"
    required = _REQUIRED + (("cate",) if "cate" in schema else ())
    aggs = [
        (~blank).sum().alias("rows"),
        (train & ~blank).sum().alias("train"),
        (train & (pl.col("label") == 1)).sum().alias("train_clicks"),
        ((pl.col("split") == "test") & (pl.col("label") == 1)).sum().alias("test_clicks"),
        negative.sum().alias("negative_hist"),
        pl.col("label").is_in([0, 1]).not_().sum().alias("bad_label"),
        pl.min_horizontal(pl.col("item").min(), pl.col("user").min()).alias("min_id"),
        pl.max_horizontal([pl.col("item").max()] + [as_ints(c).list.max().max() for c in item_lists]).alias("max_item"),
        blank.sum().alias("blank"),
    ]
    if "cate" in schema:
        aggs.append(pl.max_horizontal([pl.col("cate").max()] + [as_ints(c).list.max().max() for c in cate_lists])
                    .alias("max_cate"))
        aggs.append(pl.col("cate").min().alias("min_cate"))
    for split in ("train", "test"):      # file line = row + 2 (the header is line 1)
        here = pl.col("split") == split
        aggs.append(pl.col("row").filter(~blank & here).max().alias(f"last_{split}_row"))
        aggs.append(pl.col("row").filter(blank & here).min().alias(f"first_blank_{split}"))
    for col in required:
        empty = pl.col(col).is_null() & ~blank
        aggs.append(empty.sum().alias(f"empty_{col}"))
        aggs.append(pl.struct("split", "row").filter(empty).first().alias(f"first_empty_{col}"))
    def length(c: str) -> pl.Expr:  # tokens in a '^' list; null or "" (no history, a missing field) 0
        return (pl.when(pl.col(c).is_null() | (pl.col(c) == "")).then(0)
                .otherwise(pl.col(c).str.count_matches("^", literal=True) + 1))
    if hists:                       # longer train.csv histories than max_history: their cut tokens count (build);
        aggs.append(pl.max_horizontal([as_ints(c).list.len().filter(train & ~blank).max() for c in hists])  # the
                    .alias("longest_train_history"))                  # parse max_item / max_cate read is shared
    if item_lists and cate_lists:   # each history item's category at the same place: one list as long as the other
        apart = pl.any_horizontal([length(c) != length(item_lists[0]) for c in cate_lists]) & ~blank
        aggs.append(apart.sum().alias("hist_apart"))
        aggs.append(pl.struct("split", "row").filter(apart).first().alias("first_hist_apart"))
    if "timestamp" in schema:       # the tail rule takes train.csv's last rows for its most recent ones
        step_back = pl.col("timestamp").filter(train & ~blank).diff() < 0
        aggs.append(step_back.sum().alias("time_disorder"))
        aggs.append(pl.col("row").filter(train & ~blank).filter(step_back).first().alias("first_time_disorder"))
    try:
        stats = lf.select(aggs).collect(engine="streaming").row(0, named=True)
    except pl.exceptions.InvalidOperationError as e:  # a strict cast of a history token
        where = _first_bad_token(lf, hists, columns or {})
        raise DataError(f"{name}: history lists that are not '^'-separated integer ids "
                        f"({where or str(e).splitlines()[0]})", "the CSV is damaged; re-download it") from None
    except (pl.exceptions.ComputeError, OSError) as e:
        from ..errors import as_os_error
        if as_os_error(e) is not None:
            raise
        raise DataError(f"{name}: the CTR files could not be parsed ({str(e).splitlines()[0]})",
                        "check that train.csv/test.csv are the BARS files (re-download them)") from None
    if stats["rows"] == 0 or stats["train"] == 0 or stats["train"] == stats["rows"]:
        empty = [f for f, n in (("train.csv", stats["train"]), ("test.csv", stats["rows"] - stats["train"])) if not n]
        raise DataError(f"{name}: {' and '.join(empty)} {'has' if len(empty) == 1 else 'have'} no rows (a header "
                        "at most)", "re-download the dataset")
    fill = "fill or drop those rows (the BARS files have none: in a registered dataset's file they are damage)"
    for split in ("train", "test"):
        first, last = stats[f"first_blank_{split}"], stats[f"last_{split}_row"]
        if first is not None and first < last:          # blank lines that end a file are dropped (`build`)
            raise DataError(f"{name}: {split}.csv line {first + 2:,} is blank (every field empty)",
                            "remove that line (the BARS files have none: in a registered dataset's file it is damage)")
    for col in required:
        count, first = stats[f"empty_{col}"], stats[f"first_empty_{col}"]
        if count:
            raise DataError(f"{name}: {count:,} row(s) with an empty {(columns or {}).get(col, col)} (the first on "
                            f"{first['split']}.csv line {first['row'] + 2:,})", fill)
    if stats.get("hist_apart"):     # was imported, and `seqpe train` refused it with a fix to preprocess again
        first, names = stats["first_hist_apart"], [(columns or {}).get(c, c) for c in (item_lists[0], *cate_lists)]
        raise DataError(f"{name}: {stats['hist_apart']:,} row(s) whose {' and '.join(names)} differ in length (the "
                        f"first on {first['split']}.csv line {first['row'] + 2:,}): each history item has its "
                        f"category at the same place", "repair or drop those rows (a field may be missing)")
    problems = [(stats["negative_hist"], "negative ids in history lists"),
                (stats["bad_label"], "labels other than 0/1")]
    for count, what in problems:
        if count:
            raise DataError(f"{name}: {count:,} row(s) with {what}", "the CSV is damaged; re-download it")
    if (stats["min_id"] or 0) < 0 or (stats.get("min_cate") or 0) < 0:
        raise DataError(f"{name}: negative ids in the CTR files", "the CSV is damaged; re-download it")
    if stats["max_item"] + 1 > _INT32_MAX or (stats.get("max_cate") or 0) + 1 > _INT32_MAX:
        raise DataError(f"{name}: an item or category id above {_INT32_MAX - 1:,}, the largest seqpe stores "
                        f"(largest item id {stats['max_item']:,})",
                        "renumber the ids 0..N-1 (a hashed id does not fit in 32 bits)")
    return stats


def carve_valid(lf: pl.LazyFrame, rule: str, fraction: float, n_train: int,
                own_files: bool = False) -> tuple[pl.LazyFrame, pl.LazyFrame, dict]:
    """Split the raw train rows into (train, valid) by `rule` (module docstring). `own_files` (an import):
    a valid split of no row is refused here (a preprocess leaves it to `seqpe train`, which names the setting)."""
    train = lf.filter(pl.col("split") == "train")
    if rule == "tail":
        n_valid = int(n_train * fraction)
        if n_valid == 0 and own_files:   # `seqpe train` picks its best epoch on valid: it failed there, naming no cause
            from ..errors import ParamsError
            at_least = 0.1 if n_train >= 10 else 0.5
            raise ParamsError(f"preprocess.valid_fraction={fraction} carves no valid row out of the {n_train:,} rows "
                              "of train.csv, and `seqpe train` picks its best epoch on valid",
                              f"run it with --set preprocess.valid_fraction={at_least} or more")
        is_valid = pl.col("row") >= n_train - n_valid
        info = {"valid": "tail", "valid_rows": n_valid,
                "valid_rule": f"last int({fraction} * {n_train}) rows of train.csv (time order)"}
    elif rule == "last_per_user":
        depth = (pl.col("hist_items").fill_null("").str.count_matches("^", literal=True)
                 + (pl.col("hist_items").fill_null("") != "").cast(pl.UInt32)).alias("_depth")
        deepest = (train.group_by("user").agg(depth.max()).collect(engine="streaming").lazy())
        train = train.join(deepest, on="user", how="left", maintain_order="left")
        is_valid = depth == pl.col("_depth")
        info = {"valid": "last_per_user",
                "valid_rule": "per user, the train rows with the longest history (the last train position)"}
    else:
        raise DataError(f"unknown CTR valid rule '{rule}'", "use 'tail' or 'last_per_user' in the dataset options")
    flagged = train.with_columns(is_valid.alias("_valid"))
    if "_depth" in flagged.collect_schema():
        flagged = flagged.drop("_depth")
    return (flagged.filter(~pl.col("_valid")).drop("_valid"),
            flagged.filter(pl.col("_valid")).drop("_valid"), info)


def build(spec, raw_dir: Path, params, own_files: bool = False) -> ProtocolResult:
    """Run the CTR protocol on `spec.reader(raw_dir)` (lazy: nothing big is collected here). `own_files`: a
    user's files in a BARS layout (`seqpe import`), whose train.csv must be in time order where the valid rule
    takes its last rows (the BARS file is sorted; a log of one's own need not be, and valid was then any 10%)."""
    max_history = params.preprocess.max_history
    lf = spec.reader(Path(raw_dir))
    columns = getattr(spec.reader, "columns", None)
    stats = _stats(lf, spec.name, columns)
    if stats["blank"]:                  # blank lines at the end of a file (_stats refused any other)
        lf = lf.filter(~_blank())
    n_train, n_test = int(stats["train"]), int(stats["rows"] - stats["train"])
    rule = spec.options.get("valid", "tail")
    if own_files and rule == "tail" and stats.get("time_disorder"):
        line = stats["first_time_disorder"] + 2
        raise DataError(f"{spec.name}: train.csv is not in time order (line {line:,}'s "
                        f"{(columns or {}).get('timestamp', 'timestamp')} is earlier than line {line - 1:,}'s; "
                        f"{stats['time_disorder']:,} such step{'s' if stats['time_disorder'] != 1 else ''} back), and valid is its last rows, the most recent "
                        "ones in a BARS file", "sort train.csv's rows by timestamp (a stable sort keeps the order of "
                        "equal times), then import it again")
    train_raw, valid_raw, info = carve_valid(lf, rule, params.preprocess.valid_fraction, n_train, own_files)
    test_raw = lf.filter(pl.col("split") == "test")
    splits = {"train": samples(train_raw, max_history), "valid": samples(valid_raw, max_history),
              "test": samples(test_raw, max_history)}
    longer = max_history > 0 and (stats.get("longest_train_history") or 0) > max_history    # else nothing is cut
    cut = overflow({"train": train_raw, "valid": valid_raw} if longer else {}, max_history)
    n_items = int(stats["max_item"]) + 1
    try:
        items = (lf.group_by("item").agg(pl.len().cast(pl.Int64).alias("count"))
                   .select((pl.col("item") + 1).cast(pl.Int32).alias("item_id"),
                           pl.col("item").cast(pl.String).alias("raw_id"), "count")
                   .sort("item_id").collect(engine="streaming"))
    except pl.exceptions.ComputeError as e:
        raise DataError(f"{spec.name}: {str(e).splitlines()[0]}", "re-download the dataset") from None
    extra = {
        "max_history": max_history,
        "n_cates": int(stats["max_cate"]) + 1 if "max_cate" in stats else 0,
        "columns": list(splits["train"].collect_schema()),
        "ids": "raw BARS id + 1 (0 = padding); user ids are raw",
        "history_order": "oldest first, truncated to the most recent max_history (the tokens cut off train.csv's "
                         "rows are counted in history_overflow.parquet, for the vocabularies)",
        "items_table": "target items with their target counts over all splits",
        "bars_rows": {"train": n_train, "test": n_test},
        **({"blank_lines_dropped": int(stats["blank"])} if stats["blank"] else {}),
        **({"train_time_steps_back": int(stats["time_disorder"])} if stats.get("time_disorder") else {}),
        **info,
    }
    return ProtocolResult(
        splits=splits,
        items=items,
        steps=[step("read train.csv", None, stats["train_clicks"], None, rows=n_train),     # clicks: label 1
               step("read test.csv", None, stats["test_clicks"], None, rows=n_test)],
        n_items=n_items,
        augment={"train": "rows", "valid": "rows", "test": "rows"},
        extra=extra,
        overflow=cut,
    )
