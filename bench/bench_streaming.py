"""Benchmark (not a test): the srgnn preprocess of a Yoochoose-format raw file in memory
(`preprocess.streaming: false`) and streamed (`true`, `pipeline/protocols/srgnn_streaming.py`),
on the same generated input, with the outputs compared byte for byte (issue 14, data larger
than memory).

    .venv/bin/python bench/bench_streaming.py --scale 1                     # both paths, compared
    .venv/bin/python bench/bench_streaming.py --scale 10 --paths streaming  # 330M rows, ~14 GB

The raw file is `bench_sessions.make_yoochoose(scale)`: the exact yoochoose-clicks.dat format,
`scale` x the real file's 33M rows and 9.2M sessions over the same 183 days and 52,739 items.
Everything is written under `--dir` (default /tmp/seqpe-bench-streaming: never the repository)
and removed at the end (the raw file too unless --keep-raw). The raw folder gets a source.json
written here rather than by `seqpe download --from`, which would copy the file (a second 14 GB).

Each path runs `pipeline.preprocess.run` (what `seqpe preprocess` calls) in its own Python
process under /usr/bin/time: wall seconds, peak RSS (max RSS of that process), CPU seconds.
The process also times the streaming passes (spill, count, keep, route, emit, write shards; "other"
is the rest: the session table's sort and split, item numbering, the in-memory path's protocol) by
wrapping those functions, and samples its RSS every 0.2 s by pass (a sampled peak can miss a
spike shorter than that: /usr/bin/time's figure is the true peak); the disk the run uses at its peak
(output + scratch, the files under `--dir` outside the raw folder) is sampled every 0.5 s.
Prints Markdown tables and writes results-<dataset>-x<scale>.json into `--dir`.

Folders under `--dir` are replaced and removed, so `--dir` is never inside the repository and is either
absent or made by an earlier run of this script (its .bench_streaming mark); any other existing folder
is refused before anything is written (a folder of a run from before the mark: touch DIR/.bench_streaming).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent
MARK = ".bench_streaming"   # in --dir: this script made it, so what it holds may be replaced
sys.path.insert(0, str(ROOT))
from bench_sessions import make_yoochoose  # noqa: E402

RUN = """
import json, sys, threading, time
from pathlib import Path
from pipeline import io, preprocess
from pipeline.params import Params, PreprocessParams
from pipeline.protocols import srgnn_streaming as s
timers, rss_mb, phase = {{}}, {{}}, ["other"]
def sample():
    while True:
        with open("/proc/self/status") as f:
            mb = next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS:"))
        rss_mb[phase[0]] = max(rss_mb.get(phase[0], 0), mb)
        time.sleep(0.2)
threading.Thread(target=sample, daemon=True).start()
def timed(name, f):
    def g(*a, **k):
        t, before = time.perf_counter(), phase[0]
        phase[0] = name
        try:
            return f(*a, **k)
        finally:
            phase[0] = before
            timers[name] = round(timers.get(name, 0) + time.perf_counter() - t, 2)
    return g
for name in ("_spill", "_count", "_keep", "_route"):
    setattr(s, name, timed(name.strip("_"), getattr(s, name)))
