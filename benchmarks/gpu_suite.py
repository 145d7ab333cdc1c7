"""GPU suite: every NVIDIA solution against cuBLAS / CuPy-composed, torch eager and a same-byte copy.

For each problem (GEMM 16^3..8192^3 with skinny and GEMV shapes; softmax and RMSNorm from 128 to
16384 columns) this times, side by side in one run with ``arbiter.timing.measure`` (CuPy events,
L2 flushed outside the timed region, warm-up, median with p20/p80, input sets rotated when they fit
in L2):

* every solution (candidate x parameter set) registered for the nvidia target that applies;
* peers: torch eager as a PyTorch user calls it (allocating its output), and for row ops a
  device-to-device copy of the same bytes (one read + one write);

then walks the solutions fastest first through the F4 gate (``arbiter.verify.verify``, float64
host oracle) until one passes, and applies the arbiter's rule: the fastest passing solution
displaces the tier default only when its margin beats twice the spread (``arbiter.tune.separated``);
otherwise the tier default is the selection. Latency mode (host call + synchronize) is measured for
the selection and the peers. One JSON line per problem goes to ``<out>/gpu_suite.jsonl``; a
markdown table is printed last and written to ``<out>/gpu_suite.md``.

Usage: python benchmarks/gpu_suite.py [--out DIR] [--only matmul|rows] [--quick]; without a GPU it says
"skipped" and exits 0.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from arbiter import targets
from arbiter.candidates import REGISTRY, Candidate, params_id
from arbiter.suite import Problem, mm, rows
from arbiter.timing import measure
from arbiter.tune import separated
from arbiter.verify import verify

GEMM_SHAPES = [  # (M, N, K): cubes, skinny, GEMV (N == 1), M == 1, split-K territory
    (16, 16, 16), (32, 32, 32), (64, 64, 64), (128, 128, 128), (256, 256, 256), (512, 512, 512),
    (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
    (8, 4096, 4096), (32, 4096, 4096), (4096, 4096, 64), (4096, 16, 4096), (1, 4096, 4096),
    (4096, 1, 4096), (16384, 1, 1024), (8192, 1, 8192), (64, 64, 8192), (128, 128, 16384),
]
EPILOGUE = {"bias": "1", "activation": "gelu", "residual": "1"}
ROW_SHAPES = [(4096, 128), (4096, 1024), (4096, 4096), (1024, 16384), (65536, 1024), (16384, 4096),
              (4096, 16384)]


def problems(only: str | None, quick: bool) -> list[Problem]:
    out = []
    if only in (None, "rows"):
        for op in ("softmax", "rmsnorm"):
            out += [rows(op, r, c, d) for r, c in ROW_SHAPES for d in ("float32", "float16")]
    if only in (None, "matmul"):
        half = [s for s in GEMM_SHAPES if s != (8192, 1, 8192)]
        out += [mm(*s) for s in GEMM_SHAPES]
        out += [mm(*s, "float16") for s in half]
        out += [mm(*s, "bfloat16") for s in [(64, 64, 64), (1024, 1024, 1024), (4096, 4096, 4096), (4096, 1, 4096)]]
        out += [mm(*s, d, **EPILOGUE) for s in [(256, 256, 256), (1024, 1024, 1024), (4096, 4096, 4096)]
                for d in ("float32", "float16")]
    if quick:
        keep = {(16, 16, 16), (1024, 1024, 1024), (4096, 1, 4096), (64, 64, 8192), (4096, 4096, 4096),
                (4096, 1024), (1024, 16384)}
        out = [p for p in out if tuple(p.dims.values()) in keep]
    return out


# --- peers that are not arbiter candidates -------------------------------------------------------
class TorchViews(Candidate):
    """Base of peers working on cached torch views (so DLPack conversion is not in their time)."""

    target = "nvidia"

    def __init__(self):
        self._views: dict[int, tuple] = {}

    def views(self, region):
        found = self._views.get(id(region))
        if found is None:
            import torch

            ops = {k: torch.from_dlpack(v) for k, v in region.operands().items()}
            found = self._views[id(region)] = (region, ops)  # holding region keeps its id unique
        return found[1]


class TorchEager(TorchViews):
    """PyTorch as its users call it: the op's functional form, allocating its output."""

    name = "torch_eager"

    def run(self, region, params):
        import torch
        import torch.nn.functional as F

        v = self.views(region)
        if region.op == "matmul":
            z = torch.addmm(v["bias"], v["a"], v["b"]) if "bias" in v else v["a"] @ v["b"]
            if region.activation != "none":
                z = F.gelu(z) if region.activation == "gelu" else getattr(F, region.activation)(z)
            return z + v["residual"] if "residual" in v else z
        if region.op == "softmax":
            return torch.softmax(v["x"], dim=region.axis)
        return F.rms_norm(v["x"], (region.dims["cols"],), v["weight"], region.eps)


