"""SASRec training steps in seqpe against two peers, on the same batches (issue 14; not a test).

Two comparisons, each with the peer's own objective and the model and batch it trains:

  --vs recbole   RecBole 1.2.1's SASRec (recbole.model.sequential_recommender.sasrec): one sample per
                 prefix, softmax cross-entropy over all items. Data: Diginetica prefixes (SR-GNN
                 protocol); d 64, 2 blocks, 1 head, feed-forward 64 (ReLU), dropout 0.2, batch 256,
                 max_len 50, Adam lr 1e-3: seqpe's params.yaml SASRec.
  --vs pmixer    pmixer/SASRec.pytorch's SASRec (python/model.py), the PyTorch port of Kang &
                 McAuley's code: whole sequences, sigmoid BCE with one negative per position. Data:
                 Beauty (leave-one-out); d 50, 2 blocks, 1 head, dropout 0.5, batch 128, max_len 50,
                 pre-LN (its --norm_first), Adam lr 1e-3 betas (0.9, 0.98): Kang & McAuley's settings.

Arms, each timed in its own fresh process, alternating over `--rounds`:

  peer          the peer's model, loss and torch Adam on pre-drawn batches at the full max_len width
                (its own layout: RecBole right-pads and gathers position len-1; pmixer left-pads). Its
                data loader is not timed (pmixer samples in 3 worker processes; RecBole's is its
                DataLoader), so the peer is timed at its best.
  seqpe-full    seqpe's model, `pipeline.train.loss_fn` and optimiser (`make_optimizer`: the fused
                Adam on a CPU) on the very same rows at the same full width
  seqpe         the same rows with seqpe's padding trim (columns that are padding in every row of the
                batch dropped; `train.trim_padding`)
  seqpe-bucket  what `seqpe train` runs: trim plus `train.bucket: 50` (batches of similar lengths, so
                different rows: the first batches of a seeded epoch)
  seqpe-aten    seqpe-bucket with aten's own dropout masks (`models.dropout.FAST_CPU = False`): what
                seqpe ran before models/dropout.py (an A/B of that change, not a peer)

Every arm reads the loss back once per step (`float(loss)`), as each trainer does to check it (pmixer
also prints it). seqpe arms keep the CPU heap as `seqpe train` does (pipeline/train/heap.py).
Throughput is samples (prefixes, or sequences) per second of wall time over `--steps` steps after
`--warm`; the ratio is per round (seqpe arm / peer in the same round), then the median.

    python bench/bench_peers.py --vs recbole --samples SAMPLES/diginetica --recbole-python /path/venv/bin/python
    python bench/bench_peers.py --vs pmixer --samples SAMPLES/beauty --pmixer /path/SASRec.pytorch/python
    python bench/bench_peers.py --vs pmixer --samples SAMPLES/beauty --profile seqpe-bucket --steps 10

The peers are never installed into seqpe's environment: RecBole 1.2.1 goes into a venv of its own
(`python3 -m venv V && V/bin/pip install torch==2.13.0 recbole==1.2.1`) and only its python is named;
pmixer's model.py (numpy and torch only) is imported from the checkout named by --pmixer.
Results: bench/results/train.md ("Peers").
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SETTINGS = {
    "recbole": {"objective": "prefixes", "loss": "ce", "dim": 64, "layers": 2, "heads": 1, "dropout": 0.2,
                "batch_size": 256, "max_len": 50, "encoding": "lpe", "norm": "pre", "out_proj": True},
    "pmixer": {"objective": "sequence", "loss": "bce", "dim": 50, "layers": 2, "heads": 1, "dropout": 0.5,
               "batch_size": 128, "max_len": 50, "encoding": "lrpe", "norm": "pre", "out_proj": True},
}
ARMS = ("peer", "seqpe-full", "seqpe", "seqpe-bucket", "seqpe-aten")


# --------------------------------------------------------------------------- batches (seqpe's venv)

def draw_batches(vs: str, samples: Path, n: int, seed: int, out: Path) -> dict:
    """The first `n` batches of a seeded epoch, saved as arrays every arm reads: left-padded seqs
    (n, B, L), targets, lengths; for pmixer also one negative per position; for seqpe-bucket the
    bucketed order's batches (trimmed by the arm itself)."""
    import numpy as np
    import torch
    sys.path.insert(0, str(ROOT))
    from pipeline.batches import batch_order, load_samples, load_sequences
    from pipeline.io import read_json
    s = SETTINGS[vs]
    n_items = int(read_json(samples / "manifest.json")["n_items"])
    load = load_sequences if s["objective"] == "sequence" else load_samples
    data = load(samples, "train", s["max_len"])
    arrays = {}
    for name, bucket in (("plain", 0), ("bucket", 50)):
        gen = torch.Generator().manual_seed(seed)
        order = batch_order(data.lengths, s["batch_size"], shuffle=True, generator=gen, bucket=bucket)
        idx = [np.asarray(i) for i in order if len(i) == s["batch_size"]][:n]    # whole batches only
        if len(idx) < n:
            raise SystemExit(f"{samples} has fewer than {n} whole batches of {s['batch_size']}; lower --steps")
        arrays[f"{name}_seqs"] = np.stack([data.seqs[i] for i in idx]).astype(np.int64)       # (n, B, L)
        arrays[f"{name}_targets"] = np.stack([data.targets[i] for i in idx]).astype(np.int64)  # (n, B[, L])
        arrays[f"{name}_lengths"] = np.stack([data.lengths[i] for i in idx]).astype(np.int64)  # (n, B)
    if vs == "pmixer":                                 # one negative per real position, never the target
        rng = np.random.default_rng(seed)
        t = arrays["plain_targets"]
        neg = rng.integers(1, n_items + 1, t.shape)
        while ((neg == t) & (t != 0)).any():
            hit = (neg == t) & (t != 0)
            neg[hit] = rng.integers(1, n_items + 1, int(hit.sum()))
        arrays["plain_neg"] = np.where(t != 0, neg, 0)
    np.savez(out, **arrays)
    return {"n_items": n_items, "train_rows": len(data), "mean_length": float(data.lengths.mean())}


