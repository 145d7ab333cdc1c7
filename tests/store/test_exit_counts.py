"""Counts of daemon threads still dispatching when the process ends normally (issue 40 item 9): ``sys.exit`` or a
SIGINT (KeyboardInterrupt ending the main thread) while 4 daemon threads dispatch. The last flush at exit closes
dispatch to those threads first, then flushes until nothing is pending, so every call they made is counted; a count
still unwritten is named on stderr with its number. Real processes, a real SIGINT, a real SQLite file."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from arbiter.store.sql import SqlStore

ROOT = Path(__file__).resolve().parents[2]
THREADS = 4

CHILD = """
    import atexit, signal, sys, threading, time
    # A SIGINT is a KeyboardInterrupt here whatever the parent left: a process started in the background without
    # job control (nohup ... &) inherits SIGINT ignored, and this child would then sleep its 600 s out
    signal.signal(signal.SIGINT, signal.default_int_handler)
    made = [0] * {threads}
    # Registered before kernel-arbiter's own exit hook, so it runs after it (atexit runs last-in first): by then
    # dispatch is closed and the threads' counters no longer move.
    atexit.register(lambda: print("MADE", sum(made) + 1, flush=True))  # + 1: the main thread's first call
    import numpy as np
    import arbiter
    from arbiter.regions import Softmax
    region = Softmax(np.ones((4, 16), np.float32))
    arbiter.run_arbitrated("softmax", region)  # opens the registry, starts the flusher

    def loop(i):
        while True:
            arbiter.run_arbitrated("softmax", region)
            made[i] += 1

    for i in range({threads}):
        threading.Thread(target=loop, args=(i,), daemon=True).start()
    print("READY", flush=True)
    if sys.argv[1] == "exit":
        time.sleep(1.0)
        sys.exit(0)
    time.sleep(600)  # the SIGINT ends this sleep with KeyboardInterrupt
"""


def _run(tmp_path, how: str) -> tuple[int, int, str, int]:
    db = str(tmp_path / "registry.db")
    env = {**os.environ, "ARBITER_DB": db, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("ARBITER_SYSTEM_DB", None)
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD.format(threads=THREADS)), how], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
    if how == "sigint":
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the child did not end within 120 s")
    found = re.search(r"MADE (\d+)", out)
    assert found, (out, err)
    counted = sum(c.hits + c.misses + c.fallbacks + c.loads for c in SqlStore(db).counts())
    return int(found.group(1)), counted, err, proc.returncode


@pytest.mark.parametrize("how", ["exit", "sigint"])
def test_daemon_threads_dispatching_at_exit_lose_no_count_silently(tmp_path, how):
    """Before: one flush at exit while the daemon threads kept counting: 112 to 948 calls uncounted after
    ``sys.exit``, up to 2,662 after a SIGINT, with no word. Now every call made is counted (a call counts before
    it runs: a thread frozen between its count and its return could add at most one), or the lost number is on
    stderr."""
    made, counted, err, code = _run(tmp_path, how)
    print(f"{how}: made {made}, counted {counted}, exit status {code}")
    assert made > 100, err  # the threads did dispatch
    lost = re.search(r"kernel-arbiter: (\d+) dispatch count\(s\) not written to the registry at exit", err)
    if lost:  # a loss is allowed only when named exactly
        assert counted + int(lost.group(1)) == made, err
    else:
        assert made <= counted <= made + THREADS, (made, counted, err)
    if how == "exit":
        assert code == 0, err
    else:
        assert "KeyboardInterrupt" in err and code in (1, -signal.SIGINT), (code, err)
