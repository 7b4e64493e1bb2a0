"""Outputs never destroy a user's files (issue 13.1), inputs are the kind of folder a stage needs
(13.2), and a killed run's leftovers are swept by the next run of the stage (13.4).

Every command here is the one the hardening report reproduced the problem with."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import io
from pipeline.errors import DataError
from test_cli import ROOT, assert_one_line_error, seqpe

SMALL = ["--set", "preprocess.sample.sessions=300", "--set", "preprocess.sample.items=100"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """raw / sessions / samples of a small `sample` under one folder."""
    d = tmp_path_factory.mktemp("prepared")
    for argv in (["download", "sample", str(d / "raw")],
                 ["preprocess", "sample", str(d / "raw"), str(d / "sessions")],
                 ["augment", "sample", str(d / "sessions"), str(d / "samples")]):
        proc = seqpe(*argv, "--quiet", *SMALL)
        assert proc.returncode == 0, proc.stderr
    return d


def user_folder(path: Path) -> Path:
    path.mkdir()
    (path / "paper.tex").write_text("draft")
    return path


def test_augment_into_a_users_folder_is_refused_and_touches_nothing(prepared, tmp_path):
    mywork = user_folder(tmp_path / "mywork")
    proc = seqpe("augment", "sample", str(prepared / "sessions"), str(mywork), "--quiet")
    assert_one_line_error(proc, "mywork holds files seqpe did not write (paper.tex)", "Fix:", "or delete ")
    assert sorted(p.name for p in mywork.iterdir()) == ["paper.tex"]
    (mywork / "chapters").mkdir()                        # folders of work (data/, data/sessions): no such hint
    proc = seqpe("augment", "sample", str(prepared / "sessions"), str(mywork), "--quiet")
    assert_one_line_error(proc, "mywork holds files seqpe did not write")
    assert "delete" not in proc.stderr                   # (walk 40e #4)
    (mywork / "chapters").rmdir()
    assert (mywork / "paper.tex").read_text() == "draft"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_the_working_directory_is_never_replaced(prepared, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    proc = seqpe("augment", "sample", str(prepared / "sessions"), str(project), "--quiet", cwd=project)
    assert_one_line_error(proc, "params.yaml")
    assert "delete" not in proc.stderr                   # walk 40b #5: "(or delete . yourself if ...)"
    assert (project / "params.yaml").read_text() == (ROOT / "params.yaml").read_text()


@pytest.mark.parametrize("stage", ["download", "preprocess", "augment", "import"])
def test_every_writing_stage_refuses_a_users_folder_and_a_file(stage, prepared, tmp_path):
    dst = user_folder(tmp_path / "dst")
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    for target, fragment in ((dst, "paper.tex"), (afile, "is a file")):
        if stage == "download":
            argv = ["download", "sample", str(target), *SMALL]
        elif stage == "preprocess":
            argv = ["preprocess", "sample", str(prepared / "raw"), str(target)]
        elif stage == "augment":
            argv = ["augment", "sample", str(prepared / "sessions"), str(target)]
        else:
            srgnn = tmp_path / "srgnn"
            if not srgnn.exists():
                assert seqpe("export", "sample", str(srgnn), "--sessions", str(prepared / "sessions")).returncode == 0
            argv = ["import", "again", str(srgnn), "--sessions", str(target), "--samples", str(tmp_path / "a2")]
        assert_one_line_error(seqpe(*argv, "--quiet"), fragment)
    assert (dst / "paper.tex").read_text() == "draft" and sorted(p.name for p in dst.iterdir()) == ["paper.tex"]
    assert afile.read_text() == "keep me"
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")], "no hidden .old / .tmp left"


def test_a_stage_replaces_its_own_output_and_an_empty_folder(prepared, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert seqpe("augment", "sample", str(prepared / "sessions"), str(empty), "--quiet").returncode == 0
    first = (empty / "manifest.json").read_bytes()
    assert seqpe("augment", "sample", str(prepared / "sessions"), str(empty), "--quiet").returncode == 0
    assert (empty / "manifest.json").read_bytes() == first


def test_another_stages_or_datasets_folder_is_not_replaced(prepared, tmp_path):
    # the samples stage would overwrite the sessions it reads
    proc = seqpe("augment", "sample", str(prepared / "sessions"), str(prepared / "sessions"), "--quiet")
    assert_one_line_error(proc, "holds sample's sessions", "not the samples of 'sample'")
    # another dataset's raw folder
    other = tmp_path / "raw_other"
    other.mkdir()
    (other / "source.json").write_text(json.dumps({"dataset": "diginetica", "files": {}}))
    assert_one_line_error(seqpe("download", "sample", str(other), "--quiet", *SMALL), "diginetica's raw data")
    assert json.loads((other / "source.json").read_text())["dataset"] == "diginetica"


def test_train_on_a_sessions_folder_names_the_samples_folder(prepared, tmp_path):
    proc = seqpe("train", "sample", str(prepared / "sessions"), str(tmp_path / "runs"), "--model", "pop", "--quiet")
    assert_one_line_error(proc, "holds sessions, but `seqpe train` reads samples", "data/samples/sample")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("argv,fragment", [
    (["augment", "sample", "{samples}", "{out}"], "holds samples, but `seqpe augment` reads sessions"),
    (["augment", "sample", "{raw}", "{out}"], "holds raw data (source.json), but `seqpe augment` reads sessions"),
    (["preprocess", "sample", "{sessions}", "{out}"], "`seqpe preprocess` reads a raw folder"),
    (["train", "sample", "{raw}", "{out}", "--model", "pop"], "holds raw data (source.json), but `seqpe train`"),
    # `seqpe import x data/sessions/sample` suggested its manifest.json as "the SASRec text file itself"
    (["import", "x", "{sessions}", "--sessions", "{out}/s", "--samples", "{out}/a"],
     "sessions holds sample's sessions (manifest.json), written by seqpe: nothing to import. Fix: use it as it "
     "is: `seqpe augment sample"),
    (["import", "x", "{samples}", "--format", "srgnn", "--sessions", "{out}/s", "--samples", "{out}/a"],
     "nothing to import. Fix: use it as it is: `seqpe train sample"),
    (["import", "x", "{raw}", "--sessions", "{out}/s", "--samples", "{out}/a"],
     "raw holds sample's raw data (source.json), which no import format reads. Fix: run `seqpe preprocess sample"),
    (["import", "x", "{samples}/manifest.json", "--sessions", "{out}/s", "--samples", "{out}/a"],
     "manifest.json is JSON, not SASRec / S3-Rec text (a seqpe folder's record)"),
])
def test_inputs_of_the_wrong_kind_are_named(argv, fragment, prepared, tmp_path):
    paths = {"samples": prepared / "samples", "sessions": prepared / "sessions", "raw": prepared / "raw",
             "out": tmp_path / "out"}
    proc = seqpe(*[a.format(**{k: str(v) for k, v in paths.items()}) for a in argv], "--quiet")
    assert_one_line_error(proc, fragment)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv,fragment", [
    # a split folder inside a prepared one: the fix names the prepared folder itself
    (["train", "sample", "{samples}/valid", "{out}", "--model", "pop"], "pass the prepared folder {samples} itself"),
    (["augment", "sample", "{sessions}/train", "{out}"], "pass the prepared folder {sessions} itself"),
    (["stats", "sample", "{samples}/train"], "pass the prepared folder {samples} itself"),
    # the folder holding every dataset's folder: the fix lists them
    (["train", "sample", "{all_samples}", "{out}", "--model", "pop"], "pass one dataset's folder inside it: {all_samples}/sample"),
    (["stats", "sample", "{all_samples}"], "pass one dataset's folder inside it: {all_samples}/sample"),
])
def test_a_folder_one_level_off_names_the_prepared_one(argv, fragment, prepared, tmp_path):
    everything = tmp_path / "samples"
    everything.mkdir()
    (everything / "notes").mkdir()
    os.symlink(prepared / "samples", everything / "sample")
    paths = {"samples": str(prepared / "samples"), "sessions": str(prepared / "sessions"), "out": str(tmp_path / "out"),
             "all_samples": str(everything)}
    quiet = [] if argv[0] == "stats" else ["--quiet"]
    proc = seqpe(*[a.format(**paths) for a in argv], *quiet)
    assert_one_line_error(proc, fragment.format(**paths))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv,fragment", [
    # the dataset name picks the protocol, the preset's variant and the label every output carries:
    # data of another dataset under it would be mislabelled (trained, reported) without a word
    (["preprocess", "diginetica", "{raw}", "{out}"], "holds the raw data of 'sample' (source sample), not of 'diginetica'"),
    (["augment", "diginetica", "{sessions}", "{out}"], "holds sample's sessions, but the command names 'diginetica'"),
    (["train", "diginetica", "{samples}", "{out}", "--model", "pop"], "holds sample's samples, but the command names"),
    (["export", "diginetica", "{out}", "--sessions", "{sessions}"], "holds sample's sessions, but the command names"),
    (["stats", "diginetica", "{samples}"], "holds sample's samples, but the command names 'diginetica'"),
])
def test_another_datasets_input_is_refused(argv, fragment, prepared, tmp_path):
    paths = {k: str(prepared / k) for k in ("raw", "sessions", "samples")} | {"out": str(tmp_path / "out")}
    proc = seqpe(*[a.format(**paths) for a in argv], *([] if argv[0] == "stats" else ["--quiet"]))
    assert_one_line_error(proc, fragment, f"`seqpe {argv[0]} sample ")      # the fix names the dataset it holds
    assert not (tmp_path / "out").exists()


def test_a_users_file_inside_a_stages_own_folder_is_not_deleted_by_a_rerun(prepared, tmp_path):
    """`echo precious > data/sessions/X/notes.txt; seqpe preprocess X` replaced the folder, notes and all,
    although the README says a folder holding anything else is refused."""
    out = tmp_path / "samples"
    assert seqpe("augment", "sample", str(prepared / "sessions"), str(out), "--quiet").returncode == 0
    for extra in ("notes.txt", "train/mine.parquet"):
        (out / extra).write_text("precious")
        before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
        proc = seqpe("augment", "sample", str(prepared / "sessions"), str(out), "--quiet")
        assert_one_line_error(proc, f"samples holds samples (manifest.json) and files seqpe did not write ({extra}); "
                                    f"`seqpe augment` replaces that folder whole", f"Fix: move {extra} out of {out}")
        assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
        (out / extra).unlink()
    run = tmp_path / "runs" / "pop-none" / "seed-1"
    base = ["train", "sample", str(prepared / "samples"), str(tmp_path / "runs"), "--model", "pop", "--seed", "1",
            "--quiet"]
    assert seqpe(*base).returncode == 0
    (run / "plot.png").write_bytes(b"mine")
    assert_one_line_error(seqpe(*base, "--set", "train.max_len=20"), "files seqpe did not write (plot.png)")
    assert (run / "plot.png").read_bytes() == b"mine"
    raw = tmp_path / "raw"
    shutil.copytree(prepared / "raw", raw)
    (raw / "README.txt").write_text("mine")
    proc = seqpe("download", "sample", str(raw), "--quiet", *SMALL, "--set", "preprocess.sample.sessions=301")
    assert_one_line_error(proc, "files seqpe did not write (README.txt)")


def test_live_curves_never_replace_a_run_or_a_users_folder(prepared, tmp_path):
    """`train --live RUNS/sasrec-rope` deleted the trained seed-1 there (checkpoint and all): write_curves
    replaced LIVE/seed-N whole, with no check of what it held. Its own curves are replaced."""
    runs = tmp_path / "runs"
    base = ["train", "sample", str(prepared / "samples"), str(runs), "--model", "pop", "--seed", "1", "--quiet"]
    assert seqpe(*base).returncode == 0
    config = runs / "pop-none"
    before = sorted(p.name for p in (config / "seed-1").iterdir())
    proc = seqpe("train", "sample", str(prepared / "samples"), str(tmp_path / "other"), "--model", "pop", "--seed",
                 "1", "--quiet", "--live", str(config))
    assert_one_line_error(proc, f"--live {config} holds seed-1, which are not seqpe's curves",
                          "Fix: pass a new or empty folder for the curves, e.g. data/live/sample/pop-none")
    assert sorted(p.name for p in (config / "seed-1").iterdir()) == before and not (tmp_path / "other").exists()
    mine = tmp_path / "mine"
    (mine / "seed-1").mkdir(parents=True)
    (mine / "seed-1" / "notes.txt").write_text("mine")
    assert_one_line_error(seqpe(*base, "--live", str(mine)), "holds seed-1, which are not seqpe's curves")
    live = tmp_path / "live"
    for _ in range(2):                                                  # its own curves: replaced
        assert seqpe(*base, "--live", str(live)).returncode == 0
    assert [p.name for p in live.iterdir()] == ["seed-1"]


def test_a_folder_named_like_a_glob_pattern(prepared, tmp_path):
    """`exp[1]` in an absolute path: Polars read it as a glob pattern, matched nothing, and preprocess, augment,
    train and evaluate ended in a 60-line ComputeError traceback (walk 45b #1)."""
    import polars as pl
    d = tmp_path / "exp[1]"
    raw = ",".join(map(str, pl.read_parquet(prepared / "sessions" / "items.parquet")["raw_id"].head(2).to_list()))
    for argv in (["preprocess", "sample", str(prepared / "raw"), str(d / "sessions"), *SMALL],
                 ["augment", "sample", str(d / "sessions"), str(d / "samples")],
                 ["train", "sample", str(d / "samples"), str(d / "runs"), "--model", "sasrec", "--encoding", "none",
                  "--seed", "1", "--set", "train.epochs=1", "--set", "train.dim=8", "--set", "train.threads=1"],
                 ["evaluate", "sample", str(d / "runs"), str(d / "reports"), "--all", "--samples", str(d / "samples")],
                 ["recommend", str(d / "runs" / "sasrec-none" / "seed-1"), "--items", raw, "--raw-ids",
                  "--sessions", str(d / "sessions")]):
        proc = seqpe(*argv, "--quiet" if argv[0] != "recommend" else "-k", *(() if argv[0] != "recommend" else "3"))
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (argv[0], proc.stderr)
    assert (d / "reports" / "summary.json").is_file()


def test_live_curves_in_a_git_repository_without_a_commit(prepared, tmp_path):
    """`git init && dvc init && dvc repro`, a new project's first steps: dvclive asked git for the revision of an
    empty repository and its SCMError traceback ended the run after the seed had trained (walk 45a #3)."""
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", "."], cwd=project, check=True)
    train = ("train", "sample", str(prepared / "samples"), "runs", "--model", "pop", "--seed", "1", "--quiet",
             "--live", "live")
    proc = seqpe(*train, cwd=project)                  # no DVC here: dvclive ran `dvc init` and staged .dvc/
    assert proc.returncode == 0 and proc.stdout == "", (proc.stdout, proc.stderr)           # (walk 45e #1)
    assert not (project / ".dvc").exists() and not (project / ".dvcignore").exists()
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=project, check=True)
    shutil.rmtree(project / "runs")
    shutil.rmtree(project / "live")
    proc = seqpe(*train, cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert (project / "live" / "seed-1" / "plots" / "metrics" / "valid").is_dir()
    assert (project / "runs" / "pop-none" / "seed-1" / "run.json").is_file()


def test_live_curves_of_another_configuration_are_not_replaced(prepared, tmp_path):
    """`--live L` of sasrec-lpe replaced sasrec-none's seed-1 curves in L without a word (walk 34a), where --metrics
    refuses another configuration's file. Its own curves are replaced: a rerun, other settings of it, a run whose
    folder was deleted but whose resume file (an interrupted run of that folder) still holds the epochs."""
    import os
    runs, live = tmp_path / "runs", tmp_path / "L"
    base = ["train", "sample", str(prepared / "samples"), str(runs), "--model", "sasrec", "--seed", "1", "--quiet",
            "--set", "train.epochs=2", "--set", "train.dim=8", "--set", "train.layers=1", "--live", str(live)]
    assert seqpe(*base, "--encoding", "none").returncode == 0
    before = (live / "seed-1" / "plots" / "metrics" / "train" / "loss.tsv").read_bytes()
    for check in ([], ["--check"]):
        assert_one_line_error(seqpe(*base, "--encoding", "lpe", *check),
                              f"--live {live} holds curves in seed-1 that are not sample sasrec-lpe seed 1's",
                              "Fix: pass this configuration's own folder, e.g. data/live/sample/sasrec-lpe")
    assert (live / "seed-1" / "plots" / "metrics" / "train" / "loss.tsv").read_bytes() == before
    assert not (runs / "sasrec-lpe").exists()
    assert seqpe(*base, "--encoding", "none", "--set", "train.lr=0.01").returncode == 0     # its own: replaced
    cut = [*base, "--encoding", "none", "--set", "train.time_limit=1e-9"]
    assert seqpe(*cut).returncode == 0                        # epoch 1, its resume file kept
    shutil.rmtree(runs / "sasrec-none" / "seed-1")
    env = os.environ.get("SEQPE_STATE")
    assert env and list(Path(env).glob("resume/*.pt"))
    assert seqpe(*cut).returncode == 0                        # the curves are those of the resume file: its own


def test_encoding_figures_are_not_written_into_a_stages_folder(prepared):
    proc = seqpe("encodings", "inspect", "rope", "--lengths", "5", "--out", str(prepared / "sessions"))
    assert_one_line_error(proc, "sessions holds sample's sessions (manifest.json)")
    assert not list((prepared / "sessions").glob("*.png"))


def test_encoding_figures_replace_their_own_and_never_a_users_file(tmp_path):
    """`encodings inspect --out DIR` silently replaced a user's file of the same name; now every file it would
    write is checked first (all or nothing), and only PNGs it wrote itself (their Software text) are replaced."""
    figs = tmp_path / "figs"
    args = ("encodings", "inspect", "ldpe", "--lengths", "4", "6", "--dim", "8", "--out", str(figs), "--quiet")
    assert seqpe(*args).returncode == 0
    first = {p.name: p.read_bytes() for p in figs.iterdir()}
    assert len(first) == 5 and seqpe(*args).returncode == 0                # its own figures: replaced, same bytes
    assert {p.name: p.read_bytes() for p in figs.iterdir()} == first
    (figs / "ldpe-dot-L6.png").write_text("my figure")
    (figs / "ldpe-matrix-L4.png").unlink()
    assert_one_line_error(seqpe(*args), "ldpe-dot-L6.png exists and was not written by `seqpe encodings inspect`")
    assert (figs / "ldpe-dot-L6.png").read_text() == "my figure"
    assert not (figs / "ldpe-matrix-L4.png").exists()                         # nothing written before the check


def test_a_file_passed_where_a_folder_is_meant_is_named_a_file(prepared, tmp_path):
    """`stats sample README.md` said the "folder" had not been prepared; `export` onto a file said it
    "already holds other files" and asked for an empty folder."""
    note = tmp_path / "note.md"
    note.write_text("mine")
    assert_one_line_error(seqpe("stats", "sample", str(note)), "note.md is a file, not a folder of prepared")
    proc = seqpe("export", "sample", str(note), "--format", "srgnn", "--sessions", str(prepared / "sessions"))
    assert_one_line_error(proc, "note.md is a file, and export writes a folder of files there")
    runs = tmp_path / "runs"
    assert seqpe("train", "sample", str(prepared / "samples"), str(runs), "--model", "pop", "--quiet").returncode == 0
    for argv, said in ((("evaluate", "sample", str(note), str(tmp_path / "rep")), "note.md is a file, not a folder"),
                       (("report", str(runs), "--samples", str(note)), "note.md is a file, not a folder. Fix: pass"),
                       (("preprocess", "sample", str(note), str(tmp_path / "s")), "note.md is a file, not a raw")):
        assert_one_line_error(seqpe(*argv), said)           # each said that a file that was there "does not exist"
    assert note.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["note.md", "runs"]


def test_claim_dir_unit_rules(tmp_path):
    io.claim_dir(tmp_path / "missing", "x", "samples")
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / ".a.zip.part").write_bytes(b"12")
    io.claim_dir(tmp_path / "raw", "x", "raw", allow=(".a.zip.part",))
    with pytest.raises(DataError, match="did not write"):
        io.claim_dir(tmp_path / "raw", "x", "raw")
    run = tmp_path / "seed-1"
    run.mkdir()
    (run / "run.json").write_text("{}")
    io.claim_dir(run, None, "run")
    with pytest.raises(DataError, match="training run"):
        io.claim_dir(run, "x", "samples")
    reports = tmp_path / "reports"                   # one level up: named as what it holds, the fix one level down
    (reports / "x").mkdir(parents=True)
    (reports / "x" / "summary.json").write_text('{"dataset": "x", "configs": []}')
    with pytest.raises(DataError, match=r"reports holds the reports folders of datasets \(x\), not one dataset's "
                                        r"evaluation report \(summary.json\). Fix: pass one dataset's folder inside it, "
                                        r"e.g. .*reports/y$"):
        io.claim_dir(reports, "y", "report")
    seeds = tmp_path / "runs" / "x" / "pop-none" / "seed-1"
    seeds.mkdir(parents=True)
    (seeds / "run.json").write_text('{"dataset": "x", "name": "pop-none"}')
    with pytest.raises(DataError, match=r"runs holds training runs \(x\), which seqpe never replaces with its "
                                        r"report output. Fix: pass a folder of its own .* data/reports/x"):
        io.claim_dir(tmp_path / "runs", "x", "report")


