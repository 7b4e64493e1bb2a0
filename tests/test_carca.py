"""CARCA (models/carca.py): side information reaches the scores, chunked full ranking, the encoding slot,
learning from attributes and context that ids cannot carry, options and the paper preset.
(The registry-wide checks - every encoding, padding, seeds, the rule dataset vs POP - are in test_models.)"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import models.carca as carca
from models import MODELS, build_model
from models.encodings import build_encoding
from pipeline.errors import ParamsError
from pipeline.params import TrainParams
from pipeline.presets import resolve
from pipeline.side import SideInfo

N_ITEMS, L, A, C = 20, 6, 5, 3
TP = TrainParams(dim=16, layers=1, heads=2, dropout=0.0, max_len=L + 3)
SEQS = torch.tensor([[0, 0, 5, 3, 9, 7], [0, 0, 0, 0, 0, 4], [1, 2, 3, 4, 8, 6], [0, 11, 12, 13, 14, 2]])


def features(seed: int = 0) -> np.ndarray:
    out = np.random.default_rng(seed).random((N_ITEMS + 1, A)).astype(np.float32)
    out[0] = 0.0
    return out


def context(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ctx = torch.rand(4, L, C, generator=g) * (SEQS != 0)[..., None]               # (B, L, C), 0 at padding
    return ctx, torch.rand(4, C, generator=g)                                      # (B, C)


def make(encoding: str = "lpe", options=None, side=SideInfo(features(), ("a", "b", "c")), seed: int = 0,
         tp: TrainParams = TP, n_items: int = N_ITEMS):
    torch.manual_seed(seed)
    enc = build_encoding(encoding, dim=tp.dim, max_len=tp.max_len, heads=tp.heads, layers=tp.layers)
    return build_model("carca", n_items=n_items, max_len=tp.max_len, train=tp, options=options or {},
                       encoding=enc, side=side)


def scaled(model, std: float = 0.5):
    """Weights far from CARCA's 0.01-std start, so that differences are not hidden in tiny logits."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * std)
    return model.eval()


def test_spec_declares_side_information_and_paper():
    spec = MODELS["carca"]
    assert spec.side and spec.uses_encoding and not spec.causal and "RecSys 2022" in spec.paper
    assert not any(s.side for n, s in MODELS.items() if n != "carca")      # nobody else is handed side information


def test_attributes_and_context_reach_the_scores():
    model = scaled(make())
    ctx, tctx = context()
    with torch.no_grad():
        base = model(SEQS, context=(ctx, tctx))
        other_target = model(SEQS, context=(ctx, tctx + 1.0))
        other_profile = model(SEQS, context=(ctx * 2.0, tctx))
        assert not torch.allclose(base, other_target) and not torch.allclose(base, other_profile)
        model.attributes[17] += 1.0                             # an item in no profile: only its column moves
        moved = model(SEQS, context=(ctx, tctx))
    changed = ((moved - base).abs() > 1e-6).any(0)                      # (N,) columns that changed
    assert changed.nonzero().flatten().tolist() == [17]


def test_without_side_information_carca_runs_on_ids_and_drops_the_psi_branch():
    model = make(side=None)
    assert model.psi_a is None and model.psi_c is None and model.w_psi is None and model.attributes is None
    scores = model(SEQS)
    assert scores.shape == (4, N_ITEMS + 1) and torch.isinf(scores[:, 0]).all()
    with_side = make()
    extra = sum(p.numel() for p in with_side.parameters()) - sum(p.numel() for p in model.parameters())
    g = 5 * TP.dim                                                      # psi: A + C -> g (+ bias), W_w: g -> d
    assert extra == (A + 1) * g + C * g + g * TP.dim


