"""The `seqpe` command line: one thin command per stage, plus tools.

Every command parses its arguments, calls one library function and renders the
returned summary with rich. Library code raises `SeqpeError`; `main()` turns it into
a one-line message on stderr and exit code 1. Commands that only touch data never
import torch (imports are local to the commands that train).
"""
from __future__ import annotations

import contextlib
import errno
import os
import sys
from pathlib import Path
from typing import Annotated, Optional
from urllib.parse import urlsplit

import typer
from rich.console import Console
from rich.table import Table

from .errors import DataError, ParamsError, SeqpeError, TrainingError


@contextlib.contextmanager
def _pipe_closed():
    """A write to a pipe its reader closed (`seqpe models --json | head -1`) raised as a BrokenPipeError without an
    errno, which click's own handler (exit 1 without a word, walk 45h #1) passes on to `_main`'s: exit 141."""
    try:
        yield
    except OSError as e:
        if e.errno == errno.EPIPE:
            raise BrokenPipeError("the reader closed the pipe") from None
        raise


class _Commands(typer.core.TyperGroup):
    """Commands with a did-you-mean: `seqpe trian` -> "No such command 'trian'. Did you mean 'train'?"."""

    def resolve_command(self, ctx, args):
        for i, word in enumerate(args):     # '' was taken as `.`: `seqpe report ''` reported every run below the
            before = args[i - 1] if i else ""                       # working folder (walk 44i #6)
            if word.startswith("--") and word.endswith("=") and word.count("=") == 1:
                before, word = word[:-1], ""
                if before in self._flags(ctx, args):                 # `--json=`: as click says of `--json=x`
                    ctx.fail(f"Option '{before}' does not take a value.")
            if word:
                continue
            named = before if before.startswith("-") and "=" not in before and \
                before not in self._flags(ctx, args) else ""       # `--json ''`: the empty word is an argument
            what = ("give the session's items in order, e.g. --items 12,55,9" if named == "--items" else
                    "give it a value (a path: `.` for the current folder), or leave it out for its default")
            ctx.fail(f"{named or 'an argument'} is empty" + ("" if named else f" (after `{' '.join(args[:i])}`)")
                     + f": {what}")
        if args and not args[0].startswith("-") and self.get_command(ctx, args[0]) is None:
            from .errors import did_you_mean
            close = did_you_mean(args[0], self.list_commands(ctx))
            if close is not None:
                ctx.fail(f"No such command '{args[0]}'. Did you mean '{close}'?")
        return super().resolve_command(ctx, args)

    def make_context(self, *args, **kwargs):
        with _pipe_closed():               # --help and --version print while the arguments are parsed
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):
        with _pipe_closed():
            return super().invoke(ctx)

    def _flags(self, ctx, args) -> set:
        """The options of the command `args` names (its subcommand's too) that take no value, and `--`."""
        flags, command = {"--"}, self
        for word in args:
            if not hasattr(command, "get_command"):
                break
            command = command.get_command(ctx, word)
            if command is None:
                break
            for param in command.params:
                if getattr(param, "is_flag", False) or getattr(param, "count", False):
                    flags.update(param.opts + param.secondary_opts)
        return flags


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=_Commands,
                  help="seqpe: reproducible data pipeline and positional-encoding toolkit "
                       "for sequential recommendation.")
console = Console(stderr=False)
err_console = Console(stderr=True)


def _on_broken_pipe(self) -> None:
    """rich's Console.on_broken_pipe while a command runs (ours and typer's help): a reader that closed the pipe
    (`seqpe models | head -1`) ends the command with 141, the shell's code for SIGPIPE, not rich's 1 without a
    word, which reads as bad input (walk 45b #5, 45h #1)."""
    self.quiet = True
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise SystemExit(141)


def _version(value: bool) -> None:
    if value:
        from .versions import version_line
        line = version_line()
        if _first_to_say(line):            # once, not once per torchrun process (walk 40g #5)
            print(line)
        raise typer.Exit()


ParamsOpt = Annotated[Optional[Path], typer.Option(
    "--params", help="params file to read (default: ./params.yaml if there, else the built-in defaults)")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="override a param: --set train.epochs=3")]
DataSetOpt = Annotated[Optional[list[str]], typer.Option(     # the data stages read no train.* (walk 43i #7)
    "--set", help="override a data param: --set preprocess.valid_fraction=0.2 (download, preprocess and augment "
                  "sections)")]
ReportSetOpt = Annotated[Optional[list[str]], typer.Option(
    "--set", help="override a report param: --set evaluate.ks=[5,10] (training and scoring settings apply when "
                  "`seqpe train` runs)")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="no progress bars or tables")]


@app.callback()
def _root(ctx: typer.Context,
          version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print seqpe's version and git revision, and exit.")] = False):
    """seqpe: reproducible data pipeline and positional-encoding toolkit for sequential recommendation.
    Every command but `train` refuses to run under torchrun (one process would do the work N times)."""
    if ctx.invoked_subcommand not in (None, "train") and "WORLD_SIZE" in os.environ:    # torchrun sets it; the
        from .train.distributed import refuse        # train package loads polars and torch's stage (walk 45a #2)
        refuse(ctx.invoked_subcommand)


# the params sections each command takes with --set: a training section given to a data stage, or a data section
# to `train`, is refused (walk 43d #7: `seqpe preprocess --set train.epochs=3` ran without a word). The data stages
# take each other's sections, so one list of --set can prepare a dataset from download to augment (as
# bench/bench_cape.sh does); which command reads a section is named in the fix
_DATA = ("download", "preprocess", "augment")
_READS = {"download": _DATA, "preprocess": _DATA, "augment": _DATA, "import": _DATA,
          "train": ("train", "evaluate", "study", "models", "encodings"),
          "evaluate": ("train", "evaluate", "study", "models", "encodings", "datasets", "imports")}   # (its own
          # refusal names the training keys it would ignore)
_READ_BY = {"download": "`seqpe download`", "preprocess": "`seqpe preprocess`",
            "augment": "`seqpe augment`", "train": "`seqpe train`", "models": "`seqpe train`",
            "encodings": "`seqpe train`", "evaluate": "`seqpe train` (and `seqpe evaluate`)",
            "study": "`seqpe train`, `seqpe evaluate` and `dvc repro`", "datasets": "`dvc repro` (dvc.yaml's stages)",
            "imports": "`dvc repro` (dvc.yaml's import stage)"}


def _only_read(command: str, overrides: Optional[list[str]]) -> None:
    """A ParamsError for a --set of a section `command` does not read: it would be ignored."""
    for text in overrides or []:
        section = text.split("=", 1)[0].strip().split(".", 1)[0]
        if section not in _READS[command] and section in _READ_BY:
            shown = text.strip() if len(text.strip()) <= 100 else text.strip()[:97] + "..."   # a 5,000-digit value
            raise ParamsError(f"--set {shown}: `seqpe {command}` does not read {section}.*, so it would be "
                              f"ignored", f"drop it: {section}.* is read by {_READ_BY[section]}")


def _params(path: Optional[Path], overrides: Optional[list[str]] = None):
    from .params import DEFAULT_PARAMS, load_params
    if path is None and not DEFAULT_PARAMS.is_file():
        _note_project_above()
    return load_params(path or DEFAULT_PARAMS, overrides or [], required=path is not None)


def _note_project_above() -> None:
    """Run from a subfolder of a seqpe project (`cd notebooks; seqpe train beauty ../data/...`), the built-in
    defaults apply, not the project's params.yaml: say so on stderr rather than train on other settings."""
    from rich.markup import escape
    for parent in Path.cwd().parents:
        if (parent / "params.yaml").is_file() and (parent / "dvc.yaml").is_file():
            err_console.print(f"[bold yellow]note:[/] no params.yaml in this folder, so the built-in defaults apply, "
                              f"not {escape(str(parent / 'params.yaml'))}. Run from {escape(str(parent))} or pass "
                              f"--params {escape(str(parent / 'params.yaml'))} to use it", highlight=False,
                              soft_wrap=True)
            return


def _default(kind: str, dataset: str, given: Optional[Path], check: bool = True) -> Path:
    if given is not None or not check:
        return given if given is not None else Path("data") / kind / dataset
    from .datasets import check_name                    # an unknown name without its folder: did-you-mean
    check_name(dataset, Path("data") / kind / dataset)
    return Path("data") / kind / dataset


def _kv_table(title: str, rows: dict) -> Table:
    from rich.text import Text                          # plain text: a path's "[x]" is not rich markup
    t = Table(title=Text(title), show_header=False)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")                       # a sha256 or a path wraps, never ends in "…"
    for k, v in rows.items():
        t.add_row(Text(str(k)), Text(f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)))
    return t


# --------------------------------------------------------------------------- data stages

JsonOpt = Annotated[bool, typer.Option("--json", help="print machine-readable JSON (stable keys) instead of tables")]


