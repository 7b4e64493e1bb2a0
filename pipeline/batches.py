"""Samples shards -> left-padded id matrices and seeded mini-batches.

`load_samples` reads one split (pipeline.io.scan_split) and keeps each prefix's most
recent `max_len` items, right-aligned in a zero-padded matrix (0 = padding item), the
input layout every backbone expects (models/base.py). It is vectorised end to end:
Polars cuts the lists (`list.tail`) and flattens them, NumPy scatters the values into
place; no Python runs per row.

The arrays are NumPy (int32, half the memory of int64: Diginetica's 719,470 x 50
train prefixes take 144 MB) so this module stays torch-free at import time, as every
pipeline module except train/evaluate must. `batches` imports torch when called and
yields LongTensors; with `shuffle` the order comes from a seeded `torch.Generator`
the caller owns (one per run, advanced once per epoch: same seed, same batches).

Side information (pipeline/side.py) is loaded only when asked (`context=` width, for a model that
takes it): then Samples also hold each input interaction's context (S, L, C) and the target's (S, C),
and `batches(..., context=True)` yields them after the ids; every other caller sees no difference.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import polars as pl

from .errors import DataError
from .io import scan_split


@dataclass(frozen=True)
class Samples:
    seqs: np.ndarray      # (S, L) int32, left-padded with 0, most recent item last
    targets: np.ndarray   # (S,) int32 item ids >= 1; or (S, L) the next item of every position
                          # (load_sequences: the sequence objective), 0 where there is none
    lengths: np.ndarray   # (S,) int32 number of real items kept (<= L)
    # side information (pipeline/side.py), loaded only for a model that takes it, else None:
    context: Optional[np.ndarray] = None         # (S, L, C) float32 context of each input interaction, 0 at padding
    target_context: Optional[np.ndarray] = None  # (S, C) float32 context of the interaction to predict

    def __len__(self) -> int:
        return int(self.targets.shape[0])

    def take(self, rows) -> "Samples":
        """The rows `rows` (an index array or LongTensor), in that order."""
        rows = np.asarray(rows)
        side = {} if self.context is None else {"context": self.context[rows],
                                                "target_context": self.target_context[rows]}
        return Samples(seqs=self.seqs[rows], targets=self.targets[rows], lengths=self.lengths[rows], **side)

    @property
    def n_targets(self) -> int:
        """(prefix, next item) pairs the rows hold: one per row, or one per real position."""
        return len(self) if self.targets.ndim == 1 else int(np.count_nonzero(self.targets))


def pad_left(values: np.ndarray, lengths: np.ndarray, max_len: int) -> np.ndarray:
    """Scatter concatenated lists (`values`, row lengths `lengths`) right-aligned into (S, max_len)."""
    n = lengths.shape[0]
    out = np.zeros((n, max_len), dtype=np.int32)                     # (S, L)
    if values.size == 0:
        return out
    lengths = lengths.astype(np.int64)
    rows = np.repeat(np.arange(n, dtype=np.int64), lengths)          # (total,)
    starts = np.cumsum(lengths) - lengths                            # (S,) offset of each row in values
    cols = (max_len - lengths)[rows] + (np.arange(values.size, dtype=np.int64) - starts[rows])  # (total,)
    out[rows, cols] = values
    return out


def _is_shifted(names: list[str]) -> bool:
    """Whether a samples split holds shifted rows (session_id, items) rather than (prefix, target)."""
    return "items" in names and "prefix" not in names


def frame_to_samples(df: pl.DataFrame, max_len: int) -> Samples:
    """(prefix: List(Int32), target: Int32) frame -> Samples, keeping the last `max_len` items."""
    if max_len < 1:
        raise DataError(f"max_len must be >= 1, got {max_len}", "set train.max_len to a positive length")
    cut = df.select(pl.col("prefix").list.tail(max_len).alias("prefix"), pl.col("target"))
    flat = cut.get_column("prefix").explode(empty_as_null=False)                  # (total,)
    if flat.null_count() or cut.get_column("target").null_count():
        raise DataError("a sample holds a null item id", "re-run `seqpe augment` on clean sessions")
    lengths = cut.get_column("prefix").list.len().to_numpy().astype(np.int32)   # (S,)
    values = flat.to_numpy()                                                      # (total,)
    targets = cut.get_column("target").to_numpy()                                 # (S,)
    return Samples(seqs=pad_left(values.astype(np.int32), lengths, max_len),
                   targets=targets.astype(np.int32), lengths=lengths)


def _prefix_rows(root: Path, split: str, max_len: int, context: int = 0):
    """(lazy frame, transform of a collected slice into Samples, samples count expression) of a split
    read as (prefix, target) pairs: rows as they are, or shifted rows expanded into their pairs.
    `context` > 0: also the interactions' context vectors of that width (side information)."""
    lf = scan_split(root, split)
    names = lf.collect_schema().names()
    if context:
        return _with_context(lf, names, Path(root) / split, max_len, context)
    if _is_shifted(names):
        from .augment import prefix_samples   # the augment stage's own vectorised gather

        def expand(rows: pl.DataFrame) -> Samples:
            shortest = rows.get_column("items").list.len().min()
            if shortest is not None and shortest < 2:
                raise DataError(f"{Path(root) / split} has a shifted row with fewer than 2 items",
                                "re-run `seqpe augment` for this dataset")
            return frame_to_samples(prefix_samples(rows, max_len), max_len)
        lf = lf.select(pl.col("session_id"), pl.col("items").cast(pl.List(pl.Int32)))
        return lf, expand, (pl.col("items").list.len() - 1).clip(lower_bound=0).sum()
    missing = [c for c in ("prefix", "target") if c not in names]
    if missing:
        raise DataError(f"{Path(root) / split} has no column(s) {', '.join(missing)}",
                        "these are not next-item samples; re-run `seqpe augment` for this dataset")
    return lf.select("prefix", "target"), lambda df: frame_to_samples(df, max_len), pl.len()


