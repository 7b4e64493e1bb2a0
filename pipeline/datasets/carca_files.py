"""The file format of CARCA's preprocessed Amazon data (Rashed et al., RecSys 2022): read safely, and write.

The authors publish one folder (Google Drive, linked from github.com/ahmedrashed-ml/CARCA) whose files
their `CARCA.py` loads from `Data/`; per dataset:

    <Name>.txt                 `user item` per line (one space), ids from 1; each user's lines in time
                               order (`data_partition` appends them in file order); max ids = user / item counts
    <features>.dat             pickle of a numpy array (n_items, A): row k holds the attributes of item k + 1
                               (CARCA stacks a zero row on top for the padding item 0). Beauty / Games:
                               categorical dummies (+ price), float64 from `DataFrame.values`; Men / Fashion:
                               2,048 ResNet50 image features
    CXTDictSasRec_<Short>.dat  pickle of a dict {(user, item): [6 floats]}: the time context of that
                               interaction, from its review time t (CARCA.py `PreprocessData_*`):
                               [(year(t) - min year) / (max year - min year), month / 12, day / 31,
                                dayofweek / 7 (Monday 0), dayofyear / 365, ISO week / 4]

`read_features` / `read_context` unpickle through `_Unpickler`, which resolves only the numpy globals a
pickled array or numpy scalar needs (`_reconstruct`, `scalar`, `ndarray`, `dtype`, under numpy 1's
`numpy.core` or numpy 2's `numpy._core` names; for pickle protocol 5, numpy's `_frombuffer`, and for
protocol 2 the `_codecs.encode(text, "latin1")` that carries raw bytes) and refuses every other global and
persistent id, so a file cannot run code. The last two are checked stand-ins, not the real functions:
`_frombuffer` takes a buffer that holds exactly shape x itemsize bytes of a numeric dtype, and `encode`
only latin-1 (a file re-pickled by Python 3.8+ with its default protocol 4 or 5, or by Python 2, reads); the loaded object is then checked to be a numeric 2-D array, or a dict of
(int, int) -> equal-length lists of finite numbers. Every failure is one `DataError`.

`generate(folder, dataset, ...)` writes a seeded synthetic dataset in exactly this format (pickle
protocol 3 with numpy 1's global names, as Python 3.7 / numpy 1.18 wrote the published files), for tests
and offline runs: users follow an item-successor chain (so the next item is learnable beyond popularity),
review times rise per user over several years, and every (user, item) pair occurs once, as the dict key
requires. Torch-free; numpy is imported when used.
"""
from __future__ import annotations

import io as _io
import os
import pickle
import threading
from dataclasses import dataclass
from functools import lru_cache
from datetime import datetime, timezone
from pathlib import Path

from ..errors import DataError
from ..lazy import lazy

pl = lazy("polars")

CONTEXT = ("year", "month", "day", "dayofweek", "dayofyear", "week")   # CARCA's 6 time features, in order
_FIX = "download CARCA's preprocessed files again (`seqpe download DATASET --from` the folder or its zip)"
_ACCEPTED = "(only numpy arrays, numbers, lists, tuples and dicts are accepted)"


@dataclass(frozen=True)
class CarcaFiles:
    """The three files of one CARCA dataset, as CARCA.py names them."""
    name: str              # <name>.txt and CARCA.py's dataset argument
    features: str          # item attribute matrix
    context: str           # (user, item) -> time context
    dense: bool            # True: image features (Men, Fashion); False: categorical dummies (Beauty, Games)

    @property
    def interactions(self) -> str:
        return f"{self.name}.txt"

    @property
    def files(self) -> tuple[str, str, str]:
        return self.interactions, self.features, self.context


# --------------------------------------------------------------------------- reading

class _Refused(Exception):
    """Internal: what the unpickler met; turned into a DataError naming the file."""


class _NDArray:
    """What `numpy.ndarray` resolves to here: only a name for `_reconstruct`'s first argument. The real class,
    called by the pickle (`ndarray(shape, dtype)`) or handed to numpy's `_reconstruct` with a shape, made an
    array of any size that nothing filled: uninitialised heap bytes in item_features.parquet, gigabytes from a
    76-byte file (walk 43g #2)."""


