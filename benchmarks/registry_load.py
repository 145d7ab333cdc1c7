"""Start-up cost of a warm registry: 10,000 stored solutions loaded by a new process.

Measures, side by side in one run on one SQLite file:
  * bulk: what ``SqlStore`` does on the first miss of an environment (one query for all its solutions),
    then 10,000 ``load_solution`` lookups served from memory;
  * per-key: the same 10,000 lookups each as its own indexed query (what a store without the cache would do).
Each figure is the median of 7 fresh opens, with p20..p80. Only public interfaces: the store's
``save_solution`` and ``load_solution``, and for the per-key baseline plain SQLAlchemy on the schema's
``SolutionRow``.

Usage: python benchmarks/registry_load.py [--quick] [--out DIR]
``--quick``: 1,000 solutions, 3 reps (a smoke run). The figures are printed and written to
``<out>/registry_load.md``.
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import create_engine, select

from arbiter.store import SolutionRecord
from arbiter.store.models import SolutionRow
from arbiter.store.sql import SqlStore

ENV = "cd" * 10


def key(i: int) -> str:
    return f"lab:matmul:float32:RR:-:m{i},n{i % 64 + 1},k{i % 128 + 1}"


def fill(db: str, n: int) -> None:
    """``n`` solutions (and their problem keys) written through the store, in one transaction."""
    st = SqlStore(db)
    with st.transaction():
        for i in range(n):
            st.save_solution(SolutionRecord(key(i), "lab_kernel", "lab_kernel@1", {"tile": 8 << (i % 4)},
                                            "measured", ENV, 0.2))
    st.close()


def bulk(db: str, n: int) -> float:
    t = time.perf_counter()
    st = SqlStore(db)
    found = sum(st.load_solution(key(i), ENV) is not None for i in range(n))
    dt = time.perf_counter() - t
    assert found == n
    st.close()
    return dt


def per_key(db: str, n: int) -> float:
    """The same lookups as one indexed query each, straight through SQLAlchemy (a store without the cache)."""
    t = time.perf_counter()
    engine = create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        found = sum(conn.execute(select(SolutionRow.candidate, SolutionRow.params, SolutionRow.policy)
                                 .where(SolutionRow.key == key(i), SolutionRow.env == ENV)).first() is not None
                    for i in range(n))
    dt = time.perf_counter() - t
    assert found == n
    engine.dispose()
    return dt


def summary(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=5)
    return f"median {statistics.median(xs) * 1e3:7.1f} ms  (p20 {q[0] * 1e3:.1f}, p80 {q[3] * 1e3:.1f}; {len(xs)} reps)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1,000 solutions, 3 reps (smoke run)")
    ap.add_argument("--out", help="also write the figures to DIR/registry_load.md")
    args = ap.parse_args()
    n, reps = (1_000, 3) if args.quick else (10_000, 7)
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "registry.db")
        fill(db, n)
        b, p = [], []
        for _ in range(reps):  # interleaved, so drift hits both alike
            b.append(bulk(db, n))
            p.append(per_key(db, n))
    lines = [f"{n:,} solutions, SQLite WAL file, open + every lookup ({datetime.date.today().isoformat()}, "
             f"{os.cpu_count()} CPUs{', --quick' if args.quick else ''}):",
             f"  bulk load (SqlStore):   {summary(b)}",
             f"  one query per key:      {summary(p)}",
             f"  ratio per-key / bulk:   {statistics.median(p) / statistics.median(b):.1f}x"]
    print("\n".join(lines))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "registry_load.md").write_text("```\n" + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