def test_chunked_full_ranking_equals_scoring_the_items_directly(monkeypatch):
    model = scaled(make())
    ctx, tctx = context()
    items = torch.arange(1, N_ITEMS + 1).expand(4, -1)
    with torch.no_grad():
        whole = model(SEQS, context=(ctx, tctx))
        monkeypatch.setattr(carca, "CHUNK_CELLS", 1)                    # one item per chunk
        chunked = model(SEQS, context=(ctx, tctx))
        direct = model.score_items(SEQS, items, context=(ctx, tctx))
    assert torch.allclose(whole, chunked, atol=1e-5) and torch.allclose(whole[:, 1:], direct, atol=1e-5)


def test_padding_changes_nothing_with_context_and_real_weights():
    model = scaled(make("rope"), std=0.3)
    ctx, tctx = context()
    with torch.no_grad():
        a = model(SEQS, context=(ctx, tctx))[:, 1:]
        b = model(F.pad(SEQS, (3, 0)), context=(F.pad(ctx, (0, 0, 3, 0)), tctx))[:, 1:]
    assert a.abs().max() > 1.0 and torch.allclose(a, b, atol=1e-4)


def test_the_encoding_acts_in_the_profile_self_attention():
    """Same weights, rope vs none: only the profile's attention hooks differ, and so do the scores; a
    bag-of-items encoder (none) cannot tell [a, b] from [b, a], rope can."""
    none, rope = scaled(make("none", side=None)), scaled(make("rope", side=None))
    swapped = torch.tensor([[0, 0, 0, 0, 3, 5], [0, 0, 0, 0, 5, 3]])
    with torch.no_grad():
        n, r = none(swapped), rope(swapped)
    assert torch.allclose(n[0, 1:], n[1, 1:], atol=1e-5)
    assert not torch.allclose(r[0, 1:], r[1, 1:], atol=1e-3)


def test_the_cached_item_table_follows_the_weights():
    model = make()
    ctx, tctx = context()
    with torch.no_grad():
        before = model(SEQS, context=(ctx, tctx))
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    model.train()
    loss = model.training_loss(SEQS, torch.tensor([1, 2, 3, 4]), torch.Generator().manual_seed(0), context=(ctx, tctx))
    loss.backward()
    opt.step()
    model.eval()
    with torch.no_grad():
        after = model(SEQS, context=(ctx, tctx))
        fresh = model.item_part(torch.arange(N_ITEMS + 1))
        model.load_state_dict(make().state_dict())                      # restored weights: the table follows
        restored = model(SEQS, context=(ctx, tctx))
    assert not torch.allclose(before, after)
    assert torch.allclose(model._table, make().item_part(torch.arange(N_ITEMS + 1)))
    assert torch.allclose(restored, before) and fresh.shape == (N_ITEMS + 1, TP.dim)


def test_training_loss_is_the_one_negative_bce_plus_the_l2_penalty():
    model = make(options={"l2_emb": 0.5})
    ctx, tctx = context()
    targets = torch.tensor([1, 2, 3, 4])
    loss = model.training_loss(SEQS, targets, torch.Generator().manual_seed(7), context=(ctx, tctx))
    neg = carca.sample_negatives(targets[:, None], N_ITEMS, torch.Generator().manual_seed(7))    # the same draw
    s = model.score_items(SEQS, torch.cat([targets[:, None], neg], 1), context=(ctx, tctx))
    want = (-F.logsigmoid(s[:, 0]) - F.logsigmoid(-s[:, 1])).mean() + 0.25 * model.items.weight.pow(2).sum()
    assert loss.item() == pytest.approx(want.item(), rel=1e-6)


def test_max_norm_bounds_the_id_embedding_rows():
    model = make(options={"max_norm": 0.01})
    rows = model._phi(torch.arange(1, N_ITEMS + 1)) / TP.dim ** 0.5
    assert rows.norm(dim=-1).max().item() == pytest.approx(0.01, rel=1e-5)
    assert torch.equal(make().items.weight, model.items.weight)       # reading (evaluation) rewrites nothing