def _imported_on_disk(data_dir: Path) -> dict[str, dict]:
    """Datasets that `seqpe import` wrote under data_dir (sessions/NAME or samples/NAME whose manifest says
    stage: import), by name: protocol, format and source file. A damaged manifest is skipped here: the
    listing is for looking, and `seqpe stats` names what is wrong with one."""
    from .io import read_json
    found: dict[str, dict] = {}
    for kind in ("sessions", "samples"):
        for path in sorted((data_dir / kind).glob("*/manifest.json")):
            try:
                m = read_json(path)
            except (DataError, OSError):
                continue
            if not isinstance(m, dict) or m.get("stage") != "import" or m.get("dataset") != path.parent.name:
                continue
            info = m.get("protocol_info") if isinstance(m.get("protocol_info"), dict) else {}
            source = m.get("source") if isinstance(m.get("source"), dict) else {}
            found.setdefault(path.parent.name, {"protocol": str(m.get("protocol", "?")),
                                                "format": str(info.get("format", "?")),
                                                "source": ", ".join(sorted(map(str, source)))})
    return found


@app.command()
def datasets(params: ParamsOpt = None,
             data_dir: Annotated[Optional[Path], typer.Option(help="data folder \\[default: data]")] = None,
             as_json: JsonOpt = False):
    """List known datasets: protocol, source, size, and what is on disk here."""
    from .datasets import all_datasets
    from .params import IMPORT_FORMATS
    from .tables import Col, print_tables, to_json
    if data_dir is not None and not data_dir.is_dir():    # a typo showed every dataset as absent from disk
        raise DataError(f"--data-dir {data_dir} {'is not a folder' if data_dir.exists() else 'does not exist'}",
                        "pass the project's data folder (the default, data, holds raw/, sessions/, samples/)")
    data_dir = data_dir if data_dir is not None else Path("data")
    p = _params(params)
    entries = []

    def on_disk(name: str) -> dict:
        found = {kind: (data_dir / kind / name / ("source.json" if kind == "raw" else "manifest.json")).is_file()
                 for kind in ("raw", "sessions", "samples")}
        return {**found, "stale": _stale(data_dir / "samples" / name) if found["samples"] else None}

    imported = _imported_on_disk(data_dir)
    for name, spec in sorted(all_datasets().items()):
        if spec.source.archive == "generated":
            origin = "generated by seqpe"
        elif spec.source.url:
            origin = urlsplit(spec.source.url).netloc
        else:
            origin = "manual download"
        entry = {"dataset": name, "protocol": spec.protocol, "source": spec.source.name, "origin": origin,
                 "url": spec.source.url, "paper_size": spec.paper_size, "enabled": name in p.datasets, **on_disk(name)}
        if name in imported and name not in p.imports:    # what is on disk came from `seqpe import`, not the registry
            info = imported[name]
            entry.update(protocol=info["protocol"], source=info["source"], url=None,
                         origin=f"{info['format']} format, seqpe import (registered source: {origin})")
        entries.append(entry)
    for name, spec in sorted(p.imports.items()):                     # prepared files under imports:
        entries.append({"dataset": name, "protocol": IMPORT_FORMATS[spec["format"]],
                        "source": f"imports: {spec['path']}", "origin": f"{spec['format']} format", "url": None,
                        "paper_size": "", "enabled": True, **on_disk(name)})
    listed = {e["dataset"] for e in entries}
    for name, info in sorted(imported.items()):                      # `seqpe import` without imports:
        if name not in listed:
            entries.append({"dataset": name, "protocol": info["protocol"], "source": info["source"],
                            "origin": f"{info['format']} format, seqpe import", "url": None, "paper_size": "",
                            "enabled": False, **on_disk(name)})
    entries.sort(key=lambda e: e["dataset"])
    if as_json:
        to_json(entries)
        return
    mark = lambda b: "✓" if b else "·"  # noqa: E731
    cols = [Col("dataset", key=True), Col("protocol"), Col("enabled"), Col("raw"), Col("sessions"), Col("samples"),
            Col("source", wrap=True), Col("paper size", wrap=True)]
    rows = [[e["dataset"], e["protocol"], mark(e["enabled"]), mark(e["raw"]), mark(e["sessions"]),
             "stale" if e["stale"] else mark(e["samples"]), f"{e['source']} ({e['origin']})", e["paper_size"]]
            for e in entries]
    print_tables(console, "seqpe datasets", cols, rows)
    for e in entries:
        if e["stale"]:
            console.print(f"stale: {e['stale']}", markup=False, highlight=False)
    if not data_dir.is_dir():        # run from data/ itself, or elsewhere: every dataset looked absent from disk
        here = [kind for kind in ("raw", "sessions", "samples") if Path(kind).is_dir()]
        console.print(f"note: no {data_dir}/ folder here, so nothing shows as on disk; "
                      + ("this folder holds " + ", ".join(f"{k}/" for k in here) + ": pass --data-dir ."
                         if here else "run it from the project's root, or pass --data-dir"),
                      markup=False, highlight=False, soft_wrap=True)


def _stale(samples: Path) -> Optional[str]:
    """io.stale_samples for the listing; a manifest that does not read is left to `seqpe stats` to name."""
    from .io import read_json, stale_samples
    try:
        manifest = read_json(samples / "manifest.json")
    except (DataError, OSError):
        return None
    return stale_samples(samples, manifest) if isinstance(manifest, dict) else None


@app.command()
def download(dataset: str,
             dst: Annotated[Optional[Path], typer.Argument(help="raw folder (default data/raw/DATASET)")] = None,
             from_path: Annotated[Optional[Path], typer.Option("--from", help="use a file you already have (archive or extracted)")] = None,
             mirror: Annotated[Optional[str], typer.Option(help="mirror base URL (or env SEQPE_MIRROR)")] = None,
             params: ParamsOpt = None, overrides: DataSetOpt = None, quiet: QuietOpt = False):
    """Fetch, verify and unpack a dataset's raw source into DST, writing source.json."""
    _only_read("download", overrides)
    from . import download as stage
    from .datasets import get
    p = _params(params, overrides)
    summary = stage.run(dataset, _default("raw", dataset, dst), p.download, from_path=from_path,
                        mirror=mirror, progress=not quiet,
                        sample=getattr(p.preprocess, get(dataset).source.generate_params))
    if not quiet:
        console.print(_kv_table(f"download {dataset}", summary))


@app.command()
def preprocess(dataset: str,
               src: Annotated[Optional[Path], typer.Argument(help="raw folder (default data/raw/DATASET)")] = None,
               dst: Annotated[Optional[Path], typer.Argument(help="sessions folder (default data/sessions/DATASET)")] = None,
               params: ParamsOpt = None, overrides: DataSetOpt = None, quiet: QuietOpt = False):
    """Filter and split sessions under the dataset's protocol into Parquet shards + manifest."""
    _only_read("preprocess", overrides)
    from . import preprocess as stage
    manifest = stage.run(dataset, _default("raw", dataset, src),
                         _default("sessions", dataset, dst, check=False), _params(params, overrides))
    if not quiet:
        _print_manifest(manifest)


@app.command()
def augment(dataset: str,
            src: Annotated[Optional[Path], typer.Argument(help="sessions folder (default data/sessions/DATASET)")] = None,
            dst: Annotated[Optional[Path], typer.Argument(help="samples folder (default data/samples/DATASET)")] = None,
            params: ParamsOpt = None, overrides: DataSetOpt = None, quiet: QuietOpt = False):
    """Write (prefix, target) samples from prepared sessions."""
    _only_read("augment", overrides)
    from . import augment as stage
    manifest = stage.run(dataset, _default("sessions", dataset, src),
                         _default("samples", dataset, dst, check=False), _params(params, overrides))
    if not quiet:
        _print_manifest(manifest)


@app.command()
def stats(dataset: str,
          root: Annotated[Optional[Path], typer.Argument(help="a sessions or samples folder (default "
                                                               "data/sessions/DATASET, else "
                                                               "data/samples/DATASET)")] = None,
          as_json: JsonOpt = False):
    """Show a prepared folder's manifest counts as a table."""
    from .io import put_back_noted, read_manifest, require_dataset
    samples = Path("data") / "samples" / dataset     # `import --sessions ELSEWHERE` leaves only the samples here
    folder = samples if root is None and not (Path("data") / "sessions" / dataset).exists() and samples.is_dir() \
        else _default("sessions", dataset, root)
    put_back_noted(folder)                          # a dead writer's previous output beside it (walk 36c)
    if not folder.exists():
        raise DataError(f"{folder} does not exist", f"run `seqpe preprocess {dataset}` (sessions) or `seqpe augment "
                        f"{dataset}` (samples) first, or pass a sessions or samples folder")
    manifest = read_manifest(folder)
    require_dataset(folder, manifest, dataset, f"name the dataset it holds: `seqpe stats {{owner}} {folder}`")
    if as_json:
        from .tables import to_json
        keys = ("dataset", "kind", "stage", "protocol", "n_items", "max_len", "steps", "splits", "augment")
        to_json({k: manifest.get(k) for k in keys})
        return
    _print_manifest(manifest)


