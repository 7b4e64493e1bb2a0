"""`seqpe train`: every seed of one (model, encoding[, tag]) configuration on one samples folder."""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Optional

from .. import presets
from ..errors import ConstantModel, DataError, Diverged, NonFiniteScores, ParamsError, TrainingError
from ..io import claim_dir, claim_file, refuse_nested, require_kind, spelt_like, stale_samples, verify_shards
from ..params import EvaluateParams, Params, TrainParams, check_seeds, from_dict, to_dict
from ..report import config_name
from ..versions import code_versions, versions
from . import distributed, heap, runs, setup, state, threads
from .loop import LAST_SAVED, checked, fit_epochs
from .tasks import make_task, selection


def samples_manifest(dataset: str, samples_dir: Path) -> dict:
    """The samples folder's manifest (a samples folder whose every shard matches its sha256, or a one-line error
    naming the right one): a truncated or edited shard is named here, not met as Polars' traceback mid-load."""
    manifest = require_kind(samples_dir, "samples", dataset, "train")
    verify_shards(samples_dir, manifest)
    if setup.task_of(manifest) == "next_item" and (not isinstance(manifest.get("n_items"), int)
                                                    or manifest["n_items"] < 1):
        raise DataError(f"{Path(samples_dir) / 'manifest.json'} has no positive integer n_items",
                        "re-run `seqpe augment` for this dataset")
    return manifest


def resolve_config(dataset: str, manifest: dict, params: Params, model: Optional[str], encoding: Optional[str],
                   preset: Optional[str] = None, overrides: Optional[list[str]] = None, machine: bool = True):
    """What `seqpe train DATASET --model M --encoding E` trains with on samples of `manifest`: (task, params with
    the run's options, model spec, encoding name, TrainParams as run.json records them, the preset applied, the
    preset resolved). `seqpe evaluate` calls it too, to check that a grid's runs were trained as params.yaml
    says now, with `machine` False: ce_impl / precision / threads `auto` are left as `auto`, not what they
    pick on this machine."""
    from models import MODELS

    kind = setup.task_of(manifest)
    explicit = presets.explicit_train_keys(overrides)
    params = dataclasses.replace(params, train=params.train_for(kind, tuple(explicit)))   # study.<task>.train
    spec = setup.pick_model(model, kind, params, MODELS)
    if preset is None and (preset := grid_preset(params, kind, spec, MODELS)) is not None:
        # study.<task>.train is the grid's own: its keys win over the grid's preset, as --set keys do over
        # --preset (walk 41j #2: a preset silently undid the grid's epochs and max_len)
        explicit = set(explicit) | set(getattr(params.study, kind).train)
    setup.check_option_names(params, MODELS)
    twin = _layout_twin(manifest) if kind == "ctr" else None
    res = presets.resolve(spec.presets, preset, spec.name, dataset, twin)
    enc_name = setup.pick_encoding(spec, encoding, kind, params, res.train.get("encoding"))
    tp, params, applied = setup.resolve_run(params, spec, preset, spec.name, enc_name, dataset, explicit, twin)
    if kind == "ctr":
        params = _ctr_settings(params, tp, spec, explicit, overrides)
    tp = _drop_ignored(tp, spec, params, overrides)
    params = _drop_unread_options(params, spec, overrides, manifest)
    if kind != "ctr":
        params = _full_ranking_settings(params, overrides)
    if kind != "ctr" and tp.heads and tp.dim is not None and tp.dim % tp.heads:   # CTR: models.ctr.layers (fields x dim)
        raise ParamsError(f"train.dim ({tp.dim}) must be divisible by train.heads ({tp.heads}), which "
                          f"'{spec.name}' splits it into", "change train.dim or train.heads")
    if machine:                    # CTR too: its precision was recorded "auto" and fp32 retrained it (walk 40d #4)
        tp = _resolve_auto(tp, ctr=kind == "ctr", params=params, kind=kind)
    if machine and (tp.threads == "auto" or tp.threads == 0):     # the count auto / torch's default picks here, in run.json and
        tp = dataclasses.replace(tp, threads=threads.resolve(tp.threads))   # the fingerprint (walk 37b D3, 38a D7)
    return kind, params, spec, enc_name, tp, applied, res


def grid_preset(params: Params, kind: str, spec, registry: dict) -> Optional[str]:
    """study.<task>.preset for a run given no --preset: dvc.yaml's train stages pass none, so 001's settings
    (lr, batch size per CTR dataset) could not be the grid's (walk 41i #4). A name (or NAME_VARIANT) no model of
    the grid has is an error (a typo); a model without it trains with params.yaml's settings, said in a note."""
    grid = getattr(params.study, kind, None)
    name = getattr(grid, "preset", None)
    if not name:
        return None

    def has(model_spec) -> bool:
        return bool(model_spec.presets) and (name in model_spec.presets or presets._forced(model_spec.presets, name)
                                             is not None)
    if has(spec):
        return name
    grid_models = [registry[m] for m in (*grid.models, *grid.baselines) if m in registry]
    if not any(has(s) for s in grid_models):
        raise ParamsError(f"study.{kind}.preset is {name!r}, a preset no model of the {kind} grid has "
                          f"({', '.join(m.name for m in grid_models) or 'none'})",
                          "set it to one of theirs (`seqpe models` lists the presets), or null")
    if os.environ.get("RANK", "0") == "0":
        sys.stderr.write(f"note: study.{kind}.preset is {name}, and '{spec.name}' has no such preset: it trains "
                         "with params.yaml's settings\n")
    return None


