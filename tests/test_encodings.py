"""Properties of every positional encoding, parametrised over the registry.

Awareness (000 Defs. 3.1 / 3.2) is checked numerically on the per-item table P^l that
each encoding exposes (`table`), for sessions of lengths 3, 5 and 8 left-padded in one
batch: a dimension can belong to the set A (B) only if its value at forward position
pos (backward position l - 1 - pos) is bit-identical across every length; the encoding
is aware iff that largest candidate set is non-empty and separates distinct positions.
"""
from __future__ import annotations

import math

import subprocess
import sys

import pytest
import torch

from models.encodings import ENCODINGS, build_encoding, check_encoding_options
from models.encodings.base import Positions, allowed_keys
from models.encodings.contextual import contextual_positions, interpolate
from models.encodings.relative import clipped_buckets
from pipeline.errors import ParamsError, UnknownNameError

D, H, LAYERS, MAX_LEN = 16, 2, 2, 12
LENGTHS = (3, 5, 8)

# Expected (forward-aware, backward-aware), derived from 000 Defs. 3.1/3.2 and each equation.
EXPECTED = {
    "none": (False, False),        # no table at all
    "spe": (True, False),          # 000 Thm. 3.4
    "rspe": (False, True),         # 000 Cor. 3.6
    "lpe": (True, False),          # Embed[pos]
    "lrpe": (False, True),         # Embed[l - pos - 1]
    "dpe": (True, True),           # 000 Thm. 4.1
    "ldpe": (True, True),          # 000 Eq. 6
    "aspe": (False, False),        # 000 §3.4: every dim mixes pos and l - pos - 1
    "alpe": (False, False),        # learned analogue of ASPE
    "2dspe": (True, False),        # Eq. 24: the position half depends on pos only
    "2dlpe": (True, False),
    "abs": (False, True),          # 004: reversed
    "abs_con": (False, True),
    "none_con": (False, False),    # Eq. 6's projection of [x ; 0]: no position
    "learnt": (False, True),
    "learnt_con": (False, True),
    "rotatory": (False, True),
    "rotatory_con": (False, True),
    "rope": (False, False),        # relative (scores of i - j only): 000 Cor. 3.5
    "rope_one": (False, False),
    "rmha": (False, False),
    "alibi": (False, False),
    "cope": (False, False),        # contextual, relative when gates are 1
    "cape": (False, False),
    "parec": (False, True),        # rows indexed by end-aligned slots
    "fparec": (False, True),
    "average": (False, False),     # patterns of i - j
    "linear_annealing": (False, True),   # a_ij = slot of j (003 Eq. 13): end-aligned
    "exponential_annealing": (False, False),
}
RELATIVE = ["rope", "rope_one", "rmha", "alibi", "cope", "cape", "average", "exponential_annealing"]


def make(name: str, **options):
    torch.manual_seed(0)
    return build_encoding(name, dim=D, max_len=MAX_LEN, heads=H, layers=LAYERS, options=options)


def batch_positions(lengths=LENGTHS, L=None) -> Positions:
    L = L or max(lengths)
    mask = torch.zeros(len(lengths), L, dtype=torch.bool)
    for b, n in enumerate(lengths):
        mask[b, L - n:] = True
    return Positions.from_mask(mask)


def shifted(pos: Positions, c: int) -> Positions:
    return Positions(mask=pos.mask, forward=pos.forward + c, backward=pos.backward + c, lengths=pos.lengths)


def awareness(enc) -> tuple[bool, bool]:
    """Numerical 000 Defs. 3.1 (forward) and 3.2 (backward) on the table of a padded batch."""
    pos = batch_positions()
    with torch.no_grad():
        table = enc.table(pos)
    if table is None:
        return False, False
    rows = [table[b, pos.mask[b]] for b in range(len(LENGTHS))]            # (l, m) per session
    result = []
    for backward in (False, True):
        def at(r, t):  # row of position t counted from the start (or the end)
            return r[r.size(0) - 1 - t] if backward else r[t]
        same = torch.ones(table.size(-1), dtype=torch.bool)
        for p in rows:
            for q in rows:
                for t in range(min(p.size(0), q.size(0))):
                    same &= at(p, t) == at(q, t)
        longest = max(rows, key=len)
        sub = torch.stack([at(longest, t)[same] for t in range(longest.size(0))])  # (l, |A|)
        distinct = bool(same.any()) and torch.unique(sub, dim=0).size(0) == sub.size(0)
        result.append(distinct)
    return tuple(result)