def _print_manifest(m: dict) -> None:
    from .tables import Col, print_tables
    fmt = lambda v: f"{v:,}" if isinstance(v, int) else ("" if v is None else str(v))  # noqa: E731
    steps = m.get("steps", [])
    counts = [name for name in ("rows", "sessions", "clicks", "items")        # CTR steps count rows and clicks
              if any(step.get(name) is not None for step in steps)]             # only: no empty columns
    cols = [Col("step", wrap=True)] + [Col(name, "right") for name in counts]
    rows = [[step["step"]] + [fmt(step.get(name)) for name in counts] for step in steps]
    print_tables(console, f"{m.get('dataset', '?')} · {m.get('stage', '')} · protocol {m.get('protocol', '?')}",
                 cols, rows)
    rows = {"n_items": m.get("n_items")}
    if m.get("protocol") == "ctr":     # raw ids are not renumbered: n_items read as a count of 999 items (walk 32b)
        rows = {"item ids": f"{fmt(m.get('n_items'))} (the largest raw id + 1: ids are not renumbered, so not a count)"}
        vocab = (m.get("ctr") or {}).get("vocab") or {}
        if vocab:
            counted = (m.get("ctr") or {}).get("counted_on")
            rows["vocabulary"] = ", ".join(f"{table} {fmt(v.get('kept'))} ids kept (min count {v.get('min_count')})"
                                           for table, v in vocab.items()) + (f"; counted on {counted}" if counted else "")
    splits = m.get("splits", {})                      # the manifest's keys are sorted: show train, valid, test
    for split in sorted(splits, key=lambda x: (("train", "valid", "test") + (x,)).index(x)):
        rows[split] = ", ".join(f"{k} {v:,}" for k, v in splits[split].items())
    console.print(_kv_table("result", rows))


# --------------------------------------------------------------------------- formats

@app.command("import")
def import_(dataset: str,
            src: Annotated[Path, typer.Argument(help="folder (SR-GNN pickles, or BARS CTR train.csv + test.csv) "
                                                     "or file (SASRec / S3-Rec text: `user item item ...` or "
                                                     "`user item` per line)")],
            fmt: Annotated[str, typer.Option("--format", help="auto (a folder: srgnn, or by its train.csv header "
                                                              "kuaivideo_x1 / amazonelectronics_x1; a text file: "
                                                              "sasrec) | srgnn | sasrec | kuaivideo_x1 | "
                                                              "amazonelectronics_x1")] = "auto",
            sessions: Annotated[Optional[Path], typer.Option(help="sessions folder to write")] = None,
            samples: Annotated[Optional[Path], typer.Option(help="samples folder to write")] = None,
            params: ParamsOpt = None, overrides: DataSetOpt = None, quiet: QuietOpt = False):
    """Import canonical prepared files as seqpe sessions and samples under DATASET's name.

    Pickles are read with a restricted unpickler (lists, tuples and ints only). Valid is carved
    like `preprocess` does (preprocess.valid_fraction); `train` works on the samples folder and
    `augment` on the sessions folder. CTR files in a BARS benchmark's layout (one's own logs, a
    subset) go through that benchmark's CTR protocol and vocabulary under a name of their own.
    """
    _only_read("import", overrides)
    from . import formats
    summary = formats.import_dataset(dataset, src, fmt, _default("sessions", dataset, sessions, check=False),
                                     _default("samples", dataset, samples, check=False), _params(params, overrides))
    if not quiet:
        console.print(_kv_table(f"import {dataset} ({summary.get('format', fmt)})", summary))


@app.command()
def export(dataset: str,
           out: Annotated[Path, typer.Argument(help="folder to write (new, or holding only a previous export)")],
           fmt: Annotated[str, typer.Option("--format", help="srgnn | sasrec")] = "srgnn",
           sessions: Annotated[Optional[Path], typer.Option(help="sessions folder to read (default "
                                                                 "data/sessions/DATASET)")] = None,
           quiet: QuietOpt = False):
    """Export prepared sessions as SR-GNN pickles (train.txt, test.txt, all_train_seq.txt) or S3-Rec text.

    S3-Rec text (--format sasrec) holds one line per user with its full sequence, every user included:
    those a dataset keeps for training only (CARCA's users with fewer than 3 interactions) too, counted
    in the summary.
    """
    from . import formats
    summary = formats.export_dataset(_default("sessions", dataset, sessions), out, fmt, dataset)
    if not quiet:
        console.print(_kv_table(f"export {dataset} ({fmt})", summary))


# --------------------------------------------------------------------------- training

@app.command()
def train(dataset: str,
          samples: Annotated[Optional[Path], typer.Argument(help="samples folder (default data/samples/DATASET)")] = None,
          runs: Annotated[Optional[Path], typer.Argument(help="runs folder (default data/runs/DATASET)")] = None,
          model: Annotated[Optional[str], typer.Option(help="model name (default: the study grid's first for "
                                                             "this dataset's task)")] = None,
          encoding: Annotated[Optional[str], typer.Option(
              help="encoding name (default: the preset's, the model's own (parec, fparec), or the grid's first)")] = None,
          seed: Annotated[Optional[list[int]], typer.Option(help="seed(s) (default study.seeds)")] = None,
          preset: Annotated[Optional[str], typer.Option(
              help="model's named settings, e.g. paper (train + model/encoding options, per-dataset "
                   "variants matched by a word of the dataset name, or named: paper_men; --set train.KEY "
                   "and params.yaml models:/encodings: win over it)")] = None,
          tag: Annotated[Optional[str], typer.Option(
              help="name a variant (ablation, option sweep): runs go to MODEL-ENCODING-TAG/ and report "
                   "as their own row")] = None,
          metrics: Annotated[Optional[Path], typer.Option(
              "--metrics", help="also write the configuration's metrics (means over seeds, stable keys "
                                "test.*/valid.*) to this JSON file (a DVC metrics file)")] = None,
          live: Annotated[Optional[Path], typer.Option(
              "--live", help="also log per-epoch curves with dvclive under this folder (DVC plots)")] = None,
          check: Annotated[bool, typer.Option(
              "--check", help="check the command (settings, preset, model and encoding, samples, output "
                              "folders) and build the model once; train nothing, write nothing")] = False,
          params: ParamsOpt = None, overrides: SetOpt = None, quiet: QuietOpt = False):
    """Train a model (best epoch chosen on valid) and score it once on test, for every seed.

    Resuming needs no option: run the same command again after a Ctrl-C or a kill (after train.time_limit,
    with a longer limit, or 0: the limit counts the epochs already trained) and each seed goes on from its
    last finished epoch (`seqpe state` lists what can be resumed)."""
    _only_read("train", overrides)
    if live is not None:
        import dvclive  # noqa: F401 (missing: one line now, not after the seeds trained; walk 45a #4)
    from . import train as stage
    results = stage.run(dataset, _default("samples", dataset, samples),
                        _default("runs", dataset, runs, check=False), _params(params, overrides), model=model,
                        encoding=encoding, seeds=seed, preset=preset, progress=not quiet, overrides=overrides, tag=tag,
                        metrics_path=metrics, live_dir=live, check=check)
    global _TRAINED
    _TRAINED = not check
    if check:
        [ok] = results
        built = (f", {ok['parameters']:,} parameters" if ok["parameters"] is not None
                 else " (not built: train.memory_budget is set)")
        if ok["reused"]:
            built += f"; seed {', '.join(map(str, ok['reused']))} finished with these settings: reused, not retrained"
        seeds = f"seed{'s' * (len(ok['seeds']) > 1)} {', '.join(map(str, ok['seeds']))}"
        if os.environ.get("RANK", "0") == "0":          # torchrun: each rank checks, rank 0 says so
            console.print(f"ok: {dataset} {ok['name']} {seeds} would train into {Path(ok['runs'][0]).parent}"
                          f"{built}", highlight=False, markup=False, soft_wrap=True)
    elif not quiet:
        _print_runs(results)


@app.command()
def evaluate(dataset: str,
             runs: Annotated[Optional[Path], typer.Argument(help="runs folder (default data/runs/DATASET)")] = None,
             out: Annotated[Optional[Path], typer.Argument(help="reports folder (default data/reports/DATASET)")] = None,
             all_runs: Annotated[bool, typer.Option("--all", help="report every configuration under RUNS, not "
                                                                  "only the study grid's")] = False,
             samples: Annotated[Optional[Path], typer.Option(
                 "--samples", help="the dataset's samples folder (CTR: test labels for the per-sample tests; "
                                   "default data/samples/DATASET where it exists)")] = None,
             baseline: Annotated[Optional[str], typer.Option(
                 "--baseline", help="configuration the others are tested against (default study.reference, "
                                    "else the grid's first; outside the grid the first in sorted order; runs of "
                                    "another protocol, e.g. sampled candidates, against their own first); an "
                                    "encoding, e.g. none: each model against its own MODEL-none")] = None,
             params: ParamsOpt = None, overrides: ReportSetOpt = None, quiet: QuietOpt = False):
    """Report the study grid's runs of DATASET: mean, std and 95% CI over seeds, tables and figures
    (comparison bars, learning curves).

    A dataset outside the study grid reports every configuration under RUNS, as with --all."""
    from . import evaluate as stage
    from .report import print_tables
    _only_read("evaluate", overrides)
    for text in overrides or []:          # evaluate reads finished runs: a training setting would change nothing
        key = text.split("=", 1)[0].strip()
        scored = key in ("evaluate.candidates", "evaluate.mask_history", "evaluate.candidate_sampling",
                         "evaluate.batch_size")       # applied when `seqpe train` scores a run's test split
        if key.split(".", 1)[0] in ("train", "models", "encodings") or scored:
            raise ParamsError(f"--set {text.strip()} sets how runs are {'scored when they are ' * scored}trained, "
                              f"and `seqpe evaluate` reports runs already {'scored' if scored else 'trained'} "
                              "(the report names each one's protocol): it would be ignored",
                              "train with it first (`seqpe train ... --set ...`, or params.yaml and `dvc repro`), "
                              "then evaluate")
    the_params = _params(params, overrides)
    reports = _default("reports", dataset, out, check=False)
    guessed = samples is None and (Path("data/samples") / dataset / "manifest.json").is_file()
    if guessed:                    # as dvc.yaml passes it: a hand run's CTR rows lacked their per-sample tests
        samples = Path("data/samples") / dataset
    summary = stage.run(dataset, _default("runs", dataset, runs), reports, the_params, all_runs=all_runs,
                        samples_dir=samples, baseline=baseline, samples_guessed=guessed, params_file=params)
    if not all_runs and stage.study_configs(the_params, dataset) is None:     # it used to say nothing of either
        err_console.print(f"note: '{dataset}' is in no study grid, so every configuration under the runs folder is "
                          f"reported (as with --all), tested against {summary['reference']}"
                          + ("" if baseline else " (the first in sorted order; --baseline names another, or "
                                                  "--baseline none tests each model against its own MODEL-none)"),
                          highlight=False, markup=False, soft_wrap=True)
    if not quiet:
        _print_runs(summary.get("runs", []))
        print_tables(console, summary["configs"])
        console.print(f"wrote {reports}: {', '.join(stage.REPORT_FILES)}", highlight=False, markup=False,
                      soft_wrap=True)


