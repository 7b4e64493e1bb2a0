"""pipeline/report.py: t quantiles, mean/std/95% CI over seeds, significance vs a baseline,
Markdown/CSV, `seqpe report`."""
from __future__ import annotations

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
from scipy import stats

from pipeline import report, significance
from pipeline.errors import DataError, ParamsError
from pipeline.io import write_json, write_split

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


def test_t_quantile_tends_to_the_normal_quantile():
    assert report.t_quantile(100_000) == pytest.approx(stats.norm.ppf(0.975), abs=1e-4)
    assert report.t_quantile(4, 0.99) == pytest.approx(4.604094871415897, abs=1e-9)


def test_summarize_mean_sample_std_and_ci():
    s = report.summarize([0.1, 0.2, 0.3])
    assert s["mean"] == pytest.approx(0.2) and s["std"] == pytest.approx(0.1) and s["n"] == 3
    assert s["ci95"] == pytest.approx(math.sqrt(2 * 0.95 ** 2 / (1 - 0.95 ** 2)) * 0.1 / math.sqrt(3))
    assert report.summarize([0.4]) == {"mean": 0.4, "std": None, "ci95": None, "n": 1}
    assert math.fsum([0.2] * 3) / 3 != 0.2                             # the float noise a fitted baseline's seeds had
    assert report.summarize([0.2] * 3) == {"mean": 0.2, "std": 0.0, "ci95": 0.0, "n": 3}     # (walk 38c #1)


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
    assert csv_lines[0].startswith("dataset,protocol,model,encoding,tag,n_seeds,seeds,unfinished_seeds,hr@10_mean,"
                                   "hr@10_std,hr@10_ci95,ndcg@10_mean,ndcg@10_std,ndcg@10_ci95,baseline,common_seeds,")
    assert csv_lines[1].startswith("toyset,srgnn,pop,none,,1,1,,0.05,,,0.02,,,")   # the baseline: no test
    cells = csv_lines[2].split(",")
    assert cells[:8] == ["toyset", "srgnn", "sasrec", "lpe", "", "3", "1 2 3", ""]
    assert [float(c) for c in cells[8:14]] == pytest.approx([0.2, 0.1, ci / 100, 0.1, 0.05, ci / 200])
    assert csv_lines[3].startswith("toyset,srgnn,sasrec,lpe,anc,1,1,,0.4,")
    out = report.write_report(rows, tmp_path / "reports" / "r.csv")     # (not inside the runs folder, walk 43c #2)
    assert out.read_text() == report.to_csv(rows)


def test_errors(tmp_path):
    with pytest.raises(ParamsError, match="must end in .md or .csv"):
        report.run([tmp_path], tmp_path / "r.txt")
    with pytest.raises(DataError, match="no run.json under"):
        report.run([tmp_path])
    with pytest.raises(DataError, match="does not exist"):
        report.run([tmp_path / "nope"])
    samples = tmp_path / "samples"                     # a report file in a samples folder, checked before any work
    samples.mkdir()
    (samples / "manifest.json").write_text('{"dataset": "toyset", "kind": "samples"}')
    with pytest.raises(DataError, match="r.md is inside .*samples, which holds toyset's samples"):
        report.run([tmp_path / "nope"], samples / "r.md")


def test_seeds_stopped_at_the_time_limit_are_not_pooled_with_finished_ones(tmp_path):
    """A seed cut by train.time_limit after 1 of 4 epochs was averaged with finished seeds, unmarked."""
    from pipeline.io import read_json
    for seed in (1, 2, 3):
        write_run(tmp_path, "sasrec", "none", seed, {"hr@10": 0.3 + seed / 100})
    path = tmp_path / "sasrec-none" / "seed-1" / "run.json"
    write_json(path, read_json(path) | {"stopped": "time_limit", "epochs_run": 1})
    with pytest.raises(DataError, match=re.escape("toyset sasrec-none: seed 1 (after 1 epoch) stopped at "
                                                  "train.time_limit, unfinished, while seed 2, 3 trained to the end")):
        report.run([tmp_path])
    [row] = report.run([tmp_path / "sasrec-none" / "seed-1"], tmp_path / "r" / "one.md")   # every seed cut: marked
    assert row["unfinished"] == [1] and report.to_json([row])[0]["unfinished"] == [1]
    assert "Unfinished: every seed of toyset sasrec-none stopped at train.time_limit" in (tmp_path / "r" / "one.md").read_text()
    assert "| toyset | srgnn | sasrec | none |  | 1 (unfinished) |" in (tmp_path / "r" / "one.md").read_text()  # the row too
    assert report.to_csv([row]).splitlines()[1].startswith("toyset,srgnn,sasrec,none,,1,1,1,")   # unfinished_seeds
    assert report.run([tmp_path / "sasrec-none" / "seed-2"])[0]["unfinished"] == []


def test_a_dataset_without_the_named_baseline_is_said_to_be_uncompared(tmp_path):
    for seed in (1, 2, 3):
        write_run(tmp_path / "a", "din", "none", seed, {"auc": 0.6}, dataset="kuai", protocol="ctr")
        write_run(tmp_path / "a", "din", "cape", seed, {"auc": 0.7}, dataset="kuai", protocol="ctr")
        write_run(tmp_path / "b", "pop", "none", seed, {"hr@10": 0.1})
    rows = report.run([tmp_path], tmp_path / "r.md", baseline="din-none")
    assert [r["no_baseline"] for r in rows] == [None, None, "din-none"]
    assert "Not compared (no runs of the baseline there): toyset (srgnn) has no din-none." in (tmp_path / "r.md").read_text()
    with pytest.raises(DataError, match="r.md is a file, not a runs folder"):
        report.run([tmp_path / "r.md"])


@pytest.mark.parametrize("record, fragment", [
    ([], "is not a run record of `seqpe train` (no dataset, model, encoding, seed)"),
    ({"test": {"accuracy": 0.9}}, "(no dataset, model, encoding, seed)"),
    ({"dataset": "d", "model": "m", "encoding": "e", "seed": 1, "test": {"hr@10": "0.5"}}, "test.hr@10 = '0.5', not"),
    ({"dataset": "d", "model": "m", "encoding": "e", "seed": 1, "test": {"hr@10": True}}, "test.hr@10 = True, not"),
    ({"dataset": "d", "model": "m", "encoding": "e", "seed": 1, "test": {"hr@10": float("nan")}}, "= nan, not a finite"),
    ({"dataset": "d", "model": "m", "encoding": "e", "seed": 1}, "has no test metrics"),
    ({"dataset": "d", "model": "m", "encoding": "e", "seed": 1, "test": {"hr@10": 0.5},     # evaluate's curves.png
      "history": [{"epoch": 1, "loss": "2.0", "valid": {}}]}, "has a damaged history"),
    ({"dataset": "d", "model": "m", "encoding": "e", "seed": 1, "test": {"hr@10": 0.5},
      "history": [{"epoch": 1, "loss": 2.0, "valid": []}]}, "has a damaged history"),
    ({"dataset": "d", "model": "m", "encoding": "e", "seed": 1, "test": {"hr@10": 0.5}, "history": {}},
     "has a damaged history"),
])
def test_a_run_json_seqpe_did_not_write_is_named(tmp_path, record, fragment):
    """Another tool's run.json under the runs folder was an AttributeError / KeyError / TypeError traceback."""
    write_run(tmp_path, "pop", "none", 1, {"hr@10": 0.5})
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "run.json").write_text(json.dumps(record))
    with pytest.raises(DataError, match=re.escape(fragment)):
        report.run([tmp_path])


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


