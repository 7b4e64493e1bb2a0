"""Import / export of SR-GNN pickles and S3-Rec text: exact counts on the real files, exact rows on
tiny hand-made ones, byte-exact round trips, and seqpe's srgnn pipeline against an independent
re-implementation of SR-GNN's preprocess.py (tests/srgnn_reference.py)."""
from __future__ import annotations

import os
import pickle
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from pipeline import augment, download, formats, io, preprocess
from pipeline.batches import load_samples
from pipeline.errors import DataError, ParamsError, UnknownNameError
from pipeline.params import Params, from_dict

sys.path.insert(0, str(Path(__file__).parent))
from srgnn_reference import reference  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "datasets"
DIGI, YOO, S3REC = SHARED / "diginetica-srgnn", SHARED / "yoochoose1_64-srgnn", SHARED / "amazon-s3rec"
needs_shared = pytest.mark.skipif(not DIGI.is_dir(), reason="shared datasets not present")


def params(**sections) -> Params:
    return from_dict(Params, sections)


def dump(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(obj, protocol=3))


def rows(folder: Path, split: str) -> list[tuple]:
    return list(io.read_split(folder, split).iter_rows())


def same_files(a: Path, b: Path, names=("all_train_seq.txt", "train.txt", "test.txt")) -> dict:
    return {n: (a / n).read_bytes() == (b / n).read_bytes() for n in names}


# --------------------------------------------------------------------------- srgnn, hand-made

SEQS = [[1, 2], [3, 4, 5], [6, 1, 2], [7, 8], [2, 3], [4, 5, 6], [8, 1], [2, 2], [5, 7, 8, 1], [3, 9, 4]]
TEST = ([[2, 3], [2], [5]], [4, 3, 6])       # sessions [2, 3, 4] and [5, 6], SR-GNN order


def test_import_srgnn_tiny_exact(tmp_path):
    dump(tmp_path / "in" / "all_train_seq.txt", SEQS)
    dump(tmp_path / "in" / "test.txt", TEST)
    s, a = tmp_path / "sessions", tmp_path / "samples"
    summary = formats.import_dataset("tiny", tmp_path / "in", "srgnn", s, a, params())
    assert (summary["train sessions (train+valid)"], summary["valid sessions"], summary["test sessions"],
            summary["train samples (train+valid)"], summary["test samples"], summary["n_items (max id)"]) \
        == (10, 1, 2, 16, 3, 9)
    assert rows(s, "valid") == [(10, [3, 9, 4])]            # floor(10 * 0.1) most recent
    assert rows(s, "train")[:2] == [(1, [1, 2]), (2, [3, 4, 5])] and len(rows(s, "train")) == 9
    assert rows(s, "test") == [(11, [2, 3, 4]), (12, [5, 6])]  # rebuilt from the prefix samples
    assert rows(a, "test") == [(11, [2, 3], 4), (11, [2], 3), (12, [5], 6)]
    assert rows(a, "valid") == [(10, [3, 9], 4), (10, [3], 9)]
    assert rows(a, "train")[:4] == [(1, [1], 2), (2, [3, 4], 5), (2, [3], 4), (3, [6, 1], 2)]
    m = io.read_manifest(a)
    assert (m["stage"], m["protocol"], m["n_items"], m["max_len"], m["augment"]) == \
        ("import", "srgnn", 9, 3, {"train": "prefixes", "valid": "prefixes", "test": "prefixes"})
    assert m["splits"]["test"] == {"samples": 3, "sessions": 2, "clicks": 5}
    assert io.read_manifest(s)["splits"]["valid"] == {"sessions": 1, "clicks": 3}
    items = pl.read_parquet(s / "items.parquet")
    assert items.row(0) == (1, "1", 4) and items["count"].to_list()[-1] == 1 and items.height == 9
    io.verify_shards(a)
    io.verify_shards(s)
    # `seqpe augment` takes the imported name (not in the registry) and rebuilds the same samples
    from pipeline import augment
    again = augment.run("tiny", s, tmp_path / "again", params())
    assert again["dataset"] == "tiny" and again["augment"] == m["augment"]
    for split in io.SPLITS:
        ours = sorted((tmp_path / "again" / split).glob("*.parquet"))
        assert [f.read_bytes() for f in ours] == [f.read_bytes() for f in sorted((a / split).glob("*.parquet"))]
    with pytest.raises(DataError, match=r"sessions holds tiny's sessions, but the command names 'tinny'. Fix: name "
                                        r"the dataset it holds \(`seqpe augment tiny .*/sessions \.\.\.`\)"):
        augment.run("tinny", s, tmp_path / "other", params())     # a name the import did not give
    with pytest.raises(UnknownNameError, match="unknown dataset 'tinny'"):
        augment.run("tinny", tmp_path / "nothing", tmp_path / "other", params())


def test_import_then_export_round_trip_is_byte_exact(tmp_path):
    dump(tmp_path / "in" / "all_train_seq.txt", SEQS)
    dump(tmp_path / "in" / "test.txt", TEST)
    formats.import_dataset("tiny", tmp_path / "in", "srgnn", tmp_path / "s", tmp_path / "a", params())
    out = formats.export_dataset(tmp_path / "s", tmp_path / "out")
    assert (out["train sessions"], out["train samples"], out["test samples"]) == (10, 16, 3)
    assert same_files(tmp_path / "in", tmp_path / "out", ("all_train_seq.txt", "test.txt")) == \
        {"all_train_seq.txt": True, "test.txt": True}
    prefixes, labels = pickle.loads((tmp_path / "out" / "train.txt").read_bytes())
    assert (prefixes[:3], labels[:3], len(labels)) == ([[1], [3, 4], [3]], [2, 5, 4], 16)


