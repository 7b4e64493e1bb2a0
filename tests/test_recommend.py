"""pipeline/recommend.py and `seqpe recommend`: a tiny SASRec trained on the embedded sample ranks
items for sessions given as internal ids, raw ids, a Parquet list file or a CSV long file, and
refuses what does not fit its vocabulary."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from pipeline import augment, download, preprocess, recommend
from pipeline import train as stage
from pipeline.errors import DataError, ParamsError
from pipeline.io import read_json, write_json
from pipeline.params import Params, SampleParams



@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(root, run folder, sessions folder) of a 2-epoch SASRec (dim 16) on a 400-session sample. The CLI runs
    from root: from the repo it would find a `dvc repro`'s data/sessions/sample and map ids through it."""
    root = tmp_path_factory.mktemp("rec")
    sample = SampleParams(sessions=400, items=120)
    p = Params()
    p = dataclasses.replace(p, preprocess=dataclasses.replace(p.preprocess, sample=sample),
                            train=dataclasses.replace(p.train, epochs=2, dim=16, lr=0.01, threads=1))
    download.run("sample", root / "raw", p.download, progress=False, sample=sample)
    preprocess.run("sample", root / "raw", root / "sessions", p)
    augment.run("sample", root / "sessions", root / "samples", p)
    os.environ.setdefault("SEQPE_STATE", str(root / "state"))
    stage.run("sample", root / "samples", root / "runs", p, model="sasrec", encoding="lpe", seeds=[1], progress=False)
    stage.run("sample", root / "samples", root / "runs", p, model="pop", seeds=[1], progress=False)
    return root, root / "runs" / "sasrec-lpe" / "seed-1", root / "sessions"


def full_ranking(model, session: list[int]) -> list[tuple[int, float]]:
    """Every item by descending score, ties by ascending id: NumPy on the model's raw scores."""
    seq = torch.zeros(1, model.max_len, dtype=torch.long)
    seq[0, -len(session):] = torch.tensor(session[-model.max_len:])
    with torch.inference_mode():
        scores = model.net(seq)[0, 1:].float().numpy()                 # (n_items,)
    order = np.lexsort((np.arange(len(scores)), -scores))                # score desc, then id asc
    return [(int(i) + 1, float(scores[i])) for i in order]


def test_top_k_is_the_model_ranking_and_the_cli_agrees(trained):
    root, run, sessions = trained
    model = recommend.load_run(run)
    top = model.recommend([[3, 5, 9]], k=10)
    expected = full_ranking(model, [3, 5, 9])[:10]
    assert top.items[0].tolist() == [i for i, _ in expected]
    np.testing.assert_allclose(top.scores[0], [s for _, s in expected], rtol=1e-6)
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "recommend", str(run), "--items", "3,5,9", "-k", "10",
                           "--json"], cwd=trained[0], capture_output=True, text=True, env=dict(os.environ, COLUMNS="80"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [r["rank"] for r in out] == list(range(1, 11)) and [r["item"] for r in out] == top.items[0].tolist()
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "recommend", str(run), "--items", "3 5 9", "-k", "3"],
                          cwd=trained[0], capture_output=True, text=True, env=dict(os.environ, COLUMNS="80"))
    assert proc.returncode == 0 and str(top.items[0][0]) in proc.stdout and "score" in proc.stdout
    assert f"top 3 of {run}\n" in proc.stdout      # one line, not wrapped to the narrow table's width at 80 columns