def _with_context(lf: pl.LazyFrame, names: list[str], where: Path, max_len: int, width: int):
    """_prefix_rows of a split with side information: Samples with context / target_context
    (pipeline/side.py), the ids exactly as without it."""
    from . import side
    if _is_shifted(names):
        if "context" not in names:
            raise DataError(f"{where} has no context column", side.FIX)

        def expand(rows: pl.DataFrame) -> Samples:
            shortest = rows.get_column("items").list.len().min()
            if shortest is not None and shortest < 2:
                raise DataError(f"{where} has a shifted row with fewer than 2 items", side.FIX)
            return Samples(**side.expand_shifted(rows, max_len, width))
        return lf.select("session_id", pl.col("items").cast(pl.List(pl.Int32)), "context"), expand, None
    missing = [c for c in ("prefix", "target", "prefix_context", "target_context") if c not in names]
    if missing:
        raise DataError(f"{where} has no column(s) {', '.join(missing)}", side.FIX)

    def to_samples(df: pl.DataFrame) -> Samples:
        ids = frame_to_samples(df, max_len)
        ctx, tctx = side.prefix_context(df, ids.lengths, max_len, width)
        return Samples(seqs=ids.seqs, targets=ids.targets, lengths=ids.lengths, context=ctx, target_context=tctx)
    return lf.select("prefix", "target", "prefix_context", "target_context"), to_samples, None


