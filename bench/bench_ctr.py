"""Training and scoring throughput of the CTR backbones at AmazonElectronics_x1's full size (not a test).

    .venv/bin/python bench/bench_ctr.py                                      # generate, measure, delete
    .venv/bin/python bench/bench_ctr.py --fuxictr /tmp/fuxivenv/bin/python   # + FuxiCTR's DIN, alternating
    .venv/bin/python bench/bench_ctr.py --samples /tmp/ae/samples            # prepared samples, kept

Data: without --samples, an AmazonElectronics_x1.zip of the real file's shape (2,608,764 train +
384,806 test rows; bench/bench_ctr_data.py's generator, `gen_amazon`) is generated under --work
(default /tmp, never the repo), run through download --from, preprocess and augment exactly as
bench_ctr_data.py does, and the whole folder is deleted at the end (--keep keeps it).

Models: DIN, DIEN, BST, DMIN (--models) as `seqpe train amazon_electronics --model M --encoding
none --preset paper` resolves them (CAPE 001 §5.1.5: 64-wide fields, item + category = 128, context
100, batch 1024, Adam lr 5e-4; each backbone's paper options), on CPU with `train.threads` auto
(1 thread on this 2-CPU machine). A step is what pipeline/train/loop.py's train_epoch does: the
next shuffled batch of CTRTask.batches (trimmed to its longest history), CTRTask.loss (BCE + the
auxiliary loss of DIEN / DMIN), backward, Adam step. Every model gets the same batches (one seed).

Timing: each model first runs --warmup steps untimed, then --rounds rounds; in each round every
model runs --steps steps in turn (the order rotates by one per round), so machine noise (a
shared machine) hits all models alike. Wall time (perf_counter) and CPU time (process_time, this
process's user + sys) are both taken; the tables give medians over rounds, and the step-time
ratio of each model to DIN is the median of the per-round ratios (same round, same noise).

Scoring: CTRTask.evaluate on the first --score-rows test rows with DIN (eval batch_size from
params.yaml), AUC / gAUC / logloss included.

FuxiCTR (--fuxictr PYTHON: a separate venv's python with `fuxictr` installed; seqpe is not
imported there): its DIN (the pip package ships it as model_zoo.LongCTR.DIN) runs in a worker
process with the same settings (embedding 64 per field, item + category, attention MLP [512, 256]
Dice, softmax weights, DNN [1024, 512, 256] Dice, dropout, Adam lr, batch 1024) on the same rows
in the same order, each batch cut to its longest history as FuxiCTR's LongCTR collator does, and
joins the rotation as one more model; its step is the model's own `train_step` (which also clips
the gradient norm at 10, FuxiCTR's default). The worker builds its batch tensors from NumPy
arrays as seqpe's ctr_batches does (FuxiCTR's parquet/pandas loader is not timed). Printed: the
ratio seqpe DIN / FuxiCTR DIN of samples/s, per round and its median.

Prints Markdown to paste into bench/results/ctr.md.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402

DATASET = "amazon_electronics"

# The FuxiCTR side: run with the other venv's python; argv = npz of the batches' rows, JSON settings.
# Reads "run K" lines on stdin, answers one JSON line per command.
FUXI_WORKER = r"""
import json, sys, time, logging
from collections import OrderedDict
import numpy as np, torch
a = json.loads(sys.argv[2])
torch.set_num_threads(a["threads"])
torch.manual_seed(1)
from fuxictr.features import FeatureMap
from model_zoo.LongCTR.DIN import DIN
import fuxictr
logging.disable(logging.INFO)
d = np.load(sys.argv[1])
target, history, label = d["target"], d["history"], d["label"]       # (N, 2), (N, L, 2), (N,)
fm = FeatureMap("seqpe_bench", a["tmp"])
fm.labels = ["label"]
fm.default_emb_dim = a["dim"]
for name, rows in (("item_id", a["items"]), ("cate_id", a["cates"])):
    fm.features[name] = {"type": "categorical", "source": "item", "vocab_size": rows, "padding_idx": 0}
fm.num_fields = 2
model = DIN(fm, model_id="DIN", gpu=-1, dnn_hidden_units=a["dnn"], dnn_activations="Dice",
            attention_hidden_units=a["att"], attention_hidden_activations="Dice", attention_dropout=0,
            learning_rate=a["lr"], embedding_dim=a["dim"], net_dropout=a["dropout"], batch_norm=False,
            din_use_softmax=True, optimizer="adam", loss="binary_crossentropy", verbose=0,
            model_root=a["tmp"], task="binary_classification", metrics=["AUC", "logloss"])