def test_batch_files_list_and_long_layouts_give_the_same_parquet(trained, tmp_path):
    _, run, _ = trained
    model = recommend.load_run(run)
    sessions = {7: [1, 2, 3], 3: [4], 11: [5, 5, 6, 7, 2]}
    pl.DataFrame({"session_id": list(sessions), "items": list(sessions.values())}).write_parquet(tmp_path / "s.parquet")
    (tmp_path / "s.csv").write_text("session_id,item_id\n" + "".join(
        f"{s},{i}\n" for s, items in sessions.items() for i in items))
    a = model.recommend_frame(recommend.read_sessions(tmp_path / "s.parquet"), k=4)
    b = model.recommend_frame(recommend.read_sessions(tmp_path / "s.csv"), k=4, batch_size=2)   # 2 batches
    recommend.write_topk(a, tmp_path / "a.parquet")
    back = pl.read_parquet(tmp_path / "a.parquet")
    assert back.columns == ["session_id", "rank", "item", "score"] and back.height == 12
    assert back.get_column("session_id").to_list() == [7] * 4 + [3] * 4 + [11] * 4
    assert back.get_column("rank").to_list() == [1, 2, 3, 4] * 3
    assert a.select("session_id", "rank", "item").equals(b.select("session_id", "rank", "item"))
    (tmp_path / "lists.csv").write_text('session_id,items\n7,"1 2 3"\n3,4\n11,"5;5, 6|7 2"\n')   # items as text
    c = model.recommend_frame(recommend.read_sessions(tmp_path / "lists.csv"), k=4)
    assert a.select("session_id", "rank", "item").equals(c.select("session_id", "rank", "item"))
    (tmp_path / "tail.csv").write_text((tmp_path / "s.csv").read_text() + "\n\n")   # an editor's trailing blank lines
    d = model.recommend_frame(recommend.read_sessions(tmp_path / "tail.csv"), k=4)
    assert a.select("session_id", "rank", "item").equals(d.select("session_id", "rank", "item"))
    (tmp_path / "mid.csv").write_text("session_id,item_id\n7,1\n\n3,4\n")
    with pytest.raises(DataError, match=r"mid.csv line 3 is blank, between sessions\. Fix: remove that line"):
        recommend.read_sessions(tmp_path / "mid.csv")
    (tmp_path / "gap.csv").write_text('session_id,items\n7,"1 2 3"\n3,"4,,6"\n')
    with pytest.raises(DataError, match=r"gap.csv row 2: items '4,,6' has two separators with nothing between"):
        recommend.read_sessions(tmp_path / "gap.csv")
    (tmp_path / "s.tsv").write_text("session_id\titems\n7\t1 2 3\n")   # walk 28: named as if two good columns
    with pytest.raises(DataError, match=r"s.tsv separates its columns with tabs.*Fix: write the columns separated by "
                                        r"commas"):
        recommend.read_sessions(tmp_path / "s.tsv")
    (tmp_path / "s.json").write_text('[{"session_id": 7, "items": [1, 2, 3]}]\n')   # was parsed as a CSV header
    with pytest.raises(DataError, match=r"s.json is JSON, and the sessions file is Parquet or CSV"):
        recommend.read_sessions(tmp_path / "s.json")
    for sid, items in sessions.items():
        want = [i for i, _ in full_ranking(model, items)[:4]]
        assert back.filter(pl.col("session_id") == sid).get_column("item").to_list() == want


def test_raw_ids_map_through_items_parquet(trained, capsys):
    _, run, sessions = trained
    model = recommend.load_run(run, sessions)
    items = pl.read_parquet(sessions / "items.parquet")
    raw_of = dict(zip(items["item_id"].to_list(), items["raw_id"].to_list()))
    internal = model.recommend_frame(pl.DataFrame({"session_id": [0], "items": [[3, 5, 9]]}), k=5)
    raw = model.recommend_frame(pl.DataFrame({"session_id": [0], "items": [[raw_of[3], raw_of[5], raw_of[9]]]}),
                                k=5, raw_ids=True)
    assert raw.get_column("item").to_list() == [raw_of[i] for i in internal.get_column("item").to_list()]
    with pytest.raises(DataError, match=r"raw item id 'nope' \(session 77\) is not in the vocabulary"):
        model.recommend_frame(pl.DataFrame({"session_id": [500, 77], "items": [[raw_of[3]], ["nope", raw_of[3]]]}),
                              k=5, raw_ids=True)                   # the file's session_id, not its row (1)
    kept = model.recommend_frame(pl.DataFrame({"session_id": [0], "items": [["nope", raw_of[3]]]}), k=5,
                                 raw_ids=True, drop_unknown=True)
    assert "note: drop_unknown left out 1 click of raw ids not in the vocabulary, in 1 of 1 session" \
        in capsys.readouterr().err                                  # was silent (walk 28)
    alone = model.recommend_frame(pl.DataFrame({"session_id": [0], "items": [[raw_of[3]]]}), k=5, raw_ids=True)
    assert kept.equals(alone) and "--drop-unknown" not in capsys.readouterr().err
    with pytest.raises(DataError, match=r"session 4 has no item in the run's vocabulary: drop_unknown dropped all 2 "
                                        r"of its raw ids\. Fix: check they are this dataset's raw ids"):
        model.recommend_frame(pl.DataFrame({"session_id": [4], "items": [["nope", "nix"]]}), k=5, raw_ids=True,
                              drop_unknown=True)


def test_exclude_seen_and_ties_by_lower_id(trained):
    root, run, _ = trained
    model = recommend.load_run(run)
    top = model.recommend([[1, 2, 3]], k=model.n_items, exclude_seen=True)
    listed = top.items[0][top.items[0] >= 0].tolist()
    assert not {1, 2, 3} & set(listed) and len(listed) == model.n_items - 3   # the rest, never the seen
    pop = recommend.load_run(root / "runs" / "pop-none" / "seed-1")
    top = pop.recommend([[1]], k=pop.n_items)
    pairs = list(zip(top.scores[0].tolist(), top.items[0].tolist()))
    assert pairs == sorted(pairs, key=lambda p: (-p[0], p[1]))               # score desc, ties: lower id first
    assert len({s for s, _ in pairs}) < len(pairs)                            # there were ties to break


