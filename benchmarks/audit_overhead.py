"""The audit of real calls: what ``configure(audit=rate)`` costs a caller at rates 1e-3 and 1e-2, against rate 0.

Per workload (a small matmul where the hot path dominates; a mid-size softmax and matmul where a sampled call's
copies and float64 check dominate), two figures:

* per sampled call, one call at a time: the calling thread's extra time at rate 1 over rate 0 (the input and
  output copies, the queue), and the background check's time (waited for after each call, outside the timed
  call); the expected overhead at rate r is r times the first (plus r times the second where no core is free
  for the check thread);
* end to end: samples of N ``run_arbitrated`` calls on a warm key alternating between rates 0, 1e-3 and 1e-2
  (rotating which goes first), N sized to about 0.2 s a sample; the median per-call time per rate and the
  median of the paired differences to rate 0 with their p20-p80 range. The background check runs meanwhile
  (it competes for cores and the GIL) and is waited for after each sample, outside the timed loop.

    python benchmarks/audit_overhead.py [--samples 15] [--blas-threads 1] [--quick] [--out DIR]

BLAS runs on one thread by default: on a shared, oversubscribed box OpenBLAS's spinning worker threads make a
256^3 product 50-100x slower and swamp every other figure (``--blas-threads 0`` leaves BLAS as it is).

``--quick``: 3 samples of about 0.02 s, 20 sampled calls (a smoke run: the figures are too short to quote).
The report is printed and written to ``<out>/audit_overhead.md``.
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np

import arbiter
from arbiter import audit
from arbiter.regions import Matmul, Softmax

RATES = (0.0, 1e-3, 1e-2)


def timed(region, calls: int) -> float:
    """ns per call over ``calls`` calls; then waits for the background check (not timed)."""
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        arbiter.run_arbitrated(region.op, region)
    per = (time.perf_counter_ns() - t0) / calls
    audit.drain(600)
    return per


def per_sample(region, n: int) -> tuple[float, float, float]:
    """(median ns of a call at rate 0, extra ns on the calling thread at rate 1, median ns of the check)."""
    found = {}
    for r in (0.0, 1.0):
        arbiter.configure(audit=r)
        arbiter.run_arbitrated(region.op, region)
        audit.drain(600)
        call, check = [], []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            arbiter.run_arbitrated(region.op, region)
            t1 = time.perf_counter_ns()
            audit.drain(600)
            call.append(t1 - t0)
            check.append(time.perf_counter_ns() - t1)
        found[r] = (float(np.median(call)), float(np.median(check)))
    return found[0.0][0], found[1.0][0] - found[0.0][0], found[1.0][1]


def measure(region, seconds: float, samples: int) -> tuple[int, dict[float, np.ndarray]]:
    arbiter.configure(audit=0)
    arbiter.run_arbitrated(region.op, region)
    t0 = time.perf_counter()
    arbiter.run_arbitrated(region.op, region)
    calls = max(20, int(seconds / max(time.perf_counter() - t0, 1e-7)))
    per: dict[float, list[float]] = {r: [] for r in RATES}
    for s in range(samples):
        order = RATES[s % len(RATES):] + RATES[:s % len(RATES)]
        for r in order:
            arbiter.configure(audit=r)  # clears the table: one miss (the stored solution loads), then warm
            arbiter.run_arbitrated(region.op, region)
            per[r].append(timed(region, calls))
    return calls, {r: np.array(v) for r, v in per.items()}


def lines_for(title: str, region, seconds: float, samples: int, n: int) -> list[str]:
    base_call, extra, check = per_sample(region, n)
    calls, found = measure(region, seconds, samples)
    base = found[0.0]
    out = [f"{title}: one call {base_call / 1e3:,.1f} us; a sampled call adds {extra / 1e3:,.1f} us on the "
           f"caller's thread and {check / 1e3:,.1f} us of background check (medians of {n})",
           f"  expected overhead: rate 1e-3 {1e-3 * extra / base_call * 100:.3f}% on the caller "
           f"(+{1e-3 * check / base_call * 100:.3f}% of a core in the background); rate 1e-2 "
           f"{1e-2 * extra / base_call * 100:.2f}% (+{1e-2 * check / base_call * 100:.2f}%)",
           f"  end to end, {samples} samples x {calls} calls: rate 0 median {np.median(base) / 1e3:,.2f} us per call "
           f"(p20-p80 {np.percentile(base, 20) / 1e3:,.2f}-{np.percentile(base, 80) / 1e3:,.2f})"]
    for r in RATES[1:]:
        diff = found[r] - base
        lo, hi = np.percentile(diff, [20, 80])
        out.append(f"    rate {r:g}: median {np.median(found[r]) / 1e3:,.2f} us; paired difference median "
                   f"{np.median(diff) / np.median(base) * 100:+.2f}% (p20 {lo / np.median(base) * 100:+.2f}%, "
                   f"p80 {hi / np.median(base) * 100:+.2f}%)")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=15)
    p.add_argument("--seconds", type=float, default=0.2, help="about this long a sample")
    p.add_argument("--sampled", type=int, default=101, help="sampled calls timed one at a time")
    p.add_argument("--blas-threads", type=int, default=1, help="BLAS threads (0: as configured)")
    p.add_argument("--quick", action="store_true", help="3 samples of 0.02 s, 20 sampled calls (smoke run)")
    p.add_argument("--out", help="also write the report to DIR/audit_overhead.md")
    args = p.parse_args()
    if args.quick:
        args.samples, args.seconds, args.sampled = 3, 0.02, 20
    if args.blas_threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.blas_threads, user_api="blas")
    rng = np.random.default_rng(0)

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    workloads = [("16^3 float32 matmul", Matmul(f32(16, 16), f32(16, 16))),
                 ("256x1024 float32 softmax", Softmax(f32(256, 1024))),
                 ("256^3 float32 matmul", Matmul(f32(256, 256), f32(256, 256)))]
    before = audit.Counts(**vars(audit.counts))
    lines = [f"audit overhead, {platform.processor() or platform.machine()}, {os.cpu_count()} cores, numpy "
             f"{np.__version__}, BLAS threads {args.blas_threads or 'as configured'}, load average "
             f"{os.getloadavg()[0]:.1f} at the start"
             f"{' (--quick: a smoke run)' if args.quick else ''}"]
    for title, region in workloads:
        lines += lines_for(title, region, args.seconds, args.samples, args.sampled)
    c = audit.counts
    lines.append(f"calls sampled {c.sampled - before.sampled}, checked {c.checked - before.checked}, dropped "
                 f"(queue full) {c.dropped - before.dropped}, failed {c.failed - before.failed}")
    arbiter.configure(audit=0)
    print("\n".join(lines))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "audit_overhead.md").write_text("```\n" + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
