"""The evaluate stage's comparison figure: each configuration's test metric with its 95% CI over seeds.

One horizontal panel per metric (next-item: HR@10 and NDCG@10, x100 as the papers print them; CTR:
AUC and gAUC), one bar per configuration in study-grid order, the reference configuration (the one
the significance tests compare with) drawn in a second colour, the seeds' values as dots over each
bar and the mean printed at its end. Also a long CSV of the same numbers, which DVC renders with its
`bar_horizontal` template (`dvc plots show`). Headless matplotlib (Agg); fixed size, fonts and
metadata, so the same numbers give the same bytes.
"""
from __future__ import annotations

import csv
import io
from typing import Optional

PANELS = {"next_item": ("hr@10", "ndcg@10"), "ctr": ("auc", "gauc")}


def panel_metrics(task: str, rows: list[dict]) -> list[str]:
    """The metrics to draw: the task's pair, falling back to what the runs computed (other ks)."""
    have = {k for r in rows for k in r["metrics"]}
    wanted = [m for m in PANELS[task] if m in have]
    if wanted:
        return wanted
    family = ("hr@", "ndcg@") if task == "next_item" else ("auc",)
    return sorted(k for k in have if k.startswith(family))[:2]


def _scale(metric: str) -> float:
    """As in the report's tables: x100 for every metric but logloss."""
    from .report import _scale as scale
    return scale(metric)


def comparison_csv(rows: list[dict], metrics: list[str]) -> str:
    """One row per (configuration, metric); `bar` names the pair, and is what DVC's bar_horizontal plot takes
    as its y (dvc.yaml): with y = configuration it stacked each configuration's two metrics into one bar
    (Vega-Lite stacks bars of one category), HR@10 + NDCG@10 or AUC + gAUC, unlabelled."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["configuration", "metric", "mean", "ci_low", "ci_high", "seeds", "bar"])
    for m in metrics:
        for r in rows:
            stat = r["metrics"].get(m)
            if stat is None:
                continue
            half = stat["ci95"] or 0.0
            w.writerow([r["name"], m, repr(stat["mean"]), repr(stat["mean"] - half), repr(stat["mean"] + half),
                        len(r["seeds"]), f"{r['name']} {m}"])
    return buf.getvalue()


def comparison_png(rows: list[dict], metrics: list[str], title: str, reference: Optional[str],
                   per_seed: dict[str, dict[str, list[float]]]) -> bytes:
    """PNG bytes of the comparison figure; `per_seed[config][metric]` are the seeds' values (dots)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["name"] for r in rows]
    height = 1.2 + 0.42 * len(names)
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), height), squeeze=False, dpi=110)
    for ax, metric in zip(axes[0], metrics):
        s = _scale(metric)
        means = [s * r["metrics"][metric]["mean"] if metric in r["metrics"] else 0.0 for r in rows]
        halves = [s * (r["metrics"].get(metric, {}).get("ci95") or 0.0) for r in rows]
        colours = ["#d95f02" if n == reference else "#1b9e77" for n in names]
        y = list(range(len(names)))[::-1]                                 # first configuration on top
        ax.barh(y, means, xerr=halves, color=colours, alpha=0.85, capsize=4, height=0.6,
                error_kw={"elinewidth": 1.2, "ecolor": "#333333"})
        for yi, name in zip(y, names):
            vals = [s * v for v in per_seed.get(name, {}).get(metric, [])]
            ax.plot(vals, [yi] * len(vals), "o", color="#222222", markersize=3.5, zorder=3)
        ax.set_yticks(y)
        ax.set_yticklabels(names if ax is axes[0][0] else [""] * len(names), fontsize=9)
        unit = " (x100)" if s == 100.0 else ""
        ax.set_xlabel(f"test {metric.upper()}{unit}, mean and 95% CI over seeds", fontsize=9)
        lo = min(m - h for m, h in zip(means, halves)) if means else 0.0
        hi = max(m + h for m, h in zip(means, halves)) if means else 1.0
        if not metric.startswith("logloss"):       # a t-interval may pass a bounded metric's bounds
            lo, hi = max(lo, 0.0), min(hi, s * 1.0)
        pad = (hi - lo) * 0.25 or 0.05 * max(hi, 1e-9)
        floor = 0.5 * s if metric.startswith(("auc", "gauc")) and lo > 0.5 * s else 0.0   # AUC: chance is 0.5
        left, right = (max(floor, lo - pad) if metric.startswith("logloss") and lo > 0.3 else floor), hi + pad
        ax.set_xlim(left, right)
        for yi, mean, half in zip(y, means, halves):     # the value right of its interval, inside the axes
            at = min(mean + half, hi) + 0.015 * (right - left)
            ax.text(at, yi, f"{mean:.2f}" if s == 100.0 else f"{mean:.4f}", va="center", fontsize=8,
                    clip_on=True)
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(labelsize=8)
    ref = f"; orange = reference {reference}" if reference in names else ""
    fig.suptitle(f"{title}{ref}; dots = seeds", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()