# --------------------------------------------------------------------------- arms (one process each)

def _seqpe_step(s: dict, n_items: int, device: str):
    import torch
    sys.path.insert(0, str(ROOT))
    from models import build_model
    from pipeline import train as stage
    from pipeline.params import TrainParams
    from pipeline.train.heap import keep
    from pipeline.train.loop import make_optimizer
    if torch.device(device).type == "cpu":
        keep()
    tp = TrainParams(model="sasrec", encoding=s["encoding"], batch_size=s["batch_size"], dim=s["dim"],
                     layers=s["layers"], heads=s["heads"], max_len=s["max_len"], dropout=s["dropout"],
                     loss=s["loss"], objective=s["objective"], lr=1e-3, weight_decay=0.0, device=device)
    encoding = stage.build_encoding(tp.encoding, tp, {})
    net = build_model("sasrec", n_items=n_items, max_len=tp.max_len, train=tp,
                      options={"out_proj": s["out_proj"]}, encoding=encoding).to(device)
    opt = make_optimizer(net, tp)
    gen = torch.Generator().manual_seed(1)
    net.train()

    def step(seqs, targets):
        opt.zero_grad(set_to_none=True)
        loss = stage.loss_fn(net, seqs, targets, tp, n_items, gen)
        value = float(loss.detach())
        loss.backward()
        opt.step()
        return value
    return net, step


def _recbole_step(s: dict, n_items: int, device: str):
    import torch
    from recbole.model.sequential_recommender.sasrec import SASRec
    config = {"USER_ID_FIELD": "user_id", "ITEM_ID_FIELD": "item_id", "LIST_SUFFIX": "_list",
              "ITEM_LIST_LENGTH_FIELD": "item_length", "NEG_PREFIX": "neg_", "MAX_ITEM_LIST_LENGTH": s["max_len"],
              "device": torch.device(device), "n_layers": s["layers"], "n_heads": s["heads"],
              "hidden_size": s["dim"], "inner_size": s["dim"], "hidden_dropout_prob": s["dropout"],
              "attn_dropout_prob": s["dropout"], "hidden_act": "relu", "layer_norm_eps": 1e-12,
              "initializer_range": 0.02, "loss_type": "CE"}

    class Dataset:                                       # what SequentialRecommender asks of a dataset
        def num(self, field):
            return n_items + 1                           # ids 1..n_items and padding 0, as RecBole counts

    net = SASRec(config, Dataset()).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=0.0)   # RecBole's trainer defaults
    net.train()

    def step(seqs, targets):
        lengths = (seqs != 0).sum(1)
        L = seqs.size(1)                                 # left-padded -> RecBole's right-padded layout
        shift = (torch.arange(L, device=seqs.device)[None, :] + (L - lengths)[:, None]) % L
        inter = {"item_id_list": seqs.gather(1, shift), "item_length": lengths, "item_id": targets}
        opt.zero_grad(set_to_none=True)
        loss = net.calculate_loss(inter)
        value = float(loss.detach())
        loss.backward()
        opt.step()
        return value
    return net, step


