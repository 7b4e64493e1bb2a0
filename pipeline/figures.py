"""The evaluate stage's figures: each configuration's test metric with its 95% CI over seeds, and the
configurations' learning curves side by side.

One horizontal panel per metric (next-item: HR@10 and NDCG@10, x100 as the papers print them; CTR:
AUC and gAUC), one bar per configuration in study-grid order, the reference configuration (the one
the significance tests compare with) drawn in a second colour, the seeds' values as dots over each
bar and the mean printed at its end. Also a long CSV of the same numbers, which DVC renders with its
`bar_horizontal` template (`dvc plots show`). Headless matplotlib (Agg); fixed size, fonts and
metadata, so the same numbers give the same bytes.

The learning curves (`curves_png`) put every configuration of the dataset in one figure: train loss
and the valid metric that picks the best epoch, per epoch, one colour per configuration, a thin line
per seed, the mean over seeds bold (over the epochs every seed reached: early stopping ends seeds at
different epochs) and each seed's best epoch as a dot. A fitted baseline (POP, Item-KNN: no epochs)
is its valid level, dashed. dvclive's per-seed TSVs (`train --live`) stay the per-seed source for
`dvc plots show`, which draws one chart per file and cannot overlay the configurations of a study.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path
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
    several = len({r.get("protocol") for r in rows}) > 1      # full ranking beside sampled candidates: not one scale
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["configuration", "metric", "mean", "ci_low", "ci_high", "seeds", "bar", "protocol"])
    for m in metrics:
        for r in rows:
            stat = r["metrics"].get(m)
            if stat is None:
                continue
            half = stat["ci95"]
            if half is None:                      # one seed: no interval, not one of zero width (walk 43h #1)
                lo = hi = ""
            else:
                lo, hi = stat["mean"] - half, stat["mean"] + half
                if not m.startswith("logloss"):   # as the PNG's axis: a t-interval may pass a rate's bounds
                    lo, hi = max(lo, 0.0), min(hi, 1.0)
                lo, hi = repr(lo), repr(hi)
            # the bar's name as the PNG's: an unfinished configuration was an equal of the finished in DVC's chart
            notes = (["unfinished"] if r.get("unfinished") else []) + ([str(r.get("protocol"))] if several else [])
            w.writerow([r["name"], m, repr(stat["mean"]), lo, hi, len(r["seeds"]),
                        f"{r['name']} {m}" + (f" ({'; '.join(notes)})" if notes else ""), r.get("protocol") or ""])
    return buf.getvalue()


def axis_range(metric: str, means: list[float], halves: list[float]) -> tuple[float, float, float]:
    """(left, right, hi) of a comparison panel (values already scaled): a bounded metric's interval kept within
    its bounds (hi, where the values are printed), AUC from chance, and right of hi room for the longest bar's
    value, 0.16 of the bars' span: with close means a pad of their spread alone cut "53.81" to "5"."""
    s = _scale(metric)
    lo = min(m - h for m, h in zip(means, halves)) if means else 0.0
    hi = max(m + h for m, h in zip(means, halves)) if means else 1.0
    if not metric.startswith("logloss"):       # a t-interval may pass a bounded metric's bounds
        lo, hi = max(lo, 0.0), min(hi, s * 1.0)
    pad = (hi - lo) * 0.25 or 0.05 * max(hi, 1e-9)
    floor = 0.5 * s if metric.startswith(("auc", "gauc")) and lo > 0.5 * s else 0.0   # AUC: chance is 0.5
    left = max(floor, lo - pad) if metric.startswith("logloss") and lo > 0.3 else floor
    return left, hi + max(pad, 0.16 * (hi - left)), hi


def _bar_label(row: dict, rows: list[dict]) -> str:
    """A bar's name, with what sets it apart from the others' footing: unfinished (as report.md), its protocol
    when the rows span several (sampled candidates score on another scale than full ranking), its seeds
    when it has fewer than the figure's title lists."""
    notes = ["unfinished"] if row.get("unfinished") else []
    if len({r.get("protocol") for r in rows}) > 1:
        notes.append(str(row.get("protocol")))
    every = sorted({s for r in rows for s in r["seeds"]})
    if sorted(row["seeds"]) != every:
        notes.append(f"seed{'s' * (len(row['seeds']) != 1)} {', '.join(map(str, sorted(row['seeds'])))}")
    return f"{row['name']} ({'; '.join(notes)})" if notes else row["name"]


def _is_reference(name: str, reference: Optional[str], names: list[str]) -> bool:
    """Whether configuration `name` is a reference: the one named, or, for an encoding (`--baseline none`: each
    model against its own), each model's configuration with it."""
    return name == reference or (reference not in names and reference is not None
                                 and name.split("-")[1:] == [reference])


