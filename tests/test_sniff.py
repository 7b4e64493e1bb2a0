"""pipeline/sniff.py: what a file is, from its bytes."""
from __future__ import annotations

import gzip
import io
import zipfile

import pytest

from pipeline import sniff
from pipeline.errors import DataError


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(zipfile.ZipInfo("a.csv", date_time=(2016, 1, 1, 0, 0, 0)), "x;y\n")
    return buf.getvalue()


@pytest.mark.parametrize("data, kind, described", [
    (_zip(), "zip", "a zip archive"),
    (b"7z\xbc\xaf\x27\x1c\x00\x04rest", "7z", "a 7z archive"),
    (gzip.compress(b"{}\n", mtime=0), "gz", "gzip data"),
    (b"sessionId;userId\n1;NA\n", "text", "text"),
    ("caf\xe9;1\n".encode("latin-1"), "text", "text"),                 # MovieLens is latin-1
    (b"<!DOCTYPE html><html><body>login</body></html>", "text", "an HTML page"),
    (b"", "empty", "empty"),
    (b"\xfd7zXZ\x00\x00rest", "binary", "an xz archive"),
    (b"PAR1\x15\x04", "binary", "a Parquet file"),
    (b"\x1b[31m;;;\x00junk", "binary", "binary data (starts with bytes 1b 5b 33 31 6d 3b 3b 3b)"),
], ids=["zip", "7z", "gzip", "text", "latin-1", "html", "empty", "xz", "parquet", "binary"])
def test_kinds_by_magic_bytes(data, kind, described):
    assert sniff.kind_of_bytes(data) == kind
    assert sniff.describe(data) == described


def test_require_text_names_what_was_found(tmp_path):
    (tmp_path / "a.csv").write_bytes(_zip())
    with pytest.raises(DataError, match=r"a.csv is a zip archive, not the text file seqpe reads \(unpack it first"):
        sniff.require_text(tmp_path / "a.csv")
    (tmp_path / "b.csv").write_bytes(b"")
    with pytest.raises(DataError, match="b.csv is empty"):
        sniff.require_text(tmp_path / "b.csv")
    (tmp_path / "c.csv").write_text("a,b\n")
    sniff.require_text(tmp_path / "c.csv")


@pytest.mark.parametrize("dataset, name, content, fragment", [
    ("yoochoose", "yoochoose-clicks.dat", b"\x89\x1b[2J;;;\x00\x01;garbage" * 20, "is binary data (starts with bytes 89 1b"),
    ("diginetica", "train-item-views.csv", _zip(), "is a zip archive, not the text file seqpe reads (unpack it first"),
    ("diginetica", "train-item-views.csv", gzip.compress(b"sessionId;userId\n", mtime=0), "is gzip data"),
    ("yoochoose", "yoochoose-clicks.dat", b"sessionId;userId;itemId;timeframe;eventdate\n1;NA;2;3;2016-01-01\n",
     "is separated by semicolons (first line 'sessionId;userId;itemId;timeframe;eventdate')"),
    ("diginetica", "train-item-views.csv", b"x" * 5000 + b"\n", "has header 'xxxxxxxx"),
], ids=["yoochoose-binary", "diginetica-zip", "diginetica-gzip", "yoochoose-given-diginetica", "long-header"])
def test_readers_describe_a_wrong_file_as_what_it_is(tmp_path, dataset, name, content, fragment):
    """Garbage used to be reported as a CSV "separated by semicolons", with its bytes echoed."""
    from pipeline.datasets import get
    (tmp_path / name).write_bytes(content)
    with pytest.raises(DataError) as err:
        get(dataset).reader(tmp_path)
    msg = str(err.value)
    assert fragment in msg and "\x1b" not in msg and "\x00" not in msg and len(msg) < 600
    if dataset == "yoochoose" and b"\x00" in content:
        assert "semicolons" not in msg


def test_ctr_and_movielens_readers_describe_binary_files(tmp_path):
    from pipeline.datasets import get
    (tmp_path / "train.csv").write_bytes(b"\x00\x01\x02binary")
    (tmp_path / "test.csv").write_text("label\n1\n")
    with pytest.raises(DataError, match="train.csv is binary data"):
        get("kuaivideo").reader(tmp_path).collect()
    (tmp_path / "ratings.dat").write_bytes(b"\x1f\x8b" + b"\x00" * 20)
    with pytest.raises(DataError, match="ratings.dat is gzip data"):
        get("ml_1m").reader(tmp_path).collect()
