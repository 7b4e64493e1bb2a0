"""seqpe models: backbones that receive a positional encoding object (injected).

`MODELS` is a plain dict registry: name -> ModelSpec. `build_model` fails on an
unknown name listing the known ones.

Importing `models` does not import torch: the registry names below load on first use
(PEP 562), which imports every backbone module (each registers itself). So
`models.encodings` / `models.config` metadata stay usable by torch-free commands
(`seqpe encodings`).
"""
from __future__ import annotations

_EXPORTS = ("MODELS", "ModelSpec", "Recommender", "build_model", "register_model")


def _load_all() -> None:
    """Import every backbone module (each registers itself)."""
    import importlib
    import pkgutil
    for m in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        if m not in ("base", "encodings", "metrics", "attention", "config"):
            importlib.import_module(f"{__name__}.{m}")


def __getattr__(name: str):
    if name in _EXPORTS:
        from . import base
        _load_all()
        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