@pytest.mark.parametrize("argv, fragment", [
    (["train", "sample", "{p}/samples", "{p}/samples", "--seed", "1"],
     "samples holds sample's samples (manifest.json): `seqpe augment` replaces that folder whole, and the runs"),
    (["train", "sample", "{p}/samples", "{p}/samples/runs", "--seed", "1"],
     "samples/runs is inside {p}/samples, which holds sample's samples"),
    (["preprocess", "sample", "{p}/raw", "{p}/raw/sessions"],
     "raw/sessions is inside {p}/raw, which holds sample's raw data (source.json): `seqpe download`"),
    (["augment", "sample", "{p}/sessions", "{p}/sessions/samples"], "sessions/samples is inside {p}/sessions"),
    (["export", "sample", "{p}/sessions/srgnn", "--sessions", "{p}/sessions"], "sessions/srgnn is inside"),
    (["train", "sample", "{p}/samples", "{p}/runs", "--seed", "1", "--metrics", "{p}/samples/m.json"],
     "samples/m.json is inside {p}/samples, which holds sample's samples (manifest.json): `seqpe augment` "
     "replaces that folder whole, and the metrics file with it"),
    (["train", "sample", "{p}/samples", "{p}/runs", "--seed", "1", "--live", "{p}/sessions"],
     "sessions holds sample's sessions (manifest.json): `seqpe preprocess` replaces that folder whole, and the "
     "curves with it"),
])
def test_an_output_inside_another_stages_folder_is_refused(argv, fragment, prepared):
    """`seqpe train mine data/samples/mine data/samples/mine` wrote its runs into the samples folder (a
    DVC output): the next `seqpe augment` or `dvc checkout` replaced that folder, runs and all."""
    before = {p: p.stat().st_mtime_ns for p in prepared.rglob("*")}
    proc = seqpe(*[a.replace("{p}", str(prepared)) for a in argv], "--quiet")
    assert_one_line_error(proc, fragment.replace("{p}", str(prepared)), "Fix: pass a folder outside it")
    assert {p: p.stat().st_mtime_ns for p in prepared.rglob("*")} == before   # nothing written, nothing touched


