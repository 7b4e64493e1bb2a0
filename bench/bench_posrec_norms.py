"""How large PosRec's added position encoding is against the node states it is added to (not a test).

For each trained PosRec run of a runs folder (`posrec-ENC/seed-1`) and for a freshly initialised model
of the same configuration (torch.manual_seed(1)), over 3,000 test sessions drawn with a fixed seed:
the mean L2 norm, over the real nodes, of X' (the PGGNN output, models/posrec.py) and of
P = encoding.embed(X', positions) - X' (what the encoding adds before the readout, 000 Eq. 9).
This is the measurement behind bench/results/reproduction.md's "Why the sinusoids trail after one
epoch":

    .venv/bin/python bench/bench_posrec_norms.py RUNS/diginetica SAMPLES/diginetica \\
        none ldpe lpe lrpe alpe 2dlpe rspe spe dpe 2dspe aspe
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def norms(net, samples) -> tuple[float, float]:
    """Mean ‖X'‖ and ‖P‖ over the real nodes of `samples`, in eval mode and without gradients."""
    import torch

    from models.graph import build_graph, neighbour_weights
    from pipeline.batches import batches
    x_norms, p_norms = [], []
    with torch.no_grad():
        for seqs, _ in batches(samples, 500):
            # the first lines of models.posrec.PosRec.encode (eval mode: its dropout is the identity), kept
            # here rather than factored out of the model: any edit to seqpe's source changes every run's
            # fingerprint (pipeline/train/runs.py), so finished seeds would retrain for a benchmark's sake
            g = build_graph(seqs)
            w_in, w_out = neighbour_weights(g, anchors=net.cfg.anchors, normalise=net.cfg.normalise)
            x = net.emb(g.items)                                         # (B, n, D)
            for _ in range(net.cfg.gnn_steps):
                x = net.pggnn(x, w_in, w_out) * g.mask[:, :, None]       # (B, n, D) X'
            p = net.encoding.embed(x, g.positions) - x                   # (B, n, D) P
            x_norms.append(x.norm(dim=-1)[g.mask])
            p_norms.append(p.norm(dim=-1)[g.mask])
    return torch.cat(x_norms).mean().item(), torch.cat(p_norms).mean().item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", type=Path, help="a dataset's runs folder holding posrec-ENC/seed-1")
    ap.add_argument("samples", type=Path, help="the samples folder those runs trained on")
    ap.add_argument("encodings", nargs="+")
    ap.add_argument("--sessions", type=int, default=3000, help="test sessions drawn (seed 0)")
    args = ap.parse_args()
    missing = [e for e in args.encodings if not (args.runs / f"posrec-{e}" / "seed-1" / "checkpoint.pt").is_file()]
    if missing:
        raise SystemExit(f"no posrec-{missing[0]}/seed-1 run in {args.runs}: train it first, or leave it out")

    import numpy as np
    import torch

    from models import build_model
    from pipeline.batches import load_samples
    from pipeline.params import TrainParams, from_dict
    from pipeline.recommend import load_run
    from pipeline.train.setup import build_encoding
    torch.set_num_threads(1)
    test = load_samples(args.samples, "test", 200)
    test = test.take(np.sort(np.random.default_rng(0).choice(len(test), min(args.sessions, len(test)), replace=False)))
    print("| encoding | init ‖X'‖ | init ‖P‖ | init ratio | 1 epoch ‖X'‖ | 1 epoch ‖P‖ | 1 epoch ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for enc in args.encodings:
        run_dir = args.runs / f"posrec-{enc}" / "seed-1"
        trained = load_run(run_dir, device="cpu").net
        cfg = torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=True)["config"]
        tp = from_dict(TrainParams, dict(cfg["train"]), "train", run=True)
        torch.manual_seed(1)
        fresh = build_model(cfg["model"], n_items=cfg["n_items"], max_len=cfg["max_len"], train=tp,
                            options=cfg.get("options", {}),
                            encoding=build_encoding(tp.encoding, tp, cfg.get("encoding_options", {}))).eval()
        (a, b), (c, d) = norms(fresh, test), norms(trained, test)
        print(f"| {enc} | {a:.2f} | {b:.2f} | {b / a:.2f} | {c:.2f} | {d:.2f} | {d / c:.2f} |", flush=True)


if __name__ == "__main__":
    main()
