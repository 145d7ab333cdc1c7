"""What the CPU benchmarks share: one other CPU-bound process on the box (what a user's machine often has beside
the program: a second job, a build), for the runs measured "busy"."""
from __future__ import annotations

import contextlib
import subprocess
import sys


@contextlib.contextmanager
def busy_box(on: bool = True):
    """While the block runs, one other process spinning on a core (``on``: False, nothing)."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if on else None
    try:
        yield
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
