"""HTTP transfer of one file with resume, retries and a progress bar (used by `pipeline.download`).

`fetch(url, part, ...)` streams `url` into the `part` file. An existing `part` is continued with
`Range: bytes=N-`; a server that ignores ranges answers 200 and the file restarts from zero; a
dropped connection is resumed the same way. Connection errors, timeouts, 5xx, 408 and 429 are
retried with exponential backoff (`retries` attempts *without progress*: a transfer that keeps
advancing keeps going); 401/403/404/410 and other 4xx, and a host name that does not resolve
(offline), fail at once. Bytes are stored exactly as
sent (`Accept-Encoding: identity`, no transparent decompression), so checksums hold.

Bounds on a bad origin (walk 43g #7): `timeout_s` bounds each socket read, so a server dripping a byte a
second never timed out. The body is read as it arrives (urllib3's `read1`), and a transfer averaging under
`MIN_RATE` bytes/s over a window of `timeout_s` seconds is cut and counted as an attempt without progress
(curl's --speed-limit / --speed-time, with the floor fixed at 1 KiB/s: no working mirror is that slow for a
minute). A body longer than the source's registered size is cut there (another origin is tried); with no
size known, the transfer stops while `LOW_DISK` bytes are still free on the destination's disk, so an
endless body cannot fill it.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Optional

import requests
import urllib3

from .errors import DownloadError

CHUNK = 1 << 16
USER_AGENT = "seqpe-download/0.1 (+https://github.com/seqpe)"
_MAX_RETRY_AFTER_S = 60.0
MIN_RATE = 1024                      # bytes/s, averaged over a window of timeout_s seconds
LOW_DISK = 1 << 30                   # bytes left free on the destination's disk by a body of unknown size
_DISK_CHECK = 64 << 20               # look at the free space after every this many bytes


class Failed(Exception):
    """One origin could not deliver the file. `unreachable`: no HTTP answer at all (no network)."""

    def __init__(self, reason: str, unreachable: bool = False):
        super().__init__(reason)
        self.reason, self.unreachable = reason, unreachable


class _Transient(Failed):
    """A failure worth retrying (connection trouble, timeout, 5xx, 408, 429)."""

    def __init__(self, reason: str, unreachable: bool = False, retry_after: Optional[float] = None,
                 slow: bool = False):
        super().__init__(reason, unreachable)
        self.retry_after, self.slow = retry_after, slow


def session() -> requests.Session:
    s = requests.Session()
    s.headers.update({"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
    return s


def progress_bar(enabled: bool):
    """A rich progress bar on stderr; a silent stand-in when disabled or stderr is not a terminal."""
    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                               TransferSpeedColumn)
    show = enabled and sys.stderr.isatty()
    return Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                    TimeRemainingColumn(), console=Console(stderr=True), transient=True, disable=not show)


def fetch(http: requests.Session, url: str, part: Path, *, retries: int, timeout_s: float, backoff_s: float,
          bar=None, task=None, limit: Optional[int] = None) -> None:
    """Download `url` into `part` (resuming it if present). Raises `Failed` when the origin gives up.
    `limit`: the file's known size in bytes; a body that goes past it is cut and the origin fails.
    A `part` that is a symbolic link is removed (the link, not what it points at) and the transfer starts afresh:
    written through, it replaced a file outside the destination (walk 43g #1); it is opened without following
    links too (`_stream`)."""
    if part.is_symlink():
        part.unlink()
    elif part.exists() and not part.is_file():
        raise DownloadError(f"{part} is not a file (a partial download's name)", f"remove {part} and run again")
    attempts, best, transfers = 0, _size(part), 0
    while True:
        transfers += 1
        before = _size(part)
        try:
            _attempt(http, url, part, timeout_s, bar, task, limit)
            return
        except _Transient as e:
            size = _size(part)
            # progress: this is a flaky link, not a dead one; an attempt cut for a slow spell counts when it still
            # brought a window's worth at the floor rate (walk 44j #3: 30 KB fast, then 900 B/s, gave up at 101 KB)
            if size > best and (not e.slow or size - before >= MIN_RATE * timeout_s):
                best, attempts = size, 0
            attempts += 1
            if attempts >= max(1, retries) or transfers >= 10 * max(1, retries):
                tries = f" after {attempts} attempt{'s' if attempts > 1 else ''}" if attempts > 1 else ""
                raise Failed(f"{e.reason}{tries}", unreachable=e.unreachable) from None
            delay = backoff_s * 2 ** (attempts - 1)
            if e.retry_after is not None:
                delay = max(delay, min(e.retry_after, _MAX_RETRY_AFTER_S))
            time.sleep(delay)


def _attempt(http, url: str, part: Path, timeout_s: float, bar, task, limit: Optional[int]) -> None:
    offset = _size(part)
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    try:
        resp = http.get(url, headers=headers, stream=True, timeout=(timeout_s, timeout_s))
    except requests.exceptions.SSLError:
        raise Failed("failed the TLS check (certificate or protocol)") from None
    except requests.ConnectionError as e:
        if _why(e) == "host not found":           # offline or a wrong host: retrying will not help
            raise Failed("unreachable (host not found)", unreachable=True) from None
        raise _Transient(f"unreachable ({_why(e)})", unreachable=True) from None
    except requests.Timeout:
        raise _Transient(f"timed out after {timeout_s:g} s", unreachable=True) from None
    except requests.RequestException as e:
        raise Failed(f"request failed ({_why(e)})") from None
    with resp:
        status = resp.status_code
        what = f"answered HTTP {status} {resp.reason or ''}".rstrip()
        if status == 416 and offset:               # the range starts at/after the end
            total = _range_total(resp.headers.get("Content-Range"))
            if total == offset:
                return                             # the .part was already complete
            part.unlink(missing_ok=True)
            raise _Transient(f"{what} to a resume request")
        if status in (408, 429) or status >= 500:
            raise _Transient(what, retry_after=_retry_after(resp.headers.get("Retry-After")))
        if status in (401, 403):
            raise Failed(f"{what} (the host wants a login or refuses this client)")
        if status not in (200, 206):
            raise Failed(what)
        if status == 206:
            start, total = _content_range(resp.headers.get("Content-Range"))
            if start != offset:                    # not the range we asked for: start over
                part.unlink(missing_ok=True)
                raise _Transient(f"resumed at byte {start} instead of {offset}")
            mode = "ab"
        else:                                      # 200: full body (a server without Range support)
            offset, mode = 0, "wb"
            length = resp.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        if bar is not None:
            bar.update(task, total=total, completed=offset)
        _stream(resp, part, mode, bar, task, timeout_s, limit)
    size = _size(part)
    if total is not None and size < total:
        raise _Transient(f"connection closed after {size:,} of {total:,} bytes")
    if total is not None and size > total:
        part.unlink(missing_ok=True)
        raise _Transient(f"sent {size:,} bytes, more than the announced {total:,}")


def _stream(resp, part: Path, mode: str, bar, task, window_s: float, limit: Optional[int]) -> None:
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | (os.O_APPEND if mode == "ab" else os.O_TRUNC)
    try:
        fh = os.fdopen(os.open(part, flags, 0o644), mode)
    except OSError as e:
        raise DownloadError(f"cannot write {part} ({e.strerror})", "check the folder's permissions") from None
    with fh:
        raw = resp.raw
        since, got, next_disk_check = time.monotonic(), 0, fh.tell() + _DISK_CHECK
        while True:
            try:
                chunk = raw.read1(CHUNK, decode_content=False)   # what has arrived, not a full CHUNK
            except (urllib3.exceptions.HTTPError, requests.RequestException, ConnectionError, TimeoutError) as e:
                raise _Transient(f"connection lost at byte {fh.tell():,} ({_why(e)})") from None
            if not chunk:
                return
            try:
                fh.write(chunk)
            except OSError as e:
                raise DownloadError(f"cannot write {part} ({e.strerror})", "free some disk space and run again "
                                    "(the transfer resumes)") from None
            if bar is not None:
                bar.advance(task, len(chunk))
            written = fh.tell()
            if limit is not None and written > limit:
                fh.close()
                part.unlink(missing_ok=True)
                raise Failed(f"sent more than the {limit:,} bytes the file has")
            if limit is None and written >= next_disk_check:
                next_disk_check = written + _DISK_CHECK
                free = _free_bytes(part.parent)
                if free < LOW_DISK:
                    raise DownloadError(f"stopped downloading into {part} at {written:,} bytes: under "
                                        f"{LOW_DISK >> 30} GiB is left free on its disk",
                                        "free some disk space and run again (the transfer resumes), or delete "
                                        f"{part} if the origin is sending an endless body")
            got += len(chunk)
            elapsed = time.monotonic() - since
            if elapsed >= window_s:
                if got < MIN_RATE * elapsed:
                    raise _Transient(f"sent {got:,} bytes in {elapsed:.0f} s (under {MIN_RATE:,} bytes/s)",
                                     slow=True)
                since, got = time.monotonic(), 0


def _free_bytes(folder: Path) -> int:
    return shutil.disk_usage(folder).free


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _content_range(value: Optional[str]) -> tuple[int, Optional[int]]:
    m = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", value or "")
    if not m:
        raise _Transient(f"sent a 206 answer with a bad Content-Range {value!r}")
    return int(m.group(1)), (int(m.group(3)) if m.group(3) != "*" else None)


def _range_total(value: Optional[str]) -> Optional[int]:
    m = re.search(r"/(\d+)\s*$", value or "")
    return int(m.group(1)) if m else None


def _retry_after(value: Optional[str]) -> Optional[float]:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _why(err: BaseException) -> str:
    """A short reason from a requests/urllib3 exception chain (no object reprs)."""
    reason = getattr(err.args[0], "reason", None) if err.args else None
    if isinstance(reason, urllib3.exceptions.NameResolutionError):
        return "host not found"
    text = str(err)
    for pattern, short in (("Connection refused", "connection refused"),
                           ("Name or service not known", "host not found"),
                           ("nodename nor servname", "host not found"),
                           ("Temporary failure in name resolution", "host not found"),
                           ("NameResolutionError", "host not found"),
                           ("timed out", "timed out"),
                           ("IncompleteRead", "incomplete read"),
                           ("Connection reset", "connection reset"),
                           ("Connection aborted", "connection aborted"),
                           ("Network is unreachable", "network unreachable"),
                           ("SSL", "TLS error")):
        if pattern in text:
            return short
    return type(err).__name__
