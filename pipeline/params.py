"""params.yaml -> frozen dataclasses, one per stage section.

The loader rejects what it does not know: an unknown or misspelt key, a missing
key, or a value of the wrong type raises `ParamsError` naming the dotted key and
what was expected (with a did-you-mean for misspellings). Sections are plain
frozen dataclasses with commented defaults, in the spirit of nanoGPT's GPTConfig.
"""
from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from .errors import ParamsError

DEFAULT_PARAMS = Path("params.yaml")


@dataclass(frozen=True)
class DownloadParams:
    mirror: Optional[str] = None      # base URL tried before the source URL (env SEQPE_MIRROR overrides)
    retries: int = 5                  # attempts per URL for transient failures (backoff doubles)
    timeout_s: float = 60.0           # socket timeout per request
    backoff_s: float = 1.0            # first retry delay


@dataclass(frozen=True)
class SampleParams:
    """Size of the embedded `sample` dataset that seqpe generates itself."""
    sessions: int = 4000              # raw sessions generated
    items: int = 1500                 # catalogue size before filtering
    days: int = 120                   # date range covered
    seed: int = 20160101              # generator seed


@dataclass(frozen=True)
class SampleCTRParams:
    """Size of the embedded CTR datasets `sample_ctr` and `sample_kuai` (pipeline/datasets/ctr_sample.py)."""
    users: int = 2000                 # users generated
    items: int = 1000                 # catalogue size
    cates: int = 40                   # item categories (sample_kuai: hidden topics, not in the file)
    min_length: int = 5               # behaviours per user, at least (DIN's users are 5-core)
    max_length: int = 30              # behaviours per user, at most (lengths skewed towards the minimum)
    p_rule: float = 0.7               # share of steps whose category follows the positional rule
    seed: int = 20180601              # generator seed


@dataclass(frozen=True)
class PreprocessParams:
    valid_fraction: float = 0.1       # share of the most recent train sessions carved into valid
    min_item_count: int = 5           # srgnn: items with fewer clicks are dropped
    k_core: int = 5                   # leave-one-out: users and items with fewer interactions are dropped (iterated)
    max_history: int = 100            # ctr: history lists cut to the most recent N
    rows_per_shard: int = 1_000_000   # rows per Parquet shard
    sample: SampleParams = field(default_factory=SampleParams)
    sample_ctr: SampleCTRParams = field(default_factory=SampleCTRParams)


@dataclass(frozen=True)
class AugmentParams:
    max_len: int = 200                # leave-one-out prefixes keep their most recent max_len items
                                      # (srgnn keeps whole prefixes, as its protocol says; 0 = keep all)
    rows_per_shard: int = 1_000_000


@dataclass(frozen=True)
class TrainParams:
    model: str = "sasrec"             # a key of models.MODELS
    encoding: str = "lpe"             # a key of models.encodings.ENCODINGS
    seeds: list[int] = field(default_factory=lambda: [1])
    epochs: int = 5
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.0
    dim: int = 64                     # embedding / hidden size
    layers: int = 2                   # transformer blocks
    heads: int = 1
    dropout: float = 0.2
    max_len: int = 50                 # model input length (most recent items)
    patience: int = 3                 # early stopping on valid (epochs without improvement)
    select_metric: str = "ndcg@10"    # metric on valid used to pick the best epoch
    device: str = "auto"              # auto | cpu | cuda | cuda:N
    loss: str = "ce"                  # ce: softmax over all items | sampled: softmax over target + `negatives` items
    negatives: int = 100              # sampled softmax: uniform negatives per batch (shared by its rows)
    lr_schedule: str = "none"         # none | step (x lr_gamma every lr_step epochs) | plateau (x lr_gamma
                                      # after lr_step epochs without valid improvement)
    lr_step: int = 3
    lr_gamma: float = 0.1
    threads: int = 0                  # CPU threads for torch (0 = all cores)
    trim_padding: bool = True         # drop columns that are padding in a whole batch (same predictions, faster)
    bucket: int = 50                  # with trim_padding: sort shuffled rows by length within chunks of this
                                      # many batches, then shuffle the batches (0 = plain shuffle)
    objective: str = "prefixes"       # prefixes: one (prefix, next item) sample per row | sequence: causal
                                      # backbones read a whole leave-one-out train sequence and predict the
                                      # next item at every position (SASRec's training, 003 Eq. 11)
    time_limit: float = 0.0           # minutes of training per seed: stop after the epoch that reaches it and
                                      # test the best epoch so far (0 = none; such a run depends on the machine)


