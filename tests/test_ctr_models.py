"""models/ctr: DIN, DIEN, BST, DMIN, SASRec-CTR with the five encodings of CAPE's study (001 §5).

Batches and schemas are built by hand (no data pipeline). Exact numbers for DIN's activation unit
and pooling, Dice, one AUGRU step and DIEN's auxiliary loss; properties for every backbone x
encoding; small learning runs on a task whose label depends on position.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from models import MODELS, build_model
from models.ctr.base import CTRBatch, CTRSchema, EncodingChoice
from models.ctr.dien import AUGRU, augru_step, packed_gru
from models.ctr.layers import Dice, next_behaviour_loss, other_behaviours
from models.encodings.base import Positions
from pipeline import presets
from pipeline.errors import ParamsError
from pipeline.params import TrainParams, from_dict

BACKBONES = ["din", "dien", "bst", "dmin", "sasrec_ctr"]
ENCODINGS = ["none", "lpe", "rope", "cope", "cape"]
SMALL = {"din": {"attention_hidden": [8]}, "dien": {"attention_hidden": [8]}, "dmin": {"attention_hidden": [8]}}
SCHEMA = CTRSchema(fields=("item", "cate"), vocab={"item": 30, "cate": 8, "user": 6}, extra=("neg_items",),
                   features=("user",), max_len=8)
TRAIN = TrainParams(dim=8, heads=2, layers=1, max_len=8, dropout=0.1)


def model(name, encoding="none", schema=SCHEMA, train=TRAIN, seed=0, **options):
    torch.manual_seed(seed)
    opts = {"dnn_hidden": [16], **SMALL.get(name, {}), **options}
    enc = EncodingChoice(encoding, {"pos_dim": 8} if encoding == "cape" else {})
    return build_model(name, schema=schema, train=train, options=opts, encoding=enc)


def batch(pad: int = 0) -> CTRBatch:
    """Four users, histories of 3, 5, 0 and 1 behaviours in 5 slots (+ `pad` more padding slots)."""
    g = torch.Generator().manual_seed(7)
    items = torch.randint(2, 30, (4, 5), generator=g)
    lengths = torch.tensor([3, 5, 0, 1])
    real = torch.arange(5)[None] >= 5 - lengths[:, None]                   # (4, 5), left padding
    items = items * real
    hist = torch.stack([items, (items % 6 + 2) * real], dim=-1)            # (4, 5, 2) item, cate
    neg = torch.randint(2, 30, (4, 4), generator=g) * (torch.arange(4)[None] >= torch.tensor([[1], [0], [4], [2]]))
    return CTRBatch(label=torch.tensor([1.0, 0.0, 1.0, 0.0]), group=torch.tensor([1, 2, 3, 4]),
                    target=torch.tensor([[3, 5], [4, 6], [5, 7], [9, 3]]),
                    history=F.pad(hist, (0, 0, pad, 0)), extra={"neg_items": F.pad(neg, (pad, 0))},
                    features=torch.tensor([[2], [3], [4], [5]]))


# --------------------------------------------------------------------------- registry, options, presets

def test_ctr_backbones_are_registered():
    assert sorted(n for n, s in MODELS.items() if s.task == "ctr") == sorted(BACKBONES)
    for name in BACKBONES:
        assert MODELS[name].presets["paper"]["train"]["dim"] == 64


@pytest.mark.parametrize("name", BACKBONES)
@pytest.mark.parametrize("dataset, lr, size", [("amazon_electronics", 5e-4, 1024), ("kuaivideo", 1e-3, 4096)])
def test_paper_preset_resolves_per_dataset(name, dataset, lr, size):
    res = presets.resolve(MODELS[name].presets, "paper", name, dataset)
    tp = from_dict(TrainParams, {**res.train, "model": name, "encoding": "cape"}, run=True)
    assert (tp.dim, tp.max_len, tp.patience, tp.select_metric, tp.lr, tp.batch_size) == (64, 100, 3, "auc", lr, size)
    model(name, train=tp, schema=CTRSchema(fields=("item", "cate"), vocab={"item": 30, "cate": 8}),
          **res.models.get(name, {}))                                       # the preset's options build


def test_options_are_checked():
    with pytest.raises(ParamsError, match="models.din.sofmax"):
        model("din", sofmax=True)
    with pytest.raises(ParamsError, match="models.din.attention_activation must be one of"):
        model("din", attention_activation="tanh")
    with pytest.raises(ParamsError, match="models.bst.pooling"):
        model("bst", pooling="max")
    with pytest.raises(ParamsError, match="not divisible by train.heads"):
        model("sasrec_ctr", train=TrainParams(dim=8, heads=3, max_len=8))


@pytest.mark.parametrize("name", ["din", "dien", "dmin"])
@pytest.mark.parametrize("encoding", ["rmha", "alibi", "parec"])
def test_unit_attention_refuses_q_k_only_encodings(name, encoding):
    with pytest.raises(ParamsError, match=f"encoding '{encoding}' cannot enter {name}'s target attention"):
        model(name, encoding)


def test_sasrec_ctr_refuses_parec_and_bst_takes_it():
    with pytest.raises(ParamsError, match="replaces q.k"):
        model("sasrec_ctr", "parec")
    assert torch.isfinite(model("bst", "parec").eval()(batch()).logits).all()


# --------------------------------------------------------------------------- DIN by hand

def test_din_activation_unit_and_pooling_by_hand():
    net = model("din", schema=CTRSchema(fields=("item", "cate"), vocab={"item": 5, "cate": 5}),
                train=TrainParams(dim=1, max_len=4), attention_hidden=[2], attention_activation="prelu").eval()
    lin1, prelu, _, lin2 = net.unit.mlp.net
    with torch.no_grad():                                                   # input [h, t, h - t, h * t]
        lin1.weight.copy_(torch.tensor([[0.0, 0, 0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 1, 0, 0, 0]]))
        lin1.bias.zero_()
        prelu.weight.fill_(0.25)
        lin2.weight.copy_(torch.tensor([[1.0, 2.0]]))
        lin2.bias.fill_(0.5)
    t = torch.tensor([[1.0, 2.0]])                                          # (1, D)
    h = torch.tensor([[[9.0, 9.0], [1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]])    # (1, 4, D), slot 0 is padding
    pos = Positions.from_mask(torch.tensor([[False, True, True, True]]))
    # s_j = 1 * PReLU(h.t) + 2 * PReLU(h0 - t0) + 0.5: 1 + 0 + 0.5, 2 - 0.5 + 0.5, 6 + 2 + 0.5
    assert net.unit(t, h, pos.mask).tolist() == [[0.0, 1.5, 2.0, 8.5]]
    with torch.no_grad():
        pooled = net.attend(net.unit, net.encoding, 0, t, h, pos)           # no softmax: sum_j s_j h_j
        assert pooled.tolist() == [[1.5 + 17.0, 2.0 + 17.0]]
        net.cfg = net.cfg.__class__(softmax=True)
        w = torch.tensor([math.exp(1.5), math.exp(2.0), math.exp(8.5)])
        w = w / w.sum()
        want = w[0] * h[0, 1] + w[1] * h[0, 2] + w[2] * h[0, 3]
        assert torch.allclose(net.attend(net.unit, net.encoding, 0, t, h, pos)[0], want, atol=1e-6)


def test_dice_by_hand_and_with_one_row():
    dice = Dice(1)
    with torch.no_grad():
        dice.alpha.fill_(0.5)
    s = torch.tensor([[1.0], [3.0]])                                       # batch mean 2, variance 1
    p = torch.sigmoid(torch.tensor([[-1.0], [1.0]]) / math.sqrt(1 + 1e-8))
    assert torch.allclose(dice(s), p * s + (1 - p) * 0.5 * s)
    assert torch.allclose(dice.norm.running_mean, torch.tensor([0.2]))      # 0.9 * 0 + 0.1 * 2
    assert torch.isfinite(dice(torch.tensor([[4.0]]))).all()                # one training row: no error
    assert torch.allclose(dice.norm.running_mean, torch.tensor([0.2]))      # ... and no unbiased variance to keep
    assert dice(torch.zeros(0, 1)).shape == (0, 1)                          # no row (walk 40f #1): the mean of
    assert torch.isfinite(dice.norm.running_mean).all() and torch.isfinite(dice.norm.running_var).all()  # nothing
    dice.eval()
    m, v = float(dice.norm.running_mean), float(dice.norm.running_var)
    q = torch.sigmoid(torch.tensor((5.0 - m) / math.sqrt(v + 1e-8)))
    assert torch.allclose(dice(torch.tensor([[5.0]])), q * 5 + (1 - q) * 0.5 * 5)


@pytest.mark.parametrize("encoding", ["none", "cape"])
def test_din_trains_on_a_batch_without_one_real_behaviour(encoding):
    """Walk 40f #1: KuaiVideo's neg_items (or a batch of empty histories) gave the activation unit no row, Dice's
    statistics of nothing were NaN and went into the running ones: every later prediction NaN, and with cape a
    traceback in its position interpolation."""
    net = model("din", encoding).train()
    empty = batch()
    empty = CTRBatch(label=empty.label, group=empty.group, target=empty.target,
                     history=torch.zeros_like(empty.history), extra={"neg_items": torch.zeros_like(
                         empty.extra["neg_items"])}, features=empty.features)
    net(empty).logits.sum().backward()
    with torch.no_grad():
        assert torch.isfinite(net.eval()(batch()).logits).all()


# --------------------------------------------------------------------------- DIEN by hand

def test_augru_step_by_hand():
    x, h = torch.tensor([[1.0]]), torch.tensor([[0.5]])
    w_ih = torch.tensor([[1.0], [2.0], [-1.0]])                             # update, reset, new
    w_hh = torch.tensor([[0.5], [1.0], [2.0]])
    bias = torch.tensor([0.0, -1.0, 0.5])
    u = 1 / (1 + math.exp(-(1.0 + 0.25)))
    r = 1 / (1 + math.exp(-(2.0 - 1.0 + 0.5)))
    n = math.tanh(-1.0 + 0.5 + r * 1.0)
    for a in (0.0, 0.3, 1.0):
        want = (1 - a * u) * 0.5 + a * u * n                                # u' = a u
        got = augru_step(x, h, torch.tensor([a]), w_ih, w_hh, bias)
        assert float(got) == pytest.approx(want, abs=1e-6)
    assert float(augru_step(x, h, torch.tensor([0.0]), w_ih, w_hh, bias)) == 0.5  # a = 0 keeps the state


def test_augru_with_full_attention_is_a_gru():
    torch.manual_seed(0)
    aug, cell = AUGRU(3, 4), torch.nn.GRUCell(3, 4)
    wu, wr, wn = aug.w_ih.chunk(3)
    uu, ur, un = aug.w_hh.chunk(3)
    bu, br, bn = aug.bias.chunk(3)
    with torch.no_grad():                                                   # torch: z = 1 - u, bias of n outside r
        cell.weight_ih.copy_(torch.cat([wr, -wu, wn]))
        cell.weight_hh.copy_(torch.cat([ur, -uu, un]))
        cell.bias_ih.copy_(torch.cat([br, -bu, bn]))
        cell.bias_hh.zero_()
    x = torch.randn(2, 5, 3)
    h = torch.zeros(2, 4)
    for t in range(5):
        h = cell(x[:, t], h)
    assert torch.allclose(aug(x, torch.ones(2, 5)), h, atol=1e-6)


def test_packed_gru_reads_only_the_real_behaviours():
    torch.manual_seed(0)
    gru = torch.nn.GRU(3, 3, batch_first=True)
    x = torch.randn(2, 4, 3)
    mask = torch.tensor([[False, False, True, True], [True, True, True, True]])
    out = packed_gru(gru, x * mask[..., None], mask)
    alone, _ = gru(x[:1, 2:])
    assert torch.allclose(out[0, 2:], alone[0], atol=1e-6) and torch.all(out[0, :2] == 0)
    assert torch.allclose(out[1], gru(x[1:])[0][0], atol=1e-6)
    assert torch.all(packed_gru(gru, x, torch.zeros(2, 4, dtype=torch.bool)) == 0)


def test_negatives_come_from_other_users_real_behaviours():
    mask = torch.tensor([[False, True, True, True], [False, False, False, True], [False, False, False, False],
                         [True, True, True, True]])
    idx, available = other_behaviours(mask, torch.Generator().manual_seed(0))
    assert available.tolist() == [True, True, True, True]
    for _ in range(20):
        idx, _ = other_behaviours(mask, None)
        rows = idx // 4
        assert mask.reshape(-1)[idx].all()                                  # never padding
        assert torch.all(rows != torch.arange(4)[:, None])                  # never the user's own
    assert set((other_behaviours(mask, None)[0][1] // 4).tolist()) <= {0, 3}


def test_aux_loss_by_hand():
    """Two users: user 0's only negative is user 1's single behaviour."""
    mask = torch.tensor([[True, True], [False, True]])
    e = torch.tensor([[[1.0, 0.0], [0.0, 2.0]], [[0.0, 0.0], [3.0, 1.0]]])  # behaviours (2, 2, 2)
    states = torch.tensor([[[0.5, 1.0], [9.0, 9.0]], [[0.0, 0.0], [7.0, 7.0]]])
    loss = next_behaviour_loss(states, e, mask)
    pos, neg = 0.5 * 0 + 1.0 * 2, 0.5 * 3 + 1.0 * 1                         # h_0 . e_1, h_0 . (user 1's e)
    assert float(loss) == pytest.approx(math.log1p(math.exp(-pos)) + math.log1p(math.exp(neg)), abs=1e-6)
    assert float(next_behaviour_loss(states, e, torch.tensor([[True, True], [False, False]]))) == 0.0


# --------------------------------------------------------------------------- every backbone x encoding

@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("name", BACKBONES)
def test_forward_backward_and_seeded_weights(name, encoding):
    net, twin = model(name, encoding), model(name, encoding)
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), twin.state_dict().values()))
    with torch.no_grad():
        assert torch.equal(net.eval()(batch()).logits, twin.eval()(batch()).logits)
        assert net(batch()).aux_loss is None                                # no auxiliary loss in eval
    out = net.train()(batch())
    assert out.logits.shape == (4,) and torch.isfinite(out.logits).all()   # an empty history included
    loss = F.binary_cross_entropy_with_logits(out.logits, batch().label)
    has_aux = name in ("dien", "dmin")
    assert (out.aux_loss is not None) == has_aux
    (loss + (out.aux_loss if has_aux else 0)).backward()
    grads = [p.grad for p in net.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    enc_grads = [p.grad.abs().sum() for p in net.encoding.parameters()]
    assert all(g > 0 for g in enc_grads), "every encoding weight learns"


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("name", BACKBONES)
def test_bf16_autocast_trains_and_stays_close(name, encoding):
    """train.precision bf16 (autocast) runs forward and backward for every backbone and encoding (DIN's
    and DMIN's activation unit and Dice's batch statistics failed on mixed dtypes) and its logits stay
    near fp32's; the batch statistics stay float32."""
    net = model(name, encoding)
    with torch.no_grad():
        ref = net.eval()(batch()).logits
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.no_grad():
            low = net.eval()(batch()).logits
        out = net.train()(batch())
        loss = F.binary_cross_entropy_with_logits(out.logits.float(), batch().label)
    (loss + (out.aux_loss.float() if out.aux_loss is not None else 0)).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())
    assert torch.allclose(low.float(), ref, atol=0.1, rtol=0.05), (low, ref)
    assert all(b.dtype == torch.float32 for b in net.buffers() if b.is_floating_point())


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("name", BACKBONES)
def test_extra_left_padding_changes_nothing(name, encoding):
    net = model(name, encoding).eval()
    with torch.no_grad():
        assert torch.allclose(net(batch(pad=3)).logits, net(batch()).logits, atol=1e-5)