class DeviceCopy(Candidate):
    """A device-to-device copy of x into the output: the same bytes a row kernel must move."""

    name = "copy"
    target = "nvidia"

    def run(self, region, params):
        out = region.alloc_out()
        out.data.copy_from_device_async(region.x.data, region.x.nbytes)
        return out


# --- one problem ---------------------------------------------------------------------------------
def timing_row(meas) -> dict:
    return {"median_us": meas.median_s * 1e6, "p20_us": meas.p20_s * 1e6, "p80_us": meas.p80_s * 1e6,
            "spread": meas.spread, "reps": meas.reps, "screened": meas.screened}


def run_problem(problem: Problem, seed: int, torch_ok: bool, gate_log: list) -> dict:
    region = problem.region("nvidia", seed)
    cap = 0.25
    sols = []
    for cand in REGISTRY.candidates("nvidia", problem.op):
        if cand.available() is not True or cand.applies_to(region) is not True:
            continue
        for params in cand.param_space():
            sols.append((cand, params))
    # Time the tier default first (screening baseline), then the rest.
    timings, best = [], None
    for cand, params in sols:
        try:
            m = measure(cand, params, region, mode="device", time_cap_s=cap, best_so_far=best)
        except Exception as exc:  # a solution that cannot run here is reported, not fatal
            timings.append((cand, params, None, f"{type(exc).__name__}: {exc}"))
            continue
        timings.append((cand, params, m, ""))
        if not m.screened and (best is None or m.median_s < best):
            best = m.median_s
    ranked = sorted([t for t in timings if t[2] is not None and not t[2].screened], key=lambda t: t[2].median_s)
    # Gate fastest first until one passes (the arbiter never selects an unverified solution).
    verdicts: dict = {}

    def gate(cand, params):
        ident = (cand.name, params_id(params))
        if ident not in verdicts:
            t0 = time.perf_counter()
            verdicts[ident] = verify(cand, params, region)
            gate_log.append({"problem": problem.label, "solution": cand.name + params_id(params),
                             "seconds": time.perf_counter() - t0, "passed": verdicts[ident].passed})
        return verdicts[ident]

    fastest, failed = None, []
    for cand, params, m, _ in ranked:
        verdict = gate(cand, params)
        if verdict.passed:
            fastest = (cand, params, m, verdict)
            break
        failed.append(f"{cand.name}{params_id(params)}: {verdict.reason}")
    # The reference peer: cuBLAS (cupy_matmul) for GEMMs, the composed CuPy chain for row ops.
    vendor = next((t for t in ranked if t[0].name.startswith("cupy_")), None)
    # The tier default on a fresh key: tier order, each candidate's first parameter set, first to pass.
    default = None
    for cand, params, m, _ in timings:
        if m is not None and params == cand.param_space()[0] and gate(cand, params).passed:
            default = (cand, params, m)
            break
    selected, rule = fastest, "fastest passing"
    if fastest and default and fastest[0] is not default[0]:
        ok, margin = separated(fastest[2], default[2])
        if not ok:
            selected, rule = (default[0], default[1], default[2], None), f"not separated ({margin * 100:+.1f}%)"
    peers = {}
    if torch_ok:
        peers["torch_eager"] = measure(TorchEager(), {}, region, mode="device", time_cap_s=cap)
    if problem.op != "matmul":
        peers["copy"] = measure(DeviceCopy(), {}, region, mode="device", time_cap_s=cap)
    latency = {}
    if selected:
        latency["selected"] = measure(selected[0], selected[1], region, mode="latency", time_cap_s=cap)
    if vendor:
        latency["vendor"] = measure(vendor[0], vendor[1], region, mode="latency", time_cap_s=cap)
    if torch_ok:
        latency["torch_eager"] = measure(TorchEager(), {}, region, mode="latency", time_cap_s=cap)
    nbytes = sum(int(a.nbytes) for a in region.operands().values()) + region.alloc_out().nbytes
    return {
        "problem": problem.label, "op": problem.op, "dtype": problem.dtype, "dims": problem.dims,
        "bytes": nbytes, "flops": 2 * math.prod(problem.dims.values()) if problem.op == "matmul" else None,
        "solutions": [{"solution": c.name + params_id(p), "tier": c.tier.name, **(timing_row(m) if m else {"error": e})}
                      for c, p, m, e in timings],
        "selected": selected and {"solution": selected[0].name + params_id(selected[1]), "tier": selected[0].tier.name,
                                  "rule": rule, **timing_row(selected[2])},
        "gate_failures": failed,
        "vendor": vendor and {"solution": vendor[0].name, **timing_row(vendor[2])},
        "default": default and {"solution": default[0].name + params_id(default[1]), "tier": default[0].tier.name,
                                **timing_row(default[2])},
        "peers": {k: timing_row(v) for k, v in peers.items()},
        "latency": {k: timing_row(v) for k, v in latency.items()},
    }


