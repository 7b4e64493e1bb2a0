"""A restricted unpickler for SR-GNN-family files (`all_train_seq.txt`, `train.txt`, `test.txt`).

Those `.txt` files are Python pickles, and `pickle.load` on a file from outside runs
arbitrary code. Code can only run through a callable, and the only callables a pickle can
reach come from `find_class` (GLOBAL, STACK_GLOBAL, INST, and the copyreg EXT opcodes) or
from `persistent_load`: here both refuse everything, so REDUCE, NEWOBJ, OBJ and BUILD never
get anything to call. The other opcodes build only plain values (list, tuple, int, dict,
str, bytes, float, set, None, bool, ...); the loaded object is then checked against the
only two shapes the family uses:

    sessions   list[list[int]]                     (all_train_seq.txt)
    samples    (list[list[int]], list[int])        (train.txt / test.txt: prefixes, labels)

Lists and tuples are accepted wherever the other is; every number must be a plain `int`
(not a bool) in 1..2**31-1 (item ids; 0 is padding); anything else is refused with its
position. The total number of ids is bounded by the file size before anything is walked,
so aliased sub-lists in a crafted file cannot make the check or the caller's copy explode.
Every failure is a one-line `DataError`.
"""
from __future__ import annotations

import io
import pickle
from itertools import chain
from pathlib import Path

from .errors import DataError

MAX_ID = 2**31 - 1   # ids are stored as Int32
_ACCEPTED = "(only lists/tuples/ints are accepted)"
_FIX = ("re-create it with SR-GNN's datasets/preprocess.py or `seqpe export`, "
        "and never load a pickle from an unknown source")

_NOT_PICKLE = "check that it is an SR-GNN-family .txt pickle, not text or a damaged copy"
_ARCHIVES = ((b"PK\x03\x04", "zip"), (b"\x1f\x8b", "gzip"), (b"7z\xbc\xaf\x27\x1c", "7z"))


class _NoGlobals(pickle.Unpickler):
    """C unpickler with every global and persistent id refused."""

    def find_class(self, module: str, name: str):  # noqa: D401 - pickle hook
        raise _Refused(f"a reference to the global {module}.{name}")

    def persistent_load(self, pid):
        raise _Refused("a persistent id")


class _Refused(Exception):
    """Internal: what the unpickler met; turned into a DataError naming the file."""


def _what(obj: object) -> str:
    kind = type(obj).__name__
    return f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}"


