"""params.yaml -> frozen dataclasses, one per stage section.

The loader rejects what it does not know: an unknown or misspelt key, a missing
key, or a value of the wrong type raises `ParamsError` naming the dotted key and
what was expected (with a did-you-mean for misspellings). Sections are plain
frozen dataclasses with commented defaults, in the spirit of nanoGPT's GPTConfig.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import yaml

from .errors import ParamsError, did_you_mean, unknown

DEFAULT_PARAMS = Path("params.yaml")


@dataclass(frozen=True)
class DownloadParams:
    mirror: Optional[str] = None      # base URL tried before the source URL (env SEQPE_MIRROR overrides)
    retries: int = 5                  # attempts per URL for transient failures (backoff doubles)
    timeout_s: float = 60.0           # socket timeout per request
    backoff_s: float = 1.0            # first retry delay

    def validate(self, key: str) -> None:
        _min(f"{key}.retries", self.retries, 1)
        _min(f"{key}.timeout_s", self.timeout_s, 0, strict=True)
        _min(f"{key}.backoff_s", self.backoff_s, 0)


@dataclass(frozen=True)
class SampleParams:
    """Size of the embedded `sample` dataset that seqpe generates itself."""
    sessions: int = 4000              # raw sessions generated
    items: int = 1500                 # catalogue size before filtering
    days: int = 120                   # date range covered
    seed: int = 20160101              # generator seed

    def validate(self, key: str) -> None:
        _min(f"{key}.sessions", self.sessions, 1)
        _min(f"{key}.items", self.items, 2)
        _min(f"{key}.days", self.days, 2)
        _min(f"{key}.seed", self.seed, 0)
        for name in ("sessions", "items"):     # 10^12 was numpy's MemoryError traceback (walk 43g #5)
            _max(f"{key}.{name}", getattr(self, name), SAMPLE_MAX)


@dataclass(frozen=True)
class SampleCTRParams:
    """Size of the embedded CTR datasets `sample_ctr` and `sample_kuai` (pipeline/datasets/ctr_sample.py)."""
    users: int = 800                  # users generated
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
    streaming: Union[bool, str] = "auto"  # srgnn: true = spill clicks to Parquet and keep memory bounded by sessions
                                      # and items (same output); false = every click in memory (fast); auto = true
                                      # when the raw file would not fit (its size x 2 > the memory available)
    sample: SampleParams = field(default_factory=SampleParams)
    sample_ctr: SampleCTRParams = field(default_factory=SampleCTRParams)

    def validate(self, key: str) -> None:
        if not 0.0 <= self.valid_fraction < 1.0:
            raise _bad(f"{key}.valid_fraction", self.valid_fraction, "in [0, 1)", "use e.g. 0.1")
        _min(f"{key}.min_item_count", self.min_item_count, 1)
        _min(f"{key}.k_core", self.k_core, 1)
        _min(f"{key}.max_history", self.max_history, 0, fix="use 0 to keep whole histories")
        _min(f"{key}.rows_per_shard", self.rows_per_shard, 1)
        if self.streaming not in (True, False, "auto"):
            raise _bad(f"{key}.streaming", self.streaming, "true, false or auto")


@dataclass(frozen=True)
class AugmentParams:
    max_len: int = 200                # leave-one-out prefixes keep their most recent max_len items
                                      # (srgnn keeps whole prefixes, as its protocol says; 0 = keep all)
    rows_per_shard: int = 1_000_000
    ctr_vocab: str = "train_file"     # CTR rows the vocabularies are counted on: train_file (the whole published
                                      # train.csv = train + the valid seqpe carves from it, as BARS fits them) |
                                      # train (the train split only: valid's own ids are out of vocabulary too)

    def validate(self, key: str) -> None:
        _min(f"{key}.max_len", self.max_len, 0, fix="use 0 to keep whole prefixes")
        _min(f"{key}.rows_per_shard", self.rows_per_shard, 1)
        _choice(f"{key}.ctr_vocab", self.ctr_vocab, CTR_VOCAB)


RUN_ONLY = {"run_only": True}   # field metadata: set per run (CLI / study grid), never in params.yaml


@dataclass(frozen=True)
class TrainParams:
    model: str = field(default="", metadata=RUN_ONLY)     # a key of models.MODELS (--model / the study grid)
    encoding: str = field(default="", metadata=RUN_ONLY)  # a key of models.encodings.ENCODINGS (--encoding / grid)
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
    select_metric: str = "auto"       # metric on valid used to pick the best epoch (auto: ndcg@10 for next-item
                                      # data, auc for CTR data)
    device: str = "auto"              # auto | cpu | cuda | cuda:N
    loss: str = "ce"                  # ce: softmax over all items | sampled: softmax over target + `negatives` items |
                                      # bce: SASRec's own objective, sigmoid BCE with one sampled negative per target
    ce_impl: str = "auto"             # how `ce` is computed (models/losses.py): plain (full logits) | chunked (never
                                      # builds them, own backward) | cce / liger (fused CUDA kernels, if installed) |
                                      # auto (chunked on CPU, plain on CUDA)
    negatives: int = 100              # sampled softmax: uniform negatives per batch (shared by its rows)
    lr_schedule: str = "none"         # none | step (x lr_gamma every lr_step epochs) | plateau (x lr_gamma
                                      # after lr_step epochs without valid improvement)
    lr_step: int = 3
    lr_gamma: float = 0.1
    threads: int | str = "auto"       # torch CPU threads: auto (1 on machines with <= 2 CPUs, else half the
                                      # physical cores, at most 8; pipeline/train/threads.py) | N | 0 (torch's
                                      # default: every core, slow next to other busy processes)
    trim_padding: bool = True         # drop columns that are padding in a whole batch (same predictions, faster)
    bucket: int = 50                  # with trim_padding: sort shuffled rows by length within chunks of this
                                      # many batches, then shuffle the batches (0 = plain shuffle)
    objective: str = "prefixes"       # prefixes: one (prefix, next item) sample per row | sequence: causal
                                      # backbones read a whole leave-one-out train sequence and predict the
                                      # next item at every position (SASRec's training, 003 Eq. 11)
    time_limit: float = 0.0           # minutes of training per seed: stop after the epoch that reaches it and
                                      # test the best epoch so far (0 = none; such a run depends on the machine)
    precision: str = "auto"           # auto (fp32: bf16 measured slower at these sizes, train/setup.py) | fp32 |
                                      # tf32 (fp32 with TF32 matrix products; CUDA only) |
                                      # bf16 (autocast; the metrics are always computed in fp32 or better)
    compile: bool | str = field(default=False, metadata={"values": "true, false or reduce-overhead"})
                                      # torch.compile the training step: false | true (dynamic shapes) |
                                      # reduce-overhead (CUDA only: each step replayed as captured CUDA graphs,
                                      # session graphs built with static shapes; pipeline/train/loop.py)
    memory_budget: float = 0.0        # MB of sample matrices a split may hold in RAM; a larger split is built slice
                                      # by slice into memory-mapped files under .seqpe/spill/ (same batches); 0 = no limit

    def validate(self, key: str) -> None:
        for name in ("epochs", "batch_size", "dim", "heads", "max_len", "negatives"):
            _min(f"{key}.{name}", getattr(self, name), 1)
        # plateau's lr_step is torch's ReduceLROnPlateau patience, where 0 (decay after any epoch that does
        # not improve) is a setting; step's is StepLR's step_size, at least 1 (walk 40d #7)
        _min(f"{key}.lr_step", self.lr_step, 0 if self.lr_schedule == "plateau" else 1)
        for name in ("layers", "patience", "bucket", "time_limit", "weight_decay", "memory_budget"):
            _min(f"{key}.{name}", getattr(self, name), 0)
        if self.dim > MAX_WIDTH:                # a typo: 10^8 was an out-of-memory kill with no message
            raise _bad(f"{key}.dim", self.dim, f"at most {MAX_WIDTH}", "use e.g. 64")
        if self.threads != "auto" and (isinstance(self.threads, str) or self.threads < 0):
            raise _bad(f"{key}.threads", self.threads, "auto or a number of threads >= 0",
                       "use auto (see pipeline/train/threads.py), or e.g. 1")
        _min(f"{key}.lr", self.lr, 0, strict=True, fix="use e.g. 0.001")
        if not 0.0 <= self.dropout < 1.0:
            raise _bad(f"{key}.dropout", self.dropout, "in [0, 1)", "use e.g. 0.2")
        if not 0.0 < self.lr_gamma <= 1.0:
            raise _bad(f"{key}.lr_gamma", self.lr_gamma, "in (0, 1]", "use e.g. 0.1")
        _choice(f"{key}.loss", self.loss, LOSSES)
        _choice(f"{key}.ce_impl", self.ce_impl, CE_IMPLS)
        _choice(f"{key}.lr_schedule", self.lr_schedule, SCHEDULES)
        _choice(f"{key}.objective", self.objective, OBJECTIVES)
        _choice(f"{key}.precision", self.precision, PRECISIONS)
        if isinstance(self.compile, str) and self.compile not in COMPILE_MODES:
            close = did_you_mean(self.compile, COMPILE_MODES)
            raise _bad(f"{key}.compile", self.compile, "true, false or " + " or ".join(COMPILE_MODES),
                       f"did you mean '{close}'?" if close else None)
        if self.ce_impl != "auto" and self.loss != "ce":     # it would be ignored and recorded as if it applied
            raise ParamsError(f"params key '{key}.ce_impl' is {self.ce_impl}, which sets how train.loss ce is "
                              f"computed, but '{key}.loss' is {self.loss}: it would be ignored",
                              f"drop {key}.ce_impl (auto), or use {key}.loss: ce")
        # dim % heads is checked per run (train.stage), once the model's unread keys are known: STAMP reads no
        # heads, and a CTR backbone splits the item width (fields x dim), not dim, into heads


@dataclass(frozen=True)
class EvaluateParams:
    ks: list[int] = field(default_factory=lambda: [5, 10, 20])
    batch_size: int = 512
    mask_history: bool = False        # rank only items outside the sample's input (its whole stored prefix,
                                      # whatever train.max_len); REFERENCE.md §5 ranks all items: off by default
    candidates: int = 0               # 0: full ranking over all items (REFERENCE.md §5, the default) | N: rank each
                                      # target among N sampled negatives of its own (CARCA: 100, 004's code:
                                      # max_len - 1; with mask_history: true, as they exclude the user's items),
                                      # drawn with a fixed seed: the same for every model (pipeline/train/candidates.py)
    candidate_sampling: str = "uniform"   # with candidates > 0: uniform (CARCA, 004) | popularity (train counts)

    def validate(self, key: str) -> None:
        if not self.ks:
            raise _bad(f"{key}.ks", self.ks, "a non-empty list of cut-offs", "use e.g. [5, 10, 20]")
        for i, k in enumerate(self.ks):
            _min(f"{key}.ks[{i}]", k, 1, fix="cut-offs are positive, e.g. [5, 10, 20]")
        if list(self.ks) != sorted(set(self.ks)):       # [10, 10] / [20, 5] were other settings than [10] / [5, 20]
            raise _bad(f"{key}.ks", self.ks, "each cut-off once, in increasing order",     # for the same metrics
                       f"use {sorted(set(self.ks))}")
        _min(f"{key}.batch_size", self.batch_size, 1)
        _min(f"{key}.candidates", self.candidates, 0, fix="use 0 for full ranking, or e.g. 100 sampled negatives")
        _choice(f"{key}.candidate_sampling", self.candidate_sampling, CANDIDATE_SAMPLINGS)


TRAIN_KEYS = [f.name for f in dataclasses.fields(TrainParams) if not f.metadata.get("run_only")]


def config_name(model: str, encoding: str, tag: Optional[str] = None) -> str:
    """One configuration's run folder and report row: <model>-<encoding>[-<tag>]."""
    return f"{model}-{encoding}" + (f"-{tag}" if tag else "")