def test_a_session_longer_than_max_len_is_scored_on_its_tail_and_excluded_whole(trained):
    """--exclude-seen left out only the last train.max_len items of a longer session: its oldest items came back
    at the top of its list (walk 31a), and an id there that is not in the vocabulary passed unchecked."""
    root, run, _ = trained
    model = recommend.load_run(run)
    L = model.max_len
    long = list(range(1, min(L + 11, model.n_items - 1)))                      # distinct items, more than L
    assert len(long) > L
    top = model.recommend([long], k=model.n_items, exclude_seen=True)
    listed = top.items[0][top.items[0] >= 0].tolist()
    assert not set(long) & set(listed) and len(listed) == model.n_items - len(long) and model.cut == 1
    plain = model.recommend([long], k=10)
    assert plain.items[0].tolist() == model.recommend([long[-L:]], k=10).items[0].tolist()   # scored on its tail
    assert model.cut == 0
    with pytest.raises(DataError, match=f"{model.n_items + 5}"):
        model.recommend([[model.n_items + 5] + long], k=10)                  # checked though not scored
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "recommend", str(run), "--items",
                           ",".join(map(str, long)), "-k", "2", "--exclude-seen", "--json"], cwd=root,
                          capture_output=True, text=True, env=dict(os.environ, COLUMNS="200"))
    assert proc.returncode == 0 and not set(long) & {r["item"] for r in json.loads(proc.stdout)}, proc.stderr
    assert proc.stderr.strip() == (f"note: 1 session is longer than the run's train.max_len ({L}): scored on the most "
                                   f"recent {L} items, as the model was trained (every item given is still left out, "
                                   "--exclude-seen)")
    proc = subprocess.run([*proc.args[:-2], "--json"], cwd=root, capture_output=True, text=True,
                          env=dict(os.environ, COLUMNS="200"))         # without it, no word of --exclude-seen
    assert proc.returncode == 0 and proc.stderr.strip().endswith("as the model was trained"), proc.stderr


def test_a_list_cut_short_by_exclude_seen_says_why(trained, tmp_path):
    """-k near n_items with --exclude-seen used to print fewer rows than asked, without a word."""
    root, run, _ = trained
    n = recommend.load_run(run).n_items
    cli = [sys.executable, "-m", "pipeline.cli", "recommend", str(run), "-k", str(n - 1)]
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.run([*cli, "--items", "1,2,3", "--exclude-seen", "--json"], cwd=root, capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 0 and len(json.loads(proc.stdout)) == n - 3, proc.stderr
    assert proc.stderr.strip() == (f"note: {n - 3} listed, fewer than the {n - 1} items asked: the run ranks {n} items "
                                   "and a session's own are left out (--exclude-seen)")
    proc = subprocess.run([*cli, "--items", "1,2,3", "--json"], cwd=root, capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and len(json.loads(proc.stdout)) == n - 1 and not proc.stderr.strip()
    pl.DataFrame({"session_id": [1, 2], "items": [[1], [1, 2, 3]]}).write_parquet(tmp_path / "s.parquet")
    proc = subprocess.run([*cli, "--input", str(tmp_path / "s.parquet"), "--out", str(tmp_path / "top.parquet"),
                           "--exclude-seen", "--quiet"], cwd=root, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert pl.read_parquet(tmp_path / "top.parquet").height == (n - 1) + (n - 3)
    assert proc.stderr.strip() == (f"note: 1 session got fewer than the {n - 1} items asked: the run ranks {n} items "
                                   "and a session's own are left out (--exclude-seen)")
    for flag, said in (([], "listed (the run's evaluate.mask_history: false)"), (["--exclude-seen"], "left out "
                       "(--exclude-seen)")):     # the summary says which (walk 39e #6)
        proc = subprocess.run([*cli, "--input", str(tmp_path / "s.parquet"), "--out", str(tmp_path / "top.parquet"),
                               *flag, "--json"], cwd=root, capture_output=True, text=True, env=env)
        assert json.loads(proc.stdout)["seen items"] == said, proc.stdout + proc.stderr


def test_refusals_are_one_line_errors(trained, tmp_path):
    root, run, sessions = trained
    model = recommend.load_run(run)
    with pytest.raises(DataError, match=rf"item id {model.n_items + 1} is outside 1..{model.n_items}"):
        model.recommend([[1, model.n_items + 1]], k=3)
    with pytest.raises(ParamsError, match=r"k=0 is outside .*Fix: pass e.g. k=10"):
        model.recommend([[1]], k=0)
    with pytest.raises(DataError, match="is not a run folder.*pass one seed's folder"):
        recommend.load_run(run.parent)
    other = tmp_path / "other_sessions"                          # a vocabulary of another size
    other.mkdir()
    write_json(other / "manifest.json", {**read_json(sessions / "manifest.json"), "n_items": model.n_items + 1})
    with pytest.raises(DataError, match="has n_items .* but .* was trained on"):
        recommend.load_run(run, other)
    write_json(other / "manifest.json", {**read_json(sessions / "manifest.json"), "dataset": "elsewhere"})
    with pytest.raises(DataError, match="holds elsewhere's sessions, but .* was trained on"):   # same size, not its data
        recommend.load_run(run, other)
    ctr = tmp_path / "ctr-run"                                   # a CTR run ranks no items
    ctr.mkdir()
    (ctr / "checkpoint.pt").write_bytes((run / "checkpoint.pt").read_bytes())
    write_json(ctr / "run.json", {**read_json(run / "run.json"), "task": "ctr", "protocol": "ctr", "model": "din"})
    with pytest.raises(DataError, match="is a CTR run .* recommend ranks items"):
        recommend.load_run(ctr)
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "recommend", str(ctr), "--items", "1"], cwd=trained[0],
                          capture_output=True, text=True, env=dict(os.environ, COLUMNS="200"))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and "recommend ranks items" in lines[0]
    for typo in ("3,,9", "3,5,", " "):                            # a gap is a left-out item, not a separator
        proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "recommend", str(run), "--items", typo],
                              cwd=trained[0], capture_output=True, text=True, env=dict(os.environ, COLUMNS="200"))
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        said = "--items is empty" if not typo.strip() else f"--items {typo!r}"     # blank: named as empty (43f #4)
        assert proc.returncode == 1 and len(lines) == 1 and said in lines[0], proc.stderr   # ('' itself: usage, 2)
    assert recommend.parse_ids(" 3 , 5;9  12") == ["3", "5", "9", "12"]


