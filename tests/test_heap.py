"""pipeline/train/heap.py: freed step buffers stay in the heap (no page faults per step), the user's
malloc settings win, and CPU training turns it on."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.train import heap, stage

from test_train import make_samples, params, toy_registry  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]
glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                           reason="glibc's malloc only")

# A training step's pattern: a few item-table-sized buffers written, then all freed (zero_grad).
STEPS = """
import resource, sys, torch
sys.path.insert(0, {root!r})
from pipeline.train import heap
if sys.argv[1] == "keep":
    assert heap.keep()
def step():
    bufs = [torch.ones(4_000_000) for _ in range(3)]   # 3 x 16 MB
    del bufs
for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""


def faults_per_step(arm: str, env: dict | None = None) -> float:
    out = subprocess.run([sys.executable, "-c", STEPS.format(root=str(ROOT)), arm], capture_output=True, text=True,
                         check=True, env=env)
    return float(out.stdout.strip())


@glibc
def test_kept_heap_reuses_freed_buffers_without_page_faults():
    # The contrast arm pins glibc's initial 128 KiB mmap threshold: with the dynamic default the same
    # loop faults ~7,800 times per step in most processes and 0 in some (it depends on the heap's
    # layout), so a default arm would make this test flaky; pinned, every 16 MB block is mapped fresh.
    pinned = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    system = faults_per_step("system", {**pinned, "MALLOC_MMAP_THRESHOLD_": "131072"})
    kept = faults_per_step("keep")
    assert kept < 100                                  # the same pages, already mapped, every step
    assert system > 10 * max(kept, 1.0)                # fresh pages every step (about 11,700 here)


@pytest.mark.parametrize("var, value", [("MALLOC_MMAP_THRESHOLD_", "131072"), ("MALLOC_TRIM_THRESHOLD_", "0"),
                                        ("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0"),
                                        ("LD_PRELOAD", "/usr/lib/libjemalloc.so.2")])
def test_the_users_malloc_settings_win(monkeypatch, var, value):
    monkeypatch.setattr(heap, "_done", False)
    monkeypatch.setenv(var, value)
    assert heap.applies() is False and heap.keep() is False


@glibc
def test_other_tunables_do_not_stop_it(monkeypatch):
    for var in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "LD_PRELOAD"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.cpu.hwcaps=-AVX512F")
    assert heap.applies() is True


def test_cpu_training_keeps_the_heap(tmp_path, toy_registry, monkeypatch):  # noqa: F811
    calls = []
    monkeypatch.setattr(heap, "keep", lambda: calls.append(1) or True)
    stage.run("toyset", make_samples(tmp_path / "samples"), tmp_path / "runs", params(epochs=1), progress=False)
    assert calls == [1]