# --------------------------------------------------------------------------- significance vs a baseline

GREATER = {"pop-none": [[5, 0, 9, 2, 30, 1, 0, 4], [5, 1, 9, 2, 28, 1, 0, 4], [6, 0, 8, 2, 31, 1, 0, 3]],
           "sasrec-lpe": [[1, 0, 2, 0, 12, 1, 0, 4], [0, 0, 3, 1, 10, 0, 1, 5], [1, 0, 2, 0, 11, 2, 0, 4]]}
TIES = {"pop-none": [[3, 0, 0, 1, 0, 2, 5, 0]] * 3, "sasrec-lpe": [[0, 1, 0, 0, 2, 0, 0, 0]] * 3}
NDCG = {"pop-none": [0.100, 0.110, 0.105], "sasrec-lpe": [0.150, 0.140, 0.160]}


def write_ranked_runs(root: Path, seeds=(1, 2, 3)):
    """Two next-item configurations x seeds: run.json + test_samples.parquet (8 test samples)."""
    for name in ("pop-none", "sasrec-lpe"):
        model, enc = name.split("-")
        for i, seed in enumerate(seeds):
            write_run(root, model, enc, seed, {"hr@10": 2 * NDCG[name][i], "mrr@10": NDCG[name][i] / 2,
                                               "ndcg@10": NDCG[name][i]})
            pl.DataFrame({"greater": GREATER[name][i], "ties": TIES[name][i]},
                         schema={"greater": pl.Int32, "ties": pl.Int32}).write_parquet(
                root / name / f"seed-{seed}" / "test_samples.parquet")


def rr(g, t) -> float:
    return sum(1 / r for r in range(g + 1, g + t + 2)) / (t + 1)


def test_report_compares_with_the_first_configuration(tmp_path):
    write_ranked_runs(tmp_path)
    rows = report.run([tmp_path])
    pop, sas = rows
    assert pop["comparison"] is None and sas["comparison"]["baseline"] == "pop-none"
    comp = sas["comparison"]
    # seeds: paired t-test on ndcg@10 and mrr@10 over seeds 1..3
    ref = stats.ttest_rel(NDCG["sasrec-lpe"], NDCG["pop-none"])
    d = np.subtract(NDCG["sasrec-lpe"], NDCG["pop-none"])
    t_nd = comp["seed_tests"]["ndcg@10"]
    assert t_nd["n"] == 3 and t_nd["p"] == pytest.approx(ref.pvalue)
    assert t_nd["dz"] == pytest.approx(d.mean() / d.std(ddof=1))
    assert comp["seed_tests"]["mrr@10"]["p"] == pytest.approx(ref.pvalue)         # mrr = ndcg / 2
    # samples: expected RR per sample (tie rule), averaged over the 3 seeds, then Wilcoxon
    x = {n: np.mean([[rr(g, t) for g, t in zip(GREATER[n][i], TIES[n][i])] for i in range(3)], axis=0) for n in GREATER}
    sample = comp["sample"]
    assert sample["quantity"] == "rr" and sample["n"] == 8
    assert sample["p"] == pytest.approx(stats.wilcoxon(x["sasrec-lpe"] - x["pop-none"]).pvalue)
    diff = (x["sasrec-lpe"] - x["pop-none"])[x["sasrec-lpe"] != x["pop-none"]]
    ranks = stats.rankdata(np.abs(diff))
    assert sample["r"] == pytest.approx((ranks[diff > 0].sum() - ranks[diff < 0].sum()) / ranks.sum())
    assert sample["p"] == pytest.approx(0.0546875)                                  # 8 pairs: not below 0.05
    boot = sample["bootstrap"]
    assert boot["diff"] == pytest.approx(np.mean(x["sasrec-lpe"] - x["pop-none"])) and boot["lo"] > 0
    assert comp["verdict"] == ("rejects equality at 0.05: t-test ndcg@10 (better), t-test mrr@10 (better), "
                               "bootstrap mean rr (better)")
    md = report.to_markdown(rows)
    head = ("| dataset | configuration | baseline | common seeds | Δ mrr@10 [95% CI] | p t-test mrr@10 | d_z mrr@10 "
            "| Δ ndcg@10 [95% CI] | p t-test ndcg@10 | d_z ndcg@10 | per-sample | Δ per-sample | p Wilcoxon "
            "| r rank-biserial | bootstrap Δ [95% CI] | verdict |")
    assert head in md.splitlines()
    line = next(ln for ln in md.splitlines() if ln.startswith("| toyset | sasrec-lpe | pop-none | 3 | "))
    assert f"| {100 * d.mean():+.2f} [" in line and f"| {ref.pvalue:.3g} |" in line and "| rr |" in line
    assert "exact mean over ranks g+1..g+t+1" in md and "scipy.stats.wilcoxon" in md and "rank-biserial" in md
    csv_rows = list(__import__("csv").DictReader(report.to_csv(rows).splitlines()))
    assert csv_rows[0]["baseline"] == "" and csv_rows[1]["baseline"] == "pop-none"
    assert float(csv_rows[1]["ndcg@10_t_p"]) == pytest.approx(ref.pvalue)
    assert float(csv_rows[1]["wilcoxon_p"]) == pytest.approx(sample["p"])
    assert csv_rows[1]["bootstrap_statistic"] == "mean rr" and csv_rows[1]["bootstrap_rows"] == "8"
    assert csv_rows[1]["verdict"] == comp["verdict"]
    from rich.console import Console
    console = Console(width=400, record=True)
    console.print(report.comparison_table(rows))
    text = console.export_text()
    assert "sasrec-lpe" in text and "verdict" in text and "0.0276" in text


def test_report_with_two_seeds_says_the_seed_test_cannot_conclude(tmp_path):
    write_ranked_runs(tmp_path, seeds=(1, 2))
    [_, sas] = report.run([tmp_path])
    comp = sas["comparison"]
    assert comp["seed_tests"]["ndcg@10"]["p"] is None and comp["seed_tests"]["ndcg@10"]["diff"] is not None
    assert comp["verdict"].startswith("2 common seeds: the seed t-test cannot conclude anything (needs >= 3)")