def load_samples(root: str | Path, split: str, max_len: int, budget_mb: float = 0,
                 spill: Optional[Path] = None, context: int = 0) -> Samples:
    """Read `<root>/<split>/part-*.parquet` into a Samples matrix: (session_id, prefix, target)
    rows as they are; shifted rows (session_id, items) expanded into their (prefix, target)
    pairs, every next item of the row's window with the items before it as the prefix.

    `budget_mb` > 0 (train.memory_budget) with a `spill` folder: when the matrices would take more
    than that, they are built slice by slice into memory-mapped files there (`_spilled`) and the
    Samples hold those maps: the same arrays, so the same batches, in bounded memory.

    `context` > 0 (a model that takes side information, on a dataset that has it): the samples also
    hold each interaction's context vector of that width; they are held in memory (no spill)."""
    lf, transform, count = _prefix_rows(Path(root), split, max_len, context)
    if context:
        return transform(lf.collect())
    return _load(lf, transform, count, max_len, 1, budget_mb, spill)


def load_sequences(root: str | Path, split: str, max_len: int, budget_mb: float = 0,
                   spill: Optional[Path] = None) -> Samples:
    """Shifted rows (session_id, items) -> whole-sequence samples: inputs = the row's items but the
    last, targets = its items but the first (the next item of every input position), both cut to
    the most recent `max_len` and right-aligned in zero-padded (S, max_len) matrices. One forward
    pass of a causal backbone then scores every prefix of the row at once (SASRec; 003 Eq. 11).
    `budget_mb` / `spill`: as in load_samples."""
    if max_len < 1:
        raise DataError(f"max_len must be >= 1, got {max_len}", "set train.max_len to a positive length")
    lf = scan_split(root, split)
    if not _is_shifted(lf.collect_schema().names()):
        raise DataError(f"{Path(root) / split} holds (prefix, target) samples, not whole sequences",
                        "train.objective: sequence needs a leave-one-out dataset (shifted train rows); "
                        "use train.objective: prefixes here")
    items = pl.col("items").cast(pl.List(pl.Int32))
    lf = lf.select(inputs=items.list.head(items.list.len() - 1).list.tail(max_len),
                   targets=items.list.tail(items.list.len() - 1).list.tail(max_len))

    def to_samples(rows: pl.DataFrame) -> Samples:
        lengths = rows.get_column("inputs").list.len().to_numpy().astype(np.int32)      # (S,)
        if lengths.size and lengths.min() < 1:
            raise DataError(f"{Path(root) / split} has a shifted row with fewer than 2 items",
                            "re-run `seqpe augment` for this dataset")
        exploded = {c: rows.get_column(c).explode(empty_as_null=False) for c in rows.columns}
        if any(col.null_count() for col in exploded.values()):
            raise DataError(f"{Path(root) / split} holds a null item id", "re-run `seqpe augment` on clean sessions")
        flat = {c: col.to_numpy().astype(np.int32) for c, col in exploded.items()}
        return Samples(seqs=pad_left(flat["inputs"], lengths, max_len),
                       targets=pad_left(flat["targets"], lengths, max_len), lengths=lengths)
    return _load(lf, to_samples, pl.len(), max_len, max_len, budget_mb, spill)


def _load(lf: pl.LazyFrame, transform, count: pl.Expr, max_len: int, target_width: int, budget_mb: float,
          spill: Optional[Path]) -> Samples:
    """The whole split in memory, or spilled to memory-mapped files when over the budget."""
    if budget_mb <= 0 or spill is None:
        return transform(lf.collect())
    n = int(lf.select(count).collect().item() or 0)
    cell = 4 * (max_len + target_width + 1)                                    # bytes of one sample's arrays
    if n * cell <= budget_mb * (1 << 20):
        return transform(lf.collect())
    return _spilled(lf, transform, n, max_len, target_width, budget_mb, Path(spill))


