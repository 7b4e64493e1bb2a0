"""Training throughput and full-ranking evaluation time at Diginetica scale (not a test).

    .venv/bin/python bench/bench_train.py --samples data/samples/diginetica_srgnn \
        --model sasrec --encoding lpe --batches 200 --threads 2

Without --samples it generates random samples of Diginetica's shape (719,470 train,
60,858 test, 43,097 items, SR-GNN prefix lengths) in a temporary folder. It measures,
with the code the train stage runs (pipeline.train.loss_fn / score, pipeline.batches):

  load      reading the train and test shards into padded matrices (s, peak RSS)
  train     `--batches` optimiser steps on shuffled train batches after 5 warm-up steps (samples/s)
  evaluate  full ranking of `--eval-samples` test samples (all of them by default) over all items,
            batch by batch (s, samples/s) and the peak RSS *during* evaluation (VmHWM reset via
            /proc/self/clear_refs), next to the size a (samples x items) float32 matrix would take.

Prints a Markdown row block to paste into bench/results/train.md. After the timing, `--profile N`
runs torch.profiler over N steps (GPU kernel time on a GPU) and `--ops N` counts what the host does
per step over N steps: aten operators per phase and the reads of a value that wait for a GPU.
"""
from __future__ import annotations

import argparse
import itertools
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

DIGINETICA = {"train": 719_470, "test": 60_858, "n_items": 43_097}


