"""models/metrics.py: full-ranking metrics equal a brute-force reference; CTR metrics exact."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from models.metrics import RankingMetrics, auc, gauc, logloss, metric_keys, target_ranks


def brute_force(scores: np.ndarray, targets: np.ndarray, ks) -> dict[str, float]:
    """PROTOCOLS.md §5 written as loops: rank = 1 + #items (id >= 1) scoring strictly higher."""
    out = {f"{m}@{k}": 0.0 for m in ("hr", "mrr", "ndcg") for k in ks}
    for row, t in zip(scores, targets):
        rank = 1 + sum(1 for i in range(1, len(row)) if row[i] > row[t])
        for k in ks:
            if rank <= k:
                out[f"hr@{k}"] += 1
                out[f"mrr@{k}"] += 1 / rank
                out[f"ndcg@{k}"] += 1 / math.log2(rank + 1)
    return {key: v / len(targets) for key, v in out.items()}


def test_hand_made_ranks_ties_do_not_count_against_the_target():
    scores = torch.tensor([
        [9.0, 0.5, 0.5, 0.5, 0.1],    # target 2 tied with 1 and 3, padding higher: rank 1
        [0.0, 0.9, 0.8, 0.7, 0.6],    # target 4: three strictly higher -> rank 4
        [0.0, 0.2, 0.3, 0.3, 0.1],    # target 3 tied with 2 -> rank 1
    ])
    targets = torch.tensor([2, 4, 3])
    assert target_ranks(scores, targets).tolist() == [1, 4, 1]
    acc = RankingMetrics([1, 3])
    acc.update(scores, targets)
    got = acc.compute()
    assert list(got) == ["hr@1", "hr@3", "mrr@1", "mrr@3", "ndcg@1", "ndcg@3"]
    assert got["hr@1"] == pytest.approx(2 / 3)
    assert got["hr@3"] == pytest.approx(2 / 3)
    assert got["mrr@3"] == pytest.approx(2 / 3)
    assert got["ndcg@3"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batched_metrics_equal_brute_force_with_ties(seed):
    rng = np.random.default_rng(seed)
    n, items = 97, 30
    scores = rng.integers(0, 6, size=(n, items + 1)).astype(np.float32)  # many ties
    scores[:, 0] = rng.choice([-np.inf, 100.0])                         # padding never counts
    targets = rng.integers(1, items + 1, size=n)
    ks = [1, 5, 10, 20]
    expected = brute_force(scores, targets, ks)
    acc = RankingMetrics(ks)
    for start in range(0, n, 16):                                       # uneven last batch
        acc.update(torch.from_numpy(scores[start:start + 16]), torch.from_numpy(targets[start:start + 16]))
    got = acc.compute()
    assert acc.count == n
    assert set(got) == set(expected) == set(metric_keys(ks))
    for key in expected:
        assert got[key] == pytest.approx(expected[key], abs=1e-12), key


def test_metric_keys_order_and_empty_accumulator():
    assert metric_keys([10, 5, 10]) == ["hr@5", "hr@10", "mrr@5", "mrr@10", "ndcg@5", "ndcg@10"]
    assert RankingMetrics([10]).compute() == {"hr@10": 0.0, "mrr@10": 0.0, "ndcg@10": 0.0}
    with pytest.raises(ValueError):
        RankingMetrics([0])


def test_auc_exact_with_ties():
    labels = torch.tensor([1, 0, 1, 0, 1, 0])
    scores = torch.tensor([0.9, 0.9, 0.5, 0.2, 0.1, 0.3])
    # positive/negative pairs (9): (0.9,0.9) tie 0.5; 0.9>0.2,0.3 -> 2; 0.5>0.2,0.3 -> 2,
    # 0.5<0.9 -> 0; 0.1 below all -> 0. Total 4.5 / 9 = 0.5
    assert auc(labels, scores) == pytest.approx(0.5)
    assert auc(torch.tensor([0, 1]), torch.tensor([0.1, 0.2])) == 1.0
    assert auc(torch.tensor([0, 1]), torch.tensor([0.3, 0.2])) == 0.0
    assert math.isnan(auc(torch.tensor([1, 1]), torch.tensor([0.3, 0.2])))
    assert math.isnan(auc(torch.tensor([], dtype=torch.long), torch.tensor([])))


def test_auc_matches_pairwise_count_on_random_data():
    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 200)
    s = rng.integers(0, 10, 200).astype(np.float64)
    pos, neg = s[y == 1], s[y == 0]
    pairs = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    assert auc(torch.from_numpy(y), torch.from_numpy(s)) == pytest.approx(pairs / (len(pos) * len(neg)), abs=1e-12)


