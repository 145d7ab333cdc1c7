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

Triton (``triton_matmul``, ``triton_gated``; when Triton imports): every tile run directly (kernel + output
allocation, what ``run`` does), then the best tile served through ``run_arbitrated`` (the candidate forced with
that one solution, gated first) against cuBLAS (``cupy.matmul``) and torch, paired and interleaved: five rounds of
(peer, Triton), the ratio per round, its median and range. Plain fp16 and bf16 4096^3; bias + exact GELU at
8192x8192x512 and 4096^3 fp16 against ``F.gelu(torch.addmm(...))``; the fused SwiGLU at 4096x5504x2048 bf16
(x 4096x2048, weights 2048x5504) against ``F.silu(x @ wg) * (x @ wu)``; few output tiles over a deep K (128x1024x8192
fp16, 64x4096x11008 bf16), where the split-K tiles apply, against cuBLAS. And the host cost of a warm call (a
64^3 fp16 matmul + bias + GELU, N calls and one synchronize, best of rounds) beside a bare ``cupy.RawKernel``
launch, ``torch.mm`` and Triton's own ``kernel[grid](...)``.

Every time is ``arbiter.timing.measure_calls`` in device mode (CUDA events around one call, L2 flushed
before it), all in one run. Decisions go to a temporary registry unless ``$ARBITER_DB`` names one.

Usage: python benchmarks/gemm_tc.py [--out DIR] [--quick] [--triton]   (--quick: fp16 4096^3 only; --triton:
the Triton cases alone). Without a GPU it says so and exits 0.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from _gpu import host_us

PLAIN = [((4096, 4096, 4096), "float16"), ((4096, 4096, 4096), "bfloat16"), ((2048, 8192, 2048), "float16"),
         ((8192, 8192, 8192), "float16")]
# A small K (8192x8192x512) is where a fused epilogue should pay most: the separate pass over C costs about
# as much as the product there.
EPILOGUE = [((4096, 4096, 4096), "float16", "bias+gelu"), ((2048, 8192, 2048), "float16", "bias+gelu"),
            ((8192, 8192, 512), "float16", "bias+gelu"), ((8192, 8192, 512), "float16", "bias+gelu+residual")]
REPS = {"min_reps": 5, "max_reps": 20, "time_cap_s": 0.2}  # the whole run stays under 90 s
GELU = "0.5f * v * (1.0f + erff(v * 0.70710678118654752f))"
TRITON_PLAIN = [((4096, 4096, 4096), "float16"), ((4096, 4096, 4096), "bfloat16")]
TRITON_GELU = [((8192, 8192, 512), "float16"), ((4096, 4096, 4096), "float16")]
TRITON_GATED = [((4096, 5504, 2048), "bfloat16")]  # m, n, k: x [m, k], w_gate and w_up [k, n]
# Few output tiles and a deep K: where the split-K tiles apply (a down projection of a few tokens).
TRITON_SPLIT = [((128, 1024, 8192), "float16"), ((64, 4096, 11008), "bfloat16")]
ROUNDS = 5


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


def _measure(fn) -> tuple[float, float]:
    from arbiter.timing import measure_calls

    m = measure_calls([fn], "nvidia", mode="device", **REPS)
    return m.median_s, m.spread


