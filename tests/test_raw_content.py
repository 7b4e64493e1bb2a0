"""Raw files are judged by their content when they arrive: `seqpe download` parses the first rows of what it
installs (a zip member, a gzip, an alternate file, a folder's files) with the dataset's own reader, and the
protocols refuse rows they would otherwise read wrong (walk 34b)."""
from __future__ import annotations

import gzip
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VIEWS = ("sessionId;userId;itemId;timeframe;eventdate\n"
         + "".join(f"{s};NA;{10 + (s * 7 + k) % 9};{k};2016-01-{1 + s % 20:02d}\n" for s in range(1, 40)
                   for k in range(3)))


def seqpe(*argv, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *argv, "--quiet"], cwd=cwd, capture_output=True,
                          text=True, env=dict(os.environ, SEQPE_STATE=str(cwd / "state")))


def one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in " ".join(proc.stderr.split()), (fragment, proc.stderr)


def test_download_reads_what_an_archive_or_a_gzip_holds_before_installing_it(tmp_path):
    """A zip whose member is comma-separated, a gzip of an HTML page and a gzip of a tar were installed as
    Diginetica's views; preprocess then said to download it again (a login), and the next --from a good file
    was refused as differing from the recorded one."""
    with zipfile.ZipFile(tmp_path / "comma.zip", "w") as z:
        z.writestr("train-item-views.csv", VIEWS.replace(";", ","))
    (tmp_path / "html.gz").write_bytes(gzip.compress(b"<!DOCTYPE html><html><body>sign in</body></html>\n"))
    for name, said in (("comma.zip", "comma.zip does not read as diginetica's train-item-views.csv: "
                                     "train-item-views.csv is separated by commas"),
                       ("html.gz", "html.gz does not read as diginetica's train-item-views.csv: "
                                   "train-item-views.csv is an HTML page")):
        proc = seqpe("download", "diginetica", "raw", "--from", name, cwd=tmp_path)
        one_line_error(proc, said, "Fix: pass the original dataset-train-diginetica.zip")
        assert not (tmp_path / "raw").exists()
    import io
    import tarfile
    buf = io.BytesIO()                               # a .tgz (walk 42d #3: "train-item-views.csv is a tar archive
    with tarfile.open(fileobj=buf, mode="w") as t:   # ... unpack it first, or pass it to `seqpe download`")
        info = tarfile.TarInfo("train-item-views.csv")
        info.size = len(VIEWS.encode())
        t.addfile(info, io.BytesIO(VIEWS.encode()))
    (tmp_path / "views.tgz").write_bytes(gzip.compress(buf.getvalue()))
    proc = seqpe("download", "diginetica", "raw", "--from", "views.tgz", cwd=tmp_path)
    one_line_error(proc, "views.tgz is a gzip-compressed tar archive (.tar.gz / .tgz), which seqpe does not unpack",
                   "Fix: unpack it (tar xzf views.tgz) and pass the train-item-views.csv inside")
    assert not (tmp_path / "raw").exists()
    with zipfile.ZipFile(tmp_path / "good.zip", "w") as z:
        z.writestr("train-item-views.csv", VIEWS)
    proc = seqpe("download", "diginetica", "raw", "--from", "good.zip", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "raw" / "train-item-views.csv").read_text() == VIEWS