@lru_cache(maxsize=1)
def _numpy_globals() -> dict:
    import numpy as np
    numpy_reconstruct = np.zeros(1).__reduce__()[0]       # numpy's _reconstruct, whatever its module path
    scalar = np.float64(0).__reduce__()[0]                # numpy's scalar

    class Counted(np.ndarray):                            # what _reconstruct makes: its BUILD spends the budget
        def __setstate__(self, state):                    # (walk 44k #1: one memoised bytes object filled 100
            data = state[-1] if isinstance(state, tuple) and state else None           # arrays of 1 MB each)
            _spend(len(data) if isinstance(data, (bytes, str)) else 0)
            super().__setstate__(state)

    def reconstruct(subtype, shape, dtype):               # an empty array: its BUILD (__setstate__) gives the
        if subtype is not _NDArray:                       # shape and the data, whose size numpy checks; an
            raise _Refused(f"an array of type {getattr(subtype, '__name__', subtype)!r}")   # array no BUILD
        return numpy_reconstruct(Counted, (0,), dtype)                                       # filled stays empty
    def frombuffer(buffer, dtype, shape, order):          # protocol 5: the array's bytes in one buffer
        if not isinstance(buffer, (bytes, bytearray, pickle.PickleBuffer)) or not isinstance(dtype, np.dtype) \
                or dtype.kind not in "biuf" or type(shape) is not tuple \
                or not all(type(n) is int and n >= 0 for n in shape) or order not in ("C", "F"):
            raise _Refused("a _frombuffer call that is not a numeric array's")
        data = memoryview(buffer).cast("B")
        count = 1
        for n in shape:
            count *= n
        if count * dtype.itemsize != data.nbytes:
            raise _Refused(f"an array of shape {shape} of {dtype} in a buffer of {data.nbytes:,} bytes")
        _spend(data.nbytes)
        return np.frombuffer(data, dtype=dtype).reshape(shape, order=order).copy()

    def encode(text, encoding):                           # protocol 2: bytes written as a latin-1 string
        if type(text) is not str or encoding != "latin1":
            raise _Refused(f"_codecs.encode with {encoding!r}")
        _spend(len(text))
        return text.encode("latin1")
    out = {("numpy", "ndarray"): _NDArray, ("numpy", "dtype"): np.dtype, ("_codecs", "encode"): encode}
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        out[(module, "_reconstruct")] = reconstruct
        out[(module, "scalar")] = scalar
    for module in ("numpy.core.numeric", "numpy._core.numeric"):
        out[(module, "_frombuffer")] = frombuffer
    return out


def _plain(obj):
    """A loaded array as numpy's own ndarray, not the budget-counting subclass (arrays inside a context dict
    become plain when read_context stacks them)."""
    import numpy as np
    return obj.view(np.ndarray) if isinstance(obj, np.ndarray) else obj


_BUDGET = threading.local()      # bytes the stand-ins may still make in this thread's load (`_load`)


def _spend(n: int) -> None:
    """Count `n` bytes made by a stand-in or an array's BUILD against twice the file's size: each array's bytes
    are in the file once (made twice under protocol 2: by `_codecs.encode`, then by the BUILD), so real data
    never makes more, while one buffer in the memo passed to thousands of calls made 400 MB from 1 MB (walk
    44j #1, 44k #1: the way walk 43g #3's shared context lists did)."""
    left = getattr(_BUDGET, "left", 0) - n
    if left < 0:
        raise _Refused("more array bytes than the file holds (one buffer used again and again)")
    _BUDGET.left = left


class _Unpickler(pickle.Unpickler):
    """Resolves the numpy array / scalar globals only; everything else is refused."""

    def find_class(self, module: str, name: str):  # noqa: D401 - pickle hook
        obj = _numpy_globals().get((module, name))
        if obj is None:
            raise _Refused(f"a reference to the global {module}.{name}")
        return obj

    def persistent_load(self, pid):
        raise _Refused("a persistent id")


def _load(path: Path) -> object:
    if not path.is_file():
        raise DataError(f"{path} does not exist", _FIX)
    try:
        with open(path, "rb") as f:
            _BUDGET.left = 2 * os.fstat(f.fileno()).st_size      # protocol 2 spends an array's bytes twice:
                                                                     # in _codecs.encode, then in its BUILD
            return _plain(_Unpickler(f).load())
    except _Refused as e:
        raise DataError(f"{path} holds {e} {_ACCEPTED}", _FIX) from None
    except (EOFError, pickle.UnpicklingError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            RecursionError, MemoryError) as e:
        reason = " ".join(str(e).split())[:120] or type(e).__name__
        raise DataError(f"{path} is not a readable CARCA pickle ({type(e).__name__}: {reason})", _FIX) from None


