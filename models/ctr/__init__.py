"""CTR backbones of CAPE's experiments (001 §5): one file per backbone, each registers itself
in `models.MODELS` with `ModelSpec(task="ctr")`. The shared contract (batch, schema, embeddings,
output) is `models/ctr/base.py`."""
from __future__ import annotations


def _load_all() -> None:
    import importlib
    import pkgutil
    for m in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        if m != "base":
            importlib.import_module(f"{__name__}.{m}")


_load_all()
