"""Stage `augment`: exact prefix / last / rows samples, batching-independent shards, fractions, errors."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from pipeline import augment, io, preprocess
from pipeline.errors import DataError
from pipeline.params import AugmentParams, Params, PreprocessParams
from test_preprocess import SOURCE, raw_folder
from test_srgnn import _yoo_fraction_log


def samples(root: Path, split: str) -> list[tuple]:
    return [(s, list(p), t) for s, p, t in io.read_split(root, split).iter_rows()]


def sessions_folder(root: Path, protocol: str, splits: dict[str, list], modes: dict[str, str]) -> Path:
    """A hand-made sessions folder (manifest + one shard per split)."""
    manifest = {"stage": "preprocess", "dataset": "sample", "protocol": protocol, "params": {}, "source": SOURCE,
                "steps": [], "n_items": 9, "max_len": 9, "augment": modes, "splits": {}, "shards": []}
    with io.atomic_dir(root) as tmp:
        for split, rows in splits.items():
            df = pl.DataFrame({"session_id": [s for s, _ in rows], "items": [i for _, i in rows]},
                              schema={"session_id": pl.Int64, "items": pl.List(pl.Int32)})
            manifest["shards"] += io.write_split(tmp, split, df)
        io.write_json(tmp / io.MANIFEST, manifest)
    return root


def test_prefixes_longest_first_exactly(tmp_path):
    raw = raw_folder(tmp_path / "raw")
    p = Params(preprocess=PreprocessParams(valid_fraction=0.4))
    preprocess.run("diginetica", raw, tmp_path / "sess", p)
    m = augment.run("diginetica", tmp_path / "sess", tmp_path / "samp", p)
    out = tmp_path / "samp"
    assert samples(out, "train") == [(1, [1, 2], 3), (1, [1], 2), (3, [2], 4), (5, [4, 1], 4), (5, [4], 1)]
    assert samples(out, "valid") == [(6, [4, 2], 3), (6, [4], 2), (7, [1, 1], 2), (7, [1], 1)]
    assert samples(out, "test") == [(9, [3], 1)]
    assert m["splits"] == {"train": {"samples": 5, "sessions": 3, "clicks": 8},
                           "valid": {"samples": 4, "sessions": 2, "clicks": 6},
                           "test": {"samples": 1, "sessions": 1, "clicks": 2}}
    assert m["stage"] == "augment" and m["n_items"] == 4 and m["max_len"] == 2 and m["protocol"] == "srgnn"
    assert m["source"]["sha256"] == SOURCE["sha256"]
    assert io.read_split(out, "train").schema == pl.Schema(
        {"session_id": pl.Int64, "prefix": pl.List(pl.Int32), "target": pl.Int32})
    io.verify_shards(out, m)


def test_batches_and_shards_do_not_change_rows_or_bytes(tmp_path, monkeypatch):
    rows = [(s, list(range(1, s + 2))) for s in range(1, 30)]
    src = sessions_folder(tmp_path / "sess", "srgnn", {"train": rows, "valid": [], "test": rows[:3]},
                          {"train": "prefixes", "valid": "prefixes", "test": "prefixes"})
    p = Params(augment=AugmentParams(rows_per_shard=50))
    augment.run("sample", src, tmp_path / "a", p)
    monkeypatch.setattr(augment, "BATCH_CELLS", 7)      # pieces of a shard: concatenated, then rechunked
    monkeypatch.setattr(augment, "BATCH_SAMPLES", 11)   # sessions planned a few at a time
    monkeypatch.setattr(augment, "GATHER_CELLS", 5)     # many gather blocks, some inside one prefix
    m = augment.run("sample", src, tmp_path / "b", p)
    expected = [(s, items[:-i], items[-i]) for s, items in rows for i in range(1, len(items))]
    got = [r for e in m["shards"] if e["path"].startswith("train/")
           for r in [(s, list(pr), t) for s, pr, t in pl.read_parquet(tmp_path / "b" / e["path"]).iter_rows()]]
    assert got == expected and len(expected) == 435
    assert [e["rows"] for e in m["shards"]] == [50] * 8 + [35, 0, 6]   # train, valid (empty shard), test
    for e in m["shards"]:
        assert (tmp_path / "a" / e["path"]).read_bytes() == (tmp_path / "b" / e["path"]).read_bytes()


def test_leave_one_out_modes_and_max_len(tmp_path):
    src = sessions_folder(tmp_path / "sess", "leave_one_out",
                          {"train": [(1, [1, 2, 3, 4]), (2, [5])], "valid": [(1, [1, 2, 3, 4, 5])],
                           "test": [(1, [1, 2, 3, 4, 5, 6])]},
                          {"train": "prefixes", "valid": "last", "test": "last"})
    m = augment.run("sample", src, tmp_path / "out", Params(augment=AugmentParams(max_len=2)))
    out = tmp_path / "out"
    assert samples(out, "train") == [(1, [2, 3], 4), (1, [1, 2], 3), (1, [1], 2)]
    assert samples(out, "valid") == [(1, [3, 4], 5)]
    assert samples(out, "test") == [(1, [4, 5], 6)]
    assert m["params"]["max_len_applied"] == 2 and m["max_len"] == 2


def test_leave_one_out_shifted_rows(tmp_path):
    """Train rows under the leave-one-out protocol: one row per user with the most recent max_len + 1
    items (inputs items[:-1], targets items[1:]); users with one train item give no row."""
    src = sessions_folder(tmp_path / "sess", "leave_one_out",
                          {"train": [(1, [1, 2, 3, 4, 7]), (2, [5]), (3, [8, 9])],
                           "valid": [(1, [1, 2, 3, 4, 7, 5])], "test": [(1, [1, 2, 3, 4, 7, 5, 6])]},
                          {"train": "shifted", "valid": "last", "test": "last"})
    p = Params(augment=AugmentParams(max_len=3))
    m = augment.run("sample", src, tmp_path / "out", p)
    out = tmp_path / "out"
    assert [(s, list(i)) for s, i in io.read_split(out, "train").iter_rows()] == [(1, [2, 3, 4, 7]), (3, [8, 9])]
    assert io.read_split(out, "train").schema == pl.Schema(augment.SHIFTED_SCHEMA)
    assert m["splits"]["train"] == {"samples": 4, "rows": 2, "sessions": 3, "clicks": 8}
    assert samples(out, "valid") == [(1, [3, 4, 7], 5)] and m["max_len"] == 3
    whole = augment.run("sample", src, tmp_path / "whole", Params(augment=AugmentParams(max_len=0)))
    assert io.read_split(tmp_path / "whole", "train")["items"].to_list() == [[1, 2, 3, 4, 7], [8, 9]]
    assert whole["splits"]["train"]["samples"] == 5
    again = augment.run("sample", src, tmp_path / "again", p)
    for e in again["shards"]:
        assert (out / e["path"]).read_bytes() == (tmp_path / "again" / e["path"]).read_bytes()


def test_sample_builders_edge_cases():
    df = pl.DataFrame({"session_id": [7, 8, 9, 10], "items": [[], [5], [1, 2, 3], [4, 6]]},
                      schema={"session_id": pl.Int64, "items": pl.List(pl.Int32)})
    rows = lambda f: [(s, list(p), t) for s, p, t in f.iter_rows()]  # noqa: E731
    assert rows(augment.prefix_samples(df)) == [(9, [1, 2], 3), (9, [1], 2), (10, [4], 6)]
    assert rows(augment.prefix_samples(df.slice(2), 1)) == [(9, [2], 3), (9, [1], 2), (10, [4], 6)]
    assert rows(augment.last_samples(df.slice(1), 1)) == [(9, [2], 3), (10, [4], 6)]
    assert augment.last_samples(df.head(2)).schema == pl.Schema(augment.SAMPLE_SCHEMA)
    with pytest.raises(DataError, match="null"):
        augment.prefix_samples(df.with_columns(pl.Series("items", [[1], None, [1, 2], [3, None]],
                                                         dtype=pl.List(pl.Int32))))


def test_srgnn_ignores_max_len(tmp_path):
    src = sessions_folder(tmp_path / "sess", "srgnn", {"train": [(1, [1, 2, 3, 4])], "valid": [], "test": []},
                          {"train": "prefixes", "valid": "prefixes", "test": "prefixes"})
    augment.run("sample", src, tmp_path / "out", Params(augment=AugmentParams(max_len=1)))
    assert samples(tmp_path / "out", "train")[0] == (1, [1, 2, 3], 4)


def test_rows_mode_remaps_ctr_rows_shard_by_shard(tmp_path):
    """Rows mode (protocol ctr) keeps every row and column in order, maps ids through the train
    vocabularies (pipeline.ctr_vocab; exact rule in tests/test_ctr_vocab.py) and re-cuts the shards."""
    layout = {"min_count": 1, "fields": ["item"], "target": {"item": "item"}, "history": {"item": "hist_items"},
              "extra": {}, "features": [], "group": "user", "label": "label"}
    frame = pl.DataFrame({"label": [1, 0, 1], "user": [3, 4, 3], "item": [8, 6, 9], "hist_items": [[6], [], [6, 8]]},
                         schema={"label": pl.Int8, "user": pl.Int64, "item": pl.Int32, "hist_items": pl.List(pl.Int32)})
    manifest = {"stage": "preprocess", "protocol": "ctr", "n_items": 9, "augment": {s: "rows" for s in io.SPLITS},
                "params": {"options": {"ctr": layout}}, "shards": []}
    with io.atomic_dir(tmp_path / "sess") as tmp:
        for split in io.SPLITS:
            manifest["shards"] += io.write_split(tmp, split, frame, rows_per_shard=2)
        io.write_json(tmp / io.MANIFEST, manifest)
    m = augment.run("sample", tmp_path / "sess", tmp_path / "out", Params(augment=AugmentParams(rows_per_shard=2)))
    # train ids {6, 8, 9} -> 2, 3, 4
    assert io.read_split(tmp_path / "out", "test").rows() == [(1, 3, 3, [2]), (0, 4, 2, []), (1, 3, 4, [2, 3])]
    assert m["splits"]["train"] == {"rows": 3} and m["ctr"]["vocab"]["item"]["rows"] == 5
    assert [e["rows"] for e in m["shards"] if e["path"].startswith("valid/")] == [2, 1]


def test_yoochoose_fraction_samples_are_the_canonical_slice(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    _yoo_fraction_log(raw / "yoochoose-clicks.dat")
    io.write_json(raw / "source.json", {**SOURCE, "dataset": "yoochoose", "source": "yoochoose"})   # one raw folder, both
    p = Params(preprocess=PreprocessParams(valid_fraction=0.0))
    preprocess.run("yoochoose", raw, tmp_path / "full", p)
    preprocess.run("yoochoose_1_64", raw, tmp_path / "frac", p)
    augment.run("yoochoose", tmp_path / "full", tmp_path / "full_s", p)
    m = augment.run("yoochoose_1_64", tmp_path / "frac", tmp_path / "frac_s", p)
    full = samples(tmp_path / "full_s", "train")
    assert len(full) == 353 and samples(tmp_path / "frac_s", "train") == full[-5:]
    assert samples(tmp_path / "frac_s", "test") == samples(tmp_path / "full_s", "test")
    assert m["n_items"] == 7


def test_augment_before_preprocess(tmp_path):
    with pytest.raises(DataError) as err:
        augment.run("diginetica", tmp_path / "sess", tmp_path / "out", Params())
    assert "Fix: run `seqpe download diginetica`, then `seqpe preprocess diginetica` (or `dvc repro`)" in str(err.value)
    assert not (tmp_path / "out").exists()


def test_two_runs_byte_identical(tmp_path):
    raw = raw_folder(tmp_path / "raw")
    preprocess.run("diginetica", raw, tmp_path / "sess", Params())
    augment.run("diginetica", tmp_path / "sess", tmp_path / "a", Params())
    augment.run("diginetica", tmp_path / "sess", tmp_path / "b", Params())
    for f in (tmp_path / "a").rglob("*"):
        if f.is_file():
            assert f.read_bytes() == (tmp_path / "b" / f.relative_to(tmp_path / "a")).read_bytes()
