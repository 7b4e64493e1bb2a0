"""CARCA's preprocessed Amazon files (pipeline/datasets/carca*.py) through download, preprocess, augment,
the side-information samples (pipeline/side.py, pipeline/batches.py) and a CARCA run on them."""
from __future__ import annotations

import dataclasses
import json
import pickle
import pickletools
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from pipeline import augment, download, formats, preprocess
from pipeline import train as stage
from pipeline.batches import batches, load_samples
from pipeline.datasets import get
from pipeline.datasets.carca import DATASETS, DRIVE
from pipeline.datasets.carca_files import _dump, generate, read_context, read_features, time_context, zipped
from pipeline.errors import DataError, ParamsError
from pipeline.params import Params, from_dict
from pipeline.report import aggregate, protocol_label, to_markdown

BEAUTY = DATASETS["carca_beauty"][0]


def globals_of(data: bytes) -> set[str]:
    """The module.name of every GLOBAL opcode of a pickle."""
    return {arg.replace(" ", ".") for op, arg, _ in pickletools.genops(data) if op.name == "GLOBAL"}


def write(folder: Path, lines: str, features: np.ndarray, context: dict, files=BEAUTY) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / files.interactions).write_text(lines)
    (folder / files.features).write_bytes(_dump(features))
    (folder / files.context).write_bytes(_dump(context))
    return folder


def pipeline(tmp_path: Path, dataset: str, source: Path, params: Params = Params()) -> dict[str, Path]:
    raw, sessions, samples = tmp_path / "raw", tmp_path / "sessions", tmp_path / "samples"
    download.run(dataset, raw, params.download, from_path=source, progress=False)
    preprocess.run(dataset, raw, sessions, params)
    augment.run(dataset, sessions, samples, params)
    return {"raw": raw, "sessions": sessions, "samples": samples}


# --------------------------------------------------------------------------- the format

def test_the_four_datasets_are_registered_as_carcas_leave_one_out():
    for name, files in (("carca_beauty", ("Beauty.txt", "Beauty_feat_cat.dat", "CXTDictSasRec_Beauty.dat")),
                        ("carca_games", ("Video_Games.txt", "Video_Games_feat.dat", "CXTDictSasRec_Games.dat")),
                        ("carca_men", ("Men.txt", "Men_imgs.dat", "CXTDictSasRec_Men.dat")),
                        ("carca_fashion", ("Fashion.txt", "Fashion_imgs.dat", "CXTDictSasRec_Fashion.dat"))):
        spec = get(name)
        assert spec.protocol == "leave_one_out" and spec.build is not None and spec.source.files == files
        assert DRIVE in spec.source.manual and spec.source.homepage == "https://github.com/ahmedrashed-ml/CARCA"


def test_generated_files_have_carcas_exact_format(tmp_path):
    files = generate(tmp_path, BEAUTY, users=30, items=12, attributes=4, seed=1)
    lines = files["Beauty.txt"].read_text().splitlines()
    assert all(len(line.split(" ")) == 2 for line in lines) and lines[0].split(" ")[0] == "1"
    feat, ctx = files["Beauty_feat_cat.dat"].read_bytes(), files["CXTDictSasRec_Beauty.dat"].read_bytes()
    assert feat[:2] == ctx[:2] == b"\x80\x03"                             # pickle protocol 3 (Python 3.7)
    assert globals_of(feat) == {"numpy.core.multiarray._reconstruct", "numpy.ndarray", "numpy.dtype"}
    assert globals_of(ctx) == set()                                       # plain dict of tuples and floats
    array, table = pickle.loads(feat), pickle.loads(ctx)
    assert array.shape == (12, 4) and array.dtype == np.float64
    pairs = [tuple(map(int, line.split(" "))) for line in lines]
    assert sorted(table) == sorted(pairs) and all(len(v) == 6 and type(v[0]) is float for v in table.values())


def test_time_context_is_carcas_six_features():
    # 2010-01-01 (a Friday, ISO week 53 of 2009) and 2012-02-29 (a Wednesday, day 60, ISO week 9)
    got = time_context(np.array([1_262_304_000, 1_330_473_600]))
    assert np.allclose(got[0], [0.0, 1 / 12, 1 / 31, 4 / 7, 1 / 365, 53 / 4])
    assert np.allclose(got[1], [1.0, 2 / 12, 29 / 31, 2 / 7, 60 / 365, 9 / 4])


