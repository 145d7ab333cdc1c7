"""What the F4 gate costs per solution at a large GEMM, as a multiple of one run of that solution.

    python benchmarks/gate_cost.py [--target cpu|nvidia] [--size N] [--dtype D] [--rounds R]
                                   [--candidates a,b] [--quick] [--breakdown] [--out DIR]

For every candidate of the target that applies to ``Matmul`` at N x N x N (default: 4096 float16 on nvidia, 2048
float32 on the CPU), interleaved per round: one run of the candidate on a fresh region (the product), then one whole
``verify`` of it (every probe, the checks and the repeats). Printed per solution: the product's and the gate's
minimum and median seconds, and the gate as a multiple of the product (minima, medians). The first verify of
each solution is a warm-up (compilation, plan creation) and is not counted. The machine's load average is
printed beside the figures: on a shared machine they are noisy. ``--quick``: N = 256, one round, the first two
candidates (a smoke run); on a machine without the target it says "skipped" and writes nothing.
``--breakdown``: after the rounds, one more verify per solution with each part of the gate timed (the target
synchronized at each part's end): drawing probes, copies, runs of the candidate, the oracle checks, the repeats;
seconds and multiples of the product's minimum, printed below the table (a part inside another counts in both:
the runs, copies and checks of the repeats are in ``_repeats`` too).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from pathlib import Path

import arbiter
import arbiter.verify as gate
from arbiter import targets
from arbiter.candidates import REGISTRY
from arbiter.regions import Matmul
from arbiter.verify import verify


def _product_seconds(cand, params, region, target) -> float:
    fresh = region.with_out(None)
    start = time.perf_counter()
    cand.run(fresh, params)
    target.synchronize()
    return time.perf_counter() - start


# The parts of one verify that --breakdown times (functions of arbiter.verify), and the candidate's own runs.
PARTS = ("_draw", "pristine_copy", "changed_inputs", "_guarded_out", "_guard_reason", "_run_once", "check_output",
         "_repeats")


def _breakdown(cand, params, region, target) -> dict[str, float]:
    """Seconds per part of one verify of ``cand`` (``PARTS``, plus ``candidate.run`` and ``verify``)."""
    spent = dict.fromkeys(("verify", "candidate.run") + PARTS, 0.0)
    saved = {name: getattr(gate, name) for name in PARTS}

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                target.synchronize()
                spent[name] += time.perf_counter() - start
        return wrapper

    run = cand.run
    try:
        for name, fn in saved.items():
            setattr(gate, name, timed(name, fn))
        cand.run = timed("candidate.run", run)  # an instance attribute, deleted below
        start = time.perf_counter()
        verify(cand, params, region)
        spent["verify"] = time.perf_counter() - start
    finally:
        for name, fn in saved.items():
            setattr(gate, name, fn)
        with contextlib.suppress(AttributeError):
            del cand.run
    return spent


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None, help="cpu or nvidia (default: nvidia when available, else cpu)")
    ap.add_argument("--size", type=int, default=None, help="N of the N x N x N GEMM (default 4096 nvidia, 2048 cpu)")
    ap.add_argument("--dtype", default=None, help="default float16 on nvidia, float32 on the CPU")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--candidates", default="", help="comma-separated names (default: every one that applies)")
    ap.add_argument("--quick", action="store_true", help="N=256, one round, two candidates")
    ap.add_argument("--parts", action="store_true",
                    help="also time the gate with one repeat instead of REPEATS (what the repeats cost)")
    ap.add_argument("--breakdown", action="store_true",
                    help="also time each part of one more verify per solution (draws, copies, runs, checks, repeats)")
    ap.add_argument("--out", help="also write the table to DIR/gate_cost.md")
    args = ap.parse_args()
    name = args.target
    if name is None:
        name = "nvidia" if targets.get("nvidia").available() is True else "cpu"
    target = targets.get(name)
    if target.available() is not True:
        print(f"skipped: target {name} is not available here ({target.available()})")
        return
    n = 256 if args.quick else (args.size or (4096 if name == "nvidia" else 2048))
    rounds = 1 if args.quick else args.rounds
    dtype = args.dtype or ("float16" if name == "nvidia" else "float32")
    region = Matmul.random(name, dtype, {"m": n, "n": n, "k": n})
    wanted = [c for c in args.candidates.split(",") if c]
    cands = [c for c in REGISTRY.candidates(target=name, op="matmul")
             if c.available() is True and c.applies_to(region) is True and (not wanted or c.name in wanted)]
    if args.quick:
        cands = cands[:2]
    load = os.getloadavg()
    lines = [f"kernel-arbiter {arbiter.__version__}: gate cost at {n}^3 {dtype} on {name}, {rounds} round(s), "
             f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} over {os.cpu_count()} CPUs", "",
             "| solution | product min s | product median s | gate min s | gate median s | gate / product (min) "
             "| gate / product (median) | probes |" + (" no repeats / product (min, median) |" if args.parts else ""),
             "| --- | --- | --- | --- | --- | --- | --- | --- |" + (" --- |" if args.parts else "")]
    print("\n".join(lines), flush=True)
    parts_lines: list[str] = []
    for cand in cands:
        params = (cand.param_space() or [{}])[0]  # the candidate's default solution
        verify(cand, params, region)  # warm-up: compilation, plans
        products, gates, bare, probes = [], [], [], 0
        for _ in range(rounds):
            products.append(_product_seconds(cand, params, region, target))
            start = time.perf_counter()
            v = verify(cand, params, region)
            gates.append(time.perf_counter() - start)
            if args.parts:
                repeats, gate.REPEATS = gate.REPEATS, 1
                try:
                    start = time.perf_counter()
                    verify(cand, params, region)
                    bare.append(time.perf_counter() - start)
                finally:
                    gate.REPEATS = repeats
            probes = len(v.probes)
            if not v.passed:
                print(f"  {cand.name}: failed the gate: {v.reason[:200]}", flush=True)
        pmin, pmed, gmin, gmed = min(products), statistics.median(products), min(gates), statistics.median(gates)
        parts = f" {min(bare) / pmin:.2f}, {statistics.median(bare) / pmed:.2f} |" if bare else ""
        lines.append(f"| {cand.name} | {pmin:.4f} | {pmed:.4f} | {gmin:.4f} | {gmed:.4f} | {gmin / pmin:.2f} | "
                     f"{gmed / pmed:.2f} | {probes} |{parts}")
        print(lines[-1], flush=True)
        if args.breakdown:  # printed at once (a run cut short by a timeout keeps it), gathered below the table
            spent = _breakdown(cand, params, region, target)
            parts_lines.append(f"* {cand.name}: " + ", ".join(f"{part} {sec:.4f} ({sec / pmin:.2f}x)"
                                                              for part, sec in spent.items()))
            print("  parts " + parts_lines[-1], flush=True)
    if parts_lines:
        lines += ["", "Parts of one more verify per solution (seconds; x the product's minimum):", ""] + parts_lines
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "gate_cost.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
