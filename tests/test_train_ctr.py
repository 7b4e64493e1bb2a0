"""The train stage on CTR data (CAPE 001 §5): the same `seqpe train` as next-item data, with pointwise
BCE, selection on valid AUC, AUC / gAUC / logloss and per-sample logits; the wrong kind of model is a
one-line error naming the ones that fit; on the embedded planted dataset a position-aware encoding
learns what `none` cannot."""
from __future__ import annotations

import dataclasses

import json
from pathlib import Path

import polars as pl
import pytest

from pipeline import augment, download, preprocess
from pipeline import train as stage
from pipeline.errors import ParamsError
from pipeline.train.stage import CONSTANT_SPAN
from pipeline.params import DownloadParams, Params, PreprocessParams, SampleCTRParams, from_dict
from test_cli import assert_one_line_error, seqpe

SMALL = SampleCTRParams(users=300, items=200, cates=12, min_length=5, max_length=12, seed=7)


@pytest.fixture(scope="module")
def ctr_samples(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("ctr")
    p = Params(preprocess=PreprocessParams(sample_ctr=SMALL))
    download.run("sample_ctr", d / "raw", DownloadParams(), progress=False, sample=SMALL)
    preprocess.run("sample_ctr", d / "raw", d / "sessions", p)
    augment.run("sample_ctr", d / "sessions", d / "samples", p)
    return d / "samples"


def params(model: str = "sasrec_ctr", encoding: str = "cape", **train) -> Params:
    base = dict(epochs=3, batch_size=128, lr=0.005, dim=16, layers=1, heads=1, dropout=0.0, max_len=12,
                patience=0, device="cpu", threads=1)
    base.update(train)
    return from_dict(Params, {"datasets": [], "train": base, "study": {"seeds": [1], "ctr": {
        "models": [model], "encodings": [encoding]}, "next_item": {"datasets": [], "models": [], "encodings": [],
                                                                   "baselines": []}},
        "models": {model: {}}, "encodings": {encoding: {}}})


def test_a_ctr_run_records_auc_gauc_logloss_and_per_sample_logits(ctr_samples, tmp_path):
    [res] = stage.run("sample_ctr", ctr_samples, tmp_path / "runs", params(), progress=False)
    record = json.loads((tmp_path / "runs" / "sasrec_ctr-cape" / "seed-1" / "run.json").read_text())
    assert record["task"] == "ctr" and record["select_metric"] == "auc"
    assert set(record["test"]) == {"auc", "gauc", "logloss"} and 0 <= record["test"]["auc"] <= 1
    assert record["best_epoch"] == max(record["history"], key=lambda h: h["valid"]["auc"])["epoch"]
    logits = pl.read_parquet(tmp_path / "runs" / "sasrec_ctr-cape" / "seed-1" / "test_samples.parquet")
    assert logits.columns == ["logit"] and logits.height == record["samples"]["test"]
    again = stage.run("sample_ctr", ctr_samples, tmp_path / "again", params(), progress=False)
    assert again[0]["test"] == res["test"]                                  # same seed, same numbers


def _relabel(src: Path, dst: Path, split: str, **columns) -> Path:
    """A copy of the samples folder `src` whose `split` shard has `columns` (name: expression) replaced."""
    import shutil
    from pipeline.io import read_json, sha256_file, write_json
    shutil.copytree(src, dst)
    manifest = read_json(dst / "manifest.json")
    for shard in manifest["shards"]:
        if shard["path"].startswith(f"{split}/"):
            path = dst / shard["path"]
            pl.read_parquet(path).with_columns(**columns).write_parquet(path)
            shard["sha256"] = sha256_file(path)
    write_json(dst / "manifest.json", manifest)
    return dst


def test_a_split_where_gauc_is_undefined_records_the_other_metrics(ctr_samples, tmp_path):
    """Walk 36b: a test split where every user has one class (no user with both labels) recorded gAUC NaN in
    run.json, and `seqpe report` / `evaluate` then refused the run for good. gAUC is left out there with a note;
    a split of one label (AUC undefined too) is refused before training."""
    from pipeline.errors import DataError
    from pipeline.report import aggregate, find_runs
    samples = _relabel(ctr_samples, tmp_path / "one-class", "test", user=pl.int_range(pl.len()) + 10_000_000)
    res = stage.run("sample_ctr", samples, tmp_path / "runs", params(epochs=1), progress=False)
    record = json.loads((tmp_path / "runs" / "sasrec_ctr-cape" / "seed-1" / "run.json").read_text())
    assert set(record["test"]) == {"auc", "logloss"} == set(res[0]["test"])
    assert set(record["valid"]) == {"auc", "gauc", "logloss"}                 # defined on valid: kept
    [row] = aggregate(find_runs([tmp_path / "runs"]))
    assert set(row["metrics"]) == {"auc", "logloss"}
    with pytest.raises(DataError, match="gAUC is undefined there. Fix: set train.select_metric auc"):
        stage.run("sample_ctr", _relabel(ctr_samples, tmp_path / "v", "valid", user=pl.int_range(pl.len())),
                  tmp_path / "runs2", params(epochs=1, select_metric="gauc"), progress=False)
    with pytest.raises(DataError, match=r"the test split of .* holds only non-clicks \([\d,]+ rows\): AUC is undefined"):
        stage.run("sample_ctr", _relabel(ctr_samples, tmp_path / "zero", "test", label=pl.lit(0, pl.Int32)),
                  tmp_path / "runs3", params(epochs=1), progress=False)
    assert not (tmp_path / "runs2").exists() and not (tmp_path / "runs3").exists()


def test_a_constant_model_stops_the_run_instead_of_reporting_chance(ctr_samples, tmp_path):
    """DIN under a huge weight decay gave every test pair the same logit (within 1.7e-6) and its AUC, float noise
    around 0.5, was reported and tested like a result; now the seed stops in one line and writes nothing."""
    from pipeline.errors import TrainingError
    with pytest.raises(TrainingError, match=r"sample_ctr din-none seed 1: the model is constant, its \d+ test logits "
                                            r"span .* so its AUC \(\d+\.\d\d\) is chance, not a result"):
        stage.run("sample_ctr", ctr_samples, tmp_path / "runs", params("din", "none", weight_decay=100.0, lr=0.01),
                  progress=False)
    assert not (tmp_path / "runs" / "din-none" / "seed-1").exists()
    from pipeline.train.runs import state_root
    assert list(state_root().rglob("*")) == []            # no resume file (resumed, it is refused again), no lock
    stage.run("sample_ctr", ctr_samples, tmp_path / "runs", params("din", "none"), progress=False)
    logits = pl.read_parquet(tmp_path / "runs" / "din-none" / "seed-1" / "test_samples.parquet")["logit"]
    assert logits.max() - logits.min() > 100 * CONSTANT_SPAN                 # a model that learnt is far from it
    import numpy as np
    from pipeline.errors import ConstantModel
    from pipeline.train.stage import _refuse_constant
    near = np.array([300.0, np.nextafter(np.float32(300.0), np.float32(400.0))], dtype=np.float32)
    with pytest.raises(ConstantModel):                   # walk 36b: one float32 step at 300 (3e-5) passed as a spread
        _refuse_constant(near, {"auc": 0.5}, "x", 1)
    _refuse_constant(np.array([0.0, 2e-5], dtype=np.float32), {"auc": 0.5}, "x", 1)   # near 0: the absolute span
    _refuse_constant(np.float32(300) + np.arange(40, dtype=np.float32) * np.float32(6.1e-5), {"auc": 0.99}, "x", 1)
    # (walk 36c: 1e-5 x |logit| refused 40 distinct logits near 300 spanning 0.0024 that separated the labels)


def test_logloss_selection_minimises(ctr_samples, tmp_path):
    stage.run("sample_ctr", ctr_samples, tmp_path / "runs", params(select_metric="logloss"), progress=False)
    record = json.loads((tmp_path / "runs" / "sasrec_ctr-cape" / "seed-1" / "run.json").read_text())
    assert record["best_epoch"] == min(record["history"], key=lambda h: h["valid"]["logloss"])["epoch"]


def test_models_of_the_other_task_are_refused_naming_the_ones_that_fit(ctr_samples, tmp_path):
    with pytest.raises(ParamsError, match="model 'sasrec' is a next-item model, but these samples are CTR data"
                                          ".*din.*sasrec_ctr"):
        stage.run("sample_ctr", ctr_samples, tmp_path / "runs", params(), model="sasrec", encoding="lpe",
                  progress=False)
    proc = seqpe("train", "sample_ctr", str(ctr_samples), str(tmp_path / "r"), "--model", "pop", "--quiet")
    assert_one_line_error(proc, "model 'pop' is a next-item model", "use one of: bst, dien, din, dmin, sasrec_ctr")
    assert not (tmp_path / "r").exists()


def test_next_item_loss_and_objective_settings_are_refused_for_ctr_models(ctr_samples, tmp_path):
    """train.loss=bce on DIN gave outputs byte-identical to ce, recorded as bce (report then would not pool them)."""
    with pytest.raises(ParamsError, match=r"train.loss is bce, and CTR models such as 'din' train on the log loss.*"
                                          r"Fix: set train.loss: ce under study.ctr.train"):
        stage.run("sample_ctr", ctr_samples, tmp_path / "runs", params("din", "none", loss="bce"), progress=False)
    proc = seqpe("train", "sample_ctr", str(ctr_samples), str(tmp_path / "r"), "--model", "din", "--quiet",
                 "--set", "train.objective=sequence")
    assert_one_line_error(proc, "train.objective is sequence, and CTR models such as 'din'",
                          "Fix: drop --set train.objective=sequence")
    proc = seqpe("train", "sample_ctr", str(ctr_samples), str(tmp_path / "r"), "--model", "din", "--quiet",
                 "--set", "train.ce_impl=cce")                      # was accepted and recorded as if it applied
    assert_one_line_error(proc, "train.ce_impl is cce, and CTR models such as 'din'", "Fix: drop --set train.ce_impl=cce")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "r").exists()


