"""CTR protocol (pipeline/REFERENCE.md §4) on tiny BARS-format files: parsing, truncation, valid carving."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest

from pipeline import augment, download, preprocess
from pipeline.datasets import get
from pipeline.errors import DataError, DownloadError
from pipeline.io import read_json, read_split, write_json
from pipeline.params import DownloadParams, Params
from pipeline.protocols import ctr

AE_HEADER = "label,user_id,item_id,cate_id,item_history,cate_history\n"
# DIN construction: per user and position a positive and a negative sharing one history
AE_TRAIN = AE_HEADER + """\
1,0,5,2,3,1
0,0,7,0,3,1
1,0,4,1,3^5,1^2
0,0,9,3,3^5,1^2
1,1,3,1,,
0,1,8,2,,
1,1,6,2,3,1
0,1,2,0,3,1
"""
AE_TEST = AE_HEADER + """\
1,0,6,2,3^5^4,1^2^1
0,0,2,0,3^5^4,1^2^1
1,1,0,0,3^6,1^2
0,1,1,3,3^6,1^2
"""
KV_HEADER = "timestamp,user_id,item_id,is_click,is_like,is_follow,pos_items,neg_items\n"
KV_TRAIN = KV_HEADER + """\
10,7,100,0,0,0,,
11,8,101,1,0,0,,100
12,7,102,1,1,0,,100
13,7,103,0,0,0,102,100
14,8,100,1,0,0,101,100
"""
KV_TEST = KV_HEADER + "15,7,104,1,0,0,102^103,100^7^8\n"


def raw_dir(root: Path, train: str, test: str, sub: str = "") -> Path:
    folder = root / sub if sub else root
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.csv").write_text(train)
    (folder / "test.csv").write_text(test)
    write_json(root / "source.json", {"sha256": "0" * 64})    # no "source": the fixture serves both CTR datasets
    return root


def params(max_history=100, valid_fraction=0.1) -> Params:
    p = Params()
    return dataclasses.replace(p, preprocess=dataclasses.replace(p.preprocess, max_history=max_history,
                                                                 valid_fraction=valid_fraction))


def collect(result) -> dict:
    return {s: lf.collect() for s, lf in result.splits.items()}


def test_registry():
    ae, kv = get("amazon_electronics"), get("kuaivideo")
    assert ae.protocol == kv.protocol == "ctr"
    assert ae.source.url == "https://huggingface.co/datasets/reczoo/AmazonElectronics_x1/resolve/main/AmazonElectronics_x1.zip"
    assert kv.source.file_md5 == {"train.csv": "16f13734411532cc313caf2180bfcd56",
                                  "test.csv": "ba26c01caaf6c65c272af11aa451fc7a"}
    assert ae.source.file_md5["test.csv"] == "57a20e82fe736dd495f2eaf0669bf6d0"
    # the BARS DIN configs: min_categr_count, which columns are embedded, which are meta (gAUC group)
    assert (ae.options["ctr"]["min_count"], kv.options["ctr"]["min_count"]) == (1, 10)
    assert ae.options["ctr"]["fields"] == ["item", "cate"] and ae.options["ctr"]["features"] == []
    assert kv.options["ctr"]["extra"] == {"neg_items": "hist_neg_items"} and kv.options["ctr"]["features"] == ["user"]
    assert ae.options["ctr"]["group"] == kv.options["ctr"]["group"] == "user"


def test_amazon_electronics_rows_truncation_and_valid(tmp_path):
    result = ctr.build(get("amazon_electronics"), raw_dir(tmp_path, AE_TRAIN, AE_TEST, sub="AmazonElectronics_x1"),
                       params(max_history=2))
    out = collect(result)
    assert out["train"].columns == ["label", "user", "item", "cate", "hist_items", "hist_cates"]
    assert out["train"].schema["hist_items"] == pl.List(pl.Int32) and out["train"].schema["label"] == pl.Int8
    # ids + 1 (0 = padding); valid = each user's train rows with the longest history
    assert out["train"].rows() == [(1, 0, 6, 3, [4], [2]), (0, 0, 8, 1, [4], [2]),
                                   (1, 1, 4, 2, [], []), (0, 1, 9, 3, [], [])]
    assert out["valid"].rows() == [(1, 0, 5, 2, [4, 6], [2, 3]), (0, 0, 10, 4, [4, 6], [2, 3]),
                                   (1, 1, 7, 3, [4], [2]), (0, 1, 3, 1, [4], [2])]
    # test: histories of 3 cut to the most recent 2
    assert out["test"].rows() == [(1, 0, 7, 3, [6, 5], [3, 2]), (0, 0, 3, 1, [6, 5], [3, 2]),
                                  (1, 1, 1, 1, [4, 7], [2, 3]), (0, 1, 2, 4, [4, 7], [2, 3])]
    assert result.n_items == 10 and result.extra["n_cates"] == 4
    assert result.items.filter(pl.col("item_id") == 7).row(0) == (7, "6", 2)
    assert result.augment == {"train": "rows", "valid": "rows", "test": "rows"}


def test_kuaivideo_tail_valid_and_neg_histories(tmp_path):
    result = ctr.build(get("kuaivideo"), raw_dir(tmp_path, KV_TRAIN, KV_TEST), params(max_history=2, valid_fraction=0.4))
    out = collect(result)
    assert out["train"].columns == ["label", "user", "item", "hist_items", "hist_neg_items", "timestamp"]
    assert out["train"]["timestamp"].to_list() == [10, 11, 12]  # int(0.4 * 5) = 2 most recent rows -> valid
    assert out["valid"].rows() == [(0, 7, 104, [103], [101], 13), (1, 8, 101, [102], [101], 14)]
    assert out["test"].rows() == [(1, 7, 105, [103, 104], [8, 9], 15)]
    assert out["train"].row(0) == (0, 7, 101, [], [], 10)
    assert result.n_items == 105 and result.extra["valid_rows"] == 2
    assert [(s["rows"], s["clicks"]) for s in result.steps] == [(5, 3), (1, 1)]     # is_click = 1


def test_stats_counts_clicks_as_positive_labels(tmp_path):
    """`seqpe stats` of CTR sessions showed clicks = rows, though about half the labels are 0."""
    from test_cli import seqpe
    preprocess.run("kuaivideo", raw_dir(tmp_path / "raw", KV_TRAIN, KV_TEST), tmp_path / "sessions",
                   params(valid_fraction=0.4))
    proc = seqpe("stats", "kuaivideo", str(tmp_path / "sessions"))
    assert proc.returncode == 0, proc.stderr
    cells = {" ".join(line.replace("│", " ").replace("┃", " ").split()) for line in proc.stdout.splitlines()}
    assert {"step rows clicks", "read train.csv 5 3", "read test.csv 1 1", "train clicks 2, rows 3",   # no empty columns
            "valid clicks 1, rows 2", "test clicks 1, rows 1"} <= cells, proc.stdout
    # raw ids are kept, so the manifest's n_items is the largest id + 1: it read as a count of items (walk 32b)
    n_items = read_json(tmp_path / "sessions" / "manifest.json")["n_items"]
    assert f"item ids {n_items} (the largest raw id + 1: ids are not renumbered, so not a count)" in cells, proc.stdout
    p = params()
    augment.run("kuaivideo", tmp_path / "sessions", tmp_path / "samples",
                dataclasses.replace(p, augment=dataclasses.replace(p.augment, max_len=5)))
    # walk 43d #2: augment.max_len cuts no CTR history (preprocess.max_history does): recorded as applied, and
    # `seqpe train` then said the model saw at most 5 items
    assert read_json(tmp_path / "samples" / "manifest.json")["params"]["max_len_applied"] == 0
    proc = seqpe("stats", "kuaivideo", str(tmp_path / "samples"))
    vocab = read_json(tmp_path / "samples" / "manifest.json")["ctr"]["vocab"]
    shown = ", ".join(f"{t} {v['kept']} ids kept (min count {v['min_count']})" for t, v in vocab.items())
    assert any(f"vocabulary {shown}" in " ".join(line.replace("│", " ").split()) for line in proc.stdout.splitlines()), \
        proc.stdout


def test_end_to_end_streamed_and_deterministic(tmp_path):
    raw = raw_dir(tmp_path / "raw", AE_TRAIN, AE_TEST)
    shas = []
    for run in ("a", "b"):
        m = preprocess.run("amazon_electronics", raw, tmp_path / run / "sessions", params())
        a = augment.run("amazon_electronics", tmp_path / run / "sessions", tmp_path / run / "samples", params())
        shas.append([e["sha256"] for e in m["shards"] + a["shards"]])
    assert shas[0] == shas[1]
    # clicks = positive labels (they were the rows): DIN's construction, one positive and one negative
    assert m["splits"] == {"train": {"rows": 4, "clicks": 2}, "valid": {"rows": 4, "clicks": 2},
                           "test": {"rows": 4, "clicks": 2}}
    assert m["steps"] == [{"step": "read train.csv", "rows": 8, "sessions": None, "clicks": 4, "items": None},
                          {"step": "read test.csv", "rows": 4, "sessions": None, "clicks": 2, "items": None}]
    assert read_json(tmp_path / "a" / "samples" / "manifest.json")["splits"]["valid"] == {"rows": 4}
    test = read_split(tmp_path / "a" / "samples", "test")
    # sessions ids [4, 6, 5] (raw 3, 5, 4 + 1) through the vocabulary of all of train.csv (train + valid, as
    # BARS): items 3..10 -> 2..9; with augment.ctr_vocab=train, train items {4, 6, 8, 9} -> 2..5 and 5 (a valid
    # item) is OOV 1
    assert test["hist_items"].to_list()[0] == [3, 5, 4]
    vocab = read_json(tmp_path / "a" / "samples" / "manifest.json")["ctr"]["vocab"]
    assert {t: (v["rows"], v["min_count"]) for t, v in vocab.items()} == {"item": (10, 1), "cate": (6, 1)}
    only = dataclasses.replace(params(), augment=dataclasses.replace(params().augment, ctr_vocab="train"))
    augment.run("amazon_electronics", tmp_path / "a" / "sessions", tmp_path / "only", only)
    assert read_split(tmp_path / "only", "test")["hist_items"].to_list()[0] == [2, 3, 1]
    vocab = read_json(tmp_path / "only" / "manifest.json")["ctr"]["vocab"]
    assert {t: (v["rows"], v["min_count"]) for t, v in vocab.items()} == {"item": (6, 1), "cate": (5, 1)}
    assert not list(tmp_path.rglob(".*staging*"))


@pytest.mark.parametrize("train, expect", [
    (AE_HEADER.replace(",cate_history", "") + "1,0,5,2,3\n", "wrong column set (missing cate_history)"),
    (AE_HEADER.strip() + ",extra\n1,0,5,2,3,1,9\n", "unexpected extra"),
    (AE_HEADER + "1,0,5,2,3^x,1\n", "history lists that are not '^'-separated integer ids"),
    (AE_HEADER + "1,0,5,2,3^^4,1^1^1\n", "history lists"),
    (AE_HEADER + "1,0,B5,2,3,1\n", "could not be parsed"),
    (AE_HEADER + "2,0,5,2,3,1\n", "labels other than 0/1"),
    (AE_HEADER + "1,0,5,2,3^-1,1^1\n", "negative ids in history lists"),
])
def test_bad_inputs(tmp_path, train, expect):
    raw = raw_dir(tmp_path / "raw", train, AE_TEST)
    with pytest.raises(DataError) as err:
        preprocess.run("amazon_electronics", raw, tmp_path / "sessions", params())
    msg = str(err.value)
    assert expect in msg and "\n" not in msg
    assert not (tmp_path / "sessions").exists()


def test_missing_files(tmp_path):
    with pytest.raises(DataError, match="train.csv not found"):
        get("kuaivideo").reader(tmp_path)


def test_own_files_under_a_ctr_name_are_pointed_to_import(tmp_path):
    """A user's own BARS-layout files given to `download kuaivideo --from` fail the published md5; the fix named
    only "download again", not the import that reads them (walk 32b)."""
    own = tmp_path / "own"
    own.mkdir()
    for name in ("train.csv", "test.csv"):
        (own / name).write_text("timestamp,user_id,item_id\n1,2,3\n")
    with pytest.raises(DownloadError, match=r"kuaivideo is read from its published files only.*Fix: download the "
                                            r"archive again or pass a good copy with --from; files of your own in "
                                            r"that layout: `seqpe import kuaivideo_own FOLDER`"):
        download.run("kuaivideo", tmp_path / "raw", DownloadParams(retries=1, backoff_s=0.0), from_path=own,
                     progress=False)
    assert not (tmp_path / "raw").exists()
