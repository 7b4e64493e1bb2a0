"""Aggregate runs over seeds: mean, sample std and 95% confidence interval per metric.

A configuration is (dataset, protocol, model, encoding); its seeds are the runs under
`<runs>/<model>-<encoding>/seed-<n>/run.json`. For n seeds with values x_1..x_n:

    mean = sum(x) / n
    std  = sqrt(sum((x - mean)^2) / (n - 1))            (sample std, ddof = 1)
    ci95 = t_{0.975, n-1} * std / sqrt(n)               (half-width of the 95% CI, Student t)

std and ci95 are None for a single seed (the PE study 004 reports all three because single
runs mislead). The t quantile is computed here without scipy: the two-sided t CDF has a
closed form for integer degrees of freedom (Abramowitz & Stegun 26.7.3-4), inverted by
bisection.

Outputs: a rich table (CLI), Markdown (values x100, as the papers print them) and CSV
(raw values in [0, 1]). Torch-free.
"""
from __future__ import annotations

import csv
import io
import math
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Optional

from .errors import DataError, ParamsError
from .io import read_json, write_bytes

_FAMILY = {"hr": 0, "recall": 0, "mrr": 1, "ndcg": 2, "auc": 3, "gauc": 4, "logloss": 5}


# --------------------------------------------------------------------------- statistics

def t_two_sided_cdf(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer df >= 1 (A&S 26.7.3 odd df, 26.7.4 even df)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 1:
        total, term = 0.0, math.cos(theta)
        for j in range(1, df - 1, 2):           # cos^1 .. cos^(df-2)
            total += term
            term *= (j + 1) / (j + 2) * c2
        return (2 / math.pi) * (theta + s * total)
    total, term = 0.0, 1.0
    for j in range(0, df - 1, 2):               # cos^0 .. cos^(df-2)
        total += term
        term *= (j + 1) / (j + 2) * c2
    return s * total


@lru_cache(maxsize=None)
def t_quantile(df: int, level: float = 0.95) -> float:
    """t such that P(|T| <= t) = level (e.g. 12.706 for df=1, 2.262 for df=9 at 95%)."""
    lo, hi = 0.0, 1.0
    while t_two_sided_cdf(hi, df) < level:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_two_sided_cdf(mid, df) < level:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2


def summarize(values: list[float]) -> dict:
    """{"mean", "std", "ci95", "n"} of one metric over seeds (std, ci95 None when n < 2)."""
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return {"mean": mean, "std": None, "ci95": None, "n": n}
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    return {"mean": mean, "std": std, "ci95": t_quantile(n - 1) * std / math.sqrt(n), "n": n}


# --------------------------------------------------------------------------- runs

def config_name(model: str, encoding: str, tag: Optional[str] = None) -> str:
    """One configuration's run folder and report row: <model>-<encoding>[-<tag>]."""
    return f"{model}-{encoding}" + (f"-{tag}" if tag else "")


def metric_order(key: str) -> tuple:
    name, _, k = key.partition("@")
    return (_FAMILY.get(name, 9), name, int(k) if k.isdigit() else 0)


def find_runs(roots: Iterable[str | Path]) -> list[dict]:
    """Every run.json under `roots` (a runs folder of one dataset, or a parent of several)."""
    seen, records = set(), []
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            raise DataError(f"runs folder {root} does not exist", "run `seqpe train DATASET` first or fix the path")
        for path in sorted(root.rglob("run.json")):
            key = path.resolve()
            if key in seen or any(part.startswith(".") for part in path.relative_to(root).parts):
                continue   # temporary folders of a run being written
            seen.add(key)
            rec = read_json(path)
            if not isinstance(rec.get("test"), dict):
                raise DataError(f"{path} has no test metrics", "re-run `seqpe train` for that run")
            rec["_path"] = str(path)
            records.append(rec)
    return records


def aggregate(records: list[dict]) -> list[dict]:
    """Group runs by (dataset, protocol, model, encoding, tag); summarise every test metric over seeds."""
    groups: dict[tuple, list[dict]] = {}
    for rec in records:
        key = (str(rec.get("dataset")), str(rec.get("protocol")), rec["model"], rec["encoding"], rec.get("tag") or "")
        groups.setdefault(key, []).append(rec)
    rows = []
    for (dataset, protocol, model, encoding, tag), recs in sorted(groups.items()):
        recs = sorted(recs, key=lambda r: r["seed"])
        keys = sorted({k for r in recs for k in r["test"]}, key=metric_order)
        rows.append({
            "dataset": dataset, "protocol": protocol, "model": model, "encoding": encoding, "tag": tag or None,
            "name": config_name(model, encoding, tag or None), "seeds": [r["seed"] for r in recs],
            "best_epochs": [r.get("best_epoch") for r in recs],
            "metrics": {k: summarize([r["test"][k] for r in recs if k in r["test"]]) for k in keys},
        })
    return rows


def metric_keys(rows: list[dict]) -> list[str]:
    return sorted({k for row in rows for k in row["metrics"]}, key=metric_order)


# --------------------------------------------------------------------------- rendering

def _cell(stat: Optional[dict], scale: float = 100.0) -> str:
    if stat is None:
        return ""
    text = f"{scale * stat['mean']:.2f}"
    if stat["ci95"] is not None:
        text += f" ± {scale * stat['ci95']:.2f} (sd {scale * stat['std']:.2f})"
    return text


def _scale(key: str) -> float:
    return 1.0 if key.startswith("logloss") else 100.0


def to_markdown(rows: list[dict]) -> str:
    keys = metric_keys(rows)
    head = ["dataset", "protocol", "model", "encoding", "tag", "seeds", *keys]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for row in rows:
        cells = [row["dataset"], row["protocol"], row["model"], row["encoding"], row.get("tag") or "",
                 str(len(row["seeds"]))]
        cells += [_cell(row["metrics"].get(k), _scale(k)) for k in keys]
        lines.append("| " + " | ".join(cells) + " |")
    note = ("\nRanking metrics x100 (full ranking, PROTOCOLS.md §5). Cells: mean ± half-width of the 95% "
            "confidence interval (Student t over seeds) (sd = sample std); one seed shows the mean only.\n")
    return "\n".join(lines) + "\n" + note


def to_csv(rows: list[dict]) -> str:
    keys = metric_keys(rows)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["dataset", "protocol", "model", "encoding", "tag", "n_seeds", "seeds",
                *[f"{k}_{s}" for k in keys for s in ("mean", "std", "ci95")]])
    for row in rows:
        out = [row["dataset"], row["protocol"], row["model"], row["encoding"], row.get("tag") or "", len(row["seeds"]),
               " ".join(str(s) for s in row["seeds"])]
        for k in keys:
            stat = row["metrics"].get(k) or {"mean": None, "std": None, "ci95": None}
            out += ["" if stat[s] is None else repr(stat[s]) for s in ("mean", "std", "ci95")]
        w.writerow(out)
    return buf.getvalue()


