"""The restricted unpickler: SR-GNN pickles load; globals, other objects and damaged files fail clearly."""
from __future__ import annotations

import collections
import os
import pickle
from pathlib import Path

import pytest

from pipeline.errors import DataError
from pipeline.unpickle import load, load_samples, load_sessions

REAL = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "diginetica-srgnn"


def write(tmp_path: Path, data: bytes, name: str = "all_train_seq.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("protocol", [0, 2, 3, 4, 5])
def test_sessions_and_samples_load_under_every_protocol(tmp_path, protocol):
    seqs = [[1, 2], [3, 4, 5], [2**31 - 1, 7]]
    assert load_sessions(write(tmp_path, pickle.dumps(seqs, protocol=protocol))) == seqs
    samples = ([[1], [3, 4], (3,)], [2, 5, 4])  # tuples are accepted where lists are
    got = load_samples(write(tmp_path, pickle.dumps(samples, protocol=protocol), "test.txt"))
    assert got == ([[1], [3, 4], (3,)], [2, 5, 4])


@pytest.mark.skipif(not REAL.is_dir(), reason="shared datasets not present")
def test_real_srgnn_files_load():
    seqs = load_sessions(REAL / "all_train_seq.txt")
    assert (len(seqs), seqs[:2], sum(map(len, seqs))) == (186_670, [[1, 2], [3, 4, 5]], 906_140)
    prefixes, labels = load_samples(REAL / "test.txt")
    assert (len(prefixes), len(labels), prefixes[1], labels[1]) == (60_858, 60_858, [21553, 20071, 8762, 21566], 6381)


def test_a_global_is_refused_before_it_runs(tmp_path):
    marker = tmp_path / "pwned"
    payload = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
    with pytest.raises(DataError) as err:
        load_sessions(write(tmp_path, payload))
    assert not marker.exists()
    assert one_line(err).endswith("all_train_seq.txt holds a reference to the global os.system (only "
                                  "lists/tuples/ints are accepted). Fix: re-create it with SR-GNN's "
                                  "datasets/preprocess.py or `seqpe export`, and never load a pickle from "
                                  "an unknown source")


@pytest.mark.parametrize("obj, what", [
    (os.path.join, "the global posixpath.join"),                    # STACK_GLOBAL (protocol 4)
    (collections.OrderedDict(a=1), "the global collections.OrderedDict"),  # REDUCE of a class
    ([[1, 2], [Path("x"), 3]], "the global pathlib.PosixPath"),
])
def test_objects_needing_a_global_are_refused(tmp_path, obj, what):
    with pytest.raises(DataError, match=f"holds a reference to {what} "):
        load_sessions(write(tmp_path, pickle.dumps(obj, protocol=4)))


def test_a_persistent_id_is_refused(tmp_path):
    with pytest.raises(DataError, match="holds a persistent id"):
        load_sessions(write(tmp_path, b"]Pfoo\na."))


@pytest.mark.parametrize("bad, what", [
    ({"a": 1}, "a dict"), ("12", "a str"), (1.0, "a float"), (b"\x01", "a bytes"), ({1}, "a set"),
    (None, "a NoneType"), (True, "a bool"), (frozenset([1]), "a frozenset"), (bytearray(b"1"), "a bytearray"),
])
def test_other_values_are_refused_with_their_position(tmp_path, bad, what):
    # protocol 5 builds every one of these with its own opcode, no global needed
    path = write(tmp_path, pickle.dumps([[1, 2], [3, bad]], protocol=5))
    with pytest.raises(DataError) as err:
        load_sessions(path)
    assert f"holds {what} at [1][1] (only lists/tuples/ints are accepted)" in one_line(err)
    path = write(tmp_path, pickle.dumps(([[1], [2]], [3, bad]), protocol=5), "test.txt")
    with pytest.raises(DataError, match=f"holds {what} at labels\\[1\\]"):
        load_samples(path)


@pytest.mark.parametrize("obj, fragment", [
    ({"a": [1, 2]}, "holds a dict at the top level where a list of sequences was expected"),
    ([[1, 2], 3], "holds an int at [1] where a list of item ids was expected"),
    ([[1, 2], [3]], "holds a sequence of length 1 at [1] (at least 2 expected)"),
    ([[1, 0]], "holds the item id 0 at [0][1], outside 1..2147483647"),
    ([[1, 2**31]], "holds the item id 2147483648 at [0][1]"),
])
def test_wrong_session_structure(tmp_path, obj, fragment):
    with pytest.raises(DataError) as err:
        load_sessions(write(tmp_path, pickle.dumps(obj, protocol=3)))
    assert fragment in one_line(err)


@pytest.mark.parametrize("obj, fragment", [
    ([[[1]]], "holds a list of length 1 where a pair (prefixes, labels) was expected"),
    (([[1]], [2], [3]), "holds a tuple of length 3 where a pair (prefixes, labels) was expected"),
    (([[1], [2]], [3]), "holds 2 prefixes but 1 labels"),
    (([[1], []], [3, 4]), "holds a sequence of length 0 at prefixes[1] (at least 1 expected)"),
])
def test_wrong_samples_structure(tmp_path, obj, fragment):
    with pytest.raises(DataError) as err:
        load_samples(write(tmp_path, pickle.dumps(obj, protocol=3), "test.txt"))
    assert fragment in one_line(err)


def test_aliased_lists_cannot_blow_up(tmp_path):
    big = list(range(1, 10_001))
    path = write(tmp_path, pickle.dumps([big] * 10_000, protocol=3))  # 10^8 ids in ~30 kB
    assert path.stat().st_size < 100_000
    with pytest.raises(DataError, match="holds 100,000,000 ids in .* bytes: aliased lists"):
        load_sessions(path)


def test_damaged_files(tmp_path):
    good = pickle.dumps([[1, 2], [3, 4]] * 50, protocol=3)
    with pytest.raises(DataError, match="is truncated: the pickle ends before its STOP opcode"):
        load_sessions(write(tmp_path, good[: len(good) // 2]))
    with pytest.raises(DataError, match="is truncated"):
        load_sessions(write(tmp_path, good[:1]))
    with pytest.raises(DataError, match="is empty, not a pickle"):
        load_sessions(write(tmp_path, b""))
    with pytest.raises(DataError, match="is not a readable pickle"):
        load_sessions(write(tmp_path, b"1 2 3\n4 5 6\n"))
    with pytest.raises(DataError, match="is a zip archive, not a pickle"):
        load_sessions(write(tmp_path, b"PK\x03\x04rest"))
    with pytest.raises(DataError, match="does not exist"):
        load_sessions(tmp_path / "missing.txt")


def test_bytes_after_the_pickle_are_refused(tmp_path):
    """Walk 43g #9: two pickles joined (`cat a b > train.txt`), or junk appended, imported the first part only."""
    path = tmp_path / "train.txt"
    path.write_bytes(pickle.dumps(([[1, 2]], [3]), protocol=2) + b"GARBAGE")
    with pytest.raises(DataError, match=r"train.txt has 7 bytes after the end of its pickle \(at byte \d+\): two "
                                        r"files joined"):
        load(path)
    path.write_bytes(pickle.dumps(([[1, 2]], [3]), protocol=2))
    assert load(path) == ([[1, 2]], [3])
