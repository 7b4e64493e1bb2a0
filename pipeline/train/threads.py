"""How many CPU threads torch uses for training (`train.threads`).

    auto   1 when this process may use at most 2 CPUs; else half its physical cores, at most 8
    N      exactly N threads
    0      torch's own default (every core)

Why not torch's default: torch's CPU operators split every matrix product over all cores and
wait for the slowest thread at the end of each. When other processes keep the cores busy, a thread
stuck behind one stalls all the others: on a shared 2-core machine SASRec on the embedded sample
trained 8-13x slower with 2 threads (0 or 2) than with 1, and no setting was faster than one
thread (bench/results/train.md, "CPU threads", measured with bench/bench_threads.py). Small
recommendation models do not keep many cores busy, so a few threads suffice, and leaving half the
cores free keeps that stall away from a machine shared with other jobs (the rule for more than 2
CPUs is reasoned, not measured: no larger machine was at hand).

Why not "what is free" (the load average): the number of threads changes the order in which
floating-point sums are added, so weights differ in the last bits between thread counts (measured:
up to 6e-5 after two epochs). A count read from the momentary load would make two runs of the same
command on the same machine differ; `auto` depends only on the machine (its CPUs and cores), so
the same machine always gives the same bytes. A run records the count `auto` picked (run.json and
its fingerprint, pipeline/train/stage.py), so a resume file written where auto picked 2 is not
continued where it picks 1 (walk 37b D3). `0` is recorded the same way, as the count torch's default
gives this process (read before seqpe sets any, so a second run in one process reads the same). Set a
number (e.g. 1) where runs on different machines
must give the same bytes.

Reading the machine: the CPUs this process may run on (sched_getaffinity: taskset, cpusets),
capped by a cgroup CPU quota (`docker --cpus`, Kubernetes limits: cgroup v2 cpu.max or v1
cfs_quota_us), and physical cores counted once per (package, core id) from /sys, so SMT
siblings do not count twice. Where /sys says nothing, logical CPUs count as cores.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Optional

MAX_AUTO = 8
_TORCH_DEFAULT: Optional[int] = None


def usable_cpus() -> int:
    """CPUs this process may use: its affinity set, capped by a cgroup CPU quota."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(n, math.ceil(quota)) if quota is not None else n)


def _cgroup_quota() -> Optional[float]:
    """CPUs allowed by the cgroup (v2 cpu.max "QUOTA PERIOD", v1 cfs_quota_us / cfs_period_us), or None."""
    try:
        text = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if text and text[0] != "max":
            return int(text[0]) / int(text[1])
        return None
    except (OSError, ValueError, IndexError):
        pass
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def physical_cores() -> int:
    """Physical cores among the CPUs this process may use (SMT siblings once), capped by usable_cpus."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in cpus:
        top = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add((top.joinpath("physical_package_id").read_text().strip(),
                       top.joinpath("core_id").read_text().strip()))
        except OSError:
            cores.add(("cpu", str(cpu)))
    return max(1, min(len(cores), usable_cpus()))


def auto_threads() -> int:
    """`train.threads: auto` on this machine (rule in the module docstring)."""
    if usable_cpus() <= 2:
        return 1
    return max(1, min(physical_cores() // 2, MAX_AUTO))


def torch_default() -> int:
    """The intra-op thread count torch starts this process with (OMP_NUM_THREADS, else its cores).

    Read once, before `apply` first sets a count, so `0` means the same in every run of a process."""
    global _TORCH_DEFAULT
    if _TORCH_DEFAULT is None:
        import torch
        _TORCH_DEFAULT = torch.get_num_threads()
    return _TORCH_DEFAULT


def resolve(threads) -> int:
    """The thread count for a train.threads value: auto -> auto_threads(), N -> N, 0 -> torch_default()."""
    if threads == "auto":
        return auto_threads()
    return int(threads) if int(threads) > 0 else torch_default()


def apply(threads) -> int:
    """Set torch's intra-op threads for a train.threads value; returns the count torch now uses."""
    import torch
    torch_default()                                    # read before the first set
    n = resolve(threads)
    torch.set_num_threads(n)
    return torch.get_num_threads()
