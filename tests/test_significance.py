"""pipeline/significance.py: paired tests equal scipy on hand-made inputs; per-sample quantities
exact; bootstrap seeded and paired; test_samples.parquet read back; verdict wording."""
from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats

from pipeline import significance as sig
from pipeline.errors import DataError


def pairwise_auc(y: np.ndarray, s: np.ndarray) -> float:
    pos, neg = s[y == 1], s[y == 0]
    return ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg))


# --------------------------------------------------------------------------- seed test

def test_seed_test_matches_scipy_on_common_seeds_only():
    base = {1: 0.30, 2: 0.32, 3: 0.35, 4: 0.31}
    other = {1: 0.33, 2: 0.34, 3: 0.36, 5: 0.90}        # seeds 4 and 5 have no partner
    got = sig.seed_test(base, other)
    d = np.array([0.03, 0.02, 0.01])                    # mean 0.02, sd 0.01
    ref = stats.ttest_rel([0.33, 0.34, 0.36], [0.30, 0.32, 0.35])
    assert got["seeds"] == [1, 2, 3] and got["n"] == 3
    assert got["diff"] == pytest.approx(0.02, abs=1e-15)
    assert got["t"] == pytest.approx(0.02 / (0.01 / math.sqrt(3)), rel=1e-9) == pytest.approx(ref.statistic)
    assert got["p"] == pytest.approx(ref.pvalue, rel=1e-12) and got["p"] == pytest.approx(0.07417990022744862)
    assert got["dz"] == pytest.approx(d.mean() / d.std(ddof=1), rel=1e-12) == pytest.approx(2.0)
    half = 4.302652729749464 * 0.01 / math.sqrt(3)      # t_{0.975, 2}
    assert (got["ci_lo"], got["ci_hi"]) == pytest.approx((0.02 - half, 0.02 + half), rel=1e-9)


def test_seed_test_with_two_common_seeds_concludes_nothing():
    got = sig.seed_test({1: 0.1, 2: 0.2}, {1: 0.3, 2: 0.5})
    assert got["n"] == 2 and got["diff"] == pytest.approx(0.25)
    assert got["p"] is None and got["dz"] is None and got["ci_lo"] is None
    identical = sig.seed_test({1: 0.1, 2: 0.2, 3: 0.3}, {1: 0.2, 2: 0.3, 3: 0.4})   # sd of diffs 0
    assert identical["p"] is None and identical["dz"] is None and identical["diff"] == pytest.approx(0.1)


# --------------------------------------------------------------------------- per-sample tests

def test_rank_biserial_by_hand_and_wilcoxon_equals_scipy():
    assert sig.rank_biserial(np.array([1.0, -2.0, 3.0, 0.0])) == pytest.approx(1 / 3)   # (1 + 3 - 2) / 6
    assert sig.rank_biserial(np.array([0.5, 0.5])) == 1.0
    assert sig.rank_biserial(np.zeros(3)) is None
    base = np.array([0.5, 0.25, 1.0, 0.1, 0.2, 0.125, 1 / 3, 0.05, 0.5, 1.0])
    other = np.array([1.0, 0.5, 1.0, 0.2, 0.1, 0.5, 1.0, 0.1, 0.25, 1.0])
    got = sig.wilcoxon_test(base, other)
    ref = stats.wilcoxon(other - base, zero_method="wilcox")
    assert got["n"] == 10 and got["p"] == pytest.approx(ref.pvalue, rel=1e-12)
    assert got["diff"] == pytest.approx(np.mean(other - base))
    d = (other - base)[other != base]
    ranks = stats.rankdata(np.abs(d))
    assert got["r"] == pytest.approx((ranks[d > 0].sum() - ranks[d < 0].sum()) / ranks.sum())
    assert sig.wilcoxon_test(base, base)["p"] is None


@pytest.mark.parametrize("g, t", [(0, 0), (3, 0), (0, 2), (8, 4), (1000, 37), (5, 0)])
def test_expected_rr_is_the_mean_over_the_tie_run(g, t):
    want = sum(1 / r for r in range(g + 1, g + t + 2)) / (t + 1)
    got = sig.expected_rr(np.array([g]), np.array([t]))[0]
    assert got == pytest.approx(want, rel=1e-12)
    if t == 0:
        assert got == 1 / (g + 1)


def test_sample_logloss_is_stable():
    got = sig.sample_logloss(np.array([math.log(4), math.log(1 / 3), 1000.0, 40.0]), np.array([1, 0, 0, 1]))
    assert got == pytest.approx([-math.log(0.8), -math.log(0.75), 1000.0, math.exp(-40)], rel=1e-12)