def test_a_users_file_is_never_replaced_by_a_report_metrics_or_top_k_file(prepared, tmp_path):
    """`seqpe report --out README.md` and `train --metrics notes.md` used to overwrite the user's file; a
    file is replaced only when its content shows seqpe wrote it (the same command run again)."""
    runs, notes = tmp_path / "runs", tmp_path / "notes.md"
    notes.write_text("my notes\n")
    base = ["train", "sample", str(prepared / "samples"), str(runs), "--model", "pop", "--seed", "1", "--quiet"]
    proc = seqpe(*base, "--metrics", str(notes))
    assert_one_line_error(proc, "notes.md exists and is not a metrics file seqpe wrote",
                          "Fix: pass a new file path, e.g. data/metrics/sample/pop-none.json")
    assert notes.read_text() == "my notes\n" and not runs.exists()     # refused before training
    metrics = tmp_path / "m.json"
    for _ in range(2):                                                  # its own file: replaced
        assert seqpe(*base, "--metrics", str(metrics)).returncode == 0
    rec = json.loads(metrics.read_text())
    assert set(rec) == {"test", "valid", "seeds", "protocol", "configuration"} and rec["protocol"] == "srgnn"
    assert rec["configuration"] == "sample pop-none"
    sampled = tmp_path / "sampled.json"                                 # not comparable with full ranking: labelled
    assert seqpe(*base, "--tag", "c20", "--set", "evaluate.candidates=20", "--metrics", str(sampled)).returncode == 0
    assert json.loads(sampled.read_text())["protocol"] == "srgnn, 20 sampled candidates (uniform)"
    # another configuration's file is not replaced (walk 32b: dmin-cope's numbers became din-cape's, silently)
    proc = seqpe(*base, "--tag", "c20", "--set", "evaluate.candidates=20", "--metrics", str(metrics))
    assert_one_line_error(proc, "m.json holds the metrics of sample pop-none, and this run is sample pop-none-c20",
                          "Fix: pass this configuration's own file, e.g. data/metrics/sample/pop-none-c20.json")
    assert json.loads(metrics.read_text()) == rec
    for out in (notes, tmp_path / "data.csv"):
        out.write_text("my notes\n")
        proc = seqpe("report", str(runs), "--out", str(out), "--quiet")
        assert_one_line_error(proc, f"{out.name} exists and is not a report seqpe wrote", "Fix: pass a new file path")
        assert out.read_text() == "my notes\n"
    for name in ("r.md", "r.csv"):
        for _ in range(2):
            assert seqpe("report", str(runs), "--out", str(tmp_path / name), "--quiet").returncode == 0
    import polars as pl
    from pipeline import recommend
    sessions = tmp_path / "sessions.parquet"
    pl.DataFrame({"session_id": [1], "items": [[1, 2]]}).write_parquet(sessions)
    with pytest.raises(DataError, match="sessions.parquet exists and is not a top-K file seqpe wrote"):
        recommend.check_out(sessions)
    theirs = pl.DataFrame({"session_id": [1], "rank": [1], "item": [3], "score": [0.5]})
    theirs.write_parquet(tmp_path / "top.parquet")          # another tool's top-K file, the same four columns
    with pytest.raises(DataError, match="top.parquet exists and has the top-K columns but not the mark `recommend` "
                                        "writes into its files"):   # walk 41d #3, 41h #6
        recommend.check_out(tmp_path / "top.parquet")
    (tmp_path / "top.parquet").unlink()
    recommend.write_topk(theirs, tmp_path / "top.parquet")
    recommend.check_out(tmp_path / "top.parquet")           # seqpe's own: replaced
    recommend.write_topk(theirs, tmp_path / "top.parquet")
    with pytest.raises(DataError, match="is a folder"):
        recommend.check_out(tmp_path / "dir.parquet" if (tmp_path / "dir.parquet").mkdir() is None else None)


