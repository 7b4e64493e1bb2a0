"""The CLI edge: one-line errors with exit code 1, no tracebacks, no torch for data commands."""
from __future__ import annotations
import re

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def seqpe(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)


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
    assert_one_line_error(proc, "afile", "Fix: check that path")


def test_error_text_with_brackets_is_printed_verbatim(tmp_path):
    """Messages are not read as rich markup: '[sample]' (a YAML list) must survive."""
    text = re.sub(r"(?m)^datasets:\n(  - .*\n)+", "", (ROOT / "params.yaml").read_text(), count=1)
    assert "\ndatasets:" not in text
    (tmp_path / "params.yaml").write_text(text)
    proc = seqpe("preprocess", "sample", str(tmp_path / "a"), str(tmp_path / "b"), "--params",
                 str(tmp_path / "params.yaml"))
    assert_one_line_error(proc, "missing params key 'datasets'", "(default: datasets: [sample, sample_ctr])")
