"""The evaluate stage: the runs' test metrics -> reports with mean, std and 95% CI over seeds.

Every run was scored once on test, with its best-on-valid weights, by the train stage
(run.json). This stage only aggregates, so it is cheap and deterministic:

    <reports>/metrics.json   DVC metrics, flat: {"<model>-<encoding>[-<tag>]": {"hr@10": mean, ..., "seeds": n}}
    <reports>/summary.json   per configuration: seeds, mean/std/ci95 of every metric; the runs table
    <reports>/report.md      the Markdown table (x100) that `seqpe report` also writes
    <reports>/report.csv     the same numbers, raw

Each file is written atomically; nothing else in <reports> is touched (plots may live there).
"""
from __future__ import annotations

from pathlib import Path

from . import report
from .errors import DataError
from .io import write_bytes, write_json
from .params import Params


def run(dataset: str, runs_dir: Path, reports_dir: Path, params: Params) -> dict:
    runs_dir, reports_dir = Path(runs_dir), Path(reports_dir)
    if not runs_dir.is_dir():
        raise DataError(f"runs folder {runs_dir} does not exist", f"run `seqpe train {dataset}` first")
    records = [r for r in report.find_runs([runs_dir]) if r.get("dataset") in (dataset, None)]
    if not records:
        raise DataError(f"no runs of dataset '{dataset}' under {runs_dir}", f"run `seqpe train {dataset}` first")
    ks = {str(k) for k in params.evaluate.ks}
    for r in records:   # keep the cut-offs asked for (metrics without a cut-off, e.g. auc, stay)
        r["test"] = {k: v for k, v in r["test"].items() if "@" not in k or k.split("@")[1] in ks}
    rows = report.aggregate(records)
    names = [row["name"] for row in rows]
    if len(set(names)) != len(names):
        raise DataError(f"{runs_dir} mixes protocols for one configuration",
                        "keep one dataset's runs per runs folder")
    metrics = {row["name"]: {**{k: s["mean"] for k, s in row["metrics"].items()}, "seeds": len(row["seeds"])}
               for row in rows}
    runs = [{"name": f"{r['name']}/seed-{r['seed']}", "config": r["name"], "seed": r["seed"],
             "best_epoch": r.get("best_epoch"), "valid": r.get("valid", {}), "test": r["test"]}
            for r in sorted(records, key=lambda r: (r["name"], r["seed"]))]
    summary = {"dataset": dataset, "configs": rows, "runs": runs}
    reports_dir.mkdir(parents=True, exist_ok=True)
    write_json(reports_dir / "metrics.json", metrics)
    write_json(reports_dir / "summary.json", summary)
    write_bytes(reports_dir / "report.md", report.to_markdown(rows).encode("utf-8"))
    write_bytes(reports_dir / "report.csv", report.to_csv(rows).encode("utf-8"))
    return {**summary, "metrics": metrics}
