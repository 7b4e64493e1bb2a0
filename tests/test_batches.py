"""pipeline/batches.py: samples shards -> left-padded matrices, seeded batches."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch

from pipeline.batches import batch_order, batches, frame_to_samples, load_samples, load_sessions, pad_left
from pipeline.errors import DataError
from pipeline.io import write_split

SCHEMA = {"session_id": pl.Int64, "prefix": pl.List(pl.Int32), "target": pl.Int32}


def test_pad_left_keeps_the_most_recent_items_right_aligned():
    df = pl.DataFrame({"prefix": [[1, 2, 3, 4], [5], []], "target": [9, 8, 7]},
                      schema={"prefix": pl.List(pl.Int32), "target": pl.Int32})
    s = frame_to_samples(df, 3)
    assert s.seqs.tolist() == [[2, 3, 4], [0, 0, 5], [0, 0, 0]]
    assert s.targets.tolist() == [9, 8, 7] and s.lengths.tolist() == [3, 1, 0]
    assert pad_left(np.array([], dtype=np.int32), np.array([0, 0]), 2).tolist() == [[0, 0], [0, 0]]


def test_shards_are_read_in_order_and_shuffle_is_seeded(tmp_path):
    n = 300
    df = pl.DataFrame({"session_id": list(range(n)), "prefix": [[i % 7 + 1] * (i % 5 + 1) for i in range(n)],
                       "target": [i + 1 for i in range(n)]}, schema=SCHEMA)
    write_split(tmp_path, "train", df, rows_per_shard=128)           # three shards
    s = load_samples(tmp_path, "train", 4)
    assert s.seqs.shape == (n, 4) and s.seqs.dtype == np.int32 and s.targets.tolist() == list(range(1, n + 1))
    assert s.seqs[4].tolist() == [5, 5, 5, 5] and s.seqs[1].tolist() == [0, 0, 2, 2]

    def order(seed):
        g = torch.Generator().manual_seed(seed)
        return torch.cat([t for _, t in batches(s, 64, shuffle=True, generator=g)])
    a, b = order(3), order(3)
    assert torch.equal(a, b) and not torch.equal(a, order(4))
    assert sorted(a.tolist()) == list(range(1, n + 1))
    seqs, targets = next(batches(s, 7, trim=False))
    assert seqs.dtype == torch.long and seqs.shape == (7, 4) and targets.tolist() == list(range(1, 8))


def test_trim_drops_only_columns_that_are_padding_in_the_whole_batch():
    df = pl.DataFrame({"prefix": [[1], [2, 3], [4], [5]], "target": [1, 2, 3, 4]},
                      schema={"prefix": pl.List(pl.Int32), "target": pl.Int32})
    s = frame_to_samples(df, 5)
    widths = [seqs.tolist() for seqs, _ in batches(s, 2)]
    assert widths == [[[0, 1], [2, 3]], [[4], [5]]]
    assert [tuple(x.shape) for x, _ in batches(s, 2, trim=False)] == [(2, 5), (2, 5)]


def test_pad_to_rounds_trimmed_widths_up_to_its_multiple_within_the_matrix():
    """pad_to (train.compile: reduce-overhead, one CUDA graph per shape): widths 3 -> 4, 1 -> 4, 5 -> 5 (the
    matrix's own width caps it); the rows are the trimmed ones with padding columns on the left."""
    df = pl.DataFrame({"prefix": [[1, 2, 3], [4], [5], [1, 2, 3, 4, 5]], "target": [1, 2, 3, 4]},
                      schema={"prefix": pl.List(pl.Int32), "target": pl.Int32})
    s = frame_to_samples(df, 5)
    got = [seqs.tolist() for seqs, _ in batches(s, 1, pad_to=4)]
    assert got == [[[0, 1, 2, 3]], [[0, 0, 0, 4]], [[0, 0, 0, 5]], [[1, 2, 3, 4, 5]]]


def test_bucketed_shuffle_serves_every_row_once_in_length_sorted_batches():
    """bucket=k: chunks of k batches of a seeded permutation, each sorted by length, batches shuffled."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 40, 1000).astype(np.int32)

    def order(seed, bucket):
        return batch_order(lengths, 32, shuffle=True, generator=torch.Generator().manual_seed(seed), bucket=bucket)
    plain = order(5, 0)          # bucket 0 is the plain seeded permutation cut into batches
    assert torch.equal(torch.cat(plain), torch.randperm(1000, generator=torch.Generator().manual_seed(5)))
    one_chunk = order(5, 1000)   # one chunk: every batch is a contiguous run of the length-sorted rows
    assert sorted(torch.cat(one_chunk).tolist()) == list(range(1000))
    spans = sorted((int(lengths[b].min()), int(lengths[b].max())) for b in one_chunk)
    assert all(hi <= lo for (_, hi), (lo, _) in zip(spans, spans[1:]))
    assert [len(b) for b in one_chunk].count(32) == 31              # 31 full batches + one of 8
    chunks = order(5, 4)                                           # chunks of 4 batches
    assert sorted(torch.cat(chunks).tolist()) == list(range(1000))
    assert all(torch.equal(a, b) for a, b in zip(chunks, order(5, 4)))
    assert not all(torch.equal(a, b) for a, b in zip(chunks, order(6, 4)))
    cells = {k: sum(len(b) * int(lengths[b].max()) for b in order(5, k)) for k in (0, 4)}
    assert cells[4] < 0.7 * cells[0], cells                        # trimmed batches carry less padding
    assert batch_order(lengths[:0], 32, shuffle=True, generator=torch.Generator(), bucket=4) == []


def test_by_length_order_is_a_stable_sort_of_all_rows():
    lengths = np.array([3, 1, 2, 1, 3], dtype=np.int32)
    assert [b.tolist() for b in batch_order(lengths, 2, by_length=True)] == [[1, 3], [2, 0], [4]]
    assert [b.tolist() for b in batch_order(lengths, 2)] == [[0, 1], [2, 3], [4]]


def test_bad_samples_are_data_errors(tmp_path):
    df = pl.DataFrame({"session_id": [1], "prefix": [[1, None]], "target": [2]}, schema=SCHEMA)
    with pytest.raises(DataError, match="null item id"):
        frame_to_samples(df, 3)
    write_split(tmp_path, "train", pl.DataFrame({"session_id": [1], "target": [[1, 2]]}))
    with pytest.raises(DataError, match="has no column"):
        load_samples(tmp_path, "train", 3)
    write_split(tmp_path / "s", "train", pl.DataFrame({"session_id": [1, 2], "items": [[1, 2], [3]]}))
    with pytest.raises(DataError, match="shifted row with fewer than 2 items"):
        load_samples(tmp_path / "s", "train", 3)
    with pytest.raises(DataError, match="no shards"):
        load_samples(tmp_path, "valid", 3)


def test_shifted_rows_expand_to_every_next_item(tmp_path):
    """A shifted row (session_id, items) is every next item of its window with the items before it
    as the prefix, cut to the last max_len; the same pairs as prefix rows of the window."""
    write_split(tmp_path, "train", pl.DataFrame({"session_id": [7, 8], "items": [[4, 5, 6, 7], [9, 3]]},
                                                schema={"session_id": pl.Int64, "items": pl.List(pl.Int32)}))
    got = load_samples(tmp_path, "train", 2)
    assert got.seqs.tolist() == [[5, 6], [4, 5], [0, 4], [0, 9]]
    assert got.targets.tolist() == [7, 6, 5, 3] and got.lengths.tolist() == [2, 2, 1, 1]


def test_load_sessions_rebuilds_each_session_once(tmp_path):
    """Prefix rows: longest prefix + its target, once per session, across shards, in first-appearance
    order (a cut session keeps the clicks its samples hold); shifted rows: the items themselves."""
    df = pl.DataFrame({"session_id": [7, 7, 7, 3, 8, 8],
                       "prefix": [[4, 5, 6], [4, 5], [4], [9], [1, 2], [1]],
                       "target": [7, 6, 5, 2, 3, 2]}, schema=SCHEMA)
    write_split(tmp_path / "p", "train", df, rows_per_shard=2)      # session 7 spans two shards
    items, session = load_sessions(tmp_path / "p", "train")
    assert items.tolist() == [4, 5, 6, 7, 9, 2, 1, 2, 3] and session.tolist() == [0, 0, 0, 0, 1, 1, 2, 2, 2]
    write_split(tmp_path / "s", "train", pl.DataFrame({"session_id": [5, 6], "items": [[3, 1, 3], [2, 4]]},
                                                      schema={"session_id": pl.Int64, "items": pl.List(pl.Int32)}))
    items, session = load_sessions(tmp_path / "s", "train")
    assert items.tolist() == [3, 1, 3, 2, 4] and session.tolist() == [0, 0, 0, 1, 1]
    write_split(tmp_path / "c", "train", pl.DataFrame({"user": [1], "label": [1]}))
    with pytest.raises(DataError, match="holds no sessions"):
        load_sessions(tmp_path / "c", "train")


def test_click_counts_are_the_counts_of_the_loaded_sessions(tmp_path):
    """Popularity-sampled candidates count clicks from the Parquet (streamed), not from the sessions loaded
    whole (walk 40h #3): the same counts as bincount over load_sessions, for prefix and shifted rows."""
    from pipeline.batches import click_counts
    df = pl.DataFrame({"session_id": [7, 7, 7, 3, 8, 8], "prefix": [[4, 5, 6], [4, 5], [4], [9], [1, 2], [1]],
                       "target": [7, 6, 5, 2, 3, 2]}, schema=SCHEMA)
    write_split(tmp_path / "p", "train", df, rows_per_shard=2)
    write_split(tmp_path / "s", "train", pl.DataFrame({"session_id": [5, 6], "items": [[3, 1, 3], [2, 4]]},
                                                      schema={"session_id": pl.Int64, "items": pl.List(pl.Int32)}))
    for root, n_items in ((tmp_path / "p", 9), (tmp_path / "s", 6)):
        expect = np.bincount(load_sessions(root, "train")[0], minlength=n_items + 1).astype(np.float64)
        expect[0] = 0.0
        assert click_counts(root, "train", n_items).tolist() == expect.tolist()
    with pytest.raises(DataError, match=r"outside 1..8"):
        click_counts(tmp_path / "p", "train", 8)


def test_load_sequences_gives_inputs_and_the_next_item_of_every_position(tmp_path):
    from pipeline.batches import load_sequences
    write_split(tmp_path, "train", pl.DataFrame({"session_id": [7, 8], "items": [[4, 5, 6, 7], [9, 3]]},
                                                schema={"session_id": pl.Int64, "items": pl.List(pl.Int32)}))
    got = load_sequences(tmp_path, "train", 4)
    assert got.seqs.tolist() == [[0, 4, 5, 6], [0, 0, 0, 9]]
    assert got.targets.tolist() == [[0, 5, 6, 7], [0, 0, 0, 3]]
    assert got.lengths.tolist() == [3, 1] and got.n_targets == 4 and len(got) == 2
    cut = load_sequences(tmp_path, "train", 2)                       # the most recent max_len positions
    assert cut.seqs.tolist() == [[5, 6], [0, 9]] and cut.targets.tolist() == [[6, 7], [0, 3]]
    (seqs, targets), = list(batches(cut, 2))
    assert seqs.shape == targets.shape == (2, 2)
    write_split(tmp_path / "p", "train", pl.DataFrame({"session_id": [1], "prefix": [[1]], "target": [2]}, schema=SCHEMA))
    with pytest.raises(DataError, match="holds \\(prefix, target\\) samples.*train.objective: prefixes"):
        load_sequences(tmp_path / "p", "train", 4)


def test_load_sequences_refuses_null_ids(tmp_path):
    from pipeline.batches import load_sequences
    write_split(tmp_path, "train", pl.DataFrame({"session_id": [1], "items": [[4, None, 6]]},
                                                schema={"session_id": pl.Int64, "items": pl.List(pl.Int32)}))
    with pytest.raises(DataError, match="holds a null item id"):
        load_sequences(tmp_path, "train", 4)


def test_processes_that_spill_one_split_at_once_build_it_once(tmp_path):
    """The ranks of a torchrun job with train.memory_budget find no spill folder at the same moment: each built its
    own and replaced the one another was opening, which then died with FileNotFoundError (walk 33a: 2 of 4 tries)."""
    import multiprocessing as mp
    from spill_race import load_after
    from test_train import make_samples
    samples = make_samples(tmp_path / "samples", n_items=12, train=2000)
    full = load_samples(samples, "train", 6)
    want = ("ok", int(full.seqs.sum()), int(full.targets.sum()))
    ctx = mp.get_context("spawn")
    for attempt in range(3):
        barrier, out = ctx.Barrier(3), ctx.Queue()
        procs = [ctx.Process(target=load_after, args=(barrier, str(samples), str(tmp_path / f"spill{attempt}"), out))
                 for _ in range(3)]
        for p in procs:
            p.start()
        got = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert got == [want] * 3, got


def test_a_damaged_spill_is_rebuilt_and_a_full_disk_is_one_line(tmp_path, monkeypatch):
    """Walk 40h: a truncated seqs.npy beside its `complete` marker was numpy's traceback at every run (#2); a full
    disk under the spill folder was a SIGBUS at the first page written through the map, "Bus error" and no word
    (#1): the files' blocks are reserved first."""
    import errno
    import os
    from pipeline.errors import DataError
    from test_train import make_samples
    samples = make_samples(tmp_path / "samples", n_items=12, train=500)
    full = load_samples(samples, "train", 6)
    load_samples(samples, "train", 6, budget_mb=0.001, spill=tmp_path / "spill")
    seqs = tmp_path / "spill" / "samples" / "seqs.npy"
    os.truncate(seqs, seqs.stat().st_size // 2)
    again = load_samples(samples, "train", 6, budget_mb=0.001, spill=tmp_path / "spill")
    assert np.array_equal(again.seqs, full.seqs) and seqs.stat().st_size > 1000

    def full_disk(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", full_disk)
    with pytest.raises(DataError, match=r"no room for the memory-mapped sample matrices .* under .*spill2.*Fix: "
                                        r"free disk space there, or set SEQPE_STATE"):
        load_samples(samples, "train", 6, budget_mb=0.001, spill=tmp_path / "spill2")
    assert not [p for p in (tmp_path / "spill2").iterdir() if p.name != ".samples.lock"]   # no tmp folder left


def test_a_memory_budget_spills_to_memory_maps_with_the_same_batches(tmp_path):
    """train.memory_budget: a split larger than the budget is built slice by slice into memory-mapped
    files; the arrays, and so the seeded batches, are those of the in-memory path."""
    import torch
    from pipeline.batches import batches, load_sequences
    from test_train import _shifted_toy, make_samples
    samples = make_samples(tmp_path / "samples", n_items=12, train=500)
    full = load_samples(samples, "train", 6)
    spilled = load_samples(samples, "train", 6, budget_mb=0.001, spill=tmp_path / "spill")
    assert isinstance(spilled.seqs, np.memmap) and (tmp_path / "spill" / "samples" / "complete").is_file()
    assert np.array_equal(full.seqs, spilled.seqs) and np.array_equal(full.targets, spilled.targets)
    again = load_samples(samples, "train", 6, budget_mb=0.001, spill=tmp_path / "spill")     # reused
    assert np.array_equal(again.lengths, full.lengths)
    for a, b in zip(batches(full, 64, shuffle=True, generator=torch.Generator().manual_seed(3), bucket=2),
                    batches(spilled, 64, shuffle=True, generator=torch.Generator().manual_seed(3), bucket=2)):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    (tmp_path / "loo").mkdir()
    rows = _shifted_toy(tmp_path / "loo")                               # shifted rows: both loaders
    for loader in (load_samples, load_sequences):
        whole = loader(rows, "train", 5)
        part = loader(rows, "train", 5, budget_mb=0.0005, spill=tmp_path / f"spill-{loader.__name__}")
        assert isinstance(part.seqs, np.memmap)
        assert np.array_equal(whole.seqs, part.seqs) and np.array_equal(whole.targets, part.targets)
