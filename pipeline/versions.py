"""The versions that decide what seqpe computes, and the checkout it runs from.

`versions()`: python, numpy, polars, pyarrow, torch and seqpe itself (the package version, and the git
commit of its source tree when it runs from a checkout, with `dirty` when tracked files differ from it):
`seqpe --version`, and a run's timing.json. run.json records `code_versions()` instead (below): the git
commit is not an input of a run, and recording it made a teammate's `dvc repro` at a later commit (or after
DVC itself rewrote the tracked dvc.lock, which made the checkout "dirty") change every run.json (walk 35a).
Read with importlib.metadata, so the data stages record torch's version without importing torch.
Two runs of the same code and inputs record the same versions, so outputs stay byte-identical
(and `dvc.lock` reproduces); a different library or source is visible in the data it produced.

`code_versions()` is what decides whether a finished or half-trained seed may be reused (the run
fingerprint, pipeline/train/runs.py): the libraries' versions and a hash of seqpe's own source (every
.py file of the `pipeline` and `models` packages, by path and content), not the git commit. A
commit that changes only documentation, benchmarks or tests then leaves finished seeds finished,
while any edit to the code that computes a run, committed or not, changes the hash.
"""
from __future__ import annotations

import hashlib
import platform
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Optional

PACKAGES = ("numpy", "polars", "pyarrow", "torch")


def _version(package: str) -> Optional[str]:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> Optional[str]:
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@lru_cache(maxsize=1)
def versions() -> dict:
    commit = _git("rev-parse", "HEAD")
    out = {"python": platform.python_version(), **{p: _version(p) for p in PACKAGES},
           "seqpe": _version("seqpe"), "seqpe_git": commit}
    if commit is not None:
        out["seqpe_dirty"] = bool(_git("status", "--porcelain", "--untracked-files=no"))
    return out


PACKAGE_DIRS = ("pipeline", "models")


def source_hash(root: Path) -> str:
    """sha256 (first 20 hex digits) of the seqpe source under `root`: every .py file under pipeline/ and
    models/ in path order, each as its relative path and its bytes."""
    h = hashlib.sha256()
    for path in sorted(p for d in PACKAGE_DIRS for p in (root / d).rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode("utf-8") + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:20]


@lru_cache(maxsize=1)
def code_hash() -> str:
    """source_hash of the seqpe this process runs (read once per process)."""
    return source_hash(Path(__file__).resolve().parents[1])


def code_versions() -> dict:
    """The versions a run's result depends on: libraries and seqpe's source hash (no git commit)."""
    v = {k: val for k, val in versions().items() if k not in ("seqpe_git", "seqpe_dirty")}
    return {**v, "seqpe_code": code_hash()}


def version_line() -> str:
    """`seqpe --version`: "seqpe 0.1.0 (git 8b22e0d3f1a2, modified; python 3.11.7, torch 2.13.0, polars 1.x)"."""
    v = versions()
    if v.get("seqpe_git"):
        git = f"git {v['seqpe_git'][:12]}" + (", modified" if v.get("seqpe_dirty") else "")
    else:
        git = "not a git checkout"
    libs = ", ".join(f"{name} {v[name]}" for name in ("python", "torch", "polars") if v.get(name))
    return f"seqpe {v.get('seqpe') or 'unknown'} ({git}; {libs})"
