"""Safe unpacking of downloaded raw sources (zip, 7z, gz, plain files, extracted folders).

Only the members a dataset needs are written, each to `<out_dir>/<name>` for `name` in the
source's `files`, whatever subfolder the archive keeps it in (`ml-1m/ratings.dat` is found as
`ratings.dat` too): the output layout never depends on how an archive was packed.

Safety: an archive with any member that could escape the target folder (absolute path, drive
letter, a `..` component, a symlink pointing outside) is refused as a whole, before anything is
written; a needed member that is a link is refused too (seqpe writes regular files only).
Corruption is caught by the formats' own checks: zip CRC-32 of every extracted member, 7z CRC,
gzip CRC and end-of-stream marker. Every failure is one `DownloadError` line.
"""
from __future__ import annotations

import collections
import errno
import gzip
import lzma
import os
import posixpath
import re
import shutil
import stat
import zipfile
import zlib
from pathlib import Path
from typing import Iterable, Sequence

from . import sniff
from .errors import DownloadError

KINDS = ("zip", "7z", "gz", "none")
_SKIP_DIRS = {"__MACOSX"}          # resource-fork folders that macOS zips carry along
_FOLDER_DEPTH = 3                  # how deep an extracted folder is searched for the needed files


def kind_of(filename: str) -> str:
    """Archive kind from a file name (used for generated sources)."""
    low = filename.lower()
    for suffix, kind in ((".zip", "zip"), (".7z", "7z"), (".gz", "gz")):
        if low.endswith(suffix):
            return kind
    return "none"


def unpack(archive: Path, kind: str, files: Sequence[str], out_dir: Path, *, name: str | None = None,
           move: bool = False, label: str | None = None) -> dict[str, Path]:
    """Write the needed `files` of `archive` (a `kind` archive) into `out_dir`; return name -> path.

    `name` is the source's file name (a needed file equal to it is kept as is); `label` names the
    file in messages (default `name`: e.g. the user's own file name when it differs). `move=True`
    lets a plain file (or a needed file equal to the archive itself) be renamed into place instead
    of copied (for a temporary download the caller owns).
    """
    archive, out_dir = Path(archive), Path(out_dir)
    name = name or archive.name
    itself = list(files) == [name]
    name = label or name
    for f in files:
        _check_wanted(f)
    if kind not in KINDS:
        raise DownloadError(f"unknown archive kind '{kind}' for {name}", f"use one of: {', '.join(KINDS)}")
    # A needed file that *is* the download (e.g. a .json.gz the reader scans directly): keep as is.
    if kind == "none" or itself:
        if len(files) != 1:
            raise DownloadError(f"{name} is a single file but {len(files)} files are needed ({', '.join(files)})",
                                "fix the source's archive kind in the dataset registry")
        if files[0].lower().endswith(".gz"):
            verify_gzip(archive, name, files[0])
        return {files[0]: _place(archive, out_dir / files[0], move)}
    try:
        if kind == "zip":
            return _unzip(archive, files, out_dir, name)
        if kind == "7z":
            return _un7z(archive, files, out_dir, name)
        return _gunzip(archive, files, out_dir, name)
    except DownloadError:
        raise
    except (zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile) as e:
        raise _corrupt(name, e) from None
    except Exception as e:  # py7zr raises its own family plus assorted errors on damaged input
        if type(e).__name__ == "PasswordRequired":   # encrypted headers: raised on opening, before the content's
            raise DownloadError(f"{name} is password-protected",    # check (walk 43g #10: "truncated or corrupt")
                                "extract it by hand and pass the folder with --from") from None
        if type(e).__module__.startswith("py7zr"):
            raise _corrupt(name, e) from None
        raise