def test_a_ctr_head_count_need_divide_only_the_item_width(ctr_samples, tmp_path):
    """BST splits the item width (fields x train.dim), not train.dim, into heads: dim 10 with 2 fields and 4 heads
    is a valid BST, which the params file refused ("'train.dim' (10) must be divisible by 'train.heads' (4)")."""
    stage.run("sample_ctr", ctr_samples, tmp_path / "runs", params("bst", "none", dim=10, heads=4), model="bst",
              encoding="none", progress=False, check=True)
    with pytest.raises(ParamsError, match=r"item width 20 \(train.dim 10 x 2 fields\) is not divisible by "
                                          r"train.heads \(3\)"):
        stage.run("sample_ctr", ctr_samples, tmp_path / "runs", params("bst", "none", dim=10, heads=3), model="bst",
                  encoding="none", progress=False, check=True)


@pytest.mark.parametrize("model, key", [("din", "layers"), ("din", "heads"), ("dien", "layers"), ("dmin", "layers")])
def test_a_depth_or_head_count_a_backbone_lacks_is_refused_when_given(ctr_samples, tmp_path, model, key):
    """`--set train.layers=7` on DIN trained byte-identical predictions, recorded layers 7, and replaced the
    run of layers 2 as one "trained with other settings" (walk 30)."""
    proc = seqpe("train", "sample_ctr", str(ctr_samples), str(tmp_path / "r"), "--model", model, "--quiet",
                 "--set", f"train.{key}=4")
    assert_one_line_error(proc, f"train.{key} is 4, and '{model}' does not read train.{key}: the setting would be ignored",
                          f"Fix: drop --set train.{key}=4")
    assert not (tmp_path / "r").exists()


