"""What the commands print, so that it reads right at any width and never eats a character.

* ``lit(value)``: every dynamic string (keys, names, reasons, errors, paths) goes to Rich through this. It
  is literal ``Text``: no markup (a key like ``chain=mul[t]>add[s]`` or a name like ``[/x]`` prints as it
  is), no emoji codes, and it wraps only after separators (space ``:`` ``,`` ``;`` ``/`` ``|`` ``>`` ``{``), so
  ``HAND_TUNED``, a number or a key segment is never cut in the middle.
* ``show(console, table)``: a table that would have to squeeze a column below its narrowest word prints
  as one block per row instead (the first cell(s) on a line of their own, then ``column value`` pairs), so
  an 80-column terminal or ``COLUMNS=80`` gets whole words.
* ``console()``: the width is ``$COLUMNS`` when set, else the terminal's (stdout's, or stderr's when stdout
  is piped), else 160 for logs and CI.
* ``Steps``: one line per step on stderr when stderr is not a terminal (no progress bar can be seen
  there), so a log shows what a long command is doing.
"""
from __future__ import annotations

import itertools
import os
import re
import sys
import time

from rich.cells import cell_len
from rich.console import Console
from rich.containers import Lines
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

PIPED_WIDTH = 160  # no terminal and no $COLUMNS: logs and CI, where folding helps nobody
_BREAK_AFTER = frozenset(" \t,;/|>{")


