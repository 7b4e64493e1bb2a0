"""models/graph.py: batched session graphs built from left-padded sequences."""
from __future__ import annotations

import pytest
import torch

from models.graph import (GatedGraphLayer, build_graph, doublings_for, hop_distances, hop_distances_doubling,
                          neighbour_weights)

# session [5, 3, 5, 7, 2] (two pads) and [4, 4] (five pads)
SEQS = torch.tensor([[0, 0, 5, 3, 5, 7, 2],
                     [0, 0, 0, 0, 0, 4, 4]])


def test_nodes_in_first_appearance_order_right_aligned():
    g = build_graph(SEQS)
    # row 0: unique items by first appearance 5, 3, 7, 2 -> slots 0..3 (4 nodes, n = 4)
    # row 1: one node (item 4), right-aligned in slot 3
    assert g.items.tolist() == [[5, 3, 7, 2], [0, 0, 0, 4]]
    assert g.mask.tolist() == [[True] * 4, [False, False, False, True]]
    # padding points at the dump slot n = 4
    assert g.alias.tolist() == [[4, 4, 0, 1, 0, 2, 3], [4, 4, 4, 4, 4, 3, 3]]
    assert g.counts.tolist() == [[2, 1, 1, 1], [0, 0, 0, 2]]
    assert g.first.tolist() == [0, 3] and g.last.tolist() == [3, 3]


def test_adjacency_counts_transitions():
    g = build_graph(torch.tensor([[3, 5, 3, 5, 7]]))
    # nodes 3:0, 5:1, 7:2; transitions 3->5 twice, 5->3 once, 5->7 once
    assert g.adj.tolist() == [[[0, 2, 0], [1, 0, 1], [0, 0, 0]]]
    row1 = build_graph(SEQS).adj[1]
    assert row1[3, 3].item() == 1.0 and row1.sum().item() == 1.0       # 4 -> 4 self-loop


def test_node_positions_first_forward_last_backward():
    g = build_graph(SEQS)
    # row 0, l = 5: item 5 at forward 0 and 2 -> forward 0 (first), backward 5-1-2 = 2 (last)
    # 3: fwd 1 bwd 3; 7: fwd 3 bwd 1; 2: fwd 4 bwd 0
    assert g.positions.forward[0].tolist() == [0, 1, 3, 4]
    assert g.positions.backward[0].tolist() == [2, 3, 1, 0]
    # row 1, l = 2: item 4 at forward 0 and 1 -> forward 0, backward 0
    assert g.positions.forward[1].tolist() == [0, 0, 0, 0]
    assert g.positions.backward[1].tolist() == [0, 0, 0, 0]
    assert g.positions.lengths.tolist() == [5, 2]


def test_hop_distances_breadth_first():
    # [1, 2, 3, 4, 1, 5]: undirected edges 1-2, 2-3, 3-4, 4-1, 1-5 (nodes 1:0 2:1 3:2 4:3 5:4)
    g = build_graph(torch.tensor([[1, 2, 3, 4, 1, 5]]))
    d = hop_distances(g.adj, g.mask)[0]
    assert d.tolist() == [[0, 1, 2, 1, 1],
                          [1, 0, 1, 2, 2],
                          [2, 1, 0, 1, 3],    # 3 -> 5: 3-2-1-5 (or 3-4-1-5) = 3 hops
                          [1, 2, 1, 0, 2],
                          [1, 2, 3, 2, 0]]
    line = build_graph(torch.arange(1, 8)[None])                        # a path of 7 nodes
    assert hop_distances(line.adj, line.mask)[0, 0].tolist() == list(range(7))