def run(dataset: str, samples_dir: Path, runs_dir: Path, params: Params, *, model: Optional[str] = None,
        encoding: Optional[str] = None, seeds: Optional[list[int]] = None, preset: Optional[str] = None,
        progress: bool = True, overrides: Optional[list[str]] = None, tag: Optional[str] = None,
        metrics_path: Optional[Path] = None, live_dir: Optional[Path] = None, check: bool = False) -> list[dict]:
    """Train every seed of one configuration; return one summary per run.

    Only the samples manifest describes the data (task, n_items or the CTR schema): `dataset` need not
    be a registered name (`seqpe import diginetica_srgnn ...` then `seqpe train diginetica_srgnn`), but
    it must be the one the samples carry (io.require_kind); it picks the preset's dataset variant.
    `overrides` are the command line's --set strings: their `train.*` keys win over the preset.
    `metrics_path` / `live_dir`: the configuration's DVC metrics file and dvclive curves (the study
    grid's stages pass them). `check`: every check of a real run, then the model built once on the CPU
    from the samples; nothing trained, nothing written (`seqpe train --check`: a script queueing hours of
    runs checks each command first)."""
    from models import MODELS

    setup.check_tag(tag)
    manifest = samples_manifest(dataset, Path(samples_dir))
    kind, params, spec, enc_name, tp, applied, res = resolve_config(dataset, manifest, params, model, encoding,
                                                                    preset, overrides)
    explicit = presets.explicit_train_keys(overrides)
    if tp.objective == "sequence" and not spec.causal:
        causal = sorted(n for n, sp in MODELS.items() if sp.causal)
        raise ParamsError(f"train.objective sequence needs a causal backbone, and '{spec.name}' is not one",
                          f"use one of: {', '.join(causal)}; or train.objective: prefixes")
    if tp.objective == "sequence" and manifest.get("augment", {}).get("train") not in (None, "shifted"):
        source = (f"--preset {preset} sets it" if "objective" in applied.train and "objective" not in explicit
                  else "it is set")
        raise ParamsError(f"train.objective is sequence ({source}), which needs leave-one-out data (whole "
                          f"sequences), and {samples_dir} holds {manifest.get('protocol')} (prefix, target) samples",
                          "add --set train.objective=prefixes (each prefix its own sample), or train on a "
                          "leave-one-out dataset")
    if tp.compile == "reduce-overhead":
        _check_graphs(tp)
    check_seeds(seeds or [])
    seeds = list(dict.fromkeys(seeds or params.study.seeds))    # --seed 1 --seed 1 trains and reports seed 1 once
    config = config_name(spec.name, enc_name, tag)
    refuse_nested(runs_dir, "runs", f"e.g. data/runs/{dataset}", itself=True)
    runs.check_runs_dir(runs_dir, dataset)
    state.check_root()                                  # SEQPE_STATE: a folder of its own, writable
    for path, what, instead in ((metrics_path, "metrics file", f"e.g. data/metrics/{dataset}/CONFIG.json"),
                                (live_dir, "curves", f"e.g. data/live/{dataset}/CONFIG")):
        if path is not None:
            refuse_nested(path, what, instead, itself=what == "curves")
    grid = getattr(params.study, kind)
    in_grid = metrics_path is not None and tag is None and config in grid.configs()
    if in_grid:                                         # a study stage of dvc repro: the whole grid, before any
        _check_grid_names(grid, kind, MODELS)           # configuration trains (was: at the bad pair's own stage)
    if live_dir is not None:
        runs.claim_curves(live_dir, f"data/live/{dataset}/{config}")
    if metrics_path is not None:
        claim_file(metrics_path, "metrics file", runs.is_config_metrics, f"data/metrics/{dataset}/{config}.json")
        other = runs.metrics_configuration(metrics_path)
        stem = Path(metrics_path).stem              # a file of seqpe's older than the key: its grid name says whose
        if other is None and Path(metrics_path).is_file() and stem != config and stem.split("-")[0] in MODELS:
            other = f"{stem} (by its name: written by an older seqpe, it does not record whose numbers it holds)"
        if other is not None and other != f"{dataset} {config}":   # another configuration's numbers (walk 32b)
            raise DataError(f"{metrics_path} holds the metrics of {other}, and this run is {dataset} {config}: "
                            f"--metrics would replace them", f"pass this configuration's own file, e.g. "
                            f"data/metrics/{dataset}/{config}.json (or delete {metrics_path} if it is not needed)")
    run_dirs = {seed: Path(runs_dir) / config / f"seed-{seed}" for seed in seeds}
    for run_dir in run_dirs.values():
        claim_dir(run_dir, None, "run")
    if live_dir is not None:
        for seed, run_dir in run_dirs.items():
            runs.claim_seed_curves(Path(live_dir) / f"seed-{seed}", run_dir, f"{dataset} {config} seed {seed}")
    setup.select_metric(tp, selection(kind, params))    # refused here, not after the samples load (nor ok'd by --check)
    if kind == "next_item":
        _check_cutoffs(params.evaluate, manifest)
    if spec.fitted:
        distributed.refuse(f"train --model {spec.name}")
    note = presets.variant_note(spec.presets, res, spec.name, dataset)     # once the command is known to be good
    if note and os.environ.get("RANK", "0") == "0":                       # torchrun: once, from rank 0
        sys.stderr.write(f"note: {note}\n")
    cut = _cut_shorter(manifest, tp, samples_dir, applied, explicit)
    if cut and os.environ.get("RANK", "0") == "0":
        sys.stderr.write(f"note: {cut}\n")
    stale = stale_samples(samples_dir, manifest)
    if stale and os.environ.get("RANK", "0") == "0":
        sys.stderr.write(f"note: {stale}; this run trains on the samples as they are\n")
    _AFTER_BUILD.clear()
    if tp.encoding == "alibi" and tp.heads == 1 and tp.max_len and os.environ.get("RANK", "0") == "0":
        # walk 42c #1: every test metric equal to `none`'s over 3 seeds, and nothing said why. Said once the model
        # is built: before a model that refuses alibi (dmin, token_mixing), it advised on a run that never came
        _AFTER_BUILD.append(f"note: alibi with one head has Press et al.'s slope 2^-8 (2^(-8h/H)): a logit moves by "
                            f"at most {(tp.max_len - 1) / 256:.2g} at max_len {tp.max_len}, so the model may differ "
                            f"little from `none`; with train.heads 8 the slopes are 2^-1 .. 2^-8\n")
    n_items = manifest.get("n_items")
    if tp.loss == "sampled" and isinstance(n_items, int) and tp.negatives >= n_items \
            and os.environ.get("RANK", "0") == "0":     # 100,000 draws from 479 items trained 16x slower (walk 33a)
        sys.stderr.write(f"note: train.negatives is {tp.negatives:,}, and the data has {n_items:,} items: the sampled "
                         f"softmax draws its negatives with replacement, so train.loss ce (each item once, exact) is "
                         f"cheaper than this\n")
    owner = runs.dvc_output_of(Path(runs_dir) / config)
    if owner is not None and owner[1] != (Path(runs_dir) / config).resolve():
        where = "is" if owner[1] == Path(runs_dir).resolve() else f"is inside {spelt_like(owner[1], runs_dir)},"
        raise DataError(f"{runs_dir} {where} the output of DVC stage {owner[0]}, which `dvc repro` "
                        f"(and `dvc checkout`) replaces whole, deleting the runs", f"pass the dataset's own runs "
                        f"folder, e.g. data/runs/{dataset}")
    if owner is not None and os.environ.get("RANK", "0") == "0":
        sys.stderr.write(f"note: {Path(runs_dir) / config} is the output of DVC stage {owner[0]}: its next `dvc "
                         f"repro` replaces the folder, seeds trained here by hand included (--tag NAME trains into a "
                         f"folder of its own)\n")
    if check:
        return [_check_build(dataset, samples_dir, params, spec, tp, applied, manifest, kind, seeds, config, run_dirs)]
    threads.apply(tp.threads)                          # train.threads (pipeline/train/threads.py)
    dist, device = distributed.setup(tp.device)
    _check_loss_impl(tp, device)
    if device.type == "cpu":
        heap.keep()                                    # reuse freed step buffers (pipeline/train/heap.py)
    before = _deterministic(device)
    # `state --prune --all` keeps what this command needs; rank 0's (another node's rank writes no state)
    held = state.hold_config(dataset, config) if dist.main else None
    try:
        _same_on_every_rank(dist, tp, params, manifest, seeds)
        results = _seeds(dataset, samples_dir, params, spec, tp, applied, manifest, kind, seeds, config, run_dirs,
                         tag, device, dist, progress, metrics_path, live_dir, in_grid)
    except BaseException as e:
        distributed.teardown(dist, clean=False)
        if dist.active and distributed.peer_lost(e):   # another rank died: its backend's traceback said nothing
            raise TrainingError(f"another process of this torchrun job stopped while {dataset} {config} trained "
                                f"({distributed.first_line(e)})", "the finished epochs of each seed are kept: run "
                                "the same torchrun command again, and it goes on from them") from None
        raise
    finally:
        _restore_deterministic(before)
        state.release_config(held)
    distributed.teardown(dist)
    return results


