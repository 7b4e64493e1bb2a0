"""Is a configuration different from the baseline configuration? Paired tests over seeds and samples.

The PE study (004) reports mean, std and a 95% CI over seeds because single runs mislead; a
difference between two configurations needs its own test, paired wherever the data pair up:

over seeds (seeds matched by number, only the seeds both configurations have; metrics, whatever
  train.select_metric is: next-item ndcg@10 and mrr@10, or @K of the cut-off every run has, CTR auc):
    d_s = metric(config, seed s) - metric(baseline, seed s)
    paired t-test (scipy.stats.ttest_rel), effect size Cohen's d_z = mean(d) / sd(d) (ddof 1),
    95% CI of mean(d) = mean(d) +- t_{0.975, n-1} sd(d) / sqrt(n)   (scipy.stats.t)
  With fewer than 3 common seeds the test cannot conclude anything: p, d_z and the CI are left out;
  with the same d_s in every seed (models that do not depend on the seed) p and d_z are, and the verdict
  says so.
over test samples (rows of the one test split, in its file order, from each seed's
  `test_samples.parquet`; each configuration's seeds are averaged first, over the seeds the two
  share (every seed of each only when they share none, noted), so each sample is one pair):
    next-item: x_i = expected reciprocal rank under the tie rule (REFERENCE.md §5) from (g, t):
               RR = mean over r = g+1..g+t+1 of 1/r = (psi(g+t+2) - psi(g+1)) / (t+1)  (psi: digamma)
    CTR:       x_i = per-sample log loss -log sigmoid(+-logit)  (labels from the samples folder)
    Wilcoxon signed-rank on d_i = x_i(config) - x_i(baseline) (scipy.stats.wilcoxon, zero
    differences dropped), effect size the matched-pairs rank-biserial correlation
    r = (W+ - W-) / (W+ + W-) over the ranks of |d_i| (Kerby 2014);
    paired bootstrap 95% CI (scipy.stats.bootstrap, percentile method, 2000 resamples, seed 0) of
    mean(d) (next-item) or of AUC(config) - AUC(baseline) (CTR: rows resampled jointly, each
    configuration's AUC the mean over its seeds). Bootstrap resamples at most MAX_BOOTSTRAP_ROWS
    (100,000) rows (a seeded random subset, said in the result): KuaiVideo's millions of test rows x 2000
    resamples would not fit. BCa is not used: its jackknife costs n^2.

The resampled AUC is computed here from resampling weights (a row drawn k times counts k times)
with one sort per score vector, instead of re-sorting every resample; it equals the AUC of the
resampled rows (100,000 rows, 3 + 3 seeds, 2000 resamples: about 20 s on a shared 2-core CPU).
Torch-free: report code runs without a GPU stack.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import numpy as np

from .errors import DataError
from .lazy import lazy

special, stats = lazy("scipy.special"), lazy("scipy.stats")   # imported where a test runs (walk 45a #2)

pl = lazy("polars")

SAMPLES_FILE = "test_samples.parquet"          # <run>/seed-N/test_samples.parquet, written by the trainer
NEXT_ITEM_COLUMNS = {"greater": "Int32", "ties": "Int32"}
CTR_COLUMNS = {"logit": "Float32"}
SEED_METRICS = {"next-item": ("ndcg@10", "mrr@10"), "ctr": ("auc",)}
SAMPLE_QUANTITY = {"next-item": "rr", "ctr": "logloss"}
BOOTSTRAP_STATISTIC = {"next-item": "mean rr", "ctr": "auc"}
ALPHA = 0.05
MIN_SEEDS = 3
N_RESAMPLES = 2000
MAX_BOOTSTRAP_ROWS = 100_000
BOOTSTRAP_SEED = 0
_BATCH_ELEMENTS = 4_000_000                    # resampled values held at once by the bootstrap


# --------------------------------------------------------------------------- per-sample files

def write_test_samples(path: str | Path, *, greater=None, ties=None, logit=None) -> None:
    """Write one seed's per-sample test results atomically: next-item (greater, ties) or CTR logit."""
    from .io import write_parquet
    if logit is not None:
        df = pl.DataFrame({"logit": np.asarray(logit, dtype=np.float32)})
    else:
        df = pl.DataFrame({"greater": np.asarray(greater, dtype=np.int32), "ties": np.asarray(ties, dtype=np.int32)})
    write_parquet(path, df)


