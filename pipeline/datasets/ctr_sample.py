"""Embedded CTR datasets: `sample_ctr` (AmazonElectronics_x1 format) and `sample_kuai` (KuaiVideo_x1
format), seeded synthetic files that go through the real BARS download and preprocess code.

`generate_amazon(dst_file, params)` writes a zip of `train.csv` and `test.csv` with the exact
AmazonElectronics_x1 header `label,user_id,item_id,cate_id,item_history,cate_history` (ids are
dense integers from 0, histories '^'-joined, oldest first), built the way DIN's
`build_dataset.py` builds Amazon Electronics: per user, for every position t >= 1 of the user's
behaviour sequence, the real item at t as a positive and one other item as a negative, both
sharing the history items[:t]; the user's last position goes to test, every other one to train;
both files in shuffled row order (DIN shuffles its train and test sets).

`generate_kuai(dst_file, params)` writes the exact KuaiVideo_x1 header
`timestamp,user_id,item_id,is_click,is_like,is_follow,pos_items,neg_items`: one row per
impression, rows sorted by timestamp, pos_items / neg_items the user's clicked / not-clicked items
before the impression (oldest first, the most recent 100), the last 20% of the rows in time order
in test.csv (KuaiVideo_x1 is split 80/20 in time). Each user has 2 x length impressions.

The planted signal is POSITIONAL (what a model without positions cannot learn):

    Behaviour categories follow the rule "the next category is the category two steps back":
    at step t >= 2, with probability `p_rule` c[t] = c[t-2] (a RULE step); otherwise c[t] is a
    FRESH category, one that is not in the user's history (steps 0 and 1 are fresh too).
    Adjacent categories therefore always differ. Items are drawn inside their category by a
    Zipf popularity shared by every draw.

    sample_ctr: the negative of a RULE step has the category c[t-1], which is in the history but
    at the wrong position; the negative of a FRESH step has another fresh category. So "the
    target's category is in the history" is true for both rows of a rule step and false for
    both rows of a fresh step (no information at all), while "the target's category is the
    category at position -2" holds for the positive of every rule step and for no negative.

    sample_kuai (categories are hidden topics: the file has no category column): once the user
    has clicked twice, an impression is, with probability p_rule / 2 each, DUE (topic of the
    second most recent click; always clicked) or a DECOY (topic of the most recent click; never
    clicked); otherwise it is FRESH (a topic not among the user's clicks; clicked with
    probability 1/2). Clicks thus follow the rule above, a target's topic is among the user's
    clicked topics exactly for due and decoy impressions (click rate 1/2 either way), and only
    the position of that topic in pos_items tells a due impression from a decoy.

A set-based model sees the same history set for both rows of a rule step; the multiset leaks a
little (the two chains c[t-2], c[t-4], ... and c[t-1], c[t-3], ... have the same run-length law
except near the sequence start). tests/test_ctr_sample.py pins both facts on the default params.

Lengths are min_length + a geometric tail (mean about min_length + 6), capped at max_length; a
benchmark may ask for an exact total (`total`). Same params, same bytes: numpy's seeded
Generator, fixed zip member metadata. (numpy is imported inside the functions: every dataset
module is imported by `pipeline.datasets`, and data commands should start fast.)
"""
from __future__ import annotations

import io as _io
import zipfile
from pathlib import Path

from .. import io
from ..errors import ParamsError
from ..lazy import lazy
from . import DatasetSpec, SourceSpec, register
from .ctr import BARS_FILES, OPTIONS, reader_for
from .sample import ZIP_TIME

pl = lazy("polars")
np = lazy("numpy")

FRESH_TRIES = 16       # candidate categories drawn per fresh step (the first one not yet seen wins)
KUAI_TEST_SHARE = 0.2  # last share of the rows in time order written to test.csv
KUAI_MAX_HISTORY = 100  # pos_items / neg_items keep the most recent 100 ids, as the real files do


