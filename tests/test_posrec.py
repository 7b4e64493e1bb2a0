"""PosRec (000 §4.3): PGGNN anchor edges, node-level (L)DPE, readout, options, presets."""
from __future__ import annotations

import pytest
import torch

from models import MODELS, build_model
from models.encodings import build_encoding
from models.encodings.base import Positions
from models.graph import anchor_weights, build_graph, neighbour_weights
from models.posrec import PosRec, at_slot
from pipeline.errors import ParamsError
from pipeline.params import TrainParams

TP = TrainParams(dim=8, layers=1, heads=1, dropout=0.0, max_len=10)

# Hand-made session v = [5, 3, 5, 7, 2] (left-padded). Nodes by first appearance:
#   slot 0: item 5 (first item v_0, and repeated), slot 1: 3, slot 2: 7, slot 3: 2 (last item v_4)
# Directed edges: 5->3, 3->5, 5->7, 7->2. Undirected unweighted graph: 5-3, 5-7, 7-2, so
#   hop(5,3)=1 hop(5,7)=1 hop(5,2)=2 hop(3,7)=2 hop(3,2)=3 hop(7,2)=1
SESSION = torch.tensor([[0, 0, 5, 3, 5, 7, 2]])


def test_anchor_edges_and_weights_by_hand():
    a_in, a_out = anchor_weights(build_graph(SESSION))
    # N_in anchors of every node: v_0 = 5 (also the only repeated item, one anchor): column 0
    # holds hop(t, 5) = [0, 1, 1, 2] for t = 5, 3, 7, 2; nothing else is an in-anchor
    assert a_in[0].tolist() == [[0, 0, 0, 0],
                                [1, 0, 0, 0],
                                [1, 0, 0, 0],
                                [2, 0, 0, 0]]
    # N_out anchors: the repeated item 5 (column 0, hop(t, 5)) and the last item 2
    # (column 3, hop(t, 2) = [2, 3, 1, 0])
    assert a_out[0].tolist() == [[0, 0, 0, 2],
                                 [1, 0, 0, 3],
                                 [1, 0, 0, 1],
                                 [2, 0, 0, 0]]


def test_pggnn_message_weights_by_hand():
    w_in, w_out = neighbour_weights(build_graph(SESSION), anchors=True)
    # in:  A^T + anchors = [[0,1,0,0],[2,0,0,0],[2,0,0,0],[2,0,1,0]]
    #      (3 gets 5->3 (1) + anchor 5 at hop 1; 2 gets 7->2 (1) + anchor 5 at hop 2),
    #      each row divided by its sum
    assert torch.allclose(w_in[0], torch.tensor([[0, 1, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0],
                                                 [2 / 3, 0, 1 / 3, 0]]))
    # out: A + anchors = [[0,1,1,2],[2,0,0,3],[1,0,0,2],[2,0,0,0]] / row sums [4, 5, 3, 2]
    assert torch.allclose(w_out[0], torch.tensor([[0, .25, .25, .5], [.4, 0, 0, .6],
                                                  [1 / 3, 0, 0, 2 / 3], [1, 0, 0, 0]]))
    # without anchors (PosRec-ANC): only the transitions
    n_in, n_out = neighbour_weights(build_graph(SESSION), anchors=False)
    assert n_out[0].tolist() == [[0, .5, .5, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0]]
    assert n_in[0].tolist() == [[0, 1, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0]]
    # normalise=False: Eq. 7's raw weighted sums (the matrices in the comments above)
    r_in, r_out = neighbour_weights(build_graph(SESSION), anchors=True, normalise=False)
    assert r_in[0].tolist() == [[0, 1, 0, 0], [2, 0, 0, 0], [2, 0, 0, 0], [2, 0, 1, 0]]
    assert r_out[0].tolist() == [[0, 1, 1, 2], [2, 0, 0, 3], [1, 0, 0, 2], [2, 0, 0, 0]]


@pytest.mark.parametrize("name", ["dpe", "ldpe"])
def test_repeated_item_takes_first_forward_and_last_backward_part(name):
    """000 §4.3.3: a repeated item's node takes the forward part of (L)DPE of its earliest
    appearance and the backward part of its latest appearance."""
    torch.manual_seed(0)
    enc = build_encoding(name, dim=8, max_len=10)
    g = build_graph(SESSION)
    node = enc.table(g.positions)[0]                                    # (n, 8)
    seq = enc.table(Positions.from_seqs(SESSION))[0]                    # (L, 8)
    # item 5 is at columns 2 and 4 (forward 0 and 2, backward 4 and 2): node slot 0
    assert torch.equal(node[0, :4], seq[2, :4])                         # forward half: first appearance
    assert torch.equal(node[0, 4:], seq[4, 4:])                         # backward half: last appearance
    assert not torch.equal(node[0], seq[2]) and not torch.equal(node[0], seq[4])
    # items seen once keep their own encoding: 3 (col 3), 7 (col 5), 2 (col 6)
    for slot, col in [(1, 3), (2, 5), (3, 6)]:
        assert torch.equal(node[slot], seq[col])


