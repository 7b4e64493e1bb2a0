"""pipeline/train.py (and pipeline/batches.py): selection on valid, test once, seeds, atomic runs."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from torch import nn

import models.encodings as encodings
from models import MODELS
from models.base import ModelSpec, Recommender
from models.encodings.base import PositionalEncoding, Positions
from pipeline import train as stage
from pipeline.train import runs as run_files
from pipeline.train import setup as train_setup
from pipeline.train import tasks as train_tasks
from pipeline.errors import DataError, ParamsError, UnknownNameError
from pipeline.batches import load_samples
from pipeline.io import sha256_file, write_json, write_split
from pipeline.params import Params, TrainParams, from_dict, to_dict

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- fixtures

def next_item_frame(n_items: int, sessions: int, start_id: int, rng: np.random.Generator) -> pl.DataFrame:
    """Samples of the rule `next item = item + 1 (mod n_items, ids 1..n_items)`, prefixes of 1..6 items."""
    rows = []
    for s in range(sessions):
        first = int(rng.integers(1, n_items + 1))
        length = int(rng.integers(1, 7))
        seq = [(first - 1 + i) % n_items + 1 for i in range(length + 1)]
        rows.append((start_id + s, seq[:-1], seq[-1]))
    return pl.DataFrame({"session_id": [r[0] for r in rows], "prefix": [r[1] for r in rows],
                         "target": [r[2] for r in rows]},
                        schema={"session_id": pl.Int64, "prefix": pl.List(pl.Int32), "target": pl.Int32})


def make_samples(root: Path, n_items: int = 12, train: int = 300, held: int = 60, seed: int = 0,
                 dataset: str = "toyset") -> Path:
    rng = np.random.default_rng(seed)
    shards = []
    for i, (split, n) in enumerate((("train", train), ("valid", held), ("test", held))):
        shards += write_split(root, split, next_item_frame(n_items, n, 10_000 * i, rng))
    write_json(root / "manifest.json", {"stage": "augment", "dataset": dataset, "protocol": "srgnn",
                                        "n_items": n_items, "shards": shards,
                                        "augment": {s: "prefixes" for s in ("train", "valid", "test")}})
    return root


class ToyEncoding(PositionalEncoding):
    """Learned absolute positions added to the input (enough to exercise the hook)."""
    name = "toy_lpe"

    def __init__(self, dim: int, max_len: int):
        super().__init__()
        self.pos_emb = nn.Embedding(max_len, dim)

    def embed(self, x, pos: Positions):
        return x + self.pos_emb(pos.backward) * pos.mask[..., None]          # (B, L, D)


class ToyRecommender(Recommender):
    """Last item -> MLP: learns `next = item + 1` in a few epochs."""

    def __init__(self, n_items: int, dim: int, encoding):
        super().__init__()
        self.n_items, self.encoding = n_items, encoding
        self.emb = nn.Embedding(n_items + 1, dim, padding_idx=0)
        self.mix = nn.Linear(dim, dim)
        self.out = nn.Embedding(n_items + 1, dim)

    def encode(self, seqs):
        pos = Positions.from_seqs(seqs)
        x = self.emb(seqs)                                                 # (B, L, D)
        if self.encoding is not None:
            x = self.encoding.embed(x, pos)
        return self.mix(x[:, -1])                                          # (B, D)

    def item_weights(self):
        return self.out.weight                                             # (N, D)


@pytest.fixture
def toy_registry(monkeypatch):
    """Register the toy model and encoding for the test only (the real ones may be absent)."""
    class Spec:
        def __init__(self):
            self.name, self.description = "toy_lpe", "test encoding"

        def build(self, dim, max_len, heads, layers, options):
            return ToyEncoding(dim, max_len)

    monkeypatch.setitem(encodings.ENCODINGS, "toy_lpe", Spec())
    if hasattr(encodings, "build_encoding"):
        monkeypatch.setattr(train_setup, "build_encoding",
                            lambda name, tp, options, dim=None: ToyEncoding(tp.dim, tp.max_len) if name == "toy_lpe"
                            else encodings.build_encoding(name, dim=tp.dim, max_len=tp.max_len, heads=tp.heads,
                                                          layers=tp.layers, options=options))

    def build(n_items, max_len, train, options, encoding):
        return ToyRecommender(n_items, train.dim, encoding)

    monkeypatch.setitem(MODELS, "toy", ModelSpec(name="toy", build=build, description="test model",
                                                 presets={"quick": {"epochs": 1, "lr": 0.05}}))


def params(model: str = "toy", encoding: str = "toy_lpe", seeds=(1,), **train) -> Params:
    """Params for a hand run: `model` x `encoding` is the study grid (the run's default), seeds study.seeds."""
    base = dict(epochs=8, batch_size=32, lr=0.02, dim=16, layers=1, heads=1, dropout=0.0, max_len=8, patience=3,
                select_metric="ndcg@5", device="cpu")
    base.update(train)
    return from_dict(Params, {"datasets": [], "train": base, "evaluate": {"ks": [1, 5], "batch_size": 64},
                              "study": {"seeds": list(seeds),
                                        "next_item": {"models": [model], "encodings": [encoding]},
                                        "ctr": {}},
                              "models": {model: {}}, "encodings": {encoding: {}}})


# --------------------------------------------------------------------------- training

def test_toy_model_learns_and_run_folder_is_complete(tmp_path, toy_registry):
    samples = make_samples(tmp_path / "samples")
    runs = tmp_path / "runs"
    [res] = stage.run("toyset", samples, runs, params(), progress=False)
    assert res["name"] == "toy-toy_lpe/seed-1" and res["config"] == "toy-toy_lpe"
    assert res["test"]["hr@1"] > 0.95
    run_dir = runs / "toy-toy_lpe" / "seed-1"
    assert sorted(os.listdir(run_dir)) == ["checkpoint.pt", "run.json", "test_samples.parquet", "timing.json"]
    assert [p.name for p in runs.rglob("*") if "tmp" in p.name or p.name.startswith(".")] == []
    record = json.loads((run_dir / "run.json").read_text())
    assert record["dataset"] == "toyset" and record["protocol"] == "srgnn" and record["n_items"] == 12
    assert record["samples"] == {"train": 300, "valid": 60, "test": 60}
    assert record["best_epoch"] == max(record["history"], key=lambda h: h["valid"]["ndcg@5"])["epoch"]
    assert record["test"] == res["test"]
    assert set(record["test"]) == {"hr@1", "hr@5", "mrr@1", "mrr@5", "ndcg@1", "ndcg@5"}
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert ckpt["epoch"] == record["best_epoch"] and ckpt["config"]["n_items"] == 12
    assert ckpt["config"]["train"]["dim"] == 16
    timing = json.loads((run_dir / "timing.json").read_text())
    assert "samples_per_s" in timing["epochs"][0] and timing["world_size"] == 1
    # walk 35a: the git commit (and "dirty", which DVC's own rewrite of dvc.lock sets) in run.json changed every
    # run.json of a teammate's `dvc repro` at a later commit; run.json has the source hash, timing.json the commit
    from pipeline.versions import code_hash, versions
    assert record["versions"]["seqpe_code"] == code_hash() and not {"seqpe_git", "seqpe_dirty"} & set(record["versions"])
    assert timing["checkout"] == {k: v for k, v in versions().items() if k in ("seqpe_git", "seqpe_dirty")}


def test_a_reused_seed_takes_away_what_a_killed_rerun_left_beside_it(tmp_path, toy_registry):
    """Walk 35c: a rerun killed while writing left `.seed-1.p<pid>.*.tmp` beside the seed; the next command reused
    the finished seed and left it there until some later write."""
    samples = make_samples(tmp_path / "samples")
    stage.run("toyset", samples, tmp_path / "runs", params(epochs=1), progress=False)
    config = tmp_path / "runs" / "toy-toy_lpe"
    (config / ".seed-1.p999999999.abc12345.tmp").mkdir()                  # a dead writer's
    before = (config / "seed-1" / "timing.json").read_bytes()
    stage.run("toyset", samples, tmp_path / "runs", params(epochs=1), progress=False)
    assert (config / "seed-1" / "timing.json").read_bytes() == before          # reused, not trained again
    assert sorted(p.name for p in config.iterdir()) == ["seed-1"]


def test_same_seed_same_weights_and_bytes_other_seed_differs(tmp_path, toy_registry):
    samples = make_samples(tmp_path / "samples")
    p = params(epochs=2)
    stage.run("toyset", samples, tmp_path / "a", p, seeds=[5, 6], progress=False)
    stage.run("toyset", samples, tmp_path / "b", p, seeds=[5], progress=False)
    def state(root, seed):
        return torch.load(root / "toy-toy_lpe" / f"seed-{seed}" / "checkpoint.pt", weights_only=True)["model"]
    a5, b5, a6 = state(tmp_path / "a", 5), state(tmp_path / "b", 5), state(tmp_path / "a", 6)
    assert all(torch.equal(a5[k], b5[k]) for k in a5)
    assert not all(torch.equal(a5[k], a6[k]) for k in a5)
    rel = Path("toy-toy_lpe/seed-5")
    for name in ("run.json", "checkpoint.pt"):
        assert (tmp_path / "a" / rel / name).read_bytes() == (tmp_path / "b" / rel / name).read_bytes()


def test_best_epoch_is_chosen_on_valid_and_test_is_scored_once_with_its_weights(tmp_path, toy_registry, monkeypatch):
    samples = make_samples(tmp_path / "samples")
    scripted = iter([0.1, 0.5, 0.3, 0.2, 0.9])          # patience 2: stops after epoch 4, best = 2
    seen: dict[str, list] = {"valid": [], "test": []}

    def fake_score(net, data, split, ks, batch_size, device, trim=True, mask_history=False, per_sample=False,
                   **kwargs):
        seen[split].append({k: v.clone() for k, v in net.state_dict().items()})
        value = next(scripted) if split == "valid" else 0.25
        out = {"hr@1": value, "hr@5": value, "mrr@1": value, "mrr@5": value, "ndcg@1": value, "ndcg@5": value}
        return (out, pl.DataFrame({"greater": [0], "ties": [0]})) if per_sample else out

    monkeypatch.setattr(train_tasks, "score", fake_score)
    [res] = stage.run("toyset", samples, tmp_path / "runs", params(patience=2), progress=False)
    assert res["best_epoch"] == 2 and res["valid"]["ndcg@5"] == 0.5
    assert len(seen["valid"]) == 4 and len(seen["test"]) == 1
    best, tested = seen["valid"][1], seen["test"][0]
    assert all(torch.equal(best[k], tested[k]) for k in best)
    assert not all(torch.equal(seen["valid"][3][k], tested[k]) for k in best)
    ckpt = torch.load(tmp_path / "runs" / "toy-toy_lpe" / "seed-1" / "checkpoint.pt", weights_only=True)
    assert all(torch.equal(best[k], ckpt["model"][k]) for k in best)
    record = json.loads((tmp_path / "runs" / "toy-toy_lpe" / "seed-1" / "run.json").read_text())
    assert [h["epoch"] for h in record["history"]] == [1, 2, 3, 4] and record["test"]["hr@1"] == 0.25


def state_files(kind: str) -> list[str]:
    root = run_files.state_root() / kind
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def test_a_seed_another_process_is_training_is_refused_and_reused_once_it_finishes(tmp_path, toy_registry,
                                                                                   monkeypatch):
    """Two `seqpe train` of the same seed from one folder: the second stops at once, in one line, writing
    nothing (it used to train the seed again beside the first, both on one resume file and run folder).
    The lock is a real flock, held here by another process; once that process is gone the seed trains,
    and the finished configuration leaves no lock behind."""
    samples = make_samples(tmp_path / "samples")
    monkeypatch.setattr(run_files, "hash_inputs", lambda *a, **k: "f" * 20)
    lock = run_files.state_root() / "locks" / ("f" * 20)
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = _hold_lock(lock)
    try:
        with pytest.raises(DataError, match="toyset toy-toy_lpe seed 1 is being trained right now by another "
                                            "seqpe process") as err:
            stage.run("toyset", samples, tmp_path / "runs", params(epochs=1), progress=False)
        assert len(str(err.value).splitlines()) == 1 and "run this command again" in str(err.value)
        assert not (tmp_path / "runs").exists() and state_files("resume") == []
    finally:
        holder.kill()
        holder.wait()
    [res] = stage.run("toyset", samples, tmp_path / "runs", params(epochs=1), progress=False)
    assert res["stopped"] == "epochs" and state_files("locks") == []


def test_under_dvc_a_seed_another_process_is_training_is_waited_for(tmp_path, toy_registry, monkeypatch, capfd):
    """Walk 35a: `dvc queue start -j 2` with a shared SEQPE_STATE ran two experiments that train the same seed (their
    params differ only where it does not read); the second failed, "started from this folder" when it was not.
    Under DVC (DVC_STAGE set) it now waits for the lock and goes on; the message names the holder's pid."""
    import threading
    samples = make_samples(tmp_path / "samples")
    monkeypatch.setattr(run_files, "hash_inputs", lambda *a, **k: "e" * 20)
    lock = run_files.state_root() / "locks" / ("e" * 20)
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text('{"pid": 4242}')
    holder = _hold_lock(lock)
    try:
        with pytest.raises(DataError, match=r"is being trained right now by another seqpe process \(pid 4242\) with "
                                            r"the same state root"):
            stage.run("toyset", samples, tmp_path / "runs", params(epochs=1), progress=False)
        monkeypatch.setenv("DVC_STAGE", "train@toyset-toy-toy_lpe")
        done = []
        waiter = threading.Thread(target=lambda: done.append(
            stage.run("toyset", samples, tmp_path / "runs", params(epochs=1), progress=False)))
        waiter.start()
        waiter.join(3)
        assert waiter.is_alive() and not done                     # waiting, not refused
    finally:
        holder.kill()
        holder.wait()
    waiter.join(120)
    assert done and done[0][0]["stopped"] == "epochs"
    assert "note: toyset toy-toy_lpe seed 1 is being trained right now by another seqpe process (pid 4242) with the " \
           "same state root" in capfd.readouterr().err
    from pipeline.train import state as train_state
    closed = []                        # walk 35c: the fingerprint's lock went first, so the waiter woke to find the run

    class Handle:                      # folder's still held, and was refused after its wait
        def __init__(self, name):
            self.name = name

        def close(self):
            closed.append(self.name)

    train_state.SeedLock([Handle("fingerprint"), Handle("run folder")]).release()
    assert closed == ["run folder", "fingerprint"]


def _hold_lock(path: Path):
    """Another process holding a real flock on `path` until killed."""
    import subprocess
    import textwrap
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, time
        handle = open({str(path)!r}, "a")
        fcntl.flock(handle, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(120)""")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def _state_cli(*args):
    from test_cli import seqpe
    return seqpe("state", *args)


def _state(*args):
    proc = _state_cli(*args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_state_lists_a_state_it_cannot_write(tmp_path):
    """Listing writes nothing: `seqpe state` in a read-only folder refused with "cannot be written" (walk 45a #6);
    --prune, which deletes, still does."""
    from test_cli import seqpe_env
    env = {"SEQPE_STATE": "/proc/seqpe-state"}                 # nothing can be made there, root or not
    proc = seqpe_env(env, "state")
    assert proc.returncode == 0 and proc.stdout.strip() == "/proc/seqpe-state holds no training state", proc.stderr
    proc = seqpe_env(env, "state", "--prune")
    assert proc.returncode == 1 and "SEQPE_STATE=/proc/seqpe-state cannot be written" in proc.stderr


def test_state_lists_what_train_keeps_and_prune_spares_a_seed_being_trained(tmp_path, toy_registry):
    """`seqpe state` names each resume file and finished copy (dataset, configuration, seed, epoch, status);
    --prune deletes them, but not those of a seed whose lock a running process holds, nor anything under
    the root that seqpe did not write, and never a run folder."""
    samples = make_samples(tmp_path / "samples")
    stage.run("toyset", samples, tmp_path / "runs", params(seeds=(1, 2), epochs=4, patience=0, time_limit=1e-9),
              progress=False)                                   # stopped after epoch 1: resumable, kept
    stage.run("toyset", samples, tmp_path / "runs", params(seeds=(1,), epochs=4, patience=0, time_limit=1e-9,
                                                           lr=0.03), progress=False, tag="b")   # another configuration
    root = run_files.state_root()
    (root / "done" / "thesis").mkdir()
    (root / "done" / "thesis" / "chapter1.tex").write_text("years of work")
    (root / "resume" / "my-model.pt").write_bytes(b"mine")
    listed = json.loads(_state("--json"))
    a, b = "toyset toy-toy_lpe seed", "toyset toy-toy_lpe-b seed 1"
    assert sorted((e["kind"], e["what"], e["epoch"], e["status"]) for e in listed) == [
        ("finished", f"{a} 1", 1, "stopped by train.time_limit"), ("finished", f"{a} 2", 1, "stopped by train.time_limit"),
        ("finished", b, 1, "stopped by train.time_limit"),
        ("resume", f"{a} 1", 1, "resumable"), ("resume", f"{a} 2", 1, "resumable"), ("resume", b, 1, "resumable")]
    assert {(e["epochs"], e["processes"]) for e in listed} == {(4, 1)}
    table = _state()
    assert f"{a} 2" in table and "1 of 4" in table and "resumable" in table
    from test_cli import ROOT
    narrow = subprocess.run([sys.executable, "-m", "pipeline.cli", "state"], cwd=ROOT, capture_output=True,
                            text=True, env=dict(os.environ, COLUMNS="80")).stdout
    assert "train.time_limit" in narrow and max(map(len, narrow.splitlines())) <= 80, narrow   # no word cut
    seed1 = next(e["fingerprint"] for e in listed if e["what"] == f"{a} 1")
    holder = _hold_lock(root / "locks" / seed1)            # seed 1 of the first configuration is training
    try:
        status = {(e["kind"], e["what"]): e["status"] for e in json.loads(_state("--json"))}
        assert status[("resume", f"{a} 1")] == status[("finished", f"{a} 1")] == "training now"
        assert status[("resume", f"{a} 2")] == status[("finished", f"{a} 2")] == "kept: its configuration is training"
        pruned = json.loads(_state("--prune", "--json"))          # the time-limited copy: never read again
        assert [(e["kind"], e["what"]) for e in pruned["deleted"]] == [("finished", b)], pruned
        assert pruned["bytes_freed"] > 0
        pruned = json.loads(_state("--prune", "--all", "--json"))  # and the resumable seed
        assert [(e["kind"], e["what"]) for e in pruned["deleted"]] == [("resume", b)], pruned
        assert sorted(e["what"] for e in pruned["kept"]) == [f"{a} 1", f"{a} 1", f"{a} 2", f"{a} 2"]
    finally:
        holder.kill()
        holder.wait()
    out = " ".join(_state("--prune").split())
    assert "deleted 2 entries" in out and "kept 2 that this checkout would go on from" in out \
        and "--prune --all deletes them too" in out, out
    assert "deleted 2 entries" in _state("--prune", "--all")
    assert state_files("resume") == ["my-model.pt"] and state_files("done") == ["thesis"]   # not seqpe's: kept
    assert (root / "done" / "thesis" / "chapter1.tex").read_text() == "years of work"
    assert "holds no training state" in _state()
    assert (tmp_path / "runs" / "toy-toy_lpe" / "seed-2" / "run.json").is_file()     # runs are not state


def test_prune_keeps_finished_and_resumable_seeds_of_this_code_unless_all(tmp_path, toy_registry, monkeypatch):
    """Seed 1 finished, seed 2 stopped (a crash, Ctrl-C): seed 1's copy waits for its configuration, which the
    next `dvc repro` restores instead of retraining seed 1. A plain --prune keeps it and seed 2's resume file
    (walk 28: it deleted seed 1, which was then trained again) and deletes the copy of a seed that other code
    finished; --prune --all deletes them all."""
    samples = make_samples(tmp_path / "samples")
    code = run_files.code_versions()
    stage.run("toyset", samples, tmp_path / "runs", params(seeds=(1, 2), epochs=3, patience=0, time_limit=1e-9),
              progress=False, tag="z")
    monkeypatch.setattr(run_files, "code_versions", lambda: {**code, "seqpe_code": "edited"})
    stage.run("toyset", samples, tmp_path / "runs2", params(seeds=(1, 2), epochs=3, patience=0, time_limit=1e-9),
              progress=False, tag="w")
    monkeypatch.setattr(run_files, "code_versions", lambda: code)
    for copy in state_files("done"):                # stopped by the time limit, as copies read; made finished
        path = run_files.state_root() / "done" / copy / "run.json"   # (a new file: the run folder's hard link
        new = path.with_suffix(".new")                                # keeps saying time_limit, so its resume
        new.write_text(json.dumps({**json.loads(path.read_text()), "stopped": "epochs"}))   # file's seed is not
        new.replace(path)                                                                 # finished there)
    status = sorted((e["kind"], e["what"].split()[1], e["status"]) for e in json.loads(_state("--json")))
    assert status == [
        ("finished", "toy-toy_lpe-w", "finished by other seqpe code"),
        ("finished", "toy-toy_lpe-w", "finished by other seqpe code"),
        ("finished", "toy-toy_lpe-z", "kept until its configuration finishes"),
        ("finished", "toy-toy_lpe-z", "kept until its configuration finishes"),
        ("resume", "toy-toy_lpe-w", "resumable by other seqpe code"),
        ("resume", "toy-toy_lpe-w", "resumable by other seqpe code"),
        ("resume", "toy-toy_lpe-z", "resumable"), ("resume", "toy-toy_lpe-z", "resumable")], status
    pruned = json.loads(_state("--prune", "--json"))
    assert sorted(e["what"].split()[1] for e in pruned["deleted"]) == ["toy-toy_lpe-w"] * 4
    assert sorted(e["status"] for e in pruned["kept"]) == ["kept until its configuration finishes"] * 2 + \
        ["resumable"] * 2
    assert len(state_files("done")) == 2 and len(state_files("resume")) == 2
    proc = _state_cli("--all")
    assert proc.returncode == 1 and "--all goes with --prune" in proc.stderr
    assert len(json.loads(_state("--prune", "--all", "--json"))["deleted"]) == 4
    assert state_files("done") == [] and state_files("resume") == []


def test_prune_all_keeps_what_a_starting_training_will_go_on_from(tmp_path, toy_registry):
    """A `seqpe train` that had started but not yet taken its seed's lock (seconds of loading), or was between two
    seeds, held nothing `state --prune --all` could see: it deleted the resume file the command was about to go on
    from, and the seed started afresh without a word (walk 44g #3). The command holds its configuration's lock
    (shared, from before it loads) from its start: prune keeps that configuration's seeds; once released, --all
    deletes them."""
    import textwrap
    samples = make_samples(tmp_path / "samples")
    stage.run("toyset", samples, tmp_path / "runs", params(seeds=(1, 2), epochs=4, patience=0, time_limit=1e-9),
              progress=False)                                   # stopped after epoch 1: two resumable seeds
    stage.run("toyset", samples, tmp_path / "runs", params(seeds=(1,), epochs=4, patience=0, time_limit=1e-9,
                                                           lr=0.03), progress=False, tag="b")   # another configuration
    from test_cli import ROOT
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import time
        from pipeline.train import state
        held = state.hold_config("toyset", "toy-toy_lpe")
        print("held", flush=True)
        time.sleep(120)""")], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        also = stage.state.hold_config("toyset", "toy-toy_lpe")     # shared: another command of it holds it too
        also.close()
        status = {(e["kind"], e["what"]): e["status"] for e in json.loads(_state("--json"))}
        assert status[("resume", "toyset toy-toy_lpe seed 2")] == "kept: its configuration is training"
        pruned = json.loads(_state("--prune", "--all", "--json"))
        assert sorted(e["what"] for e in pruned["deleted"]) == ["toyset toy-toy_lpe-b seed 1"] * 2, pruned
        assert sorted(e["what"] for e in pruned["kept"]) == ["toyset toy-toy_lpe seed 1"] * 2 + \
            ["toyset toy-toy_lpe seed 2"] * 2
    finally:
        holder.kill()
        holder.wait()
    pruned = json.loads(_state("--prune", "--all", "--json"))
    assert len(pruned["deleted"]) == 4 and pruned["lock_files_removed"] >= 1
    assert not [p for p in (run_files.state_root() / "locks").glob("cfg-*")]


def test_prune_keeps_the_finished_seeds_of_a_configuration_still_training(tmp_path, toy_registry):
    """Seed 1 finished, seed 2 of the same configuration training (its lock held, naming the configuration):
    seed 1's copy is what a crashed seed 2 reruns without retraining seed 1, so prune keeps it (and the
    configuration's resume files, which its running command goes on to)."""
    samples = make_samples(tmp_path / "samples")
    stage.run("toyset", samples, tmp_path / "runs", params(seeds=(1,), epochs=1), progress=False)
    assert state_files("done") == [] and state_files("locks") == []   # a finished configuration leaves no state
    assert not (run_files.state_root() / "locks").exists()          # nor its cfg- lock (walk 45h #4)
    stage.run("toyset", samples, tmp_path / "runs2", params(seeds=(1,), epochs=4, patience=0, time_limit=1e-9),
              progress=False)
    [copy] = state_files("done")
    record = json.loads((run_files.state_root() / "done" / copy / "run.json").read_text())
    record["stopped"] = "epochs"                        # as a finished seed's copy reads
    (run_files.state_root() / "done" / copy / "run.json").write_text(json.dumps(record))
    lock = run_files.state_root() / "locks" / ("a" * 20)
    lock.write_text(json.dumps({"dataset": "toyset", "config": "toy-toy_lpe", "seed": 2}))
    holder = _hold_lock(lock)
    try:
        [entry] = [e for e in json.loads(_state("--json")) if e["kind"] == "finished"]
        assert entry["status"] == "kept: its configuration is training"
        pruned = json.loads(_state("--prune", "--json"))
        assert sorted(e["kind"] for e in pruned["kept"]) == ["finished", "resume"] and copy in state_files("done")
        assert pruned["deleted"] == []
    finally:
        holder.kill()
        holder.wait()


def test_state_shows_a_damaged_resume_file_and_train_says_it_starts_afresh(tmp_path, toy_registry, capfd):
    samples = make_samples(tmp_path / "samples")
    p = params(seeds=(1,), epochs=3, patience=0, time_limit=1e-9)
    stage.run("toyset", samples, tmp_path / "runs", p, progress=False)
    [name] = state_files("resume")
    path = run_files.state_root() / "resume" / name
    path.write_bytes(path.read_bytes()[:1000])          # truncated
    [entry] = [e for e in json.loads(_state("--json")) if e["kind"] == "resume"]
    assert entry["status"] == "damaged" and entry["epoch"] is None
    capfd.readouterr()
    stage.run("toyset", samples, tmp_path / "runs", params(seeds=(1,), epochs=3, patience=0), progress=False)
    err = capfd.readouterr().err
    assert f"note: toyset toy-toy_lpe seed 1: its resume file {path} was damaged (unreadable)" in err
    assert "starts afresh from epoch 1" in err


@pytest.mark.parametrize("tamper, why", [
    (lambda s: {}, "it has no model, optimizer, torch_rng, generator, loop, history, timing"),
    (lambda s: {**s, "loop": {**s["loop"], "epoch": 7}}, "it is at epoch 7, and this run trains epochs 1 to 3"),
    (lambda s: {**s, "model": {**s["model"], next(iter(s["model"])): torch.zeros(3, 3)}},
     "its weights are not this model's"),
    (lambda s: {k: v for k, v in s.items() if k != "optimizer"}, "it has no optimizer"),
    (lambda s: {**s, "history": "abc"}, "its history is not one record per epoch"),
    (lambda s: {**s, "generator": torch.zeros(3, dtype=torch.uint8)}, "RuntimeError restoring it"),
    # walk 40a #1: a best epoch outside its epochs ended the run in a StopIteration, saved again at every rerun
    (lambda s: {**s, "loop": {**s["loop"], "best_epoch": 7, "best_value": 1e9}}, "its loop state (best epoch 7"),
    (lambda s: {**s, "history": [{**h, "valid": {}} for h in s["history"]]}, "its history is not epochs 1 to 1"),
    # walk 40a #2: another configuration's file of the same shapes brought its lr in the optimizer state
    (lambda s: {**s, "inputs": {**s["inputs"], "train": {**s["inputs"]["train"], "lr": 0.5}}},
     "it was written by a run of other settings (train.lr: 0.5 vs"),
])
def test_a_resume_file_torch_reads_but_that_does_not_fit_the_run_starts_the_seed_afresh(tmp_path, toy_registry,
                                                                                        capfd, tamper, why):
    """Walk 39c #2: such a file was a traceback at every rerun (KeyError 'model', a size mismatch), wasted an
    epoch (history a string), or was trained on as "epoch 7 of 2"; `seqpe state` kept listing it."""
    samples = make_samples(tmp_path / "samples")
    whole = stage.run("toyset", samples, tmp_path / "whole", params(seeds=(1,), epochs=3, patience=0),
                      progress=False)
    stage.run("toyset", samples, tmp_path / "runs", params(seeds=(1,), epochs=3, patience=0, time_limit=1e-9),
              progress=False)
    [name] = state_files("resume")
    path = run_files.state_root() / "resume" / name
    torch.save(tamper(torch.load(path, weights_only=True)), path)
    capfd.readouterr()
    [res] = stage.run("toyset", samples, tmp_path / "runs", params(seeds=(1,), epochs=3, patience=0), progress=False)
    err = capfd.readouterr().err
    assert f"its resume file {path} does not fit this run ({why}" in err and "starts afresh from epoch 1" in err
    assert res["test"] == whole[0]["test"] and not path.exists()     # the uninterrupted run's result


def test_state_skips_an_entry_that_goes_while_it_is_listed(tmp_path, toy_registry, monkeypatch):
    """A seed that finishes while `seqpe state` lists drops its resume file between the listing and the read:
    the entry is skipped (it used to end the command with "No such file or directory")."""
    from pipeline.train import state as train_state
    samples = make_samples(tmp_path / "samples")
    stage.run("toyset", samples, tmp_path / "runs", params(seeds=(1,), epochs=4, patience=0, time_limit=1e-9),
              progress=False)

    def gone(path):
        path.unlink()
        raise FileNotFoundError(path)

    monkeypatch.setattr(train_state, "_resume_info", gone)
    assert [e["kind"] for e in train_state.entries()] == ["finished"]
    deleted, kept, _ = train_state.prune()
    assert [e["kind"] for e in deleted] == ["finished"] and kept == []


def test_prune_removes_the_lock_files_no_process_holds(tmp_path, monkeypatch):
    """A seed killed before its first epoch leaves its two lock files and nothing else: --prune removes them
    (they stayed until their configuration finished), not a held one nor a file seqpe did not write. The
    machine's lock folder (run and output folders' locks) grew with every command (walk 35c #6): pruned too."""
    import tempfile
    from pipeline import io
    from pipeline.train import state as train_state
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))             # a machine lock folder of this test's own
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    root = run_files.state_root()
    train_state.lock_seed("b" * 20, tmp_path / "runs" / "m-e" / "seed-1",
                          {"dataset": "toyset", "config": "m-e", "seed": 1}).release()
    (root / "locks" / "notes.txt").write_text("mine")
    machine = io.machine_locks()
    with io.atomic_dirs(tmp_path / "a", tmp_path / "b") as (a, b):    # a pair's swap: two out- lock files
        (a / "x").write_text("a")
        (b / "x").write_text("b")
    with io.claims_released():                                         # a data stage's writer lock: a w- file
        io.claim_dir(tmp_path / "c", "toyset", "sessions")
    holders = [_hold_lock(root / "locks" / ("c" * 20)), _hold_lock(machine / ("dir-" + "d" * 20))]
    try:
        dir_lock = run_files.lock_path(train_state.dir_lock(tmp_path / "runs" / "m-e" / "seed-1"))
        assert dir_lock.parent == machine and dir_lock.parent != root / "locks"   # the run folder's: the machine's
        assert len(state_files("locks")) == 3 and "holds no training state" in _state()
        assert sorted(p.name.split("-")[0] for p in machine.iterdir()) == ["dir", "dir", "out", "out", "w"]
        out = _state("--prune")
        assert "deleted 0 entries" in out and f"and unheld lock files (1 in {root / 'locks'}; 4 in {machine})" in \
            " ".join(out.split()), out                                   # where each was (walk 39e #4)
        assert sorted(state_files("locks")) == ["c" * 20, "notes.txt"]
        assert [p.name for p in machine.iterdir()] == ["dir-" + "d" * 20]
        assert json.loads(_state("--prune", "--json"))["lock_files_removed"] == 0
        assert train_state.lock_seed("b" * 20, tmp_path / "runs" / "m-e" / "seed-1",     # made again when needed
                                     {"dataset": "toyset", "config": "m-e", "seed": 1}) is not None and dir_lock.is_file()
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()


