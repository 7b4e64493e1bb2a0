"""BPR-MF and FPMC (models/factorisation.py): the session formulations, BPR through training_loss."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from models import MODELS, build_model
from models.ranking_losses import bpr, sampled_scores
from pipeline.errors import ParamsError
from pipeline.params import TrainParams

TP = TrainParams(dim=8, layers=1, heads=1, dropout=0.0, max_len=6)
SEQS = torch.tensor([[0, 0, 5, 3, 5, 7], [0, 0, 0, 0, 0, 4], [1, 2, 3, 4, 1, 6]])


def make(name, n_items=20, seed=0, **options):
    torch.manual_seed(seed)
    return build_model(name, n_items=n_items, max_len=6, train=TP, options=options, encoding=None)


def test_registered_without_encoding_and_causal():
    for name in ("bprmf", "fpmc"):
        spec = MODELS[name]
        assert not spec.uses_encoding and spec.causal and not spec.fitted and "Rendle" in spec.paper


def test_bprmf_scores_the_mean_item_factor_plus_a_bias():
    m = make("bprmf")
    with torch.no_grad():
        m.bias.normal_()
        h, b = m.items.weight, m.bias
        scores = m(SEQS)
    u = (h[5] * 2 + h[3] + h[7]) / 4                                    # repeats count as often as they occur
    assert torch.allclose(scores[0, 1:], h[1:] @ u + b[1:], atol=1e-6)
    assert torch.allclose(scores[1, 1:], h[1:] @ h[4] + b[1:], atol=1e-6)
    assert torch.isinf(scores[:, 0]).all()


def test_bprmf_is_order_blind_and_fpmc_reads_only_the_last_item():
    """BPR-MF's session is a mean: any order of the same items gives the same scores (so it cannot
    learn "next = f(last item)", tests/test_models.py's rule). FPMC's is the last item alone."""
    bprmf, fpmc = make("bprmf"), make("fpmc")
    shuffled = torch.tensor([[0, 0, 7, 5, 3, 5]])
    with torch.no_grad():
        assert torch.allclose(bprmf(SEQS[:1]), bprmf(shuffled), atol=1e-6)
        assert torch.allclose(fpmc(SEQS[:1])[:, 1:], fpmc(torch.tensor([[7]]))[:, 1:])
        want = fpmc.next.weight[1:] @ fpmc.last.weight[7]               # <v^{L,I}_last, v^{I,L}_j>
        assert torch.allclose(fpmc(SEQS[:1])[0, 1:], want, atol=1e-6)
        assert not torch.allclose(fpmc(SEQS[:1]), fpmc(shuffled))


@pytest.mark.parametrize("name", ["bprmf", "fpmc"])
def test_hidden_state_t_is_the_prefix_encoding(name):
    m = make(name).eval()
    with torch.no_grad():
        states = m.hidden(SEQS)                                         # (B, L, D')
        for b in range(SEQS.size(0)):
            for t in range(SEQS.size(1)):
                if SEQS[b, t] != 0:
                    assert torch.allclose(states[b, t], m.encode(SEQS[b:b + 1, :t + 1])[0], atol=1e-6)
                else:
                    assert torch.all(states[b, t] == 0)


@pytest.mark.parametrize("name", ["bprmf", "fpmc"])
def test_training_loss_is_bpr_over_per_prediction_uniform_negatives(name):
    m = make(name, negatives=3)
    targets = torch.tensor([9, 7, 2])
    got = m.training_loss(SEQS, targets, torch.Generator().manual_seed(5))
    neg = torch.randint(1, 21, (3, 3), generator=torch.Generator().manual_seed(5))     # LearnBPR: uniform
    pos, scores, valid = sampled_scores(m.encode(SEQS), m.item_weights(), targets, neg)
    assert got.item() == pytest.approx(bpr(pos, scores, valid).item(), rel=1e-6)
    seq_targets = torch.tensor([[0, 0, 3, 5, 7, 8], [0, 0, 0, 0, 0, 2], [2, 3, 4, 1, 6, 9]])
    assert torch.isfinite(m.training_loss(SEQS, seq_targets, torch.Generator().manual_seed(5)))
    assert make(name, loss="ce").training_loss(SEQS, targets, torch.Generator()) is None
    with pytest.raises(ParamsError, match=f"models.{name}.loss must be 'bpr' or 'ce'"):
        make(name, loss="top1")
    with pytest.raises(ParamsError, match="negatives must be >= 1"):
        make(name, negatives=0)


def group_data(n: int, seed: int):
    """Order-free rule: four groups of five items (1-5, 6-10, ...); a session draws 1-5 items of one
    group, and the next item is the group's hub (its first item)."""
    g = torch.Generator().manual_seed(seed)
    group = torch.randint(0, 4, (n,), generator=g)
    lengths = torch.randint(1, 6, (n,), generator=g)
    seqs = group[:, None] * 5 + torch.randint(1, 6, (n, 5), generator=g)      # (n, 5)
    seqs = seqs * (torch.arange(5)[None, :] >= (5 - lengths)[:, None])        # left padding
    return seqs, group * 5 + 1


def test_bprmf_learns_a_set_level_rule_and_beats_pop():
    from test_models import fit, hr1, sessions_from_padded
    (xs, ys), (xv, yv) = group_data(200, 1), group_data(100, 2)
    pop = build_model("pop", n_items=20, max_len=6, train=TP, options={}, encoding=None)
    pop.fit(*sessions_from_padded(torch.cat([xs, ys[:, None]], 1)))
    m = fit(make("bprmf", negatives=4), xs, ys, epochs=40)
    assert hr1(m, xs, ys) > 0.95 and hr1(m, xv, yv) > hr1(pop, xv, yv) + 0.3


def test_trained_through_the_pairwise_loss_the_target_outranks_sampled_items():
    """One step of Adam on BPR lowers the BPR loss on the same batch (gradients flow to the factors
    and, for BPR-MF, to the item bias)."""
    for name in ("bprmf", "fpmc"):
        m = make(name, negatives=8)
        opt = torch.optim.Adam(m.parameters(), lr=0.05)
        targets = torch.tensor([9, 7, 2])
        before = m.training_loss(SEQS, targets, torch.Generator().manual_seed(1))
        opt.zero_grad()
        before.backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in m.parameters())
        opt.step()
        after = m.training_loss(SEQS, targets, torch.Generator().manual_seed(1))
        assert after < before
        assert F.cross_entropy(m(SEQS), targets).isfinite()


def test_fpmc_learns_through_the_trainer(tmp_path):
    """pipeline.train.run (its cross-entropy until the trainer calls training_loss) on `next = item + 1`."""
    from pipeline import train as stage
    from test_train import make_samples, params
    samples = make_samples(tmp_path / "samples", n_items=10, train=400)
    p = params(model="fpmc", encoding="none", epochs=10, lr=0.02, dim=16, dropout=0.0, patience=0)
    [res] = stage.run("toyset", samples, tmp_path / "runs", p, progress=False)
    assert res["config"] == "fpmc-none" and res["test"]["hr@1"] > 0.95, res
