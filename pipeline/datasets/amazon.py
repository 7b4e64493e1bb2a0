"""Amazon 2014 5-core reviews (McAuley): beauty, sports, toys, video_games, electronics, books.

Raw file per category: `reviews_<Category>_5.json.gz`, one JSON object per line with
`reviewerID`, `asin`, `overall`, `unixReviewTime` (REFERENCE.md §1); the reader also takes
the file gunzipped (`reviews_<Category>_5.json`) or the ratings-only variant
`ratings_<Category>.csv` (`user,item,rating,timestamp`, no header), whichever is present,
in that order. Protocol: leave-one-out with iterative k-core (§3).

Only the needed fields are parsed (a restricted schema, so review texts are skipped) and
the JSON is read with Polars' streaming engine: Books (8.9M reviews) stays well within 8 GB.

`books_hllm` is CAPE's Table 3 dataset (001 §5.1.3: "We follow the HLLM (Chen et al., 2024) to
preprocess the dataset ... we retain only items and the users with at least 5 presences. We only
keep item_id ... The maximum length of context is set to 50", 10,053,086 interactions, 694,898
users, 686,624 items). HLLM's own code (bytedance/HLLM: README, process_books.py,
code/REC/data/dataload.py and dataset/evalset.py) fixes what that means, and seqpe does the same:

- raw file: `ratings_Books.csv`, the Amazon 2014 ratings-only Books file (22,507,155 ratings,
  `user,item,rating,timestamp`, no header), NOT the 5-core review file `books` reads (8.9M
  reviews: fewer than HLLM's 10.05M interactions after its filter);
- every rating is an interaction, whatever its value; repeated (user, item) pairs count and stay;
- filter, not iterated: rows whose item AND user each have >= 5 ratings in the whole file are
  kept (one count of each, on all rows), then users left with < 5 rows are dropped; items are not
  counted again, so some kept items have fewer than 5 interactions (`options["core"] = "hllm"`,
  `pipeline.protocols.leave_one_out.hllm_core`);
- split: leave-one-out on each user's interactions in timestamp order: the last item is the
  test target, the second last the validation target, the rest train (HLLM's Data.build and
  SeqEvalDataset) — exactly seqpe's leave-one-out split;
- item id only, context 50: train with `train.max_len: 50` (`options["context"]` records it).

Known differences, none in which rows are kept or which item is held out: timestamp ties
inside a user keep file order here (HLLM sorts with pandas' default, unstable quicksort); ids are
numbered by seqpe's rule (HLLM factorizes in file order); HLLM cuts a long train sequence into
consecutive windows of 51 items and trains on all of them, while seqpe's shifted train rows keep
the most recent `augment.max_len` + 1 items (set augment.max_len: 0 to keep every item).
"""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Optional

from .. import sniff
from ..errors import DataError
from ..lazy import lazy
from . import DatasetSpec, SourceSpec, register

pl = lazy("polars")  # imported on first use: `seqpe download` never needs it

HOST = "http://snap.stanford.edu/data/amazon/productGraph/categoryFiles"
HOMEPAGE = "http://jmcauley.ucsd.edu/data/amazon/"
JSON_FIELDS = {"reviewerID": "String", "asin": "String", "overall": "Float64", "unixReviewTime": "Int64"}
CSV_COLUMNS = ("user", "item", "rating", "timestamp")
FIX_DOWNLOAD = "re-download it (`seqpe download DATASET`)"


def candidates(category: str) -> tuple[str, ...]:
    """File names the reader accepts for a category, in order of preference."""
    return (f"reviews_{category}_5.json.gz", f"reviews_{category}_5.json", f"ratings_{category}.csv")


def _first_bad_json_line(path: Path) -> str:
    """Error path only: find the first line that is not a complete JSON object (for the message)."""
    opener = gzip.open if path.suffix == ".gz" else open
    no = 0
    try:
        with opener(path, "rb") as f:
            for no, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    return f"line {no} is not a complete JSON object (truncated?): {line[:60]!r}"
                if not isinstance(obj, dict):
                    return f"line {no} is not a JSON object"
    except EOFError:
        return f"the gzip stream is cut short after line {no}"
    except (OSError, gzip.BadGzipFile) as e:
        return f"it is not a readable gzip file ({e})"
    return "it could not be parsed"


