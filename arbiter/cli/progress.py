"""The progress bar of the long commands (``tune``, ``run``): on stderr, and only when stderr is a terminal.

A log (stderr redirected) gets ``Steps``' timestamped lines instead; stdout keeps the tables alone either way.
"""
from __future__ import annotations

from contextlib import contextmanager

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from arbiter.cli.output import console


class KeyBar:
    """One bar for the keys and, while a key is tuned, one for its solutions (``key(label, n)``)."""

    def __init__(self, progress: Progress, total: int | None):
        self.progress = progress
        self.keys = progress.add_task("keys", total=total)

    @contextmanager
    def key(self, label: str, solutions: int | None):
        """While a key is gated and timed: yields ``advance(*_)``, the tuner's per-solution progress callback."""
        task = self.progress.add_task(f"  {label}", total=solutions)
        try:
            yield lambda *_: self.progress.advance(task)
        finally:
            self.progress.remove_task(task)
            self.progress.advance(self.keys)


@contextmanager
def key_bar(total: int | None):
    """A ``KeyBar`` drawing on stderr when it is a terminal; a silent one otherwise (``total`` None: unknown)."""
    bar = console(stderr=True)
    # markup=False: a key's label (chain=mul[t]>...) is shown as it is
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(), console=bar,
                  transient=True, disable=not bar.is_terminal) as progress:
        yield KeyBar(progress, total)
