"""Domain errors. Library code raises these; only `pipeline.cli` turns them into
a one-line message and exit code 1."""
from __future__ import annotations


class SeqpeError(Exception):
    """A user-facing error: `problem` says what is wrong, `fix` what to do about it.

    str(err) is one line: "<problem>. Fix: <fix>" (the fix part only when given).
    """

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem.rstrip(". ")
        self.fix = fix
        super().__init__(str(self))

    def __str__(self) -> str:  # one line, always
        msg = self.problem if not self.fix else f"{self.problem}. Fix: {self.fix}"
        return " ".join(msg.split())


class ParamsError(SeqpeError):
    """params.yaml is malformed: unknown or missing key, wrong type."""


class DataError(SeqpeError):
    """Raw or prepared data is malformed, empty, or missing."""


class DownloadError(SeqpeError):
    """Fetching, verifying or unpacking a raw source failed."""


class TrainingError(SeqpeError):
    """Training produced a number that cannot be trusted (a NaN or infinite loss)."""


class NonFiniteScores(SeqpeError):
    """A model produced NaN or +-inf scores (it diverged): such a score has no rank, never a metric."""


class UnknownNameError(SeqpeError):
    """An unknown dataset / model / encoding name."""


def unknown(kind: str, name: str, known) -> UnknownNameError:
    """Build the error for an unknown registry key, listing the known ones."""
    names = ", ".join(sorted(known))
    return UnknownNameError(f"unknown {kind} '{name}'", f"use one of: {names}")
