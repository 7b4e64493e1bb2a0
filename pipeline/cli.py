"""The `seqpe` command line: one thin command per stage, plus tools.

Every command parses its arguments, calls one library function and renders the
returned summary with rich. Library code raises `SeqpeError`; `main()` turns it into
a one-line message on stderr and exit code 1. Commands that only touch data never
import torch (imports are local to the commands that train).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from .errors import SeqpeError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="seqpe: reproducible data pipeline and positional-encoding toolkit "
                       "for sequential recommendation.")
console = Console(stderr=False)
err_console = Console(stderr=True)

ParamsOpt = Annotated[Path, typer.Option("--params", help="params.yaml to read")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="override a param: --set train.epochs=3")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="no progress bars or tables")]


def _params(path: Path, overrides: Optional[list[str]] = None):
    from .params import load_params
    return load_params(path, overrides or [])


def _default(kind: str, dataset: str, given: Optional[Path]) -> Path:
    return given if given is not None else Path("data") / kind / dataset


def _kv_table(title: str, rows: dict) -> Table:
    t = Table(title=title, show_header=False)
    t.add_column(style="bold")
    t.add_column()
    for k, v in rows.items():
        t.add_row(str(k), f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v))
    return t


# --------------------------------------------------------------------------- data stages

@app.command()
def datasets(params: ParamsOpt = Path("params.yaml"),
             data_dir: Annotated[Path, typer.Option(help="data folder")] = Path("data")):
    """List known datasets: protocol, source, size, and what is on disk here."""
    from .datasets import all_datasets
    p = _params(params)
    t = Table(title="seqpe datasets")
    for col in ("dataset", "protocol", "source", "paper size", "enabled", "raw", "sessions", "samples"):
        t.add_column(col)
    for name, spec in sorted(all_datasets().items()):
        def mark(kind: str) -> str:
            return "✓" if (data_dir / kind / name / ("source.json" if kind == "raw" else "manifest.json")).is_file() else "·"
        origin = spec.source.url or ("generated" if spec.source.archive == "generated" else "manual download")
        t.add_row(name, spec.protocol, f"{spec.source.name} ({origin})", spec.paper_size,
                  "✓" if name in p.datasets else "·", mark("raw"), mark("sessions"), mark("samples"))
    console.print(t)


@app.command()
def download(dataset: str,
             dst: Annotated[Optional[Path], typer.Argument(help="raw folder (default data/raw/DATASET)")] = None,
             from_path: Annotated[Optional[Path], typer.Option("--from", help="use a file you already have (archive or extracted)")] = None,
             mirror: Annotated[Optional[str], typer.Option(help="mirror base URL (or env SEQPE_MIRROR)")] = None,
             params: ParamsOpt = Path("params.yaml"), quiet: QuietOpt = False):
    """Fetch, verify and unpack a dataset's raw source into DST, writing source.json."""
    from . import download as stage
    p = _params(params)
    summary = stage.run(dataset, _default("raw", dataset, dst), p.download, from_path=from_path,
                        mirror=mirror, progress=not quiet, sample=p.preprocess.sample)
    if not quiet:
        console.print(_kv_table(f"download {dataset}", summary))


@app.command()
def preprocess(dataset: str,
               src: Annotated[Optional[Path], typer.Argument(help="raw folder (default data/raw/DATASET)")] = None,
               dst: Annotated[Optional[Path], typer.Argument(help="sessions folder (default data/sessions/DATASET)")] = None,
               params: ParamsOpt = Path("params.yaml"), overrides: SetOpt = None, quiet: QuietOpt = False):
    """Filter and split sessions under the dataset's protocol into Parquet shards + manifest."""
    from . import preprocess as stage
    manifest = stage.run(dataset, _default("raw", dataset, src), _default("sessions", dataset, dst),
                         _params(params, overrides))
    if not quiet:
        _print_manifest(manifest)


@app.command()
def augment(dataset: str,
            src: Annotated[Optional[Path], typer.Argument(help="sessions folder")] = None,
            dst: Annotated[Optional[Path], typer.Argument(help="samples folder")] = None,
            params: ParamsOpt = Path("params.yaml"), overrides: SetOpt = None, quiet: QuietOpt = False):
    """Write (prefix, target) samples from prepared sessions."""
    from . import augment as stage
    manifest = stage.run(dataset, _default("sessions", dataset, src), _default("samples", dataset, dst),
                         _params(params, overrides))
    if not quiet:
        _print_manifest(manifest)


