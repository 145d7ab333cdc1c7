"""The user's path on the GPU, measured in one run: (1) per-call host cost of an emitted row kernel
through ``run_arbitrated`` against a bare ``cupy.RawKernel`` launch of the same kernel; (2) the torch
vendor candidates on a torch caller's tensors against the same torch op called directly; (3) the
default pick on a fresh key (tier order, first to pass the gate) against the best gated solution.

(1) host cost: N calls timed by the host clock with one synchronize at the end (a tiny problem, so the
GPU keeps up and the host is the bottleneck), per call; ratio to the bare launch (``cupy.empty`` for
the output + the kernel launch, which is what a hand-written caller does).
(2) and (3): ``arbiter.timing`` (``measure`` for solutions: ``dispatch.serve``, what run_arbitrated
executes; ``measure_calls`` for bare torch), in device, latency and stream modes.

Usage: python benchmarks/user_path.py [--out DIR] [--quick]; without a GPU it says so and exits 0.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from _gpu import host_us, write_report

MODES = ("device", "latency", "stream")


def host_cost(n: int = 3000) -> dict:
    import cupy as cp
    import numpy as np

    import arbiter
    from arbiter.regions import RMSNorm

    x = cp.asarray(np.random.default_rng(0).standard_normal((256, 512)), dtype=cp.float32)
    w = cp.asarray(np.random.default_rng(1).standard_normal(512), dtype=cp.float32)
    region = RMSNorm(x, w, eps=1e-6)
    arbiter.arbitrate("rmsnorm", region, force="rmsnorm_rows")
    emitted = arbiter.candidates.REGISTRY.get("rmsnorm_rows", "nvidia", "rmsnorm")
    fn, grid, block, _, _ = emitted.launch_plan(region, emitted.param_space()[0], cp.empty_like(x))
    eps = np.float32(1e-6)
    rows, cols = np.int32(256), np.int32(512)
    ld = np.int64(512)
    bound = arbiter.bind("rmsnorm", x, w, eps=1e-6)

    def bare():  # what a hand-written caller does: allocate the output, launch
        out = cp.empty_like(x)
        fn(grid, block, (x, w, out, rows, cols, ld, ld, eps))
        return out

    pre = cp.empty_like(x)

    def bare_launch_only():
        fn(grid, block, (x, w, pre, rows, cols, ld, ld, eps))

    variants = {
        "bare RawKernel (empty + launch)": bare,
        "bare RawKernel launch only (preallocated out)": bare_launch_only,
        "run_arbitrated(op, prebuilt region)": lambda: arbiter.run_arbitrated("rmsnorm", region),
        "RMSNorm(x, w) + run_arbitrated": lambda: arbiter.run_arbitrated("rmsnorm", RMSNorm(x, w, eps=1e-6)),
        "bound handle f(x, w)": lambda: bound(x, w),
    }
    result = {}
    for _ in range(2):  # two rounds; the second is reported (the first warms every path)
        for name, call in variants.items():
            result[name] = host_us(call, n, warmup=200, rounds=5, sync=cp.cuda.Device().synchronize)
    base = result["bare RawKernel (empty + launch)"]
    return {"us_per_call": result, "ratio_to_bare": {k: v / base for k, v in result.items()}}


def host_pieces(n: int = 5000) -> dict:
    """Host cost of the pieces a torch caller's call is made of (us per call, best of 3)."""
    import cupy as cp
    import torch

    from arbiter.regions import Matmul, RMSNorm
    from arbiter.targets.nvidia import torch_empty, torch_stream

    t = torch.randn(256, 512, device="cuda")
    w = torch.randn(512, device="cuda")
    c = cp.from_dlpack(t)
    wc = cp.from_dlpack(w)
    b = torch.randn(512, 512, device="cuda")
    bc = cp.from_dlpack(b)

    def manual():
        mem = cp.cuda.UnownedMemory(t.data_ptr(), t.numel() * 4, t, t.device.index)
        return cp.ndarray(tuple(t.shape), cp.float32, cp.cuda.MemoryPointer(mem, 0),
                          tuple(s * 4 for s in t.stride()))

    pieces = {
        "cupy.from_dlpack(torch tensor)": lambda: cp.from_dlpack(t),
        "cupy.ndarray over UnownedMemory(torch ptr)": manual,
        "torch.from_dlpack(cupy array)": lambda: torch.from_dlpack(c),
        "torch.empty": lambda: torch.empty(256, 512, device="cuda"),
        "cupy.empty": lambda: cp.empty((256, 512), cp.float32),
        "arbiter torch_empty (torch.empty + CuPy view)": lambda: torch_empty((256, 512), "float32", t),
        "arbiter torch_stream()": torch_stream,
        "torch.cuda.current_stream()": torch.cuda.current_stream,
        "RMSNorm(cupy x, w)": lambda: RMSNorm(c, wc),
        "RMSNorm(torch x, w)": lambda: RMSNorm(t, w),
        "Matmul(cupy a, b)": lambda: Matmul(c, bc),
        "Matmul(torch a, b)": lambda: Matmul(t, b),
        "torch.softmax launch (256x512)": lambda: torch.softmax(t, -1),
        "cupy.matmul launch (256x512x512)": lambda: cp.matmul(c, bc),
        "torch.mm launch (256x512x512)": lambda: torch.mm(t, b),
    }
    return {name: host_us(fn, n, warmup=0) for name, fn in pieces.items()}