def test_keys_a_backbone_lacks_are_recorded_as_null_and_do_not_retrain_it(ctr_samples, tmp_path, capsys):
    """From params.yaml (the grid's one train section), DIN's run recorded layers and heads it never reads, and
    raising train.layers for SASRec replaced the finished DIN seed with a byte-identical one."""
    runs = tmp_path / "runs"
    [first] = stage.run("sample_ctr", ctr_samples, runs, params("din", "lpe", layers=1, heads=1), progress=False)
    record = json.loads((runs / "din-lpe" / "seed-1" / "run.json").read_text())
    assert record["train"]["layers"] is None and record["train"]["heads"] is None
    assert record["train"]["dim"] == 16                                        # the keys DIN reads stay
    before = (runs / "din-lpe" / "seed-1" / "run.json").stat().st_mtime_ns
    capsys.readouterr()
    [again] = stage.run("sample_ctr", ctr_samples, runs, params("din", "lpe", layers=3, heads=2), progress=False)
    assert again["test"] == first["test"] and "other settings" not in capsys.readouterr().err
    assert (runs / "din-lpe" / "seed-1" / "run.json").stat().st_mtime_ns == before     # kept, not retrained


def test_bst_without_layers_refuses_an_encoding_that_acts_only_in_attention(ctr_samples, tmp_path):
    """bst-cape, bst-rope and bst-alibi at train.layers 0 gave predictions byte-identical to bst-none (walk 30)."""
    for encoding in ("cape", "rope", "alibi"):
        with pytest.raises(ParamsError, match=rf"train.layers is 0, so bst has no attention layer, and {encoding} "
                                              r"acts only inside them: the run would be --encoding none"):
            stage.run("sample_ctr", ctr_samples, tmp_path / "runs", params("bst", encoding, layers=0, epochs=1),
                      progress=False)
    assert not (tmp_path / "runs").exists()
    stage.run("sample_ctr", ctr_samples, tmp_path / "runs", params("bst", "lpe", layers=0, epochs=1), progress=False)