def check(p) -> None:
    """Reject params the generators cannot honour (one line, naming the key)."""
    problems = [(p.users < 1, "users must be >= 1"), (p.items < p.cates, "items must be >= cates"),
                (p.cates < 4, "cates must be >= 4 (fresh categories need room)"),
                (p.min_length < 3, "min_length must be >= 3 (train, valid and test positions)"),
                (p.max_length < p.min_length, "max_length must be >= min_length"),
                (not 0.0 <= p.p_rule <= 1.0, "p_rule must be in [0, 1]")]
    for bad, what in problems:
        if bad:
            raise ParamsError(f"preprocess.sample_ctr: {what}", "fix that key in params.yaml (or the --set that gave it)")


def lengths(rng, users: int, lo: int, hi: int, total: int | None = None):
    """Behaviours per user: lo + geometric tail (p = 1/7), capped at hi; with `total`, nudged by one
    on random users (staying inside [lo, hi]) until they sum to exactly `total`."""
    n = np.minimum(lo + rng.geometric(1 / 7, users) - 1, hi).astype(np.int64)
    if total is not None:
        if not lo * users <= total <= hi * users:
            raise ParamsError(f"{total} behaviours cannot be spread over {users} users with {lo}..{hi} each",
                              "change the total or the length bounds")
        while (diff := total - int(n.sum())) != 0:
            pick = rng.choice(users, min(abs(diff), users), replace=False)
            pick = pick[n[pick] < hi] if diff > 0 else pick[n[pick] > lo]
            n[pick] += 1 if diff > 0 else -1
    return n


class Catalogue:
    """Items 0..items-1, each in one category (every category has one), Zipf popularity inside it."""

    def __init__(self, rng, items: int, cates: int):
        self.cate = np.concatenate([rng.permutation(cates), rng.integers(0, cates, items - cates)])
        self.cate = self.cate[rng.permutation(items)]                       # (items,) category of each item
        weight = (1.0 / np.arange(1, items + 1) ** 1.1)[rng.permutation(items)]
        order = np.argsort(self.cate, kind="stable")                        # items grouped by category
        self.items, cdf = order, np.cumsum(weight[order])
        counts = np.bincount(self.cate, minlength=cates)
        ends = np.cumsum(counts)
        self.lo = np.concatenate([[0.0], cdf[ends[:-1] - 1]])               # cdf before each category
        self.hi, self.cdf = cdf[ends - 1], cdf
        cate_w = 1.0 / np.arange(1, cates + 1) ** 0.8                       # category popularity
        self.cate_p = cate_w[rng.permutation(cates)] / cate_w.sum()

    def draw(self, rng, cates):
        """One item per entry of `cates`, by popularity inside the category."""
        x = self.lo[cates] + rng.random(len(cates)) * (self.hi[cates] - self.lo[cates])
        return self.items[np.minimum(np.searchsorted(self.cdf, x, side="right"), len(self.cdf) - 1)]

    def fresh(self, rng, seen, users, exclude=None):
        """A category per user that `seen[user]` lacks (and != exclude), by popularity; after
        FRESH_TRIES misses (only possible when a user has seen most categories) the last draw."""
        cand = rng.choice(len(self.cate_p), (len(users), FRESH_TRIES), p=self.cate_p)   # (n, tries)
        bad = seen[users[:, None], cand]
        if exclude is not None:
            bad |= cand == exclude[:, None]
        first = np.where(bad.all(axis=1), FRESH_TRIES - 1, np.argmax(~bad, axis=1))
        return cand[np.arange(len(users)), first]


def _zip(members: dict[str, bytes]) -> bytes:
    """A zip of deflated members with fixed metadata (same data, same bytes)."""
    buf = _io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            info.compress_type, info.external_attr, info.create_system = zipfile.ZIP_DEFLATED, 0o644 << 16, 3
            zf.writestr(info, data, compresslevel=6)
    return buf.getvalue()


def _csv(df) -> bytes:
    buf = _io.BytesIO()
    df.write_csv(buf, line_terminator="\n", quote_style="necessary")
    return buf.getvalue()