def test_train_txt_is_checked_and_a_fraction_cut_is_kept(tmp_path):
    src = tmp_path / "in"
    dump(src / "all_train_seq.txt", [[5, 6, 7, 8], [1, 2], [3, 4, 5]])
    dump(src / "test.txt", TEST)
    # SR-GNN's 1/64 layout when the cut falls inside the first session: its 1 shortest prefix only
    dump(src / "train.txt", ([[5], [1], [3, 4], [3]], [6, 2, 5, 4]))
    summary = formats.import_dataset("cut", src, "srgnn", tmp_path / "s", tmp_path / "a",
                                     params(preprocess={"valid_fraction": 0.34}))   # 1 of 3 sessions to valid
    assert summary["train samples (train+valid)"] == 4 and "less the 2 longest prefixes" in summary["train.txt"]
    assert rows(tmp_path / "s", "train")[0] == (1, [5, 6])    # cut like pipeline.protocols.srgnn
    augment.run("cut", tmp_path / "s", tmp_path / "a2", params())
    assert rows(tmp_path / "a2", "train") == rows(tmp_path / "a", "train")
    formats.export_dataset(tmp_path / "s", tmp_path / "out")
    assert same_files(src, tmp_path / "out") == {n: True for n in formats.SRGNN_FILES}

    dump(src / "train.txt", ([[5], [1]], [6, 3]))
    with pytest.raises(DataError, match=r"train.txt \(2 samples\) is not the prefix augmentation of "
                                        r"all_train_seq.txt \(6 samples\)\. Fix: remove train.txt"):
        formats.import_dataset("cut", src, "srgnn", tmp_path / "s3", tmp_path / "a3", params())
    assert not (tmp_path / "s3").exists() and not (tmp_path / "a3").exists()


def test_test_samples_not_from_whole_sessions_are_kept_exactly(tmp_path):
    src = tmp_path / "in"
    dump(src / "all_train_seq.txt", SEQS)
    odd = ([[2], [2, 3], [5, 1]], [3, 4, 6])     # shortest prefix first: not SR-GNN's order
    dump(src / "test.txt", odd)
    formats.import_dataset("odd", src, "srgnn", tmp_path / "s", tmp_path / "a", params())
    m = io.read_manifest(tmp_path / "s")
    assert m["augment"]["test"] == "last" and "one session per sample" in m["protocol_info"]["test_sessions"]
    assert rows(tmp_path / "s", "test") == [(11, [2, 3]), (12, [2, 3, 4]), (13, [5, 1, 6])]
    formats.export_dataset(tmp_path / "s", tmp_path / "out")
    assert (tmp_path / "out" / "test.txt").read_bytes() == (src / "test.txt").read_bytes()


def test_import_errors(tmp_path):
    p = params()
    tmp_path, out = tmp_path / "src", tmp_path            # the outputs outside the folder being imported
    tmp_path.mkdir()
    with pytest.raises(UnknownNameError, match="unknown format 'csv'. Fix: use one of: amazonelectronics_x1, auto, kuaivideo_x1, sasrec, srgnn"):
        formats.import_dataset("x", tmp_path, "csv", out / "s", out / "a", p)
    with pytest.raises(DataError, match="has no all_train_seq.txt"):
        formats.import_dataset("x", tmp_path, "srgnn", out / "s", out / "a", p)
    with pytest.raises(DataError, match="sessions and samples would both go to"):
        formats.import_dataset("x", tmp_path, "srgnn", out / "s", out / "s", p)
    dump(tmp_path / "all_train_seq.txt", SEQS)
    dump(tmp_path / "test.txt", ([], []))
    with pytest.raises(DataError, match="test.txt holds no samples"):
        formats.import_dataset("x", tmp_path, "srgnn", out / "s", out / "a", p)
    (tmp_path / "test.txt").write_bytes(pickle.dumps(TEST, protocol=3)[:-20])
    with pytest.raises(DataError, match="test.txt is truncated"):
        formats.import_dataset("x", tmp_path, "srgnn", out / "s", out / "a", p)
    assert not (out / "s").exists() and not (out / "a").exists()


