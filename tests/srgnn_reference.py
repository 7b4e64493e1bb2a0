"""Test oracle: a plain-Python re-statement of SR-GNN's `datasets/preprocess.py` (2019 version).

Written from the protocol (pipeline/REFERENCE.md §2) and a reading of the original script, not copied:
dicts and lists, one row at a time, no Polars, so it shares no code (and no bugs) with
seqpe's vectorised pipeline. The original runs `time.mktime` on local time; it is run
under TZ=UTC, which is what `calendar.timegm` computes here.

    reference(path, "diginetica")  -> {"train": (prefixes, labels), "test": (...),
                                       "all_train_seq": [...], "n_items": int, ...}
    reference(path, "yoochoose")   -> the same plus "train_1_4", "all_train_seq_1_4",
                                       "train_1_64", "all_train_seq_1_64"
"""
from __future__ import annotations

import calendar
import csv
import time
from pathlib import Path

DAY = 86400
_DIGINETICA_KEYS = {"sessionId": "session_id", "itemId": "item_id", "userId": "user_id"}


def _read_diginetica(path: Path) -> tuple[dict, dict]:
    """session -> [(item, timeframe), ...] in file order; session -> date of its last row."""
    clicks: dict[str, list] = {}
    dates: dict[str, float] = {}
    with open(path, newline="", encoding="utf-8") as f:
        for raw in csv.DictReader(f, delimiter=";"):
            row = {_DIGINETICA_KEYS.get(k, k): v for k, v in raw.items()}
            sid = row["session_id"]
            clicks.setdefault(sid, []).append((row["item_id"], int(row["timeframe"])))
            # The last row of the session in file order decides its date: later rows overwrite.
            # (Dict order stays the order of first appearance, as in the original.)
            dates[sid] = calendar.timegm(time.strptime(row["eventdate"], "%Y-%m-%d"))
    for sid, items in clicks.items():
        clicks[sid] = [item for item, _ in sorted(items, key=lambda c: c[1])]  # stable
    return clicks, dates


def _read_yoochoose(path: Path) -> tuple[dict, dict]:
    """No header: SessionId,Timestamp,ItemId,Category; date = last row's time in whole seconds."""
    clicks: dict[str, list] = {}
    dates: dict[str, float] = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.reader(f, delimiter=","):
            sid, stamp, item = row[0], row[1], row[2]
            clicks.setdefault(sid, []).append(item)
            dates[sid] = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
    return clicks, dates


def _augment(seqs: list[list[int]]) -> tuple[list[list[int]], list[int], list[int]]:
    """For each session, i = 1..n-1: (s[:-i], s[-i]), longest prefix first; plus the session index."""
    prefixes, labels, owner = [], [], []
    for k, seq in enumerate(seqs):
        for i in range(1, len(seq)):
            prefixes.append(seq[:-i])
            labels.append(seq[-i])
            owner.append(k)
    return prefixes, labels, owner


def reference(path: str | Path, dataset: str) -> dict:
    path = Path(path)
    if dataset == "diginetica":
        clicks, dates = _read_diginetica(path)
        split_days = 7
    elif dataset == "yoochoose":
        clicks, dates = _read_yoochoose(path)
        split_days = 1
    else:
        raise ValueError(dataset)

    # drop one-click sessions
    for sid in [s for s, items in clicks.items() if len(items) == 1]:
        del clicks[sid], dates[sid]

    # item popularity over what is left (all dates, repeats count)
    counts: dict[str, int] = {}
    for items in clicks.values():
        for item in items:
            counts[item] = counts.get(item, 0) + 1

    # one filtering pass with those counts
    for sid in list(clicks):
        kept = [item for item in clicks[sid] if counts[item] >= 5]
        if len(kept) < 2:
            del clicks[sid], dates[sid]
        else:
            clicks[sid] = kept

    maxdate = max(dates.values())
    splitdate = maxdate - DAY * split_days
    ordered = list(dates.items())                      # first-appearance order
    train_sess = sorted([x for x in ordered if x[1] < splitdate], key=lambda x: x[1])   # stable
    test_sess = sorted([x for x in ordered if x[1] > splitdate], key=lambda x: x[1])

    numbering: dict[str, int] = {}
    train_ids, train_seqs = [], []
    for sid, _ in train_sess:
        seq = []
        for item in clicks[sid]:
            if item not in numbering:
                numbering[item] = len(numbering) + 1
            seq.append(numbering[item])
        train_ids.append(sid)
        train_seqs.append(seq)

    test_ids, test_seqs = [], []
    for sid, _ in test_sess:
        seq = [numbering[item] for item in clicks[sid] if item in numbering]
        if len(seq) >= 2:
            test_ids.append(sid)
            test_seqs.append(seq)

    tr_prefixes, tr_labels, tr_owner = _augment(train_seqs)
    te_prefixes, te_labels, _ = _augment(test_seqs)
    out = {
        "train": (tr_prefixes, tr_labels),
        "test": (te_prefixes, te_labels),
        "all_train_seq": train_seqs,
        "train_session_ids": train_ids,
        "test_session_ids": test_ids,
        "test_sessions": test_seqs,
        "n_items": len(numbering),
        "splitdate": splitdate,
    }
    if dataset == "yoochoose":
        n = len(tr_prefixes)
        for name, denom in (("1_4", 4), ("1_64", 64)):
            cut = int(n / denom)  # like the original, a cut of 0 keeps everything ([-0:])
            out[f"train_{name}"] = (tr_prefixes[-cut:], tr_labels[-cut:])
            out[f"all_train_seq_{name}"] = train_seqs[tr_owner[-cut]:]
    return out


def main(argv: list[str] | None = None) -> None:
    """`python tests/srgnn_reference.py RAW_FILE diginetica|yoochoose OUT_DIR`: write the pickles."""
    import pickle
    import sys
    raw, dataset, out = (argv if argv is not None else sys.argv[1:])
    ref, out = reference(raw, dataset), Path(out)
    names = {"diginetica": {"": ""}, "yoochoose": {"1_64": "_1_64", "1_4": "_1_4"}}[dataset]
    for folder, key in names.items():
        target = out / (f"{dataset}{folder}" if folder else dataset)
        target.mkdir(parents=True, exist_ok=True)
        for name, obj in (("train.txt", ref[f"train{key}"]), ("test.txt", ref["test"]),
                          ("all_train_seq.txt", ref[f"all_train_seq{key}"])):
            (target / name).write_bytes(pickle.dumps(obj, protocol=3))


if __name__ == "__main__":
    main()