def test_an_alternate_file_is_taken_by_its_content_not_its_name(tmp_path):
    """ratings_Beauty.csv holding an HTML page was installed by its name; a gzip of HTML was told to be unpacked
    as ratings_Beauty.csv."""
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "ratings_Beauty.csv").write_text("<html><body>not found</body></html>\n")
    proc = seqpe("download", "beauty", "raw", "--from", "f/ratings_Beauty.csv", cwd=tmp_path)
    one_line_error(proc, "ratings_Beauty.csv does not read as beauty's ratings_Beauty.csv", "is an HTML page")
    (tmp_path / "page.gz").write_bytes(gzip.compress(b"<html><body>not found</body></html>\n"))
    proc = seqpe("download", "beauty", "raw", "--from", "page.gz", cwd=tmp_path)
    one_line_error(proc, "page.gz is gzip data holding an HTML page", "Fix: pass the original reviews_Beauty_5.json.gz")
    assert "gunzip" not in proc.stderr and not (tmp_path / "raw").exists()
    rows = "".join(f"U{u},I{(u * 3 + k) % 7},5.0,{1_400_000_000 + k}\n" for u in range(30) for k in range(6))
    (tmp_path / "f" / "ratings_Beauty.csv").write_text(rows)
    assert seqpe("download", "beauty", "raw", "--from", "f/ratings_Beauty.csv", cwd=tmp_path).returncode == 0
    (tmp_path / "din.csv").write_text("user_id,item_id,time,cate_id\n0,13179,1400457600,584\n")   # DIN's log
    proc = seqpe("download", "beauty", "raw2", "--from", "din.csv", cwd=tmp_path)
    one_line_error(proc, "din.csv does not read as beauty's ratings_Beauty.csv: din.csv starts with a header line")
    # (walk 38b D7: "... ratings_Beauty.csv: ratings_Beauty.csv starts with a header line", the user's file misnamed)


def test_a_movielens_file_of_another_separator_is_one_line_at_download_and_preprocess(tmp_path):
    """ratings.dat separated by commas was installed, and preprocess crashed with polars' SchemaError."""
    from pipeline.datasets.movielens import read_ratings
    from pipeline.errors import DataError
    (tmp_path / "ml").mkdir()
    (tmp_path / "ml" / "ratings.dat").write_text("1,1,5,978300760\n1,2,3,978302109\n")
    (tmp_path / "ml" / "users.dat").write_text("1::F::1::10::48067\n")
    (tmp_path / "ml" / "movies.dat").write_text("1::Toy Story (1995)::Animation\n2::Jumanji (1995)::Adventure\n")
    with pytest.raises(DataError, match="ratings.dat line 1 has not 4 '::'-separated fields: '1,1,5,978300760'"):
        read_ratings(tmp_path / "ml").collect()
    proc = seqpe("download", "ml_1m", "raw", "--from", "ml", cwd=tmp_path)
    one_line_error(proc, "does not read as ml_1m's", "ratings.dat line 1 has not 4 '::'-separated fields")
    assert not (tmp_path / "raw").exists()


@pytest.mark.parametrize("streaming", ["false", "true"])
def test_a_click_without_a_timeframe_is_refused_naming_its_line(tmp_path, streaming):
    """A Diginetica row with an empty timeframe (or cut short, `1;NA;20`) was sorted first in its session."""
    lines = VIEWS.splitlines(keepends=True)
    lines[5] = "2;NA;20\n"                                     # file line 6: cut short
    (tmp_path / "views.csv").write_text("".join(lines))
    assert seqpe("download", "diginetica", "raw", "--from", "views.csv", cwd=tmp_path).returncode == 0
    proc = seqpe("preprocess", "diginetica", "raw", "sessions", "--set", f"preprocess.streaming={streaming}",
                 cwd=tmp_path)
    one_line_error(proc, "has 1 row(s) with an empty timeframe (the first on line 6",
                   "Fix: use the unmodified original file")
    assert not (tmp_path / "sessions").exists()


