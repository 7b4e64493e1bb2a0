"""pipeline/train/threads.py: train.threads auto / N / 0, and its params checks."""
from __future__ import annotations

import pytest
import torch

from pipeline.errors import ParamsError
from pipeline.params import TrainParams, from_dict, load_params
from pipeline.train import threads


@pytest.mark.parametrize("cpus, cores, expected", [(1, 1, 1), (2, 2, 1), (2, 1, 1), (4, 4, 2), (8, 4, 2),
                                                   (16, 16, 8), (64, 32, 8)])
def test_auto_is_one_thread_on_small_machines_else_half_the_cores(monkeypatch, cpus, cores, expected):
    monkeypatch.setattr(threads, "usable_cpus", lambda: cpus)
    monkeypatch.setattr(threads, "physical_cores", lambda: cores)
    assert threads.auto_threads() == expected


def test_default_is_auto_and_values_are_checked():
    assert TrainParams().threads == "auto"
    assert load_params("params.yaml").train.threads == "auto"            # the shipped file agrees
    assert from_dict(TrainParams, {"threads": 3}, "train").threads == 3
    for bad in ("two", -1, 1.5):
        with pytest.raises(ParamsError, match="train.threads"):
            from_dict(TrainParams, {"threads": bad}, "train")


def test_apply_sets_torch_threads(monkeypatch):
    before = torch.get_num_threads()
    try:
        assert threads.apply(2) == 2
        monkeypatch.setattr(threads, "auto_threads", lambda: 1)
        assert threads.apply("auto") == 1
        monkeypatch.setattr(threads, "_TORCH_DEFAULT", 3)
        assert threads.resolve(0) == 3 and threads.apply(0) == 3         # 0: torch's default, not what was set last
    finally:
        torch.set_num_threads(before)


def test_machine_reading_is_sane():
    assert 1 <= threads.physical_cores() <= threads.usable_cpus()