@pytest.mark.parametrize("sessions, samples, fragment", [
    ("D/x", "D/x/a", "the samples folder D/x/a is inside the sessions folder D/x: each is replaced whole, so "
                     "writing one would delete the other. Fix: pass --sessions and --samples folders side by "
                     "side"),                                   # exited 0, and D/x/a was gone
    ("D/x/s", "D/x", "the sessions folder D/x/s is inside the samples folder D/x"),   # "No such file", half written
    ("D/x", "D/./x", "sessions and samples would both go to D/x"),
])
def test_nested_sessions_and_samples_folders_are_refused_before_writing(tmp_path, monkeypatch, sessions, samples,
                                                                         fragment):
    (tmp_path / "ok.txt").write_text("1 1 2 3\n2 2 3 4\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError) as err:
        formats.import_dataset("q2", "ok.txt", "auto", sessions, samples, params())
    assert fragment in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.txt"]


def test_outputs_inside_the_folder_being_imported_are_refused(tmp_path):
    """Walk 35b: `seqpe import dg SRC --sessions SRC/sess --samples SRC/samp` wrote its folders among the user's
    source files (every other stage refuses an output inside its input)."""
    src = tmp_path / "src"
    dump(src / "all_train_seq.txt", [[1, 2, 3], [2, 3, 4]])
    before = sorted(p.name for p in src.iterdir())
    for sessions, samples in ((src / "sess", tmp_path / "a"), (tmp_path / "s", src / "deep" / "samp")):
        with pytest.raises(DataError, match=r"folder .* is inside the folder being imported, .*src: the import would "
                                            r"write among the files it reads. Fix: pass --sessions and --samples "
                                            r"folders outside it"):
            formats.import_dataset("q3", src, "srgnn", sessions, samples, params())
    assert sorted(p.name for p in src.iterdir()) == before and sorted(p.name for p in tmp_path.iterdir()) == ["src"]


@pytest.mark.parametrize("fmt", ["sasrec", "srgnn"])
@pytest.mark.parametrize("big, distinct", [(2**31 - 1, 4), (20_000_000, 3)])
def test_a_largest_id_far_above_the_distinct_ids_is_refused(tmp_path, fmt, big, distinct):
    """Ids are kept, n_items = the largest id: 2**31 - 1 was an OverflowError traceback, 20,000,000 an
    import of 20,000,000 items (a 60 MB items.parquet) for 3."""
    seqs = [[1, 2, big], [1, 2, 3]][: distinct - 2]          # `1 1 2 BIG`, with `2 1 2 3` for 4 ids
    if fmt == "sasrec":
        src = tmp_path / "huge.txt"
        src.write_text("".join(f"{u} {' '.join(map(str, seq))}\n" for u, seq in enumerate(seqs, 1)))
    else:                                                      # the same as SR-GNN pickles
        src = tmp_path / "huge"
        dump(src / "all_train_seq.txt", seqs)
        dump(src / "test.txt", ([[1]], [2]))
    with pytest.raises(DataError) as err:
        formats.import_dataset("huge", src, fmt, tmp_path / "s", tmp_path / "a", params())
    assert f"the largest item id is {big:,} but only {distinct} distinct ids occur" in str(err.value)
    assert f"Fix: renumber the items 1..N (N = {distinct}) and import the renumbered file" in str(err.value)
    assert not (tmp_path / "s").exists() and not (tmp_path / "a").exists()


def test_the_allowance_for_unused_ids(tmp_path):
    """Published files are dense 1..N with gaps (Yoochoose 1/64: 37,483 for 17,745 ids; the real-file tests
    import them all), and an excerpt keeps its ids: up to 2 x distinct + SPARSE_IDS is accepted."""
    top = 2 * 4 + formats.SPARSE_IDS
    (tmp_path / "ok.txt").write_text(f"1 1 2 3 {top}\n")
    summary = formats.import_dataset("ok", tmp_path / "ok.txt", "sasrec", tmp_path / "s", tmp_path / "a", params())
    assert summary["n_items (max id)"] == top and summary["items"] == 4
    (tmp_path / "no.txt").write_text(f"1 1 2 3 {top + 1}\n")
    with pytest.raises(DataError, match=f"largest item id is {top + 1:,}"):
        formats.import_dataset("no", tmp_path / "no.txt", "sasrec", tmp_path / "s2", tmp_path / "a2", params())


def test_export_refuses_other_files_and_other_protocols(tmp_path):
    dump(tmp_path / "in" / "all_train_seq.txt", SEQS)
    dump(tmp_path / "in" / "test.txt", TEST)
    formats.import_dataset("tiny", tmp_path / "in", "srgnn", tmp_path / "s", tmp_path / "a", params())
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.md").write_text("mine")
    with pytest.raises(DataError, match="busy already holds files without the export.json"):
        formats.export_dataset(tmp_path / "s", tmp_path / "busy")
    assert (tmp_path / "busy" / "notes.md").read_text() == "mine"
    with pytest.raises(DataError, match="holds srgnn sessions, not leave-one-out ones"):
        formats.export_dataset(tmp_path / "s", tmp_path / "o", "sasrec")
    formats.export_dataset(tmp_path / "s", tmp_path / "o")
    formats.export_dataset(tmp_path / "s", tmp_path / "o")  # a previous export may be replaced
    # walk 41d #2: a folder of the export's names that export did not write (a user's real SR-GNN pickles, which
    # an `imports:` entry reads) was replaced; an edited export too
    dump(tmp_path / "real" / "all_train_seq.txt", SEQS)
    dump(tmp_path / "real" / "test.txt", TEST)
    before = {p.name: p.read_bytes() for p in (tmp_path / "real").iterdir()}
    with pytest.raises(DataError, match=r"real already holds files without the export.json record `seqpe export` writes"):
        formats.export_dataset(tmp_path / "s", tmp_path / "real")
    assert {p.name: p.read_bytes() for p in (tmp_path / "real").iterdir()} == before
    dump(tmp_path / "o" / "test.txt", TEST[:1])
    with pytest.raises(DataError, match=r"o is an earlier export whose files were edited since it was written \(test.txt changed\)"):
        formats.export_dataset(tmp_path / "s", tmp_path / "o")
    formats.export_dataset(tmp_path / "s", tmp_path / "o2")
    assert (tmp_path / "o2" / "export.json").is_file()                   # an export still imports, its record aside
    formats.import_dataset("tiny2", tmp_path / "o2", "srgnn", tmp_path / "s2", tmp_path / "a2", params())
    ctr = tmp_path / "ctr_sessions"            # CTR rows have no session_id: a ColumnNotFoundError traceback
    ctr.mkdir()
    io.write_json(ctr / "manifest.json", {"stage": "preprocess", "kind": "sessions", "dataset": "sample_ctr",
                                          "protocol": "ctr", "shards": []})
    for fmt in ("srgnn", "sasrec"):
        with pytest.raises(DataError, match="holds CTR data .* Fix: export a next-item dataset"):
            formats.export_dataset(ctr, tmp_path / "e", fmt, dataset="sample_ctr")
    assert not (tmp_path / "e").exists()
    for fmt in ("kuaivideo_x1", "amazonelectronics_x1"):   # import's CTR formats: once written as S3-Rec text
        with pytest.raises(UnknownNameError, match=f"unknown export format '{fmt}'. Fix: use --format srgnn or "
                                                   f"--format sasrec \\({fmt} is a format import reads"):
            formats.export_dataset(tmp_path / "s", tmp_path / "e", fmt)
    with pytest.raises(UnknownNameError, match="unknown export format 'txt'. Fix: use one of: sasrec, srgnn"):
        formats.export_dataset(tmp_path / "s", tmp_path / "e", "txt")
    assert not (tmp_path / "e").exists()


def test_another_datasets_folder_names_fixes_that_work(tmp_path):
    """export's fix put the sessions folder where its output goes (`seqpe export yc64 data/sessions/yc64`, then
    "already holds other files"); an imported name's folder was "written by `seqpe preprocess NAME`" (unknown
    dataset there); augment said "unknown dataset" for an imported name given another dataset's folder."""
    dump(tmp_path / "in" / "all_train_seq.txt", SEQS)
    dump(tmp_path / "in" / "test.txt", TEST)
    for name in ("tiny", "other"):
        formats.import_dataset(name, tmp_path / "in", "srgnn", tmp_path / f"s_{name}", tmp_path / f"a_{name}", params())
    with pytest.raises(DataError, match=r"s_other holds other's sessions, but the command names 'tiny'. Fix: name "
                                        r"the dataset it holds \(`seqpe export other .*/out --sessions .*/s_other`\), "
                                        r"or pass data/sessions/tiny \(written by `seqpe import tiny \.\.\.`\)"):
        formats.export_dataset(tmp_path / "s_other", tmp_path / "out", dataset="tiny")
    with pytest.raises(DataError, match=r"s_other holds other's sessions, but the command names 'tiny'.*written by "
                                        r"`seqpe import tiny \.\.\.`"):
        augment.run("tiny", tmp_path / "s_other", tmp_path / "aug", params())
    with pytest.raises(DataError, match=r"pass data/sessions/sample \(written by `seqpe preprocess sample`\)"):
        augment.run("sample", tmp_path / "s_other", tmp_path / "aug", params())     # a registered name
    assert not (tmp_path / "out").exists() and not (tmp_path / "aug").exists()
    formats.export_dataset(tmp_path / "s_other", tmp_path / "out", dataset="other")   # the fix works


# --------------------------------------------------------------------------- srgnn, the real files

@pytest.fixture(scope="module")
def digi(tmp_path_factory):
    root = tmp_path_factory.mktemp("digi")
    summary = formats.import_dataset("diginetica", DIGI, "srgnn", root / "s", root / "a", Params())
    return root, summary


@needs_shared
def test_real_diginetica_import_counts(digi):
    root, summary = digi
    assert (summary["train sessions (train+valid)"], summary["train samples (train+valid)"],
            summary["test samples"], summary["items"], summary["n_items (max id)"]) == \
        (186_670, 719_470, 60_858, 43_097, 43_097)
    assert (summary["train sessions"], summary["valid sessions"], summary["test sessions"]) == \
        (168_003, 18_667, 15_963)
    assert (summary["train samples"], summary["valid samples"], summary["train clicks (train+valid)"]) == \
        (649_944, 69_526, 906_140)
    m = io.read_manifest(root / "a")
    assert (m["n_items"], m["splits"]["test"]["samples"], m["augment"]["test"]) == (43_097, 60_858, "prefixes")


@needs_shared
@pytest.mark.slow
def test_real_diginetica_samples_equal_the_augment_stage(digi, tmp_path):
    root, _ = digi
    augment.run("diginetica", root / "s", tmp_path / "a", Params())
    ours = [e["sha256"] for e in io.read_manifest(root / "a")["shards"]]
    assert ours == [e["sha256"] for e in io.read_manifest(tmp_path / "a")["shards"]]


@needs_shared
@pytest.mark.slow
def test_real_diginetica_export_is_byte_exact(digi, tmp_path):
    root, _ = digi
    formats.export_dataset(root / "s", tmp_path / "out")
    assert same_files(DIGI, tmp_path / "out", ("all_train_seq.txt", "test.txt")) == \
        {"all_train_seq.txt": True, "test.txt": True}
    prefixes, labels = pickle.loads((tmp_path / "out" / "train.txt").read_bytes())
    assert (len(prefixes), prefixes[:3], labels[:3], prefixes[-1], labels[-1]) == \
        (719_470, [[1], [3, 4], [3]], [2, 5, 4], [36601], 12270)


@pytest.fixture(scope="module")
def yoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("yoo")
    summary = formats.import_dataset("yoochoose_1_64", YOO, "srgnn", root / "s", root / "a", Params())
    return root, summary


@needs_shared
def test_real_yoochoose_1_64_import_counts(yoo):
    _, summary = yoo
    assert (summary["train sessions (train+valid)"], summary["train samples (train+valid)"],
            summary["test sessions"], summary["test samples"], summary["n_items (max id)"], summary["items"]) \
        == (116_167, 369_859, 15_324, 55_898, 37_483, 17_745)


@needs_shared
@pytest.mark.slow
def test_real_yoochoose_1_64_export_is_byte_exact(yoo, tmp_path):
    root, _ = yoo
    formats.export_dataset(root / "s", tmp_path / "out")
    assert same_files(YOO, tmp_path / "out", ("all_train_seq.txt", "test.txt")) == \
        {"all_train_seq.txt": True, "test.txt": True}


# --------------------------------------------------------------------------- sasrec

@needs_shared
@pytest.mark.parametrize("name, users, items, interactions", [
    ("Beauty", 22_363, 12_101, 198_502),
    ("Sports_and_Outdoors", 35_598, 18_357, 296_337),
    ("Toys_and_Games", 19_412, 11_924, 167_597),
])
def test_real_s3rec_import_counts_and_round_trip(tmp_path, name, users, items, interactions):
    summary = formats.import_dataset(name.lower(), S3REC / f"{name}.txt", "sasrec", tmp_path / "s", tmp_path / "a",
                                     Params())
    assert (summary["users"], summary["items"], summary["interactions"], summary["n_items (max id)"],
            summary["users dropped (< 3 items)"]) == (users, items, interactions, items, 0)
    # train: each user's shifted row keeps its most recent max_len + 1 train items (n - 2 of them),
    # so it gives min(n - 3, max_len) (prefix, target) pairs
    lengths = [len(line.split()) - 1 for line in (S3REC / f"{name}.txt").read_text().splitlines()]
    max_len = Params().augment.max_len
    assert (summary["train samples"], summary["valid samples"], summary["test samples"]) == \
        (sum(min(n - 3, max_len) for n in lengths), users, users)
    assert sum(n - 3 for n in lengths) == interactions - 3 * users
    formats.export_dataset(tmp_path / "s", tmp_path / "out", "sasrec")
    assert (tmp_path / "out" / f"{name.lower()}.txt").read_bytes() == (S3REC / f"{name}.txt").read_bytes()
    if name == "Beauty":      # the same file in Kang & McAuley's layout (one `user item` per line) imports alike
        pairs = tmp_path / "pairs.txt"
        pairs.write_text("".join(f"{u} {i}\n" for line in (S3REC / f"{name}.txt").read_text().splitlines()
                                 for u, *items in [line.split()] for i in items))
        formats.import_dataset("beauty", pairs, "sasrec", tmp_path / "s2", tmp_path / "a2", Params())
        for split in io.SPLITS:
            for a, b in (("s", "s2"), ("a", "a2")):
                assert io.read_split(tmp_path / a, split).equals(io.read_split(tmp_path / b, split)), (a, split)


def test_sasrec_tiny_exact(tmp_path):
    src = tmp_path / "tiny.txt"
    src.write_text("1 5 6 7 8 9\n2 3 4 5\n7 9 9\n3 4 6 8\n")
    summary = formats.import_dataset("tiny", src, "sasrec", tmp_path / "s", tmp_path / "a",
                                     params(augment={"max_len": 2}))
    assert (summary["users"], summary["users dropped (< 3 items)"], summary["interactions"]) == (4, 1, 13)
    s, a = tmp_path / "s", tmp_path / "a"
    assert rows(s, "train") == [(1, [5, 6, 7]), (2, [3]), (3, [4])]
    assert rows(s, "valid") == [(1, [5, 6, 7, 8]), (2, [3, 4]), (3, [4, 6])]
    assert rows(s, "test") == [(1, [5, 6, 7, 8, 9]), (2, [3, 4, 5]), (3, [4, 6, 8])]
    assert rows(a, "train") == [(1, [5, 6, 7])]          # shifted row: the last max_len + 1 items
    train = load_samples(a, "train", 2)                  # -> every next item with the items before it
    assert train.seqs.tolist() == [[5, 6], [0, 5]] and train.targets.tolist() == [7, 6]
    assert rows(a, "valid") == [(1, [6, 7], 8), (2, [3], 4), (3, [4], 6)]
    assert rows(a, "test") == [(1, [7, 8], 9), (2, [3, 4], 5), (3, [4, 6], 8)]
    m = io.read_manifest(a)
    assert (m["protocol"], m["n_items"], m["augment"], m["max_len"]) == \
        ("leave_one_out", 9, {"train": "shifted", "valid": "last", "test": "last"}, 2)
    assert m["splits"]["train"] == {"samples": 2, "rows": 1, "sessions": 3, "clicks": 5}
    augment.run("tiny", s, tmp_path / "a2", params(augment={"max_len": 2}))
    assert [rows(tmp_path / "a2", x) for x in io.SPLITS] == [rows(a, x) for x in io.SPLITS]


def test_sasrec_one_interaction_per_line_is_kang_and_mcauleys_layout(tmp_path):
    """SASRec's own data/*.txt (and pmixer's) hold one `user item` per line; each user's lines in
    file order are the sequence, even when users interleave. Same sessions and samples as S3-Rec's
    one line per user."""
    per_user = tmp_path / "per_user.txt"
    per_user.write_text("3 4 6 8 2\n1 5 6 7 8 9\n7 9 9\n")
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("3 4\n1 5\n3 6\n1 6\n7 9\n1 7\n3 8\n1 8\n1 9\n3 2\n7 9\n")
    got = {}
    for name, src in (("u", per_user), ("p", pairs)):
        summary = formats.import_dataset("tiny", src, "sasrec", tmp_path / name / "s", tmp_path / name / "a",
                                         params(augment={"max_len": 3}))
        got[name] = [rows(tmp_path / name / kind, x) for kind in ("s", "a") for x in io.SPLITS], summary
    assert got["p"][0] == got["u"][0]
    assert rows(tmp_path / "p" / "s", "test") == [(3, [4, 6, 8, 2]), (1, [5, 6, 7, 8, 9])]   # first-line order
    assert got["p"][1]["layout"].startswith("user item") and "layout" not in got["u"][1]
    assert (got["p"][1]["users"], got["p"][1]["interactions"]) == (3, 11)
    assert "interaction per line" in io.read_manifest(tmp_path / "p" / "s")["protocol_info"]["layout"]


@pytest.mark.parametrize("name, fmt, fragment", [
    ("../x", "sasrec", "'../x' is not a usable dataset name"),         # would write data/sessions/../x = data/x
    ("Beauty", "sasrec", "'Beauty' is not a usable dataset name"),
    ("diginetica", "sasrec", "'diginetica' is a registered srgnn dataset, but --format sasrec files follow the "
                             "leave_one_out protocol. Fix: import under another name, e.g. diginetica_sasrec"),
    ("beauty", "srgnn", "'beauty' is a registered leave_one_out dataset"),
    # CARCA's names: data without its attributes, context and train-only users trained as CARCA's (walk 32a)
    ("carca_beauty", "sasrec", "'carca_beauty' is a registered dataset built from its authors' files (item "
                               "attributes, interaction context, and their split"),
])
def test_import_names_are_folder_safe_and_keep_a_registered_names_protocol(tmp_path, name, fmt, fragment):
    src = tmp_path / "ok.txt"
    src.write_text("1 5 6 7 8\n2 3 4 5\n")
    with pytest.raises(DataError) as err:
        formats.import_dataset(name, src, fmt, tmp_path / "s", tmp_path / "a", params())
    assert fragment in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.txt"]
    formats.import_dataset("beauty", src, "sasrec", tmp_path / "s", tmp_path / "a", params())   # its own protocol


def test_a_missing_source_is_named_as_missing(tmp_path):
    src = tmp_path / "ok.txt"
    src.write_text("1 5 6 7\n2 3 4 5\n")
    for f, what in (("sasrec", "does not exist"), ("srgnn", "does not exist")):
        with pytest.raises(DataError, match=f"nope {what}"):
            formats.import_dataset("x", tmp_path / "nope", f, tmp_path / "s", tmp_path / "a", params())
    with pytest.raises(DataError, match="ok.txt is not a folder"):
        formats.import_dataset("x", src, "srgnn", tmp_path / "s", tmp_path / "a", params())
    with pytest.raises(DataError, match=f"{tmp_path.name} is not a file"):
        formats.import_dataset("x", tmp_path, "sasrec", tmp_path / "s", tmp_path / "a", params())


def test_without_a_format_the_source_says_what_it_is(tmp_path):
    """`seqpe import NAME Beauty.txt` (no --format) used to read it as an SR-GNN folder and say 'not a
    folder'. `auto` reads a folder as SR-GNN's and a text file as SASRec's, recognised by content."""
    dump(tmp_path / "in" / "all_train_seq.txt", SEQS)
    dump(tmp_path / "in" / "test.txt", TEST)
    (tmp_path / "beauty.parquet").write_text("1 2 3 4 5\n2 3 4 5\n")      # text, whatever its name
    assert formats.detect_format(tmp_path / "in") == "srgnn"
    assert formats.detect_format(tmp_path / "beauty.parquet") == "sasrec"
    auto = formats.import_dataset("t", tmp_path / "in", "auto", tmp_path / "s1", tmp_path / "a1", params())
    given = formats.import_dataset("t", tmp_path / "in", "srgnn", tmp_path / "s2", tmp_path / "a2", params())
    assert auto["format"] == "srgnn" and rows(tmp_path / "a1", "test") == rows(tmp_path / "a2", "test")
    summary = formats.import_dataset("u", tmp_path / "beauty.parquet", "auto", tmp_path / "s3", tmp_path / "a3",
                                     params())
    assert summary["format"] == "sasrec" and summary["test samples"] == 2
    (tmp_path / "s3rec").mkdir()
    (tmp_path / "s3rec" / "Beauty.txt").write_text("1 2 3 4\n")                  # S3-Rec's data/ folder
    with pytest.raises(DataError, match=r"s3rec is a folder without SR-GNN's all_train_seq.txt.*e\.g\. .*Beauty.txt"):
        formats.detect_format(tmp_path / "s3rec")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README").write_text("SUMMARY\n=======\n")
    with pytest.raises(DataError, match=r"notes is a folder .* none of them SASRec / S3-Rec text.*Fix: pass SR-GNN's"):
        formats.detect_format(tmp_path / "notes")                     # was: "e.g. .../README"
    (tmp_path / "notes" / "users.dat").write_text("1::F::1::10::48067\n")
    (tmp_path / "notes" / "movies.dat").write_text("1::Toy Story (1995)::Animation\n")
    with pytest.raises(DataError, match=r"notes holds ml_1m's raw files \(users.dat, movies.dat\).*Fix: run `seqpe "
                                        r"download ml_1m --from .*notes`, then `seqpe preprocess ml_1m`"):
        formats.detect_format(tmp_path / "notes")                     # MovieLens' folder (walk 28)
    (tmp_path / "empty").mkdir()
    assert formats.detect_format(tmp_path / "empty") == "srgnn"    # whose reader names the missing files
    (tmp_path / "x.gz").write_bytes(b"\x1f\x8b\x08\x00" + bytes(20))
    for src, fragment in ((tmp_path / "in" / "test.txt", "test.txt is a Python pickle (a file of an SR-GNN folder)"),
                          (tmp_path / "x.gz", "x.gz is gzip data, not SASRec / S3-Rec text"),
                          (tmp_path / "nope", "nope does not exist")):
        for fmt in ("auto", "sasrec"):
            with pytest.raises(DataError, match=re.escape(fragment)):
                formats.import_dataset("v", src, fmt, tmp_path / "s4", tmp_path / "a4", params())
    assert not (tmp_path / "s4").exists() and not (tmp_path / "a4").exists()


def test_sasrec_file_with_a_byte_order_mark_or_crlf_imports_the_same(tmp_path):
    """Windows editors save UTF-8 with a BOM ('\\ufeff1' was "not an id") and CRLF line ends."""
    text = "1 5 6 7 8 9\n2 3 4 5\n3 4 6 8\n"
    out = {}
    for name, data in (("plain", text.encode()), ("bom", b"\xef\xbb\xbf" + text.encode()),
                       ("crlf", text.replace("\n", "\r\n").encode())):
        (tmp_path / f"{name}.txt").write_bytes(data)
        formats.import_dataset("tiny", tmp_path / f"{name}.txt", "sasrec", tmp_path / name / "s",
                               tmp_path / name / "a", params())
        out[name] = [rows(tmp_path / name / "a", x) for x in io.SPLITS]
    assert out["bom"] == out["plain"] == out["crlf"] and out["plain"][2][0] == (1, [5, 6, 7, 8], 9)
    (tmp_path / "tail.txt").write_text(text + "\n \n\n")     # blank lines after the last user: no data, no error
    formats.import_dataset("tiny", tmp_path / "tail.txt", "sasrec", tmp_path / "tail" / "s", tmp_path / "tail" / "a",
                           params())
    assert [rows(tmp_path / "tail" / "a", x) for x in io.SPLITS] == out["plain"]


@pytest.mark.parametrize("text, fragment", [
    ("1 2 3 4\n\n2 5 6 7\n", "line 2 is empty"),
    ("1 2\n1 3\n2 4 5 6\n", "line 2: user 1 already had line 1, and not every line is one `user item`"),
    ("1 2 3 4\n2 5 x7 6\n", "line 2: 'x7' is not an id in 1..2147483647"),
    ("1 2 3 4\n2 5 0 6\n", "line 2: '0' is not an id"),
    ("1 2 3 4\n2 5 6.0 7\n", "line 2: '6.0' is not an id"),
    ("1 2 3 4\n2\n", "line 2 has a user but no items"),
    ("user item\n1 2\n1 3\n", "line 1: 'user' is not an id in 1..2147483647. Fix: remove the header line"),
    ("1 2 3 4\n2 item 5\n", "'item' is not an id in 1..2147483647. Fix: map every user and item to an integer id"),
    ("A1 B0001 B0002 B0003\nA2 B0002 B0003 B0004\n",          # string ids, not a header (walk 30)
     "line 1: 'A1' is not an id in 1..2147483647. Fix: map every user and item to an integer id 1..N first"),
    ("0 1 2 3\n1 2 3 4\n", "line 1: '0' is not an id in 1..2147483647. Fix: ids start at 1 (0 is the padding id): "
                           "add 1 to every user and item id"),
    ("1 2 3 4\n2 5 -6 7\n", "'-6' is not an id in 1..2147483647. Fix: every token must be a positive integer id"),
    ("1 10 1500000001\n1 11 1500000002\n2 12 1500000003\n",      # a raw log: was "mixes the two layouts"
     "every line has 3 fields and users repeat (user 1 on lines 1 and 2): a `user item timestamp` log"),
    ("1 2 3 4\n2 5 6 7\n3 1 2\n",
     "every kept user has exactly 3 items, so train (all but the last two) holds one item per user"),
    ("1,2\n1,3\n1,4\n", "line 1 separates ids by ','. Fix: separate ids by spaces or tabs"),
    ("1 2 3 4\n2;5;6;7\n", "line 2 separates ids by ';'"),
    ("1 2 3 4\n2 3 4 5\n1 5 6 7\n", "line 3: user 1 already had line 1"),
    ("", "is empty"),
    ("\n\n", "is empty"),
    ("1 2 3\n2 4 5\n", "no user has 3 or more items (2 read)"),     # was an import of 0 samples
    ("1 2\n1 3\n2 4\n", "no user has 3 or more items (2 read)"),   # the same in Kang & McAuley's layout
])
def test_sasrec_malformed_lines(tmp_path, text, fragment):
    src = tmp_path / "bad.txt"
    src.write_text(text)
    with pytest.raises(DataError) as err:
        formats.import_dataset("bad", src, "sasrec", tmp_path / "s", tmp_path / "a", params())
    assert fragment in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "s").exists()