def test_named_baseline_and_runs_without_per_sample_files(tmp_path):
    write_ranked_runs(tmp_path)
    for path in (tmp_path / "pop-none").rglob("test_samples.parquet"):
        path.unlink()
    rows = report.run([tmp_path], baseline="sasrec-lpe")
    pop, sas = rows
    assert sas["comparison"] is None and pop["comparison"]["baseline"] == "sasrec-lpe"
    assert pop["comparison"]["sample"] is None
    assert pop["comparison"]["verdict"].startswith("pop-none: no test_samples.parquet, per-sample tests skipped")
    with pytest.raises(ParamsError, match="baseline 'nope' is not a configuration.*use one of: pop-none, sasrec-lpe"):
        report.run([tmp_path], baseline="nope")


def test_ctr_report_uses_log_loss_and_auc_with_the_samples_labels(tmp_path, capsys):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 120)
    samples = tmp_path / "samples"
    write_split(samples, "test", pl.DataFrame({"label": labels.astype(np.int8), "user": np.arange(120) % 7}))
    runs = tmp_path / "runs"
    logits, aucs = {}, {}
    for name, strength in (("din-none", 0.2), ("din-cape", 2.0)):
        model, enc = name.split("-")
        for seed in (1, 2, 3):
            x = (rng.normal(size=120) + strength * labels).astype(np.float32)
            logits[name, seed] = x
            pos, neg = x[labels == 1], x[labels == 0]
            aucs[name, seed] = float(stats.mannwhitneyu(pos, neg).statistic) / (len(pos) * len(neg))
            loss = float(np.mean(np.logaddexp(0, -(2 * labels - 1) * x.astype(float))))
            write_run(runs, model, enc, seed, {"auc": aucs[name, seed], "gauc": 0.6, "logloss": loss},
                      dataset="kuai", protocol="ctr")
            significance.write_test_samples(runs / name / f"seed-{seed}" / "test_samples.parquet", logit=x)
    [cape, none] = report.run([runs], baseline="din-none", samples=samples)
    text, (title, _, _) = report.to_markdown([cape, none]), report.summary_view([cape, none])
    assert report.CTR_NOTE in text and report.TIE_NOTE not in text and title.endswith("kuai · ctr")
    assert "full ranking" not in title + text.replace(report.CTR_NOTE, "")     # both said CTR was ranked in full
    comp = cape["comparison"]
    assert none["comparison"] is None and comp["task"] == "ctr" and list(comp["seed_tests"]) == ["auc"]
    assert comp["seed_tests"]["auc"]["diff"] == pytest.approx(
        np.mean([aucs["din-cape", s] - aucs["din-none", s] for s in (1, 2, 3)]))
    loss = {n: np.mean([np.logaddexp(0, -(2 * labels - 1) * logits[n, s].astype(float)) for s in (1, 2, 3)], axis=0)
            for n in ("din-none", "din-cape")}
    assert comp["sample"]["quantity"] == "logloss"
    assert comp["sample"]["p"] == pytest.approx(stats.wilcoxon(loss["din-cape"] - loss["din-none"]).pvalue)
    assert comp["sample"]["bootstrap"]["lo"] > 0
    assert "Wilcoxon logloss (better)" in comp["verdict"] and "bootstrap auc (better)" in comp["verdict"]
    no_labels = report.run([runs], baseline="din-none")[0]["comparison"]
    assert no_labels["sample"] is None and "need the test labels" in no_labels["verdict"]
    write_split(tmp_path / "other", "test", pl.DataFrame({"item": [1, 2]}))
    with pytest.raises(DataError, match="has no label column"):
        report.run([runs], samples=tmp_path / "other")
    write_json(tmp_path / "other" / "manifest.json", {"dataset": "beauty", "kind": "sessions",
                                                       "protocol": "leave_one_out", "shards": []})
    with pytest.raises(DataError, match="other holds beauty's leave_one_out sessions, and --samples gives the test "
                                        "labels of CTR runs .*Fix: drop --samples, or pass the CTR dataset's"):
        report.run([runs], samples=tmp_path / "other")
    write_json(tmp_path / "other" / "manifest.json", {"dataset": "kuai", "kind": "sessions", "protocol": "ctr",
                                                       "shards": []})
    with pytest.raises(DataError, match="other holds kuai's sessions, and --samples reads the samples folder the CTR "
                                        "runs were trained on. Fix: pass data/samples/kuai"):    # walk 34a: accepted
        report.run([runs], samples=tmp_path / "other")
    write_run(tmp_path / "next", "sasrec", "lpe", 1, {"hr@10": 0.3})
    with pytest.raises(ParamsError, match="--samples gives the test labels of CTR runs, and the runs under .*next are "
                                          "next-item runs, which need none. Fix: drop --samples"):   # was ignored
        report.run([tmp_path / "next"], samples=samples)
    # a next-item samples folder, as dvc.yaml's evaluate passes it for every dataset: not read, with a note
    write_json(tmp_path / "nsamples" / "manifest.json", {"dataset": "beauty", "kind": "samples",
                                                          "protocol": "leave_one_out", "shards": []})
    assert report.run([tmp_path / "next"], samples=tmp_path / "nsamples")[0]["name"] == "sasrec-lpe"
    assert "nsamples was not read: next-item runs need no test labels" in capsys.readouterr().err
    # another dataset's labels with as many rows (the same share of positives, even): named, not tested on
    write_split(tmp_path / "shuffled", "test", pl.DataFrame({"label": rng.permutation(labels).astype(np.int8)}))
    with pytest.raises(DataError, match=r"labels passed with --samples are not the ones din-\w+ seed 1 was scored on"):
        report.run([runs], baseline="din-none", samples=tmp_path / "shuffled")


def test_cli_report_with_baseline_prints_the_tests(tmp_path):
    runs = tmp_path / "runs"
    write_ranked_runs(runs)
    out = tmp_path / "r.csv"
    env = dict(os.environ, COLUMNS="300")
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "report", str(runs), "--baseline", "pop-none",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "vs baseline" in proc.stdout and "rejects equality" in proc.stdout
    assert "wilcoxon_p" in out.read_text().splitlines()[0]
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "report", str(runs), "--baseline", "x"],
                          cwd=ROOT, capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "baseline 'x' is not a configuration" in proc.stderr