def read_test_samples(path: str | Path, record: Optional[dict] = None) -> dict[str, np.ndarray]:
    """{"greater", "ties"} (int64) of a next-item run, or {"logit"} (float64) of a CTR run. `record`: its run.json,
    whose sha256 (runs since session 39) a file of other bytes fails, as `seqpe train` refuses to reuse it (walk
    39d #1: an edited file went into the per-sample tests without a word)."""
    path = Path(path)
    fix = "re-run `seqpe train` for that run (the trainer writes it next to run.json)"
    if record is not None and path.is_file():
        from .train.runs import check_recorded
        check_recorded(path.parent, record, path.name)
    try:
        df = pl.read_parquet(path, glob=False)
    except (OSError, pl.exceptions.ComputeError) as e:
        raise DataError(f"{path} cannot be read as Parquet ({str(e).splitlines()[0]})", fix) from None
    schema = {name: str(dtype) for name, dtype in df.schema.items()}
    for columns in (NEXT_ITEM_COLUMNS, CTR_COLUMNS):
        if all(schema.get(c) == t for c, t in columns.items()):
            if any(df[c].null_count() for c in columns):
                raise DataError(f"{path} has missing values", fix)
            kind = np.int64 if columns is NEXT_ITEM_COLUMNS else np.float64
            return {c: df[c].to_numpy().astype(kind) for c in columns}
    want = " or ".join(", ".join(f"{c} {t}" for c, t in cols.items()) for cols in (NEXT_ITEM_COLUMNS, CTR_COLUMNS))
    raise DataError(f"{path} has columns {schema}, expected {want}", fix)


def read_test_labels(samples_dir: str | Path) -> np.ndarray:
    """The `label` column of a CTR samples folder's test split, in file order (S,) int64."""
    from .io import absent, scan_split
    if not Path(samples_dir).is_dir():
        raise DataError(f"samples folder {samples_dir} {absent(samples_dir)}",
                        "pass the samples folder the CTR runs were trained on, e.g. data/samples/DATASET")
    from .io import MANIFEST, _near_miss, read_manifest
    if (Path(samples_dir) / MANIFEST).is_file():
        m = read_manifest(samples_dir)
        if m.get("protocol") != "ctr":             # was "has no label column"
            raise DataError(f"{samples_dir} holds {m.get('dataset')}'s {m.get('protocol')} {m.get('kind')}, and "
                            "--samples gives the test labels of CTR runs (next-item runs need none)",
                            "drop --samples, or pass the CTR dataset's samples folder, e.g. data/samples/sample_ctr")
        from .io import manifest_kind
        if manifest_kind(m) != "samples":          # sessions: the same labels, but not the folder the runs read
            raise DataError(f"{samples_dir} holds {m.get('dataset')}'s {manifest_kind(m) or 'data'}, and --samples "
                            "reads the samples folder the CTR runs were trained on",
                            f"pass data/samples/{m.get('dataset')} (written by `seqpe augment {m.get('dataset')}`)")
    elif not any((Path(samples_dir) / "test").glob("part-*.parquet")):
        # e.g. one level off (data/samples): the scan below would say "no shards in ...: re-run", the wrong fix
        raise DataError(f"no {MANIFEST} in {samples_dir}: it is not a samples folder seqpe prepared",
                        _near_miss(Path(samples_dir)) or "pass the samples folder the CTR runs were trained on, "
                                                         "e.g. data/samples/DATASET")
    try:
        df = scan_split(samples_dir, "test").select("label").collect()
    except pl.exceptions.ColumnNotFoundError:
        raise DataError(f"the test split of {samples_dir} has no label column",
                        "pass the samples folder of the CTR dataset the runs were trained on") from None
    return df["label"].to_numpy().astype(np.int64)


def expected_rr(greater: np.ndarray, ties: np.ndarray) -> np.ndarray:
    """Expected reciprocal rank under the tie rule, (S,) float64; exactly 1/(g+1) when t = 0."""
    g, t = np.asarray(greater, dtype=np.float64), np.asarray(ties, dtype=np.float64)
    run = (special.digamma(g + t + 2) - special.digamma(g + 1)) / (t + 1)   # (H(g+t+1) - H(g)) / (t+1)
    return np.where(t == 0, 1.0 / (g + 1), run)


