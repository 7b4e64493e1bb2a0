"""Domain errors. Library code raises these; only `pipeline.cli` turns them into
a one-line message and exit code 1.

Two helpers keep every message safe and useful: `printable` escapes control characters (a
message that quotes a binary file never sends ESC or NUL to the terminal; every SeqpeError
goes through it), and `unknown` builds the error for a name no registry holds, with a
did-you-mean (difflib) and the known names.
"""
from __future__ import annotations

import difflib
from typing import Iterable, Optional


def printable(text: str, limit: Optional[int] = None) -> str:
    """`text` with control characters (C0 but tab, DEL, C1), lone surrogates and the Unicode
    replacement character shown as escapes (\\x1b, \\x00, \\ufffd), cut to `limit` characters
    with an ellipsis. Safe to print whatever bytes a file held."""
    out = []
    for ch in text:
        o = ord(ch)
        if o < 0x20 and ch not in "\t\n\r" or 0x7F <= o < 0xA0:
            out.append(f"\\x{o:02x}")
        elif 0xD800 <= o < 0xE000 or o == 0xFFFD:
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    s = "".join(out)
    return s if limit is None or len(s) <= limit else s[: max(limit - 1, 0)] + "…"


class SeqpeError(Exception):
    """A user-facing error: `problem` says what is wrong, `fix` what to do about it.

    str(err) is one line: "<problem>. Fix: <fix>" (the fix part only when given), with any
    control character escaped (see `printable`).
    """

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem.rstrip(". ")
        self.fix = fix
        super().__init__(str(self))

    def __str__(self) -> str:  # one line, always
        msg = self.problem if not self.fix else f"{self.problem}. Fix: {self.fix}"
        return " ".join(printable(msg).split())


class ParamsError(SeqpeError):
    """A setting is wrong: in params.yaml (unknown or missing key, wrong type, out of range) or on
    the command line."""


class DataError(SeqpeError):
    """Raw or prepared data is malformed, empty, or missing."""


class DownloadError(SeqpeError):
    """Fetching, verifying or unpacking a raw source failed."""


class TrainingError(SeqpeError):
    """Training produced a number that cannot be trusted (a NaN or infinite loss)."""


class ConstantModel(TrainingError):
    """A trained model scores every test sample the same: its metric would be chance, not a result."""


class Diverged(TrainingError):
    """The training loss became NaN / infinite or exploded: the seed's resume state would only lead there again."""


class NonFiniteScores(SeqpeError):
    """A model produced NaN or +-inf scores (it diverged): such a score has no rank, never a metric."""


class UnknownNameError(ParamsError):
    """An unknown dataset / model / encoding / format / preset / ... name."""


def did_you_mean(name: str, known: Iterable) -> Optional[str]:
    """The known name closest to `name` (difflib ratio >= 0.6), or None; a name that differs only in case
    (`SASRec`, `LPE`) is matched first (difflib ratio put them below the cutoff)."""
    names = [str(k) for k in known]
    same = [k for k in names if k.lower() == str(name).lower()]
    if same:
        return same[0]
    swapped = [k for k in names if _one_swap(str(name).lower(), k.lower())]
    if swapped:                        # two neighbours swapped (`rpoe`): difflib's ratio preferred `rspe`
        return swapped[0]
    close = difflib.get_close_matches(str(name), names, n=1, cutoff=0.6)
    return close[0] if close else None


def _one_swap(a: str, b: str) -> bool:
    """Whether `a` is `b` with two neighbouring characters swapped."""
    if len(a) != len(b) or a == b:
        return False
    diff = [i for i in range(len(a)) if a[i] != b[i]]
    return len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]


def unknown(kind: str, name: str, known, fix: Optional[str] = None) -> UnknownNameError:
    """The error for a name no registry holds: "unknown KIND 'NAME'. Fix: did you mean 'X'? (known:
    a, b, ...)", or "use one of: ..." when nothing is close. `fix` replaces the default advice."""
    names = sorted(str(k) for k in known)
    listing = ", ".join(names) if names else "none"
    close = did_you_mean(name, names)
    if fix is not None:
        advice = fix
    elif close is not None:
        advice = f"did you mean '{close}'? (known: {listing})"
    else:
        advice = f"use one of: {listing}"
    return UnknownNameError(f"unknown {kind} '{printable(str(name), 60)}'", advice)


def as_os_error(e: BaseException, path=None) -> Optional[OSError]:
    """The OSError behind a failed write or read, named after `path`, or None when `e` is no I/O failure.

    Polars' Rust reader and writer report the system's error inside their own exception
    (`ComputeError: parquet: ... underlying IO error: No space left on device (os error 28)`), which a
    full disk turned into a 40-line traceback, or into "the raw file is damaged" where a read error was
    caught as a parse error. An OSError without a file name (a `write()` that hit a full disk: only
    `open()` names its file) gets `path`, so the message says which disk filled up. An OSError that names
    its file already is returned as it is."""
    import errno as _errno
    import os
    import re
    if isinstance(e, OSError):
        if e.filename is not None or path is None or e.errno is None:
            return e
        return OSError(e.errno, e.strerror or os.strerror(e.errno), str(path))
    if not type(e).__module__.startswith("polars"):
        return None
    found = re.search(r"\(os error (\d+)\)", str(e))
    if found is None or int(found.group(1)) not in _errno.errorcode:
        return None
    code = int(found.group(1))
    return OSError(code, os.strerror(code), *([str(path)] if path is not None else []))


def polars_said(message: str) -> str:
    """The first line of a Polars parse error, in the terms of the file rather than of Polars' API (a row with
    an extra field drew "provided `new_columns` does not match ... pass extra_columns='ignore'")."""
    first = next((line.strip() for line in str(message).splitlines() if line.strip()), "a parse error")
    if "new_columns` does not match number of columns" in first or "more fields than defined" in first:
        return "a row has more fields than the file's columns"
    return first
