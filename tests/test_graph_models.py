"""Graph baselines of 000 Table 2: SR-GNN with anchors (000 §5.4), GC-SAN and FGNN by hand."""
from __future__ import annotations

import dataclasses

import json

import pytest
import torch

from models import MODELS, build_model
from models.encodings import ENCODINGS
from models.encodings.base import Positions
from models.fgnn import WGAT
from models.gcsan import SelfAttentionLayer
from models.graph import build_graph, neighbour_weights
from models.srgnn import node_states_at
from pipeline.errors import ParamsError
from pipeline.params import TrainParams

TP = TrainParams(dim=8, layers=1, heads=2, dropout=0.0, max_len=8)
SESSION = torch.tensor([[0, 0, 5, 3, 5, 7, 2], [0, 0, 0, 1, 2, 3, 4]])


def make(name, seed=0, **options):
    torch.manual_seed(seed)
    return build_model(name, n_items=9, max_len=8, train=TP, options=options, encoding=None).eval()


def gnn_inputs(model, seqs):
    """The (x, w_in, w_out) the model's gated graph layer receives (a forward hook)."""
    seen = []
    handle = model.gnn.register_forward_hook(lambda mod, args, out: seen.append((args, out)))
    with torch.no_grad():
        model(seqs)
    handle.remove()
    return seen


@pytest.mark.parametrize("name", ["srgnn", "gcsan"])
def test_anchor_option_feeds_posrecs_anchor_edges_to_the_ggnn(name):
    """000 §5.4: the GGNN's neighbourhoods gain PosRec's anchors (the same models/graph.py code),
    degree-normalised like the model's own binary edges."""
    g = build_graph(SESSION)
    for anchors in (False, True):
        [((x, w_in, w_out), _)] = gnn_inputs(make(name, anchors=anchors), SESSION)
        want_in, want_out = neighbour_weights(g, anchors=anchors, binary=True)
        assert torch.equal(w_in, want_in) and torch.equal(w_out, want_out)
    # with anchors the last node v_4 = 2 (slot 3) joins every N_out: 3 (slot 1) reaches it at hop 3
    assert want_out[0, 1, 3] > 0 and neighbour_weights(g, anchors=False, binary=True)[1][0, 1, 3] == 0
    with torch.no_grad():
        assert not torch.allclose(make(name, anchors=True)(SESSION), make(name, anchors=False)(SESSION))


def test_gcsan_prediction_is_eq_9():
    """S_f = w E_last + (1 - w) h_last: w = 0 is the GGNN state of the last item; w = 1 the last row
    of the self-attention stack; other w mix the two linearly."""
    seqs = SESSION
    m0, m1, mw = make("gcsan", weight=0.0), make("gcsan", weight=1.0), make("gcsan", weight=0.25)
    [((_, _, _), h)] = gnn_inputs(m0, seqs)
    g = build_graph(seqs)
    h_last = node_states_at(h, g.alias)[:, -1]                          # (B, D)
    with torch.no_grad():
        assert torch.allclose(m0.encode(seqs), h_last, atol=1e-6)
        e = node_states_at(h, g.alias)
        for layer in m1.layers:
            e = layer(e, Positions.from_seqs(seqs))
        assert torch.allclose(m1.encode(seqs), e[:, -1], atol=1e-6)
        assert torch.allclose(mw.encode(seqs), 0.25 * e[:, -1] + 0.75 * h_last, atol=1e-6)