def _pmixer_step(s: dict, n_items: int, device: str, checkout: Path):
    import numpy as np
    import torch
    sys.path.insert(0, str(checkout))
    from model import SASRec                             # pmixer/SASRec.pytorch python/model.py
    args = argparse.Namespace(device=device, norm_first=s["norm"] == "pre", hidden_units=s["dim"],
                              maxlen=s["max_len"], dropout_rate=s["dropout"], num_blocks=s["layers"],
                              num_heads=s["heads"])
    net = SASRec(0, n_items, args).to(device)
    for _, p in net.named_parameters():                  # its main.py's initialisation
        try:
            torch.nn.init.xavier_normal_(p.data)
        except ValueError:
            pass
    net.pos_emb.weight.data[0, :] = 0
    net.item_emb.weight.data[0, :] = 0
    bce = torch.nn.BCEWithLogitsLoss()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, betas=(0.9, 0.98))
    net.train()

    def step(seqs, pos, neg):                            # numpy in, as its sampler hands them over
        pos_logits, neg_logits = net(None, seqs, pos, neg)
        ones = torch.ones(pos_logits.shape, device=device)
        zeros = torch.zeros(neg_logits.shape, device=device)
        opt.zero_grad()
        where = np.where(pos != 0)
        loss = bce(pos_logits[where], ones[where]) + bce(neg_logits[where], zeros[where])
        value = float(loss.detach())
        loss.backward()
        opt.step()
        return value
    return net, step


def run_arm(arm: str, vs: str, batches: Path, n_items: int, warm: int, steps: int, device: str, threads: int,
            pmixer: Path | None, profile: bool = False) -> dict:
    import numpy as np
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    s = SETTINGS[vs]
    data = np.load(batches)
    kind = "bucket" if arm in ("seqpe-bucket", "seqpe-aten") else "plain"
    if arm == "seqpe-aten":
        sys.path.insert(0, str(ROOT))
        import models.dropout
        models.dropout.FAST_CPU = False
    seqs, targets = data[f"{kind}_seqs"], data[f"{kind}_targets"]
    lengths = data[f"{kind}_lengths"]
    if arm == "peer" and vs == "pmixer":
        net, step = _pmixer_step(s, n_items, device, pmixer)
        feed = [(seqs[i], targets[i], data["plain_neg"][i]) for i in range(len(seqs))]
    elif arm == "peer":
        net, step = _recbole_step(s, n_items, device)
        feed = [(torch.from_numpy(x).to(device), torch.from_numpy(t).to(device)) for x, t in zip(seqs, targets)]
    else:                                      # seqpe's own batcher, in file order: batch i is the saved batch i
        net, step = _seqpe_step(s, n_items, device)                   # puts the repo on sys.path
        from pipeline.batches import Samples, batches as seqpe_batches
        n, size = seqs.shape[:2]
        rows = Samples(seqs.reshape(n * size, -1).astype(np.int32),
                       targets.reshape(n * size, *targets.shape[2:]).astype(np.int32),
                       lengths.reshape(-1).astype(np.int32))
        feed = list(seqpe_batches(rows, size, device=device, trim=arm != "seqpe-full"))   # train.trim_padding
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    losses = []
    for i in range(warm):
        losses.append(step(*feed[i % len(feed)]))
    sync()
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.profiler.profile() if profile else contextlib.nullcontext() as prof:
        for i in range(warm, warm + steps):
            losses.append(step(*feed[i % len(feed)]))
        sync()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if profile:
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
    if not all(np.isfinite(losses)):
        raise SystemExit(f"{arm}: a non-finite loss {losses}")
    return {"arm": arm, "samples_per_s": steps * s["batch_size"] / wall, "wall": wall, "cpu": cpu,
            "params": sum(p.numel() for p in net.parameters()), "first_loss": losses[0], "last_loss": losses[-1],
            "width": float(np.mean([f[0].shape[1] for f in feed[warm:warm + steps]]))}


