"""What a file is, from its first bytes (magic numbers), whatever its name says.

    zip     PK\\x03\\x04 (PK\\x05\\x06: an empty archive, PK\\x07\\x08: a spanned one)
    7z      7z\\xbc\\xaf\\x27\\x1c
    gz      \\x1f\\x8b
    text    no NUL and no control byte but tab, line ends, form feed (UTF-8 or a one-byte charset
            such as latin-1, which MovieLens uses)
    empty   no bytes at all
    binary  anything else; `describe` names the common ones seqpe does not unpack (xz, bzip2,
            zstd, rar, tar, Parquet, a Python pickle) so the message says what to do

Used by the download stage (an archive or a text file under any name is handled as what it is)
and by the dataset readers (a file that is not text is reported as what it is, never as a CSV with
the wrong separator). Reads at most HEAD bytes.
"""
from __future__ import annotations

from pathlib import Path

HEAD = 1 << 16
ARCHIVES = ("zip", "7z", "gz")
_MAGIC = ((b"PK\x03\x04", "zip"), (b"PK\x05\x06", "zip"), (b"PK\x07\x08", "zip"),
          (b"7z\xbc\xaf\x27\x1c", "7z"), (b"\x1f\x8b", "gz"))
_OTHER = ((b"\xfd7zXZ\x00", "an xz archive"), (b"BZh", "a bzip2 archive"), (b"\x28\xb5\x2f\xfd", "a zstd archive"),
          (b"Rar!\x1a\x07", "a rar archive"), (b"PAR1", "a Parquet file"), (b"\x80\x02", "a Python pickle"),
          (b"\x80\x03", "a Python pickle"), (b"\x80\x04", "a Python pickle"), (b"\x80\x05", "a Python pickle"),
          (b"\xff\xfe", "UTF-16 text (seqpe reads UTF-8: save it as UTF-8)"),
          (b"\xfe\xff", "UTF-16 text (seqpe reads UTF-8: save it as UTF-8)"))
_CONTROL = bytes(b for b in range(32) if b not in (9, 10, 12, 13)) + b"\x7f"


def head(path: str | Path, n: int = HEAD) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def kind_of_bytes(data: bytes) -> str:
    """"zip" | "7z" | "gz" | "text" | "empty" | "binary" for a file's first bytes."""
    if not data:
        return "empty"
    for magic, kind in _MAGIC:
        if data.startswith(magic):
            return kind
    if any(b in _CONTROL for b in data):
        return "binary"
    return "text"


def kind_of(path: str | Path) -> str:
    return kind_of_bytes(head(path))


def describe(data: bytes) -> str:
    """A phrase for what `data` (a file's first bytes) is: "a zip archive", "gzip data", "text",
    "an HTML page", "binary data (starts with bytes 1b 5b 33 31 ...)"."""
    kind = kind_of_bytes(data)
    if kind == "zip":
        return "a zip archive"
    if kind == "7z":
        return "a 7z archive"
    if kind == "gz":
        return "gzip data"
    if kind == "empty":
        return "empty"
    if kind == "text":
        start = data.lstrip(b"\xef\xbb\xbf \t\r\n")[:64].lower()
        if start.startswith((b"<!doctype html", b"<html", b"<?xml", b"<head")):
            return "an HTML page"
        return "text"
    for magic, what in _OTHER:
        if data.startswith(magic):
            return what
    if len(data) > 262 and data[257:262] == b"ustar":
        return "a tar archive"
    return f"binary data (starts with bytes {data[:8].hex(' ')})"


UNPACK_NOTE = " (unpack it first, or pass it to `seqpe download DATASET --from`)"


def require_text(path: str | Path, empty_fix: str = "re-download it (`seqpe download DATASET`)", *,
                 archive_fix=None, fix: str = "use the original file (`seqpe download DATASET` fetches and unpacks it)"
                 ) -> None:
    """A DataError naming what `path` is, unless it is a non-empty text file (not an HTML page): what
    the dataset readers call before they parse, so a wrong file is described as what it is. The fixes
    default to a raw file's (downloaded again; an archive handed to `download --from`); a user's own file
    passes its own: `empty_fix`, `fix` for anything else that is not text, and `archive_fix(kind)` for an
    archive (`kind` from ARCHIVES), whose problem then leaves out the download note."""
    from .errors import DataError
    data = head(path)
    if not data.strip():
        raise DataError(f"{path} is empty", empty_fix)
    found = describe(data)
    if found != "text":
        kind = kind_of_bytes(data)
        if kind in ARCHIVES and archive_fix is not None:
            raise DataError(f"{path} is {found}, not the text file seqpe reads", archive_fix(kind))
        raise DataError(f"{path} is {found}, not the text file seqpe reads{UNPACK_NOTE if kind in ARCHIVES else ''}",
                        fix)


def sasrec_text(path: str | Path) -> bool:
    """Whether `path` starts as SASRec / S3-Rec text: lines of two or more whole numbers split by spaces."""
    try:
        data = head(path, 4096)
    except OSError:
        return False
    lines = [line for line in data.split(b"\n")[:-1] if line.strip()][:20]     # whole lines only
    return bool(lines) and all(len(t := line.split()) >= 2 and all(w.isdigit() for w in t) for line in lines)


def starts_as_json(path: str | Path) -> bool:
    """Whether a text file starts as JSON ({ or [, after a BOM and blanks)."""
    return head(path, 64).lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"[")
