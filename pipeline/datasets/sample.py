"""The embedded `sample` dataset: a seeded synthetic click log in the exact Diginetica raw format.

`generate(dst_file, params)` writes a zip holding `train-item-views.csv` exactly as CIKM Cup 2016
ships it: `;`-separated, header `sessionId;userId;itemId;timeframe;eventdate`, `userId` mostly
`NA`, `timeframe` integer ms, `eventdate` YYYY-MM-DD over `params.days` days. Like the real file,
rows are grouped by session id (ids unrelated to dates), timeframes are not sorted inside some
sessions (some equal), a few sessions' rows are not contiguous, a few sessions cross midnight
(their last row in file order is dated the next day).

What a model can learn from it: item popularity is a Zipf-like long tail, and clicks follow a
Markov chain — each item has a preferred successor in its "topic", clicks mostly stay in the
current topic, and topics switch by a fixed transition matrix — so next-item prediction beats
popularity. Traffic grows over time (the density of session dates rises linearly), so the
last week holds ~11% of the sessions. Session lengths are geometric with a heavy tail (about a quarter are single clicks,
which the SR-GNN protocol drops). Same params, same bytes: numpy's seeded Generator, a fixed
zip timestamp and fixed member attributes. (numpy is imported inside the functions: every
dataset module is imported by `pipeline.datasets`, and data commands should start fast.)
"""
from __future__ import annotations

import io as _io
import zipfile
from pathlib import Path

from ..lazy import lazy
from .. import io

pl = lazy("polars")  # imported on first use: `seqpe download` never needs it

SAMPLE_ARCHIVE = "sample-diginetica.zip"
MEMBER = "train-item-views.csv"
FIRST_DAY = "2016-01-01"
ZIP_TIME = (2016, 1, 1, 0, 0, 0)  # fixed member timestamp: identical bytes on every run

# click behaviour (probabilities of the next click, given the current one)
P_SUCCESSOR = 0.40   # the current item's preferred successor
P_REPEAT = 0.07      # the same item again
P_SAME_TOPIC = 0.38  # another item of the same topic, by popularity
# (the rest: an item of the next topic drawn from the topic transition matrix)


def _length(rng: np.random.Generator, n: int) -> np.ndarray:
    """Session lengths: geometric (P(1) = 0.27) plus a 5% heavy tail, capped at 100."""
    import numpy as np
    base = rng.geometric(0.27, n)
    tail = np.where(rng.random(n) < 0.05, rng.geometric(0.06, n), 0)
    return np.minimum(base + tail, 100).astype(np.int64)