def test_seeds_trained_differently_or_repeated_are_not_pooled(tmp_path):
    """Two runs folders holding sasrec-none (one trained with ce, one with bce) used to come out as one
    row of '2 seeds'; a machine-only difference (threads, time limit) still pools."""
    import json
    test = {"hr@10": 0.5}
    for root, seed, loss, threads in ((tmp_path / "a", 1, "ce", 1), (tmp_path / "b", 2, "bce", 2)):
        write_run(root, "sasrec", "none", seed, test)
        path = root / "sasrec-none" / f"seed-{seed}" / "run.json"
        rec = json.loads(path.read_text())
        rec["train"] = {"loss": loss, "lr": 0.001 * threads, "threads": threads}
        write_json(path, rec)
    with pytest.raises(DataError, match=r"toyset sasrec-none: seed 1 and seed 2 were trained with different "
                                         r"settings \(train.loss: 'ce' vs 'bce'; train.lr: 0.001 vs 0.002\).*--tag"):
        report.aggregate(report.find_runs([tmp_path / "a", tmp_path / "b"]))      # every key that differs
    path = tmp_path / "b" / "sasrec-none" / "seed-2" / "run.json"
    rec = json.loads(path.read_text())
    rec["train"].update(loss="ce", lr=0.001)
    write_json(path, rec)
    [row] = report.aggregate(report.find_runs([tmp_path / "a", tmp_path / "b"]))
    assert row["seeds"] == [1, 2]
    write_run(tmp_path / "c", "sasrec", "none", 1, test)
    with pytest.raises(DataError, match="sasrec-none has seed 1 twice"):
        report.aggregate(report.find_runs([tmp_path / "a", tmp_path / "c"]))
    # seeds of one name trained on other data (a re-import with the same split sizes) were pooled (walk 31a);
    # a record older than the keys (no digest) still pools
    rec["samples_digest"], rec["sessions_manifest"] = "aaaa1111bbbb", "c76d6f000000"
    write_json(path, rec)
    [row] = report.aggregate(report.find_runs([tmp_path / "a", tmp_path / "b"]))
    first = tmp_path / "a" / "sasrec-none" / "seed-1" / "run.json"
    write_json(first, {**json.loads(first.read_text()), "samples_digest": "cccc2222dddd",
                       "sessions_manifest": "196bbb000000"})
    with pytest.raises(DataError, match=r"seed 1 and seed 2 were trained with different settings \(the samples "
                                         r"folder's data \(a re-import or re-augment\): cccc2222dddd vs aaaa1111bbbb\)"):
        report.aggregate(report.find_runs([tmp_path / "a", tmp_path / "b"]))
    # the same samples from a sessions folder whose manifest differs in a key the protocol does not read (walk
    # 32a: preprocess.k_core on CARCA data): `train` reuses such seeds, so the report pools them
    write_json(first, {**json.loads(first.read_text()), "samples_digest": "aaaa1111bbbb"})
    [row] = report.aggregate(report.find_runs([tmp_path / "a", tmp_path / "b"]))
    assert row["seeds"] == [1, 2]


def test_an_option_recorded_at_its_default_is_the_same_setting_as_one_left_out():
    """Runs record only the options that differ from the defaults (session 31); a record from before kept an
    option a preset spelled out at its default and read as "options.alpha: 0.5 vs None" against a newer run
    of the same settings, so their seeds were not pooled. An option left out reads as its default."""
    def rec(options, enc_options=None, encoding="none", model="itemknn"):
        return {"train": {"model": model, "encoding": encoding}, "options": options,
                "encoding_options": enc_options or {}}
    assert report.settings_change(rec({"alpha": 0.5, "shrink": 0.0}), rec({})) == ""
    assert report.settings_change(rec({"alpha": 0.7}), rec({})) == "options.alpha: 0.7 vs its default"
    assert report.settings_change(rec({}, {"base": 10000.0}, "rope", "sasrec"), rec({}, {}, "rope", "sasrec")) == ""
    assert report.settings_change(rec({}, {}, "rope", "sasrec"), rec({}, {"base": 100.0}, "rope", "sasrec")) \
        == "encoding_options.base: its default vs 100.0"


def test_a_configuration_whose_seeds_differ_is_left_out_and_the_others_reported(tmp_path):
    """Walk 28: one configuration with seeds trained at 5 and 2 epochs made `seqpe report` (and `evaluate --all`)
    print nothing, exit 1. The others are now reported, that one left out with a note saying why; the grid's
    own configurations still refuse (evaluate's metrics need them), and so does a folder holding nothing else."""
    import json
    for seed in (1, 2):
        write_run(tmp_path, "sasrec", "none", seed, {"hr@10": 0.5 + seed / 10})
        write_run(tmp_path, "pop", "none", seed, {"hr@10": 0.2})
        write_run(tmp_path, "sasrec", "none", seed, {"hr@10": 0.6}, tag="tl")
        path = tmp_path / "sasrec-none-tl" / f"seed-{seed}" / "run.json"
        write_json(path, {**json.loads(path.read_text()), "train": {"epochs": 7 - 2 * seed}})
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "report", str(tmp_path), "--json"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [(r["configuration"], r["left_out"] is None) for r in out] == \
        [("pop-none", True), ("sasrec-none", True), ("sasrec-none-tl", False)]
    assert "note: left out of the report: toyset sasrec-none-tl: seed 1 and seed 2 were trained with different " \
           "settings (train.epochs: 5 vs 3)" in " ".join(proc.stderr.split())
    # walk 34a #7: a script reading the JSON, or the report file, saw the configuration vanish (stderr note only)
    assert out[2]["seeds"] == [1, 2] and out[2]["metrics"] == {} and out[2]["comparison"] is None
    assert out[0]["checkouts"] == [None, None] and out[2]["checkouts"] is None       # each seed's code (walk 35c)
    assert out[2]["left_out"]["reason"] == "toyset sasrec-none-tl: seed 1 and seed 2 were trained with different " \
        "settings (train.epochs: 5 vs 3), so they cannot be pooled into one mean" and "--tag" in out[2]["left_out"]["fix"]
    md = tmp_path.with_name(tmp_path.name + "-report.md")
    assert subprocess.run([sys.executable, "-m", "pipeline.cli", "report", str(tmp_path), "--out", str(md), "-q"],
                          cwd=ROOT, capture_output=True).returncode == 0
    assert "Left out of this report (their seeds cannot be pooled into one row): toyset sasrec-none-tl: seed 1 and " \
           "seed 2 were trained with different settings (train.epochs: 5 vs 3)" in md.read_text()
    assert "Left out" not in report.to_markdown(report.aggregate(report.find_runs([tmp_path / "pop-none"])))
    with pytest.raises(DataError, match="sasrec-none-tl: seed 1 and seed 2"):
        report.aggregate(report.find_runs([tmp_path]))                               # not skippable: refused
    with pytest.raises(DataError, match="sasrec-none-tl"):
        report.pooled(report.find_runs([tmp_path]), lambda name: name != "sasrec-none-tl")
    alone = tmp_path.with_name(tmp_path.name + "-alone")   # every configuration left out: one error line, not a note too
    for seed in (1, 2):
        write_run(alone, "sasrec", "none", seed, {"hr@10": 0.6})
        path = alone / "sasrec-none" / f"seed-{seed}" / "run.json"
        write_json(path, {**json.loads(path.read_text()), "train": {"epochs": 7 - 2 * seed}})
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "report", str(alone)], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("error: toyset sasrec-none: seed 1 and seed 2 were trained with different")
    rows, records = report.pooled(report.find_runs([tmp_path]), lambda name: True)
    assert {r["name"] for r in records} == {"pop-none", "sasrec-none"} and len(records) == 4
    for name in ("pop-none", "sasrec-none"):
        shutil.rmtree(tmp_path / name)
    with pytest.raises(DataError, match="sasrec-none-tl: seed 1 and seed 2"):       # nothing else: refused
        report.pooled(report.find_runs([tmp_path]), lambda name: True)
    # walk 35c #4: --json printed nothing (exit 1) when every configuration was left out; it now lists them
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "report", str(alone), "--json"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert [(e["configuration"], e["metrics"], e["left_out"]["reason"][:33]) for e in json.loads(proc.stdout)] == \
        [("sasrec-none", {}, "toyset sasrec-none: seed 1 and se")]
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "report", str(alone), "--json", "--baseline",
                           "sasrec-none"], cwd=ROOT, capture_output=True, text=True)   # walk 36c: "use one of: none"
    assert proc.returncode == 0 and json.loads(proc.stdout)[0]["left_out"], proc.stderr
    write_run(alone, "pop", "none", 1, {"hr@10": 0.2}, tag="b")
    write_run(alone, "pop", "none", 2, {"hr@10": 0.2}, tag="b")
    path = alone / "pop-none-b" / "seed-2" / "run.json"
    write_json(path, {**json.loads(path.read_text()), "train": {"epochs": 9}})
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "report", str(alone)], cwd=ROOT, capture_output=True,
                          text=True)                                  # several: the count, the first, where the rest are
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("error: none of the 2 configurations can be pooled over its seeds: toyset pop-none-b:"), \
        proc.stderr
    assert "(and 1 more: `seqpe report --json`, without --out, lists each with its reason)" in \
        " ".join(proc.stderr.split())


