"""The SR-GNN protocol (pipeline/REFERENCE.md §2) on tiny hand-made raw logs, step by step, plus a
row-for-row comparison with a plain-Python re-statement of the protocol on the `sample` log."""
from __future__ import annotations

import calendar
import csv
import time
import zipfile
from pathlib import Path

import polars as pl
import pytest

from pipeline.datasets import get
from pipeline.datasets.sample import MEMBER, generate
from pipeline.errors import DataError
from pipeline.params import Params, PreprocessParams, SampleParams
from pipeline.protocols import build_protocol
from pipeline.protocols.srgnn import valid_count

CAMEL = "sessionId;userId;itemId;timeframe;eventdate"
SNAKE = "session_id;user_id;item_id;timeframe;eventdate"
# A=10 B=20 C=30 D=40 E=50 (only in test) X=99 (clicked once) Y=77 (4 clicks + 1 in a single-click session)
DIGI_ROWS = """\
1;NA;10;3000;2016-05-01
1;NA;20;1000;2016-05-01
1;NA;30;2000;2016-05-01
3;NA;30;10;2016-05-03
2;NA;10;500;2016-05-02
5;7;40;100;2016-05-04
5;7;20;200;2016-05-04
5;7;40;300;2016-05-04
3;NA;40;20;2016-05-04
6;NA;10;7;2016-05-05
6;NA;40;5;2016-05-05
6;NA;30;5;2016-05-05
7;NA;20;1;2016-05-06
7;NA;20;2;2016-05-06
7;NA;77;3;2016-05-06
7;NA;30;4;2016-05-06
4;NA;77;1;2016-05-07
8;NA;10;1;2016-05-13
8;NA;20;2;2016-05-13
9;NA;10;1;2016-05-15
9;NA;50;2;2016-05-15
9;NA;20;3;2016-05-15
10;NA;50;1;2016-05-16
10;NA;50;2;2016-05-16
12;NA;40;1;2016-05-18
12;NA;99;2;2016-05-18
11;NA;50;1;2016-05-20
11;NA;50;2;2016-05-20
11;NA;30;3;2016-05-20
13;NA;77;1;2016-05-08
13;NA;10;2;2016-05-08
13;NA;77;3;2016-05-08
13;NA;77;4;2016-05-08
"""


def params(valid_fraction: float = 0.4) -> Params:
    return Params(preprocess=PreprocessParams(valid_fraction=valid_fraction))


def write_digi(root: Path, header: str = CAMEL, rows: str = DIGI_ROWS) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train-item-views.csv").write_text(f"{header}\n{rows}" if header else rows)
    return root


def rows_of(df: pl.DataFrame) -> list[tuple]:
    return [(s, list(items)) for s, items in df.select("session_id", "items").iter_rows()]


@pytest.mark.parametrize("header", [CAMEL, SNAKE])
def test_diginetica_every_step(tmp_path, header):
    res = build_protocol(get("diginetica"), write_digi(tmp_path, header), params())
    steps = [(s["step"].split(":")[0], s["sessions"], s["clicks"], s["items"]) for s in res.steps]
    assert steps == [
        ("read", 13, 33, 7),
        ("drop sessions of length 1", 11, 31, 7),          # sessions 2 and 4
        ("keep items clicked >= 5 times, sessions >= 2", 9, 24, 5),  # X (1), Y (4: the single click not counted)
        ("train", 5, 14, 4),
        ("dropped", 1, 2, 2),                               # session 8, dated exactly splitdate
        ("test", 3, 8, 4),
        ("test", 1, 2, 2),                                  # E unknown: sessions 10, 11 vanish
        ("train (after carving valid)", 3, 8, 4),
        ("valid", 2, 6, 4),
    ]
    # order: date; 3 and 5 share 05-04 (5's last row comes first in the file, 3 appeared first);
    # 1 sorted by timeframe (B C A); 6 has equal timeframes (D, C keep file order); 3 is non-contiguous
    assert rows_of(res.splits["train"]) == [(1, [1, 2, 3]), (3, [2, 4]), (5, [4, 1, 4])]
    assert rows_of(res.splits["valid"]) == [(6, [4, 2, 3]), (7, [1, 1, 2])]   # repeats kept
    assert rows_of(res.splits["test"]) == [(9, [3, 1])]
    assert res.splits["train"].get_column("date").to_list()[1].isoformat() == "2016-05-04"
    assert res.items.to_dicts() == [
        {"item_id": 1, "raw_id": "20", "count": 6}, {"item_id": 2, "raw_id": "30", "count": 5},
        {"item_id": 3, "raw_id": "10", "count": 5}, {"item_id": 4, "raw_id": "40", "count": 5}]
    assert res.n_items == 4
    assert res.extra["maxdate"] == "2016-05-20T00:00:00Z" and res.extra["splitdate"] == "2016-05-13T00:00:00Z"
    assert res.augment == {"train": "prefixes", "valid": "prefixes", "test": "prefixes"}
    assert res.splits["train"].schema == pl.Schema(
        {"session_id": pl.Int64, "items": pl.List(pl.Int32), "date": pl.Date})


