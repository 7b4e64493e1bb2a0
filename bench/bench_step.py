"""One training step of `seqpe train`, A/B: Adam's implementation x the chunked loss's block size (not a test).

    .venv/bin/python bench/bench_step.py --samples SAMPLES/yoochoose_1_64 --model posrec --encoding ldpe \
        --batch-size 100 --dim 100 --layers 1
    .venv/bin/python bench/bench_step.py --sweep            # the loss alone and Adam alone, no data needed
    .venv/bin/python bench/bench_step.py --samples ... --profile 30   # where a step's time goes, before and now
    .venv/bin/python bench/bench_step.py --samples ... --heap        # glibc's malloc defaults vs heap.keep()

Step mode builds one model per Adam variant (same seed, so the same weights), takes the first
`--batches` batches of the trainer's own shuffled, bucketed, trimmed order, and times them under
each combination, the four alternating inside every round (round 0 is a warm-up):

    adam   loop   torch.optim.Adam's single-tensor loop (the trainer's optimiser before session 8)
           fused  pipeline.train.loop.make_optimizer (torch's fused kernel)
    chunk  128    the chunked loss's fixed block before session 8
           rule   models.losses.default_chunk: about 2^18 logits per block, by the batch's predictions

Sweep mode times the chunked loss alone (forward + backward, best of 3 rounds of 10) over block
sizes at (T, N, D) shapes of the trainer's batches, next to the plain loss, and one Adam step on
a 37,484 x 100 item table (Yoochoose 1/64 at PosRec's paper size) for each torch implementation.
Profile mode (`--profile N`) runs torch.profiler over N steps of the same batches with loop + 128 and
with fused + rule, and prints the inclusive CPU time per step of the loss's forward and backward
and of Adam's step, and the top operators by self time.
Heap mode (`--heap`) times the trainer's step (fused + rule) in fresh processes, one with glibc's
malloc defaults and one after pipeline.train.heap.keep() (freed buffers stay in the heap), the two
alternating for `--rounds` rounds, and counts the minor page faults per step of each.
1 thread throughout (what the reproductions' side-by-side runs use). Results: bench/results/train.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import models.losses as losses  # noqa: E402


def load_average() -> str:
    """The 1, 5 and 15-minute load averages, for the tables' headers (these machines are shared)."""
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def sweep() -> None:
    print("| T (predictions) | N (items + 1) | D | plain ms | " + " | ".join(
        f"chunk {c} ms" for c in (128, 256, 512, 1024, 2048, 4096)) + " | rule picks |")
    print("|---" * 11 + "|")
    for T, N, D in [(100, 37484, 100), (100, 43098, 100), (256, 43098, 64), (665, 12102, 50)]:
        g = torch.Generator().manual_seed(0)
        h = torch.randn(T, D, generator=g).requires_grad_()
        w = (torch.randn(N, D, generator=g) * 0.1).requires_grad_()
        t = torch.randint(1, N, (T,), generator=g)
        cells = []
        for c in (None, 128, 256, 512, 1024, 2048, 4096):
            def f():
                if c is None:
                    return losses.plain_cross_entropy(h, w, t)
                return losses.chunked_cross_entropy(h, w, t, chunk=c)
            for _ in range(3):
                f().backward()
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                for _ in range(10):
                    f().backward()
                best = min(best, (time.perf_counter() - t0) / 10 * 1000)
            cells.append(f"{best:.1f}")
        rule = losses.default_chunk(torch.device("cpu"), T)
        print(f"| {T:,} | {N:,} | {D} | " + " | ".join(cells) + f" | {rule:,} |")

    print("\n| Adam step on a 37,484 x 100 table + 22 small tensors, L2 1e-5 | ms (mean of 50) |")
    print("|---|---|")
    for name, kw in [("single-tensor loop (foreach=False)", {"foreach": False}), ("foreach", {"foreach": True}),
                     ("fused", {"fused": True})]:
        torch.manual_seed(0)
        ps = [torch.nn.Parameter(torch.randn(37484, 100)), torch.nn.Parameter(torch.randn(300, 100)),
              torch.nn.Parameter(torch.randn(100, 100))] + [torch.nn.Parameter(torch.randn(100)) for _ in range(20)]
        opt = torch.optim.Adam(ps, lr=1e-3, weight_decay=1e-5, **kw)
        for p in ps:
            p.grad = torch.randn_like(p)
        for _ in range(5):
            opt.step()
        t0 = time.perf_counter()
        for _ in range(50):
            opt.step()
        print(f"| {name} | {(time.perf_counter() - t0) / 50 * 1000:.1f} |")