def test_a_finished_configuration_leaves_the_lock_files_others_hold(tmp_path):
    """Walk 36c: a configuration that finished deleted its seeds' run-folder lock files without taking them, while
    another training held one: a third command then made a new file, locked it, and wrote the same run folder."""
    from pipeline.train import state as train_state
    held = run_files.lock_path(train_state.dir_lock(tmp_path / "runs" / "m-e" / "seed-1"))
    free = run_files.lock_path(train_state.dir_lock(tmp_path / "runs" / "m-e" / "seed-2"))
    free.touch()
    holder = _hold_lock(held)
    try:
        run_files.forget([], (held.name, free.name))
        assert held.is_file() and not free.exists()
        with pytest.raises(DataError, match="is being written right now"):     # so a third command is refused
            train_state.lock_seed("e" * 20, tmp_path / "runs" / "m-e" / "seed-1",
                                  {"dataset": "toyset", "config": "m-e", "seed": 1})
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_file_deleted_while_a_process_waits_on_it_is_taken_again(tmp_path):
    """`seqpe state --prune` deletes a lock file nobody holds. A process that had opened it just before must not
    then lock the deleted file (another process would make a new one and lock that too): io.flock checks that
    the path still names the file it locked, and opens it again when not."""
    import threading
    import time
    from pipeline import io
    path = tmp_path / "lock"
    first = io.flock(path)
    got = []
    waiter = threading.Thread(target=lambda: got.append(io.flock(path, wait=True)))
    waiter.start()                             # opens the file, then blocks on first's lock
    time.sleep(0.3)
    path.unlink()                              # what prune does, holding the lock
    first.close()
    waiter.join(10)
    assert got and got[0] is not None and path.is_file()
    assert os.fstat(got[0].fileno()).st_ino == os.stat(path).st_ino        # the file at the path, not the deleted one
    assert io.flock(path) is None                                          # so it excludes the next taker
    got[0].close()


def test_state_below_a_project_points_at_its_state(tmp_path):
    tmp_path = tmp_path / ("long-" * 20)        # paths past the console's 80 columns are printed whole, unwrapped
    (tmp_path / ".seqpe" / "resume").mkdir(parents=True)
    (tmp_path / "data").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SEQPE_STATE"}
    import subprocess
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "state"], cwd=tmp_path / "data", env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and f"{tmp_path / '.seqpe'} holds the state of the project above" in proc.stderr
    assert "holds no training state" in proc.stdout and not (tmp_path / "data" / ".seqpe").exists()


def test_a_run_folder_another_command_is_writing_is_refused(tmp_path, toy_registry, monkeypatch):
    """Another `seqpe train` of the same seed with other settings (another fingerprint) writes the same run
    folder: its lock is held, so this one stops in one line and writes nothing."""
    from pipeline.train import state as train_state
    samples = make_samples(tmp_path / "samples")
    run_dir = tmp_path / "runs" / "toy-toy_lpe" / "seed-1"
    lock = run_files.lock_path(train_state.dir_lock(run_dir))
    # walk 35b: the run folder's lock lived under the state root, so a command from another folder (or with another
    # SEQPE_STATE) never met it and replaced the run; it is now the machine's, whatever the state root
    monkeypatch.setenv("SEQPE_STATE", str(tmp_path / "another-state"))
    assert run_files.lock_path(train_state.dir_lock(run_dir)) == lock
    (tmp_path / "linked").symlink_to(tmp_path, target_is_directory=True)    # walk 35c: through a linked parent,
    assert train_state.dir_lock(tmp_path / "linked" / "runs" / "toy-toy_lpe" / "seed-1") == lock.name   # one lock
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = _hold_lock(lock)
    try:
        with pytest.raises(DataError, match=r"seed-1 is being written right now by another seqpe train \(of toyset "
                                            r"toy-toy_lpe seed 1, with other settings, or from another folder or "
                                            r"SEQPE_STATE\).*Fix: pass --tag NAME to train these "
                                            r"settings beside that run; or wait .* which then replaces that run"):
            stage.run("toyset", samples, tmp_path / "runs", params(epochs=1), progress=False)
        assert not (tmp_path / "runs").exists() and state_files("resume") == []
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("where, message", [
    ("afile", "is a file, not a folder"),
    ("samples/state", "holds toyset's samples"),
    ("runs", "is a runs folder"),
    ("runs/toy-toy_lpe", "is a configuration's runs folder"),
    ("runs/toy-toy_lpe/state", "which holds toyset's seeds of one configuration")])
def test_a_state_root_that_is_not_a_folder_of_its_own_is_refused_naming_seqpe_state(tmp_path, toy_registry,
                                                                                    monkeypatch, where, message):
    samples = make_samples(tmp_path / "samples")
    stage.run("toyset", samples, tmp_path / "runs", params(epochs=1), progress=False)
    (tmp_path / "afile").write_text("mine")
    monkeypatch.setenv("SEQPE_STATE", str(tmp_path / where))
    with pytest.raises(DataError, match=message) as err:
        stage.run("toyset", samples, tmp_path / "runs", params(seeds=(2,), epochs=1), progress=False)
    assert "SEQPE_STATE" in str(err.value)
    assert not (tmp_path / "runs" / "toy-toy_lpe" / "seed-2").exists()
    proc = _state_cli()
    assert proc.returncode == 1 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_named_state_root_stays_empty_and_the_default_goes_when_a_configuration_is_finished(
        tmp_path, toy_registry, monkeypatch):
    """SEQPE_STATE whose parents did not exist: training made them, and removing the emptied root left them
    behind, empty; a named root now stays (emptied), the default .seqpe is removed."""
    samples = make_samples(tmp_path / "samples")
    named = tmp_path / "new" / "deeper" / "state"
    monkeypatch.setenv("SEQPE_STATE", str(named))
    stage.run("toyset", samples, tmp_path / "runs", params(epochs=1), progress=False)
    assert named.is_dir() and list(named.iterdir()) == []
    monkeypatch.delenv("SEQPE_STATE")
    monkeypatch.chdir(tmp_path)
    stage.run("toyset", samples, tmp_path / "runs2", params(epochs=1), progress=False)
    assert (tmp_path / "runs2" / "toy-toy_lpe" / "seed-1" / "run.json").is_file()
    assert not (tmp_path / ".seqpe").exists()


