"""Start-up cost of a warm registry: 10,000 stored solutions loaded by a new process.

Measures, side by side in one run on one SQLite file:
  * bulk: what ``SqlStore`` does on the first miss of an environment (one query for all its solutions),
    then 10,000 ``load_solution`` lookups served from memory;
  * per-key: the same 10,000 lookups each as its own indexed query (what a store without the cache would do).
Each figure is the median of REPS fresh opens, with p20..p80. Usage: python benchmarks/registry_load.py
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import create_engine, select  # noqa: E402

from arbiter.store import SolutionRecord  # noqa: E402
from arbiter.store.models import SolutionRow  # noqa: E402
from arbiter.store.diagnostics import to_url  # noqa: E402
from arbiter.store.sql import SqlStore  # noqa: E402

N, REPS, ENV = 10_000, 7, "cd" * 10


def key(i: int) -> str:
    return f"lab:matmul:float32:RR:-:m{i},n{i % 64 + 1},k{i % 128 + 1}"


def fill(db: str) -> None:
    """N solutions (and their problem keys) written through the store, in one transaction."""
    st = SqlStore(db)
    with st.transaction():
        for i in range(N):
            st.save_solution(SolutionRecord(key(i), "lab_kernel", "lab_kernel@1", {"tile": 8 << (i % 4)},
                                            "measured", ENV, 0.2))
    st.close()


def bulk(db: str) -> float:
    t = time.perf_counter()
    st = SqlStore(db)
    found = sum(st.load_solution(key(i), ENV) is not None for i in range(N))
    dt = time.perf_counter() - t
    assert found == N
    st.close()
    return dt


def per_key(db: str) -> float:
    """The same lookups as one indexed query each, straight through SQLAlchemy (a store without the cache)."""
    t = time.perf_counter()
    engine = create_engine(to_url(db))
    with engine.connect() as conn:
        found = sum(conn.execute(select(SolutionRow.candidate, SolutionRow.params, SolutionRow.policy)
                                 .where(SolutionRow.key == key(i), SolutionRow.env == ENV)).first() is not None
                    for i in range(N))
    dt = time.perf_counter() - t
    assert found == N
    engine.dispose()
    return dt


def summary(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=5)
    return f"median {statistics.median(xs) * 1e3:7.1f} ms  (p20 {q[0] * 1e3:.1f}, p80 {q[3] * 1e3:.1f}; {len(xs)} reps)"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "registry.db")
        fill(db)
        b, p = [], []
        for _ in range(REPS):  # interleaved, so drift hits both alike
            b.append(bulk(db))
            p.append(per_key(db))
        print(f"{N} solutions, SQLite WAL file, open + every lookup:")
        print(f"  bulk load (SqlStore):   {summary(b)}")
        print(f"  one query per key:      {summary(p)}")
        print(f"  ratio per-key / bulk:   {statistics.median(p) / statistics.median(b):.1f}x")


if __name__ == "__main__":
    main()