model._max_gradient_norm = 10.0           # BaseModel.fit's default
model.train()
B, k = a["batch"], 0
def batch(i):
    s = slice(i * B, (i + 1) * B)
    h = torch.from_numpy(history[s]).long()                           # (B, L, 2), left-padded
    width = max(int((h[..., 0] != 0).sum(1).max()), 1)                # the collator's min(max len, max_len)
    h = h[:, h.size(1) - width:]
    t = torch.from_numpy(target[s]).long()                            # (B, 2)
    items = torch.cat([h, t[:, None]], 1)                             # (B, L' + 1, 2): target last
    return ({"label": torch.from_numpy(label[s]).float()},
            {"item_id": items[..., 0].reshape(-1), "cate_id": items[..., 1].reshape(-1)},
            (h[..., 0] > 0).float())
print(json.dumps({"ready": True, "fuxictr": fuxictr.__version__, "torch": torch.__version__,
                  "threads": torch.get_num_threads(),
                  "parameters": sum(p.numel() for p in model.parameters())}), flush=True)
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] != "run":
        break
    w, c, total = time.perf_counter(), time.process_time(), 0.0
    for _ in range(int(cmd[1])):
        model._batch_index = k
        total += float(model.train_step(batch(k)).detach())
        k += 1
    print(json.dumps({"wall_s": time.perf_counter() - w, "cpu_s": time.process_time() - c,
                      "loss": total / int(cmd[1])}), flush=True)
"""


def prepare(work: Path, scale: float, params_path: Path) -> Path:
    """Generated AmazonElectronics_x1 -> download --from -> preprocess -> augment in `work`; the
    generated zip, the raw and sessions folders are deleted once the samples exist. Returns samples."""
    from bench_ctr_data import gen_amazon, member_md5, run_stage
    t = time.perf_counter()
    src = gen_amazon(work / "gen", scale)
    print(f"generated {src} in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    common = {"dataset": DATASET, "params": str(params_path)}
    for stage, a, b in (("download", src, work / "raw"), ("preprocess", work / "raw", work / "sessions"),
                        ("augment", work / "sessions", work / "samples")):
        extra = {"md5": member_md5(src)} if stage == "download" else {}
        out = run_stage({**common, "stage": stage, "src": str(a), "dst": str(b), **extra})
        print(f"{stage}: {out['wall_s']:.0f} s ({out['cpu_s']:.0f} s CPU)", file=sys.stderr)
        if stage == "download":
            shutil.rmtree(work / "gen")
    shutil.rmtree(work / "raw")
    shutil.rmtree(work / "sessions")
    return work / "samples"


class Seqpe:
    """One seqpe backbone as `seqpe train --preset paper` builds and steps it."""

    def __init__(self, name: str, base_task, params, encoding: str, seed: int = 1):
        import torch
        from models import MODELS
        from pipeline.train import setup
        p = dataclasses.replace(params, train=params.train_for("ctr"))
        spec = setup.pick_model(name, "ctr", p, MODELS)
        self.tp, self.params, _ = setup.resolve_run(p, spec, "paper", spec.name, encoding, DATASET, [])
        self.task = copy.copy(base_task)                     # shares the loaded arrays
        self.task.tp, self.task.spec = self.tp, spec
        torch.manual_seed(seed)
        self.net = self.task.build(self.params)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=self.tp.lr, weight_decay=self.tp.weight_decay)
        self.gen = torch.Generator().manual_seed(seed)
        self.batches = iter(self.task.batches(self.gen))
        self.name = f"{name}-{encoding}"
        self.batch_size = self.tp.batch_size

    def run(self, steps: int) -> dict:
        """`steps` optimiser steps as pipeline/train/loop.py's train_epoch takes them (fp32 on CPU)."""
        self.net.train()
        w, c, total = time.perf_counter(), time.process_time(), 0.0
        for _ in range(steps):
            batch = next(self.batches, None)
            if batch is None:            # the epoch ended: the next one, as the trainer goes on (walk 42e #5: a bare
                self.batches = iter(self.task.batches(self.gen))     # StopIteration when the steps outran it)
                batch = next(self.batches)
            self.opt.zero_grad(set_to_none=True)
            loss, _ = self.task.loss(self.net, batch, self.gen)
            total += float(loss.detach())
            loss.backward()
            self.opt.step()
        return {"wall_s": time.perf_counter() - w, "cpu_s": time.process_time() - c, "loss": total / steps}


