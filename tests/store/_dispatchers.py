"""Dispatching processes for the counter tests (run as ``python _dispatchers.py MODE DB [N]``).

They dispatch a small softmax through ``run_arbitrated`` into a real registry, with the background
flusher's interval set far beyond the test, so only the exit paths under test can save the counts.
"""
from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import arbiter
from arbiter.regions import Softmax
from arbiter.store import flusher
from arbiter.store.sql import SqlStore

flusher.INTERVAL_S = 3600.0  # no periodic flush within a test: every count must come from an exit path
# A process started from a terminal gets SIGHUP's default action; one started under `nohup` inherits it ignored,
# and an ignored signal is rightly left alone. Tests signal the former.
signal.signal(signal.SIGHUP, signal.SIG_DFL)
X = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)


def dispatch(n: int) -> None:
    region = Softmax(X)
    for _ in range(n):
        arbiter.run_arbitrated("softmax", region)


def open_registry(db: str) -> None:
    arbiter.configure(store=SqlStore(db))


def wait_for_signal(db: str, n: int) -> None:
    """Dispatch ``n`` times, say so, and wait to be signalled (within the flush interval)."""
    open_registry(db)
    dispatch(n)
    print("ready", flush=True)
    while True:
        time.sleep(0.1)


def chained(db: str, n: int) -> None:
    """As ``wait_for_signal``, with the program's own SIGTERM handler installed first: it must still run."""
    def own(signum, frame):
        print(f"own handler ran for {signal.Signals(signum).name}", flush=True)
        sys.stdout.flush()
        os._exit(7)

    signal.signal(signal.SIGTERM, own)
    wait_for_signal(db, n)


def _pool_task(n: int) -> int:
    dispatch(n)
    return os.getpid()


def fork_pool(db: str, n: int, terminate: bool) -> None:
    """7 dispatches in the parent (not flushed before the fork), then ``n`` in each of 30 tasks of a fork pool
    of 3 workers; the pool ends with close/join (workers leave through ``os._exit``) or, with ``terminate``,
    through the context manager (workers get SIGTERM)."""
    import multiprocessing

    open_registry(db)
    dispatch(7)
    ctx = multiprocessing.get_context("fork")
    if terminate:
        with ctx.Pool(3) as pool:
            pids = pool.map(_pool_task, [n] * 30, chunksize=1)
    else:
        pool = ctx.Pool(3)
        pids = pool.map(_pool_task, [n] * 30, chunksize=1)
        pool.close()
        pool.join()
    print(len(set(pids)), "workers", flush=True)


def rmsnorm(db: str, strided: bool) -> None:
    """One rmsnorm call at 8x64 (its weight a strided view when ``strided``); prints the solution that served."""
    from arbiter.regions import RMSNorm

    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    w = rng.standard_normal(128).astype(np.float32)
    weight = w[::2] if strided else w[:64].copy()
    open_registry(db)
    y = arbiter.run_arbitrated("rmsnorm", RMSNorm(x, weight, eps=1e-5))
    np.testing.assert_allclose(y, x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * weight, rtol=1e-4,
                               atol=1e-5)
    [row] = [r for r in arbiter.stats() if r["installed"]]
    print(row["solution"], row["hits"], row["loads"], row["misses"], row["fallbacks"], flush=True)


def tune_killed_at_solution(db: str) -> None:
    """Tune rmsnorm 8x64 and SIGKILL this process the moment it writes the key's solution (after its verdicts
    and measurements): the hook point where two commits left a half-tuned key."""
    from sqlalchemy import event

    from arbiter.regions import RMSNorm
    from arbiter.tune import tune_region

    st = SqlStore(db)
    arbiter.configure(store=st)

    @event.listens_for(st.engine, "before_cursor_execute")
    def _kill_at_solution(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith(("UPDATE SOLUTIONS", "INSERT INTO SOLUTIONS")):
            os.kill(os.getpid(), signal.SIGKILL)

    rng = np.random.default_rng(1)
    region = RMSNorm(rng.standard_normal((8, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32))
    tune_region(region, st, budget_s=0.3)
    print("not killed", flush=True)


def threads_until_signal(db: str, threads: int, counts_file: str) -> None:
    """``threads`` threads dispatch without pause; each adds one to its slot of ``counts_file`` (int64s) after
    every call returned, so the test knows how many calls completed. The main thread waits on a lock."""
    import threading

    open_registry(db)
    done = np.memmap(counts_file, dtype=np.int64, mode="r+", shape=(threads,))
    started = threading.Barrier(threads + 1)

    def work(i: int) -> None:
        region = Softmax(X)
        arbiter.run_arbitrated("softmax", region)
        done[i] += 1
        started.wait()
        while True:
            arbiter.run_arbitrated("softmax", region)
            done[i] += 1

    for i in range(threads):
        threading.Thread(target=work, args=(i,), daemon=True).start()
    started.wait()
    print("ready", flush=True)
    threading.Event().wait()


def signal_to_flusher_thread(db: str, n: int) -> None:
    """Dispatch ``n`` times, then a helper thread sends SIGTERM to the counter flusher thread (not the main
    one) while the main thread waits on a lock nobody releases: Python's handler never runs in the main thread.
    """
    import threading

    open_registry(db)
    dispatch(n)
    [target] = [t for t in threading.enumerate() if t.name == "arbiter-counter-flusher"]

    def send() -> None:
        time.sleep(0.3)
        signal.pthread_kill(target.ident, signal.SIGTERM)

    threading.Thread(target=send, daemon=True).start()
    print("ready", flush=True)
    held = threading.Lock()
    held.acquire()
    held.acquire()  # forever: only the end of the process ends this


def signal_inside_transaction(db: str, n: int) -> None:
    """Dispatch ``n`` times, then the main thread stays inside a registry transaction (it holds the store's
    lock, which a flush needs) and waits there forever: the signal must still end the process."""
    import threading

    st = SqlStore(db)
    arbiter.configure(store=st)
    dispatch(n)

    def stuck(conn):
        print("ready", flush=True)
        threading.Event().wait()

    st.transact(stuck, write=False)


if __name__ == "__main__":
    mode, db = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    if mode == "wait_for_signal":
        wait_for_signal(db, n)
    elif mode == "chained":
        chained(db, n)
    elif mode == "fork_pool":
        fork_pool(db, n, terminate=False)
    elif mode == "fork_pool_terminate":
        fork_pool(db, n, terminate=True)
    elif mode == "threads_until_signal":
        threads_until_signal(db, n, sys.argv[4])
    elif mode == "signal_to_flusher_thread":
        signal_to_flusher_thread(db, n)
    elif mode == "signal_inside_transaction":
        signal_inside_transaction(db, n)
    elif mode == "tune_killed_at_solution":
        tune_killed_at_solution(db)
    elif mode in ("rmsnorm", "rmsnorm_strided"):
        rmsnorm(db, strided=mode == "rmsnorm_strided")
    else:
        raise SystemExit(f"unknown mode {mode!r}")
