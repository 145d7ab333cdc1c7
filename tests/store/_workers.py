"""Worker processes for the store tests (run as ``python _workers.py MODE DB INDEX [COUNT]``).

They write through the real ``SqlStore`` into a real SQLite file. The keys use a
made-up target (``lab``) so no target library is imported: the store records
the environment by fingerprint only.
"""
from __future__ import annotations

import sys

from arbiter.candidates import Candidate, Tier
from arbiter.oracles.budgets import Budget
from arbiter.store import CountDelta, MeasurementRecord, SolutionRecord, Verdict, VerdictKey
from arbiter.store.sql import SqlStore

ENV = "ab" * 10
WRITES = 100  # per kind, per worker: verdicts, solutions, counter batches
SHARED_KEYS = 20  # solutions every worker writes (the unique constraint must keep one each)
MEASUREMENTS_PER_KEY = 50


class LabCandidate(Candidate):
    name = "lab_kernel"
    target = "lab"
    op = "matmul"
    tier = Tier.EMITTED


def key(i: int) -> str:
    return f"lab:matmul:float32:RR:-:m{i},n1,k1"


def verdict(i: int) -> Verdict:
    return Verdict(i % 2 == 0, "" if i % 2 == 0 else f"at {i}: wrong", 1e-7 * i, 0.5, (f"{i}x1x1",),
                   Budget(1e-5, 1e-4, 1e-4), False, 0.01)


def concurrent(db: str, w: int, writes: int = WRITES) -> None:
    """``writes`` of each kind (at least SHARED_KEYS, so that every worker writes every shared key)."""
    st = SqlStore(db)
    cand = LabCandidate()
    for i in range(writes):
        st.save_verdict(VerdictKey(cand.identity(), "{}", key(1000 * (w + 1) + i), ENV), verdict(i), cand)
        st.save_solution(SolutionRecord(key(1000 * (w + 1) + i), cand.name, cand.identity(), {"w": w}, "tier", ENV))
        if i < SHARED_KEYS:
            st.save_solution(SolutionRecord(key(i), cand.name, cand.identity(), {"w": w}, "measured", ENV, 0.1))
        st.add_counts([CountDelta(key(j), cand.name, "{}", ENV, hits=1, misses=j % 2) for j in range(10)])


COUNT_KEYS = 40  # counter rows every flusher touches, each process in its own order
COUNT_BATCHES = 100


def shuffled_counts(db: str, w: int, batches: int = COUNT_BATCHES) -> None:
    """Flush counter batches touching the same rows as every other worker, in this worker's own random order
    (what ``dispatch.flush`` hands over: routes in the order this process first met its keys)."""
    import random

    st = SqlStore(db)
    rng = random.Random(w)
    cand = LabCandidate()
    for _ in range(batches):
        order = list(range(COUNT_KEYS))
        rng.shuffle(order)
        st.add_counts([CountDelta(key(j), cand.name, "{}", ENV, hits=1, misses=1) for j in order])


def until_killed(db: str) -> None:
    """Commit one key's measurement set per transaction, printing each count after its commit."""
    st = SqlStore(db)
    i = 0
    while True:
        records = [MeasurementRecord("lab_kernel", {"tile": t}, "device", 1e-3, 9e-4, 1.1e-3, 0.2, 30, 0.01)
                   for t in range(MEASUREMENTS_PER_KEY)]
        st.save_measurements(key(i), ENV, records)
        i += 1
        print(i, flush=True)


if __name__ == "__main__":
    mode, db = sys.argv[1], sys.argv[2]
    count = [int(sys.argv[4])] if len(sys.argv) > 4 else []  # writes or batches; the module's figure without
    if mode == "concurrent":
        concurrent(db, int(sys.argv[3]), *count)
    elif mode == "shuffled_counts":
        shuffled_counts(db, int(sys.argv[3]), *count)
    else:
        until_killed(db)