def test_seeds_of_different_checkouts_are_pooled_with_a_note(tmp_path):
    """A seed trained after a local edit pooled with the others without a word: the row now carries each
    seed's code (run.json's versions: seqpe's source hash; in older records the git commit) and the summary
    names the mixed row."""
    import json
    for seed, commit, dirty in ((1, "a" * 40, False), (2, "a" * 40, False), (3, "a" * 40, True)):
        write_run(tmp_path, "sasrec", "none", seed, {"hr@10": 0.5})
        path = tmp_path / "sasrec-none" / f"seed-{seed}" / "run.json"
        rec = json.loads(path.read_text())
        rec["versions"] = {"seqpe_git": commit, "seqpe_dirty": dirty}       # a record older than session 35
        write_json(path, rec)
    [row] = report.aggregate(report.find_runs([tmp_path]))
    assert row["checkouts"] == ["aaaaaaaaaa", "aaaaaaaaaa", "aaaaaaaaaa+edits"]
    assert report.checkout_note([row]) == (
        "Mixed code: the seeds of toyset sasrec-none (seeds 1, 2: aaaaaaaaaa; seed 3: aaaaaaaaaa+edits) were trained "
        "with different seqpe code (code: a hash of seqpe's source; in older runs the git commit, +edits: "
        "uncommitted changes). They are pooled because their settings agree; if the code between them changed what "
        "a run computes, retrain the odd seeds with one version.")
    assert "Mixed code" in report.to_markdown([row])
    row["checkouts"] = ["aaaaaaaaaa"] * 3
    assert report.checkout_note([row]) is None
    for seed, code in ((1, "c" * 20), (2, "c" * 20), (3, "d" * 20)):       # today's records: the source hash
        path = tmp_path / "sasrec-none" / f"seed-{seed}" / "run.json"
        write_json(path, {**json.loads(path.read_text()), "versions": {"seqpe_code": code}})
    [row] = report.aggregate(report.find_runs([tmp_path]))
    assert row["checkouts"] == ["code cccccccccc", "code cccccccccc", "code dddddddddd"]
    assert "seed 3: code dddddddddd" in report.checkout_note([row])


def test_ctr_rows_at_chance_are_named(tmp_path):
    """Walk 42c #2: DIN at test AUC 49.6 and 49.2 were compared and one declared significantly worse, with nothing
    saying neither had learnt the labels. A row whose every seed's AUC is below 53 is named; CAPE's two seeds at
    67 and 88 are not, though 50 lies inside their wide 95% CI (walk 42f #3)."""
    for seed, (a, b, c, d) in enumerate(((0.51, 0.47, 0.90, 0.67), (0.49, 0.48, 0.91, 0.88), (0.50, 0.52, 0.92, None)),
                                        start=1):
        write_run(tmp_path, "din", "none", seed, {"auc": a})
        write_run(tmp_path, "din", "cope", seed, {"auc": b})
        write_run(tmp_path, "din", "rope", seed, {"auc": c})
        if d is not None:
            write_run(tmp_path, "din", "cape", seed, {"auc": d})
    rows = report.aggregate(report.find_runs([tmp_path]))
    note = report.chance_note(rows)
    assert note.startswith("At chance: toyset din-cope (AUC 49.00 ± 6.57), toyset din-none (AUC 50.00 ± 2.48) rank "
                           "the test pairs about as well as a coin (every seed's AUC below 53"), note
    assert "din-rope" not in note and "din-cape" not in note and note in report.to_markdown(rows)
    write_run(tmp_path / "one", "din", "none", 1, {"auc": 0.531})      # one seed: its own AUC decides
    assert report.chance_note(report.aggregate(report.find_runs([tmp_path / "one"]))) is None
    write_run(tmp_path / "low", "din", "none", 1, {"auc": 0.529})
    assert "din-none (AUC 52.90)" in report.chance_note(report.aggregate(report.find_runs([tmp_path / "low"])))
    assert "top_auc" not in report.to_json(rows)[0]                   # not part of --json / summary.json