def _same_on_every_rank(dist, tp, params: Params, manifest: dict, seeds) -> None:
    """Under torchrun, refuse processes started with other settings or samples (the README's multi-node form
    runs one command per node: a --set, a params.yaml or node-local samples can differ): each trained with its
    own, and they met in collectives that never match, a hang of gloo's 30 minutes that SIGTERM did not end
    (walk 40g #2). Compared: the seeds and the first seed's fingerprint inputs (settings, samples' shards, code)."""
    if not dist.active:
        return
    every = dist.gather_objects({"seeds": list(seeds), "inputs": job_inputs(tp, params, manifest, seeds[0],
                                                                            dist.world)})
    for rank, other in enumerate(every):
        if other != every[0]:
            found = f"seeds: {every[0]['seeds']} vs {other['seeds']}" if other["seeds"] != every[0]["seeds"] \
                else runs.inputs_change(runs.shown_inputs(every[0]["inputs"]), other["inputs"])
            raise ParamsError(f"the processes of this torchrun job were started with other settings (rank 0 vs "
                              f"rank {rank}: {found or 'their inputs'})",
                              "start every node's command with the same params, --set values, seeds and samples")


MACHINE_KEYS = ("threads", "device", "compile")      # train keys each machine resolves for itself


def job_inputs(tp, params: Params, manifest: dict, seed: int, world: int) -> dict:
    """What the processes of one torchrun job must agree on: the fingerprint's inputs but the train keys a
    machine resolves for itself (`threads: auto` or 0 is each machine's core count, `device: auto` its
    device): identical commands on two nodes, one with OMP_NUM_THREADS=1, were refused as "train.threads: 1 vs
    2" (walk 41a #1). Rank 0's, with its own, names the run."""
    key = runs.fingerprint_inputs(tp, params, manifest, seed, world=world)
    return {**key, "train": {k: v for k, v in key["train"].items() if k not in MACHINE_KEYS}}


def _deterministic(device) -> Optional[tuple[bool, bool]]:
    """On the CPU, torch's deterministic algorithms for the training (walk 40d #1): with more than one thread,
    the backward of `table[idx]` (repeated rows: sampled / bce negatives, DIEN's and DMIN's auxiliary negatives)
    is a parallel atomic add whose order changes from run to run, so DIEN trained twice at 2 threads gave two
    checkpoints; torch's own switch makes it the sorted, deterministic accumulation (same speed in a probe, and
    it also covers any such lookup not found yet). Returns the previous setting for `_restore_deterministic`
    (None: left alone, on CUDA, where the switch needs CUBLAS_WORKSPACE_CONFIG and refuses some kernels)."""
    import torch
    if device.type != "cpu":
        return None
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(True, warn_only=True)
    return before


def _restore_deterministic(before: Optional[tuple[bool, bool]]) -> None:
    import torch
    if before is not None:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


_FUSED_LOSSES = {"cce": "cut_cross_entropy", "liger": "liger_kernel"}       # train.ce_impl -> its package


def _check_loss_impl(tp, device) -> None:
    """train.ce_impl cce / liger need CUDA and their package, train.precision tf32 a CUDA GPU with TF32 (compute
    capability 8.0, Ampere, or later): said before training (it was the first step)."""
    import importlib.util
    if tp.precision == "tf32":
        if device.type != "cuda":
            raise ParamsError("train.precision is tf32, which is a mode of CUDA GPUs' tensor cores, and this run "
                              "trains on the CPU", "use train.precision: fp32 (or auto) on the CPU")
        import torch
        major, minor = torch.cuda.get_device_capability(device)
        if major < 8:
            raise ParamsError(f"train.precision is tf32, and {torch.cuda.get_device_name(device)} (compute "
                              f"capability {major}.{minor}) has no TF32: it needs 8.0 (Ampere) or later",
                              "use train.precision: fp32")
    package = _FUSED_LOSSES.get(tp.ce_impl)
    if package is None or tp.loss != "ce":
        return
    if device.type != "cuda":
        raise ParamsError(f"train.ce_impl is {tp.ce_impl}, which runs on CUDA only, and this run trains on the CPU",
                          "use train.ce_impl: chunked (any device), plain or auto")
    if importlib.util.find_spec(package) is None:
        name = package.replace("_", "-")
        raise ParamsError(f"train.ce_impl is {tp.ce_impl}, which needs the {name} package, and it is not installed",
                          f"pip install {name} (Linux with CUDA), or use train.ce_impl: chunked")


_AFTER_BUILD: list[str] = []     # notes on a run, written once its model has been built (`_said_after_build`)


def _said_after_build() -> None:
    while _AFTER_BUILD:
        sys.stderr.write(_AFTER_BUILD.pop(0))


def _check_build(dataset, samples_dir, params, spec, tp, applied, manifest, kind, seeds, config, run_dirs) -> dict:
    """`--check`: the device, the samples loaded and the model built on the CPU, as a run would (an option
    the model refuses, a width the heads do not divide), each seed's locks probed (a seed another process
    is training) and whether it would be reused or replace a run of other settings; nothing trained or
    written. Under train.memory_budget loading would write the memory maps, so the model is not built."""
    import torch
    _check_loss_impl(tp, setup.pick_device(tp.device))
    summary = {"name": config, "seeds": seeds, "runs": [str(d) for d in run_dirs.values()], "parameters": None,
               "reused": []}
    task = None
    if not tp.memory_budget:
        task = make_task(kind, samples_dir, manifest, tp, params, spec, torch.device("cpu"))
        torch.manual_seed(0)
        summary["parameters"] = sum(p.numel() for p in task.build(params).parameters())
    _said_after_build()                                # (not built under a memory budget: said all the same)
    world = distributed.check_env()[0]                 # torchrun's variables as the run reads them
    if world > 1 and task is not None:                  # Dist.shard's refusal, said before the hours of queue
        n = sum(1 for _ in task.batches(torch.Generator().manual_seed(0)))
        if n < world:
            raise ParamsError(f"an epoch of {dataset} would have no training step: {distributed.too_few(n, world)}",
                              distributed.too_few_fix(world))
    if task is not None and os.environ.get("RANK", "0") == "0":
        _note_siblings(run_dirs, _settings(tp, params, spec, task, applied, world, manifest))
    for seed in seeds:
        key = runs.fingerprint_inputs(tp, params, manifest, seed, world=world)
        fp = runs.hash_inputs(key)
        state.probe_seed(fp, run_dirs[seed], f"{dataset} {config} seed {seed}")
        if runs.finished(run_dirs[seed], fp, restore=False) is not None:
            summary["reused"].append(seed)
        elif task is not None and os.environ.get("RANK", "0") == "0":     # torchrun: rank 0 says it, once
            _note_replacing(run_dirs[seed], fp, _settings(tp, params, spec, task, applied, world, manifest))
            _note_other_resume(f"{dataset} {config} seed {seed}", fp, key, run_dirs[seed])
    return summary