# --------------------------------------------------------------------------- against SR-GNN's logic

HEADER = "sessionId;userId;itemId;timeframe;eventdate\n"
# items A=101 B=102 C=103 D=104 E=105; hand-computed expectation below
HAND = [(10, 101, 3, "01"), (10, 102, 1, "01"), (10, 103, 2, "01"), (11, 101, 1, "02"), (11, 102, 2, "02"),
        (12, 103, 1, "01"), (13, 101, 1, "02"), (13, 104, 2, "02"), (16, 101, 1, "02"), (17, 102, 1, "01"),
        (17, 101, 2, "01"), (18, 103, 1, "02"), (18, 103, 2, "02"), (14, 102, 1, "03"), (14, 103, 2, "03"),
        (16, 103, 2, "04"), (15, 103, 1, "10"), (15, 101, 2, "10"), (15, 102, 3, "10"),
        *[(19, 105, t, "10") for t in range(1, 6)], (19, 101, 6, "10")]


def hand_csv(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(f"{s};NA;{i};{t};2016-05-{d}\n" for s, i, t, d in HAND))
    return path


def pipeline_export(dataset: str, raw_file: Path, root: Path, p: Params) -> Path:
    """seqpe download --from, preprocess, export: the SR-GNN files seqpe writes for a raw file."""
    download.run(dataset, root / "raw", p.download, from_path=raw_file, progress=False, sample=p.preprocess.sample)
    preprocess.run(dataset, root / "raw", root / "sessions", p)
    formats.export_dataset(root / "sessions", root / "out")
    return root / "out"