def read_interactions(path: Path) -> "pl.DataFrame":
    """`<Name>.txt` -> user Int64, item Int64, line Int64 (1-based), in file order."""
    if not path.is_file():
        raise DataError(f"{path} does not exist", _FIX)
    try:
        text = path.read_text(encoding="ascii")
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not a text file of ids (byte {e.start})", _FIX) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise DataError(f"{path} is empty", _FIX)
    rows = (pl.DataFrame({"text": lines}).with_row_index("line", offset=1)
            .with_columns(tok=pl.col("text").str.strip_chars().str.split(" ")))
    ids = rows.with_columns(user=pl.col("tok").list.get(0, null_on_oob=True).cast(pl.Int64, strict=False),
                            item=pl.col("tok").list.get(1, null_on_oob=True).cast(pl.Int64, strict=False))
    bad = ids.filter((pl.col("tok").list.len() != 2) | pl.col("user").is_null() | pl.col("item").is_null()
                     | (pl.col("user") < 1) | (pl.col("item") < 1) | (pl.col("item") > 2**31 - 1)).head(1)
    if bad.height:
        raise DataError(f"{path} line {bad['line'][0]}: {bad['text'][0][:40]!r} is not `user item` (two ids >= 1)",
                        _FIX)
    return ids.select("user", "item", pl.col("line").cast(pl.Int64))


def read_features(path: Path, n_items: int) -> "np.ndarray":
    """The attribute matrix, (n_items, A) float32; row k = item k + 1."""
    import numpy as np
    obj = _load(path)
    if not isinstance(obj, np.ndarray) or obj.ndim != 2 or obj.dtype.kind not in "biuf":
        what = (f"an array of {obj.dtype} of shape {obj.shape}" if isinstance(obj, np.ndarray)
                else f"a {type(obj).__name__}")
        raise DataError(f"{path} holds {what}, not a numeric (items x attributes) matrix", _FIX)
    if obj.shape[0] != n_items or obj.shape[1] < 1:
        raise DataError(f"{path} has {obj.shape[0]:,} rows x {obj.shape[1]:,} attributes, but the interactions "
                        f"name items 1..{n_items:,}", "the feature file must belong to the same dataset; " + _FIX)
    out = obj.astype(np.float32)
    if not np.isfinite(out).all():
        raise DataError(f"{path} holds NaN or infinite attributes (or values beyond float32)", _FIX)
    return out


def read_context(path: Path) -> "pl.DataFrame":
    """The context dict -> user Int64, item Int64, context Array(Float32, C), in the dict's order."""
    import numpy as np
    obj = _load(path)
    if not isinstance(obj, dict) or not obj:
        raise DataError(f"{path} holds {'an empty dict' if isinstance(obj, dict) else 'a ' + type(obj).__name__}, "
                        "not a dict {(user, item): [context]}", _FIX)
    keys = list(obj)
    if not all(type(k) is tuple and len(k) == 2 for k in keys):
        bad = next(k for k in keys if type(k) is not tuple or len(k) != 2)
        raise DataError(f"{path} has the key {bad!r}, not a (user, item) pair", _FIX)
    # one value list shared by every key (pickle's memo) is K x C floats from a file of K + C: a 209 KB file took
    # 1.3 GB (walk 43g #3). A float costs a pickle at least 9 bytes, so real context is far below the file's size
    try:                                                   # an array in a list counts its elements (44k #1)
        total = sum(sum(x.size if isinstance(x, np.ndarray) else 1 for x in v) if isinstance(v, (list, tuple))
                    else np.size(v) for v in obj.values())
    except TypeError:
        total = 0                                          # (not lists: named below)
    if total > path.stat().st_size:
        raise DataError(f"{path} holds {total:,} context values in {path.stat().st_size:,} bytes: its keys share "
                        "value lists (a pickle's references), which CARCA's files never do", _FIX)
    try:
        pairs = np.array(keys, dtype=np.int64)                                   # (K, 2)
        values = np.array([list(v) for v in obj.values()], dtype=np.float32)     # (K, C)
    except (TypeError, ValueError, OverflowError):
        raise DataError(f"{path} holds keys that are not integer ids, or context lists of unequal lengths or "
                        "non-numbers", _FIX) from None
    if values.ndim != 2 or values.shape[1] < 1 or not np.isfinite(values).all():
        raise DataError(f"{path} holds empty, NaN or infinite context values", _FIX)
    width = values.shape[1]
    return pl.DataFrame({"user": pairs[:, 0], "item": pairs[:, 1],
                         "context": pl.Series(values, dtype=pl.Array(pl.Float32, width))})


