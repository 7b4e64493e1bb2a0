"""`seqpe import NAME FOLDER --format kuaivideo_x1 | amazonelectronics_x1`: one's own CTR files in a
BARS benchmark's layout get the very samples `seqpe preprocess` + `seqpe augment` give the benchmark's
files (same protocol, options and vocabulary), under their own name, and train and evaluate."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from pipeline import formats
from pipeline.errors import DataError, ParamsError
from pipeline.params import Params, load_params

ROOT = Path(__file__).resolve().parents[1]


def seqpe(*argv, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *argv, "--quiet"], cwd=cwd, capture_output=True,
                          text=True, env=dict(os.environ, SEQPE_STATE=str(cwd / "state")))


def parquet_bytes(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*.parquet"))}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Each embedded CTR sample downloaded, preprocessed and augmented by its registered stages."""
    root = tmp_path_factory.mktemp("ctrimport")
    for name in ("sample_kuai", "sample_ctr"):
        for argv in (("download", name, f"raw-{name}"), ("preprocess", name, f"raw-{name}", f"sessions-{name}"),
                     ("augment", name, f"sessions-{name}", f"samples-{name}")):
            proc = seqpe(*argv, cwd=root)
            assert proc.returncode == 0, proc.stderr
    return root


@pytest.mark.parametrize("name, fmt", [("sample_kuai", "kuaivideo_x1"), ("sample_ctr", "amazonelectronics_x1")])
def test_imported_files_give_the_registered_stages_samples_byte_for_byte(prepared, name, fmt):
    root = prepared
    raw = root / f"raw-{name}"
    proc = seqpe("import", f"own_{name}", str(raw), "--sessions", f"own-sessions-{name}", "--samples",
                 f"own-samples-{name}", cwd=root)                          # --format auto: told by the header
    assert proc.returncode == 0, proc.stderr
    assert parquet_bytes(root / f"own-sessions-{name}") == parquet_bytes(root / f"sessions-{name}")
    assert parquet_bytes(root / f"own-samples-{name}") == parquet_bytes(root / f"samples-{name}")
    assert len(parquet_bytes(root / f"own-samples-{name}")) >= 4          # splits and vocabulary tables
    sessions = json.loads((root / f"own-sessions-{name}" / "manifest.json").read_text())
    assert (sessions["stage"], sessions["dataset"], sessions["protocol"]) == ("import", f"own_{name}", "ctr")
    assert sorted(sessions["source"]) == ["test.csv", "train.csv"]
    assert sessions["source"]["train.csv"] == hashlib.sha256((raw / "train.csv").read_bytes()).hexdigest()
    assert sessions["protocol_info"]["format"] == fmt        # `seqpe datasets` showed "? format" (walk 32b)
    nested = root / f"nested-{name}" / "KuaiVideo_x1"            # as BARS' zip unpacks: one folder below
    nested.mkdir(parents=True)
    for f in ("train.csv", "test.csv"):
        (nested / f).write_bytes((raw / f).read_bytes())
    proc = seqpe("import", f"nested_{name}", str(nested.parent), "--sessions", f"n-{name}", "--samples",
                 f"m-{name}", cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert parquet_bytes(root / f"m-{name}") == parquet_bytes(root / f"samples-{name}")
    proc = seqpe("import", f"again_{name}", str(raw), "--format", fmt, "--sessions", f"x-{name}", "--samples", f"y-{name}", cwd=root)
    assert proc.returncode == 0, proc.stderr


def test_an_imported_ctr_dataset_trains_and_evaluates(prepared):
    root = prepared
    assert seqpe("import", "mine", str(root / "raw-sample_kuai"), "--sessions", "s", "--samples", "a",
                 cwd=root).returncode == 0
    proc = seqpe("train", "mine", "a", "runs", "--model", "din", "--encoding", "cape", "--set", "train.epochs=1",
                 cwd=root)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((root / "runs" / "din-cape" / "seed-1" / "run.json").read_text())
    assert record["dataset"] == "mine" and record["task"] == "ctr" and 0 < record["test"]["auc"] < 1
    proc = seqpe("evaluate", "mine", "runs", "reports", cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert "| mine | ctr | din | cape |" in (root / "reports" / "report.md").read_text()


def test_refusals_name_the_problem_and_write_nothing(prepared, tmp_path):
    raw, p = prepared / "raw-sample_kuai", Params()
    out = (tmp_path / "s", tmp_path / "a")
    with pytest.raises(DataError, match=r"'kuaivideo' is a registered dataset: its published files are fetched and "
                                        r"checked \(md5\) by `seqpe download kuaivideo`.*e\.g\. kuaivideo_own"):
        formats.import_dataset("kuaivideo", raw, "auto", *out, p)
    with pytest.raises(DataError, match=r"'sample_ctr' is a registered dataset that seqpe generates .*Fix: import "
                                        r"under another name, e.g. sample_ctr_own$"):      # no "published files"
        formats.import_dataset("sample_ctr", raw, "auto", *out, p)
    with pytest.raises(DataError, match=r"train.csv has kuaivideo_x1's columns, not amazonelectronics_x1's\. "
                                        r"Fix: pass --format kuaivideo_x1"):
        formats.import_dataset("mine", raw, "amazonelectronics_x1", *out, p)
    half = tmp_path / "half"
    half.mkdir()
    (half / "train.csv").write_bytes((raw / "train.csv").read_bytes())
    with pytest.raises(DataError, match=r"test.csv not found in .*half\. Fix: --format kuaivideo_x1 reads a folder "
                                        r"holding train.csv and test.csv"):
        formats.import_dataset("mine", half, "auto", *out, p)
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "train.csv").write_text("user,item,click\n1,2,1\n")
    with pytest.raises(DataError, match=r"has the columns user,item,click, neither BARS CTR layout"):
        formats.import_dataset("mine", odd, "auto", *out, p)
    bad = tmp_path / "bad"
    bad.mkdir()
    lines = (raw / "train.csv").read_text().splitlines(keepends=True)
    (bad / "train.csv").write_text("".join(lines[:5]) + "abc" + lines[5][lines[5].index(","):] + "".join(lines[6:40]))
    (bad / "test.csv").write_text((raw / "test.csv").read_text())
    with pytest.raises(DataError, match=r"could not parse `abc`.*Fix: check .*bad's train.csv and test.csv: whole, "
                                        r"and in kuaivideo_x1's layout"):
        formats.import_dataset("mine", bad, "auto", *out, p)
    assert not any(path.exists() for path in out)


def test_a_ctr_format_in_params_imports_points_to_the_command(tmp_path):
    """The study's DVC import stages are next-item only: a CTR import there is refused with the command to run."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["imports"] = {"mine": {"path": "inbox/kuai", "format": "kuaivideo_x1"}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    with pytest.raises(ParamsError, match=r"imports.mine.format': kuaivideo_x1 \(CTR files\) is imported with "
                                          r"`seqpe import` only.*seqpe import mine inbox/kuai --format kuaivideo_x1"):
        load_params(tmp_path / "params.yaml")


def _edited(src: Path, dst: Path, edit) -> Path:
    """A copy of the BARS folder `src` whose train.csv lines go through `edit` (a list of lines -> lines)."""
    dst.mkdir()
    lines = (src / "train.csv").read_text().splitlines(keepends=True)
    (dst / "train.csv").write_text("".join(edit(lines)))
    (dst / "test.csv").write_bytes((src / "test.csv").read_bytes())
    return dst


def _field(line: str, i: int, value: str) -> str:
    fields = line.rstrip("\n").split(",")
    fields[i] = value
    return ",".join(fields) + "\n"


@pytest.mark.parametrize("edit, problem", [
    # an empty user fell out of both train and valid (the last_per_user join) and the import said nothing
    (lambda ls: [ls[0], _field(ls[1], 1, ""), *ls[2:]],
     r"1 row\(s\) with an empty user_id \(the first on train.csv line 2\)\. Fix: fill or drop those rows"),
    (lambda ls: [ls[0], *ls[1:4], _field(ls[4], 0, ""), *ls[5:]],        # an empty label was imported
     r"1 row\(s\) with an empty label \(the first on train.csv line 5\)"),
    (lambda ls: [ls[0], _field(ls[1], 3, ""), *ls[2:]],                   # "re-run `seqpe preprocess`"
     r"1 row\(s\) with an empty cate_id \(the first on train.csv line 2\)"),
    (lambda ls: [ls[0].replace(",", ", "), *ls[1:]],                      # a Polars SchemaError traceback
     r"train.csv's header has spaces around its column names \(' user_id'\)\. Fix: write the header and the rows "
     r"with bare commas: label,user_id,item_id"),
    (lambda ls: [*ls[:3], "\n", *ls[3:]], r"train.csv line 4 is blank \(every field empty\)\. Fix: remove that line"),
    (lambda ls: [ls[0], _field(ls[1], 2, "2147483647"), *ls[2:]],         # a Polars InvalidOperationError traceback
     r"an item or category id above 2,147,483,646, the largest seqpe stores \(largest item id 2,147,483,647\)\. "
     r"Fix: renumber the ids"),
    (lambda ls: [*ls[:2], _field(ls[2], 4, "3^^4"), *ls[3:]],             # polars' "failed in column ''" (walk 32b)
     r"history lists that are not '\^'-separated integer ids \(train.csv line 3, item_history: '3\^\^4'\)"),
])
def test_ones_own_ctr_files_with_empty_fields_or_odd_lines_are_refused_naming_the_line(prepared, tmp_path, edit,
                                                                                       problem):
    src = _edited(prepared / "raw-sample_ctr", tmp_path / "own", edit)
    out = (tmp_path / "s", tmp_path / "a")
    with pytest.raises(DataError, match=problem):
        formats.import_dataset("mine", src, "auto", *out, Params())
    assert not any(path.exists() for path in out)


def test_blank_lines_ending_a_ctr_file_are_dropped_and_time_order_is_checked(prepared, tmp_path):
    """Blank lines at the end of train.csv (an editor's habit) failed as "rows without a target item"; a
    KuaiVideo-layout train.csv out of time order got an arbitrary valid split (its last rows) in silence."""
    raw = prepared / "raw-sample_ctr"
    src = _edited(raw, tmp_path / "blank", lambda ls: [*ls, "\n", "\n"])
    formats.import_dataset("mine", src, "auto", tmp_path / "s", tmp_path / "a", Params())
    formats.import_dataset("mine", raw, "auto", tmp_path / "s0", tmp_path / "a0", Params())
    assert parquet_bytes(tmp_path / "a") == parquet_bytes(tmp_path / "a0")
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert manifest["protocol_info"]["blank_lines_dropped"] == 2
    kuai = prepared / "raw-sample_kuai"
    late = _edited(kuai, tmp_path / "late", lambda ls: [ls[0], ls[-1], *ls[1:-1]])   # the last row moved first
    out = (tmp_path / "ks", tmp_path / "ka")
    with pytest.raises(DataError, match=r"mine: train.csv is not in time order \(line 3's timestamp is earlier than "
                                        r"line 2's; 1 such step back\).*Fix: sort train.csv's rows by timestamp"):
        formats.import_dataset("mine", late, "auto", *out, Params())
    assert not any(path.exists() for path in out)


def test_ones_own_compressed_or_empty_csvs_and_a_valid_split_of_nothing_get_fixes_for_ones_own_files(prepared,
                                                                                                    tmp_path):
    """They were told to `seqpe download DATASET` (or, gzipped one by one, that the folder had no
    all_train_seq.txt), and an import whose valid_fraction carved no row exited 0 for `seqpe train` to fail."""
    import gzip
    raw, out = prepared / "raw-sample_kuai", (tmp_path / "s", tmp_path / "a")
    packed = tmp_path / "packed"
    packed.mkdir()
    for name in ("train.csv", "test.csv"):
        (packed / f"{name}.gz").write_bytes(gzip.compress((raw / name).read_bytes()))
    with pytest.raises(DataError, match=r"packed holds train.csv.gz, a compressed train.csv\. Fix: unpack train.csv "
                                        r"and test.csv in that folder first \(e\.g\. `gunzip .*train.csv.gz`\)"):
        formats.import_dataset("mine", packed, "auto", *out, Params())
    named = tmp_path / "named"
    named.mkdir()
    (named / "train.csv").write_bytes(gzip.compress((raw / "train.csv").read_bytes()))
    (named / "test.csv").write_bytes((raw / "test.csv").read_bytes())
    with pytest.raises(DataError, match=r"train.csv is gzip data, not the text file seqpe reads\. Fix: unpack it first "
                                        r"\(`mv .*train.csv .*train.csv.gz && gunzip"):
        formats.import_dataset("mine", named, "auto", *out, Params())
    (named / "train.csv").write_bytes(b"")
    with pytest.raises(DataError, match=r"train.csv is empty\. Fix: write the header line and the rows into it"):
        formats.import_dataset("mine", named, "kuaivideo_x1", *out, Params())
    with pytest.raises(ParamsError, match=r"preprocess.valid_fraction=1e-06 carves no valid row out of the .* rows of "
                                          r"train.csv.*Fix: run it with --set preprocess.valid_fraction=0.1 or more"):
        formats.import_dataset("mine", raw, "auto", *out, load_params(ROOT / "params.yaml",
                                                                      ["preprocess.valid_fraction=0.000001"]))
    assert not any(path.exists() for path in out)


def test_the_vocabularies_count_the_history_tokens_max_history_cuts_as_bars_does(tmp_path):
    """Walk 39a #1: FuxiCTR counts every token of a raw history and cuts to max_len only when encoding, so an
    item seen 6 times in the cut part and 5 in the kept part passes KuaiVideo's min count 10. seqpe counted the
    kept part only and sent it to OOV. The vocabularies must not depend on where preprocess cuts."""
    rng = random.Random(4)
    raw = tmp_path / "kv"
    raw.mkdir()
    header = "timestamp,user_id,item_id,is_click,is_like,is_follow,pos_items,neg_items\n"
    common = list(range(100, 112))
    train = []
    for r in range(60):
        hist = [rng.choice(common) for _ in range(12)]
        if r < 6:
            hist[2] = 7                  # in the part max_history 5 cuts off
        elif r < 11:
            hist[-1] = 7                 # in the kept part
        neg = [rng.choice(common) for _ in range(3)]
        train.append(f"{1000 + r},{r % 7},{rng.choice(common)},{r % 2},0,0,{'^'.join(map(str, hist))},"
                     f"{'^'.join(map(str, neg))}\n")
    test = [f"{2000 + r},{r % 7},{rng.choice(common + [7])},{r % 2},0,0,7^{common[r % 12]},\n" for r in range(10)]
    (raw / "train.csv").write_text(header + "".join(train))
    (raw / "test.csv").write_text(header + "".join(test))
    vocab = {}
    for cut in (5, 0, 12):
        p = Params()
        p = dataclasses.replace(p, preprocess=dataclasses.replace(p.preprocess, max_history=cut),
                                augment=dataclasses.replace(p.augment, ctr_vocab="train_file"))
        formats.import_dataset("mykv", raw, "kuaivideo_x1", tmp_path / f"s{cut}", tmp_path / f"a{cut}", p)
        vocab[cut] = pl.read_parquet(tmp_path / f"a{cut}" / "vocab" / "item.parquet")
    assert vocab[5].filter(pl.col("raw_id") == 7)["count_hist_items"].to_list() == [11]     # 6 cut + 5 kept
    assert vocab[5].equals(vocab[0]) and vocab[0].equals(vocab[12])          # the same whatever the cut
    overflow = pl.read_parquet(tmp_path / "s5" / "history_overflow.parquet")
    assert overflow.filter((pl.col("key") == 8) & (pl.col("column") == "hist_items"))["count"].sum() == 6
    assert pl.read_parquet(tmp_path / "s0" / "history_overflow.parquet").height == 0        # nothing cut
    kept = pl.read_parquet(tmp_path / "a5" / "test" / "part-00000.parquet")["hist_items"].list.first()
    assert kept.ne(1).all()              # item 7 (sessions id 8) has its own row in test, not OOV


def test_a_train_split_the_valid_rule_takes_whole_is_said_as_such(tmp_path):
    """Walk 41i #2: AmazonElectronics_x1's valid rule holds out each user's last train position; with one position
    per user it took every train row, and the error said "check the raw files are complete" of complete files."""
    src = tmp_path / "allvalid"
    src.mkdir()
    head = "label,user_id,item_id,cate_id,item_history,cate_history\n"
    (src / "train.csv").write_text(head + "1,1,5,1,3^4,1^1\n0,1,6,1,3^4,1^1\n1,2,5,1,7^8,1^1\n0,2,6,1,7^8,1^1\n")
    (src / "test.csv").write_text(head + "1,1,5,1,3^4^5,1^1^1\n0,2,6,1,7^8^5,1^1^1\n")
    proc = seqpe("import", "myallvalid", str(src), "--format", "amazonelectronics_x1", cwd=tmp_path)
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(err) == 1, proc.stderr
    assert "the valid rule (per user, the train rows with the longest history (the last train position)) took all " \
           "4 train rows" in err[0] and "give each user at least two train positions" in err[0], err[0]
