"""Tensor-core attention (``flash_mma``) through the user's path against torch SDPA's flash backend, in one run.

For (batch, heads, seq, d) in 1x16x1024x64, 1x16x2048x128, 4x16x4096x64 (q_len = k_len = seq), causal and not,
float16 and bfloat16, on torch CUDA tensors:
* ``arbiter``: ``run_arbitrated("attention", Attention(q, k, v, causal=...))``, region built in the call, the key
  decided beforehand with ``arbiter.arbitrate(op, region, force="flash_mma")`` (which gates it);
* ``sdpa flash``: ``F.scaled_dot_product_attention(q, k, v, is_causal=...)`` under
  ``sdpa_kernel(SDPBackend.FLASH_ATTENTION)``;
* ``kernel only``: ``flash_mma.run`` on CuPy views of the same tensors with a preallocated out (no region
  construction, no allocation, no dispatch: the launch and the kernel).
All three are timed with ``arbiter.timing.measure_calls`` in device mode (events around one call, L2 flushed
before it). The ratio is arbiter time over SDPA time (below 1: the arbiter is faster); TFLOP/s counts
4 * b * h * q * k * d (half of it when causal). Each row also gives the relative error of the arbiter's output
against SDPA's (both rounded to the element type: a sanity check, the gate is the judge).

Usage: python benchmarks/attention_tc.py [--out DIR] [--quick] [--sweep] [--budget-seconds S]; writes
``<out>/attention_tc.jsonl`` and ``<out>/attention_tc.md`` and prints the table last. ``--quick``: two
configurations; ``--sweep``: every flash_mma solution timed too (kernel only). Without a GPU (or without
PyTorch with CUDA) it says "skipped" and exits 0.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from _gpu import cannot_run

SHAPES = ((1, 16, 1024, 64), (1, 16, 2048, 128), (4, 16, 4096, 64))
DTYPES = ("float16", "bfloat16")
CANDIDATE = "flash_mma"


def configs(quick: bool) -> list[tuple]:
    if quick:
        return [((1, 16, 1024, 64), False, "float16"), ((1, 16, 2048, 128), True, "bfloat16")]
    return [(s, c, t) for s in SHAPES for c in (False, True) for t in DTYPES]


def run_config(shape, causal: bool, dtype: str, time_cap_s: float, sweep: bool) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import arbiter
    from arbiter import run_arbitrated
    from arbiter.candidates import REGISTRY
    from arbiter.regions import Attention
    from arbiter.targets.nvidia import cupy_view
    from arbiter.timing import measure_calls

    b, h, s, d = shape
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, generator=g, device="cuda").to(getattr(torch, dtype)) for _ in range(3))
    decision = arbiter.arbitrate("attention", Attention(q, k, v, causal=causal), force=CANDIDATE)
    params = decision.winner.params
    cand = REGISTRY.get(CANDIDATE, "nvidia", "attention")

    def user():
        return run_arbitrated("attention", Attention(q, k, v, causal=causal))

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    qc, kc, vc, oc = (cupy_view(t) for t in (q, k, v, torch.empty_like(q)))  # views: what the user path runs on
    bare = Attention(qc, kc, vc, causal=causal, out=oc)

    def kernel_only():
        return cand.run(bare, params)

    timing = {}
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        mine, ref = user(), sdpa()
        torch.cuda.synchronize()
        err = float(torch.linalg.vector_norm((mine - ref).float()) / torch.linalg.vector_norm(ref.float()))
        for label, call in (("arbiter", user), ("sdpa flash", sdpa), ("kernel only", kernel_only)):
            m = measure_calls([call], "nvidia", mode="device", min_reps=10, max_reps=200, time_cap_s=time_cap_s)
            timing[label] = {"median_us": m.median_s * 1e6, "spread": m.spread, "reps": m.reps}
        solutions = {}
        for p in cand.param_space() if sweep else ():  # kernel only, every solution: which block shape is fastest
            m = measure_calls([lambda p=p: cand.run(bare, p)], "nvidia", mode="device", min_reps=5, max_reps=100,
                              time_cap_s=0.25)
            solutions[json.dumps(p)] = m.median_s * 1e6
    flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    return {"shape": "x".join(map(str, shape)), "causal": causal, "dtype": dtype, "params": params,
            "rel_err_vs_sdpa": err, "timing": timing,
            "ratio": timing["arbiter"]["median_us"] / timing["sdpa flash"]["median_us"],
            "ratio_kernel": timing["kernel only"]["median_us"] / timing["sdpa flash"]["median_us"],
            "tflops": {path: flops / (t["median_us"] * 1e-6) / 1e12 for path, t in timing.items()},
            **({"kernel_only_us_by_solution": solutions} if solutions else {})}


def table(results: list[dict]) -> str:
    lines = ["| b x h x seq x d | causal | dtype | flash_mma params | arbiter us (TFLOP/s) | sdpa flash us (TFLOP/s) | "
             "kernel only us | arbiter / sdpa | kernel only / sdpa | rel err vs sdpa |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        t, f = r["timing"], r["tflops"]
        lines.append(f"| {r['shape']} | {int(r['causal'])} | {r['dtype']} | {json.dumps(r['params'])} | "
                     f"{t['arbiter']['median_us']:,.1f} ±{t['arbiter']['spread'] * 100:.0f}% ({f['arbiter']:.0f}) | "
                     f"{t['sdpa flash']['median_us']:,.1f} ±{t['sdpa flash']['spread'] * 100:.0f}% "
                     f"({f['sdpa flash']:.0f}) | {t['kernel only']['median_us']:,.1f} | {r['ratio']:.2f}x | "
                     f"{r['ratio_kernel']:.2f}x | {r['rel_err_vs_sdpa']:.1e} |")
    swept = [r for r in results if "kernel_only_us_by_solution" in r]
    if swept:
        lines += ["", "kernel only, every solution (us): " + "; ".join(
            f"{r['shape']} causal={int(r['causal'])} {r['dtype']}: " + ", ".join(
                f"{p} {t:,.1f}" for p, t in sorted(r["kernel_only_us_by_solution"].items(), key=lambda kv: kv[1]))
            for r in swept)]
    ratios = [r["ratio"] for r in results if r["ratio"] > 0 and math.isfinite(r["ratio"])]
    if ratios:
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        lines += ["", f"arbiter / sdpa flash (device mode): geomean {geo:.2f}x, worst {max(ratios):.2f}x, "
                      f"{sum(x <= 1.5 for x in ratios)}/{len(ratios)} within 1.5x"]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--quick", action="store_true", help="two configurations (smoke run)")
    ap.add_argument("--budget-seconds", type=float, default=70.0, help="start no configuration after this")
    ap.add_argument("--sweep", action="store_true",
                    help="also time every flash_mma solution (kernel only; adds compiles: about 2x the run time)")
    args = ap.parse_args()
    if cannot_run("attention_tc", "SDPA is the peer"):
        return 0
    from arbiter import targets

    os.makedirs(args.out, exist_ok=True)
    env = targets.get("nvidia").environment()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{stamp}  {json.dumps(env)}", flush=True)
    start, results, skipped = time.perf_counter(), [], []
    todo = configs(args.quick)
    with open(os.path.join(args.out, "attention_tc.jsonl"), "w") as f:
        f.write(json.dumps({"date": stamp, "env": env}) + "\n")
        for shape, causal, dtype in todo:
            label = f"{'x'.join(map(str, shape))} causal={int(causal)} {dtype}"
            if time.perf_counter() - start > args.budget_seconds:
                skipped.append(label)
                continue
            t0 = time.perf_counter()
            try:
                row = run_config(shape, causal, dtype, 0.4 if args.quick else 0.6, args.sweep)
            except Exception as exc:  # one failing configuration is reported, the others still run
                row = {"shape": "x".join(map(str, shape)), "causal": causal, "dtype": dtype,
                       "error": f"{type(exc).__name__}: {exc}"}
                print(f"{label}: FAILED {row['error']}", flush=True)
            else:
                print(f"{label}: arbiter {row['timing']['arbiter']['median_us']:.1f} us, sdpa flash "
                      f"{row['timing']['sdpa flash']['median_us']:.1f} us, ratio {row['ratio']:.2f}x "
                      f"({time.perf_counter() - t0:.1f} s)", flush=True)
            f.write(json.dumps(row) + "\n")
            f.flush()
            results.append(row)
    ok_rows = [r for r in results if "error" not in r]
    text = f"{stamp} on {env.get('device', '?')}\n\n" + table(ok_rows)
    failed = [f"{r['shape']} causal={int(r['causal'])} {r['dtype']}: {r['error']}" for r in results if "error" in r]
    if failed:
        text += "\n\nfailed: " + "; ".join(failed)
    if skipped:
        text += "\n\nnot run (budget): " + ", ".join(skipped)
    with open(os.path.join(args.out, "attention_tc.md"), "w") as f:
        f.write(text + "\n")
    print("\n" + text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