def torch_vs_bare(quick: bool) -> list[dict]:
    import torch
    import torch.nn.functional as F

    from arbiter import run_arbitrated
    from arbiter.candidates import REGISTRY
    from arbiter.regions import LayerNorm, RMSNorm, Softmax
    from arbiter.timing import measure, measure_calls

    cases = [("softmax", "torch_softmax", (512, 50257), "float16"),
             ("rmsnorm", "torch_rmsnorm", (8192, 5120), "bfloat16"),
             ("layernorm", "torch_layernorm", (8192, 1024), "float16"),
             ("softmax", "torch_softmax", (8192, 777), "float32"),
             ("rmsnorm", "torch_rmsnorm", (256, 512), "float32")]
    if quick:
        cases = cases[:1]
    out = []
    for op, name, shape, dtype in cases:
        x = torch.randn(*shape, device="cuda", dtype=getattr(torch, dtype))
        w = torch.randn(shape[1], device="cuda", dtype=x.dtype)
        b = torch.randn(shape[1], device="cuda", dtype=x.dtype)
        if op == "softmax":
            make, direct = (lambda: Softmax(x)), (lambda: torch.softmax(x, -1))  # noqa: B023 (called in this iteration only)
        elif op == "rmsnorm":
            make, direct = (lambda: RMSNorm(x, w, eps=1e-6)), (lambda: F.rms_norm(x, (shape[1],), w, 1e-6))  # noqa: B023 (called in this iteration only)
        else:
            make, direct = (lambda: LayerNorm(x, w, b, eps=1e-5)), (lambda: F.layer_norm(x, (shape[1],), w, b, 1e-5))  # noqa: B023 (called in this iteration only)
        cand = REGISTRY.get(name, "nvidia", op)
        region = make()
        import arbiter

        arbiter.arbitrate(op, region, force=name)
        row = {"case": f"{op} {shape[0]}x{shape[1]} {dtype}", "candidate": name}
        for mode in MODES:
            cand_m = measure(cand, {}, region, mode=mode, min_reps=10, max_reps=200, time_cap_s=0.5)
            bare_m = measure_calls([direct], "nvidia", mode=mode, min_reps=10, max_reps=200, time_cap_s=0.5)
            full_m = measure_calls([lambda: run_arbitrated(op, make())], "nvidia", mode=mode, min_reps=10,  # noqa: B023 (called in this iteration only)
                                   max_reps=200, time_cap_s=0.5)
            row[mode] = {"candidate_us": cand_m.median_s * 1e6, "candidate_spread": cand_m.spread,
                         "bare_torch_us": bare_m.median_s * 1e6, "bare_spread": bare_m.spread,
                         "region+run_arbitrated_us": full_m.median_s * 1e6,
                         "ratio": cand_m.median_s / bare_m.median_s,
                         "ratio_full": full_m.median_s / bare_m.median_s}
        out.append(row)
    return out


