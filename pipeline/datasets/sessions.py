"""Session datasets under the SR-GNN protocol: Diginetica, Yoochoose (full, 1/4, 1/64), sample.

Readers check the header (and delimiter) eagerly, then return a lazy scan whose columns are
normalised to the input schema of `pipeline.protocols.srgnn`:

    session_id Int64   raw session id
    item_id    Int64   raw item id
    row        UInt32  the row's file line - 1 (a header, or a blank line, counts as a line), so that
                       messages name line row + 1
    time       Int64   within-session sort key: Diginetica `timeframe` (ms); Yoochoose the
                       row number (unused: Yoochoose keeps file order)
    stamp              the row's date as read: Diginetica `eventdate` (Date), Yoochoose the ISO
                       timestamp text (String); `options["stamp"]` ("day" | "iso") names how the
                       protocol turns it into seconds (only for each session's last row: parsing
                       33M timestamps would cost more than reading the file)

Parse errors (a non-integer id, a bad date) surface when the protocol collects and are
turned into one-line `DataError`s there (`pipeline.protocols.collect`). Yoochoose timestamps
are checked on the first row (eagerly) and on every session's last row (parsed strictly): the
only rows whose time the protocol uses.
"""
from __future__ import annotations

import re
from pathlib import Path

from .. import sniff
from ..errors import DataError, printable
from ..lazy import lazy
from . import DatasetSpec, SourceSpec, register

pl = lazy("polars")  # imported on first use: `seqpe download` never needs it

DIGINETICA_FILE = "train-item-views.csv"
YOOCHOOSE_FILE = "yoochoose-clicks.dat"
DIGINETICA_HEADERS = (
    ("sessionId", "userId", "itemId", "timeframe", "eventdate"),
    ("session_id", "user_id", "item_id", "timeframe", "eventdate"),
)
YOOCHOOSE_COLUMNS = ("session_id", "timestamp", "item_id", "category")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z?")


def find_file(raw_dir: Path, name: str) -> Path:
    """`raw_dir/name`, or the one file called `name` below it (archives may hold a folder)."""
    raw_dir = Path(raw_dir)
    direct = raw_dir / name
    if direct.is_file():
        return direct
    found = sorted(p for p in raw_dir.rglob(name) if p.is_file()) if raw_dir.is_dir() else []
    if not found:
        raise DataError(f"raw file {name} not found in {raw_dir}",
                        "run `seqpe download DATASET` (or `--from PATH`) to fetch and unpack it")
    return found[0]


def _first_lines(path: Path, n: int = 2) -> list[str]:
    """The first `n` lines of a text file (BOM and line ends stripped). An empty file, or one that is
    not text (an archive, binary data, an HTML page: pipeline/sniff.py), is a DataError saying what it is."""
    sniff.require_text(path)
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    return [line.rstrip("\r") for line in text.split("\n")[:n]]


def _shown(text: str) -> str:
    """File content quoted in a message: control characters escaped, at most 80 characters."""
    return printable(text, 80)


