"""The emitted tensor-core GEMM (``gemm_mma``) against cuBLAS and torch, with and without a fused epilogue.

Plain products (fp16 4096^3, bf16 4096^3, fp16 2048x8192x2048 and 8192^3; MxNxK): ``gemm_mma`` forced through
``arbiter.arbitrate(..., force="gemm_mma")`` and called as a user calls it (``run_arbitrated`` on a CuPy region,
no ``out=``), beside ``cupy.matmul`` (cuBLAS) and ``torch.mm``; then every tile of ``gemm_mma`` kernel-only
(a preallocated output, the kernel launch alone) so the best tile shows. TFLOP/s and the fraction of cuBLAS.

matmul + bias + GELU (fp16 4096^3, 2048x8192x2048, 8192x8192x512), and + residual at 8192x8192x512:
``synth_matmul`` (the epilogue generated into gemm_mma's store) forced and called through ``run_arbitrated``,
and each of its tiles run directly (kernel + output allocation); ``gemm_mma`` with the epilogue composed
afterwards (a float32 product, one CuPy elementwise pass); ``torch.addmm`` + ``F.gelu`` (torch eager; the
residual case adds it in place); ``cupy.matmul`` + one elementwise pass (bias, GELU, residual in float).

Every time is ``arbiter.timing.measure_calls`` in device mode (CUDA events around one call, L2 flushed
before it), all in one run. Decisions go to a temporary registry unless ``$ARBITER_DB`` names one.

Usage: python benchmarks/gemm_tc.py [--out DIR] [--quick]   (--quick: fp16 4096^3 only). Without a GPU it
says so and exits 0.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

PLAIN = [((4096, 4096, 4096), "float16"), ((4096, 4096, 4096), "bfloat16"), ((2048, 8192, 2048), "float16"),
         ((8192, 8192, 8192), "float16")]
# A small K (8192x8192x512) is where a fused epilogue should pay most: the separate pass over C costs about
# as much as the product there.
EPILOGUE = [((4096, 4096, 4096), "float16", "bias+gelu"), ((2048, 8192, 2048), "float16", "bias+gelu"),
            ((8192, 8192, 512), "float16", "bias+gelu"), ((8192, 8192, 512), "float16", "bias+gelu+residual")]
REPS = {"min_reps": 5, "max_reps": 20, "time_cap_s": 0.2}  # the whole run stays under 90 s
GELU = "0.5f * v * (1.0f + erff(v * 0.70710678118654752f))"


def _time(fn) -> float:
    from arbiter.timing import measure_calls

    return measure_calls([fn], "nvidia", mode="device", **REPS).median_s


def _torch():
    try:
        import torch

        return torch if torch.cuda.is_available() else None
    except ImportError:
        return None


def _label(tile) -> str:
    return "x".join(map(str, tile[:3])) + f" {tile[3]}x{tile[4]} warps {tile[5]} stages"


def plain(shape, dtype) -> dict:
    import cupy as cp
    import numpy as np

    import arbiter
    from arbiter.candidates import REGISTRY
    from arbiter.candidates.nvidia import gemm_mma
    from arbiter.regions import Matmul

    m, n, k = shape
    flop = 2.0 * m * n * k
    region = Matmul.random("nvidia", dtype, {"m": m, "n": n, "k": k}, rng=np.random.default_rng(1))
    a, b = region.a, region.b
    times = {}
    times["cupy.matmul (cuBLAS)"] = _time(lambda: cp.matmul(a, b))
    torch = _torch()
    if torch is not None:
        ta = torch.randn(m, k, device="cuda", dtype=getattr(torch, dtype))
        tb = torch.randn(k, n, device="cuda", dtype=getattr(torch, dtype))
        times["torch.mm"] = _time(lambda: torch.mm(ta, tb))
    decision = arbiter.arbitrate("matmul", region, force="gemm_mma")
    times[f"gemm_mma run_arbitrated (default tile {_label(gemm_mma.TILES[0])})"] = _time(
        lambda: arbiter.run_arbitrated("matmul", region))
    cand = REGISTRY.get("gemm_mma", "nvidia", "matmul")
    out = region.alloc_out()
    for tile in gemm_mma.TILES:
        fn, fitted = cand.launch_plan(region, {"tile": list(tile)}, out)  # the ring the device holds
        times[f"gemm_mma kernel-only {_label(fitted)}"] = _time(
            lambda fn=fn, fitted=fitted: gemm_mma.launch_mma(fn, fitted, region, out, out, out, 0))
    return _row(f"{m}x{n}x{k} {dtype}", flop, times, "cupy.matmul (cuBLAS)", str(decision.winner.label))


def epilogue(shape, dtype, kind) -> dict:
    import cupy as cp
    import numpy as np

    import arbiter
    from arbiter.candidates import REGISTRY
    from arbiter.candidates.nvidia import synth_matmul
    from arbiter.regions import Matmul

    m, n, k = shape
    flop = 2.0 * m * n * k
    residual = kind.endswith("residual")
    attrs = {"bias": "1", "activation": "gelu", "residual": "1" if residual else "0"}
    region = Matmul.random("nvidia", dtype, {"m": m, "n": n, "k": k}, attrs, rng=np.random.default_rng(2))
    a, b, bias, res = region.a, region.b, region.bias, region.residual
    times = {}
    params = "T z, T bias" + (", T res" if residual else "")
    body = f"float v = (float)z + (float)bias; v = {GELU};" + (" v += (float)res;" if residual else "") + " out = (T)v;"
    pass_ = cp.ElementwiseKernel(params, "T out", body, "gemm_tc_epilogue")

    def cublas_then_pass():
        z = cp.matmul(a, b)
        return pass_(z, bias, res, z) if residual else pass_(z, bias, z)

    times["cupy.matmul + elementwise pass"] = _time(cublas_then_pass)
    torch = _torch()
    if torch is not None:
        import torch.nn.functional as F

        tdt = getattr(torch, dtype)
        ta, tb = torch.randn(m, k, device="cuda", dtype=tdt), torch.randn(k, n, device="cuda", dtype=tdt)
        tbias, tres = torch.randn(n, device="cuda", dtype=tdt), torch.randn(m, n, device="cuda", dtype=tdt)

        def torch_eager():
            y = F.gelu(torch.addmm(tbias, ta, tb))
            return y.add_(tres) if residual else y

        times["torch.addmm + F.gelu" + (" + add_" if residual else "")] = _time(torch_eager)
    arbiter.arbitrate("matmul", region, force="synth_matmul")
    default = next(iter(synth_matmul.TILES))
    times[f"synth_matmul (fused into gemm_mma) run_arbitrated (default: {default})"] = _time(
        lambda: arbiter.run_arbitrated("matmul", region))
    synth = REGISTRY.get("synth_matmul", "nvidia", "matmul")
    for size, (_, tile) in synth_matmul.TILES.items():
        synth.run(region, {"tile": size})  # compile outside the timing
        times[f"synth_matmul kernel+alloc {size}: {_label(tile)}"] = _time(
            lambda size=size: synth.run(region, {"tile": size}))
    arbiter.arbitrate("matmul", region, force="gemm_mma")
    times["gemm_mma + composed epilogue run_arbitrated"] = _time(lambda: arbiter.run_arbitrated("matmul", region))
    base = "torch.addmm + F.gelu" + (" + add_" if residual else "") if torch is not None else \
        "cupy.matmul + elementwise pass"
    return _row(f"{m}x{n}x{k} {dtype} {kind}", flop, times, base, None)


def _row(case, flop, times, base, winner) -> dict:
    return {"case": case, "baseline": base, "winner": winner,
            "results": {name: {"us": t * 1e6, "tflops": flop / t / 1e12, "vs_baseline": times[base] / t}
                        for name, t in times.items()}}


def table(rows) -> str:
    lines = []
    for r in rows:
        lines.append(f"\n{r['case']}  (fraction = {r['baseline']} time / this time)")
        lines.append(f"  {'':<66} {'us':>9} {'TFLOP/s':>8} {'fraction':>8}")
        for name, v in r["results"].items():
            lines.append(f"  {name:<66} {v['us']:9.1f} {v['tflops']:8.1f} {v['vs_baseline']:8.3f}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write gemm_tc.json and gemm_tc.md there")
    ap.add_argument("--quick", action="store_true", help="fp16 4096^3 only")
    args = ap.parse_args()
    from arbiter import targets

    ok = targets.get("nvidia").available()
    if ok is not True:
        print(f"gemm_tc: skipped, the nvidia target is unavailable ({ok})")
        return 0
    started = time.perf_counter()
    env = targets.get("nvidia").environment()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    plain_cases = PLAIN[:1] if args.quick else PLAIN
    epi_cases = [] if args.quick else EPILOGUE
    if targets.get("nvidia").bfloat16() is None:
        plain_cases = [c for c in plain_cases if c[1] != "bfloat16"]
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("ARBITER_DB", os.path.join(tmp, "registry.db"))  # forced decisions: not the user's
        rows = [plain(s, d) for s, d in plain_cases] + [epilogue(s, d, kind) for s, d, kind in epi_cases]
    text = f"gemm_tc: {stamp} on {env.get('device')}, device mode (events, L2 flushed), median" + table(rows) + \
        f"\n\n({time.perf_counter() - started:.0f} s)"
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "gemm_tc.json"), "w") as f:
            json.dump({"date": stamp, "env": env, "rows": rows}, f, indent=1)
        with open(os.path.join(args.out, "gemm_tc.md"), "w") as f:
            f.write("```\n" + text + "\n```\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
