"""The embedded `sample` dataset: exact Diginetica raw format, deterministic bytes, realistic
quirks, enough sessions after the SR-GNN protocol, and a sequential signal beyond popularity."""
from __future__ import annotations

import zipfile
from collections import Counter, defaultdict

import polars as pl
import pytest

from pipeline.datasets import get
from pipeline.datasets.sample import MEMBER, SAMPLE_ARCHIVE, ZIP_TIME, generate
from pipeline.params import Params, SampleParams
from pipeline.protocols import build_protocol


@pytest.fixture(scope="module")
def default_sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("sample")
    generate(root / SAMPLE_ARCHIVE, SampleParams())
    zipfile.ZipFile(root / SAMPLE_ARCHIVE).extractall(root)
    return root


def test_registered_as_generated_diginetica_format():
    spec = get("sample")
    assert spec.source.archive == "generated" and spec.source.files == (MEMBER,)
    assert spec.protocol == "srgnn" and spec.options == get("diginetica").options
    assert spec.reader is get("diginetica").reader and spec.source.filename.endswith(".zip")


def test_same_params_same_bytes_other_seed_other_bytes(tmp_path):
    small = SampleParams(sessions=300, items=100, days=30, seed=1)
    generate(tmp_path / "a.zip", small)
    generate(tmp_path / "b.zip", small)
    generate(tmp_path / "c.zip", SampleParams(sessions=300, items=100, days=30, seed=2))
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()
    assert (tmp_path / "a.zip").read_bytes() != (tmp_path / "c.zip").read_bytes()
    info = zipfile.ZipFile(tmp_path / "a.zip").infolist()
    assert [(i.filename, i.date_time) for i in info] == [(MEMBER, ZIP_TIME)]