def test_valid_count_is_exact_floor():
    assert [valid_count(n, 0.1) for n in (0, 9, 10, 30, 199)] == [0, 0, 1, 3, 19]
    assert valid_count(100, 0.29) == 29   # 0.29 * 100 == 28.999999999999996 in binary floats
    assert valid_count(5, 0.0) == 0


# ----------------------------------------------------------------------------- yoochoose

YOO_ROWS = """\
7,2014-03-30T08:00:00.000Z,214536500,0
7,2014-03-30T08:00:01.000Z,214536501,0
7,2014-03-30T08:00:02.000Z,214536502,0
1,2014-04-01T10:00:00.500Z,214536502,0
1,2014-04-01T09:00:00.000Z,214536500,S
2,2014-04-02T10:00:00.900Z,214536500,2053
2,2014-04-02T10:00:00.900Z,214536501,2053
3,2014-04-02T10:00:00.100Z,214536502,0
3,2014-04-02T10:00:00.100Z,214536500,0
4,2014-04-03T10:00:00.000Z,214536501,0
4,2014-04-03T10:00:00.000Z,214536599,0
5,2014-04-04T10:00:00.000Z,214536502,0
5,2014-04-04T10:00:01.000Z,214536501,0
6,2014-04-04T11:00:00.999Z,214536500,0
6,2014-04-04T11:00:00.999Z,214536501,0
6,2014-04-05T11:00:00.999Z,214536502,0
"""


def test_yoochoose_headerless_seconds_and_file_order(tmp_path):
    (tmp_path / "yoochoose-clicks.dat").write_text(YOO_ROWS)
    res = build_protocol(get("yoochoose"), tmp_path, params(0.0))
    # counts: 500 x5, 501 x5, 502 x5 (599 once: dropped). maxdate 04-05 11:00:00 (ms cut), split 04-04 11:00:00:
    # session 5 (04-04 10:00:01) is train, nothing is dated exactly the split second.
    # 2 and 3 end in the same second (.900 and .100): tie -> first appearance, 2 before 3;
    # session 1 keeps FILE order although its timestamps are reversed (Yoochoose is not sorted).
    assert rows_of(res.splits["train"]) == [(7, [1, 2, 3]), (1, [3, 1]), (2, [1, 2]), (3, [3, 1]), (5, [3, 2])]
    assert rows_of(res.splits["test"]) == [(6, [1, 2, 3])]
    assert res.items.get_column("raw_id").to_list() == ["214536500", "214536501", "214536502"]
    assert res.extra["splitdate"] == "2014-04-04T11:00:00Z"
    assert [s["sessions"] for s in res.steps][:3] == [7, 7, 6]   # session 4 -> [501]: dropped at step 5


def test_yoochoose_split_second_is_dropped(tmp_path):
    rows = YOO_ROWS.replace("2014-04-04T10:00:01.000Z", "2014-04-04T11:00:00.000Z")
    (tmp_path / "yoochoose-clicks.dat").write_text(rows)
    res = build_protocol(get("yoochoose"), tmp_path, params(0.0))
    assert [s for s, _ in rows_of(res.splits["train"])] == [7, 1, 2, 3]
    assert next(s for s in res.steps if s["step"].startswith("dropped"))["sessions"] == 1