@app.command()
def report(runs: Annotated[Optional[list[Path]], typer.Argument(help="runs folders (default data/runs)")] = None,
           out: Annotated[Optional[Path], typer.Option("--out", help="also write FILE.md or FILE.csv")] = None,
           baseline: Annotated[Optional[str], typer.Option(
               "--baseline", help="configuration the others are tested against, e.g. sasrec-lpe "
                                  "(default: the first in sorted order of each dataset and protocol); an "
                                  "encoding, e.g. none: each model against its own MODEL-none")] = None,
           samples: Annotated[Optional[Path], typer.Option(
               "--samples", help="CTR runs: the samples folder whose test labels the per-sample tests need "
                            "(default: the runs' own data/samples/DATASET, found by its shards)")] = None,
           as_json: JsonOpt = False, quiet: QuietOpt = False):
    """Aggregate runs over seeds (mean, std, 95% CI) and test each configuration against a baseline.

    Every test metric of every configuration under RUNS; the tests are a paired t-test over seeds and
    Wilcoxon and bootstrap tests over samples."""
    from . import report as stage
    left_out: list[dict] = []
    rows = stage.run(runs or [Path("data") / "runs"], out, baseline=baseline, samples=samples, left_out=left_out,
                     empty=as_json)
    if as_json:
        from .tables import to_json
        to_json(stage.to_json(rows, left_out))
    elif not quiet:
        stage.print_tables(console, rows)
        if out is not None:
            console.print(f"wrote {out}", highlight=False, markup=False, soft_wrap=True)


# --------------------------------------------------------------------------- using a trained run

@app.command()
def recommend(run: Annotated[Path, typer.Argument(help="a seed's run folder (checkpoint.pt + run.json), "
                                                       "e.g. data/runs/sample/sasrec-lpe/seed-1")],
              items: Annotated[Optional[str], typer.Option("--items", help="one session's items in order, "
                                                                            "e.g. 12,55,9")] = None,
              users: Annotated[Optional[list[str]], typer.Option(
                  "--user", help="leave-one-out data: a user's raw id (repeatable); the user's whole sequence "
                                 "is the session (sessions folder: users.parquet, test split)")] = None,
              k: Annotated[int, typer.Option("-k", "--k", help="how many items to list")] = 10,
              input_file: Annotated[Optional[Path], typer.Option(
                  "--input", help="batch mode: Parquet or CSV of sessions (an `items` list column, or "
                                  "session_id,item_id rows)")] = None,
              out: Annotated[Optional[Path], typer.Option("--out", help="batch mode: top-K Parquet to write "
                                                                        "(session_id, rank, item, score)")] = None,
              raw_ids: Annotated[bool, typer.Option(
                  "--raw-ids", help="ids are the dataset's raw ids (mapped through the sessions folder's "
                                    "items.parquet)")] = False,
              sessions: Annotated[Optional[Path], typer.Option(
                  "--sessions", help="the dataset's sessions folder: checked against the run's vocabulary; "
                                     "needed by --raw-ids (default data/sessions/DATASET when it exists)")] = None,
              drop_unknown: Annotated[bool, typer.Option(
                  "--drop-unknown", help="with --raw-ids: leave out clicks on items the run never saw")] = False,
              exclude_seen: Annotated[Optional[bool], typer.Option(
                  "--exclude-seen/--include-seen", help="leave a session's own items out of its list "
                                                        "(default: the run's evaluate.mask_history)")] = None,
              device: Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N")] = "auto",
              batch_size: Annotated[int, typer.Option(help="sessions scored per batch")] = 512,
              as_json: JsonOpt = False, quiet: QuietOpt = False):
    """Top-K items from a trained next-item run, for one session (--items) or a file of them (--input)."""
    from . import recommend as rec
    users = [u.strip() for u in users] if users else users      # as user_sessions reads them (walk 41a #3)
    given = [name for name, v in (("--items", items is not None), ("--input", input_file is not None),
                                  ("--user", bool(users))) if v]
    if items is not None and not items.strip():       # was "give one of --items ..." (walk 43f #4)
        raise ParamsError("--items is empty", "give the session's items in order, e.g. --items 12,55,9")
    if len(given) != 1:
        raise ParamsError("give one of --items (one session), --input FILE (many) or --user RAW_ID (leave-one-out "
                          "users)" + (f", not {' and '.join(given)}" if given else ""),
                          "e.g. seqpe recommend RUN --items 12,55,9 -k 10")
    if input_file is not None and out is None:
        raise ParamsError("--input needs --out FILE.parquet for the top-K lists", "add --out topk.parquet")
    if items is not None and out is not None:
        raise ParamsError("--out is for --input (many sessions); --items prints its one list",
                          "drop --out, or put the session in a file and pass it with --input")
    if drop_unknown and (not raw_ids or users):
        raise ParamsError("--drop-unknown applies to raw ids given with --items or --input" +
                          (", and --user reads the user's sequence from the dataset" if users else
                           ", and --raw-ids was not given"),
                          "drop --drop-unknown" + ("" if users else ", or add --raw-ids (an internal id outside the "
                                                                     "vocabulary is an error)"))
    if batch_size < 1:
        raise ParamsError(f"--batch-size {batch_size} is not positive", "pass e.g. --batch-size 512")
    if out is not None:
        rec.check_out(out)                    # before the model is loaded and every session scored
    record = rec.read_json(run / "run.json") if (run / "run.json").is_file() else {}
    if sessions is None and record.get("dataset"):
        default = Path("data") / "sessions" / str(record["dataset"])
        sessions = default if (default / "manifest.json").is_file() else None
    if (raw_ids or users) and sessions is None:
        raise ParamsError(f"{'--user' if users else '--raw-ids'} needs the dataset's sessions folder (its "
                          f"{'users' if users else 'items'}.parquet maps raw ids)", "pass --sessions data/sessions/DATASET")
    model = rec.load_run(run, sessions, device=device, cli=True)
    import polars as pl
    if users:
        frame = model.recommend_frame(model.user_sessions(users), k, exclude_seen=exclude_seen,
                                      batch_size=batch_size)
        if raw_ids:                       # the users' sequences are internal ids: only the listed items are mapped
            frame = frame.with_columns(pl.col("item").replace_strict(
                model.items.get_column("item_id"), model.items.get_column("raw_id"), return_dtype=pl.String))
        _note_cut(model, exclude_seen, ("user's sequence", "users' sequences"))
        short = frame.group_by("session_id").len().filter(pl.col("len") < k).height + \
            len(set(users) - set(frame.get_column("session_id").to_list()))
        if short:
            err_console.print(_short_list(f"{short:,} user{'s' * (short != 1)} got fewer", k, model, exclude_seen),
                              highlight=False, markup=False, soft_wrap=True)
        if out is not None:
            rec.write_topk(frame, out)
        rows = frame.rename({"session_id": "user"})
        if as_json:
            from .tables import to_json
            to_json(rows.to_dicts() if out is None else {"run": str(run), "users": len(users), "k": k,
                                                         "rows": frame.height, "out": str(out)})
        elif not quiet and out is not None:
            console.print(_kv_table("recommend", {"run": str(run), "users": len(users), "k": k,
                                                  "rows": frame.height, "out": str(out)}))
        elif not quiet:
            from .tables import Col, print_tables
            console.print(f"top {k} of {run} for user{'s' * (len(users) > 1)} {', '.join(users)}",
                          highlight=False, markup=False, soft_wrap=True)
            print_tables(console, None, [Col("user", "left", key=True), Col("rank", "right", key=True),
                                         Col("item", "right"), Col("score", "right")],
                         [[u, str(r), str(i), f"{sc:.4f}"] for u, r, i, sc in rows.iter_rows()])
        return
    if input_file is not None:
        frame = model.recommend_frame(rec.read_sessions(input_file), k, raw_ids=raw_ids, drop_unknown=drop_unknown,
                                      exclude_seen=exclude_seen, batch_size=batch_size)
        rec.write_topk(frame, out)
        _note_cut(model, exclude_seen)
        excluded = model.exclude_seen if exclude_seen is None else exclude_seen     # said (walk 39e #6)
        summary = {"run": str(run), "sessions": frame.get_column("session_id").n_unique(), "k": k,
                   "seen items": ("left out" if excluded else "listed") + (
                       f" (the run's evaluate.mask_history: {str(model.exclude_seen).lower()})"
                       if exclude_seen is None else (" (--exclude-seen)" if excluded else " (--include-seen)")),
                   "rows": frame.height, "out": str(out)}
        short = frame.group_by("session_id").len().filter(pl.col("len") < k).height
        if short:
            err_console.print(_short_list(f"{short:,} session{'s' * (short != 1)} got fewer", k, model, exclude_seen),
                              highlight=False, markup=False, soft_wrap=True)
        if as_json:
            from .tables import to_json
            to_json(summary)
        elif not quiet:
            console.print(_kv_table("recommend", summary))
        return
    one = pl.DataFrame({"session_id": pl.Series([None], dtype=pl.Int64), "items": [rec.parse_ids(items)]})
    frame = model.recommend_frame(one, k, raw_ids=raw_ids, drop_unknown=drop_unknown,   # no id: messages say
                                  exclude_seen=exclude_seen)                              # "--items", not "session 0"
    _note_cut(model, exclude_seen)
    if frame.height < k:
        err_console.print(_short_list(f"{frame.height} listed, fewer", k, model, exclude_seen), highlight=False,
                          markup=False, soft_wrap=True)
    if as_json:
        from .tables import to_json
        to_json([{"rank": r, "item": i, "score": sc} for r, i, sc in frame.select("rank", "item", "score").iter_rows()])
    elif not quiet:
        from .tables import Col, print_tables
        console.print(f"top {k} of {run}", highlight=False, soft_wrap=True,   # a title would wrap to the table
                      markup=False)                         # `r[red]x` lost its `[red]` (walk 45b #4)
        print_tables(console, None, [Col("rank", "right", key=True), Col("item", "right"), Col("score", "right")],
                     [[str(r), str(i), f"{sc:.4f}"] for r, i, sc in frame.select("rank", "item", "score").iter_rows()])


