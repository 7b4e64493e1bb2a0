"""Embedded CTR datasets (pipeline.datasets.ctr_sample): exact BARS formats, deterministic bytes, DIN's
construction, and the positional signal (present by position, absent by set membership)."""
from __future__ import annotations

import io as _io
import zipfile
from collections import defaultdict

import numpy as np
import polars as pl
import pytest

from pipeline import augment, download, preprocess
from pipeline.ctr_batches import load_ctr
from pipeline.datasets import get
from pipeline.datasets.ctr import COLUMNS
from pipeline.datasets.ctr_sample import Catalogue, amazon_frames, generate_amazon, generate_kuai, kuai_frames
from pipeline.datasets.sample import ZIP_TIME
from pipeline.errors import ParamsError
from pipeline.params import DownloadParams, Params, PreprocessParams, SampleCTRParams

SMALL = SampleCTRParams(users=120, items=200, cates=12, min_length=5, max_length=12, seed=7)


def auc(score, label) -> float:
    """Mann-Whitney AUC, ties counted one half. A logistic regression on one feature ranks the rows
    by that feature (monotone link), so its AUC is this AUC of the feature itself."""
    ranks = pl.Series(np.asarray(score, dtype=np.float64)).rank("average").to_numpy()
    label = np.asarray(label).astype(bool)
    pos, neg = label.sum(), (~label).sum()
    return float((ranks[label].sum() - pos * (pos + 1) / 2) / (pos * neg))


def ids(col: str) -> pl.Expr:
    return pl.col(col).str.split("^").list.eval(pl.element().filter(pl.element() != "").cast(pl.Int64))


def test_registered_with_the_real_readers_and_options():
    for name, real in (("sample_ctr", "amazon_electronics"), ("sample_kuai", "kuaivideo")):
        spec, twin = get(name), get(real)
        assert spec.source.archive == "generated" and spec.source.generate_params == "sample_ctr"
        assert spec.protocol == "ctr" and spec.options == twin.options and spec.source.files == twin.source.files


def test_same_params_same_bytes(tmp_path):
    for gen in (generate_amazon, generate_kuai):
        gen(tmp_path / "a.zip", SMALL)
        gen(tmp_path / "b.zip", SMALL)
        gen(tmp_path / "c.zip", SampleCTRParams(**{**vars(SMALL), "seed": 8}))
        a, b, c = ((tmp_path / f"{x}.zip").read_bytes() for x in "abc")
        assert a == b != c
        info = zipfile.ZipFile(tmp_path / "a.zip").infolist()
        assert [(i.filename, i.date_time) for i in info] == [("train.csv", ZIP_TIME), ("test.csv", ZIP_TIME)]


def test_amazon_format_and_din_construction(tmp_path):
    generate_amazon(tmp_path / "ae.zip", SMALL)
    z = zipfile.ZipFile(tmp_path / "ae.zip")
    frames = {}
    for member in ("train.csv", "test.csv"):
        text = z.read(member).decode()
        assert text.splitlines()[0] == ",".join(COLUMNS["amazon_electronics"])
        frames[member] = pl.read_csv(_io.StringIO(text), schema_overrides={"item_history": pl.String,
                                                                           "cate_history": pl.String})
    train, test = frames["train.csv"], frames["test.csv"]
    both = pl.concat([train.with_columns(test=False), test.with_columns(test=True)]).with_columns(
        h=ids("item_history"), hc=ids("cate_history"))
    assert both["h"].list.len().min() >= 1 and (both["h"].list.len() == both["hc"].list.len()).all()
    # every (user, history) has one positive and one negative; each user's last position is the test pair
    pairs = both.group_by("user_id", "item_history").agg(pl.col("label").sort(), pl.col("test").first())
    assert pairs["label"].to_list() == [[0, 1]] * pairs.height
    per_user = both.group_by("user_id").agg(longest=pl.col("h").list.len().max(),
                                            test_len=pl.col("h").filter(pl.col("test")).list.len().unique())
    assert (per_user["test_len"].list.len() == 1).all()
    assert (per_user["test_len"].list.first() == per_user["longest"]).all()
    assert test.height == 2 * SMALL.users and train["label"].mean() == 0.5
    # items keep one category everywhere (targets and histories)
    pairs = pl.concat([both.select(i="item_id", c="cate_id"),
                       both.select(i=pl.col("h").explode(), c=pl.col("hc").explode())]).unique()
    assert pairs.group_by("i").agg(pl.col("c").n_unique()).get_column("c").max() == 1
    assert not train["user_id"].is_sorted()                       # shuffled, as DIN shuffles its sets