def test_raw_format_and_quirks(default_sample):
    text = (default_sample / MEMBER).read_text()
    lines = text.splitlines()
    assert lines[0] == "sessionId;userId;itemId;timeframe;eventdate"
    assert all(line.count(";") == 4 for line in lines)
    log = pl.read_csv(default_sample / MEMBER, separator=";", schema_overrides={"userId": pl.String})
    assert log.schema == pl.Schema({"sessionId": pl.Int64, "userId": pl.String, "itemId": pl.Int64,
                                    "timeframe": pl.Int64, "eventdate": pl.String})
    assert log.get_column("sessionId").n_unique() == 4000
    assert 0.7 < (log.get_column("userId") == "NA").mean() < 0.9
    dates = log.get_column("eventdate").str.to_date("%Y-%m-%d")
    assert (dates.max() - dates.min()).days >= 110     # several months
    rows = log.with_row_index("row")
    per = rows.group_by("sessionId").agg(
        unsorted=(pl.col("timeframe").diff() < 0).any(), ties=(pl.col("timeframe").diff() == 0).any(),
        gaps=(pl.col("row").diff() > 1).any(), repeats=pl.col("itemId").n_unique() < pl.len(),
        days=pl.col("eventdate").n_unique(), n=pl.len())
    assert per.get_column("unsorted").sum() > 300      # timeframes out of order in file order
    assert per.get_column("ties").sum() > 50           # equal timeframes (stable sort matters)
    assert per.get_column("gaps").sum() > 20           # sessions whose rows are not contiguous
    assert per.get_column("repeats").sum() > 200       # repeated clicks
    assert per.get_column("days").max() == 2           # sessions crossing midnight
    assert 0.2 < (per.get_column("n") == 1).mean() < 0.35 and per.get_column("n").max() >= 30
    counts = log.get_column("itemId").value_counts(sort=True).get_column("count")
    assert counts.head(len(counts) // 10).sum() > 0.4 * counts.sum()   # long tail


def test_protocol_sizes_and_sequential_signal(default_sample):
    res = build_protocol(get("sample"), default_sample, Params())
    train, valid, test = (res.splits[s] for s in ("train", "valid", "test"))
    assert train.height > 2000 and valid.height > 200 and test.height > 200 and res.n_items > 300
    # next-item from the last click: "most frequent successor" vs "most popular" on test samples
    follow: dict[int, Counter] = defaultdict(Counter)
    pop: Counter = Counter()
    for items in train.get_column("items").to_list() + valid.get_column("items").to_list():
        pop.update(items)
        for a, b in zip(items, items[1:]):
            follow[a][b] += 1
    top = [i for i, _ in pop.most_common(10)]
    hit_pop = hit_seq = n = 0
    for items in test.get_column("items").to_list():
        for k in range(1, len(items)):
            guess = [i for i, _ in follow[items[k - 1]].most_common(10)]
            hit_seq += items[k] in guess
            hit_pop += items[k] in top
            n += 1
    assert hit_seq / n > 0.4 and hit_seq > 2 * hit_pop


def test_manifest_records_the_settings_the_sample_was_generated_with(tmp_path, capsys):
    """`download sample --set preprocess.sample.sessions=300`, then a plain `preprocess sample`: the
    manifest records 300 (from source.json's "generator"), with a note that the params in effect differ;
    downloading again with the defaults rewrites the record."""
    from pipeline import download, preprocess
    from pipeline.io import read_json
    from pipeline.params import DownloadParams
    small = SampleParams(sessions=300)
    download.run("sample", tmp_path / "raw", DownloadParams(), sample=small, progress=False)
    assert read_json(tmp_path / "raw" / "source.json")["generator"]["sessions"] == 300
    manifest = preprocess.run("sample", tmp_path / "raw", tmp_path / "sessions", Params())
    assert manifest["params"]["preprocess"]["sample"]["sessions"] == 300
    assert manifest["source"]["generator"]["sessions"] == 300
    assert manifest["steps"][0]["sessions"] == 300
    assert "generated with preprocess.sample.sessions=300 (params: 4000)" in capsys.readouterr().err
    download.run("sample", tmp_path / "raw", DownloadParams(), progress=False)
    assert read_json(tmp_path / "raw" / "source.json")["generator"]["sessions"] == 4000
    again = preprocess.run("sample", tmp_path / "raw", tmp_path / "sessions", Params())
    assert again["params"]["preprocess"]["sample"]["sessions"] == 4000 and "note" not in capsys.readouterr().err


def test_another_generators_settings_leave_the_sessions_manifest_alone(tmp_path):
    """Walk 36c #3: `preprocess sample --set preprocess.sample_ctr.seed=5` rewrote sample's sessions manifest (the
    whole preprocess section was recorded) though no shard changed, and `seqpe datasets` then called its samples
    stale. A generator's section is recorded only by the datasets it generates."""
    import dataclasses
    from pipeline import download, preprocess
    from pipeline.io import sha256_file
    from pipeline.params import DownloadParams, PreprocessParams, SampleCTRParams
    small = SampleParams(sessions=300)
    download.run("sample", tmp_path / "raw", DownloadParams(), sample=small, progress=False)
    base = Params(preprocess=PreprocessParams(sample=small))
    manifest = preprocess.run("sample", tmp_path / "raw", tmp_path / "a", base)
    assert "sample_ctr" not in manifest["params"]["preprocess"] and "sample" in manifest["params"]["preprocess"]
    other = dataclasses.replace(base, preprocess=dataclasses.replace(base.preprocess,
                                                                      sample_ctr=SampleCTRParams(seed=5)))
    preprocess.run("sample", tmp_path / "raw", tmp_path / "b", other)
    assert sha256_file(tmp_path / "a" / "manifest.json") == sha256_file(tmp_path / "b" / "manifest.json")
    changed = dataclasses.replace(base, preprocess=dataclasses.replace(base.preprocess, valid_fraction=0.2))
    preprocess.run("sample", tmp_path / "raw", tmp_path / "c", changed)            # a key it reads: recorded
    assert sha256_file(tmp_path / "a" / "manifest.json") != sha256_file(tmp_path / "c" / "manifest.json")