def rich_table(rows: list[dict], title: str = "test metrics over seeds (×100, mean ± 95% CI)"):
    from rich.table import Table
    keys = metric_keys(rows)
    t = Table(title=title)
    for col in ("dataset", "protocol", "model", "encoding", "tag", "seeds", *keys):
        t.add_column(col, justify="right" if col in keys or col == "seeds" else "left", no_wrap=col in keys)
    for row in rows:   # mean ± CI on the first line, the sample std under it
        t.add_row(row["dataset"], row["protocol"], row["model"], row["encoding"], row.get("tag") or "",
                  str(len(row["seeds"])),
                  *[_cell(row["metrics"].get(k), _scale(k)).replace(" (sd ", "\nsd ").rstrip(")") for k in keys])
    return t


def write_report(rows: list[dict], out: str | Path) -> Path:
    out = Path(out)
    if out.suffix.lower() == ".md":
        text = to_markdown(rows)
    elif out.suffix.lower() == ".csv":
        text = to_csv(rows)
    else:
        raise ParamsError(f"report file '{out}' must end in .md or .csv", "pass --out report.md or --out report.csv")
    write_bytes(out, text.encode("utf-8"))
    return out


def run(roots: list[str | Path], out: Optional[str | Path] = None) -> list[dict]:
    """Aggregate every run under `roots`; write `out` (.md or .csv) when given; return the rows."""
    if out is not None and Path(out).suffix.lower() not in (".md", ".csv"):
        write_report([], out)   # raises the suffix error before any work
    records = find_runs(roots)
    if not records:
        raise DataError(f"no run.json under {', '.join(str(r) for r in roots)}", "run `seqpe train DATASET` first")
    rows = aggregate(records)
    if out is not None:
        write_report(rows, out)
    return rows
