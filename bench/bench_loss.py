"""The loss implementations of models/losses.py in a SASRec training step on Beauty (not a test).

    .venv/bin/python bench/bench_loss.py --beauty DATA/amazon-s3rec/Beauty.txt

One SASRec (paper settings: dim 50, 2 blocks, 1 head, dropout 0.5, `lrpe`, max_len 50, Adam 1e-3)
trained with the sequence objective on batches of 128 Beauty users (train part = all but the
last two items, the most recent 50 inputs, each position predicting its next item: pipeline/REFERENCE.md
§3), 12,101 items. `--batches` says which batches:

  trainer   (default) the batches `seqpe train` serves: every user once, the epoch's seeded permutation
            length-bucketed (`train.bucket`, default 50) and each batch trimmed to its longest user
            (`train.trim_padding`), via pipeline.batches.batch_order; the first `--steps` + 2 of the
            shuffled batch order, a random sample of one epoch's batches
  random    128 users drawn at random, no bucketing and no trimming (every batch 50 wide, 89% padding)
  full      random ids filling all 50 positions (T = 6,400 predictions per batch)

Every implementation starts from the same weights and sees the same batches;
the implementations alternate inside each of `--repeats` rounds, so a load change on the machine
hits them alike. Printed (Markdown, for bench/results/train.md):

  step      wall and CPU ms per optimiser step (median of `--steps` after 2 warm-up steps; with
            `--batches trainer` the mean, since bucketed batches differ in size and the mean is what
            an epoch costs) per round, and each implementation's step time relative to plain's in the
            same round
  memory    peak resident memory the loss forward + backward adds, in a child process started with
            MALLOC_MMAP_THRESHOLD_=65536 (glibc then gives every tensor over 64 KiB its own mapping,
            returned to the system when freed, so RSS follows the live tensors; VmHWM reset via
            /proc/self/clear_refs before the loss), next to the largest tensor each path allocates
            (computed: (T, N-1) float32 logits for plain, one (T, chunk) block for chunked). The
            timings run with glibc's default allocator, as training does.
  chunks    the loss alone (forward + backward, fixed h and table) for each `--chunks` size
  profile   torch.profiler's top operators of `--profile-steps` chunked steps
  attention the SASRec hidden states' forward + backward (train mode) with the fused SDPA attention
            and with the explicit one (models.attention.SDPA), alternating, `--repeats` rounds
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.bench_train import reset_peak, rss_mb  # noqa: E402
from models.encodings import build_encoding  # noqa: E402
from models.losses import default_chunk, linear_cross_entropy, sampled_bce  # noqa: E402
from models import attention  # noqa: E402
from models.sasrec import SASRec  # noqa: E402

def read_beauty(path: Path, max_len: int) -> list[list[int]]:
    """Per user the train part (all but the last two items), its most recent max_len + 1 items."""
    users = []
    for line in path.read_text().splitlines():
        items = [int(x) for x in line.split()[1:]][:-2]
        if len(items) >= 2:
            users.append(items[-(max_len + 1):])
    return users


def trainer_batches(users, n: int, batch: int, max_len: int, bucket: int, seed: int):
    """The first n batches of one epoch as the trainer serves them: (seqs (B, L'), targets (B, L'))."""
    import numpy as np
    from pipeline.batches import batch_order
    seqs = torch.zeros(len(users), max_len, dtype=torch.long)           # (S, L) left-padded
    targets = torch.zeros(len(users), max_len, dtype=torch.long)        # (S, L) 0 = no prediction
    lengths = np.zeros(len(users), dtype=np.int64)                      # (S,)
    for row, u in enumerate(users):
        k = len(u) - 1
        seqs[row, max_len - k:], targets[row, max_len - k:] = torch.tensor(u[:-1]), torch.tensor(u[1:])
        lengths[row] = k
    order = batch_order(lengths, batch, shuffle=True, generator=torch.Generator().manual_seed(seed), bucket=bucket)
    out = []
    for idx in order[:n]:
        width = int(lengths[idx.numpy()].max())                          # trim: the batch's longest user
        out.append((seqs[idx, max_len - width:], targets[idx, max_len - width:]))
    return out


def make_batches(users, n: int, batch: int, max_len: int, n_items: int, full: bool, seed: int):
    """n (seqs (B, L), targets (B, L)) pairs, left-padded, 0 where no prediction; `full`: random ids
    filling all L positions (T = B * L predictions) instead of real users."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        if full:
            ids = torch.randint(1, n_items + 1, (batch, max_len + 1), generator=g)
            out.append((ids[:, :-1].contiguous(), ids[:, 1:].contiguous()))
            continue
        seqs, targets = torch.zeros(batch, max_len, dtype=torch.long), torch.zeros(batch, max_len, dtype=torch.long)
        for row, u in enumerate(torch.randint(len(users), (batch,), generator=g).tolist()):
            s = torch.tensor(users[u])
            k = len(s) - 1
            seqs[row, max_len - k:], targets[row, max_len - k:] = s[:-1], s[1:]
        out.append((seqs, targets))
    return out