def test_a_sessions_folder_re_made_with_as_many_items_is_refused(trained, tmp_path):
    """Only the dataset and n_items were compared: the sample regenerated with another seed (the same item count)
    mapped --raw-ids through a numbering the run never saw, exit 0. run.json names the sessions manifest."""
    import shutil
    root, run, sessions = trained
    made_from = read_json(run / "run.json")["sessions_manifest"]
    assert made_from == read_json(root / "samples" / "manifest.json")["sessions_manifest"]
    copy = tmp_path / "copy"
    shutil.copytree(sessions, copy)                            # the same folder elsewhere (a teammate's dvc pull)
    assert recommend.load_run(run, copy).items is not None
    manifest = read_json(sessions / "manifest.json")
    remade = {**manifest, "source": {**manifest.get("source", {}), "generator": {"seed": 6}}}
    write_json(copy / "manifest.json", remade)                 # same dataset, same n_items, other data
    with pytest.raises(DataError, match=r"is not the sessions folder .* samples were made from .*re-made since.*"
                                        r"Fix: pass the sessions folder the run was trained from \(--sessions; load_run's sessions_dir\)"):
        recommend.load_run(run, copy)
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "recommend", str(run), "--items", "1",
                           "--sessions", str(copy)], cwd=root, capture_output=True, text=True,
                          env=dict(os.environ, COLUMNS="200"))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and "re-made since" in lines[0], proc.stderr
    old = tmp_path / "old-run"                                 # a run from before the sha was recorded
    shutil.copytree(run, old)
    write_json(old / "run.json", {k: v for k, v in read_json(run / "run.json").items() if k != "sessions_manifest"})
    assert recommend.load_run(old, copy).items is not None


def test_the_output_file_is_checked_before_any_scoring(trained, tmp_path):
    """A wrong --out was found only after every session was scored (`.csv`), or was written into the
    samples folder (a DVC output replaced whole by the next augment); --out beside --items was ignored."""
    root, run, _ = trained
    src = tmp_path / "in.csv"
    src.write_text("session_id,items\n1,1 2\n")
    (tmp_path / "d.parquet").mkdir()
    cases = ((["--input", str(src), "--out", str(root / "samples" / "top.parquet")],
              "top.parquet is inside", "which holds sample's samples"),
             (["--input", str(src), "--out", str(tmp_path / "top.csv")], "must end in .parquet"),
             (["--input", str(src), "--out", str(tmp_path / "d.parquet")], "d.parquet is a folder"),
             (["--items", "1,2", "--out", str(tmp_path / "top.parquet")], "--out is for --input"),
             (["--input", str(src), "--out", str(tmp_path / "top.parquet"), "-k", "100000"],
              "-k 100000 is outside", "Fix: pass e.g. -k 10"),
             (["--items", "1,2", "--drop-unknown"], "--drop-unknown applies to raw ids"),     # was ignored
             (["--items", "1,2", "--batch-size", "0"], "--batch-size 0 is not positive"),    # was accepted
             (["--items", "1,99999"], "item id 99999 is outside", "(in --items)"))           # was "(session 0)"
    for args, *fragments in cases:
        proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "recommend", str(run), *args], cwd=trained[0],
                              capture_output=True, text=True, env=dict(os.environ, COLUMNS="200"))
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr
        assert all(f in lines[0] for f in fragments), lines[0]
    assert not (root / "samples" / "top.parquet").exists() and not (tmp_path / "top.parquet").exists()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "not seqpe's"])
