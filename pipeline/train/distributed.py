"""Training on several processes through torch's own engine: torchrun + DistributedDataParallel.

    torchrun --nproc_per_node 4 -m pipeline.cli train diginetica --model sasrec --encoding lpe
    torchrun --nnodes 2 --rdzv_backend c10d --rdzv_endpoint HOST:29400 --rdzv_id JOB \\
             --nproc_per_node 4 -m pipeline.cli train ...           (multi-node: the same command on each node;
                                                                      c10d picks the node ranks)

torchrun sets WORLD_SIZE / RANK / LOCAL_RANK; `setup` then joins the process group (NCCL on CUDA,
gloo on CPU) and gives each rank its device (cuda:LOCAL_RANK). In one process every function here
is a no-op, so the single-process path is the same code.

Training: every rank draws the SAME seeded batch order (one generator, seeded alike) and takes
every W-th batch of it (rank r: batches r, r + W, ...), so the epoch's batches are sharded without
overlap; the last < W batches of an epoch, which not every rank could take, are skipped that epoch
(the shuffle changes which). Gradients are averaged by DDP (the model's loss runs inside the DDP
wrapper's forward, `LossModule`), so a step sees W x batch_size samples. Dropout draws differ per
rank (torch's global RNG is seeded with seed + rank).

Evaluation: every rank first takes rank 0's buffers (`sync_buffers`: BatchNorm's running statistics,
which each rank's last training forward updated from its own batch; DIN's Dice), so every rank
scores with the weights rank 0 saves. Next-item: each rank scores rows r, r + W, ... of the split and
the integer (greater, ties) counts are gathered into file order. CTR: each rank scores whole
evaluation batches r, r + W, ... of the one-process batching (`rows(n, block=batch_size)`), since a
trimmed batch's logits depend in their last bits on which rows share it, and the logits are gathered
into file order. Every rank thus computes the metrics from exactly the arrays one process would
have: the same bits (tested with 2 gloo processes, SASRec and DIN). Only rank 0 writes run folders, checkpoints, curves and resume files; the others
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

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import Iterable, Iterator

from ..errors import ParamsError, TrainingError

ENV = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")     # torchrun sets them all


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

    def rows(self, n: int, block: int = 1):
        """This rank's rows of a split of n rows as a LongTensor, or None for all: those of blocks r, r + W, ...
        of `block` rows each (block 1: rows r, r + W, ...; CTR scoring passes its batch size)."""
        if not self.active:
            return None
        import torch
        index = torch.arange(n)
        return index[(index // block) % self.world == self.rank]

    def gather_rows(self, values, n: int, block: int = 1):
        """Put every rank's per-row `values` (its `rows(n, block)`, in order) back into one (n, ...) tensor
        in file order, on every rank (exact: values are moved, never summed)."""
        if not self.active:
            return values
        import torch
        import torch.distributed as td
        owner = (torch.arange(n, device=values.device) // block) % self.world       # (n,) the rank of each row
        counts = torch.bincount(owner, minlength=self.world).tolist()                # (W,) rows of each share
        pad = torch.zeros((max(counts), *values.shape[1:]), dtype=values.dtype, device=values.device)
        pad[: values.shape[0]] = values
        parts = [torch.empty_like(pad) for _ in range(self.world)]
        td.all_gather(parts, pad)
        out = torch.empty((n, *values.shape[1:]), dtype=values.dtype, device=values.device)
        for r, (part, count) in enumerate(zip(parts, counts)):
            out[owner == r] = part[:count]
        return out

    def sync_buffers(self, module) -> None:
        """Rank 0's buffers on every rank. DDP broadcasts them only at the start of each training forward, and
        that forward then updates every rank's BatchNorm running statistics from its own batch: after an epoch
        rank 1 scored its share of valid / test with other statistics than the model rank 0 saves (DIN's Dice:
        test AUC 0.49736 against 0.49822 for the saved checkpoint, walk 37b D1)."""
        if not self.active:
            return
        import torch
        import torch.distributed as td
        with torch.no_grad():
            for buffer in module.buffers():
                td.broadcast(buffer, src=0)

    def total(self, *values: float) -> tuple:
        """Every rank's numbers summed, in rank order (the same float on every rank); `values` in one process."""
        if not self.active:
            return values
        return tuple(sum(column) for column in zip(*self.gather_objects(values)))

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


