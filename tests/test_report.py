"""pipeline/report.py: t quantiles, mean/std/95% CI over seeds, Markdown/CSV, `seqpe report`."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import report
from pipeline.errors import DataError, ParamsError
from pipeline.io import write_json

ROOT = Path(__file__).resolve().parents[1]


def write_run(root: Path, model: str, enc: str, seed: int, test: dict, dataset="toyset", protocol="srgnn", tag=None):
    name = report.config_name(model, enc, tag)
    write_json(root / name / f"seed-{seed}" / "run.json",
               {"name": name, "dataset": dataset, "protocol": protocol, "model": model, "tag": tag,
                "encoding": enc, "seed": seed, "best_epoch": seed, "valid": test, "test": test})


@pytest.mark.parametrize("df, expected", [
    (1, math.tan(0.95 * math.pi / 2)),                  # Cauchy: closed form 12.7062...
    (2, math.sqrt(2 * 0.95 ** 2 / (1 - 0.95 ** 2))),    # df=2: t / sqrt(2 + t^2) = 0.95 -> 4.3027...
    (4, 2.7764451051977987),
    (9, 2.2621571627409915),
    (30, 2.0422724563012373),
])
def test_t_quantile_matches_reference_values(df, expected):
    assert report.t_quantile(df) == pytest.approx(expected, abs=1e-9)


def test_t_cdf_limits_and_symmetry():
    assert report.t_two_sided_cdf(0.0, 5) == 0.0
    assert report.t_two_sided_cdf(1e9, 6) == pytest.approx(1.0)
    assert report.t_two_sided_cdf(-2.0, 3) == report.t_two_sided_cdf(2.0, 3)
    assert report.t_quantile(100_000) == pytest.approx(1.959963984540054, abs=1e-4)   # -> normal


def test_summarize_mean_sample_std_and_ci():
    s = report.summarize([0.1, 0.2, 0.3])
    assert s["mean"] == pytest.approx(0.2) and s["std"] == pytest.approx(0.1) and s["n"] == 3
    assert s["ci95"] == pytest.approx(math.sqrt(2 * 0.95 ** 2 / (1 - 0.95 ** 2)) * 0.1 / math.sqrt(3))
    assert report.summarize([0.4]) == {"mean": 0.4, "std": None, "ci95": None, "n": 1}


def test_markdown_and_csv_tables(tmp_path):
    for seed, v in ((1, 0.1), (2, 0.2), (3, 0.3)):
        write_run(tmp_path, "sasrec", "lpe", seed, {"hr@10": v, "ndcg@10": v / 2})
    write_run(tmp_path, "pop", "none", 1, {"hr@10": 0.05, "ndcg@10": 0.02})
    write_run(tmp_path, "sasrec", "lpe", 1, {"hr@10": 0.4, "ndcg@10": 0.3}, tag="anc")   # a tagged variant
    rows = report.run([tmp_path])
    assert [(r["name"], r["seeds"]) for r in rows] == [("pop-none", [1]), ("sasrec-lpe", [1, 2, 3]),
                                                        ("sasrec-lpe-anc", [1])]
    ci = 100 * report.t_quantile(2) * 0.1 / math.sqrt(3)
    md = report.to_markdown(rows).splitlines()
    assert md[0] == "| dataset | protocol | model | encoding | tag | seeds | hr@10 | ndcg@10 |"
    assert md[2] == "| toyset | srgnn | pop | none |  | 1 | 5.00 | 2.00 |"
    assert md[3] == (f"| toyset | srgnn | sasrec | lpe |  | 3 | 20.00 ± {ci:.2f} (sd 10.00) "
                     f"| 10.00 ± {ci / 2:.2f} (sd 5.00) |")
    assert md[4] == "| toyset | srgnn | sasrec | lpe | anc | 1 | 40.00 | 30.00 |"
    csv_lines = report.to_csv(rows).splitlines()
    assert csv_lines[0] == ("dataset,protocol,model,encoding,tag,n_seeds,seeds,hr@10_mean,hr@10_std,hr@10_ci95,"
                            "ndcg@10_mean,ndcg@10_std,ndcg@10_ci95")
    assert csv_lines[1] == "toyset,srgnn,pop,none,,1,1,0.05,,,0.02,,"
    cells = csv_lines[2].split(",")
    assert cells[:7] == ["toyset", "srgnn", "sasrec", "lpe", "", "3", "1 2 3"]
    assert [float(c) for c in cells[7:]] == pytest.approx([0.2, 0.1, ci / 100, 0.1, 0.05, ci / 200])
    assert csv_lines[3].startswith("toyset,srgnn,sasrec,lpe,anc,1,1,0.4,")
    out = report.write_report(rows, tmp_path / "r.csv")
    assert out.read_text() == report.to_csv(rows)


def test_errors(tmp_path):
    with pytest.raises(ParamsError, match="must end in .md or .csv"):
        report.run([tmp_path], tmp_path / "r.txt")
    with pytest.raises(DataError, match="no run.json under"):
        report.run([tmp_path])
    with pytest.raises(DataError, match="does not exist"):
        report.run([tmp_path / "nope"])


def test_cli_report_writes_markdown(tmp_path):
    runs = tmp_path / "runs"
    for seed, v in ((1, 0.25), (2, 0.35)):
        write_run(runs, "sasrec", "rope", seed, {"hr@10": v})
    out = tmp_path / "out" / "report.md"
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "report", str(runs), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, COLUMNS="200"))
    assert proc.returncode == 0, proc.stderr
    assert "sasrec" in proc.stdout and "rope" in proc.stdout and "30.00" in proc.stdout
    assert out.read_text().splitlines()[2].startswith("| toyset | srgnn | sasrec | rope |  | 2 | 30.00 ± ")
