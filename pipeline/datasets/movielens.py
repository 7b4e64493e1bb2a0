"""MovieLens-1M (`ml_1m`): GroupLens `ml-1m.zip`, leave-one-out protocol (REFERENCE.md §1, §3).

`ml-1m/ratings.dat` lines are `UserID::MovieID::Rating::Timestamp` (latin-1); users.dat
(`UserID::Gender::Age::Occupation::Zip-code`) and movies.dat (`MovieID::Title::Genres`) are
read by the metadata readers below (titles may hold single colons, never `::`).
"""
from __future__ import annotations

import io
from pathlib import Path

from .. import sniff
from ..errors import DataError
from ..lazy import lazy
from . import DatasetSpec, SourceSpec, register

pl = lazy("polars")  # imported on first use: `seqpe download` never needs it

RATINGS = ("user", "item", "rating", "timestamp")
USERS = ("user", "gender", "age", "occupation", "zip")
MOVIES = ("item", "title", "genres")


def find_file(raw_dir: Path, name: str) -> Path:
    """`raw_dir/ml-1m/<name>` as unpacked from the zip, or `raw_dir/<name>`."""
    for path in (Path(raw_dir) / "ml-1m" / name, Path(raw_dir) / name):
        if path.is_file():
            return path
    raise DataError(f"ml_1m: {name} not found in {raw_dir} (nor in its ml-1m/ folder)",
                    "run `seqpe download ml_1m` (or --from ml-1m.zip)")


def read_dat(path: Path, names: tuple[str, ...], numeric: tuple[str, ...]) -> pl.DataFrame:
    """Read a `::`-separated latin-1 file into named columns; numeric ones as Int64.

    Blank lines are skipped. A line with the wrong number of fields or a non-numeric value
    in a numeric column raises DataError naming the file, line number and content.
    """
    sniff.require_text(path)
    text = Path(path).read_bytes().decode("latin-1")
    lines = pl.read_csv(io.BytesIO(text.encode("utf-8")), has_header=False, separator="\x1f",
                        quote_char=None, new_columns=["line"], schema={"line": pl.String},
                        raise_if_empty=False, glob=False)
    lines = lines.with_row_index("lineno", offset=1).filter(pl.col("line").str.strip_chars() != "")
    bad = lines.filter(pl.col("line").str.count_matches("::", literal=True) != len(names) - 1)
    if bad.height:
        no, line = bad.row(0)
        raise DataError(f"{Path(path).name} line {no} has not {len(names)} '::'-separated fields: {line[:80]!r}",
                        "the file is damaged; re-download it")
    df = (lines.with_columns(pl.col("line").str.split_exact("::", len(names) - 1)
                             .struct.rename_fields(list(names)).alias("f"))
               .unnest("f"))
    for col in numeric:
        parsed = pl.col(col).str.strip_chars().cast(pl.Int64, strict=False)
        bad = df.filter(parsed.is_null())
        if bad.height:
            no, value = bad.select("lineno", col).row(0)
            raise DataError(f"{Path(path).name} line {no}: {col} {value!r} is not an integer",
                            "the file is damaged or not the MovieLens file; re-download it")
        df = df.with_columns(parsed)
    return df.select(names)


def read_numeric_dat(path: Path, names: tuple[str, ...]) -> pl.DataFrame:
    """Fast path for an all-integer `::` file: ':' as the separator gives the values in the odd
    columns and empty strings between them. Anything unexpected (a non-integer, a wrong field
    count) falls back to `read_dat`, whose checks name the offending line."""
    sniff.require_text(path)
    n = 2 * len(names) - 1
    schema = {f"c{k}": (pl.Int64 if k % 2 == 0 else pl.String) for k in range(n)}
    try:
        df = pl.read_csv(path, separator=":", has_header=False, schema=schema, quote_char=None,
                         raise_if_empty=False, truncate_ragged_lines=False, glob=False)
    except pl.exceptions.PolarsError:           # any (a `,` or tab file: SchemaError, was a traceback; walk 34b)
        return read_dat(path, names, names)
    values = [f"c{k}" for k in range(0, n, 2)]
    gaps = [f"c{k}" for k in range(1, n, 2)]
    ok = df.select(pl.all_horizontal([pl.col(c).is_not_null() for c in values]
                                     + [pl.col(c).is_null() for c in gaps]).all()).item()
    if not ok:
        return read_dat(path, names, names)
    return df.select([pl.col(c).alias(name) for c, name in zip(values, names)])


def read_ratings(raw_dir: Path) -> pl.LazyFrame:
    """ratings.dat -> user, item, rating, timestamp (Int64), file order (leave-one-out input)."""
    return read_numeric_dat(find_file(raw_dir, "ratings.dat"), RATINGS).lazy()


def read_users(raw_dir: Path) -> pl.DataFrame:
    """users.dat -> user, age, occupation (Int64); gender, zip (String)."""
    return read_dat(find_file(raw_dir, "users.dat"), USERS, ("user", "age", "occupation"))


def read_movies(raw_dir: Path) -> pl.DataFrame:
    """movies.dat -> item (Int64), title, genres (String, `|`-separated)."""
    return read_dat(find_file(raw_dir, "movies.dat"), MOVIES, ("item",))


ML_1M = SourceSpec(
    name="ml_1m",
    filename="ml-1m.zip",
    archive="zip",
    files=("ratings.dat", "users.dat", "movies.dat"),   # zip members ml-1m/*.dat, unpacked flat
    url="https://files.grouplens.org/datasets/movielens/ml-1m.zip",
    md5="c4d9eecfca2ab87c1945afe126590906",  # published by GroupLens (ml-1m.zip.md5)
    homepage="https://grouplens.org/datasets/movielens/1m/",
)

register(DatasetSpec(
    name="ml_1m",
    source=ML_1M,
    protocol="leave_one_out",
    description="MovieLens-1M ratings as implicit feedback, k-core, leave-one-out",
    reader=read_ratings,
    paper_size="1,000,209 ratings, 6,040 users, 3,706 movies",
))
