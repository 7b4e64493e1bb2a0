"""pipeline/progress.py: per-epoch lines go to stderr as plain lines in a log, stdout stays clean."""
from __future__ import annotations

import io

from pipeline.progress import EpochProgress


def test_log_mode_prints_one_plain_line_per_epoch_and_a_summary():
    err = io.StringIO()                                  # not a terminal: a CI log
    p = EpochProgress("sample sasrec-none seed 1", epochs=2, n_train=100, stream=err)
    for epoch in (1, 2):
        p.start(epoch)
        p.advance(100, 0.5)
        p.epoch(f"epoch {epoch}: loss 0.5000, valid ndcg@10 0.1234, best epoch {epoch}, 1,000 samples/s " + "x" * 80)
    p.done("2 epoch(s), best epoch 2")
    lines = err.getvalue().splitlines()
    assert len(lines) == 3 and lines[0].startswith("sample sasrec-none seed 1 epoch 1: loss 0.5000")
    assert lines[0].endswith("x" * 80) and "\x1b" not in err.getvalue()   # never wrapped, no escape codes
    assert lines[2] == "sample sasrec-none seed 1: 2 epoch(s), best epoch 2"


def test_disabled_prints_nothing():
    err = io.StringIO()
    p = EpochProgress("x", 1, 10, enabled=False, stream=err)
    p.start(1)
    p.epoch("epoch 1")
    p.done("done")
    assert err.getvalue() == ""


def test_a_terminal_shows_the_whole_epoch_line_under_the_bar():
    """At 80 columns the line under the bar ended at "best epoch…" (the seed's label, already in the bar, came
    first), and at 40 no number showed (walk 45b #6): the line is the epoch's alone, wrapped, never cut."""
    from rich.console import Console

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    p = EpochProgress("sample sasrec-lpe seed 4", epochs=2, n_train=100, stream=Terminal())
    try:
        p.start(1)
        p.advance(100, 0.5)
        p.epoch("epoch 1: loss 5.6767, valid ndcg@10 0.2570, best epoch 1, 3,711 samples/s")
        assert p.live.note == "epoch 1: loss 5.6767, valid ndcg@10 0.2570, best epoch 1, 3,711 samples/s"
        shown = Console(file=io.StringIO(), width=40, record=True)
        for part in p.live.get_renderables():
            shown.print(part)
        text = shown.export_text()
        assert "3,711 samples/s" in text.replace("\n", "") and "…" not in text.split("epoch 1:")[-1]
    finally:
        p.done("1 epoch(s)")