def read_diginetica(raw_dir: Path) -> pl.LazyFrame:
    """`train-item-views.csv` (CIKM Cup 2016): `;`-separated, header in camelCase or snake_case."""
    path = find_file(raw_dir, DIGINETICA_FILE)
    lines = _first_lines(path)
    header = lines[0].strip()
    expected = ";".join(DIGINETICA_HEADERS[0])
    if ";" not in header:
        for sep, name in ((",", "commas"), ("\t", "tabs")):
            if sep in header:
                raise DataError(f"{path} is separated by {name} (header '{_shown(header)}'), but Diginetica "
                                f"files are ';'-separated with header '{expected}'",
                                "use the original train-item-views.csv (do not re-save it from a spreadsheet)")
    names = tuple(c.strip() for c in header.split(";"))
    if names not in DIGINETICA_HEADERS:
        raise DataError(f"{path} has header '{_shown(header)}', expected '{expected}' "
                        f"(or '{';'.join(DIGINETICA_HEADERS[1])}')",
                        "use the original train-item-views.csv from dataset-train-diginetica.zip")
    if len(lines) < 2 or not lines[1].strip():
        raise DataError(f"{path} has a header but no rows", "re-download it (`seqpe download DATASET`)")
    first = lines[1].split(";")
    if len(first) != 5 or not _DATE.fullmatch(first[4].strip()):
        raise DataError(f"{path}: first row '{_shown(lines[1])}' does not end in an eventdate YYYY-MM-DD",
                        "use the original train-item-views.csv")
    # Polars keeps the date pattern of the first value for the whole column: rows in another
    # format fail to parse (a one-line DataError when the protocol collects)
    schema = {"session_id": pl.Int64, "user_id": pl.String, "item_id": pl.Int64,
              "timeframe": pl.Int64, "eventdate": pl.Date}
    lf = pl.scan_csv(path, separator=";", has_header=True, new_columns=list(schema),
                     schema_overrides=schema, row_index_name="row", row_index_offset=1, quote_char=None, glob=False)
    # a blank line is a row of nulls here: skipped, as SR-GNN's csv.DictReader skips it (it was refused as "an
    # empty timeframe", walk 36a); `row` keeps counting it, so the line numbers of other messages stay right
    lf = lf.filter(~pl.all_horizontal(pl.col(*schema).is_null()))
    return lf.select("session_id", "item_id", "row", pl.col("timeframe").alias("time"),
                     pl.col("eventdate").alias("stamp"))


def read_yoochoose(raw_dir: Path) -> pl.LazyFrame:
    """`yoochoose-clicks.dat` (RecSys Challenge 2015): `,`-separated, no header,
    `SessionId,Timestamp,ItemId,Category`; the category (0, S, a number, a brand) is ignored.

    A first line that spells the column names (SR-GNN's `-withHeader` copy) is skipped.
    """
    path = find_file(raw_dir, YOOCHOOSE_FILE)
    lines = _first_lines(path)
    first = lines[0].strip()
    fields = [c.strip() for c in first.split(",")]
    if len(fields) != 4:
        for sep, name in ((";", "semicolons"), ("\t", "tabs")):
            if sep in first:
                raise DataError(f"{path} is separated by {name} (first line '{_shown(first)}'), but Yoochoose "
                                "files are ','-separated: SessionId,Timestamp,ItemId,Category",
                                "use the original yoochoose-clicks.dat")
        raise DataError(f"{path} has {len(fields)} fields on its first line '{_shown(first)}', expected 4: "
                        "SessionId,Timestamp,ItemId,Category (no header)", "use the original yoochoose-clicks.dat")
    skip = 0
    if fields[0].isdigit() and not _STAMP.fullmatch(fields[1]):
        raise DataError(f"{path}: first row '{_shown(first)}' has timestamp '{_shown(fields[1])}', expected ISO-8601 "
                        "like 2014-04-07T10:51:09.277Z", "use the original yoochoose-clicks.dat")
    if not fields[0].isdigit():
        if [f.lower().replace("_", "") for f in fields] != ["sessionid", "timestamp", "itemid", "category"]:
            raise DataError(f"{path} starts with '{_shown(first)}', expected a data row like "
                            "'1,2014-04-07T10:51:09.277Z,214536502,0' (no header)", "use the original yoochoose-clicks.dat")
        skip = 1
        if len(lines) < 2 or not lines[1].strip():
            raise DataError(f"{path} has a header but no rows", "re-download it (`seqpe download DATASET`)")
    schema = {"session_id": pl.Int64, "timestamp": pl.String, "item_id": pl.Int64, "category": pl.String}
    lf = pl.scan_csv(path, separator=",", has_header=False, skip_rows=skip, new_columns=list(schema),
                     schema_overrides=schema, row_index_name="row", row_index_offset=skip, quote_char=None, glob=False)
    # a blank line (one at the end of the file too) is a row of nulls: skipped, as SR-GNN's csv.DictReader skips
    # it and read_diginetica does (walk 42d #1: refused as "rows with an empty session or item id")
    lf = lf.filter(~pl.all_horizontal(pl.col(*schema).is_null()))
    return lf.select("session_id", "item_id", "row", pl.col("row").cast(pl.Int64).alias("time"),
                     pl.col("timestamp").alias("stamp"))


