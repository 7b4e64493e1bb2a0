"""Ctrl-C: one line saying what the interrupted command left, exit code 130, and it is true.

Each stage is re-run over its own earlier output and interrupted in the middle of writing the new
one (the CLI's SIGINT handler raises `cli.Interrupted`; here a patched internal raises it at that
point): the earlier output must be byte for byte what it was, with no temporary entries left.
One test sends a real SIGINT to a real process.
"""
from __future__ import annotations

import os
import signal
import subprocess
import re
import sys
import textwrap
from pathlib import Path

import pytest

from pipeline import cli

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--set", "preprocess.sample.sessions=300", "--set", "preprocess.sample.items=100"]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def seqpe(argv: list[str], capsys) -> tuple[int, str]:
    """Run the CLI in-process through main(); (exit code, stderr)."""
    old = signal.getsignal(signal.SIGINT)
    sys_argv = sys.argv
    sys.argv = ["seqpe", *argv]
    try:
        with pytest.raises(SystemExit) as exit_:
            cli.main()
    finally:
        sys.argv = sys_argv
        signal.signal(signal.SIGINT, old)
    return exit_.value.code, capsys.readouterr().err


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("ctrlc")
    for argv in (["download", "sample", str(root / "raw"), *SMALL], ["preprocess", "sample", str(root / "raw"),
                 str(root / "sessions"), *SMALL], ["augment", "sample", str(root / "sessions"), str(root / "samples")],
                 ["export", "sample", str(root / "export"), "--sessions", str(root / "sessions")]):
        proc = subprocess.run([sys.executable, "-m", "pipeline.cli", *argv, "--quiet"], cwd=ROOT, capture_output=True,
                              text=True)
        assert proc.returncode == 0, proc.stderr
    return root


def interrupt_after(monkeypatch, target: str, calls: int = 1):
    """Patch `module.function` so that its `calls`-th call runs and then Ctrl-C arrives."""
    module, name = target.rsplit(".", 1)
    mod = __import__(module, fromlist=[name])
    original, seen = getattr(mod, name), []

    def patched(*args, **kwargs):
        out = original(*args, **kwargs)
        seen.append(1)
        if len(seen) == calls:
            raise cli.Interrupted()
        return out
    monkeypatch.setattr(mod, name, patched)