def one_slot(pad: int = 0) -> CTRBatch:
    """Histories one slot wide (ctr_batches' trimming when no row of a batch has two behaviours): 1, 0, 1, 1."""
    real = torch.tensor([[True], [False], [True], [True]])
    items = torch.tensor([[7], [0], [12], [3]]) * real
    hist = torch.stack([items, (items % 6 + 2) * real], dim=-1)            # (4, 1, 2)
    neg = torch.tensor([[9], [4], [0], [21]])
    return CTRBatch(label=torch.tensor([1.0, 0.0, 1.0, 0.0]), group=torch.tensor([1, 2, 3, 4]),
                    target=torch.tensor([[3, 5], [4, 6], [5, 7], [9, 3]]),
                    history=F.pad(hist, (0, 0, pad, 0)), extra={"neg_items": F.pad(neg, (pad, 0))},
                    features=torch.tensor([[2], [3], [4], [5]]))


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("name", BACKBONES)
def test_a_one_slot_history_is_a_target_attention_too(name, encoding):
    """Walk 37d: target attention was told from self-attention by Lq == L, which a history one slot wide also
    meets; RoPE then put the target at its one behaviour's place (offset 0, not 1). DIN's default (no softmax)
    gave logits [-0.025, 51.66, -0.91] one slot wide against [0.295, 51.66, -0.70] with two padding slots."""
    for options in ({}, {"softmax": False}) if name == "din" else ({},):
        net = model(name, encoding, **options).eval()
        g = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for p in net.parameters():          # weights far from the init, whose near-constant logits hid it
                p.copy_(torch.randn(p.shape, generator=g))
            wide, one = net(one_slot(pad=2)).logits, net(one_slot()).logits
        assert torch.allclose(one, wide, atol=1e-4, rtol=1e-4), (options, one, wide)


