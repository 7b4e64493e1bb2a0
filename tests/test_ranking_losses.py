"""models/ranking_losses.py and GRU4Rec's own objectives: exact values, masking, seeded negatives."""
from __future__ import annotations

import math

import pytest
import torch

from models import build_model
from models.ranking_losses import batch_negatives, bpr, bpr_max, sampled_scores, top1, top1_max
from pipeline.errors import ParamsError
from pipeline.params import TrainParams

# one prediction: target score 2; negatives 1 and 3 count, the third equals the target item (masked)
POS = torch.tensor([2.0])
NEG = torch.tensor([[1.0, 3.0, 50.0]])
VALID = torch.tensor([[True, True, False]])


def sig(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_losses_by_hand():
    assert bpr(POS, NEG, VALID).item() == pytest.approx((math.log(1 + math.exp(-1)) + math.log(1 + math.e)) / 2)
    assert top1(POS, NEG, VALID).item() == pytest.approx((sig(-1) + sig(1) + sig(1) + sig(9)) / 2)
    s1, s3 = 1 / (1 + math.e ** 2), math.e ** 2 / (1 + math.e ** 2)       # softmax over the valid negatives
    want = -math.log(s1 * sig(1) + s3 * sig(-1)) + 0.5 * (s1 * 1 + s3 * 9)
    assert bpr_max(POS, NEG, VALID, 0.5).item() == pytest.approx(want, rel=1e-6)
    assert top1_max(POS, NEG, VALID).item() == pytest.approx(s1 * (sig(-1) + sig(1)) + s3 * (sig(1) + sig(9)), rel=1e-6)


def test_a_prediction_without_negatives_adds_nothing_and_stays_finite():
    pos = torch.tensor([2.0, 0.5], requires_grad=True)
    neg = torch.tensor([[1.0, 3.0], [4.0, 4.0]], requires_grad=True)
    valid = torch.tensor([[True, True], [False, False]])
    for loss in (bpr(pos, neg, valid), top1(pos, neg, valid), bpr_max(pos, neg, valid, 1.0),
                 top1_max(pos, neg, valid)):
        loss.backward()
        assert torch.isfinite(pos.grad).all() and torch.isfinite(neg.grad).all()
        assert pos.grad[1] == 0 and torch.all(neg.grad[1] == 0)
        pos.grad, neg.grad = None, None
    assert bpr_max(pos, neg, valid, 1.0).item() == pytest.approx(bpr_max(pos[:1], neg[:1], valid[:1], 1.0).item() / 2)


def test_sampled_scores_shared_and_per_row_and_accidental_hits():
    h = torch.tensor([[1.0, 0.0], [0.0, 2.0]])                          # (T, D)
    items = torch.tensor([[0.0, 0.0], [1.0, 1.0], [2.0, -1.0], [0.5, 3.0]])  # (N, D)
    targets = torch.tensor([1, 3])
    pos, neg, valid = sampled_scores(h, items, targets, torch.tensor([1, 2, 3]))
    assert pos.tolist() == [1.0, 6.0] and neg.tolist() == [[1.0, 2.0, 0.5], [2.0, -2.0, 6.0]]
    assert valid.tolist() == [[False, True, True], [True, True, False]]
    pos, neg, valid = sampled_scores(h, items, targets, torch.tensor([[2, 1], [1, 1]]))
    assert neg.tolist() == [[2.0, 1.0], [2.0, 2.0]] and valid.tolist() == [[True, False], [True, True]]


def gru4rec(n_items: int = 30, dim: int = 8, **options):
    torch.manual_seed(0)
    tp = TrainParams(dim=dim, layers=1, heads=1, dropout=0.0, max_len=6)
    return build_model("gru4rec", n_items=n_items, max_len=6, train=tp, options=options, encoding=None)


SEQS = torch.tensor([[0, 0, 5, 3, 5, 7], [0, 0, 0, 0, 0, 4], [1, 2, 3, 4, 1, 6]])
TARGETS = torch.tensor([9, 7, 2])


@pytest.mark.parametrize("kind", ["bpr", "top1", "bpr_max", "top1_max"])
def test_gru4rec_training_loss_is_the_ranking_loss_over_batch_and_extra_negatives(kind):
    """Negatives = the batch's targets, then `negatives` uniform items from the trainer's generator."""
    from models.ranking_losses import ranking_loss
    m = gru4rec(loss=kind, negatives=4, bpreg=0.3)
    got = m.training_loss(SEQS, TARGETS, torch.Generator().manual_seed(7))
    extra = torch.randint(1, 31, (4,), generator=torch.Generator().manual_seed(7))
    neg = torch.cat((TARGETS, extra))
    assert torch.equal(batch_negatives(TARGETS, 30, 4, torch.Generator().manual_seed(7)), neg)
    pos, scores, valid = sampled_scores(m.encode(SEQS), m.emb.weight, TARGETS, neg)
    assert valid[:, :3].tolist() == [[False, True, True], [True, False, True], [True, True, False]]
    assert got.item() == pytest.approx(ranking_loss(kind, pos, scores, valid, 0.3).item(), rel=1e-6)
    again = m.training_loss(SEQS, TARGETS, torch.Generator().manual_seed(7))
    assert torch.equal(got, again)                                      # a seed fixes the negatives


def test_gru4rec_loss_on_whole_sequences_scores_every_real_position():
    m = gru4rec(loss="bpr_max", negatives=0)
    targets = torch.tensor([[0, 0, 3, 5, 7, 8], [0, 0, 0, 0, 0, 2], [2, 3, 4, 1, 6, 9]])   # (B, L), 0 = none
    got = m.training_loss(SEQS, targets, torch.Generator().manual_seed(0))
    where = targets != 0
    h, t = m.hidden(SEQS)[where], targets[where]                        # (T, D), (T,) with T = 11
    assert t.numel() == 11
    pos, scores, valid = sampled_scores(h, m.emb.weight, t, t)
    assert got.item() == pytest.approx(bpr_max(pos, scores, valid, 1.0).item(), rel=1e-6)


def test_gru4rec_ce_leaves_the_loss_to_the_trainer_and_options_are_checked():
    assert gru4rec().training_loss(SEQS, TARGETS, torch.Generator()) is None       # default: ce
    with pytest.raises(ParamsError, match="models.gru4rec.loss must be one of ce, bpr, top1, bpr_max, top1_max"):
        gru4rec(loss="xe")
    with pytest.raises(ParamsError, match="negatives >= 0"):
        gru4rec(negatives=-1)
    # a batch of one with no extra negatives: no prediction has a negative, the loss stays 0 and nothing learns;
    # the untrained model's metrics were recorded (walk 45c #1)
    tp = TrainParams(dim=8, layers=1, heads=1, dropout=0.0, max_len=6, batch_size=1)
    with pytest.raises(ParamsError, match=r"loss top1 with negatives 0 takes its negatives from the batch's other "
                                          r"targets, and train\.batch_size is 1"):
        build_model("gru4rec", n_items=30, max_len=6, train=tp, options={"loss": "top1", "negatives": 0})
    build_model("gru4rec", n_items=30, max_len=6, train=tp, options={"loss": "top1", "negatives": 1})
    build_model("gru4rec", n_items=30, max_len=6, train=tp, options={"loss": "ce", "negatives": 0})


@pytest.mark.parametrize("kind", ["bpr", "top1", "bpr_max", "top1_max"])
def test_gru4rec_learns_with_each_ranking_loss(kind):
    """20 items, next = item + 1: the ranking loss over in-batch + 16 extra negatives ranks the
    target first. (At dim 8 the score regularisation of BPR-max (bpreg 1) and TOP1 keeps every score
    near 0 and stalls at 65-90%; dim 32 leaves room.)"""
    m = gru4rec(n_items=20, dim=32, loss=kind, negatives=16)
    seqs = torch.stack([torch.tensor([0, 0, s, s % 20 + 1]) for s in range(1, 21)])   # (20, 4)
    targets = seqs[:, -1] % 20 + 1
    opt, g = torch.optim.Adam(m.parameters(), lr=0.03), torch.Generator().manual_seed(0)
    for _ in range(100):
        loss = m.training_loss(seqs, targets, g)
        opt.zero_grad()
        loss.backward()
        opt.step()
    m.eval()
    with torch.no_grad():
        assert (m(seqs).argmax(1) == targets).float().mean() == 1.0
