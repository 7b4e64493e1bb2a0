"""CTR data at full shape: download --from + preprocess + augment (+ loading train) (not a test).

    .venv/bin/python bench/bench_ctr_data.py --only amazon_electronics           # full size, ~2 min
    .venv/bin/python bench/bench_ctr_data.py --only kuaivideo --scale 0.1
    .venv/bin/python bench/bench_ctr_data.py --only kuaivideo --no-load --drop-generated   # full, ~40 min

Generates raw files in the real BARS formats into bench/work/ (gitignored), cached by name:

  amazon_electronics  AmazonElectronics_x1.zip (train.csv + test.csv) from
                      `pipeline.datasets.ctr_sample.amazon_frames` (DIN's construction, positional
                      signal) at DIN's size: 192,403 users, 63,001 items, 801 categories, 1,689,188
                      behaviours (5 to 400 per user) -> 2,608,764 train + 384,806 test rows
  kuaivideo           train.csv + test.csv from bench/bench_sequential.py's generator: 10,931,092 +
                      2,730,291 rows, 10,000 users, 3,239,534 items, pos/neg lists up to 100 ids;
                      handed to download --from as extracted files (a zip of 18 GB is not worth
                      deflating for a benchmark)

`--scale` multiplies users, items and behaviours (KuaiVideo: rows, users, items). Each stage runs in
a fresh subprocess that reports its own wall time, CPU time (user + sys, all threads) and peak RSS
(VmHWM). download --from checks the
published md5 of train.csv / test.csv: the stage process swaps the registry's md5 for those of the
generated files, so the check runs (and passes) as it would on the real files. `load` is
`pipeline.ctr_batches.load_ctr(samples, "train", max_len=100)`, what a CTR trainer reads first.
Prints a Markdown table to paste into bench/results/ctr.md.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
WORK = ROOT / "bench" / "work"

AMAZON = {"users": 192_403, "items": 63_001, "cates": 801, "behaviours": 1_689_188, "max_length": 400}

STAGE = """
import dataclasses, json, sys, time
from pathlib import Path
t = time.perf_counter()
a = json.loads(sys.argv[1])
from pipeline.params import load_params
p = load_params(a["params"])
if a["stage"] == "download":
    from pipeline import download
    from pipeline.datasets import DATASETS, get
    spec = get(a["dataset"])
    DATASETS[spec.name] = dataclasses.replace(spec, source=dataclasses.replace(spec.source, file_md5=a["md5"]))
    download.run(a["dataset"], Path(a["dst"]), p.download, from_path=Path(a["src"]), progress=False)
elif a["stage"] == "load":
    from pipeline.ctr_batches import load_ctr
    load_ctr(a["src"], "train", 100)
else:
    import importlib
    importlib.import_module("pipeline." + a["stage"]).run(a["dataset"], a["src"], a["dst"], p)
wall = time.perf_counter() - t
import resource
ru = resource.getrusage(resource.RUSAGE_SELF)
hwm = [l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmHWM:")][0]
print(json.dumps({"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_mb": int(hwm.split()[1]) / 1024}))
"""


def md5(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def gen_amazon(dst: Path, scale: float) -> Path:
    """AmazonElectronics_x1.zip at DIN's shape (times `scale`) in dst; returns the zip."""
    from pipeline.datasets.ctr_sample import _csv, _zip, amazon_frames
    from pipeline.params import SampleCTRParams
    users, items, cates, total = (max(4, int(AMAZON[k] * scale)) for k in ("users", "items", "cates", "behaviours"))
    p = SampleCTRParams(users=users, items=items, cates=cates, min_length=5, max_length=AMAZON["max_length"],
                        seed=20180601)
    train, test = amazon_frames(p, total=max(total, 5 * users))
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "AmazonElectronics_x1.zip").write_bytes(_zip({"train.csv": _csv(train), "test.csv": _csv(test)}))
    return dst / "AmazonElectronics_x1.zip"