def test_memory_budget_and_ranking_protocol_settings_are_refused_or_reset_for_ctr(ctr_samples, tmp_path):
    """train.memory_budget was silently ignored for CTR (and recorded); --set evaluate.candidates=100 on DIN
    was recorded and the report labelled the run "100 sampled candidates". From params.yaml (one file for
    the whole grid) the ranking keys are reset for a CTR run instead."""
    with pytest.raises(ParamsError, match=r"train.memory_budget is 64.0, and CTR models such as 'din'.*"
                                          r"Fix: set train.memory_budget: 0.0 under study.ctr.train"):
        stage.run("sample_ctr", ctr_samples, tmp_path / "runs", params("din", "none", memory_budget=64),
                  progress=False)
    with pytest.raises(ParamsError, match=r"train.bucket is 0, and CTR models such as 'din'.*"   # walk 37c: passed
                                          r"Fix: set train.bucket: 50 under study.ctr.train"):    # --check, unread
        stage.run("sample_ctr", ctr_samples, tmp_path / "runs", params("din", "none", bucket=0), progress=False)
    for flag in ("evaluate.candidates=100", "evaluate.mask_history=true"):
        proc = seqpe("train", "sample_ctr", str(ctr_samples), str(tmp_path / "r"), "--model", "din", "--quiet",
                     "--set", flag)
        assert_one_line_error(proc, f"{flag.split('=')[0]} sets how next-item targets are ranked, and CTR models "
                                    f"such as 'din' are scored by log loss and AUC", f"Fix: drop --set {flag}")
    # cut-offs too (walk 32b: --set evaluate.ks=[5] was recorded, so seed 2 would not pool with seed 1)
    proc = seqpe("train", "sample_ctr", str(ctr_samples), str(tmp_path / "r"), "--model", "din", "--quiet",
                 "--set", "evaluate.ks=[5]")
    assert_one_line_error(proc, "evaluate.ks sets the cut-offs of the ranking metrics, and CTR models such as 'din' "
                                "are scored by log loss and AUC", "Fix: drop --set evaluate.ks=[5]")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "r").exists()
    p = params("din", "none", epochs=1)
    p = dataclasses.replace(p, evaluate=dataclasses.replace(p.evaluate, candidates=100, mask_history=True, ks=[3]))
    stage.run("sample_ctr", ctr_samples, tmp_path / "runs", p, progress=False)
    record = json.loads((tmp_path / "runs" / "din-none" / "seed-1" / "run.json").read_text())
    assert record["evaluate"]["candidates"] == 0 and record["evaluate"]["mask_history"] is False
    assert record["evaluate"]["ks"] == [5, 10, 20]
    from pipeline.report import protocol_label
    assert protocol_label(record) == record["protocol"]


def test_a_ctr_model_on_next_item_data_is_refused(tmp_path):
    from test_train import make_samples
    samples = make_samples(tmp_path / "samples")
    proc = seqpe("train", "toyset", str(samples), str(tmp_path / "r"), "--model", "din", "--encoding", "none",
                 "--quiet")
    assert_one_line_error(proc, "model 'din' is a CTR model, but these samples are next-item data", "sasrec")


def test_a_position_aware_encoding_learns_the_planted_signal_that_none_cannot(ctr_samples, tmp_path):
    """sample_ctr's clicks follow the category two steps back; negatives come from categories the user
    HAS seen, at the wrong position (pipeline/datasets/ctr_sample.py). Without positions the classes
    are indistinguishable (test AUC ~0.5); with CAPE, DIN separates them. Margin >= 0.15 (seen on this
    300-user sample: cape 0.767, none 0.477; on the default 800-user sample with the study grid's
    settings, 6 epochs of lr 0.005, seeds 1 and 2: cape 0.892 / 0.909, none 0.494 / 0.489)."""
    aucs = {}
    for encoding in ("none", "cape"):
        [res] = stage.run("sample_ctr", ctr_samples, tmp_path / encoding,
                          params("din", encoding, epochs=6, lr=0.005), progress=False)
        aucs[encoding] = res["test"]["auc"]
    assert aucs["none"] < 0.6 and aucs["cape"] > aucs["none"] + 0.15, aucs