def test_max_norm_trains_as_nn_embedding_max_norm_does():
    """004's nmax is nn.Embedding(max_norm): the rows a batch reads are rewritten to the bound, so Adam turns rows
    of norm nmax. Scaling on the fly alone kept the stored rows at norm ~1, and 20 steps barely turned them (walk
    41e #6). Every row read every step here, so the stored rows equal torch's step for step."""
    ids = torch.arange(1, 9)
    target = torch.randn(8, 4, generator=torch.Generator().manual_seed(3))
    model = make(options={"max_norm": 1e-2}, side=None, tp=TrainParams(dim=4, layers=1, heads=1, dropout=0.0,
                                                                       max_len=4), n_items=8)
    ref = torch.nn.Embedding(9, 4, max_norm=1e-2)
    with torch.no_grad():
        ref.weight.copy_(model.items.weight)
    opts = [torch.optim.Adam([model.items.weight], lr=1e-3), torch.optim.Adam([ref.weight], lr=1e-3)]
    for _ in range(20):
        model._project_rows()                                            # as training_loss does first
        for rows, opt in ((model._phi(ids, scale=False), opts[0]), (ref(ids), opts[1])):
            opt.zero_grad()
            (rows - target).pow(2).sum().backward()
            opt.step()
    model._project_rows()
    ref(ids)
    assert torch.allclose(model.items.weight[1:], ref.weight[1:], atol=1e-6)
    assert model.items.weight[1:].norm(dim=-1).max().item() <= 1e-2 * (1 + 1e-5)
    turned = F.cosine_similarity(model.items.weight[1:], target, dim=-1).mean().item()
    assert turned > 0.5                                                  # the rows turned toward the target


def test_a_training_step_projects_the_stored_rows():
    """training_loss puts the stored id rows inside max_norm before it reads them (walk 41h #7)."""
    model = make(options={"max_norm": 0.01}).train()
    assert model.items.weight[1:].norm(dim=-1).max().item() > 0.01
    ctx, tctx = context()
    model.training_loss(SEQS, torch.tensor([1, 2, 3, 4]), torch.Generator().manual_seed(0), context=(ctx, tctx))
    assert model.items.weight.norm(dim=-1).max().item() <= 0.01 * (1 + 1e-5)


def test_candidates_are_unscaled_under_the_paper_preset():
    """CARCA.py looks the scored items up in the unscaled id table (only the profile's are times sqrt(d));
    004's port scales both, seqpe's default (walk 41e #5)."""
    model, plain = make(options={"scale_candidates": False}), make()
    ids = torch.tensor([3, 5])
    assert torch.allclose(model.item_part(ids), plain.item_part(ids))                     # the profile's
    want = model.w_phi(model.items(ids)) + model.w_psi(model.psi_a(model.attributes[ids]))
    assert torch.allclose(model.item_part(ids, candidates=True), want)
    assert not torch.allclose(plain.item_part(ids, candidates=True), want)
    ctx, tctx = context()
    with torch.no_grad():
        full = model.eval()(SEQS, context=(ctx, tctx))
        some = model.score_items(SEQS, torch.tensor([[1, 2]] * 4), context=(ctx, tctx))
    assert torch.allclose(full[:, 1:3], some, atol=1e-6)               # full ranking reads the same table


@pytest.mark.parametrize("options, match", [({"activation": "gelu"}, "activation"), ({"negatives": 0}, "negatives"),
                                            ({"bogus": 1}, "models.carca.bogus")])
def test_bad_options_fail_naming_them(options, match):
    with pytest.raises(ParamsError, match=match):
        make(options=options)


def test_features_of_another_catalogue_are_refused():
    with pytest.raises(ParamsError, match="item features have 9 items"):
        make(side=SideInfo(np.zeros((10, A), dtype=np.float32)))


