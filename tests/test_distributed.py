"""Real torchrun runs (2 processes, gloo on CPU): DistributedDataParallel training writes one run
folder, its test metrics equal a one-process evaluation of the saved checkpoint bit for bit, a
stopped run resumes to the bytes of an uninterrupted one, and commands that are not distributed
refuse to run twice."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from pipeline import train as stage
from pipeline.batches import load_samples
from test_train import ROOT, make_samples

pytestmark = pytest.mark.slow


def params_file(tmp_path: Path, **train) -> Path:
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["datasets"] = []
    p["study"].update(seeds=[1], next_item={"datasets": [], "models": ["sasrec"], "encodings": ["lpe"], "baselines": [], "train": {}},
                      ctr={"datasets": [], "models": [], "encodings": [], "baselines": [], "train": {}})
    p["train"].update(epochs=3, dim=16, layers=1, batch_size=32, max_len=8, threads=1, device="cpu",
                      select_metric="ndcg@5", dropout=0.1, **train)
    p["evaluate"]["ks"] = [1, 5]
    p["models"], p["encodings"] = {"sasrec": {}}, {"lpe": {}}
    path = tmp_path / f"params-{len(list(tmp_path.glob('params-*')))}.yaml"
    path.write_text(yaml.safe_dump(p, sort_keys=False))
    return path


def torchrun(*args: str, cwd: Path, state: Path, nproc: int = 2) -> subprocess.CompletedProcess:
    scratch = state.parent / "torchrun-tmp"        # torchrun leaves its log folders in TMPDIR: keep them here
    scratch.mkdir(exist_ok=True)
    env = dict(os.environ, SEQPE_STATE=str(state), OMP_NUM_THREADS="1", TMPDIR=str(scratch))
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                           str(nproc), "-m", "pipeline.cli", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> Path:
    return make_samples(tmp_path_factory.mktemp("ddp") / "samples", n_items=12, train=300, held=61)


def test_two_processes_write_one_run_whose_metrics_equal_a_single_process_evaluation(samples, tmp_path):
    runs = tmp_path / "runs"
    proc = torchrun("train", "toyset", str(samples), str(runs), "--params", str(params_file(tmp_path)), "--quiet",
                    cwd=tmp_path, state=tmp_path / "state")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [p.name for p in runs.iterdir()] == ["sasrec-lpe"]
    assert [p.name for p in (runs / "sasrec-lpe").iterdir()] == ["seed-1"]
    record = json.loads((runs / "sasrec-lpe" / "seed-1" / "run.json").read_text())
    assert record["world_size"] == 2 and record["epochs_run"] == 3
    ckpt = torch.load(runs / "sasrec-lpe" / "seed-1" / "checkpoint.pt", weights_only=True)
    from models import build_model
    from pipeline.params import TrainParams
    tp = TrainParams(**{k: v for k, v in ckpt["config"]["train"].items()})
    net = build_model("sasrec", n_items=12, max_len=8, train=tp, options={},
                      encoding=stage.build_encoding("lpe", tp, {}))
    net.load_state_dict(ckpt["model"])
    test = stage.score(net, load_samples(samples, "test", 8), "test", [1, 5], 512, torch.device("cpu"))
    assert test == record["test"]                                   # bit for bit, not approximately


def test_a_stopped_distributed_run_resumes_to_the_uninterrupted_bytes(samples, tmp_path):
    full = torchrun("train", "toyset", str(samples), str(tmp_path / "full"), "--params",
                    str(params_file(tmp_path)), "--quiet", cwd=tmp_path, state=tmp_path / "s1")
    assert full.returncode == 0, full.stderr[-3000:]
    cut = torchrun("train", "toyset", str(samples), str(tmp_path / "cut"), "--params",
                   str(params_file(tmp_path, time_limit=1e-9)), "--quiet", cwd=tmp_path, state=tmp_path / "s2")
    assert cut.returncode == 0, cut.stderr[-3000:]
    rel = Path("sasrec-lpe/seed-1")
    assert json.loads((tmp_path / "cut" / rel / "run.json").read_text())["epochs_run"] == 1
    again = torchrun("train", "toyset", str(samples), str(tmp_path / "cut"), "--params",
                     str(params_file(tmp_path)), "--quiet", cwd=tmp_path, state=tmp_path / "s2")
    assert again.returncode == 0, again.stderr[-3000:]
    for name in ("run.json", "checkpoint.pt", "test_samples.parquet"):
        assert (tmp_path / "full" / rel / name).read_bytes() == (tmp_path / "cut" / rel / name).read_bytes()
    assert json.loads((tmp_path / "cut" / rel / "timing.json").read_text())["resumed_from_epoch"] == 1


def test_commands_that_are_not_distributed_refuse_to_run_twice(tmp_path):
    proc = torchrun("download", "sample", str(tmp_path / "raw"), "--quiet", cwd=tmp_path, state=tmp_path / "s")
    assert proc.returncode != 0 and not (tmp_path / "raw").exists()
    assert "`seqpe download` does not run distributed" in proc.stderr
