"""Sequential protocol "leave_one_out" (ML-1m, Amazon): REFERENCE.md §3.

Input (what a `DatasetSpec.reader` returns): a LazyFrame with one row per rating or
review, in file order, columns `user` and `item` (Int64 or String raw ids) and
`timestamp` (Int64). Every row is an implicit interaction (ratings are ignored).

Steps, in this order:

1. Read; number rows in file order (`row`), the tie-breaker for equal timestamps.
2. Iterative k-core (`params.preprocess.k_core`, users AND items): each round counts
   interactions per user and per item on the current rows (repeats count) and drops
   every row whose user or item has fewer than k; rounds repeat until one drops
   nothing. Each round is a manifest step (`k_core_round_<r>`).
   A dataset may ask for HLLM's filter instead (`options["core"] == "hllm"`, k = options["k_core"]):
   one pass that drops every row whose user or item has fewer than k interactions counted on
   all rows, then drops users left with fewer than k rows; items are not counted again
   (`hllm_core`; HLLM's process_books.py, see pipeline.datasets.amazon).
3. Users with fewer than 3 interactions cannot give train, valid and test; they are
   dropped. With k_core < 3 that is part of the iterative core (users need max(k, 3), items k, repeated
   until stable: dropped after the core, a user took items below k with it, walk 36a); HLLM's filter
   drops them after its own steps (`min_3_per_user`).
4. Re-index. Users: 1..U in ascending raw-id order (numeric for ML-1m, lexicographic
   for Amazon). Items: 1..N in order of first appearance walking the users in new-id
   order, each user's interactions ordered by (timestamp, file order). 0 is padding.
   users.parquet maps each new user id (session_id) back to its raw id, as items.parquet does items.
5. Split per user (session_id = new user id, rows ordered by it): test = the full
   sequence, valid = sequence[:-1], train = sequence[:-2]. `augment` turns them into
   samples: train "shifted" (every next item, shifted targets), valid and test "last".
"""
from __future__ import annotations

from pathlib import Path

import polars as pl

from ..errors import DataError
from . import ProtocolResult, step

MIN_PER_USER = 3  # train, valid and test each need one target


def _code(col: str, dtype) -> pl.Expr:
    """An integer key for a raw id column: integers as they are, strings by their categorical code."""
    return pl.col(col) if dtype.is_integer() else pl.col(col).cast(pl.Categorical).to_physical()


def _counts(df: pl.DataFrame) -> tuple[int, int, int]:
    """(users, interactions, items) of an interaction frame."""
    return df["u"].n_unique(), df.height, df["i"].n_unique()


def k_core(df: pl.DataFrame, k: int, min_user: int = 1) -> tuple[pl.DataFrame, list[dict]]:
    """Iterative user/item k-core on columns u, i (users need max(k, min_user) rows, items k); returns the
    kept rows and one step per round.

    Every round that ran is recorded, the last one being the round that removed nothing
    (so the manifest shows the filter converged). Nothing to filter (k and min_user <= 1) records nothing.
    """
    steps: list[dict] = []
    users = max(k, min_user)
    if users <= 1 and k <= 1:
        return df, steps
    r = 0
    while True:
        r += 1
        kept = df.filter((pl.len().over("u") >= users) & (pl.len().over("i") >= k))
        steps.append(step(f"k_core_round_{r}", *_counts(kept)))
        if kept.height == df.height or kept.height == 0:
            return kept, steps
        df = kept


def hllm_core(df: pl.DataFrame, k: int) -> tuple[pl.DataFrame, list[dict]]:
    """HLLM's filter on columns u, i: rows whose user and item both have >= k interactions on all
    rows (one pass), then users with >= k rows left; two steps, items never re-counted."""
    once = df.filter((pl.len().over("u") >= k) & (pl.len().over("i") >= k))
    users = once.filter(pl.len().over("u") >= k)
    return users, [step(f"hllm_users_items_{k}", *_counts(once)), step(f"hllm_users_{k}_again", *_counts(users))]