@pytest.mark.parametrize("argv, folder, target, note", [
    (["download", "sample", "{root}/raw", "--set", "preprocess.sample.seed=5", *SMALL], "raw",
     "pipeline.archive.unpack", "nothing was written: the destination keeps its previous content"),
    (["preprocess", "sample", "{root}/raw", "{root}/sessions", "--set", "preprocess.valid_fraction=0.3", *SMALL],
     "sessions", "pipeline.io.write_parquet", "nothing was written"),
    (["augment", "sample", "{root}/sessions", "{root}/samples", "--set", "augment.max_len=3"], "samples",
     "pipeline.io.write_parquet", "nothing was written"),
    (["export", "sample", "{root}/export", "--sessions", "{root}/sessions", "--format", "srgnn"], "export",
     "pipeline.formats.write_bytes", "nothing was written"),
])
def test_an_interrupted_stage_leaves_its_previous_output(prepared, monkeypatch, capsys, argv, folder, target, note):
    root = prepared
    before = snapshot(root / folder)
    interrupt_after(monkeypatch, target, calls=2 if target.endswith("write_parquet") else 1)
    code, err = seqpe([a.format(root=root) for a in argv], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 130 and len(lines) == 1 and lines[0].startswith("interrupted: " + note), err
    assert snapshot(root / folder) == before
    assert not [p.name for p in root.iterdir() if p.name.startswith(".")]       # no temporary folders


def test_an_interrupted_download_names_its_partial_file():
    """The note said "a partial download stays as .FILE.part", a placeholder, also for generated data, which
    downloads nothing (walk 34b)."""
    note = cli._interrupted_note
    assert note(["download", "yoochoose", "raw"]).endswith(
        "(a partial download stays as .yoochoose-data.7z.part in it and resumes next time)")
    for argv in (["download", "sample"], ["download", "diginetica", "--from", "x.zip"], ["download", "nosuch"]):
        assert note(argv) == "nothing was written: the destination keeps its previous content", argv


def test_an_interrupted_training_keeps_finished_seeds_and_resumes(prepared, tmp_path, monkeypatch, capsys):
    root = prepared
    import pipeline.train.loop as loop
    original, epochs = loop.train_epoch, []

    def epoch(*args, **kwargs):                      # Ctrl-C in seed 2's second epoch
        epochs.append(1)
        if len(epochs) == 4:
            raise cli.Interrupted()
        return original(*args, **kwargs)
    monkeypatch.setattr(loop, "train_epoch", epoch)
    argv = ["train", "sample", str(root / "samples"), str(tmp_path / "runs"), "--model", "sasrec", "--encoding",
            "none", "--seed", "1", "--seed", "2", "--set", "train.epochs=2", "--set", "train.dim=8", "--quiet"]
    code, err = seqpe(argv, capsys)
    assert code == 130 and err.strip().startswith("interrupted: the seed being trained has no run folder yet")
    assert sorted(p.name for p in (tmp_path / "runs" / "sasrec-none").iterdir()) == ["seed-1"]
    assert len(list(Path(os.environ["SEQPE_STATE"]).glob("resume/*.pt"))) == 1   # seed 2's epoch 1
    monkeypatch.setattr(loop, "train_epoch", original)
    code, err = seqpe(argv, capsys)
    assert code == 0 and sorted(p.name for p in (tmp_path / "runs" / "sasrec-none").iterdir()) == ["seed-1", "seed-2"]


def test_a_real_sigint_during_evaluate_writes_all_reports_or_none(prepared, tmp_path):
    """A SIGINT while evaluate writes its six reports leaves none of them (they are built in a folder swapped in
    whole since walk 35c); one that arrives while the folder is swapped in takes effect after it."""
    root = prepared
    runs = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "train", "sample", str(root / "samples"), str(runs),
                           "--model", "pop", "--seed", "1", "--quiet"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr

    def evaluate_with_sigint(hook: str) -> subprocess.CompletedProcess:
        code = textwrap.dedent(f"""
            import os, signal, sys
            from pathlib import Path
            from pipeline import cli, io
            calls = []
            def sigint_then(original):
                def call(*a, **k):
                    calls.append(1)
                    if len(calls) == 2:
                        os.kill(os.getpid(), signal.SIGINT)          # a real Ctrl-C, in the middle of the writes
                    return original(*a, **k)
                return call
            {hook}
            sys.argv = ["seqpe", "evaluate", "sample", {str(runs)!r}, {str(tmp_path / "reports")!r}, "--all", "--quiet"]
            cli.main()
        """)
        # the child starts with Python's own Ctrl-C handling even if this process ignores SIGINT (an ignored
        # disposition is inherited across exec, and then neither main() nor deferred_interrupt installs a handler)
        return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    proc = evaluate_with_sigint("Path.write_bytes = sigint_then(Path.write_bytes)")     # while the files are written
    assert proc.returncode == 130 and proc.stderr.startswith("interrupted: "), proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]                   # none of them, no leftovers
    calls = "calls.append(1)"
    proc = evaluate_with_sigint(f"{calls}; io._swap_in = sigint_then(io._swap_in)")   # while the folder goes in
    assert proc.returncode == 130, proc.stderr
    # it said "nothing was written: the destination keeps its previous content" while all five were written
    assert proc.stderr.strip().startswith("interrupted: it came as the new output was being put in place, which "
                                          "finished first: the output is the new one, complete"), proc.stderr
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == [
        "comparison.csv", "comparison.png", "curves.png", "report.csv", "report.md", "summary.json"]


def test_a_ctrl_c_during_train_check_says_nothing_was_written(prepared, tmp_path, monkeypatch, capsys):
    """--check trains nothing: its interrupt note used to be train's (a seed's last epoch saved, resume)."""
    root = prepared
    interrupt_after(monkeypatch, "pipeline.train.stage.make_task", calls=1)
    code, err = seqpe(["train", "sample", str(root / "samples"), str(tmp_path / "runs"), "--model", "sasrec",
                       "--encoding", "none", "--check"], capsys)
    assert code == 130 and err.strip() == "interrupted: nothing was written: --check trains nothing", err
    assert not (tmp_path / "runs").exists()