def sample_logloss(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """-log sigmoid(z), z = logit (label 1) or -logit (label 0), (S,) float64, stable."""
    z = np.asarray(logits, dtype=np.float64) * (2 * np.asarray(labels, dtype=np.float64) - 1)
    return np.logaddexp(0.0, -z)


# --------------------------------------------------------------------------- tests

def _finite(x) -> Optional[float]:
    x = float(x)
    return x if math.isfinite(x) else None


def seed_test(base: dict[int, float], other: dict[int, float]) -> dict:
    """Paired t-test over the seeds both have. Keys: seeds, n, diff, ci_lo, ci_hi, t, p, dz
    (all but seeds/n/diff None with fewer than MIN_SEEDS common seeds or identical differences)."""
    seeds = sorted(set(base) & set(other))
    out = {"seeds": seeds, "n": len(seeds), "diff": None, "ci_lo": None, "ci_hi": None, "t": None, "p": None,
           "dz": None}
    if not seeds:
        return out
    a = np.array([other[s] for s in seeds], dtype=np.float64)
    b = np.array([base[s] for s in seeds], dtype=np.float64)
    d = a - b
    out["diff"] = float(d.mean())
    if len(seeds) < MIN_SEEDS:
        return out
    sd = float(d.std(ddof=1))
    half = float(stats.t.ppf(1 - ALPHA / 2, len(d) - 1)) * sd / math.sqrt(len(d))
    out.update(ci_lo=out["diff"] - half, ci_hi=out["diff"] + half)
    if sd > 1e-12 * float(np.abs(np.r_[a, b]).max()):          # else the diffs agree up to rounding: no test
        res = stats.ttest_rel(a, b)
        out.update(t=_finite(res.statistic), p=_finite(res.pvalue), dz=out["diff"] / sd)
    return out


def rank_biserial(d: np.ndarray) -> Optional[float]:
    """Matched-pairs rank-biserial correlation of differences d (zeros dropped), in [-1, 1]."""
    d = np.asarray(d, dtype=np.float64)
    d = d[d != 0]
    if d.size == 0:
        return None
    ranks = stats.rankdata(np.abs(d))
    return float((ranks[d > 0].sum() - ranks[d < 0].sum()) / ranks.sum())


def wilcoxon_test(base: np.ndarray, other: np.ndarray) -> dict:
    """Wilcoxon signed-rank on other - base (zeros dropped): {"n", "diff", "p", "r"}. The differences are ranked
    at 12 decimals: reciprocal ranks give equal differences one rounding step apart (1/2 - 1/3 and 1/3 - 1/6),
    which were ranked apart, and a zero as -1.1e-16, which was not dropped (walk 45g #2: p 3.99e-07 where exact
    arithmetic gives 4.04e-07)."""
    d = np.asarray(other, dtype=np.float64) - np.asarray(base, dtype=np.float64)
    ranked = np.round(d, 12)
    out = {"n": int(d.size), "diff": float(d.mean()) if d.size else None, "p": None, "r": rank_biserial(ranked)}
    if np.count_nonzero(ranked):
        out["p"] = _finite(stats.wilcoxon(ranked, zero_method="wilcox").pvalue)
    return out


def _subset(n: int, max_rows: int, seed: int) -> Optional[np.ndarray]:
    """Sorted random rows to bootstrap on when n > max_rows (seeded), else None (all rows)."""
    if n <= max_rows:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, size=max_rows, replace=False))


