"""Stage `preprocess`: source.json check, shards + items + manifest written atomically, determinism."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from pipeline import io, preprocess
from pipeline.errors import DataError, UnknownNameError
from pipeline.params import Params, PreprocessParams
from test_srgnn import DIGI_ROWS, write_digi

SOURCE = {"dataset": "diginetica", "source": "diginetica", "url": None, "origin": "file",
          "filename": "dataset-train-diginetica.zip", "bytes": 123, "sha256": "ab" * 32, "md5": "cd" * 16,
          "files": {"train-item-views.csv": {"bytes": 1, "sha256": "ef" * 32}}}


def raw_folder(root: Path, rows: str = DIGI_ROWS) -> Path:
    """A raw folder as `seqpe download` leaves it: source.json records the file's size and sha256."""
    write_digi(root, rows=rows)
    csv = root / "train-item-views.csv"
    io.write_json(root / "source.json", {**SOURCE, "files": {csv.name: {"bytes": csv.stat().st_size,
                                                                        "sha256": io.sha256_file(csv)}}})
    return root


def params(**kw) -> Params:
    return Params(preprocess=PreprocessParams(**{"valid_fraction": 0.4, **kw}))


def test_writes_shards_items_and_manifest(tmp_path):
    raw = raw_folder(tmp_path / "raw")
    m = preprocess.run("diginetica", raw, tmp_path / "out", params())
    out = tmp_path / "out"
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "items.parquet", "manifest.json", "test/part-00000.parquet", "train/part-00000.parquet",
        "valid/part-00000.parquet"]
    assert io.read_json(out / "manifest.json") == m
    assert m["stage"] == "preprocess" and m["dataset"] == "diginetica" and m["protocol"] == "srgnn"
    assert m["n_items"] == 4 and m["max_len"] == 3
    assert m["splits"] == {"train": {"sessions": 3, "clicks": 8}, "valid": {"sessions": 2, "clicks": 6},
                           "test": {"sessions": 1, "clicks": 2}}
    source = io.read_json(raw / "source.json")
    assert m["source"] == {k: source[k] for k in ("source", "filename", "origin", "sha256", "md5", "bytes", "files")}
    assert m["augment"] == {"train": "prefixes", "valid": "prefixes", "test": "prefixes"}
    assert m["params"]["preprocess"]["valid_fraction"] == 0.4 and m["params"]["options"]["split_days"] == 7
    assert [s["step"] for s in m["steps"]][0] == "read" and len(m["steps"]) == 9
    assert [e["path"] for e in m["shards"]] == ["train/part-00000.parquet", "valid/part-00000.parquet",
                                                "test/part-00000.parquet", "items.parquet"]
    io.verify_shards(out, m)
    train = io.read_split(out, "train")
    assert train.get_column("items").to_list() == [[1, 2, 3], [2, 4], [4, 1, 4]]
    assert pl.read_parquet(out / "items.parquet").get_column("raw_id").to_list() == ["20", "30", "10", "40"]


def test_two_runs_are_byte_identical(tmp_path):
    raw = raw_folder(tmp_path / "raw")
    preprocess.run("diginetica", raw, tmp_path / "a", params(rows_per_shard=2))
    preprocess.run("diginetica", raw, tmp_path / "b", params(rows_per_shard=2))
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert len(files) == 6  # manifest, items, train in 2 shards, valid, test
    for rel in files:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel


def test_shards_split_at_rows_per_shard(tmp_path):
    m = preprocess.run("diginetica", raw_folder(tmp_path / "raw"), tmp_path / "o", params(rows_per_shard=2))
    assert [(e["path"], e["rows"]) for e in m["shards"]] == [
        ("train/part-00000.parquet", 2), ("train/part-00001.parquet", 1), ("valid/part-00000.parquet", 2),
        ("test/part-00000.parquet", 1), ("items.parquet", 4)]


@pytest.mark.parametrize("change, fragment", [
    ("cut", r"has \d+ bytes, but source.json records \d+"), ("edit", "does not match the sha256 source.json records")])
def test_a_raw_file_changed_since_download_is_refused(tmp_path, change, fragment):
    """A raw file cut at a line boundary parsed cleanly and was preprocessed (fewer days, fewer sessions)
    under the original's hashes, which the manifest copies as its provenance."""
    raw = raw_folder(tmp_path / "raw")
    csv = raw / "train-item-views.csv"
    lines = csv.read_text().splitlines(keepends=True)
    csv.write_text("".join(lines[:-2]) if change == "cut" else "".join(lines).replace(";10;", ";20;", 1))
    with pytest.raises(DataError, match=fragment + r".*Fix: delete .*raw and download it again"):
        preprocess.run("diginetica", raw, tmp_path / "out", params())
    assert not (tmp_path / "out").exists()


