"""What one run is: the model, the encoding, the resolved TrainParams and options, the device.

Precedence of the settings (pipeline/presets.py): params.yaml `train:` < the model's preset (and its
dataset variant) < `--set train.KEY=...` < `--model` / `--encoding`. A run's model and encoding come
from the command line or the study grid (`study.<task>.models / encodings`): a hand run without
`--model` trains the grid's first model, without `--encoding` its first encoding (a preset's
paper encoding when `--preset` is given; the model's own, ModelSpec.encoding, for PARec and FPARec,
which need positional attention). An encoding given explicitly to a model that takes none
(GRU4Rec, POP) is an error, as is a model of the other task (a CTR backbone on next-item data).
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
from typing import Iterable, Optional

from .. import presets
from ..errors import ParamsError, did_you_mean, unknown
from ..params import Params, TrainParams, from_dict, to_dict

TASKS = {"next_item": "next-item", "ctr": "CTR"}


def task_of(manifest: dict) -> str:
    """The task a samples folder is for: "ctr" for the ctr protocol, else "next_item"."""
    return "ctr" if manifest.get("protocol") == "ctr" else "next_item"


def pick_model(name: Optional[str], task: str, params: Params, models: dict):
    """The ModelSpec for `name` (default: the study grid's first model of `task`), checked to fit the task."""
    grid = getattr(params.study, task)
    if name is not None and not name.strip():          # `--model ""` (an unset shell variable): not the default
        raise ParamsError("--model is empty", "pass a model name, or leave --model out for the grid's first")
    name = name or (grid.models[0] if grid.models else (grid.baselines[0] if grid.baselines else None))
    fitting = sorted(n for n, s in models.items() if s.task == task)
    if name is None:
        raise ParamsError(f"no model given and study.{task}.models is empty", f"pass --model (one of: {', '.join(fitting)})")
    if name not in models:
        raise unknown("model", name, models)
    spec = models[name]
    if spec.task != task:
        raise ParamsError(f"model '{name}' is a {TASKS[spec.task]} model, but these samples are {TASKS[task]} data",
                          f"use one of: {', '.join(fitting)}")
    return spec


def check_option_names(params: Params, models: dict) -> None:
    """Every name under `models:` / `encodings:` is a registered model / encoding, and every option under it
    one that model / encoding has, whether or not this run trains it: options under a misspelt name (`--set
    models.posrce.anchors=false`) or key (`--set models.narm.bogus=1` on a GRU4Rec run) would otherwise be
    read by no run, silently (walk 32c)."""
    import models.encodings as enc
    for section, known in (("models", models), ("encodings", enc.ENCODINGS)):
        for name, options in getattr(params, section).items():
            if name not in known:
                raise unknown(f"name under {section}:", name, known)
            cls = getattr(known[name], "options" if section == "models" else "config", None)
            if not options or cls is None:      # a model registered without an options class checks them in its build
                continue
            if section == "encodings":
                enc.check_encoding_options(name, options)
            else:
                from_dict(cls, dict(options), f"models.{name}")


def pick_encoding(spec, encoding: Optional[str], task: str, params: Params, preset_encoding: Optional[str]) -> str:
    """The run's encoding name: 'none' for models that take none (an explicit other one is an error)."""
    import models.encodings as enc
    if encoding is not None and encoding not in enc.ENCODINGS:
        raise unknown("encoding", encoding, enc.ENCODINGS)
    if not spec.uses_encoding:
        if encoding not in (None, "none"):
            raise ParamsError(f"model '{spec.name}' takes no positional encoding, so --encoding {encoding} would be "
                              "ignored", f"drop --encoding (its runs are saved as {spec.name}-none)")
        return "none"
    if encoding is not None:
        return encoding
    if preset_encoding is not None:
        return preset_encoding
    if spec.encoding is not None:
        return spec.encoding
    grid = getattr(params.study, task)
    return grid.encodings[0] if grid.encodings else "none"


def resolve_train(train: TrainParams, spec, preset: Optional[str], model: str, encoding: Optional[str],
                  dataset: str = "", explicit: Iterable[str] = ()) -> TrainParams:
    """TrainParams after the model's preset (and its variant for `dataset`), the `explicit` keys of
    `train` (given by --set, kept over the preset) and the command-line model/encoding."""
    res = presets.resolve(spec.presets, preset, model, dataset)
    return _train_params(train, res.train, model, encoding, explicit)


def resolve_run(params: Params, spec, preset: Optional[str], model: str, encoding: Optional[str], dataset: str,
                explicit: Iterable[str] = (), twin: Optional[str] = None) -> tuple[TrainParams, Params, presets.Resolved]:
    """(TrainParams, Params with the preset's model/encoding options merged under the explicit ones,
    the preset applied); precedence in pipeline/presets.py."""
    res = presets.resolve(spec.presets, preset, model, dataset, twin)
    tp = _train_params(params.train, res.train, model, encoding, explicit)
    params = dataclasses.replace(params, train=tp, models=presets.merge_options(res.models, params.models),
                                 encodings=presets.merge_options(res.encodings, params.encodings))
    return tp, _set_options(params, spec, tp.encoding), res


def _set_options(params: Params, spec, encoding: str) -> Params:
    """`params` with the run's model and encoding options reduced to those that differ from their defaults: what
    the run records, fingerprints and compares. An option written out at its default value (`--set
    models.itemknn.alpha=0.5`, a preset that spells out a default) is the same run as one that leaves it out:
    it was recorded as given, so the same settings read as "other settings" (a note, a retrain, a report that
    would not pool the seeds; walk 31a). The model's build reads the same values either way."""
    import models.encodings as enc
    models, encodings = dict(params.models), dict(params.encodings)
    if spec.options is not None and spec.name in models:
        models[spec.name] = non_default(spec.options, models[spec.name], f"models.{spec.name}")
    config = getattr(enc.ENCODINGS.get(encoding), "config", None)
    if encoding in encodings and config is not None:
        encodings[encoding] = non_default(config, encodings[encoding], f"encodings.{encoding}")
    return dataclasses.replace(params, models=models, encodings=encodings)


def non_default(cls: type, given: Optional[dict], key: str) -> dict:
    """The options of `given` whose value (as `cls` reads it) is not `cls`'s default, in the order given."""
    cfg, default = from_dict(cls, dict(given or {}), key), cls()
    return {k: getattr(cfg, k) for k in (given or {}) if getattr(cfg, k) != getattr(default, k)}


def _train_params(train: TrainParams, preset_train: dict, model: str, encoding: Optional[str],
                  explicit: Iterable[str]) -> TrainParams:
    data = to_dict(train)
    data.update(preset_train)
    data.update({k: getattr(train, k) for k in explicit if hasattr(train, k)})
    data["model"] = model
    if encoding is not None:
        data["encoding"] = encoding
    return from_dict(TrainParams, data, "train", run=True)


def select_metric(tp: TrainParams, task) -> str:
    """train.select_metric, with `auto` resolved to the task's default; checked to be computed."""
    name = task.default_select if tp.select_metric in ("auto", None) else tp.select_metric   # None: unread (fitted)
    keys = task.metric_keys
    if name not in keys:
        close = did_you_mean(name, keys)
        raise ParamsError(f"train.select_metric '{name}' is not computed for {TASKS[task.kind]} data",
                          (f"did you mean '{close}'? " if close else "")
                          + f"use auto or one of: {', '.join(keys)}" + (" (or add its K to evaluate.ks)"
                                                                       if task.kind == "next_item" else ""))
    return name


def pick_device(name: str, option: str = "train.device"):
    """The torch device for `name` (auto | cpu | cuda | cuda:N); `option` is how the user set it
    (train.device in params, --device on `seqpe recommend`), for the error's fix."""
    import torch
    fix = "set train.device: auto" if option == "train.device" else \
        "pass device='auto'" if option == "device" else f"pass {option} auto"
    if name is None or isinstance(name, torch.device):      # from Python: None is the default, a torch.device
        name = "auto" if name is None else str(name)        # is what a torch user passes (walk 41f #5)
    if not isinstance(name, str):
        raise ParamsError(f"{option} is {name!r}, not a device name", "use auto, cpu, cuda or cuda:N")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ParamsError(f"{option} is '{name}' but no CUDA device is available", fix)
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ParamsError(f"{option} '{name}' is not a device", "use auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):     # meta, mps, xpu ...: torch knows the name, seqpe runs on neither
        raise ParamsError(f"{option} '{name}' is a {device.type} device, and seqpe runs on CPU or CUDA",
                          "use auto, cpu, cuda or cuda:N")
    count = torch.cuda.device_count() if device.type == "cuda" else 0
    if device.type == "cuda" and device.index is not None and device.index >= count:
        raise ParamsError(f"{option} is '{name}' but this machine has {count} CUDA device(s)",
                          f"use cuda:0 to cuda:{count - 1}, or {fix}")
    return device


BLOCK_MODELS = ("sasrec", "carca", "linear_attention", "token_mixing", "posrec", "parec",   # train.layers =
                "fparec")                                                                 # their attention blocks


def build_encoding(name: str, tp: TrainParams, options: dict, dim: Optional[int] = None):
    """The encoding object for `name` (models.encodings registry) at width `dim` (default train.dim).
    A model of BLOCK_MODELS with train.layers 0 has no attention block, so an encoding that acts only
    there (RoPE, RMHA, CoPE, ...: no `embed`) is refused: the run would be `--encoding none` under
    another name (byte-identical outputs, reported as a different configuration)."""
    import models.encodings as enc
    from models.encodings.base import PositionalEncoding
    # a model that has no heads or blocks (STAMP, token mixing: train.heads recorded as null) takes input-stage
    # encodings only, which read neither; one acting in attention is built at 1 for the model to refuse
    built = enc.build_encoding(name, dim=dim or tp.dim, max_len=tp.max_len, heads=tp.heads or 1,
                               layers=1 if tp.layers is None else tp.layers, options=options)
    if tp.layers == 0 and tp.model in BLOCK_MODELS and name != "none" \
            and type(built).embed is PositionalEncoding.embed:
        raise ParamsError(f"train.layers is 0, so {tp.model} has no attention block, and {name} acts only inside "
                          "them: the run would be --encoding none under another name",
                          "use train.layers 1 or more" + ("" if tp.model in ("parec", "fparec") else   # none is
                                                          ", or --encoding none"))                    # no PARec
    return built


def check_tag(tag: Optional[str]) -> None:
    if tag is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.=+]*", tag):
        raise ParamsError(f"run tag {tag!r} is not a folder-safe name",
                          "use letters, digits and _ . = + (e.g. --tag anc or --tag lambda2=0.5)")


def amp_dtype(tp: TrainParams, device):
    """The autocast dtype of train.precision on `device` (None = fp32, no autocast).

    `auto` is fp32 everywhere. It was bf16 on a GPU that has it until an H100 measured it
    (bench/results/train.md, "Session 19"): at these models' sizes (d 64-100, item tables of 10^4-10^5)
    a step is bound by kernel launches or by the softmax's memory traffic, not by matrix arithmetic,
    and autocast's casts only add kernels. Diginetica SASRec trained 1.30x slower in bf16 at batch
    4,096 (424,218 against 550,227 samples/s), as fast at batch 256 after a first epoch 1.7x slower,
    and PosRec at the paper's settings 1.30x slower. `bf16` stays for larger models, where it pays."""
    import torch
    if tp.precision == "bf16":
        return torch.bfloat16
    return None


def autocast(tp: TrainParams, device):
    """A context manager: bf16 autocast for train.precision bf16, else nothing."""
    import torch
    dtype = amp_dtype(tp, device)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def matmul_precision(tp: TrainParams, device):
    """A context manager for training steps (forward, backward and update): TF32 matrix products for
    train.precision tf32 on CUDA (`tf32`), else nothing. Scoring runs outside it, in fp32, as for bf16."""
    if tp.precision == "tf32" and device.type == "cuda":
        return tf32()
    return contextlib.nullcontext()


@contextlib.contextmanager
def tf32():
    """train.precision tf32: fp32 weights and activations, with CUDA's fp32 matrix products done on the tensor
    cores in TF32 (10-bit mantissa products, fp32 accumulation), inside the block only: torch's setting is
    process-wide, so it is put back on the way out (a Python script that trains a tf32 run and then an fp32
    one gets fp32 products in the second, and valid / test are scored in fp32). The trainer enters it once an
    epoch, around the steps' forward and backward passes. Not autocast: no casts are added, which is what made
    bf16 slower at these models' sizes (`amp_dtype`). cuDNN's convolutions take TF32 by torch's default already.
    The CPU has no TF32: `stage` refuses it there.

    Through `torch.set_float32_matmul_precision("high")`, the setting fused-loss kernels read (cut-cross-entropy
    reads `get_float32_matmul_precision`, which raises once torch's newer per-backend `fp32_precision` has been
    set: a tf32 run with ce_impl cce failed so on an H200). Where a user's own code already set the newer one,
    reading the older raises, and it is that one that is switched."""
    import torch
    try:
        before, on, put = torch.get_float32_matmul_precision(), "high", torch.set_float32_matmul_precision
    except RuntimeError:                               # the per-backend settings are in use: keep to them
        matmul = torch.backends.cuda.matmul
        before, on = matmul.fp32_precision, "tf32"

        def put(value: str) -> None:
            matmul.fp32_precision = value
    put(on)
    try:
        yield
    finally:
        put(before)