@pytest.mark.parametrize("streaming", ["false", "true"])
def test_blank_lines_are_skipped_and_an_undated_last_row_is_named_by_its_line(tmp_path, streaming):
    """Walk 36a: a blank line in train-item-views.csv was refused as "an empty timeframe" (SR-GNN's csv.DictReader
    skips it); a session's last row cut short before its eventdate said "rows with an empty date", no line."""
    lines = VIEWS.splitlines(keepends=True)
    (tmp_path / "views.csv").write_text("".join(lines[:4] + ["\n"] + lines[4:] + ["\n"]))
    (tmp_path / "clean.csv").write_text(VIEWS)
    opt = ("--set", f"preprocess.streaming={streaming}")
    for name in ("views", "clean"):
        assert seqpe("download", "diginetica", f"raw-{name}", "--from", f"{name}.csv", cwd=tmp_path).returncode == 0
        proc = seqpe("preprocess", "diginetica", f"raw-{name}", f"s-{name}", *opt, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    files = lambda root: {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.parquet"))}  # noqa
    assert files(tmp_path / "s-views") == files(tmp_path / "s-clean") and files(tmp_path / "s-clean")
    last = max(i for i, ln in enumerate(lines) if ln.split(";")[0] == lines[1].split(";")[0])   # session's last row
    cut = lines[:last] + [";".join(lines[last].split(";")[:4]) + "\n"] + lines[last + 1:]
    (tmp_path / "cut.csv").write_text("".join(cut))
    assert seqpe("download", "diginetica", "raw-cut", "--from", "cut.csv", cwd=tmp_path).returncode == 0
    one_line_error(seqpe("preprocess", "diginetica", "raw-cut", "s-cut", *opt, cwd=tmp_path),
                   f"has 1 session(s) whose last row has no date (the first on line {last + 1}",
                   "Fix: use the unmodified original file")


@pytest.mark.parametrize("streaming", ["false", "true"])
def test_blank_lines_in_yoochoose_clicks_are_skipped(tmp_path, streaming):
    """Walk 42d #1: one empty line at the end of yoochoose-clicks.dat (LF or CRLF), or one in the middle, was
    refused as "rows with an empty session or item id"; SR-GNN's csv.DictReader skips it, as read_diginetica does."""
    rows = [f"{s},2014-04-0{1 + s % 5}T10:0{k}:00.000Z,{200 + (s + k) % 6},0\n" for s in range(1, 40) for k in range(3)]
    (tmp_path / "clean.dat").write_text("".join(rows))
    (tmp_path / "blank.dat").write_text("".join(rows[:7] + ["\n"] + rows[7:] + ["\n"]))
    (tmp_path / "crlf.dat").write_bytes("".join(rows).replace("\n", "\r\n").encode() + b"\r\n")
    files = lambda root: {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.parquet"))}  # noqa
    for name in ("clean", "blank", "crlf"):
        assert seqpe("download", "yoochoose", f"raw-{name}", "--from", f"{name}.dat", cwd=tmp_path).returncode == 0
        proc = seqpe("preprocess", "yoochoose", f"raw-{name}", f"s-{name}", "--set",
                     f"preprocess.streaming={streaming}", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    assert files(tmp_path / "s-clean")
    assert files(tmp_path / "s-blank") == files(tmp_path / "s-clean") == files(tmp_path / "s-crlf")


DEEP = 3000          # rows before the bad one: past the 64 KiB `download` reads, as on the real files


@pytest.mark.parametrize("dataset, bad, said, streaming", [
    ("diginetica", "sessionId;userId;itemId;timeframe;eventdate", "repeats the header line ('sessionId;userId;", "true"),
    ("diginetica", "7;NA;1x;3;2016-01-02", "itemId '1x' is not a 64-bit integer", "false"),
    ("diginetica", "7;NA;12;3;05/01/2016", "eventdate '05/01/2016' is not a date YYYY-MM-DD", "false"),
    ("diginetica", "7;NA;12;3;2016-01-02;extra", "has 6 ';'-separated fields, expected 5", "false"),
    ("diginetica", "7;NA;12;3;20160102", "eventdate '20160102' is not a date YYYY-MM-DD", "false"),   # walk 42e #3:
    ("diginetica", "7;NA;99999999999999999999;3;2016-01-02", "itemId '99999999999999999999' is not a 64-bit integer",
     "false"),                                        # Python 3.11's fromisoformat takes 20160102; 2^64 missed
    ("yoochoose", "7,2014-04-05 18:01:32.938Z,12,0", "Timestamp '2014-04-05 18:01:32.938Z' is not an ISO-8601 time",
     "false"),
    ("yoochoose", "7,2014-04-05 18:01:32.938Z,12,0", "Timestamp '2014-04-05 18:01:32.938Z' is not an ISO-8601 time",
     "true"),
])
def test_a_row_that_does_not_parse_is_named_by_its_line(tmp_path, dataset, bad, said, streaming):
    """Walk 42d #2: a repeated header, a non-integer id, a date in another format, an extra field deep in the
    file (past what `download` reads) or a session's last timestamp in another format gave Polars' words, which
    name a column but no line: on a file of millions of lines the user could not find the row."""
    if dataset == "diginetica":
        head, name = "sessionId;userId;itemId;timeframe;eventdate\n", "train-item-views.csv"
        rows = [f"{1 + i // 3};NA;{10 + i % 9};{i % 3};2016-01-{1 + i % 20:02d}\n" for i in range(DEEP)]
    else:
        head, name = "", "yoochoose-clicks.dat"
        rows = [f"{1 + i // 3},2014-04-0{1 + i % 5}T10:00:0{i % 3}.000Z,{200 + i % 6},0\n" for i in range(DEEP)]
    (tmp_path / name).write_text(head + "".join(rows) + bad + "\n" + rows[0].replace("1", "9999", 1))
    assert seqpe("download", dataset, "raw", "--from", name, cwd=tmp_path).returncode == 0
    line = len(head.splitlines()) + DEEP + 1
    proc = seqpe("preprocess", dataset, "raw", "sessions", "--set", f"preprocess.streaming={streaming}",
                 cwd=tmp_path)
    one_line_error(proc, f"could not read {dataset} raw data in raw: {name} line {line:,}", said)
    assert not (tmp_path / "sessions").exists()


def test_a_ctr_history_of_items_and_categories_of_other_lengths_is_refused_at_import(tmp_path):
    """A row missing its cate_history (or with fewer categories than items) was imported, and `seqpe train` then
    refused the samples with a fix to preprocess again, which gives the same rows."""
    head = "label,user_id,item_id,cate_id,item_history,cate_history\n"
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "train.csv").write_text(head + "1,1,10,1,5^6,1^1\n0,1,11,1,5^6^10\n1,2,12,2,7,2\n"
                                                "1,1,13,1,5^6^10^11,1^1^1^1\n")
    (tmp_path / "own" / "test.csv").write_text(head + "1,1,14,1,5^6^10^11^13,1^1^1^1^1\n")
    proc = seqpe("import", "mine", "own", "--sessions", "s", "--samples", "p", cwd=tmp_path)
    one_line_error(proc, "mine: 1 row(s) whose item_history and cate_history differ in length (the first on "
                         "train.csv line 3)", "Fix: repair or drop those rows")
    assert not (tmp_path / "s").exists() and not (tmp_path / "p").exists()


def test_dins_behaviour_log_given_to_import_is_named(tmp_path):
    """Walk 42d #3: DIN's raw Amazon Electronics log was told "line 2 separates ids by ','" by `seqpe import`,
    where `download electronics --from` names it and the dataset to use."""
    (tmp_path / "din.csv").write_text("user_id,item_id,time,cate_id\n0,13179,1400457600,584\n0,29247,1400457600,339\n")
    proc = seqpe("import", "mine", "din.csv", "--sessions", "s", "--samples", "p", cwd=tmp_path)
    one_line_error(proc, "din.csv is DIN's Amazon Electronics behaviour log (header user_id,item_id,time,cate_id)",
                   "Fix: `seqpe download amazon_electronics`")
    assert not (tmp_path / "s").exists()


def test_a_ctr_file_of_a_header_only_is_named(tmp_path):
    """Walk 42d #3: "train.csv or test.csv has no rows" left the user to find which."""
    head = "label,user_id,item_id,cate_id,item_history,cate_history\n"
    for which in ("train", "test"):
        (tmp_path / which).mkdir()
        (tmp_path / which / "train.csv").write_text(head + ("" if which == "train" else "1,1,10,1,5^6,1^1\n"))
        (tmp_path / which / "test.csv").write_text(head + ("" if which == "test" else "1,1,14,1,5^6,1^1\n"))
        proc = seqpe("import", "mine", which, "--sessions", f"s-{which}", "--samples", f"p-{which}", cwd=tmp_path)
        one_line_error(proc, f"mine: {which}.csv has no rows (a header at most)")
        assert not (tmp_path / f"s-{which}").exists()


def test_fixes_name_the_dataset_and_the_params_file_the_user_gave(tmp_path):
    """`seqpe download yoochoose` was told to run `seqpe download yoochoose_1_64 --from ...` (another raw folder);
    `--params ok.yaml` lacking a key was told to add it to params.yaml."""
    from pipeline.datasets import get
    from pipeline.download import _manual_fix
    assert "`seqpe download yoochoose --from PATH/yoochoose-data.7z`" in _manual_fix("yoochoose",
                                                                                    get("yoochoose").source)
    assert "`seqpe download yoochoose_1_4 --from" in _manual_fix("yoochoose_1_4", get("yoochoose_1_4").source)
    (tmp_path / "ok.yaml").write_text("preprocess:\n  min_item_count: 7\n")
    proc = seqpe("preprocess", "diginetica", "raw", "sessions", "--params", "ok.yaml", cwd=tmp_path)
    one_line_error(proc, "missing params key", "Fix: add it to ok.yaml")


def test_a_row_with_an_extra_field_and_a_dangling_destination_are_named_plainly(tmp_path):
    """A Yoochoose row with a fifth field gave Polars' advice on its own API (`extra_columns='ignore'`); a link to a
    missing folder as the destination was called "a file, not a folder"."""
    rows = "".join(f"{s},2014-04-0{1 + s % 5}T10:0{k}:00.000Z,{200 + (s + k) % 6},0\n" for s in range(1, 30)
                   for k in range(3))
    (tmp_path / "yoochoose-clicks.dat").write_text(rows + "30,2014-04-05T10:00:00.000Z,201,0,extra\n")
    proc = seqpe("download", "yoochoose", "raw", "--from", "yoochoose-clicks.dat", cwd=tmp_path)
    one_line_error(proc, "does not read as yoochoose's yoochoose-clicks.dat: a row has more fields than the file's "
                         "columns")                          # the whole file is within the rows download reads
    assert "extra_columns" not in proc.stderr
    import polars as pl

    from pipeline.errors import DataError
    from pipeline.protocols import reading
    with pytest.raises(DataError, match="could not read it: a row has more fields than the file's columns. Fix"):
        with reading("it"):                                   # a longer file: preprocess says the same
            pl.read_csv(tmp_path / "yoochoose-clicks.dat", has_header=False, new_columns=["a", "b", "c", "d"])
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    proc = seqpe("preprocess", "diginetica", "raw", "dangling", cwd=tmp_path)
    one_line_error(proc, f"dangling is a link to {tmp_path / 'nowhere'}, which does not exist")


def test_a_folder_of_srgnn_pickles_given_to_download_names_import(tmp_path):
    """Walk 38b D6: SR-GNN's preprocessed folder given to `download diginetica --from` was told only to pass the
    folder holding train-item-views.csv; S3-Rec's Beauty.txt given to download already named `seqpe import`."""
    import pickle
    (tmp_path / "srgnn").mkdir()
    (tmp_path / "srgnn" / "all_train_seq.txt").write_bytes(pickle.dumps([[1, 2, 3]], protocol=2))
    proc = seqpe("download", "diginetica", "raw", "--from", "srgnn", cwd=tmp_path)
    one_line_error(proc, "srgnn has no train-item-views.csv", "`seqpe import NAME srgnn --format srgnn`")
    (tmp_path / "srgnn" / "all_train_seq.txt").write_text("1 2 3\n")              # not SR-GNN's: no such hint
    assert "seqpe import" not in seqpe("download", "diginetica", "raw", "--from", "srgnn", cwd=tmp_path).stderr
    assert not (tmp_path / "raw").exists()