def _note_cut(model, exclude_seen: Optional[bool], nouns: tuple[str, str] = ("session", "sessions")) -> None:
    """recommend's note for sessions longer than the run's train.max_len: the model reads their last max_len
    (and, where seen items are left out, every item given is: said with the setting that leaves them out)."""
    if model.cut:
        what = f"{model.cut:,} {nouns[0]} is" if model.cut == 1 else f"{model.cut:,} {nouns[1]} are"
        given = "given" if nouns[0] == "session" else "of the sequence"
        excluded = model.exclude_seen if exclude_seen is None else exclude_seen
        why = "" if not excluded else (" (every item {} is still left out, {})".format(
            given, "--exclude-seen" if exclude_seen else "as the run's evaluate.mask_history"))
        err_console.print(f"note: {what} longer than the run's train.max_len ({model.max_len}): scored on the "
                          f"most recent {model.max_len} items, as the model was trained{why}", highlight=False,
                          markup=False, soft_wrap=True)


def _short_list(got: str, k: int, model, exclude_seen: Optional[bool]) -> str:
    """recommend's note when a list is shorter than -k: why the items left are fewer."""
    if not (model.exclude_seen if exclude_seen is None else exclude_seen):
        return f"note: {got} than the {k} items asked: the model gave the rest no finite score"
    why = ("--exclude-seen" if exclude_seen else "the run was scored with evaluate.mask_history; --include-seen "
           "lists them")
    return (f"note: {got} than the {k} items asked: the run ranks {model.n_items:,} items and a session's own are "
            f"left out ({why})")


# --------------------------------------------------------------------------- encodings

@app.command()
def state(prune: Annotated[bool, typer.Option("--prune", help="delete the resume files and finished copies no "
                                               "command of this checkout will read (other code's, damaged, "
                                               "time-limited runs' copies) and unheld lock files")] = False,
          everything: Annotated[bool, typer.Option("--all", help="with --prune: also the work this checkout "
                                                   "would go on from (resumable seeds start afresh, finished "
                                                   "seeds kept for their configuration are trained again)")] = False,
          as_json: JsonOpt = False):
    """List what `seqpe train` keeps in .seqpe/ (or $SEQPE_STATE): resume files, finished seeds; or prune it."""
    from .train import state as train_state
    root = train_state.check_root(writing=prune)
    train_state.note_state_above()
    where = root.absolute()
    if everything and not prune:
        raise DataError("--all goes with --prune (it widens what --prune deletes)",
                        "run `seqpe state --prune --all`, or `seqpe state` to list")
    if prune:
        deleted, kept, locks = train_state.prune(everything)
        freed = sum(e["bytes"] for e in deleted)
        held = [e for e in kept if e["status"] not in train_state.PRUNABLE]       # a training holds or needs it
        usable = [e for e in kept if e["status"] in train_state.PRUNABLE]
        if as_json:
            from .tables import to_json
            to_json({"deleted": deleted, "kept": kept, "bytes_freed": freed,
                     "lock_files_removed": sum(locks.values()), "lock_files_removed_in": locks})
            return
        lock_text = "; ".join(f"{n} in {folder}" for folder, n in locks.items())   # the machine's is not `where`'s
        console.print(f"deleted {len(deleted)} entr{'y' if len(deleted) == 1 else 'ies'} of {where} "
                      f"({freed / 1e6:,.1f} MB)"
                      + (f" and unheld lock files ({lock_text})" if locks else "")
                      + (f"; kept {len(held)} that a running training holds or needs" if held else "")
                      + (f"; kept {len(usable)} that this checkout would go on from (resumable or finished "
                         f"seeds: --prune --all deletes them too)" if usable else ""),
                      highlight=False, markup=False, soft_wrap=True)
        return
    entries = train_state.entries()
    if as_json:
        from .tables import to_json
        to_json(entries)
        return
    if not entries:
        console.print(f"{where} holds no training state", highlight=False, markup=False, soft_wrap=True)
        return
    from rich.text import Text
    t = Table(title=Text(f"training state in {where}"))
    longest = max(len(word) for e in entries for word in e["status"].split())
    for name, justify in (("kind", "left"), ("seed", "left"), ("epoch", "right"), ("MB", "right"),
                          ("modified", "left"), ("status", "left")):     # a status's words are never cut
        t.add_column(name, justify=justify, overflow="fold", min_width=longest if name == "status" else None,
                     max_width=10 if name == "modified" and console.width < 120 else None)  # narrow: date over time
    for e in entries:
        epoch = "" if e["epoch"] is None else f"{e['epoch']}" + (f" of {e['epochs']}" if e["epochs"] else "")
        what = e["what"] or f"? ({e['fingerprint']})"
        if (e["processes"] or 1) > 1:
            what += f" ({e['processes']} processes)"
        t.add_row(*map(Text, (e["kind"], what, epoch, f"{e['bytes'] / 1e6:,.1f}", e["modified"], e["status"])))
    console.print(t)
    console.print("`seqpe state --prune` deletes the entries no command of this checkout will read (other code's, "
                  "damaged, time-limited runs' copies); `--prune --all` also the resumable and finished seeds "
                  "no running training holds or needs (they are then trained again); the spill maps go by "
                  "hand, when no training runs", highlight=False)


@app.command()
def models(as_json: Annotated[bool, typer.Option("--json", help="print the list as JSON")] = False):
    """List every model: task, paper, the encodings it takes, fitted or trained, objectives, presets, options."""
    from models import MODELS

    from .tables import Col, print_tables, to_json
    listed = [_model_entry(spec) for spec in MODELS.values()]
    if as_json:
        to_json(listed)
        return
    cols = [Col("name", key=True), Col("task"), Col("what", wrap=True), Col("paper", wrap=True), Col("encoding"),
            Col("objective"), Col("presets", wrap=True), Col("options (default)", wrap=True)]
    rows = [[e["name"], e["task"].replace("_", "-"), e["description"], e["paper"],
             "none" if not e["takes_encoding"] else e["takes"] or
             (f"{e['encoding']} (its own)" if e["encoding"] else "any"),
             "fitted" if e["fitted"] else " or ".join(e["objectives"]) or "-",
             "; ".join(f"{k}" + (f" ({', '.join(v)})" if v else "") for k, v in e["presets"].items()) or "-",
             ", ".join(f"{k}={v}" for k, v in e["options"].items()) or "-"] for e in listed]
    print_tables(console, "seqpe models", cols, rows, caption="`seqpe train DATASET --model NAME [--encoding E] "
                 "[--preset P]`; a preset's datasets in parentheses have their own variant; options go under "
                 "models.NAME in params.yaml (or --set models.NAME.OPTION=VALUE). " + PAPERS)


def _model_entry(spec) -> dict:
    """What `seqpe models` says of one ModelSpec (models/base.py)."""
    import dataclasses
    options = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
               for f in dataclasses.fields(spec.options)} if spec.options is not None else {}
    return {"name": spec.name, "task": spec.task, "description": spec.description, "paper": spec.paper,
            "takes_encoding": spec.uses_encoding, "encoding": spec.encoding, "takes": spec.takes or
            ("any" if spec.uses_encoding and not spec.encoding else None), "fitted": spec.fitted,
            "objectives": [] if spec.fitted or spec.task == "ctr" else ["prefixes", "sequence"] if spec.causal
            else ["prefixes"],
            "presets": {name: sorted((p.get("datasets") or {}) if isinstance(p, dict) else {})
                        for name, p in (spec.presets or {}).items()},
            "side_information": spec.side, "options": options}