def test_train_refuses_another_datasets_runs_folder_and_the_parent_of_runs_folders(prepared, tmp_path):
    """A seed trained into data/runs/OTHER was reported among OTHER's runs; one trained into data/runs made
    data/runs/pop-none beside the datasets' folders."""
    parent = tmp_path / "runs"
    other = parent / "other" / "pop-none" / "seed-1"
    other.mkdir(parents=True)
    (other / "run.json").write_text(json.dumps({"dataset": "other", "model": "pop", "encoding": "none", "seed": 1}))
    base = ["train", "sample", str(prepared / "samples")]
    proc = seqpe(*base, str(parent / "other"), "--model", "pop", "--seed", "2", "--quiet")
    assert_one_line_error(proc, "other holds other's runs (pop-none), and this run is sample's",
                          "Fix: pass that dataset's own runs folder, e.g. data/runs/sample")
    proc = seqpe(*base, str(parent), "--model", "pop", "--seed", "2", "--quiet")
    assert_one_line_error(proc, "runs holds runs folders (other), not runs", "e.g. data/runs/sample")
    assert sorted(p.name for p in parent.rglob("*")) == ["other", "pop-none", "run.json", "seed-1"]
    assert seqpe(*base, str(parent / "sample"), "--model", "pop", "--seed", "2", "--quiet").returncode == 0