def _yoo_fraction_log(path: Path) -> list[list[int]]:
    """39 train sessions of 10 clicks, then one of 3 (353 samples: 1/64 -> 5), then a test session."""
    seqs, lines = [], []
    for s in range(40):
        n = 10 if s < 39 else 3
        seq = [100 + (s + j) % 7 for j in range(n)]
        seqs.append(seq)
        for j, item in enumerate(seq):
            lines.append(f"{s + 1},2014-04-01T{s // 4:02d}:{s % 4 * 10 + j:02d}:00.000Z,{item},0")
    lines += ["99,2014-04-03T00:00:00.000Z,100,0", "99,2014-04-03T00:00:01.000Z,101,0"]
    path.write_text("\n".join(lines) + "\n")
    return seqs


def test_yoochoose_1_64_cut_inside_a_session(tmp_path):
    seqs = _yoo_fraction_log(tmp_path / "yoochoose-clicks.dat")
    res = build_protocol(get("yoochoose_1_64"), tmp_path, params(0.5))
    # full train: 39 * 9 + 2 = 353 samples; int(353 / 64) = 5: the last session's 2 samples and
    # the 3 shortest-prefix samples of session 39, i.e. the prefix samples of session 39 cut to 4 clicks
    number = {raw: i + 1 for i, raw in enumerate(dict.fromkeys(x for s in seqs for x in s))}
    assert rows_of(res.splits["train"]) == [(39, [number[x] for x in seqs[38][:4]])]
    assert rows_of(res.splits["valid"]) == [(40, [number[x] for x in seqs[39]])]
    assert rows_of(res.splits["test"]) == [(99, [number[100], number[101]])]
    assert res.n_items == 7   # numbering of the full train set
    assert res.extra["fraction_cut"] == {"fraction": 64, "train_samples_full": 353, "train_samples_kept": 5,
                                         "cut": {"session_id": 39, "clicks": 10, "kept_clicks": 4,
                                                 "items": [number[x] for x in seqs[38]]}}


def test_a_fraction_that_keeps_no_sample_is_a_clear_error(tmp_path):
    """int(N / 64) = 0 when N < 64: SR-GNN's tr_seqs[-0:] would silently keep the whole list."""
    lines = [f"{s},2014-04-01T00:{s:02d}:0{j}.000Z,{100 + j},0" for s in range(1, 6) for j in range(3)]
    lines += [f"9,2014-04-03T00:00:0{j}.000Z,{100 + j},0" for j in range(3)]
    (tmp_path / "yoochoose-clicks.dat").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"the 1/64 cut keeps int\(10 / 64\) = 0 of the 10 train samples.*tr_seqs\[-0:\]"):
        build_protocol(get("yoochoose_1_64"), tmp_path, params(0.0))


