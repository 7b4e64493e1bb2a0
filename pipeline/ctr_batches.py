"""CTR samples shards -> id matrices and seeded mini-batches of `models.ctr.base.CTRBatch`.

`load_ctr` reads one split of a CTR samples folder (written by `seqpe augment` under protocol
ctr: ids already through the vocabularies of `pipeline.ctr_vocab`, see the manifest's `ctr`
section) into NumPy arrays, shard by shard into arrays allocated once:

    label     (S,)        int32 in {0, 1}
    group     (S,)        int64 raw user id (gAUC's group; raw ids are Int64 in the files)
    target    (S, F)      int32 vocab ids of the target's fields (manifest ctr.fields order)
    history   (S, L, F)   int32, LEFT-padded with 0, most recent behaviour last, cut to the most
                          recent L = max_len behaviours (the fields of one behaviour stay aligned)
    extra     name -> (S, L) int32, the other behaviour sequences, padded and cut the same way
    features  (S, K)      int32 vocab ids of the other categorical features (K may be 0)

No Python runs per row: Polars cuts the lists (`list.tail`) and NumPy scatters them straight
into the arrays (`_fill`). The arrays are int32 (half of int64) and this module stays
torch-free at import time; `ctr_batches` imports torch when called and yields CTRBatch objects
with LongTensors (label float32), in file order or in a seeded permutation drawn from the
caller's `torch.Generator` (same seed, same batches).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import polars as pl

from . import io
from .errors import DataError

CHUNK_ROWS = 1 << 18  # rows scattered at once (bounds the transient copies of a 1M-row shard)


@dataclass(frozen=True)
class CTRSamples:
    label: np.ndarray                                  # (S,) int32
    group: np.ndarray                                  # (S,) int64
    target: np.ndarray                                 # (S, F) int32
    history: np.ndarray                                # (S, L, F) int32, left-padded
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (S, L) int32
    features: np.ndarray | None = None                 # (S, K) int32

    def __len__(self) -> int:
        return int(self.label.shape[0])

    def take(self, rows) -> "CTRSamples":
        """The rows `rows` (an index array), in that order."""
        rows = np.asarray(rows)
        return CTRSamples(label=self.label[rows], group=self.group[rows], target=self.target[rows],
                          history=self.history[rows], extra={k: v[rows] for k, v in self.extra.items()},
                          features=None if self.features is None else self.features[rows])


def ctr_section(root: str | Path) -> dict:
    """The `ctr` section of a samples folder's manifest; a folder that is not CTR samples is an error."""
    root = Path(root)
    if not (root / io.MANIFEST).is_file():
        raise DataError(f"no {io.MANIFEST} in {root}: it is not a samples folder",
                        "pass data/samples/DATASET (written by `seqpe augment DATASET`)")
    manifest = io.read_json(root / io.MANIFEST)
    section = manifest.get("ctr") if isinstance(manifest, dict) else None
    if manifest.get("protocol") != "ctr" or not isinstance(section, dict):
        what = f"protocol {manifest.get('protocol')!r}" if manifest.get("protocol") != "ctr" else "no ctr section"
        raise DataError(f"{root} is not CTR samples ({what} in its manifest)",
                        "pass the samples of a CTR dataset (kuaivideo, amazon_electronics, sample_ctr, sample_kuai), "
                        "re-augmented with this version of seqpe (`seqpe augment DATASET`)")
    return section


def ctr_schema(manifest: dict, max_len: int):
    """models.ctr.base.CTRSchema from a samples manifest (the whole manifest or its `ctr` section)."""
    from models.ctr.base import CTRSchema
    ctr = manifest.get("ctr", manifest if "fields" in manifest else None)
    if not isinstance(ctr, dict):
        raise DataError(f"the manifest of '{manifest.get('dataset', '?')}' has no ctr section (protocol "
                        f"{manifest.get('protocol')!r})", "train CTR models on CTR samples, re-augmented with "
                        "this version of seqpe (`seqpe augment DATASET`)")
    return CTRSchema(fields=tuple(ctr["fields"]), vocab={t: int(v["rows"]) for t, v in ctr["vocab"].items()},
                     extra=tuple(ctr["extra"]), features=tuple(ctr["features"]), max_len=int(max_len))


def _fill(out: np.ndarray, first: int, df: pl.DataFrame, col: str, field: int = 0) -> np.ndarray:
    """Write one list column of a shard, cut to its most recent L ids and right-aligned, into rows
    first.. of `out` ((S, L) or (S, L, F) at `field`); return the kept lengths (n,).

    A row's kept ids land in one contiguous run of the row-major matrix, so every id's flat index
    is its index in the concatenated values plus one shift per row (one repeat, one scatter)."""
    max_len = out.shape[1]
    cut = df.get_column(col).list.tail(max_len)
    lengths = cut.list.len().to_numpy().astype(np.int64)                             # (n,)
    values = cut.explode(empty_as_null=False)
    if values.null_count():
        raise DataError(f"a CTR sample holds a null id in {col}", "re-run `seqpe augment` for this dataset")
    starts = np.cumsum(lengths) - lengths                                             # (n,) offsets in values
    rows = np.arange(first, first + lengths.size, dtype=np.int64)
    shift = rows * max_len + max_len - lengths - starts                               # (n,) flat start - offset
    idx = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(shift, lengths)   # (total,) cell of each id
    width = out.shape[2] if out.ndim == 3 else 1
    out.reshape(-1)[idx * width + field] = values.to_numpy()
    return lengths


