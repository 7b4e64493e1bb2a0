"""MovieLens-1M readers and the ml_1m dataset end to end (tiny raw files + the real rows we hold)."""
from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

import polars as pl
import pytest

from pipeline import augment, preprocess
from pipeline.datasets import get
from pipeline.datasets import movielens as ml
from pipeline.errors import DataError
from pipeline.io import read_split, write_json
from pipeline.params import Params
from pipeline.protocols import leave_one_out as loo

REAL = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "ml-1m"

# user 10 sorts after user 9 (numeric ids); user 9's movies 3 and 1 share a timestamp
RATINGS = """\
10::5::3::100
10::3::4::90
9::3::5::50
9::1::3::50
10::1::2::120
9::7::4::10
10::7::1::130
9::5::5::60
"""


def write_raw(root: Path, text: str, name: str = "ratings.dat") -> Path:
    (root / "ml-1m").mkdir(parents=True, exist_ok=True)
    (root / "ml-1m" / name).write_bytes(text.encode("latin-1"))
    write_json(root / "source.json", {"dataset": "ml_1m", "source": "ml_1m", "sha256": "0" * 64})
    return root


def params(**pre) -> Params:
    p = Params()
    return dataclasses.replace(p, preprocess=dataclasses.replace(p.preprocess, **pre),
                               augment=dataclasses.replace(p.augment, max_len=2))


def test_registered():
    spec = get("ml_1m")
    assert spec.protocol == "leave_one_out"
    assert spec.source.url == "https://files.grouplens.org/datasets/movielens/ml-1m.zip"
    assert spec.source.md5 == "c4d9eecfca2ab87c1945afe126590906" and spec.source.archive == "zip"


def test_reader_tiny(tmp_path):
    df = ml.read_ratings(write_raw(tmp_path, RATINGS)).collect()
    assert df.columns == ["user", "item", "rating", "timestamp"]
    assert df.row(0) == (10, 5, 3, 100) and df.row(7) == (9, 5, 5, 60) and df.height == 8
    assert all(t == pl.Int64 for t in df.schema.values())


def test_preprocess_and_augment_end_to_end(tmp_path):
    raw = write_raw(tmp_path / "raw", RATINGS)
    m = preprocess.run("ml_1m", raw, tmp_path / "sessions", params(k_core=2))
    # user 9 -> 1: 7@10, 3@50, 1@50 (file order), 5@60; user 10 -> 2: 3@90, 5@100, 1@120, 7@130
    # items by first appearance: 7=1, 3=2, 1=3, 5=4
    test = read_split(tmp_path / "sessions", "test")
    assert test.to_dicts() == [{"session_id": 1, "items": [1, 2, 3, 4]}, {"session_id": 2, "items": [2, 4, 3, 1]}]
    assert read_split(tmp_path / "sessions", "train")["items"].to_list() == [[1, 2], [2, 4]]
    assert m["n_items"] == 4 and m["protocol"] == "leave_one_out"
    assert [s["step"] for s in m["steps"]][:2] == ["read", "k_core_round_1"] and "min_3_per_user" not in str(m)
    a = augment.run("ml_1m", tmp_path / "sessions", tmp_path / "samples", params(k_core=2))
    samples = {s: read_split(tmp_path / "samples", s) for s in ("train", "valid", "test")}
    assert samples["train"].rows() == [(1, [1, 2]), (2, [2, 4])]        # shifted rows: targets items[1:]
    assert a["splits"]["train"] == {"samples": 2, "rows": 2, "sessions": 2, "clicks": 4}
    assert samples["valid"].rows() == [(1, [1, 2], 3), (2, [2, 4], 3)]
    assert samples["test"].rows() == [(1, [2, 3], 4), (2, [4, 3], 1)]  # prefixes cut to max_len 2
    assert a["splits"]["test"]["samples"] == 2


def test_bad_ratings(tmp_path):
    for text, expect in (("1::2::3::4\nx1::2::3::4\n", "line 2: user 'x1' is not an integer"),
                         ("1::2::3::4\n1::2::3\n", "line 2 has not 4"),
                         ("1::2::3::4\n1::2::3::4.5\n", "line 2: timestamp '4.5'")):
        raw = write_raw(tmp_path / str(abs(hash(text))), text)
        with pytest.raises(DataError) as err:
            ml.read_ratings(raw)
        assert expect in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(DataError, match="ratings.dat not found"):
        ml.read_ratings(tmp_path / "nothing")


def test_k_core_emptying_leaves_no_output(tmp_path):
    raw = write_raw(tmp_path / "raw", RATINGS)
    with pytest.raises(DataError, match="9-core filter left no interactions"):
        preprocess.run("ml_1m", raw, tmp_path / "sessions", params(k_core=9))
    assert not (tmp_path / "sessions").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["raw"]


@pytest.mark.skipif(not REAL.is_dir(), reason="shared ML-1m rows not available")
def test_real_metadata_files():
    users, movies = ml.read_users(REAL), ml.read_movies(REAL)
    assert users.height == 6040 and movies.height == 3883
    assert users.row(0) == (1, "F", 1, 10, "48067")
    assert movies.filter(pl.col("item") == 73).row(0) == (73, "Misérables, Les (1995)", "Drama|Musical")
    assert movies["item"].is_unique().all() and users["user"].to_list() == list(range(1, 6041))


@pytest.mark.skipif(not REAL.is_dir(), reason="shared ML-1m rows not available")
def test_real_ratings_rows_through_reader_and_protocol(tmp_path):
    real = pl.concat([pl.read_parquet(REAL / "val_ratings.parquet"), pl.read_parquet(REAL / "test_ratings.parquet")])
    assert real.height == 200_042
    text = "\n".join("::".join(map(str, r)) for r in real.iter_rows()) + "\n"
    raw = write_raw(tmp_path, text)
    back = ml.read_ratings(raw).collect()
    assert back.rename(dict(zip(back.columns, real.columns))).equals(real)
    # independent k-core in plain Python: the protocol must agree on every count
    rows = [(u, i) for u, i in real.select("user_id", "movie_id").iter_rows()]
    while True:
        uc, ic = collections.Counter(u for u, _ in rows), collections.Counter(i for _, i in rows)
        kept = [(u, i) for u, i in rows if uc[u] >= 5 and ic[i] >= 5]
        if len(kept) == len(rows):
            break
        rows = kept
    spec = get("ml_1m")
    result = loo.build(spec, raw, params(k_core=5))
    assert [(s["sessions"], s["clicks"], s["items"]) for s in result.steps] == [
        (1783, 200042, 3511), (1657, 198712, 3034), (1656, 198704, 3033), (1656, 198704, 3033)]
    assert result.steps[-1]["clicks"] == len(rows)
    assert result.steps[-1]["sessions"] == len({u for u, _ in rows}) == result.splits["test"].height
    assert result.n_items == len({i for _, i in rows})
    lens = result.splits["test"]["items"].list.len()
    assert int(lens.sum()) == len(rows) and int(lens.min()) >= 5
    assert (result.splits["train"]["items"].list.len() == lens - 2).all()
