"""Deferred imports for modules that `seqpe download` and the dataset registry load.

`download --from` needs the dataset registry and the atomic-write helpers, not Polars; importing
Polars costs ~0.15-0.25 s per process, paid three times by download + preprocess + augment, and
scipy.stats ~2 s (walk 45a #2). `lazy("polars")` returns a stand-in at once whose first attribute
access imports the module, so module-level `pl = lazy("polars")` costs nothing until a function
actually touches `pl.<something>`.

Written here rather than with `importlib.util.LazyLoader`, which this module used before: on Python
3.11 LazyLoader runs the deferred import without a lock, and two threads touching the module at once
saw it half made (walk 45g #1: `module 'scipy.stats' has no attribute 't'` in 3 of 3 runs of two
reports in threads). The stand-in imports through `importlib.import_module`, whose per-module lock
makes a second thread wait for the first import to finish; after that its attributes are the module's.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType


class _Deferred(ModuleType):
    """A module's stand-in: the first attribute it lacks imports the module and takes its namespace."""

    def __getattr__(self, attr: str):
        module = importlib.import_module(self.__name__)     # waits for another thread's import of it
        self.__dict__.update({k: v for k, v in vars(module).items() if k not in ("__name__", "__spec__")})
        return getattr(module, attr)


def lazy(name: str) -> ModuleType:
    """The module `name`, imported on first attribute access (at once if already imported)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    return _Deferred(name)