def verify_gzip(path: Path, name: str, keep_as: str, chunk: int = 1 << 20) -> None:
    """Read a gzip file kept as is (e.g. reviews_Beauty_5.json.gz) to its end: the magic bytes, every
    member's CRC-32 and length, and the end-of-stream marker, so a cut-short or damaged download is
    refused here instead of being recorded in source.json and failing at preprocess."""
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            raise DownloadError(f"{name} is not gzip data, so it cannot be kept as {keep_as}",
                                f"pass the original {keep_as}")
    try:
        with gzip.open(path, "rb") as g:
            while g.read(chunk):
                pass
    except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as e:
        raise _corrupt(name, e) from None


def collect(src: Path, files: Sequence[str], out_dir: Path) -> dict[str, Path]:
    """Copy already-extracted `files` from a folder (searched a few levels deep) or a single file."""
    src, out_dir = Path(src), Path(out_dir)
    for f in files:
        _check_wanted(f)
    if src.is_file():
        if len(files) != 1 or Path(files[0]).name != src.name:
            raise DownloadError(f"{src} is a single file but the dataset needs {', '.join(files)}",
                                "pass the archive or a folder that holds all of them with --from")
        if files[0].lower().endswith(".gz"):
            verify_gzip(src, src.name, files[0])
        return {files[0]: _place(src, out_dir / files[0], move=False)}
    names = _walk(src)
    found = {}
    for f in files:
        member = _match(names, f, str(src))
        if member is None:
            srgnn = src / "all_train_seq.txt"        # SR-GNN's preprocessed pickles: `seqpe import` reads them (38b D6)
            also = (f", or, as it holds SR-GNN's preprocessed files, `seqpe import NAME {src} --format srgnn`"
                    if srgnn.is_file() and sniff.describe(sniff.head(srgnn, 16)) == "a Python pickle" else "")
            raise DownloadError(f"{src} has no {f} (searched {_FOLDER_DEPTH} folder levels)",
                                f"pass the folder that holds {', '.join(files)}, or the downloaded archive{also}")
        if f.lower().endswith(".gz"):
            verify_gzip(src / member, member, f)
        found[f] = _place(src / member, out_dir / f, move=False)
    return found


def collect_as(src: Path, wanted: str, out_dir: Path) -> dict[str, Path]:
    """Copy the single file `src` (any name) to `out_dir/wanted`: a text file recognised by its
    content as the one needed file (e.g. Diginetica's views saved as my_views.csv)."""
    _check_wanted(wanted)
    if wanted.lower().endswith(".gz"):
        verify_gzip(Path(src), Path(src).name, wanted)
    return {wanted: _place(Path(src), Path(out_dir) / wanted, move=False)}


def collect_exact(src: Path, files: Sequence[str], out_dir: Path) -> dict[str, Path]:
    """Link (or, across file systems, copy) `src/<name>` to `out_dir/<name>` for each needed name: a
    raw folder seqpe wrote itself, shared by datasets of one source (the three Yoochoose cuts hold
    one 1.4 GB file, not three). Nothing writes into a raw file in place, so sharing is safe."""
    out = {}
    for f in files:
        _check_wanted(f)
        dst = Path(out_dir) / f
        _prepare(dst)
        try:
            os.link(Path(src) / f, dst)
        except OSError as e:   # another file system, no hard links there, or too many links: copy
            if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
                raise
            shutil.copyfile(Path(src) / f, dst)
        out[f] = dst
    return out


# --------------------------------------------------------------------------- formats

def _unzip(archive: Path, files: Sequence[str], out_dir: Path, name: str) -> dict[str, Path]:
    with zipfile.ZipFile(archive) as zf:
        infos = [i for i in zf.infolist() if not i.is_dir()]
        links = {}
        for info in zf.infolist():
            _check_member(info.filename, name)
            if _zip_is_link(info):
                target = zf.read(info).decode("utf-8", "replace")
                _check_link(info.filename, target, name)
                links[_norm(info.filename)] = target
        by_name = {_norm(i.filename): i for i in infos}
        counts = collections.Counter(_norm(i.filename) for i in infos)   # a name twice kept the last silently,
        out = {}                                                         # where two folders' copies are refused
        for f in files:                                                  # (walk 43g #12)
            member = _need(by_name, f, name)
            if counts[member] > 1:
                raise DownloadError(f"{name} holds {member} more than once ({counts[member]} members of that name)",
                                    "extract the right one by hand and pass it with --from")
            if member in links:
                raise _link_needed(name, member)
            dst = _prepare(out_dir / f)
            try:
                with zf.open(by_name[member]) as src, open(dst, "wb") as fh:
                    shutil.copyfileobj(src, fh, 1 << 20)   # ZipExtFile checks CRC-32 at the end
            except RuntimeError as e:  # encrypted member
                raise DownloadError(f"{name}: member {member} cannot be read ({e})",
                                    "extract it by hand and pass the folder with --from") from None
            out[f] = dst
        return out