encodings_app = typer.Typer(help="Positional encodings: list them, or draw one (PosRec Figs. 7-12).",
                            invoke_without_command=True, no_args_is_help=False)
app.add_typer(encodings_app, name="encodings")


PAPERS = ("papers: 000 PosRec (Qiu et al., TOIS 2021), 001 CAPE (Yuan et al., WWW 2025), 003 PARec/FPARec "
          "(Luo et al.), 004 PE study (López-Ávila et al. 2024); see pipeline/REFERENCE.md §7")


@encodings_app.callback()
def encodings(ctx: typer.Context):
    """List every positional encoding (`seqpe encodings`, or `seqpe encodings list`): paper, family, learnable,
    forward/backward-aware, options."""
    if ctx.invoked_subcommand is None:
        _list_encodings()


@encodings_app.command("list")
def encodings_list():
    """List every positional encoding: paper, family, learnable, forward/backward-aware, options."""
    _list_encodings()


def _list_encodings() -> None:
    from models.encodings import ENCODINGS  # torch-free metadata

    from .tables import Col, print_tables
    mark = lambda b: "✓" if b else "·"  # noqa: E731
    cols = [Col("name", key=True), Col("paper", wrap=True), Col("family"), Col("learnable"), Col("forward-aware"),
            Col("backward-aware"), Col("extra params", wrap=True)]
    rows = [[name, s.paper, s.family, mark(s.learnable), mark(s.forward_aware), mark(s.backward_aware),
             ", ".join(s.params) or "-"] for name, s in ENCODINGS.items()]
    print_tables(console, "seqpe positional encodings", cols, rows, caption=PAPERS)


@encodings_app.command("inspect", context_settings={"allow_extra_args": True})
def encodings_inspect(ctx: typer.Context, name: str,
                      lengths: Annotated[list[int], typer.Option("--lengths", help="session lengths, e.g. --lengths 10 20")],
                      out: Annotated[Path, typer.Option("--out", help="folder for the PNGs")],
                      run: Annotated[Optional[Path], typer.Option("--run", help="trained run folder (checkpoint.pt) for learned weights")] = None,
                      dim: Annotated[Optional[int], typer.Option(help="encoding width without --run (default 100, "
                                                                     "PosRec's)")] = None,
                      quiet: QuietOpt = False):
    """Write PNGs of an encoding's matrices and dot-product heatmaps (PosRec Figs. 7-12)."""
    from models.encodings.plots import inspect
    from .errors import ParamsError
    extra = list(ctx.args)  # `--lengths 10 20`: click leaves the values after the first here
    if not all(a.isdigit() for a in extra):
        raise ParamsError(f"unexpected arguments {extra}", "pass lengths as --lengths 10 20")
    if run is not None and dim is not None:    # was ignored without a word
        raise ParamsError(f"--dim {dim} sets the width of an encoding drawn without --run, and --run {run} draws the "
                          "run's own encoding at the width it was trained with", "drop --dim (or --run)")
    summary = inspect(name, [*lengths, *map(int, extra)], out, run_dir=run, dim=100 if dim is None else dim)
    if not quiet:
        console.print(_kv_table(f"encodings inspect {name}", {k: v for k, v in summary.items() if k != "files"}))
        for f in summary["files"]:
            console.print(f"  {Path(out) / f}", highlight=False, markup=False, soft_wrap=True)


def _print_runs(results: list[dict]) -> None:
    if not results:
        return
    from .report import _scale, metric_order
    from .tables import Col, print_tables
    keys = sorted({k for r in results for k in r.get("test", {})}, key=metric_order)
    raw = [k for k in keys if _scale(k) == 1.0]
    cols = [Col("run", key=True), Col("best epoch", "right"),
            *[Col(k, "right", group=k.split("@")[0]) for k in keys]]
    rows = [[r.get("name", "?"), "fitted" if r.get("stopped") == "fitted" else str(r.get("best_epoch", "")),
             *[(f"{r['test'][k]:.4f}" if _scale(k) == 1.0 else f"{100 * r['test'][k]:.2f}")
               if k in r.get("test", {}) else "" for k in keys]] for r in results]
    print_tables(console, "test metrics (×100" + (f"; {', '.join(raw)} as is" if raw else "") + ")", cols, rows)
    for r in results:
        if r.get("stopped") == "time_limit":
            console.print(f"{r['name']}: stopped by train.time_limit after epoch {r['epochs_run']}; the same "
                          "command with a longer limit (or 0) continues it from there", highlight=False, markup=False,
                          soft_wrap=True)


# What a Ctrl-C leaves, per command: every output is built aside and swapped in whole (pipeline/io.py),
# so an interrupted command leaves the previous output as it was (tests/test_interrupt.py checks each).
_UNCHANGED = "nothing was written: the destination keeps its previous content"
INTERRUPTED = {
    "preprocess": _UNCHANGED, "augment": _UNCHANGED, "import": _UNCHANGED, "export": _UNCHANGED,
    "train": ("the seed being trained wrote nothing (seeds finished before it are kept); its last finished epoch, "
              "if one finished, is saved, so the same command continues from there"),
    "evaluate": _UNCHANGED, "report": "nothing was written" + " (--out keeps its previous content)",
    "recommend": "nothing was written (--out keeps its previous content)",
    "state": "each seed's state is whole or gone, never half-deleted",
    "encodings": "figures finished before it are complete; none was left half-written",
}


_TRAINED = False      # `seqpe train` of this process has returned from training (its tables are being printed)


def _written(run_dir, resume) -> bool:
    """Whether the seed whose resume file is `resume` is written in `run_dir` (its run.json, of that fingerprint)."""
    if run_dir is None or resume is None:
        return False
    try:
        import json
        return json.loads((Path(run_dir) / "run.json").read_text()).get("fingerprint") == Path(resume).stem
    except (OSError, ValueError, AttributeError):
        return False


def _interrupted_note(argv: list[str]) -> str:
    from .io import INTERRUPT
    command = next((a for a in argv if not a.startswith("-")), None)
    # report and recommend are no DVC stage: `dvc repro` was said of them too (walk 43i #6)
    again = ", so `dvc repro` runs this stage again" if command in (
        "download", "preprocess", "augment", "import", "train", "evaluate") else ""
    if INTERRUPT.wrote == "ran on":
        return ("it came too late to stop the command (inside a library call that does not let it through), which "
                f"ran to its end: the output is the new one, complete; the exit status still says interrupted{again}"
                + (" (the same bytes)" if again else ""))
    if INTERRUPT.wrote:                 # Ctrl-C came while the outputs were being swapped in, and waited for it
        return ("it came as the new output was being put in place, which finished first: the output is the new one, "
                f"complete; the exit status still says interrupted{again}")
    if command == "train" and "--check" in argv:
        return "nothing was written: --check trains nothing"
    if command == "train" and "torch" in sys.modules:
        from .train.loop import LAST_SAVED
        if _TRAINED:                    # the tables were being printed: "wrote nothing" was said (walk 45b #2)
            return ("every seed had finished and is written in its run folder; only the printing of the results was "
                    "cut short (the same command reuses them)")
        if LAST_SAVED:                  # "if one finished" said nothing of which: name it
            label, epoch, run_dir, resume = (LAST_SAVED + [None, None])[:4]
            if _written(run_dir, resume):    # the seed's folder was swapped in before its state was cleared
                return (f"{label} had finished and is written in {run_dir} (the same command reuses it; a seed after "
                        "it, if any, starts from its last finished epoch)")
            return (f"the seed being trained has no run folder yet (seeds finished before it are kept); {label} is "
                    f"saved as of its epoch {epoch}, so the same command continues from there")
    if command == "download":
        return _UNCHANGED + _partial_download(argv)
    return INTERRUPTED.get(command, "nothing was left half-written")


def _partial_download(argv: list[str]) -> str:
    """Where an interrupted download's bytes wait, named (was the placeholder ".FILE.part"); nothing for generated
    data, which is not downloaded, nor for --from a file of the user's."""
    words = [a for a in argv if not a.startswith("-")]
    if "--from" in argv or len(words) < 2:
        return ""
    try:
        from .datasets import get
        src = get(words[1]).source
    except Exception:                   # an unknown name: refused before anything was fetched
        return ""
    if src.archive == "generated":
        return ""
    return f" (a partial download stays as .{src.filename}.part in it and resumes next time)"


def _rewrap_help(group: typer.Typer) -> None:
    """Give every command its docstring as help with each paragraph on one line: typer 0.29's rich help
    prints a docstring's line breaks after the first paragraph as they are, cutting sentences in two."""
    import inspect
    for info in group.registered_commands:
        if info.help is None and info.callback is not None and info.callback.__doc__:
            paragraphs = inspect.cleandoc(info.callback.__doc__).split("\n\n")
            info.help = "\n\n".join(" ".join(p.split()) for p in paragraphs)
    for sub in group.registered_groups:
        _rewrap_help(sub.typer_instance)


_rewrap_help(app)


