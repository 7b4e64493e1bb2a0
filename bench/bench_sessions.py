"""Benchmark (not a test): download --from + preprocess + augment of the session datasets at full
scale, against the floor of just parsing the raw file and grouping clicks by session.

    .venv/bin/python bench/bench_sessions.py diginetica      # 1,235,380 rows, ~310k sessions
    .venv/bin/python bench/bench_sessions.py yoochoose_1_64  # 33,003,944 rows, ~9.2M sessions, 1.4 GB

Raw files are generated once in the exact raw formats into bench/work/ (gitignored): Diginetica
as dataset-train-diginetica.zip (download unzips it), Yoochoose as an extracted
yoochoose-clicks.dat (compressing 1.4 GB to 7z with py7zr would take longer than everything
measured; download copies and hashes it). Each stage runs in its own Python process calling the
stage's library function (no CLI start-up); wall time is measured around the process, peak RSS
is that process's ru_maxrss (os.wait4). Prints a Markdown table and writes results.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from pipeline.datasets.sample import Catalogue, _length, csv_bytes, draw_sessions, fit_total, make_log  # noqa: E402

WORK = ROOT / "bench" / "work"
DIGI = dict(rows=1_235_380, sessions=310_324, items=123_000, days=153)
YOO = dict(rows=33_003_944, sessions=9_249_729, items=52_739, days=183)


# --------------------------------------------------------------------------- raw files

def make_diginetica(dst: Path) -> Path:
    """dataset-train-diginetica.zip holding a full-size train-item-views.csv."""
    path = dst / "dataset-train-diginetica.zip"
    if not path.exists():
        log = make_log(DIGI["sessions"], DIGI["items"], DIGI["days"], seed=2016, total_rows=DIGI["rows"])
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("train-item-views.csv", csv_bytes(log))
    return path


def make_yoochoose(dst: Path, scale: int = 1, chunk: int = 1_000_000) -> Path:
    """yoochoose-clicks.dat: no header, SessionId,Timestamp,ItemId,Category, sessions contiguous,
    session ids rising with time, ISO timestamps with ms, categories 0 / S / 1-12 / brand ids.

    `scale` x the real file's rows and sessions over the same days and catalogue (10: 330M rows,
    ~14 GB). Written block by block of `chunk` sessions (memory: one block, whatever the scale):
    each block gets its share of the rows and an equal-density slice of the time span, its start
    times sorted inside it, so session ids rise with time across the file."""
    path = dst / "yoochoose-clicks.dat"
    if path.exists():
        return path
    rng = np.random.default_rng(2015)
    n_sessions, n_rows = YOO["sessions"] * scale, YOO["rows"] * scale
    cat = Catalogue(rng, YOO["items"])
    item_ids = np.sort(rng.choice(np.arange(214_500_000, 214_900_000), YOO["items"], replace=False))
    item_cat = np.where(rng.random(YOO["items"]) < 0.6, "0", rng.integers(1, 13, YOO["items"]).astype(str))
    start0 = np.datetime64("2014-04-01T00:00:00", "ms").astype(np.int64)
    span = YOO["days"] * 86_400_000 - 3_600_000
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        for lo in range(0, n_sessions, chunk):
            hi = min(lo + chunk, n_sessions)
            rows = n_rows * hi // n_sessions - n_rows * lo // n_sessions  # this block's share, exact in total
            n = fit_total(rng, _length(rng, hi - lo), rows)
            t0, t1 = span * lo // n_sessions, span * hi // n_sessions
            starts = start0 + t0 + np.sort(rng.integers(0, max(t1 - t0, 1), hi - lo))
            sess, item = draw_sessions(rng, n, YOO["items"], cat)
            first = np.concatenate([[0], np.cumsum(n)[:-1]])
            gap = rng.exponential(60_000, len(sess)).astype(np.int64)
            gap[first] = 0
            t = starts[sess] + np.cumsum(gap) - np.repeat(np.cumsum(gap)[first], n)
            special = rng.random(len(sess))
            category = np.where(special < 0.08, "S", np.where(special < 0.12,
                                rng.integers(2_089_000_000, 2_090_000_000, len(sess)).astype(str), item_cat[item]))
            df = pl.DataFrame({"s": sess + lo + 1, "t": t, "i": item_ids[item], "c": category}).with_columns(
                pl.from_epoch("t", "ms").dt.strftime("%Y-%m-%dT%H:%M:%S%.3fZ"))
            df.write_csv(f, include_header=False)
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------- measuring

def measure(name: str, code: str) -> dict:
    """Run `code` in a fresh Python process under /usr/bin/time: wall seconds, peak RSS (MB), CPU.

    (/usr/bin/time, not os.wait4 here: a child's ru_maxrss on Linux includes the RSS its parent
    had when it forked, and this process may be large after generating the raw file.)"""
    proc = subprocess.run(["/usr/bin/time", "-f", "%e %M %U %S", sys.executable, "-c", code], cwd=ROOT,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"stage {name} failed:\n{proc.stderr}")
    wall, rss_kb, user, system = proc.stderr.strip().splitlines()[-1].split()
    row = {"stage": name, "wall_s": round(float(wall), 2), "peak_rss_mb": round(int(rss_kb) / 1024),
           "cpu_s": round(float(user) + float(system), 2)}
    print(f"  {name:<28} {row['wall_s']:>7.2f} s  {row['peak_rss_mb']:>6} MB  (cpu {row['cpu_s']} s)", flush=True)
    return row


def floor_code(raw: Path, dataset: str) -> str:
    if dataset == "diginetica":
        return (f"import polars as pl; df = pl.read_csv({str(raw)!r}, separator=';', "
                "schema_overrides={'userId': pl.String}); "
                "g = df.group_by('sessionId').agg(pl.col('itemId')); print(g.height)")
    return (f"import polars as pl; df = pl.read_csv({str(raw)!r}, has_header=False, "
            "new_columns=['s','t','i','c'], schema_overrides={'c': pl.String}); "
            "g = df.group_by('s').agg(pl.col('i')); print(g.height)")


def stage_code(stage: str, dataset: str, a: Path, b: Path | None = None) -> str:
    head = "from pathlib import Path; from pipeline.params import Params; p = Params(); "
    if stage == "download":
        return (head + "from pipeline.download import run; "
                f"run({dataset!r}, Path({str(b)!r}), p.download, from_path=Path({str(a)!r}), progress=False)")
    if stage == "read_sessions":  # steps 1-2 alone: CSV parse + group by session
        return ("from pathlib import Path; from pipeline.datasets import get; "
                "from pipeline.protocols.srgnn import read_sessions; "
                f"print(read_sessions(get({dataset!r}), Path({str(a)!r})).height)")
    if stage == "protocol":  # steps 1-9 (+11) and valid, no writing
        return (head + "from pipeline.datasets import get; from pipeline.protocols import build_protocol; "
                f"build_protocol(get({dataset!r}), Path({str(a)!r}), p)")
    return (head + f"from pipeline.{stage} import run; run({dataset!r}, Path({str(a)!r}), Path({str(b)!r}), p)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", choices=["diginetica", "yoochoose_1_64", "yoochoose_1_4", "yoochoose"])
    ap.add_argument("--breakdown", action="store_true", help="also time read_sessions and the protocol alone")
    args = ap.parse_args()
    family = "diginetica" if args.dataset == "diginetica" else "yoochoose"
    work = WORK / family
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    src = make_diginetica(work) if family == "diginetica" else make_yoochoose(work)
    print(f"raw input {src} ({src.stat().st_size / 1e6:.0f} MB), ready in {time.perf_counter() - t0:.0f} s")
    shutil.rmtree(work / args.dataset, ignore_errors=True)  # every stage does its full work (no "already present")
    raw, sess, samp = (work / args.dataset / d for d in ("raw", "sessions", "samples"))
    print(f"load average before: {os.getloadavg()}")
    rows = [measure("download --from", stage_code("download", args.dataset, src, raw)),
            measure("preprocess", stage_code("preprocess", args.dataset, raw, sess)),
            measure("augment", stage_code("augment", args.dataset, sess, samp))]
    member = raw / ("train-item-views.csv" if family == "diginetica" else "yoochoose-clicks.dat")
    floor = measure("floor: read_csv + group_by", floor_code(member, family))
    if args.breakdown:
        rows.append(measure("  of which read_sessions", stage_code("read_sessions", args.dataset, raw)))
        rows.append(measure("  of which protocol", stage_code("protocol", args.dataset, raw)))
    total = {"stage": "total (download+preprocess+augment)",
             "wall_s": round(sum(r["wall_s"] for r in rows[:3]), 2),
             "peak_rss_mb": max(r["peak_rss_mb"] for r in rows[:3]),
             "cpu_s": round(sum(r["cpu_s"] for r in rows[:3]), 2)}
    result = {"dataset": args.dataset, "machine": f"{platform.node()} {os.cpu_count()} cpu, {platform.platform()}",
              "polars": pl.__version__, "load_after": os.getloadavg(), "stages": rows + [total, floor],
              "ratio_wall": round(total["wall_s"] / floor["wall_s"], 2),
              "ratio_rss": round(total["peak_rss_mb"] / floor["peak_rss_mb"], 2),
              "manifest_sessions": json.loads((sess / "manifest.json").read_text())["splits"],
              "manifest_samples": json.loads((samp / "manifest.json").read_text())["splits"],
              "n_items": json.loads((samp / "manifest.json").read_text())["n_items"]}
    (work / f"results-{args.dataset}.json").write_text(json.dumps(result, indent=2) + "\n")
    print("\n| stage | wall s | peak RSS MB | CPU s |\n|---|---:|---:|---:|")
    for r in rows + [total, floor]:
        print(f"| {r['stage']} | {r['wall_s']} | {r['peak_rss_mb']} | {r['cpu_s']} |")
    print(f"\nratio total/floor: wall {result['ratio_wall']}x, peak RSS {result['ratio_rss']}x; "
          f"load average after: {result['load_after']}")
    print(json.dumps({k: result[k] for k in ("manifest_sessions", "manifest_samples", "n_items")}))


if __name__ == "__main__":
    main()