@dataclass(frozen=True)
class GridParams:
    """One task's (dataset x model x encoding) grid: `dvc repro` trains every cell as its own DVC stage
    (dvc.yaml `matrix:`), each with every seed of `study.seeds`."""
    datasets: list[str] = field(default_factory=list)    # datasets of this task (each also under `datasets:`)
    models: list[str] = field(default_factory=list)      # backbones that take an encoding
    encodings: list[str] = field(default_factory=list)   # every model runs with every encoding
    baselines: list[str] = field(default_factory=list)   # models trained once, without an encoding (pop, gru4rec)
    train: dict[str, Any] = field(default_factory=dict)   # train: keys this task's runs override (CTR models
                                                          # want other learning rates and batch sizes)
    preset: Optional[str] = None     # the preset this task's runs train with where no --preset is given (e.g.
                                     # paper: 001's settings, its dataset variants per dataset), for the models
                                     # that declare it; a model without it trains with these params (a note says)

    def configs(self) -> list[str]:
        """The grid's configuration names in grid order: every model x encoding, then the baselines."""
        return ([config_name(m, e) for m in self.models for e in self.encodings]
                + [config_name(b, "none") for b in self.baselines])


@dataclass(frozen=True)
class StudyParams:
    """The encoding study `dvc repro` runs (issue: encoding studies as tracked DVC experiments)."""
    seeds: list[int] = field(default_factory=lambda: [1, 2])   # every configuration runs with each seed
    reference: Optional[str] = None   # configuration the report compares the others with, e.g. sasrec-none, in
                                      # the grid (next_item or ctr) that has it; the other grid, and null, use
                                      # the grid's first model with its first encoding
    next_item: GridParams = field(default_factory=lambda: GridParams(
        datasets=["sample"], models=["sasrec"], encodings=["none", "lpe", "rope"], baselines=["pop"]))
    ctr: GridParams = field(default_factory=lambda: GridParams(
        datasets=["sample_ctr"], models=["din"], encodings=["none", "cape"],
        train={"lr": 0.005, "batch_size": 512, "epochs": 6, "max_len": 30, "patience": 0}))

    def validate(self, key: str) -> None:
        if not self.seeds:
            raise _bad(f"{key}.seeds", self.seeds, "a non-empty list of seeds", "use e.g. [1, 2, 3]")
        _names(f"{key}.seeds", self.seeds, set(self.seeds), "seed")
        check_seeds(self.seeds, f"params key '{key}.seeds' lists")
        from models.encodings import ENCODINGS       # torch-free metadata
        for task in ("next_item", "ctr"):
            grid = getattr(self, task)
            for part in ("datasets", "models", "baselines"):
                values = getattr(grid, part)
                _names(f"{key}.{task}.{part}", values, set(values), part[:-1])
            _names(f"{key}.{task}.encodings", grid.encodings, ENCODINGS, "encoding")
            overrides = {k: v for k, v in grid.train.items()}
            bad = [k for k in overrides if k not in TRAIN_KEYS]
            if bad:
                close = difflib.get_close_matches(bad[0], TRAIN_KEYS, n=1)
                raise ParamsError(f"unknown params key '{key}.{task}.train.{bad[0]}'",
                                  f"did you mean '{close[0]}'?" if close else "use keys of the train: section")
            if bool(grid.models) != bool(grid.encodings):
                raise ParamsError(f"params key '{key}.{task}': models and encodings must both be listed or "
                                  "both be empty", f"list the encodings to run the models with in {key}.{task}")
        if self.reference is not None:   # checked here, not after the grid has trained (evaluate's stage)
            configs = self.next_item.configs() + self.ctr.configs()
            if self.reference not in configs:
                close = did_you_mean(str(self.reference), configs)
                raise ParamsError(f"params key '{key}.reference' is '{self.reference}', not a configuration of the "
                                  "study grid", (f"did you mean '{close}'? " if close else "") +
                                  f"(MODEL-ENCODING of a grid: {', '.join(configs[:8])}; or null)")


