"""A real `dvc repro` of the default pipeline in a temporary git repo, and the
teammate workflow: clone A reproduces and pushes to a remote, clone B pulls and
gets byte-identical data with nothing recomputed."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow

# Small enough to stay fast on 2 cores, big enough that every stage has real work.
TINY = {
    "preprocess": {"sample": {"sessions": 1500, "items": 400, "days": 60, "seed": 7}},
    "train": {"epochs": 2, "dim": 16, "layers": 1, "batch_size": 128, "max_len": 20},
}


def run(cmd: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid",
               DVC_NO_ANALYTICS="1", DVC_NO_UPDATER="1")
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def dvc(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "dvc", *args], cwd, check)


def merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(base.get(k, {}), v) if isinstance(v, dict) else v
    return out


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".gitignore" not in p.name}


@pytest.fixture(scope="module")
def clone_a(tmp_path_factory) -> Path:
    a = tmp_path_factory.mktemp("clone") / "a"
    a.mkdir()
    shutil.copy(ROOT / "dvc.yaml", a / "dvc.yaml")
    params = merge(yaml.safe_load((ROOT / "params.yaml").read_text()), TINY)
    (a / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(["git", "init", "-q", "-b", "main"], a)
    dvc("init", "-q", cwd=a)
    run(["git", "add", "-A"], a)
    run(["git", "commit", "-qm", "pipeline"], a)
    repro = dvc("repro", cwd=a)
    assert "download@sample" in repro.stdout and "evaluate@sample" in repro.stdout
    return a


def test_repro_runs_every_stage_and_shows_metrics(clone_a):
    a = clone_a
    for folder in ("raw", "sessions", "samples", "runs"):
        assert (a / "data" / folder / "sample").is_dir(), folder
    manifest = json.loads((a / "data/sessions/sample/manifest.json").read_text())
    assert manifest["n_items"] > 0 and manifest["splits"]["test"]["sessions"] > 0
    metrics = json.loads((a / "data/reports/sample/metrics.json").read_text())
    run_metrics = next(iter(metrics.values()))
    assert 0.0 <= run_metrics["hr@10"] <= 1.0 and run_metrics["hr@20"] >= run_metrics["hr@10"]
    shown = dvc("metrics", "show", "--json", cwd=a).stdout
    assert "hr@10" in shown
    status = dvc("status", cwd=a).stdout
    assert "up to date" in status.lower()


def test_second_repro_recomputes_nothing(clone_a):
    out = dvc("repro", cwd=clone_a).stdout
    assert "Running stage" not in out


def test_teammate_pulls_byte_identical_data_without_recomputing(clone_a, tmp_path):
    a = clone_a
    remote = tmp_path / "remote"
    dvc("remote", "add", "-d", "team", str(remote), cwd=a)
    run(["git", "add", "-A"], a)
    run(["git", "commit", "-qm", "results + remote"], a)
    dvc("push", cwd=a)
    b = tmp_path / "b"
    run(["git", "clone", "-q", str(a), str(b)], tmp_path)
    dvc("pull", cwd=b)
    assert tree_digest(b / "data") == tree_digest(a / "data")
    assert "up to date" in dvc("status", cwd=b).stdout.lower()
    assert "Running stage" not in dvc("repro", cwd=b).stdout