def test_gcsan_self_attention_layer_is_eqs_6_and_7():
    """F = softmax(Q K^T / sqrt(d)) V over the whole session (no mask, no W_O); E = FFN(F) + F."""
    torch.manual_seed(0)
    layer = SelfAttentionLayer(8, 1, 0.0, 0).eval()
    e = torch.randn(1, 4, 8)
    pos = Positions.from_mask(torch.ones(1, 4, dtype=torch.bool))
    a = layer.attn
    with torch.no_grad():
        q, k, v = a.q(e), a.k(e), a.v(e)
        f = torch.softmax(q @ k.transpose(1, 2) / 8 ** 0.5, -1) @ v       # (1, 4, 8) every key, past and future
        want = torch.relu(f @ layer.ffn.fc1.weight.t() + layer.ffn.fc1.bias) @ layer.ffn.fc2.weight.t() \
            + layer.ffn.fc2.bias + f
        assert torch.allclose(layer(e, pos), want, atol=1e-5)
    assert isinstance(a.out, torch.nn.Identity)


def test_wgat_attends_over_each_node_and_its_successors_with_edge_weights():
    """Session [4, 4, 4, 6]: edges 4 -> 4 (twice) and 4 -> 6. Node 6 has no successor, so its only
    neighbour is its added self-loop: its output is mean_k W^k x_6 + b exactly. Node 4 keeps its own
    self-loop weight 2 (no extra loop) and attends over {4, 6} with e = a^T [W x_i || W x_j || w_ij]."""
    torch.manual_seed(0)
    m = make("fgnn", wgat_layers=1, wgat_heads=2)
    seqs = torch.tensor([[4, 4, 4, 6]])
    captured = []
    handle = m.layers[0].register_forward_hook(lambda mod, args, out: captured.append((args, out)))
    with torch.no_grad():
        m(seqs)
    handle.remove()
    [((x, w, edge), out)] = captured
    assert w[0].tolist() == [[2.0, 1.0], [0.0, 1.0]] and edge[0].tolist() == [[True, True], [False, True]]
    layer: WGAT = m.layers[0]
    K, D = 2, 8
    with torch.no_grad():
        z = layer.w(x[0]).view(2, K, D)                                 # (n, K, D)
        assert torch.allclose(out[0, 1], z[1].mean(0) + layer.bias, atol=1e-6)
        a = layer.att
        logits = torch.stack([(a[:, :D] * z[0]).sum(-1) + (a[:, D:2 * D] * z[j]).sum(-1) + w[0, 0, j] * a[:, 2 * D]
                              for j in range(2)])                       # (2 neighbours, K)
        alpha = torch.softmax(torch.nn.functional.leaky_relu(logits, 0.2), dim=0)
        want = (alpha[:, :, None] * z).sum(0).mean(0) + layer.bias
        assert torch.allclose(out[0, 0], want, atol=1e-6)


def test_fgnn_readout_is_a_gru_set2set():
    """One step: q_1 = GRU(0, 0); a = softmax(x . q_1) over the real nodes; s = W_out [q_1 ; r_1]."""
    m = make("fgnn", readout_steps=1)
    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(1))
    mask = torch.tensor([[False, True, True], [True, True, True]])
    with torch.no_grad():
        q = m.readout.gru(torch.zeros(2, 16), torch.zeros(2, 8))        # (2, D)
        e = (x * q[:, None]).sum(-1).masked_fill(~mask, float("-inf"))
        r = (torch.softmax(e, -1)[..., None] * x).sum(1)
        assert torch.allclose(m.readout(x, mask), torch.cat((q, r), -1), atol=1e-6)
        assert m.readout(x, mask)[0].isfinite().all()
    assert m.out.bias is None and m.out.weight.shape == (8, 16)


def test_options_are_checked():
    with pytest.raises(ParamsError, match=r"models.gcsan.weight must be in \[0, 1\]"):
        make("gcsan", weight=1.5)
    with pytest.raises(ParamsError, match="wgat_layers, wgat_heads and readout_steps >= 1"):
        make("fgnn", wgat_heads=0)
    with pytest.raises(ParamsError, match="models.srgnn.anchor"):
        make("srgnn", anchor=True)
    for name in ("gcsan", "fgnn"):
        assert not MODELS[name].uses_encoding and not MODELS[name].causal


