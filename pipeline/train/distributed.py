"""Training on several processes through torch's own engine: torchrun + DistributedDataParallel.

    torchrun --nproc_per_node 4 -m pipeline.cli train diginetica --model sasrec --encoding lpe
    torchrun --nnodes 2 --node_rank R --rdzv_backend c10d --rdzv_endpoint HOST:29400 \\
             --nproc_per_node 4 -m pipeline.cli train ...           (multi-node: one command per node)

torchrun sets WORLD_SIZE / RANK / LOCAL_RANK; `setup` then joins the process group (NCCL on CUDA,
gloo on CPU) and gives each rank its device (cuda:LOCAL_RANK). In one process every function here
is a no-op, so the single-process path is the same code.

Training: every rank draws the SAME seeded batch order (one generator, seeded alike) and takes
every W-th batch of it (rank r: batches r, r + W, ...), so the epoch's batches are sharded without
overlap; the last < W batches of an epoch, which not every rank could take, are skipped that epoch
(the shuffle changes which). Gradients are averaged by DDP (the model's loss runs inside the DDP
wrapper's forward, `LossModule`), so a step sees W x batch_size samples. Dropout draws differ per
rank (torch's global RNG is seeded with seed + rank).

Evaluation: each rank scores rows r, r + W, ... of the split and the per-row results (next-item:
the integer (greater, ties) counts; CTR: the logits) are gathered into file order, so every rank
computes the metrics from exactly the arrays one process would have: the same bits (tested with 2
gloo processes). Only rank 0 writes run folders, checkpoints, curves and resume files; the others
wait at a barrier and return nothing. Resume files live in the state root (.seqpe/), which must be
on a file system every node sees for a multi-node restart.

A run's process count W is one of its inputs (runs.fingerprint; W batches a step is another
training than one): a seed trained by W processes is not reused or resumed by another W, and report
does not pool seeds of different W. An epoch with fewer batches than processes would run no step
and is refused (Dist.shard).

Running a stage that is not distributed (download, preprocess, augment, evaluate, fitted baselines)
under torchrun with W > 1 is an error: it would only repeat the same work W times.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Iterator

from ..errors import ParamsError, TrainingError

ENV = ("WORLD_SIZE", "RANK", "LOCAL_RANK")


def world_size() -> int:
    """torchrun's WORLD_SIZE (1 when unset); a value that is not a positive whole number is refused,
    never read as one process (that would train alone what the user meant to share)."""
    text = os.environ.get("WORLD_SIZE", "1")
    try:
        world = int(text)
    except ValueError:
        world = 0
    if world < 1:
        raise ParamsError(f"WORLD_SIZE is {text!r}, not a number of processes",
                          "unset WORLD_SIZE, or start distributed training with torchrun (it sets it)")
    return world


def too_few(batches: int, world: int) -> str:
    """Why an epoch of `batches` batches cannot be shared by `world` processes (Dist.shard, train --check)."""
    return (f"its {batches} batch(es) are fewer than the {world} processes torchrun started, and a step takes one "
            "batch per process")


def too_few_fix(world: int) -> str:
    return (f"lower train.batch_size so that an epoch has at least {world} batches, or start fewer processes "
            "(torchrun --nproc_per_node)")


def refuse(command: str) -> None:
    """A command with nothing to share across processes refuses to run W times under torchrun."""
    if world_size() > 1:
        raise ParamsError(f"`seqpe {command}` does not run distributed, and torchrun started it "
                          f"{world_size()} times", f"run `seqpe {command}` without torchrun (only the training of "
                          "neural models uses several processes; fitted baselines and the other commands run once)")


@dataclass
class Dist:
    world: int = 1
    rank: int = 0
    local_rank: int = 0

    @property
    def active(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def shard(self, batches: Iterable, what: str = "an epoch") -> Iterator:
        """Every W-th batch of the shared order, starting at this rank; the last incomplete round dropped.
        An epoch of fewer than W batches has no round at all: a TrainingError (`what` names the epoch), not
        an epoch of no step (it finished with loss 0 and wrote the untrained model's metrics)."""
        if not self.active:
            yield from batches
            return
        pending, rounds = [], 0
        for batch in batches:
            pending.append(batch)
            if len(pending) == self.world:
                yield pending[self.rank]
                pending, rounds = [], rounds + 1
        if not rounds:
            raise TrainingError(f"{what} has no training step: {too_few(len(pending), self.world)}; nothing was "
                                "written for this seed", too_few_fix(self.world))

    def rows(self, n: int):
        """This rank's rows of a split of n rows (r, r + W, ...) as a LongTensor, or None for all."""
        if not self.active:
            return None
        import torch
        return torch.arange(self.rank, n, self.world)

    def gather_rows(self, values, n: int):
        """Put every rank's per-row `values` (rows r, r + W, ...) back into one (n, ...) tensor in
        file order, on every rank (exact: values are moved, never summed)."""
        if not self.active:
            return values
        import torch
        import torch.distributed as td
        size = -(-n // self.world)                                        # rows of the largest shard
        pad = torch.zeros((size, *values.shape[1:]), dtype=values.dtype, device=values.device)
        pad[: values.shape[0]] = values
        parts = [torch.empty_like(pad) for _ in range(self.world)]
        td.all_gather(parts, pad)
        out = torch.empty((n, *values.shape[1:]), dtype=values.dtype, device=values.device)
        for r, part in enumerate(parts):
            out[r::self.world] = part[: len(range(r, n, self.world))]
        return out

    def wrap(self, module):
        """DDP around `module` (the loss module) when distributed; the module itself otherwise."""
        if not self.active:
            return module
        from torch.nn.parallel import DistributedDataParallel as DDP
        ids = [self.local_rank] if next(module.parameters()).is_cuda else None
        return DDP(module, device_ids=ids, static_graph=True)   # same parameters used every step

    def barrier(self) -> None:
        if self.active:
            import torch.distributed as td
            td.barrier()

    def gather_objects(self, obj) -> list:
        """Every rank's `obj`, in rank order, on every rank ([obj] in one process)."""
        if not self.active:
            return [obj]
        import torch.distributed as td
        out = [None] * self.world
        td.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj):
        """Rank 0's `obj` on every rank."""
        if not self.active:
            return obj
        import torch.distributed as td
        box = [obj if self.main else None]
        td.broadcast_object_list(box, src=0)
        return box[0]


def setup(device_name: str):
    """(Dist, torch.device): join torchrun's process group when WORLD_SIZE > 1."""
    import torch
    from .setup import pick_device
    world = world_size()
    if world <= 1:
        return Dist(), pick_device(device_name)
    missing = [k for k in ENV if k not in os.environ]
    if missing:
        raise ParamsError(f"WORLD_SIZE is {world} but {', '.join(missing)} is not set",
                          "start distributed training with torchrun (it sets them), or unset WORLD_SIZE")
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    base = pick_device(device_name)
    import torch.distributed as td
    if base.type == "cuda":
        if local >= torch.cuda.device_count():
            raise ParamsError(f"LOCAL_RANK {local} but this node has {torch.cuda.device_count()} GPU(s)",
                              "start at most one process per GPU (torchrun --nproc_per_node)")
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if not td.is_initialized():
        td.init_process_group(backend=backend)
    return Dist(world=world, rank=rank, local_rank=local), device


def teardown(dist: Dist, clean: bool = True) -> None:
    """Leave the process group: after a barrier when every rank got here (`clean`), at once after an
    error or an interrupt. There the other ranks may be inside another collective or gone, so a barrier
    would wait for them until gloo's / NCCL's timeout (Ctrl-C on torchrun hung 30 s, then torchrun
    killed the workers); destroying the group lets a rank still waiting on this one fail and exit."""
    if dist.active:
        import torch.distributed as td
        if td.is_initialized():
            if clean:
                td.barrier()
            td.destroy_process_group()
