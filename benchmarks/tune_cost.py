"""What tuning costs: wall time per key and per solution (gate and timing apart), on a fresh registry.

    python benchmarks/tune_cost.py [--target cpu|nvidia] [--suite quick] [--budget-seconds 2] [--quick] [--out DIR]
    python benchmarks/tune_cost.py --gate-ratio 2048 [--target cpu]      # gating one GEMM / one run of it
    python benchmarks/tune_cost.py --gemm 4096 --target nvidia           # per-solution tuning cost + TunableOp
    python benchmarks/tune_cost.py --gate-memory                         # first-call gating memory, 256 MiB softmax

For each key of the suite: the whole ``tune_region`` wall time, and for every solution the seconds
its F4 verdict took (probes + float64 oracle) and the seconds its timing took (warm-up included).
On the nvidia target, the peer is PyTorch TunableOp: its first-call tuning of the same GEMM shapes
(``torch.cuda.tunable``), measured in the same run as the first call minus a warm call.
``--quick``: the suite's first two keys with a 0.2 s timing cap (a smoke run); ``--out DIR``: the per-key
table is also written to ``DIR/tune_cost.md``.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

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


def _sync(target: str):
    from arbiter import targets

    targets.get(target).synchronize()


def gate_ratio(size: int, target: str, dtype: str = "float32", reps: int = 7) -> None:
    """Gating the vendor GEMM at size^3 against one product of that shape, measured in one run."""
    import numpy as np

    from arbiter.candidates import REGISTRY
    from arbiter.regions import Matmul
    from arbiter.verify import verify

    region = Matmul.random(target, dtype, {"m": size, "n": size, "k": size}, rng=np.random.default_rng(0))
    vendor = REGISTRY.candidates(target, "matmul")[0]
    out = region.alloc_out()
    vendor.run(region.with_out(out), {})
    _sync(target)
    runs, gates = [], []
    for _ in range(reps):  # interleaved, so load on a shared machine hits both alike
        t0 = time.perf_counter()
        vendor.run(region.with_out(out), {})
        _sync(target)
        runs.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        v = verify(vendor, {}, region)
        gates.append(time.perf_counter() - t0)
        assert v.passed, v.reason
    run, gate = statistics.median(runs), statistics.median(gates)
    print(f"gate cost {size}^3 {dtype} on {target} ({vendor.name}), {reps} interleaved repetitions: one product "
          f"median {run * 1e3:.1f} ms (min {min(runs) * 1e3:.1f}), gate median {gate * 1e3:.1f} ms "
          f"(min {min(gates) * 1e3:.1f}); ratio {gate / run:.2f}x of medians, {min(gates) / min(runs):.2f}x of minima")
    print(f"  {len(v.probes)} probes: {', '.join(v.probes)}")


def gate_memory(rows: int = 8192, cols: int = 8192) -> None:
    """Peak resident-memory growth of a first dispatch of a float32 softmax (gating included), in a child."""
    import subprocess
    import sys

    script = (f"import resource, numpy as np, arbiter\nfrom arbiter.regions import Softmax\n"
              f"x = np.random.default_rng(0).standard_normal(({rows}, {cols}), dtype=np.float32)\n"
              f"b = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              f"arbiter.run_arbitrated('softmax', Softmax(x))\n"
              f"print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - b) * 1024)\n")
    env = {**os.environ, "ARBITER_DB": os.path.join(tempfile.mkdtemp(), "r.db")}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    grew = int(out.stdout.split()[-1])
    operand = rows * cols * 4
    print(f"first call, softmax {rows}x{cols} float32 ({operand / 2**20:.0f} MiB): peak RSS grew "
          f"{grew / 2**20:.0f} MiB = {grew / operand:.2f}x the operand (stated bound: 3x operand+output + 64 MiB "
          f"= {(6 * operand + 64 * 2**20) / 2**20:.0f} MiB)")


def gemm_cost(size: int, target: str, dtypes: list[str], budget_s: float) -> None:
    """Tune one size^3 GEMM key per dtype: per solution gate ms, timing ms and compile s; TunableOp as the peer."""
    import numpy as np

    from arbiter.regions import Matmul

    store = SqlStore(os.path.join(tempfile.mkdtemp(), "registry.db"))
    dispatch.configure(store=store)
    for dtype in dtypes:
        region = Matmul.random(target, dtype, {"m": size, "n": size, "k": size}, rng=np.random.default_rng(0))
        runner = TimedRunner()
        t0 = time.perf_counter()
        decision = tune_region(region, store, runner=runner, budget_s=budget_s)
        total = time.perf_counter() - t0
        rows = [r for r in decision.rows if r.verdict is not None]
        print(f"GEMM {size}^3 {dtype} on {target}: tune_region {total:.2f} s over {len(rows)} solutions "
              f"(winner {decision.winner.label}, {decision.chosen_by})")
        gate_ms = []
        for r in rows:
            compile_s = getattr(r.candidate, "last_compile_s", 0.0) or 0.0
            timed = runner.seconds.get((r.candidate.name, params_id(r.params)), 0.0)
            gate_ms.append(r.verdict.seconds * 1e3)
            print(f"  {r.label:<48} gate {r.verdict.seconds * 1e3:8.1f} ms  timing {timed * 1e3:8.1f} ms  "
                  f"compile {compile_s:6.2f} s  {'pass' if r.verdict.passed else 'FAIL ' + r.verdict.reason[:60]}")
        both_ms = [r.verdict.seconds * 1e3 + runner.seconds.get((r.candidate.name, params_id(r.params)), 0.0) * 1e3
                   for r in rows]
        print(f"  per solution: median gate {statistics.median(gate_ms):.1f} ms, "
              f"median gate+timing {statistics.median(both_ms):.1f} ms (goal: <= 60 ms plus compile)")
        if target == "nvidia":
            peer = tunableop_cost([(size, size, size)], dtype)
            if peer:
                print(f"  TunableOp first-call tuning {peer[(size, size, size)] * 1e3:.1f} ms (no correctness check)")
            else:
                print("  TunableOp: not measured (no torch with CUDA here)")
    store.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--suite", default="quick")
    ap.add_argument("--budget-seconds", type=float, default=2.0, help="timing cap per key")
    ap.add_argument("--gate-ratio", type=int, metavar="N", help="only: gate an N^3 float32 GEMM vs one product")
    ap.add_argument("--gemm", type=int, metavar="N", help="only: tune one N^3 GEMM key per dtype (per solution)")
    ap.add_argument("--dtypes", default="float32,float16,bfloat16", help="dtypes for --gemm")
    ap.add_argument("--gate-memory", action="store_true", help="only: first-call gating memory of a 256 MiB softmax")
    ap.add_argument("--quick", action="store_true", help="the suite's first 2 keys, 0.2 s timing cap (smoke run)")
    ap.add_argument("--out", help="also write the per-key table to DIR/tune_cost.md")
    args = ap.parse_args()
    if args.quick:
        args.budget_seconds = 0.2
    print(f"{platform.node()} {platform.machine()}, target {args.target}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    if args.gate_ratio:
        return gate_ratio(args.gate_ratio, args.target)
    if args.gate_memory:
        return gate_memory()
    if args.gemm:
        dtypes = [d for d in args.dtypes.split(",") if d]
        if args.target == "cpu":
            dtypes = [d for d in dtypes if d != "bfloat16"]
        return gemm_cost(args.gemm, args.target, dtypes, args.budget_seconds)
    lines = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    store = SqlStore(os.path.join(tempfile.mkdtemp(), "registry.db"))  # fresh: every verdict is computed
    dispatch.configure(store=store)
    say(f"tune cost, {platform.node()} {platform.machine()}, target {args.target}, suite {args.suite!r}, "
          f"timing cap {args.budget_seconds:g} s per key, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    say(f"{'key':<58} {'total s':>8} {'gate s':>7} {'time s':>7}  solutions")
    totals, gemms = [], []
    problems = get_suite(args.suite)
    for i, problem in enumerate(problems[:2] if args.quick else problems):
        region = problem.region(args.target, seed=i)
        runner = TimedRunner()
        t0 = time.perf_counter()
        decision = tune_region(region, store, runner=runner, budget_s=args.budget_seconds)
        total = time.perf_counter() - t0
        gate = sum(r.verdict.seconds for r in decision.rows if r.verdict is not None)
        timing = sum(runner.seconds.values())
        per = ", ".join(f"{r.label} {r.verdict.seconds:.2f}+"
                        f"{runner.seconds.get((r.candidate.name, params_id(r.params)), 0):.2f}"
                        for r in decision.rows if r.verdict is not None)
        say(f"{problem.label:<58} {total:8.2f} {gate:7.2f} {timing:7.2f}  {per}")
        totals.append(total)
        if problem.op == "matmul" and not any(v != "0" and v != "none" for v in problem.attrs.values()):
            gemms.append((problem.dims["m"], problem.dims["n"], problem.dims["k"], problem.dtype, total))
    say(f"median per key {statistics.median(totals):.2f} s, total {sum(totals):.1f} s over {len(totals)} keys")
    if args.target == "nvidia" and gemms:
        for dtype in sorted({g[3] for g in gemms}):
            shapes = [(m, n, k) for m, n, k, d, _ in gemms if d == dtype]
            peer = tunableop_cost(shapes, dtype)
            for m, n, k, d, ours in gemms:
                if d == dtype and (m, n, k) in peer:
                    say(f"GEMM {m}x{n}x{k} {d}: arbiter (gate every solution + time) {ours:.2f} s, "
                          f"TunableOp first-call tuning {peer[(m, n, k)]:.2f} s (no correctness check)")
    store.close()
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "tune_cost.md").write_text("```\n" + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