def test_reference_on_a_hand_made_file(tmp_path):
    """The oracle itself: session date = its last row in file order (16), stable timeframe sort (10),
    one-click sessions dropped before counting (12), rare items (D) and then short sessions (13)
    dropped, the split day dropped (14), unknown test items dropped (19), ties by first appearance."""
    ref = reference(hand_csv(tmp_path / "train-item-views.csv"), "diginetica")
    assert ref["all_train_seq"] == [[1, 2, 3], [1, 3], [3, 1], [2, 2]]
    assert ref["train_session_ids"] == ["10", "17", "11", "18"] and ref["test_session_ids"] == ["16", "15"]
    assert ref["train"] == ([[1, 2], [1], [1], [3], [2]], [3, 2, 3, 1, 2])
    assert ref["test"] == ([[3], [2, 3], [2]], [2, 1, 3])
    assert ref["n_items"] == 3


def test_seqpe_equals_reference_on_the_hand_made_file(tmp_path):
    raw = hand_csv(tmp_path / "in" / "train-item-views.csv")
    out = pipeline_export("diginetica", raw, tmp_path, params())
    ref = reference(raw, "diginetica")
    for name, key in (("all_train_seq.txt", "all_train_seq"), ("train.txt", "train"), ("test.txt", "test")):
        assert (out / name).read_bytes() == pickle.dumps(ref[key], protocol=3), name