@dataclass(frozen=True)
class EvaluateParams:
    ks: list[int] = field(default_factory=lambda: [5, 10, 20])
    batch_size: int = 512
    mask_history: bool = False        # rank only items outside the sample's input (its most recent max_len
                                      # items); PROTOCOLS.md §5 ranks all items: off by default


@dataclass(frozen=True)
class Params:
    datasets: list[str] = field(default_factory=lambda: ["sample"])   # what `dvc repro` builds
    download: DownloadParams = field(default_factory=DownloadParams)
    preprocess: PreprocessParams = field(default_factory=PreprocessParams)
    augment: AugmentParams = field(default_factory=AugmentParams)
    train: TrainParams = field(default_factory=TrainParams)
    evaluate: EvaluateParams = field(default_factory=EvaluateParams)
    # Per-name options, checked against each model's / encoding's own config dataclass
    # (see models/config.py) when the run is built: e.g. `encodings: {rmha: {clip: 4}}`.
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    encodings: dict[str, dict[str, Any]] = field(default_factory=dict)


# --------------------------------------------------------------------------- loading

def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str, strict: bool = False) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key, strict)
            except ParamsError:
                continue
        raise ParamsError(f"params key '{key}' must be {_type_name(tp)}, got {value!r}",
                          "fix the value in params.yaml")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ParamsError(f"params key '{key}' must be a mapping, got {value!r}",
                              "fix that section in params.yaml")
        return from_dict(tp, value, key, strict)
    if origin is list:
        if not isinstance(value, list):
            raise ParamsError(f"params key '{key}' must be a list, got {value!r}", "write it as [a, b, ...]")
        return [_coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ParamsError(f"params key '{key}' must be a mapping, got {value!r}", "fix it in params.yaml")
        return {str(k): _coerce(v, args[1], f"{key}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML reads 1e-3 as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is str:
        if isinstance(value, str):
            return value
    raise ParamsError(f"params key '{key}' must be {_type_name(tp)}, got {value!r}",
                      "fix the value in params.yaml")


def from_dict(cls: type, data: dict, prefix: str = "", strict: bool = False) -> Any:
    """Build dataclass `cls` from `data`, rejecting unknown and mistyped keys; with `strict`, also
    every key that is missing (a params file must spell out every setting; see load_params)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            dotted = f"{prefix}.{key}" if prefix else str(key)
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            fix = f"did you mean '{close[0]}'?" if close else f"known keys here: {', '.join(fields)}"
            raise ParamsError(f"unknown params key '{dotted}'", fix)
    kwargs = {}
    for name, f in fields.items():
        dotted = f"{prefix}.{name}" if prefix else name
        if name in data:
            kwargs[name] = _coerce(data[name], hints[name], dotted, strict)
        elif strict or (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING):
            raise ParamsError(f"missing params key '{dotted}'", f"add it to params.yaml{_default_hint(f)}")
    return cls(**kwargs)


def _default_hint(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return ""
    if dataclasses.is_dataclass(value):
        return " (the shipped params.yaml has the whole section)"
    return f" (default: {f.name}: {yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()})"


def _parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise ParamsError(f"override '{text}' is not KEY=VALUE", "write e.g. --set train.epochs=3")
    key, raw = text.split("=", 1)
    return key.strip().split("."), yaml.safe_load(raw)


def load_params(path: str | Path = DEFAULT_PARAMS, overrides: list[str] | None = None,
                required: bool = False, strict: bool = True) -> Params:
    """Load params.yaml plus KEY=VALUE overrides.

    A params file must hold every section and key (`strict`): a key missing from it is an error
    naming the key and its default, like a misspelt one, so a file that predates a new setting
    or lost a line never runs on a silent default. Without a file (and not `required`) the
    built-in defaults apply; `strict=False` lets a file hold only some keys (tests, scripts).
    """
    path = Path(path)
    data: dict = {}
    if path.is_file():
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark else ""
            raise ParamsError(f"{path} is not valid YAML{where}", "fix the syntax there") from None
        if not isinstance(data, dict):
            raise ParamsError(f"{path} must be a mapping of sections", "see the README for its layout")
    elif required:
        raise ParamsError(f"params file {path} not found", "run from the project root or pass --params PATH")
    else:
        strict = False
    for text in overrides or []:
        keys, value = _parse_override(text)
        node = data
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ParamsError(f"override '{text}': '{k}' is not a section", "override a leaf key")
        node[keys[-1]] = value
    return from_dict(Params, data, strict=strict)


def to_dict(obj: Any) -> Any:
    """Dataclass -> plain dict (for manifests and run records)."""
    return dataclasses.asdict(obj)
