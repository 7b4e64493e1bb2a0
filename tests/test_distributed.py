"""Real torchrun runs (2 processes, gloo on CPU): DistributedDataParallel training writes one run
folder, its test metrics equal a one-process evaluation of the saved checkpoint bit for bit, a
stopped run resumes to the bytes of an uninterrupted one, and commands that are not distributed
refuse to run twice."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from pipeline import train as stage
from pipeline.batches import load_samples
from test_cli import assert_one_line_error
from test_train import ROOT, make_samples
from test_train_ctr import ctr_samples  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow


def params_file(tmp_path: Path, **train) -> Path:
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["datasets"] = []
    p["study"].update(seeds=[1], next_item={"datasets": [], "models": ["sasrec"], "encodings": ["lpe"], "baselines": [], "preset": None, "train": {}},
                      ctr={"datasets": [], "models": [], "encodings": [], "baselines": [], "preset": None, "train": {}})
    p["train"].update({**dict(epochs=3, dim=16, layers=1, batch_size=32, max_len=8, threads=1, device="cpu",
                              select_metric="ndcg@5", dropout=0.1), **train})
    p["evaluate"]["ks"] = [1, 5]
    p["models"], p["encodings"] = {"sasrec": {}}, {"lpe": {}}
    path = tmp_path / f"params-{len(list(tmp_path.glob('params-*')))}.yaml"
    path.write_text(yaml.safe_dump(p, sort_keys=False))
    return path


def ctr_params_file(tmp_path: Path) -> Path:
    """DIN (Dice: BatchNorm buffers) with CAPE, two epochs; an evaluation batch that splits valid and test
    into uneven shares of trimmed batches."""
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["datasets"] = []
    p["study"].update(seeds=[1], next_item={"datasets": [], "models": [], "encodings": [], "baselines": [], "preset": None, "train": {}},
                      ctr={"datasets": [], "models": ["din"], "encodings": ["cape"], "baselines": [], "preset": None, "train": {
                          "epochs": 2, "batch_size": 64, "max_len": 12, "lr": 0.005, "patience": 0}})
    p["train"].update(dim=16, threads=1, device="cpu")
    p["evaluate"]["batch_size"] = 37
    p["models"], p["encodings"] = {"din": {}}, {"cape": {}}
    path = tmp_path / "params-ctr.yaml"
    path.write_text(yaml.safe_dump(p, sort_keys=False))
    return path


def torchrun_command(launch: list[str], args, state: Path) -> tuple[list[str], dict]:
    """`python -m torch.distributed.run LAUNCH -m pipeline.cli ARGS` and its environment."""
    scratch = state.parent / "torchrun-tmp"        # torchrun leaves its log folders in TMPDIR: keep them here
    scratch.mkdir(exist_ok=True)
    env = dict(os.environ, SEQPE_STATE=str(state), OMP_NUM_THREADS="1", TMPDIR=str(scratch))
    return [sys.executable, "-m", "torch.distributed.run", *launch, "-m", "pipeline.cli", *args], env


def torchrun(*args: str, cwd: Path, state: Path, nproc: int = 2) -> subprocess.CompletedProcess:
    cmd, env = torchrun_command(["--standalone", "--nproc_per_node", str(nproc)], args, state)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


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


def test_a_ctr_model_with_batchnorm_reports_the_metrics_of_the_weights_it_saves(ctr_samples, tmp_path, monkeypatch):
    """Walk 37b D1 / D2: each rank's last training forward updates its own BatchNorm statistics (DIN's Dice),
    so rank 1 scored its share of valid / test with a model rank 0 never saved (test AUC 0.49736 against
    0.49822 re-scored); and rows scored in other trimmed batches than one process's differed in their last
    bits. Valid, test and every logit must be those of one process scoring the checkpoint."""
    from pipeline.params import load_params
    from pipeline.train import stage as stage_module
    params = ctr_params_file(tmp_path)
    runs = tmp_path / "runs"
    proc = torchrun("train", "sample_ctr", str(ctr_samples), str(runs), "--params", str(params), "--quiet",
                    cwd=tmp_path, state=tmp_path / "state")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = runs / "din-cape" / "seed-1"
    record = json.loads((run / "run.json").read_text())
    assert record["world_size"] == 2 and record["epochs_run"] == 2
    seen = {}

    def rescore(net, task, *args):                          # fit_epochs of one process: the saved weights
        net.load_state_dict(torch.load(run / "checkpoint.pt", weights_only=True)["model"])
        seen["valid"] = task.evaluate(net, "valid")
        history, timing = args[7], args[8]
        history += record["history"]
        timing += [{"epoch": h["epoch"], "train_s": 0.0, "valid_s": 0.0, "samples_per_s": 0.0} for h in history]
        return record["best_epoch"], record["stopped"], 0, None

    monkeypatch.setattr(stage_module, "fit_epochs", rescore)
    stage.run("sample_ctr", ctr_samples, tmp_path / "one", load_params(params), progress=False)
    best = next(h for h in record["history"] if h["epoch"] == record["best_epoch"])
    assert seen["valid"] == best["valid"]
    one = tmp_path / "one" / "din-cape" / "seed-1"
    assert json.loads((one / "run.json").read_text())["test"] == record["test"]
    assert (one / "test_samples.parquet").read_bytes() == (run / "test_samples.parquet").read_bytes()


def test_two_nodes_through_torchruns_rendezvous_train_the_bytes_of_one_node(samples, tmp_path):
    """README's multi-node command, run as two nodes on this host: two torchrun launchers of one process each
    meet through the c10d rendezvous (each process has LOCAL_RANK 0; RANK 0 and 1). Each node has its own
    folders (node-local disks): the node that got rank 0 writes the run, byte for byte the run of one node
    with two processes, and the other node writes nothing, in its runs folder or its state root."""
    import socket
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    params = params_file(tmp_path)
    nodes = []
    for node in ("a", "b"):
        (tmp_path / node).mkdir()
        cmd, env = torchrun_command(["--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d",
                                     "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "seqpe-test"],
                                    ["train", "toyset", str(samples), str(tmp_path / node / "runs"), "--params",
                                     str(params), "--quiet"], tmp_path / node / "state")
        nodes.append(subprocess.Popen(cmd, cwd=tmp_path / node, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    for proc in nodes:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
    wrote = [node for node in ("a", "b") if (tmp_path / node / "runs").exists()]
    assert len(wrote) == 1, wrote
    idle = tmp_path / ("b" if wrote == ["a"] else "a")
    assert not (idle / "runs").exists() and not (idle / "state").exists()
    one = torchrun("train", "toyset", str(samples), str(tmp_path / "one"), "--params", str(params), "--quiet",
                   cwd=tmp_path, state=tmp_path / "one-state")
    assert one.returncode == 0, one.stderr[-3000:]
    rel = Path("sasrec-lpe/seed-1")
    assert json.loads((tmp_path / "one" / rel / "run.json").read_text())["world_size"] == 2
    for name in ("run.json", "checkpoint.pt", "test_samples.parquet"):
        assert (tmp_path / wrote[0] / "runs" / rel / name).read_bytes() == (tmp_path / "one" / rel / name).read_bytes()


def test_nodes_started_with_other_settings_are_refused_not_left_to_hang(samples, tmp_path):
    """Walk 40g #2: one command per node, with another --set on one: each process trained with its own epochs and
    they met in collectives that never matched, a hang of gloo's 30 minutes that SIGTERM did not end."""
    import socket
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    params = params_file(tmp_path)
    nodes = []
    for node, epochs in (("a", 2), ("b", 3)):
        (tmp_path / node).mkdir()
        cmd, env = torchrun_command(["--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d",
                                     "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "seqpe-mismatch"],
                                    ["train", "toyset", str(samples), str(tmp_path / node / "runs"), "--params",
                                     str(params), "--set", f"train.epochs={epochs}", "--quiet"],
                                    tmp_path / node / "state")
        nodes.append(subprocess.Popen(cmd, cwd=tmp_path / node, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    errs = []
    for proc in nodes:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode != 0
        errs.append(err)
    said = [line for err in errs for line in err.splitlines() if line.startswith("error:")]
    assert said and all("the processes of this torchrun job were started with other settings (rank 0 vs rank 1: "
                        "train.epochs: " in line for line in said), [err[:1500] for err in errs]
    frames = [line for err in errs for line in err.splitlines() if line.strip().startswith('File "')
              and "/pipeline/" in line]                  # torchrun's launcher prints its own (ChildFailedError,
    assert not frames, frames                            # a rendezvous the other node closed): not seqpe's
    assert not (tmp_path / "a" / "runs").exists() and not (tmp_path / "b" / "runs").exists()


def test_nodes_of_other_core_counts_resume_from_rank_0s_state(samples, tmp_path):
    """Walk 42b #1: train.threads 0 resolves to each node's cores, which were part of each rank's fingerprint: after a
    stop, the rank-0 node went on from its resume file and the other started afresh (no file under its own
    fingerprint), DDP averaged the gradients of two models, and the ranks fell out of step and hung. Now rank 0's
    inputs name the run on every rank and rank 0 hands its resume state to the others. Two nodes on this host, a
    fixed node rank each (static rendezvous), OMP_NUM_THREADS 1 and 2, one state root."""
    import socket
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]

    def launch(params, runs: Path) -> list[str]:
        procs = []
        for rank, threads in ((0, "1"), (1, "2")):
            (tmp_path / f"node{rank}").mkdir(exist_ok=True)
            cmd, env = torchrun_command(["--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "static",
                                         "--master_addr", "127.0.0.1", "--master_port", str(port), "--node_rank",
                                         str(rank)],
                                        ["train", "toyset", str(samples), str(runs), "--params", str(params),
                                         "--set", "train.threads=0", "--quiet"], tmp_path / "state")
            env["OMP_NUM_THREADS"] = threads
            procs.append(subprocess.Popen(cmd, cwd=tmp_path / f"node{rank}", env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, start_new_session=True))
        errs = []
        for proc in procs:
            try:
                errs.append(proc.communicate(timeout=240)[1])
            except subprocess.TimeoutExpired:
                for other in procs:                      # the launchers and their workers
                    os.killpg(other.pid, signal.SIGKILL)
                pytest.fail("the nodes hung")
            assert proc.returncode == 0, errs[-1][-3000:]
        return errs

    launch(params_file(tmp_path, time_limit=1e-9), tmp_path / "runs")       # stops after epoch 1: a resume file
    rel = Path("sasrec-lpe/seed-1")
    assert json.loads((tmp_path / "runs" / rel / "run.json").read_text())["epochs_run"] == 1
    launch(params_file(tmp_path), tmp_path / "runs")
    record = json.loads((tmp_path / "runs" / rel / "run.json").read_text())
    timing = json.loads((tmp_path / "runs" / rel / "timing.json").read_text())
    assert (record["epochs_run"], timing["resumed_from_epoch"], record["train"]["threads"]) == (3, 1, 1)


def test_a_lost_peer_is_named_in_one_line():
    """Walk 40g #1: the surviving rank of a job whose other rank was killed printed gloo's 40-line traceback."""
    from pipeline.train import distributed
    lost = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:51121: "
                        "Connection reset by peer. This is typically caused by a remote worker hanging")
    assert distributed.peer_lost(lost) and not distributed.peer_lost(RuntimeError("shape mismatch"))
    own = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:446] op.preamble.length <= op.nbytes. "
                       "4 vs 2")                                           # gloo's own assertion: no lost peer
    assert not distributed.peer_lost(own)                                  # (walk 41a #9)
    assert distributed.first_line(lost) == "Read error [127.0.0.1]:51121: Connection reset by peer"


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
    timing = json.loads((tmp_path / "cut" / rel / "timing.json").read_text())
    assert (timing["resumed_from_epoch"], timing["world_size"]) == (1, 2)    # whose samples/s (walk 33a)


