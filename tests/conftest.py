"""Shared test set-up: keep torch to one thread (CI has 2 cores and runs tests in parallel)."""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("POLARS_MAX_THREADS", "2")

try:  # torch is optional for data-only test runs
    import torch

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover
    pass


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _own_state_root(tmp_path_factory, monkeypatch):
    """Each test keeps seqpe's resume/finished-seed state (SEQPE_STATE) to itself (and out of the repo)."""
    monkeypatch.setenv("SEQPE_STATE", str(tmp_path_factory.mktemp("seqpe-state")))
