"""Aggregate runs over seeds (mean, sample std, 95% CI per metric) and compare configurations.

A configuration is (dataset, protocol, model, encoding); its seeds are the runs under
`<runs>/<model>-<encoding>/seed-<n>/run.json`. For n seeds with values x_1..x_n:

    mean = sum(x) / n
    std  = sqrt(sum((x - mean)^2) / (n - 1))            (sample std, ddof = 1)
    ci95 = t_{0.975, n-1} * std / sqrt(n)               (half-width of the 95% CI, Student t: scipy.stats.t)

std and ci95 are None for a single seed (the PE study 004 reports all three because single
runs mislead). `run` also compares every configuration of a dataset with a baseline
configuration (pipeline.significance: paired t-test over seeds, Wilcoxon signed-rank and a
paired bootstrap over test samples) and attaches the result to the row as "comparison".

Outputs: a rich table (CLI), Markdown (values x100, as the papers print them) and CSV
(raw values in [0, 1]). Torch-free.
"""
from __future__ import annotations

import csv
import io
import math
import sys
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Optional

from . import significance
from .errors import DataError, ParamsError, unknown
from .lazy import lazy
from .params import config_name  # noqa: F401  (report.config_name: the name every caller uses)
from .io import claim_file, deferred_interrupt, not_runs, read_json, refuse_nested, starts_with, write_bytes

stats = lazy("scipy.stats")    # about 2 s to import, paid by every command that loaded this module (walk 45a #2)

_FAMILY = {"hr": 0, "recall": 0, "mrr": 1, "ndcg": 2, "auc": 3, "gauc": 4, "logloss": 5}


# --------------------------------------------------------------------------- statistics

@lru_cache(maxsize=None)
def t_quantile(df: int, level: float = 0.95) -> float:
    """t such that P(|T| <= t) = level (e.g. 12.706 for df=1, 2.262 for df=9 at 95%)."""
    return float(stats.t.ppf((1 + level) / 2, df))


def summarize(values: list[float]) -> dict:
    """{"mean", "std", "ci95", "n"} of one metric over seeds (std, ci95 None when n < 2)."""
    n = len(values)
    mean = math.fsum(values) / n
    if n and all(v == values[0] for v in values):   # a fitted baseline's seeds: exactly its value, sd 0 (3 x 0.2
        mean = values[0]                            # gave mean 0.20000000000000004 and an sd of float noise, walk 38c #1)
    if n < 2:
        return {"mean": mean, "std": None, "ci95": None, "n": n}
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    return {"mean": mean, "std": std, "ci95": t_quantile(n - 1) * std / math.sqrt(n), "n": n}


# --------------------------------------------------------------------------- runs

def metric_order(key: str) -> tuple:
    name, _, k = key.partition("@")
    return (_FAMILY.get(name, 9), name, int(k) if k.isdigit() else 0)


def find_runs(roots: Iterable[str | Path]) -> list[dict]:
    """Every run.json under `roots` (a runs folder of one dataset, or a parent of several; one folder may be
    given as it is, not in a list: its characters were folders, walk 41f #7)."""
    import os
    if isinstance(roots, (str, os.PathLike)):
        roots = [roots]
    roots = list(roots)
    if not roots:
        raise ParamsError("no runs folder given", "pass one or more, e.g. data/runs/sample")
    seen, records = set(), []
    for root in roots:
        root = Path(root)
        if root.is_file():
            raise DataError(f"{root} is a file, not a runs folder", "pass a runs folder, e.g. data/runs/DATASET "
                            "(--out names the report file to write)")
        if not root.is_dir():
            from .io import pull_hint
            name = root.name if root.parent.name == "runs" else "DATASET"       # data/runs/<dataset>
            raise DataError(f"runs folder {root} does not exist",
                            f"{pull_hint(root)}run `seqpe train {name}` first, or fix the path")
        hidden = lambda p: any(part.startswith(".") for part in p.relative_to(root).parts)  # noqa: E731
        for path in sorted(root.rglob("run.json")):
            key = path.resolve()
            if key in seen or hidden(path):
                continue   # temporary folders of a run being written
            seen.add(key)
            rec = read_json(path)
            _check_record(rec, path, root)
            rec["_path"] = str(path)
            records.append(rec)
        for path in sorted(root.rglob("checkpoint.pt")):   # a run whose record was lost is not left out quietly
            if not (path.parent / "run.json").exists() and not hidden(path):
                raise DataError(f"{path.parent} has a checkpoint but no run.json, so its seed cannot be reported",
                                f"remove {path.parent} (then `seqpe train` trains that seed again: it does not "
                                "replace a folder without its record)")
    return records


def _check_record(rec, path: Path, root: Path) -> None:
    """A DataError unless `rec` (the run.json at `path`) is a training record seqpe wrote: another tool's
    run.json under the folder was an AttributeError or KeyError traceback, a string metric a TypeError."""
    missing = [k for k in ("dataset", "model", "encoding", "seed") if not isinstance(rec, dict) or k not in rec]
    if missing:
        raise DataError(f"{path} is not a run record of `seqpe train` (no {', '.join(missing)})",
                        f"move it out of {root}, or re-run `seqpe train` for that run")
    if not isinstance(rec.get("test"), dict):
        raise DataError(f"{path} has no test metrics", "re-run `seqpe train` for that run")
    for key, value in rec["test"].items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise DataError(f"{path} has test.{key} = {value!r}, not a finite number",
                            "re-run `seqpe train` for that run (seqpe never records such a metric)")
    history = rec.get("history", [])                   # evaluate draws it (curves.png)
    number = lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))  # noqa: E731
    if not isinstance(history, list) or not all(
            isinstance(h, dict) and isinstance(h.get("epoch"), int) and number(h.get("loss"))
            and isinstance(h.get("valid", {}), dict) and all(number(v) for v in h.get("valid", {}).values())
            for h in history):
        raise DataError(f"{path} has a damaged history (per-epoch losses and valid metrics)",
                        "re-run `seqpe train` for that run")