@pytest.mark.parametrize("encoding", ["none", "cape"])
@pytest.mark.parametrize("name", BACKBONES)
def test_order_of_the_history(name, encoding):
    """Reversing the behaviours changes CAPE's logits; without an encoding DIN and BST (mean pooling,
    bidirectional attention) cannot tell, the GRU and the causal blocks can."""
    net = model(name, encoding).eval()
    with torch.no_grad():
        for table in net.embedding.tables.values():                        # unit-scale rows (not 1e-4)
            table.weight[1:].normal_()
        for p in net.encoding.parameters():                                 # and a visible position term
            p.normal_()
    b = batch()
    flipped = CTRBatch(label=b.label, group=b.group, target=b.target, extra=b.extra, features=b.features,
                       history=torch.stack([torch.cat([r[~m], r[m].flip(0)]) for r, m in zip(b.history, b.mask)]))
    with torch.no_grad():
        moved = (net(flipped).logits[:2] - net(b).logits[:2]).abs().max()
    assert bool(moved > 1e-4) == (encoding == "cape" or name not in ("din", "bst")), float(moved)


def test_cape_fuses_the_target_embedding_in_every_attention():
    for name, layers in (("din", 1), ("dien", 1), ("bst", 1), ("dmin", 3), ("sasrec_ctr", 2)):
        fuse = model(name, "cape").encoding.fuse
        assert len(fuse) == layers and all(f.in_features == 16 and f.out_features == 8 for f in fuse), name
    din = model("din", "cape")
    assert din.extra_encoding.fuse[0].in_features == 8                      # the extra unit: item field only


