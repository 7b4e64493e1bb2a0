"""The evaluate stage: a dataset's runs -> reports with mean, std and 95% CI over seeds, and a figure.

Every run was scored once on test, with its best-on-valid weights, by the train stage (run.json and
test_samples.parquet). This stage only aggregates, so it is cheap and deterministic. For a dataset
of the study grid it reports exactly the grid's configurations (every model x encoding, then the
baselines) over `study.seeds`, in grid order, and refuses a grid with runs missing or trained with other
settings than the params give the grid now (a params.yaml edited without `dvc repro`); hand runs of
other configurations in the same runs folder are left out (`seqpe report` shows everything, and
`--all` here too). The per-configuration DVC metrics files are written by the train stage.

    <reports>/summary.json     per configuration: seeds, mean/std/ci95 of every metric; the runs table; the
                               configurations --all left out (seeds that cannot be pooled) and why
    <reports>/report.md        the Markdown table (x100) that `seqpe report` also writes
    <reports>/report.csv       the same numbers, raw
    <reports>/comparison.png   each configuration's test metric with its 95% CI (pipeline/figures.py)
    <reports>/comparison.csv   the same, for `dvc plots show` (bar_horizontal)
    <reports>/curves.png       every configuration's learning curves, train loss and valid metric by epoch

Each file is written atomically, all of them together once rendered (a Ctrl-C leaves the previous
set or the new one); nothing else in <reports> is touched.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from . import figures, report
from .errors import DataError, ParamsError
from .io import absent, atomic_dir, claim_dir, claims_released, dumps_json, not_runs, pull_hint
from .params import Params


REPORT_FILES = ("summary.json", "report.md", "report.csv", "comparison.csv", "comparison.png", "curves.png")


def study_configs(params: Params, dataset: str) -> Optional[tuple[str, list[str]]]:
    """(task, configuration names in grid order) when `dataset` is in a study grid, else None."""
    for task in ("next_item", "ctr"):
        grid = getattr(params.study, task)
        if dataset in grid.datasets:
            return task, grid.configs()
    return None


def _one(missing: list[str]) -> tuple[str, ...]:
    """(model, encoding) when every missing "config/seed-N" is of one configuration, else the placeholders."""
    configs = {m.split("/")[0] for m in missing}
    if len(configs) != 1:
        return ()
    model, _, encoding = next(iter(configs)).partition("-")
    return (model, encoding) if encoding else ()


def _train_command(dataset: str, runs_dir: Path, samples_dir: Optional[Path], params_file: Optional[Path],
                   model: str = "M", encoding: str = "E") -> str:
    """The `seqpe train` command that writes configuration MODEL-ENCODING where evaluate reads it: the runs
    folder and params file named when they are not the defaults (walk 40a #5: the plain command trained into
    data/runs/DATASET with ./params.yaml, and evaluate refused the same runs again)."""
    import shlex
    words = ["seqpe", "train", dataset]
    if Path(runs_dir).absolute() != (Path("data") / "runs" / dataset).absolute():
        words += [str(samples_dir or Path("data") / "samples" / dataset), str(runs_dir)]
    words += ["--model", model, "--encoding", encoding]
    if params_file is not None:
        words += ["--params", str(params_file)]
    return " ".join(w if w in ("M", "E") else shlex.quote(w) for w in words)


def _check_trained_as_grid(dataset: str, records: list[dict], params: Params, task: str, runs_dir: Path,
                           samples_dir: Optional[Path] = None, params_file: Optional[Path] = None) -> None:
    """Refuse grid runs trained with other settings than `params` gives the grid now (walk 38c #4): a params.yaml
    edited without `dvc repro`, or a grid configuration trained by hand with --set, reported under the grid's
    name as if it were the grid's. Settings as `seqpe train` resolves them (train.stage.resolve_config), compared
    as `seqpe report` pools seeds (report.settings_change: machine keys such as train.threads, and
    evaluate.batch_size, which change last bits only, are not settings there); what a setting picks on the
    machine (`auto`) and evaluate.ks (a note below: the cut-offs a run lacks are left out) are taken as the run
    recorded them."""
    from .params import to_dict
    from .report import settings_change
    from .train import setup
    from .train.stage import resolve_config
    from .train.tasks import selection
    from .io import MANIFEST, read_manifest
    # the samples' manifest where there is one: a preset (study.<task>.preset) picks its dataset variant from the
    # layout it records (walk 41j #1); else what resolve_config reads of it without a preset
    manifest = read_manifest(samples_dir) if samples_dir is not None and (Path(samples_dir) / MANIFEST).is_file() \
        else {"protocol": "ctr"} if task == "ctr" else {}
    wanted: dict[str, tuple] = {}
    stale: list[tuple] = []                        # (configuration, seed, what differs, its train settings)
    for rec in sorted(records, key=lambda r: (r["name"], r["seed"])):
        train = rec.get("train")
        if not train:                  # a record without its settings (written by hand): nothing to compare
            continue
        if rec["name"] not in wanted:
            kind, p, spec, _, tp, applied, _ = resolve_config(dataset, manifest, params, train.get("model"),
                                                              train.get("encoding"), machine=False)
            picked = setup.select_metric(tp, selection(kind, p))  # what `seqpe train` refuses is said as it says
                                                                   # it, not as "run dvc repro" (walk 39d #3)
            wanted[rec["name"]] = (to_dict(tp), to_dict(p.evaluate), p.models.get(tp.model, {}),
                                   p.encodings.get(tp.encoding, {}) if spec.uses_encoding else {}, applied.record(),
                                   picked)
        want_train, want_eval, options, encoding_options, preset, picked = wanted[rec["name"]]
        # the grid's `auto`: recorded as such before walk 43d #1, as what it picks since; another metric (a hand
        # run's --set train.select_metric=hr@10) differs (walk 43i #1: report._settings reads a recorded `auto` as
        # the record's own pick, so the wanted one is given what the grid's auto picks)
        top = rec.get("select_metric")
        if want_train.get("select_metric") == "auto":
            if train.get("select_metric") in ("auto", picked):
                want_train = {**want_train, "select_metric": train.get("select_metric")}
            else:
                top = picked
        want = {**rec, "options": options, "encoding_options": encoding_options, "preset": preset,
                "select_metric": top,
                "train": {k: train.get(k) if v == "auto" and k in ("ce_impl", "precision") else v
                          for k, v in want_train.items()},
                "evaluate": {**want_eval, "ks": (rec.get("evaluate") or {}).get("ks", want_eval.get("ks"))}}
        if (why := settings_change(rec, want)) and not any(name == rec["name"] for name, *_ in stale):
            stale.append((rec["name"], rec["seed"], why, train))
    if stale:                      # every configuration named: one at a time, a hand fix met the next (walk 39f #2)
        name, seed, why, train = stale[0]
        others = [n for n, *_ in stale[1:]]
        listed = others[:3] + ([f"{len(others) - 3} more"] if len(others) > 3 else [])
        more = (f", and so were {', '.join(listed[:-1])}{' and ' if len(listed) > 1 else ''}{listed[-1]}"
                if others else "")
        hand = "" if others else " (or `{}`)".format(_train_command(dataset, runs_dir, samples_dir, params_file,
                                                                      str(train.get("model")),
                                                                      str(train.get("encoding"))))
        raise DataError(f"{name} seed {seed} under {runs_dir} was trained with other settings than the params give "
                        f"the study grid of '{dataset}' now ({why}){more}: the report would show "
                        f"{'them' if others else 'it'} as the grid's",
                        f"run `dvc repro` to retrain the grid as the params say{hand}, or add --all to report the runs "
                        "as they were trained")


def _what_folder(folder: Path) -> str:
    """What a --samples path that is not a next-item samples folder is, for evaluate's message."""
    from .io import _owner
    if not folder.exists():
        return "does not exist"
    if not folder.is_dir():
        return "is a file"
    kind, owner = _owner(folder)
    if kind == "samples":
        return f"holds {owner or 'another dataset'}'s CTR samples"
    return f"holds {owner + chr(39) + 's ' if owner else ''}{kind} output" if kind else "is not a samples folder"


@claims_released()
def run(dataset: str, runs_dir: Path, reports_dir: Path, params: Params, all_runs: bool = False,
        samples_dir: Optional[Path] = None, baseline: Optional[str] = None, samples_guessed: bool = False,
        params_file: Optional[Path] = None) -> dict:
    """Report `dataset`'s runs; `samples_dir` (its samples folder) gives the CTR test labels that the
    per-sample significance tests need; `baseline` is the configuration the others are tested against
    (default study.reference when the dataset has it, else the first in grid order, with --all too; in sorted
    order outside the grid). `samples_guessed`: `samples_dir` is data/samples/DATASET, taken without being
    asked for: labels that are not the runs' own are then left out, not an error. `params_file`: the --params
    file the params came from, for the `seqpe train` command a message suggests."""
    runs_dir, reports_dir = Path(runs_dir), Path(reports_dir)
    claim_dir(reports_dir, dataset, "report")          # never write report files among a user's own
    if runs_dir.resolve() in reports_dir.resolve().parents:     # walk 35b: RUNS/rep, RUNS/pop-none/rep were written
        raise DataError(f"report folder {reports_dir} is inside the runs folder it reports ({runs_dir}), where "
                        "`seqpe train` writes configuration folders (`dvc repro` replaces each whole, a report "
                        "inside with it)", f"pass a folder outside it, e.g. data/reports/{dataset}")
    if not runs_dir.is_dir():
        raise DataError(f"runs folder {runs_dir} {absent(runs_dir)}",
                        f"{pull_hint(runs_dir)}run `seqpe train {dataset}` first, or pass its runs folder, e.g. "
                        f"data/runs/{dataset}")
    if (wrong := not_runs(runs_dir, dataset)) is not None:
        raise wrong
    records = [r for r in report.find_runs([runs_dir]) if r.get("dataset") in (dataset, None)]
    if not records:
        raise DataError(f"no runs of dataset '{dataset}' under {runs_dir}",
                        f"{pull_hint(runs_dir)}run `seqpe train {dataset}` first")
    grid = study_configs(params, dataset)
    order = {c: i for i, c in enumerate(grid[1])} if grid is not None else {}   # --all too: the grid's first leads
    if grid is not None and not all_runs:
        task, configs = grid
        if baseline is not None and baseline not in configs and any(r.get("name") == baseline for r in records):
            raise ParamsError(f"baseline '{baseline}' has runs under {runs_dir} but is not in the study grid of "
                              f"'{dataset}', which is what evaluate reports without --all",
                              "add --all to report every configuration of the runs folder (hand runs too), or "
                              "add it to the grid in params.yaml")
        seeds = set(params.study.seeds)
        records = [r for r in records if r.get("name") in configs and r["seed"] in seeds]
        have = {(r["name"], r["seed"]) for r in records}
        missing = [f"{c}/seed-{s}" for c in configs for s in sorted(seeds) if (c, s) not in have]
        if missing:
            hand = _train_command(dataset, runs_dir, samples_dir, params_file, *_one(missing))
            raise DataError(f"the study grid of '{dataset}' has no runs for {', '.join(missing[:4])}"
                            + (f" and {len(missing) - 4} more" if len(missing) > 4 else ""),
                            f"{pull_hint(runs_dir)}run `dvc repro` (or `{hand}`) first, or add --all to report the "
                            f"runs {runs_dir} holds")
        _check_trained_as_grid(dataset, records, params, task, runs_dir, samples_dir, params_file)
    else:
        task = "ctr" if any(r.get("task") == "ctr" or r.get("protocol") == "ctr" for r in records) else "next_item"
    ks = {str(k) for k in params.evaluate.ks}
    show = lambda c: ", ".join(f"@{k}" for k in sorted(c, key=int))  # noqa: E731
    lacking: dict[tuple[str, str], list[int]] = {}     # (configuration, cut-offs it lacks) -> seeds
    for r in records:   # keep the cut-offs asked for (metrics without a cut-off, e.g. auc, stay)
        cuts = {k.split("@")[1] for k in r["test"] if "@" in k}
        if cuts and not ks & cuts:      # none of them: was matplotlib's traceback (a figure of nothing)
            raise DataError(f"evaluate.ks asks for {show(ks)}, none of which {r.get('name')} seed {r['seed']} "
                            f"computed (it has {show(cuts)})",
                            "set evaluate.ks to cut-offs the runs have, or retrain them with the new ks")
        if cuts and ks - cuts:
            lacking.setdefault((r.get("name"), show(ks - cuts)), []).append(r["seed"])
        r["test"] = {k: v for k, v in r["test"].items() if "@" not in k or k.split("@")[1] in ks}
    for (name, missing), seeds in lacking.items():   # some of them: reported without a word (walk 32b)
        them = "them" if "," in missing else "it"
        sys.stderr.write(f"note: evaluate.ks asks for {show(ks)}, and {name} (seed{'s' * (len(seeds) > 1)} "
                         f"{', '.join(map(str, sorted(seeds)))}) was trained without {missing}: its row leaves "
                         f"{them} out (retrain it with these ks to have {them})\n")
    left_out: list[dict] = []
    rows, records = report.pooled(records, (lambda name: name not in order) if all_runs else None,  # grid: all
                                  left_out)
    names = [row["name"] for row in rows]
    if len(set(names)) != len(names):
        raise DataError(f"{runs_dir} mixes protocols for one configuration",
                        "keep one dataset's runs per runs folder")
    rows.sort(key=lambda row: (order.get(row["name"], len(order)), row["name"]))
    # study.reference names a configuration of one grid (checked with the params); the other task's datasets
    # compare with their own grid's first (it made evaluate fail for every dataset of the other task)
    report.check_baseline(baseline, names)
    reference = baseline or (params.study.reference if params.study.reference in names
                             else (rows[0]["name"] if rows else None))
    labels = None
    if task != "ctr" and samples_dir is not None and not samples_guessed:
        from .report import _next_item_samples       # dvc.yaml passes every dataset's own: read by CTR runs only
        if not _next_item_samples(samples_dir):      # one that is not there, or a CTR one, passed silently (walk
            raise ParamsError(f"--samples gives the test labels of CTR runs, and {dataset}'s runs are next-item "   # 44i
                              f"runs, which need none ({samples_dir} {_what_folder(samples_dir)})",      # #4)
                              "drop --samples")
    if task == "ctr" and samples_dir is not None:
        from .significance import read_test_labels
        labels = read_test_labels(samples_dir)
    try:
        report.compare(records, rows, reference, labels, own_first=baseline is None)
    except DataError as e:
        if not samples_guessed or labels is None:
            raise
        # data/samples/DATASET was re-made: no per-sample tests, and said so (the report's own note asked for the
        # --samples that had been found and refused; walk 45g #4)
        sys.stderr.write(f"note: {samples_dir}, taken for the test labels, is not what these runs were scored on "
                         f"({e.problem.split(' (', 1)[-1].rstrip(')') if ' (' in e.problem else e.problem}): the "
                         "per-sample tests are left out; pass the runs' own samples folder with --samples\n")
        report.compare(records, rows, reference, None, own_first=baseline is None)
    runs = [{"name": f"{r['name']}/seed-{r['seed']}", "config": r["name"], "seed": r["seed"],
             "best_epoch": r.get("best_epoch"), "valid": r.get("valid", {}), "test": r["test"]}
            for r in sorted(records, key=lambda r: (order.get(r["name"], len(order)), r["name"], r["seed"]))]
    summary = {"dataset": dataset, "task": task, "reference": reference, "configs": rows, "runs": runs,
               "left_out": left_out}
    per_seed: dict[str, dict[str, list[float]]] = {}
    for r in records:
        for k, v in r["test"].items():
            per_seed.setdefault(r["name"], {}).setdefault(k, []).append(v)
    panels = figures.panel_metrics(task, rows)
    seeds = sorted({s for row in rows for s in row["seeds"]})
    title = f"{dataset}: {len(rows)} configuration{'s' if len(rows) != 1 else ''}, seed{'s' if len(seeds) != 1 else ''} {', '.join(map(str, seeds))}"
    files = {"summary.json": dumps_json(summary).encode("utf-8"),           # every file rendered first, then
             "report.md": report.to_markdown(rows, left_out).encode("utf-8"),   # written together: a Ctrl-C
             "report.csv": report.to_csv(rows).encode("utf-8"),             # leaves the previous set or the
             "comparison.csv": figures.comparison_csv(rows, panels).encode("utf-8"),   # new one, not a mix
             "comparison.png": figures.comparison_png(rows, panels, title, reference, per_seed),
             "curves.png": figures.curves_png(records, [row["name"] for row in rows],
                                              figures.curve_metric(records, (panels or ["ndcg@10"])[0]), title,
                                              {row["name"]: row["protocol"] for row in rows})}
    assert tuple(files) == REPORT_FILES
    with atomic_dir(reports_dir) as tmp:       # swapped in whole, one exchange: a SIGKILL between two files left
        for name, data in files.items():      # the new summary.json beside the old report.md (walk 35c); a Ctrl-C
            (tmp / name).write_bytes(data)    # waits for the swap (io.atomic_dirs)
    return summary