def _lists(values, offsets):
    """A List(Int64) Series whose row i is values[offsets[i]:offsets[i + 1]] (Arrow offsets, no copy per row)."""
    import pyarrow as pa
    return pl.Series(pa.LargeListArray.from_arrays(pa.array(np.asarray(offsets, dtype=np.int64)),
                                                   pa.array(np.asarray(values, dtype=np.int64))))


def _joined(col: str) -> "pl.Expr":
    """List column -> '^'-joined ids (empty list -> empty string)."""
    return pl.col(col).cast(pl.List(pl.String)).list.join("^").alias(col)


def _positions(n):
    """(offsets (U+1,), user (N,), t (N,)) of per-user sequences of lengths n, concatenated."""
    off = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
    user = np.repeat(np.arange(len(n), dtype=np.int64), n)
    return off, user, np.arange(off[-1], dtype=np.int64) - off[user]


def amazon_frames(p, total: int | None = None):
    """(train, test) frames in the AmazonElectronics_x1 columns, rows shuffled (module docstring).
    `total`: exactly that many behaviours in all (a benchmark's full-size file)."""
    check(p)
    rng = np.random.default_rng(p.seed)
    cat = Catalogue(rng, p.items, p.cates)
    n = lengths(rng, p.users, p.min_length, p.max_length, total)               # (U,) behaviours per user
    off, user, t = _positions(n)
    cate = np.zeros(off[-1], dtype=np.int64)                                    # (N,) positive categories
    neg_cate = np.zeros(off[-1], dtype=np.int64)                                # (N,) negative categories
    seen = np.zeros((p.users, p.cates), dtype=bool)                             # categories in each history
    for step in range(int(n.max())):
        act = np.flatnonzero(n > step)                                          # users with a behaviour here
        idx = off[act] + step
        rule = rng.random(len(act)) < p.p_rule if step >= 2 else np.zeros(len(act), dtype=bool)
        c = cat.fresh(rng, seen, act)
        if step >= 2:
            c = np.where(rule, cate[idx - 2], c)
        if step >= 1:
            neg_cate[idx] = np.where(rule, cate[idx - 1], cat.fresh(rng, seen, act, exclude=c))
        cate[idx] = c
        seen[act, c] = True
    item, neg_item = cat.draw(rng, cate), cat.draw(rng, neg_cate)
    seqs = pl.DataFrame({"user_id": np.arange(p.users), "items": _lists(item, off), "cates": _lists(cate, off)})
    rows = np.flatnonzero(t >= 1)                                               # one position per row pair
    pos = pl.DataFrame({"label": 1, "user_id": user[rows], "item_id": item[rows], "cate_id": cate[rows],
                        "t": t[rows], "test": t[rows] == n[user[rows]] - 1})
    neg = pos.with_columns(label=pl.lit(0), item_id=pl.Series(neg_item[rows]), cate_id=pl.Series(neg_cate[rows]))
    both = (pl.concat([pos, neg]).join(seqs, on="user_id", how="left", maintain_order="left")
            .select(pl.col("label").cast(pl.Int64), "user_id", "item_id", "cate_id",
                    pl.col("items").list.head(pl.col("t")).alias("item_history"),
                    pl.col("cates").list.head(pl.col("t")).alias("cate_history"), "test"))
    out = []
    for is_test in (False, True):
        part = both.filter(pl.col("test") == is_test).drop("test")
        out.append(part[rng.permutation(part.height)].with_columns(_joined("item_history"), _joined("cate_history")))
    return out[0], out[1]