def test_seqpe_equals_reference_on_a_generated_diginetica_file(tmp_path):
    from pipeline.datasets.sample import csv_bytes, make_log
    raw = tmp_path / "in" / "train-item-views.csv"
    raw.parent.mkdir()
    raw.write_bytes(csv_bytes(make_log(1500, 300, 40, 7)))
    out = pipeline_export("diginetica", raw, tmp_path, params())
    ref = reference(raw, "diginetica")
    assert len(ref["all_train_seq"]) > 300 and len(ref["test"][1]) > 300 and ref["n_items"] > 100
    for name, key in (("all_train_seq.txt", "all_train_seq"), ("train.txt", "train"), ("test.txt", "test")):
        assert (out / name).read_bytes() == pickle.dumps(ref[key], protocol=3), name
    # and the export imports back to the same files
    formats.import_dataset("diginetica", out, "srgnn", tmp_path / "s2", tmp_path / "a2", params())
    formats.export_dataset(tmp_path / "s2", tmp_path / "out2")
    assert same_files(out, tmp_path / "out2") == {n: True for n in formats.SRGNN_FILES}


def yoochoose_file(path: Path, seed: int = 3, n_sessions: int = 2500) -> Path:
    """A small yoochoose-clicks.dat of our own (no header, `id,ISO time,item,category`, UTC): popular
    and rare items, one-click sessions, sessions over midnight, and some whose last row comes later
    in the file (their date is that row's)."""
    rng = random.Random(seed)
    rows, late = [], []
    for sid in range(1, n_sessions + 1):
        day = min(int(12 * rng.random() ** 0.5), 11)      # traffic grows: the last day is busy
        t = (day * 86_400 + rng.randrange(86_000)) * 1000 + rng.randrange(1000)
        clicks = []
        for _ in range(min(1 + int(rng.expovariate(0.3)), 30)):
            item = 214_500_000 + int(1000 * rng.random() ** 3)  # a long tail: many items under 5 clicks
            clicks.append(f"{sid},{_iso(t)},{item},{rng.choice(['0', 'S', '3'])}")
            t += rng.randrange(1, 600_000)
        if len(clicks) >= 3 and rng.random() < 0.05:
            late.append(clicks.pop())                     # this session's last row comes later
        rows += clicks
        if late and rng.random() < 0.2:
            rows.append(late.pop(0))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{r}\n" for r in rows + late))
    return path