@pytest.mark.parametrize("name, options", [("gcsan", {}), ("fgnn", {}), ("srgnn", {"anchors": True})])
def test_learns_through_the_trainer(tmp_path, name, options):
    """pipeline.train.run on (prefix, next item) samples of the rule `next = item + 1`."""
    from pipeline import train as stage
    from test_train import make_samples, params
    samples = make_samples(tmp_path / "samples", n_items=10, train=400)
    p = params(model=name, encoding="none", epochs=10, lr=0.01, dim=32, layers=1, heads=1, dropout=0.0, patience=0)
    p = dataclasses.replace(p, models={name: options})
    [res] = stage.run("toyset", samples, tmp_path / "runs", p, progress=False)
    assert res["config"] == f"{name}-none" and res["test"]["hr@1"] > 0.9, res
    record = json.loads((tmp_path / "runs" / f"{name}-none" / "seed-1" / "run.json").read_text())
    assert record["options"] == options


def _static_pair(name, options, encoding="ldpe"):
    """The same weights twice: as built, and with static shapes (models/graph.py)."""
    from pipeline.train import setup
    tp = dataclasses.replace(TP, model=name, encoding=encoding)
    enc = setup.build_encoding(encoding, tp, {}) if MODELS[name].uses_encoding else None
    torch.manual_seed(0)
    net = build_model(name, n_items=9, max_len=16, train=tp, options=options, encoding=enc)     # (inputs up to 10
    static = build_model(name, n_items=9, max_len=16, train=tp, options=options, encoding=enc)  # wide: below 16)
    static.load_state_dict(net.state_dict())
    static.static_shapes = True
    return net, static


STATIC_CASES = [("posrec", {}), ("posrec", {"normalise": True}), ("posrec", {"anchors": False}),
                ("srgnn", {}), ("srgnn", {"anchors": True}), ("fgnn", {}), ("gcsan", {})]


@pytest.mark.parametrize("name, options", STATIC_CASES)
def test_static_shapes_give_the_same_scores_and_gradients(name, options):
    """What train.compile: reduce-overhead runs (one node slot per column, L - 1 hops, no host reads)
    scores and trains as the model does: the extra node slots are empty, left-padded slots."""
    net, static = _static_pair(name, options)
    seqs = torch.nn.functional.pad(SESSION, (3, 0))                    # more columns than any session's nodes
    targets = torch.tensor([2, 5])
    losses = []
    for model in (net, static):
        model.train()
        loss = torch.nn.functional.cross_entropy(model(seqs)[:, 1:], targets - 1)
        loss.backward()
        losses.append(loss.detach())
    assert torch.allclose(losses[0], losses[1], atol=1e-6)
    for (pname, a), b in zip(net.named_parameters(), static.parameters()):
        assert (a.grad is None) == (b.grad is None), pname
        if a.grad is not None:
            assert torch.allclose(a.grad, b.grad, atol=1e-6), pname


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_static_posrec_scores_the_same_with_every_encoding(encoding):
    net, static = _static_pair("posrec", {}, encoding)
    seqs = torch.nn.functional.pad(SESSION, (1, 0))
    with torch.no_grad():
        assert torch.allclose(net.eval()(seqs)[:, 1:], static.eval()(seqs)[:, 1:], atol=1e-5)


@pytest.mark.parametrize("name, options", [("posrec", {}), ("srgnn", {"anchors": True}), ("fgnn", {}),
                                           ("gcsan", {})])
