"""A worker for tests/test_batches.py: load a split through train.memory_budget's spill folder after a barrier
(a module of its own, so the spawned processes import polars and numpy only, not torch)."""
from __future__ import annotations

from pathlib import Path


def load_after(barrier, samples: str, spill: str, out) -> None:
    import numpy as np
    from pipeline.batches import load_samples
    try:
        barrier.wait()
        s = load_samples(Path(samples), "train", 6, budget_mb=0.001, spill=Path(spill))
        out.put(("ok", int(np.asarray(s.seqs).sum()), int(np.asarray(s.targets).sum())))
    except Exception as e:                                  # noqa: BLE001 - reported to the test
        out.put(("error", type(e).__name__, str(e)[:200]))