def test_kuai_format_time_order_and_histories(tmp_path):
    generate_kuai(tmp_path / "kv.zip", SMALL)
    z = zipfile.ZipFile(tmp_path / "kv.zip")
    texts = [z.read(m).decode() for m in ("train.csv", "test.csv")]
    assert all(t.splitlines()[0] == ",".join(COLUMNS["kuaivideo"]) for t in texts)
    train, test = (pl.read_csv(_io.StringIO(t), schema_overrides={"pos_items": pl.String, "neg_items": pl.String})
                   for t in texts)
    assert test.height == round(0.2 * (train.height + test.height))
    rows = pl.concat([train, test])
    assert rows["timestamp"].is_sorted() and set(rows["is_click"].unique()) == {0, 1}
    assert rows.filter(pl.col("is_like") == 1)["is_click"].min() == 1
    clicked, shown = defaultdict(list), defaultdict(list)       # replay each user's impressions in time order
    for user, item, click, pos, neg in rows.select("user_id", "item_id", "is_click", ids("pos_items"),
                                                   ids("neg_items")).iter_rows():
        assert pos == clicked[user][-100:] and neg == shown[user][-100:]
        (clicked if click else shown)[user].append(item)


def test_positional_signal_and_no_set_signal():
    """Default params. The category (sample_kuai: hidden topic) at position -2 separates positives
    from negatives; whether the target's category is in the history does not (exactly 0.5 on
    sample_ctr); its count in the history leaks only a little."""
    train, _ = amazon_frames(SampleCTRParams())
    df = train.with_columns(h=ids("cate_history")).filter(pl.col("h").list.len() >= 2)
    y = df["label"].to_numpy()
    at_2 = (df["h"].list.get(-2) == df["cate_id"]).to_numpy()
    inside = df.select(pl.col("h").list.contains(pl.col("cate_id"))).to_series().to_numpy()
    share = [h.count(c) / len(h) for h, c in zip(df["h"].to_list(), df["cate_id"].to_list())]
    assert auc(at_2, y) > 0.8 and auc(inside, y) == 0.5 and abs(auc(share, y) - 0.5) < 0.06
    p = SampleCTRParams()
    topic = Catalogue(np.random.default_rng(p.seed), p.items, p.cates).cate      # the hidden topics
    train, _ = kuai_frames(p)
    df = train.with_columns(h=ids("pos_items")).filter(pl.col("h").list.len() >= 2)
    y, t = df["is_click"].to_numpy(), topic[df["item_id"].to_numpy()]
    hist = [topic[np.array(h)] for h in df["h"].to_list()]
    assert auc([h[-2] == x for h, x in zip(hist, t)], y) > 0.8
    assert abs(auc([x in h for h, x in zip(hist, t)], y) - 0.5) < 0.02
    assert abs(auc([np.mean(h == x) for h, x in zip(hist, t)], y) - 0.5) < 0.07


def test_default_sizes_through_download_preprocess_augment(tmp_path):
    p = Params()
    assert p.preprocess.sample_ctr == SampleCTRParams()
    download.run("sample_ctr", tmp_path / "raw", DownloadParams(), progress=False, sample=p.preprocess.sample_ctr)
    m = preprocess.run("sample_ctr", tmp_path / "raw", tmp_path / "sess", p)
    a = augment.run("sample_ctr", tmp_path / "sess", tmp_path / "samp", p)
    assert 8_000 <= m["splits"]["train"]["rows"] <= 16_000 and m["splits"]["valid"]["rows"] == 2 * p.preprocess.sample_ctr.users
    assert a["ctr"]["vocab"]["cate"]["rows"] == 42 and a["ctr"]["vocab"]["item"]["oov"]["train"]["oov_tokens"] == 0
    s = load_ctr(tmp_path / "samp", "train", max_len=30)
    deep = s.history[:, -2, 1] != 0                              # rows with two behaviours or more
    at_2 = s.target[deep, 1] == s.history[deep, -2, 1]           # the loader keeps the most recent last
    inside = (s.history[deep, :, 1] == s.target[deep, 1:2]).any(axis=1)
    assert auc(at_2, s.label[deep]) > 0.8 and auc(inside, s.label[deep]) == 0.5


def test_kuai_through_the_pipeline_with_min_count_10(tmp_path):
    download.run("sample_kuai", tmp_path / "raw", DownloadParams(), progress=False, sample=SMALL)
    p = Params()
    preprocess.run("sample_kuai", tmp_path / "raw", tmp_path / "sess", p)
    a = augment.run("sample_kuai", tmp_path / "sess", tmp_path / "samp", p)
    vocab = a["ctr"]["vocab"]
    assert vocab["item"]["min_count"] == 10 and 2 < vocab["item"]["rows"] < SMALL.items + 2
    assert vocab["item"]["oov"]["train"]["oov_tokens"] > 0 and a["ctr"]["features"] == {"user": "feature_user"}
    s = load_ctr(tmp_path / "samp", "valid", max_len=10)
    assert s.features.shape == (len(s), 1) and s.extra["neg_items"].shape == (len(s), 10)


@pytest.mark.parametrize("bad", [{"cates": 3}, {"items": 10, "cates": 20}, {"min_length": 2},
                                 {"max_length": 4}, {"p_rule": 1.5}])
def test_bad_params(bad):
    with pytest.raises(ParamsError, match="preprocess.sample_ctr"):
        amazon_frames(SampleCTRParams(**{**vars(SampleCTRParams()), **bad}))


def test_params_section_is_read_from_params_yaml():
    from pipeline.params import load_params
    assert load_params("params.yaml").preprocess.sample_ctr == PreprocessParams().sample_ctr