def test_per_sample_tests_pair_the_common_seeds_only(tmp_path):
    """A baseline with seeds 1-3 against a configuration with seed 1 only: the per-sample tests compare
    seed 1 with seed 1 (a seed fixes data order, negatives and initialisation for both), and say so."""
    write_ranked_runs(tmp_path)
    for seed in (2, 3):
        shutil.rmtree(tmp_path / "sasrec-lpe" / f"seed-{seed}")
    [_, sas] = report.run([tmp_path])
    comp = sas["comparison"]
    x = {n: np.array([rr(g, t) for g, t in zip(GREATER[n][0], TIES[n][0])]) for n in GREATER}
    assert comp["sample"]["bootstrap"]["diff"] == pytest.approx(np.mean(x["sasrec-lpe"] - x["pop-none"]))
    assert comp["sample"]["p"] == pytest.approx(stats.wilcoxon(x["sasrec-lpe"] - x["pop-none"]).pvalue)
    assert "per-sample tests on the common seed(s) 1" in comp["notes"]
    # no seed in common: each side's own seeds, noted
    shutil.move(tmp_path / "sasrec-lpe" / "seed-1", tmp_path / "sasrec-lpe" / "seed-9")
    record = json.loads((tmp_path / "sasrec-lpe" / "seed-9" / "run.json").read_text())
    (tmp_path / "sasrec-lpe" / "seed-9" / "run.json").write_text(json.dumps({**record, "seed": 9}))
    [_, sas] = report.run([tmp_path])
    x_pop = np.mean([[rr(g, t) for g, t in zip(GREATER["pop-none"][i], TIES["pop-none"][i])] for i in range(3)],
                    axis=0)
    assert sas["comparison"]["sample"]["bootstrap"]["diff"] == pytest.approx(np.mean(x["sasrec-lpe"] - x_pop))
    assert any("share no seed" in n for n in sas["comparison"]["notes"])


def test_a_baseline_seed_without_per_sample_file_is_noted_only_where_it_pairs(tmp_path):
    """The note that a baseline seed lacks its test_samples.parquet went on every row, also on rows that
    share no such seed with the baseline (where it loses nothing)."""
    write_ranked_runs(tmp_path)
    (tmp_path / "pop-none" / "seed-3" / "test_samples.parquet").unlink()
    note = "pop-none: seed(s) 3 without test_samples.parquet left out of the per-sample tests"
    [_, sas] = report.run([tmp_path])
    assert note in sas["comparison"]["notes"]
    shutil.rmtree(tmp_path / "sasrec-lpe" / "seed-3")
    [_, sas] = report.run([tmp_path])
    assert note not in sas["comparison"]["notes"], sas["comparison"]["notes"]


def test_a_run_whose_record_was_lost_is_an_error_not_a_missing_seed(tmp_path):
    """A seed folder with its checkpoint but no run.json (deleted by hand, a copy cut short) used to be
    left out of the report without a word, so the row said 2 seeds where the user trained 3."""
    for seed in (1, 2, 3):
        write_run(tmp_path, "sasrec", "none", seed, {"hr@10": 0.5})
        (tmp_path / "sasrec-none" / f"seed-{seed}" / "checkpoint.pt").write_bytes(b"x")
    (tmp_path / "sasrec-none" / "seed-2" / "run.json").unlink()
    with pytest.raises(DataError, match=r"seed-2 has a checkpoint but no run.json.*Fix: remove .*seed-2 \(then "
                                        r"`seqpe train` trains that seed again"):
        report.find_runs([tmp_path])
    hidden = tmp_path / "sasrec-none" / ".tmp-seed-2"          # a run being written is not a lost one
    (tmp_path / "sasrec-none" / "seed-2").rename(hidden)
    assert [r["seed"] for r in report.find_runs([tmp_path])] == [1, 3]


def test_log_loss_keeps_four_decimals_in_the_tables():
    """The over-seeds table showed log loss 0.69 / 0.69 where the runs were 0.6933 / 0.6917."""
    from pipeline.report import _cell, _scale
    stat = {"mean": 0.6925, "ci95": 0.0102, "std": 0.0011}
    assert _cell(stat, _scale("logloss")) == "0.6925 ± 0.0102 (sd 0.0011)"
    assert _cell({"mean": 0.8123, "ci95": None, "std": None}, _scale("auc")) == "81.23"


def test_terminal_tables_name_the_evaluation_protocol(tmp_path):
    """Full-ranking and sampled-candidate rows stood side by side in the terminal with no protocol (HR@10 9.25
    among 100 candidates next to 0.25 over every item); one protocol goes into the title, several get a column."""
    import io
    import json
    from rich.console import Console
    for enc, candidates in (("none", 0), ("abs", 100)):
        for seed in (1, 2, 3):
            write_run(tmp_path, "sasrec", enc, seed, {"hr@10": 0.1 * seed + (0.5 if candidates else 0)})
            path = tmp_path / f"sasrec-{enc}" / f"seed-{seed}" / "run.json"
            rec = json.loads(path.read_text())
            rec["evaluate"] = {"candidates": candidates}
            write_json(path, rec)

    def shown(rows) -> str:
        console = Console(file=io.StringIO(), width=200)
        report.print_tables(console, rows)
        return console.file.getvalue()

    rows = report.aggregate(report.find_runs([tmp_path]))
    out = shown(rows)
    assert "protocol" in out and "srgnn, 100 sampled candidates (uniform)" in out
    [one] = [r for r in rows if r["name"] == "sasrec-abs"]
    assert "· toyset · srgnn, 100 sampled candidates (uniform)" in " ".join(shown([one]).split())   # the title wraps