s._Emit.bucket = timed("emit", s._Emit.bucket)
io.sink_split = timed("write shards", io.sink_split)
io.write_split = timed("write shards", io.write_split)
t = time.perf_counter()
preprocess.run({dataset!r}, Path({raw!r}), Path({dst!r}), Params(preprocess=PreprocessParams(streaming={streaming})))
timers["preprocess.run"] = round(time.perf_counter() - t, 2)
Path({timers!r}).write_text(json.dumps({{"s": timers, "rss_mb": rss_mb}}))
"""


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    mem = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
               if line.startswith("MemTotal:"))
    return (f"{platform.node()}: {os.cpu_count()} vCPU {model}, {mem / 2**20:.1f} GiB RAM, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}, Polars {pl.__version__}")


def disk_used(work: Path, raw: Path) -> int:
    """Bytes of the files under `work` but outside the raw folder: the output and its scratch."""
    total = 0
    for folder, _, names in os.walk(work):
        if Path(folder).is_relative_to(raw):
            continue
        for n in names:
            try:
                total += os.stat(os.path.join(folder, n)).st_size
            except FileNotFoundError:  # removed while walking
                pass
    return total


def measure(name: str, code: str, work: Path, raw: Path) -> dict:
    """`code` in a fresh process under /usr/bin/time; wall, peak RSS, CPU, peak disk use, timers."""
    out = work / f".{name}.time"
    high, done = [0], threading.Event()

    def watch() -> None:
        while not done.wait(0.5):
            high[0] = max(high[0], disk_used(work, raw))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    proc = subprocess.run(["/usr/bin/time", "-o", str(out), "-f", "%e %M %U %S", sys.executable, "-c", code],
                          cwd=ROOT.parent)
    done.set()
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed (exit {proc.returncode}); /usr/bin/time: {out.read_text()}")
    wall, rss_kb, user, system = out.read_text().strip().splitlines()[-1].split()
    inside = json.loads((work / f".{name}.timers").read_text())
    row = {"path": name, "wall_s": round(float(wall), 1), "peak_rss_mb": round(int(rss_kb) / 1024),
           "cpu_s": round(float(user) + float(system), 1), "peak_disk_mb": round(high[0] / 1e6),
           "pass_s": inside["s"], "pass_rss_mb": inside["rss_mb"]}
    print(f"  {name:<10} {row['wall_s']:>8.1f} s  {row['peak_rss_mb']:>6} MB  cpu {row['cpu_s']} s  "
          f"disk {row['peak_disk_mb']} MB\n    seconds by pass {row['pass_s']}\n"
          f"    sampled peak RSS MB by pass {row['pass_rss_mb']}", flush=True)
    return row


def digest(root: Path) -> dict[str, str]:
    """sha256 of every file under `root`, the manifest without the option that differs by design."""
    out = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(root).as_posix()
        if rel == "manifest.json":
            m = json.loads(p.read_text())
            m["params"]["preprocess"].pop("streaming")
            out[rel] = hashlib.sha256(json.dumps(m, sort_keys=True).encode()).hexdigest()
        else:
            h = hashlib.sha256()
            with open(p, "rb") as f:
                while block := f.read(1 << 24):
                    h.update(block)
            out[rel] = h.hexdigest()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=1, help="x the real file's rows and sessions (10: 330M rows)")
    ap.add_argument("--dataset", default="yoochoose", choices=["yoochoose", "yoochoose_1_4", "yoochoose_1_64"])
    ap.add_argument("--paths", default="memory,streaming", help="comma-separated: memory, streaming")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/seqpe-bench-streaming"))
    ap.add_argument("--keep-raw", action="store_true", help="keep the generated raw file for a next run")
    args = ap.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    if not set(paths) <= {"memory", "streaming"}:
        raise SystemExit("--paths takes memory and/or streaming")
    if args.scale < 1:
        raise SystemExit(f"--scale must be 1 or more, got {args.scale}")
    work, repo = args.dir.resolve(), ROOT.parent
    if work == repo or repo in work.parents:
        raise SystemExit(f"--dir {work} lies inside the repository {repo}: name a folder outside it "
                         "(default /tmp/seqpe-bench-streaming)")
    if work.exists() and not (work / MARK).is_file():
        raise SystemExit(f"--dir {work} exists and was not made by bench_streaming.py: name another folder "
                         f"(an earlier run's from before the mark: touch {work / MARK})")
    work.mkdir(parents=True, exist_ok=True)
    (work / MARK).touch()
    raw = work / f"raw-x{args.scale}"
    raw.mkdir(parents=True, exist_ok=True)
    print(machine())
    t0 = time.perf_counter()
    src = make_yoochoose(raw, scale=args.scale)
    gen_s = round(time.perf_counter() - t0, 1)
    size = src.stat().st_size
    from pipeline.datasets import get                 # the dataset's own source name: preprocess refuses another's
    (raw / "source.json").write_text(json.dumps({"source": get(args.dataset).source.name, "filename": src.name,
                                                 "origin": "generated", "bytes": size}))
    print(f"raw input {src} ({size / 1e9:.2f} GB), generated in {gen_s} s (0 if it was there)")
    result = {"dataset": args.dataset, "scale": args.scale, "raw_bytes": size, "machine": machine(),
              "generate_s": gen_s, "load_before": os.getloadavg(), "runs": []}
    digests = {}
    try:
        for name in paths:
            dst = work / f"{args.dataset}-x{args.scale}-{name}"
            shutil.rmtree(dst, ignore_errors=True)
            code = RUN.format(dataset=args.dataset, raw=str(raw), dst=str(dst), streaming=name == "streaming",
                              timers=str(work / f".{name}.timers"))
            row = measure(name, code, work, raw)
            manifest = json.loads((dst / "manifest.json").read_text())
            row["splits"], row["n_items"] = manifest["splits"], manifest["n_items"]
            row["shards"] = len(manifest["shards"])
            row["output_mb"] = round(sum(p.stat().st_size for p in dst.rglob("*") if p.is_file()) / 1e6)
            digests[name] = digest(dst)
            shutil.rmtree(dst)
            result["runs"].append(row)
    finally:
        for p in work.glob(".*.time*"):
            p.unlink()
        if not args.keep_raw:
            shutil.rmtree(raw, ignore_errors=True)
    result["load_after"] = os.getloadavg()
    if len(digests) == 2:
        a, b = digests["memory"], digests["streaming"]
        result["identical"] = a == b
        result["files_compared"] = len(a)
        m, s = result["runs"]
        result["ratio_wall"] = round(s["wall_s"] / m["wall_s"], 2)
        result["ratio_rss"] = round(s["peak_rss_mb"] / m["peak_rss_mb"], 2)
    (work / f"results-{args.dataset}-x{args.scale}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n{args.dataset}, scale {args.scale} ({size / 1e9:.2f} GB raw)\n")
    print("| path | wall s | peak RSS MB | CPU s | peak disk MB | output |\n|---|---:|---:|---:|---:|---|")
    for r in result["runs"]:
        print(f"| {r['path']} | {r['wall_s']} | {r['peak_rss_mb']} | {r['cpu_s']} | {r['peak_disk_mb']} | "
              f"{r['splits']}, {r['n_items']} items, {r['shards']} shards, {r['output_mb']} MB |")
    if "identical" in result:
        print(f"\nstreaming / memory: wall {result['ratio_wall']}x, peak RSS {result['ratio_rss']}x; "
              f"{result['files_compared']} output files byte-identical: {result['identical']}")
    print(f"load average before {result['load_before']}, after {result['load_after']}")


if __name__ == "__main__":
    main()
