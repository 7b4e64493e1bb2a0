"""Shared test set-up: keep torch to one thread (CI has 2 cores and runs tests in parallel)."""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("POLARS_MAX_THREADS", "2")

try:  # torch is optional for data-only test runs
    import torch

    torch.set_num_threads(1)
    # Inductor's on-disk cache (/tmp/torchinductor_$USER) does not key its entries on the CPU capability it
    # compiled for: after a run under ATEN_CPU_CAPABILITY=avx2, the AVX-512 run of the reduce-overhead test
    # loaded them and failed ('index out of bounds' in a generated kernel; torch 2.13.0, reproduced both ways).
    # One cache per capability keeps the tests' compiles apart (a user's own setting wins).
    import tempfile
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), "seqpe-tests-inductor-"
                          f"{getattr(os, 'getuid', lambda: 'user')()}-{torch.backends.cpu.get_cpu_capability()}"))
except ImportError:  # pragma: no cover
    pass


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _own_state_root(tmp_path_factory, monkeypatch):
    """Each test keeps seqpe's resume/finished-seed state (SEQPE_STATE) to itself (and out of the repo)."""
    monkeypatch.setenv("SEQPE_STATE", str(tmp_path_factory.mktemp("seqpe-state")))