# --------------------------------------------------------------------------- learning a positional label

N_ITEMS, N_CATS, L = 40, 6, 8
ITEM_CAT = torch.cat([torch.tensor([0, 1]), torch.arange(N_ITEMS - 2) % N_CATS + 2])  # item -> its category
LEARN_SCHEMA = CTRSchema(fields=("item", "cate"), vocab={"item": N_ITEMS, "cate": N_CATS + 2}, max_len=L)


def positional_task(n: int, seed: int) -> CTRBatch:
    """Click iff the target's category is the MOST RECENT behaviour's. Every history (4-8 behaviours,
    left-padded) holds the target's category exactly twice, so only its position tells the label."""
    g = torch.Generator().manual_seed(seed)
    pick = lambda k: int(torch.randint(0, k, (1,), generator=g))            # noqa: E731
    hist, target = torch.zeros(n, L, dtype=torch.long), torch.zeros(n, dtype=torch.long)
    for b in range(n):
        length, c = 4 + pick(L - 3), 2 + pick(N_CATS)
        others = [k for k in range(2, N_CATS + 2) if k != c]
        cats = [others[pick(len(others))] for _ in range(length)]
        slots = torch.randperm(length - 1, generator=g).tolist()
        for s in ([length - 1, slots[0]] if b % 2 == 0 else slots[:2]):
            cats[s] = c
        for j, k in enumerate(cats):
            choices = (ITEM_CAT == k).nonzero()[:, 0]
            hist[b, L - length + j] = choices[pick(len(choices))]
        choices = (ITEM_CAT == c).nonzero()[:, 0]
        target[b] = choices[pick(len(choices))]
    return CTRBatch(label=(torch.arange(n) % 2 == 0).float(), group=torch.arange(n),
                    target=torch.stack([target, ITEM_CAT[target]], -1),
                    history=torch.stack([hist, ITEM_CAT[hist] * (hist != 0)], -1))


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    d = scores[labels == 1][:, None] - scores[labels == 0][None]
    return float(((d > 0).float() + 0.5 * (d == 0).float()).mean())


