"""Amazon 2014 review readers (JSON lines gz / plain, ratings CSV) and their bad inputs."""
from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from pipeline import preprocess
from pipeline.datasets import get
from pipeline.errors import DataError
from pipeline.io import read_split, write_json
from pipeline.params import Params

# (reviewerID, asin, overall, unixReviewTime) in file order (the real files are sorted by asin)
REVIEWS = [
    ("A2", "B01", 5.0, 300), ("A1", "B01", 4.0, 100), ("A3", "B01", 3.0, 60),
    ("A1", "B02", 2.0, 100), ("A2", "B02", 5.0, 200), ("A3", "B02", 1.0, 50),
    ("A1", "B03", 5.0, 400), ("A2", "B03", 4.0, 100), ("A3", "B03", 4.0, 70),
]
EXPECTED_TEST = [(1, [1, 2, 3]), (2, [3, 2, 1]), (3, [2, 1, 3])]


def json_line(r) -> str:
    return json.dumps({"reviewerID": r[0], "asin": r[1], "reviewerName": "x, \"y\"", "helpful": [0, 1],
                       "reviewText": "long text with {braces}", "overall": r[2], "summary": "s",
                       "unixReviewTime": r[3], "reviewTime": "01 1, 2014"})


def write_gz(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("".join(line + "\n" for line in lines))
    write_json(path.parent / "source.json", {"source": "amazon_beauty", "sha256": "0" * 64})
    return path


def write_csv(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    write_json(path.parent / "source.json", {"source": "amazon_beauty", "sha256": "0" * 64})
    return path


def params(k_core=3) -> Params:
    p = Params()
    return dataclasses.replace(p, preprocess=dataclasses.replace(p.preprocess, k_core=k_core))


def test_registry():
    names = {"beauty": "Beauty", "sports": "Sports_and_Outdoors", "toys": "Toys_and_Games",
             "video_games": "Video_Games", "electronics": "Electronics", "books": "Books"}
    for name, category in names.items():
        spec = get(name)
        assert spec.protocol == "leave_one_out" and spec.source.archive == "gz"
        assert spec.source.url == ("http://snap.stanford.edu/data/amazon/productGraph/categoryFiles/"
                                   f"reviews_{category}_5.json.gz")
        assert spec.source.files == (f"reviews_{category}_5.json.gz",) and spec.paper_size


def test_json_gz_through_preprocess(tmp_path):
    write_gz(tmp_path / "raw" / "reviews_Beauty_5.json.gz", [json_line(r) for r in REVIEWS])
    read = get("beauty").reader(tmp_path / "raw").collect()
    assert read.rows()[:2] == [("A2", "B01", 300), ("A1", "B01", 100)]
    m = preprocess.run("beauty", tmp_path / "raw", tmp_path / "sessions", params())
    # A1: B01@100, B02@100 (tie: file order), B03@400; A2: B03@100, B02@200, B01@300; A3: B02@50, B01@60, B03@70
    assert read_split(tmp_path / "sessions", "test").rows() == EXPECTED_TEST
    assert m["n_items"] == 3 and m["steps"][0] == {"step": "read", "sessions": 3, "clicks": 9, "items": 3}


def test_plain_json_and_csv_give_the_same_sessions(tmp_path):
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "reviews_Beauty_5.json").write_text("".join(json_line(r) + "\n" for r in REVIEWS))
    write_csv(tmp_path / "c" / "ratings_Beauty.csv", "".join(f"{u},{i},{s},{t}\n" for u, i, s, t in REVIEWS))
    for d in ("j", "c"):
        from pipeline.protocols import leave_one_out as loo
        result = loo.build(get("beauty"), tmp_path / d, params())
        assert result.splits["test"].rows() == EXPECTED_TEST, d


def test_gz_preferred_over_csv(tmp_path):
    write_gz(tmp_path / "reviews_Toys_and_Games_5.json.gz", [json_line(r) for r in REVIEWS[:2]])
    write_csv(tmp_path / "ratings_Toys_and_Games.csv", "a,b,1,2\n")
    assert get("toys").reader(tmp_path).collect().height == 2


def error_of(spec_name: str, raw: Path) -> str:
    with pytest.raises(DataError) as err:
        get(spec_name).reader(raw)
    msg = str(err.value)
    assert "\n" not in msg and "Fix:" in msg
    return msg


def test_truncated_json_line(tmp_path):
    lines = [json_line(r) for r in REVIEWS[:3]]
    lines[1] = lines[1][:40]
    write_gz(tmp_path / "reviews_Beauty_5.json.gz", lines)
    assert "line 2 is not a complete JSON object" in error_of("beauty", tmp_path)


def test_gzip_cut_short(tmp_path):
    path = write_gz(tmp_path / "reviews_Beauty_5.json.gz", [json_line(r) for r in REVIEWS * 50])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert "gzip stream is cut short" in error_of("beauty", tmp_path)
    (tmp_path / "source.json").write_text("{}")          # as if recorded by an earlier download
    with pytest.raises(DataError) as err:                 # the stage names the dataset and the real cure
        preprocess.run("beauty", tmp_path, tmp_path / "sessions", params())
    assert str(err.value).endswith(f"delete {tmp_path} and download it again (`seqpe download beauty`, "
                                   "or `--from` a good copy)")
    assert not (tmp_path / "sessions").exists()


def test_download_refuses_a_gzip_cut_short_and_keeps_nothing(tmp_path):
    """A cut-short .json.gz is refused at download (read to its end-of-stream marker), so it is never
    recorded in source.json; the good copy is then accepted."""
    from pipeline import download
    from pipeline.errors import DownloadError
    from pipeline.params import DownloadParams
    good = write_gz(tmp_path / "good" / "reviews_Beauty_5.json.gz", [json_line(r) for r in REVIEWS * 50])
    cut = tmp_path / "cut" / "reviews_Beauty_5.json.gz"
    cut.parent.mkdir()
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    raw = tmp_path / "raw"
    with pytest.raises(DownloadError, match=r"reviews_Beauty_5.json.gz is truncated or corrupt \(.*end-of-stream"):
        download.run("beauty", raw, DownloadParams(), from_path=cut, progress=False)
    assert not raw.exists()
    download.run("beauty", raw, DownloadParams(), from_path=good, progress=False)
    assert sorted(p.name for p in raw.iterdir()) == ["reviews_Beauty_5.json.gz", "source.json"]


def test_json_wrong_type_and_missing_field(tmp_path):
    write_gz(tmp_path / "a" / "reviews_Beauty_5.json.gz",
             [json_line(REVIEWS[0]), json_line(REVIEWS[1]).replace('"unixReviewTime": 100', '"unixReviewTime": "x"')])
    assert "wrong type" in error_of("beauty", tmp_path / "a")
    write_gz(tmp_path / "b" / "reviews_Beauty_5.json.gz",
             [json_line(REVIEWS[0]), json.dumps({"reviewerID": "A9", "overall": 1.0, "unixReviewTime": 5})])
    assert "line 2: item is missing" in error_of("beauty", tmp_path / "b")


def test_csv_wrong_columns_and_non_numeric(tmp_path):
    write_csv(tmp_path / "a" / "ratings_Beauty.csv", "A1,B1,5.0\nA2,B1,4.0\n")
    assert "has 3 columns, expected 4" in error_of("beauty", tmp_path / "a")
    write_csv(tmp_path / "b" / "ratings_Beauty.csv", "A1,B1,5.0,100,extra\n")
    assert "has 5 columns" in error_of("beauty", tmp_path / "b")
    write_csv(tmp_path / "c" / "ratings_Beauty.csv", "A1,B1,5.0,100\nA2,B1,4.0,yesterday\n")
    assert "line 2: timestamp 'yesterday' is not a number" in error_of("beauty", tmp_path / "c")
    write_csv(tmp_path / "d" / "ratings_Beauty.csv", "user,item,rating,timestamp\nA1,B1,5.0,100\n")
    assert "starts with a header line (user,item,rating,timestamp), and the Amazon ratings CSV is user,item,rating," \
        "timestamp with no header" in error_of("beauty", tmp_path / "d")          # it said "rating 'rating' is not a number"
    write_csv(tmp_path / "e" / "ratings_Beauty.csv", "user_id,item_id,time,cate_id\n0,13179,1400457600,584\n")
    assert "(user_id,item_id,time,cate_id) (DIN's behaviour log, which seqpe does not read: its CTR split is " \
        "`amazon_electronics`" in error_of("beauty", tmp_path / "e")
    write_csv(tmp_path / "f" / "ratings_Beauty.csv", "A1,B1,five,100\n")
    assert "line 1: rating 'five' is not a number" in error_of("beauty", tmp_path / "f")   # a value, not a header
    write_csv(tmp_path / "g" / "ratings_Beauty.csv", "A1,B1,5.0,100\r\n\r\nA1,B2,4.0,x\r\n\r\n")
    assert "line 3: timestamp 'x' is not a number" in error_of("beauty", tmp_path / "g")    # numbered as in the file


def test_blank_lines_in_the_ratings_csv_are_skipped(tmp_path):
    """Walk 39a #2: a trailing blank line (CRLF or LF) was "rating None is not a number ... no header line"."""
    from pipeline.datasets.amazon import read_ratings_csv
    write_csv(tmp_path / "a" / "ratings_Beauty.csv", "A1,B1,5.0,100\r\nA1,B2,4.0,101\r\n\r\n")
    write_csv(tmp_path / "b" / "ratings_Beauty.csv", "A1,B1,5.0,100\n\nA1,B2,4.0,101\n\n")
    write_csv(tmp_path / "c" / "ratings_Beauty.csv", "\r\n  \nA1,B1,5.0,100\nA1,B2,4.0,101\n")   # walk 40a #4:
    a, b, c = (read_ratings_csv(tmp_path / d / "ratings_Beauty.csv") for d in "abc")        # "more fields than
    assert a.equals(b) and a.equals(c)                                                     # defined in Schema"
    assert a["item"].to_list() == ["B1", "B2"] and a["timestamp"].to_list() == [100, 101]
    write_csv(tmp_path / "d" / "ratings_Beauty.csv", "\nA1,B1,5.0,100\n,,,\nA1,B2,4.0,x\n")
    with pytest.raises(DataError, match="ratings_Beauty.csv line 3 has only empty fields"):   # a record, not a blank
        read_ratings_csv(tmp_path / "d" / "ratings_Beauty.csv")                              # line: was dropped
    write_csv(tmp_path / "t" / "ratings_Beauty.csv", "A1,B1,5.0,100\nA1,B2,4.0,101\n,,,\n")   # last, too
    with pytest.raises(DataError, match="ratings_Beauty.csv line 3 has only empty fields"):   # (walk 40e #6)
        read_ratings_csv(tmp_path / "t" / "ratings_Beauty.csv")
    for name, text, line in (("u", "A1,B1,5.0,100\r\nA1,B2,4.0,101\r\n" + "\r\n" * 40000 + ",,,\r\n", 40003),
                             ("v", "A1,B1,5.0,100\nA1,B2,4.0,101\n,,,\n" + "\n" * 70000, 3),   # past the 64 KiB
                             ("w", ",,,\n,,,\n", 1)):                   # only such lines (walk 41a #6, #7)
        write_csv(tmp_path / name / "ratings_Beauty.csv", text)
        with pytest.raises(DataError, match=f"ratings_Beauty.csv line {line} has only empty fields"):
            read_ratings_csv(tmp_path / name / "ratings_Beauty.csv")
    write_csv(tmp_path / "e" / "ratings_Beauty.csv", "\n\nA1,B1,5.0,100\nA1,B2,4.0,x\n")
    with pytest.raises(DataError, match="line 4: timestamp 'x' is not a number"):           # numbered as in the file
        read_ratings_csv(tmp_path / "e" / "ratings_Beauty.csv")


def test_missing_file(tmp_path):
    assert "none of reviews_Books_5.json.gz, reviews_Books_5.json, ratings_Books.csv" in error_of("books", tmp_path)


def test_k_core_emptying_writes_nothing(tmp_path):
    write_gz(tmp_path / "raw" / "reviews_Beauty_5.json.gz", [json_line(r) for r in REVIEWS])
    with pytest.raises(DataError, match="5-core filter left no interactions"):
        preprocess.run("beauty", tmp_path / "raw", tmp_path / "sessions", params(k_core=5))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw"]



def test_download_from_the_ratings_csv_installs_it_under_its_own_name(tmp_path):
    """`seqpe download beauty --from ratings_Beauty.csv`: kept as ratings_Beauty.csv (never renamed to
    the .json.gz), recognised as present on the next plain download, and preprocessed like the JSON."""
    from pipeline import download
    from pipeline.errors import DownloadError
    from pipeline.io import read_json
    from pipeline.params import DownloadParams
    csv = tmp_path / "mine" / "ratings_Beauty.csv"
    csv.parent.mkdir()
    csv.write_text("".join(f"{u},{i},{s},{t}\n" for u, i, s, t in REVIEWS))
    raw = tmp_path / "raw"
    out = download.run("beauty", raw, DownloadParams(), from_path=csv, progress=False)
    assert sorted(p.name for p in raw.iterdir()) == ["ratings_Beauty.csv", "source.json"]
    assert "accepted in place of reviews_Beauty_5.json.gz" in out["note"]
    rec = read_json(raw / "source.json")
    assert rec["filename"] == "ratings_Beauty.csv" and rec["origin"] == "file"
    again = download.run("beauty", raw, DownloadParams(), progress=False)  # no network needed
    assert again["note"].startswith("already present")
    preprocess.run("beauty", raw, tmp_path / "sessions", params())
    assert read_split(tmp_path / "sessions", "test").rows() == EXPECTED_TEST
    # another category's CSV is not taken for this one's .json.gz; the good copy stays
    other = tmp_path / "ratings_Toys_and_Games.csv"
    other.write_text("a,b,1,2\n")
    with pytest.raises(DownloadError, match="ratings_Toys_and_Games.csv is the file of dataset 'toys', not of 'beauty'"):
        download.run("beauty", raw, DownloadParams(), from_path=other, progress=False)
    assert sorted(p.name for p in raw.iterdir()) == ["ratings_Beauty.csv", "source.json"]
    s3rec = tmp_path / "s3rec" / "Beauty.txt"          # S3-Rec's file, named as CARCA's interactions (walk 28)
    s3rec.parent.mkdir()
    s3rec.write_text("1 5 9 2\n2 7 5\n")
    with pytest.raises(DownloadError, match=r"Beauty.txt is SASRec / S3-Rec text .* not beauty's "
                                            r"reviews_Beauty_5.json.gz.*Fix: run `seqpe import NAME .*Beauty.txt "
                                            r"--format sasrec`"):
        download.run("beauty", raw, DownloadParams(), from_path=s3rec, progress=False)
    import gzip
    packed = tmp_path / "ratings_Beauty.csv.gz"          # the CSV gzipped: was installed as the JSON dump (walk 31a)
    packed.write_bytes(gzip.compress(csv.read_bytes()))
    with pytest.raises(DownloadError, match=r"ratings_Beauty.csv.gz is gzip data holding text that is not JSON lines, "
                                            r"not the JSON lines of reviews_Beauty_5.json.gz. Fix: unpack it "
                                            r"\(`gunzip -c .*ratings_Beauty.csv.gz > ratings_Beauty.csv`\)"):
        download.run("beauty", tmp_path / "raw2", DownloadParams(), from_path=packed, progress=False)
    assert not (tmp_path / "raw2").exists()
    import io
    import tarfile
    tarred = tmp_path / "ratings_Beauty.tar.gz"         # walk 43g #11: the fix was `gunzip -c`, giving a tar as .csv
    with tarfile.open(tarred, "w:gz") as tar:
        info = tarfile.TarInfo("ratings_Beauty.csv")
        info.size = len(csv.read_bytes())
        tar.addfile(info, io.BytesIO(csv.read_bytes()))
    with pytest.raises(DownloadError, match=r"ratings_Beauty.tar.gz is a gzip-compressed tar archive, not the JSON "
                                            r"lines of reviews_Beauty_5.json.gz. Fix: unpack it \(`tar xzf "):
        download.run("beauty", tmp_path / "raw2", DownloadParams(), from_path=tarred, progress=False)


# books_hllm (CAPE 001 Table 3, HLLM's filter). Core users A..E rate P..T; X is rated by A..D and by
# `lazy` (4 ratings: dropped), so X passes the one count on all rows but keeps only 4 interactions;
# `edge` has 5 ratings, one on an item rated once, so it is left with 4 and dropped by the second
# user check; A rates T twice (repeats count). Every rating counts, whatever its value.
HLLM_ROWS = ([(u, i, 1.0 + k % 5, 10 * (1 + k)) for u in "ABCDE" for k, i in enumerate("PQRST")]
             + [(u, "X", 2.0, 60) for u in "ABCD"] + [("lazy", i, 5.0, 5) for i in "PQXY"] + [("E", "Y", 3.0, 60)]
             + [("edge", i, 4.0, 7) for i in ("P", "Q", "R", "S", "rare")] + [("A", "T", 1.0, 70)])


def test_books_hllm_registry():
    spec = get("books_hllm")
    assert spec.protocol == "leave_one_out" and spec.source.archive == "none"
    assert spec.source.files == ("ratings_Books.csv",) and spec.source.url.endswith("/categoryFiles/ratings_Books.csv")
    assert spec.options == {"category": "Books", "core": "hllm", "k_core": 5, "context": 50}
    assert spec.source.name != get("books").source.name     # its own raw folder: the ratings-only file


def test_books_hllm_filters_once_like_hllm_then_leave_one_out(tmp_path):
    from pipeline import download
    from pipeline.params import DownloadParams
    csv = tmp_path / "mine" / "ratings_Books.csv"
    write_csv(csv, "".join(f"{u},{i},{r},{t}\n" for u, i, r, t in HLLM_ROWS))
    download.run("books_hllm", tmp_path / "raw", DownloadParams(), from_path=csv, progress=False)
    m = preprocess.run("books_hllm", tmp_path / "raw", tmp_path / "sessions", params(k_core=2))  # k from options
    assert [(s["step"], s["sessions"], s["clicks"], s["items"]) for s in m["steps"]] == [
        ("read", 7, 40, 8), ("hllm_users_items_5", 6, 34, 6), ("hllm_users_5_again", 5, 30, 6)]
    assert m["protocol_info"]["k_core"] == 5 and m["protocol_info"]["core"].startswith("hllm")
    # users A..E -> 1..5; items by first appearance: P Q R S T X -> 1..6; X kept with 4 interactions
    assert read_split(tmp_path / "sessions", "test").rows() == [
        (1, [1, 2, 3, 4, 5, 6, 5]), (2, [1, 2, 3, 4, 5, 6]), (3, [1, 2, 3, 4, 5, 6]), (4, [1, 2, 3, 4, 5, 6]),
        (5, [1, 2, 3, 4, 5])]
    assert read_split(tmp_path / "sessions", "valid")["items"].to_list()[0] == [1, 2, 3, 4, 5, 6]
    # the iterative 5-core of the same file (what `books` would do) also drops X: 26 interactions
    iterative = dataclasses.replace(get("books_hllm"), options={"category": "Books"})
    from pipeline.protocols import leave_one_out
    r = leave_one_out.build(iterative, tmp_path / "raw", params(k_core=5))
    assert [(s["step"], s["clicks"], s["items"]) for s in r.steps][-1] == ("k_core_round_3", 26, 5)