def gen_kuaivideo(dst: Path, scale: float) -> Path:
    """train.csv + test.csv (KuaiVideo_x1 columns) in dst, by bench_sequential's generator; returns dst."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_sequential import gen_kuaivideo as generate
    generate(dst, scale)
    return dst


GENERATORS = {"amazon_electronics": gen_amazon, "kuaivideo": gen_kuaivideo}


def member_md5(src: Path) -> dict:
    if src.is_dir():
        return {name: md5(src / name) for name in ("train.csv", "test.csv")}
    with zipfile.ZipFile(src) as z:
        out = {}
        for name in ("train.csv", "test.csv"):
            h = hashlib.md5()
            with z.open(name) as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            out[name] = h.hexdigest()
        return out


def run_stage(args: dict) -> dict:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", STAGE, json.dumps(args)], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{args['stage']} {args['dataset']} failed (exit {proc.returncode}):\n"
                         f"{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_s"] = time.perf_counter() - t
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="amazon_electronics", help="comma-separated: amazon_electronics, kuaivideo")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--no-load", action="store_true", help="skip timing load_ctr on the train split")
    ap.add_argument("--drop-generated", action="store_true",
                    help="delete the generated files once download has copied them (full KuaiVideo: 18 GB less)")
    args = ap.parse_args()
    lines, notes = [], []
    for name in args.only.split(","):
        base = WORK / f"ctr-{name}-x{args.scale:g}"
        gen = base / "gen"
        done = gen / "done.json"
        if not done.is_file() or not (any(gen.glob("*.csv")) or any(gen.glob("*.zip"))):
            t = time.perf_counter()
            src = GENERATORS[name](gen, args.scale)
            done.write_text(json.dumps({"src": str(src), "md5": member_md5(src)}))
            print(f"generated {name} x{args.scale:g} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
        info = json.loads(done.read_text())
        size = sum(p.stat().st_size for p in gen.rglob("*.csv")) or sum(
            i.file_size for i in zipfile.ZipFile(info["src"]).infolist())               # CSV bytes either way
        common = {"dataset": name, "params": str(args.params)}
        stages = {"download": run_stage({**common, "stage": "download", "src": info["src"], "dst": str(base / "raw"),
                                         "md5": info["md5"]})}
        if args.drop_generated:
            for f in gen.rglob("*.csv"):
                f.unlink()
        stages["preprocess"] = run_stage({**common, "stage": "preprocess", "src": str(base / "raw"),
                                          "dst": str(base / "sessions")})
        stages["augment"] = run_stage({**common, "stage": "augment", "src": str(base / "sessions"),
                                       "dst": str(base / "samples")})
        if not args.no_load:
            stages["load"] = run_stage({**common, "stage": "load", "src": str(base / "samples")})
        m = json.loads((base / "samples" / "manifest.json").read_text())
        rows = " / ".join(f"{m['splits'][s]['rows']:,}" for s in ("train", "valid", "test"))
        cells = " | ".join(f"{st['wall_s']:.1f} s ({st['cpu_s']:.1f} s CPU) / {st['peak_rss_mb']:,.0f} MB"
                           for st in stages.values())
        lines.append(f"| {name} | x{args.scale:g} | {size / 2**20:,.0f} MiB | {rows} | {cells}"
                     f"{' | -' if args.no_load else ''} | {sum(st['wall_s'] for st in stages.values()):.1f} s | "
                     f"{max(st['peak_rss_mb'] for st in stages.values()):,.0f} MB |")
        vocab = m["ctr"]["vocab"]
        notes.append(f"{name} x{args.scale:g}: " + "; ".join(
            f"{t} {v['rows']:,} rows (min count {v['min_count']}, train OOV tokens {v['oov']['train']['oov_tokens']:,} "
            f"of {v['oov']['train']['tokens']:,}, test {v['oov']['test']['oov_tokens']:,} "
            f"of {v['oov']['test']['tokens']:,})"
            for t, v in vocab.items()))
    load = os.getloadavg()
    import polars as pl
    print(f"\nmachine: {platform.platform()}, {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}, polars {pl.__version__}\n")
    print("Stage cells: wall (CPU user + sys) / peak RSS.\n")
    print("| dataset | scale | raw CSV | rows train / valid / test | download --from | preprocess | augment | "
          "load train (max_len 100) | total wall | peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main()