def paired(peer, path) -> dict:
    """Five rounds of (peer, path), each timed as ``_measure`` does: medians, and the ratio peer / path per round
    (above 1: the path is faster) as median and range."""
    import statistics

    ratios, peers, paths = [], [], []
    for _ in range(ROUNDS):
        tp, _ = _measure(peer)
        tq, _ = _measure(path)
        peers.append(tp)
        paths.append(tq)
        ratios.append(tp / tq)
    return {"peer_us": statistics.median(peers) * 1e6, "path_us": statistics.median(paths) * 1e6,
            "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}


def _one_solution(cand, params):
    """``cand`` offering ``params`` alone (same name and code): forced, the arbiter serves exactly that solution."""
    class One(type(cand)):
        def param_space(self):
            return [params]

    return One()


def _triton_user_path(op, region, cand, params):
    """``run_arbitrated`` serving ``cand`` with ``params`` (gated by ``arbitrate`` first): the call to time."""
    import arbiter
    from arbiter.candidates import REGISTRY

    one = _one_solution(cand, params)
    stack = REGISTRY.only(region.target, op, [one])
    stack.__enter__()
    decision = arbiter.arbitrate(op, region, force=cand.name)
    return (lambda: arbiter.run_arbitrated(op, region)), stack, decision


def triton_case(op, shape, dtype, kind) -> dict:
    """Every tile of the Triton candidate run directly, then the best one through ``run_arbitrated``, paired with
    the peer."""
    import numpy as np

    from arbiter.candidates import REGISTRY
    from arbiter.regions import Gated, Matmul

    m, n, k = shape
    torch = _torch()
    from arbiter.targets.nvidia import torch_view

    name = "triton_matmul" if op == "matmul" else "triton_gated"
    cand = REGISTRY.get(name, "nvidia", op)
    dims = {"m": m, "n": n, "k": k}
    if op == "gated":
        region = Gated.random("nvidia", dtype, dims, rng=np.random.default_rng(3))
        x, wg, wu = (torch_view(t) for t in (region.x, region.w_gate, region.w_up))
        F = torch.nn.functional

        def peer():
            return F.silu(x @ wg) * (x @ wu)
        peer_name, flop = "torch F.silu(x @ wg) * (x @ wu)", 4.0 * m * n * k
    elif kind in ("plain", "split-k"):
        region = Matmul.random("nvidia", dtype, dims, rng=np.random.default_rng(1))
        import cupy as cp

        a, b = region.a, region.b

        def peer():
            return cp.matmul(a, b)
        peer_name, flop = "cupy.matmul (cuBLAS)", 2.0 * m * n * k
    else:
        region = Matmul.random("nvidia", dtype, dims, {"bias": "1", "activation": "gelu"}, rng=np.random.default_rng(2))
        ta, tb, tbias = (torch_view(t) for t in (region.a, region.b, region.bias))
        F = torch.nn.functional

        def peer():
            return F.gelu(torch.addmm(tbias, ta, tb))
        peer_name, flop = "torch F.gelu(torch.addmm(...))", 2.0 * m * n * k
    tiles = {}
    from arbiter.candidates.gpu_templates.triton_matmul import split_of

    served = [p for p in cand.param_space()  # a split-K tile declines where split_of gives one split
              if not p.get("split_k") or split_of(m, n, region.dims["k"], p["tile"])[0] > 1]
    for params in served:
        cand.run(region, params)  # compile outside the timing
        t, spread = _measure(lambda params=params: cand.run(region, params))
        tiles[_triton_label(params)] = {"us": t * 1e6, "spread": spread, "tflops": flop / t / 1e12}
    best = min(served, key=lambda p: tiles[_triton_label(p)]["us"])
    call, stack, decision = _triton_user_path(op, region, cand, best)
    try:
        pair = paired(peer, call)
    finally:
        stack.__exit__(None, None, None)
    pair |= {"peer_tflops": flop / pair["peer_us"] / 1e6, "path_tflops": flop / pair["path_us"] / 1e6}
    return {"case": f"{op} {m}x{n}x{k} {dtype} {kind}", "peer": peer_name, "best": str(decision.winner.label),
            "tiles": tiles, "user_path": pair}


def _triton_label(params) -> str:
    bm, bn, bk, group, warps, stages = params["tile"]
    return f"{bm}x{bn}x{bk} g{group} w{warps} s{stages}" + (" split-K" if params.get("split_k") else "")


def enqueue_us(call, sync, n: int = 400, rounds: int = 7) -> float:
    """Host microseconds per call with the device out of the picture (``_gpu.host_us`` with ``queued``: the
    synchronize outside the timing), best of ``rounds`` after 50 warm calls."""
    return host_us(call, n, warmup=50, rounds=rounds, sync=sync, queued=True)


def host_cost() -> dict:
    """Host microseconds per warm call (``enqueue_us``): a bare ``cupy.RawKernel`` launch, ``torch.mm``, Triton's
    ``kernel[grid](...)``, the candidate's ``run`` and ``run_arbitrated`` (prebuilt region, and built per call)."""
    import cupy as cp
    import numpy as np

    import arbiter
    from arbiter.candidates import REGISTRY, gpu_triton
    from arbiter.regions import Matmul
    from arbiter.targets.nvidia import torch_view

    sync = cp.cuda.Device().synchronize
    raw = cp.RawKernel('extern "C" __global__ void noop(float* x, int n) { if (n < 0) x[0] = 0.0f; }', "noop")
    x = cp.zeros(16, cp.float32)
    n16 = np.int32(16)
    out = {"raw cupy.RawKernel launch": enqueue_us(lambda: raw((1,), (32,), (x, n16)), sync)}
    torch = _torch()
    ta = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    out["torch.mm 64^3"] = enqueue_us(lambda: torch.mm(ta, ta), torch.cuda.synchronize)
    region = Matmul.random("nvidia", "float16", {"m": 64, "n": 64, "k": 64}, {"bias": "1", "activation": "gelu"},
                           rng=np.random.default_rng(4))
    cand = REGISTRY.get("triton_matmul", "nvidia", "matmul")
    params = {"tile": [64, 64, 64, 8, 4, 3]}
    bm, bn, bk, group, warps, stages = params["tile"]
    a, b, bias = (torch_view(t) for t in (region.a, region.b, region.bias))
    c = torch.empty(64, 64, device="cuda", dtype=torch.float16)
    gemm = gpu_triton.kernels().gemm

    def stock():
        gemm[(1,)](a, b, c, bias, c, 64, 64, 64, 64, 1, 64, 1, 64, 0, 0, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                   GROUP_M=group, ACTIVATION=2, HAS_BIAS=True, HAS_RESIDUAL=False, EVEN_K=True, num_warps=warps,
                   num_stages=stages)
    out["triton kernel[grid](...) (stock launch, torch tensors)"] = enqueue_us(stock, torch.cuda.synchronize)
    out["triton_matmul.run (thin launch, output allocated)"] = enqueue_us(lambda: cand.run(region, params), sync)
    kept = region.alloc_out()  # the output the bare launches write (alive while they run)
    plan = cand.plan(region, params, kept, True)
    ptrs = (region.a.data.ptr, region.b.data.ptr, kept.data.ptr, region.bias.data.ptr, 0)
    out["plan.call alone (the C launcher, preallocated output)"] = enqueue_us(lambda: plan.call(0, *ptrs), sync)
    call, stack, _ = _triton_user_path("matmul", region, cand, params)
    try:
        out["run_arbitrated -> triton_matmul (prebuilt region)"] = enqueue_us(call, sync)
        out["run_arbitrated -> triton_matmul (region built per call)"] = enqueue_us(
            lambda: arbiter.run_arbitrated("matmul", Matmul(region.a, region.b, bias=region.bias, activation="gelu")),
            sync)
    finally:
        stack.__exit__(None, None, None)
    return out


def triton_table(rows, host) -> str:
    lines = ["\nTriton (user path = run_arbitrated with the best tile; ratio = peer time / Triton time, paired, "
             f"{ROUNDS} rounds: median [min, max])"]
    for r in rows:
        u = r["user_path"]
        lines.append(f"\n{r['case']}: vs {r['peer']}: {u['ratio']:.3f} [{u['ratio_min']:.3f}, {u['ratio_max']:.3f}]"
                     f"  (peer {u['peer_us']:.1f} us {u['peer_tflops']:.0f} TFLOP/s, Triton {u['path_us']:.1f} us "
                     f"{u['path_tflops']:.0f} TFLOP/s, {r['best']})")
        for label, v in r["tiles"].items():
            lines.append(f"    tile {label:<28} {v['us']:9.1f} us ({v['spread'] * 100:4.1f}%) "
                         f"{v['tflops']:6.0f} TFLOP/s")
    if host:
        lines.append("\nhost us per warm call (64^3 fp16 + bias + GELU, tile 64x64x64; 400 calls enqueued, no "
                     "synchronize inside the timing; best of 7 rounds)")
        lines += [f"    {k:<58} {v:6.2f}" for k, v in host.items()]
    return "\n".join(lines)


def run_triton(quick: bool, kinds: list | None = None) -> tuple[list, dict]:
    import importlib.util

    from arbiter.candidates import REGISTRY

    cand = REGISTRY.get("triton_matmul", "nvidia", "matmul")
    if importlib.util.find_spec("triton") is None or cand is None or cand.available() is not True or _torch() is None:
        print(f"gemm_tc: Triton cases skipped ({cand.available() if cand else 'not registered'})")
        return [], {}
    host = host_cost()
    print(triton_table([], host), flush=True)
    cases = [("matmul", s, d, "plain") for s, d in TRITON_PLAIN[:1 if quick else None]]
    if not quick:
        cases += [("matmul", s, d, "bias+gelu") for s, d in TRITON_GELU]
        cases += [("gated", s, d, "swiglu") for s, d in TRITON_GATED]
        cases += [("matmul", s, d, "split-k") for s, d in TRITON_SPLIT]
    cases = [c for c in cases if not kinds or c[3] in kinds]
    rows = []
    for case in cases:
        t0 = time.perf_counter()
        rows.append(triton_case(*case))
        print(triton_table(rows[-1:], {}), f"\n  ({time.perf_counter() - t0:.0f} s)", flush=True)
    return rows, host


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
    ap.add_argument("--triton", action="store_true", help="the Triton cases alone")
    ap.add_argument("--triton-kind", action="append", choices=["plain", "bias+gelu", "swiglu", "split-k"],
                    help="only these Triton cases (repeatable; the host cost is always measured)")
    args = ap.parse_args()
    from arbiter import targets

    ok = targets.get("nvidia").available()
    if ok is not True:
        print(f"gemm_tc: skipped, the nvidia target is unavailable ({ok})")
        return 0
    started = time.perf_counter()
    env = targets.get("nvidia").environment()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    plain_cases = [] if args.triton else PLAIN[:1] if args.quick else PLAIN
    epi_cases = [] if args.quick or args.triton else EPILOGUE
    if targets.get("nvidia").bfloat16() is None:
        plain_cases = [c for c in plain_cases if c[1] != "bfloat16"]
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("ARBITER_DB", os.path.join(tmp, "registry.db"))  # forced decisions: not the user's
        rows = [plain(s, d) for s, d in plain_cases] + [epilogue(s, d, kind) for s, d, kind in epi_cases]
        triton_rows, host = run_triton(args.quick, args.triton_kind)
    text = f"gemm_tc: {stamp} on {env.get('device')}, device mode (events, L2 flushed), median" + table(rows) + \
        triton_table(triton_rows, host) + f"\n\n({time.perf_counter() - started:.0f} s)"
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "gemm_tc.json"), "w") as f:
            json.dump({"date": stamp, "env": env, "rows": rows, "triton": triton_rows, "host_us": host}, f, indent=1)
        with open(os.path.join(args.out, "gemm_tc.md"), "w") as f:
            f.write("```\n" + text + "\n```\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