def _spilled(lf: pl.LazyFrame, transform, n: int, max_len: int, target_width: int, budget_mb: float,
             spill: Path) -> Samples:
    """Build the (n, max_len) matrices slice by slice into .npy files under `spill` (memory-mapped), each
    slice of source rows small enough for a quarter of the budget; reuse them when already complete.
    Every row is transformed on its own, so the slices laid end to end are exactly the whole.

    Built under an exclusive lock on `spill/.samples.lock`: the ranks of a torchrun job (and seeds trained
    side by side on one split) find no complete folder at the same moment, and without it each built its
    own and replaced the one another had just published and was opening (FileNotFoundError; walk 33a).
    The first builds, the others wait and open its folder."""
    import fcntl
    final = spill / "samples"
    shapes = _spill_shapes(n, max_len, target_width)
    if (final / "complete").is_file() and (whole := _open_checked(final, shapes)) is not None:
        return whole
    spill.mkdir(parents=True, exist_ok=True)
    with open(spill / ".samples.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)                   # released when the file closes
        if not (final / "complete").is_file() or _open_checked(final, shapes) is None:   # another process may
            _build_spill(lf, transform, n, max_len, target_width, budget_mb, final)     # have built it meanwhile
        return _open(final)


def _spill_shapes(n: int, max_len: int, target_width: int) -> dict[str, tuple]:
    return {"seqs": (n, max_len), "targets": (n,) if target_width == 1 else (n, target_width), "lengths": (n,)}


def _open_checked(folder: Path, shapes: dict[str, tuple]) -> Optional[Samples]:
    """The spilled matrices when each file is whole and of the split's shape, else None (rebuilt): a truncated
    seqs.npy beside its `complete` marker was numpy's "mmap length is greater than file size" traceback at every
    run (walk 40h #2)."""
    try:
        arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in shapes}
    except (OSError, ValueError, EOFError):
        return None
    if any(arrays[name].shape != shape or arrays[name].dtype != np.int32 for name, shape in shapes.items()):
        return None
    del arrays
    return _open(folder)


