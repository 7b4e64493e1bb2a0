"""The versions that decide what seqpe computes, recorded in every manifest and run.json.

python, numpy, polars, pyarrow, torch and seqpe itself (the package version, and the git commit of
its source tree when it runs from a checkout, with `dirty` when tracked files differ from it).
Read with importlib.metadata, so the data stages record torch's version without importing torch.
Two runs of the same code and inputs record the same versions, so outputs stay byte-identical
(and `dvc.lock` reproduces); a different library or commit is visible in the data it produced.
"""
from __future__ import annotations

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


def version_line() -> str:
    """`seqpe --version`: "seqpe 0.1.0 (git 8b22e0d3f1a2, modified; python 3.11.7, torch 2.13.0, polars 1.x)"."""
    v = versions()
    if v.get("seqpe_git"):
        git = f"git {v['seqpe_git'][:12]}" + (", modified" if v.get("seqpe_dirty") else "")
    else:
        git = "not a git checkout"
    libs = ", ".join(f"{name} {v[name]}" for name in ("python", "torch", "polars") if v.get(name))
    return f"seqpe {v.get('seqpe') or 'unknown'} ({git}; {libs})"