@dataclass(frozen=True)
class Params:
    datasets: list[str] = field(default_factory=lambda: ["sample", "sample_ctr"])   # what `dvc repro` builds
    # Prepared files `dvc repro` imports (dvc.yaml stage `import`, `seqpe import`): name -> {path: file or
    # folder, format: srgnn | sasrec}; each name is a next-item dataset the study grid can train.
    imports: dict[str, dict[str, Any]] = field(default_factory=dict)
    download: DownloadParams = field(default_factory=DownloadParams)
    preprocess: PreprocessParams = field(default_factory=PreprocessParams)
    augment: AugmentParams = field(default_factory=AugmentParams)
    train: TrainParams = field(default_factory=TrainParams)
    evaluate: EvaluateParams = field(default_factory=EvaluateParams)
    study: StudyParams = field(default_factory=StudyParams)
    # Per-name options, checked against each model's / encoding's own config dataclass
    # (see models/config.py) when the run is built: e.g. `encodings: {rmha: {clip: 4}}`.
    models: dict[str, dict[str, Any]] = field(default_factory=lambda: {"sasrec": {}, "pop": {}, "din": {}})
    encodings: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {"none": {}, "lpe": {}, "rope": {}, "cape": {}})

    def train_for(self, task: str, keep: tuple[str, ...] = ()) -> TrainParams:
        """The train section with study.<task>.train's overrides applied (and range-checked), except the
        keys in `keep` (set on the command line with --set, which wins)."""
        over = {k: v for k, v in getattr(self.study, task).train.items() if k not in keep}
        if not over:
            return self.train
        return from_dict(TrainParams, {**to_dict(self.train), **over}, f"study.{task}.train", run=True)

    def validate(self, key: str = "") -> None:
        """Cross-section rules: the study grids train exactly the datasets dvc repro prepares, each in
        the grid of its task (a CTR dataset in study.ctr, a next-item one in study.next_item); each
        grid's train overrides make a valid train section."""
        for task in ("next_item", "ctr"):
            self.train_for(task)
        from .datasets import all_datasets
        known = all_datasets()
        _names("datasets", self.datasets, known, "dataset")
        self._validate_imports(known)
        where: dict[str, str] = {}
        for task in ("next_item", "ctr"):
            for name in getattr(self.study, task).datasets:
                if name in self.imports:
                    if task == "ctr":
                        raise ParamsError(f"'{name}' is an imported next-item dataset but is listed under "
                                          "study.ctr.datasets", "move it to study.next_item.datasets")
                    where[name] = task
                    continue
                if name not in self.datasets:
                    raise ParamsError(f"study.{task}.datasets lists '{name}', which is not under datasets: "
                                      "or imports:", f"add {name} to datasets: (dvc repro prepares only those)")
                is_ctr = known[name].protocol == "ctr"
                if is_ctr != (task == "ctr"):
                    right = "ctr" if is_ctr else "next_item"
                    raise ParamsError(f"'{name}' is a {'CTR' if is_ctr else 'next-item'} dataset but is listed under "
                                      f"study.{task}.datasets", f"move it to study.{right}.datasets")
                where[name] = task
        for task in ("next_item", "ctr"):
            grid = getattr(self.study, task)
            for section, names in (("models", grid.models + grid.baselines), ("encodings", grid.encodings)):
                table = getattr(self, section)
                for name in names:
                    if name not in table:
                        raise ParamsError(f"study.{task} runs {section[:-1]} '{name}' but {section}: has no entry for it "
                                          "(DVC tracks each configuration's options there)",
                                          f"add `{name}: {{}}` under {section}: in params.yaml")
        for name in self.datasets:
            if name not in where:
                raise ParamsError(f"dataset '{name}' is under datasets: but no study grid trains it",
                                  f"add it to study.{'ctr' if known[name].protocol == 'ctr' else 'next_item'}.datasets")
        for name in self.imports:
            if name not in where:
                raise ParamsError(f"imported dataset '{name}' is under imports: but no study grid trains it",
                                  "add it to study.next_item.datasets")

    def _validate_imports(self, known) -> None:
        """imports: NAME -> {path, format}: a folder-safe new name, a path, a known format."""
        if not isinstance(self.imports, dict):
            raise _bad("imports", self.imports, "a mapping NAME: {path: ..., format: srgnn | sasrec}",
                       "write e.g. `imports: {beauty_s3rec: {path: data/inbox/Beauty.txt, format: sasrec}}`")
        for name, spec in self.imports.items():
            key = f"imports.{name}"
            if not isinstance(name, str) or not IMPORT_NAME.fullmatch(name):
                raise ParamsError(f"params key 'imports': '{name}' is not a usable dataset name",
                                  "use lower-case letters, digits, '_' and '-' (it names data/ folders)")
            if name in known or name in self.datasets:
                raise ParamsError(f"params key '{key}': '{name}' is a registered dataset, prepared by its own stages",
                                  f"import under another name, e.g. {name}_imported")
            if not isinstance(spec, dict):
                raise _bad(key, spec, "a mapping {path: ..., format: srgnn | sasrec}")
            extra = sorted(set(spec) - {"path", "format"})
            if extra:
                close = difflib.get_close_matches(str(extra[0]), ["path", "format"], n=1)
                raise ParamsError(f"unknown params key '{key}.{extra[0]}'",
                                  f"did you mean '{close[0]}'?" if close else "an import has path: and format:")
            for part in ("path", "format"):
                if not isinstance(spec.get(part), str) or not spec[part]:
                    raise _bad(f"{key}.{part}", spec.get(part), "a non-empty string",
                               f"give {key}.{part} (path: the file or folder to import; format: srgnn | sasrec)")
            shell = sorted(set(spec["path"]) & set('"$`\\\n'))
            if shell:       # dvc.yaml quotes the path for the shell ("${item.path}"): these break out of the quotes
                raise ParamsError(f"params key '{key}.path': {spec['path']!r} holds {shell[0]!r}, which the stage's "
                                  "shell command cannot quote", "rename the file (or move it) to a path without "
                                  "quotes, $, backquotes or backslashes")
            if IMPORT_FORMATS.get(spec["format"]) == "ctr":
                raise ParamsError(f"params key '{key}.format': {spec['format']} (CTR files) is imported with "
                                  "`seqpe import` only, not as a DVC stage of the study",
                                  f"run `seqpe import {name} {spec['path']} --format {spec['format']}` and train it "
                                  f"with `seqpe train {name}`; keep srgnn or sasrec imports here")
            _choice(f"{key}.format", spec["format"], STAGE_IMPORT_FORMATS)