def test_train_refuses_a_runs_folder_that_is_or_lies_in_a_configuration_curves_or_metrics_folder(prepared, tmp_path):
    """`seqpe train sample_ctr SAMPLES data/runs/sample_ctr/din-cape` wrote din-cape/din-none/seed-3 inside the grid's
    DVC output, and the next `dvc repro` of din-cape deleted it; `data/live/X/CONFIG` and `data/metrics/X` passed too,
    and so did a runs folder inside another (which then made that one refused). A metrics file or curves folder in a
    folder above the runs folder, or curves kept inside it, are no reason to refuse it."""
    base = ["train", "sample", str(prepared / "samples")]
    runs = tmp_path / "data" / "runs" / "sample"
    assert seqpe(*base, str(runs), "--model", "pop", "--seed", "1", "--quiet",
                 "--metrics", str(tmp_path / "data/metrics/sample/pop-none.json"),
                 "--live", str(tmp_path / "data/live/sample/pop-none")).returncode == 0
    shutil.copy(tmp_path / "data/metrics/sample/pop-none.json", tmp_path / "pop-none.json")      # strays above
    shutil.copytree(tmp_path / "data/live/sample/pop-none", tmp_path / "data" / "pop-curves")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    for dst, said in ((runs / "pop-none", "is the seeds folder of the configuration pop-none"),
                      (runs / "pop-none" / "mine", "is inside"),
                      (runs / "mine", "which is a runs folder: the runs would go inside another's runs"),
                      (tmp_path / "data/live/sample/pop-none", "is the learning curves (--live) of pop-none"),
                      (tmp_path / "data/live/sample", "is a folder of learning curves (--live)"),
                      (tmp_path / "data/metrics/sample", "is a folder of metrics files (pop-none.json, --metrics)")):
        for check in ([], ["--check"]):
            proc = seqpe(*base, str(dst), "--model", "pop", "--seed", "2", "--quiet", *check)
            assert_one_line_error(proc, said, "Fix: pass that dataset's own runs folder, e.g. data/runs/sample")
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    for _ in range(2):                                   # curves kept inside the runs folder: accepted, and again
        assert seqpe(*base, str(runs), "--model", "pop", "--seed", "2", "--quiet",
                     "--live", str(runs / "curves-pop")).returncode == 0


# --------------------------------------------------------------------------- leftovers of killed runs