def test_gauc_weights_users_by_samples_and_skips_one_class_users():
    users = torch.tensor([7, 7, 7, 3, 3, 9, 9])
    labels = torch.tensor([1, 0, 0, 0, 1, 1, 1])         # user 9 has only positives: skipped
    scores = torch.tensor([0.8, 0.9, 0.1, 0.4, 0.6, 0.1, 0.2])
    # user 7: positive 0.8 beats 0.1, loses to 0.9 -> 1/2; user 3: 1.0
    assert gauc(users, labels, scores) == pytest.approx((3 * 0.5 + 2 * 1.0) / 5)
    rng = np.random.default_rng(1)                     # shuffled rows, ties across users: same answer
    u, y, sc = rng.integers(0, 20, 400), rng.integers(0, 2, 400), rng.integers(0, 5, 400).astype(float)
    expected, weight = 0.0, 0
    for user in np.unique(u):
        m = u == user
        if 0 < y[m].sum() < m.sum():
            expected += m.sum() * auc(torch.from_numpy(y[m]), torch.from_numpy(sc[m]))
            weight += m.sum()
    got = gauc(torch.from_numpy(u), torch.from_numpy(y), torch.from_numpy(sc))
    assert got == pytest.approx(expected / weight, abs=1e-12)


def test_logloss_exact():
    y = torch.tensor([1, 0, 1])
    p = torch.tensor([0.8, 0.25, 0.5], dtype=torch.float64)
    expected = -(math.log(0.8) + math.log(0.75) + math.log(0.5)) / 3
    assert logloss(y, p) == pytest.approx(expected, abs=1e-12)
    assert logloss(torch.tensor([1]), torch.tensor([0.0])) == pytest.approx(-math.log(1e-7))


def test_nan_scores_never_flatter_the_target():
    scores = torch.tensor([[0.0, 0.3, float("nan"), 0.1, 0.2],    # target 2 is NaN: beaten by 3 finite items
                           [0.0, float("nan"), 0.5, 0.6, 0.1]])   # a NaN item does not beat target 2
    assert target_ranks(scores, torch.tensor([2, 2])).tolist() == [4, 2]


def test_mask_seen_takes_the_input_items_out_of_the_ranking():
    from models.metrics import mask_seen
    # items 1..5; row 0 saw items 2 and 4 (left padding 0), target 3; row 1 saw its own target 5
    scores = torch.tensor([[float("-inf"), 0.1, 0.9, 0.5, 0.8, 0.2],
                           [float("-inf"), 0.1, 0.2, 0.3, 0.4, 0.7]])
    seqs = torch.tensor([[0, 2, 4], [1, 5, 5]])
    targets = torch.tensor([3, 5])
    assert target_ranks(scores, targets).tolist() == [3, 1]
    masked = mask_seen(scores, seqs)
    assert target_ranks(masked, targets).tolist() == [1, 4]       # 2 and 4 gone; a seen target falls behind all unseen
    assert torch.equal(masked[0, [1, 3, 5]], scores[0, [1, 3, 5]]) and masked[0, 2] == float("-inf")
    assert scores[0, 2] == 0.9                                     # out of place: the model's scores are kept