# --------------------------------------------------------------------------- value ranges

def _where(key: str, what: str) -> str:
    if "[" in key:               # a list's element: --set takes the whole list (walk 38a D5: `--set ks[0]=` refused)
        whole = key[:key.index("[")]
        return f"give {key} {what} (in params.yaml, or --set {whole}=[...])"
    return f"give {key} {what} (in params.yaml, or --set {key}=...)"


def _shown(value: Any) -> str:
    """A value for a message, cut to a line: the whole repr of a YAML alias bomb (1 KB of nested aliases, 10^9
    elements) ran for minutes and filled memory before the one-line error (walk 43g #4)."""
    import reprlib
    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 3, 6, 6, 6, 6
    r.maxstring, r.maxlong, r.maxother = 60, 40, 60
    shown = r.repr(value)
    return shown if len(shown) <= 100 else shown[:97] + "..."


def _bad(key: str, value: Any, want: str, fix: Optional[str] = None) -> ParamsError:
    return ParamsError(f"params key '{key}' must be {want}, got {_shown(value)}", fix or _where(key, f"a value {want}"))


def _wrong_type(key: str, value: Any, tp: Any) -> ParamsError:
    return _bad(key, value, _type_name(tp), _where(key, f"a value of type {_type_name(tp)}"))


def _min(key: str, value: float, low: float, *, strict: bool = False, fix: Optional[str] = None) -> None:
    if value < low or (strict and value == low):
        raise _bad(key, value, f"{'>' if strict else '>='} {low:g}", fix)


