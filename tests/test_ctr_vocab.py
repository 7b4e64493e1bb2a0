"""CTR vocabularies (pipeline.ctr_vocab) through `augment.run`: FuxiCTR's per-column min-count rule,
shared tables, OOV in every split, manifest section, mapping files, both lookup paths."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from pipeline import augment, ctr_vocab, io
from pipeline.errors import DataError
from pipeline.params import AugmentParams, Params
from test_preprocess import SOURCE

KV_LAYOUT = {"min_count": 2, "fields": ["item"], "target": {"item": "item"}, "history": {"item": "hist_items"},
             "extra": {"neg_items": "hist_neg_items"}, "features": ["user"], "group": "user", "label": "label"}
SCHEMA = {"label": pl.Int8, "user": pl.Int64, "item": pl.Int32, "hist_items": pl.List(pl.Int32),
          "hist_neg_items": pl.List(pl.Int32)}
# sessions ids (raw + 1 for items, raw users); min count 2 per column:
#   item        10 x2, 11 x1, 13 x1  -> keeps 10
#   hist_items  10 x2                -> keeps 10
#   hist_neg    11 x1, 12 x2         -> keeps 12   (11 is seen twice in all, once per column: not kept)
#   user        7 x2, 8 x2           -> keeps 7, 8
SPLITS = {
    "train": [(1, 7, 10, [], []), (0, 7, 11, [10], []), (1, 8, 10, [], [11, 12]), (0, 8, 13, [10], [12])],
    "valid": [(1, 7, 12, [10, 11], [13])],
    "test": [(0, 9, 14, [10, 13], [12, 99])],
}


def sessions(root: Path, splits=SPLITS, layout=KV_LAYOUT, shard_rows: int = 3) -> Path:
    manifest = {"stage": "preprocess", "kind": "sessions", "dataset": "kuaivideo", "protocol": "ctr",
                "params": {"options": {"valid": "tail", "ctr": layout}}, "source": SOURCE, "steps": [],
                "n_items": 99, "max_len": 2, "augment": {s: "rows" for s in io.SPLITS}, "splits": {}, "shards": [],
                "protocol_info": {"max_history": 100}}
    with io.atomic_dir(root) as tmp:
        for split, rows in splits.items():
            frame = pl.DataFrame(rows, schema=SCHEMA, orient="row")
            manifest["shards"] += io.write_split(tmp, split, frame, shard_rows)
        io.write_json(tmp / io.MANIFEST, manifest)
    return root


def rows(root: Path, split: str) -> list[tuple]:
    return io.read_split(root, split).select("label", "user", "item", "hist_items", "hist_neg_items",
                                             "feature_user").rows()


def train_only() -> Params:
    return Params(augment=AugmentParams(ctr_vocab="train"))


def test_per_column_min_count_shared_tables_and_oov_everywhere(tmp_path):
    m = augment.run("kuaivideo", sessions(tmp_path / "sess"), tmp_path / "out", train_only())
    out = tmp_path / "out"
    # item vocab: 10 -> 2, 12 -> 3 (ascending ids from 2); everything else -> 1; users 7 -> 2, 8 -> 3
    assert rows(out, "train") == [(1, 7, 2, [], [], 2), (0, 7, 1, [2], [], 2), (1, 8, 2, [], [1, 3], 3),
                                  (0, 8, 1, [2], [3], 3)]
    assert rows(out, "valid") == [(1, 7, 3, [2, 1], [1], 2)]
    assert rows(out, "test") == [(0, 9, 1, [2, 1], [3, 1], 1)]
    assert io.read_split(out, "train").schema == pl.Schema({
        "label": pl.Int8, "user": pl.Int64, "item": pl.Int32, "hist_items": pl.List(pl.Int32),
        "hist_neg_items": pl.List(pl.Int32), "feature_user": pl.Int32})
    # mapping files: raw BARS ids (items: sessions id - 1), vocab ids and the train count per column
    assert pl.read_parquet(out / "vocab" / "item.parquet").rows() == [(9, 2, 2, 2, 0), (11, 3, 0, 0, 2)]
    assert pl.read_parquet(out / "vocab" / "item.parquet").columns == [
        "raw_id", "id", "count_item", "count_hist_items", "count_hist_neg_items"]
    assert pl.read_parquet(out / "vocab" / "user.parquet").rows() == [(7, 2, 2), (8, 3, 2)]
    ctr = m["ctr"]
    assert {k: ctr[k] for k in ("fields", "target", "history", "extra", "features", "group", "label", "counted_on",
                                "max_history", "longest_history")} == {
        "fields": ["item"], "target": {"item": "item"}, "history": {"item": "hist_items"},
        "extra": {"neg_items": "hist_neg_items"}, "features": {"user": "feature_user"}, "group": "user",
        "label": "label", "counted_on": "train", "max_history": 100, "longest_history": 2}
    item = ctr["vocab"]["item"]
    assert (item["rows"], item["kept"], item["min_count"], item["columns"], item["file"]) == (
        4, 2, 2, ["item", "hist_items", "hist_neg_items"], "vocab/item.parquet")
    assert item["oov"] == {"train": {"tokens": 9, "oov_tokens": 3, "rows_with_oov": 3},
                           "valid": {"tokens": 4, "oov_tokens": 2, "rows_with_oov": 1},
                           "test": {"tokens": 5, "oov_tokens": 3, "rows_with_oov": 1}}
    assert ctr["vocab"]["user"]["rows"] == 4 and ctr["vocab"]["user"]["oov"]["test"] == {
        "tokens": 1, "oov_tokens": 1, "rows_with_oov": 1}
    assert "separately" in ctr["rule"] and m["max_len"] == 2 and m["splits"]["train"] == {"rows": 4}
    io.verify_shards(out, m)                       # vocab files are listed with their sha256 too
    assert {"vocab/item.parquet", "vocab/user.parquet"} <= {e["path"] for e in m["shards"]}


def test_min_count_one_keeps_every_train_id_and_fields_keep_their_own_tables(tmp_path):
    layout = {"min_count": 1, "fields": ["item", "cate"], "target": {"item": "item", "cate": "cate"},
              "history": {"item": "hist_items", "cate": "hist_cates"}, "extra": {}, "features": [],
              "group": "user", "label": "label"}
    schema = {"label": pl.Int8, "user": pl.Int64, "item": pl.Int32, "cate": pl.Int32,
              "hist_items": pl.List(pl.Int32), "hist_cates": pl.List(pl.Int32)}
    splits = {"train": [(1, 0, 5, 3, [2], [3]), (0, 0, 9, 1, [2], [3])], "valid": [(1, 1, 7, 3, [5], [3])],
              "test": [(0, 1, 2, 9, [5, 9], [3, 3])]}

    def write(root):
        manifest = {"stage": "preprocess", "kind": "sessions", "dataset": "amazon_electronics", "protocol": "ctr",
                    "params": {"options": {"ctr": layout}}, "source": SOURCE, "steps": [], "n_items": 9,
                    "augment": {s: "rows" for s in io.SPLITS}, "shards": [], "protocol_info": {"max_history": 100}}
        with io.atomic_dir(root) as tmp:
            for split, r in splits.items():
                manifest["shards"] += io.write_split(tmp, split, pl.DataFrame(r, schema=schema, orient="row"))
            io.write_json(tmp / io.MANIFEST, manifest)
        return root

    m = augment.run("amazon_electronics", write(tmp_path / "sess"), tmp_path / "out", train_only())
    # items {2, 5, 9} -> 2, 3, 4; cates {1, 3} -> 2, 3 (a cate id 9 is OOV even though item 9 is kept)
    assert io.read_split(tmp_path / "out", "test").rows() == [(0, 1, 2, 1, [3, 4], [3, 3])]
    assert io.read_split(tmp_path / "out", "valid").rows() == [(1, 1, 1, 3, [3], [3])]
    assert {t: v["rows"] for t, v in m["ctr"]["vocab"].items()} == {"item": 5, "cate": 4}
    assert m["ctr"]["features"] == {} and m["ctr"]["fields"] == ["item", "cate"]


def test_the_default_counts_the_whole_train_file_as_bars_does(tmp_path):
    # item 13 is seen once in train and once in valid: kept at min count 2 only when valid counts (BARS fits on the
    # whole train.csv, of which seqpe's valid is the tail); user 9 of test is OOV either way
    splits = {**SPLITS, "valid": [(1, 7, 13, [10, 11], [13])]}
    src = sessions(tmp_path / "sess", splits)
    whole = augment.run("kuaivideo", src, tmp_path / "whole", Params())
    split = augment.run("kuaivideo", src, tmp_path / "split", train_only())
    assert (whole["ctr"]["counted_on"], split["ctr"]["counted_on"]) == ("train+valid", "train")
    assert whole["params"]["augment"]["ctr_vocab"] == "train_file"
    assert pl.read_parquet(tmp_path / "whole" / "vocab" / "item.parquet").rows() == [
        (9, 2, 2, 3, 0), (11, 3, 0, 0, 2), (12, 4, 2, 0, 1)]            # counts over train + valid
    assert pl.read_parquet(tmp_path / "split" / "vocab" / "item.parquet").rows() == [(9, 2, 2, 2, 0), (11, 3, 0, 0, 2)]
    assert rows(tmp_path / "whole", "test") == [(0, 9, 1, [2, 4], [3, 1], 1)]
    assert rows(tmp_path / "split", "test") == [(0, 9, 1, [2, 1], [3, 1], 1)]
    assert rows(tmp_path / "whole", "valid") == [(1, 7, 4, [2, 1], [4], 2)]
    assert whole["ctr"]["vocab"]["item"]["oov"]["valid"] == {"tokens": 4, "oov_tokens": 1, "rows_with_oov": 1}
    # the same as counting one train split that holds every train.csv row
    joined = sessions(tmp_path / "joined", {"train": SPLITS["train"] + splits["valid"], "valid": [], "test": []})
    augment.run("kuaivideo", joined, tmp_path / "one", train_only())
    assert ((tmp_path / "one" / "vocab" / "item.parquet").read_bytes()
            == (tmp_path / "whole" / "vocab" / "item.parquet").read_bytes())


def test_count_and_lookup_paths_give_the_same_bytes(tmp_path, monkeypatch):
    src = sessions(tmp_path / "sess")
    a = augment.run("kuaivideo", src, tmp_path / "a", Params())
    monkeypatch.setattr(ctr_vocab, "COUNT_BLOCK", 1)        # np.bincount one token at a time
    b = augment.run("kuaivideo", src, tmp_path / "b", Params())
    monkeypatch.setattr(ctr_vocab, "LUT_LIMIT", 0)          # np.unique counts, np.searchsorted lookups
    c = augment.run("kuaivideo", src, tmp_path / "c", Params())
    for other, m in (("b", b), ("c", c)):
        assert [e["sha256"] for e in a["shards"]] == [e["sha256"] for e in m["shards"]]
        assert (tmp_path / "a" / io.MANIFEST).read_bytes() == (tmp_path / other / io.MANIFEST).read_bytes()


def test_vocab_lookup_edges():
    import numpy as np
    v = ctr_vocab.Vocab("item", np.array([3, 5], dtype=np.int64), pl.DataFrame({"key": [3, 5]}))
    ids = np.array([0, 3, 4, 5, 6, 10**9], dtype=np.int64)
    assert v.lookup(ids).tolist() == [1, 2, 1, 3, 1, 1] and v.lut is not None and v.rows == 4
    empty = ctr_vocab.Vocab("item", np.array([], dtype=np.int64), pl.DataFrame({"key": []}))
    assert empty.lookup(ids).tolist() == [1] * 6 and empty.rows == 2


def test_sessions_without_a_ctr_layout(tmp_path):
    sessions(tmp_path / "sess", layout=None)
    with pytest.raises(DataError) as err:
        augment.run("kuaivideo", tmp_path / "sess", tmp_path / "out", Params())
    assert "no CTR layout" in str(err.value) and "seqpe preprocess kuaivideo" in str(err.value)
    assert not (tmp_path / "out").exists()
