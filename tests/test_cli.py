"""The CLI edge: one-line errors with exit code 1, no tracebacks, no torch for data commands."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def seqpe(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return seqpe_env({}, *args, cwd=cwd)


def seqpe_env(env: dict, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`seqpe ARGS` with `env` added to the environment."""
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=cwd,
                          env=dict(os.environ, COLUMNS="200", **env), capture_output=True, text=True)


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for frag in fragments:
        assert frag in lines[0], lines[0]


@pytest.mark.parametrize("command", ["download", "preprocess", "augment"])
def test_unknown_dataset_lists_known_ones(command, tmp_path):
    paths = [str(tmp_path / "b")] if command == "download" else [str(tmp_path / "a"), str(tmp_path / "b")]
    proc = seqpe(command, "digenetica", *paths, "--params", str(ROOT / "params.yaml"))
    assert_one_line_error(proc, "unknown dataset 'digenetica'", "diginetica", "sample")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("command", ["stats", "augment", "train", "evaluate", "download"])
def test_a_folder_where_the_dataset_name_goes_is_named_for_what_it_is(command, tmp_path):
    """`seqpe stats data/samples/sample` said "unknown dataset 'data/samples/sample'" and listed every name."""
    folder = tmp_path / "samples" / "mine"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"dataset": "sample", "stage": "augment"}))
    params = [] if command == "stats" else ["--params", str(ROOT / "params.yaml")]
    proc = seqpe(command, str(folder), *params, cwd=tmp_path)
    assert_one_line_error(proc, f"'{folder}' is a folder, not a dataset name (the first argument names the dataset). "
                                f"Fix: give the dataset first, then the folder: sample {folder}")
    proc = seqpe(command, "x/y", *params, cwd=tmp_path)                    # no such path: a path still
    assert_one_line_error(proc, "'x/y' is a path, not a dataset name", "DATASET x/y")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["samples"]           # nothing written, nothing touched
    assert list(folder.iterdir()) == [folder / "manifest.json"]
    if command in ("augment", "train"):                     # the two swapped: `seqpe train FOLDER sample` (walk 38b)
        proc = seqpe(command, str(folder), "sample", *params, cwd=tmp_path)
        assert_one_line_error(proc, f"'{folder}' is a folder, not a dataset name", f"sample {folder}")
        proc = seqpe(command, "sample", str(folder / "manifest.json"), *params, cwd=tmp_path)   # its file, not it
        kind = "sessions" if command == "augment" else "samples"
        assert_one_line_error(proc, f"{folder / 'manifest.json'} is a file, not a {kind} folder. Fix: pass the prepared "
                                    f"folder {folder} itself (its manifest.json is one part of it)")


def test_usage_errors_are_reported_without_traceback(tmp_path):
    proc = seqpe("download", "sample", "a", "b", "c")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "unexpected extra argument" in proc.stderr.lower()


def test_misspelt_param_override_is_one_line(tmp_path):
    proc = seqpe("preprocess", "sample", str(tmp_path / "a"), str(tmp_path / "b"), "--set", "preprocess.min_item_cnt=3")
    assert_one_line_error(proc, "unknown params key 'preprocess.min_item_cnt'", "min_item_count")


def test_data_commands_do_not_import_torch(tmp_path):
    code = ("import sys; from pipeline.cli import app\n"
            "try:\n    app(['datasets', '--data-dir', sys.argv[1]], standalone_mode=False)\n"
            "finally:\n    print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, COLUMNS="250"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("NO-TORCH")
    assert "diginetica" in proc.stdout and "srgnn" in proc.stdout


def test_every_data_command_runs_without_importing_torch(tmp_path):
    """download, preprocess, augment, stats, export and import on a small embedded dataset: each in a
    fresh interpreter that must finish with torch never imported (start-up time of a data CLI)."""
    code = ("import sys; from pipeline.cli import app\n"
            "try:\n    app(sys.argv[1:], standalone_mode=False)\n"
            "finally:\n    print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')\n")
    small = ["--set", "preprocess.sample.sessions=400", "--set", "preprocess.sample.items=120"]
    d = tmp_path
    commands = [
        ["download", "sample", str(d / "raw"), "--quiet", *small],
        ["preprocess", "sample", str(d / "raw"), str(d / "sessions"), "--quiet", *small],
        ["augment", "sample", str(d / "sessions"), str(d / "samples"), "--quiet"],
        ["stats", "sample", str(d / "samples")],
        ["export", "sample", str(d / "srgnn"), "--format", "srgnn", "--sessions", str(d / "sessions")],
        ["import", "again", str(d / "srgnn"), "--format", "srgnn", "--sessions", str(d / "s2"),
         "--samples", str(d / "a2")],
    ]
    for argv in commands:
        proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True,
                              env=dict(os.environ, COLUMNS="200"))
        assert proc.returncode == 0, (argv, proc.stderr[-2000:])
        assert proc.stdout.strip().endswith("NO-TORCH"), argv
    assert (d / "a2" / "manifest.json").is_file()


