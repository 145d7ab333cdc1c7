"""Processes for the import tests (``python import_load.py DB MODE [FILE]``); the last line printed is JSON.

``serve``: a serving process beside a running import: each round opens the registry, dispatches a softmax key
it has not seen (a miss: the gate's verdict and the solution are written) and flushes its counters (a write),
until the import's solutions are all in. Prints the rounds, how many ran during the import, the slowest round,
the slowest write transaction (waiting for the lock included), and every error that said "locked".

``memory``: imports FILE into DB through the CLI's functions and prints the peak resident memory before and
after (``ru_maxrss``).
"""
from __future__ import annotations

import json
import resource
import sqlite3
import sys
import time


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _imported(db: str) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute("select count(*) from solutions where key like 'lab:%'").fetchone()[0]
    finally:
        conn.close()


def serve(db: str) -> dict:
    import numpy as np

    import arbiter
    from arbiter import dispatch
    from arbiter.regions import Softmax
    from arbiter.store.sql import SqlStore

    writes = []  # seconds of each write transaction, waiting for the lock included
    plain_run = SqlStore.transact

    def timed_run(self, fn, *, write):
        t0 = time.perf_counter()
        try:
            return plain_run(self, fn, write=write)
        finally:
            if write:
                writes.append(time.perf_counter() - t0)

    SqlStore.transact = timed_run
    rounds, during, worst, locked, errors = 0, 0, 0.0, 0, []
    start, last = time.monotonic(), -1
    while time.monotonic() - start < 540:
        done = _imported(db)
        if done and done == last:  # the import's count stopped growing: it has finished
            break
        last = done
        t0 = time.perf_counter()
        try:
            dispatch.configure(store=SqlStore(db))
            dispatch.reset()
            x = np.ones((4, 8 + rounds), np.float32)
            arbiter.run_arbitrated("softmax", Softmax(x))
            arbiter.flush()
        except Exception as exc:  # every error is a figure of this test
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
            locked += "locked" in str(exc)
        worst = max(worst, time.perf_counter() - t0)
        rounds += 1
        during += done > 0
        time.sleep(0.2)
    return {"rounds": rounds, "during_import": during, "worst_round_s": round(worst, 3), "writes": len(writes),
            "worst_write_s": round(max(writes, default=0.0), 3), "locked_errors": locked,
            "errors": errors[:3], "serving_s": round(time.monotonic() - start, 1)}


def memory(db: str, path: str) -> dict:
    from arbiter.store.sql import SqlStore
    from arbiter.store.transfer import import_registry, read_export

    st = SqlStore(db)
    baseline = _rss_mib()
    t0 = time.perf_counter()
    data = read_export(path)
    checked = time.perf_counter() - t0
    report = import_registry(st, data)
    return {"baseline_rss_mib": round(baseline), "peak_rss_mib": round(_rss_mib()),
            "check_s": round(checked, 1), "import_s": round(time.perf_counter() - t0, 1),
            "added_solutions": report["added"]["solutions"], "batches": report.get("batches"),
            "longest_batch_s": round(report.get("longest_batch_s", -1), 3)}


if __name__ == "__main__":
    db, mode = sys.argv[1], sys.argv[2]
    print(json.dumps(serve(db) if mode == "serve" else memory(db, sys.argv[3])), flush=True)