def _posrec(options=None, encoding="ldpe", seed=0):
    torch.manual_seed(seed)
    enc = None if encoding is None else build_encoding(encoding, dim=8, max_len=10)
    return build_model("posrec", n_items=9, max_len=10, train=TP, options=options or {}, encoding=enc).eval()


def test_session_vector_is_eq_10():
    seqs = torch.tensor([[0, 0, 5, 3, 5, 7, 2], [0, 1, 2, 3, 4, 1, 6]])
    parts = []
    for lambdas in [(1, 0, 0), (0, 1, 0), (0, 0, 1)]:
        m = _posrec(dict(zip(("lambda0", "lambda1", "lambda2"), lambdas)))
        parts.append(m.encode(seqs))
    full = _posrec({"lambda0": 1.0, "lambda1": 1.0, "lambda2": 0.5})
    assert torch.allclose(full.encode(seqs), parts[0] + parts[1] + 0.5 * parts[2], atol=1e-6)
    # lambda0 alone: X'_last = one PGGNN step on the anchor-augmented graph, at the last node
    m = _posrec({"lambda0": 1.0, "lambda1": 0.0, "lambda2": 0.0})
    g = build_graph(seqs)
    w_in, w_out = neighbour_weights(g, anchors=True)
    x = m.pggnn(m.emb(g.items), w_in, w_out)
    assert torch.allclose(parts[0], at_slot(x, g.last), atol=1e-6)
    # the readout's first/last nodes are v_0 and v_{l-1}: row 1's first item 1 repeats later
    assert g.items[1, g.first[1]] == 1 and g.items[1, g.last[1]] == 6


def test_encoding_is_injected_and_swappable():
    seqs = torch.tensor([[0, 0, 5, 3, 5, 7, 2]])
    m = _posrec(encoding="spe")
    assert m.encoding.name == "spe"
    assert _posrec(encoding=None).encoding.name == "ldpe"               # the paper's default
    # same weights, another encoding: different scores (the readout sees P)
    a, b = _posrec(encoding="none"), _posrec(encoding="dpe")
    assert not torch.allclose(a(seqs)[:, 1:], b(seqs)[:, 1:])


def test_anchor_option_changes_the_model():
    seqs = torch.tensor([[0, 0, 5, 3, 5, 7, 2]])
    with_anchors = _posrec({"anchors": True})(seqs)
    without = _posrec({"anchors": False})(seqs)
    assert not torch.allclose(with_anchors[:, 1:], without[:, 1:])


def test_options_are_typed():
    with pytest.raises(ParamsError, match=r"unknown params key 'models.posrec.lamda2'.*did you mean 'lambda2'"):
        _posrec({"lamda2": 0.5})
    with pytest.raises(ParamsError, match="models.posrec.anchors"):
        _posrec({"anchors": "yes"})
    with pytest.raises(ParamsError, match="norm"):
        _posrec({"norm": "middle"})


def test_paper_preset_resolves():
    from pipeline.train import resolve_train
    tp = resolve_train(TrainParams(), MODELS["posrec"], "paper", "posrec", None)
    assert (tp.encoding, tp.epochs, tp.batch_size, tp.dim, tp.layers, tp.lr, tp.lr_schedule,
            tp.lr_step, tp.lr_gamma) == ("ldpe", 4, 100, 100, 1, 1e-3, "step", 3, 0.1)
    assert tp.weight_decay > 0
    m = build_model("posrec", n_items=5, max_len=tp.max_len, train=tp, options={}, encoding=None)
    assert isinstance(m, PosRec) and len(m.blocks) == 1 and m.emb.weight.shape == (6, 100)
    from pipeline.presets import resolve
    for ds in ("diginetica", "yoochoose_1_64", "beauty"):               # Eq. 7: raw weighted sums, no bias
        assert resolve(MODELS["posrec"].presets, "paper", "posrec", ds).models["posrec"]["normalise"] is False
        assert resolve(MODELS["posrec"].presets, "paper", "posrec", ds).models["posrec"]["bias"] is False
    for name, variant, lambda2 in (("paper_diginetica", "diginetica", 1.0), ("paper_yoochoose", "yoochoose", 0.5)):
        forced = resolve(MODELS["posrec"].presets, name, "posrec", "my_sessions")   # a variant by name
        assert forced.models["posrec"]["normalise"] is False and forced.models["posrec"]["lambda2"] == lambda2
        assert forced.record() == {"name": "paper", "variant": variant}      # recorded as every NAME_VARIANT is
        assert forced.train == resolve(MODELS["posrec"].presets, "paper", "posrec", variant).train


