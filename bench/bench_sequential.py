"""Preprocess + augment at full scale for the leave-one-out and CTR datasets (not a test).

    .venv/bin/python bench/bench_sequential.py                      # ML-1m, full scale
    .venv/bin/python bench/bench_sequential.py --only books,kuaivideo --scale 0.1

Generates raw files in each real raw format into bench/work/ (gitignored), cached by name:

  ml_1m        ratings.dat, `UserID::MovieID::Rating::Timestamp`, 1,000,209 rows, 6,040 users
               (>= 20 ratings each, as in ML-1m), 3,706 movies with skewed popularity
  books        reviews_Books_5.json.gz: 8,898,041 JSON lines with every field of the real dump
               (reviewerID, asin, reviewerName, helpful, reviewText, overall, summary,
               unixReviewTime, reviewTime), 603,668 users, 367,982 items; review texts are
               ~300 characters (real ones are often longer: the real file is bigger)
  kuaivideo    train.csv + test.csv with the BARS KuaiVideo_x1 columns, 10,931,092 + 2,730,291
               rows, 10,000 users, 3,239,534 items; pos_items/neg_items grow with the user's
               past up to 100 ids each, as in the real files

`--scale` multiplies rows, users and items. Each stage runs in a fresh subprocess that reports
its own wall time and peak RSS (VmHWM from /proc/self/status). Prints a Markdown table
to paste into bench/results/sequential.md.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work"
SEED = 20240601

FULL = {
    "ml_1m": {"rows": 1_000_209, "users": 6_040, "items": 3_706},
    "books": {"rows": 8_898_041, "users": 603_668, "items": 367_982},
    "kuaivideo": {"rows": 13_661_383, "train": 10_931_092, "users": 10_000, "items": 3_239_534},
}
WORDS = np.array("the a book story read great good author plot characters love series novel "
                 "first recommend well written enjoyed end life time little would could".split())

# peak RSS = VmHWM of the stage process itself (ru_maxrss would carry the parent's peak across exec)
STAGE = """
import json, sys, time
from pathlib import Path
t = time.perf_counter()
from pipeline.params import load_params
from pipeline import {stage} as stage
stage.run(sys.argv[1], sys.argv[2], sys.argv[3], load_params(sys.argv[4]))
wall = time.perf_counter() - t
hwm = [l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmHWM:")][0]
print(json.dumps({{"wall_s": wall, "peak_rss_mb": int(hwm.split()[1]) / 1024}}))
"""


def user_counts(rng, users: int, rows: int, minimum: int, cap: int) -> np.ndarray:
    """Per-user interaction counts in [minimum, cap], skewed (lognormal), summing exactly to `rows`."""
    w = rng.lognormal(0.0, 1.2, users)
    counts = np.clip(minimum + np.floor(w / w.sum() * (rows - minimum * users)), minimum, cap).astype(np.int64)
    order = np.argsort(-w)
    while counts.sum() != rows:  # hand out (or take back) the rounding remainder, heaviest users first
        room = order[counts[order] < cap] if counts.sum() < rows else order[counts[order] > minimum]
        step = int(np.sign(rows - counts.sum()))
        take = room[: abs(rows - int(counts.sum()))]
        counts[take] += step
    return counts


def popular_items(rng, items: int, n: int, a: float = 1.1) -> np.ndarray:
    """n item indices in [0, items) with a Zipf-like popularity (every item reachable)."""
    p = 1.0 / np.arange(1, items + 1) ** a
    return rng.permutation(items)[rng.choice(items, size=n, p=p / p.sum())]


def gen_ml_1m(dst: Path, scale: float) -> None:
    rng = np.random.default_rng(SEED)
    f = FULL["ml_1m"]
    users, items, rows = (max(10, int(f[k] * scale)) for k in ("users", "items", "rows"))
    counts = user_counts(rng, users, rows, 20, 2_314)  # ML-1m: 20 to 2,314 ratings per user
    user = np.repeat(np.arange(1, users + 1), counts)
    ts = 956_703_932 + np.sort(rng.integers(0, 90_000_000, rows))
    df = pl.DataFrame({"u": user, "i": popular_items(rng, items, rows) + 1, "r": rng.integers(1, 6, rows), "t": ts})
    df = df.select(pl.concat_str([pl.col(c).cast(pl.String) for c in "uirt"], separator="::").alias("line"))
    (dst / "ml-1m").mkdir(parents=True, exist_ok=True)
    df.write_csv(dst / "ml-1m" / "ratings.dat", include_header=False, quote_style="never")


def gen_books(dst: Path, scale: float, chunk: int = 1_000_000) -> None:
    rng = np.random.default_rng(SEED)
    f = FULL["books"]
    users, items, rows = (max(10, int(f[k] * scale)) for k in ("users", "items", "rows"))
    counts = user_counts(rng, users, rows, 5, 5_000)
    user = np.repeat(np.arange(users), counts)
    words = WORDS[rng.integers(0, len(WORDS), (20_000, 60))]  # a pool of texts, drawn per review
    texts = pl.Series([" ".join(r[:50]) for r in words])
    summaries = pl.Series([" ".join(r[50:]) for r in words])
    dst.mkdir(parents=True, exist_ok=True)
    with gzip.open(dst / "reviews_Books_5.json.gz", "wb", compresslevel=1) as out:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            pick = pl.Series(rng.integers(0, len(texts), n))
            df = pl.DataFrame({
                "reviewerID": pl.Series(user[start:start + n]).cast(pl.String).str.zfill(13),
                "asin": pl.Series(popular_items(rng, items, n)).cast(pl.String).str.zfill(10),
                "reviewerName": ["Some Reader"] * n,
                "helpful": [[2, 3]] * n,
                "reviewText": texts.gather(pick),
                "overall": rng.integers(1, 6, n).astype(np.float64),
                "summary": summaries.gather(pick),
                "unixReviewTime": 1_000_000_000 + rng.integers(0, 400_000_000, n),
            }).with_columns(("A" + pl.col("reviewerID")).alias("reviewerID"),
                            pl.from_epoch(pl.col("unixReviewTime")).dt.strftime("%m %d, %Y").alias("reviewTime"))
            out.write(df.write_ndjson().encode("utf-8"))


def gen_kuaivideo(dst: Path, scale: float, chunk: int = 500_000) -> None:
    rng = np.random.default_rng(SEED)
    f = FULL["kuaivideo"]
    users, items, rows = (max(10, int(f[k] * scale)) for k in ("users", "items", "rows"))
    n_train = int(rows * f["train"] / f["rows"])
    counts = user_counts(rng, users, rows, 20, 20 * rows // users)
    # rows in timestamp order; each user has fixed first-100 pos / neg sequences and a row's lists
    # are prefixes growing with the user's earlier rows, as reczoo's convert script writes them
    order = pl.DataFrame({"user_id": rng.permutation(np.repeat(np.arange(users, dtype=np.int32), counts))})
    order = order.with_columns(pl.int_range(pl.len(), dtype=pl.Int32).over("user_id").alias("earlier"))
    seqs = pl.DataFrame({"user_id": np.arange(users, dtype=np.int32),
                         "pos": rng.integers(0, items, (users, 100), dtype=np.int32),
                         "neg": rng.integers(0, items, (users, 100), dtype=np.int32)})
    seqs = seqs.with_columns(pl.col("pos").arr.to_list(), pl.col("neg").arr.to_list())
    dst.mkdir(parents=True, exist_ok=True)
    files = {"train.csv": open(dst / "train.csv", "wb"), "test.csv": open(dst / "test.csv", "wb")}
    try:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            part = order.slice(start, n).with_columns(
                pl.Series("timestamp", np.arange(start, start + n) * 7 + 1_000_000),
                pl.Series("item_id", popular_items(rng, items, n, 0.8)),
                pl.Series("is_click", (rng.random(n) < 0.25).astype(np.int64)),
                pl.lit(0).alias("is_like"), pl.lit(0).alias("is_follow"),
                pl.min_horizontal(100, (pl.col("earlier") * 0.25).cast(pl.Int64)).alias("pos_len"),
                pl.min_horizontal(100, (pl.col("earlier") * 0.75).cast(pl.Int64)).alias("neg_len"))
            part = part.join(seqs, on="user_id", how="left", maintain_order="left").select(
                "timestamp", "user_id", "item_id", "is_click", "is_like", "is_follow",
                pl.col("pos").list.head(pl.col("pos_len")).cast(pl.List(pl.String)).list.join("^").alias("pos_items"),
                pl.col("neg").list.head(pl.col("neg_len")).cast(pl.List(pl.String)).list.join("^").alias("neg_items"))
            for name, lo, hi in (("train.csv", 0, n_train), ("test.csv", n_train, rows)):
                a, b = max(lo, start), min(hi, start + n)
                if a < b:
                    out = files[name]
                    part.slice(a - start, b - a).write_csv(out, include_header=out.tell() == 0)
    finally:
        for out in files.values():
            out.close()


GENERATORS = {"ml_1m": gen_ml_1m, "books": gen_books, "kuaivideo": gen_kuaivideo}


def run_stage(stage: str, dataset: str, src: Path, dst: Path, params: Path) -> dict:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", STAGE.format(stage=stage), dataset, str(src), str(dst), str(params)],
                          cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{stage} {dataset} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_s"] = time.perf_counter() - t
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="ml_1m", help="comma-separated: ml_1m, books, kuaivideo")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    args = ap.parse_args()
    rows = []
    for name in args.only.split(","):
        base = WORK / f"{name}-x{args.scale:g}"
        raw = base / "raw"
        if not (raw / "source.json").is_file():
            t = time.perf_counter()
            GENERATORS[name](raw, args.scale)
            from pipeline.datasets import get          # the dataset's own source name: preprocess refuses another's
            (raw / "source.json").write_text(json.dumps({"source": get(name).source.name, "origin": "generated",
                                                         "generator": f"bench {name} x{args.scale:g}"}))
            print(f"generated {name} x{args.scale:g} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
        size = sum(p.stat().st_size for p in raw.rglob("*") if p.is_file())
        pre = run_stage("preprocess", name, raw, base / "sessions", args.params)
        aug = run_stage("augment", name, base / "sessions", base / "samples", args.params)
        m = json.loads((base / "samples" / "manifest.json").read_text())
        samples = sum(v.get("samples", v.get("rows", 0)) for v in m["splits"].values())
        rows.append(f"| {name} | x{args.scale:g} | {size / 2**20:,.0f} MiB | {samples:,} | "
                    f"{pre['wall_s']:.2f} s / {pre['peak_rss_mb']:,.0f} MB | "
                    f"{aug['wall_s']:.2f} s / {aug['peak_rss_mb']:,.0f} MB | "
                    f"{pre['wall_s'] + aug['wall_s']:.2f} s | {max(pre['peak_rss_mb'], aug['peak_rss_mb']):,.0f} MB |")
    load = os.getloadavg()
    print(f"\nmachine: {platform.platform()}, {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
          f"polars {pl.__version__}\n")
    print("| dataset | scale | raw size | samples | preprocess (wall / peak RSS) | augment (wall / peak RSS) "
          "| total wall | peak RSS |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
