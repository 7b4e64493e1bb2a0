"""seqpe models: backbones that receive a positional encoding object (injected).

`MODELS` is a plain dict registry: name -> ModelSpec. `build_model` fails on an
unknown name listing the known ones.
"""
from __future__ import annotations

from .base import MODELS, ModelSpec, Recommender, build_model, register_model  # noqa: F401


def _load_all() -> None:
    """Import every backbone module (each registers itself)."""
    import importlib
    import pkgutil
    for m in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        if m not in ("base", "encodings", "metrics", "attention", "config"):
            importlib.import_module(f"{__name__}.{m}")


_load_all()