def _build_spill(lf: pl.LazyFrame, transform, n: int, max_len: int, target_width: int, budget_mb: float,
                 final: Path) -> None:
    from .io import scratch_dir
    rows_total = int(lf.select(pl.len()).collect().item())
    per_row = max(1, -(-n // max(rows_total, 1)))                               # samples per source row
    step = max(1, int(budget_mb * (1 << 20) / 4 / (4 * (max_len + target_width + 1) * per_row)))
    with scratch_dir(final, suffix=".tmp") as tmp:
        seqs = np.lib.format.open_memmap(tmp / "seqs.npy", "w+", np.int32, (n, max_len))
        shape = (n,) if target_width == 1 else (n, target_width)
        targets = np.lib.format.open_memmap(tmp / "targets.npy", "w+", np.int32, shape)
        lengths = np.lib.format.open_memmap(tmp / "lengths.npy", "w+", np.int32, (n,))
        _reserve(tmp, ("seqs.npy", "targets.npy", "lengths.npy"))
        at = 0
        for start in range(0, rows_total, step):
            part = transform(lf.slice(start, step).collect())
            k = len(part)
            seqs[at:at + k], targets[at:at + k], lengths[at:at + k] = part.seqs, part.targets, part.lengths
            at += k
        if at != n:
            raise DataError(f"the split expanded to {at} samples, {n} expected", "re-run `seqpe augment`")
        for arr in (seqs, targets, lengths):
            arr.flush()
        del seqs, targets, lengths
        (tmp / "complete").write_text(f"{n}\n")
        import os
        import shutil
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        tmp.mkdir()                                                             # scratch_dir removes it


def _reserve(folder: Path, names: tuple[str, ...]) -> None:
    """Give the new (sparse) memory-mapped files their disk blocks now: a full disk is then an error here, not
    a SIGBUS at the first page written through the map, which ended training with "Bus error" and no word
    (walk 40h #1)."""
    import os
    need = sum((folder / name).stat().st_size for name in names)
    for name in names:
        fd = os.open(folder / name, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
        except OSError as e:
            import errno
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DataError(f"no room for the memory-mapped sample matrices ({need / 2**20:,.0f} MB) under "
                                f"{folder.parent}", "free disk space there, or set SEQPE_STATE to a folder on a "
                                "larger disk (or raise train.memory_budget)") from None
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):   # a file system without fallocate: as before
                raise
        finally:
            os.close(fd)


def _open(folder: Path) -> Samples:
    """Copy-on-write maps (writable views for torch.from_numpy; the files are never written)."""
    return Samples(seqs=np.load(folder / "seqs.npy", mmap_mode="c"), targets=np.load(folder / "targets.npy",
                   mmap_mode="c"), lengths=np.array(np.load(folder / "lengths.npy", mmap_mode="r")))


def load_sessions(root: str | Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """The whole sequences behind one split's samples, as flat (items (T,), session (T,)) arrays,
    session index non-decreasing (for fitted baselines: POP counts each click once).

    Prefix rows (session_id, prefix, target): a session is its longest prefix + that target (the
    clicks of a Yoochoose-fraction cut session that fall in the fraction). Shifted rows
    (session_id, items): the row's items. Sessions keep their first-appearance order.
    """
    seqs = _session_items(root, split).collect().get_column("items")
    lengths = seqs.list.len().to_numpy().astype(np.int64)                           # (S,)
    items = seqs.explode(empty_as_null=False).to_numpy().astype(np.int64)          # (T,)
    return items, np.repeat(np.arange(lengths.shape[0], dtype=np.int64), lengths)


def _session_items(root: str | Path, split: str) -> pl.LazyFrame:
    """One row per session of the split, its whole sequence as `items` (List[Int32]), first-appearance order
    (load_sessions' rules)."""
    lf = scan_split(root, split)
    names = lf.collect_schema().names()
    if _is_shifted(names):
        return lf.select(pl.col("items").cast(pl.List(pl.Int32)))
    if {"session_id", "prefix", "target"} <= set(names):
        longest = (lf.select("session_id", "prefix", "target", n=pl.col("prefix").list.len())
                   .group_by("session_id", maintain_order=True)
                   .agg(pl.col("prefix", "target").get(pl.col("n").arg_max())))   # prefix lengths differ
        return longest.select(pl.concat_list(pl.col("prefix").cast(pl.List(pl.Int32)),
                                             pl.col("target").cast(pl.Int32)).alias("items"))
    raise DataError(f"{Path(root) / split} holds no sessions (no items, or session_id/prefix/target, columns)",
                    "re-run `seqpe augment` for this dataset")


def click_counts(root: str | Path, split: str, n_items: int) -> np.ndarray:
    """(n_items + 1,) float64: how often each item occurs in the split's sessions (load_sessions' items, counted
    by Polars' streaming engine, so a split memory-mapped under train.memory_budget is not loaded whole for
    popularity-sampled candidates; walk 40h #3); padding 0."""
    counted = (_session_items(root, split).select(pl.col("items").explode(empty_as_null=False).alias("item"))
               .drop_nulls().group_by("item").len().collect(engine="streaming"))
    ids = counted.get_column("item").to_numpy().astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() > n_items):
        raise DataError(f"{Path(root) / split} holds item ids outside 1..{n_items} (n_items)",
                        "re-run `seqpe augment` so samples and manifest agree")
    out = np.zeros(n_items + 1, dtype=np.float64)
    out[ids] = counted.get_column("len").to_numpy()
    out[0] = 0.0
    return out


def batch_order(lengths: np.ndarray, batch_size: int, *, shuffle: bool = False, generator=None,
                bucket: int = 0, by_length: bool = False) -> list:
    """Row indices of every batch, in the order they are served (a list of LongTensors).

    shuffle, bucket 0   a seeded permutation cut into batches (one `randperm`)
    shuffle, bucket k   the permutation cut into chunks of k batches; each chunk is sorted by
                        prefix length (stable) and cut into batches; then the batch order is
                        shuffled (a second `randperm`). Every row is still served once an epoch
                        and which rows share a chunk is random, but a batch holds prefixes of
                        similar length, so trimming removes most padding (Diginetica: 27 padded
                        cells per sample at batch 256 and max_len 50 become 5).
    by_length           (no shuffle) rows sorted by length, stable: scoring sees every row once,
                        so the metrics are those of file order with far less padding
    otherwise           file order
    """
    import torch

    n = int(lengths.shape[0])
    if n == 0:
        return []
    if shuffle:
        order = torch.randperm(n, generator=generator)                    # (S,)
        if bucket > 0:
            lens = torch.from_numpy(lengths.astype(np.int64))[order]      # (S,) lengths in shuffled order
            chunk = torch.arange(n) // (bucket * batch_size)              # (S,) chunk of each position
            key = chunk * (int(lens.max()) + 1) + lens                    # (S,) (chunk, length)
            order = order[torch.sort(key, stable=True).indices]           # (S,) sorted inside each chunk
            cuts = list(torch.split(order, batch_size))
            return [cuts[i] for i in torch.randperm(len(cuts), generator=generator).tolist()]
    elif by_length:
        order = torch.sort(torch.from_numpy(lengths.astype(np.int64)), stable=True).indices  # (S,)
    else:
        order = torch.arange(n)
    return list(torch.split(order, batch_size))


def batches(samples: Samples, batch_size: int, *, shuffle: bool = False, generator=None,
            device=None, trim: bool = True, bucket: int = 0, by_length: bool = False,
            with_index: bool = False, context: bool = False, pad_to: int = 1) -> Iterator[tuple]:
    """Yield (seqs (B, L') long, targets (B,) or (B, L') long) on `device`, in `batch_order`'s order
    (with `context`, then the side information (context (B, L', C), target_context (B, C)) float32,
    for samples that hold it; with `with_index`, last the rows' indices (B,) long on the CPU, to put
    per-row results back in file order).

    With `trim`, columns that are padding in every row of the batch are dropped (L' = the
    batch's longest kept prefix): session prefixes are short (Diginetica: 4 items on average
    for max_len 50), so attention and feed-forward layers do a fraction of the work. Backbones
    are padding-invariant (models/base.py contract), so predictions do not change. `bucket`
    and `by_length` group similar lengths into a batch so that trimming removes more. `pad_to` rounds
    a trimmed width up to a multiple of it (at most the matrix's width): fewer distinct shapes, for
    train.compile: reduce-overhead, which captures one CUDA graph per shape.
    """
    import torch

    seqs = torch.from_numpy(np.asarray(samples.seqs))                # (S, L) int32, shared memory (or a memmap)
    targets = torch.from_numpy(np.asarray(samples.targets))          # (S,)
    lengths = torch.from_numpy(samples.lengths)                      # (S,)
    width = seqs.shape[1]
    pin = device is not None and torch.device(device).type == "cuda"  # page-locked host copies: async transfers
    side = context and samples.context is not None
    if side:
        ctx = torch.from_numpy(np.asarray(samples.context))          # (S, L, C)
        tctx = torch.from_numpy(np.asarray(samples.target_context))  # (S, C)
    for idx in batch_order(samples.lengths, batch_size, shuffle=shuffle, generator=generator, bucket=bucket,
                           by_length=by_length):
        s, t, ln = seqs[idx], targets[idx], lengths[idx]             # (B, L), (B,) or (B, L), (B,)
        if trim:
            keep = max(int(ln.max()), 1)
            s = s[:, width - min(-(-keep // pad_to) * pad_to, width):]  # (B, L') most recent columns
            if t.dim() == 2:
                t = t[:, -s.size(1):]                                # (B, L') next item per column
        if pin:
            s, t = s.pin_memory(), t.pin_memory()
        out = (s.to(device=device, non_blocking=pin).long(), t.to(device=device, non_blocking=pin).long())
        if side:
            c, tc = ctx[idx][:, width - s.size(1):], tctx[idx]              # (B, L', C), (B, C)
            out += ((c.to(device=device, non_blocking=pin), tc.to(device=device, non_blocking=pin)),)
        yield (*out, idx) if with_index else out


def n_batches(samples: Samples, batch_size: int) -> int:
    return (len(samples) + batch_size - 1) // batch_size