def test_damaged_manifest_and_unusable_paths_are_one_line(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text('{"stage": "preprocess", "n_items": ')
    assert_one_line_error(seqpe("stats", "sample", str(tmp_path / "bad")), "manifest.json is not valid JSON",
                          "re-run the stage that writes it")
    assert_one_line_error(seqpe("augment", "sample", str(tmp_path / "bad"), str(tmp_path / "out")),
                          "manifest.json is not valid JSON")
    (tmp_path / "afile").write_text("x")      # an output folder below a regular file
    proc = seqpe("download", "sample", str(tmp_path / "afile" / "raw"), "--quiet")
    assert_one_line_error(proc, "afile is a file, not a folder", "Fix: pass a path whose parent folders are folders")
    (tmp_path / "dir.md").mkdir()             # an atomic write's temporary name was the path shown
    proc = seqpe("report", str(tmp_path), "--out", str(tmp_path / "dir.md"), "--quiet")
    assert proc.returncode == 1 and ".tmp" not in proc.stderr


def test_os_errors_name_the_users_path_and_a_fix_for_the_error():
    import errno

    from pipeline.cli import _os_error
    from pipeline.io import user_path
    assert user_path("/x/.sess.p123.ab_c9.tmp/train/part-0.parquet") == "/x/sess/train/part-0.parquet"
    assert user_path("/x/.f.json.p9.q1.old") == "/x/f.json" and user_path("/x/.hidden/y") == "/x/.hidden/y"
    line = _os_error(OSError(errno.EROFS, "Read-only file system", "/ro/.sess.p1.abc.gen"))
    assert line == "Read-only file system: /ro/sess. Fix: pass a destination on a writable disk"
    assert _os_error(OSError(errno.EISDIR, "Is a directory", "/t/.r.md.p2.x.tmp")).startswith(
        "Is a directory: /t/r.md. Fix: that path is a folder")
    assert "free space" in _os_error(OSError(errno.ENOSPC, "No space left on device"))


def test_error_text_with_brackets_is_printed_verbatim(tmp_path):
    """Messages are not read as rich markup: '[sample]' (a YAML list) must survive."""
    text = re.sub(r"(?m)^datasets:\n(  - .*\n)+", "", (ROOT / "params.yaml").read_text(), count=1)
    assert "\ndatasets:" not in text
    (tmp_path / "params.yaml").write_text(text)
    proc = seqpe("preprocess", "sample", str(tmp_path / "a"), str(tmp_path / "b"), "--params",
                 str(tmp_path / "params.yaml"))
    assert_one_line_error(proc, "missing params key 'datasets'", "(default: datasets: [sample, sample_ctr])")


# --------------------------------------------------------------------------- hardening (issue 13)

def tiny_samples(root: Path, n_items: int = 24) -> Path:   # > the default cut-offs (evaluate.ks up to 20)
    """A samples folder of next-item rows `item -> item + 1` (enough for pop and a 1-epoch SASRec)."""
    import polars as pl
    from pipeline.io import write_json, write_split
    shards = []
    for split, n in (("train", 60), ("valid", 12), ("test", 12)):
        prefixes = [[(s + j) % n_items + 1 for j in range(1 + s % 3)] for s in range(n)]
        frame = pl.DataFrame({"session_id": list(range(n)), "prefix": prefixes,
                              "target": [p[-1] % n_items + 1 for p in prefixes]},
                             schema={"session_id": pl.Int64, "prefix": pl.List(pl.Int32), "target": pl.Int32})
        shards += write_split(root, split, frame)
    write_json(root / "manifest.json", {"stage": "augment", "kind": "samples", "dataset": "toyset", "protocol": "srgnn",
                                        "n_items": n_items, "shards": shards})
    return root


@pytest.mark.parametrize("setting, fragment", [
    ("train.lr=-1", "params key 'train.lr' must be > 0, got -1.0"),
    ("train.lr=nan", "params key 'train.lr' must be a finite number, got 'nan'"),   # was Adam's traceback
    ("train.dropout=1.5", "params key 'train.dropout' must be in [0, 1), got 1.5"),
    ("evaluate.ks=[0]", "params key 'evaluate.ks[0]' must be >= 1, got 0"),
    ("evaluate.ks=[10,10]", "'evaluate.ks' must be each cut-off once, in increasing order, got [10, 10]. Fix: use [10]"),
    ("evaluate.ks=[20,5]", "'evaluate.ks' must be each cut-off once, in increasing order, got [20, 5]. Fix: use [5, 20]"),
    ("study.seeds=[]", "params key 'study.seeds' must be a non-empty list of seeds"),
    ("train.threads=two", "params key 'train.threads' must be auto or a number of threads >= 0"),
])
def test_out_of_range_params_are_one_line_through_the_cli(tmp_path, setting, fragment):
    proc = seqpe("train", "sample", str(tmp_path / "samples"), str(tmp_path / "runs"), "--set", setting)
    assert_one_line_error(proc, fragment, "Fix:")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args, fragment", [
    (["--lengths", "100000"], "--lengths 100000 is longer than 1024 positions"),
    (["--lengths", "1", "2", "3", "4", "5", "6", "7", "8", "9"], "9 distinct lengths; at most 8"),
    (["--lengths", "10", "--dim", "0"], "--dim must be in 1..4096, got 0"),
])
def test_encodings_inspect_bounds_its_inputs(tmp_path, args, fragment):
    """`--lengths 100000` used to try to allocate a 40 GB dot-product matrix."""
    proc = seqpe("encodings", "inspect", "ldpe", *args, "--out", str(tmp_path / "figs"))
    assert_one_line_error(proc, fragment)
    assert not (tmp_path / "figs").exists()