def protocol_label(rec: dict) -> str:
    """A run's protocol column: the data protocol, and the evaluation protocol when it is not full ranking of
    every item (evaluate.candidates > 0, or evaluate.mask_history), so runs of different protocols are never
    pooled or compared (a full ranking with and without the session's own items was compared as two models)."""
    ev = rec.get("evaluate") or {}
    n = int(ev.get("candidates") or 0)
    if isinstance(rec.get("n_items"), int) and rec["n_items"] > 1:
        n = min(n, rec["n_items"] - 1)   # no more to draw: 1,000 candidates of 479 items were labelled 1000 (walk 36c)
        if n == rec["n_items"] - 1 and not ev.get("mask_history") \
                and ev.get("candidate_sampling", "uniform") == "uniform":    # every other item: full ranking again
            n = 0               # (popularity never draws an item unseen in train: those stay unranked; walk 31a)
            # With mask_history it is not: full ranking keeps the input items, tied below every other, and a
            # target among them ties with them, where the draw leaves them out and ranks it alone below (walk 36b)
    history = ", input items excluded" if ev.get("mask_history") else ""
    if n == 0:
        return f"{rec.get('protocol')}{history}"
    return f"{rec.get('protocol')}, {n} sampled candidates ({ev.get('candidate_sampling', 'uniform')}{history})"


def _config_key(rec: dict) -> tuple:
    return str(rec.get("dataset")), protocol_label(rec), rec["model"], rec["encoding"], rec.get("tag") or ""


def _by_config(records: list[dict]) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = {}
    for rec in records:
        groups.setdefault(_config_key(rec), []).append(rec)
    return groups


# train keys that change how fast a run goes or where, not what it computes: seeds of one configuration
# may differ in them (a resumed run with another time limit, another machine's thread count)
_MACHINE_KEYS = {"threads", "device", "time_limit", "memory_budget", "compile"}


def _settings(rec: dict) -> dict:
    """What a run computed with, besides its seed: seeds pooled into one row must agree on it."""
    train = {k: v for k, v in (rec.get("train") or {}).items() if k not in _MACHINE_KEYS}
    if train.get("ce_impl") == "auto":      # recorded unresolved before session 33: what it picked on the device
        train["ce_impl"] = "plain" if rec.get("device") == "cuda" else "chunked"
    if train.get("precision") == "auto":
        train["precision"] = "fp32"
    if train.get("select_metric") == "auto" and rec.get("select_metric"):   # recorded unresolved before walk 43d
        train["select_metric"] = rec["select_metric"]                       # #1; the record says what it picked
    # keys the run never read, recorded with a value before `seqpe train` nulled them (walk 40e #1): the same model
    if train.get("trim_padding") is False:
        train["bucket"] = None
    evaluate = {k: v for k, v in (rec.get("evaluate") or {}).items() if k != "batch_size"}
    if not evaluate.get("candidates") and "candidate_sampling" in evaluate:   # full ranking samples nothing: a
        evaluate["candidate_sampling"] = "uniform"        # record of before walk 44b #1 kept another value there
    return {"train": train, "evaluate": evaluate, "options": rec.get("options"),
            "encoding_options": rec.get("encoding_options"), "preset": rec.get("preset"),
            "samples": rec.get("samples"), "world_size": rec.get("world_size", 1),   # torchrun processes: W x batch
            "data": {"sessions": rec.get("sessions_manifest"), "samples": rec.get("samples_digest")}}