def _iso(ms: int) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(1_396_828_800 + ms // 1000))  # from 2014-04-07
    return f"{stamp}.{ms % 1000:03d}Z"


@pytest.mark.parametrize("dataset, key", [("yoochoose_1_64", "1_64"), ("yoochoose_1_4", "1_4")])
def test_seqpe_equals_reference_on_a_generated_yoochoose_file(tmp_path, dataset, key):
    """On this file both fractions cut inside a session, where SR-GNN's all_train_seq.txt keeps that
    session whole and its train.txt only the shortest prefixes."""
    raw = yoochoose_file(tmp_path / "in" / "yoochoose-clicks.dat")
    out = pipeline_export(dataset, raw, tmp_path, params())
    ref = reference(raw, dataset="yoochoose")
    (prefixes, _), seqs = ref[f"train_{key}"], ref[f"all_train_seq_{key}"]
    assert len(seqs) > 5 and len(ref["test"][1]) > 100
    assert prefixes[0] != seqs[0][:-1]                    # the cut falls inside the first session
    for name, k in (("all_train_seq.txt", f"all_train_seq_{key}"), ("train.txt", f"train_{key}"),
                    ("test.txt", "test")):
        assert (out / name).read_bytes() == pickle.dumps(ref[k], protocol=3), name


# --------------------------------------------------------------------------- CLI

def test_cli_bad_pickle_is_one_line_exit_1(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "all_train_seq.txt").write_bytes(b"cos\nsystem\n(S'echo hi'\ntR.")
    dump(src / "test.txt", TEST)
    env = dict(os.environ, COLUMNS="300")
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "import", "diginetica", str(src),
                           "--sessions", str(tmp_path / "s"), "--samples", str(tmp_path / "a")],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr and "hi" not in proc.stdout
    assert "all_train_seq.txt holds a reference to the global os.system (only lists/tuples/ints are " \
           "accepted). Fix:" in lines[0]
    assert not (tmp_path / "s").exists()