SAMPLE_MAX = 100_000_000     # a generated sample's sessions, users or items (Yoochoose has 9.2M sessions)


def _max(key: str, value: float, high: float) -> None:
    if value > high:
        raise _bad(key, value, f"<= {high:,}")


def _choice(key: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        close = did_you_mean(value, choices)
        raise _bad(key, value, f"one of {', '.join(choices)}", f"did you mean '{close}'?" if close else None)


def check_option_ranges(cfg: Any, section: str) -> None:
    """The ranges every model's options share by their names, checked when `models.<name>` is read: a `*dropout`
    in [0, 1) (as train.dropout), a `*_std` (an init's standard deviation) >= 0, a `*steps` count >= 1. They
    reached torch's constructors unchecked, a ValueError traceback (`models.din.attention_dropout=1.5`), or
    trained a model without its part (`models.srgnn.steps=0`: no graph step; walk 43b #1, #3)."""
    import dataclasses
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        key = f"{section}.{f.name}"
        if f.name.endswith("dropout") and not 0 <= value < 1:
            raise _bad(key, value, "in [0, 1)", _where(key, "a value in [0, 1), e.g. 0.2"))
        if f.name.endswith("_std"):
            _min(key, value, 0)
        if f.name.endswith("steps"):
            _min(key, value, 1)


SEED_MAX = 2**32 - 1   # a seed names a run folder (seed-N); 0 .. 2^32 - 1 is the range every RNG library takes


def check_seeds(seeds, where: str = "--seed") -> None:
    """A ParamsError for a seed outside 0 .. 2^32 - 1 (`--seed -3` would train into `seed--3`)."""
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
            raise ParamsError(f"{where} {seed!r}: not a seed seqpe takes", f"use an integer in 0..{SEED_MAX}")


def _names(key: str, values: list[str], known, kind: str) -> None:
    for i, name in enumerate(values):
        if name not in known:
            err = unknown(kind, name, known)
            raise ParamsError(f"params key '{key}[{i}]': {err.problem}", err.fix)
    dup = sorted({v for v in values if values.count(v) > 1})
    if dup:
        raise ParamsError(f"params key '{key}' lists {', '.join(map(str, dup))} twice", "list each once")


IMPORT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
IMPORT_FORMATS = {"srgnn": "srgnn", "sasrec": "leave_one_out",  # what `seqpe import` reads -> the protocol
                  "kuaivideo_x1": "ctr", "amazonelectronics_x1": "ctr"}   # its files follow (pipeline/formats.py)
STAGE_IMPORT_FORMATS = ("srgnn", "sasrec")   # those params.yaml `imports:` (DVC stages) take: the grids' CTR
                                             # half trains registered datasets only
MAX_WIDTH = 65536      # train.dim and an encoding's pos_dim above this are typos (10^8 was an out-of-memory kill)
CTR_VOCAB = ("train_file", "train")
LOSSES = ("ce", "sampled", "bce")
CE_IMPLS = ("auto", "plain", "chunked", "cce", "liger")
SCHEDULES = ("none", "step", "plateau")
OBJECTIVES = ("prefixes", "sequence")
PRECISIONS = ("auto", "fp32", "tf32", "bf16")
COMPILE_MODES = ("reduce-overhead",)     # train.compile besides true / false
CANDIDATE_SAMPLINGS = ("uniform", "popularity")   # evaluate.candidate_sampling (pipeline/train/candidates.py)


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
        raise _wrong_type(key, value, tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ParamsError(f"params key '{key}' must be a mapping, got {_shown(value)}",
                              "fix that section in params.yaml")
        return from_dict(tp, value, key, strict)
    if origin is list:
        if not isinstance(value, list):
            raise ParamsError(f"params key '{key}' must be a list, got {_shown(value)}", "write it as [a, b, ...]")
        return [_coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ParamsError(f"params key '{key}' must be a mapping, got {_shown(value)}", "fix it in params.yaml")
        return {str(k): _coerce(v, args[1], f"{key}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):  # YAML reads 1e-3 as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if number is not None:
            if not math.isfinite(number):   # NaN passes every `<` range check; inf is no setting either
                raise _bad(key, value, "a finite number", _where(key, "a finite number"))
            return number
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is str:
        if isinstance(value, str):
            return value
    raise _wrong_type(key, value, tp)


def from_dict(cls: type, data: dict, prefix: str = "", strict: bool = False, run: bool = False) -> Any:
    """Build dataclass `cls` from `data`, rejecting unknown and mistyped keys; with `strict`, also
    every key that is missing (a params file must spell out every setting; see load_params). Values
    are range-checked (each section's `validate`). Fields marked RUN_ONLY (a run's model and encoding)
    are set per run: accepted only with `run=True`, never read from a params file."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    settable = [n for n, f in fields.items() if run or not f.metadata.get("run_only")]
    for key in data:
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            close = did_you_mean(str(key), settable)
            fix = (f"did you mean '{close}'?" if close else f"known keys here: {', '.join(settable)}" if settable
                   else f"'{prefix}' takes no options: remove '{dotted}'" if prefix else f"remove '{dotted}'")
            raise ParamsError(f"unknown params key '{dotted}'", fix)
        if fields[key].metadata.get("run_only") and not run:
            raise ParamsError(f"'{dotted}' is not a params key: each run's {key} comes from the study grid "
                              f"(study.*.{key}s) or the command line (--{key})",
                              f"use --{key} (and remove {dotted} from params.yaml or --set)")
    kwargs = {}
    for name, f in fields.items():
        dotted = f"{prefix}.{name}" if prefix else name
        if name in data:
            try:
                kwargs[name] = _coerce(data[name], hints[name], dotted, strict)
            except ParamsError:
                if "values" not in f.metadata:
                    raise
                raise _bad(dotted, data[name], f.metadata["values"]) from None
        elif f.metadata.get("run_only"):
            continue
        elif strict or (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING):
            raise ParamsError(f"missing params key '{dotted}'", f"add it to params.yaml{_default_hint(f)}")
    obj = cls(**kwargs)
    if hasattr(obj, "validate"):
        obj.validate(prefix)
    return obj


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
    return key.strip().split("."), _override_value(text, raw)


def _override_value(text: str, raw: str) -> Any:
    """An override's VALUE as YAML; what does not read is a one-line ParamsError (walk 44i #1: `--set
    'evaluate.ks=[5,'`, `train.epochs=*a` or a 5,000-digit number printed PyYAML's traceback)."""
    shown = _shown(text)
    fix = "quote the value as YAML reads it, e.g. --set 'evaluate.ks=[5, 10]' or --set 'train.encoding=\"a b\"'"
    try:
        return yaml.load(raw, Loader=_UniqueKeyLoader)
    except RecursionError:
        raise ParamsError(f"override {shown} nests lists or mappings too deeply to read", fix) from None
    except ValueError as e:            # an integer of more than 4,300 digits (Python's limit)
        if "integer string conversion" not in str(e):         # a date that is none (2001-02-29), `!!int abc`
            raise ParamsError(f"override {shown} has a value YAML cannot build ({' '.join(str(e).split())[:80]})",
                              fix) from None
        raise ParamsError(f"override {shown} holds an integer too long to read", "give a shorter number") from None
    except (TypeError, AttributeError, KeyError) as e:
        raise ParamsError(f"override {shown} has a value YAML cannot build ({type(e).__name__})", fix) from None
    except _DuplicateKey as e:
        raise ParamsError(f"override {shown} gives the key '{e.key}' twice", "give each key once") from None
    except yaml.YAMLError as e:
        problem = " ".join(str(getattr(e, "problem", None) or "").split())
        raise ParamsError(f"override {shown} has a value that is not valid YAML" + (f" ({problem})" if problem else ""),
                          fix) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml's safe loader, but a key given twice in one mapping is an error: PyYAML keeps the last and
    drops the first without a word, so a second `train:` section appended to params.yaml silently
    replaced the whole first one (then "missing params key 'train.batch_size'" named the wrong thing)."""

    def construct_mapping(self, node, deep=False):
        if not isinstance(node, yaml.MappingNode):     # `!!map a`: the base class names it (44k #3: a traceback)
            return super().construct_mapping(node, deep=deep)
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise _DuplicateKey(key, seen[key], key_node.start_mark.line + 1)
            if isinstance(key, (str, int, float, bool)):
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


class _DuplicateKey(Exception):
    def __init__(self, key, first: int, again: int):
        super().__init__(key)
        self.key, self.first, self.again = key, first, again


def _read_yaml(path: Path) -> Any:
    """params.yaml as Python data; a syntax error or a repeated key is a ParamsError naming the line."""
    try:
        return yaml.load(path.read_text(encoding="utf-8-sig"), Loader=_UniqueKeyLoader)
    except UnicodeDecodeError as e:    # Notepad's UTF-16, a Latin-1 comment
        raise ParamsError(f"{path} is not UTF-8 text (byte {e.start})", "save it as UTF-8") from None
    except RecursionError:             # walk 43g #5: tracebacks, as these two were
        raise ParamsError(f"{path} nests lists or mappings too deeply to read", "fix the file") from None
    except ValueError as e:            # an integer of more than 4,300 digits (Python's limit)
        if "integer string conversion" not in str(e):         # a date that is none (2001-02-29), `!!int abc`
            raise ParamsError(f"{path} holds a value YAML cannot build ({' '.join(str(e).split())[:80]})",
                              "fix that value in the file") from None
        raise ParamsError(f"{path} holds an integer too long to read ({' '.join(str(e).split())[:80]})",
                          "fix the number in the file") from None
    except (TypeError, AttributeError, KeyError) as e:
        raise ParamsError(f"{path} holds a value YAML cannot build ({type(e).__name__})", "fix that value in the file") \
            from None
    except _DuplicateKey as e:
        raise ParamsError(f"{path} line {e.again}: key '{e.key}' was already given at line {e.first} (YAML keeps "
                          "only the last)", "give each key once: merge the two") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        opened = None
        if getattr(e, "context", None) == "while scanning a simple key" and getattr(e, "context_mark", None):
            mark = e.context_mark                # `  epochs 5`: PyYAML finds the missing ':' a line later
        elif getattr(e, "context", None) in ("while parsing a flow sequence", "while parsing a flow mapping") and \
                getattr(e, "context_mark", None) and mark and e.context_mark.line != mark.line:
            opened = e.context_mark              # the line of the `[` / `{`: an unclosed one is the error there
        where = f" at line {mark.line + 1}" if mark else ""          # (walk 41c #6), a bad item inside one is not
        if opened is not None:                                        # (41h #3): both are said
            where += (f" (the {'[' if 'sequence' in e.context else '{'} opened at line {opened.line + 1} is not closed "
                      "before it, or holds a bad item)")
        problem = getattr(e, "problem", None)
        tab = r"'\t'" in str(problem or "")       # PyYAML: "found character '\t' that cannot start any token"
        raise ParamsError(f"{path} is not valid YAML{where}" + (f" ({problem})" if problem else ""),
                          "indent with spaces, not tabs" if tab else "fix the syntax there") from None


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
        data = _read_yaml(path) or {}
        if not isinstance(data, dict):
            raise ParamsError(f"{path} must be a mapping of sections", "see the README for its layout")
    elif required and path.is_dir():
        hint = f" ({path / 'params.yaml'} is there)" if (path / "params.yaml").is_file() else ""
        raise ParamsError(f"--params {path} is a folder, not a params file", f"pass the YAML file itself, e.g. "
                          f"--params {path / 'params.yaml'}{hint}")
    elif required and path.exists():     # a pipe (`--params <(...)`) or a device: "not found" was wrong (44i #5)
        raise ParamsError(f"params file {path} is not a regular file (a pipe or a device)",
                          "write the params to a file and pass its path with --params")
    elif required:
        from .io import missing
        raise ParamsError(f"params file {path} {missing(path, 'not found')}",
                          "run from the project root or pass --params PATH")
    else:
        strict = False
        # Without a file, `--set models.posrec.anchors=false` adds to the built-in name -> options
        # tables instead of replacing them (else the default study's `sasrec: {}` entry would vanish).
        data = {name: table for name, table in dataclasses.asdict(Params()).items()     # (deep copies)
                if name in ("models", "encodings", "imports")}
    defaults = dataclasses.asdict(Params())
    for text in overrides or []:
        keys, value = _parse_override(text)
        section = defaults                      # `--set train=1` was "'train' must be a mapping. Fix: fix that
        for k in keys:                          # section in params.yaml", or blamed the next --set train.epochs=2
            section = section.get(k) if isinstance(section, dict) else None
        if isinstance(section, dict) and not isinstance(value, dict):
            example = next((k for k in section if k not in ("model", "encoding")), "KEY")   # (run-only keys)
            raise ParamsError(f"override '{text}': '{'.'.join(keys)}' is a section of params, not a value",
                              f"set one of its keys, e.g. --set {'.'.join(keys)}.{example}=...")
        node = data
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ParamsError(f"override '{text}': '{k}' is not a section", "override a leaf key")
        node[keys[-1]] = value
    try:
        return from_dict(Params, data, strict=strict)
    except ParamsError as e:                    # `--params ok.yaml` missing a key was told to add it to params.yaml
        if path.is_file() and path.name != "params.yaml" and (e.fix or "").startswith("add it to params.yaml"):
            raise ParamsError(e.problem, f"add it to {path}" + e.fix.removeprefix("add it to params.yaml")) from None
        raise


def to_dict(obj: Any) -> Any:
    """Dataclass -> plain dict (for manifests and run records)."""
    return dataclasses.asdict(obj)