# --- report --------------------------------------------------------------------------------------
def speedup(num: dict | None, den: dict | None) -> str:
    """num/den as a speedup with the spread range from p20/p80: 'r (lo-hi)'."""
    if not num or not den or "median_us" not in num or "median_us" not in den:
        return "-"
    r = num["median_us"] / den["median_us"]
    lo, hi = num["p20_us"] / den["p80_us"], num["p80_us"] / den["p20_us"]
    return f"{r:.2f} ({lo:.2f}-{hi:.2f})"


def table(results: list[dict]) -> str:
    lines = ["| problem | selected | sel µs | cuBLAS/CuPy µs | torch µs | vs vendor | vs torch | "
             "latency vs vendor | latency vs torch | copy % | default pick | default regret |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        s, v, t = r["selected"], r["vendor"], r["peers"].get("torch_eager")
        copy = r["peers"].get("copy")
        pct = f"{100 * copy['median_us'] / s['median_us']:.0f}%" if copy and s else "-"
        lat = r["latency"]
        lines.append(f"| {r['problem']} | {s['solution'] if s else 'NONE'} | "
                     f"{s['median_us']:.1f} | {v['median_us'] if v else float('nan'):.1f} | "
                     f"{t['median_us'] if t else float('nan'):.1f} | "
                     f"{speedup(v, s)} | {speedup(t, s)} | {speedup(lat.get('vendor'), lat.get('selected'))} | "
                     f"{speedup(lat.get('torch_eager'), lat.get('selected'))} | {pct} | "
                     f"{r['default']['solution'] if r.get('default') else '-'} | {regret_text(r)} |")
    return "\n".join(lines)


def regret_text(r: dict) -> str:
    """The default pick's device time over the fastest gated solution's (1.00 = the default is the best)."""
    d, s = r.get("default"), r.get("selected")
    if not d or not s:
        return "-"
    best = min(s["median_us"], d["median_us"])  # a not-separated selection may be slower than the default
    return f"{d['median_us'] / best:.2f}"


def summary(results: list[dict]) -> str:
    def geo(xs):
        xs = [x for x in xs if x and x > 0]
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")

    sel = [r for r in results if r["selected"]]
    vs_torch = [r["peers"]["torch_eager"]["median_us"] / r["selected"]["median_us"] for r in sel
                if "torch_eager" in r["peers"]]
    vs_vendor = [r["vendor"]["median_us"] / r["selected"]["median_us"] for r in sel if r["vendor"]]
    lat_torch = [r["latency"]["torch_eager"]["median_us"] / r["latency"]["selected"]["median_us"] for r in sel
                 if "torch_eager" in r["latency"]]
    def best_peer(r):
        return min((r["vendor"] or {"median_us": 1e30})["median_us"],
                   r["peers"].get("torch_eager", {"median_us": 1e30})["median_us"])

    worst = min(sel, key=lambda r: best_peer(r) / r["selected"]["median_us"])
    wpeer = best_peer(worst)
    big_rows = [r for r in sel if r["op"] != "matmul" and r["bytes"] >= 64 << 20]
    return "\n".join([
        f"geomean device-time speedup of the selection: vs torch eager {geo(vs_torch):.3f}x, "
        f"vs cuBLAS/CuPy-composed {geo(vs_vendor):.3f}x, latency vs torch {geo(lat_torch):.3f}x "
        f"over {len(sel)} problems",
        f"worst selection vs best peer: {worst['problem']} at {wpeer / worst['selected']['median_us']:.3f}x",
        "default pick (tier order, fresh key) vs fastest gated: geomean "
        f"{geo([float(regret_text(r)) for r in sel if regret_text(r) != '-']):.3f}x, worst "
        f"{max([float(regret_text(r)) for r in sel if regret_text(r) != '-'] or [float('nan')]):.2f}x",
        "row kernels >= 64 MB, selection time as % of same-byte copy: " + ", ".join(
            f"{r['problem']} {100 * r['peers']['copy']['median_us'] / r['selected']['median_us']:.0f}%"
            for r in big_rows),
    ])


def start(description: str, only: list[str]):
    """Parse the suite's arguments and check the GPU. Returns (args, torch_ok, env, stamp), or None
    (after saying "skipped" and why) when the nvidia target is unavailable: the caller exits 0 then."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--only", choices=only)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    ok = targets.get("nvidia").available()
    if ok is not True:
        print(f"{ap.prog}: skipped, nvidia target unavailable: {ok}")
        return None
    os.makedirs(args.out, exist_ok=True)
    try:
        import torch

        torch_ok = torch.cuda.is_available()
    except ImportError:
        torch_ok = False
    env = targets.get("nvidia").environment()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{stamp}  {json.dumps(env)}", flush=True)
    return args, torch_ok, env, stamp


def main() -> int:
    started = start(__doc__.splitlines()[0], ["matmul", "rows"])
    if started is None:
        return 0
    args, torch_ok, env, stamp = started
    results, gate_log = [], []
    suffix = f"_{args.only}" if args.only else ""
    with open(os.path.join(args.out, f"gpu_suite{suffix}.jsonl"), "w") as f:
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
            print(f"{problem.label:<42} {s['solution'] if s else 'NONE':<48} {s['median_us'] if s else 0:10.1f} us "
                  f"vendor {r['vendor']['median_us'] if r['vendor'] else 0:10.1f} "
                  f"torch {r['peers'].get('torch_eager', {}).get('median_us', 0):10.1f} "
                  f"({r['seconds']:.1f} s)", flush=True)
        f.write(json.dumps({"gate_log": gate_log}) + "\n")
    text = table(results) + "\n\n" + summary(results)
    with open(os.path.join(args.out, f"gpu_suite{suffix}.md"), "w") as f:
        f.write(f"{stamp}\n\n{text}\n")
    slow_gates = sorted(gate_log, key=lambda g: -g["seconds"])[:3]
    print("\nslowest gate runs (float64 host oracle):", "; ".join(
        f"{g['problem']} {g['seconds']:.1f} s" for g in slow_gates))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
