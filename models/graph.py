"""Batched session graphs built on the device from left-padded sequences.

Notation used for tensor shapes:
    B  batch, L  padded sequence length (LEFT padding, 0 = pad)
    n  node slots = the most unique items of any session in the batch
    D  hidden size

A session becomes a weighted directed graph (000 §4.3.1, SR-GNN [49]): one node per
unique item, an edge v_t -> v_{t+1} per consecutive pair, weighted by how often the
pair occurs. Nodes are ordered by first appearance and RIGHT-aligned like the
sequences (node slots are left-padded), so the node list reads like a de-duplicated
session and any positional encoding can consume it. Everything is tensor ops:
sorting / scatter for the unique items, scatter_add for the adjacency, boolean
matrix powers for the shortest paths; no Python loop over sessions.

Static shapes (`static=True`, what `train.compile: reduce-overhead` runs): the node slot count is the
sequence width L instead of the batch's largest node count, and nothing reads a value back to the host
(no input check, no early exit in the hop search), so a step's shapes follow from its input's shape
alone and the whole step can be captured as one CUDA graph. Extra node slots are empty, left-padded
slots like any other: models are invariant to them (tests/test_graph_models.py), at the cost of computing
over L slots rather than the batch's own count. The hop search then runs a fixed number of min-plus
doublings set by the model's max_len (`hop_distances_doubling`), not a loop of L - 1 hops: a loop whose
length is the width makes torch.compile specialise on every width (one compile each, and past its
recompile limit of 8 the step fell back to eager pieces: 15,097 samples/s on an H200 for PosRec at the
paper's batch of 100, bench/results/train.md "Session 46").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .encodings.base import Positions


@dataclass
class SessionGraph:
    items: torch.Tensor      # (B, n) long, item id per node slot, 0 at empty slots
    mask: torch.Tensor       # (B, n) bool, True at real nodes
    alias: torch.Tensor      # (B, L) long, node slot of each sequence position; n at padding
    adj: torch.Tensor        # (B, n, n) float, adj[b, i, j] = # transitions node i -> node j
    counts: torch.Tensor     # (B, n) long, how often each node's item occurs in the session
    first: torch.Tensor      # (B,) long, node slot of the first item v_0
    last: torch.Tensor       # (B,) long, node slot of the last item v_{l-1}
    positions: Positions     # node-level positions: forward of the first appearance,
                             # backward of the last appearance (000 §4.3.3), lengths = session length
    static: bool = False     # built with static shapes: n = L, and no host reads downstream either
    doublings: int = 0       # static: min-plus doublings that cover any hop distance (< max_len), 0 = unknown


def build_graph(seqs: torch.Tensor, static: bool = False, max_len: Optional[int] = None) -> SessionGraph:
    """Session graph of every row of `seqs` (B, L), left-padded with 0; each row has >= 1 item.
    `static`: L node slots and no host reads (module docstring); `max_len`, the model's, bounds L there
    (the hop search's doublings)."""
    B, L = seqs.shape
    mask = seqs != 0                                                    # (B, L)
    if seqs.device.type == "cpu" and not static:                        # (on a GPU the check would wait for it)
        assert bool(mask[:, -1].all()), "every session needs at least one item (left padding, 0 = pad)"
    seq_pos = Positions.from_mask(mask)
    col = torch.arange(L, device=seqs.device).expand(B, L)              # (B, L)

    # unique items: a stable sort groups equal items (pads last), earliest position first
    key = seqs.masked_fill(~mask, torch.iinfo(seqs.dtype).max)          # (B, L)
    sorted_items, order = torch.sort(key, dim=1, stable=True)           # (B, L)
    prev = F.pad(sorted_items[:, :-1], (1, 0), value=-1)                # (B, L)
    new = mask.gather(1, order) & (sorted_items != prev)                # (B, L) first slot of each group
    group_sorted = new.long().cumsum(1) - 1                             # (B, L)
    group = torch.empty_like(group_sorted).scatter_(1, order, group_sorted)  # (B, L) group per position
    group = group.masked_fill(~mask, L)                                 # padding -> dump group L
    n_nodes = new.sum(1)                                                # (B,)
    n = L if static else int(n_nodes.max())                             # static: no wait for the count

    # order groups by first appearance, then right-align them in n slots
    first_col = torch.full((B, L + 1), L, dtype=torch.long, device=seqs.device)
    first_col = first_col.scatter_reduce(1, group, col, "amin")[:, :L]  # (B, L) first column per group
    rank = torch.empty_like(first_col).scatter_(
        1, first_col.argsort(dim=1, stable=True), col.clone())              # (B, L) rank of each group
    alias = rank.gather(1, group.clamp(max=L - 1)) + (n - n_nodes)[:, None]  # (B, L)
    alias = alias.masked_fill(~mask, n)                                 # padding -> dump slot n

    items = seqs.new_zeros(B, n + 1).scatter_(1, alias, seqs)[:, :n]   # (B, n)
    node_mask = items != 0                                              # (B, n)
    counts = torch.zeros(B, n + 1, dtype=torch.long, device=seqs.device)
    counts = counts.scatter_add_(1, alias, mask.long())[:, :n]         # (B, n)

    # node positions: forward part of the first appearance, backward part of the last one
    big = torch.full((B, n + 1), L, dtype=torch.long, device=seqs.device)
    fwd = big.scatter_reduce(1, alias, seq_pos.forward, "amin")[:, :n].masked_fill(~node_mask, 0)  # (B, n)
    bwd = big.scatter_reduce(1, alias, seq_pos.backward, "amin")[:, :n].masked_fill(~node_mask, 0)  # (B, n)
    positions = Positions(mask=node_mask, forward=fwd, backward=bwd, lengths=seq_pos.lengths)

    # weighted adjacency: scatter_add one per consecutive (real, real) pair
    src, dst = alias[:, :-1], alias[:, 1:]                              # (B, L-1)
    pair = (mask[:, :-1] & mask[:, 1:]).float()                         # (B, L-1)
    adj = torch.zeros(B, (n + 1) * (n + 1), device=seqs.device)
    adj = adj.scatter_add_(1, src * (n + 1) + dst, pair).view(B, n + 1, n + 1)[:, :n, :n]  # (B, n, n)

    return SessionGraph(items=items, mask=node_mask, alias=alias, adj=adj, counts=counts,
                        first=n - n_nodes, last=alias[:, -1], positions=positions, static=static,
                        doublings=doublings_for(max_len) if static and max_len else 0)


def doublings_for(max_len: int) -> int:
    """Min-plus doublings after which every distance of a graph of at most `max_len` nodes is exact:
    k with 2^k >= max_len - 1, the longest possible shortest path."""
    return max(0, int(max_len) - 2).bit_length()


def hop_distances(adj: torch.Tensor, mask: torch.Tensor, early_exit: Optional[bool] = None) -> torch.Tensor:
    """Shortest-path lengths on the undirected, unweighted version of `adj` (B, n, n).

    Breadth-first search for all sources at once: the frontier at hop k is the
    boolean product of the frontier at hop k-1 with the undirected adjacency, minus
    what was reached before. Returns (B, n, n) long; 0 on the diagonal and wherever
    a node is missing or unreachable (a session graph is connected).

    `early_exit` (default: on the CPU only) stops once a frontier is empty. Asking a GPU whether
    it is empty waits for it, once per hop and a dozen times a PosRec step, so there the search runs
    its n - 1 hops: an empty frontier stays empty and changes nothing, the result is the same.
    """
    B, n, _ = adj.shape
    if early_exit is None:
        early_exit = adj.device.type == "cpu"
    eye = torch.eye(n, dtype=torch.bool, device=adj.device)
    und = ((adj + adj.transpose(1, 2)) > 0) & ~eye                      # (B, n, n) undirected, no self-loops
    und = (und & mask[:, :, None] & mask[:, None, :]).float()
    reached = eye & mask[:, :, None]                                    # (B, n, n) source i reached j
    frontier = reached
    dist = torch.zeros(B, n, n, dtype=torch.long, device=adj.device)
    for k in range(1, n):
        nxt = (frontier.float() @ und > 0) & ~reached                   # (B, n, n)
        if early_exit and not bool(nxt.any()):
            break
        dist = dist.masked_fill(nxt, k)
        reached = reached | nxt
        frontier = nxt
    return dist


def hop_distances_doubling(adj: torch.Tensor, mask: torch.Tensor, doublings: int) -> torch.Tensor:
    """`hop_distances` by repeated min-plus squaring, a fixed number of times: D_1 holds 1 on the undirected
    edges, 0 on the diagonal of real nodes and infinity elsewhere, and D_2k[i, j] = min_m D_k[i, m] +
    D_k[m, j], so after k doublings every distance up to 2^k is exact (`doublings_for`). For the static
    step: its length does not depend on n, so torch.compile traces one graph for every width, and no
    frontier is read back. Each doubling is a (B, n, n, n) sum reduced over m, which inductor fuses into
    one kernel; eagerly it is materialised (fine at the widths tests and the CPU use)."""
    B, n, _ = adj.shape
    torch._check(n - 1 <= 2 ** doublings, lambda: "a static step wider than the model's max_len: its hop "
                 "distances need more doublings (models/graph.py doublings_for)")
    eye = torch.eye(n, dtype=torch.bool, device=adj.device)
    und = ((adj + adj.transpose(1, 2)) > 0) & ~eye & mask[:, :, None] & mask[:, None, :]    # (B, n, n)
    inf = torch.tensor(float("inf"), device=adj.device)
    d = torch.where(und, torch.ones((), device=adj.device), inf)
    d = torch.where(eye & mask[:, :, None], torch.zeros((), device=adj.device), d)            # (B, n, n)
    for _ in range(doublings):
        d = torch.minimum(d, (d[:, :, :, None] + d[:, None, :, :]).amin(2))                  # (B, n, n)
    return torch.where(torch.isinf(d), torch.zeros((), device=adj.device), d).long()


def anchor_weights(g: SessionGraph) -> tuple[torch.Tensor, torch.Tensor]:
    """Anchor-node edges of PGGNN (000 §4.3.2) as (in, out) weight matrices, each (B, n, n).

    in[b, t, a]  = weight of anchor a added to N_in(v_t):  a = first item v_0 or a repeated item
    out[b, t, a] = weight of anchor a added to N_out(v_t): a = last item v_{l-1} or a repeated item
    The weight is the hop distance between a and v_t on the undirected unweighted session
    graph (so an anchor contributes nothing to itself). An item that is both the first item
    and repeated is one anchor (N'_in is a set).
    """
    B, n = g.items.shape
    slots = torch.arange(n, device=g.items.device)
    if g.static and g.doublings:                                        # the static step's, width-free
        dist = hop_distances_doubling(g.adj, g.mask, g.doublings).float()   # (B, n, n)
    else:
        dist = hop_distances(g.adj, g.mask, early_exit=False if g.static else None).float()  # (B, n, n)
    repeated = g.counts > 1                                             # (B, n)
    in_anchor = repeated | (slots[None, :] == g.first[:, None])         # (B, n)
    out_anchor = repeated | (slots[None, :] == g.last[:, None])         # (B, n)
    return dist * in_anchor[:, None, :], dist * out_anchor[:, None, :]


def neighbour_weights(g: SessionGraph, anchors: bool, binary: bool = False,
                      normalise: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(in, out) message weights (B, n, n), row t = the neighbours of v_t.

    in[t, t'] = w_{t',t} for t' in N_in(t); out[t, t'] = w_{t,t'} for t' in N_out(t) (Eq. 7).
    With `anchors` the anchor edges are added (an anchor that is also a neighbour sends
    both messages). With `normalise` each row is divided by its total weight, as SR-GNN divides
    by degree (000 builds its graph "similar to [49]"); without it the rows are Eq. 7's raw
    weighted sums, where anchor distances (up to n - 1) outweigh transition counts in long
    sessions. `binary` uses edge presence instead of frequency (SR-GNN's original graph).
    """
    adj = (g.adj > 0).float() if binary else g.adj                      # (B, n, n)
    w_in, w_out = adj.transpose(1, 2), adj                              # (B, n, n)
    if anchors:
        a_in, a_out = anchor_weights(g)
        w_in, w_out = w_in + a_in, w_out + a_out
    if not normalise:
        return w_in, w_out
    return _row_normalise(w_in), _row_normalise(w_out)


def _row_normalise(w: torch.Tensor) -> torch.Tensor:
    total = w.sum(-1, keepdim=True)                                     # (B, n, 1)
    return torch.where(total > 0, w / total.clamp(min=1e-12), torch.zeros_like(w))


class GatedGraphLayer(nn.Module):
    """One GGNN propagation step (000 Eqs. 7-8; SR-GNN): x' = GRU(x, [A_in x W_in || A_out x W_out]).

    Biases: 000's Eq. 7 has none. SR-GNN's code (GNNCell) has two: the edge Linear's own (`edge_bias`),
    added to every x W before the weighted sum, so a node's message gains (its row's total weight) x b, and
    b_iah / b_oah added after the sum (`sum_bias`). SR-GNN and GC-SAN take both, as SR-GNN's code; PosRec
    the edge bias by default and none under `--preset paper` (models.posrec.bias: false, Eq. 7; walk 41g
    #1: with raw anchor weights the edge bias term grew with the session, 1.7x Eq. 7's part at d = 100)."""

    def __init__(self, dim: int, *, edge_bias: bool = True, sum_bias: bool = False):
        super().__init__()
        self.w_in = nn.Linear(dim, dim, bias=edge_bias)
        self.w_out = nn.Linear(dim, dim, bias=edge_bias)
        self.b_in = nn.Parameter(torch.zeros(dim)) if sum_bias else None
        self.b_out = nn.Parameter(torch.zeros(dim)) if sum_bias else None
        self.gru = nn.GRUCell(2 * dim, dim)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """A checkpoint written before b_in / b_out existed (SR-GNN, GC-SAN before session 41) is that model with
        them at zero: loaded as such, not refused as missing keys (walk 41h #1)."""
        if self.b_in is not None and f"{prefix}w_in.weight" in state_dict:
            for name in ("b_in", "b_out"):
                state_dict.setdefault(prefix + name, torch.zeros_like(getattr(self, name)))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor) -> torch.Tensor:
        B, n, D = x.shape
        w_in, w_out = w_in.to(x.dtype), w_out.to(x.dtype)              # the graph's weights are float32
        m_in, m_out = w_in @ self.w_in(x), w_out @ self.w_out(x)        # (B, n, D) each
        if self.b_in is not None:
            m_in, m_out = m_in + self.b_in, m_out + self.b_out
        msg = torch.cat([m_in, m_out], dim=-1)                          # (B, n, 2D)
        return self.gru(msg.reshape(B * n, 2 * D), x.reshape(B * n, D)).view(B, n, D)  # (B, n, D)