def test_failed_run_leaves_no_partial_folder(tmp_path, toy_registry, monkeypatch):
    samples = make_samples(tmp_path / "samples")
    monkeypatch.setattr(run_files, "write_json", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        stage.run("toyset", samples, tmp_path / "runs", params(epochs=1), progress=False)
    assert [p.name for p in (tmp_path / "runs").rglob("*") if p.is_file()] == []
    assert not (tmp_path / "runs" / "toy-toy_lpe" / "seed-1").exists()
    [kept] = state_files("resume")                       # resumable, outside the runs folder
    assert kept.endswith(".pt")


def test_killed_run_resumes_to_the_same_weights(tmp_path, toy_registry, monkeypatch, capsys):
    samples = make_samples(tmp_path / "samples")
    p = params(epochs=4, patience=0, lr_schedule="step", lr_step=1, lr_gamma=0.5, dropout=0.1)
    stage.run("toyset", samples, tmp_path / "full", p, progress=False)
    real_score, calls = train_tasks.score, []

    def crash_in_epoch_3(net, data, split, *args, **kwargs):
        calls.append(split)
        if calls.count("valid") == 3:
            raise KeyboardInterrupt
        return real_score(net, data, split, *args, **kwargs)

    monkeypatch.setattr(train_tasks, "score", crash_in_epoch_3)
    with pytest.raises(KeyboardInterrupt):
        stage.run("toyset", samples, tmp_path / "cut", p, progress=False)
    assert len(state_files("resume")) == 1
    monkeypatch.setattr(train_tasks, "score", real_score)
    capsys.readouterr()
    stage.run("toyset", samples, tmp_path / "cut", p, progress=False)
    assert "toyset toy-toy_lpe seed 1: going on from its last finished epoch, 2 of 4 (resume file" \
        in capsys.readouterr().err                                     # said, in a log too
    rel = Path("toy-toy_lpe/seed-1")
    for name in ("checkpoint.pt", "run.json"):
        assert (tmp_path / "full" / rel / name).read_bytes() == (tmp_path / "cut" / rel / name).read_bytes()
    assert [f.name for f in (tmp_path / "cut" / "toy-toy_lpe").iterdir()] == ["seed-1"]
    assert state_files("resume") == [] and state_files("done") == []              # state dropped when finished


def test_time_limit_tests_the_best_epoch_so_far_and_a_rerun_without_it_goes_on(tmp_path, toy_registry):
    samples = make_samples(tmp_path / "samples")
    p = params(epochs=4, patience=0, dropout=0.1)
    stage.run("toyset", samples, tmp_path / "full", p, progress=False)
    [res] = stage.run("toyset", samples, tmp_path / "cut", params(epochs=4, patience=0, dropout=0.1,
                                                                   time_limit=1e-9), progress=False)
    rel = Path("toy-toy_lpe/seed-1")
    record = json.loads((tmp_path / "cut" / rel / "run.json").read_text())
    assert record["stopped"] == "time_limit" and record["epochs_run"] == 1 and res["best_epoch"] == 1
    assert 0 <= record["test"]["hr@1"] <= 1 and record["train"]["time_limit"] == 1e-9
    assert [f.name for f in (tmp_path / "cut" / "toy-toy_lpe").iterdir()] == ["seed-1"]
    assert len(state_files("resume")) == 1                                     # continuable
    stage.run("toyset", samples, tmp_path / "cut", p, progress=False)          # no limit: epochs 2..4
    for name in ("checkpoint.pt", "run.json"):
        assert (tmp_path / "full" / rel / name).read_bytes() == (tmp_path / "cut" / rel / name).read_bytes()
    assert json.loads((tmp_path / "full" / rel / "run.json").read_text())["stopped"] == "epochs"
    assert state_files("resume") == []


def test_a_seed_starting_afresh_beside_its_resume_file_of_other_inputs_says_why(tmp_path, toy_registry, monkeypatch,
                                                                                  capsys):
    """A resume file is used only by the same inputs, code included: session 24 finished a run from an edited
    checkout, which trained the seed afresh beside its 9 kept epochs, saying nothing."""
    samples = make_samples(tmp_path / "samples")
    cut = dict(epochs=4, patience=0, time_limit=1e-9)
    stage.run("toyset", samples, tmp_path / "runs", params(**cut), progress=False)     # epoch 1 kept
    [kept] = state_files("resume")
    capsys.readouterr()
    stage.run("toyset", samples, tmp_path / "runs", params(**cut, lr=0.03), progress=False)
    err = " ".join(capsys.readouterr().err.split())
    assert (f"note: toyset toy-toy_lpe seed 1 starts at epoch 1: {run_files.state_root() / 'resume' / kept} holds its "
            f"first 1 epoch(s) from a run of other inputs (train.lr: 0.02 vs 0.03), which this command cannot go on "
            f"from; a command of those inputs would") in err
    assert "`seqpe state --prune --all` deletes it" in err             # the same code's: usable, so --all
    for path in (run_files.state_root() / "resume").glob("*.pt"):         # the lr 0.03 run's file: the newer one
        os.utime(path, (1, 1) if path.name == kept else None)
    code = run_files.code_versions()
    monkeypatch.setattr(run_files, "code_versions", lambda: {**code, "seqpe_code": "edited"})
    stage.run("toyset", samples, tmp_path / "runs", params(**cut), progress=False)
    err = " ".join(capsys.readouterr().err.split())
    assert "other inputs (seqpe's source code (another checkout or version); train.lr: 0.03 vs 0.02), which this " \
           "command cannot go on from (1 more of this seed are kept)" in err     # the newest file of the seed named
    monkeypatch.setattr(run_files, "code_versions", lambda: code)
    stage.run("toyset", samples, tmp_path / "elsewhere", params(**cut, lr=0.05), progress=False, check=True)
    stage.run("toyset", samples, tmp_path / "elsewhere", params(**cut, lr=0.05), progress=False)
    assert "starts at epoch 1" not in capsys.readouterr().err        # another runs folder: another experiment
    listed = json.loads(_state("--json"))                                 # `seqpe state` tells that one apart
    assert sorted(e["status"] for e in listed if e["kind"] == "resume") == [
        "resumable", "resumable", "resumable", "resumable by other seqpe code"]
    assert sorted(Path(e["run"]).parent.parent.name for e in listed if e["kind"] == "resume") == [
        "elsewhere", "runs", "runs", "runs"]                                # (walk 33a: named by every later run)
    stage.run("toyset", samples, tmp_path / "runs", params(**cut), progress=False)     # its own inputs: resumes
    assert "starts at epoch 1" not in capsys.readouterr().err
    assert json.loads((tmp_path / "runs" / "toy-toy_lpe" / "seed-1" / "timing.json").read_text())[
        "resumed_from_epoch"] == 1


def test_sampled_softmax_and_step_schedule(tmp_path, toy_registry):
    samples = make_samples(tmp_path / "samples")
    p = params(loss="sampled", negatives=6, lr_schedule="step", lr_step=2, lr_gamma=0.5, epochs=5, patience=0)
    [res] = stage.run("toyset", samples, tmp_path / "runs", p, progress=False)
    record = json.loads((tmp_path / "runs" / "toy-toy_lpe" / "seed-1" / "run.json").read_text())
    assert [h["lr"] for h in record["history"]] == pytest.approx([0.02, 0.02, 0.01, 0.01, 0.005])
    assert res["test"]["hr@5"] > 0.9


def test_plateau_schedule_decays_after_lr_step_epochs_without_improvement(tmp_path, toy_registry, monkeypatch):
    samples = make_samples(tmp_path / "samples")
    scripted = iter([0.1, 0.2, 0.2, 0.2, 0.3, 0.3, 0.3])      # stalls after epochs 2 and 5

    def fake_score(net, data, split, ks, batch_size, device, trim=True, mask_history=False, per_sample=False,
                   **kwargs):
        value = next(scripted) if split == "valid" else 0.25
        out = {"hr@1": value, "hr@5": value, "mrr@1": value, "mrr@5": value, "ndcg@1": value, "ndcg@5": value}
        return (out, pl.DataFrame({"greater": [0], "ties": [0]})) if per_sample else out

    monkeypatch.setattr(train_tasks, "score", fake_score)
    p = params(lr_schedule="plateau", lr_step=1, lr_gamma=0.5, epochs=7, patience=0)
    stage.run("toyset", samples, tmp_path / "runs", p, progress=False)
    record = json.loads((tmp_path / "runs" / "toy-toy_lpe" / "seed-1" / "run.json").read_text())
    # ReduceLROnPlateau(patience=1): halves after 2 epochs without a better valid value
    assert [h["lr"] for h in record["history"]] == pytest.approx([0.02, 0.02, 0.02, 0.02, 0.01, 0.01, 0.01])
    assert record["best_epoch"] == 5
    # lr_step 0 is ReduceLROnPlateau's patience 0: halves after each epoch that does not improve (walk 40d #7:
    # refused as "must be >= 1"); step's lr_step stays at least 1
    scripted = iter([0.1, 0.2, 0.2, 0.2, 0.3, 0.3, 0.3])
    stage.run("toyset", samples, tmp_path / "zero", params(lr_schedule="plateau", lr_step=0, lr_gamma=0.5, epochs=7,
                                                           patience=0), progress=False)
    record = json.loads((tmp_path / "zero" / "toy-toy_lpe" / "seed-1" / "run.json").read_text())
    assert [h["lr"] for h in record["history"]] == pytest.approx([0.02, 0.02, 0.02, 0.01, 0.005, 0.005, 0.0025])
    with pytest.raises(ParamsError, match="'train.lr_step' must be >= 1"):
        params(lr_schedule="step", lr_step=0)


def test_a_finished_seed_with_a_damaged_file_is_trained_again_not_reused(tmp_path, toy_registry, capfd):
    """Walk 39c #1: a truncated checkpoint.pt (or test_samples.parquet of random bytes) was reused as finished, so
    the fix every reader gave ("re-run `seqpe train`") looped back to the same broken file."""
    samples = make_samples(tmp_path / "samples")
    runs = tmp_path / "runs"
    stage.run("toyset", samples, runs, params(epochs=2), progress=False)
    run_dir = runs / "toy-toy_lpe" / "seed-1"
    first = {name: (run_dir / name).read_bytes() for name in ("checkpoint.pt", "run.json", "test_samples.parquet")}
    assert set(json.loads(first["run.json"])["sha256"]) == {"checkpoint.pt", "test_samples.parquet"}
    for name, damage in (("checkpoint.pt", first["checkpoint.pt"][:1000]), ("test_samples.parquet", b"x" * 300)):
        with open(run_dir / name, "r+b") as f:          # in place: the state root's hard link is damaged too
            f.truncate(0)
            f.write(damage)
        with pytest.raises(DataError, match=r"is not the file its run.json recorded \(another sha256"):
            if name == "checkpoint.pt":                  # what recommend loads (walk 39d #1: read without a word)
                run_files.load_checkpoint(run_dir)
            else:                                        # what evaluate / report's per-sample tests read
                from pipeline import significance
                significance._per_sample([{**json.loads(first["run.json"]), "_path": str(run_dir / "run.json")}],
                                         "next-item", [], "toy")
        capfd.readouterr()
        [ok] = stage.run("toyset", samples, runs, params(epochs=2), progress=False, check=True)
        assert ok["reused"] == [] and f"{run_dir / name} is damaged (not the bytes its run.json recorded): the " \
            "seed would be trained again" in capfd.readouterr().err
        stage.run("toyset", samples, runs, params(epochs=2), progress=False)
        assert "the seed is trained again" in capfd.readouterr().err
        assert {n: (run_dir / n).read_bytes() for n in first} == first          # the same bytes as the first time
    [again] = stage.run("toyset", samples, runs, params(epochs=2), progress=False, check=True)
    assert again["reused"] == [1]


def test_a_resume_file_whose_seed_finished_elsewhere_is_listed_as_such_and_pruned(tmp_path, toy_registry,
                                                                                   monkeypatch):
    """Walk 39f #4: after a kill, DVC's run cache can put a train stage's outputs back without running seqpe, so the
    seed's resume file stayed, listed as resumable, and only `--prune --all` removed it."""
    import shutil
    samples = make_samples(tmp_path / "samples")
    p = params(seeds=(1,), epochs=3, patience=0)
    stage.run("toyset", samples, tmp_path / "runs", dataclasses.replace(p, train=dataclasses.replace(
        p.train, time_limit=1e-9)), progress=False)                 # stopped after epoch 1: a resume file
    [entry] = [e for e in json.loads(_state("--json")) if e["kind"] == "resume"]
    assert entry["status"] == "resumable"
    own = os.environ["SEQPE_STATE"]
    monkeypatch.setenv("SEQPE_STATE", str(tmp_path / "elsewhere"))  # the same seed finished by another machine
    stage.run("toyset", samples, tmp_path / "cache", p, progress=False)
    monkeypatch.setenv("SEQPE_STATE", own)
    seed = tmp_path / "runs" / "toy-toy_lpe" / "seed-1"
    shutil.rmtree(seed)
    shutil.copytree(tmp_path / "cache" / "toy-toy_lpe" / "seed-1", seed)     # as `dvc repro` restores it
    checkpoint = (seed / "checkpoint.pt").read_bytes()
    (seed / "checkpoint.pt").write_bytes(checkpoint[:500])          # damaged: trained again, from the resume file
    [entry] = [e for e in json.loads(_state("--json")) if e["kind"] == "resume"]
    assert entry["status"] == "resumable"                            # (walk 40e #3: listed as finished, pruned)
    (seed / "checkpoint.pt").write_bytes(checkpoint)
    [entry] = [e for e in json.loads(_state("--json")) if e["kind"] == "resume"]
    assert entry["status"] == "its seed has finished"
    _state("--prune")                                                # without --all
    assert not [e for e in json.loads(_state("--json")) if e["kind"] == "resume"]


def test_state_lists_a_damaged_finished_copy_as_damaged_and_prune_deletes_it(tmp_path, toy_registry):
    """Walk 40a #3: a finished copy whose checkpoint is not its run.json's bytes (a retrain of a damaged seed,
    interrupted: the hard link was damaged with it) was "kept until its configuration finishes", as reusable,
    though `runs.finished` never takes it."""
    import shutil
    samples = make_samples(tmp_path / "samples")
    stage.run("toyset", samples, tmp_path / "runs", params(seeds=(1,), epochs=2), progress=False)
    run_dir = tmp_path / "runs" / "toy-toy_lpe" / "seed-1"
    copy = run_files.done_path(json.loads((run_dir / "run.json").read_text())["fingerprint"])
    shutil.copytree(run_dir, copy)
    [entry] = [e for e in json.loads(_state("--json")) if e["kind"] == "finished"]
    assert entry["status"] == "kept until its configuration finishes"
    (copy / "checkpoint.pt").write_bytes((copy / "checkpoint.pt").read_bytes()[:500])
    [entry] = [e for e in json.loads(_state("--json")) if e["kind"] == "finished"]
    assert entry["status"] == "damaged"
    _state("--prune")                                          # without --all: no command would read it
    assert not copy.exists() and (run_dir / "checkpoint.pt").is_file()


def test_evaluate_refuses_grid_runs_trained_with_other_settings_than_the_params_give(tmp_path, toy_registry):
    """Walk 38c #4: params.yaml edited without `dvc repro` (or a grid configuration trained by hand with --set)
    was reported under the grid's name as if it were the grid's."""
    from pipeline import evaluate
    samples = make_samples(tmp_path / "samples")
    runs = tmp_path / "runs"

    def grid(**train):
        p = params(epochs=2, **train)
        return dataclasses.replace(p, study=dataclasses.replace(p.study, next_item=dataclasses.replace(
            p.study.next_item, datasets=["toyset"])))
    stage.run("toyset", samples, runs, grid(), progress=False)
    assert evaluate.run("toyset", runs, tmp_path / "ok", grid())["configs"][0]["name"] == "toy-toy_lpe"
    assert evaluate.run("toyset", runs, tmp_path / "ok", grid(threads=2, device="auto"))   # machine keys: the same
    with pytest.raises(DataError, match=r"toy-toy_lpe seed 1 under .* was trained with other settings than the "
                                        r"params give the study grid of 'toyset' now \(train.lr: 0.02 vs 0.05\).*"
                                        r"add --all") as bad:
        evaluate.run("toyset", runs, tmp_path / "bad", grid(lr=0.05), samples_dir=samples,
                     params_file=tmp_path / "my params.yaml")
    # walk 40a #5: the hand fix trains where evaluate reads, with the params it read (was data/runs, ./params.yaml)
    assert f"(or `seqpe train toyset {samples} {runs} --model toy --encoding toy_lpe --params " \
           f"'{tmp_path / 'my params.yaml'}'`)" in str(bad.value)
    assert not (tmp_path / "bad").exists()
    every = evaluate.run("toyset", runs, tmp_path / "all", grid(lr=0.05), all_runs=True)   # the runs as trained
    with pytest.raises(ParamsError, match=r"train.select_metric"):      # train's own refusal, not "run dvc repro"
        evaluate.run("toyset", runs, tmp_path / "bad", grid(select_metric="auc"))             # (walk 39d #3)
    assert every["configs"][0]["name"] == "toy-toy_lpe"


def test_check_refuses_what_the_run_would_and_says_what_it_would_reuse_or_replace(tmp_path, toy_registry,
                                                                                 monkeypatch, capfd):
    import dataclasses
    """`train --check` said ok for a seed another process was training, a runs folder through a file, a CUDA
    device on a machine without one, and said 'would train' for a seed it would reuse."""
    from pipeline.train import threads
    monkeypatch.setattr(threads, "auto_threads", lambda: 1)          # train.threads: auto is 1 thread here
    samples = make_samples(tmp_path / "samples")
    runs = tmp_path / "runs"
    [res] = stage.run("toyset", samples, runs, params(epochs=1), progress=False)
    [ok] = stage.run("toyset", samples, runs, params(epochs=1, seeds=(1, 2)), progress=False, check=True)
    assert ok["reused"] == [1] and ok["parameters"] > 0 and not (runs / "toy-toy_lpe" / "seed-2").exists()
    capfd.readouterr()
    stage.run("toyset", samples, runs, params(epochs=1, lr=0.05), progress=False, check=True)
    assert "holds a run trained with other settings (train.lr: 0.02 vs 0.05)" in capfd.readouterr().err
    stage.run("toyset", samples, runs, params(epochs=1, threads=2), progress=False, check=True)
    assert "other settings (train.threads: 1 vs 2)" in capfd.readouterr().err   # in the fingerprint, not report's
    [same] = stage.run("toyset", samples, runs, params(epochs=1, threads=1), progress=False, check=True)
    assert same["reused"] == [1]                         # auto is recorded as the 1 it picks: one run, not two
    monkeypatch.setattr(threads, "_TORCH_DEFAULT", 1)                # 0: torch's count, recorded as such (38a D7)
    [zero] = stage.run("toyset", samples, runs, params(epochs=1, threads=0), progress=False, check=True)
    assert zero["reused"] == [1]
    other = params(epochs=1)
    other = dataclasses.replace(other, evaluate=dataclasses.replace(other.evaluate, batch_size=128))
    stage.run("toyset", samples, runs, other, progress=False, check=True)            # was "the same settings, ..."
    assert "other settings (evaluate.batch_size: 64 vs 128)" in capfd.readouterr().err
    monkeypatch.setitem(MODELS, "toy", dataclasses.replace(MODELS["toy"], presets={"paper": PAPER}))
    stage.run("toyset", samples, runs, params(), preset="paper", progress=False, tag="p")
    capfd.readouterr()
    stage.run("toyset", samples, runs, params(threads=2), preset="paper", progress=False, tag="p", check=True)
    assert "other settings (train.threads: 1 vs 2)" in capfd.readouterr().err   # the preset compared as recorded
    (tmp_path / "afile").write_text("x")
    with pytest.raises(DataError, match="cannot be made: .*afile is a file, not a folder"):
        stage.run("toyset", samples, tmp_path / "afile" / "runs", params(epochs=1), progress=False, check=True)
    with pytest.raises(ParamsError, match="no CUDA device is available"):
        monkeypatch.setattr("torch.cuda.is_available", lambda: False)
        stage.run("toyset", samples, runs, params(epochs=1, device="cuda"), progress=False, check=True)
    monkeypatch.setattr(run_files, "hash_inputs", lambda *a, **k: "e" * 20)
    lock = run_files.state_root() / "locks" / ("e" * 20)
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = _hold_lock(lock)
    try:
        with pytest.raises(DataError, match="toyset toy-toy_lpe seed 1 is being trained right now"):
            stage.run("toyset", samples, runs, params(epochs=1), progress=False, check=True)
    finally:
        holder.kill()
        holder.wait()


def test_a_new_seed_beside_seeds_of_other_settings_is_told_before_it_trains(tmp_path, toy_registry, capfd):
    """`--seed 3 --set train.lr=0.05` beside seeds 1-2 trained at 0.02 trained silently, and `seqpe report` then
    refused the whole runs folder: train and --check now say so first, naming the seeds and the difference."""
    samples = make_samples(tmp_path / "samples")
    runs = tmp_path / "runs"
    stage.run("toyset", samples, runs, params(epochs=1, seeds=(1, 2)), progress=False)
    capfd.readouterr()
    stage.run("toyset", samples, runs, params(epochs=1, lr=0.05, seeds=(3,)), progress=False, check=True)
    note = capfd.readouterr().err
    assert "keeps seed 1, 2 trained with other settings (train.lr: 0.02 vs 0.05)" in note, note
    assert "train them with these settings too (--seed 1 --seed 2), or give this variant its own --tag" in note
    stage.run("toyset", samples, runs, params(epochs=1, lr=0.05, seeds=(1, 3)), progress=False)
    note = capfd.readouterr().err
    assert "keeps seed 2 trained with other settings (train.lr: 0.02 vs 0.05)" in note and "(--seed 2)" in note
    stage.run("toyset", samples, runs, params(epochs=1, lr=0.05, seeds=(2,)), progress=False)
    assert "keeps seed" not in capfd.readouterr().err           # seed 2 joins 1 and 3: nothing left to mix
    stage.run("toyset", samples, runs, params(epochs=1, lr=0.05, seeds=(4,), threads=2), progress=False, check=True)
    assert "keeps seed" not in capfd.readouterr().err           # a machine setting: pooled by report, not noted


def test_tagged_variants_get_their_own_folders_and_report_rows(tmp_path, toy_registry):
    from pipeline import report
    samples = make_samples(tmp_path / "samples")
    runs = tmp_path / "runs"
    stage.run("toyset", samples, runs, params(epochs=1), progress=False)
    [res] = stage.run("toyset", samples, runs, params(epochs=1, lr=0.05), tag="lr=0.05", progress=False)
    assert res["config"] == "toy-toy_lpe-lr=0.05"
    assert sorted(p.name for p in runs.iterdir()) == ["toy-toy_lpe", "toy-toy_lpe-lr=0.05"]
    record = json.loads((runs / "toy-toy_lpe-lr=0.05" / "seed-1" / "run.json").read_text())
    assert record["tag"] == "lr=0.05" and record["name"] == "toy-toy_lpe-lr=0.05" and record["train"]["lr"] == 0.05
    rows = report.aggregate(report.find_runs([runs]))
    assert [(r["name"], r["tag"]) for r in rows] == [("toy-toy_lpe", None), ("toy-toy_lpe-lr=0.05", "lr=0.05")]
    with pytest.raises(ParamsError, match="run tag '../x' is not a folder-safe name"):
        stage.run("toyset", samples, runs, params(epochs=1), tag="../x", progress=False)


def test_replacing_a_run_of_other_settings_is_announced_before_it_trains(tmp_path, toy_registry, capfd):
    """The same seed trained again with other settings replaced the finished run without a word."""
    samples = make_samples(tmp_path / "samples")
    runs = tmp_path / "runs"
    stage.run("toyset", samples, runs, params(epochs=1), progress=False)
    stage.run("toyset", samples, runs, params(epochs=1), progress=False)            # reused: nothing to say
    assert capfd.readouterr().err == ""
    stage.run("toyset", samples, runs, params(epochs=1, lr=0.05, dropout=0.1), progress=False)
    assert capfd.readouterr().err == (f"note: {runs / 'toy-toy_lpe' / 'seed-1'} holds a run trained with other "
                                      "settings (train.dropout: 0.0 vs 0.1; train.lr: 0.02 vs 0.05); this run replaces "
                                      "it when it ends (--tag NAME keeps both)\n")
    assert json.loads((runs / "toy-toy_lpe" / "seed-1" / "run.json").read_text())["train"]["lr"] == 0.05


def test_preset_overrides_and_unknown_names(tmp_path, toy_registry):
    samples = make_samples(tmp_path / "samples")
    [res] = stage.run("toyset", samples, tmp_path / "runs", params(), preset="quick", progress=False)
    record = json.loads((tmp_path / "runs" / "toy-toy_lpe" / "seed-1" / "run.json").read_text())
    assert record["train"]["epochs"] == 1 and record["train"]["lr"] == 0.05 and len(record["history"]) == 1
    with pytest.raises(ParamsError, match="unknown preset 'paper' for model 'toy'. Fix: use one of: quick"):
        stage.run("toyset", samples, tmp_path / "runs", params(), preset="paper", progress=False)
    with pytest.raises(UnknownNameError, match="unknown model 'nope'.*toy"):
        stage.run("toyset", samples, tmp_path / "runs", params(), model="nope", progress=False)
    with pytest.raises(ParamsError, match="--model is empty"):      # `--model "$M"` with M unset trained the default
        stage.run("toyset", samples, tmp_path / "runs", params(), model="", progress=False)
    with pytest.raises(UnknownNameError, match="unknown encoding 'nope'.*toy_lpe"):
        stage.run("toyset", samples, tmp_path / "runs", params(), encoding="nope", progress=False)
    for check, budget in ((False, 0.0), (True, 0.0), (True, 0.001)):   # --check said ok, under a budget too
        with pytest.raises(ParamsError, match="select_metric 'ndcg@10' is not computed"):
            stage.run("toyset", samples, tmp_path / "runs", params(select_metric="ndcg@10", memory_budget=budget),
                      progress=False, check=check)
    with pytest.raises(ParamsError, match="'train.loss' must be one of ce, sampled"):
        stage.run("toyset", samples, tmp_path / "runs", params(loss="bpr"), progress=False)
    with pytest.raises(ParamsError, match="'train.bucket' must be >= 0"):
        stage.run("toyset", samples, tmp_path / "runs", params(bucket=-1), progress=False)


PAPER = {"train": {"epochs": 1, "lr": 0.05},
         "models": {"toy": {"alpha": 1.0, "beta": 2}},
         "encodings": {"toy_lpe": {"rank": 40}},
         "datasets": {"yoochoose": {"train": {"lr": 0.03}, "models": {"toy": {"alpha": 0.5}}},
                      "diginetica": {"models": {"toy": {"beta": 3}}}}}


def test_preset_carries_model_and_encoding_options_per_dataset(tmp_path, toy_registry, monkeypatch):
    import dataclasses
    monkeypatch.setitem(MODELS, "toy", dataclasses.replace(MODELS["toy"], presets={"paper": PAPER}))

    def record(dataset, p=None, **kw):                  # the same samples under each name (their manifest's)
        samples = make_samples(tmp_path / "samples" / dataset, dataset=dataset)
        stage.run(dataset, samples, tmp_path / dataset, p or params(), preset="paper", progress=False, **kw)
        return json.loads((tmp_path / dataset / "toy-toy_lpe" / "seed-1" / "run.json").read_text())

    r = record("toyset")                                 # no variant matches: the base preset
    assert (r["options"], r["encoding_options"]) == ({"alpha": 1.0, "beta": 2}, {"rank": 40})
    assert (r["train"]["epochs"], r["train"]["lr"], r["preset"]) == (1, 0.05, {"name": "paper", "variant": None})
    r = record("diginetica_srgnn")                       # not a registered dataset: only the manifest counts
    assert (r["options"], r["train"]["lr"], r["preset"]["variant"]) == ({"alpha": 1.0, "beta": 3}, 0.05, "diginetica")
    r = record("YooChoose_1_64")
    assert (r["options"], r["train"]["lr"], r["preset"]["variant"]) == ({"alpha": 0.5, "beta": 2}, 0.03, "yoochoose")
    # explicit params.yaml options win option by option; --set train.KEY wins over the preset
    p = dataclasses.replace(params(epochs=2), models={"toy": {"alpha": 0.25}}, encodings={"toy_lpe": {"rank": 8}})
    r = record("yoochoose_big", p, overrides=["train.epochs=2", "models.toy.alpha=0.25"])
    assert (r["options"], r["encoding_options"]) == ({"alpha": 0.25, "beta": 2}, {"rank": 8})
    assert (r["train"]["epochs"], len(r["history"]), r["train"]["lr"]) == (2, 2, 0.03)
    with pytest.raises(ParamsError, match="dataset 'yoochoose_vs_diginetica' matches several variants .*"
                                          "diginetica, yoochoose"):
        record("yoochoose_vs_diginetica")
    from pipeline.presets import parts
    with pytest.raises(ParamsError, match=r"mixes flat train keys \(epochs\) with sections"):
        parts({"epochs": 3, "models": {}}, "preset 'x'")
    assert parts({"epochs": 3}, "preset 'x'") == {"train": {"epochs": 3}}   # legacy flat form


def test_preset_variants_match_a_word_of_the_name_can_be_named_and_are_announced(tmp_path, toy_registry,
                                                                                monkeypatch, capfd):
    """A variant matched any substring: CARCA's `men` gave `amazon_women` and `experiment` CARCA-Men's
    settings, and SASRec's ML-1M variant missed the README's own `ml1m_sasrec`, both silently. A variant now
    matches from the start of a word of the name, separators ignored; NAME_VARIANT picks one by name; the
    run says which applied, or that none did."""
    import dataclasses
    from pipeline import presets
    from models import MODELS as REAL
    carca, sasrec = REAL["carca"].presets, REAL["sasrec"].presets
    assert [presets.resolve(carca, "paper", "carca", d).variant for d in
            ("amazon_women", "experiment_1", "segments", "mental", "amazon_men", "Men", "beauty_experiment",
             "Video_Games", "videogames", "carca_games", "toys_and_games")] \
        == [None, None, None, None, "men", "men", "beauty", "video_games", None, "carca_games", None]
    assert [presets.resolve(sasrec, "paper", "sasrec", d).variant for d in
            ("ml1m_sasrec", "ML-1M", "ml_10m", "ml_1_movies", "movielens-ml1m", "beauty")] \
        == ["ml_1m", "ml_1m", None, None, "ml_1m", None]                  # identical aliases are not ambiguous
    forced = presets.resolve(carca, "paper_men", "carca", "amazon_women")
    assert (forced.record(), forced.train["dim"], forced.train["lr"]) == ({"name": "paper", "variant": "men"}, 390, 6e-6)
    with pytest.raises(ParamsError, match=r"unknown preset 'paper_beuty' for model 'carca'.*did you mean 'paper_beauty'"):
        presets.resolve(carca, "paper_beuty", "carca", "x")
    monkeypatch.setitem(MODELS, "toy", dataclasses.replace(MODELS["toy"], presets={"paper": PAPER}))
    samples = make_samples(tmp_path / "samples", dataset="toyset")
    capfd.readouterr()
    stage.run("toyset", samples, tmp_path / "runs", params(), preset="paper", progress=False)
    assert capfd.readouterr().err.strip() == ("note: preset paper of toy: dataset 'toyset' matches none of its variants "
                                              "(yoochoose, diginetica), so its base settings apply (--preset "
                                              "paper_VARIANT picks one: paper_yoochoose, paper_diginetica)")
    stage.run("toyset", samples, tmp_path / "runs", params(), preset="paper_diginetica", progress=False, tag="d")
    assert capfd.readouterr().err.strip() == ("note: preset paper of toy: its diginetica variant, as named (--preset "
                                              "paper_diginetica), for dataset 'toyset'")     # not matched by the name
    r = json.loads((tmp_path / "runs" / "toy-toy_lpe-d" / "seed-1" / "run.json").read_text())
    assert (r["preset"], r["options"]) == ({"name": "paper", "variant": "diginetica"}, {"alpha": 1.0, "beta": 3})
    with pytest.raises(ParamsError, match="name the variant: --preset paper_diginetica or --preset paper_yoochoose"):
        stage.run("yoochoose_vs_diginetica", make_samples(tmp_path / "s2", dataset="yoochoose_vs_diginetica"),
                  tmp_path / "r2", params(), preset="paper", progress=False)


def test_cli_preset_then_set_on_an_unregistered_dataset(tmp_path, toy_registry, monkeypatch):
    import dataclasses
    from pipeline import cli
    make_samples(tmp_path / "samples", dataset="yoochoose_srgnn")      # as `seqpe import yoochoose_srgnn` names them
    monkeypatch.setitem(MODELS, "toy", dataclasses.replace(MODELS["toy"], presets={"paper": PAPER}))
    monkeypatch.setattr(sys, "argv", ["seqpe", "train", "yoochoose_srgnn", str(tmp_path / "samples"),
                                      str(tmp_path / "runs"), "--model", "toy", "--encoding", "toy_lpe",
                                      "--preset", "paper", "--set", "train.epochs=2", "--set", "train.dim=8",
                                      "--quiet", "--set", "evaluate.ks=[1,5]", "--params", str(ROOT / "params.yaml")])
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 0
    r = json.loads((tmp_path / "runs" / "toy-toy_lpe" / "seed-1" / "run.json").read_text())
    assert (r["train"]["epochs"], len(r["history"]), r["train"]["dim"], r["train"]["lr"]) == (2, 2, 8, 0.03)
    assert r["options"] == {"alpha": 0.5, "beta": 2} and r["dataset"] == "yoochoose_srgnn"


def test_a_metrics_file_of_a_hand_run_pools_the_seeds_trained_earlier_with_its_settings(tmp_path, toy_registry,
                                                                                       capsys):
    """`train --seed 3 --metrics FILE` wrote seed 3's numbers alone over the mean of seeds 1-3 that report shows
    (walk 34a); a seed of other settings stays out."""
    import math
    samples, runs, metrics = make_samples(tmp_path / "samples"), tmp_path / "runs", tmp_path / "m.json"
    p = params(epochs=2, patience=0)
    stage.run("toyset", samples, runs, p, seeds=[1, 2], progress=False)
    capsys.readouterr()
    stage.run("toyset", samples, runs, p, seeds=[3], progress=False, metrics_path=metrics)
    assert "holds the mean over seeds 1, 2, 3: seeds 1, 2 of" in " ".join(capsys.readouterr().err.split())
    tests = [json.loads((runs / "toy-toy_lpe" / f"seed-{s}" / "run.json").read_text())["test"] for s in (1, 2, 3)]
    written = json.loads(metrics.read_text())
    assert written["seeds"] == 3 and written["test"]["hr@5"] == math.fsum(t["hr@5"] for t in tests) / 3
    stage.run("toyset", samples, runs, params(epochs=2, patience=0, lr=0.05), seeds=[4], progress=False,
              metrics_path=metrics)
    alone = json.loads((runs / "toy-toy_lpe" / "seed-4" / "run.json").read_text())["test"]
    assert json.loads(metrics.read_text())["seeds"] == 1 and json.loads(metrics.read_text())["test"] == alone


def test_seeds_of_other_code_left_out_of_a_metrics_mean_are_said_and_old_files_of_others_kept(tmp_path, toy_registry,
                                                                                           capsys):
    """Walk 44a #3: a seed finished by other seqpe code was left out of `train --metrics`' mean without a word,
    while `report` pooled it (the DVC metric said 1 seed, the report 3). #4: a metrics file of seqpe's older than
    its `configuration` key, named for another configuration, was replaced silently."""
    samples, runs, metrics = make_samples(tmp_path / "samples"), tmp_path / "runs", tmp_path / "toy-toy_lpe.json"
    p = params(epochs=1, patience=0)
    stage.run("toyset", samples, runs, p, seeds=[1, 2], progress=False)
    rec_path = runs / "toy-toy_lpe" / "seed-2" / "run.json"
    rec = json.loads(rec_path.read_text())
    rec_path.write_text(json.dumps({**rec, "fingerprint": "0" * 20}))          # as if another checkout trained it
    capsys.readouterr()
    stage.run("toyset", samples, runs, p, seeds=[3], progress=False, metrics_path=metrics)
    err = " ".join(capsys.readouterr().err.split())
    assert "leaves out seed 2 of" in err and "other seqpe code" in err and "(--seed 2)" in err
    assert json.loads(metrics.read_text())["seeds"] == 2                        # seeds 1 and 3
    old = tmp_path / "toy-other.json"
    old.write_text(json.dumps({"seeds": 2, "test": {"hr@5": 0.5}, "valid": {"hr@5": 0.4}}, indent=2))
    with pytest.raises(DataError, match=r"holds the metrics of toy-other \(by its name: written by an older seqpe"):
        stage.run("toyset", samples, runs, p, seeds=[3], progress=False, metrics_path=old)
    assert json.loads(old.read_text())["test"] == {"hr@5": 0.5}


def test_a_metrics_file_is_not_written_for_seeds_the_time_limit_stopped(tmp_path, toy_registry):
    """`train --metrics` averaged a time-limited seed with a finished one (which `report` refuses to pool),
    and DVC showed that mean as the configuration's result."""
    samples = make_samples(tmp_path / "samples")
    metrics = tmp_path / "m.json"
    stage.run("toyset", samples, tmp_path / "runs", params(epochs=2, patience=0), progress=False)      # seed 1
    with pytest.raises(DataError, match=r"seed 2 stopped at train.time_limit before the end, so .*m.json was not "
                                        r"written.*Fix: run the same command with --set train.time_limit=0"):
        stage.run("toyset", samples, tmp_path / "runs", params(epochs=2, patience=0, time_limit=1e-9),
                  seeds=[1, 2], progress=False, metrics_path=metrics)
    assert not metrics.exists()
    assert json.loads((tmp_path / "runs" / "toy-toy_lpe" / "seed-2" / "run.json").read_text())["stopped"] == "time_limit"
    stage.run("toyset", samples, tmp_path / "runs", params(epochs=2, patience=0), seeds=[1, 2], progress=False,
              metrics_path=metrics)                                                               # resumed: written
    assert json.loads(metrics.read_text())["seeds"] == 2


def test_a_study_stage_checks_the_whole_grid_before_its_configuration_trains(tmp_path):
    """dvc repro trained the grid's other configurations first and failed at the bad pair's own stage, with a
    command-line fix ("drop --encoding") for a user who typed none."""
    samples = make_samples(tmp_path / "samples")

    def grid(models, encodings, baselines=()):
        base = dict(epochs=1, batch_size=32, dim=16, layers=1, heads=1, max_len=8, device="cpu",
                    select_metric="ndcg@5")
        return from_dict(Params, {"datasets": [], "train": base, "evaluate": {"ks": [1, 5], "batch_size": 64},
                                  "study": {"seeds": [1], "next_item": {"models": list(models),
                                                                        "encodings": list(encodings),
                                                                        "baselines": list(baselines)}, "ctr": {}},
                                  "models": {m: {} for m in (*models, *baselines)},
                                  "encodings": {e: {} for e in encodings}})

    metrics = tmp_path / "metrics" / "sasrec-lpe.json"
    with pytest.raises(ParamsError, match=r"study.next_item.models lists 'gru4rec', which takes no positional "
                                          r"encoding.*Fix: move gru4rec to study.next_item.baselines"):
        stage.run("toyset", samples, tmp_path / "runs", grid(["sasrec", "gru4rec"], ["lpe"]), model="sasrec",
                  encoding="lpe", progress=False, metrics_path=metrics)
    with pytest.raises(ParamsError, match=r"study.next_item.baselines lists 'din', a CTR model.*move it to "
                                          r"study.ctr.baselines"):
        stage.run("toyset", samples, tmp_path / "runs", grid(["sasrec"], ["lpe"], ["din"]), model="sasrec",
                  encoding="lpe", progress=False, metrics_path=metrics)
    with pytest.raises(ParamsError, match=r"the study grid \(study.next_item\) pairs stamp with rope, which cannot "
                                          r"run: STAMP adds the encoding.*Fix: take rope out of "
                                          r"study.next_item.encodings or stamp out of study.next_item.models"):
        stage.run("toyset", samples, tmp_path / "runs", grid(["sasrec", "stamp"], ["lpe", "rope"]),
                  model="sasrec", encoding="lpe", progress=False, metrics_path=metrics)
    assert not (tmp_path / "runs").exists() and not metrics.exists()        # refused before anything trained
    stage.run("toyset", samples, tmp_path / "runs", grid(["sasrec", "stamp"], ["lpe", "rope"]), model="sasrec",
              encoding="lpe", progress=False)                          # by hand (no --metrics): its own pair only
    stage.run("toyset", samples, tmp_path / "runs", grid(["sasrec", "stamp"], ["lpe"], ["pop"]), model="stamp",
              encoding="lpe", progress=False, metrics_path=metrics.with_name("stamp-lpe.json"))   # a grid that can
    assert metrics.with_name("stamp-lpe.json").is_file()                                        # run: trains
    for model in ("carca", "sasrec"):     # CARCA's stage built sasrec and pop with its side information: TypeError
        stage.run("toyset", samples, tmp_path / "runs", grid(["sasrec", "carca"], ["lpe"], ["pop"]), model=model,
                  encoding="lpe", progress=False, metrics_path=tmp_path / "metrics" / f"{model}-lpe.json")


def test_samples_cut_shorter_than_train_max_len_are_noted(tmp_path, toy_registry, capsys):
    """ML-1M's preset sets train.max_len 200; samples augmented with augment.max_len 20 trained at 20 without a
    word, and run.json said 200."""
    samples = make_samples(tmp_path / "samples")                       # prefixes of up to 6 items
    manifest = json.loads((samples / "manifest.json").read_text())
    write_json(samples / "manifest.json", {**manifest, "max_len": 5, "params": {"max_len_applied": 5}})
    stage.run("toyset", samples, tmp_path / "runs", params(epochs=1, max_len=8), progress=False)
    assert "note: train.max_len is 8, but " in capsys.readouterr().err
    stage.run("toyset", samples, tmp_path / "runs", params(epochs=1, max_len=8), progress=False, check=True)
    err = " ".join(capsys.readouterr().err.split())
    assert "holds sequences cut to their last 5 items (augment.max_len 5), so the model sees at most 5" in err
    stage.run("toyset", samples, tmp_path / "runs2", params(epochs=1, max_len=5), progress=False)
    assert "cut to their last" not in capsys.readouterr().err                  # no longer than the cut: quiet


def test_the_same_samples_under_another_dataset_name_train_their_own_runs(tmp_path, toy_registry, monkeypatch):
    """One file imported as two datasets, the first's seeds 1-2 interrupted in seed 2: the second's seed 1
    was restored from the first's finished copy, run.json naming the first dataset, and every later train
    into that runs folder was refused."""
    from pipeline.train import stage as stage_module
    real = stage_module.train_one

    def interrupted_in_seed_2(*args, **kwargs):
        if args[6] == 2:
            raise RuntimeError("killed")
        return real(*args, **kwargs)
    samples = make_samples(tmp_path / "samples")
    twin = tmp_path / "twin"
    shutil.copytree(samples, twin)
    manifest = json.loads((samples / "manifest.json").read_text())
    (twin / "manifest.json").write_text(json.dumps(manifest | {"dataset": "twinset"}))
    p = params(epochs=1, patience=0)
    monkeypatch.setattr(stage_module, "train_one", interrupted_in_seed_2)
    with pytest.raises(RuntimeError, match="killed"):
        stage.run("toyset", samples, tmp_path / "runs" / "toyset", p, seeds=[1, 2], progress=False)
    monkeypatch.setattr(stage_module, "train_one", real)
    stage.run("twinset", twin, tmp_path / "runs" / "twinset", p, seeds=[1, 2], progress=False)
    record = json.loads((tmp_path / "runs" / "twinset" / "toy-toy_lpe" / "seed-1" / "run.json").read_text())
    assert record["dataset"] == "twinset"


def test_cli_says_when_the_time_limit_stopped_a_run(tmp_path, toy_registry, monkeypatch, capsys):
    from pipeline import cli
    make_samples(tmp_path / "samples")
    monkeypatch.setattr(sys, "argv", ["seqpe", "train", "toyset", str(tmp_path / "samples"), str(tmp_path / "runs"),
                                      "--model", "toy", "--encoding", "toy_lpe", "--set", "train.epochs=3",
                                      "--set", "train.time_limit=1e-9", "--set", "evaluate.ks=[1,5]",   # 12 items
                                      "--params", str(ROOT / "params.yaml")])
    with pytest.raises(SystemExit) as e:
        cli.main()
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert "toy-toy_lpe/seed-1: stopped by train.time_limit after epoch 1" in " ".join(out.split())


def test_missing_samples_manifest_says_run_augment(tmp_path, toy_registry):
    with pytest.raises(DataError, match=r"nothing does not exist, and 'toyset' is no dataset seqpe registers.*"
                                        r"Fix: pass the samples folder that `seqpe augment DATASET` or `seqpe "
                                        r"import toyset \.\.\.` wrote"):        # toyset: the tests' own, unregistered
        stage.run("toyset", tmp_path / "nothing", tmp_path / "runs", params(), progress=False)


def test_an_empty_valid_split_names_the_setting_that_emptied_it(tmp_path, toy_registry):
    """preprocess.valid_fraction=0 passed preprocess and augment; train then said "check the dataset's protocol"."""
    samples = make_samples(tmp_path / "samples")
    manifest = json.loads((samples / "manifest.json").read_text())
    valid = next(e for e in manifest["shards"] if e["path"].startswith("valid/"))
    empty = pl.read_parquet(samples / valid["path"]).head(0)
    empty.write_parquet(samples / valid["path"])
    valid.update(rows=0, sha256=sha256_file(samples / valid["path"]))
    write_json(samples / "manifest.json", manifest)
    with pytest.raises(DataError, match=r"the valid split of .* has no samples. Fix: training picks its best epoch on "
                                        r"valid: re-run `seqpe preprocess` with preprocess.valid_fraction above 0"):
        stage.run("toyset", samples, tmp_path / "runs", params(), progress=False)


def test_a_damaged_samples_shard_is_named_before_training(tmp_path, toy_registry):
    """A truncated shard reached Polars mid-load as a traceback ("The file must end with PAR1"); train now
    checks every shard against the manifest's sha256 first, and writes no run folder."""
    samples = make_samples(tmp_path / "samples")
    shard = samples / "train" / "part-00000.parquet"
    shard.write_bytes(shard.read_bytes()[:200])
    with pytest.raises(DataError, match=r"shard .*train/part-00000.parquet is missing or does not match its manifest"):
        stage.run("toyset", samples, tmp_path / "runs", params(), progress=False)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("option, message", [
    ("models.posrce.anchors=false", "unknown name under models: 'posrce'. Fix: did you mean 'posrec'?"),
    ("encodings.ropee.base=100", "unknown name under encodings: 'ropee'. Fix: did you mean 'rope'?")])
def test_cli_options_under_a_misspelt_name_are_a_one_line_error(tmp_path, monkeypatch, capsys, option, message):
    """Options no run would read (a typo in the model / encoding name) stop the run before it trains."""
    from pipeline import cli
    make_samples(tmp_path / "samples")
    monkeypatch.setattr(sys, "argv", ["seqpe", "train", "toyset", str(tmp_path / "samples"), str(tmp_path / "runs"),
                                      "--model", "sasrec", "--set", option, "--quiet",
                                      "--params", str(ROOT / "params.yaml")])
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "runs").exists()