def test_an_output_that_cannot_take_unicode(tmp_path):
    """`seqpe datasets` draws `·` for what is not there: an ASCII or latin-1 stdout ended it in a UnicodeEncodeError
    traceback (walk 45a #7); such characters come out as `?`."""
    proc = seqpe_env({"PYTHONIOENCODING": "ascii"}, "datasets", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "| sample " in proc.stdout and " ? " in proc.stdout
    proc = seqpe_env({"PYTHONIOENCODING": "ascii"}, "datasets", "--json", cwd=tmp_path)     # escaped, not `?`
    assert proc.returncode == 0 and "\\u00a7" in proc.stdout and "?" not in proc.stdout     # (walk 45e #3)
    assert "§" in json.dumps(json.loads(proc.stdout), ensure_ascii=False)


def test_a_missing_dependency_is_one_line(tmp_path):
    """A broken install (dvclive uninstalled) was a 46-57 line traceback, and --live found out only after the seeds
    had trained (walk 45a #4)."""
    samples = tiny_samples(tmp_path / "samples")
    code = ("import sys; sys.modules['dvclive'] = None; sys.argv[0] = 'seqpe'; from pipeline.cli import main; "
            "main()")
    proc = subprocess.run([sys.executable, "-c", code, "train", "toyset", str(samples), str(tmp_path / "runs"),
                           "--model", "pop", "--seed", "1", "--live", str(tmp_path / "live")],
                          cwd=ROOT, capture_output=True, text=True)
    assert_one_line_error(proc, "error: the Python package dvclive is missing, and seqpe needs it here. Fix: install "
                                "seqpe's dependencies again (`pip install dvclive`")
    assert not (tmp_path / "runs").exists()


def test_a_reader_that_closes_the_pipe_early():
    """`seqpe models | head -1` ended with rich's exit 1 and no word, which reads as bad input (walk 45b #5)."""
    read, write = os.pipe()
    os.close(read)                               # closed before seqpe writes a byte (its imports take a while)
    for args in (["models"], ["models", "--json"], ["--version"], ["train", "--help"]):   # click's own handler
        proc = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=ROOT, stdout=write,    # gave 1
                              stderr=subprocess.PIPE, env=dict(os.environ, COLUMNS="200"), timeout=120)  # (45h #1)
        assert proc.returncode == 141 and proc.stderr == b"", (args, proc.stderr)
    os.close(write)


def test_names_get_a_did_you_mean(tmp_path):
    proc = seqpe("train", "sampel", cwd=tmp_path)
    assert_one_line_error(proc, "unknown dataset 'sampel'. Fix: did you mean 'sample'? (known: ", "diginetica")
    proc = seqpe("trian", "sample")
    assert proc.returncode == 2 and proc.stderr == ("error: No such command 'trian'. Did you mean 'train'? Fix: see "
                                                    "`seqpe --help`\n"), proc.stderr
    # usage errors: one line too, click's exit code 2 (typer drew a box of several lines around them)
    for args, said in ((("--seed", "abc"), "error: Invalid value for '--seed': "),
                       (("--bogus",), "error: No such option: --bogus."),
                       (("--user", "3"), "error: No such option: --user. Fix"),     # not "(Possible options: --quiet)"
                       (("--sead", "3"), "error: No such option: --sead (did you mean --seed?). Fix"),
                       (("--seed",), "error: Option '--seed' requires an argument.")):
        proc = seqpe("train", "toyset", *args)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert proc.stderr.startswith(said) and proc.stderr.endswith("Fix: see `seqpe train --help`\n"), proc.stderr
    # an empty argument was taken as `.` (walk 44i #6): `seqpe report ''` reported every run below the working folder
    for args, said in ((("report", ""), "error: an argument is empty (after `report`): give it a value"),
                       (("train", "toyset", "--params", ""), "error: --params is empty: give it a value"),
                       (("report", "--out="), "error: --out is empty: give it a value"),
                       (("report", "--json", ""), "error: an argument is empty (after `report --json`)"),
                       (("report", "--json="), "error: Option '--json' does not take a value.")):
        proc = seqpe(*args, cwd=tmp_path)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert proc.stderr.startswith(said) and proc.stderr.endswith(f"see `seqpe {args[0]} --help`\n"), proc.stderr
    samples = tiny_samples(tmp_path / "samples")
    proc = seqpe("train", "toyset", str(samples), str(tmp_path / "runs"), "--model", "gru4rec", "--encoding", "rope")
    assert_one_line_error(proc, "model 'gru4rec' takes no positional encoding, so --encoding rope would be ignored")
    proc = seqpe("train", "toyset", str(samples), str(tmp_path / "runs"), "--model", "pop", "--encoding", "bogus_enc")
    assert_one_line_error(proc, "unknown encoding 'bogus_enc'")
    proc = seqpe("train", "toyset", str(samples), str(tmp_path / "runs"), "--model", "sasrek")
    assert_one_line_error(proc, "unknown model 'sasrek'. Fix: did you mean 'sasrec'?")
    assert not (tmp_path / "runs").exists()


def test_train_check_builds_the_model_and_writes_nothing(tmp_path):
    """`seqpe train --check`: every check of a real run and the model built once, so that a script queueing
    hours of runs finds a misspelt encoding or setting before the first starts; nothing is written."""
    samples = tiny_samples(tmp_path / "samples")
    state = Path(os.environ["SEQPE_STATE"])
    before = sorted(state.rglob("*")) if state.exists() else []
    proc = seqpe("train", "toyset", str(samples), str(tmp_path / "runs"), "--model", "sasrec", "--encoding", "rope",
                 "--seed", "1", "--seed", "2", "--set", "train.dim=8", "--check")
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(rf"ok: toyset sasrec-rope seeds 1, 2 would train into {re.escape(str(tmp_path / 'runs'))}"
                        r"/sasrec-rope, [\d,]+ parameters\n", proc.stdout), proc.stdout
    proc = seqpe("train", "toyset", str(samples), str(tmp_path / "runs"), "--model", "sasrec", "--encoding", "rop",
                 "--check")
    assert_one_line_error(proc, "unknown encoding 'rop'. Fix: did you mean 'rope'?")
    proc = seqpe("train", "toyset", str(samples), str(tmp_path / "runs"), "--model", "sasrec", "--set",
                 "train.epoch=1", "--check")
    assert_one_line_error(proc, "unknown params key 'train.epoch'")
    assert not (tmp_path / "runs").exists() and (sorted(state.rglob("*")) if state.exists() else []) == before