def peer_lost(e: BaseException) -> bool:
    """`e` is a collective that failed because another process of the job is gone (killed, out of memory, a lost
    node): gloo's "Connection reset / closed by peer", NCCL's errors, a timeout (torch's DistBackendError or the
    RuntimeError it raises)."""
    import torch.distributed as td
    backend = getattr(td, "DistBackendError", None)
    if backend is not None and isinstance(e, backend):
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and any(s in text for s in (     # not any gloo error: its own assertions
        "Connection reset by peer", "Connection closed by peer", "Broken pipe", "NCCL error", "Socket Timeout",
        "Timed out waiting"))                                          # (a size mismatch) are no lost peer (41a #9)


def first_line(e: BaseException) -> str:
    """The gist of a backend error: its first line without gloo's source location."""
    import re
    line = (str(e).strip().splitlines() or [type(e).__name__])[0]
    line = re.sub(r"^\[[^\]]*\]\s*", "", line)
    return line.split(". ", 1)[0].rstrip(".")[:160]       # gloo goes on: "This is typically caused by ..."


JOINED = False       # this process joined a process group: its rank 0 then says what an interrupt left (cli)


def check_env() -> tuple[int, int, int]:
    """(WORLD_SIZE, RANK, LOCAL_RANK) of torchrun's environment, (1, 0, 0) without one; variables set by hand that
    torchrun would never set are one line each (`train --check` says so too, walk 38a D2): a missing one, a rank
    that is no number (int()'s traceback) or not below WORLD_SIZE (it waited 30 minutes for a master), a
    MASTER_PORT that is no port (torch's traceback)."""
    world = world_size()
    if world <= 1:
        return 1, 0, 0
    fix = "start distributed training with torchrun (it sets them), or unset WORLD_SIZE"
    missing = [k for k in ENV if k not in os.environ]
    if missing:
        raise ParamsError(f"WORLD_SIZE is {world} but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
                          "not set", fix)
    values = {}
    for key, top in (("RANK", world - 1), ("LOCAL_RANK", world - 1), ("MASTER_PORT", 65535)):
        text = os.environ[key]
        low = 1 if key == "MASTER_PORT" else 0
        if not (text.strip().isdigit() and low <= int(text) <= top):
            raise ParamsError(f"{key} is {text!r}, not a whole number in {low}..{top}"
                              + (f" (WORLD_SIZE is {world})" if key != "MASTER_PORT" else ""), fix)
        values[key] = int(text)
    return world, values["RANK"], values["LOCAL_RANK"]


def setup(device_name: str):
    """(Dist, torch.device): join torchrun's process group when WORLD_SIZE > 1."""
    import torch
    from .setup import pick_device
    world, rank, local = check_env()
    if world <= 1:
        return Dist(), pick_device(device_name)
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
        with _interruptible(f"the other processes of the job (rank 0 at {os.environ['MASTER_ADDR']}:"
                            f"{os.environ['MASTER_PORT']})"):
            td.init_process_group(backend=backend)
    global JOINED
    JOINED = True
    return Dist(world=world, rank=rank, local_rank=local), device


@contextlib.contextmanager
def _interruptible(what: str):
    """Let Ctrl-C / SIGTERM end a wait inside init_process_group. It waits in C++ for rank 0's store (a node
    whose other node never started: up to the 30-minute timeout) and never returns to Python, so seqpe's
    handler could not run: SIGTERM and a second kill were ignored, only SIGKILL ended it (walk 37b D5).
    Python's C-level handler still writes each signal's number to the wakeup fd; a thread reading it says
    one line and leaves at once (128 + the signal, as after any interrupt). Nothing is written before this
    point, so there is nothing to keep. Without a Python handler (SIG_DFL) the signal kills the process as
    it did."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    try:
        previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except ValueError:
        os.close(read), os.close(write)
        yield
        return

    def watch() -> None:
        while (data := os.read(read, 1)) and data[0] not in (signal.SIGINT, signal.SIGTERM):
            pass                                                          # another handled signal: not ours
        if not data:                                                      # the wait ended: the pipe was closed
            return
        name = "terminated (SIGTERM)" if data[0] == signal.SIGTERM else "interrupted"
        said = next((getattr(m, "_another_said", None) for m in (sys.modules.get(f"{__package__.rsplit('.', 1)[0]}"
                                                                             ".cli"), sys.modules.get("__main__"))
                     if hasattr(m, "_another_said")), None)                # the command's (`python -m pipeline.cli`:
        if said is None or not said():                                     # __main__): silent when torchrun stops
            os.write(2, f"{name}: while waiting for {what} to join; nothing was written\n".encode())  # it after
        os._exit(128 + data[0])                                            # another's error (walk 41a #9)

    watcher = threading.Thread(target=watch, name="seqpe-init-signals", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        os.close(write)
        watcher.join()
        os.close(read)


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