def test_a_damaged_checkpoint_is_a_one_line_error(trained, tmp_path, damage):
    """torch's unpickler met a damaged checkpoint.pt with a KeyError / RuntimeError traceback in
    `seqpe recommend` and `seqpe encodings inspect --run`."""
    _, run, _ = trained
    bad = tmp_path / "seed-1"
    bad.mkdir()
    record = json.loads((run / "run.json").read_text())
    (bad / "run.json").write_text(json.dumps(record))                 # with its files' sha256: refused as edited
    good = (run / "checkpoint.pt").read_bytes()
    (bad / "checkpoint.pt").write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(DataError, match=r"checkpoint.pt is not the file its run.json recorded \(another sha256"):
        recommend.load_run(bad)
    del record["sha256"]                                               # a run written before run.json kept them:
    (bad / "run.json").write_text(json.dumps(record))                 # the damage is named by what torch reads
    if damage == "garbage":
        (bad / "checkpoint.pt").write_bytes(b"junk\n")
    elif damage == "truncated":
        (bad / "checkpoint.pt").write_bytes(good[: len(good) // 2])
    else:
        torch.save([1, 2], bad / "checkpoint.pt")
    fragment = "is not a seqpe checkpoint" if damage == "not seqpe's" else "is not a readable torch checkpoint"
    with pytest.raises(DataError, match=fragment):
        recommend.load_run(bad)
    for args in (["recommend", str(bad), "--items", "1,2"],
                 ["encodings", "inspect", "lpe", "--lengths", "5", "--run", str(bad), "--out", str(tmp_path / "f")]):
        proc = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=trained[0], capture_output=True, text=True,
                              env=dict(os.environ, COLUMNS="200"))
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 1 and len(lines) == 1 and fragment in lines[0], proc.stderr
    assert not (tmp_path / "f").exists()


@pytest.mark.parametrize("edit", ["no max_len", "train a string", "options a list", "int weight names",
                                  "negative n_items"])
def test_a_checkpoint_whose_config_is_not_seqpes_is_a_one_line_error(trained, tmp_path, edit):
    """Walk 43g #6: a checkpoint torch reads (weights only) whose config lacks max_len, holds a string `train`,
    options as a list, int keys in the weights or a negative n_items was a KeyError / AttributeError /
    RuntimeError traceback in `seqpe recommend`."""
    _, run, _ = trained
    bad = tmp_path / "seed-1"
    bad.mkdir()
    record = json.loads((run / "run.json").read_text())
    record.pop("sha256", None)
    (bad / "run.json").write_text(json.dumps(record))
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    cfg = ckpt["config"]
    if edit == "no max_len":
        del cfg["max_len"]
    elif edit == "train a string":
        cfg["train"] = "x"
    elif edit == "options a list":
        cfg["options"] = [1]
    elif edit == "int weight names":
        ckpt["model"] = {i: v for i, v in enumerate(ckpt["model"].values())}
    else:
        cfg["n_items"] = -5
    torch.save(ckpt, bad / "checkpoint.pt")
    with pytest.raises(DataError, match="checkpoint.pt does not describe a next-item model `seqpe train` wrote"):
        recommend.load_run(bad)


def test_digit_string_ids_of_a_long_session_with_exclude_seen(trained, tmp_path):
    """Walk 43f #1: digit strings are ids everywhere, but those before a long session's last max_len reached
    torch.tensor unconverted under exclude_seen (TypeError); `--items ''` said no --items was given (#4)."""
    root, run, _ = trained
    model = recommend.load_run(run)
    long = list(range(1, model.max_len + 6))
    as_text = model.recommend([[str(i) for i in long]], k=3, exclude_seen=True)
    assert as_text.items.tolist() == model.recommend([long], k=3, exclude_seen=True).items.tolist()
    assert not set(as_text.items[0].tolist()) & set(long)
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "recommend", str(run), "--items", ""], cwd=root,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip() == (     # an empty argument is a usage error (walk 45e #4)
        "error: --items is empty: give the session's items in order, e.g. --items 12,55,9. Fix: see `seqpe recommend "
        "--help`"), proc.stderr


def test_ids_that_are_not_integers_are_refused_not_truncated(trained, tmp_path):
    """int() read a Parquet float 1.9 as item 1, True as 1, '1_0' as 10 and Arabic-Indic digits as ids, and an
    id past int64 was NumPy's OverflowError; a float column's 2.0 stays item 2."""
    _, run, _ = trained
    model = recommend.load_run(run)
    base = model.recommend([[1, 2]], k=3)
    for bad in ([1.9, 2.7], [True, 2], ["1_0"], ["\u0663"]):
        with pytest.raises(DataError, match="is not an integer"):
            model.recommend([bad], k=3)
    with pytest.raises(DataError, match=r"item id 99999999999999999999999 is outside 1\.\."):
        model.recommend([[1, 99999999999999999999999]], k=3)
    assert model.recommend([[1.0, 2.0]], k=3).items.tolist() == base.items.tolist()
    pl.DataFrame({"items": [[1.9, 2.7]], "session_id": [10]}).write_parquet(tmp_path / "f.parquet")
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "recommend", str(run), "--input",
                           str(tmp_path / "f.parquet"), "--out", str(tmp_path / "o.parquet")], cwd=trained[0],
                          capture_output=True, text=True, env=dict(os.environ, COLUMNS="200"))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and "item id '1.9' is not an integer (session 10)" in lines[0], \
        proc.stderr
    assert not (tmp_path / "o.parquet").exists()


