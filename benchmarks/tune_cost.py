"""What tuning costs: wall time per key and per solution (gate and timing apart), on a fresh registry.

    python benchmarks/tune_cost.py [--target cpu|nvidia] [--suite quick] [--budget-seconds 2]

For each key of the suite: the whole ``tune_region`` wall time, and for every solution the seconds
its F4 verdict took (probes + float64 oracle) and the seconds its timing took (warm-up included).
On the nvidia target, the peer is PyTorch TunableOp: its first-call tuning of the same GEMM shapes
(``torch.cuda.tunable``), measured in the same run as the first call minus a warm call.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections import defaultdict

from arbiter import dispatch
from arbiter.candidates import params_id
from arbiter.store.sql import SqlStore
from arbiter.suite import suite as get_suite
from arbiter.tune import InProcess, tune_region


class TimedRunner(InProcess):
    """The default runner, recording the wall time of every timing call per solution."""

    def __init__(self):
        self.seconds = defaultdict(float)

    def measure(self, candidate, params, region, **kwargs):
        t0 = time.perf_counter()
        try:
            return super().measure(candidate, params, region, **kwargs)
        finally:
            self.seconds[(candidate.name, params_id(params))] += time.perf_counter() - t0


def tunableop_cost(shapes, dtype: str) -> dict:
    """PyTorch TunableOp's first-call tuning time per GEMM shape (seconds), or {} without torch/CUDA."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    torch.cuda.tunable.enable(True)
    torch.cuda.tunable.tuning_enable(True)
    torch.cuda.tunable.set_filename(os.path.join(tempfile.mkdtemp(), "tunableop_results.csv"))
    out = {}
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=getattr(torch, dtype))
        b = torch.randn(k, n, device="cuda", dtype=getattr(torch, dtype))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.matmul(a, b)  # first call: TunableOp tunes this shape
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        torch.matmul(a, b)
        torch.cuda.synchronize()
        out[(m, n, k)] = first - (time.perf_counter() - t0)
    torch.cuda.tunable.enable(False)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--suite", default="quick")
    ap.add_argument("--budget-seconds", type=float, default=2.0, help="timing cap per key")
    args = ap.parse_args()
    store = SqlStore(os.path.join(tempfile.mkdtemp(), "registry.db"))  # fresh: every verdict is computed
    dispatch.configure(store=store)
    print(f"tune cost, {platform.node()} {platform.machine()}, target {args.target}, suite {args.suite!r}, "
          f"timing cap {args.budget_seconds:g} s per key, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"{'key':<58} {'total s':>8} {'gate s':>7} {'time s':>7}  solutions")
    totals, gemms = [], []
    for i, problem in enumerate(get_suite(args.suite)):
        region = problem.region(args.target, seed=i)
        runner = TimedRunner()
        t0 = time.perf_counter()
        decision = tune_region(region, store, runner=runner, budget_s=args.budget_seconds)
        total = time.perf_counter() - t0
        gate = sum(r.verdict.seconds for r in decision.rows if r.verdict is not None)
        timing = sum(runner.seconds.values())
        per = ", ".join(f"{r.label} {r.verdict.seconds:.2f}+{runner.seconds.get((r.candidate.name, params_id(r.params)), 0):.2f}"
                        for r in decision.rows if r.verdict is not None)
        print(f"{problem.label:<58} {total:8.2f} {gate:7.2f} {timing:7.2f}  {per}")
        totals.append(total)
        if problem.op == "matmul" and not any(v != "0" and v != "none" for v in problem.attrs.values()):
            gemms.append((problem.dims["m"], problem.dims["n"], problem.dims["k"], problem.dtype, total))
    print(f"median per key {statistics.median(totals):.2f} s, total {sum(totals):.1f} s over {len(totals)} keys")
    if args.target == "nvidia" and gemms:
        for dtype in sorted({g[3] for g in gemms}):
            shapes = [(m, n, k) for m, n, k, d, _ in gemms if d == dtype]
            peer = tunableop_cost(shapes, dtype)
            for m, n, k, d, ours in gemms:
                if d == dtype and (m, n, k) in peer:
                    print(f"GEMM {m}x{n}x{k} {d}: arbiter (gate every solution + time) {ours:.2f} s, "
                          f"TunableOp first-call tuning {peer[(m, n, k)]:.2f} s (no correctness check)")
    store.close()


if __name__ == "__main__":
    main()
