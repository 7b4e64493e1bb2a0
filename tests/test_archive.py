"""pipeline.archive: only the needed members, flattened; unsafe or damaged archives refused."""
from __future__ import annotations

import gzip
import io
import os
import stat
import struct
import zipfile
import zlib
from pathlib import Path

import py7zr
import pytest

from pipeline import archive
from pipeline.errors import DownloadError

RATINGS = b"1::1193::5::978300760\n1::661::3::978302109\n" * 20


def make_zip(path: Path, members: dict[str, bytes], method=zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", method) as zf:
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2000, 1, 1, 0, 0, 0)), data, compress_type=method)
    return path


def zip_with_link(path: Path, link: str, target: str) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("ml-1m/ratings.dat", RATINGS)
        info = zipfile.ZipInfo(link)
        info.create_system = 3
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, target)
    return path


def make_7z(path: Path, members: dict[str, bytes], rename: tuple[str, str] | None = None) -> Path:
    """A 7z archive; `rename` swaps one member name afterwards (py7zr refuses to write unsafe names),
    fixing the header CRCs so that only the name is "wrong"."""
    buf = io.BytesIO()
    with py7zr.SevenZipFile(buf, "w") as z:
        z.set_encoded_header_mode(False)
        for name, data in members.items():
            z.writestr(data, name)
    data = bytearray(buf.getvalue())
    if rename:
        old, new = (s.encode("utf-16-le") for s in rename)
        assert len(old) == len(new)
        i = data.index(old)
        data[i:i + len(old)] = new
        off, size = struct.unpack("<QQ", data[12:28])
        data[28:32] = struct.pack("<I", zlib.crc32(bytes(data[32 + off:32 + off + size])))
        data[8:12] = struct.pack("<I", zlib.crc32(bytes(data[12:32])))
    path.write_bytes(bytes(data))
    return path