def test_an_error_that_follows_a_ctrl_c_is_reported_as_the_interrupt(monkeypatch, capsys):
    """A Ctrl-C landing inside Polars' (lazy) import left the module half made; the stage then failed with
    `AttributeError: module 'polars' has no attribute 'Int32'` and a traceback instead of the interrupt line."""
    def app(**kwargs):
        try:
            raise cli.Interrupted()
        except cli.Interrupted:            # swallowed by an import machinery, as it happened
            pass
        raise AttributeError("module 'polars' has no attribute 'Int32'")

    monkeypatch.setattr(cli, "app", app)
    monkeypatch.setattr(cli.Interrupted, "seen", True)
    code, err = seqpe(["preprocess", "sample"], capsys)
    assert code == 130 and err.strip().startswith("interrupted: nothing was written"), err
    monkeypatch.setattr(cli.Interrupted, "seen", False)        # without a Ctrl-C the error is the error
    with pytest.raises(AttributeError):
        seqpe(["preprocess", "sample"], capsys)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")     # Python's "Exception ignored"
def test_a_ctrl_c_python_dropped_in_a_callback_still_ends_as_the_interrupt(monkeypatch, capsys):
    """Walk 35b: the handler's raise landed in a weakref callback, where Python prints "Exception ignored" and drops
    it; `seqpe evaluate` then ran on and exited 0, the Ctrl-C lost. The command that ran to its end after a Ctrl-C
    now exits 130 with the line, saying the output is the new one."""
    import weakref

    class Thing:
        pass

    def app(**kwargs):
        thing = Thing()
        weakref.finalize(thing, lambda: cli._on_signal(signal.SIGINT, None))
        del thing                          # the finalizer raises Interrupted: Python drops it, the command goes on
        return 0

    from pipeline import io
    monkeypatch.setattr(cli, "app", app)
    monkeypatch.setattr(cli.Interrupted, "seen", False)
    monkeypatch.setattr(cli.Interrupted, "signum", 0)
    monkeypatch.setattr(io.INTERRUPT, "wrote", False)
    code, err = seqpe(["evaluate", "sample"], capsys)
    assert code == 130 and err.strip() == ("interrupted: it came too late to stop the command (inside a library call "
                                           "that does not let it through), which ran to its end: the output is the new "
                                           "one, complete; the exit status still says interrupted, so `dvc repro` runs "
                                           "this stage again (the same bytes)"), err


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")     # Python's "Exception ignored"
def test_a_signal_python_dropped_in_a_finaliser_stops_training_at_its_next_batch(prepared, tmp_path, monkeypatch,
                                                                                 capsys):
    """The full suite once saw a real SIGTERM go unanswered: the handler's raise landed in a finaliser, Python
    dropped it, and `seqpe train` ran on (8 more epochs, until the test killed it; a scheduler would have killed
    the job with no line and no resume). Training now checks for such a signal at every batch and epoch."""
    import weakref

    from pipeline import io
    from pipeline.train import loop

    class Thing:
        pass

    real = loop.train_epoch
    calls = []

    def train_epoch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:                  # epoch 2 begins: the signal comes, and its raise is dropped
            thing = Thing()
            weakref.finalize(thing, lambda: signal.raise_signal(signal.SIGTERM))
            del thing
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "train_epoch", train_epoch)
    old = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)             # as a shell starts it: main() installs its handler
    try:
        code, err = seqpe(["train", "sample", str(prepared / "samples"), str(tmp_path / "runs"), "--model", "sasrec",
                           "--set", "train.dim=8", "--set", "train.epochs=50", "--set", "train.patience=0",
                           "--set", "train.threads=1"], capsys)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert code == 143 and "terminated (SIGTERM)" in err and len(calls) == 2, err
    assert "epoch 2:" not in err and io.INTERRUPT.pending == 0
    assert signal.getsignal(signal.SIGTERM) is old
    io.check_interrupt()                                      # nothing pending: nothing happens