def setup(args):
    """The two models (same seed: same weights), one per Adam variant, and the trainer's first batches."""
    from models import build_model
    from pipeline import train as stage
    from pipeline.batches import batches, load_samples
    from pipeline.io import read_json
    from pipeline.params import TrainParams
    from pipeline.train.loop import make_optimizer

    n_items = int(read_json(args.samples / "manifest.json")["n_items"])
    tp = TrainParams(model=args.model, encoding=args.encoding, batch_size=args.batch_size, dim=args.dim,
                     layers=args.layers, heads=1, max_len=args.max_len, dropout=0.2)
    train = load_samples(args.samples, "train", tp.max_len)
    nets = {}
    for adam in ("loop", "fused"):
        torch.manual_seed(1)
        net = build_model(tp.model, n_items=n_items, max_len=tp.max_len, train=tp, options={},
                          encoding=stage.build_encoding(tp.encoding, tp, {}))
        opt = make_optimizer(net, tp) if adam == "fused" else torch.optim.Adam(net.parameters(), lr=tp.lr,
                                                                              foreach=False)
        nets[adam] = (net.train(), opt)
    gen = torch.Generator().manual_seed(1)
    data = [b for _, b in zip(range(args.batches), batches(train, tp.batch_size, shuffle=True, generator=gen,
                                                           device=torch.device("cpu"), trim=True, bucket=50))]

    def run(adam: str, chunk: str, steps) -> None:
        """`steps` training steps under one combination (chunk '128' or 'rule')."""
        rule = losses.default_chunk
        losses.default_chunk = (lambda d, rows=1: 128) if chunk == "128" else rule
        try:
            net, opt = nets[adam]
            for seqs, targets in steps:
                opt.zero_grad(set_to_none=True)
                own = net.training_loss(seqs, targets, gen)              # a backbone's own objective (CARCA)
                (own if own is not None else stage.loss_fn(net, seqs, targets, tp, n_items, gen)).backward()
                opt.step()
        finally:
            losses.default_chunk = rule

    return tp, n_items, data, run


def step_ab(args) -> None:
    tp, n_items, data, run = setup(args)
    T = statistics.mean(int(t.numel()) for _, t in data)
    times: dict = {}
    for rnd in range(args.rounds + 1):
        for adam in ("loop", "fused"):
            for chunk in ("128", "rule"):
                t0 = time.perf_counter()
                run(adam, chunk, data)
                if rnd:
                    times.setdefault((adam, chunk), []).append((time.perf_counter() - t0) / len(data) * 1000)
    print(f"{args.model}-{args.encoding} dim {tp.dim} layers {tp.layers} batch {tp.batch_size} on {args.samples.name} "
          f"(n_items {n_items:,}), {len(data)} batches (mean T = {T:.0f} predictions, rule block "
          f"{losses.default_chunk(torch.device('cpu'), round(T)):,}), {args.rounds} rounds, torch {torch.__version__}, "
          f"1 thread, load average at the end {load_average()}\n")
    print("| Adam | loss block | ms per step (median) | rounds | speed-up over loop + 128 |")
    print("|---|---|---:|---|---:|")
    base = statistics.median(times[("loop", "128")])
    for (adam, chunk), v in times.items():
        m = statistics.median(v)
        print(f"| {adam} | {chunk} | {m:.1f} | {', '.join(f'{x:.0f}' for x in v)} | {base / m:.2f}x |")


