"""Progress of training on stderr, for a person at a terminal and for a log.

On a terminal, `EpochProgress` shows a transient bar for the running epoch with the last finished
epoch's line under it; when the seed ends, both collapse into one summary line. In a log (stderr
redirected to a file or a pipe, as in CI) there is no bar and no cursor movement: one plain line per
epoch, never wrapped or padded, then the summary line. stdout is left to the results (tables,
`--json`), so `seqpe train ... > results.txt` holds only them.

Downloads have their own bar (pipeline/fetch.py `progress_bar`): transient, shown only on a
terminal.
"""
from __future__ import annotations

import sys
from typing import Optional


class EpochProgress:
    """Report one seed's epochs (see the module docstring). `enabled=False` reports nothing."""

    def __init__(self, label: str, epochs: int, n_train: int, *, enabled: bool = True, stream=None):
        self.label, self.epochs, self.n_train = label, epochs, n_train
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.live = None
        if enabled and _is_terminal(self.stream):
            self.live = _live_progress(self.stream)
            self.task = self.live.add_task(label, total=n_train, loss=float("nan"), visible=False)
            self.live.start()

    def start(self, epoch: int) -> None:
        if self.live is not None:
            self.live.reset(self.task, total=self.n_train, visible=True, loss=float("nan"),
                            description=f"{self.label} epoch {epoch}/{self.epochs}")

    def advance(self, n: int, loss: float) -> None:
        if self.live is not None:
            self.live.update(self.task, advance=n, loss=loss)

    def epoch(self, text: str) -> None:
        """A finished epoch: the line under the bar (terminal) or one log line."""
        if self.live is not None:        # the bar above names the seed: at 80 columns the label cut the numbers off
            self.live.note = text        # (walk 45b #6)
        elif self.enabled:
            self._line(f"{self.label} {text}")

    def done(self, text: Optional[str] = None) -> None:
        """End of the seed: the display collapses into `text` (one line); None just stops it (error)."""
        if self.live is not None:
            self.live.stop()
            self.live = None
        if self.enabled and text:
            self._line(f"{self.label}: {text}")

    def _line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _live_progress(stream):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    from rich.text import Text

    class _WithNote(Progress):
        """A progress bar with one line of text under it (the last finished epoch)."""
        note = ""

        def get_renderables(self):
            yield self.make_tasks_table(self.tasks)
            if self.note:
                yield Text(self.note, overflow="fold")             # wrapped, never cut, on a narrow terminal

    return _WithNote(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                     TextColumn("loss {task.fields[loss]:.4f}"), TimeRemainingColumn(), transient=True,
                     console=Console(file=stream))
