"""Benchmark: torch CPU threads for training (train.threads), idle and next to a CPU hog.

Not a test. Each run is a real `seqpe train` (SASRec, no encoding, one seed) in its own process,
on the embedded `sample` dataset (built here with download/preprocess/augment unless --samples is
given), with a fresh runs folder and a fresh state folder (SEQPE_STATE), so nothing is resumed or
reused. The time of a run is its own record (timing.json: train + valid seconds of every epoch
+ the test scoring), not the process start-up.

Conditions, measured in one invocation: `idle` (nothing of ours besides the run) and `hog`
(--hogs busy-loop processes, `while True: pass`, started before and killed after that condition).
Settings are run in a rotated order in every repetition, so that drift in the machine's load
spreads over all of them; the table shows the median over --reps runs and its ratio to the
median of `train.threads=1` in the same condition (ratio > 1: slower than one thread). The
weights (checkpoint tensors) and the test metrics of every run are compared with the one-thread run's.

    python bench/bench_threads.py                        # 0, 1, 2, auto; idle and 1 hog; 5 reps of 1 epoch
    python bench/bench_threads.py --reps 3 --hogs 2 --epochs 3 --out /tmp/threads.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def seqpe(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env)
    if proc.returncode != 0:
        raise SystemExit(f"seqpe {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def build_sample(work: Path) -> Path:
    for argv in (["download", "sample", str(work / "raw")],
                 ["preprocess", "sample", str(work / "raw"), str(work / "sessions")],
                 ["augment", "sample", str(work / "sessions"), str(work / "samples")]):
        seqpe(*argv, "--quiet")
    return work / "samples"


def one_run(samples: Path, work: Path, threads: str, epochs: int, tag: str) -> dict:
    runs, state = work / f"runs-{tag}", work / f"state-{tag}"
    shutil.rmtree(runs, ignore_errors=True)
    shutil.rmtree(state, ignore_errors=True)
    env = dict(os.environ, SEQPE_STATE=str(state))
    t0 = time.perf_counter()
    seqpe("train", "sample", str(samples), str(runs), "--model", "sasrec", "--encoding", "none", "--seed", "1",
          "--set", f"train.epochs={epochs}", "--set", "train.patience=0", "--set", f"train.threads={threads}",
          "--quiet", env=env)
    wall = time.perf_counter() - t0
    run = runs / "sasrec-none" / "seed-1"
    timing = json.loads((run / "timing.json").read_text())
    record = json.loads((run / "run.json").read_text())
    seconds = sum(e["train_s"] + e["valid_s"] for e in timing["epochs"]) + timing["test_s"]
    sha = weights_sha(run / "checkpoint.pt")
    shutil.rmtree(runs, ignore_errors=True)
    shutil.rmtree(state, ignore_errors=True)
    return {"threads": threads, "torch_threads": timing["threads"], "seconds": seconds, "wall": wall,
            "checkpoint": sha, "test": record["test"]}


def weights_sha(path: Path) -> str:
    """sha256 of the checkpoint's weights (names and tensor bytes; not the recorded settings, which
    name train.threads)."""
    import torch
    h = hashlib.sha256()
    for name, tensor in sorted(torch.load(path, map_location="cpu", weights_only=True)["model"].items()):
        h.update(name.encode())
        h.update(tensor.contiguous().numpy().tobytes())
    return h.hexdigest()


def start_hogs(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop_hogs(hogs: list[subprocess.Popen]) -> None:
    for h in hogs:
        h.kill()
    for h in hogs:
        h.wait()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=Path, help="samples folder (default: build the embedded sample)")
    ap.add_argument("--settings", default="0,1,2,auto", help="train.threads values, comma-separated")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--hogs", type=int, default=1, help="busy-loop processes in the `hog` condition")
    ap.add_argument("--out", type=Path, help="also write every run as JSON here")
    args = ap.parse_args(argv)
    settings = args.settings.split(",")
    if "1" not in settings:
        raise SystemExit("--settings must include 1 (the reference)")
    from pipeline.train.threads import auto_threads, physical_cores, usable_cpus
    work = Path(tempfile.mkdtemp(prefix="bench-threads-"))
    runs: list[dict] = []
    try:
        samples = args.samples or build_sample(work)
        info = {"python": platform.python_version(), "cpu": _cpu_model(), "usable_cpus": usable_cpus(),
                "physical_cores": physical_cores(), "auto": auto_threads(), "load_before": os.getloadavg()}
        print(json.dumps(info), flush=True)
        for condition in ("idle", "hog"):
            hogs = start_hogs(args.hogs) if condition == "hog" else []
            try:
                time.sleep(1.0 if hogs else 0.0)
                for rep in range(args.reps):
                    order = settings[rep % len(settings):] + settings[:rep % len(settings)]
                    for threads in order:
                        r = one_run(samples, work, threads, args.epochs, f"{condition}-{threads}")
                        r.update(condition=condition, rep=rep, load=os.getloadavg()[0])
                        runs.append(r)
                        print(json.dumps({k: r[k] for k in ("condition", "rep", "threads", "torch_threads",
                                                            "seconds", "wall", "load")}), flush=True)
            finally:
                stop_hogs(hogs)
        info["load_after"] = os.getloadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(table(runs, settings, args), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"info": info, "runs": runs}, indent=2) + "\n")


def table(runs: list[dict], settings: list[str], args) -> str:
    lines = [f"SASRec, embedded sample, {args.epochs} epoch(s), {args.reps} runs per cell (median), "
             f"hog = {args.hogs} busy-loop process(es)", "",
             "| condition | train.threads | torch threads | seconds (median) | runs (s) | ratio to 1 thread "
             "| same weights as 1 thread | same test metrics |", "|---|---|---|---|---|---|---|---|"]
    for condition in ("idle", "hog"):
        cell = {t: [r for r in runs if r["condition"] == condition and r["threads"] == t] for t in settings}
        ref = cell["1"][0]
        base = statistics.median(r["seconds"] for r in cell["1"])
        for t in settings:
            rs = cell[t]
            med = statistics.median(r["seconds"] for r in rs)
            same_ckpt = all(r["checkpoint"] == ref["checkpoint"] for r in rs)
            same_test = all(r["test"] == ref["test"] for r in rs)
            lines.append(f"| {condition} | {t} | {rs[0]['torch_threads']} | {med:.2f} | "
                         f"{', '.join(format(r['seconds'], '.1f') for r in rs)} | {med / base:.2f} | "
                         f"{'yes' if same_ckpt else 'no'} | {'yes' if same_test else 'no'} |")
    return "\n".join(lines)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


if __name__ == "__main__":
    main()
