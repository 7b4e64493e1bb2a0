"""Named parameter sets of a model (`seqpe train --preset NAME`), resolved against one dataset.

A model registers its presets in `ModelSpec.presets` (models/base.py): name -> preset. A
preset carries the paper's settings for the three parts of a run:

    {"train":     {TrainParams field: value, ...},              # e.g. epochs, dim, lr, encoding
     "models":    {model name: {option: value}},                # params.yaml `models:` shape
     "encodings": {encoding name: {option: value}},             # params.yaml `encodings:` shape
     "datasets":  {name fragment: {"train"/"models"/"encodings": ...}}}   # per-dataset variants

Every key is optional. A preset with none of these four keys is the legacy flat form: the
whole dict is TrainParams overrides (`{"epochs": 30, "lr": 1e-3}`).

Dataset variants: a `datasets` entry applies when its words stand together, whole, among the dataset
name's (words: runs of letters or of digits, case-insensitive): so PosRec's `paper` means lambda2 =
0.5 for `yoochoose_1_64` / `yoochoose1_64` and lambda2 = 1 for `diginetica` / `diginetica_srgnn`
(000 §5.1.5); SASRec's `ml_1m` matches `ml1m_sasrec`, `ML-1M` and `ml_1m`, not `ml_10m`; CARCA's `men`
matches `amazon_men`, not `amazon_women`, `experiment` or `mental`, and its `video_games` not
`toys_and_games` (a plain substring test gave all of those another dataset's settings, silently).
Two matching entries with different settings are an error (ambiguous); no match keeps the
preset's base settings. `--preset
NAME_VARIANT` (`paper_men`, `paper_yoochoose`) picks a variant by name, whatever the dataset is
called. The stage prints which variant applied, or that none matched (`variant_note`).

Precedence, lowest first (the record of the run holds the resolved values):
    train:      params.yaml `train:`  <  preset  <  dataset variant  <  `--set train.KEY=...`
                <  `--model` / `--encoding`
    options:    preset  <  dataset variant  <  params.yaml `models:` / `encodings:` (and --set)
`train:` in params.yaml is complete (every key has a value), so a preset must win over it,
or presets would do nothing; the command line's --set is explicit, so it wins over the
preset (`--preset paper --set train.epochs=1`). `models:` / `encodings:` hold only what a
user wrote on purpose, so an explicit option there beats the preset's, key by key.

Torch-free: the train stage calls it before importing any model code it does not need.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from .errors import ParamsError, unknown

PARTS = ("train", "models", "encodings")
STRUCTURED = PARTS + ("datasets",)


@dataclass(frozen=True)
class Resolved:
    """What one preset contributes for one dataset (empty when no preset was asked for)."""
    train: dict[str, Any] = field(default_factory=dict)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    encodings: dict[str, dict[str, Any]] = field(default_factory=dict)
    name: Optional[str] = None
    variant: Optional[str] = None      # the `datasets` fragment that matched, if any
    twin: Optional[str] = None         # the dataset whose layout picked the variant (no variant in the name)

    def record(self) -> Optional[dict]:
        """For run.json: which preset and dataset variant were applied."""
        return None if self.name is None else {"name": self.name, "variant": self.variant}


def parts(preset: dict, where: str) -> dict[str, Any]:
    """The structured form of one preset (or dataset variant); the flat form -> {"train": ...}."""
    if not isinstance(preset, dict):
        raise ParamsError(f"{where} must be a mapping", "fix the preset in the model's module")
    keys = set(preset)
    if not keys & set(STRUCTURED):
        return {"train": dict(preset)}
    extra = sorted(keys - set(STRUCTURED))
    if extra:
        raise ParamsError(f"{where} mixes flat train keys ({', '.join(extra)}) with sections",
                          f"put train keys under 'train'; sections are {', '.join(STRUCTURED)}")
    return preset


def _merge_options(base: dict, over: dict, where: str) -> dict:
    out = {k: dict(v) for k, v in base.items()}
    for name, opts in (over or {}).items():
        if not isinstance(opts, dict):
            raise ParamsError(f"{where}.{name} must be a mapping of options", "write {option: value}")
        out.setdefault(name, {}).update(opts)
    return out


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def shown(name: str, variant: str) -> str:
    """The NAME_VARIANT preset name messages show: the variant as written, separators as '_' (paper_carca_games,
    paper_ml_1m; the squashed paper_carcagames read as one word, walk 32a). `_forced` takes either spelling."""
    return f"{name}_{re.sub(r'[^a-z0-9]+', '_', variant.lower()).strip('_')}"


def _words(text: str) -> list[str]:
    """Lower-case runs of letters or of digits: `ml1m_sasrec` -> ml, 1, m, sasrec; `Video-Games` -> video, games."""
    return re.findall(r"[a-z]+|[0-9]+", text.lower())


def matches(variant: str, dataset: str) -> bool:
    """Whether the words of `variant` stand together, whole, among the dataset name's (module docstring)."""
    key, words = _words(variant), _words(dataset)
    return bool(key) and any(words[i:i + len(key)] == key for i in range(len(words) - len(key) + 1))