class Fuxi:
    """FuxiCTR's DIN in a worker process of another venv, fed the rows seqpe's DIN trains on."""

    def __init__(self, python: str, din: Seqpe, n_batches: int, tmp: Path):
        import torch
        part = din.task.data["train"].take(first_rows(len(din.task.data["train"]), n_batches * din.batch_size))
        npz = tmp / "fuxi_rows.npz"
        np.savez(npz, target=part.target, history=part.history, label=part.label)
        tp, cfg = din.tp, din.net.cfg
        settings = {"threads": torch.get_num_threads(), "tmp": str(tmp), "items": din.task.schema.rows("item"),
                    "cates": din.task.schema.rows("cate"), "dnn": list(cfg.dnn_hidden),
                    "att": list(cfg.attention_hidden), "lr": tp.lr, "dim": tp.dim, "dropout": tp.dropout,
                    "batch": din.batch_size}
        assert cfg.activation == "dice" and cfg.attention_activation == "dice" and cfg.softmax
        self.proc = subprocess.Popen([python, "-c", FUXI_WORKER, str(npz), json.dumps(settings)], cwd=tmp,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.info = self._answer()
        self.name, self.batch_size = "FuxiCTR DIN", din.batch_size

    def _answer(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the FuxiCTR worker stopped (exit {self.proc.wait()}); its error is above")
        return json.loads(line)

    def run(self, steps: int) -> dict:
        self.proc.stdin.write(f"run {steps}\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        self.proc.wait()


def first_rows(n: int, rows: int, seed: int = 1) -> np.ndarray:
    """The first `rows` train rows in the order every Seqpe runner draws them (its seed's randperm)."""
    import torch
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:rows].numpy()


def padding(data, n_batches: int, batch: int) -> tuple[float, float]:
    """(mean history width of the timed batches after trimming, mean real behaviours per row): the
    attention rows a model computes on padded batches (B x width) or on real behaviours only."""
    real = (data.history[first_rows(len(data), n_batches * batch)][..., 0] != 0).sum(1)  # (rows,)
    widths = [int(real[i:i + batch].max()) for i in range(0, len(real), batch)]
    return float(np.mean(widths)), float(real.mean())


def machine() -> str:
    import torch
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.machine()
    return (f"{cpu}, {os.cpu_count()} vCPUs, Python {platform.python_version()}, torch {torch.__version__}, "
            f"{torch.get_num_threads()} thread(s)")


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=Path, help="prepared amazon_electronics samples (default: generate)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()), help="where to generate")
    ap.add_argument("--scale", type=float, default=1.0, help="generated size x this (1 = the real file's)")
    ap.add_argument("--keep", action="store_true", help="keep the generated folder")
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--models", default="din,dien,bst,dmin")
    ap.add_argument("--encoding", default="none")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per model per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--score-rows", type=int, default=20480, help="test rows DIN scores (0 = all)")
    ap.add_argument("--fuxictr", help="python of a venv with fuxictr installed: run its DIN too")
    args = ap.parse_args()

    from pipeline.params import load_params
    from pipeline.train import setup, threads
    from pipeline.train.tasks import CTRTask
    from pipeline.io import read_json

    work = None
    if args.samples is None:
        work = Path(tempfile.mkdtemp(prefix="seqpe-bench-ctr-", dir=args.work))
    try:
        samples = args.samples or prepare(work, args.scale, args.params)
        params = load_params(args.params)
        manifest = read_json(samples / "manifest.json")
        names = args.models.split(",")
        first = dataclasses.replace(params, train=params.train_for("ctr"))
        from models import MODELS
        tp0, p0, _ = setup.resolve_run(first, MODELS[names[0]], "paper", names[0], args.encoding, DATASET, [])
        n_threads = threads.apply(tp0.threads)
        device = setup.pick_device("cpu")
        t, c = time.perf_counter(), time.process_time()
        base = CTRTask(samples, manifest, tp0, p0, MODELS[names[0]], device)
        load_s, load_cpu = time.perf_counter() - t, time.process_time() - c
        runners = [Seqpe(n, base, params, args.encoding) for n in names]
        tmp = Path(tempfile.mkdtemp(prefix="seqpe-fuxi-", dir=args.work))
        try:
            if args.fuxictr:
                din = next((r for r in runners if r.name.startswith("din-")), None)
                if din is None:
                    raise SystemExit("--fuxictr compares with seqpe's DIN: keep din in --models")
                runners.append(Fuxi(args.fuxictr, din, args.warmup + args.rounds * args.steps, tmp))
            report(args, runners, base, samples, manifest, load_s, load_cpu, n_threads)
        finally:
            for r in runners:
                if isinstance(r, Fuxi):
                    r.close()
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if work is not None and not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def report(args, runners, base, samples, manifest, load_s, load_cpu, n_threads) -> None:
    print(f"load {load()} before warm-up", file=sys.stderr)
    for r in runners:
        out = r.run(args.warmup)
        print(f"warm-up {r.name}: {out['wall_s'] / args.warmup:.2f} s/step, loss {out['loss']:.4f}", file=sys.stderr)
    loads = [os.getloadavg()[0]]
    rounds: list[dict] = []
    t_all = time.perf_counter()
    for k in range(args.rounds):
        order = runners[k % len(runners):] + runners[: k % len(runners)]
        res = {}
        for r in order:
            res[r.name] = r.run(args.steps)
        rounds.append(res)
        loads.append(os.getloadavg()[0])
        print(f"round {k + 1}: " + ", ".join(f"{n} {v['wall_s'] / args.steps:.2f} s/step" for n, v in res.items())
              + f" (load {loads[-1]:.1f})", file=sys.stderr)
    timed_s = time.perf_counter() - t_all

    din = next((r for r in runners if r.name.startswith("din-")), runners[0])
    score = None
    if args.score_rows != 0:
        task = copy.copy(din.task)
        n = len(base.data["test"]) if args.score_rows < 0 else min(args.score_rows, len(base.data["test"]))
        task.data = {**task.data, "test": task.data["test"].take(np.arange(n))}
        din.net.eval()
        w, c = time.perf_counter(), time.process_time()
        metrics = task.evaluate(din.net, "test")
        score = {"rows": n, "wall_s": time.perf_counter() - w, "cpu_s": time.process_time() - c, "metrics": metrics}

    sizes = {s: len(base.data[s]) for s in ("train", "valid", "test")}
    width, real = padding(base.data["train"], args.warmup + args.rounds * args.steps, din.batch_size)
    hwm = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:"))
    print(f"\nmachine: {machine()}; load average (1 min) {min(loads):.1f} to {max(loads):.1f} during the "
          f"rounds; timed rounds {timed_s:.0f} s")
    print(f"data: {samples} ({manifest.get('dataset')}), rows train / valid / test "
          f"{sizes['train']:,} / {sizes['valid']:,} / {sizes['test']:,}; loading the three splits "
          f"(max_len {din.tp.max_len}) {load_s:.1f} s ({load_cpu:.1f} s CPU); peak RSS {int(hwm.split()[1]) / 1024:,.0f} MB")
    print(f"batches timed: history width after trimming {width:.1f} on average, {real:.2f} real behaviours "
          f"per row ({100 * real / width:.0f}% of the width)")
    print(f"settings: --preset paper on {DATASET} (batch {din.batch_size}, lr {din.tp.lr}, dim {din.tp.dim}, "
          f"max_len {din.tp.max_len}), encoding {args.encoding}, {n_threads} thread(s), warm-up {args.warmup} "
          f"steps, {args.rounds} rounds x {args.steps} steps per model, order rotating")
    ref = din.name
    print("\n| model | parameters | s/step (wall, median) | samples/s (wall, median) | samples/s per CPU-s "
          "(median) | step time / DIN's (median of per-round ratios) | est. epoch (wall, h) |")
    print("|---|---|---|---|---|---|---|")
    for r in runners:
        walls = [rd[r.name]["wall_s"] / args.steps for rd in rounds]
        cpus = [rd[r.name]["cpu_s"] / args.steps for rd in rounds]
        ratio = statistics.median(rd[r.name]["wall_s"] / rd[ref]["wall_s"] for rd in rounds)
        params = (r.info["parameters"] if isinstance(r, Fuxi) else sum(p.numel() for p in r.net.parameters()))
        sps = statistics.median(r.batch_size / w for w in walls)
        print(f"| {r.name} | {params:,} | {statistics.median(walls):.2f} | {sps:,.0f} | "
              f"{statistics.median(r.batch_size / c for c in cpus):,.0f} | {ratio:.2f} | "
              f"{sizes['train'] / sps / 3600:.1f} |")
    fuxi = next((r for r in runners if isinstance(r, Fuxi)), None)
    if fuxi is not None:
        per = [rd[fuxi.name]["wall_s"] / rd[ref]["wall_s"] for rd in rounds]      # = seqpe sps / fuxi sps
        per_cpu = [rd[fuxi.name]["cpu_s"] / rd[ref]["cpu_s"] for rd in rounds]
        print(f"\nFuxiCTR {fuxi.info['fuxictr']} (torch {fuxi.info['torch']}, {fuxi.info['threads']} thread(s)): "
              f"seqpe DIN / FuxiCTR DIN samples/s per round (wall) {', '.join(f'{x:.2f}' for x in per)}; "
              f"median {statistics.median(per):.2f} (CPU time: median {statistics.median(per_cpu):.2f})")
    if score is not None:
        m = score["metrics"]
        print(f"\nscoring ({din.name}, CTRTask.evaluate on the first {score['rows']:,} test rows, eval batch "
              f"{din.params.evaluate.batch_size}, metrics included): {score['wall_s']:.1f} s wall, "
              f"{score['rows'] / score['wall_s']:,.0f} rows/s ({score['rows'] / score['cpu_s']:,.0f} per CPU-s); "
              f"full test split ({sizes['test']:,} rows) est. {sizes['test'] * score['wall_s'] / score['rows']:.0f} s"
              f" (AUC {m['auc']:.4f} after {args.warmup + args.rounds * args.steps} steps: a throughput run)")


if __name__ == "__main__":
    main()