def sequences(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Re-index users and items (rules in the module docstring) and build per-user sequences.

    `df` has user and item (raw ids), i (item code), timestamp and row. Returns
    (sequences: session_id Int64, items List(Int32); the items table; the users table: session_id Int64,
    raw_id String, the raw user id of each new one, written as users.parquet).
    """
    users = df.select(pl.col("user").unique()).sort("user").with_row_index("session_id", offset=1)
    user_table = users.select(pl.col("session_id").cast(pl.Int64), pl.col("user").cast(pl.String).alias("raw_id"))
    df = (df.join(users.with_columns(pl.col("session_id").cast(pl.Int64)), on="user", how="left")
            .sort(["session_id", "timestamp", "row"])
            .with_row_index("pos"))
    df = df.with_columns(pl.col("pos").min().over("i").rank("dense").cast(pl.Int32).alias("item_id"))
    items = (df.group_by("item_id")
               .agg(pl.col("item").first().cast(pl.String).alias("raw_id"), pl.len().cast(pl.Int64).alias("count"))
               .sort("item_id"))
    seqs = (df.group_by("session_id", maintain_order=True)
              .agg(pl.col("item_id").alias("items")))
    return seqs, items, user_table


def split(seqs: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """train = seq[:-2], valid = seq[:-1], test = seq (REFERENCE.md §3)."""
    n = pl.col("items").list.len()
    return {
        "train": seqs.with_columns(pl.col("items").list.head(n - 2)),
        "valid": seqs.with_columns(pl.col("items").list.head(n - 1)),
        "test": seqs,
    }


def build(spec, raw_dir: Path, params) -> ProtocolResult:
    """Run the leave-one-out protocol on `spec.reader(raw_dir)`."""
    hllm = getattr(spec, "options", {}).get("core") == "hllm"
    k = int(spec.options["k_core"]) if hllm else params.preprocess.k_core
    raw = spec.reader(Path(raw_dir)).select("user", "item", "timestamp").collect()
    if raw.height == 0:
        raise DataError(f"{spec.name}: the raw file has no interactions", "re-download it (`seqpe download`)")
    df = raw.with_row_index("row").with_columns(_code("user", raw.schema["user"]).alias("u"),
                                                     _code("item", raw.schema["item"]).alias("i"))
    steps = [step("read", *_counts(df))]
    df, rounds = hllm_core(df, k) if hllm else k_core(df, k, MIN_PER_USER)
    steps += rounds
    if hllm and k < MIN_PER_USER:
        df = df.filter(pl.len().over("u") >= MIN_PER_USER)
        steps.append(step(f"min_{MIN_PER_USER}_per_user", *_counts(df)))
    if df.height == 0:
        raise DataError(
            f"{spec.name}: the {k}-core filter left no interactions ({raw.height:,} read, "
            f"{len(rounds)} round(s))",
            "lower preprocess.k_core or check that the raw file is the full dataset")
    seqs, items, users = sequences(df)
    return ProtocolResult(
        splits=split(seqs),
        items=items,
        users=users,
        steps=steps,
        n_items=items.height,
        augment={"train": "shifted", "valid": "last", "test": "last"},
        extra={
            "k_core": k,
            "k_core_rounds": 0 if hllm else len(rounds),
            "core": ("hllm: one pass of user and item counts >= k on all rows, then users with >= k rows left"
                     if hllm else "iterative user and item k-core until stable"
                     + (f" (users >= {MIN_PER_USER}: train, valid and test each need one)" if k < MIN_PER_USER
                        else "")),
            "users": seqs.height,
            "user_order": "ascending raw user id",
            "item_order": "first appearance walking users in new-id order, each by (timestamp, file order)",
            "split": "per user: test = full sequence, valid = [:-1], train = [:-2]",
        },
    )