def names(presets: Optional[dict]) -> list[str]:
    """Every name --preset takes: the presets and, for those with dataset variants, NAME_VARIANT."""
    out = []
    for name, preset in (presets or {}).items():
        out.append(name)
        if isinstance(preset, dict):
            out += [shown(name, v) for v in preset.get("datasets") or {} if shown(name, v) not in (presets or {})]
    return out


def _forced(presets: dict, preset: str) -> Optional[tuple[str, str]]:
    """(preset, variant) for a NAME_VARIANT preset name, else None."""
    for name, body in presets.items():
        if isinstance(body, dict) and preset.startswith(name + "_"):
            for variant in body.get("datasets") or {}:
                if _squash(variant) == _squash(preset[len(name) + 1:]):
                    return name, variant
    return None


def resolve(presets: Optional[dict], preset: Optional[str], model: str, dataset: str,
            twin: Optional[str] = None) -> Resolved:
    """The preset `preset` of `model` with its variant for `dataset` applied on top (or the variant that
    `preset` names: NAME_VARIANT). `twin`: the registered dataset whose layout the data has (a CTR import
    of KuaiVideo_x1 files under a name of one's own), whose variant applies when the name matches none: its
    name alone gave `mykuai` AmazonElectronics' learning rate and batch (walk 32b)."""
    if preset is None:
        return Resolved()
    presets = presets or {}
    forced = None
    if preset not in presets:
        forced = _forced(presets, preset)
        if forced is None:
            err = unknown("preset", preset, names(presets), None if presets else "this model has none: drop --preset")
            raise type(err)(f"{err.problem} for model '{model}'", err.fix)
    name = forced[0] if forced else preset
    where = f"preset '{name}' of model '{model}'"
    base = parts(presets[name], where)
    variants = base.get("datasets") or {}
    hits = [forced[1]] if forced else sorted(f for f in variants if matches(f, dataset))
    by_twin = not hits and twin is not None and any(matches(f, twin) for f in variants)
    if by_twin:
        hits = sorted(f for f in variants if matches(f, twin))
    if len(hits) > 1 and all(variants[h] == variants[hits[0]] for h in hits):     # aliases (movielens, ml_1m)
        hits = hits[:1]
    if len(hits) > 1:
        raise ParamsError(f"dataset '{dataset}' matches several variants of {where}: {', '.join(hits)}",
                          f"name the variant: {' or '.join(f'--preset {shown(name, h)}' for h in hits)}")
    layers = [base] + [parts(variants[hits[0]], f"{where}, dataset '{hits[0]}'")] if hits else [base]
    train: dict[str, Any] = {}
    models: dict = {}
    encodings: dict = {}
    for layer in layers:
        train.update(layer.get("train") or {})
        models = _merge_options(models, layer.get("models"), f"{where} models")
        encodings = _merge_options(encodings, layer.get("encodings"), f"{where} encodings")
    return Resolved(train, models, encodings, name, hits[0] if hits else None, twin if by_twin else None)


def variant_note(presets: Optional[dict], res: Resolved, model: str, dataset: str) -> Optional[str]:
    """One line for a preset with dataset variants: which one applied to `dataset`, or that none did (the
    base settings then apply, which for SASRec's `paper` are the Amazon sets', not ML-1M's)."""
    if res.name is None:
        return None
    variants = list(((presets or {}).get(res.name) or {}).get("datasets") or {})
    if not variants:
        return None
    if res.twin is not None:
        return (f"preset {res.name} of {model}: its {res.variant} variant for dataset '{dataset}', whose data has "
                f"{res.twin}'s layout (--preset {res.name}_VARIANT picks another: "
                f"{', '.join(shown(res.name, v) for v in variants)})")
    if res.variant is not None and not matches(res.variant, dataset):     # --preset NAME_VARIANT (walk 32c)
        return (f"preset {res.name} of {model}: its {res.variant} variant, as named (--preset "
                f"{shown(res.name, res.variant)}), for dataset '{dataset}'")
    if res.variant is not None:
        return f"preset {res.name} of {model}: its {res.variant} variant for dataset '{dataset}'"
    return (f"preset {res.name} of {model}: dataset '{dataset}' matches none of its variants ({', '.join(variants)}), "
            f"so its base settings apply (--preset {res.name}_VARIANT picks one: "
            f"{', '.join(shown(res.name, v) for v in variants)})")


def merge_options(preset_opts: dict, explicit: dict) -> dict:
    """params.yaml `models:` / `encodings:` over the preset's, option by option (explicit wins)."""
    return _merge_options(preset_opts, explicit, "params")


def explicit_train_keys(overrides: Optional[Iterable[str]]) -> list[str]:
    """TrainParams keys set on the command line (`--set train.KEY=VALUE`), in order."""
    keys = []
    for text in overrides or []:
        path = text.split("=", 1)[0].strip().split(".")
        if len(path) == 2 and path[0] == "train" and path[1] not in keys:
            keys.append(path[1])
    return keys