def test_hop_distances_without_the_early_exit_are_the_same():
    """On a GPU the search runs all n - 1 hops (asking whether a frontier is empty waits for the GPU);
    the distances equal the early-exit ones on the CPU, for sessions with repeats, loops and padding."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 13, (64,), generator=g)
    items = torch.randint(1, 7, (64, 12), generator=g)                   # few items: repeats and cycles
    seqs = torch.where(torch.arange(12)[None, :] >= 12 - lengths[:, None], items, 0)
    graph = build_graph(seqs)
    a = hop_distances(graph.adj, graph.mask, early_exit=True)
    b = hop_distances(graph.adj, graph.mask, early_exit=False)
    assert torch.equal(a, b) and int(a.max()) >= 3


def test_extra_left_padding_changes_nothing():
    g1, g2 = build_graph(SEQS), build_graph(torch.nn.functional.pad(SEQS, (5, 0)))
    for a, b in [(g1.items, g2.items), (g1.adj, g2.adj), (g1.counts, g2.counts), (g1.first, g2.first),
                 (g1.last, g2.last), (g1.positions.forward, g2.positions.forward),
                 (g1.positions.backward, g2.positions.backward)]:
        assert torch.equal(a, b)


def test_batch_equals_one_session_at_a_time():
    seqs = torch.tensor([[0, 0, 1, 2, 1, 3], [6, 5, 4, 5, 6, 7], [0, 0, 0, 0, 0, 9]])
    batch = build_graph(seqs)
    for b in range(3):
        one = build_graph(seqs[b:b + 1])
        k = one.items.shape[1]                                          # its nodes sit in the last k slots
        assert torch.equal(batch.items[b, -k:], one.items[0])
        assert torch.equal(batch.adj[b, -k:, -k:], one.adj[0])
        assert batch.adj[b].sum() == one.adj[0].sum()


def test_neighbour_weights_without_anchors_are_degree_normalised():
    w_in, w_out = neighbour_weights(build_graph(torch.tensor([[3, 5, 3, 5, 7]])), anchors=False)
    # out rows: 3 -> {5: 2} ; 5 -> {3: 1, 7: 1} ; 7 -> {}
    assert w_out[0].tolist() == [[0, 1, 0], [0.5, 0, 0.5], [0, 0, 0]]
    # in rows: into 3 from {5: 1}; into 5 from {3: 2}; into 7 from {5: 1}
    assert w_in[0].tolist() == [[0, 1, 0], [1, 0, 0], [0, 1, 0]]
    b_in, _ = neighbour_weights(build_graph(torch.tensor([[3, 5, 3, 5, 3]])), anchors=False, binary=True)
    assert b_in[0].tolist() == [[0, 1], [1, 0]]


def test_gated_graph_layer_shapes_and_isolation():
    torch.manual_seed(0)
    layer = GatedGraphLayer(4)
    x = torch.randn(2, 3, 4)
    w = torch.zeros(2, 3, 3)
    out = layer(x, w, w)                                                # no messages: GRU(0 input, x)
    assert out.shape == (2, 3, 4)
    expected = layer.gru(torch.zeros(6, 8), x.reshape(6, 4)).view(2, 3, 4)
    assert torch.allclose(out, expected)


def test_static_graph_has_one_slot_per_column_and_the_same_graph_on_the_right():
    """static=True (train.compile: reduce-overhead): L node slots whatever the batch holds, the nodes
    right-aligned as before, so the last n slots are the dynamic graph's and the rest are empty."""
    dyn, st = build_graph(SEQS), build_graph(SEQS, static=True)
    L, n = SEQS.shape[1], dyn.items.shape[1]
    assert st.items.shape == (2, L) and st.adj.shape == (2, L, L) and st.static and not dyn.static
    assert torch.equal(st.items[:, L - n:], dyn.items) and not st.items[:, :L - n].any()
    assert not st.mask[:, :L - n].any() and not st.adj[:, :L - n].any() and not st.adj[:, :, :L - n].any()
    assert torch.equal(st.adj[:, L - n:, L - n:], dyn.adj)
    assert torch.equal(st.counts[:, L - n:], dyn.counts)
    for a, b in [(st.positions.forward, dyn.positions.forward), (st.positions.backward, dyn.positions.backward)]:
        assert torch.equal(a[:, L - n:], b) and not a[:, :L - n].any()
    real = SEQS != 0
    assert torch.equal(st.alias[real], dyn.alias[real] + (L - n)) and (st.alias[~real] == L).all()
    assert torch.equal(st.first, dyn.first + (L - n)) and torch.equal(st.last, dyn.last + (L - n))
    d_st = hop_distances(st.adj, st.mask, early_exit=False)
    assert torch.equal(d_st[:, L - n:, L - n:], hop_distances(dyn.adj, dyn.mask)) and not d_st[:, :L - n].any()


def test_min_plus_doubling_gives_the_breadth_first_distances():
    """The static step's hop search (a fixed number of min-plus doublings, whatever the width) equals the
    breadth-first one: sessions with repeats, cycles and padding, and a path as long as max_len allows."""
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 17, (128,), generator=g)
    items = torch.randint(1, 9, (128, 16), generator=g)
    seqs = torch.where(torch.arange(16)[None, :] >= 16 - lengths[:, None], items, 0)
    graph = build_graph(seqs, static=True, max_len=16)
    assert graph.doublings == 4 and graph.adj.shape[1] == 16                  # 2^4 >= 15, the longest path
    bfs = hop_distances(graph.adj, graph.mask)
    assert torch.equal(hop_distances_doubling(graph.adj, graph.mask, graph.doublings), bfs) and int(bfs.max()) >= 4
    line = build_graph(torch.arange(1, 17)[None], static=True, max_len=16)    # a path of 16 nodes: 15 hops
    assert hop_distances_doubling(line.adj, line.mask, line.doublings)[0, 0].tolist() == list(range(16))
    with pytest.raises(RuntimeError, match="wider than the model's max_len"):     # too few would be wrong
        hop_distances_doubling(line.adj, line.mask, 3)
    assert [doublings_for(m) for m in (1, 2, 3, 9, 10, 200, 258)] == [0, 0, 1, 3, 4, 8, 9]