def test_full_ranking_with_and_without_the_sessions_own_items_are_two_protocols(tmp_path):
    """evaluate.mask_history shows only for sampled candidates: a full ranking with and without a session's own
    items was one protocol, and the same weights scored both ways were compared as if the models differed."""
    for tag, masked, hr in (("masked", True, 0.30), ("plain", False, 0.21)):
        write_run(tmp_path / "runs", "sasrec", "none", 1, {"hr@10": hr}, protocol="leave_one_out", tag=tag)
        path = tmp_path / "runs" / f"sasrec-none-{tag}" / "seed-1" / "run.json"
        write_json(path, {**json.loads(path.read_text()), "evaluate": {"candidates": 0, "mask_history": masked}})
    records = report.find_runs([tmp_path / "runs"])
    assert sorted(report.protocol_label(r) for r in records) == ["leave_one_out", "leave_one_out, input items excluded"]
    sampled = {**records[0], "n_items": 60, "evaluate": {"candidates": 100, "mask_history": True}}
    # >= n_items - 1 with mask_history: not full ranking (walk 36b: it keeps the input items, tied below the others,
    # and a target among them ties with them, where the draw leaves them out: per-sample ranks differed, p 4e-104)
    assert report.protocol_label(sampled) == "leave_one_out, 59 sampled candidates (uniform, input items excluded)"
    assert report.protocol_label({**sampled, "evaluate": {"candidates": 2000, "mask_history": True}}) == \
        report.protocol_label(sampled)              # no more than n_items - 1 to draw: one protocol (walk 36c #11)
    assert report.protocol_label({**sampled, "evaluate": {"candidates": 59}}) == "leave_one_out"
    assert report.protocol_label({**sampled, "evaluate": {"candidates": 59, "candidate_sampling": "popularity"}}) \
        == "leave_one_out, 59 sampled candidates (popularity)"        # never an item unseen in train: not all ranked
    assert report.protocol_label({**sampled, "evaluate": {"candidates": 58}}) == \
        "leave_one_out, 58 sampled candidates (uniform)"
    rows = report.compare(records, report.aggregate(records), "sasrec-none-plain")
    assert [(r["protocol"], r["comparison"], r["no_baseline"]) for r in rows] == [
        ("leave_one_out", None, None), ("leave_one_out, input items excluded", None, "sasrec-none-plain")]
    # evaluate's default reference (not one the user named): a protocol without it is compared with its own first,
    # as `seqpe report` does; evaluate left it "Not compared" while report compared it (walk 31a)
    for seed, hr in ((1, 0.28), (2, 0.29)):
        write_run(tmp_path / "runs", "pop", "none", seed, {"hr@10": hr}, protocol="leave_one_out", tag="masked")
        path = tmp_path / "runs" / "pop-none-masked" / f"seed-{seed}" / "run.json"
        write_json(path, {**json.loads(path.read_text()), "evaluate": {"candidates": 0, "mask_history": True}})
    records = report.find_runs([tmp_path / "runs"])
    rows = report.compare(records, report.aggregate(records), "sasrec-none-plain", own_first=True)
    got = {r["name"]: ((r["comparison"] or {}).get("baseline"), r["no_baseline"]) for r in rows}
    assert got == {"sasrec-none-plain": (None, None), "pop-none-masked": (None, None),
                   "sasrec-none-masked": ("pop-none-masked", None)}


def test_a_p_value_below_the_smallest_float_is_shown_as_such():
    """Walk 39e #2: scipy's Wilcoxon p underflows to 0.0 on 22,363 clearly different pairs; the table said `0`."""
    assert report._p(0.0) == "<1e-300" and report._p(1e-310) == "<1e-300"
    assert report._p(0.0123) == "0.0123" and report._p(None) == ""


def test_keys_a_run_never_read_do_not_split_old_and_new_records():
    """Walk 40e #1: `seqpe train` now records train.bucket under trim_padding false, and parec's / fparec's
    train.heads, as null (not read); runs recorded before with 50 / 1 were refused by evaluate's grid check and
    not pooled with new seeds, though they are the same model."""
    old = {"train": {"model": "parec", "heads": 1, "bucket": 50, "trim_padding": False, "lr": 0.001}}
    new = {"train": {"model": "parec", "heads": None, "bucket": None, "trim_padding": False, "lr": 0.001}}
    assert report.settings_change(old, new) == ""
    # any model's unread keys, from its ModelSpec.ignores (a function of its options for BPR-MF)
    din = {"train": {"model": "din", "layers": 2, "heads": 2, "lr": 0.001}}
    assert report.settings_change(din, {"train": {**din["train"], "layers": None, "heads": None}}) == ""
    bpr = {"train": {"model": "bprmf", "loss": "ce", "lr": 0.001}}
    assert report.settings_change(bpr, {"train": {**bpr["train"], "loss": None}}) == ""
    assert "train.loss: 'ce' vs None" in report.settings_change(
        {**bpr, "options": {"loss": "ce"}}, {"train": {**bpr["train"], "loss": None}, "options": {"loss": "ce"}})
    trimmed = {"train": {**old["train"], "trim_padding": True, "model": "sasrec"}}
    assert "train.bucket: 50 vs 10" in report.settings_change(trimmed, {"train": {**trimmed["train"], "bucket": 10}})
    assert "train.heads: 1 vs 2" in report.settings_change(trimmed, {"train": {**trimmed["train"], "heads": 2}})


def test_keys_another_setting_leaves_unread_do_not_split_records_of_before_session_31():
    """Walk 44a #1: runs recorded before `seqpe train` nulled train.negatives (loss ce), lr_step / lr_gamma
    (lr_schedule none) were "trained with other settings" for ever: evaluate refused the unchanged grid, report
    left the configuration out, and the fix it gave (--set train.lr_gamma=0.1) is refused."""
    new = {"train": {"model": "sasrec", "loss": "ce", "lr_schedule": "none", "negatives": None, "lr_step": None,
                     "lr_gamma": None, "ce_impl": "chunked", "lr": 0.001}}
    old = {"train": {**new["train"], "negatives": 100, "lr_step": 3, "lr_gamma": 0.1}}
    assert report.settings_change(old, new) == "" and report.settings_change(new, old) == ""
    ctr = {"train": {"model": "din", "loss": "ce", "lr_schedule": "none", "negatives": None, "lr": 0.001}}
    assert report.settings_change({"train": {**ctr["train"], "negatives": 100}}, ctr) == ""
    # read under the settings that read them: still differences
    stepped = {"train": {**old["train"], "lr_schedule": "step"}}
    assert "train.lr_gamma: 0.1 vs 0.5" in report.settings_change(
        stepped, {"train": {**stepped["train"], "lr_gamma": 0.5}})
    sampled = {"train": {**old["train"], "loss": "sampled"}}
    assert "train.negatives: 100 vs 50" in report.settings_change(
        sampled, {"train": {**sampled["train"], "negatives": 50}})


def test_a_missing_folder_dvc_lock_records_says_dvc_pull_first(tmp_path, monkeypatch):
    """Walk 41c #3: a teammate who had not pulled was told to retrain or recompute what dvc.lock records (and
    report named a placeholder DATASET); the error now says `dvc pull` first where the lock records the folder."""
    from pipeline import io
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages:\n  train_sample:\n    cmd: seqpe train sample\n"
                                       "    outs:\n    - path: data/runs/sample\n      md5: abc.dir\n")
    assert io.locked_output("data/runs/sample") and io.locked_output(tmp_path / "data/runs/sample/sasrec-lpe/seed-1")
    assert not io.locked_output("data/runs/other") and not io.locked_output("data/other")
    assert io.locked_output("data/runs")        # it holds a recorded output (dvc.yaml's train stage records
    (tmp_path / "dvc.lock").write_text(          # data/runs/D/MODEL-ENC, inside the runs folder: walk 41h #2)
        "schema: '2.0'\nstages:\n  train_sample:\n    outs:\n    - path: data/runs/sample/sasrec-lpe\n")
    assert io.locked_output("data/runs/sample")
    with pytest.raises(DataError, match=r"Fix: `dvc pull` it \(dvc.lock records it\), or run `seqpe train sample`"):
        report.find_runs(["data/runs/sample"])
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages:\n  train_sample:\n    cmd: seqpe train sample\n"
                                       "    outs:\n    - path: data/runs/sample\n      md5: abc.dir\n")
    with pytest.raises(DataError, match=r"runs folder data/runs/sample does not exist\. Fix: `dvc pull` it \(dvc.lock "
                                        r"records it\), or run `seqpe train sample` first"):
        report.find_runs(["data/runs/sample"])
    with pytest.raises(DataError, match=r"data/runs/other does not exist\. Fix: run `seqpe train other` first"):
        report.find_runs(["data/runs/other"])
    (tmp_path / "dvc.lock").write_text("stages: [unclosed\n")           # a lock it cannot read: no hint, no crash
    assert not io.locked_output("data/runs/sample")