@app.command()
def stats(dataset: str,
          root: Annotated[Optional[Path], typer.Argument(help="a sessions or samples folder")] = None):
    """Show a prepared folder's manifest counts as a table."""
    from .io import read_manifest
    _print_manifest(read_manifest(_default("sessions", dataset, root)))


def _print_manifest(m: dict) -> None:
    t = Table(title=f"{m.get('dataset', '?')} · {m.get('stage', '')} · protocol {m.get('protocol', '?')}")
    for col in ("step", "sessions", "clicks", "items"):
        t.add_column(col, justify="right" if col != "step" else "left")
    fmt = lambda v: f"{v:,}" if isinstance(v, int) else ("" if v is None else str(v))  # noqa: E731
    for step in m.get("steps", []):
        t.add_row(step["step"], fmt(step.get("sessions")), fmt(step.get("clicks")), fmt(step.get("items")))
    console.print(t)
    rows = {"n_items": m.get("n_items")}
    for split, c in m.get("splits", {}).items():
        rows[split] = ", ".join(f"{k} {v:,}" for k, v in c.items())
    console.print(_kv_table("result", rows))


# --------------------------------------------------------------------------- formats

@app.command("import")
def import_(dataset: str,
            src: Annotated[Path, typer.Argument(help="folder (SR-GNN pickles) or file (SASRec text)")],
            fmt: Annotated[str, typer.Option("--format", help="srgnn | sasrec")] = "srgnn",
            sessions: Annotated[Optional[Path], typer.Option(help="sessions folder to write")] = None,
            samples: Annotated[Optional[Path], typer.Option(help="samples folder to write")] = None,
            params: ParamsOpt = Path("params.yaml"), overrides: SetOpt = None, quiet: QuietOpt = False):
    """Import canonical prepared files as seqpe sessions and samples under DATASET's name.

    Pickles are read with a restricted unpickler (lists, tuples and ints only). Valid is carved
    like `preprocess` does (preprocess.valid_fraction); `train` works on the samples folder and
    `augment` on the sessions folder.
    """
    from . import formats
    summary = formats.import_dataset(dataset, src, fmt, _default("sessions", dataset, sessions),
                                     _default("samples", dataset, samples), _params(params, overrides))
    if not quiet:
        console.print(_kv_table(f"import {dataset} ({fmt})", summary))


@app.command()
def export(dataset: str,
           out: Annotated[Path, typer.Argument(help="folder to write (new, or holding only a previous export)")],
           fmt: Annotated[str, typer.Option("--format", help="srgnn | sasrec")] = "srgnn",
           sessions: Annotated[Optional[Path], typer.Option(help="sessions folder to read")] = None,
           quiet: QuietOpt = False):
    """Export prepared sessions as SR-GNN pickles (train.txt, test.txt, all_train_seq.txt) or S3-Rec text."""
    from . import formats
    summary = formats.export_dataset(_default("sessions", dataset, sessions), out, fmt)
    if not quiet:
        console.print(_kv_table(f"export {dataset} ({fmt})", summary))


# --------------------------------------------------------------------------- training

@app.command()
def train(dataset: str,
          samples: Annotated[Optional[Path], typer.Argument(help="samples folder")] = None,
          runs: Annotated[Optional[Path], typer.Argument(help="runs folder")] = None,
          model: Annotated[Optional[str], typer.Option(help="model name (default train.model)")] = None,
          encoding: Annotated[Optional[str], typer.Option(help="encoding name (default train.encoding)")] = None,
          seed: Annotated[Optional[list[int]], typer.Option(help="seed(s) (default train.seeds)")] = None,
          preset: Annotated[Optional[str], typer.Option(help="named params set, e.g. paper")] = None,
          params: ParamsOpt = Path("params.yaml"), overrides: SetOpt = None, quiet: QuietOpt = False):
    """Train a model (best epoch chosen on valid) and score it once on test."""
    from . import train as stage
    results = stage.run(dataset, _default("samples", dataset, samples), _default("runs", dataset, runs),
                        _params(params, overrides), model=model, encoding=encoding, seeds=seed,
                        preset=preset, progress=not quiet)
    if not quiet:
        _print_runs(results)


