"""evaluate.candidates (pipeline/train/candidates.py): the sampled-candidate protocol of CARCA / 004,
explicit and never the default; full ranking when every item is a candidate; the same draw every time."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from models.base import Recommender
from pipeline import train as stage
from pipeline.errors import ParamsError
from pipeline.params import EvaluateParams, Params, from_dict
from pipeline.train.candidates import sample_candidates
from test_train import untrained_sasrec_and_test_split

CPU = torch.device("cpu")


def test_full_ranking_is_the_default():
    assert EvaluateParams().candidates == 0 and Params().evaluate.candidates == 0
    assert EvaluateParams().candidate_sampling == "uniform"


@pytest.mark.parametrize("bad, match", [({"candidates": -1}, "evaluate.candidates' must be >= 0"),
                                        ({"candidate_sampling": "zipf"}, "evaluate.candidate_sampling")])
def test_bad_settings_fail_naming_the_key(bad, match):
    with pytest.raises(ParamsError, match=match):
        from_dict(Params, {"evaluate": bad})


@pytest.mark.parametrize("mask_history", [False, True])
def test_every_item_a_candidate_equals_full_ranking(tmp_path, mask_history):
    net, data = untrained_sasrec_and_test_split(tmp_path)             # 30 items, repeat-free rows
    full = stage.score(net, data, "test", [1, 5, 10], 16, CPU, mask_history=mask_history, per_sample=True)
    for n in (29, 40):                                                # n_items - 1 and more
        cands = sample_candidates(data.seqs, data.targets, 30, n, exclude_history=mask_history)
        sampled = stage.score(net, data, "test", [1, 5, 10], 16, CPU, mask_history=mask_history, per_sample=True,
                              candidates=cands)
        assert sampled[0] == full[0] and sampled[1].equals(full[1])
    assert full[0]["hr@10"] < 0.5                                      # an untrained model: not all trivially 1


def test_the_same_seed_draws_the_same_valid_candidates(tmp_path):
    _, data = untrained_sasrec_and_test_split(tmp_path)
    a = sample_candidates(data.seqs, data.targets, 30, 10, exclude_history=True)
    b = sample_candidates(data.seqs, data.targets, 30, 10, exclude_history=True)
    assert a.shape == (len(data), 10) and np.array_equal(a, b)
    for row, seq, target in zip(a, data.seqs, data.targets):
        assert len(set(row)) == 10 and 0 not in row and target not in row and not set(row) & set(seq)
    other = sample_candidates(data.seqs, data.targets, 30, 10, exclude_history=True, seed=1)
    assert not np.array_equal(a, other)
    kept = sample_candidates(data.seqs, data.targets, 30, 10, exclude_history=False)
    assert any(set(row) & set(seq) for row, seq in zip(kept, data.seqs))   # history allowed unless masked


def test_fewer_eligible_items_than_asked_leave_empty_slots():
    seqs = np.array([[0, 1, 2], [0, 0, 3]], dtype=np.int32)
    got = sample_candidates(seqs, np.array([4, 5]), 5, 6, exclude_history=True)
    assert sorted(got[0]) == [0, 0, 0, 0, 3, 5] and sorted(got[1]) == [0, 0, 0, 1, 2, 4]


def test_uniform_and_popularity_draws_follow_their_weights():
    rows = 4000
    seqs, targets = np.zeros((rows, 1), dtype=np.int32), np.full(rows, 1)
    uni = np.bincount(sample_candidates(seqs, targets, 5, 1, exclude_history=False).ravel(), minlength=6)
    assert uni[:2].sum() == 0 and np.abs(uni[2:] / rows - 0.25).max() < 0.03
    weights = np.array([0.0, 0.0, 1.0, 3.0, 0.0, 6.0])     # click counts (pipeline.batches.click_counts)
    pop = np.bincount(sample_candidates(seqs, targets, 5, 1, exclude_history=False, weights=weights).ravel(),
                      minlength=6)
    assert pop[4] == 0 and np.abs(pop[[2, 3, 5]] / rows - np.array([0.1, 0.3, 0.6])).max() < 0.03


class Constant(Recommender):
    """Scores every item alike: the tie rule puts the target anywhere among its candidates."""

    def __init__(self, n_items: int):
        super().__init__()
        self.n_items, self.w = n_items, nn.Parameter(torch.zeros(1))

    def forward(self, seqs):
        scores = self.w.expand(seqs.size(0), self.n_items + 1).clone()
        scores[:, 0] = float("-inf")
        return scores


def test_ties_among_candidates_keep_the_exact_rule(tmp_path):
    _, data = untrained_sasrec_and_test_split(tmp_path)
    cands = sample_candidates(data.seqs, data.targets, 30, 9, exclude_history=False)
    got = stage.score(Constant(30), data, "test", [1, 5, 10], 16, CPU, candidates=cands)
    assert got["hr@5"] == pytest.approx(0.5) and got["hr@1"] == pytest.approx(0.1) and got["hr@10"] == 1.0
    assert stage.score(Constant(30), data, "test", [5], 16, CPU)["hr@5"] == pytest.approx(5 / 30)


def test_every_model_ranks_the_same_candidates_whatever_its_input_length(tmp_path):
    """The draw reads the rows' whole stored prefixes, not the model's train.max_len window."""
    from models import MODELS
    from pipeline.io import read_json
    from pipeline.train.tasks import NextItemTask
    from test_train import make_samples
    samples = make_samples(tmp_path / "samples", n_items=30)
    p = from_dict(Params, {"evaluate": {"candidates": 8, "mask_history": True}})
    tasks = [NextItemTask(samples, read_json(samples / "manifest.json"),
                          from_dict(type(p.train), {"max_len": n, "model": "pop"}, run=True), p, MODELS["pop"], CPU)
             for n in (2, 50)]
    assert all(np.array_equal(tasks[0].candidates[s], tasks[1].candidates[s]) for s in ("valid", "test"))
    assert tasks[0].data["test"].seqs.shape[1] == 2 and tasks[0].candidates["test"].shape[1] == 8


class _FixedScores(nn.Module):
    """Scores that do not depend on the input (as POP's): only what mask_history excludes can move a metric."""

    def __init__(self, n_items: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(1, n_items + 1, generator=torch.Generator().manual_seed(3)))

    def forward(self, seqs, **_):
        return self.w.expand(len(seqs), -1)


def test_mask_history_excludes_the_whole_prefix_whatever_the_models_max_len(tmp_path):
    """Full ranking masked the model's train.max_len window only, the candidates path the whole prefix: one
    input-independent model gave two HR@10 under one protocol label, and candidates >= n_items - 1 were not
    full ranking again (walk 31a)."""
    from models import MODELS
    from pipeline.io import read_json
    from pipeline.train.tasks import NextItemTask
    from test_train import make_samples
    samples = make_samples(tmp_path / "samples", n_items=30)                # prefixes of 1..6 items, repeat-free
    manifest, net = read_json(samples / "manifest.json"), _FixedScores(30)

    def task(max_len: int, **evaluate):
        p = from_dict(Params, {"evaluate": {"mask_history": True, "ks": [1, 5, 10], **evaluate}})
        return NextItemTask(samples, manifest, from_dict(type(p.train), {"max_len": max_len, "model": "pop"}, run=True),
                            p, MODELS["pop"], CPU)

    short, whole = task(2), task(50)
    assert short.data["test"].seqs.shape[1] == 2 and int(whole.data["test"].lengths.max()) > 2   # cut for real
    for split in ("valid", "test"):
        assert short.evaluate(net, split) == whole.evaluate(net, split)
    assert short.evaluate(net, "test") != task(2, mask_history=False).evaluate(net, "test")    # masking matters
    every = task(2, candidates=40)                                           # every item a candidate
    assert every.evaluate(net, "test") == short.evaluate(net, "test")
