"""The Triton row ops (``triton_softmax``, ``triton_rmsnorm``, ``triton_layernorm``: one ``rows`` kernel, a solution
per tile ``[BLOCK_CAP, ROWS, warps]``) against the CUDA row kernels (the ``gpu_rows`` table's nvidia entries:
``softmax_warp``, ``softmax_block``, ``rmsnorm_rows``, ``layernorm_rows``) and torch (``F.softmax``, ``F.rms_norm``,
``F.layer_norm``), on the user's path.

Each solution (a candidate with one parameter set) is forced as ``gemm_tc`` forces a Triton tile: the candidate
offering that one set alone (``REGISTRY.only``), decided by ``arbiter.arbitrate(op, region, force=name)`` (which
gates it), then called as a torch user calls it: ``arbiter.run_arbitrated(op, Region(...))`` on torch CUDA tensors,
the region built per call, no ``out=``. Parameter sets that launch the same kernel on a shape
(``launch_signature``) are timed once and listed together. Every time is ``_gpu.timed`` (``arbiter.timing.
measure_calls`` in device mode: warm-up, CUDA events around one call, L2 flushed before it; median and the relative
p20-p80 spread); ratio = torch time / solution time (above 1: faster than torch). Then, per op, shape and dtype, the
best Triton tile against the best CUDA row kernel (ratio = CUDA time / Triton time).

Shapes (rows x cols) 384x768, 4096x2048, 8192x8192 in float16 and bfloat16 (--quick: 384x768 and 4096x2048,
float16, two Triton tiles and each CUDA kernel's default). Writes ``rows_tc.md`` (the tables, also printed) and
``rows_tc.jsonl`` (one raw figure a line) to ``--out`` (default ``$OUT``). Decisions go to a temporary registry
unless ``$ARBITER_DB`` names one.

Usage: python benchmarks/rows_tc.py [--out DIR] [--quick]. Without a GPU it says so and exits 0.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from _gpu import cannot_run, timed

OPS = ("softmax", "rmsnorm", "layernorm")
SHAPES = [(384, 768), (4096, 2048), (8192, 8192)]
DTYPES = ("float16", "bfloat16")
EPS = {"rmsnorm": 1e-6, "layernorm": 1e-5}
QUICK_TILES = (0, 2)  # of triton_rows.TILES: the default (8192, 1, 8) and short rows packed 4 a program (4096, 4, 4)
CAP_S = {False: 0.4, True: 0.2}  # measure_calls' time cap per solution (full, quick)


def _tensors(op, rows, cols, dtype, seed):
    """x, weight, bias as torch CUDA tensors (layernorm's x offset by 3, a mean real activations have)."""
    import torch

    torch.manual_seed(seed)
    tdt = getattr(torch, dtype)
    x = torch.randn(rows, cols, device="cuda", dtype=tdt)
    if op == "layernorm":
        x += 3.0
    w = torch.randn(cols, device="cuda", dtype=tdt)
    b = torch.randn(cols, device="cuda", dtype=tdt)
    return x, w, b


def _maker(op, x, w, b):
    """The region as a user builds it, per call (``Region`` memoizes its construction)."""
    from arbiter.regions import LayerNorm, RMSNorm, Softmax

    if op == "softmax":
        return lambda: Softmax(x)
    if op == "rmsnorm":
        return lambda: RMSNorm(x, w, eps=EPS["rmsnorm"])
    return lambda: LayerNorm(x, w, b, eps=EPS["layernorm"])


def _torch_peer(op, x, w, b):
    """(name, call) of torch's own op, or (name, None) where this torch lacks it."""
    import torch.nn.functional as F

    cols = (x.shape[-1],)
    if op == "softmax":
        return "F.softmax", lambda: F.softmax(x, dim=-1)
    if op == "rmsnorm":
        if not hasattr(F, "rms_norm"):
            return "F.rms_norm", None
        return "F.rms_norm", lambda: F.rms_norm(x, cols, w, EPS["rmsnorm"])
    return "F.layer_norm", lambda: F.layer_norm(x, cols, w, b, EPS["layernorm"])


def _label(family, name, params) -> str:
    if family == "triton":
        return f"{name} {list(params['tile'])}"
    return name + " " + ",".join(f"{k}={v}" for k, v in params.items())


def solutions(op, region, quick: bool) -> tuple[list, list]:
    """The solutions to time on ``region``: [{family, name, cand, params, label, same}] (``same``: the other
    parameter sets launching the same kernel here), and the candidates left out [(name, why)]."""
    from arbiter.candidates import REGISTRY
    from arbiter.candidates.gpu_rows import ROW_SPECS

    names = [("cuda", s.name) for s in ROW_SPECS if s.op == op and "nvidia" in s.targets]
    names.append(("triton", f"triton_{op}"))
    out, left, seen = [], [], {}
    for family, name in names:
        cand = REGISTRY.get(name, "nvidia", op)
        ok = "not registered" if cand is None else cand.available()
        if ok is True:
            ok = cand.applies_to(region)
        if ok is not True:
            left.append((name, str(ok)))
            continue
        space = cand.param_space()
        if quick:
            space = [space[i] for i in QUICK_TILES] if family == "triton" else space[:1]
        for params in space:
            label = _label(family, name, params)
            sig = (name, cand.launch_signature(region, params))
            if sig in seen:
                seen[sig]["same"].append(label)
                continue
            seen[sig] = {"family": family, "name": name, "cand": cand, "params": params, "label": label, "same": []}
            out.append(seen[sig])
    return out, left


def user_path(op, make, cand, params, cap: float) -> dict:
    """``run_arbitrated(op, make())`` serving ``cand`` with ``params`` alone (forced, gated first), timed."""
    import arbiter
    from arbiter.candidates import REGISTRY

    one = copy.copy(cand)  # the same candidate (name, code, identity) offering this one parameter set
    one.param_space = lambda: [dict(params)]
    with REGISTRY.only("nvidia", op, [one]):
        decision = arbiter.arbitrate(op, make(), force=cand.name)
        t = timed(lambda: arbiter.run_arbitrated(op, make()), time_cap_s=cap)
    return t | {"served": str(decision.winner.label)}


def case(op, shape, dtype, quick: bool) -> dict:
    """One op, shape and dtype: torch, then every solution through the user path."""
    rows, cols = shape
    x, w, b = _tensors(op, rows, cols, dtype, seed=rows + cols)
    make = _maker(op, x, w, b)
    cap = CAP_S[quick]
    peer_name, peer = _torch_peer(op, x, w, b)
    torch_t = timed(peer, time_cap_s=cap) if peer is not None else None
    sols, left = solutions(op, make(), quick)
    results = []
    for s in sols:
        r = {"family": s["family"], "solution": s["label"], "same": s["same"], "params": s["params"]}
        try:
            r |= user_path(op, make, s["cand"], s["params"], cap)
        except Exception as e:  # a gate failure (NoCandidateError) or a launch error: reported, not fatal
            r["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300].replace("|", "/")
        if torch_t is not None and "us" in r:
            r["ratio"] = torch_t["us"] / r["us"]
        results.append(r)
    return {"op": op, "shape": f"{rows}x{cols}", "dtype": dtype, "torch": peer_name, "torch_time": torch_t,
            "results": results, "left_out": left}


def best_vs_cuda(c) -> dict | None:
    """The best Triton tile against the best CUDA row kernel of one case; None where either is missing."""
    def best(family):
        timed_ = [r for r in c["results"] if r["family"] == family and "us" in r]
        return min(timed_, key=lambda r: r["us"]) if timed_ else None

    tri, cu = best("triton"), best("cuda")
    if tri is None or cu is None:
        return None
    return {"triton": tri["solution"], "triton_us": tri["us"], "cuda": cu["solution"], "cuda_us": cu["us"],
            "ratio": cu["us"] / tri["us"]}


def _f(v, fmt):
    return format(v, fmt) if v is not None else "-"


def table(cases, head: str) -> str:
    lines = [head, "", "ratio = torch time / solution time (above 1: faster than torch); "
             "spread = (p80 - p20) / median", "", "| op | shape | dtype | solution | µs | spread | torch µs | ratio |",
             "|---|---|---|---|---:|---:|---:|---:|"]
    for c in cases:
        t = c["torch_time"]
        torch_cell = f"{t['us']:.1f} ({c['torch']})" if t else f"- ({c['torch']} missing)"
        for r in c["results"]:
            sol = r["solution"] + (f" (= {', '.join(r['same'])})" if r["same"] else "")
            if "error" in r:
                lines.append(f"| {c['op']} | {c['shape']} | {c['dtype']} | {sol} | failed: {r['error']} | | "
                             f"{torch_cell} | |")
                continue
            lines.append(f"| {c['op']} | {c['shape']} | {c['dtype']} | {sol} | {r['us']:.1f} | "
                         f"{r['spread'] * 100:.1f}% | {torch_cell} | {_f(r.get('ratio'), '.3f')} |")
        for name, why in c["left_out"]:
            lines.append(f"| {c['op']} | {c['shape']} | {c['dtype']} | {name}: not timed ({why}) | | | "
                         f"{torch_cell} | |")
    lines += ["", "Best Triton tile vs the best CUDA row kernel (ratio = CUDA time / Triton time; above 1: Triton "
              "faster)", "", "| op | shape | dtype | best Triton | µs | best CUDA | µs | ratio |",
              "|---|---|---|---|---:|---|---:|---:|"]
    for c in cases:
        v = best_vs_cuda(c)
        if v is None:
            lines.append(f"| {c['op']} | {c['shape']} | {c['dtype']} | - | | - | | |")
            continue
        lines.append(f"| {c['op']} | {c['shape']} | {c['dtype']} | {v['triton']} | {v['triton_us']:.1f} | "
                     f"{v['cuda']} | {v['cuda_us']:.1f} | {v['ratio']:.3f} |")
    return "\n".join(lines)


def raw_lines(cases, stamp, device) -> list[dict]:
    """One record a measurement (the torch peer, each solution), for rows_tc.jsonl."""
    out = []
    for c in cases:
        where = {"date": stamp, "device": device, "op": c["op"], "shape": c["shape"], "dtype": c["dtype"]}
        if c["torch_time"]:
            out.append(where | {"family": "torch", "solution": c["torch"]} | c["torch_time"])
        for r in c["results"]:
            out.append(where | r)
        for name, why in c["left_out"]:
            out.append(where | {"solution": name, "left_out": why})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT"), help="write rows_tc.md and rows_tc.jsonl there "
                                                                 "(default: $OUT)")
    ap.add_argument("--quick", action="store_true", help="384x768 and 4096x2048, float16, two Triton tiles")
    args = ap.parse_args()
    if cannot_run("rows_tc", "the peers are torch's F.softmax, F.rms_norm and F.layer_norm"):
        return 0
    from arbiter import targets

    started = time.perf_counter()
    nvidia = targets.get("nvidia")
    env = nvidia.environment()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    shapes = SHAPES[:2] if args.quick else SHAPES
    dtypes = [d for d in (DTYPES[:1] if args.quick else DTYPES) if d != "bfloat16" or nvidia.bfloat16() is not None]
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("ARBITER_DB", os.path.join(tmp, "registry.db"))  # forced decisions: not the user's
        for op in OPS:
            for shape in shapes:
                for dtype in dtypes:
                    t0 = time.perf_counter()
                    cases.append(case(op, shape, dtype, args.quick))
                    print(table(cases[-1:], f"rows_tc: {op} {shape[0]}x{shape[1]} {dtype}")
                          + f"\n({time.perf_counter() - t0:.0f} s)\n", flush=True)
    head = (f"rows_tc: {stamp} on {env.get('device')}; user path (run_arbitrated on torch CUDA tensors, each solution "
            f"forced), device mode (events, L2 flushed), median ({time.perf_counter() - started:.0f} s)")
    text = table(cases, head)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "rows_tc.md"), "w") as f:
            f.write(text + "\n")
        with open(os.path.join(args.out, "rows_tc.jsonl"), "w") as f:
            for rec in raw_lines(cases, stamp, env.get("device")):
                f.write(json.dumps(rec, default=str) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