def test_pickles_that_would_run_code_or_hold_other_objects_are_refused(tmp_path):
    class Boom:
        def __reduce__(self):
            import os
            return os.system, ("echo pwned > " + str(tmp_path / "pwned"),)
    (tmp_path / "evil.dat").write_bytes(pickle.dumps(Boom(), protocol=3))
    with pytest.raises(DataError, match=r"global (posix|os)\.system"):
        read_features(tmp_path / "evil.dat", 3)
    assert not (tmp_path / "pwned").exists()
    (tmp_path / "obj.dat").write_bytes(_dump(np.array([[1, "a"]], dtype=object)))
    with pytest.raises(DataError, match="holds an array of object of shape"):
        read_features(tmp_path / "obj.dat", 1)
    (tmp_path / "short.dat").write_bytes(_dump(np.zeros((2, 3))))
    with pytest.raises(DataError, match="2 rows x 3 attributes, but the interactions name items 1..5"):
        read_features(tmp_path / "short.dat", 5)
    (tmp_path / "keys.dat").write_bytes(_dump({(1, 2, 3): [0.5]}))
    with pytest.raises(DataError, match=r"key \(1, 2, 3\)"):
        read_context(tmp_path / "keys.dat")
    (tmp_path / "ragged.dat").write_bytes(_dump({(1, 2): [0.5], (1, 3): [0.5, 1.0]}))
    with pytest.raises(DataError, match="unequal lengths"):
        read_context(tmp_path / "ragged.dat")
    # walk 43g #2: _reconstruct(ndarray, shape, dtype) with no BUILD was np.empty(shape): heap bytes of any size
    for shape in ((3, 8), (3, 5_000_000)):
        (tmp_path / "empty.dat").write_bytes(b"cnumpy.core.multiarray\n_reconstruct\n(cnumpy\nndarray\n(I%d\nI%d\n"
                                             b"tS'f8'\ntR." % shape)
        with pytest.raises(DataError, match=r"holds an array of float64 of shape \(0,\), not a numeric"):
            read_features(tmp_path / "empty.dat", 3)
    (tmp_path / "call.dat").write_bytes(b"cnumpy\nndarray\n(I3\nI8\ntR.")       # ndarray((3, 8)) called
    with pytest.raises(DataError, match="not a readable CARCA pickle"):
        read_features(tmp_path / "call.dat", 3)
    shared = [0.5] * 400                               # walk 43g #3: one value list behind every key
    (tmp_path / "alias.dat").write_bytes(pickle.dumps({(u, 1): shared for u in range(1, 2001)}, protocol=3))
    with pytest.raises(DataError, match="holds 800,000 context values in .* bytes: its keys share value lists"):
        read_context(tmp_path / "alias.dat")
    assert read_features(tmp_path / "short.dat", 2).shape == (2, 3)      # a real array still reads


