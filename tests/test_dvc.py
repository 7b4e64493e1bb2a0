"""Real `dvc repro` runs of the pipeline and its study grid in temporary git repos: every stage, stable
per-configuration metrics, curves and plots, nothing recomputed twice, one encoding's options
retraining only its configuration, hand runs surviving, `dvc.lock` reproduced by a fresh clone, the
teammate workflow through a remote, a queued experiment grid, and a killed repro that resumes."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow

# Small enough to stay fast on 2 cores, big enough that every stage has real work.
TINY = {
    "preprocess": {"sample": {"sessions": 800, "items": 200, "days": 60, "seed": 7},
                   "sample_ctr": {"users": 120, "items": 100, "cates": 8, "max_length": 12}},
    "train": {"epochs": 1, "dim": 8, "layers": 1, "batch_size": 256, "max_len": 10},
    "study": {"seeds": [1, 2], "next_item": {"encodings": ["lpe", "rope"], "baselines": []},
              "ctr": {"encodings": ["cape"], "train": {"epochs": 1, "batch_size": 256, "max_len": 12}}},
    "encodings": {"lpe": {}, "rope": {"base": 10000.0}, "cape": {}},
}
CONFIGS = ("sasrec-lpe", "sasrec-rope")


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if k != "SEQPE_STATE"}   # the real default: <repo>/.seqpe
    e["PATH"] = f"{BIN}{os.pathsep}{e.get('PATH', '')}"
    e.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid", GIT_COMMITTER_NAME="t",
             GIT_COMMITTER_EMAIL="t@example.invalid", DVC_NO_ANALYTICS="1", DVC_NO_UPDATER="1")
    return e


def run(cmd: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def dvc(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "dvc", *args], cwd, check)


def merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(base.get(k, {}), v) if isinstance(v, dict) and v else v
    return out


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".gitignore" not in p.name
            and p.name != "timing.json"}


def new_repo(where: Path, over: dict = TINY) -> Path:
    where.mkdir(parents=True)
    for name in ("dvc.yaml", ".gitignore", ".dvcignore"):
        shutil.copy(ROOT / name, where / name)
    params = merge(yaml.safe_load((ROOT / "params.yaml").read_text()), over)
    (where / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(["git", "init", "-q", "-b", "main"], where)
    dvc("init", "-q", cwd=where)
    run(["git", "add", "-A"], where)
    run(["git", "commit", "-qm", "pipeline"], where)
    return where


def ran(stdout: str) -> list[str]:
    return sorted(line.split("'")[1] for line in stdout.splitlines() if line.startswith("Running stage"))


@pytest.fixture(scope="module")
def clone_a(tmp_path_factory) -> Path:
    a = new_repo(tmp_path_factory.mktemp("clone") / "a")
    repro = dvc("repro", cwd=a)
    assert ran(repro.stdout) == ["augment@sample", "augment@sample_ctr", "download@sample", "download@sample_ctr",
                                 "evaluate@sample", "evaluate@sample_ctr", "preprocess@sample",
                                 "preprocess@sample_ctr", "train@sample-sasrec-lpe", "train@sample-sasrec-rope",
                                 "train_ctr@sample_ctr-din-cape"]
    return a


def test_repro_trains_the_grid_with_stable_metrics_curves_and_a_report(clone_a):
    a = clone_a
    runs = a / "data" / "runs" / "sample"
    assert sorted(p.name for p in runs.iterdir() if p.is_dir()) == list(CONFIGS)
    for config in CONFIGS:
        assert sorted(p.name for p in (runs / config).iterdir()) == ["seed-1", "seed-2"]
        assert (a / "data" / "live" / "sample" / config / "seed-1" / "plots" / "metrics" / "train" / "loss.tsv").is_file()
    shown = json.loads(dvc("metrics", "show", "--json", cwd=a).stdout)
    metrics = next(iter(shown.values()))["data"]
    for config in CONFIGS:
        m = metrics[f"data/metrics/sample/{config}.json"]["data"]
        assert m["seeds"] == 2 and 0 <= m["test"]["hr@10"] <= m["test"]["hr@20"] <= 1 and "ndcg@10" in m["valid"]
    ctr = metrics["data/metrics/sample_ctr/din-cape.json"]["data"]       # the CTR half: same stages, own metrics
    assert ctr["seeds"] == 2 and 0 <= ctr["test"]["auc"] <= 1 and ctr["test"]["logloss"] > 0 and "gauc" in ctr["valid"]
    assert "| sample_ctr | ctr | din | cape |" in (a / "data" / "reports" / "sample_ctr" / "report.md").read_text()
    report = (a / "data" / "reports" / "sample" / "report.md").read_text()
    assert "| sample | srgnn | sasrec | lpe |" in report and "| sample | srgnn | sasrec | rope |" in report
    for figure in ("comparison.png", "curves.png"):
        assert (a / "data" / "reports" / "sample" / figure).read_bytes()[:4] == b"\x89PNG"
    plots = dvc("plots", "show", "-o", str(a.parent / "plots"), cwd=a)
    assert "index.html" in plots.stdout and "WARNING" not in plots.stdout + plots.stderr
    html = (a.parent / "plots" / "index.html").read_text()
    assert "sasrec-lpe/seed-1/plots/metrics/train/loss.tsv" in html and "comparison" in html
    assert "data/reports/sample/curves.png" in html and "data/reports/sample_ctr/curves.png" in html
    shown = json.loads(dvc("plots", "show", "--json", "-o", str(a.parent / "plots-json"), cwd=a).stdout)["data"]
    for name in ("sample", "sample_ctr"):                # one bar per configuration and metric, never two stacked
        [spec] = shown[f"data/reports/{name}/comparison.csv"]
        bars = [(d["bar"], d["rev"]) for d in spec["content"]["data"]["values"]]
        assert spec["content"]["encoding"]["y"]["field"] == "bar" and len(bars) == len(set(bars)) >= 2
    assert "up to date" in dvc("status", cwd=a).stdout.lower()
    assert run(["git", "status", "--porcelain", "--ignored=no"], a).stdout.split() == [
        "??", "data/", "??", "dvc.lock"]                        # nothing of .seqpe/ or timing.json shows


def test_second_repro_recomputes_nothing(clone_a):
    assert ran(dvc("repro", cwd=clone_a).stdout) == []


def test_ranking_cut_offs_are_no_parameter_of_the_ctr_stages(clone_a, tmp_path):
    """CTR runs never read evaluate.ks (nor candidates, mask_history): a DVC stage that listed the whole
    `evaluate` section re-ran, and DVC deleting its outputs first meant retraining DIN from scratch."""
    b = tmp_path / "b"
    shutil.copytree(clone_a, b, symlinks=True)
    params = yaml.safe_load((b / "params.yaml").read_text())
    params["evaluate"]["ks"] = [1, 5, 10]
    (b / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    changed = set(json.loads(dvc("status", "--json", cwd=b).stdout))
    assert {s for s in changed if s.startswith("train@")} == {f"train@sample-sasrec-{e}" for e in ("lpe", "rope")}
    assert not {s for s in changed if s.startswith("train_ctr@")}


def test_one_encodings_options_retrain_only_that_configuration_and_hand_runs_survive(clone_a, tmp_path):
    b = tmp_path / "b"
    shutil.copytree(clone_a, b, symlinks=True)
    hand = run([str(BIN / "seqpe"), "train", "sample", "--model", "sasrec", "--encoding", "alibi", "--seed", "1",
                "--quiet", "--params", "params.yaml"], b)
    assert hand.returncode == 0 and (b / "data/runs/sample/sasrec-alibi/seed-1/run.json").is_file()
    assert [line for line in hand.stderr.splitlines() if line.startswith("note:")
            and not line.startswith("note: alibi with one head")] == [], hand.stderr   # (its slope note: walk 42c)
    grid = run([str(BIN / "seqpe"), "train", "sample", "--model", "sasrec", "--encoding", "rope", "--seed", "3",
                "--quiet", "--params", "params.yaml", "--check"], b)      # a seed of the grid's own configuration
    assert ("note: data/runs/sample/sasrec-rope is the output of DVC stage train@sample-sasrec-rope: its next "
            "`dvc repro` replaces the folder, seeds trained here by hand included") in grid.stderr
    run(["git", "add", "-A"], b)
    run(["git", "commit", "-qm", "results"], b)
    assert "sasrec-alibi" not in run(["git", "ls-files"], b).stdout               # hand runs stay out of git
    params = yaml.safe_load((b / "params.yaml").read_text())
    params["encodings"]["rope"]["base"] = 500.0
    (b / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert ran(dvc("repro", cwd=b).stdout) == ["evaluate@sample", "train@sample-sasrec-rope"]
    assert (b / "data/runs/sample/sasrec-alibi/seed-1/run.json").is_file()        # not deleted by dvc repro
    assert "alibi" not in (b / "data/reports/sample/report.md").read_text()      # not in the grid's report
    diff = json.loads(dvc("metrics", "diff", "--json", cwd=b).stdout)
    rope = diff["data/metrics/sample/sasrec-rope.json"]
    assert "test.ndcg@10" in rope and set(rope["test.ndcg@10"]) == {"old", "new", "diff"}
    assert "data/metrics/sample/sasrec-lpe.json" not in diff                     # unchanged configuration
    params_diff = json.loads(dvc("params", "diff", "--json", cwd=b).stdout)
    assert params_diff["params.yaml"]["encodings.rope.base"] == {"old": 10000.0, "new": 500.0, "diff": -9500.0}
    check = [str(BIN / "seqpe"), "train", "sample", "data/samples/sample", "--model", "sasrec", "--encoding", "rope",
             "--seed", "3", "--quiet", "--params", "params.yaml", "--check"]
    assert "is the output of DVC stage train@sample-sasrec-rope" in run([*check, "data/runs/../runs/sample"], b).stderr
    shutil.rmtree(b / "data/live/sample/sasrec-lpe")      # a DVC output not on disk (a clone before `dvc pull`)
    proc = run([*check, "data/live/sample/sasrec-lpe"], b, check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("error: data/live/sample/sasrec-lpe is the output of DVC "
                                                           "stage train@sample-sasrec-lpe, which `dvc repro`")


def test_imported_files_go_through_the_pipeline_and_train_like_the_dataset_they_came_from(clone_a, tmp_path):
    """`imports:` makes `dvc repro` import prepared files (here sample exported as SR-GNN pickles) and
    train and report them with the grid; the round trip is exact, so the metrics equal sample's."""
    b = tmp_path / "b"
    shutil.copytree(clone_a, b, symlinks=True)
    run([str(BIN / "seqpe"), "export", "sample", "data/inbox/sample srgnn", "--format", "srgnn",
         "--sessions", "data/sessions/sample", "--quiet"], b)
    params = yaml.safe_load((b / "params.yaml").read_text())
    params["imports"] = {"sample_srgnn": {"path": "data/inbox/sample srgnn", "format": "srgnn"}}   # a space: quoted
    (b / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (b / "data/sessions/sample_srgnn").mkdir()                           # a folder of the user's under that name
    (b / "data/sessions/sample_srgnn/keep.txt").write_text("mine")
    refused = dvc("repro", cwd=b, check=False)                           # imported but trained by no grid
    assert refused.returncode != 0 and "add it to study.next_item.datasets" in refused.stdout + refused.stderr
    assert (b / "data/sessions/sample_srgnn/keep.txt").read_text() == "mine"   # walk 40b #1: DVC deleted it first
    shutil.rmtree(b / "data/sessions/sample_srgnn")
    params["study"]["next_item"]["datasets"].append("sample_srgnn")
    (b / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert ran(dvc("repro", cwd=b).stdout) == [                          # (reports follow study:, which changed)
        "evaluate@sample", "evaluate@sample_ctr", "evaluate_imports@sample_srgnn", "import@sample_srgnn",
        "train@sample_srgnn-sasrec-lpe", "train@sample_srgnn-sasrec-rope"]
    shown = json.loads(dvc("metrics", "show", "--json", cwd=b).stdout)
    metrics = next(iter(shown.values()))["data"]
    for config in CONFIGS:
        imported, native = (metrics[f"data/metrics/{d}/{config}.json"]["data"] for d in ("sample_srgnn", "sample"))
        assert imported.pop("configuration") == f"sample_srgnn {config}"
        assert native.pop("configuration") == f"sample {config}" and imported == native
    assert "| sample_srgnn | srgnn | sasrec | rope |" in (b / "data/reports/sample_srgnn/report.md").read_text()
    assert ran(dvc("repro", cwd=b).stdout) == []
    test_txt = b / "data/inbox/sample srgnn/test.txt"                   # rewritten, same content: nothing to do
    test_txt.write_bytes(test_txt.read_bytes())
    os.utime(test_txt, (1, 1))
    assert ran(dvc("repro", cwd=b).stdout) == []


def test_dvc_lock_is_reproduced_by_a_fresh_clone(clone_a, tmp_path):
    c = tmp_path / "c"
    run(["git", "clone", "-q", str(clone_a), str(c)], tmp_path)          # the commit before any result
    assert not (c / "dvc.lock").exists()
    dvc("repro", cwd=c)
    assert (c / "dvc.lock").read_text() == (clone_a / "dvc.lock").read_text()


def test_teammate_pulls_byte_identical_data_without_recomputing(clone_a, tmp_path):
    a = tmp_path / "a"
    shutil.copytree(clone_a, a, symlinks=True)
    remote = tmp_path / "remote"
    dvc("remote", "add", "-d", "team", str(remote), cwd=a)
    readme = (ROOT / "README.md").read_text()      # the README's commit, word for word: it once left data/live
    line = next(ln for ln in readme.splitlines() if ln.startswith("git add dvc.lock"))   # out, and B retrained all
    run(shlex.split(line.split("#")[0]), a)
    run(["git", "commit", "-qm", "results + remote"], a)
    dvc("push", cwd=a)
    b = tmp_path / "b"
    run(["git", "clone", "-q", str(a), str(b)], tmp_path)
    dvc("pull", cwd=b)
    assert tree_digest(b / "data") == tree_digest(a / "data")
    assert "up to date" in dvc("status", cwd=b).stdout.lower()
    assert ran(dvc("repro", cwd=b).stdout) == []
    assert run(["git", "status", "--porcelain"], b).stdout == ""      # nothing left for B to commit


def test_a_queued_two_value_grid_runs_and_both_experiments_show(clone_a, tmp_path):
    q = tmp_path / "q"
    shutil.copytree(clone_a, q, symlinks=True)
    run(["git", "add", "-A"], q)
    run(["git", "commit", "-qm", "baseline results"], q)
    dvc("exp", "run", "--queue", "-S", "train.lr=0.002,0.004", cwd=q)
    dvc("queue", "start", "-j", "1", cwd=q)
    deadline = time.time() + 600
    while time.time() < deadline:
        status = dvc("queue", "status", cwd=q).stdout
        if "Queued" not in status and "Running" not in status:
            break
        time.sleep(2)
    dvc("queue", "stop", "--kill", cwd=q, check=False)
    assert "Failed" not in status, dvc("queue", "logs", cwd=q, check=False).stdout
    shown = json.loads(dvc("exp", "show", "--json", cwd=q).stdout)
    lrs = set()
    for commit in shown:
        for exp in commit.get("experiments") or []:
            for rev in exp.get("revs") or []:
                lrs.add(rev["data"]["params"]["params.yaml"]["data"]["train"]["lr"])
    assert lrs == {0.002, 0.004}, shown
    table = dvc("exp", "show", "--csv", "--sort-by", "data/metrics/sample/sasrec-lpe.json:test.ndcg@10",
                cwd=q).stdout
    assert "test.ndcg@10" in table and table.count("0.004") >= 1


def test_a_killed_repro_resumes_the_unfinished_seed_and_keeps_the_finished_one(tmp_path):
    """kill -9 of a real `dvc repro` while seed 2 trains: DVC deletes the stage's outputs before it
    runs again, but seed 1 comes back from .seqpe/done without retraining and seed 2 continues from
    its last finished epoch, ending where an uninterrupted run ends."""
    over = merge(TINY, {"train": {"epochs": 12, "patience": 0},
                        "study": {"next_item": {"encodings": ["lpe"]}}})
    r = new_repo(tmp_path / "r", over)
    for stage in ("download@sample", "preprocess@sample", "augment@sample"):
        dvc("repro", "-s", stage, cwd=r)
    state = r / ".seqpe"
    proc = subprocess.Popen([sys.executable, "-m", "dvc", "repro", "train@sample-sasrec-lpe"], cwd=r, env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        # finished names only: a copy being written is `.<fp>.p<pid>.*.tmp`, and seed 1's resume file lingers a
        # moment after its done copy is in (a kill there left seed 1 to finish and seed 2 to start afresh)
        done = [p for p in (state / "done").glob("*") if not p.name.startswith(".")] \
            if (state / "done").is_dir() else []
        resume = [p for p in (state / "resume").glob("*.pt") if not p.name.startswith(".")] \
            if (state / "resume").is_dir() else []
        if len(done) == 1 and len(resume) == 1 and resume[0].stem != done[0].name:   # seed 2's own resume file
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the stage finished before it could be killed: raise train.epochs"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    [seed1] = [p for p in (state / "done").glob("*") if not p.name.startswith(".")]
    seed1_timing = (seed1 / "timing.json").read_text()
    dvc("repro", "train@sample-sasrec-lpe", cwd=r)
    runs = r / "data/runs/sample/sasrec-lpe"
    assert (runs / "seed-1" / "timing.json").read_text() == seed1_timing       # seed 1 was not retrained
    timing2 = json.loads((runs / "seed-2" / "timing.json").read_text())
    assert timing2["resumed_from_epoch"] >= 1                                   # seed 2 went on
    record2 = json.loads((runs / "seed-2" / "run.json").read_text())
    assert [h["epoch"] for h in record2["history"]] == list(range(1, 13))
    assert not state.exists()                                                   # nothing left behind
    # the same seed trained in one go gives the same bytes
    u = new_repo(tmp_path / "u", over)
    dvc("repro", "train@sample-sasrec-lpe", cwd=u)
    for seed in ("seed-1", "seed-2"):
        for name in ("run.json", "checkpoint.pt", "test_samples.parquet"):
            assert (runs / seed / name).read_bytes() == (u / "data/runs/sample/sasrec-lpe" / seed / name).read_bytes()