def test_evaluate_outside_the_grid_says_so_and_takes_a_baseline(tmp_path):
    """Outside the study grid evaluate reported every configuration against the first in sorted order
    without a word, and had no --baseline; a model's bare name as a baseline got no did-you-mean."""
    samples = tiny_samples(tmp_path / "samples")
    runs = tmp_path / "runs"
    for args in (("--model", "pop"), ("--model", "sasrec", "--encoding", "none", "--set", "train.epochs=1",
                                      "--set", "train.dim=8")):
        proc = seqpe("train", "toyset", str(samples), str(runs), *args, "--seed", "1", "--quiet")
        assert proc.returncode == 0, proc.stderr
    proc = seqpe("evaluate", "toyset", str(runs), str(tmp_path / "rep"), "--quiet")
    assert proc.returncode == 0 and proc.stderr == (
        "note: 'toyset' is in no study grid, so every configuration under the runs folder is reported (as with "
        "--all), tested against pop-none (the first in sorted order; --baseline names another, or --baseline none "
        "tests each model against its own MODEL-none)\n"), proc.stderr
    proc = seqpe("evaluate", "toyset", str(runs), str(tmp_path / "rep"), "--baseline", "sasrec")
    assert_one_line_error(proc, "baseline 'sasrec' is not a configuration of these runs. Fix: did you mean "
                                "'sasrec-none'?")
    proc = seqpe("report", str(runs), "--baseline", "pop")
    assert_one_line_error(proc, "Fix: did you mean 'pop-none'?")
    proc = seqpe("evaluate", "toyset", str(runs), str(tmp_path / "rep"), "--baseline", "sasrec-none")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "rep" / "summary.json").read_text())["reference"] == "sasrec-none"
    wrote = [line for line in proc.stdout.splitlines() if line.startswith("wrote ")]     # where the figures are
    assert wrote == [f"wrote {tmp_path / 'rep'}: summary.json, report.md, report.csv, comparison.csv, "
                     "comparison.png, curves.png"]
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == sorted(wrote[0].split(": ")[1].split(", "))
    # --samples is read by CTR runs only: the dataset's own next-item samples (dvc.yaml passes them) are fine,
    # a path that is not there was passed over without a word (walk 44i #4)
    proc = seqpe("evaluate", "toyset", str(runs), str(tmp_path / "rep"), "--samples", str(samples), "--quiet")
    assert proc.returncode == 0, proc.stderr
    for there, said in ((tmp_path / "nope", "does not exist"), (runs, "is not a samples folder")):
        proc = seqpe("evaluate", "toyset", str(runs), str(tmp_path / "rep"), "--samples", str(there), "--quiet")
        assert_one_line_error(proc, "--samples gives the test labels of CTR runs, and toyset's runs are next-item "
                                    f"runs, which need none ({there} {said}). Fix: drop --samples")


