"""pipeline/evaluate.py: the study grid's runs -> summary with std and 95% CI, tables and a figure."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from pipeline import evaluate as stage
from pipeline.errors import DataError
from pipeline.params import Params, from_dict

T2 = math.sqrt(2 * 0.95 ** 2 / (1 - 0.95 ** 2))   # t_{0.975, 2} in closed form


def write_run(root: Path, model: str, enc: str, seed: int, test: dict, dataset: str = "toyset"):
    d = root / f"{model}-{enc}" / f"seed-{seed}"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({
        "name": f"{model}-{enc}", "dataset": dataset, "protocol": "srgnn", "model": model, "encoding": enc,
        "seed": seed, "best_epoch": 2, "valid": {}, "test": test}))


def params(ks=(5, 10), grid: bool = False) -> Params:
    study = {"seeds": [1, 2, 3], "next_item": {"datasets": ["sample"], "models": ["sasrec"], "encodings": ["lpe"],
                                               "baselines": ["pop"]}, "ctr": {}}
    return from_dict(Params, {"evaluate": {"ks": list(ks)}, "study": study,
                              "datasets": ["sample"] if grid else []} if grid else {"evaluate": {"ks": list(ks)}})


def test_aggregation_math_summary_tables_and_figure(tmp_path):
    runs = tmp_path / "runs"
    for seed, (hr, nd) in zip((1, 2, 3), ((0.30, 0.10), (0.34, 0.14), (0.38, 0.12))):
        write_run(runs, "sasrec", "lpe", seed, {"hr@10": hr, "ndcg@10": nd, "hr@20": 0.9})
    write_run(runs, "pop", "none", 1, {"hr@10": 0.05, "ndcg@10": 0.01})
    (runs / ".sasrec-lpe.abc.tmp" / "seed-9").mkdir(parents=True)          # a run being written: ignored
    (runs / ".sasrec-lpe.abc.tmp" / "seed-9" / "run.json").write_text("{}")
    out = stage.run("toyset", runs, tmp_path / "reports", params())
    assert not (tmp_path / "reports" / "metrics.json").exists()      # per-configuration files come from train
    summary = json.loads((tmp_path / "reports" / "summary.json").read_text())
    [pop, sas] = summary["configs"]
    assert sas["seeds"] == [1, 2, 3] and set(sas["metrics"]) == {"hr@10", "ndcg@10"}   # hr@20 not in ks
    hr = sas["metrics"]["hr@10"]
    assert hr["std"] == pytest.approx(0.04) and hr["ci95"] == pytest.approx(T2 * 0.04 / math.sqrt(3))
    assert sas["metrics"]["ndcg@10"]["std"] == pytest.approx(0.02)
    assert pop["metrics"]["hr@10"] == {"mean": 0.05, "std": None, "ci95": None, "n": 1}
    assert [r["name"] for r in out["runs"]] == ["pop-none/seed-1", "sasrec-lpe/seed-1", "sasrec-lpe/seed-2",
                                                 "sasrec-lpe/seed-3"]
    assert (tmp_path / "reports" / "report.md").read_text().count("\n| toyset |") == 2 + 1   # + the comparison row
    assert (tmp_path / "reports" / "report.csv").read_text().splitlines()[0].startswith("dataset,protocol")


def test_a_folder_given_for_runs_that_is_not_one_names_the_runs_folder(tmp_path):
    """evaluate blamed a configuration's folder, a seed's or a samples folder on missing runs and told the user to
    train them again; report said "no run.json" of a samples folder (walk 34a)."""
    from pipeline import report
    from pipeline.io import write_json
    runs = tmp_path / "runs"
    for seed in (1, 2, 3):
        write_run(runs, "sasrec", "lpe", seed, {"hr@10": 0.3})
    samples = tmp_path / "samples"
    write_json(samples / "manifest.json", {"dataset": "toyset", "kind": "samples", "protocol": "srgnn", "shards": []})
    cases = [(runs / "sasrec-lpe", f"{runs / 'sasrec-lpe'} holds the seeds of one configuration \\(sasrec-lpe\\), not "
                                   f"a runs folder. Fix: pass the runs folder above it, {runs}"),
             (runs / "sasrec-lpe" / "seed-1", f"seed-1 is one seed's folder \\(sasrec-lpe/seed-1\\), not a runs folder. "
                                              f"Fix: pass the runs folder above it, {runs}"),
             (samples, "samples holds toyset's samples \\(manifest.json\\), not runs. Fix: pass its runs folder, e.g. "
                       "data/runs/toyset")]
    for folder, said in cases:
        with pytest.raises(DataError, match=said):
            stage.run("toyset", folder, tmp_path / "reports", params())
    with pytest.raises(DataError, match=cases[2][1]):
        report.run([samples])
    assert not (tmp_path / "reports").exists()
    write_run(tmp_path / "hand", "sasrec", "rope", 1, {"hr@10": 0.3}, dataset="sample")
    with pytest.raises(DataError, match="the study grid of 'sample' has no runs for .* or add --all to report the runs"):
        stage.run("sample", tmp_path / "hand", tmp_path / "reports", params(grid=True))   # a hand run outside the grid


def test_output_is_deterministic(tmp_path):
    runs = tmp_path / "runs"
    for seed in (2, 1):
        write_run(runs, "sasrec", "rope", seed, {"hr@10": 0.1 * seed})
    stage.run("toyset", runs, tmp_path / "a", params())
    stage.run("toyset", runs, tmp_path / "b", params())
    for name in ("summary.json", "report.md", "report.csv", "comparison.png", "comparison.csv", "curves.png"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_a_report_folder_holding_the_users_files_is_refused_not_swept(tmp_path):
    """Walk 39c #3: evaluate swaps its folder in whole, and a user's notes.txt beside a report it had written
    before went with the old folder, without a word."""
    runs = tmp_path / "runs"
    for seed in (1, 2):
        write_run(runs, "sasrec", "rope", seed, {"hr@10": 0.1 * seed})
    rep = tmp_path / "rep"
    stage.run("toyset", runs, rep, params())
    (rep / "notes.txt").write_text("mine")
    (rep / "mine").mkdir()
    (rep / "mine" / "a.txt").write_text("x")
    before = sorted(p.relative_to(rep).as_posix() for p in rep.rglob("*"))
    with pytest.raises(DataError, match=r"holds an evaluation report \(summary.json\) and files seqpe did not write "
                                        r"\(mine/a.txt, notes.txt\).*Fix: move mine/a.txt, notes.txt out of"):
        stage.run("toyset", runs, rep, params())
    assert sorted(p.relative_to(rep).as_posix() for p in rep.rglob("*")) == before
    (rep / "notes.txt").unlink()
    (rep / "mine" / "a.txt").unlink()
    (tmp_path / "elsewhere").mkdir()
    (rep / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(DataError, match=r"files seqpe did not write \(link, mine\)"):   # walk 40a #7: an empty
        stage.run("toyset", runs, rep, params())                # folder and a link to one went without a word
    (rep / "mine").rmdir()
    (rep / "link").unlink()
    stage.run("toyset", runs, rep, params())                     # its own files alone: replaced as before


def test_learning_curves_overlay_every_configuration(tmp_path):
    """curves.png: dvclive's files give one chart per seed and metric; evaluate overlays the configurations,
    the mean over the epochs every seed reached (early stopping ends seeds apart), a fitted baseline's level."""
    from pipeline import figures

    def history(losses, valids):
        return [{"epoch": e, "loss": l, "lr": 1e-3, "valid": {"ndcg@10": v, "hr@10": 2 * v}}
                for e, (l, v) in enumerate(zip(losses, valids), start=1)]

    runs = tmp_path / "runs"
    seeds = {1: ([3.0, 2.0, 1.5], [0.10, 0.20, 0.25], 3), 2: ([3.2, 2.2], [0.12, 0.16], 2)}   # seed 2 stopped early
    for seed, (losses, valids, best) in seeds.items():
        write_run(runs, "sasrec", "lpe", seed, {"hr@10": 0.3, "ndcg@10": 0.1})
        record = runs / "sasrec-lpe" / f"seed-{seed}" / "run.json"
        rec = json.loads(record.read_text())
        record.write_text(json.dumps({**rec, "history": history(losses, valids), "best_epoch": best,
                                      "select_metric": "ndcg@10"}))
    write_run(runs, "pop", "none", 1, {"hr@10": 0.05, "ndcg@10": 0.01})
    record = runs / "pop-none" / "seed-1" / "run.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "history": [
        {"epoch": 0, "loss": None, "lr": None, "valid": {"ndcg@10": 0.03}}]}))
    records = [json.loads(p.read_text()) for p in sorted(runs.rglob("run.json"))]
    assert figures.curve_metric(records, "hr@10") == "ndcg@10"          # what the runs selected on
    series = figures.curve_series(records, ["sasrec-lpe", "pop-none"], "ndcg@10")
    sas, pop = series["sasrec-lpe"], series["pop-none"]
    assert sas["mean_loss"] == [(1, pytest.approx(3.1)), (2, pytest.approx(2.1))]      # epoch 3: seed 1 alone
    assert sas["mean_valid"] == [(1, pytest.approx(11.0)), (2, pytest.approx(18.0))]   # x100 as the tables
    assert sas["best"] == [(3, pytest.approx(25.0)), (2, pytest.approx(16.0))] and len(sas["seeds"]) == 2
    assert sas["seeds"][0]["loss"] == [(1, 3.0), (2, 2.0), (3, 1.5)] and sas["fitted"] is None
    assert pop["fitted"] == pytest.approx(3.0) and pop["seeds"] == [] and pop["mean_valid"] == []
    stage.run("toyset", runs, tmp_path / "a", params())
    png = (tmp_path / "a" / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    record = runs / "sasrec-lpe" / "seed-2" / "run.json"            # the curves come from the histories
    rec = json.loads(record.read_text())
    record.write_text(json.dumps({**rec, "history": history([3.2, 1.0], [0.12, 0.30])}))
    stage.run("toyset", runs, tmp_path / "b", params())
    assert (tmp_path / "b" / "curves.png").read_bytes() != png
    assert (tmp_path / "b" / "comparison.png").read_bytes() == (tmp_path / "a" / "comparison.png").read_bytes()


@pytest.mark.parametrize("epochs", [1, 2, 3])
def test_curves_dot_only_the_best_epochs_and_a_one_epoch_mean(monkeypatch, epochs):
    """Two-epoch runs drew a dot at every epoch of the mean line, under a title saying "dots = each seed's best
    epoch" (walk 34a: dots at epoch 1 though every seed's best was 2); a one-epoch mean is still a point."""
    import matplotlib.axes
    from pipeline import figures
    drawn = []
    real = matplotlib.axes.Axes.plot

    def plot(self, *args, **kwargs):
        drawn.append((args, kwargs))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", plot)
    records = [{"name": "sasrec-lpe", "seed": seed, "best_epoch": epochs, "select_metric": "ndcg@10",
                "history": [{"epoch": e, "loss": 3.0 - e, "lr": 1e-3, "valid": {"ndcg@10": 0.1 * e + 0.01 * seed}}
                            for e in range(1, epochs + 1)]} for seed in (1, 2)]
    figures.curves_png(records, ["sasrec-lpe"], "ndcg@10", "t")
    dotted = [args[0] for args, kwargs in drawn if kwargs.get("marker") == "o" or "o" in args[2:]]
    best = [(epochs, epochs)]                              # each seed's best epoch (one call for both seeds)
    assert sorted(dotted) == sorted(best + ([(1,), (1,)] if epochs == 1 else []))   # + the loss and valid means


def test_figures_mark_a_configuration_whose_seeds_stopped_at_the_time_limit(tmp_path):
    """report.md says "3 (unfinished)"; the comparison bars and the curves' legend said nothing."""
    from pipeline import figures
    runs = tmp_path / "runs"
    for seed in (1, 2):
        write_run(runs, "sasrec", "lpe", seed, {"hr@10": 0.3 + 0.01 * seed, "ndcg@10": 0.1})
    stage.run("toyset", runs, tmp_path / "a", params())
    for seed in (1, 2):
        record = runs / "sasrec-lpe" / f"seed-{seed}" / "run.json"
        record.write_text(json.dumps({**json.loads(record.read_text()), "stopped": "time_limit"}))
    records = [json.loads(p.read_text()) for p in sorted(runs.rglob("run.json"))]
    assert figures.curve_series(records, ["sasrec-lpe"], "ndcg@10")["sasrec-lpe"]["unfinished"]
    summary = stage.run("toyset", runs, tmp_path / "b", params())
    assert summary["configs"][0]["unfinished"] == [1, 2]
    assert (tmp_path / "b" / "comparison.png").read_bytes() != (tmp_path / "a" / "comparison.png").read_bytes()
    assert "2 (unfinished)" in (tmp_path / "b" / "report.md").read_text()
    bars = (tmp_path / "b" / "comparison.csv").read_text()      # DVC's bar chart showed it as a finished one
    assert "sasrec-lpe hr@10 (unfinished)" in bars and "sasrec-lpe ndcg@10 (unfinished)" in bars


def test_one_seed_has_no_interval_in_the_figure_nor_the_csv(tmp_path):
    """Walk 43h #1: with one seed summary.json has ci95 null, but comparison.csv wrote ci_low = ci_high = mean and
    comparison.png drew a zero-width bar over "mean and 95% CI over seeds": certainty where no interval exists."""
    import csv
    from pipeline import figures
    runs = tmp_path / "runs"
    write_run(runs, "sasrec", "lpe", 1, {"hr@10": 0.3, "ndcg@10": 0.1})
    write_run(runs, "sasrec", "none", 1, {"hr@10": 0.2, "ndcg@10": 0.05})
    stage.run("toyset", runs, tmp_path / "a", params())
    bars = list(csv.DictReader((tmp_path / "a" / "comparison.csv").read_text().splitlines()))
    assert len(bars) == 4 and all(b["ci_low"] == b["ci_high"] == "" for b in bars)
    rows = json.loads((tmp_path / "a" / "summary.json").read_text())["configs"]
    one = figures.comparison_png(rows, ["hr@10"], "t", None, {})
    twin = [dict(r, metrics={"hr@10": {**r["metrics"]["hr@10"], "ci95": 1e-9}}) for r in rows]
    assert one != figures.comparison_png(twin, ["hr@10"], "t", None, {})   # no error bar drawn, another label
    write_run(runs, "sasrec", "lpe", 2, {"hr@10": 0.32, "ndcg@10": 0.1})  # beside a row with seeds: its CI only
    stage.run("toyset", runs, tmp_path / "b", params())
    bars = {b["configuration"]: b for b in csv.DictReader((tmp_path / "b" / "comparison.csv").read_text().splitlines())}
    assert bars["sasrec-none"]["ci_low"] == "" and float(bars["sasrec-lpe"]["ci_low"]) < 0.31


def test_the_comparison_names_a_bars_protocol_and_seeds_where_they_differ():
    """comparison.png / .csv drew HR@10 among 20 sampled candidates as a bar beside full-ranking ones on one axis,
    unlabelled, under a title naming seeds a configuration did not have (walk 31a)."""
    import csv
    from pipeline import figures
    stat = {"hr@10": {"mean": 0.5, "ci95": 0.01}}
    rows = [{"name": "sasrec-lpe", "protocol": "full ranking", "seeds": [1, 2, 3], "metrics": stat},
            {"name": "sasrec-lpe-cand", "protocol": "20 sampled candidates", "seeds": [1, 2, 3], "metrics": stat},
            {"name": "parec-parec", "protocol": "full ranking", "seeds": [1], "metrics": stat}]
    assert [figures._bar_label(r, rows) for r in rows] == [
        "sasrec-lpe (full ranking)", "sasrec-lpe-cand (20 sampled candidates)", "parec-parec (full ranking; seed 1)"]
    bars = list(csv.DictReader(figures.comparison_csv(rows, ["hr@10"]).splitlines()))
    assert [(b["bar"], b["protocol"]) for b in bars][1] == ("sasrec-lpe-cand hr@10 (20 sampled candidates)",
                                                           "20 sampled candidates")
    one = [dict(r, protocol="full ranking", seeds=[1, 2, 3]) for r in rows]
    assert [figures._bar_label(r, one) for r in one] == [r["name"] for r in one]     # nothing to set apart


def test_comparison_csv_keeps_a_rates_interval_within_its_bounds(tmp_path):
    """Two seeds 0.0 and 0.9: the t-interval runs to about -5.3 and +6.2, which no HR@10 can be."""
    from pipeline import figures
    runs = tmp_path / "runs"
    for seed, hr in ((1, 0.0), (2, 0.9)):
        write_run(runs, "sasrec", "lpe", seed, {"hr@10": hr, "logloss": 0.5 + hr})
    summary = stage.run("toyset", runs, tmp_path / "reports", params())
    row = summary["configs"][0]
    assert row["metrics"]["hr@10"]["ci95"] > 1.0                       # the statistic itself is kept
    csv_rows = figures.comparison_csv([row], ["hr@10", "logloss"]).splitlines()[1:]
    lines = {line.split(",")[1]: line.split(",") for line in csv_rows}
    assert (float(lines["hr@10"][3]), float(lines["hr@10"][4])) == (0.0, 1.0)
    assert float(lines["logloss"][3]) < 0.0                              # a loss has no such bound


@pytest.mark.parametrize("metric,means,halves", [
    ("auc", [53.81, 52.93, 53.85, 53.01], [0.2, 0.3, 0.1, 0.4]),     # close AUCs above chance: the axis from 50
    ("ndcg@10", [39.70, 39.68, 39.61], [0.0, 0.0, 0.0]),               # one seed each: no interval, no spread
    ("hr@10", [12.0, 88.0], [1.0, 30.0]),                              # an interval past 100
    ("logloss", [0.6931, 0.6925], [0.001, 0.002])])
def test_the_comparison_axis_leaves_room_for_the_longest_bars_value(metric, means, halves):
    """The right pad was a quarter of the means' spread: the closer the configurations (an encoding study's usual
    case), the less of the top label showed, "53.81" drawn as "5"."""
    from pipeline import figures
    left, right, hi = figures.axis_range(metric, means, halves)
    assert left <= min(means) and hi >= max(means) and hi <= (100.0 if metric != "logloss" else hi)
    assert (right - hi) / (right - left) >= 0.13                        # about 0.6 inch of a 5.2-inch panel


def test_cut_offs_the_runs_never_computed_are_named(tmp_path, capfd):
    """evaluate.ks edited to [15] after training: matplotlib's "Number of columns must be a positive integer";
    with some of the asked cut-offs computed the report left the others out without a word (walk 32b)."""
    write_run(tmp_path / "runs", "sasrec", "lpe", 1, {"hr@10": 0.3, "ndcg@10": 0.1, "hr@20": 0.5})
    with pytest.raises(DataError, match=r"evaluate.ks asks for @15, @50, none of which sasrec-lpe seed 1 computed "
                                        r"\(it has @10, @20\).*retrain them with the new ks"):
        stage.run("toyset", tmp_path / "runs", tmp_path / "reports", params(ks=(15, 50)))
    assert not (tmp_path / "reports").exists()
    capfd.readouterr()
    stage.run("toyset", tmp_path / "runs", tmp_path / "reports", params(ks=(15, 20)))      # some: reported
    assert capfd.readouterr().err == ("note: evaluate.ks asks for @15, @20, and sasrec-lpe (seed 1) was trained "
                                      "without @15: its row leaves it out (retrain it with these ks to have it)\n")


def test_missing_runs_are_errors(tmp_path):
    with pytest.raises(DataError, match=r"run `seqpe train toyset` first"):
        stage.run("toyset", tmp_path / "none", tmp_path / "reports", params())
    write_run(tmp_path / "runs", "sasrec", "lpe", 1, {"hr@10": 0.1}, dataset="other")
    with pytest.raises(DataError, match="no runs of dataset 'toyset'"):
        stage.run("toyset", tmp_path / "runs", tmp_path / "reports", params())
    assert not (tmp_path / "reports").exists()


def test_the_study_grid_is_reported_in_grid_order_without_hand_runs(tmp_path):
    runs = tmp_path / "runs"
    for seed in (1, 2, 3):
        write_run(runs, "sasrec", "lpe", seed, {"hr@10": 0.3 + seed / 100, "ndcg@10": 0.1}, dataset="sample")
        write_run(runs, "pop", "none", seed, {"hr@10": 0.05, "ndcg@10": 0.01}, dataset="sample")
    write_run(runs, "sasrec", "alibi", 1, {"hr@10": 0.9, "ndcg@10": 0.9}, dataset="sample")   # a hand run
    summary = stage.run("sample", runs, tmp_path / "reports", params(grid=True))
    assert [c["name"] for c in summary["configs"]] == ["sasrec-lpe", "pop-none"]
    assert summary["reference"] == "sasrec-lpe" and summary["task"] == "next_item"
    csv_text = (tmp_path / "reports" / "comparison.csv").read_text().splitlines()
    assert csv_text[0] == "configuration,metric,mean,ci_low,ci_high,seeds,bar,protocol" and len(csv_text) == 1 + 2 * 2
    import csv
    assert [r["bar"] for r in csv.DictReader(csv_text)] == [          # DVC's bars: one per configuration and metric
        "sasrec-lpe hr@10", "pop-none hr@10", "sasrec-lpe ndcg@10", "pop-none ndcg@10"]
    png = (tmp_path / "reports" / "comparison.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    every = stage.run("sample", runs, tmp_path / "all", params(grid=True), all_runs=True)
    assert [c["name"] for c in every["configs"]] == ["sasrec-lpe", "pop-none", "sasrec-alibi"]   # grid first
    assert every["reference"] == "sasrec-lpe"          # as without --all (was pop-none, the first in sorted order)
    assert every["left_out"] == []
    write_run(runs, "sasrec", "alibi", 2, {"hr@10": 0.8, "ndcg@10": 0.8}, dataset="sample")
    path = runs / "sasrec-alibi" / "seed-2" / "run.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "train": {"epochs": 3}}))
    every = stage.run("sample", runs, tmp_path / "all", params(grid=True), all_runs=True)   # seeds that differ
    assert [c["name"] for c in every["configs"]] == ["sasrec-lpe", "pop-none"]              # left out, and said so
    assert [(e["configuration"], e["seeds"]) for e in every["left_out"]] == [("sasrec-alibi", [1, 2])]
    assert json.loads((tmp_path / "all" / "summary.json").read_text())["left_out"][0]["reason"].startswith(
        "sample sasrec-alibi: seed 1 and seed 2 were trained with different settings (train.epochs: ")
    assert "Left out of this report (their seeds cannot be pooled into one row): sample sasrec-alibi: seed 1 and " \
        "seed 2" in (tmp_path / "all" / "report.md").read_text()
    shutil.rmtree(runs / "sasrec-alibi")
    (runs / "pop-none" / "seed-3" / "run.json").unlink()
    with pytest.raises(DataError, match="the study grid of 'sample' has no runs for pop-none/seed-3.*"
                                        "--model pop --encoding none"):     # named, not M / E (walk 40e #5)
        stage.run("sample", runs, tmp_path / "r2", params(grid=True))


def test_the_reference_applies_to_its_own_grid_and_is_checked_with_the_params(tmp_path):
    """study.reference is one name for both grids: a next-item reference made evaluate fail for every CTR
    dataset (and a CTR one for every next-item dataset), after the whole grid had trained."""
    from pipeline.errors import ParamsError
    runs = tmp_path / "runs"
    for seed in (1, 2, 3):
        write_run(runs, "sasrec", "lpe", seed, {"hr@10": 0.3 + seed / 100, "ndcg@10": 0.1}, dataset="sample")
        write_run(runs, "pop", "none", seed, {"hr@10": 0.05, "ndcg@10": 0.01}, dataset="sample")

    def with_reference(ref):
        study = {"seeds": [1, 2, 3], "reference": ref,
                 "next_item": {"datasets": ["sample"], "models": ["sasrec"], "encodings": ["lpe"], "baselines": ["pop"]},
                 "ctr": {"datasets": ["sample_ctr"], "models": ["din"], "encodings": ["none"]}}
        return from_dict(Params, {"study": study, "datasets": ["sample", "sample_ctr"]})

    assert stage.run("sample", runs, tmp_path / "a", with_reference("pop-none"))["reference"] == "pop-none"
    assert stage.run("sample", runs, tmp_path / "b", with_reference("din-none"))["reference"] == "sasrec-lpe"
    with pytest.raises(ParamsError, match=r"'study.reference' is 'sasrec-lpee', not a configuration of the study "
                                          r"grid. Fix: did you mean 'sasrec-lpe'\?"):
        with_reference("sasrec-lpee")


def test_a_baseline_run_by_hand_beside_the_grid_points_at_all(tmp_path):
    """--baseline sasrec-alibi, a hand run in the grid's runs folder, was "not a configuration of these runs. Fix:
    did you mean 'sasrec-lpe'?": it was right there, and only --all reports it."""
    from pipeline.errors import ParamsError
    runs = tmp_path / "runs"
    for seed in (1, 2, 3):
        write_run(runs, "sasrec", "lpe", seed, {"hr@10": 0.3 + seed / 100, "ndcg@10": 0.1}, dataset="sample")
        write_run(runs, "pop", "none", seed, {"hr@10": 0.05, "ndcg@10": 0.01}, dataset="sample")
        write_run(runs, "sasrec", "alibi", seed, {"hr@10": 0.2 + seed / 100, "ndcg@10": 0.1}, dataset="sample")
    with pytest.raises(ParamsError, match=r"baseline 'sasrec-alibi' has runs under .*runs but is not in the study "
                                          r"grid of 'sample'.*Fix: add --all to report every configuration"):
        stage.run("sample", runs, tmp_path / "a", params(grid=True), baseline="sasrec-alibi")
    assert not (tmp_path / "a").exists()
    assert stage.run("sample", runs, tmp_path / "a", params(grid=True), baseline="sasrec-alibi",
                     all_runs=True)["reference"] == "sasrec-alibi"
    with pytest.raises(ParamsError, match=r"baseline 'sasrec-lpee' is not a configuration of these runs"):
        stage.run("sample", runs, tmp_path / "b", params(grid=True), baseline="sasrec-lpee")


def test_a_report_inside_the_runs_folder_it_reads_is_refused(tmp_path):
    """Walk 35b: `evaluate X RUNS RUNS/rep` and `RUNS/pop-none/rep` (a configuration folder not trained yet) wrote
    the report where train then put seeds beside it, inside a folder `dvc repro` replaces whole."""
    runs = tmp_path / "runs"
    write_run(runs, "sasrec", "lpe", 1, {"hr@10": 0.3})
    with pytest.raises(DataError, match=r"runs/rep is inside .*runs, which holds toyset's runs \(MODEL-ENCODING/"
                                        r"seed-N\).*Fix: pass a path outside it \(e.g. data/reports/toyset\)"):
        stage.run("toyset", runs, runs / "rep", params(), all_runs=True)     # (io.refuse_nested, walk 43c #2)
    with pytest.raises(DataError, match=r"report folder .* is inside the runs folder it reports \(.*runs\), "
                                        r"where `seqpe train` writes .*Fix: pass a folder outside it, e.g. "
                                        r"data/reports/toyset"):
        stage.run("toyset", runs, runs / "pop-none" / "rep", params(), all_runs=True)
    assert sorted(p.name for p in runs.iterdir()) == ["sasrec-lpe"]
    assert stage.run("toyset", runs, tmp_path / "rep", params())["configs"]


def test_reports_never_land_among_a_users_files(tmp_path):
    """evaluate used to write report.md & co. into any folder, over a user's own report.md."""
    runs = tmp_path / "runs"
    write_run(runs, "sasrec", "rope", 1, {"hr@10": 0.1})
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my notes")
    with pytest.raises(DataError, match=r"mine holds files seqpe did not write \(report.md\)"):
        stage.run("toyset", runs, mine, params())
    assert [p.name for p in mine.iterdir()] == ["report.md"] and (mine / "report.md").read_text() == "my notes"
    stage.run("toyset", runs, tmp_path / "rep", params())
    stage.run("toyset", runs, tmp_path / "rep", params())                  # its own report: replaced
    write_run(tmp_path / "runs2", "sasrec", "rope", 1, {"hr@10": 0.1}, dataset="other")
    with pytest.raises(DataError, match="holds toyset's evaluation report"):
        stage.run("other", tmp_path / "runs2", tmp_path / "rep", params())


def test_the_grid_check_names_every_configuration_trained_otherwise():
    """Walk 39f #2: only the first stale configuration was named, and its hand fix (`seqpe train` of that one)
    met the next refusal, one configuration at a time."""
    import dataclasses
    from pipeline.params import to_dict
    from pipeline.train.stage import resolve_config
    p = params(grid=True)
    p = dataclasses.replace(p, study=dataclasses.replace(p.study, next_item=dataclasses.replace(
        p.study.next_item, encodings=["none", "lpe", "rope", "rmha", "cape"], baselines=[])))
    records = []
    for enc in ("none", "lpe", "rope", "rmha", "cape"):
        _, q, spec, _, tp, applied, _ = resolve_config("sample", {}, p, "sasrec", enc, machine=False)
        records.append({"name": f"sasrec-{enc}", "seed": 1, "train": {**to_dict(tp), "lr": tp.lr * 2},
                        "evaluate": to_dict(q.evaluate), "options": q.models.get("sasrec", {}),
                        "encoding_options": q.encodings.get(enc, {}), "preset": applied.record()})
    with pytest.raises(DataError, match=r"sasrec-cape seed 1 under runs was trained with other settings than the "
                                        r"params give the study grid of 'sample' now \(train.lr: .* vs .*\), and so "
                                        r"were sasrec-lpe, sasrec-none, sasrec-rmha and 1 more: the report would show "
                                        r"them as the grid's\. Fix: run `dvc repro` to retrain the grid as the params "
                                        r"say, or add --all"):
        stage._check_trained_as_grid("sample", records, p, "next_item", Path("runs"))
    stage._check_trained_as_grid("sample", [{**r, "train": {**r["train"], "lr": r["train"]["lr"] / 2}}
                                            for r in records], p, "next_item", Path("runs"))      # as the grid says


def test_the_grid_check_takes_auto_as_what_it_picks_and_refuses_another_metric():
    """Walk 43i #1: with `select_metric: auto` resolved when a run trains (walk 43d #1), the grid check took a
    hand run's --set train.select_metric=hr@10 as the grid's `auto`. Old records (`auto`) and new ones (ndcg@10)
    are the grid's; hr@10 is not."""
    from pipeline.params import to_dict
    from pipeline.train.stage import resolve_config
    p = params(grid=True)
    _, q, spec, _, tp, applied, _ = resolve_config("sample", {}, p, "sasrec", "lpe", machine=False)
    assert tp.select_metric == "auto"
    base = {"name": "sasrec-lpe", "seed": 1, "evaluate": to_dict(q.evaluate), "options": q.models.get("sasrec", {}),
            "encoding_options": q.encodings.get("lpe", {}), "preset": applied.record()}
    for recorded, picked in (("auto", "ndcg@10"), ("ndcg@10", "ndcg@10")):
        stage._check_trained_as_grid("sample", [{**base, "train": {**to_dict(tp), "select_metric": recorded},
                                                 "select_metric": picked}], p, "next_item", Path("runs"))
    with pytest.raises(DataError, match=r"sasrec-lpe seed 1 under runs was trained with other settings .*"
                                        r"train.select_metric"):
        stage._check_trained_as_grid("sample", [{**base, "train": {**to_dict(tp), "select_metric": "hr@10"},
                                                 "select_metric": "hr@10"}], p, "next_item", Path("runs"))