def test_a_bad_item_in_a_file_names_its_session_and_an_empty_cell_is_called_empty(trained):
    """A file of thousands of sessions said only "item id 99999 is outside 1..N" (the --raw-ids path named the
    session); an empty CSV cell or a Parquet null was "item id 'None' is not an integer"."""
    _, run, _ = trained
    model = recommend.load_run(run)
    n = model.n_items
    for frame, said in ((pl.DataFrame({"session_id": ["u1", "u3"], "items": [[1, 2], [3, n + 1]]}),
                         rf"item id {n + 1} is outside 1\.\.{n:,}, .* \(session u3\)"),
                        (pl.DataFrame({"session_id": ["u1", "u3"], "items": [["1"], ["7", "x"]]}),
                         r"item id 'x' is not an integer \(session u3\)"),
                        (pl.DataFrame({"session_id": [4, 5], "items": [[1], [2, None]]}),
                         r"an item id is empty \(session 5\). Fix: fill or drop the rows without an item id")):
        with pytest.raises(DataError, match=said):
            model.recommend_frame(frame, k=3)


def test_a_damaged_items_file_is_named(trained, tmp_path):
    """items.parquet (raw ids) is checked against the sessions manifest's sha256 before it is read."""
    import shutil
    _, run, sessions = trained
    copy = tmp_path / "sessions"
    shutil.copytree(sessions, copy)
    items = copy / "items.parquet"
    items.write_bytes(items.read_bytes()[:100])
    with pytest.raises(DataError, match=r"shard .*items.parquet is missing or does not match its manifest sha256"):
        recommend.load_run(run, copy)


def test_device_errors_name_the_option_the_user_set(trained, monkeypatch):
    root, run, sessions = trained
    from pipeline.train.setup import pick_device
    with pytest.raises(ParamsError, match="'tpu' is not a device"):
        recommend.load_run(run, device="tpu")
    for other in ("meta", "mps"):           # names torch knows: a RuntimeError traceback when scoring
        with pytest.raises(ParamsError, match=f"'{other}' is a {other} device, and seqpe runs on CPU or CUDA"):
            recommend.load_run(run, device=other)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ParamsError, match="--device is 'cuda' but no CUDA device.*pass --device auto"):
        recommend.load_run(run, device="cuda", cli=True)
    with pytest.raises(ParamsError, match="device is 'cuda' but no CUDA device.*pass device='auto'"):
        recommend.load_run(run, device="cuda")                          # from Python, its keyword (walk 41f #9)
    assert recommend.load_run(run, device=None).device == recommend.load_run(run, device=torch.device("cpu")).device
    with pytest.raises(ParamsError, match="train.device is 'cuda' .*set train.device: auto"):
        pick_device("cuda")
    # a machine with one GPU: cuda:1 would only fail later, inside torch, with a traceback
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ParamsError, match=r"'cuda:1' but this machine has 1 CUDA device.*use cuda:0 to cuda:0, or "
                                          r"set train.device: auto"):
        pick_device("cuda:1")
    assert pick_device("cuda:0") == torch.device("cuda:0")


def test_a_sessions_input_that_is_not_a_file_is_named_for_what_it_is(tmp_path):
    """A folder (or a pipe) passed as --input was reported as a file that "does not exist"."""
    with pytest.raises(DataError, match="sessions file .* is a folder"):
        recommend.read_sessions(tmp_path)
    with pytest.raises(DataError, match="sessions file .*nope.parquet does not exist"):
        recommend.read_sessions(tmp_path / "nope.parquet")
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(DataError, match="is not a regular file"):
        recommend.read_sessions(tmp_path / "pipe")