def width() -> int | None:
    """The width to print at: ``$COLUMNS``, else the terminal's; ``None`` lets Rich ask stdout's terminal."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return None
    try:  # `arbiter stats | less`: stdout is a pipe, but the person reading sits at stderr's terminal
        if sys.stderr.isatty() and os.get_terminal_size(sys.stderr.fileno()).columns > 0:  # (0: size unset)
            return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError, AttributeError):
        pass
    return PIPED_WIDTH


class _Held:
    """A ``Literal`` handed to ``print`` as a renderable of its own: ``Console.print`` joins plain ``Text``
    arguments into a new ``Text``, which would wrap like any other text."""

    def __init__(self, text):
        self.text = text

    def __rich_console__(self, console, options):
        return self.text.__rich_console__(console, options)

    def __rich_measure__(self, console, options):
        return self.text.__rich_measure__(console, options)


class _Console(Console):
    def print(self, *objects, **kwargs):
        super().print(*(_Held(o) if isinstance(o, Literal) else o for o in objects), **kwargs)


def console(stderr: bool = False, markup: bool = True) -> Console:
    """A Rich console at ``width()``. ``markup=False`` for a command that prints only literal lines."""
    # emoji=False: a key segment like ":x:" is text, not an emoji code.
    return _Console(width=width(), emoji=False, stderr=stderr, markup=markup)


def _breaks(text: str) -> list[int]:
    """Offsets where a line may end: after whitespace and separators; after ':' unless it follows a quote
    (a key's segments split, a JSON parameter ``"tk":64`` stays whole)."""
    out = []
    for i, ch in enumerate(text[:-1]):
        if (ch in _BREAK_AFTER or (ch == ":" and (i == 0 or text[i - 1] != '"'))) and not text[i + 1].isspace():
            out.append(i + 1)
    return out


def _tokens(text: str) -> list[str]:
    cuts = [0, *_breaks(text), len(text)]
    return [text[a:b].strip() for a, b in itertools.pairwise(cuts)]


def _divide(text: str, width: int) -> list[int]:
    """Greedy line starts (after the first) so that every line fits ``width`` cells, breaking only at
    ``_breaks``; a single token wider than ``width`` is folded, the only cut inside a word."""
    starts, start, n = [], 0, len(text)
    breaks = _breaks(text) + [n]
    while cell_len(text[start:].rstrip()) > width:
        fits = [b for b in breaks if start < b < n and cell_len(text[start:b].rstrip()) <= width]
        cut = fits[-1] if fits else None
        if cut is None:  # one token longer than the line: fold it
            cut = start + 1
            while cut < n and cell_len(text[start:cut + 1]) <= width:
                cut += 1
        starts.append(cut)
        start = cut
    return starts


class Literal(Text):
    """Text that is never parsed for markup and wraps only at separators (see the module docstring)."""

    def wrap(self, console, width, *, justify=None, overflow=None, tab_size=8, no_wrap=None) -> Lines:
        if no_wrap or self.no_wrap or overflow == "ignore":
            return super().wrap(console, width, justify=justify, overflow=overflow, tab_size=tab_size,
                                no_wrap=no_wrap)
        lines = Lines()
        for line in self.split(allow_blank=True):
            if "\t" in line:
                line.expand_tabs(tab_size)
            parts = line.divide(_divide(line.plain, max(1, width)))
            for part in parts:
                part.rstrip()
            how = justify or self.justify
            if how:
                parts.justify(console, width, justify=how, overflow="fold")
            lines.extend(parts)
        return lines

    def __rich_measure__(self, console, options) -> Measurement:
        lines = self.plain.splitlines() or [""]
        widest = max(cell_len(line) for line in lines)
        narrowest = max((cell_len(t) for line in lines for t in _tokens(line)), default=widest)
        return Measurement(min(narrowest, widest), widest)


# C0 controls but tab and newline, DEL and C1: ESC starts the ANSI sequences that recolour, clear or retitle a
# terminal, and C1's CSI (0x9b) is ESC [ in one character.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with every control character shown as ``\\xNN``: a stored string (an imported note, a reason, a
    plug-in's name) is shown as it is, and never moves the cursor or recolours the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def lit(value, style: str = "") -> Literal:
    """``value`` as literal, separator-wrapping text (the one way a dynamic string reaches Rich), its control
    characters escaped (``printable``). A ``Text`` keeps its styles and becomes separator-wrapping."""
    if isinstance(value, Text):
        out = Literal(style=style)
        out.append_text(value)
        return out
    return Literal(printable(str(value)), style=style)


def _as_text(console: Console, cell) -> Text:
    if isinstance(cell, Text):
        return cell
    return console.render_str(str(cell)) if isinstance(cell, str) else lit(cell)


def _fit(console: Console, table: Table) -> bool:
    """Give each column a width no narrower than its narrowest word (Rich alone squeezes the widest columns
    evenly, cutting words); False when the console is too narrow for that."""
    ranges = []
    for i, column in enumerate(table.columns):
        cells = [column.header, *column.cells]
        ms = [Measurement.get(console, console.options, _as_text(console, c)) for c in cells]
        pad = table._get_padding_width(i)
        low = max(m.minimum for m in ms) if column.no_wrap is False else max(m.maximum for m in ms)
        ranges.append((low + pad, max(m.maximum for m in ms) + pad))
    room = console.width - table._extra_width
    if sum(hi for _, hi in ranges) <= room:
        return True
    if sum(lo for lo, _ in ranges) > room:
        return False
    widths = [lo for lo, _ in ranges]
    spare = room - sum(widths)
    wants = [hi - lo for lo, hi in ranges]
    # Share the spare width fairly, smallest wants first: a short column ("3 screened") gets all it needs and
    # stays on one line; the long ones (reasons, keys) share the rest and wrap.
    order = sorted(range(len(wants)), key=lambda i: wants[i])
    for n, i in enumerate(order):
        give = min(wants[i], spare // (len(order) - n))
        widths[i] += give
        spare -= give
    for column, w, i in zip(table.columns, widths, range(len(widths))):
        column.width = w - table._get_padding_width(i)
    return True


def _pack(console: Console, items: list[Text], width: int) -> list[Text]:
    """``items`` joined by " · " into lines of ``width``, breaking between items (inside one only when it
    alone is wider than a line)."""
    lines: list[Text] = []
    for item in items:
        if lines and lines[-1].cell_len + 3 + item.cell_len <= width:
            lines[-1] = Text.assemble(lines[-1], " · ", item)
            continue
        lines.extend(lit(item).wrap(console, width))
    return lines


def show(console: Console, table: Table, heading: int = 1) -> None:
    """Print ``table``; when its columns cannot all get their narrowest word, print it as blocks instead:
    per row, its first ``heading`` cells on one line, then the others as ``column value`` pairs."""
    if _fit(console, table):
        console.print(table)
        return
    if table.title:
        console.print(lit(_as_text(console, table.title)))
    headers = [_as_text(console, c.header).plain for c in table.columns]
    columns = [list(c.cells) for c in table.columns]
    for r in range(table.row_count):
        cells = [_as_text(console, col[r]) if r < len(col) else Text("") for col in columns]
        console.print(lit(Text(" ").join(cells[:heading])))
        pairs = []
        for header, cell in zip(headers[heading:], cells[heading:]):
            if not cell.plain.strip():
                continue
            value = Text(" ").join(cell.split())  # a multi-line cell reads as one line here
            pairs.append(Text.assemble(f"{header} " if header else "", value))
        for line in _pack(console, pairs, max(8, console.width - 4)):
            console.print(Text.assemble("    ", line))  # by hand: rich's Padding pads lines with spaces
    if table.caption:
        console.print(lit(_as_text(console, table.caption)))
    console.print()  # blocks of the next table start apart


class Steps:
    """Progress lines on stderr when stderr is not a terminal (a log): ``say(text)`` prints one line.

    ``slow(seconds)`` tells whether a step took long enough to deserve its own line."""

    SLOW_S = 2.0

    def __init__(self):
        self.enabled = not sys.stderr.isatty()
        self.start = time.perf_counter()

    def say(self, text: str) -> None:
        if self.enabled:
            print(f"[{time.perf_counter() - self.start:6.1f}s] {text}", file=sys.stderr, flush=True)

    def slow(self, seconds: float) -> bool:
        return seconds >= self.SLOW_S


def ratio_text(margin: float | None, spread: float | None = None, short: bool = False) -> str:
    """A margin (``rival / winner - 1``) as people read it: ``1.90x faster`` or ``1.25x slower``, with the spread
    of the timings beside it when known (a margin smaller than the spread is not a result): ``(spread 7.1%)``,
    or ``±7%`` when ``short`` (a table column)."""
    if margin is None:
        return ""
    ratio = 1.0 + margin
    text = f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower" if ratio > 0 else f"{margin:+.0%}"
    if spread is None:
        return text
    return text + (f" ±{spread * 100:.0f}%" if short else f" (spread {spread * 100:.1f}%)")