def _check_cutoffs(ev, manifest: dict) -> None:
    """Refuse a cut-off K at or above the number of items each target is ranked among (the data's n_items, or
    evaluate.candidates + 1): HR@K is then 1 for every model, a constant one too, and as train.select_metric it
    kept epoch 1 whatever came after (walk 34a: evaluate.candidates 5 with hr@10; evaluate.ks [10, 500] on 479
    items). Candidates past the data's other items rank no more: min(candidates + 1, n_items) (walk 36b: 1,000
    candidates on 479 items let HR@479 = 1 through)."""
    n_items = manifest.get("n_items")
    sampled = bool(ev.candidates) and not (isinstance(n_items, int) and ev.candidates + 1 >= n_items)
    ranked = ev.candidates + 1 if sampled else n_items
    if not isinstance(ranked, int):
        return
    if ranked < 2:          # one item: every model ranks it first; no cut-off helps (walk 44c #6)
        raise DataError(f"these samples have n_items {ranked}: with one item every model ranks the target first, "
                        "so there is nothing to learn or to measure", "preprocess data with more than one item "
                        "(check the raw file and preprocess.min_item_count / k_core)")
    among = (f"the target and its evaluate.candidates {ev.candidates} negatives" if sampled else
             "the data's n_items" + (f", fewer than evaluate.candidates {ev.candidates} + 1" if ev.candidates else ""))
    top = [k for k in ev.ks if k >= ranked]
    if top:
        below = [k for k in ev.ks if k < ranked]
        raise ParamsError(f"evaluate.ks has {', '.join(map(str, top))}, and each target is ranked among {ranked:,} "
                          f"items ({among}): HR@{top[0]} would be 1 for any model, a constant one too",
                          f"use cut-offs below {ranked:,}" + (f" (e.g. {below})" if below else "")
                          + (", or more evaluate.candidates" if sampled else ""))


def _cut_shorter(manifest: dict, tp, samples_dir, applied, explicit) -> Optional[str]:
    """A note when `seqpe augment` cut the sequences shorter than train.max_len: the model then never sees more
    than the cut, while run.json records train.max_len (ML-1M's preset sets 200; samples augmented with
    augment.max_len 20 trained at 20 without a word)."""
    cut = (manifest.get("params") or {}).get("max_len_applied")
    longest = manifest.get("max_len")
    if not isinstance(cut, int) or cut <= 0 or tp.max_len <= cut or not isinstance(longest, int) or longest < cut:
        return None
    source = (f" (--preset {applied.name} sets it)" if "max_len" in applied.train and "max_len" not in explicit
              else "")
    return (f"train.max_len is {tp.max_len}{source}, but {samples_dir} holds sequences cut to their last {cut} items "
            f"(augment.max_len {cut}), so the model sees at most {cut}: re-run `seqpe augment` with augment.max_len "
            f">= {tp.max_len} for the longer setting")


def _check_grid_names(grid, kind: str, models: dict) -> None:
    """Every model of study.<kind> is registered, of the grid's task, and (under models:) takes an encoding. DVC
    ran the grid's stages one by one, so `gru4rec` under models: failed at its own stage, after the others had
    trained, with a fix for the command line ("drop --encoding") that a `dvc repro` user never typed."""
    from ..errors import unknown
    for part in ("models", "baselines"):
        for name in getattr(grid, part):
            if name not in models:
                raise unknown(f"model under study.{kind}.{part}:", name, models)
            spec = models[name]
            if spec.task != kind:
                other = "ctr" if spec.task == "ctr" else "next_item"
                raise ParamsError(f"study.{kind}.{part} lists '{name}', a {setup.TASKS[spec.task]} model, and this "
                                  f"grid trains {setup.TASKS[kind]} datasets", f"move it to study.{other}.{part}")
            if part == "models" and not spec.uses_encoding:
                raise ParamsError(f"study.{kind}.models lists '{name}', which takes no positional encoding, so the "
                                  f"grid's {name} x {', '.join(grid.encodings)} cannot run",
                                  f"move {name} to study.{kind}.baselines (trained once, as {name}-none)")


def _check_grid_builds(task, params: Params, kind: str) -> None:
    """Every model x encoding of study.<kind> built once on the CPU from this stage's samples, so a pair a model
    refuses (STAMP with an attention-stage encoding, DIN with RMHA) is said before this configuration trains,
    not at that pair's own stage hours later. Building draws no seeded stream: each seed reseeds before its own."""
    import copy

    import torch
    from models import MODELS
    grid = getattr(params.study, kind)
    pairs = [(m, e) for m in grid.models for e in grid.encodings] + [(b, "none") for b in grid.baselines]
    rng = torch.random.get_rng_state()
    try:
        for model, encoding in pairs:
            other = copy.copy(task)
            # params.train: the configuration's train params before the keys its own model never reads were
            # nulled (a POP stage's task has no dim for SASRec's build)
            other.tp, other.spec = dataclasses.replace(params.train, model=model, encoding=encoding), MODELS[model]
            try:
                other.build(params)
            except ParamsError as e:
                raise ParamsError(f"the study grid (study.{kind}) pairs {model} with {encoding}, which cannot run: "
                                  f"{e.problem}", f"take {encoding} out of study.{kind}.encodings or {model} out of "
                                  f"study.{kind}.models" + (f" ({e.fix})" if e.fix else "")) from None
    finally:
        torch.random.set_rng_state(rng)


def _check_graphs(tp) -> None:
    """train.compile: reduce-overhead captures each training step as CUDA graphs: one process on a CUDA device."""
    if distributed.world_size() > 1:
        raise ParamsError(f"train.compile is reduce-overhead, which captures each step as CUDA graphs in one "
                          f"process, and this run has {distributed.world_size()} (torchrun)",
                          "use train.compile: true under torchrun, or run one process")
    if setup.pick_device(tp.device).type != "cuda":
        raise ParamsError("train.compile is reduce-overhead, which replays each step as captured CUDA graphs, "
                          "and this run trains on the CPU", "use train.compile: true (or false) on the CPU, or "
                          "train on a CUDA device")


_CTR_TRAIN = {key: getattr(TrainParams(), key)      # what CTR training does: the defaults of keys it never reads
              for key in ("loss", "objective", "memory_budget", "ce_impl", "bucket")}   # (its loss is BCE on the
                                                                                       # logit; no length buckets)
_CTR_EVALUATE = ("ks", "candidates", "mask_history", "candidate_sampling")   # ranking-only evaluate keys