def test_bootstrap_mean_diff_is_scipy_paired_seeded_and_capped():
    rng = np.random.default_rng(3)
    base = rng.random(200)
    other = base + rng.normal(0.05, 0.1, 200)
    got = sig.bootstrap_mean_diff(base, other, n_resamples=500)
    ref = stats.bootstrap((other, base), lambda x, y, axis: np.mean(x - y, axis=axis), n_resamples=500,
                          paired=True, vectorized=True, method="percentile", rng=np.random.default_rng(0))
    assert (got["lo"], got["hi"]) == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high))
    assert got["diff"] == pytest.approx(np.mean(other - base)) and got["lo"] < got["diff"] < got["hi"]
    assert got == sig.bootstrap_mean_diff(base, other, n_resamples=500)          # seeded: same answer
    capped = sig.bootstrap_mean_diff(base, other, n_resamples=500, max_rows=50)
    assert capped["rows"] == 50 and capped["rows_total"] == 200 and capped["hi"] - capped["lo"] > got["hi"] - got["lo"]


def test_weighted_auc_equals_the_auc_of_the_resampled_rows():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 60)
    s = rng.integers(0, 5, 60).astype(float)            # ties
    idx = rng.integers(0, 60, (4, 60))                  # 4 resamples with repeats
    w = np.stack([np.bincount(i, minlength=60) for i in idx]).astype(np.float32)
    got = sig._WeightedAUC(y, s)(w)
    assert got == pytest.approx([pairwise_auc(y[i], s[i]) for i in idx], abs=1e-12)


def test_bootstrap_auc_diff_point_estimate_and_interval():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 400)
    base = [rng.normal(size=400) + 0.3 * y for _ in range(2)]
    other = [rng.normal(size=400) + 1.0 * y for _ in range(3)]
    got = sig.bootstrap_auc_diff(y, base, other, n_resamples=300)
    want = np.mean([pairwise_auc(y, s) for s in other]) - np.mean([pairwise_auc(y, s) for s in base])
    assert got["diff"] == pytest.approx(want, abs=1e-12)
    assert 0 < got["lo"] < got["diff"] < got["hi"] and got["rows"] == 400
    same = sig.bootstrap_auc_diff(y, base, base, n_resamples=300)
    assert same["diff"] == 0.0 and same["lo"] == same["hi"] == 0.0


def test_an_auc_bootstrap_with_resamples_of_one_label_gives_no_interval(recwarn):
    """Walk 36b: one positive in 400 rows: resamples without it have no AUC, and scipy's interval came back NaN,
    printed as bare NaN in `report --json` (invalid JSON) with a warning about BCa on stderr. No interval now,
    nothing on stderr, and the verdict leaves the bootstrap out."""
    import json
    rng = np.random.default_rng(2)
    y = np.zeros(400, dtype=np.int32)
    y[7] = 1
    base, other = [rng.normal(size=400)], [rng.normal(size=400) + 3.0 * y]
    got = sig.bootstrap_auc_diff(y, base, other, n_resamples=300)
    assert got["lo"] is None and got["hi"] is None and math.isfinite(got["diff"])
    assert json.loads(json.dumps(got, allow_nan=False)) == got and not recwarn.list
    assert "bootstrap" not in sig.verdict({}, {"p": None, "r": None, "bootstrap": got}, "ctr")


# --------------------------------------------------------------------------- files and verdict

def test_test_samples_round_trip_and_format_errors(tmp_path):
    sig.write_test_samples(tmp_path / "a.parquet", greater=[0, 4, 2], ties=[1, 0, 0])
    got = sig.read_test_samples(tmp_path / "a.parquet")
    assert set(got) == {"greater", "ties"}
    assert got["greater"].tolist() == [0, 4, 2] and got["ties"].tolist() == [1, 0, 0]
    assert pl.read_parquet(tmp_path / "a.parquet").schema == {"greater": pl.Int32, "ties": pl.Int32}
    pl.DataFrame({"logit": [0.5, -1.25]}, schema={"logit": pl.Float32}).write_parquet(tmp_path / "b.parquet")
    assert sig.read_test_samples(tmp_path / "b.parquet")["logit"].tolist() == [0.5, -1.25]
    pl.DataFrame({"greater": [1], "ties": [0]}).write_parquet(tmp_path / "c.parquet")       # Int64: not the format
    with pytest.raises(DataError, match="expected greater Int32, ties Int32 or logit Float32"):
        sig.read_test_samples(tmp_path / "c.parquet")
    (tmp_path / "d.parquet").write_text("not parquet")
    with pytest.raises(DataError, match="cannot be read as Parquet"):
        sig.read_test_samples(tmp_path / "d.parquet")


