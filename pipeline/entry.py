"""The `seqpe` console script. It imports the CLI (typer, rich and the pipeline: about 0.15 s) inside a guard,
because the CLI's own Ctrl-C handler is installed only once that import is done: a Ctrl-C in that window printed
KeyboardInterrupt's traceback of 14-30 lines instead of the one line every command prints."""
from __future__ import annotations

import sys


def main() -> None:
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted: seqpe was starting, nothing was done\n")
        sys.exit(130)
    cli_main(process=True)


if __name__ == "__main__":      # `python -m pipeline.entry ...` ran nothing and exited 0 before
    main()