KILL_INSIDE = """
import os, signal, sys
from pathlib import Path
from pipeline import io
with io.atomic_dir(Path(sys.argv[1])) as tmp:
    (tmp / "part-00000.parquet").write_bytes(b"x" * 1000)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_runs_temporary_folder_is_swept_by_the_next_run(prepared, tmp_path):
    dst = tmp_path / "samples"
    proc = subprocess.run([sys.executable, "-c", KILL_INSIDE, str(dst)], cwd=ROOT)
    assert proc.returncode == -signal.SIGKILL
    left = [p for p in tmp_path.iterdir() if p.name.startswith(".samples.")]
    assert len(left) == 1 and left[0].name.endswith(".tmp") and not dst.exists()
    assert seqpe("augment", "sample", str(prepared / "sessions"), str(dst), "--quiet").returncode == 0
    assert [p.name for p in tmp_path.iterdir()] == ["samples"]


def test_a_live_runs_temporary_folder_is_left_alone(tmp_path):
    (tmp_path / "out").mkdir()
    live = tmp_path / f".out.p{os.getppid()}.abc12345.tmp"  # the test runner's parent: alive
    live.mkdir()
    dead = tmp_path / ".out.p999999999.q_9x0abc.gen"
    dead.mkdir()
    # walk 41d #1: names that only look like leftovers are a user's (`mv out .out.old`), and were deleted (or, with
    # no `out`, renamed into it by a reader): only mkstemp / mkdtemp's exact shape with a dead pid is swept
    users = [tmp_path / name for name in (".out.old", ".out.xyz123.old", ".out.p999999999.k1.old",
                                          ".out.p999999999.backup_01.tmp", ".out.draft.tmp")]
    for path in users:
        path.mkdir()
        (path / "notes.txt").write_text("mine")
    assert io.sweep_leftovers(tmp_path / "out") == 1
    assert live.is_dir() and not dead.exists() and all((p / "notes.txt").is_file() for p in users)
    (tmp_path / "out").rmdir()
    assert io.put_back(tmp_path / "out") is None and not (tmp_path / "out").exists()


def test_a_writer_killed_between_its_two_renames_loses_nothing(tmp_path, monkeypatch):
    """Walk 35b: where the swap takes two renames (dst to `.old`, then the new folder to dst), a SIGKILL
    between them left no dst, and the next run's sweep deleted the `.old`, the previous output's only copy.
    The swap is now one exchange (renameat2) where the system has it, and the sweep puts a dead writer's `.old`
    back when dst is missing."""
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "who").write_text(d.name)
    assert io._exchange(a, b)                              # Linux (CI): one step, no moment without dst
    assert (a / "who").read_text() == "b" and (b / "who").read_text() == "a"
    dst = tmp_path / "out"
    old = tmp_path / ".out.p999999999.k1abcdef.old"              # what the kill left: the old output aside, no dst
    old.mkdir()
    (old / "manifest.json").write_text("previous")
    newer_tmp = tmp_path / ".out.p999999999.k2abcdef.tmp"
    newer_tmp.mkdir()
    assert io.sweep_leftovers(dst) == 1                    # the .tmp removed; the .old put back
    assert (dst / "manifest.json").read_text() == "previous" and sorted(p.name for p in tmp_path.iterdir()) == \
        ["a", "b", "out"]
    monkeypatch.setattr(io, "_exchange", lambda x, y: False)   # two renames (no renameat2): the same result
    with io.atomic_dir(dst) as tmp:
        (tmp / "manifest.json").write_text("new")
    assert (dst / "manifest.json").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == \
        ["a", "b", "out"]


def test_a_reader_puts_back_the_previous_output_a_killed_writer_left_aside(tmp_path):
    """Where the file system has no exchange, a writer killed between its two renames leaves the previous output
    as `.NAME.p<pid>.*.old` and no NAME: `seqpe train` said the samples folder did not exist, while its only copy
    lay beside it (walk 35c #9). A reader now puts it back (a note says so), as the next writer's sweep does."""
    from test_cli import tiny_samples
    samples = tiny_samples(tmp_path / "samples" / "toyset")
    aside = samples.with_name(".toyset.p999999999.k1abcdef.old")
    samples.rename(aside)
    live = samples.with_name(f".toyset.p{os.getpid()}.k2abcdef.old")      # a live writer's: left alone
    live.mkdir()
    proc = seqpe("train", "toyset", str(samples), str(tmp_path / "runs"), "--model", "pop", "--check")
    assert proc.returncode == 0, proc.stderr
    assert f"note: put back {samples} from {aside.name} beside it" in " ".join(proc.stderr.split())
    assert (samples / "manifest.json").is_file() and not aside.exists() and live.is_dir()
    live.rmdir()
    assert io.put_back(samples) is None                                # there: nothing to do
    # walk 36c: an imported name's folder (the name check refused first) and `seqpe stats` put back too
    project = tmp_path / "project"
    mine = tiny_samples(project / "data" / "samples" / "toyset")
    mine.rename(mine.with_name(".toyset.p999999999.k3abcdef.old"))
    proc = seqpe("stats", "toyset", str(mine), cwd=project)
    assert proc.returncode == 0 and "note: put back" in proc.stderr and mine.is_dir(), proc.stderr
    # a linked folder (data/samples/X -> /big/X): the writer swaps at the target, so its .old lies there, and the
    # link dangled with nothing to put it back (walk 36c #8a)
    big = tiny_samples(tmp_path / "big" / "toyset")
    link = project / "data" / "samples" / "linked"
    link.symlink_to(big, target_is_directory=True)
    big.rename(big.with_name(".toyset.p999999999.k4abcdef.old"))
    assert io.put_back(link) == big.with_name(".toyset.p999999999.k4abcdef.old")
    assert (link / "manifest.json").is_file() and sorted(p.name for p in big.parent.iterdir()) == ["toyset"]
    mine.rename(mine.with_name(".toyset.p999999999.k4abcdef.old"))
    proc = seqpe("train", "toyset", "--model", "pop", "--check", cwd=project)
    assert proc.returncode == 0 and "note: put back data/samples/toyset" in proc.stderr and mine.is_dir(), proc.stderr


def test_folders_that_change_together_are_swapped_in_together(tmp_path, monkeypatch):
    """An import's sessions and samples: the old samples were deleted between the two swaps, so a SIGKILL there
    left the new samples beside the old sessions (walk 35b). atomic_dirs swaps both, then deletes the old
    copies; a swap that fails puts back the one made before it."""
    one, two = tmp_path / "sessions", tmp_path / "samples"
    for d in (one, two):
        d.mkdir()
        (d / "manifest.json").write_text("old")
    removed = []
    real = shutil.rmtree
    monkeypatch.setattr(shutil, "rmtree", lambda p, *a, **k: (removed.append(
        ((one / "manifest.json").read_text(), (two / "manifest.json").read_text())), real(p, *a, **k)))
    with io.atomic_dirs(one, two) as (t1, t2):
        (t1 / "manifest.json").write_text("new")
        (t2 / "manifest.json").write_text("new")
    assert removed == [("new", "new"), ("new", "new")]     # the old copies deleted once both are in
    assert sorted(p.name for p in tmp_path.iterdir()) == ["samples", "sessions"]
    for exchange in (io._exchange, lambda x, y: False):
        monkeypatch.setattr(io, "_exchange", exchange)
        calls = []

        def swap_in(tmp, dst, real_swap=io._swap_in):
            calls.append(dst)
            if dst == two:
                raise OSError(28, "No space left on device")
            return real_swap(tmp, dst)

        monkeypatch.setattr(io, "_swap_in", swap_in)
        with pytest.raises(OSError):
            with io.atomic_dirs(one, two) as (t1, t2):
                (t1 / "manifest.json").write_text("newer")
                (t2 / "manifest.json").write_text("newer")
        monkeypatch.undo()
        assert calls == [one, two]
        assert (one / "manifest.json").read_text() == "new" and (two / "manifest.json").read_text() == "new"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["samples", "sessions"]


def test_a_swap_that_fails_half_way_puts_the_previous_output_back(tmp_path, monkeypatch):
    """atomic_dir moves the old folder aside, then renames the new one in; when that rename failed (a
    second writer of the same folder got there first, a full directory table), the old output sat in a
    `.old` folder that the next run sweeps away, and `dst` was gone."""
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "manifest.json").write_text("previous")
    real = os.replace

    def replace(a, b):
        if Path(a).name.endswith(".tmp") and Path(b) == dst:
            raise OSError(39, "Directory not empty")
        return real(a, b)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(io, "_exchange", lambda a, b: False)      # the two-rename path (no renameat2)
    with pytest.raises(OSError):
        with io.atomic_dir(dst) as tmp:
            (tmp / "manifest.json").write_text("new")
    assert (dst / "manifest.json").read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_two_writers_of_one_pair_swap_it_one_after_the_other(tmp_path):
    """Walk 35b: two `seqpe import` of one name at once interleaved their swaps (A's samples, B's samples, B's
    sessions, A's sessions) and left the sessions of one source beside the samples of the other. The swaps of a
    pair wait for the machine-wide lock of each folder, held here as another writer would hold it."""
    import fcntl
    import hashlib
    import threading
    import time
    one, two = tmp_path / "sessions", tmp_path / "samples"
    name = "out-" + hashlib.sha256(str(two.resolve()).encode()).hexdigest()[:20]
    held = open(io.machine_locks() / name, "a+")
    fcntl.flock(held, fcntl.LOCK_EX)                        # another process is swapping this pair in

    def write():
        with io.atomic_dirs(one, two) as tmps:
            for tmp in tmps:
                (tmp / "manifest.json").write_text("mine")

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(1.0)
    assert writer.is_alive() and not one.exists() and not two.exists()    # built, waiting to swap
    held.close()
    writer.join(30)
    assert (one / "manifest.json").read_text() == (two / "manifest.json").read_text() == "mine"


