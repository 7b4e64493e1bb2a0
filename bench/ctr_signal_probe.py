"""Does the embedded CTR data reward positions? A probe, not a seqpe backbone (not a test).

    .venv/bin/python bench/ctr_signal_probe.py data/samples/sample_ctr [--epochs 4]

Trains a toy target-attention model twice on one CPU thread, with the same seed: once without
positions (a set model: attention weights depend on the target and each behaviour only) and once
with a learned embedding per history slot added to the attention keys. Prints the valid AUC after
every epoch and the seconds each epoch took. On the default `sample_ctr` / `sample_kuai` (see
pipeline/datasets/ctr_sample.py for the planted rule) the first should stay near 0.5 and the
second should climb towards the rule's ceiling: rule steps separate fully and fresh steps are coin
flips, so the best AUC is p + (1 - p) (p + (1 - p) / 2) = 0.955 for p = p_rule = 0.7.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models.ctr.base import CTREmbedding  # noqa: E402
from pipeline.ctr_batches import ctr_batches, ctr_schema, load_ctr  # noqa: E402
from pipeline.io import read_json  # noqa: E402


class Probe(nn.Module):
    def __init__(self, schema, positions: bool, dim: int = 16):
        super().__init__()
        self.emb = CTREmbedding(schema, dim)
        d = self.emb.dim
        self.pos = nn.Parameter(torch.zeros(schema.max_len, d)) if positions else None   # (L, D)
        self.att = nn.Sequential(nn.Linear(4 * d, 32), nn.ReLU(), nn.Linear(32, 1))
        self.mlp = nn.Sequential(nn.Linear(2 * d + self.emb.side_dim, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, b):
        t, h = self.emb.target(b), self.emb.history(b)                 # (B, D), (B, L, D)
        k = h if self.pos is None else h + self.pos                    # (B, L, D)
        q = t[:, None].expand_as(k)                                    # (B, L, D)
        w = self.att(torch.cat([q, k, q * k, q - k], -1)).squeeze(-1) * b.mask   # (B, L)
        pooled = (w[..., None] * h).sum(1)                             # (B, D)
        return self.mlp(torch.cat([t, pooled, self.emb.side(b)], -1)).squeeze(-1)  # (B,)


def auc(score: np.ndarray, label: np.ndarray) -> float:
    ranks = pl.Series(score).rank("average").to_numpy()
    y = label.astype(bool)
    pos, neg = y.sum(), (~y).sum()
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("samples", type=Path)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--max-len", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(1)
    schema = ctr_schema(read_json(args.samples / "manifest.json"), args.max_len)
    train, valid = load_ctr(args.samples, "train", args.max_len), load_ctr(args.samples, "valid", args.max_len)
    for positions in (False, True):
        torch.manual_seed(0)
        model, gen = Probe(schema, positions), torch.Generator().manual_seed(0)
        opt = torch.optim.Adam(model.parameters(), 1e-3)
        for epoch in range(1, args.epochs + 1):
            t0 = time.perf_counter()
            model.train()
            for b in ctr_batches(train, 256, shuffle=True, generator=gen):
                loss = nn.functional.binary_cross_entropy_with_logits(model(b), b.label)
                opt.zero_grad()
                loss.backward()
                opt.step()
            model.eval()
            with torch.no_grad():
                score = torch.cat([model(b) for b in ctr_batches(valid, 1024)]).numpy()
            print(f"{'positions' if positions else 'none':9s} epoch {epoch}  {time.perf_counter() - t0:4.1f} s  "
                  f"valid AUC {auc(score, valid.label):.4f}", flush=True)


if __name__ == "__main__":
    main()