def test_cli_unknown_model_is_one_line_error(tmp_path, monkeypatch, capsys):
    from pipeline import cli
    make_samples(tmp_path / "samples")
    monkeypatch.setattr(sys, "argv", ["seqpe", "train", "toyset", str(tmp_path / "samples"), str(tmp_path / "runs"),
                                      "--model", "nosuchmodel", "--quiet", "--params", str(ROOT / "params.yaml")])
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "unknown model 'nosuchmodel'" in lines[0] and "sasrec" in lines[0], err
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif("sasrec" not in MODELS, reason="models/sasrec.py is not there yet (another helper writes it)")
def test_sasrec_learns_next_item_rule(tmp_path):
    from models.encodings import ENCODINGS
    samples = make_samples(tmp_path / "samples", n_items=10, train=400)
    enc = "lpe" if "lpe" in ENCODINGS else sorted(ENCODINGS)[0]
    p = params(model="sasrec", encoding=enc, epochs=12, lr=0.01, dim=32, layers=1, dropout=0.0, patience=0)
    [res] = stage.run("toyset", samples, tmp_path / "runs", p, progress=False)
    assert res["test"]["hr@1"] > 0.95, res


@pytest.mark.skipif("pop" not in MODELS, reason="models/baselines.py is not there yet")
def test_fitted_model_has_no_epochs_and_runs_under_encoding_none(tmp_path):
    samples = make_samples(tmp_path / "samples")
    [res] = stage.run("toyset", samples, tmp_path / "runs", params(model="pop", encoding="lpe"), progress=False)
    assert res["config"] == "pop-none" and res["best_epoch"] == 0
    record = json.loads((tmp_path / "runs" / "pop-none" / "seed-1" / "run.json").read_text())
    assert record["epochs_run"] == 0 and [h["epoch"] for h in record["history"]] == [0]
    assert 0 < record["test"]["hr@5"] < 1
    # a seed given twice trains and reports once (the --metrics means would count it twice)
    again = stage.run("toyset", samples, tmp_path / "runs", params(model="pop", encoding="lpe"), seeds=[2, 1, 2],
                      progress=False)
    assert [r["seed"] for r in again] == [2, 1]
    for bad in (-3, 2**32):          # `seed--3` is no folder name; seqpe takes 0 .. 2^32 - 1
        with pytest.raises(ParamsError, match=rf"--seed {bad}: not a seed seqpe takes"):
            stage.run("toyset", samples, tmp_path / "bad", params(model="pop", encoding="lpe"), seeds=[1, bad],
                      progress=False)
    assert not (tmp_path / "bad").exists()