def _ctr_settings(params: Params, tp, spec, explicit: list[str], overrides) -> Params:
    """A CTR run's settings, or a ParamsError for one that would be ignored and recorded as if it applied.
    Train keys are refused wherever they come from (study.ctr.train sets them for CTR alone). The ranking
    protocol keys (evaluate.candidates ...) are refused on the command line; from params.yaml, which one
    grid shares with next-item datasets, they are reset for the run, so its record and report say log
    loss and AUC over every test pair (a report used to label DIN "100 sampled candidates")."""
    for key, want in _CTR_TRAIN.items():
        value = getattr(tp, key)
        if value != want:
            fix = (f"drop --set train.{key}={value}" if key in explicit else
                   f"set train.{key}: {want} under study.ctr.train in params.yaml")
            raise ParamsError(f"train.{key} is {value}, and CTR models such as '{spec.name}' train on the log loss "
                              f"of (user, target) pairs held in memory: the setting would be ignored (and recorded "
                              f"as if it applied)", fix)
    defaults = EvaluateParams()
    for text in overrides or []:
        key = text.split("=", 1)[0].strip()
        if key.startswith("evaluate.") and key[len("evaluate."):] in _CTR_EVALUATE:
            what = "the cut-offs of the ranking metrics" if key == "evaluate.ks" else "how next-item targets are ranked"
            raise ParamsError(f"{key} sets {what}, and CTR models such as '{spec.name}' are scored by log loss "
                              f"and AUC over every test pair: it would be ignored", f"drop --set {text.strip()}")
    return dataclasses.replace(params, evaluate=dataclasses.replace(
        params.evaluate, **{k: getattr(defaults, k) for k in _CTR_EVALUATE}))


def _resolve_auto(tp, ctr: bool = False, params: Optional[Params] = None, kind: Optional[str] = None):
    """`tp` with train.ce_impl and precision `auto` replaced by what they pick on the run's device (ce_impl:
    chunked on the CPU, plain on CUDA; precision: fp32), as train.device auto enters the fingerprint: `auto`
    and the value it picks were two fingerprints for one model (a finished seed retrained and replaced, seeds
    not pooled by `seqpe report`), and run.json did not say which loss ran (walk 33a). train.select_metric
    `auto` likewise, by the task's default (ndcg@10, auc; walk 43d #1), given `params` and `kind`."""
    from .tasks import ce_impl, selection
    resolved = {}
    if tp.ce_impl == "auto" and not ctr:              # a CTR model's loss is its click BCE
        resolved["ce_impl"] = ce_impl(tp, setup.pick_device(tp.device))
    if tp.precision == "auto":
        resolved["precision"] = "fp32"
    if tp.select_metric == "auto" and params is not None and kind is not None:
        resolved["select_metric"] = selection(kind, params).default_select
    return dataclasses.replace(tp, **resolved)


def _layout_twin(manifest: dict) -> Optional[str]:
    """The BARS dataset (amazon_electronics, kuaivideo) whose CTR layout and valid rule CTR samples have: an
    import of its files under a name of one's own (`seqpe import mykuai DIR`) gets its preset variant."""
    from ..datasets.ctr import OPTIONS
    preprocess = ((manifest.get("params") or {}).get("preprocess") or {})
    return next((name for name, options in OPTIONS.items() if preprocess.get("options") == options), None)


def _given(overrides, key: str) -> Optional[str]:
    """The --set text that sets `key` (`train.heads=4`), or None."""
    return next((text.strip() for text in overrides or [] if text.split("=", 1)[0].strip() == key), None)


def _drop_ignored(tp, spec, params: Params, overrides):
    """`tp` with the train keys the model never reads (ModelSpec.ignores: DIN's layers and heads, a fitted
    baseline's training keys, BPR-MF's loss settings) set to null, or a ParamsError for one given with --set
    (unless given the value the model runs with: an ignores mapping {key: value}, PARec's heads 1).
    Given by hand, the setting would be ignored and recorded as if it applied (a depth study of DIN retrained one
    model under each value); from params.yaml, where other models read them, they are neither shown as the run's
    settings nor part of its fingerprint, so raising train.layers for SASRec does not retrain a finished DIN
    seed, nor train.dim a POP one."""
    ignores = spec.ignores(params.models.get(spec.name, {})) if callable(spec.ignores) else spec.ignores
    unread = {key: why for key, why in unread_train_keys(spec, to_dict(tp)).items() if key not in ignores}
    # the value a run computes with anyway is no setting to refuse (walk 41a #11): bucket 0 (off) beside
    # trim_padding false; an ignores mapping's value (PARec's heads 1: it builds one head)
    agrees = {**({"bucket": 0} if "bucket" in unread else {}), **(ignores if isinstance(ignores, dict) else {})}
    for key in (*ignores, *unread):
        given = _given(overrides, f"train.{key}")
        if given is not None and key in agrees and _given_value(given) == agrees[key]:
            continue
        if given is not None and key in unread:
            raise ParamsError(f"{given.replace('=', ' is ', 1)}, and {unread[key][0]}, so it is not read: the setting "
                              "would be ignored (and recorded as if it applied)",
                              f"drop --set {given}" + (f", or add --set {unread[key][1]}" if unread[key][1] else ""))
        if given is not None:
            raise ParamsError(f"{given.replace('=', ' is ', 1)}, and '{spec.name}' does not read train.{key}: the "
                              "setting would be ignored (and recorded as if it applied)", f"drop --set {given}")
    return dataclasses.replace(tp, **{key: None for key in (*ignores, *unread)})


def unread_train_keys(spec, train: dict) -> dict:
    """The train keys another train setting leaves unread, whatever the model (walk 31b: train.negatives retrained
    every configuration under loss ce and replaced identical runs): key -> (why, the --set that would read it or
    None). `train`: the train settings as a dict (a TrainParams' or a run record's). `seqpe train` records these
    keys as null; `seqpe report` reads a record written before it did as if it had (walk 44a #1)."""
    loss, schedule = train.get("loss"), train.get("lr_schedule")
    return {key: why for key, why in (
        # CTR: its click BCE reads neither whatever train.loss says, so no train.loss is the fix (walk 43d #9: it
        # named train.loss=sampled, which CTR refuses)
        ("negatives", spec.task == "ctr" and (f"CTR models such as '{spec.name}' draw no negatives", None)
         or loss not in (None, "sampled") and (f"train.loss {loss} draws no sampled softmax", "train.loss=sampled")),
        ("ce_impl", spec.task != "ctr" and loss not in (None, "ce") and (
            f"train.loss {loss} is not the full softmax", "train.loss=ce")),
        ("lr_step", schedule == "none" and ("train.lr_schedule is none", "train.lr_schedule=step")),
        ("lr_gamma", schedule == "none" and ("train.lr_schedule is none", "train.lr_schedule=step")),
        ("bucket", spec.task != "ctr" and train.get("trim_padding") is False and (   # walk 40d #2: max_len columns
            "train.trim_padding is false (every batch keeps max_len columns: nothing is grouped by length)",
            "train.trim_padding=true")),
    ) if why}