def test_cli_ids_near_2_31_are_one_line_exit_1(tmp_path):
    """`1 1 2 2147483646` aborted in the Rust allocator (exit 134), 2147483647 was a traceback."""
    for big in (2**31 - 2, 2**31 - 1):
        (tmp_path / "huge.txt").write_text(f"1 1 2 {big}\n2 1 2 3\n")
        proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "import", "huge", str(tmp_path / "huge.txt"),
                               "--sessions", str(tmp_path / "S"), "--samples", str(tmp_path / "T")],
                              cwd=ROOT, env=dict(os.environ, COLUMNS="300"), capture_output=True, text=True)
        assert proc.returncode == 1, (proc.returncode, proc.stderr[-500:])
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and f"the largest item id is {big:,} but only 4 distinct ids occur" in lines[0]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["huge.txt"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_fifo_or_a_device_is_refused_before_it_is_read(tmp_path):
    """`seqpe import NAME FIFO` hung forever: format detection read it before checking it is a file."""
    os.mkfifo(tmp_path / "fifo")
    try:
        proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "import", "x", str(tmp_path / "fifo"),
                               "--sessions", str(tmp_path / "s"), "--samples", str(tmp_path / "a")],
                              cwd=ROOT, env=dict(os.environ, COLUMNS="300"), capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("seqpe import waited on the FIFO")
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "fifo is a named pipe (FIFO), not a file or a folder. Fix: pass the SR-GNN folder" in lines[0]
    for fmt, fragment in (("auto", "fifo is a named pipe (FIFO), not a file or a folder"),
                          ("sasrec", "fifo is a named pipe (FIFO), not a file")):
        with pytest.raises(DataError, match=re.escape(fragment)):
            formats.import_dataset("x", tmp_path / "fifo", fmt, tmp_path / "s", tmp_path / "a", params())
    if Path("/dev/null").exists():
        with pytest.raises(DataError, match="/dev/null is a character device, not a file or a folder"):
            formats.import_dataset("x", "/dev/null", "auto", tmp_path / "s", tmp_path / "a", params())
    for name, make in (("test.txt", os.mkfifo), ("train.txt", os.mkfifo), ("test.txt", os.mkdir)):
        src = tmp_path / f"srgnn_{name}_{make.__name__}"                # a pipe (or a folder) in an SR-GNN folder
        dump(src / "all_train_seq.txt", SEQS)
        if name == "train.txt":
            dump(src / "test.txt", TEST)
        make(src / name)
        what = "a folder" if make is os.mkdir else "a named pipe (FIFO)"
        with pytest.raises(DataError, match=re.escape(f"{name} is {what}, not a file. Fix: put SR-GNN's {name}")):
            formats.import_dataset("x", src, "auto", tmp_path / "s", tmp_path / "a", params())
    assert not (tmp_path / "s").exists() and not (tmp_path / "a").exists()


@pytest.mark.parametrize("fraction, n_sessions, fix", [(0.0, 10, 0.1), (0.05, 10, 0.1), (0.2, 3, 0.34)])
def test_an_srgnn_import_without_valid_sessions_is_refused(tmp_path, fraction, n_sessions, fix):
    """`import --set preprocess.valid_fraction=0` was accepted, and `seqpe train` then said to re-run `seqpe
    preprocess`: the train error names the wrong command for an import, so the import refuses it."""
    dump(tmp_path / "in" / "all_train_seq.txt", SEQS[:n_sessions])
    dump(tmp_path / "in" / "test.txt", TEST)
    with pytest.raises(ParamsError) as err:
        formats.import_dataset("tiny", tmp_path / "in", "srgnn", tmp_path / "s", tmp_path / "a",
                               params(preprocess={"valid_fraction": fraction}))
    assert str(err.value) == (f"preprocess.valid_fraction={fraction} carves no valid session out of the {n_sessions} "
                              "sessions of all_train_seq.txt, and `seqpe train` picks its best epoch on valid. Fix: "
                              f"import with --set preprocess.valid_fraction={fix} or more")
    assert not (tmp_path / "s").exists() and not (tmp_path / "a").exists()
    summary = formats.import_dataset("tiny", tmp_path / "in", "srgnn", tmp_path / "s", tmp_path / "a",
                                     params(preprocess={"valid_fraction": fix}))
    assert summary["valid sessions"] == 1
    (tmp_path / "tiny.txt").write_text("1 5 6 7 8\n")     # leave-one-out: valid is each user's [:-1], whatever it is
    summary = formats.import_dataset("tiny", tmp_path / "tiny.txt", "sasrec", tmp_path / "s2", tmp_path / "a2",
                                     params(preprocess={"valid_fraction": 0.0}))
    assert summary["valid samples"] == 1


def test_an_srgnn_import_of_one_train_session_is_refused(tmp_path):
    dump(tmp_path / "in" / "all_train_seq.txt", SEQS[:1])
    dump(tmp_path / "in" / "test.txt", TEST)
    with pytest.raises(DataError, match="all_train_seq.txt holds 1 session: none is left to carve a valid session"):
        formats.import_dataset("tiny", tmp_path / "in", "srgnn", tmp_path / "s", tmp_path / "a", params())
    assert not (tmp_path / "s").exists()