def test_verdict_names_the_rejecting_tests_and_too_few_seeds():
    t = lambda n, p, diff: {"n": n, "p": p, "diff": diff}   # noqa: E731
    boot = {"lo": 0.01, "hi": 0.03}
    sample = {"p": 0.001, "diff": 0.02, "r": 0.3, "bootstrap": boot}
    assert sig.verdict({"ndcg@10": t(3, 0.01, 0.02), "mrr@10": t(3, 0.2, 0.01)}, sample, "next-item") == (
        "rejects equality at 0.05: t-test ndcg@10 (better), Wilcoxon rr (better), bootstrap mean rr (better)")
    assert sig.verdict({"auc": t(2, None, -0.01)}, {"p": 0.01, "diff": 0.1, "r": 0.2, "bootstrap": {"lo": -0.02, "hi": 0.01}},
                       "ctr") == ("2 common seeds: the seed t-test cannot conclude anything (needs >= 3); "
                                  "rejects equality at 0.05: Wilcoxon logloss (worse); per-sample tests only: they "
                                  "say these trained models differ, not that other seeds would")
    # the seed test has its say when it does not reject what the per-sample tests do (3 seeds, p 0.46)
    assert sig.verdict({"ndcg@10": t(3, 0.464, 0.01)}, sample, "next-item") == (
        "rejects equality at 0.05: Wilcoxon rr (better), bootstrap mean rr (better); the seed t-test does not "
        "(ndcg@10 p 0.46): the per-sample tests say these trained models differ, not that other seeds would")
    assert sig.verdict({"auc": t(5, 0.5, 0.0)}, None, "ctr") == "no test rejects equality at 0.05"
    # walk 36b: POP against S-POP over 3 seeds, the same difference every seed (sd 0: no t-test); "not that other
    # seeds would" was wrong of models that do not depend on the seed
    pop = sig.seed_test({1: 0.2, 2: 0.2, 3: 0.2}, {1: 0.37, 2: 0.37, 3: 0.37})
    assert pop["p"] is None and pop["ci_lo"] == pytest.approx(0.17) and pop["ci_hi"] == pytest.approx(0.17)
    assert sig.verdict({"mrr@10": pop}, sample, "next-item") == (
        "every seed differs by the same amount (models that do not depend on the seed): no seed t-test; "
        "rejects equality at 0.05: Wilcoxon rr (better), bootstrap mean rr (better)")
    # identical metrics on every seed (walk 42c #1: ALiBi with one head against none): the blank t-test cells are
    # explained, where the report's footnote alone said blanks come from fewer than 3 seeds
    same = sig.seed_test({1: 0.2, 2: 0.2, 3: 0.2}, {1: 0.2, 2: 0.2, 3: 0.2})
    assert sig.verdict({"mrr@10": same}, None, "next-item") == (
        "the same test metrics on every common seed: no seed t-test (does the setting change the model at all?); "
        "no test rejects equality at 0.05")


def test_the_wilcoxon_direction_is_the_tests_own_not_the_means():
    """Many small losses and a few large gains: the mean difference is positive, the signed ranks say
    the configuration is mostly worse, and that is what the Wilcoxon rejection reports."""
    d = np.array([-0.01] * 80 + [1.0] * 5)
    w = sig.wilcoxon_test(np.zeros_like(d), d)
    assert w["diff"] > 0 and w["r"] < 0 and w["p"] < 0.05
    said = sig.verdict({}, {**w, "bootstrap": None}, "next-item")
    assert "rejects equality at 0.05: Wilcoxon rr (worse); per-sample tests only" in said, said


def test_the_seed_test_falls_back_to_the_cut_off_every_run_has():
    """Runs trained with evaluate.ks [5] got no seed test and a '0 common seeds' note."""
    from pipeline.significance import seed_metrics
    at = lambda *ks: {"test": {f"{m}@{k}": 0.1 for m in ("hr", "ndcg", "mrr") for k in ks}}  # noqa: E731
    assert seed_metrics("next-item", [at(5, 10, 20), at(10)]) == ("ndcg@10", "mrr@10")
    assert seed_metrics("next-item", [at(5, 20), at(5, 20, 50)]) == ("ndcg@20", "mrr@20")
    assert seed_metrics("next-item", [at(5), at(20)]) == ("ndcg@10", "mrr@10")      # none shared: skipped, as before
    assert seed_metrics("ctr", [{"test": {"auc": 0.5}}]) == ("auc",)


def test_wilcoxon_ranks_equal_reciprocal_rank_differences_together():
    """1/2 - 1/3 and 1/3 - 1/6 are both 1/6 but one rounding step apart in float64, and 1/3 - (1/2 - 1/6) is
    -5.6e-17, not 0: they were ranked apart and the "zero" kept (walk 45g #2). Ranked as the exact differences."""
    base = np.array([1 / 3, 1 / 6, 1 / 2 - 1 / 6, 0.25, 0.2, 1.0, 0.5, 0.1])
    other = np.array([1 / 2, 1 / 3, 1 / 3, 0.5, 0.25, 0.5, 1.0, 0.3])
    assert other[0] - base[0] != other[1] - base[1] and other[2] - base[2] != 0      # float64's own
    exact = np.array([1 / 6, 1 / 6, 0.0, 0.25, 0.05, -0.5, 0.5, 0.2])                 # the same, exact ties
    got = sig.wilcoxon_test(base, other)
    assert got["p"] == pytest.approx(stats.wilcoxon(exact, zero_method="wilcox").pvalue, rel=1e-12)
    assert got["r"] == pytest.approx(sig.rank_biserial(exact), rel=1e-12)
    assert got["diff"] == pytest.approx(exact.mean(), rel=1e-12)
