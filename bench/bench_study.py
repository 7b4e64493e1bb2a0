"""Wall time of the default study grid on `sample` from a fresh clone, and DVC's bookkeeping overhead.

    python bench/bench_study.py [--repo .] [--work /tmp/seqpe-study-bench] [--rounds 1]

Per round, in one run (so both sides see the same machine load):
  dvc    a fresh `git clone` of the repo, `dvc init`-ed as a user's project would be, then `dvc repro`
         (the params.yaml and dvc.yaml of the clone: every stage of the default grid)
  hand   a fresh copy of the same files, running by hand exactly the commands `dvc repro` ran, in the
         same order (its "> cmd" lines), with the same arguments
Reports both wall times and their ratio (dvc / hand): the cost of DVC's hashing, locking and
checkout on top of seqpe's own work. The seqpe used is the one on PATH (this venv).

--work's dvc/ and hand/ are replaced every round, so --work is never inside the repository and is
either absent or made by an earlier run of this script (its .bench_study mark); any other existing
folder is refused before anything is written (a folder of a run from before the mark: touch
WORK/.bench_study).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
MARK = ".bench_study"       # in --work: this script made it, so its dvc/ and hand/ may be replaced


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if k != "SEQPE_STATE"}
    e["PATH"] = f"{BIN}{os.pathsep}{e.get('PATH', '')}"
    e.update(DVC_NO_ANALYTICS="1", DVC_NO_UPDATER="1", GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@example.invalid",
             GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@example.invalid")
    return e


def sh(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc


def fresh(repo: Path, where: Path) -> Path:
    if where.exists():
        shutil.rmtree(where)
    sh(["git", "clone", "-q", str(repo), str(where)], repo.parent)
    return where


def stage_commands(repro_stdout: str) -> list[str]:
    """The commands `dvc repro` ran, in its order (its "> cmd" lines)."""
    return [line[2:].strip() for line in repro_stdout.splitlines() if line.startswith("> ")]


def check(args) -> None:
    """Every input before anything is written: one line and exit 1 on the first bad one."""
    args.repo, args.work = args.repo.resolve(), args.work.resolve()
    if not (args.repo / ".git").exists() or not (args.repo / "dvc.yaml").is_file():
        raise SystemExit(f"--repo {args.repo} is not a git checkout of seqpe (no .git or dvc.yaml): "
                         "name the repository")
    if args.rounds < 1:
        raise SystemExit(f"--rounds must be 1 or more, got {args.rounds}")
    if args.work == args.repo or args.repo in args.work.parents:
        raise SystemExit(f"--work {args.work} lies inside the repository {args.repo}: name a folder outside it "
                         "(default /tmp/seqpe-study-bench)")
    if args.work.exists() and not (args.work / MARK).is_file():
        raise SystemExit(f"--work {args.work} exists and was not made by bench_study.py: name another folder "
                         f"(an earlier run's from before the mark: touch {args.work / MARK})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--work", type=Path, default=Path("/tmp/seqpe-study-bench"))
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    check(args)
    args.work.mkdir(parents=True, exist_ok=True)
    (args.work / MARK).touch()
    rows = []
    for r in range(args.rounds):
        clone = fresh(args.repo, args.work / "dvc")
        t0 = time.perf_counter()
        repro = sh([sys.executable, "-m", "dvc", "repro"], clone)
        dvc_s = time.perf_counter() - t0
        commands = stage_commands(repro.stdout)
        hand = fresh(args.repo, args.work / "hand")
        shutil.rmtree(hand / ".dvc", ignore_errors=True)
        t0 = time.perf_counter()
        for cmd in commands:
            sh(["bash", "-c", cmd], hand)
        hand_s = time.perf_counter() - t0
        load = os.getloadavg()[0]
        rows.append({"round": r + 1, "dvc_s": round(dvc_s, 1), "hand_s": round(hand_s, 1),
                     "ratio": round(dvc_s / hand_s, 3), "stages": len(commands), "load_1min": round(load, 2)})
        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                      "rows": rows}))


if __name__ == "__main__":
    main()