# --------------------------------------------------------------------------- driver

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vs", choices=sorted(SETTINGS), required=True)
    ap.add_argument("--samples", type=Path, help="seqpe samples folder: Diginetica for recbole, Beauty for pmixer")
    ap.add_argument("--recbole-python", type=Path, help="python of a venv with recbole==1.2.1 (and torch)")
    ap.add_argument("--pmixer", type=Path, help="the python/ folder of a pmixer/SASRec.pytorch checkout")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--steps", type=int, default=40, help="timed steps per arm and round")
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", metavar="ARM", choices=ARMS,
                    help="profile one arm's --steps steps in this process (torch.profiler, top 15 ops) instead")
    ap.add_argument("--arm", help=argparse.SUPPRESS)                       # a child process
    ap.add_argument("--batches", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--n-items", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.arm:
        print(json.dumps(run_arm(args.arm, args.vs, args.batches, args.n_items, args.warm, args.steps,
                                 args.device, args.threads, args.pmixer)))
        return

    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    bad = [a for a in arms if a not in ARMS]
    if bad or not arms:
        raise SystemExit(f"--arms takes {', '.join(ARMS)}, got {args.arms!r}")
    if args.samples is None or not (args.samples / "manifest.json").is_file():
        raise SystemExit(f"--samples must be a seqpe samples folder (manifest.json), got {args.samples}")
    peer_python = Path(sys.executable)
    if args.profile:
        arms = [args.profile]
    if "peer" in arms and args.vs == "recbole":
        if args.recbole_python is None or not args.recbole_python.is_file():
            raise SystemExit("--recbole-python must name the python of a venv with recbole==1.2.1 "
                             "(python3 -m venv V && V/bin/pip install torch==2.13.0 recbole==1.2.1)")
        peer_python = args.recbole_python
    if "peer" in arms and args.vs == "pmixer" and (args.pmixer is None or not (args.pmixer / "model.py").is_file()):
        raise SystemExit("--pmixer must name the python/ folder of a pmixer/SASRec.pytorch checkout (model.py)")

    with tempfile.TemporaryDirectory(prefix="seqpe-peers-") as tmp:
        npz = Path(tmp) / "batches.npz"
        info = draw_batches(args.vs, args.samples, args.warm + args.steps, args.seed, npz)
        if args.profile:
            if args.profile == "peer" and args.vs == "recbole":
                raise SystemExit("--profile peer runs in this process: profile RecBole from its own venv")
            r = run_arm(args.profile, args.vs, npz, info["n_items"], args.warm, args.steps, args.device,
                        args.threads, args.pmixer, profile=True)
            print(f"{args.profile}: {r['samples_per_s']:,.0f} samples/s under the profiler, mean width {r['width']:.1f}")
            return
        results: dict[str, list[dict]] = {a: [] for a in arms}
        for r in range(args.rounds):
            for arm in (arms if r % 2 == 0 else arms[::-1]):                # alternate the order
                py = peer_python if arm == "peer" else Path(sys.executable)
                cmd = [str(py), __file__, "--vs", args.vs, "--arm", arm, "--batches", str(npz),
                       "--n-items", str(info["n_items"]), "--warm", str(args.warm), "--steps", str(args.steps),
                       "--device", args.device, "--threads", str(args.threads)]
                if args.pmixer:
                    cmd += ["--pmixer", str(args.pmixer)]
                env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
                done = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if done.returncode != 0:
                    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                    raise SystemExit(f"arm {arm} failed (rc {done.returncode}): {tail}")
                results[arm].append(json.loads(done.stdout.strip().splitlines()[-1]))
        report(args, info, arms, results)


def report(args, info: dict, arms: list[str], results: dict) -> None:
    import torch
    from bench_train import cpu_name                    # seqpe's venv only (Polars): not in the children
    s = SETTINGS[args.vs]
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores visible, torch {torch.__version__}, device {device}, "
          f"threads {args.threads}; load average at the end {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"data: {args.samples} ({info['train_rows']:,} train rows, mean length {info['mean_length']:.1f}, "
          f"{info['n_items']:,} items); {s['objective']} objective, loss {s['loss']}, d {s['dim']}, "
          f"{s['layers']} blocks, batch {s['batch_size']}, max_len {s['max_len']}; {args.rounds} rounds x "
          f"{args.steps} steps after {args.warm} warm-up")
    base = "peer" if "peer" in arms else None
    print("\n| arm | parameters | mean width | samples/s (median of rounds) | per round | "
          f"{'x peer (median of per-round ratios)' if base else ''} | loss, first -> last step (a sanity "
          "check: inits and batches differ) |")
    print("|---|---:|---:|---:|---|---:|---|")
    for arm in arms:
        rs = results[arm]
        sps = [r["samples_per_s"] for r in rs]
        ratio = ""
        if base and arm != base:
            ratio = f"{statistics.median(a['samples_per_s'] / b['samples_per_s'] for a, b in zip(rs, results[base])):.2f}x"
        print(f"| {arm} | {rs[0]['params']:,} | {rs[0]['width']:.1f} | {statistics.median(sps):,.0f} | "
              f"{' / '.join(f'{x:,.0f}' for x in sps)} | {ratio} | {rs[0]['first_loss']:.3f} -> {rs[0]['last_loss']:.3f} |")


if __name__ == "__main__":
    main()