def _plain_option_types() -> None:
    """typer 0.29's rich help prints a Python type after every option: `--quiet <bool>` and `--help
    <bool>` read as if the flag took a value (`--quiet true` is then a usage error), and a repeatable
    option shows `<list[int]>`. Here a flag shows no type and a repeatable option its element's type
    with "(repeatable)"; an argument that takes several values (`report [runs]...`) shows its element's
    type, not `<list[Path]>`. typer has no setting for this, so its option and argument classes' formatters
    are wrapped; where a typer release no longer has that method, its own rendering stays."""
    from typer.core import TyperArgument, TyperOption
    own_argument = getattr(TyperArgument, "display_type_rich", None)
    if own_argument is not None and not getattr(own_argument, "_seqpe", False):
        def argument_type_rich(self, ctx):
            shown = own_argument(self, ctx)
            if isinstance(shown, str) and shown.startswith("<list[") and shown.endswith("]>"):
                shown = "<" + shown[len("<list["):-len("]>")].lower() + ">"   # <path>, as an option shows it
            return shown

        argument_type_rich._seqpe = True
        TyperArgument.display_type_rich = argument_type_rich
    own = getattr(TyperOption, "display_type_rich", None)
    if own is None or getattr(own, "_seqpe", False):
        return

    def display_type_rich(self, ctx):
        if self.metavar is None and getattr(self, "is_flag", False):
            return None
        shown = own(self, ctx)
        if self.metavar is None and getattr(self, "multiple", False) and isinstance(shown, str):
            shown = shown.replace("<list[", "<").replace("]>", ">") + " (repeatable)"
        return shown

    display_type_rich._seqpe = True
    TyperOption.display_type_rich = display_type_rich


_plain_option_types()


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM, raised by main()'s handlers: typer turns a KeyboardInterrupt into a silent exit 130,
    so the CLI raises its own and prints what the interrupted command left (INTERRUPTED). SIGTERM (what a
    batch scheduler sends at a job's time limit or on preemption, `kill`'s default, and what torchrun passes
    on to its workers) takes the same path: without a handler Python dies at once, leaving a train seed's
    lock files behind and no line saying what is kept; with it, the seed's last finished epoch is kept for the
    same command to resume, and the exit code is 143 (128 + 15), as the shell's for a terminated process."""
    seen = False          # set by the handler: an error that follows a Ctrl-C is the Ctrl-C's doing
    signum = 0            # the signal that raised it (SIGINT or SIGTERM)


def _on_signal(signum, frame):
    Interrupted.seen = True
    Interrupted.signum = signum
    # io.check_interrupt raises it again if Python drops this raise. Not `from .io import INTERRUPT`: a Ctrl-C
    # while pipeline.io was half imported made that import fail inside the handler, a 40-line ImportError
    # traceback instead of the one line (walk 38b D5); before io is loaded there is no check to tell
    interrupt = getattr(sys.modules.get(f"{__package__}.io"), "INTERRUPT", None)
    if interrupt is not None:
        interrupt.pending = signum
    raise Interrupted()


def _os_error(e: OSError) -> str:
    """One line for an OSError: the path as the user gave it (not an atomic write's temporary name) and a fix
    for the error at hand."""
    import errno

    from .io import user_path
    path = user_path(e.filename) if e.filename else None
    what = (e.strerror or str(e) or e.__class__.__name__) + (f": {path}" if path else "")
    place = f"{Path(path).parent}" if path else "that folder"
    fixes = {errno.EACCES: f"make {place} writable (or readable), or pass a destination elsewhere",
             errno.EPERM: f"make {place} writable (or readable), or pass a destination elsewhere",
             errno.EROFS: "pass a destination on a writable disk",
             errno.ENOSPC: f"free space on the disk that holds {place}, or pass a destination on another one"
             if path else "free space on that disk, or pass a destination on another one",
             errno.EISDIR: "that path is a folder: pass a file path",
             errno.ENOTDIR: "a part of that path is a file: pass a path whose parents are folders",
             errno.EEXIST: "a file is in the way: move it, or pass another path"}
    return f"{what}. Fix: {fixes.get(e.errno, 'check that path (permissions, free space, a file or a folder)')}"


def _usage_line(e) -> str:
    """A click usage error as one line: its message and the help of the (sub)command it concerns, named as
    `seqpe train` however seqpe was started (python -m ...)."""
    names, ctx = [], e.ctx
    while ctx is not None and ctx.parent is not None:
        names.insert(0, ctx.info_name)
        ctx = ctx.parent
    if not names:                                   # raised while the group parsed (--seed with no value)
        group = typer.main.get_command(app)
        for word in sys.argv[1:]:
            group = getattr(group, "commands", {}).get(word)
            if group is None:
                break
            names.append(word)
    message = e.format_message().strip()
    if type(e).__name__ == "NoSuchOption" and getattr(e, "option_name", None):   # click's cutoff 0.6 offered
        import difflib                                                         # --quiet for --user (walk 39e #9)
        close = difflib.get_close_matches(e.option_name, list(getattr(e, "possibilities", None) or ()), 3, 0.75)
        message = f"No such option: {e.option_name}" + (f" (did you mean {' or '.join(close)}?)" if close else "")
    message += "" if message.endswith((".", "?", "!")) else "."
    if names == ["train"] and getattr(e, "option_name", None) in ("--resume", "--continue"):   # walk 35b
        return (f"{message} Fix: resuming needs no option: run the same command without it, and each seed goes "
                "on from its last finished epoch (`seqpe state` lists what can be resumed)")
    return f"{message} Fix: see `{' '.join(['seqpe', *names])} --help`"


def main(process: bool = False) -> None:
    """Entry point: usage errors (an unknown option, `--seed abc`) become one line on stderr and exit code 2,
    as click's convention; domain errors one line and exit code 1; Ctrl-C one line and exit code 130, SIGTERM
    one line and 143 (Interrupted). `process`: the `seqpe` console script (pipeline/entry.py), which exits when
    this returns: a Ctrl-C or SIGTERM after the command's end is then ignored, where restoring Python's own
    handler made one landing in the exit exit 130 without a line, the output complete (walk 39c #4)."""
    import signal
    for stream in (sys.stdout, sys.stderr):     # an output that cannot take `·`, `✓` or `Δ` (PYTHONIOENCODING=ascii,
        if (stream is not None and str(getattr(stream, "encoding", "utf-8")).lower().replace("-", "") != "utf8"
                and hasattr(stream, "reconfigure")):                     # a latin-1 terminal) ended the tables
            stream.reconfigure(errors="replace")                         # in a traceback (walk 45a #7)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    installed = []
    if previous[signal.SIGINT] is signal.default_int_handler:    # not when SIGINT is ignored
        signal.signal(signal.SIGINT, _on_signal)
        installed.append(signal.SIGINT)
    if previous[signal.SIGTERM] == signal.SIG_DFL:                # not when ignored or handled by a caller
        signal.signal(signal.SIGTERM, _on_signal)
        installed.append(signal.SIGTERM)
    broken_pipe = Console.__dict__.get("on_broken_pipe")     # (rich 13.0 has none: _pipe_closed's way then)
    Console.on_broken_pipe = _on_broken_pipe
    unraisable = sys.unraisablehook
    sys.unraisablehook = lambda info: None if isinstance(info.exc_value, (Interrupted, KeyboardInterrupt)) \
        else unraisable(info)   # a raise Python drops (a weakref callback's) printed its traceback: _main says it
    try:
        _main(tuple(installed) if process else ())
    finally:                                    # called in-process (tests, a notebook): leave the handlers as found
        from .io import INTERRUPT
        INTERRUPT.pending, INTERRUPT.wrote = 0, False     # and a next command in the process starts afresh
        global _TRAINED
        _TRAINED = False
        Interrupted.seen, Interrupted.signum = False, 0
        if (dist := sys.modules.get(f"{__package__}.train.distributed")) is not None:
            dist.JOINED = False
        sys.unraisablehook = unraisable
        if broken_pipe is None:
            del Console.on_broken_pipe
        else:
            Console.on_broken_pipe = broken_pipe
        for sig, handler in previous.items():
            if process and sig in installed:      # the console script exits now: the command said what it did
                signal.signal(sig, signal.SIG_IGN)
            elif handler is not None:
                signal.signal(sig, handler)


def _under_dvc() -> str:
    """What an error line adds when a DVC stage ran the command (DVC_STAGE set) and DVC removed that stage's
    outputs before running it: a bad value in params.yaml then left them deleted, and the fix said nothing of it
    (walk 35a). Only when dvc.lock records outputs of the stage and one of them is gone: a missing input, or an
    output that is still there, got the restore hint too (walk 35c #7)."""
    stage = os.environ.get("DVC_STAGE")
    if not stage:
        return ""
    try:
        import yaml
        outs = yaml.safe_load(Path("dvc.lock").read_text(encoding="utf-8"))["stages"][stage].get("outs") or []
        gone = [str(o["path"]) for o in outs if not Path(str(o["path"])).exists()]
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return ""                                      # no record of outputs the stage had: nothing to put back
    if not gone:
        return ""
    in_git = _tracked_by_git(gone)          # metrics, curves and reports a study keeps in git (cache: false)
    uncached = _uncached(gone)
    back = [f"`dvc checkout {stage}` puts back the cached ones"] if set(gone) - set(in_git) - set(uncached) else []
    if in_git:
        back.append(f"`git checkout -- {' '.join(in_git[:2])}{' ...' if len(in_git) > 2 else ''}` the ones kept in git")
    if set(uncached) - set(in_git):     # walk 38b D4: `dvc checkout` was named, which never restores these
        back.append(f"`dvc repro {stage}` once the value is fixed makes again those DVC does not cache")
    return (f" (DVC removed the outputs of stage {stage} before running it ({', '.join(gone[:2])}"
            f"{', ...' if len(gone) > 2 else ''}): {', '.join(back[:-1]) + ', and ' if len(back) > 1 else ''}{back[-1]})")