def _fill_rows(out: CTRSamples, a: int, df: pl.DataFrame, ctr: dict, path: Path) -> None:
    """Rows a.. of `out` from one chunk of a shard."""
    fields, extra, features = list(ctr["fields"]), dict(ctr["extra"]), dict(ctr["features"])
    b = a + df.height
    if df.select(pl.col(ctr["label"], ctr["group"], *[ctr["target"][f] for f in fields], *features.values())
                 .null_count()).sum_horizontal().item():
        raise DataError(f"{path} holds a null label, group or id", "re-run `seqpe augment` for this dataset")
    out.label[a:b] = df.get_column(ctr["label"]).to_numpy()
    out.group[a:b] = df.get_column(ctr["group"]).to_numpy()
    lengths = None
    for i, f in enumerate(fields):
        out.target[a:b, i] = df.get_column(ctr["target"][f]).to_numpy()
        n_f = _fill(out.history, a, df, ctr["history"][f], i)
        if lengths is not None and not np.array_equal(lengths, n_f):
            raise DataError(f"{path}: the history columns of {', '.join(fields)} differ in length",
                            "re-run `seqpe preprocess` and `seqpe augment` for this dataset")
        lengths = n_f
    for name, col in extra.items():
        _fill(out.extra[name], a, df, col)
    for i, col in enumerate(features.values()):
        out.features[a:b, i] = df.get_column(col).to_numpy()


def load_ctr(root: str | Path, split: str, max_len: int) -> CTRSamples:
    """Read `<root>/<split>/part-*.parquet` of a CTR samples folder into a CTRSamples (module docstring)."""
    if max_len < 1:
        raise DataError(f"max_len must be >= 1, got {max_len}", "set train.max_len to a positive length")
    ctr = ctr_section(root)
    fields, extra, features = list(ctr["fields"]), dict(ctr["extra"]), dict(ctr["features"])
    columns = ([ctr["label"], ctr["group"]] + [ctr["target"][f] for f in fields] + [ctr["history"][f] for f in fields]
               + list(extra.values()) + list(features.values()))
    files = sorted((Path(root) / split).glob("part-*.parquet"))
    if not files:
        raise DataError(f"no shards in {Path(root) / split}", "re-run `seqpe augment` for this dataset")
    missing = [c for c in dict.fromkeys(columns) if c not in pl.scan_parquet(files, glob=False).collect_schema()]
    if missing:
        raise DataError(f"{Path(root) / split} has no column(s) {', '.join(missing)} named by its manifest",
                        "re-run `seqpe augment` for this dataset")
    n = pl.scan_parquet(files, glob=False).select(pl.len()).collect().item()
    out = CTRSamples(label=np.zeros(n, np.int32), group=np.zeros(n, np.int64),
                     target=np.zeros((n, len(fields)), np.int32), history=np.zeros((n, max_len, len(fields)), np.int32),
                     extra={name: np.zeros((n, max_len), np.int32) for name in extra},
                     features=np.zeros((n, len(features)), np.int32))
    a = 0
    for path in files:                                   # one shard in memory at a time, in row chunks
        shard = pl.read_parquet(path, columns=list(dict.fromkeys(columns)), glob=False)
        for df in shard.iter_slices(CHUNK_ROWS):
            _fill_rows(out, a, df, ctr, path)
            a += df.height
    return out


def ctr_batches(samples: CTRSamples, batch_size: int, *, shuffle: bool = False, generator=None,
                device=None, trim: bool = False) -> Iterator:
    """Yield `CTRBatch`es of `batch_size` rows (the last one shorter) on `device`: in file order, or
    in one `torch.randperm` drawn from `generator` (the caller's: same seed, same batches). With
    `trim`, history (and extra sequence) columns that are padding in every row of the batch are
    dropped: the backbones are padding-invariant (tests/test_ctr_models.py), so the logits do not
    change, and short histories cost less."""
    import torch

    from models.ctr.base import CTRBatch

    n = len(samples)
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)       # (S,)
    label = torch.from_numpy(samples.label)                                               # (S,) shared memory
    group = torch.from_numpy(samples.group)                                               # (S,)
    target = torch.from_numpy(samples.target)                                             # (S, F)
    history = torch.from_numpy(samples.history)                                           # (S, L, F)
    extra = {k: torch.from_numpy(v) for k, v in samples.extra.items()}                    # name -> (S, L)
    k = 0 if samples.features is None else samples.features.shape[1]
    features = torch.from_numpy(samples.features) if k else None                        # (S, K)
    pin = device is not None and torch.device(device).type == "cuda"
    move = lambda t: (t.pin_memory() if pin else t).to(device=device, non_blocking=pin).long()  # noqa: E731

    def cut(seq):                                                                         # (B, L[, F]) -> (B, L'[, F])
        if not trim:
            return seq
        real = (seq[..., 0] if seq.dim() == 3 else seq) != 0                              # (B, L)
        width = max(int(real.sum(1).max()), 1) if real.numel() else 1
        return seq[:, seq.size(1) - width:]
    for idx in torch.split(order, batch_size):
        yield CTRBatch(label=label[idx].to(device=device, dtype=torch.float32), group=move(group[idx]),
                       target=move(target[idx]), history=move(cut(history[idx])),
                       extra={k: move(cut(v[idx])) for k, v in extra.items()},
                       features=None if features is None else move(features[idx]))