def test_a_hand_evaluate_takes_the_datasets_samples_folder_for_the_per_sample_tests(ctr_samples, tmp_path):
    """`seqpe evaluate sample_ctr` by hand left every CTR row without its per-sample tests ("pass the samples
    folder (--samples)") though data/samples/sample_ctr was there, the folder dvc.yaml passes (walk 30)."""
    import shutil
    project = tmp_path / "project"
    shutil.copytree(ctr_samples, project / "data" / "samples" / "sample_ctr")
    for encoding in ("none", "cape"):
        stage.run("sample_ctr", project / "data" / "samples" / "sample_ctr", project / "data" / "runs" / "sample_ctr",
                  params("din", encoding, epochs=1), progress=False)
    proc = seqpe("evaluate", "sample_ctr", "--all", "--quiet", cwd=project)
    assert proc.returncode == 0, proc.stderr
    report = (project / "data" / "reports" / "sample_ctr" / "report.md").read_text()
    assert "din-cape" in report and "pass the samples folder" not in report
    test = next((project / "data" / "samples" / "sample_ctr" / "test").glob("*.parquet"))     # labels re-made:
    frame = pl.read_parquet(test)                                                     # the tests are left out, and
    frame.with_columns(pl.col("label").reverse()).write_parquet(test)                 # said so (walk 45g #4)
    proc = seqpe("evaluate", "sample_ctr", "--all", "--quiet", cwd=project)
    assert proc.returncode == 0 and proc.stderr.startswith("note: data/samples/sample_ctr, taken for the test labels, "
                                                           "is not what these runs were scored on ("), proc.stderr
    assert "the per-sample tests are left out; pass the runs' own samples folder with --samples" in proc.stderr
    frame.write_parquet(test)
    shutil.rmtree(project / "data" / "reports")
    proc = seqpe("evaluate", "sample_ctr", "runs/sample_ctr", "elsewhere", "--all", "--quiet",
                 cwd=project / "data")                         # no data/samples/sample_ctr from here: as before
    assert proc.returncode == 0, proc.stderr
    assert "pass the samples folder" in (project / "data" / "elsewhere" / "report.md").read_text()
    proc = seqpe("report", "data/runs/sample_ctr", "--samples", "data/samples", cwd=project)
    assert_one_line_error(proc, "no manifest.json in data/samples: it is not a samples folder seqpe prepared",
                          "Fix: pass one dataset's folder inside it: data/samples/sample_ctr")


def test_a_ctr_import_under_its_own_name_gets_its_layouts_preset_variant():
    """`--preset paper` on KuaiVideo_x1 files imported as `mykuai` gave AmazonElectronics' lr and batch (the base
    settings: no variant in the name), though the samples record KuaiVideo's layout (walk 32b)."""
    from models import MODELS
    from pipeline import presets
    from pipeline.datasets.ctr import OPTIONS
    from pipeline.train.stage import _layout_twin
    spec = MODELS["din"]
    twin = _layout_twin({"params": {"preprocess": {"options": OPTIONS["kuaivideo"]}}})
    res = presets.resolve(spec.presets, "paper", "din", "mykuai", twin)
    assert (twin, res.variant, res.twin, res.train["lr"], res.train["batch_size"]) == \
        ("kuaivideo", "kuaivideo", "kuaivideo", 1e-3, 4096)
    assert "its kuaivideo variant for dataset 'mykuai', whose data has kuaivideo's layout" in \
        presets.variant_note(spec.presets, res, "din", "mykuai")
    named = presets.resolve(spec.presets, "paper", "din", "my_electronics", twin)      # a variant in the name wins
    assert (named.variant, named.twin, named.train["batch_size"]) == ("electronics", None, 1024)
    assert _layout_twin({"params": {"preprocess": {"options": OPTIONS["amazon_electronics"]}}}) == "amazon_electronics"
    assert _layout_twin({"params": {"preprocess": {"options": {"valid": "tail"}}}}) is None
    assert _layout_twin({}) is None


