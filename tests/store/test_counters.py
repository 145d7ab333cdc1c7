"""Dispatch counters reach the registry on every way a process ends that Python can see (issue 20 items 2, 3):
a failed flush keeps its counts, SIGTERM/SIGHUP within the flush interval flush before the process ends, and
forked children (a multiprocessing fork pool) count their own dispatches once. Real processes, real signals,
real SQLite files."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import arbiter
from arbiter import dispatch
from arbiter.regions import Softmax
from arbiter.store.sql import SqlStore
from tests.store import _dispatchers

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(Path(_dispatchers.__file__))


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _total(db: str) -> int:
    """Every dispatch the registry counted: hits, stored solutions loaded, misses and fallbacks."""
    return sum(c.hits + c.misses + c.fallbacks for c in SqlStore(db).counts())


class _FailingOnce(SqlStore):
    """The real registry, whose next ``add_counts`` fails the way a server outage does (after its retries)."""

    fail = False

    def add_counts(self, deltas):
        if self.fail:
            self.fail = False
            raise arbiter.RegistryError(f"{self.where}: server closed the connection unexpectedly")
        super().add_counts(deltas)


def test_a_failed_flush_keeps_its_counts_for_the_next_one(tmp_path):
    """Before: counts were marked flushed before ``add_counts`` ran, so one failure lost 1,000 of 1,010."""
    db = str(tmp_path / "registry.db")
    st = _FailingOnce(db)
    dispatch.configure(store=st)
    region = Softmax(np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32))
    for _ in range(10):
        arbiter.run_arbitrated("softmax", region)
    arbiter.flush()
    assert _total(db) == 10
    for _ in range(1000):
        arbiter.run_arbitrated("softmax", region)
    st.fail = True
    with pytest.raises(arbiter.RegistryError, match="server closed"):
        arbiter.flush()
    assert _total(db) == 10  # nothing of the failed flush was committed ...
    arbiter.run_arbitrated("softmax", region)
    arbiter.flush()  # ... and nothing of it was dropped: the next flush carries it
    assert _total(db) == 1011


def _run_until_ready(mode: str, db: str, n: int):
    proc = subprocess.Popen([sys.executable, SCRIPT, mode, db, str(n)], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    return proc


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_within_the_flush_interval_flushes_then_ends_the_process_by_that_signal(tmp_path, sig):
    """Before: only atexit flushed, and a signal's default action skips it: 0 of 500 counts were saved."""
    db = str(tmp_path / "registry.db")
    proc = _run_until_ready("wait_for_signal", db, 500)
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == -sig, proc.stderr.read()  # still ended by the signal, as without us
    assert _total(db) == 500


def test_a_programs_own_sigterm_handler_still_runs_after_the_flush(tmp_path):
    db = str(tmp_path / "registry.db")
    proc = _run_until_ready("chained", db, 300)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 7, proc.stderr.read()
    assert "own handler ran for SIGTERM" in proc.stdout.read()
    assert _total(db) == 300


@pytest.mark.parametrize("mode", ["fork_pool", "fork_pool_terminate"], ids=["close_join", "terminate"])
def test_every_dispatch_of_a_fork_pool_is_counted_once(tmp_path, mode):
    """Before: a forked child's flusher returned at once and the child left through ``os._exit``: 3,000
    dispatches from a fork pool, 0 in the registry. The parent's 7 dispatches, pending at the fork, must be
    counted once (by the parent), not once per child."""
    db = str(tmp_path / "registry.db")
    done = subprocess.run([sys.executable, SCRIPT, mode, db, "100"], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert _total(db) == 30 * 100 + 7, done.stderr + done.stdout