def listing(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


# --------------------------------------------------------------------------- zip

def test_zip_extracts_only_needed_members_flattened(tmp_path):
    src = make_zip(tmp_path / "ml-1m.zip", {"ml-1m/ratings.dat": RATINGS, "ml-1m/users.dat": b"u",
                                            "ml-1m/README": b"r", "__MACOSX/ml-1m/ratings.dat": b"junk"})
    out = tmp_path / "out"
    got = archive.unpack(src, "zip", ("ratings.dat", "ml-1m/users.dat"), out)
    assert got == {"ratings.dat": out / "ratings.dat", "ml-1m/users.dat": out / "ml-1m" / "users.dat"}
    assert listing(out) == ["ml-1m/users.dat", "ratings.dat"]
    assert (out / "ratings.dat").read_bytes() == RATINGS


def test_zip_missing_member_lists_what_is_there(tmp_path):
    src = make_zip(tmp_path / "a.zip", {"x/one.csv": b"1", "two.csv": b"2"})
    with pytest.raises(DownloadError, match=r"a.zip has no member train.csv \(it holds: two.csv, x/one.csv\)"):
        archive.unpack(src, "zip", ("train.csv",), tmp_path / "out")


def test_zip_ambiguous_member_is_refused(tmp_path):
    src = make_zip(tmp_path / "a.zip", {"v1/train.csv": b"1", "v2/train.csv": b"2"})
    with pytest.raises(DownloadError, match="holds train.csv more than once"):
        archive.unpack(src, "zip", ("train.csv",), tmp_path / "out")


@pytest.mark.parametrize("evil", ["../evil", "/etc/evil", "a/../../evil", "..\\evil", "C:/evil"])
def test_zip_member_escaping_the_folder_refuses_the_archive(tmp_path, evil):
    src = make_zip(tmp_path / "a.zip", {"ratings.dat": RATINGS, evil: b"owned"})
    out = tmp_path / "deep" / "out"
    with pytest.raises(DownloadError, match="would escape the target folder"):
        archive.unpack(src, "zip", ("ratings.dat",), out)
    assert not out.exists() and not list(tmp_path.rglob("evil"))


def test_zip_link_pointing_outside_is_refused(tmp_path):
    src = zip_with_link(tmp_path / "a.zip", "ml-1m/passwd", "../../../etc/passwd")
    with pytest.raises(DownloadError, match="link 'ml-1m/passwd' -> '../../../etc/passwd' pointing outside"):
        archive.unpack(src, "zip", ("ratings.dat",), tmp_path / "out")


def test_zip_link_inside_is_fine_unless_needed(tmp_path):
    src = zip_with_link(tmp_path / "a.zip", "ml-1m/latest.dat", "ratings.dat")
    archive.unpack(src, "zip", ("ratings.dat",), tmp_path / "out")
    assert listing(tmp_path / "out") == ["ratings.dat"]
    with pytest.raises(DownloadError, match="needed member ml-1m/latest.dat is a link"):
        archive.unpack(src, "zip", ("latest.dat",), tmp_path / "out2")


def test_zip_crc_error_is_reported(tmp_path):
    src = make_zip(tmp_path / "a.zip", {"ratings.dat": RATINGS}, method=zipfile.ZIP_STORED)
    data = bytearray(src.read_bytes())
    i = data.index(RATINGS[:20])
    data[i + 5] ^= 0xFF                                   # one flipped byte inside the stored member
    src.write_bytes(bytes(data))
    with pytest.raises(DownloadError, match=r"a.zip is truncated or corrupt \(Bad CRC-32 for file 'ratings.dat'\)"):
        archive.unpack(src, "zip", ("ratings.dat",), tmp_path / "out")


def test_truncated_zip_is_reported(tmp_path):
    src = make_zip(tmp_path / "a.zip", {"ratings.dat": RATINGS})
    src.write_bytes(src.read_bytes()[:-30])
    with pytest.raises(DownloadError, match="a.zip is truncated or corrupt") as err:
        archive.unpack(src, "zip", ("ratings.dat",), tmp_path / "out")
    assert "Fix: delete it and download it again" in str(err.value)


# --------------------------------------------------------------------------- 7z

def test_7z_extracts_needed_member_from_subfolder(tmp_path):
    src = make_7z(tmp_path / "y.7z", {"yoochoose-data/yoochoose-clicks.dat": b"1,2014-04-07T10:51:09.277Z,1,0\n",
                                      "yoochoose-data/yoochoose-buys.dat": b"b\n"})
    out = tmp_path / "out"
    archive.unpack(src, "7z", ("yoochoose-clicks.dat",), out)
    assert listing(out) == ["yoochoose-clicks.dat"]
    assert (out / "yoochoose-clicks.dat").read_bytes() == b"1,2014-04-07T10:51:09.277Z,1,0\n"


def test_7z_member_escaping_the_folder_is_refused(tmp_path):
    src = make_7z(tmp_path / "y.7z", {"clicks.dat": b"c", "xx/evil": b"owned"}, rename=("xx/evil", "../evil"))
    with pytest.raises(DownloadError, match="would escape the target folder: '../evil'"):
        archive.unpack(src, "7z", ("clicks.dat",), tmp_path / "out")
    assert not list(tmp_path.rglob("evil"))


def test_7z_link_pointing_outside_is_refused(tmp_path):
    src = tmp_path / "a" / "b" / "src"
    src.mkdir(parents=True)
    (tmp_path / "secret.txt").write_bytes(b"s")            # py7zr only stores links to existing targets
    os.symlink("../../../secret.txt", src / "link")
    (src / "clicks.dat").write_bytes(b"c")
    with py7zr.SevenZipFile(tmp_path / "y.7z", "w") as z:
        z.write(src / "clicks.dat", "d/clicks.dat")
        z.write(src / "link", "d/link")
    with pytest.raises(DownloadError, match="link 'd/link' -> '../../../secret.txt' pointing outside"):
        archive.unpack(tmp_path / "y.7z", "7z", ("clicks.dat",), tmp_path / "out")


def test_truncated_7z_is_reported(tmp_path):
    src = make_7z(tmp_path / "y.7z", {"clicks.dat": bytes(range(256)) * 400})
    src.write_bytes(src.read_bytes()[:200])
    with pytest.raises(DownloadError, match="y.7z is truncated or corrupt"):
        archive.unpack(src, "7z", ("clicks.dat",), tmp_path / "out")


def test_7z_data_corruption_is_reported(tmp_path):
    payload = bytes(range(256)) * 400
    src = make_7z(tmp_path / "y.7z", {"clicks.dat": payload})
    data = bytearray(src.read_bytes())
    data[100] ^= 0xFF                                     # inside the compressed stream
    src.write_bytes(bytes(data))
    with pytest.raises(DownloadError, match="y.7z is truncated or corrupt"):
        archive.unpack(src, "7z", ("clicks.dat",), tmp_path / "out")


# --------------------------------------------------------------------------- gz, none, folders

def test_gz_is_decompressed_or_kept(tmp_path):
    src = tmp_path / "reviews_Beauty_5.json.gz"
    src.write_bytes(gzip.compress(b'{"reviewerID": "A"}\n', mtime=0))
    archive.unpack(src, "gz", ("reviews_Beauty_5.json",), tmp_path / "a")
    assert (tmp_path / "a" / "reviews_Beauty_5.json").read_bytes() == b'{"reviewerID": "A"}\n'
    archive.unpack(src, "gz", ("reviews_Beauty_5.json.gz",), tmp_path / "b")   # the reader scans the .gz
    assert (tmp_path / "b" / "reviews_Beauty_5.json.gz").read_bytes() == src.read_bytes()


@pytest.mark.parametrize("cut", [-4, -12, 30])
def test_truncated_gz_is_reported(tmp_path, cut):
    src = tmp_path / "r.json.gz"
    src.write_bytes(gzip.compress(RATINGS * 10, mtime=0)[:cut])
    with pytest.raises(DownloadError, match="r.json.gz is truncated or corrupt"):
        archive.unpack(src, "gz", ("r.json",), tmp_path / "out")


def test_none_copies_or_moves(tmp_path):
    src = tmp_path / "ratings.csv"
    src.write_bytes(b"a,b\n")
    archive.unpack(src, "none", ("ratings.csv",), tmp_path / "a")
    assert src.exists() and (tmp_path / "a" / "ratings.csv").read_bytes() == b"a,b\n"
    archive.unpack(src, "none", ("ratings.csv",), tmp_path / "b", move=True)
    assert not src.exists() and (tmp_path / "b" / "ratings.csv").read_bytes() == b"a,b\n"


def test_collect_finds_files_in_a_folder_or_takes_a_single_file(tmp_path):
    (tmp_path / "dl" / "ml-1m").mkdir(parents=True)
    (tmp_path / "dl" / "ml-1m" / "ratings.dat").write_bytes(RATINGS)
    (tmp_path / "dl" / "ml-1m" / "users.dat").write_bytes(b"u")
    got = archive.collect(tmp_path / "dl", ("ratings.dat", "users.dat"), tmp_path / "out")
    assert sorted(got) == ["ratings.dat", "users.dat"] and listing(tmp_path / "out") == ["ratings.dat", "users.dat"]
    archive.collect(tmp_path / "dl" / "ml-1m" / "ratings.dat", ("ratings.dat",), tmp_path / "one")
    assert (tmp_path / "one" / "ratings.dat").read_bytes() == RATINGS
    archive.collect(tmp_path / "dl" / "ml-1m", ("ml-1m/users.dat",), tmp_path / "bare")   # folder passed itself
    assert listing(tmp_path / "bare") == ["ml-1m/users.dat"]
    with pytest.raises(DownloadError, match="has no movies.dat"):
        archive.collect(tmp_path / "dl", ("movies.dat",), tmp_path / "x")


def test_needed_names_must_be_relative(tmp_path):
    with pytest.raises(DownloadError, match="not a plain relative path"):
        archive.unpack(tmp_path / "a.zip", "zip", ("../x",), tmp_path / "out")


def test_kind_of():
    assert [archive.kind_of(n) for n in ("a.ZIP", "b.7z", "c.json.gz", "d.csv")] == ["zip", "7z", "gz", "none"]


@pytest.mark.parametrize("headers", [False, True])
def test_a_password_protected_7z_is_named_so(tmp_path, headers):
    """Walk 43g #10: with encrypted headers py7zr refuses on opening, which was reported as "truncated or
    corrupt" with a raw Python repr of its internals."""
    src = tmp_path / "y.7z"
    (tmp_path / "clicks.dat").write_bytes(b"1,2014-04-07T10:51:09.277Z,1,0\n")
    with py7zr.SevenZipFile(src, "w", password="secret", header_encryption=headers) as z:
        z.write(tmp_path / "clicks.dat", "clicks.dat")
    with pytest.raises(DownloadError, match=r"^y.7z is password-protected\. Fix: extract it by hand"):
        archive.unpack(src, "7z", ("clicks.dat",), tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("names", [("clicks.dat", "clicks.dat"), ("./clicks.dat", "clicks.dat")])
def test_a_zip_holding_a_needed_name_twice_is_refused(tmp_path, names):
    """Walk 43g #12: two members of one name (or `./x` beside `x`) installed the last silently; two copies in
    folders of equal depth were already refused as "more than once"."""
    import warnings
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                  # zipfile warns of the duplicate name
        with zipfile.ZipFile(buf, "w") as zf:
            for i, member in enumerate(names):
                zf.writestr(member, f"copy {i}\n")
    (tmp_path / "d.zip").write_bytes(buf.getvalue())
    with pytest.raises(DownloadError, match=r"d.zip holds clicks.dat more than once \(2 members of that name\)"):
        archive.unpack(tmp_path / "d.zip", "zip", ("clicks.dat",), tmp_path / "out")