def test_paper_preset_has_carcas_settings_per_dataset():
    got = {ds: resolve(MODELS["carca"].presets, "paper", "carca", ds)
           for ds in ("carca_beauty", "carca_games", "carca_men", "carca_fashion")}
    assert got["carca_beauty"].train | {} == {**carca._BASE}
    assert got["carca_beauty"].models == {"carca": {"residual": True, "l2_emb": 1e-4, "scale_candidates": False}}
    study = resolve(MODELS["carca"].presets, "study", "carca", "carca_beauty")
    assert study.models["carca"].get("scale_candidates", True) is True      # 004's port scales both
    assert got["carca_games"].train["heads"] == 3 and got["carca_games"].train["max_len"] == 50
    assert got["carca_games"].models["carca"]["l2_emb"] == 0.0
    for ds in ("carca_men", "carca_fashion"):
        t = got[ds].train
        assert (t["dim"], t["heads"], t["dropout"], t["max_len"], t["epochs"]) == (390, 3, 0.3, 35, 801)
        assert got[ds].models["carca"]["residual"] is False
    assert got["carca_men"].train["lr"] == 6e-6 and got["carca_fashion"].train["lr"] == 1e-5
    assert got["carca_fashion"].train["batch_size"] == 100 and got["carca_beauty"].train["encoding"] == "none"


# --------------------------------------------------------------------------- learning from side information

FAST = {"init_std": 0.0}    # PyTorch's init: the code's 0.01 needs its small lr and ~1,000 epochs (models/carca.py)


def _fit(model, seqs, targets, ctx=None, epochs=40, batch=32, lr=0.01):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        model.train()
        for i in range(0, len(targets), batch):
            kw = {} if ctx is None else {"context": (ctx[0][i:i + batch], ctx[1][i:i + batch])}
            loss = model.training_loss(seqs[i:i + batch], targets[i:i + batch], g, **kw)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


def _hr1(model, seqs, targets, ctx=None) -> float:
    with torch.no_grad():
        scores = model(seqs, **({} if ctx is None else {"context": ctx}))
    return (scores.argmax(1) == targets).double().mean().item()


def test_attributes_carry_what_ids_cannot():
    """Items 11..60 each have one of 5 categories (one-hot attributes); a one-item profile of category k
    is followed by item 1 + k. Held-out profiles use items never trained on: only attributes generalise."""
    n_items, cats = 60, 5
    feats = np.zeros((n_items + 1, cats), dtype=np.float32)
    feats[np.arange(11, n_items + 1), np.arange(11, n_items + 1) % cats] = 1.0
    rng = np.random.default_rng(0)
    train_p, held_p = rng.integers(11, 41, 300), rng.integers(41, n_items + 1, 100)
    def rows(p):                                                        # one-item profiles, their targets
        return torch.from_numpy(np.stack([np.zeros_like(p), p], 1)), torch.from_numpy(1 + p % cats)
    (xs, ys), (xh, yh) = rows(train_p), rows(held_p)
    tp = TrainParams(dim=16, layers=1, heads=1, dropout=0.0, max_len=2)
    with_attr = _fit(make("none", FAST, side=SideInfo(feats), tp=tp, n_items=n_items), xs, ys, epochs=20)
    ids_only = _fit(make("none", FAST, side=None, tp=tp, n_items=n_items), xs, ys, epochs=20)
    assert _hr1(with_attr, xs, ys) > 0.95 and _hr1(with_attr, xh, yh) > 0.9
    assert _hr1(ids_only, xh, yh) < 0.5


def test_profile_context_carries_what_ids_cannot():
    """A profile of random items whose last interaction has the one-hot context k is followed by item 1 + k."""
    n_items, k = 30, 4
    g = torch.Generator().manual_seed(0)
    xs = torch.randint(1, n_items + 1, (400, 3), generator=g)
    label = torch.randint(0, k, (400,), generator=g)
    ctx = torch.zeros(400, 3, k)
    ctx[torch.arange(400), -1, label] = 1.0
    tctx = torch.zeros(400, k)
    tp = TrainParams(dim=16, layers=1, heads=1, dropout=0.0, max_len=3)
    model = _fit(make("lpe", FAST, side=SideInfo(None, tuple("abcd")), tp=tp, n_items=n_items), xs[:300],
                 1 + label[:300], (ctx[:300], tctx[:300]), epochs=20)
    assert _hr1(model, xs[300:], 1 + label[300:], (ctx[300:], tctx[300:])) > 0.9