def test_a_folder_another_command_is_writing_is_refused_for_the_whole_stage(prepared, tmp_path):
    """Walk 44g #2: two `seqpe preprocess` of one dataset at once both reported success, and the last swap replaced
    the other's folder silently. Another process (a real one) holds the folder's writer lock for its whole stage:
    every data stage writing that folder is refused in one line naming it, touching nothing; once it has ended, the
    same command runs. A stage run from Python releases the lock when it returns."""
    dst = tmp_path / "sessions"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
                               "from pipeline import io\nio.claim_dir(Path(sys.argv[1]), 'sample', 'sessions')\n"
                               "print('held', flush=True)\ntime.sleep(120)", str(dst)],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = seqpe("preprocess", "sample", str(prepared / "raw"), str(dst), "--quiet", *SMALL)
        assert_one_line_error(proc, f"{dst} is being written right now by another seqpe preprocess (pid "
                              f"{holder.pid})", "Fix: wait for it to finish")
        (tmp_path / "seq.txt").write_text("1 1 2 3 4\n2 2 3 4 1\n3 3 4 1 2\n")
        proc = seqpe("import", "mine", str(tmp_path / "seq.txt"), "--sessions", str(dst), "--samples",
                     str(tmp_path / "samples"), "--quiet")
        assert_one_line_error(proc, "is being written right now by another seqpe preprocess")
        assert not dst.exists() and not (tmp_path / "samples").exists()
    finally:
        holder.kill()
        holder.wait()
    proc = seqpe("preprocess", "sample", str(prepared / "raw"), str(dst), "--quiet", *SMALL)
    assert proc.returncode == 0, proc.stderr
    from pipeline import preprocess
    from pipeline.params import load_params
    preprocess.run("sample", prepared / "raw", dst, load_params(ROOT / "params.yaml"))
    assert str(dst.resolve()) not in io._WRITERS         # released on return: the next command may write it
    proc = seqpe("preprocess", "sample", str(prepared / "raw"), str(dst), "--quiet", *SMALL)
    assert proc.returncode == 0, proc.stderr


def test_a_destination_that_is_a_link_loop_is_one_line(prepared, tmp_path):
    """Walk 35b: a destination that is a symbolic link to itself ended in Path.resolve()'s RuntimeError traceback."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for args in (("augment", "sample", str(prepared / "sessions"), str(loop)),
                 ("train", "sample", str(prepared / "samples"), str(loop), "--model", "pop", "--seed", "1")):
        assert_one_line_error(seqpe(*args, "--quiet"), f"error: {loop}", "is a symbolic link loop",
                              "Fix: remove or fix the link, or pass another path")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop"]


def test_a_destination_that_is_a_link_is_written_through(prepared, tmp_path):
    """`data/sessions/X -> /big/disk/X`: the swap replaced the link with a real folder (the output went
    to the wrong disk, the target kept its old content, a `.old` link was left behind)."""
    target = tmp_path / "big" / "samples"
    target.mkdir(parents=True)
    (tmp_path / "data").mkdir()
    link = tmp_path / "data" / "samples"
    link.symlink_to(target, target_is_directory=True)
    for _ in range(2):                                       # a first write, then a replacement
        assert seqpe("augment", "sample", str(prepared / "sessions"), str(link), "--quiet").returncode == 0
        assert link.is_symlink() and (target / "manifest.json").is_file()
        assert [p.name for p in (tmp_path / "data").iterdir()] == ["samples"]
        assert sorted(p.name for p in (tmp_path / "big").iterdir()) == ["samples"]
    (tmp_path / "big" / "g.json").write_text("0")          # a file link (DVC's into its cache) is replaced,
    (tmp_path / "data" / "g.json").symlink_to(tmp_path / "big" / "g.json")      # never written through
    with io.atomic_path(tmp_path / "data" / "g.json") as tmp:
        tmp.write_text("2")
    assert not (tmp_path / "data" / "g.json").is_symlink() and (tmp_path / "data" / "g.json").read_text() == "2"
    assert (tmp_path / "big" / "g.json").read_text() == "0"


def test_a_destination_that_cannot_be_written_is_refused_before_any_work(tmp_path, monkeypatch):
    """`seqpe train` into a read-only disk trained every epoch, then failed writing the run folder."""
    import errno
    import tempfile
    real = tempfile.mkstemp

    def mkstemp(*args, prefix=None, **kwargs):
        if prefix == ".seqpe-probe.":
            raise OSError(errno.EROFS, "Read-only file system")
        return real(*args, prefix=prefix, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    with pytest.raises(DataError, match=r"runs/x/seed-1 cannot be written: Read-only file system \(.*\). Fix: pass a "
                                        "destination on a writable disk"):
        io.claim_dir(tmp_path / "runs" / "x" / "seed-1", None, "run")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(tempfile, "mkstemp", real)
    io.claim_dir(tmp_path / "runs" / "x" / "seed-1", None, "run")            # writable: no probe left behind
    assert list(tmp_path.iterdir()) == []


def test_a_folder_of_another_kind_is_named_for_what_it_holds(prepared, tmp_path):
    """`seqpe stats sample data/raw/sample` said to run preprocess; `evaluate` into a runs folder listed
    seqpe's own runs as 'files seqpe did not write'."""
    proc = seqpe("stats", "sample", str(prepared / "raw"))
    assert_one_line_error(proc, "raw holds raw data (source.json), not prepared sessions or samples",
                          "Fix: pass a sessions or samples folder")
    runs = tmp_path / "runs"
    assert seqpe("train", "sample", str(prepared / "samples"), str(runs), "--model", "pop", "--seed", "1",
                 "--quiet").returncode == 0
    proc = seqpe("evaluate", "sample", str(runs), str(runs), "--all", "--quiet")
    assert_one_line_error(proc, "runs holds training runs (MODEL-ENCODING/seed-N/run.json); seqpe replaces only",
                          "Fix: pass a new or empty folder for the output")
    assert_one_line_error(seqpe("stats", "sample", str(runs / "pop-none" / "seed-1")), "seed-1 holds a training run")