TASK_TRAIN, TASK_TEST = positional_task(1024, 1), positional_task(512, 2)


def learn(name: str, encoding: str, steps: int, dim: int = 8, heads: int = 1, lr: float = 1e-2, seed: int = 0,
          **options) -> float:
    """Test AUC after `steps` Adam steps on batches of 128 drawn from TASK_TRAIN (one thread: tiny ops)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _learn(name, encoding, steps, dim, heads, lr, seed, **options)
    finally:
        torch.set_num_threads(threads)


def _learn(name, encoding, steps, dim, heads, lr, seed, **options) -> float:
    tp = TrainParams(dim=dim, heads=heads, layers=1, max_len=L, dropout=0.0)
    net = model(name, encoding, schema=LEARN_SCHEMA, train=tp, seed=seed, **options)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    for step in range(steps):
        idx = torch.randint(0, len(TASK_TRAIN), (128,), generator=g)
        b = CTRBatch(label=TASK_TRAIN.label[idx], group=TASK_TRAIN.group[idx], target=TASK_TRAIN.target[idx],
                     history=TASK_TRAIN.history[idx])
        out = net(b)
        loss = F.binary_cross_entropy_with_logits(out.logits, b.label)
        loss = loss if out.aux_loss is None else loss + out.aux_loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return auc(net.eval()(TASK_TEST).logits, TASK_TEST.label)


@pytest.mark.slow
def test_din_learns_recency_only_with_a_position_aware_encoding():
    """DIN pools behaviours order-blind: without an encoding it is at chance (measured 0.46); CAPE in
    its activation unit (001 Eq. 8) measured 0.85, learned absolute PE 0.69."""
    none, cape, lpe = (learn("din", e, 150) for e in ("none", "cape", "lpe"))
    assert none < 0.6 and cape > none + 0.25 and lpe > none + 0.1, (none, cape, lpe)


@pytest.mark.slow
def test_sasrec_ctr_learns_recency_better_with_cape():
    """Causal blocks give `none` some order (measured 0.50); CAPE in blocks and target attention 0.80."""
    kw = dict(dim=16, heads=2, dnn_hidden=[32])
    none, cape = learn("sasrec_ctr", "none", 200, **kw), learn("sasrec_ctr", "cape", 200, **kw)
    assert cape > 0.7 and cape > none + 0.15, (none, cape)


@pytest.mark.slow
def test_bst_learns_recency_only_with_a_position_aware_encoding():
    """Bidirectional attention without an encoding is order-blind (measured 0.46); CAPE 0.80."""
    kw = dict(dim=16, heads=2, lr=3e-3, pooling="target")
    none, cape = learn("bst", "none", 300, **kw), learn("bst", "cape", 300, **kw)
    assert none < 0.6 and cape > none + 0.2, (none, cape)


@pytest.mark.slow
def test_dien_learns_recency():
    """DIEN's GRUs see the order by themselves; with CAPE in its attention it learns the task (0.72)."""
    assert learn("dien", "cape", 150) > 0.65


