"""The benchmark scripts' GPU commands, run end to end on tiny files of the canonical layout.

These scripts are what a session with a lent GPU runs first (bench/results/reproduction.md, train.md),
on a budget of device minutes: a script that breaks on an edit would spend that budget on finding out.
So each one runs here as written (`PROFILE=gpu`: every run its own process, side by side), on the CPU,
with `EXTRA` cutting each run to one epoch, on a DATA folder laid out like the canonical prepared files:
SR-GNN's pickles for Diginetica and Yoochoose 1/64 (written by `seqpe export` from the embedded sample
dataset) and S3-Rec's Beauty.txt (generated users with a successor rule). The tests check the files the
scripts promise (run folders, reports, the 004 table), not the figures.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SEQPE = BIN / "seqpe"
ONE_EPOCH = "--set train.epochs=1 --set train.patience=0"

pytestmark = pytest.mark.slow


def _seqpe(*argv: str) -> None:
    proc = subprocess.run([str(SEQPE), *argv], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, (argv, proc.stderr[-2000:])


@pytest.fixture(scope="module")
def canonical(tmp_path_factory) -> Path:
    """DATA: diginetica-srgnn/ and yoochoose1_64-srgnn/ (SR-GNN's train.txt / test.txt pickles) and
    amazon-s3rec/Beauty.txt (`user item item ...` lines), small enough for seconds of training."""
    d = tmp_path_factory.mktemp("canonical")
    work = tmp_path_factory.mktemp("sample")
    small = ["--set", "preprocess.sample.sessions=1500", "--set", "preprocess.sample.items=200"]
    _seqpe("download", "sample", str(work / "raw"), "--quiet", *small)
    _seqpe("preprocess", "sample", str(work / "raw"), str(work / "sessions"), "--quiet", *small)
    _seqpe("export", "sample", str(d / "diginetica-srgnn"), "--format", "srgnn", "--sessions", str(work / "sessions"))
    shutil.copytree(d / "diginetica-srgnn", d / "yoochoose1_64-srgnn")
    rng = np.random.default_rng(7)
    lines = []
    for user in range(1, 401):                   # 400 users: 3 batches of pmixer's 128 sequences
        item, seq = int(rng.integers(1, 61)), []
        for _ in range(int(rng.integers(4, 12))):
            seq.append(item)
            item = item % 60 + 1 if rng.random() < 0.8 else int(rng.integers(1, 61))
        lines.append(" ".join(map(str, [user, *seq])))
    (d / "amazon-s3rec").mkdir()
    (d / "amazon-s3rec" / "Beauty.txt").write_text("\n".join(lines) + "\n")
    return d


def bench(script: str, *argv: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """bench/SCRIPT ARGV... with this interpreter's seqpe and `env` (DATA, OUT, ...), run from `cwd`
    (a folder outside the repo)."""
    full = {**os.environ, "SEQPE": str(SEQPE), "PATH": f"{BIN}:{os.environ['PATH']}", **env}
    cmd = [sys.executable] if script.endswith(".py") else ["bash"]
    return subprocess.run([*cmd, str(ROOT / "bench" / script), *argv], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=600)


def _runs(root: Path) -> dict[str, dict]:
    """{config/seed-N: run.json} under a runs folder."""
    return {f"{p.parent.parent.name}/{p.parent.name}": json.loads(p.read_text()) for p in root.glob("*/seed-*/run.json")}


def test_posrec_000_gpu_profile_trains_every_run_and_reports(canonical, tmp_path):
    out = tmp_path / "repro000"
    proc = bench("bench_posrec_000.sh", cwd=tmp_path, DATA=str(canonical), OUT=str(out), PROFILE="gpu", DATASETS="diginetica",
                 MODELS="posrec stamp", ENCODINGS="none ldpe", SEEDS="1 2", EXTRA=ONE_EPOCH)
    assert proc.returncode == 0, proc.stderr[-2000:]
    queue = (out / "logs" / "queue.log").read_text()
    assert queue.count("rc=0") == 4 and "rc=1" not in queue, queue
    runs = _runs(out / "runs" / "diginetica")
    assert sorted(runs) == [f"{c}/seed-{s}" for c in ("posrec-ldpe", "posrec-none", "stamp-ldpe", "stamp-none")
                            for s in (1, 2)]
    assert {r["epochs_run"] for r in runs.values()} == {1}                     # EXTRA came last and won
    assert runs["posrec-none/seed-1"]["train"]["dim"] == 100                  # the preset is still in force
    report = (out / "report_diginetica.md").read_text()
    assert "posrec-ldpe" in report and "stamp-none" in report and "posrec-none" in report


@pytest.mark.parametrize("env, words", [({"MODELS": "posrec gru4rec"}, "MODELS takes posrec, stamp and sasrec"),
                                        ({"PROFILE": "tpu"}, "PROFILE must be cpu or gpu")])
def test_posrec_000_wrong_setting_is_one_line_before_any_work(tmp_path, env, words):
    out = tmp_path / "out"
    proc = bench("bench_posrec_000.sh", cwd=tmp_path, DATA=str(tmp_path), OUT=str(out), **env)
    assert proc.returncode == 2 and proc.stderr.strip() == proc.stderr.strip().splitlines()[0]
    assert words in proc.stderr and not out.exists()


def test_stability_gpu_profile_gives_004s_table(canonical, tmp_path):
    out = tmp_path / "stability"
    proc = bench("bench_stability.sh", cwd=tmp_path, DATA=str(canonical), OUT=str(out), PROFILE="gpu", ENCODINGS="none rotatory",
                 SEEDS="42 43", EXTRA=ONE_EPOCH)
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = _runs(out / "runs" / "beauty")
    assert sorted(runs) == ["sasrec-none/seed-42", "sasrec-none/seed-43", "sasrec-rotatory/seed-42",
                            "sasrec-rotatory/seed-43"]
    assert {r["evaluate"]["candidates"] for r in runs.values()} == {100}      # 004's protocol, as written
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| (sasrec-\w+) \| (\d+) \|", proc.stdout, re.M)}
    assert rows == {"sasrec-none": "2", "sasrec-rotatory": "2"}, proc.stdout[-1500:]
    assert "sasrec-rotatory" in (out / "report_vs_none.md").read_text()


def test_reproduction_gpu_profile_imports_and_trains_only_what_only_names(canonical, tmp_path):
    out = tmp_path / "repro"                    # DATA has no Toys / Sports files: ONLY must not ask for them
    proc = bench("bench_reproduction.sh", cwd=tmp_path, DATA=str(canonical), OUT=str(out), PROFILE="gpu",
                 ONLY="beauty:sasrec diginetica:posrec",
                 EXTRA=ONE_EPOCH)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in (out / "samples").iterdir()) == ["beauty", "diginetica"]
    names = sorted(r["name"] for r in {**_runs(out / "runs" / "beauty"), **_runs(out / "runs" / "diginetica")}.values())
    assert names == ["posrec-ldpe", "sasrec-lrpe", "sasrec-lrpe-bce"], names
    printed = [line.split()[:2] for line in proc.stdout.splitlines() if "test HR@10" in line]
    assert sorted(printed) == [["beauty", "sasrec-lrpe"], ["beauty", "sasrec-lrpe-bce"],
                               ["diginetica", "posrec-ldpe"]], proc.stdout


@pytest.mark.parametrize("script, env, words", [
    ("bench_stability.sh", {"ENCODINGS": "none rop"}, "--encoding rop --seed 42 "),
    ("bench_posrec_000.sh", {"DATASETS": "diginetica", "MODELS": "posrec", "ENCODINGS": "none ldpee"},
     "--encoding ldpee "),
    ("bench_reproduction.sh", {"ONLY": "beauty:sasrec", "EXTRA": "--set train.epoch=1"}, "train.epoch"),
])
def test_every_run_is_checked_before_the_first_trains(canonical, tmp_path, script, env, words):
    """A misspelt encoding or EXTRA key failed its own run only, in its log, and the script exited 0 (beside
    an older report); `seqpe train --check` now finds it before anything trains: one line, exit 2."""
    out = tmp_path / "out"
    proc = bench(script, cwd=tmp_path, DATA=str(canonical), OUT=str(out), PROFILE="gpu", **env)
    assert proc.returncode == 2 and _one_line(proc), proc.stderr[-2000:]
    assert "would fail: " in proc.stderr and "(nothing trained)" in proc.stderr and words in proc.stderr
    assert not (out / "runs").exists() and not (out / "logs" / "check").exists()


@pytest.mark.parametrize("model, profile", [("sasrec", "cpu"), ("sasrec", "gpu"), ("carca", "cpu"), ("carca", "gpu")])
def test_every_profile_and_model_passes_its_own_check(canonical, tmp_path, model, profile):
    """CARCA refused the train.loss=bce both profiles pass (its own BCE, counted as a key it ignores): the CPU
    CARCA study stopped at its check and trained nothing. Each MODEL x PROFILE's runs must pass `seqpe train
    --check`; training itself is cut off here (a shim), so the script ends in its 'nothing trained' failure."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(sys.executable)
    shim = tmp_path / "bin" / "seqpe"
    shim.write_text(f"""#!/bin/bash
[ "$1" = train ] || exec {SEQPE} "$@"
for a; do [ "$a" = --check ] && exec {SEQPE} "$@"; done
echo "error: not trained in this test. Fix: none" >&2; exit 1
""")
    shim.chmod(0o755)
    out = tmp_path / "out"
    proc = bench("bench_stability.sh", cwd=tmp_path, DATA=str(canonical), OUT=str(out), PROFILE=profile, MODEL=model,
                 ENCODINGS="none rope", SEEDS="42", SEQPE=str(shim))
    assert "would fail" not in proc.stderr, proc.stderr[-2000:]
    assert proc.returncode == 1 and f"logs/{model}-rope.log: error: not trained in this test" in proc.stderr, \
        proc.stderr[-2000:]


@pytest.mark.parametrize("env, words", [({"SEEDS": ""}, "SEEDS is set but empty"),
                                        ({"SEEDS": "42 abc"}, "SEEDS takes whole numbers, got 'abc'"),
                                        ({"ENCODINGS": " "}, "ENCODINGS is set but empty"),
                                        ({"SEEDS": "\t"}, "SEEDS is set but empty")])
def test_a_blank_or_wrong_list_is_refused_not_read_as_the_default(tmp_path, env, words):
    """SEEDS= (an unset shell variable) meant the whole default grid: 5 seeds x 7 encodings."""
    out = tmp_path / "out"
    proc = bench("bench_stability.sh", cwd=tmp_path, DATA=str(_beauty(tmp_path / "data")), OUT=str(out), **env)
    assert proc.returncode == 2 and _one_line(proc) and words in proc.stderr, proc.stderr
    assert not out.exists()


def test_a_run_that_fails_is_listed_and_the_script_exits_1(canonical, tmp_path):
    """Runs that pass the check can still fail (a lost GPU, a full disk): each is named with its error at the
    end and the exit code is 1; the other runs and the report still come; one seed's 004 table has no sd
    (it ended in statistics.stdev's traceback)."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(sys.executable)         # the scripts' python is seqpe's neighbour
    shim = tmp_path / "bin" / "seqpe"
    shim.write_text(f"""#!/bin/bash
for a; do [ "$a" = --check ] && exec {SEQPE} "$@"; done
for a; do [ "$a" = rotatory ] && [ -e "$(dirname "$0")/killed" ] && kill -9 $$; done
for a; do [ "$a" = rotatory ] && {{ echo "error: boom. Fix: none" >&2; exit 1; }}; done
exec {SEQPE} "$@"
""")
    shim.chmod(0o755)
    out = tmp_path / "stability with a space"
    proc = bench("bench_stability.sh", cwd=tmp_path, DATA=str(canonical), OUT=str(out), PROFILE="gpu",
                 ENCODINGS="none rotatory", SEEDS="42", EXTRA=ONE_EPOCH, SEQPE=str(shim))
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"1 run(s) failed:\n  {out}/logs/sasrec-rotatory.log: error: boom. Fix: none" in proc.stderr
    assert sorted(_runs(out / "runs" / "beauty")) == ["sasrec-none/seed-42"]
    assert re.search(r"^\| sasrec-none \| 1 \| [\d.]+ \| \| [\d.]+ \| \| \| \|$", proc.stdout, re.M), proc.stdout[-1500:]
    log = (out / "logs" / "sasrec-rotatory.log").read_text()
    assert log.startswith("=== ") and "seqpe train beauty" in log.splitlines()[0]
    (tmp_path / "bin" / "killed").touch()                # the next call's run dies without a word (a kill)
    proc = bench("bench_stability.sh", cwd=tmp_path, DATA=str(canonical), OUT=str(out), PROFILE="gpu",
                 ENCODINGS="none rotatory", SEEDS="42", EXTRA=ONE_EPOCH, SEQPE=str(shim))
    assert proc.returncode == 1 and "sasrec-rotatory.log: exit code 137, no error line (killed?" in proc.stderr, \
        proc.stderr[-2000:]                              # not the earlier call's error, still in the log
    assert (out / "logs" / "sasrec-rotatory.log").read_text().count("=== ") == 2


@pytest.mark.parametrize("vs, dataset", [("recbole", "diginetica"), ("pmixer", "beauty")])
def test_peers_seqpe_arms_run_on_the_same_batches(canonical, tmp_path, vs, dataset):
    src = {"diginetica": ["srgnn", canonical / "diginetica-srgnn"],
           "beauty": ["sasrec", canonical / "amazon-s3rec" / "Beauty.txt"]}[dataset]
    _seqpe("import", dataset, str(src[1]), "--format", src[0], "--sessions", str(tmp_path / "sessions"),
           "--samples", str(tmp_path / "samples"), "--quiet")
    args = ["--vs", vs, "--samples", str(tmp_path / "samples"), "--arms", "seqpe-full,seqpe", "--steps", "2",
            "--warm", "1", "--rounds", "1"]
    proc = bench("bench_peers.py", *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = re.findall(r"^\| (seqpe(?:-full)?) \| ([\d,]+) \|", proc.stdout, re.M)
    assert [a for a, _ in rows] == ["seqpe-full", "seqpe"] and rows[0][1] == rows[1][1], proc.stdout
    # the peer arm without its peer: one line naming what to pass
    proc = bench("bench_peers.py", *args[:4], "--arms", "peer", cwd=tmp_path)
    flag = "--recbole-python" if vs == "recbole" else "--pmixer"
    assert proc.returncode == 1 and proc.stderr.strip().startswith(flag) and len(proc.stderr.strip().splitlines()) == 1


def test_gpu_kit_epoch_and_repro_steps_run_on_the_kit(canonical, tmp_path):
    """bench_gpu.sh's epoch and repro steps, their flow on the CPU, on a kit folder as `pack` lays it out."""
    kit = tmp_path / "kit"
    (kit / "whl" / "polars").mkdir(parents=True)
    _seqpe("import", "diginetica", str(canonical / "diginetica-srgnn"), "--format", "srgnn", "--sessions",
           str(tmp_path / "sessions"), "--samples", str(kit / "samples" / "diginetica"), "--quiet")
    configs = ("b64-fp32-plain --set train.batch_size=64 --set train.precision=fp32 --set train.ce_impl=plain\n"
               "b128-fp32-chunked --set train.batch_size=128 --set train.precision=fp32 --set train.ce_impl=chunked")
    out = tmp_path / "out"
    env = dict(KIT=str(kit), OUT=str(out), DEVICE="cpu", THREADS="1", PY=sys.executable, RUNS=str(tmp_path / "runs"))
    proc = bench("bench_gpu.sh", "epoch", cwd=tmp_path, CONFIGS=configs, **env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = (out / "epoch.md").read_text()
    rows = re.findall(r"^\| (b\S+) \| (\d+) \| fp32 \| (\w+) \| False \| 2 \| [\d,]+ \| [\d,]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \|$",
                      table, re.M)                                        # two epochs a run (EPOCHS' default)
    assert rows == [("b128-fp32-chunked", "128", "chunked"), ("b64-fp32-plain", "64", "plain")], table
    runs = _runs(out / "runs_epoch" / "b64-fp32-plain")
    assert list(runs) == ["sasrec-lpe/seed-1"] and runs["sasrec-lpe/seed-1"]["device"] == "cpu"

    # a reproduction script on the kit's samples (no DATA files: the samples are there)
    proc = bench("bench_gpu.sh", "repro", "bench_posrec_000.sh", "DATASETS=diginetica", "MODELS=stamp", "SEEDS=1",
                 "EPOCHS=1", "EXTRA=--set train.lr=0.002", cwd=tmp_path, **env)     # an EXTRA word joins the step's
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "stamp-none" in (out / "report_diginetica.md").read_text()
    assert (out / "queue.log").read_text().count("rc=0") == 2
    runs = _runs(tmp_path / "runs" / "runs" / "diginetica")
    assert sorted(runs) == ["stamp-ldpe/seed-1", "stamp-none/seed-1"]
    assert {r["device"] for r in runs.values()} == {"cpu"}
    assert {(r["train"]["device"], r["train"]["lr"]) for r in runs.values()} == {("cpu", 0.002)}

    # stopped at CALL_MINUTES: every run of the script goes (its own process group), the call says so
    proc = bench("bench_gpu.sh", "repro", "bench_posrec_000.sh", "DATASETS=diginetica", "MODELS=posrec",
                 "ENCODINGS=none", "SEEDS=1", cwd=tmp_path, CALL_MINUTES="0", EXTRA="--set train.epochs=50", **env)
    assert proc.returncode == 0 and "the same call again goes on" in proc.stdout, proc.stdout[-1500:]
    assert not list((tmp_path / "runs" / "runs" / "diginetica").glob("posrec-none/seed-1/run.json"))
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path / "runs" / "runs") not in ps, "a run outlived its call"


@pytest.mark.parametrize("argv, words", [([], "say which step"), (["pack", "x"], "pack takes"),
                                         (["peers", "gensim"], "peers takes recbole or pmixer"),
                                         (["repro", "bench_grid.sh"], "repro takes bench_posrec_000.sh"),
                                         (["epoch"], "no KIT/whl/polars here"),
                                         (["repro", "bench_stability.sh", "OUT=/tmp/x"], "repro sets OUT itself"),
                                         (["repro", "bench_stability.sh", "seeds"], "VAR=VALUE words"),
                                         (["repro", "bench_stability.sh", "RUNS=/tmp/r"], "RUNS is the step's own")])
def test_gpu_kit_wrong_step_is_one_line(tmp_path, argv, words):
    proc = bench("bench_gpu.sh", *argv, cwd=tmp_path, KIT="KIT", OUT=str(tmp_path / "out"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert words in proc.stderr


def test_gpu_kit_never_replaces_a_folder_it_did_not_make(tmp_path):
    """pack's KIT and a step's runs folder are replaced only when bench_gpu.sh made them (their mark)."""
    for d in ("dg", "beauty"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "manifest.json").write_text("{}")
    (tmp_path / "pm").mkdir()
    (tmp_path / "pm" / "model.py").write_text("")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    proc = bench("bench_gpu.sh", "pack", str(tmp_path / "dg"), str(tmp_path / "beauty"), str(tmp_path / "pm"),
                 cwd=tmp_path, KIT=str(mine))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "was not made by bench_gpu.sh" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["beauty", "dg", "mine", "pm"]     # no half-made kit
    (kit := tmp_path / "kit" / "whl" / "polars").mkdir(parents=True)
    (out := tmp_path / "out" / "runs_epoch").mkdir(parents=True)
    (out / "notes.txt").write_text("mine")
    proc = bench("bench_gpu.sh", "epoch", cwd=tmp_path, KIT=str(kit.parents[1]), OUT=str(out.parent), DEVICE="cpu",
                 PY=sys.executable, CONFIGS="x --set train.batch_size=64")
    assert proc.returncode == 2 and "runs_epoch exists and was not made by bench_gpu.sh" in proc.stderr
    assert (mine / "thesis.tex").read_text() == "years of work" and (out / "notes.txt").read_text() == "mine"


def test_train_bench_times_the_steps_it_ran_across_epochs(canonical, tmp_path):
    """Walk 42a #3: with fewer batches an epoch than 5 warm-up steps + --batches, bench_train.py timed one epoch's
    steps and divided --batches full batches by that time (batch 4,096 on Diginetica: 154 steps counted as 300,
    1.95x the rate), and with 5 or fewer it failed on an unset clock. Epochs now repeat until every step has run,
    and the rate counts the samples of the timed steps."""
    samples = tmp_path / "samples"
    _seqpe("import", "diginetica", str(canonical / "diginetica-srgnn"), "--format", "srgnn", "--sessions",
           str(tmp_path / "sessions"), "--samples", str(samples), "--quiet")
    n_train = pl.scan_parquet(str(samples / "train" / "*.parquet")).select(pl.len()).collect().item()
    proc = bench("bench_train.py", "--samples", str(samples), "--model", "sasrec", "--encoding", "lpe", "--dim", "16",
                 "--layers", "1", "--batch-size", str(10 * n_train), "--batches", "7", "--ce-impl", "plain",
                 "--threads", "1", "--eval-samples", "20", "--device", "cpu", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"timed: 7 steps, {7 * n_train:,} samples" in proc.stdout, proc.stdout[-2000:]    # one batch an epoch


def test_gpu_call_runs_its_steps_under_one_deadline(canonical, tmp_path):
    """bench_gpu_call.sh, the one device call of a 15-minute loan, on the CPU: each step gets the time left to
    BUDGET, one with too little left (under 20 s) is skipped and the call ends, what ran comes back in OUT
    (reduce-overhead is refused on the CPU in one line, as on any non-CUDA device); STEPS picks the steps."""
    kit = tmp_path / "kit"
    (kit / "whl" / "polars").mkdir(parents=True)
    _seqpe("import", "diginetica", str(canonical / "diginetica-srgnn"), "--format", "srgnn", "--sessions",
           str(tmp_path / "sessions"), "--samples", str(kit / "samples" / "diginetica"), "--quiet")
    out = tmp_path / "out"
    proc = bench("bench_gpu_call.sh", cwd=tmp_path, KIT=str(kit), OUT=str(out), DEVICE="cpu", THREADS="1",
                 PY=sys.executable, WORK=str(tmp_path / "work"), BUDGET="21", STEPS="posrec tests")
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = (out / "call.log").read_text()
    assert log.startswith("no nvidia-smi\n[0s] posrec: start (limit 21s)\n"), log
    assert re.search(r"posrec: rc 0", log) and "profile" not in log, log
    assert re.search(r"tests: skipped, 1?\ds left", log) and log.rstrip().endswith("done"), log
    refused = (tmp_path / "work" / "posrec.log").read_text()
    assert "train.compile is reduce-overhead" in refused and "paper-fp32-graphs failed (rc 1)" in refused
    assert (out / "logs.tar.gz").stat().st_size > 0 and (out / "posrec.md").exists()


def test_train_bench_counts_ops_and_profiles_a_posrec_step(canonical, tmp_path):
    """bench_train.py, which bench_gpu.sh's profile step runs: throughput, --ops (aten ops and host reads
    per phase, session-graph hops) and --profile, on imported samples, PosRec at the paper's shape."""
    samples = tmp_path / "samples"
    _seqpe("import", "diginetica", str(canonical / "diginetica-srgnn"), "--format", "srgnn", "--sessions",
           str(tmp_path / "sessions"), "--samples", str(samples), "--quiet")
    proc = bench("bench_train.py", "--samples", str(samples), "--model", "posrec", "--encoding", "ldpe",
                 "--layers", "1", "--dim", "16", "--batch-size", "20", "--max-len", "50", "--batches", "3",
                 "--ops", "4", "--profile", "2", "--ce-impl", "plain", "--threads", "1", "--eval-samples", "40",
                 "--device", "cpu", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ops = re.search(r"ops per step \(4 steps\): forward ([\d.]+), backward ([\d.]+), optimiser ([\d.]+); "
                    r"host reads of a value \(_local_scalar_dense\) forward ([\d.]+)", proc.stdout)
    assert ops, proc.stdout[-3000:]
    fwd, bwd, optim, reads = map(float, ops.groups())
    assert fwd > 50 and bwd > 50 and 0 < optim < 20 and reads >= 1     # fused Adam: a few ops, not one per tensor
    graphs = re.search(r"node slots n mean ([\d.]+) \(max (\d+)\); boolean products the hop search runs: "
                       r"([\d.]+) without the early exit \(the GPU path\), ([\d.]+) with it", proc.stdout)
    assert graphs and float(graphs[3]) >= float(graphs[4]) > 0, proc.stdout[-3000:]
    assert "profile (2 steps): wall" in proc.stdout and "| posrec-ldpe |" in proc.stdout
    static = bench("bench_train.py", "--samples", str(samples), "--model", "posrec", "--encoding", "ldpe",
                   "--layers", "1", "--dim", "16", "--batch-size", "20", "--max-len", "50", "--batches", "3",
                   "--ops", "4", "--static", "--ce-impl", "plain", "--threads", "1", "--eval-samples", "40",
                   "--explain", "--dropout", "0", "--device", "cpu", cwd=tmp_path)
    assert static.returncode == 0, static.stderr[-2000:]
    assert re.search(r"^explain \(first batch \(20, \d+\)\): 1 graphs, 0 breaks$", static.stdout, re.M), static.stdout
    assert "the hop search runs 6 min-plus doublings, whatever the width (max_len 50)" in static.stdout
    reads = re.search(r"host reads of a value \(_local_scalar_dense\) forward ([\d.]+), backward ([\d.]+)",
                      static.stdout)
    assert reads and reads.groups() == ("0.0", "0.0"), static.stdout[-3000:]    # nothing waits: capturable
    shapes = re.search(r"batch shapes in one epoch: (\d+) distinct .* widths \[([\d, ]+)\]", static.stdout)
    assert shapes and all(int(w) % 8 == 0 or int(w) == 50 for w in shapes[2].split(", ")), static.stdout[-3000:]


def _one_line(proc: subprocess.CompletedProcess) -> bool:
    return proc.stderr.strip() != "" and len(proc.stderr.strip().splitlines()) == 1


def _tree(root: Path) -> dict[str, str]:
    """{relative path: text} of every file under root: what a refused script must leave as it was."""
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _beauty(root: Path, text: str = "1 2 3 4\n2 3 4 5\n") -> Path:
    """A DATA folder holding only amazon-s3rec/Beauty.txt (`text`)."""
    (root / "amazon-s3rec").mkdir(parents=True)
    (root / "amazon-s3rec" / "Beauty.txt").write_text(text)
    return root


@pytest.mark.parametrize("data", ["missing", "there"])
def test_grid_never_touches_a_users_out(tmp_path, data):
    """bench_grid.sh replaces OUT whole: a DATA without Beauty.txt stops it before OUT is touched, and an
    existing folder it did not make (no .bench_grid mark) is refused even with good inputs."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    src = tmp_path / "nonexistent" if data == "missing" else _beauty(tmp_path / "data")
    proc = bench("bench_grid.sh", cwd=tmp_path, DATA=str(src), OUT=str(mine), EPOCHS_OVERRIDE="1")
    assert proc.returncode == 2 and _one_line(proc), proc.stderr
    words = "amazon-s3rec/Beauty.txt" if data == "missing" else "was not made by bench_grid.sh"
    assert words in proc.stderr
    assert _tree(mine) == {"thesis.tex": "years of work"}


def test_grid_refuses_an_out_inside_the_repo(tmp_path):
    out = ROOT / "data" / ".." / "bench-grid-test-out"          # the repo, reached through `..`
    src = _beauty(tmp_path / "data", "not a sasrec line\n")     # should the check go, the import fails fast
    try:
        proc = bench("bench_grid.sh", cwd=tmp_path, DATA=str(src), OUT=str(out), EPOCHS_OVERRIDE="1")
        assert proc.returncode == 2 and _one_line(proc), proc.stderr
        assert "lies inside the repository" in proc.stderr and not out.exists()
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_grid_replaces_an_out_it_made_earlier(tmp_path):
    """An OUT with the .bench_grid mark is an earlier run's: replaced whole (the mark kept for the next
    run). Beauty.txt's content is only read by the import stage inside `dvc repro`, so a malformed file
    stops the script right after the replacement."""
    out = tmp_path / "grid"
    out.mkdir()
    (out / ".bench_grid").touch()
    (out / "stale.txt").write_text("from the last run")
    src = _beauty(tmp_path / "data", "1 2 3\n7\n")             # user 7 has no items
    proc = bench("bench_grid.sh", cwd=tmp_path, DATA=str(src), OUT=str(out), EPOCHS_OVERRIDE="1")
    assert proc.returncode != 0 and "has a user but no items" in proc.stderr, proc.stderr[-2000:]
    assert not (out / "stale.txt").exists() and (out / ".bench_grid").is_file()
    assert (out / "dvc.yaml").is_file() and (out / "data" / "inbox" / "Beauty.txt").read_text() == "1 2 3\n7\n"
    assert "/.bench_grid" in (out / ".git" / "info" / "exclude").read_text().splitlines()   # not in git's commits


def test_cape_grid_checks_its_runs_before_training_and_reports(tmp_path):
    """Walk 42a #4: bench_cape.sh ran no check and exited 0 with its report when a run failed (a misspelt
    encoding, SEEDS="1 x"), the error only in a log that the next call replaced. Table 2's flow on generated CTR
    data: a grid that trains and reports, then a misspelt encoding stopped before anything trains."""
    out = tmp_path / "cape"
    env = dict(GENERATED="1", SEEDS="1", DATASETS="sample_ctr", MODELS="din", OUT=str(out),
               SET="train.epochs=1 train.threads=1", GEN_SET="preprocess.sample_ctr.users=300")
    proc = bench("bench_cape.sh", cwd=tmp_path, ENCODINGS="none cape", **env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| DIN | CAPE | 1 |" in (out / "table2.md").read_text() and sorted(_runs(out / "runs" / "sample_ctr")) == [
        "din-cape/seed-1", "din-none/seed-1"]
    log = (out / "logs" / "sample_ctr_din_cape.log").read_text()
    proc = bench("bench_cape.sh", cwd=tmp_path, ENCODINGS="none capee", **env)
    assert proc.returncode == 2 and _one_line(proc), proc.stderr[-2000:]
    assert "would fail: " in proc.stderr and "capee" in proc.stderr and "(nothing trained)" in proc.stderr
    assert (out / "logs" / "sample_ctr_din_cape.log").read_text() == log
    proc = bench("bench_cape.sh", cwd=tmp_path, **{**env, "SEEDS": "1 x"})
    assert proc.returncode == 2 and "SEEDS takes whole numbers, got 'x'" in proc.stderr, proc.stderr


@pytest.mark.parametrize("script, env, words", [
    ("bench_reproduction.sh", {"PROFILE": "CPU"}, "PROFILE must be cpu, gpu or paper"),
    ("bench_reproduction.sh", {"ONLY": "beauty:sasrec beauty:bert4rec"}, "ONLY takes DATASET:MODEL pairs"),
    ("bench_posrec_000.sh", {"DATASETS": "yoochoose"}, "DATASETS takes yoochoose_1_64 and diginetica"),
    ("bench_stability.sh", {"MODEL": "bert4rec"}, "MODEL must be sasrec or carca"),
    ("bench_cape.sh", {"TABLE": "4", "GENERATED": "1"}, "TABLE must be 2 or 3"),
    ("bench_cape.sh", {"GENERATED": "yes"}, "GENERATED must be 1"),
    ("bench_grid.sh", {"PROFILE": "CPU"}, "PROFILE must be cpu or gpu"),
    ("bench_grid.sh", {"JOBS": "two"}, "JOBS must be a whole number"),
])
def test_unknown_setting_is_one_line_before_any_work(tmp_path, script, env, words):
    """An unknown value is refused, never read as some default profile (PROFILE=CPU once ran `paper`)."""
    out = tmp_path / "out"
    proc = bench(script, cwd=tmp_path, DATA=str(_beauty(tmp_path / "data")), OUT=str(out), **env)
    assert proc.returncode == 2 and _one_line(proc), proc.stderr
    assert words in proc.stderr and not out.exists()


@pytest.mark.parametrize("script, env", [("bench_stability.sh", {}), ("bench_posrec_000.sh", {}),
                                         ("bench_reproduction.sh", {"ONLY": "beauty:sasrec"}),
                                         ("bench_cape.sh", {"TABLE": "3"})])
def test_reproduction_scripts_add_only_to_an_out_they_made(tmp_path, script, env):
    """OUT is outside the repo and absent or marked by the script (.bench_NAME): a user's folder is left
    as it was; once marked (an earlier run's), the script goes on to check DATA, still writing nothing."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    src = tmp_path / "nonexistent"
    proc = bench(script, cwd=tmp_path, DATA=str(src), OUT=str(mine), **env)
    assert proc.returncode == 2 and _one_line(proc), proc.stderr
    assert f"was not made by {script}" in proc.stderr and _tree(mine) == {"thesis.tex": "years of work"}
    mark = f".{script.removesuffix('.sh')}"
    (mine / mark).touch()
    proc = bench(script, cwd=tmp_path, DATA=str(src), OUT=str(mine), **env)
    assert proc.returncode == 2 and _one_line(proc) and f"no {src}/" in proc.stderr, proc.stderr
    assert _tree(mine) == {"thesis.tex": "years of work", mark: ""}
    inside = ROOT / "data" / ".." / "bench-test-out"
    proc = bench(script, cwd=tmp_path, DATA=str(src), OUT=str(inside), **env)
    assert proc.returncode == 2 and _one_line(proc) and "lies inside the repository" in proc.stderr, proc.stderr
    assert not inside.exists()


def test_gpu_kit_repro_refuses_a_runs_folder_it_did_not_make(tmp_path):
    (runs := tmp_path / "runs").mkdir()
    (runs / "notes.txt").write_text("mine")
    proc = bench("bench_gpu.sh", "repro", "bench_posrec_000.sh", cwd=tmp_path, KIT=str(tmp_path / "kit"),
                 OUT=str(tmp_path / "out"), RUNS=str(runs), DEVICE="cpu")
    assert proc.returncode == 2 and _one_line(proc) and "was not made by bench_gpu.sh" in proc.stderr, proc.stderr
    assert _tree(runs) == {"notes.txt": "mine"} and not (tmp_path / "out").exists()


@pytest.mark.parametrize("script, flag", [("bench_study.py", "--work"), ("bench_streaming.py", "--dir")])
def test_python_benches_never_replace_a_folder_they_did_not_make(tmp_path, script, flag):
    """bench_study.py replaces --work's dvc/ and hand/, bench_streaming.py folders under --dir: a user's
    folder holding such names is refused before anything is written, as is one inside the repo."""
    mine = tmp_path / "mine"
    for name in ("dvc", "hand", "raw-x1", "yoochoose-x1-memory"):
        (mine / name).mkdir(parents=True)
        (mine / name / "notes.txt").write_text("mine")
    proc = bench(script, flag, str(mine), cwd=tmp_path)
    assert proc.returncode == 1 and _one_line(proc) and f"was not made by {script}" in proc.stderr, proc.stderr
    assert set(_tree(mine).values()) == {"mine"} and len(_tree(mine)) == 4
    inside = ROOT / "data" / ".." / "bench-test-out"
    proc = bench(script, flag, str(inside), cwd=tmp_path)
    assert proc.returncode == 1 and _one_line(proc) and "lies inside the repository" in proc.stderr, proc.stderr
    assert not inside.exists()
