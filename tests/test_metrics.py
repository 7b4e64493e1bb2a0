"""models/metrics.py: ranking metrics under the exact tie rule (pipeline/REFERENCE.md §5) equal hand-computed
values and a brute force over every tie order; CTR metrics exact; non-finite scores are errors."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from models import build_model
from models.metrics import (CTRMetrics, RankingMetrics, auc, gauc, greater_and_ties, logloss_from_logits,
                            mask_seen, metric_keys, tie_gains)
from pipeline.errors import NonFiniteScores
from pipeline.params import TrainParams

NAN, INF = float("nan"), float("inf")


def H(n: int) -> float:
    return sum(1 / r for r in range(1, n + 1))


def D(n: int) -> float:
    return sum(1 / math.log2(r + 1) for r in range(1, n + 1))


def all_orders_expectation(row: np.ndarray, target: int, ks) -> dict[str, float]:
    """Brute force: break ties by every permutation of the items 1..N-1, average the metrics."""
    items = list(range(1, len(row)))
    out = {key: 0.0 for key in metric_keys(ks)}
    perms = list(itertools.permutations(items))
    for perm in perms:
        position = {item: p for p, item in enumerate(perm)}
        ranking = sorted(items, key=lambda i: (-row[i], position[i]))
        rank = ranking.index(target) + 1
        for k in ks:
            if rank <= k:
                out[f"hr@{k}"] += 1
                out[f"mrr@{k}"] += 1 / rank
                out[f"ndcg@{k}"] += 1 / math.log2(rank + 1)
    return {key: v / len(perms) for key, v in out.items()}


# --------------------------------------------------------------------------- ranking, tie rule

def test_hand_made_cases_average_over_the_tie_run():
    scores = torch.tensor([
        [9.0, 0.5, 0.5, 0.5, 0.1],    # target 2 tied with 1 and 3 (padding higher, ignored): g=0, t=2
        [0.0, 0.9, 0.8, 0.7, 0.6],    # target 4: three strictly higher: g=3, t=0 -> rank 4
        [0.0, 0.2, 0.3, 0.3, 0.1],    # target 3 tied with 2: g=0, t=1
    ])
    targets = torch.tensor([2, 4, 3])
    g, t = greater_and_ties(scores, targets)
    assert g.tolist() == [0, 3, 0] and t.tolist() == [2, 0, 1]
    acc = RankingMetrics([1, 3])
    g2, t2 = acc.update(scores, targets)
    assert torch.equal(g, g2) and torch.equal(t, t2)
    got = acc.compute()
    assert list(got) == ["hr@1", "hr@3", "mrr@1", "mrr@3", "ndcg@1", "ndcg@3"]
    l3 = 1 / math.log2(3)
    want = {"hr@1": (1 / 3 + 1 / 2) / 3, "hr@3": 2 / 3,
            "mrr@1": (1 / 3 + 1 / 2) / 3, "mrr@3": ((1 + 1 / 2 + 1 / 3) / 3 + (1 + 1 / 2) / 2) / 3,
            "ndcg@1": (1 / 3 + 1 / 2) / 3, "ndcg@3": ((1 + l3 + 1 / 2) / 3 + (1 + l3) / 2) / 3}
    assert got == pytest.approx(want, abs=1e-15)


def test_constant_scores_give_k_over_n_items():
    n_items, batch = 160, 7
    acc = RankingMetrics([10, 20])
    acc.update(torch.zeros(batch, n_items + 1), torch.arange(1, batch + 1) * 20)
    got = acc.compute()
    assert got["hr@10"] == 10 / n_items and got["hr@20"] == 20 / n_items      # exact: 1/16, 1/8
    assert got["mrr@10"] == pytest.approx(H(10) / n_items, rel=1e-14)
    assert got["ndcg@20"] == pytest.approx(D(20) / n_items, rel=1e-14)
    acc = RankingMetrics([10])                                               # not a power of two
    acc.update(torch.full((3, 101), 0.25), torch.tensor([1, 50, 100]))
    assert acc.compute() == pytest.approx({"hr@10": 0.1, "mrr@10": H(10) / 100, "ndcg@10": D(10) / 100},
                                          rel=1e-14)


@pytest.mark.parametrize("g, t, hr, mrr, ndcg", [
    (8, 4, 2 / 5, (1 / 9 + 1 / 10) / 5, (1 / math.log2(10) + 1 / math.log2(11)) / 5),   # run 9..13 crosses K
    (9, 0, 1.0, 1 / 10, 1 / math.log2(11)),                                              # rank exactly K
    (9, 5, 1 / 6, 1 / 10 / 6, 1 / math.log2(11) / 6),                                    # only r = 10 counts
    (10, 3, 0.0, 0.0, 0.0),                                                              # run starts after K
    (0, 29, 10 / 30, H(10) / 30, D(10) / 30),                                            # run reaches n_items
])
def test_ties_at_the_cut_off(g, t, hr, mrr, ndcg):
    n_items = 30
    scores = torch.zeros(1, n_items + 1, dtype=torch.float64)
    scores[0, 1:1 + g] = 2.0                               # g items above
    scores[0, 1 + g:2 + g + t] = 1.0                       # target (item g+1) and t items tied with it
    acc = RankingMetrics([10])
    got_g, got_t = acc.update(scores, torch.tensor([g + 1]))
    assert (got_g.item(), got_t.item()) == (g, t)
    assert acc.compute() == pytest.approx({"hr@10": hr, "mrr@10": mrr, "ndcg@10": ndcg}, abs=1e-15)


@pytest.mark.parametrize("seed", range(4))
def test_equals_the_brute_force_over_every_tie_order(seed):
    rng = np.random.default_rng(seed)
    n_items, n, ks = 6, 24, [1, 2, 3, 5]
    scores = rng.integers(0, 3, size=(n, n_items + 1)).astype(np.float64)   # many ties
    scores[:, 0] = rng.choice([-np.inf, 100.0, np.nan])                     # padding never counts
    targets = rng.integers(1, n_items + 1, size=n)
    per_case = [all_orders_expectation(row, tg, ks) for row, tg in zip(scores, targets)]
    acc = RankingMetrics(ks)
    for start in range(0, n, 5):                                            # uneven last batch
        acc.update(torch.from_numpy(scores[start:start + 5]), torch.from_numpy(targets[start:start + 5]))
    got = acc.compute()
    assert acc.count == n and list(got) == metric_keys(ks)
    for key in got:
        assert got[key] == pytest.approx(sum(c[key] for c in per_case) / n, abs=1e-12), key


def test_without_ties_the_gains_are_the_usual_rank_definitions_bit_for_bit():
    g = torch.arange(0, 60)
    ks = torch.tensor([1, 5, 10, 50])
    hr, mrr, ndcg = tie_gains(g, torch.zeros_like(g), ks)                    # (B, C) each
    r = (g + 1).double()[:, None]
    hit = (r <= ks).double()
    assert torch.equal(hr, hit) and torch.equal(mrr, hit / r) and torch.equal(ndcg, hit / torch.log2(r + 1.0))
    acc, old = RankingMetrics([5, 10]), RankingMetrics([5, 10])
    acc.update_counts(g, torch.zeros_like(g))
    old.update_ranks(g + 1)
    assert acc.compute() == old.compute()


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_non_finite_item_scores_are_an_error(bad):
    scores = torch.tensor([[-INF, 0.3, 0.2, 0.1], [-INF, 0.1, 0.2, 0.3]])
    scores[1, 2] = bad
    with pytest.raises(NonFiniteScores, match=r"scores are not finite .*1 of 2 rows.*model diverged"):
        RankingMetrics([1]).update(scores, torch.tensor([1, 3]))
    padding = torch.tensor([[bad, 0.3, 0.2, 0.1]])                         # column 0 is never looked at
    assert [x.item() for x in greater_and_ties(padding, torch.tensor([2]))] == [1, 0]


def test_huge_finite_scores_are_not_mistaken_for_a_divergence():
    huge = torch.tensor([[0.0, 3e38, 3e38, -3e38, 2e38]])                 # row sum overflows float32
    assert [x.item() for x in greater_and_ties(huge, torch.tensor([4]))] == [2, 0]
    half = torch.tensor([[0.0, 60000.0, 60000.0, 1.0]], dtype=torch.float16)   # float16 sum overflows too
    assert [x.item() for x in greater_and_ties(half, torch.tensor([3]))] == [2, 0]


def test_mask_seen_takes_the_input_items_out_of_the_ranking():
    # items 1..5; row 0 saw items 2 and 4 (left padding 0), target 3; row 1 saw its own target 5
    scores = torch.tensor([[-INF, 0.1, 0.9, 0.5, 0.8, 0.2],
                           [-INF, 0.1, 0.2, 0.3, 0.4, 0.7]])
    seqs = torch.tensor([[0, 2, 4], [1, 5, 5]])
    targets = torch.tensor([3, 5])
    assert [x.tolist() for x in greater_and_ties(scores, targets)] == [[2, 0], [0, 0]]
    masked = mask_seen(scores, seqs)
    lowest = torch.finfo(scores.dtype).min                                   # finite: not a divergence
    assert masked[0, 2] == lowest and torch.equal(masked[0, [1, 3, 5]], scores[0, [1, 3, 5]])
    # row 0: 2 and 4 gone; row 1: the seen target 5 falls behind every unseen item, tied with seen item 1
    assert [x.tolist() for x in greater_and_ties(masked, targets)] == [[0, 3], [0, 1]]
    assert scores[0, 2] == 0.9                                               # out of place: scores kept


def test_metric_keys_order_and_empty_accumulator():
    assert metric_keys([10, 5, 10]) == ["hr@5", "hr@10", "mrr@5", "mrr@10", "ndcg@5", "ndcg@10"]
    with pytest.raises(ValueError, match="no samples were scored"):     # was 0.0 for every metric (walk 40c #5)
        RankingMetrics([10]).compute()
    with pytest.raises(ValueError):
        RankingMetrics([0])
    from models.metrics import ranking_from_counts
    empty = torch.zeros(0, dtype=torch.long)
    for g, t, ks in ((empty, empty, [10]), (torch.tensor([-3]), torch.tensor([0]), [5]),
                     (torch.tensor([1]), torch.tensor([0]), [0]), (torch.tensor([1]), torch.tensor([0]), [])):
        with pytest.raises(ValueError):
            ranking_from_counts(g, t, ks)


def test_ctr_labels_are_checked_before_they_are_stored_and_empty_batches_are_no_samples():
    """Walk 40c #4 / #6: labels were cast to int8 first (257 became 1, 0.5 became 0, and passed the 0/1 check);
    an empty batch alone ended compute() in an IndexError."""
    for bad in (torch.tensor([257, 0]), torch.tensor([0.5, 1.0])):
        with pytest.raises(ValueError, match="CTR labels must be 0 or 1"):
            CTRMetrics().update(torch.tensor([0.0, 1.0]), bad, torch.tensor([1, 1]))
    acc = CTRMetrics()
    acc.update(torch.zeros(0), torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    assert all(math.isnan(v) for v in acc.compute().values())
    from pipeline.significance import bootstrap_mean_diff
    one = bootstrap_mean_diff(np.array([0.5]), np.array([0.25]))       # scipy refused one row
    assert one["diff"] == -0.25 and one["lo"] is None and one["hi"] is None


def test_pop_with_equal_counts_gets_the_tie_averaged_values():
    # clicks: items 1 and 2 three times, 3 and 4 once: no order by id inside either pair
    pop = build_model("pop", n_items=4, max_len=3, train=TrainParams(), options={}, encoding=None)
    pop.fit(torch.tensor([1, 2, 1, 2, 1, 2, 3, 4]), torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]))
    acc = RankingMetrics([1, 3])
    acc.update(pop(torch.tensor([[0, 1], [0, 1]])), torch.tensor([2, 3]))   # ranks {1, 2} and {3, 4}
    assert acc.compute() == pytest.approx({"hr@1": (1 / 2) / 2, "hr@3": (1 + 1 / 2) / 2,
                                           "mrr@1": (1 / 2) / 2, "mrr@3": ((1 + 1 / 2) / 2 + (1 / 3) / 2) / 2,
                                           "ndcg@1": (1 / 2) / 2,
                                           "ndcg@3": ((1 + 1 / math.log2(3)) / 2 + (1 / 2) / 2) / 2}, abs=1e-15)
    spop = build_model("spop", n_items=4, max_len=3, train=TrainParams(), options={}, encoding=None)
    spop.fit(torch.tensor([1, 2, 1, 2, 1, 2, 3, 4]), torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]))
    # session [4]: 4 first; then 1 = 2 by global clicks (S-POP's own tie-break cannot split them), then 3
    g, t = greater_and_ties(spop(torch.tensor([[0, 4], [0, 4]])), torch.tensor([1, 3]))
    assert g.tolist() == [1, 3] and t.tolist() == [1, 0]


# --------------------------------------------------------------------------- CTR

def pairwise_auc(y: np.ndarray, s: np.ndarray) -> float:
    pos, neg = s[y == 1], s[y == 0]
    return ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg))


def test_auc_exact_with_ties():
    labels = torch.tensor([1, 0, 1, 0, 1, 0])
    scores = torch.tensor([0.9, 0.9, 0.5, 0.2, 0.1, 0.3])
    # positive/negative pairs (9): (0.9,0.9) tie 0.5; 0.9 > 0.2, 0.3 -> 2; 0.5 > 0.2, 0.3 -> 2;
    # 0.5 < 0.9 -> 0; 0.1 below all -> 0. Total 4.5 / 9 = 0.5
    assert auc(labels, scores) == 0.5
    assert auc(torch.tensor([0, 1]), torch.tensor([0.1, 0.2])) == 1.0
    assert auc(torch.tensor([0, 1]), torch.tensor([0.3, 0.2])) == 0.0
    assert auc(torch.tensor([1, 0, 1]), torch.tensor([0.0, -0.0, 1.0])) == 0.75     # -0.0 ties with 0.0
    assert math.isnan(auc(torch.tensor([1, 1]), torch.tensor([0.3, 0.2])))
    assert math.isnan(auc(torch.tensor([], dtype=torch.long), torch.tensor([])))


def test_gauc_weights_users_by_samples_and_skips_one_class_users():
    users = torch.tensor([7, 7, 7, 3, 3, 9, 9])
    labels = torch.tensor([1, 0, 0, 0, 1, 1, 1])         # user 9 has only positives: skipped
    scores = torch.tensor([0.8, 0.9, 0.1, 0.4, 0.6, 0.1, 0.2])
    # user 7: positive 0.8 beats 0.1, loses to 0.9 -> 1/2; user 3: 1.0
    assert gauc(users, labels, scores) == pytest.approx((3 * 0.5 + 2 * 1.0) / 5, abs=1e-15)
    tied = torch.tensor([0.5, 0.5, 0.1, 0.4, 0.6, 0.1, 0.2])   # user 7: positive ties one negative -> 3/4
    assert gauc(users, labels, tied) == pytest.approx((3 * 0.75 + 2 * 1.0) / 5, abs=1e-15)
    assert math.isnan(gauc(torch.tensor([1, 2]), torch.tensor([1, 0]), torch.tensor([0.1, 0.2])))


@pytest.mark.parametrize("seed", range(3))
def test_ctr_metrics_equal_pairwise_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 300
    u = rng.integers(0, 15, n) * 10 ** 12                 # large raw user ids
    y = rng.integers(0, 2, n)
    s = rng.integers(-3, 4, n).astype(np.float32) / 2     # many ties, within and across users
    expected_gauc, weight = 0.0, 0
    for user in np.unique(u):
        m = u == user
        if 0 < y[m].sum() < m.sum():
            expected_gauc += m.sum() * pairwise_auc(y[m], s[m])
            weight += m.sum()
    expected_loss = np.mean([math.log1p(math.exp(-x)) if lab else math.log1p(math.exp(x)) for x, lab in zip(s, y)])
    acc = CTRMetrics()
    for start in range(0, n, 64):
        sl = slice(start, start + 64)
        acc.update(torch.from_numpy(s[sl]), torch.from_numpy(y[sl]).float(), torch.from_numpy(u[sl]))
    got = acc.compute()
    assert acc.count == n
    assert got["auc"] == pytest.approx(pairwise_auc(y, s), abs=1e-15)
    assert got["gauc"] == pytest.approx(expected_gauc / weight, abs=1e-14)
    assert got["logloss"] == pytest.approx(expected_loss, abs=1e-14)


def test_logloss_from_logits_is_stable_without_clipping():
    y = torch.tensor([1, 0, 1])
    x = torch.tensor([math.log(4), math.log(1 / 3), 0.0], dtype=torch.float64)   # p = 0.8, 0.25, 0.5
    assert logloss_from_logits(y, x) == pytest.approx(-(math.log(0.8) + math.log(0.75) + math.log(0.5)) / 3,
                                                      abs=1e-15)
    assert logloss_from_logits(torch.tensor([1]), torch.tensor([40.0])) == pytest.approx(math.exp(-40), rel=1e-12)
    assert logloss_from_logits(torch.tensor([0]), torch.tensor([1000.0])) == 1000.0    # no clip at -log(1e-7)
    assert logloss_from_logits(torch.tensor([1]), torch.tensor([-1000.0])) == 1000.0


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_non_finite_logits_are_an_error(bad):
    acc = CTRMetrics()
    acc.update(torch.tensor([0.1, 0.2]), torch.tensor([1.0, 0.0]), torch.tensor([1, 1]))
    with pytest.raises(NonFiniteScores, match=r"logits are not finite .*1 of 2 samples.*model diverged"):
        acc.update(torch.tensor([0.1, bad]), torch.tensor([1.0, 0.0]), torch.tensor([1, 1]))
    with pytest.raises(NonFiniteScores):
        auc(torch.tensor([1, 0]), torch.tensor([bad, 0.0]))
    assert acc.count == 2


def test_empty_ctr_metrics_are_nan():
    assert all(math.isnan(v) for v in CTRMetrics().compute().values())
    assert list(CTRMetrics().compute()) == ["auc", "gauc", "logloss"]