def untrained_sasrec_and_test_split(tmp_path):
    """A seeded, untrained one-block SASRec over 30 toy items and the toy test split (max_len 8)."""
    from models import build_model
    samples = make_samples(tmp_path / "samples", n_items=30)
    tp = TrainParams(dim=16, layers=1, max_len=8, dropout=0.0)
    torch.manual_seed(0)
    net = build_model("sasrec", n_items=30, max_len=8, train=tp, options={},
                      encoding=stage.build_encoding("lpe", tp, {}))
    return net, load_samples(samples, "test", 8)


@pytest.mark.skipif("sasrec" not in MODELS, reason="models/sasrec.py is not there yet")
def test_trimming_padding_columns_does_not_change_sasrec_metrics(tmp_path):
    net, data = untrained_sasrec_and_test_split(tmp_path)
    trimmed = stage.score(net, data, "test", [1, 5, 10], 16, torch.device("cpu"), trim=True)
    full = stage.score(net, data, "test", [1, 5, 10], 16, torch.device("cpu"), trim=False)
    assert trimmed == pytest.approx(full, abs=1e-12)


@pytest.mark.skipif("sasrec" not in MODELS, reason="models/sasrec.py is not there yet")
def test_mask_history_only_ever_lifts_targets_outside_the_input(tmp_path):
    """The toy rows never repeat an item, so masking what the input holds can only raise each
    target's rank; an untrained model ranks some input item above its target, so it does."""
    net, data = untrained_sasrec_and_test_split(tmp_path)
    plain = stage.score(net, data, "test", [1, 5, 10], 16, torch.device("cpu"))
    masked = stage.score(net, data, "test", [1, 5, 10], 16, torch.device("cpu"), mask_history=True)
    assert all(masked[k] >= plain[k] for k in plain) and masked["ndcg@10"] > plain["ndcg@10"]


def test_mask_history_reaches_run_json_through_params(tmp_path, toy_registry):
    samples = make_samples(tmp_path / "samples")
    p = params(epochs=1)
    p = dataclasses.replace(p, evaluate=dataclasses.replace(p.evaluate, mask_history=True))
    [res] = stage.run("toyset", samples, tmp_path / "runs", p, progress=False)
    record = json.loads((tmp_path / "runs" / "toy-toy_lpe" / "seed-1" / "run.json").read_text())
    assert record["evaluate"]["mask_history"] is True and res["test"] == record["test"]


@pytest.mark.skipif("sasrec" not in MODELS, reason="models/sasrec.py is not there yet")
def test_sasrec_learns_from_leave_one_out_shifted_rows(tmp_path):
    """`import --format sasrec` -> shifted train rows (one per user) -> train expands them into every
    next item: SASRec learns `next = item + 1` and scores the held-out last items."""
    from pipeline import formats
    rng = np.random.default_rng(3)
    lines = []
    for user in range(1, 151):
        first, n = int(rng.integers(1, 11)), int(rng.integers(4, 12))
        lines.append(" ".join(map(str, [user] + [(first - 1 + i) % 10 + 1 for i in range(n)])))
    (tmp_path / "toy.txt").write_text("\n".join(lines) + "\n")
    p = params(model="sasrec", encoding="lpe", epochs=12, lr=0.01, dim=32, layers=1, dropout=0.0, patience=0)
    formats.import_dataset("toy", tmp_path / "toy.txt", "sasrec", tmp_path / "s", tmp_path / "a", p)
    train = pl.read_parquet(tmp_path / "a" / "train" / "part-00000.parquet")
    assert train.columns == ["session_id", "items"] and train.height == 150
    assert len(load_samples(tmp_path / "a", "train", 8)) == sum(len(x.split()) - 4 for x in lines)  # n - 3 pairs
    [res] = stage.run("toy", tmp_path / "a", tmp_path / "runs", p, progress=False)
    assert res["test"]["hr@1"] > 0.95, res


@pytest.mark.parametrize("name, encoding", [("sasrec", "lpe"), ("parec", "average"), ("fparec", "average"),
                                            ("gru4rec", None)])
def test_causal_hidden_state_equals_the_prefix_encoding(name, encoding):
    """ModelSpec.causal: hidden(row)[:, t] is what encode() gives for the prefix ending at t (with a
    forward-only encoding); the sequence objective relies on it."""
    from models import build_model
    assert MODELS[name].causal
    tp = TrainParams(dim=16, layers=2, heads=1, dropout=0.0, max_len=6)
    torch.manual_seed(0)
    enc = stage.build_encoding(encoding, tp, {}) if encoding else None
    net = build_model(name, n_items=20, max_len=6, train=tp, options={}, encoding=enc).eval()
    row = torch.tensor([[0, 3, 9, 3, 12, 5]])
    with torch.no_grad():
        h = net.hidden(row)                                              # (1, 6, D)
        for t in range(1, 6):
            prefix = torch.cat([torch.zeros(1, 5 - t, dtype=torch.long), row[:, 1:t + 1]], 1)  # left-padded
            assert torch.allclose(h[0, t], net.encode(prefix)[0], atol=1e-5), (name, t)
    assert {n for n, spec in MODELS.items() if spec.causal} >= {"sasrec", "parec", "fparec", "gru4rec"}
    assert not MODELS["posrec"].causal and not MODELS["narm"].causal


def _shifted_toy(tmp_path, users=150, seed=3):
    from pipeline import formats
    rng = np.random.default_rng(seed)
    lines = []
    for user in range(1, users + 1):
        first, n = int(rng.integers(1, 11)), int(rng.integers(4, 12))
        lines.append(" ".join(map(str, [user] + [(first - 1 + i) % 10 + 1 for i in range(n)])))
    (tmp_path / "toy.txt").write_text("\n".join(lines) + "\n")
    formats.import_dataset("toy", tmp_path / "toy.txt", "sasrec", tmp_path / "s", tmp_path / "a",
                           params("sasrec", "lpe"))
    return tmp_path / "a"


def test_sequence_loss_equals_the_mean_prefix_loss_for_a_forward_encoding(tmp_path):
    """With `lpe` (positions from the start) and no dropout, one pass over whole rows scores exactly the
    (prefix, next item) pairs the prefix objective expands them into: same mean cross-entropy."""
    from models import build_model
    from pipeline.batches import load_sequences
    samples = _shifted_toy(tmp_path, users=20)
    tp = TrainParams(model="sasrec", encoding="lpe", dim=16, layers=2, heads=1, dropout=0.0, max_len=8)
    torch.manual_seed(0)
    net = build_model("sasrec", n_items=10, max_len=8, train=tp, options={},
                      encoding=stage.build_encoding("lpe", tp, {})).eval()
    rows, pairs = load_sequences(samples, "train", 8), load_samples(samples, "train", 8)
    assert rows.n_targets == len(pairs)
    with torch.no_grad():
        seq = stage.loss_fn(net, torch.from_numpy(rows.seqs).long(), torch.from_numpy(rows.targets).long(),
                            tp, 10, None)
        pre = stage.loss_fn(net, torch.from_numpy(pairs.seqs).long(), torch.from_numpy(pairs.targets).long(),
                            tp, 10, None)
    assert seq.item() == pytest.approx(pre.item(), abs=1e-5)


@pytest.mark.parametrize("model", ["parec", "fparec"])
def test_a_model_of_its_own_encoding_takes_it_without_encoding(tmp_path, model):
    """`seqpe train --model fparec` took the grid's first encoding (`none`) and refused it ("needs a
    positional-attention encoding"); it now takes its own, as its preset does. An explicit one still wins."""
    samples = make_samples(tmp_path / "samples")
    p = params(model="sasrec", encoding="none")                       # the grid: sasrec x none
    [res] = stage.run("toyset", samples, tmp_path / "runs", p, model=model, progress=False, check=True)
    assert res["name"] == f"{model}-{model}" and res["parameters"] > 0
    with pytest.raises(ParamsError, match=f"model '{model}' needs a positional-attention encoding, got 'none'"):
        stage.run("toyset", samples, tmp_path / "runs", p, model=model, encoding="none", progress=False, check=True)


def test_sequence_objective_learns_and_refuses_what_it_cannot_train(tmp_path):
    samples = _shifted_toy(tmp_path)
    for model, encoding in (("sasrec", "lrpe"), ("fparec", "fparec")):
        p = params(model=model, encoding=encoding, epochs=15, lr=0.01, dim=32, layers=1, dropout=0.0, patience=0,
                   objective="sequence", batch_size=16)
        [res] = stage.run("toy", samples, tmp_path / "runs", p, progress=False)
        assert res["test"]["hr@1"] > 0.95, (model, res)
        record = json.loads((tmp_path / "runs" / f"{model}-{encoding}" / "seed-1" / "run.json").read_text())
        assert record["train"]["objective"] == "sequence"
        assert record["samples"]["train"] == len(load_samples(samples, "train", 8))   # predictions, not rows
    with pytest.raises(ParamsError, match="objective sequence needs a causal backbone, and 'posrec' is not one"
                                          ".*fparec.*gru4rec.*parec.*sasrec"):
        stage.run("toy", samples, tmp_path / "runs", params(model="posrec", encoding="ldpe", objective="sequence"),
                  progress=False)
    srgnn = make_samples(tmp_path / "srgnn")   # checked before loading, naming who set the objective
    with pytest.raises(ParamsError, match=r"train.objective is sequence \(it is set\), which needs leave-one-out "
                                          r"data .* holds srgnn \(prefix, target\) samples. Fix: add --set "
                                          r"train.objective=prefixes"):
        stage.run("toyset", srgnn, tmp_path / "runs2", params(model="sasrec", encoding="lpe", objective="sequence"),
                  progress=False)
    with pytest.raises(ParamsError, match=r"train.objective is sequence \(--preset paper sets it\)"):
        stage.run("toyset", srgnn, tmp_path / "runs2", params(model="sasrec", encoding="none"), preset="paper",
                  progress=False)
    assert not (tmp_path / "runs2").exists()


def test_sequence_objective_with_sampled_softmax_learns(tmp_path):
    samples = _shifted_toy(tmp_path)
    p = params(model="sasrec", encoding="lpe", epochs=15, lr=0.01, dim=32, layers=1, dropout=0.0, patience=0,
               objective="sequence", batch_size=16, loss="sampled", negatives=5)
    [res] = stage.run("toy", samples, tmp_path / "runs", p, progress=False)
    assert res["test"]["hr@1"] > 0.9, res


def test_a_backbones_own_training_loss_is_what_the_trainer_minimises(tmp_path, toy_registry, monkeypatch):
    """Recommender.training_loss (GRU4Rec's BPR-max, BPR-MF's BPR): when a backbone returns a loss,
    the trainer uses it instead of train.loss."""
    calls = []

    def own_loss(self, seqs, targets, generator):
        calls.append(tuple(seqs.shape))
        return -(self(seqs).log_softmax(-1).gather(1, targets[:, None])).mean() * 0.0 + 7.0 + 0 * self.mix.weight.sum()

    monkeypatch.setattr(ToyRecommender, "training_loss", own_loss)
    samples = make_samples(tmp_path / "samples")
    [res] = stage.run("toyset", samples, tmp_path / "runs", params(epochs=1), progress=False)
    record = json.loads((tmp_path / "runs" / "toy-toy_lpe" / "seed-1" / "run.json").read_text())
    assert calls and record["history"][0]["loss"] == pytest.approx(7.0)


class BlindRecommender(ToyRecommender):
    """Ignores its input: every session gets one learned vector, so one item order (a collapsed model)."""

    def encode(self, seqs):
        return self.mix.bias.expand(seqs.size(0), -1)                      # (B, D)


def test_a_model_that_ignores_its_input_stops_the_run_instead_of_reporting_an_item_order(tmp_path, toy_registry,
                                                                                          monkeypatch):
    """Walk 36b #5: a CTR model of constant logits stopped the run, a next-item model that gave every session the
    same scores was recorded (POP's metrics, or K/N when it scores all items alike) as a result."""
    from pipeline.errors import ConstantModel
    from pipeline.train.tasks import Constancy
    monkeypatch.setitem(MODELS, "blind", ModelSpec(name="blind", description="test model", build=lambda n_items, max_len,
                        train, options, encoding: BlindRecommender(n_items, train.dim, encoding)))
    samples = make_samples(tmp_path / "samples")
    with pytest.raises(ConstantModel, match=r"toyset blind-toy_lpe seed 1: the model ignores its input, every test "
                                            r"session got the same scores for all 12 items \(best epoch \d\), so its "
                                            r"metrics \(HR@5 \d+\.\d\d\) are one fixed item order's"):
        stage.run("toyset", samples, tmp_path / "runs", params("blind", epochs=2), progress=False)
    assert not (tmp_path / "runs" / "blind-toy_lpe" / "seed-1").exists()
    assert not list(run_files.state_root().rglob("*.pt"))             # no resume file: resumed, it is refused again
    stage.run("toyset", samples, tmp_path / "runs", params(epochs=2), progress=False)      # the model that reads
    stage.run("toyset", samples, tmp_path / "runs", params("pop", "none"), progress=False)  # POP: by design
    same = Constancy()                                        # rows of one input are alike by right, never constant
    one = load_samples(samples, "test", 8).take(np.zeros(5, dtype=np.int64))
    same.update(torch.zeros(5, 13), torch.arange(5))
    assert not same.constant(one)
    same = Constancy()
    scores = torch.zeros(5, 13)
    scores[:, 0] = float("-inf")                              # the padding column, -inf in every row, is not compared
    same.update(scores, torch.arange(5))
    assert same.constant(load_samples(samples, "test", 8).take(np.arange(5)))
    scores[3, 4] = 1e-4
    same = Constancy()
    same.update(scores, torch.arange(5))
    assert not same.constant(load_samples(samples, "test", 8).take(np.arange(5)))


