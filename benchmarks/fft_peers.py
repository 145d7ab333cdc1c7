"""FFT on the GPU: the arbiter's pick against torch.fft and cupy.fft called bare, in one run.

Cases (transforms over the last axis): c2c, r2c and c2r at 1024 x 1024 (complex64 / float32), r2c 256 x 4096
float32, c2c 32 x 65536 complex64, c2c 256 x 1024 complex128. For each, on the same data:

* ``torch.fft`` bare: ``fft`` / ``rfft`` / ``irfft(x, n)`` on a torch tensor, as a PyTorch user writes it;
* ``cupy.fft`` bare: the same on a CuPy array (a DLPack view of that tensor);
* ``arbiter (torch)``: ``run_arbitrated("fft", FFT(x, kind, inverse, n))`` on the torch tensor, a new region each
  call, no ``out=``, default policy, after ``arbiter.tune.tune_region`` stored the key's winner timed on torch
  tensors;
* ``arbiter (cupy)``: the same on the CuPy array, after tuning the key again on CuPy arrays. The key is the
  same for both array types, so the second tune replaces the first: each row shows the winner for its caller.

Ratio: the best bare peer's time / the arbiter's (goal >= 0.97: the arbiter never below the best peer by more
than 3%). Timing: ``arbiter.timing.measure_calls``, device mode (events around one call, L2 flushed before it;
host gaps count), median with its spread. c2r through the arbiter builds the Hermitian spectrum and runs a c2c
inverse (cuFFT's float32 c2r missed the gate's budget on an H200, see docs/gpu_results.md); its peers call
``irfft``, which is what a user calls.

Usage: python benchmarks/fft_peers.py [--out DIR] [--quick] [--tune-budget S] [--budget-seconds S]
A case starts only while one as long as the last still fits the wall-clock budget (default 80 s).
``--quick``: c2c and c2r at 1024 x 1024. Without a GPU (or without torch) it says so and exits 0.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from _gpu import cannot_run, timed, write_report

# (batch, n, kind, inverse, input dtype); c2r's input is the half spectrum of n // 2 + 1 bins
CASES = [(1024, 1024, "c2c", False, "complex64"), (1024, 1024, "r2c", True, "complex64"),
         (1024, 1024, "r2c", False, "float32"), (256, 4096, "r2c", False, "float32"),
         (32, 65536, "c2c", False, "complex64"), (256, 1024, "c2c", False, "complex128")]
QUICK = CASES[:2]


def _label(case) -> str:
    batch, n, kind, inverse, dtype = case
    return f"{'c2r' if kind == 'r2c' and inverse else kind} {batch}x{n} {dtype}"


def run_case(case, tune_budget: float) -> dict:
    import cupy as cp
    import torch

    import arbiter
    from arbiter import dispatch
    from arbiter.regions import FFT
    from arbiter.tune import tune_region

    batch, n, kind, inverse, dtype = case
    g = torch.Generator(device="cuda").manual_seed(batch + n)
    cols = n // 2 + 1 if kind == "r2c" and inverse else n
    real = torch.float64 if dtype in ("float64", "complex128") else torch.float32
    t = torch.randn(batch, cols, device="cuda", dtype=real, generator=g)
    if dtype.startswith("complex"):
        t = torch.complex(t, torch.randn(batch, cols, device="cuda", dtype=real, generator=g))
    c = cp.from_dlpack(t)
    if kind == "c2c":
        bare_t, bare_c = (lambda: torch.fft.fft(t, dim=-1)), (lambda: cp.fft.fft(c, axis=-1))
    elif inverse:
        bare_t, bare_c = (lambda: torch.fft.irfft(t, n=n, dim=-1)), (lambda: cp.fft.irfft(c, n=n, axis=-1))
    else:
        bare_t, bare_c = (lambda: torch.fft.rfft(t, dim=-1)), (lambda: cp.fft.rfft(c, axis=-1))
    want = bare_t().to(torch.complex128 if kind == "c2c" or not inverse else torch.float64)
    row: dict = {"case": _label(case), "paths": {}}

    def record(name, call, note="", convert=None):
        try:
            got = call()
            got = torch.from_dlpack(got) if convert else got
            err = float(torch.linalg.norm(got.to(want.dtype) - want) / torch.linalg.norm(want))
            row["paths"][name] = timed(call, max_reps=300, time_cap_s=0.5) | {"rel_err": err, "note": note}
        except Exception as exc:  # a path that cannot run here is a row that says why, not a crash
            row["paths"][name] = {"error": f"{type(exc).__name__}: {exc}"[:200], "note": note}

    record("torch.fft bare", bare_t)
    record("cupy.fft bare", bare_c, convert=True)
    for lib, x in (("torch", t), ("cupy", c)):
        def make(x=x):
            return FFT(x, kind, inverse, n if kind == "r2c" and inverse else None)

        decision = tune_region(make(), dispatch.store(), mode="device", budget_s=tune_budget)
        dispatch.configure(store=dispatch.store())  # clears the dispatch table: the next call loads the winner
        record(f"arbiter ({lib})", lambda make=make: arbiter.run_arbitrated("fft", make()), decision.winner.label,
               convert=lib == "cupy")
    peers = [row["paths"][p]["us"] for p in ("torch.fft bare", "cupy.fft bare") if "us" in row["paths"][p]]
    best = min(peers) if peers else None
    row["best_peer_us"] = best
    for entry in row["paths"].values():
        if best and entry.get("us"):
            entry["x_best_peer"] = best / entry["us"]
    return row


def table(rows) -> list[str]:
    lines = ["| case | path | device us (spread) | best peer / path | rel. err vs torch | winner |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        for name, e in r["paths"].items():
            if "us" not in e:
                lines.append(f"| {r['case']} | {name} | - | - | - | {e.get('error', '')} |")
                continue
            lines.append(f"| {r['case']} | {name} | {e['us']:.1f} ({e['spread'] * 100:.1f}%) | "
                         f"{e.get('x_best_peer', float('nan')):.3f}x | {e['rel_err']:.1e} | {e.get('note', '')} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tune-budget", type=float, default=1.5, help="timing budget per key for tune (s)")
    ap.add_argument("--budget-seconds", type=float, default=80.0)
    args = ap.parse_args()
    if cannot_run("fft_peers", "torch.fft is a peer"):
        return 0
    from arbiter import targets

    if targets.get("nvidia").arrays != "cupy":  # type: ignore[attr-defined]
        print("fft_peers: skipped, CuPy is not this machine's array library (cupy.fft is a peer)")
        return 0
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    env = targets.get("nvidia").environment()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows, skipped = [], []
    last = 0.0  # the previous case's wall time: a case is started only if one as long still fits the budget
    for case in QUICK if args.quick else CASES:
        t0 = time.perf_counter()
        if t0 - start + last > args.budget_seconds:
            skipped.append(_label(case))
            continue
        rows.append(run_case(case, args.tune_budget))
        last = time.perf_counter() - t0
        print(f"  done {_label(case)} in {last:.0f} s", flush=True)
    ratios = [e["x_best_peer"] for r in rows for name, e in r["paths"].items()
              if name.startswith("arbiter") and "x_best_peer" in e]
    summary = {"geomean": math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
               "worst": min(ratios) if ratios else None, "goal": 0.97}
    report = {"date": stamp, "env": env, "rows": rows, "summary": summary, "not_run": skipped,
              "wall_s": time.perf_counter() - start}
    lines = [f"FFT, {stamp} on {env.get('device')} (device mode, median; ratio = best bare peer / path)", "",
             *table(rows)]
    if ratios:
        lines += ["", f"arbiter vs best peer: geomean {summary['geomean']:.3f}x, worst {summary['worst']:.3f}x "
                      f"(goal >= 0.97x)"]
    if skipped:
        lines += ["", f"not run (budget {args.budget_seconds:.0f} s): " + ", ".join(skipped)]
    write_report(args.out, "fft_peers", report, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