def test_missing_source_json(tmp_path):
    write_digi(tmp_path / "raw")
    with pytest.raises(DataError, match=r"no source.json in .* Fix: run `seqpe download diginetica`"):
        preprocess.run("diginetica", tmp_path / "raw", tmp_path / "out", params())
    assert not (tmp_path / "out").exists()
    (tmp_path / "raw" / ".dataset-train-diginetica.zip.part").write_bytes(b"PK")   # a killed download's bytes
    with pytest.raises(DataError, match=r"has not been downloaded \(an interrupted download left "
                                        r"\.dataset-train-diginetica\.zip\.part there: `seqpe download diginetica` "
                                        r"resumes it\)"):
        preprocess.run("diginetica", tmp_path / "raw", tmp_path / "out", params())


def test_unknown_dataset_before_anything(tmp_path):
    with pytest.raises(UnknownNameError, match="unknown dataset 'digenetica'"):
        preprocess.run("digenetica", tmp_path / "raw", tmp_path / "out", params())


def test_all_sessions_filtered_writes_nothing(tmp_path):
    raw = raw_folder(tmp_path / "raw")
    with pytest.raises(DataError) as err:
        preprocess.run("diginetica", raw, tmp_path / "out", params(min_item_count=50))
    assert "all sessions of diginetica vanished under the filters" in str(err.value)
    assert "lower preprocess.min_item_count" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == [tmp_path / "raw"]


def test_empty_test_split_is_an_error_and_keeps_old_output(tmp_path):
    raw = raw_folder(tmp_path / "raw")
    preprocess.run("diginetica", raw, tmp_path / "out", params())
    before = (tmp_path / "out" / "manifest.json").read_bytes()
    # without session 9, every test session holds only E (never in train) and C: none survives step 9
    no_9 = "".join(line + "\n" for line in DIGI_ROWS.splitlines() if not line.startswith("9;"))
    raw_folder(raw, rows=no_9 + "14;NA;50;1;2016-05-19\n14;NA;50;2;2016-05-19\n")
    with pytest.raises(DataError, match="test split of 'diginetica' is empty"):
        preprocess.run("diginetica", raw, tmp_path / "out", params())
    assert (tmp_path / "out" / "manifest.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "raw"]


def test_keys_another_protocol_reads_leave_the_folders_byte_identical(tmp_path):
    """Walk 43d #8: `preprocess.k_core` (leave-one-out) and `max_history` (CTR) were written into Diginetica's
    manifest as if applied, and `augment.max_len` / `ctr_vocab` into its samples' manifest, so editing them in
    params.yaml made DVC rebuild its samples and retrain its runs from the same rows."""
    from pipeline import augment
    from pipeline.params import AugmentParams
    raw = raw_folder(tmp_path / "raw")
    folders = []
    for name, kw, aug in (("a", {}, {}), ("b", {"k_core": 2, "max_history": 3, "streaming": True},
                                          {"max_len": 2, "ctr_vocab": "train"})):
        p = Params(preprocess=PreprocessParams(**{"valid_fraction": 0.4, **kw}), augment=AugmentParams(**aug))
        preprocess.run("diginetica", raw, tmp_path / name / "sessions", p)
        augment.run("diginetica", tmp_path / name / "sessions", tmp_path / name / "samples", p)
        folders.append({f.relative_to(tmp_path / name).as_posix(): f.read_bytes()
                        for f in sorted((tmp_path / name).rglob("*")) if f.is_file()})
    assert folders[0] == folders[1]
    m = io.read_json(tmp_path / "a" / "samples" / "manifest.json")["params"]
    assert sorted(m["preprocess"]["preprocess"]) == ["min_item_count", "rows_per_shard", "valid_fraction"]
    assert sorted(m["augment"]) == ["rows_per_shard"]
    p = Params(preprocess=PreprocessParams(valid_fraction=0.4, min_item_count=2))     # one that srgnn reads
    preprocess.run("diginetica", raw, tmp_path / "c", p)
    assert io.read_json(tmp_path / "c" / "manifest.json")["params"]["preprocess"]["min_item_count"] == 2