def step(net, opt, seqs, targets, impl: str, gen, chunk=None) -> float:
    opt.zero_grad(set_to_none=True)
    h = net.hidden(seqs)                                                 # (B, L, D)
    if impl == "bce":
        loss = sampled_bce(h, net.item_weights(), targets, gen)
    else:
        where = targets != 0                                             # (B, L)
        loss = linear_cross_entropy(h[where], net.item_weights(), targets[where], impl, chunk=chunk)
    loss.backward()
    opt.step()
    return float(loss.detach())


def loss_peak_mb(net, seqs, targets, impl: str, chunk=None) -> tuple[float, int]:
    """Extra peak RSS (MB) of the loss forward + backward alone, and T."""
    with torch.no_grad():
        h = net.hidden(seqs)[targets != 0]                               # (T, D)
    h.requires_grad_()
    w = net.item_weights().detach().clone().requires_grad_()             # (N, D)
    t = targets[targets != 0]
    before = rss_mb("VmRSS")
    reset_peak()
    linear_cross_entropy(h, w, t, impl, chunk=chunk).backward()
    return rss_mb("VmHWM") - before, len(t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--beauty", type=Path, required=True,
                    help="S3-Rec's Beauty.txt (where to get it: pipeline/REFERENCE.md §8)")
    ap.add_argument("--dim", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--max-len", type=int, default=50)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per implementation and round")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--impls", default="plain,chunked,bce", help="plain, chunked, bce (SASRec's sampled BCE)")
    ap.add_argument("--chunk", type=int, default=None,
                    help="chunked's items per block (default: the trainer's rule, default_chunk of each batch's T)")
    ap.add_argument("--chunks", default="64,128,256,512,1024,4096", help="sizes for the loss-only sweep ('' = none)")
    ap.add_argument("--profile-steps", type=int, default=5)
    ap.add_argument("--batches", choices=("trainer", "random", "full"), default="trainer",
                    help="the trainer's bucketed, trimmed batches; random users untrimmed; all positions real")
    ap.add_argument("--bucket", type=int, default=50, help="train.bucket for --batches trainer")
    ap.add_argument("--full", action="store_true", help="the same as --batches full")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)   # the child process
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    impls = args.impls.split(",")
    chunk = args.chunk or None                       # None: the trainer's rule, default_chunk(cpu, T) per batch

    users = read_beauty(args.beauty, args.max_len)
    n_items = max(max(u) for u in users)
    if args.full:
        args.batches = "full"
    if args.batches == "trainer":
        data = trainer_batches(users, args.steps + 2, args.batch_size, args.max_len, args.bucket, seed=0)
    else:
        data = make_batches(users, args.steps + 2, args.batch_size, args.max_len, n_items, args.batches == "full", 0)
    T_mean = statistics.mean(int((t != 0).sum()) for _, t in data)
    # the batch the loss-only measurements use: the one whose T is nearest the mean
    typical = min(data, key=lambda b: abs(int((b[1] != 0).sum()) - T_mean))
    summary = statistics.mean if args.batches == "trainer" else statistics.median
    torch.manual_seed(0)
    enc = build_encoding("lrpe", dim=args.dim, max_len=args.max_len, heads=1, layers=2)
    base = SASRec(n_items, args.max_len, dim=args.dim, heads=1, layers=2, dropout=0.5, encoding=enc)
    if args.memory_only:
        net = base.eval()
        seqs, targets = typical
        for impl in ("plain", "chunked"):
            peaks = [loss_peak_mb(net, seqs, targets, impl, chunk) for _ in range(3)]
            T = peaks[0][1]
            largest = T * (n_items if impl == "plain" else chunk or default_chunk(torch.device("cpu"), T)) * 4 / 2 ** 20
            print(f"| {impl} (T = {T:,}) | {', '.join(f'{p:.1f}' for p, _ in peaks)} | {largest:.1f} |")
        return

    print(f"machine: {os.cpu_count()} cores visible, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"load average at start {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    width = statistics.mean(s.size(1) for s, _ in data)
    print(f"data: {args.beauty.name} {len(users):,} users, {n_items:,} items, {args.batches} batches of {args.batch_size}, "
          f"max_len {args.max_len}, mean width {width:.1f}, mean T = {T_mean:,.0f} predictions per batch; "
          f"SASRec dim {args.dim}, chunk {chunk or 'by T (default_chunk)'}; step time = {summary.__name__} of {args.steps} steps\n")

    rows = {impl: [] for impl in impls}
    for r in range(args.repeats):
        for impl in impls:
            net = copy.deepcopy(base).train()
            opt = torch.optim.Adam(net.parameters(), lr=1e-3)
            gen = torch.Generator().manual_seed(1)
            walls, cpus = [], []
            for i, (seqs, targets) in enumerate(data):
                t0, c0 = time.perf_counter(), time.process_time()
                step(net, opt, seqs, targets, impl, gen, chunk)
                if i >= 2:
                    walls.append(time.perf_counter() - t0)
                    cpus.append(time.process_time() - c0)
            rows[impl].append((1e3 * summary(walls), 1e3 * summary(cpus)))
    print("| round | " + " | ".join(f"{i} wall ms | {i} CPU ms" for i in impls) + " | "
          + " | ".join(f"plain / {i} (wall, CPU)" for i in impls if i != "plain") + " |")
    print("|---" * (1 + 2 * len(impls) + len(impls) - 1) + "|")
    for r in range(args.repeats):
        cells = " | ".join(f"{rows[i][r][0]:.0f} | {rows[i][r][1]:.0f}" for i in impls)
        ratios = " | ".join(f"{rows['plain'][r][0] / rows[i][r][0]:.2f}x, {rows['plain'][r][1] / rows[i][r][1]:.2f}x"
                            for i in impls if i != "plain") if "plain" in rows else ""
        print(f"| {r + 1} | {cells} | {ratios} |")
    if "plain" in rows:
        for i in impls:
            if i != "plain":
                wall = statistics.median(p[0] / q[0] for p, q in zip(rows["plain"], rows[i]))
                cpu = statistics.median(p[1] / q[1] for p, q in zip(rows["plain"], rows[i]))
                print(f"\nplain / {i}, median over the rounds: {wall:.2f}x wall, {cpu:.2f}x CPU", end="")
        print()

    print("\n| loss | extra peak RSS of loss fwd + bwd, MB (3 runs) | largest tensor it allocates, MB |")
    print("|---|---|---|", flush=True)
    child = subprocess.run([sys.executable, *sys.argv, "--memory-only"], capture_output=True, text=True,
                           env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}, check=True)
    print("".join(line + "\n" for line in child.stdout.splitlines() if line.startswith("|")), end="")

    net = copy.deepcopy(base).eval()
    seqs, targets = typical

    sizes = [int(c) for c in args.chunks.split(",") if c]
    if sizes:
        with torch.no_grad():
            h0 = net.hidden(seqs)[targets != 0]                          # (T, D)
        t = targets[targets != 0]
        w0 = net.item_weights().detach()
        times = {c: [] for c in ["plain"] + sizes}
        for _ in range(args.repeats):
            for c in times:
                h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
                c0 = time.process_time()
                for _ in range(3):
                    linear_cross_entropy(h, w, t, "plain" if c == "plain" else "chunked",
                                         chunk=None if c == "plain" else c).backward()
                times[c].append((time.process_time() - c0) / 3 * 1e3)
        print(f"\n| loss alone (fwd + bwd, T = {len(t):,}) | CPU ms, best of {args.repeats} rounds of 3 |")
        print("|---|---|")
        for c, v in times.items():
            print(f"| {'plain' if c == 'plain' else f'chunked, chunk {c}'} | {min(v):.0f} |")

    if args.profile_steps:
        from torch.profiler import ProfilerActivity, profile
        net = copy.deepcopy(base).train()
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        step(net, opt, *data[0], "chunked", None, chunk)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for seqs, targets in data[1:1 + args.profile_steps]:
                step(net, opt, seqs, targets, "chunked", None, chunk)
        print(f"\nchunked step, {args.profile_steps} steps, top operators by self CPU time:\n")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=40))

    net = copy.deepcopy(base).train()
    fwd_bwd = {True: [], False: []}
    for _ in range(args.repeats):
        for fused in (True, False):
            attention.SDPA = fused
            cpus = []
            for seqs, _ in data:
                c0 = time.process_time()
                net.hidden(seqs).sum().backward()
                cpus.append(1e3 * (time.process_time() - c0))
            fwd_bwd[fused].append(statistics.median(cpus))
    attention.SDPA = True
    print("\n| SASRec hidden fwd + bwd (train mode) | CPU ms per batch, median of each round |")
    print("|---|---|")
    for fused, label in ((True, "fused (SDPA)"), (False, "explicit")):
        print(f"| {label} | {', '.join(f'{x:.0f}' for x in fwd_bwd[fused])} |")
    print(f"load average at the end {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
