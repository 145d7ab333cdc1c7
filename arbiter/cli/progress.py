"""The progress bar of the long commands (``tune``, ``run``): on stderr, and only when stderr is a terminal.

A log (stderr redirected) gets ``Steps``' timestamped lines instead; stdout keeps the tables alone either way.
"""
from __future__ import annotations

from contextlib import contextmanager

from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from arbiter.cli.output import console


class KeyBar:
    """One bar for the keys and, while a key is tuned, one for its phases (``key(label, n)``): gating (no count:
    the gate reports no progress, so a count would stand still), timing (one step per timed launch), deciding."""

    def __init__(self, progress: Progress, total: int | None):
        self.progress = progress
        self.keys = progress.add_task("keys", total=total)

    @contextmanager
    def key(self, label: str, solutions: int | None):
        """While a key is gated and timed: yields the tuner's ``progress`` callback (``_KeyTask``)."""
        what = f"{solutions} solution(s)" if solutions is not None else "solutions"
        task = self.progress.add_task(f"  {label}: gating {what}", total=None)
        try:
            yield _KeyTask(self.progress, task, label)
        finally:
            self.progress.remove_task(task)
            self.progress.advance(self.keys)


class _KeyTask:
    """The tuner's ``progress``: called once per timed launch; ``phase(name, total)`` when its work changes."""

    def __init__(self, progress: Progress, task, label: str):
        self.progress, self.task, self.label = progress, task, label

    def __call__(self, *_):
        self.progress.advance(self.task)

    def phase(self, name: str, total: int | None) -> None:
        self.progress.update(self.task, description=f"  {self.label}: {name}", total=total,
                             completed=0 if total is not None else None)


class _Count(ProgressColumn):
    """``3/8``, or nothing while a task's total is unknown (a key being gated)."""

    def render(self, task) -> Text:
        return Text("" if task.total is None else f"{task.completed:g}/{task.total:g}")


@contextmanager
def key_bar(total: int | None):
    """A ``KeyBar`` drawing on stderr when it is a terminal; a silent one otherwise (``total`` None: unknown)."""
    bar = console(stderr=True)
    # markup=False: a key's label (chain=mul[t]>...) is shown as it is
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                  _Count(), TimeElapsedColumn(), console=bar,
                  transient=True, disable=not bar.is_terminal) as progress:
        yield KeyBar(progress, total)