def rss_mb(field: str = "VmHWM") -> float:
    """Current peak (VmHWM) or current (VmRSS) resident memory of this process in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_name() -> str:
    """The processor's model name (/proc/cpuinfo), else what platform knows."""
    try:
        return next(l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                    if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def generate(root: Path, seed: int = 0) -> Path:
    """Random samples with Diginetica's counts: prefixes of 1..~70 items, popularity long tail."""
    from pipeline.io import write_json, write_split
    rng = np.random.default_rng(seed)
    n = DIGINETICA["n_items"]
    for split in ("train", "valid", "test"):
        rows = DIGINETICA["train" if split != "test" else "test"] // (10 if split == "valid" else 1)
        lengths = np.minimum(rng.geometric(0.3, rows), 69).astype(np.int64)        # mean ~3.3, like SR-GNN prefixes
        items = (rng.zipf(1.3, lengths.sum() + rows) % n + 1).astype(np.int32)     # long tail over 1..n
        total = int(lengths.sum())
        prefix = (pl.DataFrame({"row": np.repeat(np.arange(rows), lengths), "prefix": items[:total]})
                  .group_by("row", maintain_order=True).agg("prefix"))            # every length >= 1
        df = prefix.with_columns(session_id=pl.col("row").cast(pl.Int64), target=pl.Series(items[total:]))
        write_split(root, split, df.select("session_id", "prefix", "target"))
    write_json(root / "manifest.json", {"stage": "augment", "dataset": "generated", "protocol": "srgnn",
                                        "n_items": n, "augment": {}, "shards": []})
    return root


def profile(it, train_step, steps: int, device) -> None:
    """torch.profiler over `steps` training steps (the first of a new epoch from `it()`): wall time per step, the host's time per step
    (the CPU side of every op) and the GPU's busy time per step (the sum of kernel times), then the top
    operators by self time on the device that bounds the step."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile as torch_profile
    cuda = device.type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    batches = list(itertools.islice(it(), steps))                # a fresh epoch's first batches
    with torch_profile(activities=acts) as prof:
        t0 = time.perf_counter()
        for seqs, targets in batches:
            train_step(seqs, targets)
        if cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    events = prof.key_averages()
    # kernels only: an op's row carries its kernels' time too, so summing every row would count it twice
    gpu = sum(e.self_device_time_total for e in events if e.device_type == DeviceType.CUDA) / 1e3  # ms, all steps
    print(f"\nprofile ({steps} steps): wall {1e3 * wall / steps:.2f} ms/step, GPU busy (kernel time) "
          f"{gpu / steps:.2f} ms/step ({100 * gpu / 1e3 / wall:.0f}% of wall)")
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    print(events.table(sort_by=sort, row_limit=15, max_name_column_width=60))
    if cuda:
        print(events.table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=60))


def count_ops(it, train_step_phases, steps: int, graph: bool, static: bool = False, max_len: int = 0) -> None:
    """The host's share of a step, counted without timing it: the aten operators each phase dispatches
    (forward with the loss, backward, the optimiser; a view is counted like a kernel) and the points
    where the host reads a tensor's value (`_local_scalar_dense`: `.item()`, `bool()`, `int()`),
    which on a GPU wait for every queued kernel. On a GPU each non-view op costs the host about as
    much as its launch, so at small batches these counts, not the arithmetic, set the step's time.
    For graph models (`graph`), also the node slots n of each batch's session graph and the hops the
    breadth-first search needs before its frontier is empty (models/graph.hop_distances), or with `static`
    the min-plus doublings the static search runs for `max_len` (models/graph.hop_distances_doubling). With `static`
    (train.compile: reduce-overhead's batches and graphs), also how many distinct batch shapes one epoch
    serves: the CUDA graphs that mode records."""
    import collections
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    phases = {"forward": collections.Counter(), "backward": collections.Counter(), "optimiser": collections.Counter()}
    batches = list(itertools.islice(it(), steps))
    for seqs, targets in batches:
        for phase, run in zip(phases, train_step_phases(seqs, targets)):
            with Count() as c:
                run()
            phases[phase].update(c.ops)
    print(f"\nops per step ({len(batches)} steps): "
          + ", ".join(f"{k} {sum(c.values()) / len(batches):.1f}" for k, c in phases.items())
          + f"; host reads of a value (_local_scalar_dense) "
          + ", ".join(f"{k} {c['_local_scalar_dense'] / len(batches):.1f}" for k, c in phases.items()))
    every = sum(phases.values(), collections.Counter())
    print("top ops per step: " + ", ".join(f"{k} {v / len(batches):.1f}" for k, v in every.most_common(15)))
    if graph and not static:            # models/graph's own search, its boolean products counted
        from models.graph import build_graph, hop_distances
        ns, hops = [], []
        for seqs, _ in batches:
            g = build_graph(seqs.cpu())
            with Count() as c:
                hop_distances(g.adj, g.mask, early_exit=True)
            ns.append(g.items.shape[1])
            hops.append(c.ops["bmm"])
        print(f"session graphs: node slots n mean {sum(ns) / len(ns):.2f} (max {max(ns)}); boolean products the hop search runs: "
              f"{sum(n - 1 for n in ns) / len(ns):.2f} without the early exit (the GPU path), "
              f"{sum(hops) / len(hops):.2f} with it (the CPU path)")
    elif graph:                         # the static step's search: a fixed count of min-plus doublings
        from models.graph import doublings_for
        ns = [seqs.shape[1] for seqs, _ in batches]
        print(f"session graphs (static): node slots n mean {sum(ns) / len(ns):.2f} (max {max(ns)}) = the widths; "
              f"the hop search runs {doublings_for(max_len)} min-plus doublings, whatever the width (max_len {max_len})")
    if static:
        shapes = collections.Counter(tuple(seqs.shape) for seqs, _ in it())
        print(f"batch shapes in one epoch: {len(shapes)} distinct (the CUDA graphs train.compile: reduce-overhead "
              f"records), widths {sorted({w for _, w in shapes})}")


def compile_counts() -> dict:
    """torch._dynamo's counters so far: graphs compiled, graph breaks and their reasons (most frequent first)."""
    from torch._dynamo.utils import counters
    return {"graphs": counters["stats"]["unique_graphs"], "breaks": sum(counters["graph_break"].values()),
            "reasons": counters["graph_break"].most_common(8)}


def explain(fn, *inputs) -> None:
    """torch._dynamo.explain of `fn(*inputs)`: how many graphs the step traces as and why it breaks."""
    import torch._dynamo as dynamo
    from torch._dynamo.utils import counters
    ex = dynamo.explain(fn)(*inputs)
    print(f"explain (first batch {tuple(inputs[0].shape)}): {ex.graph_count} graphs, {ex.graph_break_count} breaks")
    for r in ex.break_reasons:
        where = [f"{Path(f.filename).name}:{f.lineno}" for f in (r.user_stack or [])][-4:]
        print(f"  break: {r.reason.splitlines()[0][:300]} at {' > '.join(where)}")
    dynamo.reset()
    counters.clear()                    # the compiled step's counts start from here (reset() keeps them)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=Path, help="samples folder (default: generate random ones)")
    ap.add_argument("--model", default="sasrec")
    ap.add_argument("--encoding", default="lpe")
    ap.add_argument("--batches", type=int, default=200, help="timed training batches")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--max-len", type=int, default=50)
    ap.add_argument("--dropout", type=float, default=0.2, help="train.dropout (PosRec's paper preset: 0)")
    ap.add_argument("--loss", default="ce", choices=["ce", "sampled"])
    ap.add_argument("--eval-samples", type=int, default=0, help="test samples ranked (0 = all)")
    ap.add_argument("--eval-batch", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--no-trim", action="store_true", help="keep all max_len columns (train.trim_padding: false)")
    ap.add_argument("--bucket", type=int, default=50, help="train.bucket (0 = plain shuffle)")
    ap.add_argument("--adam", default="trainer", choices=["trainer", "loop"],
                    help="the trainer's Adam (fused where possible) or torch's single-tensor loop (before session 8)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"], help="train.precision")
    ap.add_argument("--ce-impl", default="auto", help="train.ce_impl (plain, chunked, cce, liger, auto)")
    ap.add_argument("--profile", type=int, default=0,
                    help="after the timing, torch.profiler over this many steps (CUDA kernels too on a GPU): "
                         "wall, host and GPU-busy time per step and the top operators")
    ap.add_argument("--ops", type=int, default=0,
                    help="after the timing, count the aten ops and host reads of a value per step over this many "
                         "steps (forward, backward, optimiser; the host's share of a small-batch GPU step)")
    ap.add_argument("--static", action="store_true",
                    help="the batches and session graphs of train.compile: reduce-overhead (widths rounded up to "
                         "multiples of 8, at most max_len; L node slots; no host reads), run eagerly: the extra "
                         "work its capture costs")
    ap.add_argument("--compile", default="none", choices=["none", "true", "reduce-overhead"],
                    help="train.compile: the loss (forward and backward) through torch.compile, dynamic shapes as "
                         "the trainer does (--dynamic); reduce-overhead replays captured CUDA graphs (implies --static)")
    ap.add_argument("--dynamic", default="true", choices=["true", "false", "auto"],
                    help="torch.compile's dynamic= (true: the trainer's; false: one compile per batch shape)")
    ap.add_argument("--warm", type=int, default=5,
                    help="untimed steps first (with --compile, enough to have met every batch shape)")
    ap.add_argument("--explain", action="store_true",
                    help="print torch._dynamo.explain of the first batch's loss (graphs, breaks and their reasons) "
                         "and, with --compile, the compiler's counters after the timing")
    ap.add_argument("--chunk", type=int, default=0,
                    help="chunked loss: items per block (0 = the trainer's rule, models.losses.default_chunk)")
    args = ap.parse_args()

    import torch
    from models import build_model
    from pipeline import train as stage
    from pipeline.batches import Samples, batches, load_samples
    from pipeline.io import read_json
    from pipeline.params import TrainParams
    from pipeline.train.loop import make_optimizer
    from pipeline.train.tasks import GRAPH_WIDTHS
    from pipeline.train.setup import autocast, matmul_precision
    if args.chunk:
        import models.losses
        models.losses.default_chunk = lambda device, rows=1: args.chunk  # a fixed size, for comparison

    torch.set_num_threads(args.threads)
    tmp = None
    if args.samples is None:
        tmp = tempfile.TemporaryDirectory(prefix="seqpe-bench-")
        t0 = time.perf_counter()
        root = generate(Path(tmp.name) / "samples")
        print(f"generated random Diginetica-shaped samples in {time.perf_counter() - t0:.1f}s")
    else:
        root = args.samples
    manifest = read_json(root / "manifest.json")
    n_items = int(manifest["n_items"])
    tp = TrainParams(model=args.model, encoding=args.encoding, batch_size=args.batch_size, dim=args.dim,
                     layers=args.layers, heads=args.heads, max_len=args.max_len, dropout=args.dropout, loss=args.loss,
                     device=args.device, precision=args.precision, ce_impl=args.ce_impl)
    device = stage.pick_device(args.device)

    t0 = time.perf_counter()
    train = load_samples(root, "train", tp.max_len)
    test = load_samples(root, "test", tp.max_len)
    load_s = time.perf_counter() - t0
    rss_after_load = rss_mb("VmRSS")

    torch.manual_seed(1)
    encoding = stage.build_encoding(tp.encoding, tp, {})
    net = build_model(tp.model, n_items=n_items, max_len=tp.max_len, train=tp, options={}, encoding=encoding).to(device)
    if args.precision == "tf32" and device.type != "cuda":
        sys.exit("bench_train.py: --precision tf32 needs a CUDA device (the trainer refuses it elsewhere)")
    if args.compile == "reduce-overhead":
        if device.type != "cuda":
            sys.exit("bench_train.py: --compile reduce-overhead needs a CUDA device")
        args.static = True
    net.static_shapes = args.static
    opt = make_optimizer(net, tp) if args.adam == "trainer" else torch.optim.Adam(net.parameters(), lr=tp.lr)
    gen = torch.Generator().manual_seed(1)
    net.train()
    def epoch():                        # the trainer's shuffled, bucketed, trimmed batch order
        return batches(train, tp.batch_size, shuffle=True, generator=gen, device=device, trim=not args.no_trim,
                       bucket=0 if args.no_trim else args.bucket, pad_to=GRAPH_WIDTHS if args.static else 1)
    it = epoch()
    class Loss(torch.nn.Module):        # the trainer compiles its loss module (pipeline/train/loop.py)
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, seqs, targets):
            return stage.loss_fn(self.net, seqs, targets, tp, n_items, gen)
    loss_of = Loss()
    graphs = args.compile == "reduce-overhead"
    if args.compile != "none":
        loss_of = torch.compile(loss_of, dynamic={"true": True, "false": False, "auto": None}[args.dynamic],
                                **({"mode": "reduce-overhead"} if graphs else {}))

    def train_step(seqs, targets):
        opt.zero_grad(set_to_none=True)
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with matmul_precision(tp, device):          # tf32: forward and backward, as the trainer's epoch
            with autocast(tp, device):
                loss = loss_of(seqs, targets)
            loss.backward()
        opt.step()

    if args.explain:
        explain(lambda s, t: stage.loss_fn(net, s, t, tp, n_items, gen), *next(iter(epoch())))

    warm = args.warm

    def steps():                        # epoch after epoch until warm + --batches steps have run (walk 42a #3: one
        first = True                    # epoch of 159 batches at 4,096 was timed as if 300 had run, 1.95x the rate)
        while True:
            n = 0
            for n, batch in enumerate(it if first else epoch(), start=1):
                yield batch
            first = False
            if n == 0:
                sys.exit("bench_train.py: the samples give no training batch")

    t0, timed = None, 0                 # timed: the samples of the timed steps (an epoch's last batch is smaller)
    for i, (seqs, targets) in enumerate(steps()):
        if i == warm:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0, c0 = time.perf_counter(), time.process_time()
            compiled_before = compile_counts()
        if i == warm + args.batches:
            break
        train_step(seqs, targets)
        timed += len(targets) if i >= warm else 0
    if device.type == "cuda":
        torch.cuda.synchronize()
    train_s, train_cpu = time.perf_counter() - t0, time.process_time() - c0
    if args.compile != "none":
        after = compile_counts()
        print(f"compiler: {after['graphs']} graphs, {after['breaks']} graph breaks in all; during the timed steps "
              f"{after['graphs'] - compiled_before['graphs']} graphs compiled (0: the timing is of compiled steps)")
        if args.explain:
            for reason, n in after["reasons"]:
                print(f"  graph break x{n}: {reason.splitlines()[0][:300]}")
    if args.profile:
        profile(epoch, train_step, args.profile, device)
    if args.ops:
        def phases(seqs, targets):
            box = {}

            def forward():
                opt.zero_grad(set_to_none=True)
                with autocast(tp, device):
                    box["loss"] = stage.loss_fn(net, seqs, targets, tp, n_items, gen)
            return forward, lambda: box["loss"].backward(), opt.step
        count_ops(epoch, phases, args.ops, graph=tp.model == "posrec", static=args.static, max_len=tp.max_len)
    train_sps = timed / train_s
    epoch_min = len(train) / train_sps / 60

    n_eval = len(test) if args.eval_samples <= 0 else min(args.eval_samples, len(test))
    test = Samples(test.seqs[:n_eval], test.targets[:n_eval], test.lengths[:n_eval])
    rss_before_eval = rss_mb("VmRSS")
    can_reset = reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    metrics = stage.score(net, test, "test", [5, 10, 20], args.eval_batch, device, trim=not args.no_trim)
    eval_s, eval_cpu = time.perf_counter() - t0, time.process_time() - c0
    eval_peak = rss_mb("VmHWM") if can_reset else float("nan")
    full_matrix_gb = n_eval * (n_items + 1) * 4 / 1e9
    params_m = sum(p.numel() for p in net.parameters()) / 1e6

    print(f"\nmachine: {cpu_name()}, {os.cpu_count()} cores visible, torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}, device {device}")
    print(f"data: {root} ({manifest.get('dataset')}), train {len(train):,}, test {len(test):,} ranked, "
          f"n_items {n_items:,}")
    print(f"model: {tp.model}-{tp.encoding} dim {tp.dim} layers {tp.layers} heads {tp.heads} max_len {tp.max_len} "
          f"batch {tp.batch_size} loss {tp.loss} precision {tp.precision} ce_impl {tp.ce_impl} trim_padding {not args.no_trim} bucket {args.bucket}, "
          f"adam {args.adam}, chunk {args.chunk or 'rule'}, "
          f"{params_m:.2f}M parameters")
    print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("\n| model | load s | train samples/s (wall) | train samples per CPU-s | est. epoch min (wall) | "
          "eval s (wall) | eval samples/s (wall) | eval samples per CPU-s | RSS after load MB | "
          "RSS before eval MB | peak RSS during eval MB | (S x N) float32 GB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {tp.model}-{tp.encoding} | {load_s:.2f} | {train_sps:,.0f} | "
          f"{timed / train_cpu:,.0f} | {epoch_min:.1f} | {eval_s:.1f} | "
          f"{n_eval / eval_s:,.0f} | {n_eval / eval_cpu:,.0f} | {rss_after_load:,.0f} | {rss_before_eval:,.0f} | "
          f"{eval_peak:,.0f} | {full_matrix_gb:.1f} |")
    print(f"\ntimed: {args.batches} steps, {timed:,} samples (after {warm} warm-up steps; epochs repeat as needed)")
    print(f"HR@10 {100 * metrics['hr@10']:.2f}, MRR@10 {100 * metrics['mrr@10']:.2f} after "
          f"{args.batches + warm} batches (a throughput run, not a trained model)")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