def test_the_paper_preset_gives_cape_the_width_001_found_best_for_each_backbone():
    """001 §5.4.2: CAPE's position width is 16 with DIN and 64 with SASRec (walk 39b #1: sasrec_ctr ran at 16)."""
    from pipeline.params import Params
    from pipeline.train.stage import resolve_config
    manifest = {"protocol": "ctr"}
    widths = {}
    for model in ("din", "sasrec_ctr"):
        _, p, _, _, tp, applied, _ = resolve_config("amazon_electronics", manifest, Params(), model, "cape", "paper")
        widths[model] = p.encodings.get("cape", {}).get("pos_dim", 16)
        assert applied.name == "paper" and tp.dim == 64
    assert widths == {"din": 16, "sasrec_ctr": 64}
    _, p, _, _, tp, _, _ = resolve_config("amazon_electronics", manifest, Params(), "sasrec_ctr", "rope", "paper")
    assert tp.encoding == "rope" and p.encodings.get("rope") == {}      # what a rope run records: no cape width


def test_a_bf16_ctr_run_scores_valid_and_test_in_fp32(ctr_samples, tmp_path, monkeypatch):
    """Walk 41a #8: the next-item bf16 test left the CTR half of walk 40c #1 untested (autocast put back into
    CTRTask's scoring passed). Autocast is entered for training steps only (grad on), never while scoring."""
    from test_train import record_autocast
    entered = record_autocast(monkeypatch)
    stage.run("sample_ctr", ctr_samples, tmp_path / "runs", params("din", "cape", epochs=1, precision="bf16"),
              progress=False)
    assert entered and all(entered)


def test_a_grids_preset_trains_its_runs_as_the_preset_does(ctr_samples, tmp_path, capfd):
    """Walk 41i #4: dvc.yaml's train stages pass no --preset, so the study grid could not run 001's settings;
    study.ctr.preset: paper trains each run as `--preset paper` (its dataset variant), recorded as such, and a
    model without the preset trains with the params, said in a note."""
    import dataclasses
    from pipeline.train.stage import resolve_config
    from pipeline.train import samples_manifest
    p = params("din", "none", epochs=1)
    grid = dataclasses.replace(p.study, ctr=dataclasses.replace(p.study.ctr, preset="paper"))
    gp = dataclasses.replace(p, study=grid)
    manifest = samples_manifest("sample_ctr", ctr_samples)
    by_grid = resolve_config("sample_ctr", manifest, gp, "din", "none")
    by_flag = resolve_config("sample_ctr", manifest, p, "din", "none", preset="paper")
    assert by_grid[4] == by_flag[4] and by_grid[5].record() == by_flag[5].record() and by_grid[5].record()
    assert by_grid[4] != resolve_config("sample_ctr", manifest, p, "din", "none")[4]
    from pipeline.train.stage import grid_preset
    from models import MODELS
    assert grid_preset(gp, "ctr", MODELS["din"], MODELS) == "paper"
    # the grid's own train keys win over its preset, as --set keys over --preset (walk 41j #2)
    short = dataclasses.replace(gp, study=dataclasses.replace(grid, ctr=dataclasses.replace(
        grid.ctr, train={"epochs": 2, "max_len": 20})))
    tp = resolve_config("sample_ctr", manifest, short, "din", "none")[4]
    assert (tp.epochs, tp.max_len) == (2, 20) and tp.lr == by_flag[4].lr and tp.batch_size == by_flag[4].batch_size
    # NAME_VARIANT names a preset too; a name no model of the grid has is an error, not a note (walk 41j #3)
    variant = next(iter(MODELS["din"].presets["paper"].get("datasets") or {}), None)
    if variant is not None:
        named = dataclasses.replace(p, study=dataclasses.replace(grid, ctr=dataclasses.replace(
            grid.ctr, preset=f"paper_{variant}")))
        assert grid_preset(named, "ctr", MODELS["din"], MODELS) == f"paper_{variant}"
    missing = dataclasses.replace(p, study=dataclasses.replace(grid, ctr=dataclasses.replace(grid.ctr, preset="papr")))
    with pytest.raises(ParamsError, match="study.ctr.preset is 'papr', a preset no model of the ctr grid has"):
        grid_preset(missing, "ctr", MODELS["din"], MODELS)
    mixed = dataclasses.replace(gp, study=dataclasses.replace(grid, ctr=dataclasses.replace(
        grid.ctr, models=["din", "sasrec_ctr"])))
    if not (MODELS["sasrec_ctr"].presets or {}).get("paper"):
        assert grid_preset(mixed, "ctr", MODELS["sasrec_ctr"], MODELS) is None
        assert "study.ctr.preset is paper, and 'sasrec_ctr' has no such preset" in capfd.readouterr().err