class Catalogue:
    """Items with Zipf popularity, grouped in topics; sampling inside a topic by inverse CDF."""

    def __init__(self, rng: np.random.Generator, n_items: int):
        import numpy as np
        self.n_topics = max(4, n_items // 40)
        weight = 1.0 / np.arange(1, n_items + 1) ** 1.05          # Zipf-like long tail
        weight = weight[rng.permutation(n_items)]                  # popularity unrelated to ids
        topic = rng.integers(0, self.n_topics, n_items)
        order = np.argsort(topic, kind="stable")                   # items grouped by topic
        self.items = order
        self.cdf = np.cumsum(weight[order])
        counts = np.bincount(topic, minlength=self.n_topics)
        ends = np.cumsum(counts)
        starts = ends - counts
        self.lo = np.where(starts > 0, self.cdf[np.maximum(starts - 1, 0)], 0.0)
        self.hi = np.where(counts > 0, self.cdf[np.maximum(ends - 1, 0)], self.lo)
        self.topic = topic
        self.topic_p = np.bincount(topic, weights=weight, minlength=self.n_topics) / weight.sum()
        # topic moves: each topic leads to 8 neighbour topics with Dirichlet weights
        self.neighbours = rng.integers(0, self.n_topics, (self.n_topics, 8))
        self.trans_cdf = np.cumsum(rng.dirichlet(np.full(8, 0.5), self.n_topics), axis=1)
        succ, other = self.draw(rng, topic), self.draw(rng, topic)  # preferred next item per item,
        self.successor = np.where(succ == np.arange(n_items), other, succ)  # rarely itself

    def draw(self, rng: np.random.Generator, topics: np.ndarray) -> np.ndarray:
        """One item per entry of `topics`, by popularity within the topic (empty topic: any item)."""
        import numpy as np
        lo, hi = self.lo[topics], self.hi[topics]
        empty = hi <= lo
        lo, hi = np.where(empty, 0.0, lo), np.where(empty, self.cdf[-1], hi)
        x = lo + rng.random(len(topics)) * (hi - lo)
        pos = np.minimum(np.searchsorted(self.cdf, x, side="right"), len(self.cdf) - 1)
        return self.items[pos]

    def next_topic(self, rng: np.random.Generator, topics: np.ndarray) -> np.ndarray:
        import numpy as np
        u = rng.random(len(topics))[:, None]
        pick = np.minimum((u > self.trans_cdf[topics]).sum(axis=1), 7)
        return self.neighbours[topics, pick]


def draw_sessions(rng: np.random.Generator, lengths: np.ndarray, n_items: int,
                  cat: "Catalogue | None" = None) -> tuple[np.ndarray, np.ndarray]:
    """Item sequences for sessions of the given lengths: (session index, item index) per click,
    grouped by session, in click order. Vectorised over sessions, one loop step per position
    (`cat`: a catalogue shared by several calls, e.g. a benchmark drawing in chunks)."""
    import numpy as np
    cat = cat or Catalogue(rng, n_items)
    n = len(lengths)
    topic = rng.choice(cat.n_topics, n, p=cat.topic_p)
    cur = cat.draw(rng, topic)
    sess_parts, item_parts, pos_parts = [np.arange(n)], [cur], [np.zeros(n, np.int64)]
    active = np.arange(n)
    for t in range(1, int(lengths.max(initial=1))):
        keep = lengths[active] > t
        active, cur, topic = active[keep], cur[keep], topic[keep]
        if not len(active):
            break
        u = rng.random(len(active))
        switch = u >= P_SUCCESSOR + P_REPEAT + P_SAME_TOPIC
        topic = np.where(switch, cat.next_topic(rng, topic), topic)
        fresh = cat.draw(rng, topic)
        cur = np.where(u < P_SUCCESSOR, cat.successor[cur], np.where(u < P_SUCCESSOR + P_REPEAT, cur, fresh))
        topic = cat.topic[cur]
        sess_parts.append(active)
        item_parts.append(cur)
        pos_parts.append(np.full(len(active), t, np.int64))
    sess, item, pos = (np.concatenate(p) for p in (sess_parts, item_parts, pos_parts))
    order = np.lexsort((pos, sess))
    return sess[order], item[order]


def fit_total(rng: np.random.Generator, lengths: np.ndarray, total: int) -> np.ndarray:
    """Lengths nudged by +-1 on random sessions (never below 1) until they sum to `total`."""
    import numpy as np
    lengths = lengths.copy()
    while (diff := total - int(lengths.sum())) != 0:
        pick = rng.choice(len(lengths), min(abs(diff), len(lengths)), replace=False)
        if diff < 0:
            pick = pick[lengths[pick] > 1]
        lengths[pick] += 1 if diff > 0 else -1
    return lengths


def make_log(n_sessions: int, n_items: int, days: int, seed: int, total_rows: int | None = None) -> pl.DataFrame:
    """The raw log as a frame with the Diginetica columns, rows in file order
    (`total_rows`: exactly that many rows, for full-scale benchmarks)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    lengths = _length(rng, n_sessions)
    if total_rows is not None:
        lengths = fit_total(rng, lengths, total_rows)
    sess, item = draw_sessions(rng, lengths, n_items)
    n_rows = len(sess)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    pos = np.arange(n_rows) - starts[sess]

    # times: a start in the day, then gaps of ~40 s (3% zero gaps: equal timeframes)
    gap = np.where(rng.random(n_rows) < 0.03, 0, rng.exponential(40_000, n_rows).astype(np.int64) + 1)
    gap[starts] = rng.integers(0, 86_400_000 // 2, n_sessions)
    timeframe = np.cumsum(gap) - np.repeat(np.cumsum(gap)[starts] - gap[starts], lengths)
    day = np.minimum((days * np.sqrt(rng.random(n_sessions))).astype(np.int64), days - 1)  # traffic grows
    crosses = (rng.random(n_sessions) < 0.02) & (day + 1 < days) & (lengths >= 2)
    next_day = crosses[sess] & (pos >= lengths[sess] // 2)
    eventdate = np.datetime64(FIRST_DAY, "D") + (day[sess] + next_day).astype("timedelta64[D]")

    # file order: by session id (a random permutation of dates), click order shuffled in 25% of
    # sessions, and 3% of sessions with their last row moved a few sessions later
    session_id = rng.permutation(n_sessions) + 1
    shuffled = rng.random(n_sessions) < 0.25
    within = np.where(shuffled[sess], rng.random(n_rows), pos.astype(np.float64))
    moved = (rng.random(n_sessions) < 0.03)[sess] & (pos == lengths[sess] - 1) & (lengths[sess] >= 3)
    file_key = session_id[sess].astype(np.float64) + np.where(moved, rng.integers(1, 40, n_rows) + 0.5, 0.0)
    order = np.lexsort((within, file_key))

    has_user = rng.random(n_sessions) < 0.2
    user = rng.integers(1, max(2, n_sessions // 3), n_sessions)
    item_ids = rng.permutation(n_items) * 7 + 1000  # raw ids: sparse, unrelated to popularity
    return pl.DataFrame({
        "sessionId": session_id[sess][order],
        "userId": np.where(has_user, user.astype(str), "NA")[sess][order],
        "itemId": item_ids[item][order],
        "timeframe": timeframe[order],
        "eventdate": eventdate[order].astype(str),
    })


def csv_bytes(log: pl.DataFrame) -> bytes:
    buf = _io.BytesIO()
    log.write_csv(buf, separator=";", line_terminator="\n", quote_style="never")
    return buf.getvalue()


def zip_bytes(member: str, data: bytes) -> bytes:
    """A zip with one deflated member and fixed metadata (same data, same bytes)."""
    buf = _io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        info = zipfile.ZipInfo(member, date_time=ZIP_TIME)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = 0o644 << 16
        info.create_system = 3
        zf.writestr(info, data, compresslevel=6)
    return buf.getvalue()


def generate(dst_file: Path, sample) -> Path:
    """Write the `sample` archive (a zip holding train-item-views.csv) to `dst_file`, atomically."""
    log = make_log(sample.sessions, sample.items, sample.days, sample.seed)
    io.write_bytes(dst_file, zip_bytes(MEMBER, csv_bytes(log)))
    return Path(dst_file)