def test_yoochoose_1_4_matches_sample_slicing(tmp_path):
    seqs = _yoo_fraction_log(tmp_path / "yoochoose-clicks.dat")
    full = build_protocol(get("yoochoose"), tmp_path, params(0.0))
    frac = build_protocol(get("yoochoose_1_4"), tmp_path, params(0.0))
    samples = lambda res: [(p, t) for _, items in rows_of(res.splits["train"])  # noqa: E731
                           for p, t in ((items[:-i], items[-i]) for i in range(1, len(items)))]
    assert len(seqs) == 40 and len(samples(full)) == 353
    assert samples(frac) == samples(full)[-(353 // 4):]


# ----------------------------------------------------------------------------- bad inputs

@pytest.mark.parametrize("dataset, content, fragment", [
    ("diginetica", "sessionId,userId,itemId,timeframe,eventdate\n1,NA,2,3,2016-01-01\n", "separated by commas"),
    ("diginetica", "session;user;item;time;date\n1;NA;2;3;2016-01-01\n", "has header 'session;user;item;time;date'"),
    ("diginetica", f"{CAMEL}\n1;NA;abc;3;2016-01-01\n", "train-item-views.csv line 2: itemId 'abc' is not a 64-bit"),
    ("diginetica", f"{CAMEL}\n1;NA;7;3;01/02/2016\n", "does not end in an eventdate YYYY-MM-DD"),
    ("diginetica", f"{CAMEL}\n1;NA;7;3;2016-01-02\n1;NA;7;3;01/02/2016\n",
     "train-item-views.csv line 3: eventdate '01/02/2016' is not a date YYYY-MM-DD"),
    ("yoochoose", "1,07/04/2014 10:51,214536502,0\n", "expected ISO-8601"),
    ("diginetica", "", "is empty"),
    ("diginetica", f"{CAMEL}\n", "has a header but no rows"),
    ("yoochoose", "1;2014-04-01T10:00:00.500Z;214536502;0\n", "separated by semicolons"),
    ("yoochoose", "x1,2014-04-01T10:00:00.500Z,214536502,0\n", "expected a data row"),
    ("yoochoose", "1,2014-04-01T10:00:00.500Z,21453650x,0\n",
     "yoochoose-clicks.dat line 1: ItemId '21453650x' is not a 64-bit integer"),
])
def test_bad_input_is_one_line_data_error(tmp_path, dataset, content, fragment):
    name = "train-item-views.csv" if dataset == "diginetica" else "yoochoose-clicks.dat"
    (tmp_path / name).write_text(content)
    with pytest.raises(DataError) as err:
        build_protocol(get(dataset), tmp_path, params())
    assert fragment in str(err.value) and "\n" not in str(err.value) and "Fix:" in str(err.value)


def test_all_sessions_filtered_is_data_error(tmp_path):
    rows = "".join(f"{s};NA;{s * 10 + j};{j};2016-05-01\n" for s in range(1, 5) for j in range(3))
    with pytest.raises(DataError, match="all sessions of diginetica vanished under the filters"):
        build_protocol(get("diginetica"), write_digi(tmp_path, rows=rows), params())


def test_missing_raw_file(tmp_path):
    with pytest.raises(DataError, match="raw file train-item-views.csv not found"):
        build_protocol(get("diginetica"), tmp_path, params())


# ----------------------------------------------------------------------------- reference

def reference_filter(clicks: dict, dates: dict, min_count: int) -> dict[str, int]:
    """Steps 3-5 in place: drop length-1 sessions, count items, keep items clicked >= min_count."""
    for s in [s for s in clicks if len(clicks[s]) == 1]:
        del clicks[s], dates[s]
    counts: dict[str, int] = {}
    for seq in clicks.values():
        for i in seq:
            counts[i] = counts.get(i, 0) + 1
    for s in list(clicks):
        kept = [i for i in clicks[s] if counts[i] >= min_count]
        if len(kept) < 2:
            del clicks[s], dates[s]
        else:
            clicks[s] = kept
    return counts


def reference_srgnn(path: Path, split_days: int = 7, min_count: int = 5) -> dict:
    """SR-GNN's preprocess.py restated in plain Python (dicts, one row at a time, UTC dates)."""
    clicks, dates = {}, {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f, delimiter=";"):
            sid = row["sessionId"]
            clicks.setdefault(sid, []).append((row["itemId"], int(row["timeframe"])))
            dates[sid] = calendar.timegm(time.strptime(row["eventdate"], "%Y-%m-%d"))
    clicks = {s: [i for i, _ in sorted(c, key=lambda c: c[1])] for s, c in clicks.items()}
    counts = reference_filter(clicks, dates, min_count)
    maxdate = max(dates.values())
    split = maxdate - 86400 * split_days
    train = sorted([(s, d) for s, d in dates.items() if d < split], key=lambda x: x[1])
    test = sorted([(s, d) for s, d in dates.items() if d > split], key=lambda x: x[1])
    numbers: dict[str, int] = {}
    out_train = []
    for s, _ in train:
        out_train.append((int(s), [numbers.setdefault(i, len(numbers) + 1) for i in clicks[s]]))
    out_test = []
    for s, _ in test:
        seq = [numbers[i] for i in clicks[s] if i in numbers]
        if len(seq) >= 2:
            out_test.append((int(s), seq))
    return {"train": out_train, "test": out_test, "numbers": numbers, "counts": counts}


def test_matches_plain_python_reference_on_sample(tmp_path):
    sample = SampleParams(sessions=1500, items=600, days=60, seed=7)
    generate(tmp_path / "s.zip", sample)
    zipfile.ZipFile(tmp_path / "s.zip").extractall(tmp_path)
    ref = reference_srgnn(tmp_path / MEMBER)
    res = build_protocol(get("sample"), tmp_path, params(0.1))
    assert rows_of(res.splits["train"]) + rows_of(res.splits["valid"]) == ref["train"]
    assert rows_of(res.splits["test"]) == ref["test"]
    assert len(ref["test"]) > 20 and len(res.splits["valid"]) == len(ref["train"]) // 10
    assert res.items.get_column("raw_id").to_list() == list(ref["numbers"])
    assert res.items.get_column("count").to_list() == [ref["counts"][r] for r in ref["numbers"]]


def reference_yoochoose(path: Path, min_count: int = 5) -> dict:
    """The same restatement for Yoochoose: no header, file order kept, date = last row's second."""
    clicks, dates = {}, {}
    with open(path, newline="") as f:
        for row in csv.reader(f):
            clicks.setdefault(row[0], []).append(row[2])
            dates[row[0]] = calendar.timegm(time.strptime(row[1][:19], "%Y-%m-%dT%H:%M:%S"))
    counts = reference_filter(clicks, dates, min_count)
    split = max(dates.values()) - 86400
    order = lambda keep: sorted([(s, d) for s, d in dates.items() if keep(d)], key=lambda x: x[1])  # noqa: E731
    numbers: dict[str, int] = {}
    train = [(int(s), [numbers.setdefault(i, len(numbers) + 1) for i in clicks[s]]) for s, _ in order(lambda d: d < split)]
    test = [(int(s), [numbers[i] for i in clicks[s] if i in numbers]) for s, _ in order(lambda d: d > split)]
    return {"train": train, "test": [t for t in test if len(t[1]) >= 2]}


def test_yoochoose_matches_reference_with_interleaved_sessions(tmp_path):
    import numpy as np
    from pipeline.datasets.sample import draw_sessions
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 9, 1200)
    sess, item = draw_sessions(rng, lengths, 150)
    start = np.sort(rng.integers(0, 3 * 86_400_000, 1200)) + 1_396_310_400_000  # 2014-04-01
    t = start[sess] + rng.integers(0, 600_000, len(sess))
    order = np.arange(len(sess))
    swap = rng.choice(len(sess) - 1, 150, replace=False)  # interleave neighbouring rows
    order[swap], order[swap + 1] = order[swap + 1], order[swap]
    ids = rng.permutation(1200) + 10  # session ids not in file order
    stamps = pl.from_epoch(pl.Series(t[order]), "ms").dt.strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
    lines = [f"{ids[s]},{st},{214_000_000 + i},{'S' if i % 7 == 0 else i % 13}"
             for s, st, i in zip(sess[order], stamps, item[order])]
    (tmp_path / "yoochoose-clicks.dat").write_text("\n".join(lines) + "\n")
    ref = reference_yoochoose(tmp_path / "yoochoose-clicks.dat")
    full = build_protocol(get("yoochoose"), tmp_path, params(0.1))
    assert rows_of(full.splits["train"]) + rows_of(full.splits["valid"]) == ref["train"]
    assert rows_of(full.splits["test"]) == ref["test"] and len(ref["test"]) > 50
    frac = build_protocol(get("yoochoose_1_64"), tmp_path, params(0.1))
    aug = lambda rows: [(p, t) for _, s in rows for p, t in ((s[:-i], s[-i]) for i in range(1, len(s)))]  # noqa: E731
    samples = aug(ref["train"])
    assert aug(rows_of(frac.splits["train"]) + rows_of(frac.splits["valid"])) == samples[-(len(samples) // 64):]
    assert rows_of(frac.splits["test"]) == ref["test"] and frac.n_items == full.n_items
