"""The timing audit's cost and what it changes (issue 39 item 3).

1. **Overhead**: a tuned key's user path (``run_arbitrated`` with the region built per call, no ``out=``) at timing
   audit rates 0, 0.01 and 0.1, the three timed in interleaved rounds (each round a fresh order); µs per call
   and the difference to rate 0.
2. **A choice it changed**, on real candidates: a key tuned on a quiet box (what ``arbiter tune`` stores), then the
   program: the same key called in a loop with another library's work between its calls (a torch op on torch's
   pool) while one other CPU-bound process runs (``--no-busy``: without it), under ``timing_audit=0.1``. Printed:
   the stored winner and its measured time, what the program's calls took, and whether the audit re-decided (its
   stored note) or kept the winner.

    python benchmarks/timing_audit.py [--quick] [--no-busy] [--out DIR]
"""
from __future__ import annotations

import argparse
import datetime
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import arbiter  # noqa: E402
from _busy import busy_box  # noqa: E402
from arbiter import dispatch, timing_audit  # noqa: E402
from arbiter.env import environment  # noqa: E402
from arbiter.regions import Matmul, Softmax  # noqa: E402
from arbiter.store import MemoryStore  # noqa: E402
from arbiter.tune import tune_region  # noqa: E402


def overhead(rounds: int, calls: int) -> list[str]:
    x = np.random.default_rng(0).standard_normal((64, 1000)).astype(np.float32)
    arbiter.configure(store=MemoryStore(), policy="tier")
    decision = tune_region(Softmax(x), dispatch.store())
    samples: dict[float, list[float]] = {0.0: [], 0.01: [], 0.1: []}
    order = list(samples)
    for _ in range(rounds):
        random.shuffle(order)
        for rate in order:
            arbiter.configure(timing_audit=rate)
            for _ in range(20):  # the miss (the stored winner installed, armed at this rate) and a warm-up
                arbiter.run_arbitrated("softmax", Softmax(x))
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                arbiter.run_arbitrated("softmax", Softmax(x))
            samples[rate].append((time.perf_counter_ns() - t0) / calls / 1e3)
    base = float(np.median(samples[0.0]))
    lines = [f"Key softmax 64x1000 float32, winner {decision.winner.label} ({decision.chosen_by}); "
             f"{rounds} rounds of {calls} calls.", "", "| timing audit rate | µs per call (p20-p80) | over rate 0 |",
             "|---|---|---|"]
    for rate, s in samples.items():
        med = float(np.median(s))
        lo, hi = np.percentile(s, [20, 80])
        lines.append(f"| {rate:g} | {med:.2f} ({lo:.2f}-{hi:.2f}) | {med - base:+.2f} µs |")
    arbiter.configure(timing_audit=0)
    return lines


def changed(quick: bool, busy: bool) -> list[str]:
    import torch

    size = 128 if quick else 256
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((size, size)).astype(np.float32) for _ in range(2))
    store = MemoryStore()
    arbiter.configure(store=store, policy="tier", timing_audit=0)
    decision = tune_region(Matmul(a, b), store)
    key = decision.key.id
    fp = environment("cpu").fingerprint
    measured = {m.solution.label: m.median_s for m in store.load_measurements(key, fp) if str(m.mode) == "latency"}
    lines = [f"Key matmul {size}^3 float32 tuned quiet: stored {decision.winner.label} ({decision.chosen_by}), "
             f"measured {measured.get(decision.winner.label, float('nan')) * 1e6:.1f} µs; note: {decision.note}", ""]
    other = torch.randn(256, 1024)
    before = (timing_audit.counts.sampled, timing_audit.counts.redecided, timing_audit.counts.kept)
    with busy_box(busy):
        time.sleep(0.5)
        arbiter.configure(timing_audit=0.1)
        took = []
        for _ in range(300 if quick else 3000):
            torch.softmax(other, -1)  # another library's work between the key's calls, on torch's pool
            t0 = time.perf_counter_ns()
            arbiter.run_arbitrated("matmul", Matmul(a, b))
            took.append((time.perf_counter_ns() - t0) / 1e3)
    record = store.load_solution(key, fp)
    decisions = timing_audit.history[-max(1, redecided_now(before)):]
    sampled, redecided, kept = (now - was for now, was in zip(
        (timing_audit.counts.sampled, timing_audit.counts.redecided, timing_audit.counts.kept), before))
    lines.append(f"The program ({'one other CPU-bound process running, ' if busy else ''}a torch softmax between "
                 f"calls, load {os.getloadavg()[0]:.1f}): {len(took)} calls, median {np.median(took):.1f} µs, "
                 f"mean {np.mean(took):.1f} µs (first 100: median {np.median(took[:100]):.1f}; last 100: median "
                 f"{np.median(took[-100:]):.1f}); {sampled} sampled, {redecided} re-decided, {kept} kept.")
    lines += [""] + [f"- {d}" for d in decisions] + [""]
    lines.append(f"Stored now: {record.candidate_name} {record.params or ''} ({record.chosen_by}); note: {record.note}")
    arbiter.configure(timing_audit=0)
    return lines


def redecided_now(before) -> int:
    """Decisions (kept or re-decided) the audit took since ``before`` (its counts then)."""
    return timing_audit.counts.redecided + timing_audit.counts.kept - before[1] - before[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-busy", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    lines = [f"# The timing audit ({datetime.date.today()})", "", "## Overhead on the user path", ""]
    lines += overhead(3 if args.quick else 15, 200 if args.quick else 2000)
    try:
        import torch  # noqa: F401
    except ImportError:
        lines += ["", "A choice it changed: skipped (needs PyTorch for the other library's work)."]
    else:
        lines += ["", "## A choice in a program", ""] + changed(args.quick, not args.no_busy)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "timing_audit.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