_INT = re.compile(r"\s*[+-]?\d+")          # as Polars reads an Int64: leading blanks, no trailing ones


def first_bad_line(path: Path, sep: str, names: tuple[str, ...], ints: tuple[int, ...], headers=(),
                   date: int | None = None, stamp: int | None = None) -> str | None:
    """Where a file Polars could not parse goes wrong: its first line with more fields than `names`, a
    repeated header (`headers`), a non-integer in an `ints` column, a `date` column that is no YYYY-MM-DD date,
    or a `stamp` (ISO-8601) that is no time on a row that ends a run of one session (the only stamps the
    protocol reads); None when no line shows one. Polars' own message names a column but no line, and on a
    33M-line file that leaves the user nowhere (walk 42d #2). Read line by line in Python, with Polars' own rules
    (an integer may have leading blanks, not trailing ones, and fit 64 bits; a date is YYYY-MM-DD as written): this
    runs only once a read has failed, and stops at the first bad line (about 9 s a million lines: Yoochoose's 33M
    take some 5 minutes when the bad line is at the end, walk 42e #2)."""
    import datetime as dt
    lowered = {tuple(n.lower().replace("_", "") for n in h) for h in headers}
    previous = None                           # (session id text, stamp text, line number) of the last row
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        for n, line in enumerate(f, start=1):
            text = line.rstrip("\r\n").lstrip("\ufeff") if n == 1 else line.rstrip("\r\n")
            if not text.strip():
                continue
            fields = text.split(sep)
            if tuple(c.strip().lower().replace("_", "") for c in fields) in lowered:
                if n > 1:
                    return f"{path.name} line {n:,} repeats the header line ('{_shown(text)}')"
                continue
            if len(fields) > len(names):
                return (f"{path.name} line {n:,} has {len(fields)} '{sep}'-separated fields, expected {len(names)} "
                        f"({sep.join(names)}): '{_shown(text)}'")
            for i in ints:
                if i < len(fields) and fields[i].strip() and (not _INT.fullmatch(fields[i])
                                                              or not -2 ** 63 <= int(fields[i]) < 2 ** 63):
                    return f"{path.name} line {n:,}: {names[i]} '{_shown(fields[i])}' is not a 64-bit integer"
            if date is not None and date < len(fields) and fields[date].strip():
                try:
                    if not _DATE.fullmatch(fields[date]):
                        raise ValueError
                    dt.date(*map(int, fields[date].split("-")))
                except ValueError:
                    return f"{path.name} line {n:,}: {names[date]} '{_shown(fields[date])}' is not a date YYYY-MM-DD"
            if stamp is not None and fields[0] and len(fields) > stamp:
                if previous is not None and previous[0] != fields[0].strip():
                    bad = _bad_stamp(previous[1])
                    if bad:
                        return bad.format(where=f"{path.name} line {previous[2]:,}", name=names[stamp])
                previous = (fields[0].strip(), fields[stamp], n)
    if previous is not None and _bad_stamp(previous[1]):
        return _bad_stamp(previous[1]).format(where=f"{path.name} line {previous[2]:,}", name=names[stamp])
    return None