def _un7z(archive: Path, files: Sequence[str], out_dir: Path, name: str) -> dict[str, Path]:
    import py7zr
    from py7zr.io import Py7zIO, WriterFactory

    class _FileIO(Py7zIO):
        def __init__(self, path: Path):
            self.path, self.fh = path, open(_prepare(path), "wb")

        def write(self, s):
            return self.fh.write(s)

        def read(self, size=None):
            return b""

        def seek(self, offset, whence=0):
            return self.fh.seek(offset, whence)

        def flush(self):
            self.fh.flush()

        def size(self):
            return self.fh.tell()

        def close(self):
            self.fh.close()

    class _BytesIO(_FileIO):   # link members: keep their (short) target text in memory
        def __init__(self, path):
            self.path, self.buf = path, bytearray()

        def write(self, s):
            self.buf += s
            return len(s)

        def seek(self, offset, whence=0):
            return len(self.buf)

        def flush(self):
            pass

        def size(self):
            return len(self.buf)

        def close(self):
            pass

    with py7zr.SevenZipFile(archive, mode="r") as z:
        if z.needs_password():
            raise DownloadError(f"{name} is password-protected", "extract it by hand and pass the folder with --from")
        members = [m for m in z.files if not m.is_directory]
        for m in z.files:
            _check_member(m.filename, name)
        by_name = {_norm(m.filename): m for m in members}
        links = {n for n, m in by_name.items() if m.is_symlink}
        wanted = {}
        for f in files:
            member = _need(by_name, f, name)
            if member in links:
                raise _link_needed(name, member)
            wanted[member] = out_dir / f
        root = out_dir.resolve()   # py7zr hands the factory `root / member` paths

        class _Factory(WriterFactory):
            def __init__(self):
                self.link_text: dict[str, bytearray] = {}

            def create(self, filename: str):
                member = _norm(Path(filename).relative_to(root).as_posix())
                if member in wanted:
                    return _FileIO(wanted[member])
                io_ = _BytesIO(Path(filename))
                self.link_text[member] = io_.buf
                return io_

        factory = _Factory()
        targets = [by_name[m].filename for m in (*wanted, *sorted(links))]
        z.extract(path=root, targets=targets, factory=factory)
        for member, text in factory.link_text.items():
            _check_link(member, bytes(text).decode("utf-8", "replace"), name)
    out = {f: out_dir / f for f in files}
    for f, dst in out.items():
        if not dst.is_file():
            raise _corrupt(name, f"{f} was not written")
    return out


def _gunzip(archive: Path, files: Sequence[str], out_dir: Path, name: str) -> dict[str, Path]:
    if len(files) != 1:
        raise DownloadError(f"{name} is a gzip file (one member) but {len(files)} files are needed",
                            "fix the source's files in the dataset registry")
    dst = _prepare(out_dir / files[0])
    with gzip.open(archive, "rb") as src, open(dst, "wb") as fh:
        shutil.copyfileobj(src, fh, 1 << 20)   # raises EOFError when truncated, BadGzipFile on bad CRC
    return {files[0]: dst}


# --------------------------------------------------------------------------- helpers

def _norm(member: str) -> str:
    member = member.replace("\\", "/")
    while member.startswith("./"):
        member = member[2:]
    return member.rstrip("/")