def kuai_frames(p, total: int | None = None):
    """(train, test) frames in the KuaiVideo_x1 columns, rows in time order (module docstring)."""
    check(p)
    rng = np.random.default_rng(p.seed)
    cat = Catalogue(rng, p.items, p.cates)
    n = 2 * lengths(rng, p.users, p.min_length, p.max_length, None if total is None else total // 2)
    off, user, t = _positions(n)
    item = np.zeros(off[-1], dtype=np.int64)                                    # (N,) shown item
    click = np.zeros(off[-1], dtype=bool)                                       # (N,)
    last1 = np.zeros(p.users, dtype=np.int64)                                   # topic of the last click
    last2 = np.zeros(p.users, dtype=np.int64)                                   # ... of the one before
    clicks = np.zeros(p.users, dtype=np.int64)
    seen = np.zeros((p.users, p.cates), dtype=bool)                             # clicked topics
    for step in range(int(n.max())):
        act = np.flatnonzero(n > step)
        idx = off[act] + step
        u = rng.random(len(act))
        ready = clicks[act] >= 2
        due, decoy = ready & (u < p.p_rule / 2), ready & (u >= p.p_rule / 2) & (u < p.p_rule)
        fresh = ~(due | decoy)
        topic = np.where(due, last2[act], np.where(decoy, last1[act], cat.fresh(rng, seen, act)))
        hit = due | (fresh & (rng.random(len(act)) < 0.5))
        item[idx], click[idx] = cat.draw(rng, topic), hit
        c = act[hit]
        last2[c], last1[c] = last1[c], topic[hit]
        clicks[c] += 1
        seen[c, topic[hit]] = True
    before = np.cumsum(click) - click - (np.cumsum(click) - click)[off[user]]   # (N,) clicks before, same user
    shown_before = t
    lists = {}
    for name, mask, count in (("pos_items", click, before), ("neg_items", ~click, shown_before - before)):
        per_user = np.bincount(user[mask], minlength=p.users)
        lists[name] = (_lists(item[mask], np.concatenate([[0], np.cumsum(per_user)])), count)
    stamp = 1_546_300_800 + rng.integers(0, 30 * 86_400, off[-1])               # (N,) seconds over 30 days,
    stamp = stamp[np.lexsort((stamp, user))]                                    # ascending inside each user
    order = np.lexsort((t, user, stamp))                                        # time order, ties by user
    like = click & (rng.random(off[-1]) < 0.05)
    follow = click & (rng.random(off[-1]) < 0.01)
    seqs = pl.DataFrame({"user_id": np.arange(p.users), "pos": lists["pos_items"][0], "neg": lists["neg_items"][0]})
    df = (pl.DataFrame({"timestamp": stamp, "user_id": user, "item_id": item, "is_click": click.astype(np.int64),
                        "is_like": like.astype(np.int64), "is_follow": follow.astype(np.int64),
                        "n_pos": lists["pos_items"][1], "n_neg": lists["neg_items"][1]})[order]
          .join(seqs, on="user_id", how="left", maintain_order="left")
          .select("timestamp", "user_id", "item_id", "is_click", "is_like", "is_follow",
                  pl.col("pos").list.head(pl.col("n_pos")).list.tail(KUAI_MAX_HISTORY).alias("pos_items"),
                  pl.col("neg").list.head(pl.col("n_neg")).list.tail(KUAI_MAX_HISTORY).alias("neg_items"))
          .with_columns(_joined("pos_items"), _joined("neg_items")))
    n_train = df.height - int(round(df.height * KUAI_TEST_SHARE))
    return df.head(n_train), df.slice(n_train)


def _generator(frames):
    def generate(dst_file: Path, params) -> Path:
        train, test = frames(params)
        io.write_bytes(dst_file, _zip({"train.csv": _csv(train), "test.csv": _csv(test)}))
        return Path(dst_file)
    generate.__doc__ = f"Write the zip of train.csv + test.csv built by `{frames.__name__}` to `dst_file`, atomically."
    return generate


generate_amazon = _generator(amazon_frames)
generate_kuai = _generator(kuai_frames)

for _name, _format, _real, _generate in (("sample_ctr", "AmazonElectronics_x1", "amazon_electronics", generate_amazon),
                                         ("sample_kuai", "KuaiVideo_x1", "kuaivideo", generate_kuai)):
    register(DatasetSpec(
        name=_name,
        source=SourceSpec(name=_name, filename=f"sample-{_format}.zip", archive="generated",
                          files=BARS_FILES, generate=_generate, generate_params="sample_ctr"),
        protocol="ctr",
        description=f"embedded CTR sample in the {_format} format (positional signal, generated)",
        reader=reader_for(_real),
        options=OPTIONS[_real],
        paper_size="generated: preprocess.sample_ctr",
    ))
del _name, _format, _real, _generate