def test_commands_that_are_not_distributed_refuse_to_run_twice(tmp_path):
    proc = torchrun("download", "sample", str(tmp_path / "raw"), "--quiet", cwd=tmp_path, state=tmp_path / "s")
    assert proc.returncode != 0 and not (tmp_path / "raw").exists()
    assert "`seqpe download` does not run distributed" in proc.stderr


def test_a_seed_of_two_processes_is_neither_reused_nor_resumed_nor_pooled_by_one(samples, tmp_path):
    """The process count is an input (each step takes W batches): a finished or stopped 2-process seed is
    not one process's, and report refuses to pool seeds of different process counts."""
    runs, state = tmp_path / "runs", tmp_path / "state"
    cut = torchrun("train", "toyset", str(samples), str(runs), "--params", str(params_file(tmp_path, time_limit=1e-9)),
                   "--quiet", cwd=tmp_path, state=state)
    assert cut.returncode == 0, cut.stderr[-3000:]
    run = runs / "sasrec-lpe" / "seed-1"
    assert json.loads((run / "run.json").read_text())["world_size"] == 2
    env = dict(os.environ, SEQPE_STATE=str(state), OMP_NUM_THREADS="1")
    one = subprocess.run([sys.executable, "-m", "pipeline.cli", "train", "toyset", str(samples), str(runs), "--params",
                          str(params_file(tmp_path)), "--quiet"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert one.returncode == 0, one.stderr[-3000:]
    record = json.loads((run / "run.json").read_text())
    assert record["world_size"] == 1 and record["epochs_run"] == 3                       # trained, not reused
    assert json.loads((run / "timing.json").read_text())["resumed_from_epoch"] == 0      # not the 2-process state
    both = torchrun("train", "toyset", str(samples), str(runs), "--params", str(params_file(tmp_path)), "--seed", "2",
                    "--quiet", cwd=tmp_path, state=state)
    assert both.returncode == 0, both.stderr[-3000:]
    report = subprocess.run([sys.executable, "-m", "pipeline.cli", "report", str(runs), "--quiet"], cwd=tmp_path,
                            env=env, capture_output=True, text=True)
    assert report.returncode == 1 and "processes (torchrun): 1 vs 2" in report.stderr, report.stderr


def test_fewer_batches_than_processes_stops_with_one_line(samples, tmp_path):
    """300 train rows in batches of 512: one batch for two processes, so no step could run; the run used to
    finish with loss 0 and the untrained model's metrics."""
    proc = torchrun("train", "toyset", str(samples), str(tmp_path / "runs"), "--params",
                    str(params_file(tmp_path, batch_size=512)), "--quiet", cwd=tmp_path, state=tmp_path / "s")
    assert proc.returncode != 0
    assert proc.stderr.count("has no training step: its 1 batch(es) are fewer than the 2 processes") == 1, proc.stderr
    assert not list((tmp_path / "runs").glob("*/seed-1/run.json"))


def test_check_under_torchrun_says_ok_once_and_refuses_fewer_batches_than_processes(samples, tmp_path):
    """`train --check` under torchrun: every rank checks, rank 0 alone prints `ok:` (it printed once per
    rank), and an epoch too small to share is refused there, before a queue of runs starts."""
    ok = torchrun("train", "toyset", str(samples), str(tmp_path / "runs"), "--params", str(params_file(tmp_path)),
                  "--check", cwd=tmp_path, state=tmp_path / "s")
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert ok.stdout.count("ok: toyset sasrec-lpe seed 1 would train into") == 1, ok.stdout
    few = torchrun("train", "toyset", str(samples), str(tmp_path / "runs"), "--params",
                   str(params_file(tmp_path, batch_size=512)), "--check", cwd=tmp_path, state=tmp_path / "s")
    assert few.returncode == 1 and "ok:" not in few.stdout
    assert few.stderr.count("error: an epoch of toyset would have no training step: its 1 batch(es) are fewer "
                            "than the 2 processes") == 1, few.stderr
    assert not (tmp_path / "runs").exists()
    one = subprocess.run([sys.executable, "-m", "pipeline.cli", "train", "toyset", str(samples), str(tmp_path / "runs"),
                          "--params", str(params_file(tmp_path, epochs=1)), "--quiet"], cwd=tmp_path,
                         env=dict(os.environ, SEQPE_STATE=str(tmp_path / "s")), capture_output=True, text=True)
    assert one.returncode == 0, one.stderr[-3000:]
    noted = torchrun("train", "toyset", str(samples), str(tmp_path / "runs"), "--params", str(params_file(tmp_path)),
                     "--check", cwd=tmp_path, state=tmp_path / "s")       # its notes: once, not once per rank
    assert noted.returncode == 0 and noted.stderr.count("holds a run trained with other settings (train.epochs: "
                                                        "1 vs 3; processes (torchrun): 1 vs 2)") == 1, noted.stderr[-3000:]


@pytest.mark.parametrize("signame, said", [("SIGINT", "interrupted"), (
    "SIGTERM", "terminated (SIGTERM from torchrun: the job was stopped, or one of its processes ended)")])
def test_ctrl_c_stops_every_process_at_once_with_one_line(samples, tmp_path, signame, said):
    """SIGINT to torchrun's process group (what Ctrl-C sends): the workers used to wait in the teardown barrier
    until torchrun killed them 30 s later; now each leaves the group at once and rank 0 says what was kept.
    SIGTERM to torchrun alone (a scheduler's time limit), which passes it on to its workers, the same."""
    import signal
    import time
    scratch = tmp_path / "torchrun-tmp"
    scratch.mkdir()
    env = dict(os.environ, SEQPE_STATE=str(tmp_path / "s"), OMP_NUM_THREADS="1", TMPDIR=str(scratch),
               PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                             "-m", "pipeline.cli", "train", "toyset", str(samples), str(tmp_path / "runs"), "--params",
                             str(params_file(tmp_path, epochs=100000, patience=0))], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []
    for line in proc.stdout:                                   # the first finished epoch: training is under way
        lines.append(line)
        if "epoch 2:" in line:
            break
    assert proc.poll() is None, "".join(lines)
    if signame == "SIGINT":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    out, _ = proc.communicate(timeout=120)
    took = time.monotonic() - t0
    assert took < 20, f"the processes took {took:.0f} s to stop"
    assert out.count(f"{said}: the seed being trained has no run folder yet") == 1, out[-3000:]
    assert not list((tmp_path / "runs").glob("*/seed-1/run.json"))


def test_a_bad_input_is_said_once_not_once_per_process(tmp_path):
    """Every process checks the same arguments: the error line was printed by each (twice here); a line only
    one process reaches is still printed, as the marker is named after the line."""
    proc = torchrun("train", "toyset", str(tmp_path / "nowhere"), str(tmp_path / "runs"), "--quiet", cwd=tmp_path,
                    state=tmp_path / "s")
    assert proc.returncode != 0 and not (tmp_path / "runs").exists()
    said = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(said) == 1 and "nowhere" in said[0] and "does not exist" in said[0], proc.stderr[-3000:]
    proc = torchrun("--version", cwd=tmp_path, state=tmp_path / "s")    # printed by each process (walk 40g #5)
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1 and "seqpe" in proc.stdout, proc.stdout
    from pipeline.cli import _first_to_say
    attempt = tmp_path / "attempt"
    for rank in ("0", "1"):
        (attempt / rank).mkdir(parents=True)
    env = {"WORLD_SIZE": "2", "TORCHELASTIC_ERROR_FILE": str(attempt / "0" / "error.json")}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        assert _first_to_say("a") and not _first_to_say("a") and _first_to_say("b")
        mp.setenv("WORLD_SIZE", "1")
        assert _first_to_say("a")


@pytest.mark.parametrize("value", ["abc", "0", "-2"])
def test_a_world_size_that_is_not_a_count_is_one_line(samples, tmp_path, value):
    """WORLD_SIZE=abc used to mean one process (training alone what was meant to be shared)."""
    env = dict(os.environ, SEQPE_STATE=str(tmp_path / "s"), WORLD_SIZE=value)
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "train", "toyset", str(samples), str(tmp_path / "runs"),
                           "--params", str(params_file(tmp_path)), "--quiet"], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"WORLD_SIZE is '{value}', not a number of processes" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_a_hand_set_world_size_without_a_master_address_is_one_line(samples, tmp_path):
    """Walk 37b D5: WORLD_SIZE / RANK / LOCAL_RANK set by hand without MASTER_ADDR ended in torch's 10-line
    traceback from init_process_group."""
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    env.update(SEQPE_STATE=str(tmp_path / "s"), WORLD_SIZE="2", RANK="0", LOCAL_RANK="0")
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "train", "toyset", str(samples), str(tmp_path / "runs"),
                           "--params", str(params_file(tmp_path)), "--quiet"], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert_one_line_error(proc, "WORLD_SIZE is 2 but MASTER_ADDR, MASTER_PORT are not set", "torchrun")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_rank_waiting_for_a_master_that_never_comes_stops_on_a_signal(samples, tmp_path, signame):
    """Walk 37b D5: a rank whose rank 0 never starts (the other node of a job did not come up) waits in
    init_process_group's C++ code, where seqpe's handler never ran: SIGTERM and a second kill were ignored
    for the 30 minutes of the store's timeout. The 'master' here accepts the connection and never answers,
    so the test knows the rank is waiting before it sends the signal."""
    import signal
    import socket
    import time
    master = socket.socket()
    master.bind(("127.0.0.1", 0))
    master.listen()
    env = dict(os.environ, SEQPE_STATE=str(tmp_path / "s"), WORLD_SIZE="2", RANK="1", LOCAL_RANK="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master.getsockname()[1]), OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "train", "toyset", str(samples),
                             str(tmp_path / "runs"), "--params", str(params_file(tmp_path)), "--quiet"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        master.settimeout(120)
        peer, _ = master.accept()                                  # the rank is inside init_process_group
        time.sleep(0.5)
        proc.send_signal(getattr(signal, signame))
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        master.close()
    said = "terminated (SIGTERM)" if signame == "SIGTERM" else "interrupted"
    assert proc.returncode == 128 + getattr(signal, signame), err
    assert err.strip().splitlines() == [f"{said}: while waiting for the other processes of the job (rank 0 at "
                                        f"127.0.0.1:{env['MASTER_PORT']}) to join; nothing was written"]
    assert not (tmp_path / "runs").exists()


def test_the_signal_torchrun_sends_after_another_processs_error_is_not_said(samples, tmp_path):
    """Walk 40g #3 / 41a #9: after one process's one-line error torchrun stops the others with SIGTERM, and each
    said "terminated (SIGTERM)", a signal no user sent. A process that finds another's error said (a marker in
    torchrun's attempt folder, cli._first_to_say) stops without a word."""
    import signal
    import socket
    import time
    attempt = tmp_path / "attempt"
    for rank in ("0", "1"):
        (attempt / rank).mkdir(parents=True)
    (attempt / "seqpe-said-0123456789abcdef").touch()               # rank 0's error line, said
    master = socket.socket()
    master.bind(("127.0.0.1", 0))
    master.listen()
    env = dict(os.environ, SEQPE_STATE=str(tmp_path / "s"), WORLD_SIZE="2", RANK="1", LOCAL_RANK="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master.getsockname()[1]), OMP_NUM_THREADS="1",
               TORCHELASTIC_ERROR_FILE=str(attempt / "1" / "error.json"))
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "train", "toyset", str(samples),
                             str(tmp_path / "runs"), "--params", str(params_file(tmp_path)), "--quiet"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        master.settimeout(120)
        peer, _ = master.accept()                                  # held open: the rank waits inside its join
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        master.close()
    assert proc.returncode == 128 + signal.SIGTERM and err.strip() == "", err


@pytest.mark.parametrize("env, said", [
    ({"RANK": "x"}, "RANK is 'x', not a whole number in 0..1 (WORLD_SIZE is 2)"),
    ({"RANK": "5"}, "RANK is '5', not a whole number in 0..1 (WORLD_SIZE is 2)"),          # waited 30 minutes
    ({"LOCAL_RANK": "-1"}, "LOCAL_RANK is '-1', not a whole number in 0..1"),
    ({"MASTER_PORT": "notaport"}, "MASTER_PORT is 'notaport', not a whole number in 1..65535"),
])
@pytest.mark.parametrize("check", [False, True])
def test_torchrun_variables_set_by_hand_wrong_are_one_line_also_for_check(samples, tmp_path, env, said, check):
    """Walk 38a D2 / D3: int()'s and torch's tracebacks, a rank beyond WORLD_SIZE waiting for its master for
    torch's 30-minute timeout, and `train --check` saying ok to what the run then refused."""
    full = {**os.environ, "SEQPE_STATE": str(tmp_path / "s"), "WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999", **env}
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "train", "toyset", str(samples), str(tmp_path / "runs"),
                           "--params", str(params_file(tmp_path)), "--quiet", *(["--check"] if check else [])],
                          cwd=tmp_path, env=full, capture_output=True, text=True, timeout=120)
    assert_one_line_error(proc, said, "Fix: start distributed training with torchrun")
    assert not (tmp_path / "runs").exists()


def test_the_settings_ranks_must_share_leave_out_what_each_machine_resolves(samples):
    """Walk 41a #1: `threads: auto` resolves to each machine's cores (and OMP_NUM_THREADS), so identical commands
    on two nodes were refused as "train.threads: 1 vs 2"; a real difference is said as the resume check says it
    (the samples by name, not two raw shard hashes, walk 41a #2)."""
    import dataclasses
    from pipeline import io
    from pipeline.train import runs
    from pipeline.train.stage import job_inputs
    from test_train import params
    p = params(model="sasrec", encoding="lpe")
    manifest = io.read_manifest(samples)
    a = job_inputs(dataclasses.replace(p.train, threads=1), p, manifest, 1, 2)
    b = job_inputs(dataclasses.replace(p.train, threads=2, compile=True), p, manifest, 1, 2)
    assert a == b and "threads" not in a["train"]
    other = dict(manifest, shards=manifest["shards"][:-1])
    c = job_inputs(dataclasses.replace(p.train, threads=2), p, other, 1, 2)
    assert runs.inputs_change(runs.shown_inputs(a), c) == "the samples (their shards)"