def read_reviews_json(path: Path) -> pl.DataFrame:
    """JSON lines (gz or plain) -> user, item, rating, timestamp in file order."""
    if path.suffix != ".gz":
        sniff.require_text(path)
    elif sniff.kind_of(path) != "gz":
        raise DataError(f"{path.name} is {sniff.describe(sniff.head(path))}, not gzip data",
                        f"the file is damaged or not an Amazon 2014 review dump; {FIX_DOWNLOAD}")
    try:
        literal = re.sub(r"([\[\]*?])", r"[\1]", str(path))    # scan_ndjson has no glob=False: `[1]` in a folder's
        df = pl.scan_ndjson(literal, schema={k: getattr(pl, t) for k, t in JSON_FIELDS.items()}  # name was a pattern
                            ).collect(engine="streaming")                                    # (walk 45b #1)
    except (pl.exceptions.ComputeError, pl.exceptions.SchemaError, OSError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "cannot parse" in msg:  # a field of the wrong type (e.g. a text unixReviewTime)
            raise DataError(f"{path.name}: a review has a field of the wrong type ({msg})",
                            f"the file is damaged or not an Amazon 2014 review dump; {FIX_DOWNLOAD}") from None
        raise DataError(f"{path.name}: {_first_bad_json_line(path)}",
                        f"the file is damaged or incomplete; {FIX_DOWNLOAD}") from None
    df = df.rename({"reviewerID": "user", "asin": "item", "overall": "rating", "unixReviewTime": "timestamp"})
    _check_complete(df, path, ("user", "item", "timestamp"))
    return df


def read_ratings_csv(path: Path) -> pl.DataFrame:
    """`user,item,rating,timestamp` CSV without header -> the same columns, file order; blank lines skipped."""
    sniff.require_text(path)
    skip = _leading_blank_lines(path)    # polars takes the width from the first line: a blank one was 1 column
    try:
        raw = pl.read_csv(path, has_header=False, infer_schema=False, quote_char='"', raise_if_empty=False,
                          skip_rows=skip, glob=False)
    except (pl.exceptions.ComputeError, pl.exceptions.NoDataError) as e:
        raise DataError(f"{path.name} is not a well-formed CSV ({str(e).splitlines()[0]})",
                        f"expected user,item,rating,timestamp per line; {FIX_DOWNLOAD}") from None
    if raw.width != len(CSV_COLUMNS):
        raise DataError(f"{path.name} has {raw.width} columns, expected {len(CSV_COLUMNS)} "
                        f"({','.join(CSV_COLUMNS)}, no header)",
                        f"use the ratings-only file `ratings_<Category>.csv`; {FIX_DOWNLOAD}")
    df = raw.rename(dict(zip(raw.columns, CSV_COLUMNS))).with_row_index("lineno", offset=1 + skip)
    blank = pl.all_horizontal(pl.col(c).is_null() | (pl.col(c).str.strip_chars() == "") for c in CSV_COLUMNS)
    last = df.filter(~blank).get_column("lineno").max()
    # rows of empty fields before the last record, or every row when none has data (a file of only `,,,`
    # lines said "has no interactions", walk 41a #7): found by one pass over the file
    inner = df.filter(blank & (pl.col("lineno") < last)) if last is not None else df.filter(blank)
    trailing = df.filter(blank & (pl.col("lineno") > last)).height if last is not None else 0
    no = _empty_fields_line(path, inner.get_column("lineno").to_list()) if inner.height else None
    if no is None and trailing:        # the file's last lines, read from its end (walk 40e #6: `,,,` last was dropped)
        no = _empty_fields_tail(path, trailing, last)
    if no is not None:
        raise DataError(f"{path.name} line {no} has only empty fields (no user, item, rating or timestamp)",
                        f"the CSV must be user,item,rating,timestamp on every line; {FIX_DOWNLOAD}")
    df = df.filter(~blank)             # a blank line (a trailing "\r\n\r\n") was "rating None is not a number"
    for col, dtype in (("rating", pl.Float64), ("timestamp", pl.Int64)):
        parsed = pl.col(col).str.strip_chars().cast(dtype, strict=False)
        bad = df.filter(parsed.is_null())
        if bad.height:
            no, value = bad.select("lineno", col).row(0)
            header = ",".join(str(v) for v in df.row(0)[1:5])
            if no == 1 and not any(ch.isdigit() for ch in header):
                din = (" (DIN's behaviour log, which seqpe does not read: its CTR split is `amazon_electronics`, "
                       "the BARS files)") if "cate" in header else ""
                raise DataError(f"{path.name} starts with a header line ({header}){din}, and the Amazon ratings CSV "
                                f"is user,item,rating,timestamp with no header",
                                "pass the ratings-only file `ratings_<Category>.csv` as published, or drop the header "
                                "line if the columns are user,item,rating,timestamp")
            raise DataError(f"{path.name} line {no}: {col} {value!r} is not a number",
                            "the CSV must be user,item,rating,timestamp with no header line")
        df = df.with_columns(parsed)
    df = df.drop("lineno")
    _check_complete(df, path, ("user", "item"))
    return df


def _leading_blank_lines(path: Path) -> int:
    """How many lines at the start of `path` hold only white space (looked for in its first 64 KiB)."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    n = 0
    for line in head.split(b"\n")[:-1]:
        if line.strip():
            break
        n += 1
    return n


def _empty_fields_line(path: Path, linenos: list[int]) -> Optional[int]:
    """The first of `linenos` (lines polars read as all-empty fields, before the file's last row) that is not
    blank but separators and quotes (`,,,`): a record with nothing in it, not a blank line. One pass over the
    file, only when such rows exist."""
    wanted = set(linenos)
    with open(path, "rb") as f:
        for no, line in enumerate(f, start=1):
            if no in wanted and line.strip():
                return no
            if no >= max(wanted):
                break
    return None


def _empty_fields_tail(path: Path, count: int, last: int) -> Optional[int]:
    """Of the `count` lines that end the file after its last record (line `last`), the first that is separators
    and quotes rather than blank (its line number), or None; read from the file's end, not the whole file."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(max(0, size - (1 << 16)))
        tail = f.read().split(b"\n")
    if tail and not tail[-1].strip():
        tail = tail[:-1]                       # the newline that ends the file
    if count > len(tail) - (size > 1 << 16):   # more trailing lines than the last 64 KiB hold whole (walk 41a #6):
        return _empty_fields_line(path, list(range(last + 1, last + count + 1)))      # a pass over the file
    for offset, line in enumerate(tail[-count:]):
        if line.strip():
            return last + 1 + offset
    return None


def _check_complete(df: pl.DataFrame, path: Path, cols: tuple[str, ...]) -> None:
    for col in cols:
        empty = pl.col(col).is_null()
        if df.schema[col] == pl.String:
            empty = empty | (pl.col(col) == "")
        missing = df.with_row_index("lineno", offset=1).filter(empty)
        if missing.height:
            raise DataError(f"{path.name} line {missing['lineno'][0]}: {col} is missing",
                            f"every review needs reviewerID, asin and unixReviewTime; {FIX_DOWNLOAD}")


def find_raw(raw_dir: Path, category: str) -> Path:
    for name in candidates(category):
        if (Path(raw_dir) / name).is_file():
            return Path(raw_dir) / name
    raise DataError(f"none of {', '.join(candidates(category))} is in {raw_dir}",
                    "run `seqpe download DATASET` (or --from a file you have)")


def reader_for(category: str):
    """The leave-one-out reader of one category: (raw_dir) -> LazyFrame user, item, timestamp."""
    def read(raw_dir: Path) -> pl.LazyFrame:
        path = find_raw(raw_dir, category)
        df = read_ratings_csv(path) if path.suffix == ".csv" else read_reviews_json(path)
        return df.select("user", "item", "timestamp").lazy()
    read.__doc__ = f"Read Amazon {category} reviews (JSON lines gz/plain or ratings CSV)."
    return read


# name -> (category in the file name, paper size of the 5-core file)
CATEGORIES = {
    "beauty": ("Beauty", "198,502 reviews, 22,363 users, 12,101 items"),
    "sports": ("Sports_and_Outdoors", "296,337 reviews, 35,598 users, 18,357 items"),
    "toys": ("Toys_and_Games", "167,597 reviews, 19,412 users, 11,924 items"),
    "video_games": ("Video_Games", "231,780 reviews, 24,303 users, 10,672 items"),
    "electronics": ("Electronics", "1,689,188 reviews, 192,403 users, 63,001 items"),
    "books": ("Books", "8,898,041 reviews, 603,668 users, 367,982 items"),
}

for _name, (_category, _size) in CATEGORIES.items():
    _file = f"reviews_{_category}_5.json.gz"
    register(DatasetSpec(
        name=_name,
        source=SourceSpec(name=f"amazon_{_name}", filename=_file, archive="gz", files=(_file,),
                          url=f"{HOST}/{_file}", homepage=HOMEPAGE,
                          alternates=tuple(c for c in candidates(_category) if c != _file)),
        protocol="leave_one_out",
        description=f"Amazon 2014 {_category.replace('_', ' ')} 5-core reviews, k-core, leave-one-out",
        reader=reader_for(_category),
        options={"category": _category},
        paper_size=_size,
    ))


def ratings_reader(category: str):
    """A reader of `ratings_<category>.csv` only (the ratings-only file, whatever else is in the folder)."""
    name = f"ratings_{category}.csv"

    def read(raw_dir: Path) -> pl.LazyFrame:
        path = Path(raw_dir) / name
        if not path.is_file():
            raise DataError(f"{name} is not in {raw_dir}", "run `seqpe download DATASET` (or --from the file you have)")
        return read_ratings_csv(path).select("user", "item", "timestamp").lazy()
    read.__doc__ = f"Read the Amazon 2014 ratings-only {category} file ({name})."
    return read


register(DatasetSpec(
    name="books_hllm",
    source=SourceSpec(name="amazon_books_ratings", filename="ratings_Books.csv", archive="none",
                      files=("ratings_Books.csv",), url=f"{HOST}/ratings_Books.csv", homepage=HOMEPAGE),
    protocol="leave_one_out",
    description="Amazon 2014 Books ratings under HLLM's protocol (CAPE 001 Table 3): 5 per user and item "
                "once, item ids only, leave-one-out, context 50",
    reader=ratings_reader("Books"),
    options={"category": "Books", "core": "hllm", "k_core": 5, "context": 50},
    paper_size="10,053,086 interactions, 694,898 users, 686,624 items (HLLM / CAPE 001 §5.1.3)",
))
