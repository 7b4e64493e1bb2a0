"""Tables for people that stay readable at any width, and JSON for scripts.

rich fits a table that is wider than the console by shrinking every column and cutting values
with "…": at 80 columns (a CI log, output piped to a file) a ten-column table keeps none of its
names. `tables` never cuts a value. It keeps the key columns (names) whole and splits the other
columns over several tables printed one under the other, each repeating the key columns (the way
pandas wraps a wide frame). Free-text columns (`wrap=True`) may wrap onto several lines at word
boundaries; every other cell stays on its line. Only a single column too wide for the console on
its own is folded (its characters continue on the next line), never cut.

`to_json` is the `--json` output: canonical JSON (sorted keys, two-space indent) on stdout, the
same keys whatever the width, for scripts.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from rich.cells import cell_len

_OVERHEAD = 3          # per column in rich's default box: one padding space each side + one rule
_WRAP_MIN = 16         # a free-text column is never made narrower than this (or its longest word)


@dataclass(frozen=True)
class Col:
    header: str
    justify: str = "left"
    key: bool = False   # repeated in every table of a split, never wrapped or cut
    wrap: bool = False  # free text: may wrap onto several lines
    group: str = ""     # columns of one group (e.g. hr@5, hr@10, hr@20) stay in one table when they fit in one


def _width(text: str) -> int:
    return max((cell_len(line) for line in str(text).split("\n")), default=0)


def _natural(col: Col, cells: list[str]) -> int:
    return max([_width(col.header), *map(_width, cells)])


def _min_width(col: Col, cells: list[str]) -> int:
    natural = _natural(col, cells)
    if not col.wrap:
        return natural
    longest_word = max((cell_len(w) for c in [col.header, *cells] for w in str(c).split()), default=0)
    return min(natural, max(longest_word, _WRAP_MIN))


def _widths(cols: Sequence[Col], rows: list[list[str]], block: list[int], width: int) -> dict[int, int]:
    """Content width of each column of a block: the natural width of fixed columns; free-text columns
    share what is left, each between its minimum and its natural width (one character at a time)."""
    cells = {i: [r[i] for r in rows] for i in block}
    out = {i: _natural(cols[i], cells[i]) for i in block if not cols[i].wrap}
    wraps = [i for i in block if cols[i].wrap]
    out.update({i: _min_width(cols[i], cells[i]) for i in wraps})
    spare = width - sum(out.values()) - _OVERHEAD * len(block) - 1
    natural = {i: _natural(cols[i], cells[i]) for i in wraps}
    while spare > 0:
        growing = [i for i in wraps if out[i] < natural[i]]
        if not growing:
            break
        for i in growing:
            if spare == 0:
                break
            out[i] += 1
            spare -= 1
    return out


def split_columns(cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int) -> list[list[int]]:
    """Indices of the columns of each table (key columns first in every one): value columns are
    packed in order while the table's narrowest layout fits `width`."""
    mins = [_min_width(c, [r[i] for r in rows]) for i, c in enumerate(cols)]
    keys = [i for i, c in enumerate(cols) if c.key]
    base = sum(mins[i] + _OVERHEAD for i in keys) + 1
    blocks: list[list[int]] = []
    current: list[int] = []
    used = base
    for i, c in enumerate(cols):
        if c.key:
            continue
        need = mins[i] + _OVERHEAD
        starts_group = c.group and (not current or cols[current[-1]].group != c.group)
        if starts_group:               # a group that fits in a table of its own is not split over two
            group = sum(mins[j] + _OVERHEAD for j, d in enumerate(cols) if d.group == c.group and not d.key)
            if current and used + group > width and base + group <= width:
                blocks.append(current)
                current, used = [], base
        if current and used + need > width:
            blocks.append(current)
            current, used = [], base
        current.append(i)
        used += need
    if current or not blocks:
        blocks.append(current)
    return [keys + block for block in blocks]


def tables(title: Optional[str], cols: Sequence[Col], rows: Sequence[Sequence[Any]], width: int,
           caption: Optional[str] = None) -> list:
    """rich Tables showing `rows` under `cols` within `width` columns (see the module docstring)."""
    from rich.table import Table
    from rich.text import Text
    rows = [[("" if v is None else str(v)) for v in row] for row in rows]
    out = []
    blocks = split_columns(cols, rows, width)
    for n, block in enumerate(blocks):
        widths = _widths(cols, rows, block, width)
        fits = sum(widths.values()) + _OVERHEAD * len(block) + 1 <= width
        more = f" ({n + 1}/{len(blocks)})" if len(blocks) > 1 and title else ""
        t = Table(title=Text(title + more) if title else None,
                  caption=Text(caption) if caption and n == len(blocks) - 1 else None)
        for i in block:
            c = cols[i]
            if not fits:               # a column wider than the console on its own: rich folds it
                t.add_column(c.header, justify=c.justify, overflow="fold")
            elif c.wrap:               # free text: wraps at words within its share of the width
                t.add_column(c.header, justify=c.justify, overflow="fold", width=widths[i])
            else:
                t.add_column(c.header, justify=c.justify, no_wrap=True, width=widths[i])
        for row in rows:
            t.add_row(*[Text(row[i]) for i in block])   # plain text: "[history ; target]" is not rich markup
        out.append(t)
    return out


def print_tables(console, title: Optional[str], cols: Sequence[Col], rows: Sequence[Sequence[Any]],
                 caption: Optional[str] = None) -> None:
    for t in tables(title, cols, rows, console.width, caption):
        console.print(t)


def kv(console, title: str, pairs: dict) -> None:
    """A two-column key/value table (a stage's summary): values wrap, keys never."""
    rows = [[str(k), f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)]
            for k, v in pairs.items()]
    from rich.table import Table
    from rich.text import Text
    t = Table(title=Text(title), show_header=False)
    t.add_column(no_wrap=True, style="bold")
    t.add_column(overflow="fold")
    for row in rows:
        t.add_row(*map(Text, row))
    console.print(t)


def to_json(obj: Any, stream=None) -> None:
    """Canonical JSON on stdout (sorted keys, indent 2, one trailing newline), for scripts. A stream that is not
    UTF-8 gets \\u escapes: it replaced `§` with `?`, a valid JSON of another value (walk 45e #3)."""
    stream = stream or sys.stdout
    utf8 = str(getattr(stream, "encoding", None) or "utf-8").lower().replace("-", "").replace("_", "") == "utf8"
    stream.write(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=not utf8, default=str) + "\n")