@app.command()
def evaluate(dataset: str,
             runs: Annotated[Optional[Path], typer.Argument(help="runs folder")] = None,
             out: Annotated[Optional[Path], typer.Argument(help="reports folder (metrics.json)")] = None,
             params: ParamsOpt = Path("params.yaml"), overrides: SetOpt = None, quiet: QuietOpt = False):
    """Collect the runs' test metrics into metrics.json (DVC metrics) with mean, std and 95% CI."""
    from . import evaluate as stage
    from .report import rich_table
    summary = stage.run(dataset, _default("runs", dataset, runs), _default("reports", dataset, out),
                        _params(params, overrides))
    if not quiet:
        _print_runs(summary.get("runs", []))
        console.print(rich_table(summary["configs"]))


@app.command()
def report(runs: Annotated[Optional[list[Path]], typer.Argument(help="runs folders (default data/runs)")] = None,
           out: Annotated[Optional[Path], typer.Option("--out", help="also write FILE.md or FILE.csv")] = None,
           quiet: QuietOpt = False):
    """Aggregate runs over seeds: mean, std and 95% CI of every test metric, per configuration."""
    from . import report as stage
    rows = stage.run(runs or [Path("data") / "runs"], out)
    if not quiet:
        console.print(stage.rich_table(rows))
        if out is not None:
            console.print(f"wrote {out}")


# --------------------------------------------------------------------------- encodings

encodings_app = typer.Typer(help="Positional encodings: list them, or draw one (PosRec Figs. 7-12).",
                            invoke_without_command=True, no_args_is_help=False)
app.add_typer(encodings_app, name="encodings")


@encodings_app.callback()
def encodings(ctx: typer.Context):
    """List every positional encoding: paper, family, learnable, forward/backward-aware, options."""
    if ctx.invoked_subcommand is not None:
        return
    from models.encodings import ENCODINGS  # torch-free metadata
    t = Table(title="seqpe positional encodings")
    for col in ("name", "paper", "family", "learnable", "forward-aware", "backward-aware", "extra params"):
        t.add_column(col, no_wrap=col == "name")
    mark = lambda b: "✓" if b else "·"  # noqa: E731
    for name, s in ENCODINGS.items():
        t.add_row(name, s.paper, s.family, mark(s.learnable), mark(s.forward_aware), mark(s.backward_aware),
                  ", ".join(s.params) or "-")
    console.print(t)


@encodings_app.command("inspect", context_settings={"allow_extra_args": True})
def encodings_inspect(ctx: typer.Context, name: str,
                      lengths: Annotated[list[int], typer.Option("--lengths", help="session lengths, e.g. --lengths 10 20")],
                      out: Annotated[Path, typer.Option("--out", help="folder for the PNGs")],
                      run: Annotated[Optional[Path], typer.Option("--run", help="trained run folder (checkpoint.pt) for learned weights")] = None,
                      dim: Annotated[int, typer.Option(help="encoding width without --run (PosRec: 100)")] = 100,
                      quiet: QuietOpt = False):
    """Write PNGs of an encoding's matrices and dot-product heatmaps (PosRec Figs. 7-12)."""
    from models.encodings.plots import inspect
    from .errors import ParamsError
    extra = list(ctx.args)  # `--lengths 10 20`: click leaves the values after the first here
    if not all(a.isdigit() for a in extra):
        raise ParamsError(f"unexpected arguments {extra}", "pass lengths as --lengths 10 20")
    summary = inspect(name, [*lengths, *map(int, extra)], out, run_dir=run, dim=dim)
    if not quiet:
        console.print(_kv_table(f"encodings inspect {name}", {k: v for k, v in summary.items() if k != "files"}))
        for f in summary["files"]:
            console.print(f"  {Path(out) / f}")


def _print_runs(results: list[dict]) -> None:
    if not results:
        return
    keys = sorted({k for r in results for k in r.get("test", {})},
                  key=lambda k: (k.split("@")[0], int(k.split("@")[1]) if "@" in k else 0))
    t = Table(title="test metrics (×100)")
    for col in ("run", "best epoch", *keys):
        t.add_column(col, justify="right" if col != "run" else "left")
    for r in results:
        t.add_row(r.get("name", "?"), str(r.get("best_epoch", "")),
                  *[f"{100 * r['test'][k]:.2f}" if k in r.get("test", {}) else "" for k in keys])
    console.print(t)


def main() -> None:
    """Entry point: click/typer handle usage errors themselves (standalone mode);
    domain errors become one line on stderr and exit code 1."""
    try:
        app()
    except SeqpeError as e:
        err_console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except KeyboardInterrupt:
        err_console.print("[bold red]interrupted[/]: no partial output was left in place")
        sys.exit(130)


if __name__ == "__main__":
    main()