def test_outputs_inside_a_configurations_seeds_folder_and_runs_in_a_project_root_are_refused(prepared, tmp_path):
    """`evaluate X RUNS RUNS/sasrec-none/rep`, `report --out RUNS/sasrec-none/r.md` and `train --metrics
    RUNS/sasrec-none/m.json` wrote into a train stage's DVC output (replaced whole by the next `dvc repro`);
    `train sample SAMPLES .` in a project made ./pop-none beside dvc.yaml, and `train ... data` beside
    data/samples."""
    runs = tmp_path / "runs"
    base = ["train", "sample", str(prepared / "samples")]
    assert seqpe(*base, str(runs), "--model", "pop", "--seed", "1", "--quiet").returncode == 0
    config = runs / "pop-none"
    before = sorted(p.name for p in config.rglob("*"))
    for argv in (["evaluate", "sample", str(runs), str(config / "rep"), "--all", "--quiet"],
                 ["report", str(runs), "--out", str(config / "r.md"), "--quiet"],
                 [*base, str(tmp_path / "runs2"), "--model", "pop", "--seed", "1", "--quiet",
                  "--metrics", str(config / "m.json")]):
        assert_one_line_error(seqpe(*argv), f"is inside {config}, which holds sample's seeds of one configuration",
                              "`dvc repro` replaces that folder whole", "Fix: pass a folder outside it")
    for argv in (["report", str(runs), "--out", str(runs / "r.md"), "--quiet"],    # walk 43c #2: beside the
                 [*base, str(tmp_path / "runs2"), "--model", "pop", "--seed", "1", "--quiet",  # configurations:
                  "--metrics", str(runs / "m.json")]):                                        # accepted
        assert_one_line_error(seqpe(*argv), f"is inside {runs}, which holds sample's runs (MODEL-ENCODING/seed-N): "
                              "`seqpe train` and the reports read that folder as runs only", "Fix: pass a path "
                              "outside it")   # (and DVC's evaluate@sample depends on it, said under data/runs/)
    assert sorted(p.name for p in runs.iterdir()) == ["pop-none"]
    (tmp_path / "w").mkdir()                  # walk 35c #5: a relative path was named as /abs/w/../runs/pop-none
    assert_one_line_error(seqpe("evaluate", "sample", "../runs", "../runs/pop-none/rep", "--all", "--quiet",
                                cwd=tmp_path / "w"), "../runs/pop-none/rep is inside ../runs/pop-none, which holds")
    assert sorted(p.name for p in config.rglob("*")) == before and not (tmp_path / "runs2").exists()
    project = tmp_path / "project"
    (project / "data" / "samples").mkdir(parents=True)
    (project / "dvc.yaml").write_text("stages: {}\n")
    shutil.copytree(prepared / "samples", project / "data" / "samples" / "sample")
    assert_one_line_error(seqpe(*base, str(project), "--model", "pop", "--seed", "1", "--quiet"),
                          "project is a project's root (it holds dvc.yaml), not a runs folder",
                          "Fix: pass that dataset's own runs folder, e.g. data/runs/sample")
    assert_one_line_error(seqpe(*base, str(project / "data"), "--model", "pop", "--seed", "1", "--quiet"),
                          "data holds seqpe's data folders (samples/sample), not runs", "e.g. data/runs/sample")
    assert sorted(p.name for p in project.iterdir()) == ["data", "dvc.yaml"]
    assert sorted(p.name for p in (project / "data").iterdir()) == ["samples"]


def test_polars_and_nameless_os_errors_are_said_as_the_os_error_of_the_path(tmp_path):
    """A full disk came as Polars' ComputeError (a 40-line traceback) or as an OSError without a file name
    ("No space left on device. Fix: free space on that disk": which disk?)."""
    import errno

    import polars as pl

    from pipeline.errors import as_os_error
    full = pl.exceptions.ComputeError("parquet: File out of specification: underlying IO error: No space left on "
                                      "device (os error 28)")
    named = as_os_error(full, tmp_path / "x.parquet")
    assert isinstance(named, OSError) and named.errno == errno.ENOSPC and named.filename == str(tmp_path / "x.parquet")
    assert as_os_error(pl.exceptions.ComputeError("could not parse `a` as dtype i64 at column 'x'")) is None
    assert as_os_error(ValueError("(os error 28)")) is None                # not Polars: not an I/O failure
    own = PermissionError(errno.EACCES, "Permission denied", "/somewhere")
    assert as_os_error(own, tmp_path) is own                                 # names its file already
    for block_error in (OSError(errno.ENOSPC, "No space left on device"), full):
        with pytest.raises(OSError) as caught:
            with io.atomic_path(tmp_path / "out" / "part.parquet"):
                raise block_error
        assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(tmp_path / "out" / "part.parquet")
        with pytest.raises(OSError) as caught:
            with io.atomic_dir(tmp_path / "folder"):
                raise block_error
        assert caught.value.filename == str(tmp_path / "folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == []                 # nothing half-written


@pytest.fixture
def small_disk(tmp_path):
    """A 300 KB tmpfs mounted at tmp_path/disk (root only; skipped where mounting is not allowed)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(disk)], capture_output=True).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


@pytest.mark.parametrize("argv", [["augment", "sample", "{d}/sessions", "{disk}/samples"],
                                  ["preprocess", "sample", "{d}/raw", "{disk}/sessions"],
                                  ["download", "sample", "{disk}/raw"]])
def test_a_full_disk_is_one_line_naming_the_path(argv, prepared, small_disk):
    (small_disk / "filler").write_bytes(b"\0" * 290 * 1024)
    proc = seqpe(*[a.format(d=prepared, disk=small_disk) for a in argv], "--quiet", *SMALL)
    assert_one_line_error(proc, "No space left on device: " + str(small_disk / argv[-1].split("/")[-1]),
                          f"Fix: free space on the disk that holds {small_disk}")
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]


def test_a_refused_import_names_seqpe_import_not_preprocess(tmp_path):
    """A user's notes.txt in an imported sessions folder: the refusal said "`seqpe preprocess` replaces that folder"."""
    from pipeline import formats
    from pipeline.params import Params
    text = tmp_path / "Mine.txt"
    text.write_text("".join(f"{u} {u} {u + 1} {u + 2} {u + 3}\n" for u in range(1, 30)))
    out = (tmp_path / "sessions", tmp_path / "samples")
    formats.import_dataset("mine", text, "sasrec", *out, Params())
    (out[0] / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match=r"holds sessions \(manifest.json\) and files seqpe did not write \(notes.txt\); "
                                        r"`seqpe import` replaces that folder whole"):
        formats.import_dataset("mine", text, "sasrec", *out, Params())
    assert (out[0] / "notes.txt").read_text() == "mine"


def test_a_destination_spelt_through_a_missing_folder_and_back_makes_no_such_folder(tmp_path, monkeypatch):
    """Walk 35b #7: `seqpe preprocess sample RAW ../rel/./x/../sess` wrote ../rel/sess and left an empty x, made
    only to step back out of it. A `..` after a missing folder is taken out first; after an existing one (a link
    included) it stays, resolved as the kernel does."""
    monkeypatch.chdir(tmp_path)
    with io.atomic_dir(Path("rel") / "x" / ".." / "sess") as tmp:
        (tmp / "f").write_text("1")
    with io.atomic_path(Path("rel") / "y" / ".." / "m.json") as tmp:     # files too
        tmp.write_text("{}")
    assert sorted(p.name for p in (tmp_path / "rel").iterdir()) == ["m.json", "sess"]
    (tmp_path / "real" / "inner").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real" / "inner")
    with io.atomic_dir(Path("link") / ".." / "out") as tmp:     # the link's target's parent, as before
        (tmp / "f").write_text("2")
    assert (tmp_path / "real" / "out" / "f").read_text() == "2" and not (tmp_path / "out").exists()


def test_the_folder_a_command_runs_in_is_never_its_output(tmp_path, monkeypatch):
    """Walk 44i #2: `seqpe download sample .` in an empty folder made the new folder inside `.` and failed with
    "Device or resource busy"; replacing it would leave the shell in a deleted folder."""
    from pipeline import io
    from pipeline.errors import DataError
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    monkeypatch.chdir(work / "sub")
    for dst in (".", str(work / "sub"), "..", ""):
        with pytest.raises(DataError, match="is the folder this command runs in"):
            with io.atomic_dir(dst):
                pass
    with io.atomic_dir("out") as tmp:                                   # a subfolder is fine
        (tmp / "f").write_text("x")
    assert (work / "sub" / "out" / "f").read_text() == "x" and sorted(p.name for p in work.iterdir()) == ["sub"]
