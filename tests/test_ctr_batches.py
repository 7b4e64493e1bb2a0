"""CTR samples -> arrays and CTRBatch mini-batches (pipeline.ctr_batches) on a hand-made samples folder."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from models.ctr.base import CTRBatch, CTREmbedding, CTRSchema
from pipeline import io
from pipeline.ctr_batches import CTRSamples, ctr_batches, ctr_schema, load_ctr
from pipeline.errors import DataError

CTR = {"label": "label", "group": "user", "fields": ["item", "cate"], "target": {"item": "item", "cate": "cate"},
       "history": {"item": "hist_items", "cate": "hist_cates"}, "extra": {"neg": "hist_neg"},
       "features": {"user": "feature_user"},
       "vocab": {"item": {"rows": 8}, "cate": {"rows": 5}, "user": {"rows": 3}}}
SCHEMA = {"label": pl.Int8, "user": pl.Int64, "item": pl.Int32, "cate": pl.Int32, "hist_items": pl.List(pl.Int32),
          "hist_cates": pl.List(pl.Int32), "hist_neg": pl.List(pl.Int32), "feature_user": pl.Int32}
ROWS = [(1, 5, 2, 3, [4, 5, 6], [2, 2, 3], [7], 2),
        (0, 6, 3, 2, [], [], [4, 5, 6, 7], 1),
        (1, 5, 4, 4, [2], [3], [], 2)]


def samples_folder(root: Path, rows=ROWS, ctr=CTR, protocol: str = "ctr") -> Path:
    manifest = {"stage": "augment", "kind": "samples", "dataset": "x", "protocol": protocol, "shards": []}
    if ctr is not None:
        manifest["ctr"] = ctr
    with io.atomic_dir(root) as tmp:
        for split in io.SPLITS:           # two shards per split: the loader fills one array across them
            manifest["shards"] += io.write_split(tmp, split, pl.DataFrame(rows, schema=SCHEMA, orient="row"), 2)
        io.write_json(tmp / io.MANIFEST, manifest)
    return root


def test_load_exact_arrays_left_padded_most_recent_last(tmp_path):
    s = load_ctr(samples_folder(tmp_path / "s"), "train", max_len=2)
    assert s.label.tolist() == [1, 0, 1] and s.group.tolist() == [5, 6, 5] and len(s) == 3
    assert s.target.tolist() == [[2, 3], [3, 2], [4, 4]]
    assert s.history.tolist() == [[[5, 2], [6, 3]],          # [4, 5, 6] cut to the most recent 2
                                  [[0, 0], [0, 0]],
                                  [[0, 0], [2, 3]]]          # one behaviour, right-aligned
    assert s.extra["neg"].tolist() == [[0, 7], [6, 7], [0, 0]]
    assert s.features.tolist() == [[2], [1], [2]]
    assert {k: v.dtype for k, v in vars(s).items() if isinstance(v, np.ndarray)} == {
        "label": np.int32, "group": np.int64, "target": np.int32, "history": np.int32, "features": np.int32}
    wide = load_ctr(tmp_path / "s", "test", max_len=4)
    assert wide.history[0, :, 0].tolist() == [0, 4, 5, 6] and wide.extra["neg"][1].tolist() == [4, 5, 6, 7]


def test_schema_and_batches_in_order(tmp_path):
    root = samples_folder(tmp_path / "s")
    schema = ctr_schema(io.read_json(root / io.MANIFEST), max_len=2)
    assert schema == CTRSchema(fields=("item", "cate"), vocab={"item": 8, "cate": 5, "user": 3}, extra=("neg",),
                               features=("user",), max_len=2)
    batches = list(ctr_batches(load_ctr(root, "valid", 2), batch_size=2))
    assert [len(b) for b in batches] == [2, 1] and all(isinstance(b, CTRBatch) for b in batches)
    b = batches[0]
    assert b.label.dtype == torch.float32 and b.label.tolist() == [1.0, 0.0]
    assert b.history.dtype == torch.long and b.history.shape == (2, 2, 2) and b.group.tolist() == [5, 6]
    assert b.mask.tolist() == [[True, True], [False, False]] and b.extra["neg"].tolist() == [[0, 7], [6, 7]]
    emb = CTREmbedding(schema, field_dim=4)          # the shared embedding accepts the batch as it is
    assert emb.target(b).shape == (2, 8) and emb.history(b).shape == (2, 2, 8) and emb.side(b).shape == (2, 8)


def test_shuffle_is_seeded_by_the_callers_generator():
    n = 50
    s = CTRSamples(label=np.arange(n, dtype=np.int32) % 2, group=np.arange(n, dtype=np.int64),
                   target=np.arange(n, dtype=np.int32)[:, None], history=np.zeros((n, 3, 1), np.int32),
                   features=np.zeros((n, 0), np.int32))
    order = lambda seed: torch.cat([b.group for b in ctr_batches(s, 8, shuffle=True,  # noqa: E731
                                                                 generator=torch.Generator().manual_seed(seed))])
    assert order(1).tolist() == order(1).tolist() != order(2).tolist()
    assert sorted(order(1).tolist()) == list(range(n))
    first = next(ctr_batches(s, 8))
    assert first.group.tolist() == list(range(8)) and first.features is None and first.extra == {}


@pytest.mark.parametrize("make, expect", [
    (lambda root: samples_folder(root, protocol="srgnn", ctr=None), "not CTR samples (protocol 'srgnn'"),
    (lambda root: samples_folder(root, ctr=None), "not CTR samples (no ctr section"),
    (lambda root: root.mkdir(), "it is not a samples folder"),
    (lambda root: samples_folder(root, ctr={**CTR, "extra": {"neg": "nope"}}), "no column(s) nope"),
    (lambda root: samples_folder(root, rows=[(1, 5, 2, 3, [4, 5], [2], [], 2)]), "differ in length"),
])
def test_errors_are_one_line_with_a_fix(tmp_path, make, expect):
    make(tmp_path / "s")
    with pytest.raises(DataError) as err:
        load_ctr(tmp_path / "s", "train", 2)
    assert expect in str(err.value) and "Fix:" in str(err.value) and "\n" not in str(err.value)


def test_schema_of_a_manifest_without_ctr():
    with pytest.raises(DataError, match="has no ctr section"):
        ctr_schema({"dataset": "diginetica", "protocol": "srgnn"}, 50)


def test_row_chunks_do_not_change_the_arrays(tmp_path, monkeypatch):
    import pipeline.ctr_batches as cb
    root = samples_folder(tmp_path / "s")
    whole = load_ctr(root, "train", 3)
    monkeypatch.setattr(cb, "CHUNK_ROWS", 1)
    chunked = load_ctr(root, "train", 3)
    for name in ("label", "group", "target", "history", "features"):
        assert np.array_equal(getattr(whole, name), getattr(chunked, name))
    assert np.array_equal(whole.extra["neg"], chunked.extra["neg"])