def test_recommend_for_leave_one_out_users_by_raw_id(trained, tmp_path):
    """`--user RAW_ID`: the user's whole sequence (test split, via users.parquet) is the session; a dataset
    without users (srgnn sessions) and an unknown user are one-line errors."""
    rng = np.random.default_rng(3)
    lines = [f"{u}::{i}::4::{t}" for u in range(101, 141) for t, i in
             enumerate(rng.choice(np.arange(1, 25), size=8, replace=False).tolist())]
    raw = tmp_path / "raw"
    (raw / "ml-1m").mkdir(parents=True)
    (raw / "ml-1m" / "ratings.dat").write_text("\n".join(lines) + "\n", encoding="latin-1")
    write_json(raw / "source.json", {"dataset": "ml_1m", "source": "ml_1m", "sha256": "0" * 64})
    p = Params()
    p = dataclasses.replace(p, preprocess=dataclasses.replace(p.preprocess, k_core=2),
                            augment=dataclasses.replace(p.augment, max_len=5),
                            train=dataclasses.replace(p.train, epochs=1, dim=8, max_len=5, threads=1))
    preprocess.run("ml_1m", raw, tmp_path / "sessions", p)
    augment.run("ml_1m", tmp_path / "sessions", tmp_path / "samples", p)
    stage.run("ml_1m", tmp_path / "samples", tmp_path / "runs", p, model="sasrec", encoding="lpe", seeds=[1],
              progress=False)
    run, sessions = tmp_path / "runs" / "sasrec-lpe" / "seed-1", tmp_path / "sessions"
    model = recommend.load_run(run, sessions)
    users = pl.read_parquet(sessions / "users.parquet")
    sid = dict(zip(users["raw_id"].cast(pl.String).to_list(), users["session_id"].to_list()))
    test = dict(read_json_rows(sessions))
    frame = model.user_sessions(["117", "102"])
    assert frame["session_id"].to_list() == ["117", "102"]
    assert model.user_sessions("117").equals(model.user_sessions(["117"]))   # one id, not its characters (41f #8)
    assert frame["items"].to_list() == [test[sid["117"]], test[sid["102"]]] and len(test[sid["117"]]) == 8
    want = model.recommend([test[sid["117"]]], k=4, exclude_seen=True)
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "recommend", str(run), "--user", " 117", "-k", "4",
                           "--sessions", str(sessions), "--exclude-seen", "--json"], cwd=tmp_path,
                          capture_output=True, text=True, env=dict(os.environ, COLUMNS="120"))
    assert proc.returncode == 0 and "fewer" not in proc.stderr, proc.stderr    # " 117" is 117 (walk 41a #3)
    assert [(r["user"], r["item"]) for r in json.loads(proc.stdout)] == [("117", i) for i in want.items[0].tolist()]
    raw_of = dict(zip(model.items["item_id"].to_list(), model.items["raw_id"].to_list()))
    out = tmp_path / "topk.parquet"
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "recommend", str(run), "--user", "117", "--user",
                           "102", "-k", "4", "--sessions", str(sessions), "--exclude-seen", "--raw-ids", "--out",
                           str(out)], cwd=tmp_path, capture_output=True, text=True, env=dict(os.environ, COLUMNS="120"))
    assert proc.returncode == 0, proc.stderr
    top = pl.read_parquet(out)
    assert top["session_id"].to_list() == ["117"] * 4 + ["102"] * 4
    assert top["item"].to_list()[:4] == [raw_of[i] for i in want.items[0].tolist()]
    for args, message in ((["--user", "999"], "user '999' not in .*users.parquet \\(40 users"),
                          (["--user", "117", "--items", "1,2"], "give one of --items .* not --items and --user")):
        proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "recommend", str(run), *args, "--sessions",
                               str(sessions)], cwd=tmp_path, capture_output=True, text=True,
                              env=dict(os.environ, COLUMNS="300"))
        err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode in (1, 2) and len(err) == 1 and re.search(message, err[0]), proc.stderr
    # an import of SASRec-format files (walk 40b #3): its session ids are the file's user ids, no users.parquet
    from pipeline import formats
    (tmp_path / "Beauty.txt").write_text("".join(f"{u} {i}\n" for u in (7, 9) for i in (1, 2, 3, 4, 2)))
    formats.import_dataset("mine", tmp_path / "Beauty.txt", "sasrec", tmp_path / "imp_s", tmp_path / "imp_a", p)
    imported = recommend.RunModel(run, model.net, model.record, model.device, sessions_dir=tmp_path / "imp_s")
    assert imported.user_sessions(["9", "7"]).rows() == [("9", [1, 2, 3, 4, 2]), ("7", [1, 2, 3, 4, 2])]
    with pytest.raises(DataError, match=r"user '8' not in the test split of .*imp_s \(2 users kept .*Fix: pass raw "
                                        r"user ids as in the raw log \(the imported file's user ids\)"):
        imported.user_sessions(["8"])
    with pytest.raises(ParamsError, match="users '7' and '007' are the same user"):      # walk 41a #4
        imported.user_sessions(["7", "007"])
    _, srgnn_run, srgnn_sessions = trained                 # sessions, not users: no users.parquet
    with pytest.raises(DataError, match=r"has no users.parquet: its srgnn sessions are not users. Fix: recommend for "
                                        r"sessions with recommend\(\) or recommend_frame\(\)"):
        recommend.load_run(srgnn_run, srgnn_sessions).user_sessions(["1"])


def read_json_rows(sessions: Path) -> list[tuple[int, list[int]]]:
    """(session_id, items) of a sessions folder's test split."""
    return pl.read_parquet(sessions / "test" / "*.parquet").select("session_id", "items").rows()


