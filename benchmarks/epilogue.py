"""Matmul with a fused epilogue on the GPU: the arbiter's pick on torch tensors against torch eager, in one run.

Epilogues: bias + GELU (exact erf, PyTorch's default), bias + GELU (tanh), and a residual, at 4096^3 fp16 and
bf16, 2048x8192x2048 (m x n x k) fp16 and 512x512x2048 fp16 (small: host cost shows). For each:

* ``torch eager``: what a PyTorch user writes: ``F.gelu(torch.addmm(b, a, w)[, approximate="tanh"])``,
  ``x + a @ w`` (the peer every ratio is against: eager time / path time, above 1 is faster than eager);
* ``arbiter tuned``: ``run_arbitrated`` on a new region of the same torch tensors each call (no ``out=``), after
  ``arbiter.tune.tune_region`` measured and stored the key's winner (the default policy then serves it);
* ``arbiter forced <name>``: the same call with the route forced to each vendor candidate
  (``arbiter.arbitrate(..., force=name)``, which still gates it): torch_addmm_act, torch_matmul, cupy_matmul,
  cublaslt_matmul; and to ``triton_matmul`` (its default tile; the epilogue, exact GELU included, in the GEMM's
  kernel) where Triton is installed;
* ``nvmath bare`` (when nvmath-python imports): a planned ``nvmath.linalg.advanced.Matmul`` whose ``execute()`` is
  called per call, as an nvmath user writes it (cuBLASLt's GELU_BIAS / C with beta = 1; no erf GELU there).

Timing: ``arbiter.timing.measure_calls`` in device mode (events around one call, L2 flushed before it; host gaps
count). At the small shape the host cost per call is also given (N calls, one synchronize). A wall-clock budget
(``--budget-seconds``, default 80) starts a case only while one as long as the last still fits; what was not run
is listed.

Usage: python benchmarks/epilogue.py [--out DIR] [--quick] [--budget-seconds S]
``--quick``: 4096^3 fp16 only. Without a GPU it says so and exits 0.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from _gpu import cannot_run, host_us, timed, write_report

CONFIGS = [((4096, 4096, 4096), "float16"), ((4096, 4096, 4096), "bfloat16"), ((2048, 8192, 2048), "float16"),
           ((512, 512, 2048), "float16")]
EPILOGUES = {"bias+gelu": ("gelu", True, False), "bias+gelu_tanh": ("gelu_tanh", True, False),
             "residual": ("none", False, True)}
VENDOR = ("torch_addmm_act", "torch_matmul", "cupy_matmul", "cublaslt_matmul")
EMITTED = ("triton_matmul",)  # forced beside the vendor candidates: the emitted kernel that fuses every epilogue
SMALL = 512 * 512 * 2048  # at or below this many multiply-adds the host cost per call is reported too


def _nvmath_call(a, w, bias, act, res):
    """A planned nvmath Matmul and its per-call ``execute`` (row-major out = (w.T @ a.T).T, so the bias runs
    along the column-major result's rows as cuBLASLt's bias epilogues need); None where nvmath has no epilogue."""
    import logging

    from nvmath.linalg.advanced import Matmul, MatmulEpilog

    quiet = logging.getLogger("epilogue.nvmath")
    quiet.setLevel(logging.WARNING)
    if act == "gelu":
        return None  # cuBLASLt's GELU is the tanh form
    if res is not None:
        mm = Matmul(w.t(), a.t(), res.t(), beta=1.0, options={"logger": quiet})
        mm.plan()
    else:
        mm = Matmul(w.t(), a.t(), options={"logger": quiet})
        mm.plan(epilog=MatmulEpilog.GELU_BIAS, epilog_inputs={"bias": bias})
    return lambda: mm.execute().t()


def run_case(shape, dtype: str, epilogue: str, tune_budget: float) -> dict:
    import torch
    import torch.nn.functional as F

    import arbiter
    from arbiter import dispatch
    from arbiter.candidates import REGISTRY
    from arbiter.regions import Matmul
    from arbiter.tune import tune_region

    m, n, k = shape
    act, has_bias, has_res = EPILOGUES[epilogue]
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    dt = getattr(torch, dtype)
    a = torch.randn(m, k, device="cuda", dtype=dt, generator=g)
    w = (torch.randn(k, n, device="cuda", dtype=torch.float32, generator=g) / math.sqrt(k)).to(dt)
    bias = torch.randn(n, device="cuda", dtype=dt, generator=g) if has_bias else None
    res = torch.randn(m, n, device="cuda", dtype=dt, generator=g) if has_res else None

    if act == "gelu":
        def eager():
            return F.gelu(torch.addmm(bias, a, w))
    elif act == "gelu_tanh":
        def eager():
            return F.gelu(torch.addmm(bias, a, w), approximate="tanh")
    else:
        def eager():
            return res + a @ w

    def make():
        return Matmul(a, w, bias=bias, activation=act, residual=res)

    def user():
        return arbiter.run_arbitrated("matmul", make())

    want = eager().float()
    small = m * n * k <= SMALL
    row: dict = {"case": f"{m}x{n}x{k} {dtype} {epilogue}", "paths": {}}

    def record(name, call, note=""):
        try:
            got = call().float()
            err = float(torch.linalg.norm(got - want) / torch.linalg.norm(want))
            entry = timed(call) | {"rel_err_vs_eager": err, "note": note}
            if small:
                entry["host_us"] = host_us(call, 400)
        except Exception as exc:  # a path that cannot run here is a row that says why, not a crash
            entry = {"error": f"{type(exc).__name__}: {exc}"[:200], "note": note}
        row["paths"][name] = entry

    record("torch eager", eager)
    decision = tune_region(make(), dispatch.store(), mode="device", budget_s=tune_budget)
    dispatch.configure(store=dispatch.store())  # clears the dispatch table: the next call loads the stored winner
    record("arbiter tuned", user, decision.winner.label)
    for name in VENDOR + EMITTED:
        cand = REGISTRY.get(name, "nvidia", "matmul")
        if cand is None or cand.available() is not True:
            row["paths"][f"arbiter forced {name}"] = {"error": f"unavailable: {cand.available() if cand else 'absent'}"}
            continue
        applies = cand.applies_to(make())
        if applies is not True:
            row["paths"][f"arbiter forced {name}"] = {"error": f"does not apply: {applies}"[:200]}
            continue
        try:
            arbiter.arbitrate("matmul", make(), force=name)
        except Exception as exc:
            row["paths"][f"arbiter forced {name}"] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
            continue
        record(f"arbiter forced {name}", user)
    try:
        nv = _nvmath_call(a, w, bias, act, res)
    except Exception as exc:  # not installed (ImportError), or nvmath refused the problem
        row["paths"]["nvmath bare"] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    else:
        if nv is None:
            row["paths"]["nvmath bare"] = {"error": "no cuBLASLt epilogue for exact GELU"}
        else:
            record("nvmath bare", nv)
    base = row["paths"]["torch eager"].get("us")
    for entry in row["paths"].values():
        if base and entry.get("us"):
            entry["x_eager"] = base / entry["us"]
    return row


def table(rows) -> list[str]:
    lines = ["| case | path | device us (spread) | vs torch eager | host us/call | rel. err vs eager | note |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        for name, e in r["paths"].items():
            if "us" not in e:
                lines.append(f"| {r['case']} | {name} | - | - | - | - | {e.get('error', '')} |")
                continue
            host = f"{e['host_us']:.1f}" if "host_us" in e else ""
            lines.append(f"| {r['case']} | {name} | {e['us']:.1f} ({e['spread'] * 100:.1f}%) | "
                         f"{e.get('x_eager', float('nan')):.3f}x | {host} | {e['rel_err_vs_eager']:.1e} | "
                         f"{e.get('note', '')} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--budget-seconds", type=float, default=80.0)
    ap.add_argument("--tune-budget", type=float, default=1.5, help="timing budget per key for tune (s)")
    args = ap.parse_args()
    if cannot_run("epilogue", "the peer is torch eager"):
        return 0
    from arbiter import targets

    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    env = targets.get("nvidia").environment()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    configs = CONFIGS[:1] if args.quick else CONFIGS
    rows, skipped = [], []
    last = 0.0  # the previous case's wall time: a case is started only if one as long still fits the budget
    for shape, dtype in configs:
        for epilogue in EPILOGUES:
            label = f"{'x'.join(map(str, shape))} {dtype} {epilogue}"
            t0 = time.perf_counter()
            if t0 - start + last > args.budget_seconds:
                skipped.append(label)
                continue
            rows.append(run_case(shape, dtype, epilogue, args.tune_budget))
            last = time.perf_counter() - t0
            print(f"  done {label} in {last:.0f} s", flush=True)
    report = {"date": stamp, "env": env, "rows": rows, "not_run": skipped,
              "wall_s": time.perf_counter() - start}
    lines = [f"matmul + epilogue, {stamp} on {env.get('device')} (device mode, median; ratio = torch eager / path)",
             "", *table(rows)]
    if skipped:
        lines += ["", f"not run (budget {args.budget_seconds:.0f} s): " + ", ".join(skipped)]
    write_report(args.out, "epilogue", report, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