def test_a_diverging_loss_stops_the_run_with_one_line_naming_the_epoch(tmp_path, toy_registry, monkeypatch):
    from pipeline.errors import TrainingError
    monkeypatch.setattr(ToyRecommender, "training_loss",
                        lambda self, seqs, targets, generator: self.mix.weight.sum() * float("nan"))
    samples = make_samples(tmp_path / "samples")
    with pytest.raises(TrainingError, match=r"toy-toy_lpe seed 1: the training loss is nan at epoch 1, batch 1"):
        stage.run("toyset", samples, tmp_path / "runs", params(epochs=2), progress=False)
    assert not (tmp_path / "runs" / "toy-toy_lpe" / "seed-1").exists()
    assert [p for p in run_files.state_root().rglob("*")] == []    # nor its lock files (`seqpe state` never lists them)
    calls = iter(range(1, 10 ** 6))                 # diverging in epoch 2, after epoch 1 saved a resume state
    batches = -(-300 // 32)
    monkeypatch.setattr(ToyRecommender, "training_loss", lambda self, seqs, targets, generator:
                        self.mix.weight.sum() * (float("nan") if next(calls) > batches else 1.0))
    with pytest.raises(TrainingError, match=r"the training loss is nan at epoch 2, batch 1 "):
        stage.run("toyset", samples, tmp_path / "runs", params(epochs=2), progress=False)
    assert [p for p in run_files.state_root().rglob("*")] == []   # walk 38a D1: it was kept, listed as resumable,
                                                                  # and the same command resumed into the same NaN


def test_losses_read_in_groups_name_the_batch_and_give_the_same_run(tmp_path, toy_registry, monkeypatch):
    """On a GPU the trainer reads the losses back every SYNC_EVERY steps, not every step (a read waits for
    the GPU). Forced on the CPU here: the same history as a read per step, and a NaN in the middle of a
    group still stops the run naming its own batch."""
    from pipeline.errors import TrainingError
    from pipeline.train import loop
    samples = make_samples(tmp_path / "samples")
    [a] = stage.run("toyset", samples, tmp_path / "a", params(epochs=2), progress=False)
    monkeypatch.setattr(loop, "SYNC_EVERY", {"cpu": 5})
    [b] = stage.run("toyset", samples, tmp_path / "b", params(epochs=2), progress=False)
    ra, rb = (json.loads((tmp_path / d / r["name"] / "run.json").read_text()) for d, r in (("a", a), ("b", b)))
    assert [h["loss"] for h in ra["history"]] == [h["loss"] for h in rb["history"]] and ra["test"] == rb["test"]
    calls = iter(range(1, 10 ** 6))
    monkeypatch.setattr(ToyRecommender, "training_loss", lambda self, seqs, targets, generator:
                        self.mix.weight.sum() * (float("nan") if next(calls) == 7 else 1.0))
    with pytest.raises(TrainingError, match=r"the training loss is nan at epoch 1, batch 7 "):
        stage.run("toyset", samples, tmp_path / "c", params(epochs=2), progress=False)
    assert not (tmp_path / "c" / "toy-toy_lpe" / "seed-1").exists()


def test_a_loss_that_explodes_but_stays_finite_stops_the_run(tmp_path, toy_registry, monkeypatch, capsys):
    """`train.lr=50` took SASRec's loss from ln(78) = 4.4 to 49,990, finite, and the run was reported as a
    result. An epoch's mean loss above 10 x (the untrained model's + 1) now stops it; a rise within that
    margin does not, but is named (walk 42c #2: lr 1, 4.17 to 14.9, reported without a word)."""
    from pipeline.errors import TrainingError
    own = ToyRecommender.training_loss
    losses = iter([4.0] + [60.0] * 100000)                          # the untrained model's loss, then an explosion
    monkeypatch.setattr(ToyRecommender, "training_loss",
                        lambda self, seqs, targets, generator: self.mix.weight.sum() * 0 + next(losses))
    samples = make_samples(tmp_path / "samples")
    with pytest.raises(TrainingError, match=r"toy-toy_lpe seed 1: the training loss rose to 5\d\.?\d* at epoch 1, "
                                            r"from the untrained model's 4 \(the model diverged\)"):
        stage.run("toyset", samples, tmp_path / "runs", params(epochs=3), progress=False)
    assert not (tmp_path / "runs" / "toy-toy_lpe" / "seed-1").exists()
    losses = iter([4.0] + [49.0] * 100000)                          # under 10 x (4 + 1): it trains on
    capsys.readouterr()
    stage.run("toyset", samples, tmp_path / "ok", params(epochs=2), progress=False)
    assert (tmp_path / "ok" / "toy-toy_lpe" / "seed-1" / "run.json").is_file()
    assert re.search(r"note: toyset toy-toy_lpe seed 1: the training loss never fell below the untrained model.s "
                     r"\(4; lowest epoch mean 4\d\.?\d*, epoch \d\): it did not learn", capsys.readouterr().err)
    losses = iter([4.0] + [49.0] * 100000)                          # one epoch: no such note (its mean against
    stage.run("toyset", samples, tmp_path / "one", params(epochs=1), progress=False)   # its first batch misled)
    assert "never fell below" not in capsys.readouterr().err
    monkeypatch.setattr(ToyRecommender, "training_loss", own)       # a model that learns: no such note
    stage.run("toyset", samples, tmp_path / "fine", params(epochs=2), progress=False)
    assert "never fell below" not in capsys.readouterr().err


def test_weights_that_grow_without_bound_stop_the_run(tmp_path):
    """Walk 44c #2: GRU4Rec's TOP1 loss is bounded (about 1 untrained, 2 at most), so `train.lr=1e6` never took it
    past 10 x the untrained model's: weights of 8.5e6 and chance-level metrics were recorded without a word. A
    weight past loop.WEIGHT_LIMIT after an epoch stops the seed, naming it; the same model at a sane lr trains."""
    from pipeline.errors import TrainingError
    from pipeline.train import loop
    samples = make_samples(tmp_path / "samples")
    top1 = dataclasses.replace(params(model="gru4rec", encoding="none", lr=1e6, epochs=2),
                               models={"gru4rec": {"loss": "top1"}})
    with pytest.raises(TrainingError, match=r"gru4rec-none seed 1: the weights grew to \d\.\d+e\+\d\d at epoch 1 "
                                            r"\(\w+\.weight\w*; .*the model diverged"):
        stage.run("toyset", samples, tmp_path / "runs", top1, progress=False)
    assert not (tmp_path / "runs" / "gru4rec-none" / "seed-1").exists()
    top1 = dataclasses.replace(top1, train=dataclasses.replace(top1.train, lr=0.01))
    stage.run("toyset", samples, tmp_path / "runs", top1, progress=False)
    assert (tmp_path / "runs" / "gru4rec-none" / "seed-1" / "run.json").is_file()
    net = torch.nn.Linear(2, 2)
    with torch.no_grad():
        net.weight[0, 1] = -3.0
        net.bias.fill_(0.5)
    assert loop.largest_weight(net) == (3.0, "weight")
    with torch.no_grad():
        net.bias[1] = float("inf")
    top, name = loop.largest_weight(net)
    assert math.isnan(top) and name == "bias"
    with torch.no_grad():
        net.bias[1] = float("nan")
    assert math.isnan(loop.largest_weight(net)[0])


def test_a_memory_budget_trains_the_same_model(tmp_path, toy_registry):
    samples = make_samples(tmp_path / "samples")
    [a] = stage.run("toyset", samples, tmp_path / "a", params(epochs=2), progress=False)
    [b] = stage.run("toyset", samples, tmp_path / "b", params(epochs=2, memory_budget=0.001), progress=False)
    wa = torch.load(tmp_path / "a" / "toy-toy_lpe" / "seed-1" / "checkpoint.pt", weights_only=True)["model"]
    wb = torch.load(tmp_path / "b" / "toy-toy_lpe" / "seed-1" / "checkpoint.pt", weights_only=True)["model"]
    assert all(torch.equal(wa[k], wb[k]) for k in wa) and a["test"] == b["test"]
    assert (run_files.state_root() / "spill").is_dir()          # the maps were used (and kept for reuse)
    # so the budget is not part of the fingerprint (walk 28: adding one retrained a finished seed, and an
    # interrupted seed could not go on from its resume file); nor is `device: cpu` against auto without CUDA
    stamp = (tmp_path / "a" / "toy-toy_lpe" / "seed-1" / "timing.json").read_bytes()
    stage.run("toyset", samples, tmp_path / "a", params(epochs=2, memory_budget=0.001), progress=False)
    if not torch.cuda.is_available():
        stage.run("toyset", samples, tmp_path / "a", params(epochs=2, device="cpu"), progress=False)
    assert (tmp_path / "a" / "toy-toy_lpe" / "seed-1" / "timing.json").read_bytes() == stamp      # reused
    stage.run("toyset", samples, tmp_path / "c", params(epochs=4, patience=0, time_limit=1e-9), progress=False)
    [c] = stage.run("toyset", samples, tmp_path / "c", params(epochs=4, patience=0, memory_budget=0.001),
                    progress=False)
    assert c["epochs_run"] == 4
    assert json.loads((tmp_path / "c" / "toy-toy_lpe" / "seed-1" / "timing.json").read_text())[
        "resumed_from_epoch"] == 1                                  # went on from the unbudgeted run's epoch 1


def test_a_memory_budget_also_maps_the_whole_prefixes_of_history_masking_and_candidates(tmp_path, toy_registry):
    """Walk 40h #3: evaluate.mask_history and evaluate.candidates read the valid / test rows' whole stored
    prefixes (longer than train.max_len here), which were loaded in RAM whatever the budget, and popularity
    candidates loaded the train sessions whole. Under a budget they are memory-mapped too (or counted by
    streaming), with the same metrics."""
    samples = make_samples(tmp_path / "samples")

    def with_eval(**train) -> Params:
        p = params(epochs=1, max_len=3, **train)
        return dataclasses.replace(p, evaluate=dataclasses.replace(p.evaluate, mask_history=True, candidates=5,
                                                                     candidate_sampling="popularity"))
    [a] = stage.run("toyset", samples, tmp_path / "a", with_eval(), progress=False)
    [b] = stage.run("toyset", samples, tmp_path / "b", with_eval(memory_budget=0.001), progress=False)
    assert a["test"] == b["test"] and a["valid"] == b["valid"]
    built = sorted(p.parent.parent.name for p in (run_files.state_root() / "spill").glob("*/samples/complete"))
    assert len(built) == 5          # train, valid, test at max_len 3; valid, test whole (prefixes of up to 6)


@pytest.mark.skipif("sasrec" not in MODELS, reason="needs sasrec")
def test_bf16_autocast_scores_stay_close_and_a_bf16_run_trains(tmp_path):
    """train.precision bf16: the forward under autocast stays close to fp32; metrics are computed in fp32."""
    from pipeline.train.setup import autocast
    net, data = untrained_sasrec_and_test_split(tmp_path)
    seqs = torch.from_numpy(data.seqs[:32]).long()
    with torch.no_grad():
        full = net(seqs)
        with autocast(dataclasses.replace(TrainParams(), precision="bf16"), torch.device("cpu")):
            half = net(seqs)
    assert half.dtype == torch.bfloat16
    finite = torch.isfinite(full)
    assert torch.allclose(half.float()[finite], full[finite], atol=0.05, rtol=0.05)
    samples = make_samples(tmp_path / "s2")
    [res] = stage.run("toyset", samples, tmp_path / "runs", params("sasrec", "lpe", epochs=2, precision="bf16"),
                      progress=False)
    assert 0 < res["test"]["hr@5"] <= 1



def record_autocast(monkeypatch) -> list[bool]:
    """Each entry into train.precision's autocast context, as whether gradients were on (training) at the time."""
    from pipeline.train import loop, setup
    entered, real = [], setup.autocast

    def recording(tp, device):
        entered.append(torch.is_grad_enabled())
        return real(tp, device)
    monkeypatch.setattr(setup, "autocast", recording)
    monkeypatch.setattr(loop, "autocast", recording)
    return entered


def test_a_bf16_run_scores_valid_and_test_in_fp32(tmp_path, monkeypatch):
    """Walk 40c #1: scores computed under autocast and cast to fp32 afterwards kept bf16's 8-bit mantissa: on
    Beauty, 3,682 of 4,000 test rows had ~16 items tied with the target and the tie rule moved HR@10. Autocast is
    entered for training steps only (grad on), never while scoring (inference mode)."""
    entered = record_autocast(monkeypatch)
    samples = make_samples(tmp_path / "samples")
    stage.run("toyset", samples, tmp_path / "runs", params("sasrec", "lpe", epochs=2, precision="bf16"),
              progress=False)
    assert entered and all(entered)


def test_auto_precision_is_fp32_on_every_device():
    """train.precision auto never autocasts (bf16 was measured slower on an H100 at these sizes, setup.py);
    bf16 autocasts on whatever device it is asked for."""
    from pipeline.train.setup import amp_dtype
    for device in ("cpu", "cuda"):
        assert amp_dtype(TrainParams(), torch.device(device)) is None
        assert amp_dtype(TrainParams(precision="fp32"), torch.device(device)) is None
        assert amp_dtype(TrainParams(precision="bf16"), torch.device(device)) is torch.bfloat16


def test_tf32_turns_tensor_core_products_on_for_its_block_only():
    """train.precision tf32: torch's process-wide matmul precision is "high" (TF32) inside the training steps'
    context and put back after (also after an error), so one Python process can train a tf32 run and then an
    fp32 one, and valid / test are scored in fp32; no autocast."""
    from pipeline.train.setup import amp_dtype, autocast, matmul_precision
    tp = TrainParams(precision="tf32")
    assert amp_dtype(tp, torch.device("cuda")) is None
    assert isinstance(autocast(tp, torch.device("cuda")), contextlib.nullcontext)
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        with matmul_precision(tp, torch.device("cuda")):
            assert torch.get_float32_matmul_precision() == "high"
        assert torch.get_float32_matmul_precision() == "highest"
        with pytest.raises(KeyError), matmul_precision(tp, torch.device("cuda")):
            raise KeyError
        assert torch.get_float32_matmul_precision() == "highest"
        for other, device in ((tp, "cpu"), (TrainParams(precision="fp32"), "cuda")):
            with matmul_precision(other, torch.device(device)):
                assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.set_float32_matmul_precision(before)


def test_tf32_keeps_to_torchs_per_backend_setting_where_a_script_set_it():
    """Once code has set torch's newer `fp32_precision`, reading the older global setting raises (mixing the two
    is refused); the tf32 context then switches the newer one, and puts it back."""
    import subprocess
    code = ("import torch; from pipeline.params import TrainParams; from pipeline.train.setup import matmul_precision\n"
            "m = torch.backends.cuda.matmul; m.fp32_precision = 'ieee'\n"
            "with matmul_precision(TrainParams(precision='tf32'), torch.device('cuda')):\n"
            "    assert m.fp32_precision == 'tf32'\n"
            "assert m.fp32_precision == 'ieee'; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_tf32_on_the_cpu_is_refused_in_one_line(tmp_path):
    samples = make_samples(tmp_path / "samples")
    with pytest.raises(ParamsError, match="tf32.*CUDA.*trains on the CPU"):
        stage.run("toyset", samples, tmp_path / "runs", params("sasrec", "lpe", epochs=1, precision="tf32"),
                  progress=False)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_compile_wraps_the_training_step(tmp_path, toy_registry, monkeypatch):
    """train.compile: the loss module goes through torch.compile (dynamic shapes). The compiler itself
    is replaced by a recorder here: compiling on a CPU takes minutes (it runs on the GPU machines)."""
    seen = []
    monkeypatch.setattr(torch, "compile", lambda module, **kw: seen.append((type(module).__name__, kw)) or module)
    samples = make_samples(tmp_path / "samples")
    stage.run("toyset", samples, tmp_path / "runs", params(epochs=1, compile=True), progress=False)
    assert seen == [("LossModule", {"dynamic": True})]


def test_reduce_overhead_captures_static_steps(tmp_path, monkeypatch):
    """train.compile: reduce-overhead: the loss module is compiled in torch's CUDA-graph mode, each step is
    announced to the graph trees, the session graphs are built with static shapes while training (and
    only then), trimmed widths are multiples of 8, and the kept losses are copies (a replay overwrites
    its outputs). The compiler and the CUDA check are replaced here (the GPU test runs the real ones:
    tests/test_cuda.py); the loop, the batches and PosRec are the real ones, on the CPU."""
    from pipeline.train import loop, stage as train_stage
    seen, marks, steps = [], [], []

    def compile_(module, **kw):
        seen.append((type(module).__name__, kw))
        def step(batch, generator):
            steps.append((tuple(batch[0].shape), module.net.static_step))
            return module(batch, generator)
        return step

    monkeypatch.setattr(torch, "compile", compile_)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    monkeypatch.setattr(train_stage, "_check_graphs", lambda tp: None)
    samples = make_samples(tmp_path / "samples", n_items=30)
    p = params(model="posrec", encoding="ldpe", epochs=2, patience=0, max_len=12, compile="reduce-overhead")
    [res] = stage.run("toyset", samples, tmp_path / "runs", p, progress=False)
    assert seen == [("LossModule", {"dynamic": True, "mode": "reduce-overhead"})]
    assert len(marks) == len(steps) == 2 * -(-300 // 32)
    assert all(static for _, static in steps)
    assert {w for (_, w), _ in steps} <= {8, 12} and 8 in {w for (_, w), _ in steps}   # multiples of 8, capped
    record = json.loads((tmp_path / "runs" / res["name"] / "run.json").read_text())
    assert record["train"]["compile"] == "reduce-overhead" and record["test"]["hr@5"] > 0.5


@pytest.mark.slow
def test_reduce_overhead_compiles_posrecs_step_as_one_graph_that_trains_as_eager(tmp_path, monkeypatch):
    """The real compiler on the CPU (inductor; CUDA graphs are the GPU's part, tests/test_cuda.py): the
    static PosRec step traces as one graph, with no break and no recompile across batch widths and
    sizes, and trains as the eager step does (same losses and metrics, to float rounding)."""
    from torch._dynamo.utils import counters
    from pipeline.train import stage as train_stage
    monkeypatch.setattr(train_stage, "_check_graphs", lambda tp: None)
    samples = make_samples(tmp_path / "samples", n_items=30)
    out = {}
    torch._dynamo.reset()
    counters.clear()
    for mode in (False, "reduce-overhead"):
        p = params(model="posrec", encoding="ldpe", epochs=2, patience=0, max_len=12, compile=mode)
        [res] = stage.run("toyset", samples, tmp_path / str(mode), p, progress=False)
        out[mode] = json.loads((tmp_path / str(mode) / res["name"] / "run.json").read_text())
    assert counters["stats"]["unique_graphs"] == 1          # a graph break or a recompile adds one
    torch._dynamo.reset()
    eager, graphs = out[False], out["reduce-overhead"]
    assert [h["loss"] for h in graphs["history"]] == pytest.approx([h["loss"] for h in eager["history"]], rel=1e-5)
    assert graphs["test"] == pytest.approx(eager["test"], abs=1e-6)


@pytest.mark.parametrize("setting, message", [
    ("reduce_overhead", "did you mean 'reduce-overhead'"),
    ("max-autotune", "must be true, false or reduce-overhead"),
    (1, "must be true, false or reduce-overhead, got 1"), (None, "must be true, false or reduce-overhead, got None")])
def test_unknown_compile_modes_are_refused(setting, message):
    with pytest.raises(ParamsError, match=message):
        params(compile=setting).train.validate("train")


def test_reduce_overhead_is_refused_on_the_cpu_before_anything_is_written(tmp_path):
    samples = make_samples(tmp_path / "samples")
    with pytest.raises(ParamsError, match="replays each step as captured CUDA graphs, and this run trains on the CPU"):
        stage.run("toyset", samples, tmp_path / "runs", params(model="posrec", encoding="ldpe",
                                                               compile="reduce-overhead"), progress=False)
    assert not (tmp_path / "runs").exists()


def test_the_trainers_adam_is_fused_and_takes_the_loops_steps():
    """make_optimizer: torch's fused Adam on the CPU (one kernel per tensor), with the paper's L2 in the
    gradient; five steps land where the single-tensor loop's do, to float32 rounding."""
    from pipeline.train.loop import make_optimizer
    tp = TrainParams(lr=0.01, weight_decay=1e-3)
    g = torch.Generator().manual_seed(0)
    grads = [[torch.randn(37, 5, generator=g), torch.randn(37, generator=g)] for _ in range(5)]
    ends = []
    for fused in (True, False):
        torch.manual_seed(0)
        net = nn.Linear(5, 37)
        opt = (make_optimizer(net, tp) if fused
               else torch.optim.Adam(net.parameters(), lr=0.01, weight_decay=1e-3, foreach=False))
        assert opt.defaults["fused"] is (True if fused else None)
        for gw, gb in grads:
            net.weight.grad, net.bias.grad = gw.clone(), gb.clone()
            opt.step()
        ends.append([p.detach().clone() for p in net.parameters()])
    torch.manual_seed(0)
    start = nn.Linear(5, 37)
    for a, b, s in zip(*ends, start.parameters()):
        assert not torch.equal(a, s.detach())                            # it moved
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def test_the_fingerprint_follows_the_code_not_the_commit(tmp_path, monkeypatch):
    """A commit that touches no code keeps finished seeds finished; an edit to pipeline/ or models/,
    committed or not, changes the fingerprint (pipeline/versions.code_versions)."""
    from pipeline import versions as v
    from pipeline.train import runs
    tp, ps, manifest = TrainParams(), params("sasrec", "lpe"), {"n_items": 12, "shards": {"train": ["abc"]}}
    fp = runs.fingerprint(tp, ps, manifest, 1)
    other_commit = {**v.versions(), "seqpe_git": "f" * 40, "seqpe_dirty": True}
    monkeypatch.setattr(v, "versions", lambda: other_commit)
    assert runs.fingerprint(tp, ps, manifest, 1) == fp                      # another commit, same code
    for d in v.PACKAGE_DIRS:
        shutil.copytree(ROOT / d, tmp_path / d, ignore=shutil.ignore_patterns("__pycache__"))
    assert v.source_hash(tmp_path) == v.code_hash()
    loop = tmp_path / "pipeline" / "train" / "loop.py"
    loop.write_text(loop.read_text() + "\n# an edit\n")
    assert v.source_hash(tmp_path) != v.code_hash()
    monkeypatch.setattr(v, "code_hash", lambda: "edited")
    assert runs.fingerprint(tp, ps, manifest, 1) != fp


def test_a_configuration_folder_given_for_a_run_names_its_seeds(tmp_path):
    """`encodings inspect --run data/runs/X/sasrec-lpe` (or recommend's run) said only "pass a run folder"."""
    (tmp_path / "sasrec-lpe" / "seed-2").mkdir(parents=True)
    (tmp_path / "sasrec-lpe" / "seed-2" / "checkpoint.pt").write_bytes(b"x")
    with pytest.raises(DataError, match=r"no checkpoint.pt in .*sasrec-lpe, a configuration's folder of seeds. Fix: "
                                        r"pass one of its seeds' run folders, e.g. .*sasrec-lpe/seed-2"):
        run_files.load_checkpoint(tmp_path / "sasrec-lpe")
    with pytest.raises(DataError, match=r"no checkpoint.pt in .*Fix: pass a run folder written by `seqpe train`"):
        run_files.load_checkpoint(tmp_path)


def test_an_option_given_at_its_default_is_the_same_run(tmp_path, capsys):
    """`--set models.itemknn.alpha=0.5` (Item-KNN's default) and a preset that spells out defaults were recorded as
    given: "holds a run trained with other settings (options.alpha: None vs 0.5)", a retrain, and seeds the
    report would not pool (walk 31a). Options are recorded where they differ from their defaults."""
    import dataclasses
    samples, runs = make_samples(tmp_path / "samples"), tmp_path / "runs"
    p = params("itemknn", "none")
    [first] = stage.run("toyset", samples, runs, p, model="itemknn", progress=False)
    run = runs / "itemknn-none" / "seed-1" / "run.json"
    before = run.stat().st_mtime_ns
    capsys.readouterr()
    spelt = dataclasses.replace(p, models={"itemknn": {"alpha": 0.5, "neighbours": 100}})
    [again] = stage.run("toyset", samples, runs, spelt, model="itemknn", progress=False)
    assert "other settings" not in capsys.readouterr().err and run.stat().st_mtime_ns == before   # reused
    assert json.loads(run.read_text())["options"] == {} and again["test"] == first["test"]
    other = dataclasses.replace(p, models={"itemknn": {"alpha": 0.5, "shrink": 20}})
    stage.run("toyset", samples, runs, other, model="itemknn", progress=False)
    assert "options.shrink: its default vs 20.0" in capsys.readouterr().err
    assert json.loads(run.read_text())["options"] == {"shrink": 20.0}          # the real difference, read as a float


def test_train_keys_a_model_never_reads_are_null_and_refused_when_given(tmp_path, capsys):
    """POP recorded train.dim / lr / epochs it never reads (a dim change "retrained" it and split its seeds), and
    BPR-MF with its own BPR loss recorded train.loss: three values gave bit-identical models (walk 31a)."""
    import dataclasses
    from pipeline.errors import ParamsError
    samples, runs = make_samples(tmp_path / "samples"), tmp_path / "runs"
    p = params("pop", "none")
    stage.run("toyset", samples, runs, p, model="pop", progress=False)
    record = json.loads((runs / "pop-none" / "seed-1" / "run.json").read_text())
    assert record["train"]["dim"] is None and record["train"]["lr"] is None and record["train"]["max_len"] == 8
    before = (runs / "pop-none" / "seed-1" / "run.json").stat().st_mtime_ns
    capsys.readouterr()
    wider = dataclasses.replace(p, train=dataclasses.replace(p.train, dim=32, lr=0.5))
    stage.run("toyset", samples, runs, wider, model="pop", progress=False)
    assert (runs / "pop-none" / "seed-1" / "run.json").stat().st_mtime_ns == before     # the same run: kept
    assert "other settings" not in capsys.readouterr().err
    from models.encodings.plots import inspect
    from pipeline import recommend
    from pipeline.errors import DataError
    assert recommend.load_run(runs / "pop-none" / "seed-1").recommend([[1, 2]], k=2).items.shape == (1, 2)  # reads null
    with pytest.raises(DataError, match="is a pop run, a model that takes no positional encoding"):   # was a figure
        inspect("none", [4], tmp_path / "fig", run_dir=runs / "pop-none" / "seed-1")
    with pytest.raises(ParamsError, match=r"train.dim is 32, and 'pop' does not read train.dim.*drop --set train.dim=32"):
        stage.run("toyset", samples, runs, wider, model="pop", overrides=["train.dim=32"], progress=False)
    bpr = params("bprmf", "none", epochs=1)
    with pytest.raises(ParamsError, match=r"'bprmf' does not read train.loss"):
        stage.run("toyset", samples, runs, bpr, model="bprmf", overrides=["train.loss=bce"], progress=False)
    ce = dataclasses.replace(bpr, models={"bprmf": {"loss": "ce"}})          # then it trains with train.loss
    stage.run("toyset", samples, runs, ce, model="bprmf", overrides=["train.loss=ce"], progress=False, check=True)


@pytest.mark.parametrize("model, key", [("gru4rec", "heads"), ("narm", "dropout"), ("stamp", "layers"),
                                        ("srgnn", "heads"), ("fgnn", "layers"), ("token_mixing", "heads"),
                                        ("bprmf", "dropout"), ("pop", "bucket")])
def test_backbones_refuse_the_train_keys_they_never_read(tmp_path, model, key):
    """GRU4Rec, NARM, STAMP, SR-GNN, FGNN, token mixing and BPR-MF took train.layers / heads / dropout from --set,
    recorded them and trained the same model (walk 32c: identical test metrics, other fingerprints); POP its
    train.bucket."""
    from pipeline.errors import ParamsError
    samples = make_samples(tmp_path / "samples")
    with pytest.raises(ParamsError, match=rf"train.{key} is 3, and '{model}' does not read train.{key}"):
        stage.run("toyset", samples, tmp_path / "runs", params(model, "none", epochs=1), model=model,
                  overrides=[f"train.{key}=3"], progress=False, check=True)


def test_the_value_a_model_runs_with_is_no_ignored_setting(tmp_path):
    """Walk 41a #11: `--set train.heads=1` for token mixing (one mixer, run as one head) and train.bucket=0 beside
    trim_padding false (no bucketing either way) were refused as settings "that would be ignored"; a script setting
    them for every model failed. Both now run, recorded as null like the unset key."""
    samples = make_samples(tmp_path / "samples")
    p = params("token_mixing", "none", epochs=1, trim_padding=False, bucket=0)
    [res] = stage.run("toyset", samples, tmp_path / "runs", p, model="token_mixing",
                      overrides=["train.heads=1", "train.bucket=0", "train.trim_padding=false"], progress=False)
    record = json.loads((tmp_path / "runs" / "token_mixing-none" / "seed-1" / "run.json").read_text())
    assert record["train"]["heads"] is None and record["train"]["bucket"] is None
    with pytest.raises(ParamsError, match="train.bucket is 5, and train.trim_padding is false"):
        stage.run("toyset", samples, tmp_path / "runs", params("token_mixing", "none", epochs=1, trim_padding=False,
                                                               bucket=5), model="token_mixing",
                  overrides=["train.bucket=5", "train.trim_padding=false"], progress=False, check=True)


def test_alibi_with_one_head_says_its_slope_is_small(tmp_path, capsys):
    """Walk 42c #1: ALiBi with one head (slope 2^-8) gave `none`'s test metrics on every seed, and nothing said
    why; two heads get no note."""
    samples = make_samples(tmp_path / "samples")
    stage.run("toyset", samples, tmp_path / "runs", params("sasrec", "alibi", epochs=1, heads=1), model="sasrec",
              progress=False, check=True)
    assert "note: alibi with one head has Press et al.'s slope 2^-8 (2^(-8h/H)): a logit moves by at most 0.027 at " \
           "max_len 8" in capsys.readouterr().err
    stage.run("toyset", samples, tmp_path / "runs", params("sasrec", "alibi", epochs=1, heads=2, dim=16),
              model="sasrec", progress=False, check=True)
    assert "alibi" not in capsys.readouterr().err
    stage.run("toyset", samples, tmp_path / "runs", params("sasrec", "alibi", epochs=1, heads=1), model="sasrec",
              progress=False)                                              # a real run says it too, once
    assert capsys.readouterr().err.count("note: alibi with one head") == 1
    from pipeline.errors import ParamsError
    with pytest.raises(ParamsError, match="token_mixing"):      # walk 43b #9: the note came before the refusal
        stage.run("toyset", samples, tmp_path / "runs", params("token_mixing", "alibi", epochs=1, heads=1),
                  model="token_mixing", progress=False, check=True)
    assert "note: alibi" not in capsys.readouterr().err


def test_carca_accepts_the_loss_it_computes_and_refuses_another(tmp_path):
    """bench_stability.sh sets train.loss=bce for SASRec and CARCA alike (CARCA's own one-negative BCE): CARCA
    refused it as a setting "that would be ignored" and the CPU CARCA study trained nothing. bce is accepted (and
    recorded as null, like the unset key); ce, which CARCA never computes, is still refused."""
    from pipeline.errors import ParamsError
    samples = make_samples(tmp_path / "samples")
    p = params("carca", "none", epochs=1, loss="bce")
    [res] = stage.run("toyset", samples, tmp_path / "runs", p, model="carca", overrides=["train.loss=bce"],
                      progress=False)
    record = json.loads((tmp_path / "runs" / "carca-none" / "seed-1" / "run.json").read_text())
    assert record["train"]["loss"] is None
    with pytest.raises(ParamsError, match=r"train.loss is ce, and 'carca' does not read train.loss"):
        stage.run("toyset", samples, tmp_path / "runs", params("carca", "none", epochs=1, loss="ce"), model="carca",
                  overrides=["train.loss=ce"], progress=False, check=True)


@pytest.mark.parametrize("model, said", [("stamp", "'stamp' does not read train.heads"),
                                         ("sasrec", "train.dim (64) must be divisible by train.heads (3), which "
                                                    "'sasrec' splits it into")])
def test_a_head_count_is_checked_against_dim_only_for_a_model_that_reads_it(tmp_path, monkeypatch, capsys, model,
                                                                             said):
    """`--model stamp --set train.heads=3` said "'train.dim' (64) must be divisible by 'train.heads' (3)", a fix
    to a key STAMP never reads (the params file checked dim % heads for every model; walk 33a)."""
    from pipeline import cli
    make_samples(tmp_path / "samples")
    monkeypatch.setattr(sys, "argv", ["seqpe", "train", "toyset", str(tmp_path / "samples"), str(tmp_path / "runs"),
                                      "--model", model, "--set", "train.heads=3", "--set", "train.dim=64", "--quiet",
                                      "--check", "--params", str(ROOT / "params.yaml")])
    with pytest.raises(SystemExit) as e:
        cli.main()
    err = capsys.readouterr().err
    assert e.value.code == 1 and said in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("ks, candidates, said", [
    ([1, 12], 0, r"evaluate.ks has 12, and each target is ranked among 12 items \(the data's n_items\): HR@12 "
                 r"would be 1 for any model, a constant one too. Fix: use cut-offs below 12 \(e.g. \[1\]\)"),
    ([1, 5], 4, r"evaluate.ks has 5, and each target is ranked among 5 items \(the target and its "
                r"evaluate.candidates 4 negatives\).*or more evaluate.candidates"),
    ([1, 12], 40, r"evaluate.ks has 12, and each target is ranked among 12 items \(the data's n_items, fewer than "
                  r"evaluate.candidates 40 \+ 1\): HR@12 would be 1 .*use cut-offs below 12 \(e.g. \[1\]\)$")])
def test_a_cutoff_every_model_reaches_is_refused(tmp_path, toy_registry, ks, candidates, said):
    """HR@K with K at or above the items a target is ranked among is 1 for a constant model: as the selection
    metric it kept epoch 1 whatever came after, and the tables showed 100.00 (walk 34a)."""
    import dataclasses
    samples = make_samples(tmp_path / "samples")                   # 12 items
    p = params(select_metric=f"hr@{ks[-1]}")
    p = dataclasses.replace(p, evaluate=dataclasses.replace(p.evaluate, ks=ks, candidates=candidates))
    with pytest.raises(ParamsError, match=said):
        stage.run("toyset", samples, tmp_path / "runs", p, progress=False, check=True)
    assert not (tmp_path / "runs").exists()
    fine = dataclasses.replace(p.evaluate, ks=[1, ks[-1] - 1])                 # one below: a real cut-off
    stage.run("toyset", samples, tmp_path / "runs", dataclasses.replace(p, evaluate=fine, train=dataclasses.replace(
        p.train, select_metric=f"hr@{ks[-1] - 1}")), progress=False, check=True)


def test_a_key_a_backbone_never_reads_is_not_its_fingerprint(tmp_path, capsys):
    """From params.yaml the key is recorded as null: raising train.heads for SASRec does not retrain a finished
    SR-GNN seed (walk 32c: 'holds a run trained with other settings (train.heads: 1 vs 4)')."""
    import dataclasses
    samples, runs = make_samples(tmp_path / "samples"), tmp_path / "runs"
    p = params("srgnn", "none", epochs=1)
    stage.run("toyset", samples, runs, p, model="srgnn", progress=False)
    path = runs / "srgnn-none" / "seed-1" / "run.json"
    record, before = json.loads(path.read_text()), path.stat().st_mtime_ns
    assert (record["train"]["heads"], record["train"]["layers"], record["train"]["dropout"]) == (None, None, None)
    capsys.readouterr()
    stage.run("toyset", samples, runs, dataclasses.replace(p, train=dataclasses.replace(p.train, heads=4, layers=3,
                                                                                          dropout=0.5)),
              model="srgnn", progress=False)
    assert path.stat().st_mtime_ns == before and "other settings" not in capsys.readouterr().err


def test_gru4rec_under_a_ranking_loss_refuses_the_trainers_loss_settings(tmp_path):
    """models.gru4rec.loss bpr_max trains with its own loss: --set train.loss=sampled was recorded and ignored."""
    import dataclasses
    from pipeline.errors import ParamsError
    samples = make_samples(tmp_path / "samples")
    p = params("gru4rec", "none", epochs=1)
    ranked = dataclasses.replace(p, models={"gru4rec": {"loss": "bpr_max", "negatives": 4}})
    with pytest.raises(ParamsError, match=r"train.loss is sampled, and 'gru4rec' does not read train.loss"):
        stage.run("toyset", samples, tmp_path / "runs", ranked, model="gru4rec",
                  overrides=["train.loss=sampled"], progress=False, check=True)
    stage.run("toyset", samples, tmp_path / "runs", p, model="gru4rec", overrides=["train.loss=sampled"],
              progress=False, check=True)                                  # under its loss ce it reads train.loss


@pytest.mark.parametrize("model, options, given, why, reader", [
    ("gru4rec", {}, "negatives=5", "models.gru4rec.loss ce trains with the trainer's loss", "loss=bpr_max"),
    ("gru4rec", {"loss": "bpr"}, "bpreg=3.0", "models.gru4rec.loss bpr has no score regularisation", "loss=bpr_max"),
    ("bprmf", {"loss": "ce"}, "negatives=9", "models.bprmf.loss ce trains with the trainer's loss", "loss=bpr"),
])
def test_model_options_another_option_leaves_unread(tmp_path, model, options, given, why, reader):
    """GRU4Rec's negatives / bpreg and BPR-MF's negatives outside the loss that reads them were recorded: three
    GRU4Rec runs with byte-identical results under three fingerprints (walk 32c). Given with --set they are refused;
    from params.yaml they are left out of the run's options."""
    import dataclasses
    from pipeline.errors import ParamsError
    samples, runs = make_samples(tmp_path / "samples"), tmp_path / "runs"
    key, value = given.split("=")
    p = dataclasses.replace(params(model, "none", epochs=1),
                            models={model: {**options, key: float(value) if "." in value else int(value)}})
    with pytest.raises(ParamsError, match=rf"models.{model}.{key} is {value}, and {why}.*, so it is not read.*drop "
                                          rf"--set models.{model}.{given}, or add --set models.{model}.{reader}"):
        stage.run("toyset", samples, runs, p, model=model, overrides=[f"models.{model}.{given}"], progress=False,
                  check=True)
    stage.run("toyset", samples, runs, p, model=model, progress=False)
    record = json.loads((runs / f"{model}-none" / "seed-1" / "run.json").read_text())
    assert record["options"] == options
    if model == "gru4rec":     # a misspelt loss is named as such, not as a loss without that option (walk 43b #4)
        typo = dataclasses.replace(p, models={model: {"loss": "bpr-max", key: float(value) if "." in value else int(value)}})
        with pytest.raises(ParamsError, match=r"models.gru4rec.loss must be one of ce, bpr, top1, bpr_max, top1_max, "
                                              r"got 'bpr-max'"):
            stage.run("toyset", samples, runs, typo, model=model, overrides=[f"models.{model}.{given}"],
                      progress=False, check=True)


def test_options_of_a_model_or_encoding_outside_the_run_are_checked(tmp_path):
    """--set models.narm.bogus on a GRU4Rec run (and encodings.lpe.foo on a run without lpe) passed unchecked; the
    error for a section without options ended in an empty 'known keys here:' (walk 32c)."""
    import dataclasses
    from pipeline.errors import ParamsError
    samples = make_samples(tmp_path / "samples")
    p = params("pop", "none")
    for section, extra, match in (
            ("models", {"narm": {"bogus": 0.9}}, r"unknown params key 'models.narm.bogus'.*known keys here: emb_dropout"),
            ("encodings", {"lpe": {"foo": 1}}, r"'encodings.lpe' takes no options: remove 'encodings.lpe.foo'"),
            ("models", {"pop": {"foo": 1}}, r"'models.pop' takes no options: remove 'models.pop.foo'"),
            ("encodings", {"rope": {"base": -1.0}}, r"encodings.rope.base must be > 1")):
        bad = dataclasses.replace(p, **{section: {**getattr(p, section), **extra}})
        with pytest.raises(ParamsError, match=match):
            stage.run("toyset", samples, tmp_path / "runs", bad, model="pop", progress=False, check=True)


def test_auto_settings_are_recorded_and_fingerprinted_as_what_they_pick(tmp_path, toy_registry, capsys):
    """train.ce_impl auto is chunked on the CPU and precision auto fp32: with the explicit values the same model
    was 'trained with other settings', retrained and replaced, and run.json never said which loss ran (walk 33a).
    A record of older code holding 'auto' pools with the resolved one."""
    import dataclasses
    from pipeline import report
    samples, runs = make_samples(tmp_path / "samples"), tmp_path / "runs"
    p = params(epochs=1)
    stage.run("toyset", samples, runs, p, progress=False)
    path = runs / "toy-toy_lpe" / "seed-1" / "run.json"
    record, before = json.loads(path.read_text()), path.stat().st_mtime_ns
    assert (record["train"]["ce_impl"], record["train"]["precision"]) == ("chunked", "fp32")
    capsys.readouterr()
    explicit = dataclasses.replace(p, train=dataclasses.replace(p.train, ce_impl="chunked", precision="fp32"))
    stage.run("toyset", samples, runs, explicit, overrides=["train.ce_impl=chunked", "train.precision=fp32"],
              progress=False)
    assert path.stat().st_mtime_ns == before and "other settings" not in capsys.readouterr().err    # reused
    old = {**record, "train": {**record["train"], "ce_impl": "auto", "precision": "auto"}}
    assert report.settings_change(old, record) == ""
    assert "ce_impl: 'plain' vs 'chunked'" in report.settings_change({**old, "device": "cuda"}, record)


def test_more_sampled_negatives_than_items_is_said(tmp_path, toy_registry, capfd):
    """train.negatives 100,000 on 479 items trained 16x slower than ce, without a word (walk 33a)."""
    import dataclasses
    samples = make_samples(tmp_path / "samples")                       # 12 items
    p = params(epochs=1)
    for negatives, said in ((5, False), (12, True)):
        q = dataclasses.replace(p, train=dataclasses.replace(p.train, loss="sampled", negatives=negatives))
        capfd.readouterr()
        stage.run("toyset", samples, tmp_path / "runs", q, progress=False, check=True)
        err = capfd.readouterr().err
        assert ("note: train.negatives is 12, and the data has 12 items" in err) is said, err


def test_a_key_another_setting_leaves_unread_is_null_and_refused_when_given(tmp_path, toy_registry, capsys):
    """train.negatives under loss ce (and lr_step / lr_gamma without a schedule) were fingerprinted: `dvc exp run -S
    train.negatives=50` retrained every configuration into bit-identical runs (walk 31b)."""
    import dataclasses
    from pipeline.errors import ParamsError
    samples, runs = make_samples(tmp_path / "samples"), tmp_path / "runs"
    p = params(epochs=2)
    stage.run("toyset", samples, runs, p, progress=False)
    path = runs / "toy-toy_lpe" / "seed-1" / "run.json"
    record, before = json.loads(path.read_text()), path.stat().st_mtime_ns
    assert record["train"]["negatives"] is None and record["train"]["lr_step"] is None
    assert record["train"]["ce_impl"] == "chunked"          # read: the loss is ce (auto, as it resolves on the CPU)
    capsys.readouterr()
    stage.run("toyset", samples, runs, dataclasses.replace(p, train=dataclasses.replace(p.train, negatives=50,
                                                                                          lr_gamma=0.5)), progress=False)
    assert path.stat().st_mtime_ns == before and "other settings" not in capsys.readouterr().err   # kept
    with pytest.raises(ParamsError, match=r"train.negatives is 50, and train.loss ce draws no sampled softmax, so it "
                                          r"is not read.*drop --set train.negatives=50, or add --set train.loss=sampled"):
        stage.run("toyset", samples, runs, p, overrides=["train.negatives=50"], progress=False)
    q = dataclasses.replace(p, train=dataclasses.replace(p.train, loss="sampled", negatives=5))
    sampled = stage.run("toyset", samples, tmp_path / "s", q, overrides=["train.loss=sampled", "train.negatives=5"],
                        progress=False, check=True)                                # read there: accepted
    assert sampled


@pytest.mark.parametrize("model, dataset, sets", [
    ("dien", "sample_ctr", {}),                                     # its auxiliary loss: behaviours[idx]
    ("sasrec", "sample", {"loss": "sampled", "negatives": 20}),     # w[neg]: rows drawn many times
])
def test_two_threads_train_the_same_bytes_twice(tmp_path, monkeypatch, model, dataset, sets):
    """Walk 40d #1: the backward of `table[idx]` with repeated rows is a parallel atomic add on the CPU, so
    DIEN (and sampled / bce losses at dim x batch >= 32,768) trained twice at 2 threads gave two checkpoints;
    training now runs with torch's deterministic algorithms on the CPU (and leaves the switch as it found it)."""
    from pipeline import augment, download, preprocess
    from pipeline.params import DownloadParams, SampleCTRParams, SampleParams
    p = Params()
    if dataset == "sample_ctr":
        sample = SampleCTRParams(users=120, items=200, cates=12, min_length=5, max_length=12, seed=7)
    else:
        sample = SampleParams(sessions=300, items=60)
        p = dataclasses.replace(p, preprocess=dataclasses.replace(p.preprocess, sample=sample))
    download.run(dataset, tmp_path / "raw", DownloadParams(), progress=False, sample=sample)
    preprocess.run(dataset, tmp_path / "raw", tmp_path / "sessions", p)
    augment.run(dataset, tmp_path / "sessions", tmp_path / "samples", p)
    p = dataclasses.replace(p, train=dataclasses.replace(p.train, epochs=1, dim=256, batch_size=256, threads=2,
                                                         **sets))
    before = torch.are_deterministic_algorithms_enabled()
    got = []
    for n in (1, 2):
        monkeypatch.setenv("SEQPE_STATE", str(tmp_path / f"state{n}"))
        stage.run(dataset, tmp_path / "samples", tmp_path / f"runs{n}", p, model=model,
                  encoding="cape" if model == "dien" else "lpe", seeds=[1], progress=False)
        [run_dir] = (tmp_path / f"runs{n}").glob("*/seed-1")
        got.append((run_dir / "checkpoint.pt").read_bytes())
    assert got[0] == got[1] and torch.are_deterministic_algorithms_enabled() == before


def test_sample_ids_are_checked_a_slice_at_a_time():
    """The id check of a split (1..n_items) reads memory-mapped matrices a slice at a time (walk 40h #3), and
    still finds the smallest real target and the largest id of any slice."""
    from pipeline.batches import Samples
    from pipeline.train.tasks import _id_range
    seqs = np.array([[0, 3], [0, 2], [4, 9], [0, 1], [0, 5]], dtype=np.int32)
    flat = Samples(seqs=seqs, targets=np.array([4, 3, 7, 2, 6], dtype=np.int32), lengths=np.ones(5, np.int32))
    assert _id_range(flat, rows=2) == _id_range(flat) == (2, 9)
    whole = Samples(seqs=seqs, targets=np.array([[0, 2], [0, 3], [5, 11], [0, 0], [0, 8]], dtype=np.int32),
                    lengths=np.ones(5, np.int32))
    assert _id_range(whole, rows=2) == (2, 11)
    bad = Samples(seqs=seqs[:2], targets=np.array([[0, 0], [0, 0]], dtype=np.int32), lengths=np.ones(2, np.int32))
    assert _id_range(bad, rows=1)[0] == 0             # no real target at all: refused as an id below 1


def test_a_state_folder_removed_by_another_training_midway_is_made_again(tmp_path, monkeypatch):
    """Walk 43b #10: two trainings sharing SEQPE_STATE: one finishing removes the emptied state/done (and
    locks/, resume/) between the other's mkdir of it and its file there: `No such file or directory:
    .../state/done`. Each maker now makes the folder again and retries (io.made_in)."""
    import tempfile
    from pipeline import io as pio
    from pipeline.train import runs as train_runs
    done = tmp_path / "state" / "done"
    real_mkstemp, real_mkdir = tempfile.mkstemp, Path.mkdir
    removed = []

    def mkstemp(*a, **k):                 # the other process's forget() runs just before this one's file
        if not removed:
            removed.append(done)
            done.rmdir()
        return real_mkstemp(*a, **k)
    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    pio.write_json(done / "a.json", {"a": 1})                # dst.parent is done/: gone in between, made again
    assert json.loads((done / "a.json").read_text()) == {"a": 1} and removed
    (done / "a.json").unlink()
    monkeypatch.setattr(tempfile, "mkstemp", real_mkstemp)
    removed.clear()

    def mkdir(self, *a, **k):             # _copy_tree: done/ made, then removed before the staging folder
        real_mkdir(self, *a, **k)
        if self == done and not removed:
            removed.append(self)
            self.rmdir()
    monkeypatch.setattr(Path, "mkdir", mkdir)
    src = tmp_path / "run"
    src.mkdir()
    (src / "run.json").write_text("{}")
    shutil.rmtree(done)
    train_runs._copy_tree(src, done / "fp")
    assert removed and (done / "fp" / "run.json").read_text() == "{}"
    monkeypatch.setattr(Path, "mkdir", real_mkdir)
    locks = tmp_path / "state" / "locks"
    locks.mkdir()
    real_open = open
    removed.clear()

    def open_(path, *a, **k):             # flock: locks/ made by _lock_file, removed before the open
        if Path(path).parent == locks and not removed:
            removed.append(path)
            locks.rmdir()
        return real_open(path, *a, **k)
    monkeypatch.setattr("builtins.open", open_)
    handle = pio.flock(locks / "a.lock")
    assert handle is not None and removed
    handle.close()


def test_select_metric_auto_and_what_it_picks_are_one_run(tmp_path):
    """Walk 43d #1: `auto` and `ndcg@5` (what auto picks at ks [1, 5]) were two fingerprints for one run: the seed
    was retrained and replaced, and `seqpe report` would not pool it with seeds trained under the other spelling."""
    samples, runs = make_samples(tmp_path / "samples"), tmp_path / "runs"
    stage.run("toyset", samples, runs, params("sasrec", "lpe", epochs=1, select_metric="auto"), model="sasrec",
              progress=False)
    path = runs / "sasrec-lpe" / "seed-1" / "run.json"
    first = json.loads(path.read_text())
    assert first["train"]["select_metric"] == "ndcg@5" == first["select_metric"]
    summary = stage.run("toyset", samples, runs, params("sasrec", "lpe", epochs=1, select_metric="ndcg@5"),
                        model="sasrec", progress=False, check=True)[0]
    assert summary["reused"] == [1]
    from pipeline import report
    older = {**first, "train": {**first["train"], "select_metric": "auto"}}    # recorded before the fix
    assert report.settings_change(older, first) == ""


def test_fitted_baselines_and_ctr_models_refuse_keys_they_do_not_read(tmp_path):
    """Walk 43d #3 / #9: POP took --set train.select_metric (and precision), recorded it and fingerprinted a
    byte-identical run; a CTR model's train.negatives was refused with a fix (train.loss=sampled) CTR refuses."""
    from pipeline.errors import ParamsError
    samples = make_samples(tmp_path / "samples")
    for key in ("select_metric=hr@5", "precision=fp32"):
        with pytest.raises(ParamsError, match=rf"train.{key.replace('=', ' is ')}, and 'pop' does not read"):
            stage.run("toyset", samples, tmp_path / "runs", params("pop", "none"), model="pop",
                      overrides=[f"train.{key}"], progress=False, check=True)
    stage.run("toyset", samples, tmp_path / "runs", params("pop", "none"), model="pop", progress=False)
    record = json.loads((tmp_path / "runs" / "pop-none" / "seed-1" / "run.json").read_text())
    assert record["train"]["select_metric"] is None and record["select_metric"] == "ndcg@5"


def test_a_resume_file_of_older_code_names_the_code_first_not_keys_recorded_the_old_way():
    """Walk 44a #2: a session-31 resume file was said to differ in ce_impl 'auto' vs 'chunked' and the unread
    lr_gamma / lr_step, while the code, the real difference, hid behind "and 4 more"."""
    from pipeline.train import runs
    new = {"train": {"model": "sasrec", "loss": "ce", "lr_schedule": "none", "ce_impl": "chunked", "lr_step": None,
                     "lr_gamma": None, "negatives": None, "lr": 0.001},
           "versions": {"seqpe_code": "b" * 12, "torch": "2.13.0"}, "shards": [{"path": "x", "sha256": "1"}]}
    old = {**runs.shown_inputs(new), "versions": {"seqpe_code": "a" * 12, "torch": "2.1.0"},
           "train": {**new["train"], "ce_impl": "auto", "lr_step": 3, "lr_gamma": 0.1, "negatives": 100}}
    assert runs.inputs_change(old, new) == ("seqpe's source code (another checkout or version); "
                                            "versions.torch: '2.1.0' vs '2.13.0'")
    old["train"]["lr"] = 0.01                                       # a real setting is still named
    assert "train.lr: 0.01 vs 0.001" in runs.inputs_change(old, new)


def test_candidate_sampling_under_full_ranking_is_not_a_setting(tmp_path, toy_registry):
    """Walk 44b #1: with evaluate.candidates 0 nothing is sampled, yet `--set evaluate.candidate_sampling=popularity`
    was recorded: a finished seed was retrained into byte-identical scores, and report refused to pool it."""
    import dataclasses
    from pipeline import report
    samples, runs = make_samples(tmp_path / "samples"), tmp_path / "runs"
    p = params(epochs=1, patience=0)
    pop = dataclasses.replace(p, evaluate=dataclasses.replace(p.evaluate, candidate_sampling="popularity"))
    with pytest.raises(ParamsError, match="evaluate.candidate_sampling is popularity, and evaluate.candidates is 0"):
        stage.run("toyset", samples, runs, pop, progress=False, overrides=["evaluate.candidate_sampling=popularity"])
    assert not runs.exists()
    stage.run("toyset", samples, runs, pop, progress=False)                          # from params.yaml: not read
    rec = json.loads((runs / "toy-toy_lpe" / "seed-1" / "run.json").read_text())
    assert rec["evaluate"]["candidate_sampling"] == "uniform"
    assert report.settings_change({**rec, "evaluate": {**rec["evaluate"], "candidate_sampling": "popularity"}},
                                  rec) == ""                                          # a record of before: the same
    sampled = {**rec, "evaluate": {**rec["evaluate"], "candidates": 5}}
    assert "candidate_sampling" in report.settings_change(
        {**sampled, "evaluate": {**sampled["evaluate"], "candidate_sampling": "popularity"}}, sampled)


def test_float64_scores_are_ranked_in_float64_not_cast_to_fp32(tmp_path):
    """Walk 44c #1: Item-KNN and S-POP score in float64; cast to fp32 before ranking, scores closer than fp32's
    step tied (Item-KNN on `sample`: 132 of 1,758 targets ranked elsewhere), so the metrics were not the model's."""
    from pipeline.train.tasks import score

    class Ordered(torch.nn.Module):                       # item i scores 1 + i * step: one strict order of all items
        def __init__(self, step, dtype):
            super().__init__()
            self.step, self.dtype = step, dtype

        def forward(self, seqs):
            n = 13
            row = 1.0 + torch.arange(n, dtype=self.dtype) * self.step
            return row.expand(seqs.size(0), n).clone()
    test = load_samples(make_samples(tmp_path / "samples"), "test", 8)
    fine = score(Ordered(1e-12, torch.float64), test, "test", [1, 5], 64, torch.device("cpu"))
    coarse = score(Ordered(1.0, torch.float32), test, "test", [1, 5], 64, torch.device("cpu"))
    tied = score(Ordered(1e-12, torch.float32), test, "test", [1, 5], 64, torch.device("cpu"))
    assert fine == coarse and fine != tied                # the float64 order, not fp32's ties


def test_carcas_attribute_width_on_data_without_side_information_is_not_a_setting(tmp_path, toy_registry):
    """Walk 43d #6: models.carca.attr_dim sizes the psi branch, which CARCA builds only on samples with item
    attributes or context; elsewhere it was recorded and fingerprinted (two runs, one model)."""
    import dataclasses
    samples, runs = make_samples(tmp_path / "samples"), tmp_path / "runs"
    p = params("carca", "none", epochs=1, patience=0, loss="bce")
    p = dataclasses.replace(p, models={"carca": {"attr_dim": 4}}, encodings={"none": {}})
    with pytest.raises(ParamsError, match=r"models.carca.attr_dim is 4, and these samples carry no item attributes "
                                          r"or interaction context .* Fix: drop --set models.carca.attr_dim=4$"):
        stage.run("toyset", samples, runs, p, progress=False, overrides=["models.carca.attr_dim=4"])
    stage.run("toyset", samples, runs, p, progress=False)
    rec = json.loads((runs / "carca-none" / "seed-1" / "run.json").read_text())
    assert "attr_dim" not in rec["options"]


def test_a_loss_above_a_uniform_guess_is_recorded_as_not_learnt_and_reported(tmp_path, toy_registry, monkeypatch,
                                                                             capsys):
    """Walk 44c #3 / #4: a model that starts absurd (STAMP at emb_std 1e4: loss 1.2e5) never falls far from its
    first batch, so nothing was said; and the caveat that was said went to stderr alone, not into run.json or
    the report that shows the metrics."""
    import math
    from pipeline import report
    from pipeline.train import tasks
    samples = make_samples(tmp_path / "samples")
    stage.run("toyset", samples, tmp_path / "runs", params(epochs=1), progress=False)          # learns: no caveat
    assert "not_learnt" not in json.loads((tmp_path / "runs" / "toy-toy_lpe" / "seed-1" / "run.json").read_text())
    real = tasks.loss_fn
    monkeypatch.setattr(tasks, "loss_fn", lambda *a, **kw: real(*a, **kw) + 100.0)             # above ln 12 throughout
    capsys.readouterr()
    stage.run("toyset", samples, tmp_path / "runs", params(epochs=1, lr=0.021), progress=False, tag="bad")
    err = " ".join(capsys.readouterr().err.split())
    assert f"the training loss stayed above a uniform guess's ({math.log(12):.4g}; lowest epoch mean 10" in err
    rec = json.loads((tmp_path / "runs" / "toy-toy_lpe-bad" / "seed-1" / "run.json").read_text())
    assert rec["not_learnt"].startswith("the training loss stayed above a uniform guess's")
    rows = report.aggregate(report.find_runs([tmp_path / "runs"]))
    [note] = [n for n in report.row_notes(rows) if n.startswith("Did not learn")]
    assert "toyset toy-toy_lpe-bad (seed 1)" in note and "toy-toy_lpe (" not in note


def test_samples_of_one_item_are_refused_without_an_impossible_fix():
    """Walk 44c #6: one item passed preprocess, and train's fix was "use cut-offs below 1"."""
    from pipeline.params import EvaluateParams
    from pipeline.train.stage import _check_cutoffs
    with pytest.raises(DataError, match="n_items 1: with one item every model ranks the target first"):
        _check_cutoffs(EvaluateParams(), {"n_items": 1})
    _check_cutoffs(EvaluateParams(ks=[1]), {"n_items": 2})


def test_a_model_tying_every_target_with_its_sampled_candidates_is_refused(tmp_path, toy_registry, monkeypatch):
    """Walk 44c #5: under evaluate.candidates a model that scored every item alike was recorded (HR@10 = 10 / 51),
    where full ranking refused it as constant."""
    import dataclasses
    from pipeline.errors import ConstantModel
    from pipeline.train.tasks import _all_tied
    samples = make_samples(tmp_path / "samples")
    p = params(epochs=1)
    p = dataclasses.replace(p, evaluate=dataclasses.replace(p.evaluate, candidates=5, ks=[1, 5]))
    monkeypatch.setattr(ToyRecommender, "forward", lambda self, seqs, **kw: torch.zeros(seqs.size(0), 13)
                        + self.mix.weight.sum() * 0)
    with pytest.raises(ConstantModel, match="scored every test target and its 5 sampled candidates alike"):
        stage.run("toyset", samples, tmp_path / "runs", p, progress=False)
    cands = torch.tensor([[2, 3, 0], [4, 5, 6]])
    assert _all_tied(torch.tensor([0, 0]), torch.tensor([2, 3]), cands)
    assert _all_tied(torch.tensor([0, 3]), torch.tensor([2, 0]), cands)         # a masked target below tied ones
    assert not _all_tied(torch.tensor([3, 3]), torch.tensor([0, 0]), cands)     # below all, never tied: a ranking
    assert not _all_tied(torch.tensor([0, 1]), torch.tensor([2, 1]), cands)


def test_samples_replaced_while_they_load_stop_the_run(tmp_path, toy_registry, monkeypatch):
    """Walk 44g #1: a `seqpe augment` between train's check of the samples and their loading trained on the new
    rows under the old version's shard hashes, and a later command reused that run as a finished seed."""
    import pipeline.train.stage as stage_module
    samples = make_samples(tmp_path / "samples")
    real = stage_module.make_task

    def racing(kind, samples_dir, manifest, *args, **kw):
        task = real(kind, samples_dir, manifest, *args, **kw)
        path = Path(samples_dir) / "manifest.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "steps": []}))    # another augment swapped in
        return task
    monkeypatch.setattr(stage_module, "make_task", racing)
    with pytest.raises(DataError, match="was replaced while this command read it"):
        stage.run("toyset", samples, tmp_path / "runs", params(epochs=1), progress=False)
    assert not (tmp_path / "runs" / "toy-toy_lpe" / "seed-1").exists()


@pytest.mark.parametrize("losses, start, chance, said", [
    ([6.40], 6.5, 6.17, None),                      # NARM's first epoch on sample: learns (HR@10 0.38)
    ([4.75], 4.70, 4.673, None),                    # a one-epoch ALiBi SASRec of the DVC test
    ([11.53], 6.11, 6.17, "above a uniform guess"),  # SASRec at lr 0.9, one epoch (walk 44k #2)
    ([2.4e5], 2.5e5, 6.17, "above a uniform guess"),  # STAMP at emb_std 1e4 (walk 44c #3)
    ([7.0, 6.5], 8.0, 6.17, None),                  # two epochs, falling, still above ln N: learning slowly
    ([5.0, 5.1], 4.0, None, "never fell below"),    # a model's own loss, two epochs, never below the first batch
    ([5.0], 4.0, None, None),                       # one epoch of its own loss: its mean against one batch misleads
])
def test_not_learnt_reads_the_losses_as_documented(losses, start, chance, said):
    """Walk 44k #4: the rule had only a slow DVC test and one far above every threshold."""
    from pipeline.train.loop import not_learnt
    history = [{"epoch": e, "loss": loss} for e, loss in enumerate(losses, start=1)]
    got = not_learnt(history, start, chance)
    assert (got is None) if said is None else (said in got)


def test_a_state_folder_removed_before_the_leftover_sweep_is_made_again(tmp_path, monkeypatch):
    """CI at abf3707 (bench_stability.sh's parallel seeds): the folder went between `atomic_path`'s mkdir and the
    sweep's listing of it, `No such file or directory: .../resume`, a failure made_in could not catch."""
    from pipeline import io as pio
    resume = tmp_path / "state" / "resume"
    real_iterdir, removed = Path.iterdir, []

    def iterdir(self):                    # another training's forget() removes the emptied folder just before
        if self == resume and not removed:
            removed.append(self)
            self.rmdir()
        return real_iterdir(self)
    monkeypatch.setattr(Path, "iterdir", iterdir)
    pio.write_bytes(resume / "x.pt", b"state")
    assert removed and (resume / "x.pt").read_bytes() == b"state"