# --------------------------------------------------------------------------- writing (synthetic data)

def time_context(stamps: "np.ndarray") -> "np.ndarray":
    """CARCA's 6 time features of unix times (seconds), (T,) -> (T, 6) float64, as its PreprocessData_*
    computes them from pandas datetimes (the year scaled over the given times)."""
    import numpy as np
    days = [datetime.fromtimestamp(int(t), tz=timezone.utc) for t in stamps]
    year = np.array([d.year for d in days], dtype=np.float64)
    year -= year.min()
    year = year / year.max() if year.max() > 0 else year
    cols = [year, [d.month / 12 for d in days], [d.day / 31 for d in days], [d.weekday() / 7 for d in days],
            [d.timetuple().tm_yday / 365 for d in days], [d.isocalendar()[1] / 4 for d in days]]
    return np.stack([np.asarray(c, dtype=np.float64) for c in cols], axis=1)


def _dump(obj: object) -> bytes:
    """Pickle protocol 3 (Python 3.7's default) with numpy 1's module path for the array globals."""
    data = pickle.dumps(obj, protocol=3)
    return data.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")


def generate(folder: Path, files: CarcaFiles, *, users: int = 120, items: int = 40, attributes: int = 8,
             seed: int = 0, follow: float = 0.85) -> dict[str, Path]:
    """Write a seeded synthetic dataset in CARCA's format into `folder`; return name -> path.

    Each user has 3..12 interactions (a few have 1 or 2, which CARCA keeps for training only); the next
    item is the current one's fixed successor with probability `follow` (else a random unseen item);
    item attributes are a category one-hot plus a price (or, `files.dense`, image-like nonnegative
    features); every item occurs at least once, so the maximum item id is `items`."""
    import numpy as np
    rng = np.random.default_rng(seed)
    successor = rng.permutation(items)                               # item j -> successor[j] (0-based)
    lengths = np.where(rng.random(users) < 0.1, rng.integers(1, 3, users), rng.integers(3, 13, users))
    lengths = np.minimum(lengths, items)
    user_col, item_col, time_col = [], [], []
    start = 1_262_304_000                                            # 2010-01-01 UTC
    for u in range(users):
        seen: list[int] = []
        cur = int(rng.integers(items))
        t = start + int(rng.integers(0, 3 * 365 * 86400))
        for _ in range(int(lengths[u])):
            while cur in seen:
                cur = int(rng.integers(items))
            seen.append(cur)
            user_col.append(u + 1)
            item_col.append(cur + 1)
            time_col.append(t)
            t += int(rng.integers(1, 60 * 86400))
            cur = int(successor[cur]) if rng.random() < follow else int(rng.integers(items))
    missing = sorted(set(range(1, items + 1)) - set(item_col))       # every item at least once (max id = items)
    for k, item in enumerate(missing):
        user_col.append(users + 1 + k // 3)
        item_col.append(item)
        time_col.append(start + k)
    stamps = np.asarray(time_col, dtype=np.int64)
    ctx = time_context(stamps)
    order = np.argsort(stamps, kind="stable")                        # CARCA fills its dict in time order
    context = {(int(user_col[j]), int(item_col[j])): [float(x) for x in ctx[j]] for j in order}
    if files.dense:
        features = rng.gamma(1.0, 0.5, (items, attributes)).astype(np.float32)
    else:
        category = rng.integers(0, attributes - 1, items)
        features = np.zeros((items, attributes), dtype=np.float64)
        features[np.arange(items), category] = 1.0
        features[:, -1] = rng.uniform(1, 50, items).round(2)         # price
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{u} {i}\n" for u, i in zip(user_col, item_col))
    out = {}
    for name, data in ((files.interactions, text.encode("ascii")), (files.features, _dump(features)),
                       (files.context, _dump(context))):
        (folder / name).write_bytes(data)
        out[name] = folder / name
    return out


def zipped(files: dict[str, Path], dst: Path) -> Path:
    """The generated files packed in one zip (as the Drive folder downloads), fixed timestamps."""
    import zipfile
    buf = _io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(files):
            info = zipfile.ZipInfo(f"Data/{name}", date_time=(2022, 4, 4, 0, 0, 0))
            z.writestr(info, Path(files[name]).read_bytes())
    Path(dst).write_bytes(buf.getvalue())
    return Path(dst)