def _full_ranking_settings(params: Params, overrides) -> Params:
    """`params` with evaluate.candidate_sampling at its default under full ranking (evaluate.candidates 0, which
    samples nothing), or a ParamsError for another value given with --set: recorded, `popularity` made another
    fingerprint and another report row for byte-identical test scores (walk 44b #1), as CTR's ranking keys are
    kept at their defaults (_ctr_settings)."""
    ev = params.evaluate
    default = EvaluateParams().candidate_sampling
    if ev.candidates or ev.candidate_sampling == default:
        return params
    given = _given(overrides, "evaluate.candidate_sampling")
    if given is not None:
        raise ParamsError(f"{given.replace('=', ' is ', 1)}, and evaluate.candidates is 0 (full ranking samples no "
                          "candidates), so it is not read: the setting would be ignored (and recorded as if it "
                          "applied)", f"drop --set {given}, or add --set evaluate.candidates=100")
    return dataclasses.replace(params, evaluate=dataclasses.replace(ev, candidate_sampling=default))


def _given_value(given: str):
    """The value of a `KEY=VALUE` override, read as params.yaml reads it (YAML), or the text itself."""
    import yaml
    try:
        return yaml.safe_load(given.split("=", 1)[1])
    except yaml.YAMLError:
        return given.split("=", 1)[1]


def _drop_unread_options(params: Params, spec, overrides, manifest: Optional[dict] = None) -> Params:
    """`params` without the model options its other options leave unread (ModelSpec.unread_options: GRU4Rec's
    negatives and bpreg under its loss ce, BPR-MF's negatives under ce) or its data does (ModelSpec.side_options
    on samples without side information: CARCA's attr_dim, walk 43d #6), or a ParamsError for one given with
    --set. Recorded, such an option made another fingerprint and another report row for the same model (walk
    32c: three GRU4Rec runs with byte-identical results); from params.yaml it is simply not part of the run."""
    options = params.models.get(spec.name)
    if (spec.unread_options is None and not spec.side_options) or not options:
        return params
    unread = dict(spec.unread_options(from_dict(spec.options, dict(options), f"models.{spec.name}"))
                  if spec.unread_options is not None else {})
    if manifest is not None and not manifest.get("side"):
        unread.update({key: ("these samples carry no item attributes or interaction context (CARCA's own datasets "
                             "do)", None) for key in spec.side_options})
    for key, (why, reader) in unread.items():
        given = _given(overrides, f"models.{spec.name}.{key}")
        if given is not None:
            raise ParamsError(f"{given.replace('=', ' is ', 1)}, and {why}, so it is not read: the setting would be "
                              "ignored (and recorded as if it applied)",
                              f"drop --set {given}" + (f", or add --set {reader}" if reader else ""))
    kept = {k: v for k, v in options.items() if k not in unread}
    return dataclasses.replace(params, models={**params.models, spec.name: kept})


def _unchanged_since_checked(samples_dir: Path, manifest: dict) -> None:
    """Refuse samples replaced between their check (manifest and shard hashes, `samples_manifest`) and the end of
    their loading: a `seqpe augment` of the same dataset in that gap trained a run on the new rows and recorded
    the old version's shard hashes, so a later command reused it as a finished seed of the old data (walk 44g #1).
    The folder is swapped in whole (io.atomic_dir), so a manifest that is still the one checked means the rows
    read were its own."""
    from ..io import MANIFEST, read_json
    try:
        now = read_json(samples_dir / MANIFEST)
    except (OSError, ValueError, DataError):
        now = None
    if now != manifest:
        raise DataError(f"{samples_dir} was replaced while this command read it (a `seqpe augment` or `import` of "
                        "the same dataset ran at the same time): the run would train on one version of the samples "
                        "and record the other's", "run the command again once the other one has finished")


def _seeds(dataset, samples_dir, params, spec, tp, applied, manifest, kind, seeds, config, run_dirs, tag, device,
           dist, progress, metrics_path, live_dir, in_grid: bool = False) -> list[dict]:
    """Every seed of the configuration (only rank 0 writes when distributed; the others return [])."""
    task = make_task(kind, samples_dir, manifest, tp, params, spec, device, dist if dist.active else None)
    _unchanged_since_checked(Path(samples_dir), manifest)
    if in_grid:
        _check_grid_builds(task, params, kind)
    select = setup.select_metric(tp, task)
    settings = _settings(tp, params, spec, task, applied, dist.world, manifest)     # what every seed's record holds
    if dist.main:
        _note_siblings(run_dirs, settings)
    results, records, fps = [], [], []
    for seed in seeds:
        # rank 0's inputs name the run on every rank: a machine key (train.threads 0 on nodes of other core counts)
        # gave each rank its own fingerprint, resume file and lock (walk 42b #1)
        key = dist.broadcast_object(runs.fingerprint_inputs(tp, params, manifest, seed, world=dist.world))
        fp = runs.hash_inputs(key)
        fps.append(fp)
        label = f"{dataset} {config} seed {seed}"
        lock = _lock(fp, run_dirs[seed], {"dataset": dataset, "config": config, "seed": seed}, dist)
        try:
            record = dist.broadcast_object(runs.finished(run_dirs[seed], fp) if dist.main else None)
            reused = record is not None
            if not reused and dist.main:
                _note_replacing(run_dirs[seed], fp, settings)
                _note_other_resume(label, fp, key, run_dirs[seed])
            if not reused:
                curves = (lambda h, s=seed: runs.write_curves(live_dir, s, h)) if live_dir is not None else None
                net, record, timing, per_sample = train_one(spec, task, tp, params, manifest, select, seed, device,
                                                            progress, runs.resume_path(fp), label, curves, dist,
                                                            runs.shown_inputs(key), run_dirs[seed])
                record.update(name=config, tag=tag, preset=applied.record(), fingerprint=fp)
                if dist.main:
                    runs.save_run(run_dirs[seed], net, record, timing, per_sample)
                    if record["stopped"] != "time_limit":    # kept: the same command with a longer limit goes on
                        runs.resume_path(fp).unlink(missing_ok=True)
                    LAST_SAVED.clear()                        # its run folder is written: not "being trained"
                dist.barrier()
        except BaseException as e:        # nothing to resume, or a resume that would end the same way (a constant
            dead_end = isinstance(e, (ConstantModel, Diverged, NonFiniteScores))      # model; a diverged one, walk
            if lock is not None and (dead_end or not runs.resume_path(fp).exists()):  # 38a D1): no state left
                runs.forget([fp], (state.dir_lock(run_dirs[seed]),), own=True)
            raise
        finally:
            if lock is not None:
                lock.release()
        if reused and dist.main and progress:         # was silent: only the table, as if it had trained
            sys.stderr.write(f"{label}: finished with these settings in {run_dirs[seed]}: reused, not trained "
                             f"again\n")
        if reused and live_dir is not None and dist.main:
            runs.write_curves(live_dir, seed, record["history"])
        records.append(record)
        results.append({"name": f"{config}/seed-{seed}", "config": config, "seed": seed,
                        "best_epoch": record["best_epoch"], "valid": record["valid"], "test": record["test"],
                        "epochs_run": record["epochs_run"], "stopped": record["stopped"],
                        "run_dir": str(run_dirs[seed])})
    if not dist.main:
        return []
    unfinished = [seed for seed, r in zip(seeds, records) if r["stopped"] == "time_limit"]
    if not unfinished:
        runs.forget(fps, tuple(state.dir_lock(d) for d in run_dirs.values()))
    if metrics_path is not None:
        if unfinished:      # `report` never pools these with finished seeds; DVC's metric must not either
            raise DataError(f"seed{'s' if len(unfinished) > 1 else ''} {', '.join(map(str, unfinished))} stopped at "
                            f"train.time_limit before the end, so {metrics_path} was not written (its mean "
                            f"would stand for unfinished models); the runs are saved",
                            "run the same command with --set train.time_limit=0: it resumes where they stopped")
        config_dir = run_dirs[seeds[0]].parent
        earlier, other_code = _same_settings_seeds(config_dir, set(seeds), tp, params, manifest, dist.world,
                                                   _settings(tp, params, spec, task, applied, dist.world, manifest))
        if earlier:
            sys.stderr.write(f"note: {metrics_path} holds the mean over seeds "
                             f"{', '.join(map(str, sorted([*seeds, *earlier])))}: seed{'s' if len(earlier) > 1 else ''} "
                             f"{', '.join(map(str, sorted(earlier)))} of {config_dir} trained earlier with the "
                             f"same settings, data and code\n")
        if other_code:      # report and evaluate pool these (a "Mixed code" note): say why this mean has fewer seeds
            many = len(other_code) > 1
            sys.stderr.write(f"note: {metrics_path} leaves out seed{'s' * many} {', '.join(map(str, other_code))} "
                             f"of {config_dir}, finished with the same settings by other seqpe code (or another "
                             f"thread count), which `seqpe report` and `evaluate` pool with a note; train "
                             f"{'them' if many else 'it'} again ({' '.join(f'--seed {s}' for s in other_code)}) "
                             f"for one mean of this code\n")
        runs.write_config_metrics(Path(metrics_path), [*records, *earlier.values()], f"{dataset} {config}")
    return results