def profile_steps(args) -> None:
    from torch.profiler import ProfilerActivity, profile
    tp, n_items, data, run = setup(args)
    steps = (data * (args.profile // len(data) + 1))[:args.profile]
    for adam, chunk in (("loop", "128"), ("fused", "rule")):
        run(adam, chunk, data[:5])                                       # warm-up
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run(adam, chunk, steps)
        wall = (time.perf_counter() - t0) / len(steps) * 1000
        events = {e.key: e for e in prof.key_averages()}
        total = sum(e.self_cpu_time_total for e in events.values())

        def per_step(key: str) -> float:
            e = events.get(key)
            return 0.0 if e is None else e.cpu_time_total / 1000 / len(steps)
        loss = per_step("_ChunkedCrossEntropy") + per_step("_ChunkedCrossEntropyBackward")
        adam_ms = per_step("Optimizer.step#Adam.step")
        print(f"\n{args.model}-{args.encoding}, Adam {adam}, loss block {chunk}: {wall:.1f} ms per step under the "
              f"profiler ({len(steps)} steps); inclusive per step: chunked loss fwd + bwd {loss:.1f} ms "
              f"({100 * loss * len(steps) * 1000 / total:.0f}% of self CPU time), Adam {adam_ms:.1f} ms "
              f"({100 * adam_ms * len(steps) * 1000 / total:.0f}%)\n")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


def heap_child(args) -> None:
    """One process of --heap: the trainer's step (fused + rule) with or without heap.keep(); prints ms and
    minor faults per step over the batches, after 5 warm-up steps."""
    import resource
    from pipeline.train import heap
    if args.heap_child == "keep" and not heap.keep():
        sys.exit("heap.keep() does not apply here (not glibc, or malloc tunables set)")
    _, _, data, run = setup(args)
    run("fused", "rule", data[:5])
    f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    run("fused", "rule", data)
    ms = (time.perf_counter() - t0) / len(data) * 1000
    print(ms, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / len(data))


def heap_ab(args) -> None:
    import subprocess
    base = [sys.executable, __file__, "--samples", str(args.samples), "--model", args.model, "--encoding",
            args.encoding, "--batch-size", str(args.batch_size), "--dim", str(args.dim), "--layers",
            str(args.layers), "--max-len", str(args.max_len), "--batches", str(args.batches)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    res: dict = {"system": [], "keep": []}
    for rnd in range(args.rounds):
        for arm in (("system", "keep") if rnd % 2 == 0 else ("keep", "system")):
            out = subprocess.run(base + ["--heap-child", arm], capture_output=True, text=True, env=env)
            if out.returncode:
                sys.exit(f"the {arm} child failed: {(out.stderr.strip().splitlines() or ['no output'])[-1]}")
            ms, faults = map(float, out.stdout.split()[-2:])
            res[arm].append((ms, faults))
    print(f"{args.model}-{args.encoding} dim {args.dim} batch {args.batch_size} on {args.samples.name}: "
          f"{args.batches} steps per process after 5 warm-up, fused Adam + the rule's block, {args.rounds} rounds "
          f"(each a fresh process per arm, the order alternating), torch {torch.__version__}, 1 thread, load "
          f"average at the end {load_average()}\n")
    print("| malloc | ms per step (median) | rounds | minor faults per step (median) | speed-up over glibc's defaults |")
    print("|---|---:|---|---:|---:|")
    base_ms = statistics.median(ms for ms, _ in res["system"])
    for arm, label in (("system", "glibc's defaults"), ("keep", "heap.keep()")):
        ms = statistics.median(m for m, _ in res[arm])
        print(f"| {label} | {ms:.1f} | {', '.join(f'{m:.0f}' for m, _ in res[arm])} | "
              f"{statistics.median(f for _, f in res[arm]):,.0f} | {base_ms / ms:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", action="store_true", help="the loss alone and Adam alone")
    ap.add_argument("--samples", type=Path, help="a samples folder (seqpe augment / seqpe import)")
    ap.add_argument("--model", default="posrec")
    ap.add_argument("--encoding", default="ldpe")
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--max-len", type=int, default=50)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", type=int, default=0, help="profile this many steps instead of the A/B timing")
    ap.add_argument("--heap", action="store_true", help="glibc's malloc defaults vs heap.keep(), fresh processes")
    ap.add_argument("--heap-child", choices=("system", "keep"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.sweep:
        sweep()
    elif args.samples is None:
        ap.error("give --samples DIR, or --sweep")
    elif args.heap_child:
        heap_child(args)
    elif args.heap:
        heap_ab(args)
    elif args.profile:
        profile_steps(args)
    else:
        step_ab(args)


if __name__ == "__main__":
    main()
