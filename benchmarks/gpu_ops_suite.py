"""GPU suite for the newer op kinds: layernorm, attention, fft, gated (SwiGLU), pointwise chains.

Same rules as ``benchmarks/gpu_suite.py`` (whose measurement, gate walk and report helpers it reuses):
every applicable NVIDIA solution is timed side by side in one run with ``arbiter.timing.measure``
(device mode: CuPy events, L2 flushed, median with p20/p80), then gated fastest first until one passes;
the fastest passing solution displaces the ``cupy_*`` reference only when its margin beats twice
the spread; the tier default on a fresh key (tier order, first to pass) is reported beside it with its
regret (its time over the fastest gated solution's). Peers: torch eager as its users call it (attention:
``F.scaled_dot_product_attention``; fft: ``torch.fft``; gated: ``F.silu(x @ wg) * (x @ wu)``; pointwise: one
torch op per step) and, for layernorm and pointwise, a device-to-device copy of x (the bytes a one-pass kernel
must move at least).

Usage: python benchmarks/gpu_ops_suite.py [--out DIR] [--only OP] [--quick]; without a GPU it says "skipped"
and exits 0.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from arbiter.candidates import REGISTRY, params_id
from arbiter.suite import Problem, rows
from arbiter.timing import measure
from arbiter.tune import separated
from arbiter.verify import verify
from gpu_suite import DeviceCopy, TorchViews, regret_text, speedup, start, timing_row

OPS = ("layernorm", "attention", "fft", "gated", "pointwise")


def _attn(b, h, q, k, d, dtype, causal):
    return Problem("attention", {"batch": b, "heads": h, "q": q, "k": k, "d": d}, dtype, {"causal": causal})


def problems(only: str | None, quick: bool) -> list[Problem]:
    out = {
        "layernorm": [rows("layernorm", 4096, 1024, d) for d in ("float32", "float16")]
        + [rows("layernorm", 16384, 4096, d) for d in ("float32", "float16")]
        + [rows("layernorm", 4096, 768, "bfloat16")],
        "attention": [_attn(2, 8, 1024, 1024, 64, "float16", c) for c in ("0", "1")]
        + [_attn(2, 8, 512, 2048, 64, "float32", "0"), _attn(1, 16, 1, 4096, 128, "float16", "0"),
           _attn(1, 8, 2048, 2048, 128, "bfloat16", "1")],
        "fft": [Problem("fft", {"batch": 1024, "n": 1024}, "complex64", {"kind": "c2c"}),
                Problem("fft", {"batch": 256, "n": 4096}, "float32", {"kind": "r2c"}),
                Problem("fft", {"batch": 256, "n": 4096}, "complex64", {"kind": "r2c", "inverse": "1"}),
                Problem("fft", {"batch": 32, "n": 65536}, "complex64", {"kind": "c2c"}),
                Problem("fft", {"batch": 256, "n": 1024}, "complex128", {"kind": "c2c", "inverse": "1"}),
                Problem("fft", {"batch": 1024, "n": 1000}, "complex64", {"kind": "c2c"})],
        "gated": [Problem("gated", {"m": 1024, "n": 4096, "k": 1024}, d) for d in ("float32", "float16")]
        + [Problem("gated", {"m": 32, "n": 11008, "k": 4096}, "float16"),
           Problem("gated", {"m": 64, "n": 256, "k": 128}, "float32")],
        "pointwise": [Problem("pointwise", {"size": s}, d, {"chain": c}) for s, d, c in [
            (1 << 24, "float32", "mul[t]>add[s]>relu>tanh"), (1 << 24, "float16", "mul[t]>add[s]>relu>tanh"),
            (1 << 24, "bfloat16", "silu>mul[t]"), (1 << 20, "float32", "gelu_tanh>mul[s]"),
            (4096, "float32", "sigmoid>mul[t]>add[s]")]],
    }
    chosen = [p for op in OPS if only in (None, op) for p in out[op]]
    if quick:
        chosen = [p for op in OPS for p in out[op][:1] if only in (None, op)]
    return chosen


class TorchEager(TorchViews):
    """PyTorch as its users call it for each op, allocating its output."""

    name = "torch_eager"

    def run(self, region, params):
        import torch
        import torch.nn.functional as F

        v = self.views(region)
        if region.op == "layernorm":
            return F.layer_norm(v["x"], (region.dims["cols"],), v["weight"], v.get("bias"), region.eps)
        if region.op == "attention":
            return F.scaled_dot_product_attention(v["q"], v["k"], v["v"], is_causal=region.causal, scale=region.scale)
        if region.op == "fft":
            if region.kind == "c2c":
                return torch.fft.ifft(v["x"]) if region.inverse else torch.fft.fft(v["x"])
            return torch.fft.irfft(v["x"], n=region.n) if region.inverse else torch.fft.rfft(v["x"])
        if region.op == "gated":
            return F.silu(v["x"] @ v["w_gate"]) * (v["x"] @ v["w_up"])
        y = v["x"]
        unary = {"neg": torch.neg, "abs": torch.abs, "relu": torch.relu, "exp": torch.exp, "tanh": torch.tanh,
                 "sigmoid": torch.sigmoid, "silu": F.silu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
                 "square": torch.square}
        binary = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "max": torch.maximum, "min": torch.minimum}
        for i, (name, operand) in enumerate(region.ops):
            if operand is None:
                y = unary[name](y)
            elif isinstance(operand, float):
                y = binary[name](y, torch.tensor(operand, dtype=y.dtype, device=y.device)) \
                    if name in ("max", "min") else binary[name](y, operand)
            else:
                y = binary[name](y, v[f"ops[{i}]"])
        return y


def run_problem(problem: Problem, seed: int, torch_ok: bool, gate_log: list, cap: float = 0.25) -> dict:
    region = problem.region("nvidia", seed)
    timings, best = [], None
    for cand in REGISTRY.candidates("nvidia", problem.op):
        if cand.available() is not True or cand.applies_to(region) is not True:
            continue
        for params in cand.param_space():
            try:
                m = measure(cand, params, region, mode="device", time_cap_s=cap, best_so_far=best)
            except Exception as exc:  # a solution that cannot run here is reported, not fatal
                timings.append((cand, params, None, f"{type(exc).__name__}: {exc}"))
                continue
            timings.append((cand, params, m, ""))
            if not m.screened and (best is None or m.median_s < best):
                best = m.median_s
    ranked = sorted([t for t in timings if t[2] is not None and not t[2].screened], key=lambda t: t[2].median_s)
    fastest, failed, verdicts = None, [], {}

    def gate(cand, params):
        ident = (cand.name, params_id(params))
        if ident not in verdicts:
            t0 = time.perf_counter()
            verdicts[ident] = verify(cand, params, region)
            gate_log.append({"problem": problem.label, "solution": cand.name + params_id(params),
                             "seconds": time.perf_counter() - t0, "passed": verdicts[ident].passed})
        return verdicts[ident]

    for cand, params, m, _ in ranked:  # gate fastest first: the arbiter never selects an unverified solution
        verdict = gate(cand, params)
        if verdict.passed:
            fastest = (cand, params, m)
            break
        failed.append(f"{cand.name}{params_id(params)}: {verdict.reason}")
    # The reference peer: the cupy_* candidate (cuBLAS, cuFFT, or a composed CuPy chain).
    vendor = next((t for t in ranked if t[0].name.startswith("cupy_")), None)
    default = None  # the tier default on a fresh key: tier order, first parameter sets, first to pass
    for cand, params, m, _ in timings:
        if m is not None and params == cand.param_space()[0] and gate(cand, params).passed:
            default = (cand, params, m)
            break
    selected, rule = fastest, "fastest passing"
    if fastest and vendor and fastest[0] is not vendor[0]:
        ok, margin = separated(fastest[2], vendor[2])
        if not ok:
            selected, rule = (vendor[0], vendor[1], vendor[2]), f"not separated ({margin * 100:+.1f}%)"
    peers, latency = {}, {}
    if torch_ok:
        peers["torch_eager"] = measure(TorchEager(), {}, region, mode="device", time_cap_s=cap)
    if problem.op in ("layernorm", "pointwise"):
        peers["copy"] = measure(DeviceCopy(), {}, region, mode="device", time_cap_s=cap)
    if selected:
        latency["selected"] = measure(selected[0], selected[1], region, mode="latency", time_cap_s=cap)
    if torch_ok:
        latency["torch_eager"] = measure(TorchEager(), {}, region, mode="latency", time_cap_s=cap)
    # The best of each tier (timed, not necessarily gated) shows how far each tier is from the selection.
    by_tier = {}
    for cand, params, m, _ in ranked:
        by_tier.setdefault(cand.tier.name, {"solution": cand.name + params_id(params), **timing_row(m)})
    return {
        "problem": problem.label, "op": problem.op, "dtype": problem.dtype, "dims": problem.dims,
        "bytes": sum(int(a.nbytes) for a in region.operands().values()) + int(region.alloc_out().nbytes),
        "solutions": [{"solution": c.name + params_id(p), "tier": c.tier.name, **(timing_row(m) if m else {"error": e})}
                      for c, p, m, e in timings],
        "best_by_tier": by_tier,
        "selected": selected and {"solution": selected[0].name + params_id(selected[1]),
                                  "tier": selected[0].tier.name, "rule": rule, **timing_row(selected[2])},
        "gate_failures": failed,
        "vendor": vendor and {"solution": vendor[0].name, **timing_row(vendor[2])},
        "default": default and {"solution": default[0].name + params_id(default[1]), "tier": default[0].tier.name,
                                **timing_row(default[2])},
        "peers": {k: timing_row(v) for k, v in peers.items()},
        "latency": {k: timing_row(v) for k, v in latency.items()},
    }


def table(results: list[dict]) -> str:
    lines = ["| problem | selected | sel µs | CuPy/cuBLAS/cuFFT µs | torch µs | vs vendor | vs torch | "
             "latency vs torch | best emitted/synth µs | copy % | default pick | default regret |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        s, v, t = r["selected"], r["vendor"], r["peers"].get("torch_eager")
        copy = r["peers"].get("copy")
        own = [r["best_by_tier"][k] for k in ("EMITTED", "SYNTHESIZED") if k in r["best_by_tier"]]
        own_best = min(own, key=lambda x: x["median_us"]) if own else None
        pct = f"{100 * copy['median_us'] / s['median_us']:.0f}%" if copy and s else "-"
        lines.append(
            f"| {r['problem']} | {s['solution'] if s else 'NONE'} | {s['median_us'] if s else math.nan:.1f} | "
            f"{v['median_us'] if v else math.nan:.1f} | {t['median_us'] if t else math.nan:.1f} | {speedup(v, s)} | "
            f"{speedup(t, s)} | {speedup(r['latency'].get('torch_eager'), r['latency'].get('selected'))} | "
            + (f"{own_best['solution']} {own_best['median_us']:.1f}" if own_best else "-") + f" | {pct} | "
            f"{r['default']['solution'] if r.get('default') else '-'} | {regret_text(r)} |")
    return "\n".join(lines)


def summary(results: list[dict]) -> str:
    def geo(xs):
        xs = [x for x in xs if x and x > 0]
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")

    regrets = [float(regret_text(r)) for r in results if regret_text(r) != "-"]
    lines = [f"default pick (tier order, fresh key) vs fastest gated: geomean {geo(regrets):.3f}x, "
             f"worst {max(regrets or [math.nan]):.2f}x over {len(regrets)} problems"]
    for op in OPS:
        rs = [r for r in results if r["op"] == op and r["selected"] and "torch_eager" in r["peers"]]
        if rs:
            lines.append(f"{op}: geomean selection vs torch eager "
                         f"{geo([r['peers']['torch_eager']['median_us'] / r['selected']['median_us'] for r in rs]):.3f}"
                         f"x "
                         f"over {len(rs)} problems")
    return "\n".join(lines)


def main() -> int:
    started = start(__doc__.splitlines()[0], list(OPS))
    if started is None:
        return 0
    args, torch_ok, env, stamp = started
    results, gate_log = [], []
    with open(os.path.join(args.out, "gpu_ops_suite.jsonl"), "w") as f:
        f.write(json.dumps({"date": stamp, "env": env}) + "\n")
        for i, problem in enumerate(problems(args.only, args.quick)):
            t0 = time.perf_counter()
            try:
                r = run_problem(problem, i, torch_ok, gate_log)
            except Exception as exc:
                print(f"{problem.label}: FAILED {type(exc).__name__}: {exc}", flush=True)
                continue
            r["seconds"] = time.perf_counter() - t0
            results.append(r)
            f.write(json.dumps(r) + "\n")
            f.flush()
            s = r["selected"]
            print(f"{problem.label:<50} {s['solution'] if s else 'NONE':<44} {s['median_us'] if s else 0:10.1f} us "
                  f"torch {r['peers'].get('torch_eager', {}).get('median_us', 0):10.1f} ({r['seconds']:.1f} s)"
                  + (f" gate failures: {r['gate_failures']}" if r["gate_failures"] else ""), flush=True)
        f.write(json.dumps({"gate_log": gate_log}) + "\n")
    text = table(results) + "\n\n" + summary(results)
    with open(os.path.join(args.out, "gpu_ops_suite.md"), "w") as f:
        f.write(f"{stamp}\n\n{text}\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