def _differences(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Every key where two settings differ, as `key: a vs b`."""
    out = []
    for k in sorted(set(a) | set(b), key=str):
        x, y = a.get(k), b.get(k)
        if isinstance(x, dict) and isinstance(y, dict):
            if x != y:
                out += _differences(x, y, f"{prefix}{k}.")
        elif k == "world_size" and not prefix:      # torchrun's process count, said as the README says it
            if (x or 1) != (y or 1):
                out.append(f"processes (torchrun): {x or 1} vs {y or 1}")
        elif prefix == "data.":                      # which data: unknown (None) in records older than the key
            if k == "sessions" and a.get("samples") is not None and b.get("samples") is not None:
                continue    # the samples' shard hashes decide, as for `train`'s reuse: a preprocess key the
                            # protocol does not read changes the sessions manifest alone (walk 32a)
            if x is not None and y is not None and x != y:
                out.append(f"the {k} folder's data (a re-import or re-augment): {str(x)[:12]} vs {str(y)[:12]}")
        elif x != y:
            if prefix in ("options.", "encoding_options."):   # an option left out is at its default
                x, y = (repr(v) if k in d else "its default" for v, d in ((x, a), (y, b)))
                out.append(f"{prefix}{k}: {x} vs {y}")
            else:
                out.append(f"{prefix}{k}: {x!r} vs {y!r}")
    return out


def _differs(a: dict, b: dict) -> str:
    """Where two settings differ: the first three keys, and how many more."""
    found = _differences(a, b)
    if any(f.startswith(("options.", "encoding_options.", "train.")) for f in found):
        found = _differences(_without_defaults(a), _without_defaults(b))
    return "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")


def _without_defaults(settings: dict) -> dict:
    """`settings` with model and encoding options at their defaults dropped, as runs record them since session
    31: a record written before that kept an option a preset spelled out at its default value, and read as
    "options.k: 20 vs None" against a newer run of the same settings; and the train keys the model never reads
    (ModelSpec.ignores) nulled, as `seqpe train` records them since they were declared: a PARec run recorded
    train.heads before session 40 (walk 40e #1); so are those another train setting leaves unread (negatives
    under loss ce, lr_step / lr_gamma under lr_schedule none), recorded with a value before session 31. Only called where settings differ, since it imports the model
    registry (torch); options a model no longer reads are kept as recorded."""
    from .errors import SeqpeError
    from .train.setup import non_default
    import models
    import models.encodings as enc
    train = settings.get("train") or {}
    spec = models.MODELS.get(train.get("model"))
    config = getattr(enc.ENCODINGS.get(train.get("encoding")), "config", None)
    out = dict(settings)
    ignores = getattr(spec, "ignores", ())
    ignores = ignores(settings.get("options") or {}) if callable(ignores) else ignores
    if spec is not None:             # and those another train setting leaves unread: recorded with a value before
        from .train.stage import unread_train_keys      # session 31 (walk 44a #1: lr_gamma 0.1 vs None)
        ignores = [*ignores, *unread_train_keys(spec, train)]
    if ignores:
        out["train"] = {**train, **{key: None for key in ignores}}
    for key, cls in (("options", getattr(spec, "options", None)), ("encoding_options", config)):
        if cls is not None and isinstance(settings.get(key), dict):
            try:
                out[key] = non_default(cls, settings[key], key)
            except SeqpeError:          # an option since renamed or removed: compared as recorded
                pass
    return out


def settings_change(old: dict, new: dict) -> str:
    """Where the settings of run record `new` differ from `old`'s ("" if they do not)."""
    return _differs(_settings(old), _settings(new))


def _check_pooled(name: str, recs: list[dict]) -> None:
    """Seeds of one row must be distinct runs of the same settings, else the row's mean and CI mix
    different experiments (two runs folders holding sasrec-none trained with ce and with bce)."""
    seen: dict = {}
    for rec in recs:
        if rec["seed"] in seen:
            raise DataError(f"{name} has seed {rec['seed']} twice ({seen[rec['seed']]} and {rec.get('_path', '?')})",
                            "report one runs folder at a time, or give one of them a --tag")
        seen[rec["seed"]] = rec.get("_path", "?")
    limited = [r for r in recs if r.get("stopped") == "time_limit"]
    if limited and len(limited) < len(recs):
        done = [r["seed"] for r in recs if r.get("stopped") != "time_limit"]
        cut = ", ".join(f"{r['seed']} (after {r.get('epochs_run', '?')} epoch{'' if r.get('epochs_run') == 1 else 's'})"
                        for r in limited)
        raise DataError(f"{name}: seed {cut} stopped at train.time_limit, unfinished, while seed "
                        f"{', '.join(map(str, done))} trained to the end; they cannot be pooled into one mean",
                        "finish it: the same `seqpe train` command with --set train.time_limit=0 goes on where it "
                        "stopped (or give the time-limited runs their own --tag)")
    first = _settings(recs[0])
    for rec in recs[1:]:
        why = _differs(first, _settings(rec))
        if why:
            raise DataError(f"{name}: seed {recs[0]['seed']} and seed {rec['seed']} were trained with different "
                            f"settings ({why}), so they cannot be pooled into one mean",
                            "retrain one of them with the other's settings, or give the variant its own --tag")


def aggregate(records: list[dict], skippable=None, left_out: Optional[list] = None, empty: bool = False) -> list[dict]:
    """Group runs by (dataset, protocol, model, encoding, tag); summarise every test metric over seeds
    (refused when a group's seeds repeat or were trained with different settings). `skippable(name)`: such a
    group is left out with a note on stderr instead, and the others are reported (one configuration whose
    seeds differ made the whole `seqpe report` print nothing); refused all the same when every group is, unless
    `empty` (`report --json`, whose entries list them: no rows then). `left_out`: a list that receives one entry
    per group left out (`left_out_entry`), for the files and the JSON that outlive the stderr note."""
    groups = _by_config(records)
    rows, refused = [], []
    for (dataset, protocol, model, encoding, tag), recs in sorted(groups.items()):
        recs = sorted(recs, key=lambda r: r["seed"])
        name = config_name(model, encoding, tag or None)
        try:
            _check_pooled(f"{dataset} {name}", recs)
        except DataError as e:
            if skippable is None or not skippable(name):
                raise
            refused.append(e)            # said below once the others are known (every one refused: one error)
            if left_out is not None:
                left_out.append(left_out_entry(dataset, protocol, model, encoding, tag or None, recs, e))
            continue
        keys = sorted({k for r in recs for k in r["test"]}, key=metric_order)
        rows.append({
            "dataset": dataset, "protocol": protocol, "model": model, "encoding": encoding, "tag": tag or None,
            "name": config_name(model, encoding, tag or None), "seeds": [r["seed"] for r in recs],
            "best_epochs": [r.get("best_epoch") for r in recs],
            "unfinished": [r["seed"] for r in recs if r.get("stopped") == "time_limit"],
            "checkouts": [_checkout(r) for r in recs],
            "metrics": {k: summarize([r["test"][k] for r in recs if k in r["test"]]) for k in keys},
            "top_auc": max((r["test"]["auc"] for r in recs if "auc" in r["test"]), default=None),   # chance_note
            "not_learnt": [r["seed"] for r in recs if r.get("not_learnt")],                          # learnt_note
        })
    if refused and not rows and not (empty and left_out is not None):
        if len(refused) == 1:
            raise refused[0]
        raise DataError(f"none of the {len(refused)} configurations can be pooled over its seeds: {refused[0].problem}"
                        f" (and {len(refused) - 1} more: `seqpe report --json`, without --out, lists each with its "
                        "reason)",
                        refused[0].fix)
    for e in refused:
        sys.stderr.write(f"note: left out of the report: {e}\n")
    return rows


def left_out_entry(dataset: str, protocol: str, model: str, encoding: str, tag: Optional[str], recs: list[dict],
                   why: Exception) -> dict:
    """A configuration `aggregate` left out: who it is, its seeds, and why (the refusal's problem)."""
    return {"dataset": dataset, "protocol": protocol, "model": model, "encoding": encoding, "tag": tag,
            "configuration": config_name(model, encoding, tag), "seeds": [r["seed"] for r in recs],
            "reason": getattr(why, "problem", str(why)), "fix": getattr(why, "fix", None)}


def left_out_note(left_out: list[dict]) -> Optional[str]:
    """The note under a report file naming the configurations left out (they used to vanish from the file,
    said only on the stderr of the command that wrote it)."""
    if not left_out:
        return None
    return "Left out of this report (their seeds cannot be pooled into one row): " + "; ".join(
        e["reason"] for e in left_out) + "."


def pooled(records: list[dict], skippable, left_out: Optional[list] = None,
           empty: bool = False) -> tuple[list[dict], list[dict]]:
    """(rows, records) of `aggregate(records, skippable, left_out, empty)`, the records of the configurations it
    left out dropped (the paired tests must not see them either)."""
    rows = aggregate(records, skippable, left_out, empty)
    kept = {(row["dataset"], row["protocol"], row["name"]) for row in rows}
    return rows, [r for r in records if (_config_key(r)[0], _config_key(r)[1],
                                         config_name(r["model"], r["encoding"], r.get("tag") or None)) in kept]


def metric_keys(rows: list[dict]) -> list[str]:
    return sorted({k for row in rows for k in row["metrics"]}, key=metric_order)


def compare(records: list[dict], rows: list[dict], baseline: Optional[str] = None, labels=None,
            own_first: bool = False) -> list[dict]:
    """Attach `row["comparison"]` (pipeline.significance.compare) to every row of a dataset that is
    not its baseline (None on the baseline row). baseline: a configuration name, by default the
    first in sorted order of each (dataset, protocol). `own_first`: a (dataset, protocol) without
    runs of `baseline` (a default, not one the user named) is compared with its own first, as
    `seqpe report` does, rather than left uncompared. Returns the rows."""
    configs: dict[tuple, dict[str, list[dict]]] = {}
    models: dict[str, str] = {}
    for (dataset, protocol, model, encoding, tag), recs in sorted(_by_config(records).items()):
        name = config_name(model, encoding, tag or None)
        configs.setdefault((dataset, protocol), {})[name] = recs
        models[name] = model
    names = sorted({name for group in configs.values() for name in group})
    check_baseline(baseline, names)
    results: dict[tuple, dict] = {}
    if baseline is not None and baseline not in names:          # an encoding: each model against its own
        for key, group in configs.items():                      # MODEL-ENCODING (001 compares within a backbone)
            for model in sorted({models[n] for n in group}):
                own = {n: recs for n, recs in group.items() if models[n] == model}
                base = config_name(model, baseline, None)
                if base in own and len(own) > 1:
                    for comp in significance.compare(own, base, labels):
                        results[(*key, comp["name"])] = comp
        for row in rows:                     # a model without its MODEL-ENCODING is said uncompared (41j #5)
            row["comparison"] = results.get((row["dataset"], row["protocol"], row["name"]))
            base = config_name(models.get(row["name"], ""), baseline, None)
            row["no_baseline"] = base if base not in configs.get((row["dataset"], row["protocol"]), {}) else None
        return rows
    for key, group in configs.items():
        base = baseline if baseline is not None and (baseline in group or not own_first) else next(iter(group))
        if base in group and len(group) > 1:
            for comp in significance.compare(group, base, labels):
                results[(*key, comp["name"])] = comp
    lacking = {key for key, group in configs.items()
               if baseline is not None and baseline not in group and not own_first}
    for row in rows:
        row["comparison"] = results.get((row["dataset"], row["protocol"], row["name"]))
        row["no_baseline"] = baseline if (row["dataset"], row["protocol"]) in lacking else None
    return rows


def check_baseline(baseline: Optional[str], names: list[str]) -> None:
    """A ParamsError unless `baseline` (when given) is one of the configuration `names`, or an encoding some of
    them have (`none`: each model against its own MODEL-none, walk 41i #5); a model's name alone (`pop`) is
    pointed at its configurations (`pop-none`)."""
    if baseline is None or baseline in names:
        return
    import models.encodings as enc
    if baseline in enc.ENCODINGS and any(n.split("-")[1:] == [baseline] for n in names):   # an untagged MODEL-ENC
        return
    fix = unknown("configuration", baseline, names).fix
    own = sorted((n for n in names if n.startswith(f"{baseline}-")), key=lambda n: (not n.endswith("-none"), n))
    if own:
        fix = (f"did you mean {' or '.join(repr(n) for n in own[:3])}? (a configuration is MODEL-ENCODING[-TAG]; "
               f"known: {', '.join(names)})")
    raise ParamsError(f"baseline '{baseline}' is not a configuration of these runs", fix)


def baseline_note(rows: list[dict]) -> Optional[str]:
    """The datasets left uncompared because they have no runs of the named --baseline (they used to be
    left out without a word)."""
    lacking = sorted({(row["dataset"], row["protocol"], row["no_baseline"]) for row in rows if row.get("no_baseline")})
    if not lacking:
        return None
    return "Not compared (no runs of the baseline there): " + ", ".join(
        f"{dataset} ({protocol}) has no {name}" for dataset, protocol, name in lacking) + "."


# --------------------------------------------------------------------------- rendering

def _cell(stat: Optional[dict], scale: float = 100.0) -> str:
    """mean ± CI (sd): x100 metrics to 2 decimals, log loss (x1) to 4, as CTR papers report it and as the
    deltas show it (2 decimals hid 0.6933 vs 0.6917)."""
    if stat is None:
        return ""
    fmt = ".2f" if scale == 100.0 else ".4f"
    text = format(scale * stat["mean"], fmt)
    if stat["ci95"] is not None:
        text += f" ± {format(scale * stat['ci95'], fmt)} (sd {format(scale * stat['std'], fmt)})"
    return text


def _scale(key: str) -> float:
    return 1.0 if key.startswith("logloss") else 100.0


TIE_NOTE = ("Ranking metrics x100 (full ranking, pipeline/REFERENCE.md §5, unless the protocol names sampled candidates: "
            "then the rank among that many sampled items per sample, evaluate.candidates; \"input items excluded\": "
            "a session's own items are not ranked, evaluate.mask_history). Ties: a target with g items above it and t "
            "tied with it is credited the exact mean over ranks g+1..g+t+1 (HR@K = clamp((K-g)/(t+1), 0, 1)); "
            "NaN/inf scores are errors; AUC and gAUC count tied pairs one half. Cells: mean ± half-width of the "
            "95% confidence interval (Student t over seeds) (sd = sample std); one seed shows the mean only.")
CTR_NOTE = ("AUC and gAUC x100 over every test pair (CTR data ranks nothing: pipeline/REFERENCE.md §5, CTR); "
            "tied pairs count one half; gAUC weights each user's AUC by the user's test pairs and leaves out users "
            "with one class only; log loss raw. Cells: mean ± half-width of the 95% confidence interval (Student t "
            "over seeds) (sd = sample std); one seed shows the mean only.")


def _ctr_only(rows: list[dict]) -> bool:
    """Whether every row is of CTR data (AUC, no ranking metric): its tables say nothing of ranking."""
    keys = metric_keys(rows)
    return bool(keys) and "auc" in keys and not any("@" in k for k in keys)


TESTS_NOTE = ("vs baseline: Δ = configuration − baseline over the common seeds (ranking metrics, RR and AUC x100, "
              "logloss raw; with other seeds on either side it differs from the difference of the means above). "
              "Seed test: paired t-test over the common seeds (scipy.stats.ttest_rel), d_z = mean Δ / sd of the "
              "Δs, [95% CI of the mean Δ] (Student t); with fewer than 3 common seeds it concludes nothing and is "
              "left blank. Per-sample tests on the test rows, each configuration's seeds averaged first (the "
              "common seeds; every seed when none is common): Wilcoxon signed-rank (scipy.stats.wilcoxon, "
              "zero differences dropped) on the expected reciprocal rank under the tie rule (next-item) or the "
              "per-sample log loss (CTR), effect = matched-pairs rank-biserial r; paired bootstrap "
              f"(scipy.stats.bootstrap, percentile, {significance.N_RESAMPLES} resamples, seed "
              f"{significance.BOOTSTRAP_SEED}, at most {significance.MAX_BOOTSTRAP_ROWS:,} rows) 95% CI of the "
              "mean RR difference (next-item) or the AUC difference (CTR). A test rejects equality when p < "
              f"{significance.ALPHA} (bootstrap: CI excludes 0), each on its own: no correction is made for the "
              "several tests of a row or the several rows tested against one baseline (with many of them, some "
              "rejection at 0.05 is likely by chance alone; Holm: multiply the k-th smallest of m p-values by "
              "m - k + 1, going up from the smallest and stopping at the first that is not below 0.05: it and the "
              "larger ones reject nothing). The verdict names every test that rejects, with its direction: Wilcoxon "
              "follows the typical per-sample difference (its rank statistic) and the bootstrap the mean, so a "
              "few large differences can point them opposite ways.")


def _compared(rows: list[dict]) -> list[dict]:
    return [row for row in rows if row.get("comparison")]


def _seed_metrics(rows: list[dict]) -> list[str]:
    return sorted({m for row in _compared(rows) for m in row["comparison"]["seed_tests"]}, key=metric_order)


def _num(x: Optional[float], fmt: str) -> str:
    return "" if x is None else format(x, fmt)


def _p(p: Optional[float]) -> str:
    """A p-value for the tables: one below the smallest float (scipy's 0.0 for 22,363 paired samples that differ
    clearly) is shown as such, not as a bare 0 that reads as a bug (walk 39e #2)."""
    return "<1e-300" if p is not None and p < 1e-300 else _num(p, ".3g")


def _delta(value: Optional[float], scale: float, lo: Optional[float] = None, hi: Optional[float] = None) -> str:
    if value is None:
        return ""
    def signed(x: float) -> str:     # two decimals hid what the verdict acts on: a bootstrap interval of
        v, places = scale * x, (2 if scale == 100.0 else 4)          # [-0.0064, -0.0000081] read [-0.01, -0.00]
        return format(v, f"+.{places}f") if v == 0 or abs(v) >= 10 ** -places * 5 else format(v, "+.2g")
    text = signed(value)                                                                      # (walk 40c #2)
    return text if lo is None else f"{text} [{signed(lo)}, {signed(hi)}]"


def _common_seeds(comp: dict) -> str:
    return str(min(t["n"] for t in comp["seed_tests"].values())) if comp["seed_tests"] else "-"


def _several_protocols(rows: list[dict]) -> bool:
    """Whether the rows span evaluation protocols (full ranking and sampled candidates): their numbers are
    not on one scale, so each row then names its protocol."""
    return len({row["protocol"] for row in rows}) > 1


def comparison_header(rows: list[dict]) -> list[str]:
    head = ["dataset"] + (["protocol"] if _several_protocols(_compared(rows)) else []) + ["configuration",
                                                                                       "baseline", "common seeds"]
    for m in _seed_metrics(rows):
        head += [f"Δ {m} [95% CI]", f"p t-test {m}", f"d_z {m}"]
    return head + ["per-sample", "Δ per-sample", "p Wilcoxon", "r rank-biserial", "bootstrap Δ [95% CI]", "verdict"]


def comparison_cells(row: dict, metrics: list[str], protocol: bool = False) -> list[str]:
    comp = row["comparison"]
    cells = [row["dataset"]] + ([row["protocol"]] if protocol else []) + [row["name"], comp["baseline"],
                                                                         _common_seeds(comp)]
    for m in metrics:
        t = comp["seed_tests"].get(m) or {"diff": None, "ci_lo": None, "ci_hi": None, "p": None, "dz": None}
        cells += [_delta(t["diff"], _scale(m), t["ci_lo"], t["ci_hi"]), _p(t["p"]), _num(t["dz"], ".2f")]
    sample = comp["sample"]
    if sample is None:
        cells += [""] * 5
    else:
        boot, statistic = sample["bootstrap"], significance.BOOTSTRAP_STATISTIC[comp["task"]]
        cells += [sample["quantity"], _delta(sample["diff"], _scale(sample["quantity"])), _p(sample["p"]),
                  _num(sample["r"], "+.3f"), f"{_delta(boot['diff'], 100.0, boot['lo'], boot['hi'])} ({statistic})"]
    return cells + [comp["verdict"]]


def unfinished_note(rows: list[dict]) -> Optional[str]:
    """The rows whose seeds all stopped at train.time_limit (report refuses pooling them with finished ones)."""
    cut = [f"{row['dataset']} {row['name']}" for row in rows if row.get("unfinished")]
    if not cut:
        return None
    return (f"Unfinished: every seed of {', '.join(cut)} stopped at train.time_limit (the same `seqpe train` command "
            "with --set train.time_limit=0 finishes them).")


def _checkout(rec: dict) -> Optional[str]:
    """The seqpe code a run was trained with: `code <hash>`, the hash of seqpe's source (run.json's versions since
    session 35); in older records its git commit, `+edits` when tracked files differed; None when unrecorded."""
    v = rec.get("versions") or {}
    if v.get("seqpe_code"):
        return f"code {v['seqpe_code'][:10]}"
    if not v.get("seqpe_git"):
        return None
    return v["seqpe_git"][:10] + ("+edits" if v.get("seqpe_dirty") else "")


def checkout_note(rows: list[dict]) -> Optional[str]:
    """Rows whose seeds came from different checkouts. They are pooled (their settings agree, and a commit
    may change nothing they compute), but a reader should know: an edit may have changed the model."""
    mixed = []
    for row in rows:
        seen: dict = {}
        for seed, where in zip(row["seeds"], row.get("checkouts") or []):
            seen.setdefault(where or "unrecorded", []).append(str(seed))
        if len(seen) > 1:
            mixed.append(f"{row['dataset']} {row['name']} (" + "; ".join(
                f"seed{'s' if len(v) > 1 else ''} {', '.join(v)}: {k}" for k, v in seen.items()) + ")")
    if not mixed:
        return None
    return ("Mixed code: the seeds of " + ", ".join(mixed) + " were trained with different seqpe code (code: a "
            "hash of seqpe's source; in older runs the git commit, +edits: uncommitted changes). They are pooled "
            "because their settings agree; if the code between them changed what a run computes, retrain the odd "
            "seeds with one version.")


CHANCE_AUC = 0.53      # a CTR configuration whose every seed's test AUC is below this is at chance (a coin: 0.5)


def chance_note(rows: list[dict]) -> Optional[str]:
    """The CTR rows whose every seed's test AUC is below CHANCE_AUC, near a coin's 0.5. Walk 42c #2: DIN at 49.6
    and 49.2 passed the constant-model stop (their logits varied a little) and the comparison declared one
    significantly worse, with nothing saying that neither had learnt the labels. (Not "0.5 inside the 95% CI":
    with two seeds that interval is wide enough to take in CAPE at 0.67 and 0.88, walk 42f #3.)"""
    flat = []
    for row in rows:
        auc, top = row["metrics"].get("auc"), row.get("top_auc")
        if auc is None or top is None or top >= CHANCE_AUC:
            continue
        flat.append(f"{row['dataset']} {row['name']} (AUC {_cell(auc).split(' (sd')[0]})")
    if not flat:
        return None
    return ("At chance: " + ", ".join(flat) + f" rank the test pairs about as well as a coin (every seed's AUC "
            f"below {100 * CHANCE_AUC:.0f}; a coin's is 50): such a model has not learnt the labels, and a test "
            "that tells two of them apart says nothing about their settings. Train longer (or raise train.lr), or "
            "check that the data carries a signal this model can use.")


def learnt_note(rows: list[dict]) -> Optional[str]:
    """Rows with seeds whose training loss shows they learnt nothing (run.json "not_learnt", train.loop.not_learnt):
    said on stderr alone, the caveat was lost by the time a report showed their metrics (walk 44c #4)."""
    flat = [f"{row['dataset']} {row['name']} (seed{'s' * (len(row['not_learnt']) > 1)} "
            f"{', '.join(map(str, row['not_learnt']))})" for row in rows if row.get("not_learnt")]
    if not flat:
        return None
    return ("Did not learn: " + ", ".join(flat) + ": the training loss stayed above a uniform guess's or never fell "
            "below the untrained model's (each run.json's not_learnt says which), so these metrics are not a trained "
            "model's. Lower train.lr (or the initialisation), or check that the data carries a signal this model "
            "can use.")


def row_notes(rows: list[dict]) -> list[str]:
    """The notes under the summary: unfinished rows, rows of mixed code, CTR rows at chance, rows that did not
    learn, datasets left uncompared."""
    return [note for note in (unfinished_note(rows), checkout_note(rows), chance_note(rows), learnt_note(rows),
                              baseline_note(rows))
            if note]


def to_markdown(rows: list[dict], left_out: list[dict] = ()) -> str:
    keys = metric_keys(rows)
    head = ["dataset", "protocol", "model", "encoding", "tag", "seeds", *keys]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for row in rows:
        cells = [row["dataset"], row["protocol"], row["model"], row["encoding"], row.get("tag") or "",
                 str(len(row["seeds"])) + (" (unfinished)" if row.get("unfinished") else "")]   # see its note
        cells += [_cell(row["metrics"].get(k), _scale(k)) for k in keys]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [CTR_NOTE if _ctr_only(rows) else TIE_NOTE]
    notes += row_notes(rows) + ([note] if (note := left_out_note(left_out)) else [])
    compared = _compared(rows)
    if compared:
        head, metrics = comparison_header(rows), _seed_metrics(rows)
        lines += ["", "| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        lines += ["| " + " | ".join(comparison_cells(row, metrics, _several_protocols(compared))) + " |"
                  for row in compared]
        notes.append(TESTS_NOTE)
    return "\n".join(lines) + "\n\n" + "\n\n".join(notes) + "\n"


def _csv_comparison(row: dict, metrics: list[str]) -> list:
    comp = row.get("comparison")
    if not comp:
        return [""] * (2 + 5 * len(metrics) + 11)
    raw = lambda x: "" if x is None else repr(x)  # noqa: E731
    out = [comp["baseline"], _common_seeds(comp)]
    for m in metrics:
        t = comp["seed_tests"].get(m) or {}
        out += [raw(t.get(k)) for k in ("diff", "ci_lo", "ci_hi", "p", "dz")]
    sample = comp["sample"]
    if sample is None:
        out += [""] * 10
    else:
        boot = sample["bootstrap"]
        out += [sample["quantity"], sample["n"], raw(sample["diff"]), raw(sample["p"]), raw(sample["r"]),
                significance.BOOTSTRAP_STATISTIC[comp["task"]], raw(boot["diff"]), raw(boot["lo"]), raw(boot["hi"]),
                boot["rows"]]
    return out + [comp["verdict"]]


def to_csv(rows: list[dict]) -> str:
    keys = metric_keys(rows)
    metrics = _seed_metrics(rows)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    head = ["dataset", "protocol", "model", "encoding", "tag", "n_seeds", "seeds", "unfinished_seeds",
            *[f"{k}_{s}" for k in keys for s in ("mean", "std", "ci95")]]     # unfinished: stopped by time_limit
    if _compared(rows):
        head += ["baseline", "common_seeds",
                 *[f"{m}_{s}" for m in metrics for s in ("diff", "diff_ci95_lo", "diff_ci95_hi", "t_p", "dz")],
                 "sample_quantity", "sample_rows", "sample_diff", "wilcoxon_p", "rank_biserial", "bootstrap_statistic",
                 "bootstrap_diff", "bootstrap_ci95_lo", "bootstrap_ci95_hi", "bootstrap_rows", "verdict"]
    w.writerow(head)
    for row in rows:
        out = [row["dataset"], row["protocol"], row["model"], row["encoding"], row.get("tag") or "", len(row["seeds"]),
               " ".join(str(s) for s in row["seeds"]), " ".join(str(s) for s in row.get("unfinished") or [])]
        for k in keys:
            stat = row["metrics"].get(k) or {"mean": None, "std": None, "ci95": None}
            out += ["" if stat[s] is None else repr(stat[s]) for s in ("mean", "std", "ci95")]
        if _compared(rows):
            out += _csv_comparison(row, metrics)
        w.writerow(out)
    return buf.getvalue()


SUMMARY_TITLE = "test metrics over seeds (×100, mean ± 95% CI)"


def summary_view(rows: list[dict], title: str = SUMMARY_TITLE) -> tuple[str, list, list[list[str]]]:
    """(title, columns, cells) of the summary table: one row per configuration, keyed by its name
    (and its dataset when the rows span several; one dataset goes into the title)."""
    from .tables import Col
    keys = metric_keys(rows)
    if any(k.startswith("logloss") for k in keys):       # shown as is (walk 40c #3: the title said ×100)
        title = title.replace("×100", "×100 but logloss")
    datasets = sorted({row["dataset"] for row in rows})
    several, protocols = len(datasets) > 1, _several_protocols(rows)
    if not several and datasets:
        title = f"{title} · {datasets[0]}"
    if rows and not protocols:                          # full ranking or N sampled candidates: never unsaid
        label = rows[0]["protocol"]
        title = f"{title} · {label}" + ("" if "sampled candidates" in label or _ctr_only(rows) else ", full ranking")
    cols = (([Col("dataset", key=True)] if several else []) + ([Col("protocol", key=True)] if protocols else [])
            + [Col("configuration", key=True), Col("seeds", "right")])
    cols += [Col(k, "right", group=k.split("@")[0]) for k in keys]
    cells = []
    for row in rows:   # mean ± CI on the first line, the sample std under it
        cells.append(([row["dataset"]] if several else []) + ([row["protocol"]] if protocols else [])
                     + [row["name"], str(len(row["seeds"]))]
                     + [_cell(row["metrics"].get(k), _scale(k)).replace(" (sd ", "\nsd ").rstrip(")") for k in keys])
    return title, cols, cells


COMPARISON_TITLE = ("vs baseline (Δ = configuration − baseline over the common seeds, ×100 but logloss; "
                    "each test at 0.05, uncorrected for multiple tests)")


def comparison_view(rows: list[dict]) -> Optional[tuple[str, list, list[list[str]]]]:
    """(title, columns, cells) of the significance table, or None when no row was compared."""
    from .tables import Col
    compared = _compared(rows)
    if not compared:
        return None
    head, metrics = comparison_header(rows), _seed_metrics(rows)
    left = ("dataset", "protocol", "configuration", "baseline", "verdict", "per-sample")
    cols = [Col(h, "left" if h in left else "right", key=h in ("dataset", "protocol", "configuration"),
                wrap=h == "verdict") for h in head]
    return COMPARISON_TITLE, cols, [comparison_cells(row, metrics, "protocol" in head) for row in compared]


def print_tables(console, rows: list[dict]) -> None:
    """The summary and (when there is one) the comparison, fitted to the console's width
    (pipeline.tables: names never cut, columns split over several tables when needed)."""
    from .tables import print_tables as show
    show(console, *summary_view(rows))
    for note in row_notes(rows):
        console.print(note, highlight=False, markup=False, soft_wrap=True)
    view = comparison_view(rows)
    if view is not None:
        show(console, *view)


def rich_table(rows: list[dict], title: str = SUMMARY_TITLE):
    """The summary as one rich Table (no width fitting; `print_tables` fits it)."""
    from .tables import tables
    title, cols, cells = summary_view(rows, title)
    return tables(title, cols, cells, width=10**6)[0]


def comparison_table(rows: list[dict]):
    """The significance table as one rich Table, or None when no row was compared."""
    from .tables import tables
    view = comparison_view(rows)
    return None if view is None else tables(*view, width=10**6)[0]


def to_json(rows: list[dict], left_out: list[dict] = ()) -> list[dict]:
    """The rows for `seqpe report --json`: stable keys, raw values in [0, 1] (not x100): dataset,
    protocol, model, encoding, tag, configuration, seeds, best_epochs, unfinished (the seeds stopped at
    train.time_limit), checkouts (each seed's code: `code <hash>`, or an older record's git commit; the "Mixed
    code" note), metrics {name: {mean, std, ci95, n}}, comparison (None, or the baseline test results of
    pipeline.significance) and left_out (None). Then one entry per configuration left out because its
    seeds cannot be pooled (`aggregate`): the same keys, its seeds, metrics {}, and left_out {reason, fix}
    (they were a stderr note only, which a script reading the JSON never sees)."""
    out = []
    for row in rows:
        out.append({"dataset": row["dataset"], "protocol": row["protocol"], "model": row["model"],
                    "encoding": row["encoding"], "tag": row.get("tag"), "configuration": row["name"],
                    "seeds": row["seeds"], "best_epochs": row["best_epochs"], "unfinished": row["unfinished"],
                    "checkouts": row.get("checkouts"), "metrics": row["metrics"],
                    "comparison": row.get("comparison"), "left_out": None})
    for e in left_out:
        out.append({**{k: e[k] for k in ("dataset", "protocol", "model", "encoding", "tag", "configuration",
                                         "seeds")},
                    "best_epochs": None, "unfinished": None, "checkouts": None, "metrics": {}, "comparison": None,
                    "left_out": {"reason": e["reason"], "fix": e["fix"]}})
    return out


def check_out(out: str | Path) -> Path:
    """The report file `out`, checked before any work: .md or .csv, not inside a folder another seqpe
    stage replaces whole (io.refuse_nested), and new or a report seqpe wrote (io.claim_file)."""
    out = Path(out)
    if out.suffix.lower() not in (".md", ".csv"):
        raise ParamsError(f"report file '{out}' must end in .md or .csv", "pass --out report.md or --out report.csv")
    refuse_nested(out, "report file", "e.g. --out report.md")
    claim_file(out, "report", lambda p: starts_with(p, "| dataset | protocol |", "dataset,protocol,"),
               f"--out report{out.suffix.lower()}")
    return out


def write_report(rows: list[dict], out: str | Path, left_out: list[dict] = ()) -> Path:
    out = check_out(out)
    text = to_markdown(rows, left_out) if out.suffix.lower() == ".md" else to_csv(rows)
    with deferred_interrupt():     # the file is the command's output: a Ctrl-C at its rename waits for it, and the
        write_bytes(out, text.encode("utf-8"))    # note says it is the new one (walk 43c #1)
    return out


def _next_item_samples(folder: str | Path) -> bool:
    """`folder` is a next-item samples folder seqpe wrote (its manifest says so)."""
    from .io import MANIFEST, manifest_kind, read_manifest
    if not (Path(folder) / MANIFEST).is_file():
        return False
    try:
        m = read_manifest(folder)
    except DataError:
        return False
    return manifest_kind(m) == "samples" and m.get("protocol") not in (None, "ctr")


def _default_samples(records: list[dict], roots: list) -> Optional[Path]:
    """The samples folder the CTR runs under `roots` were trained on, when `--samples` is not given: the
    dataset's data/samples/DATASET (beside the runs folder, or under the working directory) whose shards are
    the ones every CTR run records (`samples_digest`). None when the runs are of several datasets or
    samples, or no such folder is found: the per-sample tests are then left out with a note, as before."""
    ctr = [r for r in records if "ctr" in (r.get("task"), r.get("protocol"))]
    keys = {(r.get("dataset"), r.get("samples_digest")) for r in ctr}
    if len(keys) != 1:
        return None
    (dataset, digest), = keys
    if not dataset or not digest:
        return None
    from .io import MANIFEST, read_manifest
    from .train.runs import samples_digest
    places = []
    for root in map(Path, roots):
        if root.name == "runs":
            places.append(root.parent / "samples" / dataset)
        elif root.parent.name == "runs":
            places.append(root.parent.parent / "samples" / dataset)
    places.append(Path("data") / "samples" / dataset)
    for place in places:
        try:
            found = (place / MANIFEST).is_file() and samples_digest(read_manifest(place)) == digest
        except Exception:                       # an unreadable manifest is not these runs' samples
            found = False
        if found:
            sys.stderr.write(f"note: the CTR per-sample tests read the test labels of {place}, the samples these "
                             "runs were trained on (--samples picks another)\n")
            return place
    return None


def run(roots: list[str | Path], out: Optional[str | Path] = None, baseline: Optional[str] = None,
        samples: Optional[str | Path] = None, left_out: Optional[list] = None, empty: bool = False) -> list[dict]:
    """Aggregate every run under `roots`, compare each configuration with `baseline` (default: each
    dataset's first), write `out` (.md or .csv) when given; return the rows. `samples`: the samples
    folder of a CTR dataset, whose test labels the per-sample CTR tests need (default: `_default_samples`). `left_out`: a list that
    receives the configurations left out (`aggregate`); `empty`: every one left out gives no rows, not an error
    (`report --json` without --out: its entries then list them all, each with its reason)."""
    left_out = [] if left_out is None else left_out
    import os
    roots = [roots] if isinstance(roots, (str, os.PathLike)) else list(roots)    # one folder (walk 41h #4)
    if out is not None:
        check_out(out)
    records = find_runs(roots)
    if not records:
        for root in roots:
            if (wrong := not_runs(root)) is not None:
                raise wrong
        raise DataError(f"no run.json under {', '.join(str(r) for r in roots)}", "run `seqpe train DATASET` first")
    rows, records = pooled(records, lambda name: True, left_out, empty and out is None)
    ctr = any("ctr" in (r.get("task"), r.get("protocol")) for r in records)
    if samples is not None and not ctr and _next_item_samples(samples):   # as dvc.yaml's evaluate passes it for
        sys.stderr.write(f"note: --samples {samples} was not read: next-item runs need no test labels\n")   # every
        samples = None                                                                   # dataset (walk 39f #5)
    if samples is None and ctr:
        samples = _default_samples(records, roots)
    labels = significance.read_test_labels(samples) if samples is not None else None
    if samples is not None and not ctr:                     # walk 34a
        raise ParamsError(f"--samples gives the test labels of CTR runs, and the runs under "
                          f"{', '.join(str(r) for r in roots)} are next-item runs, which need none", "drop --samples")
    if rows:                            # (every configuration left out, `empty`: nothing to compare, nor a baseline)
        compare(records, rows, baseline, labels)
    if out is not None:
        write_report(rows, out, left_out)
    return rows