def _same_settings_seeds(config_dir: Path, given: set, tp, params: Params, manifest: dict, world: int,
                         settings: dict) -> tuple[dict, list]:
    """{seed: record} of the finished seeds in `config_dir` other than `given` whose fingerprint is the one this
    command gives that seed (the same settings, data, code and process count): `train --metrics` of a hand run
    with `--seed 3` wrote seed 3 alone, replacing the mean over seeds 1-3 that `seqpe report` shows (walk 34a).
    And the seeds left out although `report` pools them (their `settings` agree: other code or threads), which
    were dropped from the DVC metric without a word (walk 44a #3)."""
    from ..report import settings_change
    found, other = {}, []
    for path in sorted(config_dir.glob("seed-*/run.json")):
        try:
            rec = runs.read_json(path)
        except Exception:                               # not a record of seqpe's: report names it
            continue
        seed = rec.get("seed") if isinstance(rec, dict) else None
        if not isinstance(seed, int) or seed in given or rec.get("stopped") == "time_limit":
            continue
        if rec.get("fingerprint") == runs.hash_inputs(runs.fingerprint_inputs(tp, params, manifest, seed,
                                                                                world=world)):
            found[seed] = rec
        elif not settings_change(rec, settings):
            other.append(seed)
    return found, sorted(other)


CONSTANT_SPAN = 1e-5     # test logits closer than this (max - min), or than 16 float32 steps at the largest |logit|,
                         # are one constant score (float32 spaces logits near 300 by 3e-5: one step passed, walk 36b)


def _refuse_constant(logits, test: dict, label: str, best_epoch: int) -> None:
    """A ConstantModel (TrainingError) when a CTR model gives (nearly) every test pair the same logit: its AUC is then the order of
    float noise, chance dressed as a number. DIN with train.weight_decay=100 put all 300 test logits within 1.7e-6
    and reported AUC 49.04 and log loss ln 2 as a result, tested against the other configurations. A model that
    learnt anything spreads its logits by far more (a span of ~1 on the tiny generated CTR data; an untrained DIN
    ~4e-6, one epoch at lr 1e-4 ~1.5e-5). The seed's resume state goes too: resumed, it would be refused again."""
    import numpy as np
    if len(logits) < 2:
        return
    span = float(np.max(logits) - np.min(logits))
    if span < max(CONSTANT_SPAN, 16 * float(np.spacing(np.float32(np.max(np.abs(logits)))))):
        raise ConstantModel(f"{label}: the model is constant, its {len(logits)} test logits span {span:.2g} (best "
                            f"epoch {best_epoch}, logit {float(np.mean(logits)):.4g}), so its AUC "
                            f"({100 * test['auc']:.2f}) is chance, not a result; nothing was written for this seed",
                            "if it barely trained (an untrained model is constant), train more epochs or raise "
                            "train.lr; if it collapsed, lower train.weight_decay or train.lr; check that the "
                            "features vary")


def _settings(tp, params, spec, task, applied, world: int, manifest: dict) -> dict:
    """What report.settings_change compares, as the run's record will hold it."""
    return {"train": to_dict(tp), "options": params.models.get(tp.model, {}),
            "encoding_options": params.encodings.get(tp.encoding, {}) if spec.uses_encoding else {},
            "evaluate": to_dict(params.evaluate), "preset": applied.record(),
            "samples": task.sizes, "world_size": world, "sessions_manifest": manifest.get("sessions_manifest"),
            "samples_digest": runs.samples_digest(manifest)}


def _note_replacing(run_dir: Path, fp: str, settings: dict) -> None:
    """A run folder holding a finished run of other settings is replaced when this seed ends: say so before
    it trains (a finished 200-epoch seed is costly to redo; --tag keeps both)."""
    from ..report import settings_change
    old = runs._record(run_dir)
    if old is None or old.get("fingerprint") == fp:          # nothing there, or this very run: reused / resumed
        return
    why = settings_change(old, settings)
    if not why:                                  # a machine setting in the fingerprint (threads: other float sums)
        was, now = old.get("train") or {}, settings["train"]
        machine = [f"train.{k}: {was.get(k)!r} vs {now.get(k)!r}"
                   for k in ("threads", "compile") if was.get(k) != now.get(k)]
        if old.get("device") not in (None, now_device := setup.pick_device(now.get("device", "auto")).type):
            machine.append(f"device: {old.get('device')} vs {now_device}")
        was, now = (old.get("evaluate") or {}).get("batch_size"), settings["evaluate"].get("batch_size")
        if was != now:
            machine.append(f"evaluate.batch_size: {was!r} vs {now!r}")
        why = "; ".join(machine) or "the same settings, from another code version or other samples"
    sys.stderr.write(f"note: {run_dir} holds a run trained with other settings ({why}); this run replaces it when "
                     f"it ends (--tag NAME keeps both)\n")