def _bad_stamp(text: str) -> str | None:
    """A `{where}` / `{name}` message when `text` is no ISO-8601 time as the protocol reads it (its first 19
    characters, %Y-%m-%dT%H:%M:%S), else None."""
    import datetime as dt
    try:
        dt.datetime.strptime(text.strip()[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return "{where}: {name} '" + _shown(text).replace("{", "{{").replace("}", "}}") + \
            "' is not an ISO-8601 time like 2014-04-07T10:51:09.277Z (it ends its session)"
    return None


def locate_diginetica(raw_dir: Path) -> str | None:
    return first_bad_line(find_file(raw_dir, DIGINETICA_FILE), ";", DIGINETICA_HEADERS[0], ints=(0, 2, 3),
                          headers=DIGINETICA_HEADERS, date=4)


def locate_yoochoose(raw_dir: Path) -> str | None:
    return first_bad_line(find_file(raw_dir, YOOCHOOSE_FILE), ",", ("SessionId", "Timestamp", "ItemId", "Category"),
                          ints=(0, 2), headers=(("SessionId", "Timestamp", "ItemId", "Category"),), stamp=1)


# --------------------------------------------------------------------------- sources

DIGINETICA = SourceSpec(
    name="diginetica",
    filename="dataset-train-diginetica.zip",
    archive="zip",
    files=(DIGINETICA_FILE,),
    url=None,  # the CIKM Cup 2016 host needs a login
    manual=("register for CIKM Cup 2016 track 2 (https://competitions.codalab.org/competitions/11161, "
            "or the cup page http://cikm2016.cs.iupui.edu/cikm-cup with its Diginetica DropBox link), "
            "download dataset-train-diginetica.zip, then run "
            "`seqpe download diginetica --from PATH/dataset-train-diginetica.zip`"),
    homepage="https://competitions.codalab.org/competitions/11161",
)

YOOCHOOSE = SourceSpec(
    name="yoochoose",
    filename="yoochoose-data.7z",
    archive="7z",
    files=(YOOCHOOSE_FILE,),
    # The RecSys Challenge 2015 host (s3-eu-west-1.amazonaws.com/yc-rdata) is the original; it has
    # been unreliable, so the Kaggle copy is the manual route. Checksums were never published.
    url="https://s3-eu-west-1.amazonaws.com/yc-rdata/yoochoose-data.7z",
    manual=("download yoochoose-data.7z from the RecSys Challenge 2015 page or the Kaggle copy "
            "(https://www.kaggle.com/datasets/chadgostopp/recsys-challenge-2015), then run "
            "`seqpe download {dataset} --from PATH/yoochoose-data.7z`"),   # {dataset}: the name the command used
    homepage="https://recsys.acm.org/recsys15/challenge/",
)

_DIGI_OPTIONS = {"split_days": 7, "sort_by_time": True, "stamp": "day"}
_YOO_OPTIONS = {"split_days": 1, "sort_by_time": False, "stamp": "iso"}

register(DatasetSpec(
    name="diginetica", source=DIGINETICA, protocol="srgnn", reader=read_diginetica, locate=locate_diginetica,
    description="CIKM Cup 2016 Diginetica item views, SR-GNN protocol (7-day test split)",
    options=dict(_DIGI_OPTIONS), paper_size="1,235,380 clicks, 310,324 sessions, 122,993 items",
))

for _name, _fraction, _size in (("yoochoose_1_64", 64, "1/64 of train: 369,859 train samples, 55,898 test"),
                                ("yoochoose_1_4", 4, "1/4 of train samples"),
                                ("yoochoose", 1, "33,003,944 clicks, 9,249,729 sessions, 52,739 items")):
    register(DatasetSpec(
        name=_name, source=YOOCHOOSE, protocol="srgnn", reader=read_yoochoose, locate=locate_yoochoose,
        description=(f"RecSys Challenge 2015 Yoochoose clicks, SR-GNN protocol (1-day test split)"
                     + (f", most recent 1/{_fraction} of the train samples" if _fraction > 1 else "")),
        options=dict(_YOO_OPTIONS, fraction=_fraction), paper_size=_size,
    ))


def _sample_source() -> SourceSpec:
    from .sample import SAMPLE_ARCHIVE, generate
    return SourceSpec(name="sample", filename=SAMPLE_ARCHIVE, archive="generated", files=(DIGINETICA_FILE,),
                      generate=generate, homepage=None,
                      manual="generated by seqpe itself (`seqpe download sample`), seeded by preprocess.sample")


register(DatasetSpec(
    name="sample", source=_sample_source(), protocol="srgnn", reader=read_diginetica, locate=locate_diginetica,
    description="embedded synthetic click log in the exact Diginetica raw format (seeded)",
    options=dict(_DIGI_OPTIONS), paper_size="~4,000 sessions (preprocess.sample)",
))
