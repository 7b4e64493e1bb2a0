"""Session backbones and baselines: registry, encodings, padding, seeds, real learning."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from models import MODELS, build_model
from models.encodings import ENCODINGS, build_encoding
from models.encodings.base import PositionalEncoding
from pipeline.errors import ParamsError, UnknownNameError
from pipeline.params import TrainParams

OURS = ["posrec", "stamp", "parec", "fparec", "gru4rec", "narm", "srgnn", "pop", "spop", "itemknn"]
NEURAL = ["posrec", "stamp", "parec", "fparec", "gru4rec", "narm", "srgnn"]
WITH_ENCODING = ["posrec", "stamp", "parec", "fparec"]
DEFAULT_ENCODING = {"posrec": "ldpe", "stamp": "ldpe", "parec": "parec", "fparec": "fparec"}
L, N_ITEMS = 6, 20
TP = TrainParams(dim=16, layers=1, heads=2, dropout=0.0, max_len=L + 3)
NO_DROPOUT = {"narm": {"emb_dropout": 0.0, "ct_dropout": 0.0}}

# a tiny batch: repeats, a one-item session, a full row
SEQS = torch.tensor([[0, 0, 5, 3, 5, 7], [0, 0, 0, 0, 0, 4], [1, 2, 3, 4, 1, 6], [0, 9, 9, 8, 9, 2]])


def make(name, encoding=None, seed=0, tp=TP):
    torch.manual_seed(seed)
    enc = None
    if MODELS[name].uses_encoding:
        enc = build_encoding(encoding or DEFAULT_ENCODING[name], dim=tp.dim, max_len=tp.max_len,
                             heads=tp.heads, layers=tp.layers)
    return build_model(name, n_items=N_ITEMS, max_len=tp.max_len, train=tp,
                       options=NO_DROPOUT.get(name, {}), encoding=enc)


def test_registry_names_and_specs():
    for name in OURS:
        spec = MODELS[name]
        assert spec.name == name and spec.description and spec.paper
        assert spec.uses_encoding == (name in WITH_ENCODING)
    assert MODELS["posrec"].presets["paper"]["train"]["encoding"] == "ldpe"
    with pytest.raises(UnknownNameError, match="unknown model 'posrek'.*posrec"):
        build_model("posrek", n_items=3, max_len=4, train=TP, options={}, encoding=None)


@pytest.mark.parametrize("name", NEURAL + ["itemknn"])
def test_unknown_option_fails_naming_it(name):
    with pytest.raises(ParamsError, match=f"unknown params key 'models.{name}.bogus'"):
        build_model(name, n_items=3, max_len=4, train=TP, options={"bogus": 1}, encoding=None)


def _compatible(name: str, enc_name: str) -> bool:
    enc = build_encoding(enc_name, dim=TP.dim, max_len=TP.max_len, heads=TP.heads, layers=TP.layers)
    if name in ("parec", "fparec"):
        return not enc.needs_qk                                         # weights come from the encoding
    if name == "stamp":                                                 # added to the item embeddings
        return enc_name == "none" or type(enc).embed is not PositionalEncoding.embed
    return True                                                         # posrec: any encoding


@pytest.mark.parametrize("name", WITH_ENCODING)
def test_forward_backward_and_padding_for_every_encoding(name):
    accepted = []
    for enc_name in sorted(ENCODINGS):
        try:
            model = make(name, enc_name)
        except ParamsError:
            assert not _compatible(name, enc_name), f"{name} refused {enc_name}"
            continue
        accepted.append(enc_name)
        scores = model(SEQS)                                            # (B, N)
        assert scores.shape == (4, N_ITEMS + 1) and torch.isinf(scores[:, 0]).all()
        scores[:, 1:].logsumexp(1).sum().backward()
        grads = [p.grad for p in model.parameters() if p.requires_grad]
        assert all(g is not None and torch.isfinite(g).all() for g in grads), enc_name
        model.eval()
        with torch.no_grad():                                           # 3 more pads change nothing
            assert torch.allclose(model(SEQS)[:, 1:], model(F.pad(SEQS, (3, 0)))[:, 1:], atol=1e-5), enc_name
    if name == "posrec":
        assert accepted == sorted(ENCODINGS)
    if name in ("parec", "fparec"):
        assert {"parec", "fparec", "average", "linear_annealing", "exponential_annealing"} <= set(accepted)
        assert "lpe" not in accepted
    if name == "stamp":
        assert {"none", "ldpe", "lpe", "dpe"} <= set(accepted) and "rope" not in accepted


@pytest.mark.parametrize("name", ["gru4rec", "narm", "srgnn"])
def test_forward_backward_and_padding_without_encoding(name):
    model = make(name)
    scores = model(SEQS)
    assert scores.shape == (4, N_ITEMS + 1) and torch.isinf(scores[:, 0]).all()
    scores[:, 1:].logsumexp(1).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(SEQS)[:, 1:], model(F.pad(SEQS, (3, 0)))[:, 1:], atol=1e-5)


@pytest.mark.parametrize("name", NEURAL)
def test_same_seed_same_weights(name):
    a, b, c = make(name, seed=3).state_dict(), make(name, seed=3).state_dict(), make(name, seed=4).state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a if a[k].is_floating_point())


# --------------------------------------------------------------------------- learning is real

def rule_data(n: int, seed: int):
    """Random left-padded prefixes of 1..L items; the target is a fixed permutation of the last item."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, L + 1, (n,), generator=g)
    seqs = torch.randint(1, N_ITEMS + 1, (n, L), generator=g)
    seqs = seqs * (torch.arange(L)[None, :] >= (L - lengths)[:, None])  # (n, L) left padding
    perm = torch.randperm(N_ITEMS, generator=torch.Generator().manual_seed(99)) + 1
    return seqs, perm[seqs[:, -1] - 1]