def test_an_encoding_as_baseline_tests_each_model_against_its_own(tmp_path):
    """Walk 41i #5: `evaluate --all` on a CAPE grid tested dien-none against bst-cape, the first in sorted order;
    001 compares each encoding within its backbone. `--baseline none` tests MODEL-ENC against MODEL-none."""
    for model, base in (("bst", 0.60), ("dien", 0.70)):
        for enc, gain in (("none", 0.0), ("cape", 0.02)):
            for seed in (1, 2, 3):
                write_run(tmp_path, model, enc, seed, {"auc": base + gain + 0.001 * seed})
    rows = report.run([tmp_path], baseline="none")
    against = {r["name"]: (r["comparison"] or {}).get("baseline") for r in rows}
    assert against == {"bst-cape": "bst-none", "bst-none": None, "dien-cape": "dien-none", "dien-none": None}
    with pytest.raises(ParamsError, match="baseline 'rope' is not a configuration"):      # no model has it
        report.run([tmp_path], baseline="rope")
    from pipeline.figures import _is_reference
    names = [r["name"] for r in rows]
    assert [n for n in names if _is_reference(n, "none", names)] == ["bst-none", "dien-none"]


def test_an_encoding_baseline_says_which_models_it_could_not_compare(tmp_path):
    """Walk 41j #5: a model without MODEL-ENCODING runs was left uncompared without a word, and an encoding only a
    tagged run has was accepted and compared nothing."""
    for seed in (1, 2, 3):
        write_run(tmp_path, "din", "none", seed, {"auc": 0.6 + 0.01 * seed})
        write_run(tmp_path, "din", "cape", seed, {"auc": 0.62 + 0.01 * seed})
        write_run(tmp_path, "bst", "cape", seed, {"auc": 0.61 + 0.01 * seed})
        write_run(tmp_path, "dien", "rope", seed, {"auc": 0.6 + 0.01 * seed}, tag="long")
    rows = {r["name"]: r for r in report.run([tmp_path], baseline="none")}
    assert rows["bst-cape"]["comparison"] is None and rows["bst-cape"]["no_baseline"] == "bst-none"
    assert rows["din-cape"]["comparison"]["baseline"] == "din-none" and rows["din-cape"]["no_baseline"] is None
    with pytest.raises(ParamsError, match="baseline 'rope' is not a configuration"):
        report.run([tmp_path], baseline="rope")


def test_ctr_report_finds_the_runs_own_samples_without_the_option(tmp_path, capsys, monkeypatch):
    """`seqpe report data/runs/DATASET` on CTR runs left out the per-sample tests unless --samples named the
    folder the runs record by its shards; now it is found beside the runs folder (or under ./data), and only
    when its shards are the ones every run was trained on."""
    from pipeline.io import read_json
    from pipeline.train.runs import samples_digest
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 80)
    samples = tmp_path / "data" / "samples" / "kuai"
    write_split(samples, "test", pl.DataFrame({"label": labels.astype(np.int8)}))
    manifest = {"dataset": "kuai", "kind": "samples", "protocol": "ctr", "shards": [{"path": "test/part-0.parquet",
                                                                                      "rows": 80, "sha256": "ab"}]}
    write_json(samples / "manifest.json", manifest)
    runs = tmp_path / "data" / "runs" / "kuai"
    for name, strength in (("din-none", 0.1), ("din-cape", 2.0)):
        model, enc = name.split("-")
        for seed in (1, 2, 3):
            x = (rng.normal(size=80) + strength * labels).astype(np.float32)
            pos, neg = x[labels == 1], x[labels == 0]
            auc = float(stats.mannwhitneyu(pos, neg).statistic) / (len(pos) * len(neg))
            loss = float(np.mean(np.logaddexp(0, -(2 * labels - 1) * x.astype(float))))
            write_run(runs, model, enc, seed, {"auc": auc, "logloss": loss}, dataset="kuai", protocol="ctr")
            path = runs / name / f"seed-{seed}" / "run.json"
            write_json(path, {**read_json(path), "samples_digest": samples_digest(manifest)})
            significance.write_test_samples(path.parent / "test_samples.parquet", logit=x)
    comp = report.run([runs], baseline="din-none")[0]["comparison"]
    assert comp["sample"] is not None and comp["sample"]["quantity"] == "logloss"
    assert f"read the test labels of {samples}" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)          # the same from the project's root, runs given as a relative path
    assert report.run([Path("data/runs")], baseline="din-none")[0]["comparison"]["sample"] is not None
    capsys.readouterr()
    write_json(samples / "manifest.json", {**manifest, "shards": [{**manifest["shards"][0], "sha256": "cd"}]})
    comp = report.run([runs], baseline="din-none")[0]["comparison"]    # re-augmented since: not these runs' labels
    assert comp["sample"] is None and "need the test labels" in comp["verdict"]
    assert "read the test labels" not in capsys.readouterr().err


def test_matplotlib_keeps_its_cache_in_seqpes_folder_where_home_cannot_be_written(monkeypatch, tmp_path):
    """With a read-only HOME, matplotlib printed two warning lines through `evaluate --quiet` (walk 45a #8): seqpe
    then points MPLCONFIGDIR at its own folder under the system's temporary folder; a writable HOME is left to
    matplotlib, and so is a MPLCONFIGDIR the user set."""
    import tempfile
    from pipeline import figures
    monkeypatch.delenv("MPLCONFIGDIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    figures.pyplot()
    assert "MPLCONFIGDIR" not in os.environ                          # writable: matplotlib's own folder
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))     # its cache folder cannot be made (walk 45h #2)
    figures.pyplot()
    assert os.environ["MPLCONFIGDIR"] == str(Path(tempfile.gettempdir()) / f"seqpe-{os.getuid()}" / "matplotlib")
    monkeypatch.delenv("MPLCONFIGDIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(os, "access", lambda path, mode: False)       # a read-only HOME
    figures.pyplot()
    assert os.environ["MPLCONFIGDIR"] == str(Path(tempfile.gettempdir()) / f"seqpe-{os.getuid()}" / "matplotlib")
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mine"))
    figures.pyplot()
    assert os.environ["MPLCONFIGDIR"] == str(tmp_path / "mine")