def test_arrays_and_context_pickled_with_every_protocol_read_the_same(tmp_path):
    """Python 3.8+ pickles with protocol 4/5 by default (5 puts numpy's bytes behind `_frombuffer`) and Python 2
    with 2 (bytes as `_codecs.encode(text, "latin1")`): a re-saved CARCA file was refused before (43g)."""
    rng = np.random.default_rng(3)
    arrays = [rng.random((4, 3)), rng.integers(0, 9, (4, 5)).astype(np.uint8), np.asfortranarray(rng.random((4, 2))),
              (rng.random((4, 3)) > 0.5), rng.random((4, 6)).astype(np.float32)[:, ::2]]
    for proto in (2, 3, 4, 5):
        for k, a in enumerate(arrays):
            (tmp_path / "f.dat").write_bytes(pickle.dumps(a, protocol=proto))
            got = read_features(tmp_path / "f.dat", 4)
            assert got.dtype == np.float32 and np.array_equal(got, a.astype(np.float32)), (proto, k)
        (tmp_path / "c.dat").write_bytes(pickle.dumps(CTX, protocol=proto))
        assert read_context(tmp_path / "c.dat").height == len(CTX)
    good = pickle.dumps(np.zeros((4, 3)), protocol=5)
    for bad, why in ((good.replace(b"\x8c\x02f8", b"\x8c\x02f4"), "in a buffer of 96 bytes"),   # shape x 4 != 96
                     (good.replace(b"\x8c\x02f8", b"\x8c\x02O8"), "not a numeric array's")):
        (tmp_path / "bad.dat").write_bytes(bad)
        with pytest.raises(DataError, match=why):
            read_features(tmp_path / "bad.dat", 4)
    import _codecs                                     # walk 44j #1: one buffer in the memo, many calls to it
    frombuffer, shared = np.zeros(1).__reduce_ex__(5)[0], bytes(1000)

    class Again:
        def __init__(self, call):
            self.call = call

        def __reduce__(self):
            return self.call
    for call in ((frombuffer, (shared, np.dtype("u1"), (1000,), "C")), (_codecs.encode, ("x" * 1000, "latin1"))):
        (tmp_path / "again.dat").write_bytes(pickle.dumps([Again(call) for _ in range(1000)], protocol=5))
        assert (tmp_path / "again.dat").stat().st_size < 20_000
        with pytest.raises(DataError, match="more array bytes than the file holds"):
            read_features(tmp_path / "again.dat", 4)
    # 44k #1: protocols 2-4 fill arrays by BUILD from one memoised bytes object: 100 keys of 1 MB each
    state = (1, (1000, 125), np.dtype("f8"), False, bytes(1_000_000))
    rebuild = np.zeros((2, 2)).__reduce__()[0]

    class Built:
        def __reduce__(self):
            return rebuild, (np.ndarray, (0,), b"b"), state
    blob = pickle.dumps({(u, 1): [Built()] for u in range(1, 101)}, protocol=4)
    assert len(blob) < 1_100_000
    (tmp_path / "built.dat").write_bytes(blob)
    with pytest.raises(DataError, match="more array bytes than the file holds"):
        read_context(tmp_path / "built.dat")
    (tmp_path / "enc.dat").write_bytes(b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00aX\x05\x00\x00\x00rot13\x86R.")
    with pytest.raises(DataError, match="_codecs.encode with 'rot13'"):
        read_features(tmp_path / "enc.dat", 4)


# --------------------------------------------------------------------------- CARCA's split, exactly

LINES = "1 3\n1 1\n1 4\n1 2\n2 5\n2 1\n3 2\n4 3\n4 4\n4 5\n"   # user 1: 4 items, 2: 2, 3: 1, 4: 3
CTX = {(u, i): [float(u), float(i)] for u, i in ((1, 3), (1, 1), (1, 4), (1, 2), (2, 5), (2, 1), (3, 2), (4, 3),
                                                  (4, 4), (4, 5))}
FEATURES = np.arange(10, dtype=np.float64).reshape(5, 2)               # item k -> row k - 1


def test_split_ids_context_and_attributes_are_carcas(tmp_path):
    out = pipeline(tmp_path, "carca_beauty", write(tmp_path / "files", LINES, FEATURES, CTX))
    man = json.loads((out["sessions"] / "manifest.json").read_text())
    assert man["n_items"] == 5 and man["protocol"] == "leave_one_out"
    assert man["side"] == {"item_features": {"path": "item_features.parquet", "width": 2},
                           "context": {"names": ["context_0", "context_1"], "width": 2}}
    read = lambda split: pl.read_parquet(out["sessions"] / split).sort("session_id")   # noqa: E731
    assert read("train").select("session_id", "items").rows() == [(1, [3, 1]), (2, [5, 1]), (3, [2]), (4, [3])]
    assert read("valid").select("session_id", "items").rows() == [(1, [3, 1, 4]), (4, [3, 4])]
    assert read("test").select("session_id", "items").rows() == [(1, [3, 1, 4, 2]), (4, [3, 4, 5])]
    test_ctx = read("test").get_column("context").to_list()
    assert test_ctx[0] == [[1.0, 3.0], [1.0, 1.0], [1.0, 4.0], [1.0, 2.0]]
    feats = pl.read_parquet(out["samples"] / "item_features.parquet")
    assert feats.get_column("item_id").to_list() == [1, 2, 3, 4, 5]
    assert np.array_equal(feats.get_column("features").to_numpy(), FEATURES.astype(np.float32))
    # samples: user 2's two items train one pair, user 3 none; valid / test targets are items[-2] / items[-1]
    train = pl.read_parquet(out["samples"] / "train").sort("session_id")
    assert train.select("session_id", "items").rows() == [(1, [3, 1]), (2, [5, 1])]
    test = pl.read_parquet(out["samples"] / "test").sort("session_id")
    assert test.select("prefix", "target").rows() == [([3, 1, 4], 2), ([3, 4], 5)]
    assert test.get_column("target_context").to_list() == [[1.0, 2.0], [4.0, 5.0]]
    assert test.get_column("prefix_context").to_list()[1] == [[4.0, 3.0], [4.0, 4.0]]


def test_sasrec_export_writes_every_user_the_short_ones_too(tmp_path):
    """`seqpe export carca_beauty OUT --format sasrec` wrote the test rows only: 55 users of 60, without the
    users with 1 or 2 interactions that CARCA (and SASRec's data_partition) keeps for training. The file
    now holds every user's whole sequence: CARCA's Beauty.txt, one line per user."""
    files = generate(tmp_path / "files", BEAUTY, users=60, items=20, attributes=4, seed=0)
    out = pipeline(tmp_path, "carca_beauty", tmp_path / "files")
    summary = formats.export_dataset(out["sessions"], tmp_path / "out", "sasrec", "carca_beauty")
    per_user: dict[int, list[str]] = {}
    for line in files["Beauty.txt"].read_text().splitlines():
        user, item = line.split(" ")
        per_user.setdefault(int(user), []).append(item)
    short = sum(len(items) < 3 for items in per_user.values())
    assert (summary["users"], summary["of which train only (no valid / test)"], short) == (60, 5, 5)
    assert (tmp_path / "out" / "carca_beauty.txt").read_text() == \
        "".join(f"{user} {' '.join(items)}\n" for user, items in sorted(per_user.items()))
    # an import's own users: no train-only ones, no such line in the summary, the same bytes back
    (tmp_path / "s3rec.txt").write_text("3 4 6 8 2\n1 5 6 7 8 9\n")
    formats.import_dataset("tiny", tmp_path / "s3rec.txt", "sasrec", tmp_path / "s", tmp_path / "a", Params())
    summary = formats.export_dataset(tmp_path / "s", tmp_path / "out2", "sasrec")
    assert (tmp_path / "out2" / "tiny.txt").read_text() == "3 4 6 8 2\n1 5 6 7 8 9\n"
    assert summary["users"] == 2 and not any(k.startswith("of which") for k in summary)


def test_a_context_file_of_another_dataset_is_refused(tmp_path):
    bad = {k: v for k, v in CTX.items() if k != (4, 5)}
    files = write(tmp_path / "files", LINES, FEATURES, bad)
    with pytest.raises(DataError, match=r"no context for user 4, item 5 \(Beauty.txt line 10\)"):
        pipeline(tmp_path / "out", "carca_beauty", files)
    assert not (tmp_path / "out" / "sessions").exists()


def test_from_the_zip_or_the_folder_the_same_bytes_and_byte_identical_reruns(tmp_path):
    files = generate(tmp_path / "folder", DATASETS["carca_men"][0], users=40, items=15, attributes=6, seed=2)
    a = pipeline(tmp_path / "a", "carca_men", zipped(files, tmp_path / "Data-20220404.zip"))
    b = pipeline(tmp_path / "b", "carca_men", tmp_path / "folder")
    for stage_ in ("sessions", "samples"):
        ma, mb = (json.loads((x[stage_] / "manifest.json").read_text()) for x in (a, b))
        assert ma["shards"] == mb["shards"] and ma["side"] == mb["side"]
    assert {e["path"] for e in ma["shards"]} >= {"item_features.parquet", "train/part-00000.parquet"}


# --------------------------------------------------------------------------- samples and batches with side info

@pytest.fixture(scope="module")
def carca_samples(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("carca")
    files = generate(root / "files", DATASETS["carca_games"][0], users=80, items=25, attributes=5, seed=4)
    return pipeline(root, "carca_games", root / "files")["samples"]


@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_context_samples_keep_the_ids_of_the_plain_ones(carca_samples, split):
    plain, side = load_samples(carca_samples, split, 5), load_samples(carca_samples, split, 5, context=6)
    assert plain.context is None and side.context.shape == (len(plain), 5, 6)
    for name in ("seqs", "targets", "lengths"):
        assert np.array_equal(getattr(plain, name), getattr(side, name))
    assert ((side.context != 0).any(-1) <= (side.seqs != 0)).all()        # padding has no context
    table = {(u, i): v for u, i, v in read_context(carca_samples.parent / "raw" / "CXTDictSasRec_Games.dat").rows()}
    rows = pl.read_parquet(carca_samples / split)
    if split != "train":                                                  # one row per user, in file order
        for r in (0, len(rows) - 1):
            u, target = rows["session_id"][r], int(side.targets[r])
            assert np.allclose(side.target_context[r], table[(u, target)])
            assert np.allclose(side.context[r, -1], table[(u, int(side.seqs[r, -1]))])


def test_batches_carry_the_context_trimmed_like_the_ids(carca_samples):
    data = load_samples(carca_samples, "test", 8, context=6)
    for seqs, targets, (ctx, tctx), idx in batches(data, 16, trim=True, by_length=True, with_index=True,
                                                   context=True):
        assert ctx.shape == (*seqs.shape, 6) and tctx.shape == (len(targets), 6)
        assert torch.equal(ctx, torch.from_numpy(data.context[idx.numpy()])[:, 8 - seqs.size(1):])
    plain = next(iter(batches(data, 16)))
    assert len(plain) == 2                                                # not asked for: ids only
    taken = data.take(np.array([3, 1]))
    assert np.array_equal(taken.target_context, data.target_context[[3, 1]])


def _params(model: str, encoding: str, **evaluate) -> Params:
    return from_dict(Params, {
        "datasets": [], "evaluate": {"ks": [1, 5, 10], "batch_size": 64, **evaluate},
        "train": dict(epochs=2, batch_size=32, lr=0.01, dim=16, layers=1, heads=2, dropout=0.0, max_len=8,
                      patience=0, device="cpu"),
        "study": {"seeds": [1], "next_item": {"models": [model], "encodings": [encoding]}, "ctr": {}},
        "models": {model: {}}, "encodings": {encoding: {}}})


def test_only_a_side_information_model_is_handed_it(carca_samples):
    from models import MODELS
    from pipeline.train.tasks import NextItemTask
    manifest = json.loads((carca_samples / "manifest.json").read_text())
    p = _params("carca", "abs")
    p = dataclasses.replace(p, train=dataclasses.replace(p.train, model="carca", encoding="abs"))
    carca = NextItemTask(carca_samples, manifest, p.train, p, MODELS["carca"], torch.device("cpu"))
    sasrec = NextItemTask(carca_samples, manifest, p.train, p, MODELS["sasrec"], torch.device("cpu"))
    assert sasrec.side is None and all(sasrec.data[s].context is None for s in sasrec.data)
    assert carca.side.context_width == 6 and all(carca.data[s].context is not None for s in carca.data)
    feats = carca.side.item_features
    assert feats.shape == (26, 5) and not feats[0].any()
    net = carca.build(p)
    assert torch.equal(net.attributes, torch.from_numpy(feats))
    seqs, targets, side = next(iter(carca.batches(torch.Generator().manual_seed(0))))
    assert torch.isfinite(carca.loss(net, (seqs, targets, side), torch.Generator())[0])


def test_carca_trains_on_the_generated_files_and_records_the_protocol(carca_samples, tmp_path):
    full = stage.run("carca_games", carca_samples, tmp_path / "runs", _params("carca", "abs"), progress=False)
    from pipeline.recommend import load_run          # recommend cannot hand it new sessions' context: one line
    with pytest.raises(DataError, match=r"carca trained with item attributes or interaction context \(psi_a.bias, "
                                        r"psi_a.weight\), which `seqpe recommend` cannot supply"):
        load_run(full[0]["run_dir"])
    sampled = stage.run("carca_games", carca_samples, tmp_path / "runs",
                        _params("carca", "abs", candidates=10, mask_history=True), progress=False, tag="sampled")
    records = [json.loads(Path(r["run_dir"], "run.json").read_text()) for r in (*full, *sampled)]
    assert [r["evaluate"]["candidates"] for r in records] == [0, 10]
    # its own one-negative BCE reads none of the trainer's loss keys: null, and refused by hand (walk 32a: a
    # --set train.loss=sampled run was recorded as applied, scored byte-identically and retrained a finished seed)
    assert all(r["train"][k] is None for r in records for k in ("loss", "ce_impl", "negatives"))
    with pytest.raises(ParamsError, match=r"'carca' does not read train.loss"):
        stage.run("carca_games", carca_samples, tmp_path / "runs", _params("carca", "abs"), progress=False,
                  overrides=["train.loss=sampled"])
    assert all(0.0 <= r["test"]["ndcg@10"] <= 1.0 for r in records)
    assert records[1]["test"]["hr@10"] > records[0]["test"]["hr@10"]     # 11 candidates vs 25 items
    assert [protocol_label(r) for r in records] == [
        "leave_one_out", "leave_one_out, 10 sampled candidates (uniform, input items excluded)"]
    table = to_markdown(aggregate(records))
    assert "| leave_one_out, 10 sampled candidates (uniform, input items excluded) | carca | abs | sampled |" in table


def test_a_memory_budget_carca_cannot_use_is_said(carca_samples, tmp_path, capfd):
    """CARCA's samples hold each interaction's context and stay in memory: train.memory_budget was ignored
    without a word (walk 33a)."""
    from models import MODELS
    from pipeline.train import tasks
    p = _params("carca", "abs")
    budget = dataclasses.replace(p, train=dataclasses.replace(p.train, memory_budget=0.001))
    manifest = json.loads((carca_samples / "manifest.json").read_text())
    capfd.readouterr()
    tasks.make_task("next_item", carca_samples, manifest, budget.train, budget, MODELS["carca"], torch.device("cpu"))
    assert "note: train.memory_budget is 0.001 MB, and 'carca' reads each interaction's context" in \
        capfd.readouterr().err