def _uncached(paths: list[str]) -> list[str]:
    """The `paths` dvc.yaml declares `cache: false` (a study's metrics and curves), its ${...} templates matching
    one path part each; [] when dvc.yaml does not read."""
    import re

    import yaml
    try:
        stages = yaml.safe_load(Path("dvc.yaml").read_text(encoding="utf-8"))["stages"]
        patterns = []
        for body in stages.values():
            body = body.get("do", body)                                  # foreach stages keep theirs under do
            for key in ("outs", "metrics", "plots"):
                for entry in body.get(key) or []:
                    if isinstance(entry, dict):
                        for path, opts in entry.items():
                            if isinstance(opts, dict) and opts.get("cache") is False:
                                parts = re.split(r"\$\{[^}]*\}", str(path))
                                patterns.append(re.compile("[^/]+".join(map(re.escape, parts))))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return []
    return [p for p in paths if any(pattern.fullmatch(p) for pattern in patterns)]


def _tracked_by_git(paths: list[str]) -> list[str]:
    """Those of `paths` git tracks (a folder: any file under it) in the working folder's repository; none when
    git is missing or this is not a repository. A preprocess stage's outputs are DVC's alone: its error said
    "`git checkout` the metrics" too (walk 36c #11)."""
    import subprocess
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", *paths], capture_output=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    files = [f for f in out.decode("utf-8", "replace").split("\0") if f]
    return [p for p in paths if any(f == p or f.startswith(p.rstrip("/") + "/") for f in files)]


def _said_folder() -> Path | None:
    """torchrun's attempt folder of this launch on this machine (TORCHELASTIC_ERROR_FILE is ATTEMPT/RANK/error.json),
    where the processes leave _first_to_say's markers; None outside a multi-process torchrun launch."""
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not error_file or os.environ.get("WORLD_SIZE", "1") in ("", "0", "1"):
        return None
    return Path(error_file).parent.parent


def _first_to_say(line: str) -> bool:
    """Whether this process prints the error `line`. Under torchrun every process runs the same checks, so a
    bad input stopped each with the same line, printed once per process. The processes of one launch on one
    machine share torchrun's attempt folder (TORCHELASTIC_ERROR_FILE is ATTEMPT/RANK/error.json): the first to
    create a marker named after the line prints it, the others stay silent, and a line only some processes
    reach (one rank's device) is still printed. Outside torchrun, or if the marker cannot be made, always."""
    folder = _said_folder()
    if folder is None:
        return True
    import hashlib
    marker = folder / f"seqpe-said-{hashlib.sha256(line.encode()).hexdigest()[:16]}"
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    except OSError:
        return True
    return True


def _another_said() -> bool:
    """Under torchrun: a process of this launch on this machine has printed a line already (_first_to_say's
    markers in the attempt folder)."""
    folder = _said_folder()
    if folder is None:
        return False
    try:
        return any(folder.glob("seqpe-said-*"))
    except OSError:
        return False


# seqpe's dependencies (pyproject.toml), by the name they are imported as
_DEPENDENCIES = {"polars": "polars", "pyarrow": "pyarrow", "torch": "torch", "dvc": "dvc", "dvclive": "dvclive",
                 "scipy": "scipy", "matplotlib": "matplotlib", "numpy": "numpy", "yaml": "pyyaml",
                 "requests": "requests", "urllib3": "urllib3", "rich": "rich", "typer": "typer", "py7zr": "py7zr"}


def _main(quiet_after: tuple = ()) -> None:
    """The command, its errors said in one line. `quiet_after`: the signals whose handler this process installed
    and ignores once the command is done (main's `process`)."""
    import signal

    from rich.markup import escape

    from .errors import printable
    # click's UsageError (NoSuchOption, BadParameter, ...): typer vendors click in some versions and not in
    # others, and exports BadParameter alone, so the base class is found from it
    usage_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
    click_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
    try:
        try:
            code = app(standalone_mode=False)         # usage errors come here, to be said in one line below
            for sig in quiet_after:                   # done: a signal from here on changes nothing (main)
                signal.signal(sig, signal.SIG_IGN)
            if Interrupted.seen:      # the handler's raise landed in a callback Python ignores (a weakref's, the
                from .io import INTERRUPT            # garbage collector's): the command ran on to its end
                INTERRUPT.wrote = "ran on"          # (walk 35b), so the output is the new one: say so, exit 130
                raise Interrupted()
            sys.exit(code if isinstance(code, int) else 0)   # click's Exit code (--help: 0), as standalone click
        except usage_error as e:                      # typer drew a box of several lines around these
            if type(e).__name__ == "NoArgsIsHelpError":   # `seqpe` alone: the help (typer's rich help has
                if e.format_message():                      # printed it already; plain click's is the message)
                    e.show()
                sys.exit(e.exit_code)
            err_console.print(f"[bold red]error:[/] {escape(printable(_usage_line(e)))}", highlight=False,
                              soft_wrap=True)
            sys.exit(e.exit_code)
        except click_error as e:                      # click's others (standalone mode printed them)
            err_console.print(f"[bold red]error:[/] {escape(printable(e.format_message()))}", highlight=False,
                              soft_wrap=True)
            sys.exit(e.exit_code)
        except typer.Abort:
            raise KeyboardInterrupt() from None
        except Exception as e:
            # A Ctrl-C landing inside an import (Polars, loaded lazily) can leave that module half made, and the
            # code after it fails with an AttributeError instead of the interrupt: report the interrupt.
            if Interrupted.seen:
                raise Interrupted() from None
            if isinstance(e, RuntimeError) and str(e).startswith("Symlink loop from "):   # Path.resolve(), Python
                path = str(e)[len("Symlink loop from "):].strip("'")                     # < 3.13 (walk 35b)
                raise DataError(f"{path} is a symbolic link loop (it points, through links, at itself)",
                                "remove or fix the link, or pass another path") from None
            if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":   # numpy's, torch's (CUDA)
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]        # were a traceback (walk 43b #2)
                command = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
                raise TrainingError(f"out of memory: {first}",
                                    "lower train.max_len (every sample is padded to it), train.batch_size or "
                                    "evaluate.batch_size, or free memory" if command == "train" else
                                    "lower --batch-size, or free memory" if command == "recommend" else
                                    "lower the sizes the params or the input ask for, or free memory") from None
            if isinstance(e, ModuleNotFoundError) and e.name and e.name.split(".")[0] in _DEPENDENCIES:
                package = _DEPENDENCIES[e.name.split(".")[0]]           # a broken install: was a 45-line traceback
                raise DataError(f"the Python package {package} is missing, and seqpe needs it here",   # (walk 45a #4)
                                f"install seqpe's dependencies again (`pip install {package}`, or `pip install -e .` "
                                "in a checkout)") from None
            from .errors import as_os_error
            named = as_os_error(e)              # a full disk inside Polars: its ComputeError, said as the OSError
            if named is not None and named is not e:
                raise named from None
            raise
    except SeqpeError as e:
        line = str(e) + _under_dvc()
        if _first_to_say(line):
            err_console.print(f"[bold red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except BrokenPipeError:    # the reader closed the pipe (`_pipe_closed`; rich's handler is `_on_broken_pipe`)
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
    except OSError as e:   # a path the user gave: not a folder, no permission, disk full, ...
        if _first_to_say(line := printable(_os_error(e))):
            err_console.print(f"[bold red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except (Interrupted, KeyboardInterrupt) as e:
        import signal
        term = isinstance(e, Interrupted) and Interrupted.signum == signal.SIGTERM
        code = 128 + signal.SIGTERM if term else 130
        joined = getattr(sys.modules.get(f"{__package__}.train.distributed"), "JOINED", False)
        # under torchrun a SIGTERM is the launcher's, passing on a stop, or stopping the job after one of its
        # processes ended without a word (a kill -9, the kernel's OOM killer; walk 42b #2 read it as the user's)
        what = ("terminated (SIGTERM from torchrun: the job was stopped, or one of its processes ended)" if term and
                joined and os.environ.get("TORCHELASTIC_RUN_ID") else "terminated (SIGTERM)" if term else "interrupted")
        note = _interrupted_note(sys.argv[1:])
        # torchrun: every process got the signal; rank 0 of the group says it once. Processes that never joined one
        # (signalled while starting; a rank started by hand whose master never came was silent, walk 38a D4): the
        # first of this machine's
        if _another_said():                    # another process's error stopped the job, and torchrun's SIGTERM
            sys.exit(code)                     # to this one is no user's (walk 40g #3), rank 0 too (walk 41a #9)
        if not (os.environ.get("RANK", "0") == "0" if joined else _first_to_say(f"{what}: {note}")):
            sys.exit(code)
        err_console.print(f"[bold red]{what}[/]: {escape(note)}", highlight=False, soft_wrap=True)
        sys.exit(code)


if __name__ == "__main__":
    main()