def _bootstrap(data: tuple, statistic, n: int, n_resamples: int,
               seed: int) -> tuple[Optional[float], Optional[float]]:
    """The percentile interval, or (None, None) where resamples left the statistic undefined (an AUC of a resample
    without a positive: a test split with a handful of them), which scipy gave as NaN, printed as bare NaN in
    `report --json` with a warning about another method on stderr (walk 36b)."""
    import warnings
    if n < 2:                          # scipy: "needs at least two observations" (a one-row test split; walk 40c #6)
        return None, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)            # scipy's DegenerateDataWarning and 0/0
        res = stats.bootstrap(data, statistic, n_resamples=n_resamples, paired=True, vectorized=True, axis=-1,
                              method="percentile", batch=max(1, _BATCH_ELEMENTS // max(n, 1)),
                              rng=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return (lo, hi) if np.isfinite(lo) and np.isfinite(hi) else (None, None)


def bootstrap_mean_diff(base: np.ndarray, other: np.ndarray, *, n_resamples: int = N_RESAMPLES,
                        max_rows: int = MAX_BOOTSTRAP_ROWS, seed: int = BOOTSTRAP_SEED) -> dict:
    """Paired bootstrap 95% CI of mean(other - base): {"diff", "lo", "hi", "rows", "rows_total"}."""
    rows = _subset(len(base), max_rows, seed)
    a, b = (np.asarray(x, dtype=np.float64) for x in (other, base))
    if rows is not None:
        a, b = a[rows], b[rows]
    lo, hi = _bootstrap((a, b), lambda x, y, axis: np.mean(x - y, axis=axis), len(a), n_resamples, seed)
    return {"diff": float(np.mean(a - b)), "lo": lo, "hi": hi, "rows": len(a), "rows_total": len(base)}


class _WeightedAUC:
    """AUC of one score vector under row weights (B, S) (bootstrap counts). One sort up front:
    for each positive p, lt/le = how many negatives score below / not above it; per resample,
    C = cumulative negative weight in score order and 2U = sum_p w_p (C[lt_p] + C[le_p])."""

    def __init__(self, labels: np.ndarray, scores: np.ndarray):
        pos = labels.astype(bool)
        self.neg = np.flatnonzero(~pos)[np.argsort(scores[~pos], kind="stable")]   # negatives by score
        self.pos = np.flatnonzero(pos)
        neg_scores = scores[self.neg]
        self.lt = np.searchsorted(neg_scores, scores[self.pos], side="left")    # (P,)
        self.le = np.searchsorted(neg_scores, scores[self.pos], side="right")   # (P,)

    def __call__(self, weights: np.ndarray) -> np.ndarray:
        B = weights.shape[0]
        C = np.zeros((B, self.neg.size + 1))                            # (B, Nn+1) float64
        np.cumsum(weights[:, self.neg], axis=1, out=C[:, 1:])
        wp = weights[:, self.pos]                                       # (B, P)
        u2 = (wp * (C[:, self.lt] + C[:, self.le])).sum(1)              # (B,)
        return u2 / (2.0 * wp.sum(1) * C[:, -1])


def bootstrap_auc_diff(labels: np.ndarray, base_logits: list[np.ndarray], other_logits: list[np.ndarray], *,
                       n_resamples: int = N_RESAMPLES, max_rows: int = MAX_BOOTSTRAP_ROWS,
                       seed: int = BOOTSTRAP_SEED) -> dict:
    """Paired bootstrap 95% CI of mean-over-seeds AUC(other) - AUC(base), rows resampled jointly."""
    labels = np.asarray(labels)
    rows = _subset(len(labels), max_rows, seed)
    pick = (lambda x: x) if rows is None else (lambda x: x[rows])
    y = pick(labels)
    base = [_WeightedAUC(y, pick(np.asarray(x, dtype=np.float64))) for x in base_logits]
    other = [_WeightedAUC(y, pick(np.asarray(x, dtype=np.float64))) for x in other_logits]
    n = len(y)

    def statistic(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        idx = np.atleast_2d(idx)                                        # (B, n) resampled row indices
        flat = (idx + n * np.arange(idx.shape[0])[:, None]).ravel()
        w = np.bincount(flat, minlength=idx.size).reshape(idx.shape).astype(np.float32)  # (B, n) counts
        return np.mean([f(w) for f in other], axis=0) - np.mean([f(w) for f in base], axis=0)

    diff = float(statistic(np.arange(n)[None, :])[0])
    lo, hi = _bootstrap((np.arange(n),), statistic, n, n_resamples, seed)
    return {"diff": diff, "lo": lo, "hi": hi, "rows": n, "rows_total": len(labels)}


# --------------------------------------------------------------------------- verdict

def verdict(seed_tests: dict[str, dict], sample: Optional[dict], task: str, notes: list[str] = ()) -> str:
    """One sentence: which tests reject equality at ALPHA and in which direction."""
    lower_better = {"logloss"}
    parts = list(notes)
    n = min((t["n"] for t in seed_tests.values()), default=0)
    if n < MIN_SEEDS:
        parts.append(f"{n} common seed{'s' if n != 1 else ''}: the seed t-test cannot conclude anything "
                     f"(needs >= {MIN_SEEDS})")
    # every common seed the same difference, not zero: models that do not depend on the seed (fitted baselines such
    # as POP / S-POP); sd 0 leaves the t-test undefined, and "other seeds" would differ the same way (walk 36b)
    same = n >= MIN_SEEDS and bool(seed_tests) and all(t["p"] is None and t.get("ci_lo") is not None  # (seed_test:
                                                       for t in seed_tests.values())              # sd ~ 0)
    if same and any(t.get("diff") for t in seed_tests.values()):
        parts.append("every seed differs by the same amount (models that do not depend on the seed): no seed t-test")
    elif same:     # walk 42c #1: ALiBi's one-head slope 2^-8 left every test metric as `none`'s, blank cells unexplained
        parts.append("the same test metrics on every common seed: no seed t-test (does the setting change the model "
                     "at all?)")
    rejects = []
    for metric, t in seed_tests.items():
        if t["p"] is not None and t["p"] < ALPHA:
            rejects.append((f"t-test {metric}", t["diff"] > 0))
    if sample is not None:
        quantity = SAMPLE_QUANTITY[task]
        if sample["p"] is not None and sample["p"] < ALPHA:
            # the direction the test itself found: the sign of its rank statistic (rank-biserial r), not of
            # the mean difference, which a few large differences can point the other way
            better = (sample["r"] < 0) if quantity in lower_better else (sample["r"] > 0)
            rejects.append((f"Wilcoxon {quantity}", better))
        boot = sample["bootstrap"]
        if boot is not None and boot["lo"] is not None and (boot["lo"] > 0 or boot["hi"] < 0):
            rejects.append((f"bootstrap {BOOTSTRAP_STATISTIC[task]}", boot["lo"] > 0))
    if rejects:
        said = [f"{name} ({'better' if better else 'worse'})" for name, better in rejects]
        parts.append(f"rejects equality at {ALPHA}: " + ", ".join(said))
        if not any(name.startswith("t-test") for name, _ in rejects) and not same:
            # per-sample tests take the test rows as the unit with the seeds held fixed: they find that these
            # trained models rank differently, which seed-to-seed noise alone can do
            ps = ", ".join(f"{m} p {t['p']:.2g}" for m, t in seed_tests.items() if t["p"] is not None)
            parts.append(f"the seed t-test does not ({ps}): the per-sample tests say these trained models differ, "
                         "not that other seeds would" if ps and n >= MIN_SEEDS else
                         "per-sample tests only: they say these trained models differ, not that other seeds would")
    else:
        parts.append(f"no test rejects equality at {ALPHA}")
    return "; ".join(parts)


# --------------------------------------------------------------------------- one comparison

def task_of(records: list[dict]) -> str:
    """The runs' task: "ctr" when they report AUC, else "next-item"."""
    return "ctr" if any("auc" in r["test"] for r in records) else "next-item"


def _per_sample(records: list[dict], task: str, notes: list[str], name: str,
                say_missing: bool = True) -> Optional[dict[int, dict]]:
    """Each seed's test_samples.parquet by seed, or None (with a note) when no seed has one; `say_missing`:
    note the seeds without one (the baseline's are noted per row, where they matter)."""
    found, missing = [], []
    for rec in sorted(records, key=lambda r: r["seed"]):
        path = Path(rec["_path"]).parent / SAMPLES_FILE
        (found if path.is_file() else missing).append((rec["seed"], path))
    if not found:
        notes.append(f"{name}: no {SAMPLES_FILE}, per-sample tests skipped")
        return None
    if missing and say_missing:
        notes.append(f"{name}: seed(s) {', '.join(str(s) for s, _ in missing)} without {SAMPLES_FILE} left out "
                     "of the per-sample tests")
    by_seed = {rec["seed"]: rec for rec in records}
    out = {seed: read_test_samples(path, by_seed.get(seed)) for seed, path in found}
    want = set(NEXT_ITEM_COLUMNS if task == "next-item" else CTR_COLUMNS)
    sizes = {len(next(iter(x.values()))) for x in out.values()}
    if any(set(x) != want for x in out.values()) or len(sizes) != 1:
        raise DataError(f"the {SAMPLES_FILE} files of {name} differ in kind or row count ({sorted(sizes)} rows)",
                        "they must all come from one test split: re-run `seqpe train` for the odd ones")
    return out


def _check_labels(records: list[dict], samples: Optional[dict[int, dict]], labels: np.ndarray, name: str) -> None:
    """A DataError unless `labels` are the test labels each seed of `name` was scored on: the log loss
    recomputed from them and the seed's logits must be the one its run.json recorded. Any CTR samples
    folder with as many test rows used to pass, and the per-sample tests then changed (a sign flipped)."""
    if not samples:
        return
    for rec in records:
        per = samples.get(rec["seed"])
        recorded = rec["test"].get("logloss")
        if per is None or recorded is None or len(per["logit"]) != len(labels):
            continue                                    # the row-count check names the latter
        mine = float(np.mean(sample_logloss(per["logit"], labels)))
        auc, auc_recorded = None, rec["test"].get("auc")
        if auc_recorded is not None and 0 < labels.sum() < len(labels):   # rank-based: tells labels apart even
            logits = np.asarray(per["logit"], dtype=np.float64)           # for a nearly constant model
            auc = float(_WeightedAUC(labels, logits)(np.ones((1, len(labels))))[0])
        if not math.isclose(mine, recorded, rel_tol=1e-5, abs_tol=1e-7) or \
                (auc is not None and not math.isclose(auc, auc_recorded, rel_tol=1e-6, abs_tol=1e-9)):
            got = f"log loss {mine:.6f}" + (f", AUC {auc:.6f}" if auc is not None else "")
            was = f"{recorded:.6f}" + (f", {auc_recorded:.6f}" if auc is not None else "")
            raise DataError(f"the test labels passed with --samples are not the ones {name} seed {rec['seed']} was "
                            f"scored on ({got} from them; its run.json records {was})",
                            "pass the samples folder these runs were trained on")


def _paired_seeds(base: dict[int, dict], other: dict[int, dict], notes: list[str], name: str,
                  baseline: str) -> tuple[list[dict], list[dict]]:
    """The seeds the per-sample tests average: those both configurations have (a seed fixes the data order,
    the negatives and the initialisation alike, so unpaired seeds would compare seed luck, not
    configurations); every seed of each when they share none, with a note."""
    common = sorted(set(base) & set(other))
    if not common:
        notes.append(f"{name} and {baseline} share no seed with per-sample files: per-sample tests average "
                     "each configuration's own seeds")
        return [base[s] for s in sorted(base)], [other[s] for s in sorted(other)]
    if len(common) < max(len(base), len(other)):
        notes.append(f"per-sample tests on the common seed(s) {', '.join(map(str, common))}")
    return [base[s] for s in common], [other[s] for s in common]


def seed_metrics(task: str, records: list[dict]) -> tuple[str, ...]:
    """The metrics of the seed test: SEED_METRICS, or for next-item runs trained with evaluate.ks
    without 10, NDCG and MRR at the largest cut-off every run has (it used to skip the test and say
    "0 common seeds")."""
    wanted = SEED_METRICS[task]
    if task != "next-item" or all(m in r["test"] for r in records for m in wanted):
        return wanted
    cuts = None
    for r in records:
        have = {int(k.split("@")[1]) for k in r["test"] if k.startswith("ndcg@")} & \
               {int(k.split("@")[1]) for k in r["test"] if k.startswith("mrr@")}
        cuts = have if cuts is None else cuts & have
    return (f"ndcg@{max(cuts)}", f"mrr@{max(cuts)}") if cuts else wanted


def compare(configs: dict[str, list[dict]], baseline: str, labels: Optional[np.ndarray] = None, *,
            n_resamples: int = N_RESAMPLES, max_rows: int = MAX_BOOTSTRAP_ROWS) -> list[dict]:
    """Compare every configuration of one dataset with `baseline` (a key of `configs`).

    configs: configuration name -> its seeds' run.json records (with "_path", as report.find_runs
    gives them). labels: the test split's labels, for CTR per-sample tests. Returns one dict per
    other configuration: name, baseline, task, seed_tests {metric: seed_test(...)}, sample
    ({"quantity", "n", "diff", "p", "r", "bootstrap"} or None), notes, verdict.
    """
    base_recs = configs[baseline]
    task = task_of(base_recs)
    base_notes: list[str] = []
    base_samples = _per_sample(base_recs, task, base_notes, baseline, say_missing=False)
    base_missing = [] if base_samples is None else sorted(r["seed"] for r in base_recs if r["seed"] not in base_samples)
    loaded: dict[str, tuple] = {}                   # name -> (its per-sample files, their notes): read once
    if base_samples is not None:
        for name, recs in configs.items():
            if name != baseline:
                own: list[str] = []
                loaded[name] = (_per_sample(recs, task, own, name), own)
    if task == "ctr" and labels is not None:
        for name, recs in configs.items():
            _check_labels(recs, base_samples if name == baseline else loaded.get(name, (None,))[0], labels, name)
    out = []
    for name in sorted(configs):
        if name == baseline:
            continue
        recs = configs[name]
        notes = list(base_notes)
        seed_tests = {}
        for metric in seed_metrics(task, recs + base_recs):
            if all(metric in r["test"] for r in recs + base_recs):
                seed_tests[metric] = seed_test({r["seed"]: r["test"][metric] for r in base_recs},
                                               {r["seed"]: r["test"][metric] for r in recs})
        if not seed_tests:
            notes.append(f"no {' / '.join(SEED_METRICS[task])} (or another cut-off of both) in every run: "
                         "seed test skipped")
        gone = [seed for seed in base_missing if seed in {r["seed"] for r in recs}]   # else no pair is lost
        if gone:
            notes.append(f"{baseline}: seed(s) {', '.join(map(str, gone))} without {SAMPLES_FILE} left out of "
                         "the per-sample tests")
        samples, own = loaded.get(name, (None, []))
        notes += own
        sample = None
        if samples is not None:
            base_seeds, other_seeds = _paired_seeds(base_samples, samples, notes, name, baseline)
            sample = _sample_tests(task, base_seeds, other_seeds, labels, notes, name, baseline,
                                   n_resamples=n_resamples, max_rows=max_rows)
        out.append({"name": name, "baseline": baseline, "task": task, "seed_tests": seed_tests, "sample": sample,
                    "notes": notes, "verdict": verdict(seed_tests, sample, task, notes)})
    return out


def _sample_tests(task: str, base: list[dict], other: list[dict], labels: Optional[np.ndarray], notes: list[str],
                  name: str, baseline: str, **boot) -> Optional[dict]:
    n_base, n_other = (len(next(iter(x[0].values()))) for x in (base, other))
    if n_base != n_other:
        raise DataError(f"{name} has {n_other} test samples and {baseline} {n_base}",
                        "compare runs of the same test split (same dataset and preprocessing)")
    if task == "next-item":
        x_base = np.mean([expected_rr(s["greater"], s["ties"]) for s in base], axis=0)
        x_other = np.mean([expected_rr(s["greater"], s["ties"]) for s in other], axis=0)
        boot_result = bootstrap_mean_diff(x_base, x_other, **boot)
    else:
        if labels is None:
            notes.append("CTR per-sample tests need the test labels: pass the samples folder (--samples)")
            return None
        if len(labels) != n_base:
            raise DataError(f"the test labels have {len(labels)} rows, the runs of {baseline} {n_base}",
                            "pass the samples folder these runs were trained on; with CTR runs of several "
                            "datasets, report one at a time (`seqpe report data/runs/DATASET --samples "
                            "data/samples/DATASET`)")
        x_base = np.mean([sample_logloss(s["logit"], labels) for s in base], axis=0)
        x_other = np.mean([sample_logloss(s["logit"], labels) for s in other], axis=0)
        boot_result = bootstrap_auc_diff(labels, [s["logit"] for s in base], [s["logit"] for s in other], **boot)
    w = wilcoxon_test(x_base, x_other)
    if boot_result["lo"] is None:
        notes.append("no bootstrap interval: some resamples of the test rows hold no positive or no negative, "
                     "where AUC is undefined (too few of one label)" if task == "ctr" else
                     "no bootstrap interval: the resampled statistic is undefined")
    if boot_result["rows"] < boot_result["rows_total"]:
        notes.append(f"bootstrap on a random {boot_result['rows']:,} of {boot_result['rows_total']:,} rows")
    return {"quantity": SAMPLE_QUANTITY[task], **w, "bootstrap": boot_result}
