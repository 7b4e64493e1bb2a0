"""Use a trained run: the top K items for sessions (`seqpe recommend`, `load_run`).

    from pipeline.recommend import load_run
    model = load_run("data/runs/sample/sasrec-lpe/seed-1")      # a seed's run folder
    top = model.recommend([[12, 55, 9], [3, 4]], k=10)            # TopK: items (S, K) int64, scores (S, K)
    frame = model.recommend_frame(sessions, k=10)                   # session_id, rank, item, score (Polars)
    users = model.user_sessions(["A1YJEY40YUW4SE"])   # leave-one-out: users' whole sequences (a sessions folder)

A run folder is what `seqpe train` writes for one seed: checkpoint.pt (weights of the best epoch
and the settings that built the model) and run.json. The model is rebuilt from those settings
(pipeline/train/setup.py, models/), its weights loaded strictly, and put in eval mode.

Item ids are seqpe's internal ids, 1..n_items (the numbering of the dataset's sessions folder,
items.parquet: item_id, raw_id). With `raw_ids=True` ids are the dataset's raw ids, mapped through
that items.parquet both ways (a sessions folder is then required).

Refused, each with a one-line error: a CTR run (a CTR model scores (user, item) pairs, it ranks no
items); a run folder without checkpoint.pt / run.json (a configuration folder: pass one seed's);
a sessions folder whose vocabulary is not the run's (manifest n_items, items.parquet numbering
1..n_items); an internal id outside 1..n_items; an unknown raw id (unless `drop_unknown`); a
session left with no item; K outside 1..n_items.

Scoring: each session's most recent `max_len` items (the run's train.max_len), left-padded as in
training, scored in batches on the device (auto: CUDA when present); `cut` then counts the sessions
longer than that. `exclude_seen` (default: the run's evaluate.mask_history) takes a session's own items
out of its list, all of them, those before its last max_len too. The top K are the K
highest scores, ties broken by the lower item id (a stable sort), so the output is the same on
every run of the same input, batch size and device (a session's scores can move in their last bits
with the other sessions of its batch, as with the batch size; walk 41f #11). Scores are the model's raw scores (logits; POP / S-POP / Item-KNN: their counts or
similarities), not probabilities; an item with no finite score (padding, excluded) is never listed,
so a list is shorter than K only when fewer items can be ranked. A NaN or infinite score is an
error (a diverged model), as in evaluation.

Batch input (`read_sessions`), Parquet or CSV, one of two layouts:
    list   a column `items` holding each session's items in order (Parquet: a list column; CSV: ids
           separated by spaces, or by one of `,` `^` `|` `;` each; two separators with nothing
           between them are an error, not skipped), and optionally `session_id`
           (default: the row number, from 0)
    long   columns `session_id`, `item_id`: one row per click, a session's clicks in file order,
           sessions in order of first appearance
Output (`write_topk`): Parquet with session_id, rank (1..K), item, score, sessions in input order.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from .errors import DataError, NonFiniteScores, ParamsError, printable
from .io import (MANIFEST, claim_file, read_json, read_manifest, refuse_nested, sha256_file, special_kind,
                 verify_shards, write_parquet)
from .lazy import lazy

pl = lazy("polars")

_ONE_SEPARATOR = re.compile(r"\s*[,^|;]\s*|\s+")   # one of , ^ | ; (spaces around it allowed), or spaces


# how messages name an option: the CLI's flags, or the Python keywords (walk 41f #9: a notebook has no --device)
_NAMES = {True: {"k": "-k {}", "batch_size": "--batch-size {}", "drop_unknown": "--drop-unknown",
                 "sessions": "--sessions DIR", "user": "--user", "raw_ids": "--raw-ids",
                 "sessions_in": "--items or --input"},
          False: {"k": "k={}", "batch_size": "batch_size={}", "drop_unknown": "drop_unknown=True",
                  "sessions": "load_run(run, sessions_dir)", "user": "user_sessions", "raw_ids": "raw_ids=True",
                  "sessions_in": "recommend() or recommend_frame()"}}


def _count(value, name: str, say: str) -> int:
    """An integer option (k, batch_size) from an int, a NumPy integer or an integral float; else a ParamsError
    naming it (k=5.0 was NumPy's "'float' object cannot be interpreted as an integer", k=None a comparison)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, float, np.floating)) or \
            (isinstance(value, (float, np.floating)) and not float(value).is_integer()):
        raise ParamsError(f"{name} is {printable(repr(value), 40)}, not a whole number", f"pass e.g. {say}")
    return int(value)


@dataclass(frozen=True)
class TopK:
    items: np.ndarray    # (S, K) int64 internal ids, -1 where a list is shorter than K
    scores: np.ndarray   # (S, K) float32, nan where a list is shorter than K


class RunModel:
    """A trained next-item model ready to rank items (see the module docstring)."""

    def __init__(self, run_dir: Path, net, record: dict, device, items: Optional["pl.DataFrame"] = None,
                 sessions_dir: Optional[Path] = None, cli: bool = False):
        self.run_dir, self.net, self.record, self.device = run_dir, net, record, device
        self.cli = cli                      # called by `seqpe recommend` (else from Python)
        self.names = _NAMES[cli]            # options named as the caller sets them (`seqpe recommend`'s flags)
        self.sessions_dir = sessions_dir    # the checked sessions folder (raw ids, a leave-one-out one's users)
        self.n_items = int(record["n_items"])
        self.max_len = int(record["max_len"])
        self.cut = 0                        # sessions of the last recommend() longer than max_len
        self.exclude_seen = bool((record.get("evaluate") or {}).get("mask_history", False))
        # as the run was scored: columns of padding in every row of a batch dropped (train.trim_padding, the same
        # predictions; at max_len 50, 5-item sessions scored 10x the columns: 20,000 took 36 s; walk 40h #8)
        self.trim = bool((record.get("train") or {}).get("trim_padding", True))
        self.items = items            # items.parquet of the vocabulary (raw ids), when a sessions folder was given

    # -- ids
    def to_internal(self, sessions: Sequence[Sequence], drop_unknown: bool = False,
                    session_ids: Optional[Sequence] = None) -> list[list[int]]:
        """Raw ids -> internal ids through items.parquet; `session_ids` name the sessions in errors (default:
        their position)."""
        if self.items is None:
            raise ParamsError("raw ids need the dataset's items.parquet", f"pass the sessions folder "
                              f"({self.names['sessions']})")
        table = dict(zip(self.items.get_column("raw_id").to_list(), self.items.get_column("item_id").to_list()))
        out, dropped, touched = [], 0, 0
        for s, session in enumerate(sessions):
            ids = []
            for raw in session:
                new = table.get(str(raw))
                if new is None and drop_unknown:
                    dropped += 1
                if new is None and not drop_unknown:
                    sid = session_ids[s] if session_ids is not None else s
                    raise DataError(f"raw item id {printable(str(raw), 40)!r} ({_where(sid)}) is "
                                    f"not in the vocabulary of "
                                    f"{self.run_dir} ({self.n_items:,} items)",
                                    f"check the ids, or pass {self.names['drop_unknown']} to leave such clicks out")
                if new is not None:
                    ids.append(int(new))
            touched += len(ids) < len(session)
            out.append(ids)
        if dropped:                       # --drop-unknown: said, so a session scored on fewer clicks is known
            sys.stderr.write(f"note: {self.names['drop_unknown'].split('=')[0]} left out {dropped:,} click{'s' * (dropped != 1)} of raw ids not in "
                             f"the vocabulary, in {touched:,} of {len(out):,} session{'s' * (len(out) != 1)}\n")
        return out

    def to_raw(self, items) -> list[list[Optional[str]]]:
        """Internal ids (S, K) (TopK.items, or lists) -> raw ids, None where there is no item (-1 or 0)."""
        if self.items is None:
            raise ParamsError("raw ids need the dataset's items.parquet", f"pass the sessions folder "
                              f"({self.names['sessions']})")
        raw = np.array([None] + self.items.sort("item_id").get_column("raw_id").to_list(), dtype=object)
        return [[raw[self._item_id(i)] if _as_id(i) > 0 else None for i in row] for row in np.asarray(items).tolist()]

    # -- ranking
    def recommend(self, sessions: Sequence[Sequence[int]], k: int = 10, *, exclude_seen: Optional[bool] = None,
                  batch_size: int = 512) -> TopK:
        """The top `k` items of each session (internal ids), batched on the run's device."""
        import torch
        from models.metrics import ranked_precision
        name_k, name_b = self.names["k"], self.names["batch_size"]
        k = _count(k, name_k.format("").strip(" ="), name_k.format(min(10, self.n_items)))
        batch_size = _count(batch_size, name_b.format("").strip(" ="), name_b.format(512))
        if not 1 <= k <= self.n_items:
            raise ParamsError(f"{name_k.format(k)} is outside 1..{self.n_items} (the run's n_items)",
                              f"pass e.g. {name_k.format(min(10, self.n_items))}")
        if batch_size < 1:
            raise ParamsError(f"batch size {batch_size} is not positive", f"pass e.g. {name_b.format(512)}")
        exclude = self.exclude_seen if exclude_seen is None else exclude_seen
        sessions = _sessions_list(sessions)
        seqs = self._matrix(sessions)                                           # (S, L)
        self.cut = sum(len(s) > self.max_len for s in sessions)                 # scored on their last max_len
        items = np.full((len(sessions), k), -1, dtype=np.int64)
        scores = np.full((len(sessions), k), np.nan, dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(seqs), batch_size):
                part = seqs[start:start + batch_size]                                          # (B, L)
                if self.trim:
                    part = part[:, part.shape[1] - max(int((part != 0).sum(1).max()), 1):]    # (B, L')
                batch = torch.from_numpy(part).long().to(self.device)
                s = ranked_precision(self.net(batch))                           # (B, N), fp32 or float64
                real = s[:, 1:]
                if torch.isnan(real).any() or torch.isposinf(real).any() or torch.isneginf(real).any():
                    raise NonFiniteScores(f"the model of {self.run_dir} gives NaN or infinite scores",
                                          "it diverged: retrain it (lower train.lr)")
                s[:, 0] = float("-inf")
                if exclude:       # a session's own items, all of them: those before its last max_len too
                    s = s.scatter(1, batch, float("-inf"))
                    rows = [(r, i) for r, sess in enumerate(sessions[start:start + batch_size])
                            if len(sess) > self.max_len for i in map(_as_id, list(sess)[:-self.max_len])]
                    # (_as_id: "12" as _matrix reads it; a digit string was torch's TypeError, walk 43f #1)
                    if rows:
                        r, i = torch.tensor(rows, dtype=torch.long, device=s.device).T
                        s[r, i] = float("-inf")
                val, idx = torch.sort(s, dim=1, descending=True, stable=True)   # ties: lower item id first
                val, idx = val[:, :k], idx[:, :k]                               # (B, K)
                keep = torch.isfinite(val)
                end = start + len(batch)
                items[start:end] = torch.where(keep, idx, -1).cpu().numpy()
                scores[start:end] = torch.where(keep, val, float("nan")).cpu().numpy()
        return TopK(items=items, scores=scores)

    def recommend_frame(self, sessions: "pl.DataFrame", k: int = 10, *, raw_ids: bool = False,
                        drop_unknown: bool = False, exclude_seen: Optional[bool] = None,
                        batch_size: int = 512) -> "pl.DataFrame":
        """(session_id, items) frame -> top-K long frame: session_id, rank, item, score. The frame takes
        read_sessions' layouts (a list or text `items` column, or long session_id, item_id rows), checked as
        read_sessions checks a file."""
        if isinstance(sessions, pl.LazyFrame):
            sessions = sessions.collect()
        if not isinstance(sessions, pl.DataFrame):
            raise ParamsError(f"sessions is a {type(sessions).__name__}, not a Polars DataFrame",
                              "pass a frame of session_id, items (a list of ids per session), or use recommend() "
                              "for a list of sessions")
        sessions = sessions_frame(sessions, "the sessions frame", unnamed=sessions.height == 1)
        ids = sessions.get_column("session_id")
        lists = sessions.get_column("items").to_list()
        internal = self.to_internal(lists, drop_unknown, ids.to_list()) if raw_ids else \
            [self._session_ids(s, sid) for sid, s in zip(ids.to_list(), lists)]
        for sid, s, given in zip(ids.to_list(), internal, lists):
            if not s and given and raw_ids:              # --drop-unknown dropped every one of its ids
                raise DataError(f"{_which(sid)} has no item in the run's vocabulary: "
                                f"{self.names['drop_unknown'].split('=')[0]} dropped all {len(given)} of its raw ids",
                                "check they are this dataset's raw ids (items.parquet raw_id, as in the raw log), "
                                "or leave that session out")
            if not s:
                raise DataError(f"{_which(sid)} has no item", "leave empty sessions out of the input")
        top = self.recommend(internal, k, exclude_seen=exclude_seen, batch_size=batch_size)
        s_idx, rank = np.nonzero(top.items >= 0)
        item_col = top.items[s_idx, rank]
        if raw_ids:
            raw = self.to_raw(top.items)
            item = pl.Series("item", [raw[i][j] for i, j in zip(s_idx, rank)], dtype=pl.String)
        else:
            item = pl.Series("item", item_col, dtype=pl.Int32)
        return pl.DataFrame({"session_id": ids.gather(s_idx), "rank": pl.Series(rank + 1, dtype=pl.Int32),
                             "item": item, "score": pl.Series(top.scores[s_idx, rank], dtype=pl.Float32)})

    def user_sessions(self, users: Sequence[str]) -> "pl.DataFrame":
        """Leave-one-out users by raw id -> (session_id: the raw user id, items: the user's whole sequence in
        internal ids, its test item included), in the order given; from the sessions folder's test split (each
        user's every interaction, in time order) and its users.parquet, or, for a `seqpe import` of SASRec-format
        files, whose session ids are the file's user ids, from those ids themselves."""
        folder = self.sessions_dir
        if folder is None:
            raise ParamsError(f"{self.names['user']} needs the dataset's sessions folder (its users.parquet maps raw "
                              "user ids)", "pass --sessions data/sessions/DATASET" if self.cli else
                              "load the run with it: load_run(run, 'data/sessions/DATASET')")
        if isinstance(users, (str, bytes, int, np.integer)):       # one user: its characters were users (walk 41f #8)
            users = [users.decode() if isinstance(users, bytes) else users]
        manifest = read_manifest(folder)
        wanted = [str(u).strip() for u in users]
        if len(set(wanted)) != len(wanted):
            raise ParamsError(f"a {'--user' if self.cli else 'user'} is given twice",
                              "list each user once")
        own_ids = (manifest.get("protocol_info") or {}).get("session_ids") == "the file's user ids"
        if (folder / "users.parquet").is_file():
            verify_shards(folder, manifest, only=("users.parquet",))
            table = pl.read_parquet(folder / "users.parquet", columns=["session_id", "raw_id"],
                                    glob=False).with_columns(
                pl.col("raw_id").cast(pl.String))
            ids = dict(zip(table.get_column("raw_id").to_list(), table.get_column("session_id").to_list()))
            where, count = f"{folder}/users.parquet", table.height
        elif own_ids:                              # an import's session ids are the file's user ids
            ids = {u: int(u) for u in wanted if _DIGITS.fullmatch(u)}
            where, count = f"the test split of {folder}", manifest.get("splits", {}).get("test", {}).get("sessions")
        else:
            protocol = manifest.get("protocol")
            ours = protocol in (None, "leave_one_out")
            raise DataError(f"{folder} has no users.parquet: "
                            + ("it was written before seqpe kept users.parquet" if ours else
                               f"its {protocol} sessions are not users"),
                            f"re-run `seqpe preprocess {manifest.get('dataset')}`" if ours else
                            f"recommend for sessions with {self.names['sessions_in']}")
        seen: dict = {}
        for u in wanted:                             # `--user 7 --user 007` of an import: one user (walk 41a #4)
            if ids.get(u) is not None and seen.setdefault(ids[u], u) != u:
                raise ParamsError(f"users {printable(seen[ids[u]], 40)!r} and {printable(u, 40)!r} are the same user",
                                  "list each user once")
        test = [e["path"] for e in manifest.get("shards", []) if str(e.get("path", "")).startswith("test/")]
        verify_shards(folder, manifest, only=tuple(test))
        from .io import scan_split
        found = dict(scan_split(folder, "test").filter(pl.col("session_id").is_in(list(ids.values())))
                     .select("session_id", "items").collect().iter_rows())
        unknown = [u for u in wanted if ids.get(u) not in found]
        if unknown:
            shown = ", ".join(repr(printable(u, 40)) for u in unknown[:3]) + (", ..." if len(unknown) > 3 else "")
            counted = f" ({count:,} users kept by the dataset's filters)" if isinstance(count, int) else ""
            raise DataError(f"user{'s' * (len(unknown) > 1)} {shown} not in {where}{counted}",
                            "pass raw user ids as in the raw log" + (" (users.parquet raw_id)" if not own_ids else
                                                                     " (the imported file's user ids)"))
        return pl.DataFrame({"session_id": pl.Series(wanted, dtype=pl.String),
                             "items": pl.Series([list(found[ids[u]]) for u in wanted], dtype=pl.List(pl.Int64))})

    def _matrix(self, sessions: list) -> np.ndarray:
        """Left-padded (S, max_len) int32 of the most recent max_len items, ids checked."""
        from .batches import pad_left
        if len(sessions) == 0:
            raise DataError("no sessions to recommend for", "pass at least one session")
        for n, s in enumerate(sessions):
            if not len(s):
                raise DataError(f"session {n} has no item", "leave empty sessions out of the input")
            for i in s[:-self.max_len] if len(s) > self.max_len else ():   # not scored, but excluded: checked too
                self._item_id(i)
        cut = [list(s)[-self.max_len:] for s in sessions]
        flat = np.fromiter((self._item_id(i) for s in cut for i in s), dtype=np.int64)
        lengths = np.array([len(s) for s in cut], dtype=np.int32)
        return pad_left(flat.astype(np.int32), lengths, self.max_len)

    def _session_ids(self, items: Sequence, sid) -> list[int]:
        """A session's internal ids, checked; an error names the session (a file of thousands said only the id)."""
        try:
            return [self._item_id(i) for i in items]
        except DataError as e:
            raise DataError(f"{e.problem} ({_where(sid)})", e.fix) from None

    def _item_id(self, value) -> int:
        """An internal item id 1..n_items (an id past int64 was an OverflowError in NumPy)."""
        v = _as_id(value)
        if not 1 <= v <= self.n_items:
            raise DataError(f"item id {printable(str(v), 40)} is outside 1..{self.n_items:,}, the vocabulary of "
                            f"{self.run_dir}", "pass seqpe's internal ids (items.parquet item_id), or raw ids with "
                            f"{self.names['raw_ids']}")
        return v


_DIGITS = re.compile(r"\s*[+-]?[0-9]+\s*")


def _as_id(value) -> int:
    """An integer id from an int, an integral float (a Parquet float column's 2.0) or ASCII digits; int() also
    took 1.9 as 1, True as 1, '1_0' as 10 and Arabic-Indic digits, so those are errors here."""
    if value is None or (isinstance(value, str) and not value.strip()):    # an empty CSV cell, a Parquet null
        raise DataError("an item id is empty", "fill or drop the rows without an item id")
    integral = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        integral = True
    elif isinstance(value, str) and _DIGITS.fullmatch(value):
        integral = True
    if not integral:
        raise DataError(f"item id {printable(str(value), 40)!r} is not an integer",
                        "pass seqpe's internal ids, or raw ids with --raw-ids")
    return int(value)


def load_run(run_dir: str | Path, sessions_dir: Optional[str | Path] = None, device: str = "auto", *,
             cli: bool = False) -> RunModel:
    """A seed's run folder as a ready model; `sessions_dir` (the dataset's sessions folder) is
    checked against the run's vocabulary and gives raw ids. `cli`: messages name `seqpe recommend`'s flags
    (-k, --device), not the Python keywords (k=, device=)."""
    import os
    from .params import TrainParams, from_dict
    from .train.setup import build_encoding, pick_device
    for name, value in (("run_dir", run_dir), ("sessions_dir", sessions_dir)):
        if not isinstance(value, (str, os.PathLike)) and not (value is None and name == "sessions_dir"):
            raise ParamsError(f"{name} is {printable(repr(value), 40)}, not a folder path",
                              "pass a seed's run folder, e.g. load_run('data/runs/sample/sasrec-lpe/seed-1')"
                              if name == "run_dir" else "pass the dataset's sessions folder, e.g. data/sessions/sample")
    run_dir = Path(run_dir)
    if not (run_dir / "checkpoint.pt").is_file() or not (run_dir / "run.json").is_file():
        seeds = sorted(p.name for p in run_dir.glob("seed-*") if (p / "checkpoint.pt").is_file()) \
            if run_dir.is_dir() else []
        from .io import pull_hint
        fix = f"pass one seed's folder, e.g. {run_dir / seeds[0]}" if seeds else \
            f"{pull_hint(run_dir)}pass a run folder written by `seqpe train` (data/runs/DATASET/MODEL-ENCODING/seed-N)"
        raise DataError(f"{run_dir} is not a run folder (it needs checkpoint.pt and run.json)", fix)
    record = read_json(run_dir / "run.json")
    if record.get("task") == "ctr" or record.get("protocol") == "ctr":
        raise DataError(f"{run_dir} is a CTR run ({record.get('model')}): it scores (user, item) pairs and ranks no "
                        "items, while recommend ranks items", "pass a next-item run (srgnn or leave-one-out data)")
    from models import MODELS, build_model
    from .train.runs import load_checkpoint
    ckpt = load_checkpoint(run_dir)
    cfg = ckpt["config"]
    # each part of the config as `seqpe train` writes it: a missing max_len, a string `train`, a list of options
    # or a negative n_items were tracebacks (walk 43g #6)
    shaped = (isinstance(cfg, dict) and type(cfg.get("n_items")) is int and 1 <= cfg["n_items"] <= 2**31 - 1
              and cfg.get("model") in MODELS and type(cfg.get("max_len")) is int and 1 <= cfg["max_len"] <= 2**20
              and isinstance(cfg.get("train"), dict) and all(isinstance(k, str) for k in cfg["train"])
              and all(isinstance(cfg.get(k, {}), dict) for k in ("options", "encoding_options"))
              and isinstance(ckpt.get("model"), dict) and all(isinstance(k, str) for k in ckpt["model"]))
    if not shaped:
        got = {k: cfg.get(k) for k in ("model", "n_items", "max_len")} if isinstance(cfg, dict) else type(cfg).__name__
        raise DataError(f"{run_dir}/checkpoint.pt does not describe a next-item model `seqpe train` wrote "
                        f"(config: {str(got)[:120]})", "re-run `seqpe train` for it")
    record = {**record, "n_items": cfg["n_items"], "max_len": cfg["max_len"]}
    items = _vocabulary(Path(sessions_dir), cfg["n_items"], run_dir, record.get("dataset"),
                        record.get("sessions_manifest")) if sessions_dir is not None else None
    tp = from_dict(TrainParams, {k: v for k, v in cfg["train"].items() if v is not None},   # null: a key the model
                   "train", run=True)                                                      # never reads (ModelSpec.ignores)
    spec = MODELS[cfg["model"]]
    encoding = build_encoding(tp.encoding, tp, cfg.get("encoding_options", {})) if spec.uses_encoding else None
    dev = pick_device(device, "--device" if cli else "device")
    net = build_model(cfg["model"], n_items=cfg["n_items"], max_len=cfg["max_len"], train=tp,
                      options=cfg.get("options", {}), encoding=encoding)
    extra = sorted(set(ckpt["model"]) - set(net.state_dict()))
    if extra and getattr(spec, "side", False):     # CARCA's psi branch: attributes and context it was trained on
        raise DataError(f"{run_dir} is {cfg['model']} trained with item attributes or interaction context "
                        f"({', '.join(extra[:2])}), which `seqpe recommend` cannot supply for new sessions",
                        "recommend with a run trained without side information (e.g. on a `seqpe import` of the "
                        "plain sequences); its test split was scored when it trained (run.json, `seqpe report`)")
    try:
        net.load_state_dict(ckpt["model"])
    except RuntimeError as exc:                    # names and shapes that do not fit the model its config builds
        raise DataError(f"{run_dir}/checkpoint.pt does not fit the {cfg['model']} model its config describes "
                        f"({str(exc).splitlines()[1].strip() if len(str(exc).splitlines()) > 1 else exc})",
                        "re-run `seqpe train` for it") from None
    net.to(dev).eval()
    return RunModel(run_dir, net, record, dev, items, Path(sessions_dir) if sessions_dir is not None else None,
                    cli=cli)


def _vocabulary(folder: Path, n_items: int, run_dir: Path, dataset: Optional[str] = None,
                made_from: Optional[str] = None) -> "pl.DataFrame":
    """items.parquet of a sessions folder, checked to be the run's vocabulary: its dataset, n_items, ids 1..n, and
    `made_from` (run.json's sha256 of the sessions manifest its samples were augmented from; runs before it was
    recorded have none): a folder re-made with as many items (the sample regenerated with another seed)
    numbered other raw ids, and --raw-ids mapped them through it silently."""
    from .io import manifest_kind
    manifest = read_manifest(folder)
    owner = manifest.get("dataset")
    kind = manifest_kind(manifest)
    if kind != "sessions":                      # a samples folder was "re-made since" (walk 41f #6)
        name = dataset if isinstance(dataset, str) else owner if isinstance(owner, str) else "DATASET"
        raise DataError(f"{folder} is a {kind} folder, and raw ids come from the dataset's sessions folder "
                        "(items.parquet)", f"pass data/sessions/{name}")
    if isinstance(dataset, str) and isinstance(owner, str) and owner != dataset:
        raise DataError(f"{folder} holds {owner}'s sessions, but {run_dir} was trained on {dataset}",
                        f"pass {dataset}'s sessions folder (data/sessions/{dataset})")
    if manifest.get("n_items") != n_items:
        raise DataError(f"{folder} has n_items {manifest.get('n_items')}, but {run_dir} was trained on {n_items:,} "
                        "items: another dataset, or another preprocessing", "pass the sessions folder the run's "
                        "samples came from")
    if isinstance(made_from, str) and sha256_file(folder / MANIFEST) != made_from:
        raise DataError(f"{folder} is not the sessions folder {run_dir}'s samples were made from (its manifest.json "
                        "differs: the sessions were re-made since, so item ids may stand for other raw ids)",
                        "pass the sessions folder the run was trained from (--sessions; load_run's sessions_dir), or "
                        "retrain on samples augmented from this one")
    path = folder / "items.parquet"
    if not path.is_file():
        raise DataError(f"{folder} has no items.parquet (raw ids): it is not a sessions folder",
                        "pass the dataset's sessions folder (data/sessions/DATASET)")
    verify_shards(folder, manifest, only=("items.parquet",))
    items = pl.read_parquet(path, columns=["item_id", "raw_id"], glob=False).with_columns(
        pl.col("raw_id").cast(pl.String))
    ids = items.get_column("item_id")
    if items.height != n_items or ids.n_unique() != n_items or ids.min() != 1 or ids.max() != n_items:
        raise DataError(f"{path} does not number items 1..{n_items:,}", "re-run `seqpe preprocess` for it")
    return items


# --------------------------------------------------------------------------- batch files

def read_sessions(path: str | Path) -> "pl.DataFrame":
    """A Parquet or CSV file of sessions (layouts in the module docstring) -> session_id, items (a list
    of ids: Int64, or String for CSV lists and raw ids)."""
    from . import sniff
    path = Path(path)
    if not path.is_file():
        from .io import missing
        what = missing(path) if not path.exists() else "is a folder" if path.is_dir() else \
            f"is not a regular file ({special_kind(path)})"
        raise DataError(f"sessions file {path} {what}", "pass a Parquet or CSV file")
    head = sniff.head(path, 4)
    try:
        if head == b"PAR1":
            df = pl.read_parquet(path, glob=False)
        else:
            sniff.require_text(path, "write a header line and one session per row (`seqpe recommend --help`)",
                               fix="write it as a UTF-8 CSV with a header line (session_id,items) or as Parquet")
            if sniff.starts_as_json(path):      # was read as a CSV: "has columns [{"session_id":1, items":[1..."
                raise DataError(f"{path} is JSON, and the sessions file is Parquet or CSV",
                                "write it as a CSV with a header line (session_id,items) or as Parquet "
                                "(`seqpe recommend --help`)")
            header = sniff.head(path, 1024).lstrip(b"\xef\xbb\xbf").split(b"\n")[0]
            if b"\t" in header and b"," not in header:  # a TSV: its one column was "session_id\titems"
                raise DataError(f"{path} separates its columns with tabs, and the sessions file is CSV (commas) "
                                f"or Parquet", "write the columns separated by commas: session_id,items")
            df = _drop_trailing_blank_lines(path, pl.read_csv(path, infer_schema=False, glob=False))
    except (pl.exceptions.ComputeError, pl.exceptions.NoDataError, OSError) as e:
        raise DataError(f"{path} could not be read as Parquet or CSV ({printable(str(e).splitlines()[0], 120)})",
                        "pass a Parquet file or a CSV with a header line") from None
    return sessions_frame(df, str(path), from_text=True)


def sessions_frame(df: "pl.DataFrame", where: str, unnamed: bool = False, from_text: bool = False) -> "pl.DataFrame":
    """A frame in one of read_sessions' layouts -> session_id, items (a list of ids per session), checked:
    `where` names it in errors (a file's path, or "the sessions frame"). `unnamed`: a one-row frame may have a
    null session_id (`--items`, whose messages then name no id). `from_text`: read from a CSV, whose integer
    session ids are read as text and made integers again (a frame's ids are kept as they are)."""
    path = where
    if "items" in df.columns:
        col = df.get_column("items")
        if col.dtype == pl.String:
            lists = [_item_tokens(v or "") for v in col.to_list()]
            gap = next((i for i, tokens in enumerate(lists) if "" in tokens), None)
            if gap is not None:                  # `12,,9`: a left-out item, as parse_ids says
                raise DataError(f"{path} row {gap + 1}: items {printable(col[gap], 60)!r} has two separators with "
                                "nothing between them", "list each session's items with one separator between each")
            col = pl.Series("items", lists, dtype=pl.List(pl.String))
        elif not isinstance(col.dtype, pl.List):
            raise DataError(f"{path}: column items is {col.dtype}, not a list of item ids",
                            "write each session's items as a list (Parquet) or as ids separated by spaces (CSV)")
        ids = df.get_column("session_id") if "session_id" in df.columns else pl.Series("session_id", range(df.height))
        out = pl.DataFrame({"session_id": ids, "items": col})
    elif {"session_id", "item_id"} <= set(df.columns):
        out = (df.select("session_id", "item_id").group_by("session_id", maintain_order=True)
                 .agg(pl.col("item_id").alias("items")))
    else:
        raise DataError(f"{path} has columns {', '.join(df.columns[:8]) or 'none'}: neither an `items` list column nor "
                        "`session_id`, `item_id`", "see `seqpe recommend --help` (or pipeline/recommend.py's "
                        "docstring) for the two layouts")
    ids = out.get_column("session_id")
    if ids.dtype == pl.String and from_text:     # CSV: integer ids stay integers
        as_int = ids.str.strip_chars().cast(pl.Int64, strict=False)
        if as_int.null_count() == ids.null_count():
            out = out.with_columns(as_int.alias("session_id"))
    if (out.get_column("session_id").null_count() and not (unnamed and out.height == 1)) or \
            out.get_column("items").null_count():
        raise DataError(f"{path} has a session without an id or items", "fill or drop those rows")
    if out.get_column("session_id").n_unique() != out.height:
        raise DataError(f"{path} lists a session_id twice", "give every session one row (list layout)")
    return out


def _sessions_list(sessions) -> list:
    """`recommend`'s sessions as a list of sessions, each a sequence of ids; a flat list of ids, a string or
    None is a DataError (walk 41f #1, #3: "125" was scored as the session [1, 2, 5], [12, 55, 9] was a
    TypeError)."""
    if sessions is None or isinstance(sessions, (str, bytes)):
        raise DataError(f"sessions is {printable(repr(sessions), 40)}, not a list of sessions",
                        "pass a list of sessions, each a list of item ids, e.g. [[12, 55, 9]]")
    if type(sessions).__name__ in ("DataFrame", "LazyFrame") and \
            type(sessions).__module__.split(".")[0] in ("polars", "pandas"):  # its columns were scored as sessions
        raise DataError(f"sessions is a {type(sessions).__name__}, and recommend() takes a list of sessions",
                        "pass the frame to recommend_frame(), or a list of sessions, e.g. [[12, 55, 9]]")
    if hasattr(sessions, "to_list") and not hasattr(sessions, "tolist"):      # a Polars Series of lists
        sessions = sessions.to_list()
    if hasattr(sessions, "tolist") and not isinstance(sessions, np.ndarray):   # a torch tensor (walk 41h #5):
        sessions = sessions.tolist()                                          # its rows, as ints
        if not isinstance(sessions, list):                                    # a 0-d one: a number
            raise DataError(f"sessions is {sessions!r}, not a list of sessions",
                            "pass a list of sessions, each a list of item ids, e.g. [[12, 55, 9]]")
    if isinstance(sessions, np.ndarray) and sessions.ndim == 1 and sessions.dtype != object:
        raise DataError("sessions is one flat array of item ids, not a list of sessions",
                        "pass a list of sessions, e.g. [[12, 55, 9]] (a 2-D array is taken row by row)")
    try:
        out = list(sessions)
    except TypeError:
        raise DataError(f"sessions is a {type(sessions).__name__}, not a list of sessions",
                        "pass a list of sessions, each a list of item ids, e.g. [[12, 55, 9]]") from None
    for n, s in enumerate(out):
        if isinstance(s, (str, bytes)):
            raise DataError(f"session {n} is the string {printable(repr(s), 40)}, not a list of item ids",
                            "pass each session as a list, e.g. [[12, 55, 9]] (read a file with read_sessions)")
        if s is None or isinstance(s, (int, np.integer, float, np.floating)):
            flat = all(isinstance(x, (int, np.integer)) for x in out)
            raise DataError("sessions is one flat list of item ids, not a list of sessions" if flat else
                            f"session {n} is {printable(repr(s), 40)}, not a list of item ids",
                            "pass a list of sessions, each a list of item ids, e.g. [[12, 55, 9]]")
    return out


def _drop_trailing_blank_lines(path: Path, df: "pl.DataFrame") -> "pl.DataFrame":
    """A CSV's blank lines (Polars reads each as a row of nulls): those that end the file, an editor's or an
    export's habit, are dropped; one between sessions is refused, naming its line."""
    if not df.width or not df.height:
        return df
    blank = df.select(pl.all_horizontal(pl.all().is_null())).to_series()
    if not blank.any():
        return df
    last = df.height - 1 - blank.reverse().arg_min() if not blank.all() else -1
    first = blank.arg_max()
    if first < last:
        raise DataError(f"{path} line {first + 2} is blank, between sessions", "remove that line")
    return df.head(last + 1)


def _which(sid) -> str:
    """How messages name a session: by its id in the input file; the one session of `--items` (id None)."""
    return "the --items session" if sid is None else f"session {printable(str(sid), 40)}"


def _where(sid) -> str:
    return "in --items" if sid is None else f"session {printable(str(sid), 40)}"


def parse_ids(text: str) -> list[str]:
    """`--items 12,55,9` (or spaces) -> ["12", "55", "9"]. Two separators with nothing between
    them (`12,,9`) are a ParamsError: an item was most likely left out, and dropping the gap would
    score a different session without a word."""
    tokens = _item_tokens(text)
    if not tokens or "" in tokens:
        where = "it is empty" if not tokens else "two separators have no item between them"
        raise ParamsError(f"--items {text!r}: {where}",
                          "list the session's items in order, one separator between each: --items 12,55,9")
    return tokens


def _item_tokens(text: str) -> list[str]:
    """A session's items as text -> its ids ([] for blank text); an empty string among them marks two
    separators with nothing between them, which the callers refuse."""
    text = text.strip()
    return _ONE_SEPARATOR.split(text) if text else []


def check_out(out: str | Path) -> Path:
    """The top-K file `out`, checked before any scoring: a .parquet path that is not a folder, not
    inside a folder another seqpe stage replaces whole (io.refuse_nested), and new or a top-K file
    seqpe wrote (io.claim_file)."""
    out = Path(out)
    if out.suffix.lower() != ".parquet":
        raise ParamsError(f"output file '{out}' must end in .parquet", "pass e.g. --out topk.parquet")
    refuse_nested(out, "top-K file", "e.g. --out topk.parquet")
    claim_file(out, "top-K file", _is_topk, "--out topk.parquet", _unmarked_topk)
    return out


TOPK_MARK = {"seqpe": "recommend-topk"}     # write_topk's key-value metadata: what _is_topk recognises


def _is_topk(path: Path) -> bool:
    """A top-K file `recommend` wrote: write_topk's columns and its mark in the file's key-value metadata. The
    columns alone took another tool's top-K file (session_id, rank, item, score: the obvious schema for one)
    for seqpe's, and replaced it (walk 41d #3); a user's sessions file, even the --input itself, has neither."""
    import pyarrow.parquet as pq
    meta = pq.ParquetFile(path).metadata.metadata or {}
    return pq.read_schema(path).names == ["session_id", "rank", "item", "score"] and \
        all(meta.get(k.encode()) == v.encode() for k, v in TOPK_MARK.items())


def _unmarked_topk(path: Path) -> Optional[str]:
    """Why a file with the top-K columns but no mark is refused: recommend before session 41 wrote no mark, and
    another tool's top-K file has the same columns, so the two cannot be told apart."""
    import pyarrow.parquet as pq
    if pq.read_schema(path).names == ["session_id", "rank", "item", "score"]:
        return ("has the top-K columns but not the mark `recommend` writes into its files: another tool's top-K file, "
                "or one seqpe wrote before it marked them (2026-11-29), which seqpe does not replace")
    return None


def write_topk(frame: "pl.DataFrame", out: str | Path) -> Path:
    from .io import deferred_interrupt
    out = check_out(out)
    with deferred_interrupt():     # a Ctrl-C at the rename said "nothing was written" of the new file (walk 43c #1)
        write_parquet(out, frame, metadata=TOPK_MARK)
    return out