def _note_siblings(run_dirs: dict, settings: dict) -> None:
    """Seeds of the configuration this command does not train, finished with other settings: `seqpe report` and
    `evaluate` refuse to pool them with the new ones into one mean, which a user learnt only after training
    (`--seed 3 --set train.lr=0.05` beside seeds 1-2 at 0.001). Said before it trains, and by --check."""
    from ..report import settings_change
    config_dir = next(iter(run_dirs.values())).parent
    trained = {d.name for d in run_dirs.values()}
    others = []
    for seed_dir in sorted(runs._seed_folders(config_dir), key=lambda d: int(d.name.split("-")[1])):
        old = runs._record(seed_dir) if seed_dir.name not in trained else None
        if old is not None and (why := settings_change(old, settings)):
            others.append((seed_dir.name.split("-")[1], why))
    if others:
        seeds = ", ".join(seed for seed, _ in others)
        sys.stderr.write(f"note: {config_dir} keeps seed {seeds} trained with other settings ({others[0][1]}): "
                         f"`seqpe report` and `evaluate` will not pool {'it' if len(others) == 1 else 'them'} with "
                         f"this run into one mean; train {'it' if len(others) == 1 else 'them'} with these settings "
                         f"too ({' '.join(f'--seed {seed}' for seed, _ in others)}), or give this variant its own "
                         f"--tag NAME\n")


def _note_other_resume(label: str, fp: str, key: dict, run_dir: Path) -> None:
    """A seed about to start afresh in `run_dir` while a resume file of the same seed and folder with other
    inputs is kept (another checkout of seqpe, an edited setting, other samples): say so and why, before hours
    of training redo what that file holds (it stays: a command of its own inputs goes on from it). One of
    another runs folder is another experiment: it is not named (walk 33a: a time-limited torchrun run was
    announced by every later run of that seed, in any folder)."""
    if runs.resume_path(fp).exists():
        return                                   # this very run: it resumes
    others = state.other_resumes(label, fp, run_dir)
    if not others:
        return
    o = others[0]
    more = f" ({len(others) - 1} more of this seed are kept)" if len(others) > 1 else ""
    sys.stderr.write(f"note: {label} starts at epoch 1: {o['path']} holds its first {o['epoch']} epoch(s) from a "
                     f"run of other inputs ({runs.inputs_change(o.get('inputs'), key)}), which this command cannot go "
                     f"on from{more}; "
                     + ("that code with those inputs would (`seqpe state --prune` deletes it)\n" if state._other_code(o.get("inputs"))
                        else "a command of those inputs would, and `seqpe state --prune --all` deletes it\n"))


def _lock(fp: str, run_dir: Path, what: dict, dist):
    """The seed's locks (state.lock_seed), taken by rank 0 alone; every rank raises if one is held elsewhere."""
    lock, refused = None, None
    if dist.main:
        try:
            lock = state.lock_seed(fp, run_dir, what)
        except DataError as e:
            refused = (e.problem, e.fix)
    refused = dist.broadcast_object(refused)
    if refused is not None:
        raise DataError(*refused)
    return lock


def train_one(spec, task, tp, params: Params, manifest: dict, select: str, seed: int, device, progress: bool,
              resume_path: Optional[Path], label: str, on_epoch=None, dist=None, inputs=None,
              run_dir: Optional[Path] = None) -> tuple:
    """Train (or fit) one seed; return (net with the best weights, record, timing, per-sample test frame)."""
    import torch

    dist = dist or distributed.Dist()
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)                      # batch order + negatives: alike on every rank
    net = task.build(params).to(device)                                  # same initial weights on every rank
    _said_after_build()
    if dist.active:
        torch.manual_seed(seed + 1_000_003 * dist.rank)                  # each rank its own dropout stream
    history, timing = [], []
    t_start = time.perf_counter()
    if spec.fitted:
        t0 = time.perf_counter()
        task.fit(net)
        fit_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        valid = checked(lambda: task.evaluate(net, "valid"), f"{label}, valid split")
        history.append({"epoch": 0, "loss": None, "lr": None, "valid": valid})
        timing.append({"epoch": 0, "train_s": fit_s, "valid_s": time.perf_counter() - t0,
                       "samples_per_s": task.n_train / max(fit_s, 1e-9)})
        best_epoch, stopped, resumed, caveat = 0, "fitted", 0, None
        if on_epoch is not None:
            on_epoch(history)
    else:
        best_epoch, stopped, resumed, caveat = fit_epochs(net, task, tp, select, seed, label, generator, device,
                                                          progress, history, timing, resume_path, on_epoch, dist,
                                                          inputs, run_dir)
    t0 = time.perf_counter()
    test, per_sample = checked(lambda: task.test(net), f"{label}, test split, best epoch {best_epoch}")
    if task.kind == "ctr":
        _refuse_constant(per_sample["logit"].to_numpy(), test, label, best_epoch)
    elif task.constant and not spec.fitted:                     # POP is input-independent by design
        k = params.evaluate.ks[-1]                              # the largest cut-off (ks are increasing)
        what = (f"scored every test target and its {params.evaluate.candidates} sampled candidates alike"
                if params.evaluate.candidates else
                f"ignores its input, every test session got the same scores for all {manifest.get('n_items')} items")
        raise ConstantModel(f"{label}: the model {what} (best epoch {best_epoch}), so its metrics (HR@{k} "
                            f"{100 * test[f'hr@{k}']:.2f}) are one fixed item order's, not a result; nothing was "
                            "written for this seed",
                            "if it collapsed, lower train.weight_decay or train.lr; if it barely trained, train more "
                            "epochs or raise train.lr")
    test_s = time.perf_counter() - t0
    best = next(h for h in history if h["epoch"] == best_epoch)
    record = {
        "dataset": manifest.get("dataset"), "protocol": manifest.get("protocol"), "task": task.kind,
        "model": tp.model, "encoding": tp.encoding, "seed": seed, "n_items": manifest.get("n_items"),
        "max_len": tp.max_len, "train": to_dict(tp), "options": params.models.get(tp.model, {}),
        "encoding_options": params.encodings.get(tp.encoding, {}) if spec.uses_encoding else {},
        "evaluate": to_dict(params.evaluate), "samples": task.sizes, "device": device.type,
        "world_size": dist.world,
        "sessions_manifest": manifest.get("sessions_manifest"),   # which sessions folder numbered its items
        "samples_digest": runs.samples_digest(manifest),          # which samples it trained and was scored on
        "parameters": sum(p.numel() for p in net.parameters()),
        "versions": code_versions(),    # libraries + seqpe's source hash, not the git commit: DVC's own rewrite of
                                        # dvc.lock, or a teammate's later commit, changed every run.json (walk 35a)
        "history": history, "epochs_run": 0 if spec.fitted else len(history),
        "best_epoch": best_epoch, "stopped": stopped,
        "select_metric": select, "valid": best["valid"], "test": test,
    }
    if caveat is not None:                  # only then: the records of runs that learnt keep their bytes
        record["not_learnt"] = caveat
    timing_rec = {"device": str(device), "threads": torch.get_num_threads(), "world_size": dist.world,  # samples/s
                  "epochs": timing,                                              # of W processes (walk 33a)
                  "resumed_from_epoch": resumed, "test_s": test_s, "total_s": time.perf_counter() - t_start,
                  "checkout": {k: v for k, v in versions().items() if k in ("seqpe_git", "seqpe_dirty")}}
    return net, record, timing_rec, per_sample

