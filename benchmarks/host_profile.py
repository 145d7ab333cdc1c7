"""Where a small transformer block's host time goes: per op of ``benchmarks/model_block.py``'s block, the host
cost of building the region, of ``run_arbitrated`` on a built region, of both (the user's line), and of the
same op called bare in torch; then the whole block with the garbage collector on and off, and a profile.

Host clock, ``N`` calls back to back, one synchronize at the end, per call (the regime of a host-bound
model: the GPU work of these shapes is shorter than the host's). torch tensors, default policy ``tier``
(keys decided before timing).

Usage: python benchmarks/host_profile.py [--out DIR] [--quick] [--seq 128] [--d 512] [--dtype float16]
``--quick``: 200 calls a figure (a smoke run). The report goes to ``<out>/host_profile.md``.
Without a GPU it says so and exits 0.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from _gpu import host_us


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.n = 200
    try:
        import torch

        if not torch.cuda.is_available():
            raise ImportError
    except ImportError:
        print("host_profile: skipped, needs PyTorch with CUDA")
        return 0
    import torch.nn.functional as F

    from arbiter import dispatch
    from arbiter import run_arbitrated as ra
    from arbiter.regions import Attention, Gated, Matmul, RMSNorm
    from model_block import EPS, arbiter_block, heads, merge, torch_block, weights

    s, d, n = args.seq, args.d, args.n
    w = weights(d, args.dtype, 0)
    x = torch.randn(s, d, device="cuda").to(getattr(torch, args.dtype))
    arbiter_block(x, w)  # every key decided
    h = F.rms_norm(x, (d,), w["n1"], EPS)
    q = h @ w["wq"]
    qh = heads(q, s, d)
    o = F.scaled_dot_product_attention(qh, qh, qh, is_causal=True)
    om = merge(o, s, d)
    u = torch.addmm(w["b1"], h, w["w1"])
    f = -(-8 * d // 3 // 256) * 256  # llama's SwiGLU width (model_block.llama_ffn)
    wg = (torch.randn(d, f, device="cuda") * d ** -0.5).to(x.dtype)
    wu = (torch.randn(d, f, device="cuda") * d ** -0.5).to(x.dtype)
    ops = [
        ("rmsnorm", lambda: RMSNorm(x, w["n1"], eps=EPS), lambda: F.rms_norm(x, (d,), w["n1"], EPS)),
        ("matmul", lambda: Matmul(h, w["wq"]), lambda: h @ w["wq"]),
        ("attention", lambda: Attention(qh, qh, qh, causal=True),
         lambda: F.scaled_dot_product_attention(qh, qh, qh, is_causal=True)),
        ("matmul+residual", lambda: Matmul(om, w["wo"], residual=x), lambda: x + om @ w["wo"]),
        ("matmul+bias+gelu", lambda: Matmul(h, w["w1"], bias=w["b1"], activation="gelu"),
         lambda: F.gelu(torch.addmm(w["b1"], h, w["w1"]))),
        ("matmul+residual (down)", lambda: Matmul(u, w["w2"], residual=x), lambda: x + u @ w["w2"]),
        ("gated", lambda: Gated(h, wg, wu), lambda: F.silu(h @ wg) * (h @ wu)),
    ]
    lines = [f"host profile, {s} x {d} {args.dtype}, torch tensors, µs per call (host clock, {n} calls back to "
             "back, one synchronize; the variants interleaved, best of 5 rounds)", "",
             "| op | winner | build region | run_arbitrated (built) | build + run (user line) | winner's own call | "
             "user - winner | torch bare | user / bare |", "|---|---|---|---|---|---|---|---|---|"]
    for name, build, bare in ops:
        region = build()
        op = region.op
        ra(op, region)  # decided (a key the block did not use: gated)
        try:  # the torch callers' own table (issue 26 item 3); one table before it
            route = dispatch.route(region.key, torch_caller=region.torch_in is not None)
        except TypeError:
            route = dispatch.route(region.key)
        own = route.run_torch if region.torch_in is not None else route.run
        calls = [build, lambda: ra(op, region), lambda: ra(op, build()),  # noqa: B023
                 lambda: own(region, route.params), bare]  # noqa: B023
        # Interleaved (each variant once per round, five rounds), the best round each: a shared host's drift
        # falls on every variant alike.
        best = [float("inf")] * len(calls)
        for _ in range(5):
            for i, call in enumerate(calls):
                best[i] = min(best[i], host_us(call, n, warmup=5, rounds=1))
        b, r, u_, o, t = best
        lines.append(f"| {name} | {route.label} | {b:.2f} | {r:.2f} | {u_:.2f} | {o:.2f} | {u_ - o:.2f} | {t:.2f} "
                     f"| {u_ / t:.2f} |")
    lines.append("")
    for label, gc_on in (("gc on", True), ("gc off", False)):
        if not gc_on:
            gc.disable()
        a = host_us(lambda: arbiter_block(x, w), n // 4)
        e = host_us(lambda: torch_block(x, w), n // 4)
        gc.enable()
        lines.append(f"block, {label}: arbiter/torch {a:.1f} µs, torch eager {e:.1f} µs, eager / arbiter {e / a:.3f}")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        arbiter_block(x, w)
    torch.cuda.synchronize()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "host_profile.md"), "w") as f:
        f.write("\n".join(lines) + "\n\n```\n" + text.getvalue() + "```\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