def load(path: str | Path) -> object:
    """Unpickle `path` with globals refused; raise DataError for anything that is not a pickle."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path} does not exist", "pass the folder that holds the SR-GNN files")
    data = path.read_bytes()
    if not data:
        raise DataError(f"{path} is empty, not a pickle", _FIX)
    for magic, kind in _ARCHIVES:
        if data.startswith(magic):
            raise DataError(f"{path} is a {kind} archive, not a pickle", "unpack it and pass the folder inside")
    buf = io.BytesIO(data)
    try:
        obj = _NoGlobals(buf).load()
        if buf.tell() < len(data):     # two pickles joined (`cat a b`), or junk appended: the first part only was
            raise DataError(f"{path} has {len(data) - buf.tell():,} bytes after the end of its pickle (at byte "   # read,
                            f"{buf.tell():,}): two files joined, or a damaged copy", "copy or download the file "   # silently
                            "again (one pickle per file)")                                                         # (walk 43g #9)
        return obj
    except DataError:
        raise
    except _Refused as e:
        raise DataError(f"{path} holds {e} {_ACCEPTED}", _FIX) from None
    except RecursionError:
        raise DataError(f"{path} nests its values too deeply {_ACCEPTED}", _FIX) from None
    except MemoryError:
        raise DataError(f"{path} asks for more memory than it could hold {_ACCEPTED}", _FIX) from None
    except (EOFError, pickle.UnpicklingError) as e:
        if isinstance(e, pickle.UnpicklingError) and "truncated" not in str(e):
            raise DataError(f"{path} is not a readable pickle ({' '.join(str(e).split())[:120]})",
                            _NOT_PICKLE) from None
        raise DataError(f"{path} is truncated: the pickle ends before its STOP opcode",
                        "copy or download the file again") from None
    except Exception as e:  # ValueError, KeyError, ... from a damaged stream
        reason = " ".join(str(e).split())[:120]
        raise DataError(f"{path} is not a readable pickle ({type(e).__name__}: {reason})", _NOT_PICKLE) from None


def _check_ids(path: Path, seq: object, where: str) -> None:
    """Check a flat list of ids with C-speed passes; locate the first bad value only on failure."""
    if type(seq) not in (list, tuple):
        raise DataError(f"{path} holds {_what(seq)} at {where} where a list of item ids was expected "
                        f"{_ACCEPTED}", _FIX)
    if not seq:
        return
    if set(map(type, seq)) == {int} and 1 <= min(seq) and max(seq) <= MAX_ID:
        return
    for j, x in enumerate(seq):
        if type(x) is not int:
            raise DataError(f"{path} holds {_what(x)} at {where}[{j}] {_ACCEPTED}", _FIX)
        if not 1 <= x <= MAX_ID:
            raise DataError(f"{path} holds the item id {x} at {where}[{j}], outside 1..{MAX_ID}",
                            "item ids start at 1 (0 is padding); re-create the file")


def _check_sessions(path: Path, obj: object, where: str, min_len: int) -> list:
    if type(obj) not in (list, tuple):
        raise DataError(f"{path} holds {_what(obj)} at {where or 'the top level'} where a list of "
                        f"sequences was expected "
                        f"{_ACCEPTED}", _FIX)
    if set(map(type, obj)) - {list, tuple}:
        i, seq = next((i, s) for i, s in enumerate(obj) if type(s) not in (list, tuple))
        raise DataError(f"{path} holds {_what(seq)} at {where}[{i}] where a list of item ids was "
                        f"expected {_ACCEPTED}", _FIX)
    lengths = list(map(len, obj))
    total, size = sum(lengths), path.stat().st_size
    if total > size:  # each id costs at least one byte of pickle unless lists are aliased
        raise DataError(f"{path} holds {total:,} ids in {size:,} bytes: aliased lists that would expand "
                        f"{_ACCEPTED}", _FIX)
    if lengths and min(lengths) < min_len:
        i = next(i for i, n in enumerate(lengths) if n < min_len)
        raise DataError(f"{path} holds a sequence of length {lengths[i]} at {where}[{i}] "
                        f"(at least {min_len} expected)", _FIX)
    flat = list(chain.from_iterable(obj))
    try:
        _check_ids(path, flat, where or "the top level")
    except DataError:  # find the sequence that holds the bad value, for the message
        for i, seq in enumerate(obj):
            _check_ids(path, seq, f"{where}[{i}]")
        raise
    return list(obj)


def load_sessions(path: str | Path) -> list[list[int]]:
    """Read `all_train_seq.txt`: a list of sessions, each a list of >= 2 item ids."""
    path = Path(path)
    return _check_sessions(path, load(path), "", min_len=2)


def load_samples(path: str | Path) -> tuple[list[list[int]], list[int]]:
    """Read `train.txt` / `test.txt`: (prefixes, labels), equal lengths, prefixes non-empty."""
    path = Path(path)
    obj = load(path)
    if type(obj) not in (list, tuple) or len(obj) != 2:
        shape = f"{_what(obj)} of length {len(obj)}" if type(obj) in (list, tuple) else _what(obj)
        raise DataError(f"{path} holds {shape} where a pair (prefixes, labels) was expected", _FIX)
    prefixes = _check_sessions(path, obj[0], "prefixes", min_len=1)
    labels = obj[1]
    _check_ids(path, labels, "labels")
    if len(prefixes) != len(labels):
        raise DataError(f"{path} holds {len(prefixes):,} prefixes but {len(labels):,} labels",
                        "the two lists must have one entry per sample; re-create the file")
    return prefixes, list(labels)