def test_a_real_sigterm_during_training_says_so_and_the_same_command_resumes(prepared, tmp_path):
    """SIGTERM (a scheduler's time limit or preemption, `kill`): Python's default killed the process at once,
    with no line, and before a seed's first epoch left its lock files. Now it takes Ctrl-C's path (whose
    lock cleanup is tested above): one line, exit code 143, the last finished epoch kept, and the same command
    resumes from it."""
    import json
    import time
    state = tmp_path / "state"
    env = dict(os.environ, SEQPE_STATE=str(state), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    argv = [sys.executable, "-m", "pipeline.cli", "train", "sample", str(prepared / "samples"), str(tmp_path / "runs"),
            "--model", "sasrec", "--encoding", "none", "--seed", "1", "--set", "train.dim=8", "--set",
            "train.epochs=100000", "--set", "train.patience=0", "--set", "train.threads=1"]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    lines = []
    for line in proc.stderr:                                   # epoch lines: the third has begun, two are saved
        lines.append(line)
        if "epoch 2:" in line:
            break
    assert proc.poll() is None, "".join(lines)
    assert list(state.glob("locks/*")), "a training seed holds its lock files"
    proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 20
    assert proc.returncode == 143, err
    said = [line for line in err.splitlines() if line.strip() and not re.match(r"sample sasrec-none seed 1 epoch", line)]
    assert len(said) == 1 and re.fullmatch(
        r"terminated \(SIGTERM\): the seed being trained has no run folder yet \(seeds finished before it are kept\); "
        r"sample sasrec-none seed 1 is saved as of its epoch [1-9], so the same command continues from there",
        said[0]), err                                           # names the epoch (was "if one finished")
    assert len(list(state.glob("resume/*.pt"))) == 1
    assert not (tmp_path / "runs" / "sasrec-none" / "seed-1").exists()
    # the same command (a time limit is not part of the run) goes on from the saved epoch and finishes
    done = subprocess.run([*argv, "--set", "train.time_limit=0.0001", "--quiet"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    seed = tmp_path / "runs" / "sasrec-none" / "seed-1"
    assert json.loads((seed / "run.json").read_text())["stopped"] == "time_limit"
    assert json.loads((seed / "timing.json").read_text())["resumed_from_epoch"] >= 1     # not trained afresh


def test_main_leaves_the_signal_handlers_as_it_found_them(capsys):
    """main() called in-process (a notebook, these tests) installs its SIGINT / SIGTERM handlers for the
    command only."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    code, _ = seqpe(["--help"], capsys)
    assert code == 0 and (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_the_console_script_ignores_a_signal_once_its_command_is_done_and_drops_no_traceback():
    """Walk 39c #4: a Ctrl-C landing after evaluate had written its report exited 130 without a line (Python's own
    handler was back while the process exited), and one inside a weakref callback printed Python's 9-line
    "Exception ignored" block above seqpe's line."""
    code = textwrap.dedent("""
        import os, signal, sys, weakref
        from pipeline import cli
        sys.argv = ["seqpe", "--version"]
        try:
            cli.main(process=True)
        except SystemExit as e:
            done = e.code
        os.kill(os.getpid(), signal.SIGINT)           # after the command: ignored, the exit code stays its own
        os.kill(os.getpid(), signal.SIGTERM)
        print("ignored", done, signal.getsignal(signal.SIGINT) is signal.SIG_IGN, flush=True)
        sys.argv = ["seqpe", "--version"]
        signal.signal(signal.SIGINT, signal.default_int_handler)
        class Obj: pass
        box = []
        def hit(ref):
            os.kill(os.getpid(), signal.SIGINT)        # lands in the callback, where Python drops the raise
            box.append(1)
        import pipeline.cli as c
        real = c.app
        def app(**kw):
            o = Obj(); r = weakref.ref(o, hit); del o  # noqa
            return real(**kw)
        c.app = app
        cli.main(process=True)
    """)
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert "ignored 0 True" in proc.stdout.splitlines(), proc.stdout + proc.stderr
    assert proc.returncode == 130 and "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "which ran to its end" in proc.stderr, proc.stderr


def test_a_ctrl_c_while_the_console_script_imports_the_cli_is_one_line():
    """The CLI installs its Ctrl-C handler once imported (typer, rich: about 0.15 s): a Ctrl-C before that printed
    KeyboardInterrupt's traceback. The console script (pipeline.entry) guards that import; here the import itself
    raises it, as a Ctrl-C landing in it would."""
    code = textwrap.dedent("""
        import sys
        class CtrlC:
            def find_spec(self, name, path=None, target=None):
                if name == "pipeline.cli":
                    raise KeyboardInterrupt
        sys.meta_path.insert(0, CtrlC())
        sys.argv = ["seqpe", "datasets"]
        from pipeline.entry import main
        main()
    """)
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 130 and proc.stderr == "interrupted: seqpe was starting, nothing was done\n", proc.stderr
    proc = subprocess.run([sys.executable, "-c", "import sys; sys.argv = ['seqpe', '--version']; "
                           "from pipeline.entry import main; main()"], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0 and "seqpe" in proc.stdout, proc.stderr          # and it runs the CLI


def test_a_ctrl_c_while_pipeline_io_is_half_imported_is_still_one_line(monkeypatch):
    """Walk 38b D5: the handler did `from .io import INTERRUPT`; a Ctrl-C landing while pipeline.io was being
    imported (its INTERRUPT not yet defined) made that import fail inside the handler: ImportError's 40-line
    traceback and exit 1 instead of the one line and 130."""
    import types
    from pipeline import cli
    monkeypatch.setitem(sys.modules, "pipeline.io", types.ModuleType("pipeline.io"))     # half imported
    try:
        with pytest.raises(cli.Interrupted):
            cli._on_signal(signal.SIGINT, None)
        assert cli.Interrupted.signum == signal.SIGINT
    finally:
        cli.Interrupted.seen, cli.Interrupted.signum = False, 0


@pytest.mark.parametrize("joined", [False, True])
def test_a_rank_that_never_joined_its_group_says_its_interrupt(monkeypatch, capsys, joined):
    """Walk 38a D4: a process of RANK 1 left the line to rank 0; one started by hand and signalled before its
    master came (no rank 0 anywhere) exited 143 without a word. Once in a group, rank 0 alone says it."""
    from pipeline.train import distributed

    def interrupted(**_):
        if joined:
            distributed.JOINED = True
        cli.Interrupted.signum = signal.SIGTERM
        raise cli.Interrupted()

    monkeypatch.setattr(cli, "app", interrupted)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 143 and not distributed.JOINED
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [] if joined else (len(lines) == 1 and lines[0].startswith("terminated (SIGTERM): ")), lines


def test_a_sigint_at_the_rename_of_report_out_waits_for_it_and_says_the_file_is_new(tmp_path, monkeypatch, capsys):
    """Walk 43c #1: a Ctrl-C just as `--out`'s new file was renamed in exited 130 with "nothing was written (--out
    keeps its previous content)" beside the new file. The write now holds the signal until it is done."""
    from pipeline import io as pio
    from test_report import write_ranked_runs
    runs, out = tmp_path / "runs", tmp_path / "r.md"
    write_ranked_runs(runs)
    code, _ = seqpe(["report", str(runs), "--out", str(out), "--quiet"], capsys)
    old = out.read_text()
    real_replace = pio.os.replace

    def replace(src, dst):
        if Path(dst) == out:                      # the signal arrives between the temporary file and the rename
            os.kill(os.getpid(), signal.SIGINT)
        return real_replace(src, dst)
    monkeypatch.setattr(pio.os, "replace", replace)
    code, err = seqpe(["report", str(runs), "--out", str(out), "--baseline", "sasrec-lpe", "--quiet"], capsys)
    assert code == 130 and "the output is the new one, complete" in err and "nothing was written" not in err, err
    assert out.read_text() != old and "sasrec-lpe" in out.read_text()


def test_an_interrupt_after_a_seed_is_written_says_so(prepared, tmp_path, monkeypatch, capsys):
    """A Ctrl-C landing after the seed's run folder was swapped in, before its state was cleared, said "has no run
    folder yet ... continues from there" of a finished seed; one landing while the results were printed said "wrote
    nothing" (walk 45b #2)."""
    from pipeline.train import runs
    original = runs.save_run

    def save_then_interrupt(*args, **kwargs):
        original(*args, **kwargs)
        raise cli.Interrupted()
    monkeypatch.setattr(runs, "save_run", save_then_interrupt)
    argv = ["train", "sample", str(prepared / "samples"), str(tmp_path / "runs"), "--model", "sasrec", "--encoding",
            "none", "--seed", "1", "--set", "train.epochs=1", "--set", "train.dim=8"]
    code, err = seqpe([*argv, "--quiet"], capsys)
    seed = tmp_path / "runs" / "sasrec-none" / "seed-1"
    assert code == 130 and err.strip() == (f"interrupted: sample sasrec-none seed 1 had finished and is written in "
                                           f"{seed} (the same command reuses it; a seed after it, if any, starts "
                                           "from its last finished epoch)"), err
    monkeypatch.setattr(runs, "save_run", original)
    monkeypatch.setattr(cli, "_print_runs", lambda results: (_ for _ in ()).throw(cli.Interrupted()))
    code, err = seqpe(argv, capsys)
    assert code == 130 and err.strip().endswith("interrupted: every seed had finished and is written in its run "
                                                "folder; only the printing of the results was cut short (the same "
                                                "command reuses them)"), err
