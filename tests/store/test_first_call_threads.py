"""Threads racing on a process's first call (issue 28 item 10): each must wait for the built-in candidates to be
imported, not find the target marked loaded and empty. A fresh interpreter per run: the race is on the import."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import threading
import numpy as np
import arbiter
from arbiter.regions import Softmax
from arbiter.store import MemoryStore

arbiter.configure(store=MemoryStore())
x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
gate = threading.Barrier(4)
errors = []

def first_call():
    gate.wait()
    try:
        arbiter.run_arbitrated("softmax", Softmax(x))
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {str(exc)[:120]}")

threads = [threading.Thread(target=first_call) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(errors), errors)
"""


def test_four_threads_on_the_first_call_all_find_the_candidates():
    """Before: ``load_builtin`` marked the target loaded before importing it; the 3 threads that came second got
    ``NoCandidateError ... no candidate is registered``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("0 []"), done.stdout