def _unsafe(member: str) -> bool:
    m = member.replace("\\", "/")
    if m.startswith("/") or re.match(r"^[A-Za-z]:", m) or "\x00" in m:
        return True
    return ".." in m.split("/")


def _check_member(member: str, name: str) -> None:
    if _unsafe(member):
        raise DownloadError(f"{name} holds a member that would escape the target folder: {member!r}; refused",
                            "do not use this archive; get the file from its official source")


def _check_link(member: str, target: str, name: str) -> None:
    t = target.replace("\\", "/")
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(_norm(member)), t))
    if t.startswith("/") or re.match(r"^[A-Za-z]:", t) or joined == ".." or joined.startswith("../"):
        raise DownloadError(f"{name} holds a link {member!r} -> {target!r} pointing outside the archive; refused",
                            "do not use this archive; get the file from its official source")


def _check_wanted(f: str) -> None:
    if _unsafe(f) or not f.strip("/"):
        raise DownloadError(f"needed file name {f!r} is not a plain relative path",
                            "fix the source's files in the dataset registry")


def _zip_is_link(info: zipfile.ZipInfo) -> bool:
    return info.create_system == 3 and stat.S_ISLNK(info.external_attr >> 16)


def _link_needed(name: str, member: str) -> DownloadError:
    return DownloadError(f"{name}: needed member {member} is a link, not a file",
                         "extract the archive by hand and pass the folder with --from")


def _corrupt(name: str, err: object) -> DownloadError:
    detail = " ".join(str(err).split()) or type(err).__name__
    return DownloadError(f"{name} is truncated or corrupt ({detail})",
                         "delete it and download it again (or pass a good copy with --from)")


def _match(names: Iterable[str], wanted: str, where: str) -> str | None:
    """The member equal to `wanted` or ending in `/wanted`, shallowest first; None if absent.

    A wanted `ml-1m/ratings.dat` also matches a bare `ratings.dat` (a repacked or hand-made copy).
    """
    names = list(names)
    wanted = wanted.strip("/")
    found = _shallowest(names, wanted, where)
    if found is None and "/" in wanted:
        found = _shallowest(names, wanted.rsplit("/", 1)[1], where)
    return found


def _shallowest(names: list[str], wanted: str, where: str) -> str | None:
    cands = sorted(n for n in names
                   if (n == wanted or n.endswith("/" + wanted)) and not _SKIP_DIRS & set(n.split("/")))
    if not cands:
        return None
    depth = min(n.count("/") for n in cands)
    top = [n for n in cands if n.count("/") == depth]
    if len(top) > 1:
        raise DownloadError(f"{where} holds {wanted} more than once ({', '.join(top)})",
                            "extract the right one by hand and pass it with --from")
    return top[0]


def _need(by_name: dict, f: str, name: str) -> str:
    member = _match(by_name, f, name)
    if member is None:
        listing = ", ".join(sorted(by_name)[:8]) + (", ..." if len(by_name) > 8 else "")
        raise DownloadError(f"{name} has no member {f} (it holds: {listing or 'nothing'})",
                            "check that this is the right archive for the dataset")
    return member


def _walk(root: Path) -> list[str]:
    """Relative posix paths of the files under `root`, at most `_FOLDER_DEPTH` levels deep."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        depth = len(rel.parts)
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and depth + 1 < _FOLDER_DEPTH)
        out.extend((rel / fn).as_posix() for fn in filenames)
    return sorted(out)


def _prepare(dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    return dst


def _place(src: Path, dst: Path, move: bool) -> Path:
    if not move and not Path(src).is_file():      # a link to /dev/zero copied without end, 4.7 GB in 4 s (walk
        from .io import special_kind              # 43g #8)
        raise DownloadError(f"{src} is {special_kind(src)}, not a file", "pass the regular file itself")
    _prepare(dst)
    if move:
        os.replace(src, dst)
    else:
        shutil.copyfile(src, dst)
    return dst
