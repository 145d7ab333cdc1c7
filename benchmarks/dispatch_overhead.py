"""Hot-path cost: ``run_arbitrated`` on a warm key versus calling the winning candidate directly.

Both paths get the same prebuilt region (a tiny 16x16x16 float32 matmul, so the
kernel itself is as short as it gets). Samples of N calls each alternate
between the two paths; the figure is the median per-call difference, with the
p20-p80 range of the paired differences. Region construction (validation +
key) is reported on its own line, since a caller building a region per call
pays it on both paths.

    python benchmarks/dispatch_overhead.py [--calls 2000] [--samples 41] [--quick] [--out DIR]

``--quick``: 200 calls x 5 samples (a smoke run: the figures are too short to quote). The report is
printed and written to ``<out>/dispatch_overhead.md``.
"""
from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

import arbiter
from arbiter import dispatch
from arbiter.regions import Matmul


def per_call(fn, calls: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - t0) / calls


class Scalar(arbiter.Candidate):
    """A correct 1x1x1 matmul in plain Python: the cheapest kernel that passes the gate, so the
    difference to it is the dispatch mechanism alone."""

    name, target, op, tier, priority = "scalar_1x1", "cpu", "matmul", arbiter.Tier.HAND_TUNED, 100

    def applies_to(self, region):
        return region.dims == {"m": 1, "n": 1, "k": 1} or "1x1x1 only"

    def run(self, region, params):
        out = region.alloc_out()
        out[0, 0] = region.a[0, 0] * region.b[0, 0]
        return out


def compare(region, calls, samples):
    """(route, direct ns, arbitrated ns, per-sample differences) for a warm key."""
    arbiter.run_arbitrated(region.op, region)  # decide once: the key is warm from here on
    route = dispatch.route(region.key.id)
    winner, params = route.candidate, route.params

    def direct():
        return winner.run(region, params)

    def arbitrated():
        return arbiter.run_arbitrated("matmul", region)

    for fn in (direct, arbitrated):  # warm caches and branch predictors alike
        per_call(fn, calls)
    d, r = [], []
    for _ in range(samples):
        d.append(per_call(direct, calls))
        r.append(per_call(arbitrated, calls))
    d, r = np.array(d), np.array(r)
    return route, d, r, r - d


def report(title, route, d, r, diff) -> list[str]:
    lo, hi = np.percentile(diff, [20, 80])
    return [f"{title}: winner {route.label}",
            f"  direct call of the winner      median {np.median(d):8.1f} ns",
            f"  run_arbitrated (warm key)      median {np.median(r):8.1f} ns",
            f"  overhead per call              median {np.median(diff):8.1f} ns  (p20 {lo:.1f}, p80 {hi:.1f})"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--samples", type=int, default=41)
    p.add_argument("--size", type=int, default=16)
    p.add_argument("--quick", action="store_true", help="200 calls x 5 samples (smoke run)")
    p.add_argument("--out", help="also write the report to DIR/dispatch_overhead.md")
    args = p.parse_args()
    if args.quick:
        args.calls, args.samples = 200, 5

    rng = np.random.default_rng(0)
    a = rng.standard_normal((args.size, args.size)).astype(np.float32)
    b = rng.standard_normal((args.size, args.size)).astype(np.float32)
    region = Matmul(a, b)
    real = compare(region, args.calls, args.samples)
    arbiter.register(Scalar())
    one = np.ones((1, 1), np.float32)
    scalar = compare(Matmul(one, one), args.calls, args.samples)
    build = np.array([per_call(lambda: Matmul(a, b), args.calls) for _ in range(9)])

    worst = max(np.median(real[3]), np.median(scalar[3]))
    lines = [f"dispatch overhead, {platform.processor() or platform.machine()}, numpy {np.__version__}, "
             f"{args.samples} samples x {args.calls} calls, paths alternating"
             f"{' (--quick: a smoke run)' if args.quick else ''}",
             *report(f"{args.size}^3 float32 matmul", *real),
             *report("1x1x1 float32 matmul (mechanism alone)", *scalar),
             f"  region construction (validate + key, paid on both paths) median {np.median(build):8.1f} ns",
             f"  goal: overhead < 1000 ns -> {'met' if worst < 1000 else 'MISSED'} (worst median {worst:.0f} ns)"]
    print("\n".join(lines))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "dispatch_overhead.md").write_text("```\n" + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