def test_registry_covers_expected_and_docstrings_cite_papers():
    assert set(ENCODINGS) == set(EXPECTED)
    for name, spec in ENCODINGS.items():
        cls = type(make(name))
        assert cls.__doc__ and any(tag in cls.__doc__ for tag in ("000", "001", "003", "004", "Press")), name
        assert (spec.forward_aware, spec.backward_aware) == EXPECTED[name], name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_awareness_matches_definitions(name):
    assert awareness(make(name)) == EXPECTED[name]


def test_awareness_checker_rejects_a_symmetric_sum():
    """000 §3.4: plain SPE + RSPE (no swap) is symmetric, so positions collide - not aware."""
    spe, rspe = make("spe"), make("rspe")

    class Sum:
        def table(self, pos):
            return spe.table(pos) + rspe.table(pos)
    assert awareness(Sum()) == (False, False)


def test_spe_values_are_equation_1():
    pos = batch_positions((4,))
    t = make("spe").table(pos)[0]                                           # (4, D)
    assert t[0, 0] == 0 and t[0, 1] == 1
    assert torch.allclose(t[3, 2], torch.tensor(3 / 10000 ** (2 / D)).sin())
    dpe = make("dpe").table(pos)[0]
    assert torch.allclose(dpe[3, D // 2], torch.tensor(0.0)) and torch.allclose(dpe[0, D // 2], torch.tensor(3.0).sin())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_learnable_flag_says_whether_the_encoding_has_weights(name):
    assert ENCODINGS[name].learnable == any(p.requires_grad for p in make(name).parameters()), name


def test_rotatory_is_the_studys_learned_sin_cos_table_added_to_the_input():
    """004 §3 as its released code builds it: learned angles a = Embed[l - 1 - pos] / 10000,
    PE = (sin 2 pi a_0, cos 2 pi a_0, sin 2 pi a_1, ...), x + PE; reversed positions."""
    enc = make("rotatory")
    with torch.no_grad():
        enc.angles.weight.copy_(torch.arange(MAX_LEN + 1, dtype=torch.float)[:, None] * 100
                                + torch.arange(D // 2, dtype=torch.float)[None, :] * 2500)
    pos = batch_positions((3,))
    x = torch.zeros(1, 3, D)
    with torch.no_grad():
        pe = enc.embed(x, pos)[0]                                           # a zero input keeps position
    assert torch.equal(pe, enc.table(pos)[0])
    # the last item (backward position 0) reads row 0: angles 2 pi (0, 0.25, 0.5, 0.75, ...)
    want = torch.tensor([[math.sin(2 * math.pi * k / 4), math.cos(2 * math.pi * k / 4)] for k in range(D // 2)])
    assert torch.allclose(pe[2], want.flatten(), atol=1e-6)
    # the first item of 3 (backward position 2): angles 2 pi (0.02, 0.27, ...)
    a = 2 * math.pi * (200 + 2500 * torch.arange(D // 2, dtype=torch.float64)) / 10000
    assert torch.allclose(pe[0], torch.stack((a.sin(), a.cos()), -1).flatten().float(), atol=1e-6)
    assert enc.angles.weight.shape == (MAX_LEN + 1, D // 2)                 # only the angles that are used
    con = make("rotatory_con")
    y = torch.randn(1, 3, D, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(con.embed(y, pos), con.proj(torch.cat((y, con.table(pos)), -1)))
        assert not torch.allclose(con.embed(x, pos)[0, 0], con.embed(x, pos)[0, 1])


def test_none_con_is_abs_cons_projection_without_the_sinusoid():
    """The +Con ablation: for the same seed, none_con's projection is abs_con's to the bit, and its
    output is that projection of [x ; 0], the same for every position and length."""
    none_con, abs_con = make("none_con"), make("abs_con")
    assert torch.equal(none_con.proj.weight, abs_con.proj.weight) and none_con.proj.weight.shape == (D, 2 * D)
    pos = batch_positions()
    x = torch.randn(len(LENGTHS), max(LENGTHS), D, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = none_con.embed(x, pos)
        assert torch.allclose(y, none_con.proj(torch.cat((x, torch.zeros_like(x)), -1)))
        assert torch.allclose(y, x @ none_con.proj.weight[:, :D].T + none_con.proj.bias, atol=1e-6)
        assert not torch.allclose(abs_con.embed(x, pos), y)                 # the sinusoid does change it
        assert torch.allclose(none_con.embed(x[:1, -3:], batch_positions((3,))), y[:1, -3:], atol=1e-6)


@pytest.mark.parametrize("name", ["none_con", "abs_con", "learnt_con", "rotatory_con"])
def test_identity_init_starts_con_as_the_item_plus_a_projected_pe(name):
    """encodings.X_con.init=identity: after the default draw (same random stream) the item half is I
    and the bias 0, the PE half is the default's; so the layer is x + W_pe PE at step 0 and
    none_con is exactly `none` there, while the default start shrinks the item vector."""
    default, ident = make(name), make(name, init="identity")
    assert torch.equal(ident.proj.weight[:, :D], torch.eye(D)) and not ident.proj.bias.any()
    assert torch.equal(ident.proj.weight[:, D:], default.proj.weight[:, D:])    # PE half as drawn
    torch.manual_seed(0); make(name); a = torch.rand(3)
    torch.manual_seed(0); make(name, init="identity"); b = torch.rand(3)
    assert torch.equal(a, b)                                                     # no extra draws
    pos = batch_positions()
    x = torch.randn(len(LENGTHS), max(LENGTHS), D, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = ident.embed(x, pos)
        pe = ident.table(pos).expand(x.size(0), -1, -1)
        assert torch.allclose(y, x + pe @ ident.proj.weight[:, D:].T, atol=1e-5)
        if name == "none_con":
            assert torch.equal(y, x)
            assert default.embed(x, pos).norm() < 0.75 * x.norm()                 # the default shrinks it
    with pytest.raises(ParamsError, match=f"encodings.{name}.init must be one of default, identity, got 'eye'"):
        check_encoding_options(name, {"init": "eye"})


def test_rotatory_starts_nearly_flat_as_the_studys_initialisation():
    """Angles N(0, 1) / 10000: at initialisation every position's PE is within 1e-2 of
    (0, 1, 0, 1, ...) - the study's encoding learns its positions from almost nothing."""
    table = make("rotatory").table(batch_positions((MAX_LEN,)))[0].detach()  # (n, D)
    flat = torch.tensor([0.0, 1.0]).repeat(D // 2)
    assert (table - flat).abs().max() < 1e-2
    assert torch.unique(table[:, 0]).numel() == MAX_LEN                    # yet every position differs


def test_unknown_name_and_bad_options():
    with pytest.raises(UnknownNameError) as e:
        build_encoding("ldpee", dim=D, max_len=MAX_LEN, options={})
    assert "ldpe" in str(e.value) and "rmha" in str(e.value)
    with pytest.raises(ParamsError, match="encodings.rmha.clipp"):
        check_encoding_options("rmha", {"clipp": 4})
    with pytest.raises(ParamsError, match="clip must be >= 1"):
        check_encoding_options("rmha", {"clip": 0})
    with pytest.raises(ParamsError, match="must be int"):
        check_encoding_options("fparec", {"rank": "big"})
    assert check_encoding_options("rmha", {"clip": 2}).clip == 2


def test_registry_import_is_torch_free():
    code = ("import sys; from models.encodings import ENCODINGS, check_encoding_options; "
            "check_encoding_options('cape', {'pos_dim': 8}); print(len(ENCODINGS), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(len(EXPECTED)), "False"]


# --------------------------------------------------------------------------- relative scores

def scores(enc, q, k, pos, layer=0):
    """Content + positional logits as attention.py computes them (B, H, Lq, L)."""
    q, k = enc.rotate(q, k, pos, layer)
    logits = q @ k.transpose(-1, -2) / (q.size(-1) ** 0.5)
    b = enc.bias(q, k, pos, layer, query_input=item_inputs(q.size(0), q.size(2)))
    logits = logits if b is None else logits + b
    probs = torch.softmax(logits.masked_fill(~allowed_keys(pos, q.size(2)), float("-inf")), -1)
    return enc.weights(probs, pos, layer)


def item_inputs(B, L):
    """(B, L, D) stand-in for what the queries were projected from (CAPE's fusion input, 001 Eq. 5)."""
    return torch.randn(B, L, D, generator=torch.Generator().manual_seed(2))


def qk(L=6, B=2):
    g = torch.Generator().manual_seed(1)
    return torch.randn(B, H, L, D // H, generator=g), torch.randn(B, H, L, D // H, generator=g)


@pytest.mark.parametrize("name", RELATIVE)
def test_relative_scores_depend_only_on_distance(name):
    enc, (q, k) = make(name), qk()
    pos = batch_positions((6, 4))
    with torch.no_grad():
        ref = scores(enc, q, k, pos)
        for c in (1, 3):
            assert torch.allclose(scores(enc, q, k, shifted(pos, c)), ref, atol=1e-5), c


def test_rope_rotates_and_rope_one_only_in_block_one():
    q, k = qk()
    pos = batch_positions((6, 6))
    none, rope, one = make("none"), make("rope"), make("rope_one")
    base = scores(none, q, k, pos)
    assert (scores(rope, q, k, pos) - base).abs().max() > 1e-2              # it rotates by position
    assert (scores(rope, q, k, pos, layer=1) - base).abs().max() > 1e-2
    assert torch.equal(scores(one, q, k, pos, layer=0), scores(rope, q, k, pos, layer=0))
    assert torch.equal(scores(one, q, k, pos, layer=1), base)
    rq, rk = rope.rotate(q, k, pos, 0)                                      # a rotation keeps norms
    assert torch.allclose(rq.norm(dim=-1), q.norm(dim=-1), atol=1e-5)
    assert torch.equal(rq[:, :, -1], q[:, :, -1])                           # last item: angle 0


def test_rmha_distances_beyond_clip_share_one_embedding():
    assert clipped_buckets(torch.tensor([-9, -5, -4, -3, 0, 3, 4, 7]), 4).tolist() == [0, 0, 0, 1, 4, 7, 8, 8]
    enc = make("rmha", clip=2)
    q = torch.ones(1, H, 6, D // H)
    pos = batch_positions((6,))
    with torch.no_grad():
        b = enc.bias(q, q, pos, 0)[0, 0, 5]                                 # query = last item, keys j - i = -5..0
    assert b[0] == b[1] == b[2] == b[3] and b[3] != b[4] and b[4] != b[5]  # -5..-2 share the clip-2 bucket
    probs = torch.zeros(1, H, 6, 6)
    probs[..., 0] = 1.0                                                     # all mass at distance <= -clip
    v = enc.values(probs, torch.zeros(1, H, 6, D // H), pos, 0)
    assert torch.allclose(v[0, :, 5], enc.value[0, :, 0]) and torch.allclose(v[0, :, 2], enc.value[0, :, 0])


def test_alibi_penalises_distance_linearly():
    enc = make("alibi")
    q = torch.zeros(1, H, 5, D // H)
    b = enc.bias(q, q, batch_positions((5,)), 0)[0]                         # (H, 5, 5)
    assert torch.allclose(b[0, 4], -enc.slopes[0] * torch.tensor([4.0, 3, 2, 1, 0]))
    assert enc.slopes.tolist() == [2.0 ** -4, 2.0 ** -8]


# --------------------------------------------------------------------------- CAPE / CoPE

def test_cape_unit_gates_give_relative_positions():
    pos = batch_positions((4, 2), L=4)
    gates = torch.ones(2, 1, 4, 4)
    p = contextual_positions(gates, allowed_keys(pos, 4))[0, 0]            # (4, 4)
    i, j = torch.meshgrid(torch.arange(4), torch.arange(4), indexing="ij")
    assert torch.equal(p[j <= i], (i - j + 1)[j <= i].float())             # 001, remark after Eq. 2
    p2 = contextual_positions(gates, allowed_keys(pos, 4))[1, 0]
    assert p2[3].tolist() == [2.0, 2.0, 2.0, 1.0]                          # padding keys add nothing


@pytest.mark.parametrize("name", ["cope", "cape"])
def test_contextual_bias_with_unit_gates_is_relative_lookup(name):
    enc = make(name)
    enc.gates = lambda sim: torch.ones_like(sim)
    q, k = qk(L=5, B=1)
    x = item_inputs(1, 5)
    pos = batch_positions((5,))
    with torch.no_grad():
        b, z = enc.bias(q, k, pos, 1, query_input=x), enc.scores(q, 1, x)   # (1, H, 5, 5), (1, H|1, 5, n+1)
    z = z.expand(1, H, 5, MAX_LEN + 1)
    for i in range(5):
        for j in range(i + 1):
            assert torch.equal(b[0, :, i, j], z[0, :, i, i - j + 1])


def test_interpolation_is_exact():
    z = torch.tensor([[0.0, 1.0, 2.0, 4.0, 8.0]])
    p = torch.tensor([[2.25, 3.0, 0.5, 4.0, 7.0]])
    assert interpolate(z, p).tolist() == [[2.5, 4.0, 0.5, 8.0, 8.0]]       # 0.75*2 + 0.25*4; clamp at n
    p.requires_grad_(True)
    interpolate(z, p).sum().backward()
    assert p.grad.tolist()[0][:3] == [2.0, 4.0, 1.0]                        # slope z[ceil] - z[floor]
    got = interpolate(z, torch.tensor([[float("nan"), 1.0]]))               # a diverged model's position: NaN
    assert got[0, 0].isnan() and got[0, 1] == 1.0                           # out, not an index error (walk 41i #1)


def test_cape_target_attention_counts_from_the_target():
    enc = make("cape")
    enc.gates = lambda sim: torch.ones_like(sim)
    pos = batch_positions((3,), L=5)
    p = enc.positions(torch.randn(1, H, 1, 5), pos)[0, 0, 0]                 # (5,)
    assert p.tolist() == [3.0, 3.0, 3.0, 2.0, 1.0]                          # last item 1 step back; pads add 0


def test_cape_bidirectional_positions_count_to_the_end():
    """With the attention's own bidirectional mask every query counts from the last key (001 Eq. 2:
    p_j = sum_{k=j}^{n} g_k), so later keys no longer all collapse onto position 0."""
    enc = make("cape")
    enc.gates = lambda sim: torch.ones_like(sim)
    pos = batch_positions((3,), L=4)
    both = enc.positions(torch.zeros(1, 1, 4, 4), pos, allowed_keys(pos, 4, causal=False))[0, 0]
    assert both[1].tolist() == [3.0, 3.0, 2.0, 1.0] and both[3].tolist() == [3.0, 3.0, 2.0, 1.0]
    causal = enc.positions(torch.zeros(1, 1, 4, 4), pos)[0, 0]
    assert causal[2].tolist() == [2.0, 2.0, 1.0, 0.0]                     # keys after the query: 0


def test_cape_equations_by_hand():
    """001 Eqs. 1, 2, 5, 6, 7 on one target over three keys, with W, b and e set by hand."""
    enc = build_encoding("cape", dim=2, max_len=4, heads=1, layers=1, options={"pos_dim": 2})
    with torch.no_grad():
        enc.fuse[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))   # W (d_pos x d)
        enc.fuse[0].bias.copy_(torch.tensor([0.0, -1.0]))                  # b
        enc.emb.copy_(torch.tensor([[[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0]]]))  # e[0..4]
    t = torch.tensor([[[1.0, 1.0]]])                                        # (1, 1, d): the target item
    sim = torch.tensor([[[[0.0, math.log(3.0), -math.log(3.0)]]]])          # (1, 1, 1, 3) sim(t, h_j)
    pos = batch_positions((3,))
    with torch.no_grad():
        out = enc.score_bias(sim, t[:, None], pos, 0, query_input=t)[0, 0, 0]
    g = [0.5, 0.25, 0.75]                                                   # Eq. 1: 1 - sigmoid(sim)
    p = [g[0] + g[1] + g[2], g[1] + g[2], g[2]]                             # Eq. 2: 1.5, 1.0, 0.75
    silu = lambda v: v / (1 + math.exp(-v))                                 # noqa: E731
    tp = [silu(1.0), silu(1.0)]                                             # Eq. 5: SiLU(W t + b) = SiLU([1, 1])
    z = [0.0, tp[0], tp[1], tp[0] + tp[1], 2 * tp[0]]                       # Eq. 6: t' . e[p]
    want = [0.5 * z[1] + 0.5 * z[2], z[1], 0.25 * z[0] + 0.75 * z[1]]       # Eq. 7 at p = 1.5, 1.0, 0.75
    assert out.tolist() == pytest.approx(want, abs=1e-6) and p == [1.5, 1.0, 0.75]


def test_cape_fusion_acts_on_the_target_item_not_the_projected_query():
    """001 Eq. 5: W (d x d_pos) maps the target embedding t. Two targets whose per-head queries are
    identical (W_Q zeroed) still get different positional scores; a fusion of the projected query
    (the old per-head one) would give them the same attention output."""
    from models.attention import MultiHeadAttention
    enc = make("cape", pos_dim=8)
    assert enc.fuse[0].in_features == D and enc.fuse[0].out_features == 8
    torch.manual_seed(3)
    attn = MultiHeadAttention(D, H, 0.0, layer=1).eval()
    with torch.no_grad():
        attn.q.weight.zero_()                                               # q = W_Q t + b_Q = b_Q for any t
    x = torch.randn(1, 6, D, generator=torch.Generator().manual_seed(5))
    pos = batch_positions((6,))
    t1, t2 = torch.randn(2, 1, 1, D, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        o1, o2 = attn(x, pos, enc, query=t1), attn(x, pos, enc, query=t2)   # (1, 1, D) each
        n1, n2 = attn(x, pos, None, query=t1), attn(x, pos, None, query=t2)
    assert torch.equal(n1, n2)                                              # no encoding: t is invisible
    assert (o1 - o2).abs().max() > 1e-4                                     # CAPE sees t through Eq. 5
    with pytest.raises(AssertionError, match="query_input"):
        enc.bias(torch.zeros(1, H, 1, D // H), torch.zeros(1, H, 6, D // H), pos, 0)


@pytest.mark.parametrize("pos_dim", [16, 32, 64])
def test_cape_pos_dim_option(pos_dim):
    enc = make("cape", pos_dim=pos_dim)
    assert enc.emb.shape == (LAYERS, MAX_LEN + 1, pos_dim) and enc.fuse[1].weight.shape == (pos_dim, D)
    assert make("cape", pos_dim=0).pos_dim == D


# --------------------------------------------------------------------------- PARec family

@pytest.mark.parametrize("name", ["parec", "fparec", "average", "linear_annealing", "exponential_annealing"])
def test_positional_attention_gives_future_and_padding_zero_weight(name):
    enc = make(name)
    pos = batch_positions((6, 3), L=6)
    with torch.no_grad():
        w = enc.weights(torch.zeros(2, 1, 6, 6), pos, 1)[:, 0]             # (2, 6, 6)
    future = torch.ones(6, 6, dtype=torch.bool).triu(1)
    assert torch.all(w[:, future] == 0)
    assert torch.all(w[1, 3:, :3] == 0)                                     # padding keys
    assert torch.allclose(w.sum(-1), torch.ones(2, 6))


def test_handcrafted_patterns_values():
    pos = batch_positions((3,))
    avg = make("average").weights(torch.zeros(1, 1, 3, 3), pos, 0)[0, 0, 2]
    assert torch.allclose(avg, torch.full((3,), 1 / 3))
    exp = make("exponential_annealing", rate=0.5).weights(torch.zeros(1, 1, 3, 3), pos, 0)[0, 0, 2]
    assert torch.allclose(exp, torch.tensor([1.0, 2.0, 4.0]) / 7)
    assert torch.allclose(make("exponential_annealing").weights(torch.zeros(1, 1, 3, 3), pos, 0)[0, 0, 2],
                          torch.tensor([math.exp(-2), math.exp(-1), 1.0]) / (1 + math.exp(-1) + math.exp(-2)))
    # 003 Eq. 13 with Eq. 15: a_ij = j (1-based slot) for j <= i; a full window of n = MAX_LEN slots
    full = batch_positions((MAX_LEN,))
    lin = make("linear_annealing").weights(torch.zeros(1, 1, MAX_LEN, MAX_LEN), full, 0)[0, 0]   # (n, n)
    want = torch.tril(torch.arange(1, MAX_LEN + 1, dtype=torch.float).expand(MAX_LEN, -1))
    assert torch.allclose(lin, want / want.sum(-1, keepdim=True))
    # a 3-item sequence sits in the last 3 slots: weights n - 2, n - 1, n in its last row
    short = make("linear_annealing").weights(torch.zeros(1, 1, 3, 3), pos, 0)[0, 0, 2]
    assert torch.allclose(short, torch.tensor([MAX_LEN - 2, MAX_LEN - 1, MAX_LEN], dtype=torch.float) / (3 * MAX_LEN - 3))


def test_fparec_with_full_rank_represents_any_parec_matrix():
    parec, fparec = make("parec"), make("fparec", rank=MAX_LEN)
    with torch.no_grad():
        parec.R.normal_()
        for layer in range(LAYERS):                                         # R1 R2^T = R
            fparec.R1[layer].copy_(parec.R[layer])
            fparec.R2[layer].copy_(torch.eye(MAX_LEN))
        pos = batch_positions((6, 2), L=6)
        for layer in range(LAYERS):
            a = parec.weights(torch.zeros(2, 1, 6, 6), pos, layer)
            b = fparec.weights(torch.zeros(2, 1, 6, 6), pos, layer)
            assert torch.allclose(a, b, atol=1e-6)


def test_parec_rows_are_end_aligned():
    """The last item of any session reads the same row of R (backward-aware, 003 §3.1)."""
    enc = make("parec")
    pos = batch_positions((6, 3), L=6)
    with torch.no_grad():
        w = enc.weights(torch.zeros(2, 1, 6, 6), pos, 0)[:, 0]
        logits = enc.logits(pos, 0)
    assert torch.equal(logits[0, 5, 3:], logits[1, 5, 3:])                 # same slots
    assert not torch.allclose(w[0, 5, 3:], w[1, 5, 3:])                     # but renormalised over its past


# --------------------------------------------------------------------------- seqpe encodings (CLI)

def test_cli_lists_every_encoding_without_torch():
    code = ("import sys; from typer.testing import CliRunner; from pipeline.cli import app; "
            "r = CliRunner().invoke(app, ['encodings'], env={'COLUMNS': '200'}); "
            "print(r.exit_code, 'torch' in sys.modules); print(r.output)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[0] == "0 False"
    for name in EXPECTED:
        assert f" {name} " in out
    assert "positional encodings" in out and "✓" in out


def _fake_run(tmp_path, name="ldpe"):
    from models import build_model
    from pipeline.params import TrainParams
    tp = TrainParams(dim=8, heads=2, layers=1, max_len=6)
    torch.manual_seed(5)
    e = build_encoding(name, dim=8, max_len=6, heads=2, layers=1, options={})
    net = build_model("sasrec", n_items=4, max_len=6, train=tp, options={}, encoding=e)
    with torch.no_grad():
        for p in net.encoding.parameters():
            p.add_(1.0)                                                     # "trained" weights
    from pipeline.params import to_dict
    torch.save({"model": net.state_dict(), "config": {"encoding": name, "max_len": 6, "train": to_dict(tp),
                                                      "encoding_options": {}}}, tmp_path / "checkpoint.pt")
    return net


def test_cli_inspect_writes_figures(tmp_path):
    from typer.testing import CliRunner
    from pipeline.cli import app
    r = CliRunner().invoke(app, ["encodings", "inspect", "dpe", "--lengths", "3", "5", "--dim", "8",
                                 "--out", str(tmp_path / "fig"), "-q"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "fig").iterdir()) == [
        "dpe-dot-L3.png", "dpe-dot-L3xL5.png", "dpe-dot-L5.png", "dpe-matrix-L3.png", "dpe-matrix-L5.png"]
    assert (tmp_path / "fig" / "dpe-dot-L3.png").read_bytes()[:4] == b"\x89PNG"


def test_inspect_reads_learned_weights_from_a_run(tmp_path):
    from models.encodings.plots import inspect, load_from_run
    net = _fake_run(tmp_path)
    enc, dim, heads, max_len = load_from_run("ldpe", tmp_path)
    assert (dim, heads, max_len) == (8, 2, 6)
    assert torch.equal(enc.fwd.weight, net.encoding.fwd.weight)
    summary = inspect("ldpe", [3], tmp_path / "fig", run_dir=tmp_path)
    assert summary["files"] == ["ldpe-matrix-L3.png", "ldpe-dot-L3.png"]
    assert summary["source"].startswith("trained run")
    with pytest.raises(Exception, match="trained with encoding 'ldpe', not 'lpe'"):
        inspect("lpe", [3], tmp_path / "fig", run_dir=tmp_path)
    from typer.testing import CliRunner
    from pipeline.cli import app
    r = CliRunner().invoke(app, ["encodings", "inspect", "ldpe", "--lengths", "3", "--run", str(tmp_path),
                                 "--dim", "32", "--out", str(tmp_path / "fig2"), "-q"])   # --dim was ignored silently
    assert "--dim 32 sets the width of an encoding drawn without --run" in str(r.exception), r.output
    assert not (tmp_path / "fig2").exists()


def test_inspect_refuses_a_ctr_run_and_an_out_folder_inside_a_stages_folder(tmp_path):
    """A CTR run's encoding has the CTR backbone's widths: loading it at next-item widths was a state_dict
    size-mismatch traceback (or a false "holds no weights"). Figures written into a samples folder were
    deleted with it by the next `seqpe augment`."""
    from models.encodings.plots import inspect
    from pipeline.errors import DataError
    run = tmp_path / "din-ldpe" / "seed-1"
    run.mkdir(parents=True)
    torch.save({"model": {}, "config": {"model": "din", "encoding": "ldpe", "n_items": 9, "max_len": 5,
                                        "train": {"dim": 8, "heads": 1, "layers": 1}}}, run / "checkpoint.pt")
    with pytest.raises(DataError, match="is a CTR run: .* Fix: pass a next-item run"):
        inspect("ldpe", [3], tmp_path / "fig", run_dir=run)
    samples = tmp_path / "samples"
    samples.mkdir()
    (samples / "manifest.json").write_text('{"kind": "samples", "dataset": "mine", "stage": "augment"}')
    with pytest.raises(DataError, match="fig is inside .*samples, which holds mine's samples"):
        inspect("spe", [3], samples / "fig", dim=8)
    assert not (samples / "fig").exists() and not (tmp_path / "fig").exists()


def test_rotary_rotates_a_float64_input_by_exact_angles():
    """Walk 39b #5: the angles were rounded to float32 whatever the input, 2.7e-6 off at position 199."""
    from models.encodings.rotary import apply_rotary, rotary_angles
    pos = torch.arange(200.)[None]
    x = torch.randn(1, 200, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ang = pos.double()[..., None] * 10000 ** (-2 * torch.arange(32, dtype=torch.float64) / 64)
    a, b = x[..., 0::2], x[..., 1::2]
    exact = torch.stack((a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()), -1).flatten(-2)
    assert torch.allclose(apply_rotary(x, rotary_angles(pos, 64)), exact, rtol=0, atol=1e-12)
    x32 = x.float()                                            # float32 as before: angles rounded to float32
    assert apply_rotary(x32, rotary_angles(pos, 64)).dtype == torch.float32


@pytest.mark.parametrize("name", ["rope", "rope_one"])
def test_a_rotation_with_nothing_to_rotate_is_refused(name):
    """Heads of width 1 have no pair to turn: rope's run was `none`'s, byte for byte, under another name (walk 45c
    #2). Width 2 per head turns."""
    from pipeline.errors import ParamsError
    with pytest.raises(ParamsError, match=rf"a width of 4 over 4 heads gives heads of width 1, and {name} rotates "
                                          r"pairs .* --encoding none under another name\. Fix: use train\.dim of at "
                                          r"least 2 x train\.heads"):
        build_encoding(name, dim=4, max_len=5, heads=4)
    with pytest.raises(ParamsError, match="heads of width 1"):
        build_encoding(name, dim=1, max_len=5, heads=1)
    assert build_encoding(name, dim=4, max_len=5, heads=2).head_dim == 2


def test_2dspe_at_width_1_is_refused():
    """Its position half had width 0 and its length half's frequencies were 10000^(0/0): NaN, which the trainer
    blamed on the learning rate (walk 45c #3)."""
    from pipeline.errors import ParamsError
    with pytest.raises(ParamsError, match=r"2dspe splits its width .* a width of 1 has no position half"):
        build_encoding("2dspe", dim=1, max_len=5)
    pos = Positions.from_mask(torch.tensor([[False, True, True]]))
    assert torch.isfinite(build_encoding("2dspe", dim=2, max_len=5).table(pos)).all()
