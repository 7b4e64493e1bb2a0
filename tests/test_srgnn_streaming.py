"""The streaming SR-GNN path (protocols/srgnn_streaming.py) writes what the in-memory path writes:
the same shard bytes, items.parquet and manifest, on tiny raw files cut into many partitions and
buckets (PART_BYTES / BUCKET_CLICKS shrunk), contiguous and interleaved sessions, repeats, the
fractions 1/64 and 1/4, a session dated exactly at the split second, Diginetica's timeframe sort."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from pipeline import io, preprocess
from pipeline.datasets import get
from pipeline.datasets.sample import draw_sessions
from pipeline.errors import DataError, ParamsError
from pipeline.params import Params, PreprocessParams, load_params
from pipeline.protocols import build_protocol
from pipeline.protocols import srgnn_streaming as streaming
from test_srgnn import DIGI_ROWS, YOO_ROWS, _yoo_fraction_log, write_digi

SOURCE = {"filename": "raw", "origin": "file", "bytes": 1, "sha256": "ab" * 32}
YOO_FILE = "yoochoose-clicks.dat"


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch):
    """Partitions of ~10 raw lines and buckets of a few sessions, so tiny files take every branch
    (`pieces` sets them for a larger file)."""
    monkeypatch.setattr(streaming, "PART_BYTES", 400)
    monkeypatch.setattr(streaming, "BUCKET_CLICKS", 7)


def pieces(monkeypatch, raw: Path, dataset: str) -> None:
    """About 6 partitions and 12 buckets, whatever the raw file's size."""
    size = streaming.raw_bytes(get(dataset), raw)
    monkeypatch.setattr(streaming, "PART_BYTES", size // 6 + 1)
    monkeypatch.setattr(streaming, "BUCKET_CLICKS", size // 40 // 12 + 1)


def params(streaming_: bool | str, valid_fraction: float = 0.1, rows_per_shard: int = 1_000_000) -> Params:
    return Params(preprocess=PreprocessParams(valid_fraction=valid_fraction, rows_per_shard=rows_per_shard,
                                              streaming=streaming_))


def yoo_raw(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / YOO_FILE).write_text(text)
    io.write_json(root / "source.json", SOURCE)
    return root


def interleaved(seed: int, sessions: int = 600) -> str:
    """A Yoochoose log whose sessions are not contiguous (neighbouring rows swapped), with ids in no
    order, repeats, and several sessions ending in the same second."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 9, sessions)
    sess, item = draw_sessions(rng, lengths, 80)
    start = np.sort(rng.integers(0, 3 * 86_400, sessions)) * 1000 + 1_396_310_400_000  # whole seconds: ties
    t = start[sess] + rng.integers(0, 4, len(sess)) * 1000
    order = np.arange(len(sess))
    swap = rng.choice(len(sess) - 1, 300, replace=False)
    order[swap], order[swap + 1] = order[swap + 1], order[swap]
    ids = rng.permutation(sessions) + 10
    stamps = pl.from_epoch(pl.Series(t[order]), "ms").dt.strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
    return "".join(f"{ids[s]},{st},{214_000_000 + i},0\n" for s, st, i in zip(sess[order], stamps, item[order]))


def files_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def spy(monkeypatch) -> dict:
    """Record the partitions spilled, the buckets emitted and each grouping of a partition (True: as runs)."""
    seen = {"parts": [], "buckets": 0, "runs": []}
    spill, bucket, runs = streaming._spill, streaming._Emit.bucket, streaming._runs
    monkeypatch.setattr(streaming, "_spill", lambda *a: seen["parts"].append(a[3]) or spill(*a))
    monkeypatch.setattr(streaming._Emit, "bucket",
                        lambda *a: seen.__setitem__("buckets", seen["buckets"] + 1) or bucket(*a))
    monkeypatch.setattr(streaming, "_runs", lambda ids: seen["runs"].append((r := runs(ids)) is not None) or r)
    return seen


def assert_same_output(dataset: str, raw: Path, tmp: Path, **kw) -> dict:
    """preprocess.run both ways: identical files, the manifest too (the option is not recorded: walk 44d #2)."""
    a = preprocess.run(dataset, raw, tmp / "memory", params(False, **kw))
    b = preprocess.run(dataset, raw, tmp / "streaming", params(True, **kw))
    fa, fb = files_of(tmp / "memory"), files_of(tmp / "streaming")
    assert sorted(fa) == sorted(fb)
    assert fa == fb and a == b and "streaming" not in a["params"]["preprocess"]
    assert [p.name for p in tmp.iterdir() if p.name.startswith(".")] == []  # scratch folders removed
    return b


def test_yoochoose_rows_repeats_and_reversed_stamps(tmp_path):
    m = assert_same_output("yoochoose", yoo_raw(tmp_path / "raw", YOO_ROWS), tmp_path, valid_fraction=0.0)
    assert m["splits"]["train"] == {"sessions": 5, "clicks": 11} and m["splits"]["valid"]["sessions"] == 0


def test_session_dated_at_the_split_second(tmp_path):
    rows = YOO_ROWS.replace("2014-04-04T10:00:01.000Z", "2014-04-04T11:00:00.000Z")
    m = assert_same_output("yoochoose", yoo_raw(tmp_path / "raw", rows), tmp_path, valid_fraction=0.0)
    assert next(s for s in m["steps"] if s["step"].startswith("dropped"))["sessions"] == 1


@pytest.mark.parametrize("dataset", ["yoochoose_1_64", "yoochoose_1_4", "yoochoose"])
def test_fractions_cut_inside_a_session(tmp_path, monkeypatch, dataset):
    raw = tmp_path / "raw"
    raw.mkdir()
    _yoo_fraction_log(raw / YOO_FILE)
    io.write_json(raw / "source.json", SOURCE)
    pieces(monkeypatch, raw, dataset)
    seen = spy(monkeypatch)
    m = assert_same_output(dataset, raw, tmp_path, valid_fraction=0.5, rows_per_shard=3)
    assert seen["parts"][0] >= 6 and all(seen["runs"])  # contiguous sessions: grouped as runs
    if dataset == "yoochoose_1_64":
        assert m["protocol_info"]["fraction_cut"]["cut"]["kept_clicks"] == 4


@pytest.mark.parametrize("dataset, seed", [("yoochoose", 1), ("yoochoose_1_4", 2), ("yoochoose_1_64", 3)])
def test_interleaved_sessions_in_many_partitions(tmp_path, monkeypatch, dataset, seed):
    raw = yoo_raw(tmp_path / "raw", interleaved(seed))
    pieces(monkeypatch, raw, dataset)
    seen = spy(monkeypatch)
    m = assert_same_output(dataset, raw, tmp_path, rows_per_shard=50)
    assert seen["parts"][0] >= 6 and seen["buckets"] >= 4
    assert not all(seen["runs"])  # sessions that come back: grouped by hashing their ids
    assert len([s for s in m["shards"] if s["path"].startswith("train/")]) > 1 or dataset == "yoochoose_1_64"


def test_diginetica_timeframe_sort(tmp_path):
    raw = write_digi(tmp_path / "raw", rows=DIGI_ROWS)
    io.write_json(raw / "source.json", SOURCE)
    m = assert_same_output("diginetica", raw, tmp_path, valid_fraction=0.4, rows_per_shard=2)
    assert m["splits"]["train"] == {"sessions": 3, "clicks": 8}


def test_auto_takes_streaming_when_the_file_does_not_fit(tmp_path, monkeypatch):
    """auto: the manifest (which records `auto`) is byte-identical whichever path ran."""
    raw = yoo_raw(tmp_path / "raw", interleaved(4, sessions=200))
    pieces(monkeypatch, raw, "yoochoose_1_4")
    size = (raw / YOO_FILE).stat().st_size
    taken = []
    monkeypatch.setattr(streaming, "_build", lambda *a, _f=streaming._build: taken.append(1) or _f(*a))
    monkeypatch.setattr(streaming, "available_memory", lambda: 100 * size)
    preprocess.run("yoochoose_1_4", raw, tmp_path / "a", params("auto"))
    assert taken == []
    monkeypatch.setattr(streaming, "available_memory", lambda: size)
    preprocess.run("yoochoose_1_4", raw, tmp_path / "b", params("auto"))
    assert taken == [1]
    assert files_of(tmp_path / "a") == files_of(tmp_path / "b")


def test_runs_group_contiguous_sessions_and_detect_returns():
    assert streaming._runs(pl.Series([5, 5, 9, 2, 2, 2])).to_list() == [0, 0, 1, 2, 2, 2]
    assert streaming._runs(pl.Series([5, 5, 9, 5])) is None


def test_without_scratch_the_splits_are_collected(tmp_path):
    (tmp_path / YOO_FILE).write_text(YOO_ROWS)
    a = build_protocol(get("yoochoose"), tmp_path, params(False, valid_fraction=0.0))
    b = build_protocol(get("yoochoose"), tmp_path, params(True, valid_fraction=0.0))
    assert all(isinstance(b.splits[s], pl.DataFrame) and b.splits[s].equals(a.splits[s]) for s in a.splits)
    assert b.steps == a.steps and b.extra == a.extra and b.items.equals(a.items)


@pytest.mark.parametrize("rows, fragment", [
    ("1,2014-04-01T10:00:00.500Z,214536502,0\n1,2014-04-01T10:00:01.500Z,21453650x,0\n",
     "yoochoose-clicks.dat line 2: ItemId '21453650x' is not a 64-bit integer"),
    # a bad stamp on a session's last row (only those are read): the same error both ways
    ("1,2014-04-01T10:00:00.500Z,214536502,0\n1,01/04/2014 10:00,214536502,0\n",
     "yoochoose-clicks.dat line 2: Timestamp '01/04/2014 10:00' is not an ISO-8601 time"),
    ("1,2014-04-01T10:00:00.500Z,214536502,0\n1,,214536502,0\n",
     "has 1 session(s) whose last row has no date (the first on line 2"),
    ("1,2014-04-01T10:00:00.500Z,214536502,0\n,2014-04-01T10:00:01.500Z,214536502,0\n", "empty session or item id"),
    ("".join(f"{s},2014-04-0{s}T10:00:00.000Z,{s},0\n" for s in range(1, 4)), "vanished under the filters"),
])
def test_bad_input_is_the_same_data_error(tmp_path, rows, fragment):
    (tmp_path / YOO_FILE).write_text(rows)
    errors = []
    for mode in (False, True):
        with pytest.raises(DataError) as err:
            build_protocol(get("yoochoose"), tmp_path, params(mode))
        errors.append(str(err.value))
    assert fragment in errors[1] and "\n" not in errors[1]
    assert errors[0].split(":")[0] == errors[1].split(":")[0]
    if "line 2:" in fragment:                         # the same line named both ways (walk 42d #2)
        assert fragment in errors[0]


def test_a_bad_stamp_on_an_inner_row_is_ignored_both_ways(tmp_path):
    rows = YOO_ROWS.replace("7,2014-03-30T08:00:01.000Z", "7,not a date")
    (tmp_path / YOO_FILE).write_text(rows)
    a = build_protocol(get("yoochoose"), tmp_path, params(False, valid_fraction=0.0))
    b = build_protocol(get("yoochoose"), tmp_path, params(True, valid_fraction=0.0))
    assert b.splits["train"].equals(a.splits["train"]) and b.steps == a.steps


@pytest.mark.parametrize("value", ["sometimes", 2])
def test_streaming_option_is_validated(value):
    with pytest.raises(ParamsError, match="preprocess.streaming"):
        load_params(Path("/nonexistent"), overrides=[f"preprocess.streaming={value}"])


def test_auto_compares_the_raw_file_with_available_memory(tmp_path, monkeypatch):
    (tmp_path / YOO_FILE).write_bytes(b"x" * 1000)
    spec = get("yoochoose")
    monkeypatch.setattr(streaming, "available_memory", lambda: 1999)
    assert streaming.use_streaming(spec, tmp_path, "auto")
    monkeypatch.setattr(streaming, "available_memory", lambda: 2000)
    assert not streaming.use_streaming(spec, tmp_path, "auto")
    assert streaming.use_streaming(spec, tmp_path, True) and not streaming.use_streaming(spec, tmp_path, False)
    assert streaming.available_memory() > 0


def test_a_cgroup_memory_limit_bounds_the_available_memory(tmp_path):
    """Walk 40h #4: MemAvailable is the host's; in a container with a memory limit the in-memory path was taken
    and killed for memory. v2 (memory.max / memory.current) and v1 files, and no limit."""
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.max").write_text("4294967296\n")
    (v2 / "memory.current").write_text("1073741824\n")
    assert streaming.cgroup_memory_left(v2) == 3 << 30
    (v2 / "memory.max").write_text("max\n")
    assert streaming.cgroup_memory_left(v2) is None
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(str(2 << 30))
    (v1 / "memory.usage_in_bytes").write_text(str(3 << 30))
    assert streaming.cgroup_memory_left(tmp_path / "v1") == 0
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712")
    assert streaming.cgroup_memory_left(tmp_path / "v1") is None
    assert streaming.cgroup_memory_left(tmp_path / "none") is None
    # walk 41a #5: a limit below the top, where /proc/self/cgroup puts the process (this machine's own layout,
    # `4:memory:/process_api/<id>`, and a v2 `0::/user.slice/job`), bounds it too; the least of the path wins
    member = tmp_path / "cgroup"
    member.write_text("9:name=systemd:/\n4:memory:/process_api/abc\n0::/\n")
    leaf = v1 / "process_api" / "abc"
    leaf.mkdir(parents=True)
    (leaf / "memory.limit_in_bytes").write_text(str(4 << 30))
    (leaf / "memory.usage_in_bytes").write_text(str(1 << 30))
    assert streaming.cgroup_memory_left(tmp_path / "v1", member) == 3 << 30
    assert streaming.cgroup_memory_left(tmp_path / "v1", tmp_path / "no-such") is None     # the top: no limit
    member.write_text("0::/user.slice/job\n")
    job = v2 / "user.slice" / "job"
    job.mkdir(parents=True)
    (job / "memory.max").write_text(str(2 << 30))
    (job / "memory.current").write_text(str(1 << 29))
    (v2 / "user.slice" / "memory.max").write_text(str(1 << 30))                # a tighter parent
    (v2 / "user.slice" / "memory.current").write_text(str(1 << 28))
    assert streaming.cgroup_memory_left(v2, member) == (1 << 30) - (1 << 28)


def test_shard_bytes_do_not_depend_on_chunks(tmp_path):
    """`io.write_split` writes each shard from one chunk, so a frame built in pieces (the in-memory
    path's) and the streamed one (`io.sink_split`) give the same bytes."""
    rows = 100_000  # large enough for the writer's pages to follow the chunks
    df = pl.DataFrame({"session_id": pl.int_range(rows, eager=True),
                       "items": pl.int_ranges(0, pl.int_range(rows, eager=True) % 9 + 2, eager=True).cast(pl.List(pl.Int32))})
    chunked = pl.concat([df.slice(i, 9_091) for i in range(0, rows, 9_091)], rechunk=False)
    df.write_parquet(tmp_path / "whole.parquet", row_group_size=7_000)
    shards = [io.write_split(tmp_path / "a", "train", df, 60_000),
              io.write_split(tmp_path / "b", "train", chunked, 60_000),
              io.sink_split(tmp_path / "c", "train", pl.scan_parquet(tmp_path / "whole.parquet"), 60_000)]
    assert chunked.n_chunks() == 11 and [len(s) for s in shards] == [2, 2, 2]
    assert shards[0] == shards[1] == shards[2]