def test_static_shapes_trace_as_one_graph(name, options):
    """No host read in a static step: torch.compile traces the whole training loss as one graph (a read,
    such as the node count or the hop search's early exit, is a graph break, and a CUDA graph cannot
    hold one). Traced only (dynamo's explain), nothing is compiled."""
    import torch._dynamo as dynamo
    from pipeline.train.tasks import loss_fn
    _, static = _static_pair(name, options)
    tp = dataclasses.replace(TP, ce_impl="plain")
    seqs, targets = torch.nn.functional.pad(SESSION, (3, 0)), torch.tensor([2, 5])
    dynamo.reset()
    explained = dynamo.explain(lambda s, t: loss_fn(static.train(), s, t, tp, 9, None))(seqs, targets)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    dynamo.reset()
    net = _static_pair(name, options)[0]
    explained = dynamo.explain(lambda s, t: loss_fn(net.train(), s, t, tp, 9, None))(seqs, targets)
    assert explained.graph_break_count > 0          # the dynamic build reads the node count
    dynamo.reset()


@pytest.mark.parametrize("name, options", [("posrec", {}), ("srgnn", {"anchors": True}), ("gcsan", {})])
def test_static_step_compiles_once_for_every_width_and_batch_size(name, options):
    """Session 46: on an H200 the trainer's reduce-overhead step (torch.compile, dynamic shapes) recompiled at
    every batch width (the hop search looped width - 1 times), passed dynamo's limit of 8 and fell back to
    eager pieces. With the width-free doubling search the static loss is one graph for widths 8 to 64 and
    batch sizes 3 and 2 (backend aot_eager: dynamo and autograd's tracing, no code generation)."""
    from torch._dynamo.utils import counters
    from pipeline.train.tasks import loss_fn
    tp = dataclasses.replace(TP, model=name, max_len=64, ce_impl="plain",
                             encoding="ldpe" if MODELS[name].uses_encoding else "none")
    from pipeline.train import setup
    enc = setup.build_encoding(tp.encoding, tp, {}) if MODELS[name].uses_encoding else None
    torch.manual_seed(0)
    net = build_model(name, n_items=9, max_len=64, train=tp, options=options, encoding=enc)
    net.static_shapes = True
    step = torch.compile(lambda s, t: loss_fn(net.train(), s, t, tp, 9, None), dynamic=True, backend="aot_eager")
    torch._dynamo.reset()
    counters.clear()
    gen = torch.Generator().manual_seed(0)
    for rows, width in ((3, 8), (3, 16), (3, 64), (2, 24), (3, 8)):
        seqs = torch.randint(1, 10, (rows, width), generator=gen)
        seqs[:, : width // 2] = 0
        step(seqs, torch.randint(1, 10, (rows,), generator=gen)).backward()
    assert (counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())) == (1, 0)
    torch._dynamo.reset()


@pytest.mark.parametrize("name, options, key, want", [
    ("srgnn", {"steps": 0}, "models.srgnn.steps", ">= 1"),          # trained an SR-GNN with no graph step
    ("fgnn", {"readout_steps": -1}, "models.fgnn.readout_steps", ">= 1"),
    ("narm", {"emb_dropout": 1.0}, "models.narm.emb_dropout", r"in \[0, 1\)"),   # all-zero embeddings
    ("narm", {"ct_dropout": -0.5}, "models.narm.ct_dropout", r"in \[0, 1\)"),    # torch's ValueError traceback
    ("stamp", {"init_std": -1.0}, "models.stamp.init_std", ">= 0"),              # torch's RuntimeError traceback
    ("carca", {"init_std": -0.1}, "models.carca.init_std", ">= 0"),
])
def test_model_options_out_of_their_ranges_are_one_line_errors(name, options, key, want):
    """walk 43b #1, #3: options named *dropout, *_std and *steps share their ranges, checked when read."""
    with pytest.raises(ParamsError, match=rf"params key '{key}' must be {want}, got"):
        make(name, **options)


def test_ctr_option_ranges_are_checked_too():
    from models.ctr.config import DINConfig, ctr_options
    with pytest.raises(ParamsError, match=r"params key 'models.din.attention_dropout' must be in \[0, 1\), got 1.5"):
        ctr_options(DINConfig, "din", {"attention_dropout": 1.5})
    assert ctr_options(DINConfig, "din", {"attention_dropout": 0.5}).attention_dropout == 0.5