def regret(quick: bool) -> list[dict]:
    """Default pick (tier order) vs the best gated solution, every passing solution timed (device mode)."""
    import numpy as np

    from arbiter import dispatch
    from arbiter.regions import Attention, LayerNorm, Matmul, RMSNorm, Softmax
    from arbiter.tune import tune_region

    rng = np.random.default_rng(7)
    problems = [
        ("rmsnorm", lambda: RMSNorm.random("nvidia", "bfloat16", {"rows": 8192, "cols": 5120}, rng=rng)),
        ("softmax", lambda: Softmax.random("nvidia", "float32", {"rows": 8192, "cols": 777}, rng=rng)),
        ("layernorm", lambda: LayerNorm.random("nvidia", "float16", {"rows": 8192, "cols": 1024}, rng=rng)),
        ("softmax", lambda: Softmax.random("nvidia", "float16", {"rows": 512, "cols": 50257}, rng=rng)),
        ("rmsnorm", lambda: RMSNorm.random("nvidia", "float32", {"rows": 256, "cols": 512}, rng=rng)),
        ("attention", lambda: Attention.random("nvidia", "float16", {"batch": 1, "heads": 16, "q": 1024, "k": 1024,
                                                                      "d": 64}, {"causal": "1"}, rng=rng)),
        ("matmul", lambda: Matmul.random("nvidia", "float16", {"m": 2048, "n": 4096, "k": 1024},
                                         {"bias": "1", "activation": "gelu"}, rng=rng)),
        ("matmul", lambda: Matmul.random("nvidia", "float32", {"m": 512, "n": 512, "k": 512}, rng=rng)),
    ]
    if quick:
        problems = problems[:2]
    out = []
    for _op, make in problems:
        region = make()
        decision = tune_region(region, dispatch.store(), mode="device", budget_s=3.0)
        passed = [r for r in decision.rows if r.status == "passed" and r.timing is not None]
        default = next(r for r in decision.rows if r.status == "passed")
        best = min(passed, key=lambda r: r.timing.median_s)
        out.append({"problem": f"{region!r}", "default": default.label, "default_tier": default.candidate.tier.name,
                    "default_us": default.timing.median_s * 1e6 if default.timing else None,
                    "best": best.label, "best_us": best.timing.median_s * 1e6,
                    "regret": (default.timing.median_s / best.timing.median_s) if default.timing else None,
                    "solutions": {r.label: r.timing.median_s * 1e6 for r in passed}})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=["host", "torch", "regret"], action="append")
    args = ap.parse_args()
    from arbiter import targets

    ok = targets.get("nvidia").available()
    if ok is not True:
        print(f"user_path: skipped, the nvidia target is unavailable ({ok})")
        return 0
    os.makedirs(args.out, exist_ok=True)
    env = targets.get("nvidia").environment()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    report = {"date": stamp, "env": env}
    parts = args.only or ["host", "torch", "regret"]
    lines = [f"{stamp} on {env.get('device')}"]
    if "host" in parts:
        hc = report["host_cost"] = host_cost(1000 if args.quick else 3000)
        lines.append("\nper-call host cost, RMSNorm 256x512 fp32, emitted rmsnorm_rows (host clock, N calls, 1 sync):")
        lines += [f"  {k:<48} {v:7.2f} us  {hc['ratio_to_bare'][k]:.2f}x bare" for k, v in hc["us_per_call"].items()]
    if "host" in parts:
        hp = report["host_pieces"] = host_pieces(1000 if args.quick else 5000)
        lines.append("\nhost cost of the pieces of a call (us per call, N calls, 1 sync):")
        lines += [f"  {k:<48} {v:7.2f} us" for k, v in hp.items()]
    if "torch" in parts:
        tv = report["torch_vs_bare"] = torch_vs_bare(args.quick)
        lines.append("\ntorch vendor candidate on torch tensors vs the torch op called directly (median us):")
        for r in tv:
            lines.append(f"  {r['case']:<30} " + "  ".join(
                f"{m}: {r[m]['candidate_us']:.1f} vs {r[m]['bare_torch_us']:.1f} ({r[m]['ratio']:.3f}x; region+"
                f"run_arbitrated {r[m]['ratio_full']:.3f}x)" for m in MODES))
    if "regret" in parts:
        rg = report["regret"] = regret(args.quick)
        lines.append("\ndefault pick on a fresh key vs best gated solution (device mode):")
        for r in rg:
            lines.append(f"  {r['problem']:<70} default {r['default']} [{r['default_tier']}] {r['default_us']:.1f} us"
                         f", best {r['best']} {r['best_us']:.1f} us, regret {r['regret']:.2f}x")
        rs = [r["regret"] for r in rg if r["regret"]]
        if rs:
            lines.append(f"  regret geomean {math.exp(sum(map(math.log, rs)) / len(rs)):.3f}x, worst {max(rs):.2f}x")
    write_report(args.out, "user_path", report, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
