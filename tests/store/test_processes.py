"""Real processes on one real registry (a SQLite file; a PostgreSQL database where a server is reachable):
concurrency, SIGKILL mid-write, a warm second run."""
from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from arbiter.store.sql import SqlStore
from tests.store import _workers

ROOT = Path(__file__).resolve().parents[2]
WORKERS = str(Path(_workers.__file__))

# The load tests run twice: short (few processes, few writes: the README's command) and long (eight processes at
# the full count, marked `slow`: `.ci/run`'s second step, `pytest -m slow`).
SLOW = pytest.mark.slow
LOADS = [pytest.param(2, 25, id="short"), pytest.param(8, None, id="long", marks=SLOW)]


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _workers_run(mode: str, db: str, procs: int, count: int | None, timeout: int) -> list[tuple[int, str]]:
    """``procs`` worker processes of ``mode`` at once on ``db`` (``count``: writes or batches each, None for the
    module's figure): each one's exit code and stderr."""
    extra = [] if count is None else [str(count)]
    running = [subprocess.Popen([sys.executable, WORKERS, mode, db, str(w), *extra], cwd=ROOT, env=_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(procs)]
    return [(p.wait(timeout=timeout), p.stderr.read()) for p in running]


@pytest.mark.parametrize("procs, writes", LOADS)
def test_processes_writing_at_once_lose_nothing_and_never_see_locked(backend, procs, writes):
    db = backend.new()
    for rc, err in _workers_run("concurrent", db, procs, writes, timeout=240):
        assert rc == 0, err
        assert "locked" not in err and "Traceback" not in err
    q = functools.partial(backend.query, db)
    n = writes or _workers.WRITES
    assert q("select count(*) from verdicts") == [(procs * n,)]
    # n own keys per worker, plus the shared keys that every worker wrote: one row each.
    assert q("select count(*) from solutions") == [(procs * n + _workers.SHARED_KEYS,)]
    assert q("select count(*) from (select key, env from solutions group by key, env having count(*) > 1) d") \
        == [(0,)]
    # every shared key holds one worker's whole write (params and policy from the same transaction)
    assert q("select count(*) from solutions where policy = 'measured'") == [(_workers.SHARED_KEYS,)]
    assert q("select count(*), min(hits), max(hits) from counters") == [(10, procs * n, procs * n)]
    assert q("select sum(misses) from counters") == [(procs * n * 5,)]
    assert SqlStore(db).integrity_check() == []


@pytest.mark.parametrize("procs, batches", LOADS)
def test_flushers_touching_the_same_counters_in_different_orders_lose_no_count(backend, procs, batches):
    """Issue 20 item 1: on PostgreSQL, row locks taken in a different order per process deadlocked (511-735
    deadlocks in 8 writers, 3 of 8 died with ``RegistryError: deadlock detected``). Now every multi-row write
    takes its rows in one global order, and a deadlock that still happens is retried."""
    db = backend.new()
    SqlStore(db).close()  # the schema, once
    for rc, err in _workers_run("shuffled_counts", db, procs, batches, timeout=300):
        assert rc == 0, err
        assert "Traceback" not in err and "deadlock" not in err
    n = procs * (batches or _workers.COUNT_BATCHES)
    assert backend.query(db, "select count(*), min(hits), max(hits), min(misses), max(misses) from counters") \
        == [(_workers.COUNT_KEYS, n, n, n, n)]


def test_sigkill_mid_write_leaves_a_sound_file_with_exactly_the_committed_rows(backend):
    db = backend.new()
    proc = subprocess.Popen([sys.executable, WORKERS, "until_killed", db], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if int(line) >= 40:  # well into its stream of transactions
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    printed = [int(x) for x in proc.stdout.read().split()]
    last = printed[-1] if printed else int(line)
    if backend.name == "sqlite":
        assert backend.query(db, "pragma integrity_check") == [("ok",)]
    per_key = backend.query(db, "select key, count(*) from measurements group by key")
    # Every transaction is whole (a key has all its rows or none), and the ones reported committed are there;
    # at most one more committed between its commit and its print.
    assert {n for _, n in per_key} == {_workers.MEASUREMENTS_PER_KEY}
    assert len(per_key) in (last, last + 1)
    assert {k for k, _ in per_key} == {_workers.key(i) for i in range(len(per_key))}
    st = SqlStore(db)  # still a working registry
    assert st.integrity_check() == []
    assert len(st.load_measurements(_workers.key(0), _workers.ENV)) == _workers.MEASUREMENTS_PER_KEY


@SLOW  # two whole-suite `arbiter run`s (test_cli_run's are slow too)
def test_a_second_arbiter_run_is_warm_no_verification(backend, tmp_path):
    db = backend.new()
    cmd = [sys.executable, "-m", "arbiter", "--db", db, "run"]
    first = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    second = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "keys decided now" in first.stdout  # the first run verifies and times
    summary = " ".join(second.stdout.split()[-40:])  # the last line, whatever the width folded
    assert "served from the registry: 0 verdicts and 0 timings computed" in summary, summary
    # Counters of both runs were flushed to the file: each run installed every key's solution once. The first
    # run decided it (`run` tunes, then dispatch installs what was stored: a load), the second loaded it
    # (before schema v4 a load counted as a miss).
    assert backend.query(db, "select min(misses), max(misses), min(loads), max(loads) from counters") == \
        [(0, 0, 2, 2)]


# SQLite's SHARED lock byte range on the main file (PENDING_BYTE + 2, 510 bytes): a connection in WAL mode holds a
# read lock there for as long as it is open, which tells other processes it must not be checkpointed away.
_SHARED_PROBE = ("import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDWR)\n"
                 "try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 510, 0x40000002)\n    print('free')\n"
                 "except OSError:\n    print('held')")


def test_opening_a_second_store_on_a_file_keeps_the_first_ones_locks(tmp_path):
    """POSIX drops a process's locks on a file when it closes any descriptor of it. The header check of a
    second ``SqlStore`` on a registry this process already has open once read the file with ``open()`` and so
    released SQLite's locks: another process could then checkpoint and delete the WAL under the first store's
    connections (a fleet benchmark lost 400 committed claims that way)."""
    from arbiter.store import CountDelta

    db = str(tmp_path / "registry.db")

    def held():
        return subprocess.run([sys.executable, "-c", _SHARED_PROBE, db], capture_output=True, text=True,
                              check=True).stdout.strip()

    first = SqlStore(db)
    first.add_counts([CountDelta("k", "c", "{}", "e", hits=1)])  # a pooled connection, open and locked
    assert held() == "held"
    second = SqlStore(db)
    assert held() == "held"
    second.close()
    first.close()
    assert held() == "free"