@pytest.mark.slow
def test_dmin_learns_recency_with_cape():
    """DMIN with CAPE in its three attentions (measured 0.83; without an encoding 0.60). Once learnt, the rule
    holds at test AUC 0.75-0.86, but a seed may sit on the plateau at chance first, for how long depending on the
    CPU's kernels: seed 0 reached 0.79 after 300 steps on an AVX-512 Xeon and stayed at 0.49-0.54 for 600 steps
    with ATEN_CPU_CAPABILITY=avx2, where seed 1 had 0.78. So the better of two seeds must learn it (after 300
    steps, seeds 0-5 under both kernel sets: 10 of 12 runs at 0.76-0.82, one at 0.68, seed 0 / avx2 at 0.51)."""
    kw = dict(dim=16, heads=2, dnn_hidden=[32], attention_hidden=[32])
    aucs = [learn("dmin", "cape", 300, seed=seed, **kw) for seed in (0, 1)]
    assert max(aucs) > 0.7, aucs


@pytest.mark.parametrize("encoding", ["none", "cape", "rope"])
@pytest.mark.parametrize("name", BACKBONES)
def test_a_float64_model_computes_in_float64(name, encoding):
    """Walk 37d D1: Dice's BatchNorm cast to float32 whatever the model's type, so a `.double()` DIN (a float64
    check of the equations) crashed on float32 @ float64."""
    net = model(name, encoding).double()
    out = net.train()(batch())
    assert out.logits.dtype == torch.float64 and torch.isfinite(out.logits).all()
    with torch.no_grad():
        assert net.eval()(batch()).logits.dtype == torch.float64