def pyplot():
    """matplotlib.pyplot on the Agg backend. Where matplotlib's own folder cannot be written (a read-only HOME), it
    printed two warning lines through a --quiet command and made a new cache folder per process (walk 45a #8): it
    then keeps its cache in the user's seqpe folder under the system's temporary folder."""
    import os
    import tempfile

    def writable(folder: str) -> bool:
        here = folder
        while not os.path.exists(here) and os.path.dirname(here) != here:
            here = os.path.dirname(here)
        return os.path.isdir(here) and os.access(here, os.W_OK)

    if "MPLCONFIGDIR" not in os.environ:
        home = os.path.expanduser("~")                  # its config and its cache folder (walk 45h #2)
        config = os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"), "matplotlib")
        cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"), "matplotlib")
        if not (writable(config) and writable(cache)):
            mine = Path(tempfile.gettempdir()) / f"seqpe-{os.getuid()}" / "matplotlib"
            try:
                mine.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.environ["MPLCONFIGDIR"] = str(mine)
            except OSError:
                pass
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def comparison_png(rows: list[dict], metrics: list[str], title: str, reference: Optional[str],
                   per_seed: dict[str, dict[str, list[float]]]) -> bytes:
    """PNG bytes of the comparison figure; `per_seed[config][metric]` are the seeds' values (dots)."""
    plt = pyplot()

    names = [r["name"] for r in rows]
    labels = [_bar_label(r, rows) for r in rows]
    height = 1.2 + 0.42 * len(names)
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), height), squeeze=False, dpi=110)
    for ax, metric in zip(axes[0], metrics):
        s = _scale(metric)
        means = [s * r["metrics"][metric]["mean"] if metric in r["metrics"] else 0.0 for r in rows]
        cis = [r["metrics"].get(metric, {}).get("ci95") for r in rows]   # None: one seed, no interval
        halves = [s * (ci or 0.0) for ci in cis]
        colours = ["#d95f02" if _is_reference(n, reference, names) else "#1b9e77" for n in names]
        y = list(range(len(names)))[::-1]                                 # first configuration on top
        ax.barh(y, means, color=colours, alpha=0.85, height=0.6)
        with_ci = [i for i, ci in enumerate(cis) if ci is not None]       # a zero-width bar read as certainty
        if with_ci:                                                       # (walk 43h #1)
            ax.errorbar([means[i] for i in with_ci], [y[i] for i in with_ci], xerr=[halves[i] for i in with_ci],
                        fmt="none", capsize=4, elinewidth=1.2, ecolor="#333333")
        for yi, name in zip(y, names):
            vals = [s * v for v in per_seed.get(name, {}).get(metric, [])]
            ax.plot(vals, [yi] * len(vals), "o", color="#222222", markersize=3.5, zorder=3)
        ax.set_yticks(y)
        ax.set_yticklabels(labels if ax is axes[0][0] else [""] * len(names), fontsize=9)
        unit = " (x100)" if s == 100.0 else ""
        ax.set_xlabel(f"test {metric.upper()}{unit}, " + ("mean and 95% CI over seeds" if with_ci else
                                                          "one seed each: no CI"), fontsize=9)
        left, right, hi = axis_range(metric, means, halves)
        ax.set_xlim(left, right)
        for yi, mean, half in zip(y, means, halves):     # the value right of its interval, inside the axes
            at = min(mean + half, hi) + 0.015 * (right - left)
            ax.text(at, yi, f"{mean:.2f}" if s == 100.0 else f"{mean:.4f}", va="center", fontsize=8,
                    clip_on=True)
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(labelsize=8)
    ref = f"; orange = reference {reference}" if reference in names else \
        f"; orange = each model's {reference}" if any(_is_reference(n, reference, names) for n in names) else ""
    fig.suptitle(f"{title}{ref}; dots = seeds", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def curve_metric(records: list[dict], fallback: str) -> str:
    """The valid metric the curves show: the one the runs selected their best epoch on (the most common
    when configurations differ), else `fallback` (the comparison's first panel)."""
    picked = [r.get("select_metric") for r in records if r.get("select_metric")]
    return max(sorted(set(picked)), key=picked.count) if picked else fallback


def curve_series(records: list[dict], names: list[str], metric: str) -> dict[str, dict]:
    """Per configuration, what `curves_png` draws, from the runs' `history` (valid values x100 where the
    tables scale them): "seeds" (per seed, its (epoch, loss) and (epoch, valid) points), "mean_loss" and
    "mean_valid" (the mean over seeds at each epoch every seed reached), "best" (each seed's (best
    epoch, valid)) and "fitted" (a baseline without epochs: its valid level averaged over seeds, else None)."""
    s = _scale(metric)
    by_name: dict[str, list[dict]] = {}
    for r in sorted(records, key=lambda r: r["seed"]):
        by_name.setdefault(r["name"], []).append(r)
    out = {}
    for name in names:
        seeds = by_name.get(name, [])
        hists = [r.get("history") or [] for r in seeds]
        trained = [[h for h in hist if h.get("epoch", 0) >= 1] for hist in hists]
        series = {"seeds": [], "mean_loss": [], "mean_valid": [], "best": [], "fitted": None, "n": len(seeds),
                  "unfinished": any(r.get("stopped") == "time_limit" for r in seeds)}
        if not any(trained):
            levels = [s * h["valid"][metric] for hist in hists for h in hist if metric in h.get("valid", {})]
            series["fitted"] = math.fsum(levels) / len(levels) if levels else None
            out[name] = series
            continue
        for hist, r in zip(trained, seeds):
            series["seeds"].append({
                "loss": [(h["epoch"], h["loss"]) for h in hist if h.get("loss") is not None],
                "valid": [(h["epoch"], s * h["valid"][metric]) for h in hist if metric in h.get("valid", {})]})
            series["best"] += [(h["epoch"], s * h["valid"][metric]) for h in hist
                               if h["epoch"] == r.get("best_epoch") and metric in h.get("valid", {})]
        for e in range(min(len(h) for h in trained)):
            at = [h[e] for h in trained]
            if len({h["epoch"] for h in at}) != 1:      # a seed with a gap in its epochs: no mean past it
                break
            if all(h.get("loss") is not None for h in at):
                series["mean_loss"].append((at[0]["epoch"], math.fsum(h["loss"] for h in at) / len(at)))
            if all(metric in h.get("valid", {}) for h in at):
                series["mean_valid"].append((at[0]["epoch"], s * math.fsum(h["valid"][metric] for h in at) / len(at)))
        out[name] = series
    return out


def curves_png(records: list[dict], names: list[str], metric: str, title: str,
               protocols: Optional[dict[str, str]] = None) -> bytes:
    """PNG bytes of the learning curves of `names` (in that order, see `curve_series`). `protocols` (name ->
    protocol): where they are several, each legend entry names its own (sampled candidates' valid values sit
    on another scale than full ranking's)."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    series = curve_series(records, names, metric)
    colours = plt.get_cmap("tab10" if len(names) <= 10 else "tab20").colors
    legend_rows = -(-len(names) // 4)
    height = 4.0 + 0.22 * legend_rows
    fig, (loss_ax, valid_ax) = plt.subplots(1, 2, figsize=(11.0, height), dpi=110)
    handles = []
    several = len(set((protocols or {}).values())) > 1
    drawn = [name for name in names if series[name]["fitted"] is None]          # the configurations with curves
    for i, name in enumerate(names):
        colour, style = colours[i % len(colours)], ("-", "--", ":", "-.")[(i // len(colours)) % 4]
        # each mean line narrower than the ones drawn before it: configurations that train alike (rope on top
        # of none) still show every colour as a rim, where one line hid the other (walk 38c #2)
        width = 1.5 + 5.0 * (len(drawn) - 1 - drawn.index(name)) / max(len(drawn) - 1, 1) if name in drawn else 1.5
        c = series[name]
        protocol = f"; {protocols.get(name)}" if several else ""
        if c["fitted"] is not None:                   # fitted: its valid level over the whole axis
            handles.append(valid_ax.axhline(c["fitted"], color=colour, ls="--", lw=1.2,
                                            label=f"{name} (fitted{protocol})"))
            continue
        for seed in c["seeds"]:
            for ax, pts in ((loss_ax, seed["loss"]), (valid_ax, seed["valid"])):
                if pts:
                    ax.plot(*zip(*pts), color=colour, lw=0.7, alpha=0.35, ls=style)
        if c["best"]:              # above every mean line: the first's rim (6.5 pt) hid its dots (walk 43h #2)
            valid_ax.plot(*zip(*c["best"]), "o", color=colour, markersize=3.5, markeredgecolor="#222222",
                          markeredgewidth=0.6, zorder=4)
        label = f"{name} ({c['n']} seed{'s' if c['n'] != 1 else ''}{', unfinished' if c['unfinished'] else ''}{protocol})"
        line = None
        for ax, pts in ((loss_ax, c["mean_loss"]), (valid_ax, c["mean_valid"])):
            if pts:
                line, = ax.plot(*zip(*pts), color=colour, lw=width, ls=style, label=label,
                                marker="o" if len(pts) == 1 else None, markersize=4)   # one epoch: a point
        if line is not None:
            handles.append(line)
    unit = " (x100)" if _scale(metric) == 100.0 else ""
    last = max([e for c in series.values() for seed in c["seeds"] for e, _ in seed["loss"] + seed["valid"]] or [1])
    loss_ax.set(xlabel="epoch", ylabel="train loss")
    valid_ax.set(xlabel="epoch", ylabel=f"valid {metric.upper()}{unit}")
    for ax in (loss_ax, valid_ax):
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        ax.set_xlim(0.5, last + 0.5)
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=min(4, len(handles)), fontsize=8, frameon=False)
    fig.suptitle(f"{title}; mean over seeds bold, seeds thin, dots = each seed's best epoch", fontsize=10)
    fig.tight_layout(rect=(0, (0.22 * legend_rows + 0.15) / height, 1, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()