@pytest.mark.parametrize("module", ["pipeline", "pipeline.entry"])
def test_python_dash_m_runs_the_cli(module):
    """`python -m pipeline.entry` ran nothing and exited 0; `python -m pipeline` was refused by Python."""
    proc = subprocess.run([sys.executable, "-m", module, "--version"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("seqpe "), (proc.stdout, proc.stderr)
    proc = subprocess.run([sys.executable, "-m", module, "train", "digenetica", "a"], cwd=ROOT, capture_output=True,
                          text=True)
    assert_one_line_error(proc, "samples folder a does not exist, and 'digenetica' is no dataset seqpe registers "
                                "(did you mean 'diginetica'?)", "`seqpe import digenetica ...`")


def test_version_json_and_80_columns(tmp_path):
    proc = seqpe("--version")
    assert proc.returncode == 0 and re.fullmatch(r"seqpe \d+\.\d+\.\d+ \((git [0-9a-f]{12}(, modified)?|not a git "
                                                 r"checkout); python .*\)\n", proc.stdout), proc.stdout
    samples = tiny_samples(tmp_path / "samples")
    stats = json.loads(seqpe("stats", "toyset", str(samples), "--json").stdout)
    assert stats["n_items"] == 24 and stats["kind"] == "samples" and set(stats) >= {"dataset", "protocol", "splits"}
    for seed in ("1", "2"):
        proc = seqpe("train", "toyset", str(samples), str(tmp_path / "runs"), "--model", "pop", "--seed", seed,
                     "--quiet")
        assert proc.returncode == 0, proc.stderr
    rows = json.loads(seqpe("report", str(tmp_path / "runs"), "--json").stdout)
    assert [r["configuration"] for r in rows] == ["pop-none"] and rows[0]["seeds"] == [1, 2]
    assert set(rows[0]["metrics"]["hr@10"]) == {"mean", "std", "ci95", "n"} and 0 <= rows[0]["metrics"]["hr@10"]["mean"] <= 1
    env = dict(os.environ, COLUMNS="80")
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "report", str(tmp_path / "runs")], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "…" not in proc.stdout and max(map(len, proc.stdout.splitlines())) <= 80
    assert proc.stdout.count("pop-none") == 3 and "ndcg@20" in proc.stdout


def test_training_lines_go_to_stderr_and_tables_to_stdout(tmp_path):
    samples = tiny_samples(tmp_path / "samples")
    env = dict(os.environ, COLUMNS="80")
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "train", "toyset", str(samples), str(tmp_path / "r"),
                           "--model", "sasrec", "--encoding", "none", "--seed", "1", "--set", "train.epochs=2",
                           "--set", "train.dim=8"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.splitlines()
    assert [line.split(":")[0] for line in err] == ["toyset sasrec-none seed 1 epoch 1", "toyset sasrec-none seed 1 "
                                                    "epoch 2", "toyset sasrec-none seed 1"]
    assert "loss" not in proc.stdout and "test metrics (×100)" in proc.stdout and "…" not in proc.stdout


def test_command_help_keeps_sentences_whole():
    """typer's rich help printed a docstring's line breaks after its first paragraph as they were, so
    `seqpe import --help` cut 'Valid is carved' from the rest of its sentence."""
    proc = seqpe("import", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "Valid is carved like `preprocess` does (preprocess.valid_fraction); `train` works on the " \
           "samples folder" in proc.stdout
    proc = seqpe("report", "--help")
    assert "the tests are a paired t-test over seeds and Wilcoxon" in proc.stdout


def test_flags_show_no_value_type_and_repeatable_options_say_so():
    """typer printed `--quiet <bool>` and `--help <bool>`, as if the flags took a value, and `--seed
    <list[int]>` for an option given once per seed."""
    proc = seqpe("train", "--help")
    assert proc.returncode == 0, proc.stderr
    lines = {ln.split()[1]: ln for ln in proc.stdout.splitlines() if ln.startswith("│ --")}
    assert "<bool>" not in proc.stdout and "list[" not in proc.stdout
    assert "<" not in lines["--quiet"] and "<" not in lines["--help"]
    assert "<int> (repeatable)" in lines["--seed"] and "<str> (repeatable)" in lines["--set"]
    assert "<path>" in lines["--metrics"]
    proc = seqpe("report", "--help")   # an argument of several values showed `<list[Path]>`
    assert proc.returncode == 0, proc.stderr
    assert "list[" not in proc.stdout
    assert any("runs..." in ln and "<path>" in ln for ln in proc.stdout.splitlines())


def test_datasets_lists_what_seqpe_import_wrote(tmp_path):
    """An imported dataset outside params' imports: was missing from `seqpe datasets` ('what is on disk
    here'), so a user could not see the name to train it under."""
    src = tmp_path / "mine.txt"
    src.write_text("1 2 3 4\n2 3 4 5 6\n3 4 5 6\n")
    proc = seqpe("import", "mine", str(src), "--format", "sasrec", "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "data" / "samples" / "broken").mkdir()
    (tmp_path / "data" / "samples" / "broken" / "manifest.json").write_text("{not json")   # skipped, not fatal
    proc = seqpe("datasets", "--data-dir", str(tmp_path / "data"), "--json")
    assert proc.returncode == 0, proc.stderr
    entries = {e["dataset"]: e for e in json.loads(proc.stdout)}
    assert "broken" not in entries
    mine = entries["mine"]
    assert (mine["protocol"], mine["source"], mine["enabled"]) == ("leave_one_out", "mine.txt", False)
    assert mine["sessions"] and mine["samples"] and not mine["raw"]
    assert not entries["beauty"]["sessions"]
    for wrong, what in ((tmp_path / "dta", "does not exist"), (src, "is not a folder")):   # every dataset "absent"
        assert_one_line_error(seqpe("datasets", "--data-dir", str(wrong)), f"--data-dir {wrong} {what}",
                              "Fix: pass the project's data folder")
    proc = seqpe("import", "elsewhere", str(src), "--format", "sasrec", "--quiet", "--sessions",
                 str(tmp_path / "s"), cwd=tmp_path)                          # only its samples under data/
    assert proc.returncode == 0, proc.stderr
    proc = seqpe("stats", "elsewhere", "--json", cwd=tmp_path)               # was "unknown dataset 'elsewhere'"
    assert proc.returncode == 0 and json.loads(proc.stdout)["kind"] == "samples", proc.stderr


def test_samples_made_from_other_sessions_are_named_stale(tmp_path):
    """Sessions re-made without the samples after them (preprocess again without augment, or an import killed
    between its two folders, walk 35c #1) left samples that no longer match the sessions beside them, and
    nothing said so: `seqpe datasets` and `seqpe train` now do, from the samples' recorded sessions_manifest."""
    src = tmp_path / "mine.txt"
    src.write_text("".join(f"{u} {' '.join(str(1 + (u + j) % 30) for j in range(6))}\n" for u in range(1, 41)))
    assert seqpe("import", "mine", str(src), "--format", "sasrec", "--quiet", cwd=tmp_path).returncode == 0
    train = ("train", "mine", "data/samples/mine", "runs", "--model", "pop", "--check")

    def listed() -> dict:
        proc = seqpe("datasets", "--json", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return {e["dataset"]: e for e in json.loads(proc.stdout)}["mine"]

    proc = seqpe(*train, cwd=tmp_path)
    assert proc.returncode == 0 and "not made from the sessions" not in proc.stderr, proc.stderr
    assert listed()["stale"] is None
    manifest = tmp_path / "data" / "sessions" / "mine" / "manifest.json"
    manifest.write_text(manifest.read_text().replace("{", '{"re_made": 1, ', 1))      # the sessions changed since
    stale = listed()["stale"]
    assert stale and "data/samples/mine was not made from the sessions data/sessions/mine holds now" in stale
    assert "rerun `seqpe import mine ...` to use the sessions there" in stale
    proc = seqpe("datasets", cwd=tmp_path)
    assert proc.returncode == 0 and "stale: data/samples/mine" in proc.stdout.replace("\n", " "), proc.stdout
    proc = seqpe(*train, cwd=tmp_path)
    assert proc.returncode == 0 and "note: data/samples/mine was not made from the sessions" in proc.stderr, proc.stderr


def test_a_name_prepared_in_an_earlier_stage_is_not_an_unknown_dataset(tmp_path):
    """Walk 35b: `seqpe train digi` for an imported dataset whose samples folder was gone said "unknown dataset
    'digi'" while `seqpe datasets` listed it. A name with an earlier stage's folder is known: the missing input
    is named, with the commands that make it."""
    (tmp_path / "data" / "raw" / "mine").mkdir(parents=True)
    (tmp_path / "data" / "sessions" / "imp").mkdir(parents=True)
    (tmp_path / "data" / "sessions" / "imp" / "manifest.json").write_text('{"stage": "import"}')
    for args, said, fix in (
            (("train", "mine"), "samples folder data/samples/mine does not exist, though data/raw/mine does: 'mine' "
                                "has raw data but no samples yet", "Fix: run `seqpe preprocess mine`, then `seqpe "
                                                                   "augment mine`"),
            (("augment", "mine"), "data/sessions/mine does not exist", "Fix: run `seqpe preprocess mine`"),
            (("evaluate", "imp"), "runs folder data/runs/imp does not exist, though data/sessions/imp does",
             "Fix: run `seqpe import imp SRC --format FORMAT` again (it writes the sessions and samples together), "
             "then `seqpe train imp`"),
            (("preprocess", "imp"), "'imp' was imported (`seqpe import`, which writes data/sessions/imp and its "
                                    "samples): it has no raw data to download or preprocess", "seqpe train imp")):
        assert_one_line_error(seqpe(*args, cwd=tmp_path), said, fix)
    assert_one_line_error(seqpe("train", "mien", cwd=tmp_path), "unknown dataset 'mien'")
    # walk 35c #8: another dataset's folder copied under a new name sent the user in a circle (train: run augment;
    # augment: the folder holds another dataset's, or pass that same folder)
    (tmp_path / "data" / "sessions" / "copy").mkdir(parents=True)
    (tmp_path / "data" / "sessions" / "copy" / "manifest.json").write_text(
        '{"stage": "preprocess", "kind": "sessions", "dataset": "sample"}')
    assert_one_line_error(seqpe("train", "copy", cwd=tmp_path), "data/sessions/copy holds sample's sessions, not "
                          "those of 'copy' (a copied or renamed folder)", "Fix: name the dataset it holds ('sample', whose own "
                          "folder is data/sessions/sample); to have 'copy', delete data/sessions/copy")
    proc = seqpe("augment", "copy", cwd=tmp_path)
    assert_one_line_error(proc, "data/sessions/copy holds sample's sessions, but the command names 'copy'",
                          "or delete data/sessions/copy and make copy's own with `seqpe import copy ...`")
    assert "or pass data/sessions/copy" not in proc.stderr
    (tmp_path / "data" / "raw" / "sample").mkdir(parents=True)                 # walk 36c: the same for preprocess
    (tmp_path / "data" / "raw" / "sample" / "source.json").write_text('{"dataset": "sample_ctr", "source": "sample_ctr"}')
    assert_one_line_error(seqpe("preprocess", "sample", cwd=tmp_path), "data/raw/sample holds the raw data of "
                          "'sample_ctr'", "Fix: delete data/raw/sample and run `seqpe download sample`",
                          "or preprocess it as `seqpe preprocess sample_ctr data/raw/sample ...`")
    (tmp_path / "data" / "raw" / "sample" / "source.json").write_text('{"source": "bench ml_1m x0.01"}')
    proc = seqpe("preprocess", "sample", cwd=tmp_path)              # walk 40h #6: no `seqpe preprocess bench ...`
    assert_one_line_error(proc, "holds the raw data of 'bench ml_1m x0.01'")
    assert "preprocess it as" not in proc.stderr


def test_train_resume_points_at_the_rerun():
    """Walk 35b: a user looking for `--resume` met "No such option ... see seqpe train --help", and the help did not
    say that a rerun resumes."""
    proc = seqpe("train", "sample", "--resume")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr   # a usage error
    assert "No such option: --resume" in proc.stderr and \
        "Fix: resuming needs no option: run the same command without it" in " ".join(proc.stderr.split())
    assert "Resuming needs no option" in " ".join(seqpe("train", "--help").stdout.split())


def test_an_error_under_dvc_says_how_to_get_the_deleted_outputs_back(monkeypatch, tmp_path):
    """Walk 35a: a bad value in params.yaml failed a DVC stage after DVC had removed its outputs (runs folder,
    metrics, curves); the line said only what was wrong. Under DVC (DVC_STAGE) it says how to get them back,
    when dvc.lock records outputs of the stage and one is gone (walk 35c #7: it said so of a missing input too,
    and of outputs still there)."""
    stage, run = "train@sample-sasrec-none", "data/runs/sample/sasrec-none"
    (tmp_path / "dvc.lock").write_text(f"schema: '2.0'\nstages:\n  {stage}:\n    cmd: seqpe train sample\n    outs:\n"
                                       f"    - path: {run}\n      md5: 0123.dir\n    - path: data/metrics/x.json\n")
    (tmp_path / "data" / "metrics").mkdir(parents=True)
    (tmp_path / "data" / "metrics" / "x.json").write_text("{}")
    monkeypatch.setenv("DVC_STAGE", stage)
    bad = ("train", "sample", "--set", "train.lr=-1")
    assert_one_line_error(seqpe(*bad, cwd=tmp_path), "must be > 0", f"Fix: use e.g. 0.001 (DVC removed the outputs "
                          f"of stage {stage} before running it ({run}): `dvc checkout {stage}` puts back the cached ones)")
    (tmp_path / run).mkdir(parents=True)                                     # the outputs are there: nothing to say
    assert "DVC" not in seqpe(*bad, cwd=tmp_path).stderr
    (tmp_path / run).rmdir()
    monkeypatch.setenv("DVC_STAGE", "train@sample-pop-none")                 # a stage dvc.lock has no record of
    assert "DVC" not in seqpe(*bad, cwd=tmp_path).stderr
    monkeypatch.delenv("DVC_STAGE")
    assert "DVC" not in seqpe(*bad, cwd=tmp_path).stderr
    # outputs git keeps (a study's metrics, cache: false) are named with git's command; a stage whose outputs are
    # all DVC's says nothing of git (walk 36c #11: a preprocess stage's line told of "metrics ... kept in git")
    (tmp_path / "data" / "metrics" / "x.json").unlink()
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    monkeypatch.setenv("DVC_STAGE", stage)
    assert "git" not in seqpe(*bad, cwd=tmp_path).stderr
    (tmp_path / "data" / "metrics" / "x.json").write_text("{}")
    subprocess.run(["git", "add", "data/metrics/x.json"], cwd=tmp_path, check=True)
    (tmp_path / "data" / "metrics" / "x.json").unlink()
    assert_one_line_error(seqpe(*bad, cwd=tmp_path), "must be > 0", f"`dvc checkout {stage}` puts back the cached "
                          "ones, and `git checkout -- data/metrics/x.json` the ones kept in git)")
    # cache: false and not in git (a fresh clone's metrics): only a run makes them again (walk 38b D4)
    subprocess.run(["git", "rm", "-q", "--cached", "data/metrics/x.json"], cwd=tmp_path, check=True)
    (tmp_path / "dvc.yaml").write_text("stages:\n  train:\n    foreach: [a]\n    do:\n      cmd: seqpe train\n"
                                       "      outs:\n      - data/runs/${item}\n      metrics:\n"
                                       "      - data/metrics/${item}.json:\n          cache: false\n")
    assert_one_line_error(seqpe(*bad, cwd=tmp_path), "must be > 0", f"`dvc checkout {stage}` puts back the cached "
                          f"ones, and `dvc repro {stage}` once the value is fixed makes again those DVC does not cache)")
    (tmp_path / run).mkdir(parents=True)                                     # the cached one is there
    assert_one_line_error(seqpe(*bad, cwd=tmp_path), "must be > 0", f"(data/metrics/x.json): `dvc repro {stage}` once "
                          "the value is fixed makes again those DVC does not cache)")


def test_a_missing_prepared_folder_is_named_as_missing(tmp_path):
    """`seqpe train beauty` before any data said 'no manifest.json in data/samples/beauty: it is not a
    samples folder seqpe prepared ... or pass data/samples/beauty': the very path it had tried."""
    proc = seqpe("train", "sample", "--params", str(ROOT / "params.yaml"), cwd=tmp_path)
    assert_one_line_error(proc, "samples folder data/samples/sample does not exist",
                          "Fix: run `seqpe download sample`, then `seqpe preprocess sample`, then `seqpe augment "
                          "sample` (or `dvc repro`)")                       # from the first missing (walk 41i #3)
    assert "or pass" not in proc.stderr
    (tmp_path / "data" / "sessions" / "sample").mkdir(parents=True)       # sessions there, raw not: augment only
    (tmp_path / "data" / "sessions" / "sample" / "manifest.json").write_text("{}")       # (walk 41j #7)
    proc = seqpe("train", "sample", "--params", str(ROOT / "params.yaml"), cwd=tmp_path)
    assert_one_line_error(proc, "Fix: run `seqpe augment sample` (or `dvc repro`)")
    shutil.rmtree(tmp_path / "data")
    proc = seqpe("augment", "sample", str(tmp_path / "nope"), str(tmp_path / "out"), cwd=tmp_path)
    assert_one_line_error(proc, "sessions folder", "nope does not exist", "or pass data/sessions/sample")
    proc = seqpe("stats", "sample", cwd=tmp_path)
    assert_one_line_error(proc, "data/sessions/sample does not exist", "`seqpe augment sample` (samples)")
    assert not (tmp_path / "data").exists() and not (tmp_path / "out").exists()


def test_a_subfolder_of_a_project_is_told_its_params_yaml_is_not_read(tmp_path):
    """`cd notebooks; seqpe train beauty ../data/samples/beauty ...` trained on the built-in defaults, not the
    project's params.yaml, without a word."""
    project = tmp_path / "project"
    (project / "notebooks").mkdir(parents=True)
    (project / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    (project / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / "elsewhere").mkdir()
    below = seqpe("datasets", "--json", cwd=project / "notebooks")
    assert below.returncode == 0 and below.stderr.startswith("note: no params.yaml in this folder"), below.stderr
    assert f"--params {project / 'params.yaml'}" in below.stderr.replace("\n", "")
    for cwd in (project, tmp_path / "elsewhere"):              # the project's root, or no project at all
        proc = seqpe("datasets", "--json", cwd=cwd)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr


@pytest.mark.parametrize("setting", ["train.lr=0.01", "models.sasrec.norm=post", "encodings.cape.pos_dim=4"])
def test_evaluate_refuses_a_training_setting_it_would_ignore(tmp_path, setting):
    """`evaluate --set train.lr=0.01` reported runs trained at another lr without a word."""
    proc = seqpe("evaluate", "sample", str(tmp_path / "runs"), str(tmp_path / "out"), "--set", setting)
    assert_one_line_error(proc, f"--set {setting} sets how runs are trained, and `seqpe evaluate` reports runs")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("setting", ["evaluate.candidates=100", "evaluate.mask_history=true"])
def test_evaluate_refuses_a_scoring_setting_it_would_ignore(tmp_path, setting):
    """`evaluate --set evaluate.candidates=100` reported the full-ranking numbers the runs were scored with (walk
    31a): the protocol is applied when `train` scores a run."""
    proc = seqpe("evaluate", "sample", str(tmp_path / "runs"), str(tmp_path / "out"), "--set", setting)
    assert_one_line_error(proc, f"--set {setting} sets how runs are scored when they are trained, and `seqpe "
                                "evaluate` reports runs already scored (the report names each one's protocol)")
    assert not (tmp_path / "out").exists()


def test_preprocess_says_when_a_valid_fraction_carves_no_session(tmp_path):
    """10% of a handful of sessions rounds down to none: preprocess wrote an empty valid split without a word
    (it still writes it: `export` needs no valid), and train then said "with preprocess.valid_fraction above 0
    (e.g. 0.1; it was 0?)" though it was 0.1."""
    tiny = ["--set", "preprocess.sample.sessions=30", "--quiet"]
    assert seqpe("download", "sample", str(tmp_path / "raw"), *tiny).returncode == 0
    proc = seqpe("preprocess", "sample", str(tmp_path / "raw"), str(tmp_path / "sessions"), *tiny)
    assert proc.returncode == 0 and "note: preprocess.valid_fraction=0.1 carves no valid session out of the " \
        in proc.stderr and "`seqpe train` will refuse these samples" in proc.stderr, proc.stderr
    assert seqpe("augment", "sample", str(tmp_path / "sessions"), str(tmp_path / "samples"), *tiny).returncode == 0
    check = seqpe("train", "sample", str(tmp_path / "samples"), str(tmp_path / "runs"), "--check", "--quiet",
                  "--set", "evaluate.ks=[1]")               # a few items: HR@10 would be 1 (refused first)
    assert_one_line_error(check, "the valid split of", "has no samples", "(it was 0.1) or more raw data")
    wanted = re.search(r"valid_fraction=(0\.\d+) or more", proc.stderr).group(1)
    proc = seqpe("preprocess", "sample", str(tmp_path / "raw"), str(tmp_path / "sessions"), *tiny,
                 "--set", f"preprocess.valid_fraction={wanted}")
    assert proc.returncode == 0, proc.stderr
    valid = json.loads((tmp_path / "sessions" / "manifest.json").read_text())["splits"]["valid"]
    assert valid["sessions"] >= 1


def test_a_fitted_baseline_shows_fitted_as_its_best_epoch(capsys):
    """POP's table row read 'best epoch 0' (walk 32c): a fitted baseline has no epochs."""
    from pipeline.cli import _print_runs
    _print_runs([{"name": "pop-none/seed-1", "best_epoch": 0, "stopped": "fitted", "test": {"hr@10": 0.25}},
                 {"name": "sasrec-none/seed-1", "best_epoch": 3, "stopped": "patience", "test": {"hr@10": 0.5}}])
    rows = [line for line in capsys.readouterr().out.splitlines() if "seed-1" in line]
    assert "fitted" in rows[0] and " 0 " not in rows[0] and " 3 " in rows[1], rows


def test_a_list_elements_type_error_names_the_set_that_works(tmp_path):
    """Walk 38a D5: the fix said `--set evaluate.ks[0]=...`, which is refused as an unknown key."""
    proc = seqpe("train", "sample", str(tmp_path / "samples"), str(tmp_path / "runs"), "--set", "evaluate.ks=[5.5,10]")
    assert_one_line_error(proc, "'evaluate.ks[0]' must be int, got 5.5", "or --set evaluate.ks=[...])")


def test_datasets_run_outside_the_project_root_says_why_nothing_is_on_disk(tmp_path):
    """From inside data/ (or any folder without data/), every dataset showed as absent from disk, silently."""
    (tmp_path / "data" / "samples").mkdir(parents=True)
    proc = seqpe("datasets", cwd=tmp_path / "data")
    assert proc.returncode == 0, proc.stderr
    assert "note: no data/ folder here, so nothing shows as on disk; this folder holds samples/: pass --data-dir ." \
        in proc.stdout
    proc = seqpe("datasets", cwd=tmp_path)
    assert proc.returncode == 0 and "note: no data/" not in proc.stdout
    proc = seqpe("datasets", cwd=tmp_path / "data" / "samples")
    assert "run it from the project's root, or pass --data-dir" in proc.stdout


@pytest.mark.parametrize("error", [MemoryError("Unable to allocate 36.3 TiB for an array with shape (9983, 1000000000)"),
                                   type("OutOfMemoryError", (RuntimeError,), {})("CUDA out of memory. Tried ...\nmore")])
def test_out_of_memory_is_one_line_naming_what_to_lower(monkeypatch, capsys, error):
    """`--set train.max_len=1000000000` was numpy's MemoryError traceback, even under --check (walk 43b #2)."""
    from pipeline import cli

    def app(**kwargs):
        raise error
    monkeypatch.setattr(cli, "app", app)
    for argv, fix in ((["seqpe", "train", "sample"], "Fix: lower train.max_len (every sample is padded to it), "
                                                     "train.batch_size"),
                      (["seqpe", "download", "sample"], "Fix: lower the sizes the params or the input ask for")):
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as exit_:
            cli._main()
        assert exit_.value.code == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "error: out of memory: " in err and "Traceback" not in err
        assert fix in err, err


@pytest.mark.parametrize("argv, section, reader", [
    (["preprocess", "sample", "raw", "sessions", "--set", "train.epochs=3"], "train", "`seqpe train`"),
    (["augment", "sample", "sessions", "samples", "--set", "models.sasrec.ffn_dim=4"], "models", "`seqpe train`"),
    (["download", "sample", "raw", "--set", "evaluate.ks=[5]"], "evaluate", "`seqpe train` (and `seqpe evaluate`)"),
    (["train", "sample", "--check", "--set", "preprocess.min_item_count=3"], "preprocess", "`seqpe preprocess`"),
    (["evaluate", "sample", "--set", "augment.max_len=3"], "augment", "`seqpe augment`"),
])
def test_a_set_of_a_section_the_command_does_not_read_is_refused(tmp_path, argv, section, reader):
    """Walk 43d #7: `seqpe preprocess --set train.epochs=3`, `seqpe train --set preprocess.min_item_count=3` and
    `seqpe evaluate --set augment.max_len=3` ran without a word, the setting ignored."""
    proc = seqpe(*argv, cwd=tmp_path)
    assert_one_line_error(proc, f"`seqpe {argv[0]}`", f"not read {section}.*, so it would be ignored",
                          f"drop it: {section}.* is read by {reader}")
    assert not any(tmp_path.iterdir())