def hr1(model, seqs, targets) -> float:
    model.eval()
    with torch.no_grad():
        scores = model(seqs)
        rank = 1 + (scores[:, 1:] > scores.gather(1, targets[:, None])).sum(1)
    return (rank == 1).double().mean().item()


def fit(model, seqs, targets, epochs: int = 25, batch: int = 50, lr: float = 0.02):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(epochs):
        model.train()
        for i in range(0, len(targets), batch):
            loss = F.cross_entropy(model(seqs[i:i + batch]), targets[i:i + batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model


@pytest.fixture(scope="module")
def splits():
    train, held_out = rule_data(200, 1), rule_data(100, 2)
    pop = make("pop")
    pop.fit(*train)
    return train, held_out, hr1(pop, *held_out)


@pytest.mark.parametrize("name", NEURAL)
def test_overfits_a_rule_and_beats_pop(name, splits):
    (xs, ys), (xv, yv), pop_hr = splits
    model = fit(make(name), xs, ys)
    assert hr1(model, xs, ys) > 0.95
    assert pop_hr < 0.2 and hr1(model, xv, yv) > pop_hr + 0.3


# --------------------------------------------------------------------------- fitted baselines

FIT_SEQS = torch.tensor([[0, 1, 2], [0, 0, 2], [2, 3, 2], [0, 0, 4]])
FIT_TARGETS = torch.tensor([3, 3, 1, 3])


def _fitted(name, options=None):
    m = build_model(name, n_items=5, max_len=3, train=TP, options=options or {}, encoding=None)
    assert m.needs_fit
    m.fit(FIT_SEQS, FIT_TARGETS)
    return m


def test_pop_ranks_by_clicks_then_id():
    # clicks (prefixes + targets): 1: 2, 2: 4, 3: 4, 4: 1, 5: 0 -> order 2, 3 (tie: lower id), 1, 4, 5
    scores = _fitted("pop")(torch.tensor([[0, 0, 5]]))
    assert scores[0, 1:].argsort(descending=True).add(1).tolist() == [2, 3, 1, 4, 5]
    assert torch.isinf(scores[0, 0]) and len(set(scores[0, 1:].tolist())) == 5   # strictly ordered


def test_spop_puts_session_items_first():
    # session [5, 4, 5]: 5 twice, 4 once, then global popularity 2, 3, 1
    scores = _fitted("spop")(torch.tensor([[5, 4, 5]]))
    assert scores[0, 1:].argsort(descending=True).add(1).tolist() == [5, 4, 2, 3, 1]


def test_itemknn_cosine_of_last_item():
    # pairs (distinct prefix item -> target): (1,3) (2,3) | (2,3) | (2,1) (3,1) | (4,3)
    # clicks n: 1: 2, 2: 4, 3: 4, 4: 1; sim_ij = c_ij / sqrt(n_i n_j)
    m = _fitted("itemknn", {"neighbours": 2})
    assert torch.allclose(m.sim[2], torch.tensor([2 / 4, 1 / (8 ** 0.5)], dtype=torch.float64))
    assert m.nbr[2].tolist() == [3, 1]
    scores = m(torch.tensor([[0, 0, 2]]))
    assert scores[0, 1:].argsort(descending=True).add(1).tolist() == [3, 1, 2, 4, 5]
    assert abs(scores[0, 3].item() - 0.5) < 1e-8


@pytest.mark.parametrize("name", [n for n in OURS if MODELS[n].presets])
def test_presets_are_valid_train_params(name):
    from pipeline.presets import parts, resolve
    from pipeline.train import resolve_train
    for preset, value in MODELS[name].presets.items():
        tp = resolve_train(TrainParams(), MODELS[name], preset, name, None)
        assert all(getattr(tp, k) == v for k, v in parts(value, preset).get("train", {}).items())
        if MODELS[name].uses_encoding:
            assert tp.encoding in ENCODINGS
        res = resolve(MODELS[name].presets, preset, name, "any")
        for model, options in res.models.items():      # the options a preset carries build
            assert model == name
            build_model(name, n_items=3, max_len=tp.max_len, train=tp, options=options, encoding=None)
        for enc, options in res.encodings.items():
            build_encoding(enc, dim=tp.dim, max_len=tp.max_len, heads=tp.heads, layers=tp.layers, options=options)


def test_paper_presets_carry_the_papers_model_and_encoding_options():
    from pipeline.presets import resolve
    lam = {ds: resolve(MODELS["posrec"].presets, "paper", "posrec", ds).models["posrec"]["lambda2"]
           for ds in ("diginetica", "diginetica_srgnn", "yoochoose_1_64", "beauty")}
    assert lam == {"diginetica": 1.0, "diginetica_srgnn": 1.0, "yoochoose_1_64": 0.5, "beauty": 1.0}
    assert resolve(MODELS["posrec"].presets, "paper_yoochoose", "posrec", "yc").models["posrec"]["lambda2"] == 0.5
    assert resolve(MODELS["fparec"].presets, "paper", "fparec", "beauty").encodings == {"fparec": {"rank": 40}}