def test_normalise_false_feeds_eq_7_raw_sums_to_the_gnn():
    """Without normalisation X' is the GGNN step on the raw (frequency + hop distance) weights;
    the default divides each row by its sum, a different function of the same weights."""
    seqs = torch.tensor([[0, 0, 5, 3, 5, 7, 2], [0, 1, 2, 3, 4, 1, 6]])
    only_x = {"lambda0": 1.0, "lambda1": 0.0, "lambda2": 0.0}
    raw, norm = _posrec({**only_x, "normalise": False}), _posrec(only_x)
    g = build_graph(seqs)
    r_in, r_out = neighbour_weights(g, anchors=True, normalise=False)
    with torch.no_grad():
        x = raw.pggnn(raw.emb(g.items), r_in, r_out)
        assert torch.allclose(raw.encode(seqs), at_slot(x, g.last), atol=1e-6)
        assert not torch.allclose(raw.encode(seqs), norm.encode(seqs), atol=1e-3)


def test_the_pggnn_message_is_eq_7_under_the_paper_preset():
    """Walk 41g #1: the message step's Linear had a bias, so each node's message gained (its row's total weight)
    x b, which Eq. 7 has not; with raw anchor weights that term grew with the session. models.posrec.bias
    false (the paper preset) computes Eq. 7 exactly, and GRU(x, x_hat) is Eq. 8."""
    torch.manual_seed(0)
    m = build_model("posrec", n_items=9, max_len=10, train=TP, options={"bias": False, "normalise": False},
                    encoding=None).double().eval()
    layer = m.pggnn
    assert layer.w_in.bias is None and layer.w_out.bias is None and layer.b_in is None
    g = build_graph(SESSION)
    w_in, w_out = neighbour_weights(g, anchors=True, normalise=False)
    x = m.emb(g.items)                                                  # (1, n, D) float64
    want_msg = torch.cat([w_in.double() @ x @ layer.w_in.weight.T, w_out.double() @ x @ layer.w_out.weight.T], -1)
    want = layer.gru(want_msg[0], x[0])[None]
    assert torch.allclose(layer(x, w_in, w_out), want, atol=1e-12)      # float64 too (walk 41g #2)
    m.encode(SESSION)
    biased = build_model("posrec", n_items=9, max_len=10, train=TP, options={}, encoding=None)
    assert biased.pggnn.w_in.bias is not None                           # the default keeps SR-GNN's edge bias
    srgnn = build_model("srgnn", n_items=9, max_len=10, train=TP, options={}, encoding=None)
    assert srgnn.gnn.b_in is not None and srgnn.gnn.w_in.bias is not None   # SR-GNN's code: both biases
    srgnn.double().encode(SESSION)


def test_srgnn_takes_its_sum_biases_and_loads_a_checkpoint_written_without_them():
    """SR-GNN's code adds b_iah / b_oah after the message sum (they change the output), and a checkpoint written
    before they existed is that model with them at zero, loaded as such (walk 41h #1, #8)."""
    torch.manual_seed(0)
    srgnn = build_model("srgnn", n_items=9, max_len=10, train=TP, options={}, encoding=None).eval()
    with torch.no_grad():
        before = srgnn.encode(SESSION)
        srgnn.gnn.b_in.add_(1.0)
        assert not torch.allclose(srgnn.encode(SESSION), before)       # the bias is in the forward
        srgnn.gnn.b_in.zero_(), srgnn.gnn.b_out.zero_()
        old = {k: v for k, v in srgnn.state_dict().items() if not k.endswith(("b_in", "b_out"))}
        fresh = build_model("srgnn", n_items=9, max_len=10, train=TP, options={}, encoding=None).eval()
        fresh.load_state_dict(old)                                      # strict: no missing-key error
        assert torch.equal(fresh.gnn.b_in, torch.zeros(TP.dim)) and torch.allclose(fresh.encode(SESSION),
                                                                                  srgnn.encode(SESSION))