def test_the_python_api_refuses_what_it_cannot_read_in_one_line_naming_its_keywords(trained):
    """Walk 41f: from a notebook, a session given as a string was scored as its characters ("125" as [1, 2, 5]),
    a flat list of ids, k=5.0, load_run(None), a frame of other columns or one user id as a string were
    TypeErrors or wrong messages, and errors named the CLI's flags."""
    root, run, sessions = trained
    model = recommend.load_run(run)
    for bad, match in ((["125"], r"session 0 is the string '125', not a list of item ids"),
                       ([12, 55, 9], "one flat list of item ids"), (None, "sessions is None"),
                       ([None], "one flat list|session 0 is None"), (np.array([12, 55]), "one flat array")):
        with pytest.raises(DataError, match=match):
            model.recommend(bad, k=3)
    with pytest.raises(DataError, match="sessions is a DataFrame, and recommend.. takes a list.*recommend_frame"):
        model.recommend(pl.DataFrame({"session_id": [1, 1], "item_id": [12, 55]}), k=3)    # walk 41h #5
    assert model.recommend(torch.tensor([[12, 55]]), k=3).items.tolist() == \
        model.recommend([[12, 55]], k=3).items.tolist()
    with pytest.raises(DataError, match="one flat list of item ids"):
        model.recommend(torch.tensor([12, 55]), k=3)
    with pytest.raises(DataError, match="sessions is 5, not a list of sessions"):        # a 0-d tensor (41j #10)
        model.recommend(torch.tensor(5), k=3)
    assert model.recommend(pl.Series([[12, 55]]), k=3).items.tolist() == \
        model.recommend([[12, 55]], k=3).items.tolist()                   # a Series of sessions (41j #8)
    assert model.recommend(iter([[12, 55]]), k=3).items.tolist() == model.recommend([[12, 55]], k=3).items.tolist()
    assert model.recommend(np.array([[12, 55]]), k=3).items.tolist() == model.recommend([[12, 55]], k=3).items.tolist()
    assert model.recommend([[12, 55]], k=3.0).items.shape == (1, 3)                 # an integral float is a count
    for k, match in ((2.5, "k is 2.5, not a whole number"), (None, "k is None"), ("5", "k is '5'")):
        with pytest.raises(ParamsError, match=match):
            model.recommend([[12, 55]], k=k)
    with pytest.raises(ParamsError, match="batch_size is 2.5"):
        model.recommend([[12, 55]], k=3, batch_size=2.5)
    frame = model.recommend_frame(pl.DataFrame({"session_id": [7], "items": ["12 55"]}), k=3)     # text, as CSV
    assert frame.get_column("item").to_list() == model.recommend([[12, 55]], k=3).items[0].tolist()
    long = model.recommend_frame(pl.DataFrame({"session_id": [7, 7], "item_id": [12, 55]}).lazy(), k=3)
    assert long.equals(frame)
    for bad, match in ((pl.DataFrame({"sid": [1], "item_list": [[12]]}), "has columns sid, item_list"),
                       (pl.DataFrame({"session_id": [1, 1], "items": [[12], [55]]}), "lists a session_id twice"),
                       (pl.DataFrame({"session_id": [1, 2], "items": [[12], None]}), "without an id or items"),
                       ({"session_id": [1], "items": [[12]]}, "sessions is a dict, not a Polars DataFrame")):
        with pytest.raises((DataError, ParamsError), match=match):
            model.recommend_frame(bad, k=3)
    for bad in (None, 3, b"x"):
        with pytest.raises(ParamsError, match="run_dir is .*, not a folder path"):
            recommend.load_run(bad)
    with pytest.raises(DataError, match=r"samples is a samples folder.*Fix: pass data/sessions/sample"):
        recommend.load_run(run, root / "samples")
    with pytest.raises(ParamsError, match=r"raw ids need .*Fix: pass the sessions folder \(load_run\(run, sessions_dir"):
        model.to_raw(np.array([[1, 2]]))
    assert recommend.load_run(run, sessions).to_raw([[1, -1]])[0][1] is None
    u16 = root / "u16.csv"                                  # walk 41d #6: the user's own file, not a download
    u16.write_text("session_id,item_id\n1,3\n", encoding="utf-16")
    with pytest.raises(DataError, match=r"is UTF-16 text .*Fix: write it as a UTF-8 CSV with a header line"):
        recommend.read_sessions(u16)
    from pipeline import report
    with pytest.raises(DataError, match=r"no run.json under .*samples|samples is a samples folder|holds .* samples"):
        report.run(str(root / "samples"))                                 # one folder, not its characters (41h #4)
    assert [r["name"] for r in report.run(str(root / "runs"))] == [r["name"] for r in report.run([root / "runs"])]
    with pytest.raises(ParamsError, match="no runs folder given"):
        report.run([])


def test_each_batch_is_scored_at_its_own_width(trained):
    """Walk 41a #10 (a guard for walk 40h #8): a batch is scored at the width of its longest session, not at
    max_len, as the run was scored (train.trim_padding), with the same lists."""
    root, run, sessions = trained
    model = recommend.load_run(run)
    widths = []
    real = model.net

    class Recording(torch.nn.Module):
        def forward(self, seqs):
            widths.append(seqs.shape[1])
            return real(seqs)
    lists = [[1, 2], [3], [4, 5, 6], [7]]
    model.net = Recording()
    top = model.recommend(lists, k=5, batch_size=2)
    assert widths == [2, 3]
    model.net, model.trim = real, False
    untrimmed = model.recommend(lists, k=5, batch_size=2)
    assert top.items.tolist() == untrimmed.items.tolist()
    assert np.allclose(top.scores, untrimmed.scores, atol=1e-5)
