"""Leave-one-out protocol (pipeline/REFERENCE.md §3) on a tiny hand-made interaction log."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import polars as pl
import pytest

from pipeline.errors import DataError
from pipeline.params import Params
from pipeline.protocols import leave_one_out as loo

# (user, item, timestamp) in file order. With k = 3 the k-core needs three rounds that remove
# something: e (1 review) goes, then dave (left with 2), then d (left with 2 after dave).
ROWS = [
    ("carol", "a", 1), ("alice", "c", 3), ("bob", "a", 2), ("carol", "d", 0), ("alice", "b", 3),
    ("dave", "d", 7), ("bob", "b", 2), ("carol", "c", 1), ("alice", "a", 5), ("dave", "e", 7),
    ("bob", "c", 1), ("carol", "b", 1), ("bob", "d", 9), ("dave", "a", 8),
]


def params(k_core: int) -> Params:
    p = Params()
    return dataclasses.replace(p, preprocess=dataclasses.replace(p.preprocess, k_core=k_core))


def spec_of(rows, schema=("user", "item", "timestamp")):
    frame = pl.DataFrame(rows, schema=list(schema), orient="row")
    return SimpleNamespace(name="tiny", reader=lambda raw_dir: frame.lazy())


def lists(df: pl.DataFrame) -> list:
    return [(r["session_id"], r["items"]) for r in df.iter_rows(named=True)]


def test_k_core_rounds_reindex_and_splits():
    result = loo.build(spec_of(ROWS), ".", params(3))
    assert [(s["step"], s["sessions"], s["clicks"], s["items"]) for s in result.steps] == [
        ("read", 4, 14, 5),
        ("k_core_round_1", 4, 13, 4),   # e dropped
        ("k_core_round_2", 3, 11, 4),   # dave dropped (2 left)
        ("k_core_round_3", 3, 9, 3),    # d dropped (2 left)
        ("k_core_round_4", 3, 9, 3),    # stable
    ]
    # users by raw id: alice 1, bob 2, carol 3; items by first appearance walking alice, bob, carol
    # alice: c@3 (row 1) before b@3 (row 4): ties keep file order; then a@5 -> c=1, b=2, a=3
    assert result.items.to_dicts() == [
        {"item_id": 1, "raw_id": "c", "count": 3},
        {"item_id": 2, "raw_id": "b", "count": 3},
        {"item_id": 3, "raw_id": "a", "count": 3},
    ]
    assert result.n_items == 3
    assert lists(result.splits["test"]) == [(1, [1, 2, 3]), (2, [1, 3, 2]), (3, [3, 1, 2])]
    assert lists(result.splits["valid"]) == [(1, [1, 2]), (2, [1, 3]), (3, [3, 1])]
    assert lists(result.splits["train"]) == [(1, [1]), (2, [1]), (3, [3])]
    assert result.users.rows() == [(1, "alice"), (2, "bob"), (3, "carol")]     # users.parquet (walk 39a #4)
    assert result.augment == {"train": "shifted", "valid": "last", "test": "last"}
    assert result.extra["k_core_rounds"] == 4
    schema = result.splits["train"].schema
    assert schema["session_id"] == pl.Int64 and schema["items"] == pl.List(pl.Int32)


def test_numeric_ids_sort_numerically_and_small_k_drops_short_users():
    rows = [(10, 7, 1), (9, 7, 2), (9, 8, 2), (10, 8, 0), (9, 5, 3), (10, 5, 5), (2, 7, 1), (2, 8, 1)]
    result = loo.build(spec_of(rows), ".", params(1))  # no k-core; user 2 has 2 items: dropped
    assert [s["step"] for s in result.steps] == ["read", "k_core_round_1", "k_core_round_2"]   # users >= 3
    assert result.steps[-1]["sessions"] == 2
    # user 9 -> 1, user 10 -> 2 (numeric order, not "10" < "9"); user 9: 7, 8 (tie @2: file order), 5
    assert lists(result.splits["test"]) == [(1, [1, 2, 3]), (2, [2, 1, 3])]
    assert result.items["raw_id"].to_list() == ["7", "8", "5"]
    assert result.users.rows() == [(1, "9"), (2, "10")] and result.users.schema["raw_id"] == pl.String


def test_k_core_that_empties_everything_is_a_data_error():
    with pytest.raises(DataError) as err:
        loo.build(spec_of(ROWS), ".", params(10))
    msg = str(err.value)
    assert "10-core filter left no interactions" in msg and "\n" not in msg and "Fix:" in msg


def test_deterministic():
    a = loo.build(spec_of(ROWS), ".", params(3))
    b = loo.build(spec_of(list(ROWS)), ".", params(3))
    for split in ("train", "valid", "test"):
        assert a.splits[split].equals(b.splits[split])
    assert a.items.equals(b.items) and a.steps == b.steps


def test_a_small_k_core_drops_short_users_inside_the_core_so_the_result_is_a_k_core():
    """Walk 36a: with k 2, users under 3 items were dropped after the core, once: the items only they held were
    left with one user (not a 2-core). Users need max(k, 3) inside the rounds, repeated until stable."""
    rows = [(1, 10, 1), (1, 11, 2), (2, 10, 1), (2, 11, 2), (2, 12, 3), (3, 12, 1), (3, 13, 2), (3, 14, 3),
            (4, 13, 1), (4, 14, 2), (4, 15, 3), (5, 15, 1), (5, 13, 2), (5, 14, 3)]
    result = loo.build(spec_of(rows), ".", params(2))
    kept = result.items["raw_id"].to_list()
    assert "10" not in kept and "11" not in kept            # user 1 went; then 10 and 11 had one user each
    assert result.items["count"].min() >= 2 and min(map(len, result.splits["test"]["items"].to_list())) >= 3
    assert result.steps[-1]["step"].startswith("k_core_round_") and result.steps[-1] == {**result.steps[-2],
                                                                                          "step": result.steps[-1]["step"]}
