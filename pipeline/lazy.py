"""Deferred imports for modules that `seqpe download` and the dataset registry load.

`download --from` needs the dataset registry and the atomic-write helpers, not Polars; importing
Polars costs ~0.15-0.25 s per process, paid three times by download + preprocess + augment.
`lazy("polars")` returns the module object at once and runs its import on first attribute access
(`importlib.util.LazyLoader`), so module-level `pl = lazy("polars")` costs nothing until a
function actually touches `pl.<something>`.
"""
from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy(name: str) -> ModuleType:
    """The module `name`, imported on first attribute access (at once if already imported)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
