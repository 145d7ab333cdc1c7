"""A pre-norm transformer block through ``run_arbitrated``, against the same block in torch eager and
``torch.compile`` (default mode), side by side in one run.

The block (batch 1, head size 64, causal attention, ffn = 4d):
RMSNorm -> Q, K, V projections -> attention op -> output projection + residual (fused epilogue) ->
RMSNorm -> up projection with fused bias + GELU epilogue -> down projection + residual (fused epilogue).

Paths, all on the same weights and input:
* ``arbiter/cupy``: every op a region + ``run_arbitrated`` on CuPy arrays (default policy ``tier`` on a fresh
  registry, ``<out>/model_block.db``: what a fresh user gets; the first call of each key pays the F4 gate,
  in the warm-up, outside the timing);
* ``arbiter/torch``: the same on torch tensors (torch-native candidates, torch's allocator and stream);
* ``torch eager``: the block as a PyTorch user writes it (``F.rms_norm``, ``@``, ``addmm`` + ``F.gelu``,
  ``F.scaled_dot_product_attention``);
* ``torch.compile``: that function compiled (default mode), while a compile budget lasts;
* ``arbiter/torch graph``, ``arbiter/cupy graph``: the arbiter block recorded with ``arbiter.capture`` (a CUDA
  graph of the warm routes) and replayed; ``torch graph``: the torch block recorded by torch's own recipe
  (``torch.cuda.graph`` after a side-stream warm-up), the peer a graph is compared with (issue 19 item 1).

Timing is ``arbiter.timing.measure_calls`` for every path: ``device`` (events around one block call, L2
flushed before it; host gaps between kernels count) and, for the eager paths, ``stream`` (20 blocks back to
back between two events, per block: the regime of a model running eagerly). Each path's output is checked against a
float64 torch reference (relative Frobenius error). JSON lines go to ``<out>/model_block.jsonl``; a
markdown table is printed last and written to ``<out>/model_block.md``.

Usage: python benchmarks/model_block.py [--out DIR] [--quick] [--llama] [--budget-seconds S] [--compile-budget S]
``--quick``: two small configurations (CI smoke test); without a GPU it says so and exits 0.

``--llama``: a llama-style block instead (issue 26): RMSNorm, fused QKV projection, causal attention on the
strided head views ``reshape``/``transpose`` give, output projection + residual, RMSNorm, SwiGLU through the
``gated`` op, down projection + residual; torch tensors. Every path in one run per configuration: eager with
the default policy and tuned (policy ``tune`` on a registry of its own), ``arbiter.bind`` handles,
``arbiter.capture`` against a torch CUDA graph, and the block through the ``arbiter::`` ops under
``torch.compile`` (default and ``reduce-overhead``) against torch.compile of the torch block in the same
mode. ``LLAMA_GRID`` (``LLAMA_QUICK`` with ``--quick``); report ``<out>/llama_block.md``.
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

SEQS = (128, 512, 2048)
DIMS = (512, 1024, 4096)
DTYPES = ("float16", "bfloat16", "float32")
HEAD = 64
EPS = 1e-6


def configs(quick: bool) -> list[tuple[int, int, str]]:
    if quick:
        return [(128, 512, "float16"), (128, 512, "float32")]
    # Every size in fp16 (small to large) first, then bf16, then fp32: a run cut by the budget still
    # spans the sizes (host-bound to GEMM-bound), which is where the paths differ.
    grid = [(s, d, t) for s in SEQS for d in DIMS for t in DTYPES]
    return sorted(grid, key=lambda c: (DTYPES.index(c[2]), c[0] * c[1] * c[1], c[1]))


def weights(d: int, dtype: str, seed: int):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = getattr(torch, dtype)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, device="cuda") * scale).to(dt)

    f = 4 * d
    return {"n1": 1 + 0.1 * rand(d), "n2": 1 + 0.1 * rand(d),
            "wq": rand(d, d, scale=d ** -0.5), "wk": rand(d, d, scale=d ** -0.5), "wv": rand(d, d, scale=d ** -0.5),
            "wo": rand(d, d, scale=d ** -0.5), "w1": rand(d, f, scale=d ** -0.5), "b1": rand(f, scale=0.1),
            "w2": rand(f, d, scale=f ** -0.5)}


def heads(t, s, d):
    """[S, d] -> [1, H, S, 64] (a strided view, as a PyTorch user gets it)."""
    return t.reshape(1, s, d // HEAD, HEAD).swapaxes(1, 2)


def merge(o, s, d):
    """[1, H, S, 64] -> [S, d] (a copy: the heads interleave again)."""
    return o.swapaxes(1, 2).reshape(s, d)


def arbiter_block(x, w):
    """The block through run_arbitrated; the same code serves CuPy arrays and torch tensors."""
    from arbiter import run_arbitrated as ra
    from arbiter.regions import Attention, Matmul, RMSNorm

    s, d = x.shape
    h = ra("rmsnorm", RMSNorm(x, w["n1"], eps=EPS))
    q, k, v = (ra("matmul", Matmul(h, w[n])) for n in ("wq", "wk", "wv"))
    o = ra("attention", Attention(heads(q, s, d), heads(k, s, d), heads(v, s, d), causal=True))
    x = ra("matmul", Matmul(merge(o, s, d), w["wo"], residual=x))
    h2 = ra("rmsnorm", RMSNorm(x, w["n2"], eps=EPS))
    u = ra("matmul", Matmul(h2, w["w1"], bias=w["b1"], activation="gelu"))
    return ra("matmul", Matmul(u, w["w2"], residual=x))


def torch_block(x, w):
    import torch
    import torch.nn.functional as F

    s, d = x.shape
    h = F.rms_norm(x, (d,), w["n1"], EPS)
    q, k, v = h @ w["wq"], h @ w["wk"], h @ w["wv"]
    o = F.scaled_dot_product_attention(heads(q, s, d), heads(k, s, d), heads(v, s, d), is_causal=True)
    x = x + merge(o, s, d) @ w["wo"]
    h2 = F.rms_norm(x, (d,), w["n2"], EPS)
    u = F.gelu(torch.addmm(w["b1"], h2, w["w1"]))
    return x + u @ w["w2"]


def torch_graph(fn, *args):
    """``fn(*args)`` recorded by torch's documented recipe: warm-up on a side stream, then ``torch.cuda.graph``.
    Returns (replay, output)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*args)

    def replay():
        graph.replay()
        return out

    return replay


def rel_error(y, ref) -> float:
    import torch

    y = (y if isinstance(y, torch.Tensor) else torch.from_dlpack(y)).double()
    return float(torch.linalg.norm(y - ref) / torch.linalg.norm(ref))


def _m(m) -> dict:
    return {"median_us": m.median_s * 1e6, "p20_us": m.p20_s * 1e6, "p80_us": m.p80_s * 1e6,
            "spread": m.spread, "reps": m.reps}


def run_config(s: int, d: int, dtype: str, seed: int, compile_left: float) -> dict:
    import cupy as cp
    import torch

    from arbiter import dispatch
    from arbiter.timing import measure_calls

    w = weights(d, dtype, seed)
    x = torch.randn(s, d, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed + 1)).to(
        getattr(torch, dtype))
    wc = {k: cp.from_dlpack(v) for k, v in w.items()}
    xc = cp.from_dlpack(x)
    ref = torch_block(x.double(), {k: v.double() for k, v in w.items()})
    paths = {
        "arbiter/cupy": lambda: arbiter_block(xc, wc),
        "arbiter/torch": lambda: arbiter_block(x, w),
        "torch eager": lambda: torch_block(x, w),
    }
    result = {"seq": s, "d": d, "ffn": 4 * d, "dtype": dtype, "paths": {}, "errors": {}}
    t0 = time.perf_counter()
    for name, fn in paths.items():  # first calls: keys decided (F4 gate) and kernels compiled, untimed
        result["errors"][name] = rel_error(fn(), ref)
    result["first_call_s"] = time.perf_counter() - t0
    import arbiter

    for name, make in (("arbiter/torch graph", lambda: arbiter.capture(arbiter_block, x, w).replay),
                       ("arbiter/cupy graph", lambda: arbiter.capture(arbiter_block, xc, wc).replay),
                       ("torch graph", lambda: torch_graph(torch_block, x, w))):
        try:
            replay = make()
            result["errors"][name] = rel_error(replay(), ref)
            paths[name] = replay
        except Exception as exc:  # reported beside the table, the other paths still timed
            result.setdefault("failed", {})[name] = f"{type(exc).__name__}: {exc}"
    if compile_left > 0:
        torch._dynamo.reset()
        compiled = torch.compile(torch_block)
        t0 = time.perf_counter()
        result["errors"]["torch.compile"] = rel_error(compiled(x, w), ref)
        result["compile_s"] = time.perf_counter() - t0
        paths["torch.compile"] = lambda: compiled(x, w)
    for name, fn in paths.items():
        # A graph replay has no host work between its kernels: its stream time is its device time.
        modes = ("device",) if "graph" in name else ("device", "stream")
        result["paths"][name] = {mode: _m(measure_calls([fn], "nvidia", mode=mode, min_reps=5, max_reps=50,
                                                        time_cap_s=0.3, target_spread=0.03))
                                 for mode in modes}
    result["solutions"] = sorted({f"{r['op']}:{r['solution']}[{r['tier']}]" for r in dispatch.stats()
                                  if r["installed"]})
    return result


def table(results: list[dict]) -> str:
    lines = ["| seq × d (ffn 4d), dtype | arbiter/cupy µs | arbiter/torch µs | torch eager µs | torch.compile µs | "
             "eager / arbiter-cupy | eager / arbiter-torch | eager / compile | stream: eager / arbiter-torch | "
             "rel err arbiter / eager |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        p = r["paths"]

        def us(name, mode="device", p=p):
            return p[name][mode]["median_us"] if name in p else float("nan")

        e = r["errors"]
        lines.append(
            f"| {r['seq']} × {r['d']}, {r['dtype']} | {us('arbiter/cupy'):.1f} | {us('arbiter/torch'):.1f} | "
            f"{us('torch eager'):.1f} | {us('torch.compile'):.1f} | "
            f"{us('torch eager') / us('arbiter/cupy'):.3f} | {us('torch eager') / us('arbiter/torch'):.3f} | "
            f"{us('torch eager') / us('torch.compile'):.3f} | "
            f"{us('torch eager', 'stream') / us('arbiter/torch', 'stream'):.3f} | "
            f"{e['arbiter/cupy']:.1e} / {e['torch eager']:.1e} |")
    return "\n".join(lines)


def graph_table(results: list[dict]) -> str:
    lines = ["| seq × d (ffn 4d), dtype | arbiter/torch graph µs | arbiter/cupy graph µs | torch graph µs | "
             "torch eager µs | torch graph / arbiter-torch graph | torch graph / arbiter-cupy graph | "
             "eager / arbiter-torch graph |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        p = r["paths"]

        def us(name, p=p):
            return p[name]["device"]["median_us"] if name in p else float("nan")

        lines.append(f"| {r['seq']} × {r['d']}, {r['dtype']} | {us('arbiter/torch graph'):.1f} | "
                     f"{us('arbiter/cupy graph'):.1f} | {us('torch graph'):.1f} | {us('torch eager'):.1f} | "
                     f"{us('torch graph') / us('arbiter/torch graph'):.3f} | "
                     f"{us('torch graph') / us('arbiter/cupy graph'):.3f} | "
                     f"{us('torch eager') / us('arbiter/torch graph'):.3f} |")
    failed = [f"{r['seq']}x{r['d']} {r['dtype']} {k}: {v}" for r in results for k, v in r.get("failed", {}).items()]
    return "\n".join(lines + (["", "capture failed: " + "; ".join(failed)] if failed else []))


def summary(results: list[dict]) -> str:
    def geo(xs):
        xs = [x for x in xs if x > 0 and math.isfinite(x)]
        return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")

    out = []
    pairs = [(path, "torch eager", mode) for path in ("arbiter/cupy", "arbiter/torch", "torch.compile")
             for mode in ("device", "stream")]
    pairs += [(path, peer, "device") for path in ("arbiter/torch graph", "arbiter/cupy graph")
              for peer in ("torch graph", "torch eager")]
    for path, peer, mode in pairs:
        ratios = [(r["paths"][peer][mode]["median_us"] / r["paths"][path][mode]["median_us"], r)
                  for r in results if path in r["paths"] and peer in r["paths"]]
        if ratios:
            worst = min(ratios, key=lambda t: t[0])
            out.append(f"{path} vs {peer} ({mode}): geomean {geo([t[0] for t in ratios]):.3f}x, worst "
                       f"{worst[0]:.3f}x at {worst[1]['seq']}x{worst[1]['d']} {worst[1]['dtype']}, "
                       f"{sum(t[0] >= 0.97 for t in ratios)}/{len(ratios)} configurations >= 0.97x")
    return "\n".join(out)


# --- the llama-style block (issue 26 item 6) ------------------------------------------------------------------
# (tokens, d_model, dtype): a representative subset of 128-4096 tokens x 512-4096 d_model in the three dtypes,
# host-bound to GEMM-bound, that fits a few minutes of device time (tuning and compiling cost the most).
LLAMA_GRID = [(128, 512, "float16"), (512, 1024, "bfloat16"), (2048, 2048, "bfloat16"), (128, 4096, "float16"),
              (512, 512, "float32"), (4096, 4096, "bfloat16"), (2048, 1024, "float16"), (1024, 4096, "float32")]
LLAMA_QUICK = [(128, 512, "float16"), (512, 1024, "bfloat16")]


def llama_ffn(d: int) -> int:
    """Llama's hidden size: 8d/3 rounded up to a multiple of 256."""
    return -(-8 * d // 3 // 256) * 256


def llama_weights(d: int, dtype: str, seed: int):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = getattr(torch, dtype)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, device="cuda") * scale).to(dt)

    f = llama_ffn(d)
    return {"n1": 1 + 0.1 * rand(d), "n2": 1 + 0.1 * rand(d), "wqkv": rand(d, 3 * d, scale=d ** -0.5),
            "wo": rand(d, d, scale=d ** -0.5), "wg": rand(d, f, scale=d ** -0.5), "wu": rand(d, f, scale=d ** -0.5),
            "wd": rand(f, d, scale=f ** -0.5)}


def qkv_heads(qkv, s, d):
    """q, k, v as [1, H, S, 64] strided views of the fused projection (what reshape/transpose give a user)."""
    return tuple(qkv[:, i * d:(i + 1) * d].reshape(1, s, d // HEAD, HEAD).transpose(1, 2) for i in range(3))


def llama_arbiter(x, w):
    """The llama block through regions and run_arbitrated (torch tensors)."""
    from arbiter import run_arbitrated as ra
    from arbiter.regions import Attention, Gated, Matmul, RMSNorm

    s, d = x.shape
    h = ra("rmsnorm", RMSNorm(x, w["n1"], eps=EPS))
    q, k, v = qkv_heads(ra("matmul", Matmul(h, w["wqkv"])), s, d)
    o = ra("attention", Attention(q, k, v, causal=True))
    x = ra("matmul", Matmul(o.transpose(1, 2).reshape(s, d), w["wo"], residual=x))
    h2 = ra("rmsnorm", RMSNorm(x, w["n2"], eps=EPS))
    g = ra("gated", Gated(h2, w["wg"], w["wu"]))
    return ra("matmul", Matmul(g, w["wd"], residual=x))


def llama_ops(x, w, contiguous_heads: bool = False):
    """The same block through the ``arbiter::`` torch ops (what torch.compile traces)."""
    import arbiter.torch as at

    s, d = x.shape
    h = at.rmsnorm(x, w["n1"], EPS)
    q, k, v = qkv_heads(at.matmul(h, w["wqkv"]), s, d)
    if contiguous_heads:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = at.attention(q, k, v, True)
    x = at.matmul(o.transpose(1, 2).reshape(s, d), w["wo"], residual=x)
    h2 = at.rmsnorm(x, w["n2"], EPS)
    return at.matmul(at.gated(h2, w["wg"], w["wu"]), w["wd"], residual=x)


def llama_torch(x, w):
    import torch.nn.functional as F

    s, d = x.shape
    h = F.rms_norm(x, (d,), w["n1"], EPS)
    q, k, v = qkv_heads(h @ w["wqkv"], s, d)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + o.transpose(1, 2).reshape(s, d) @ w["wo"]
    h2 = F.rms_norm(x, (d,), w["n2"], EPS)
    return x + (F.silu(h2 @ w["wg"]) * (h2 @ w["wu"])) @ w["wd"]


def llama_bound(x, w):
    """The block with one ``arbiter.bind`` handle per op, bound on this call's operands; returns the block."""
    from arbiter import bind

    s, d = x.shape
    n1 = bind("rmsnorm", x, w["n1"], eps=EPS)
    h = n1(x, w["n1"])
    qkv = bind("matmul", h, w["wqkv"])
    q, k, v = qkv_heads(qkv(h, w["wqkv"]), s, d)
    att = bind("attention", q, k, v, causal=True)
    om = att(q, k, v).transpose(1, 2).reshape(s, d)
    out = bind("matmul", om, w["wo"], residual=x)
    x1 = out(om, w["wo"], x)
    n2 = bind("rmsnorm", x1, w["n2"], eps=EPS)
    h2 = n2(x1, w["n2"])
    gated = bind("gated", h2, w["wg"], w["wu"])
    down = bind("matmul", gated(h2, w["wg"], w["wu"]), w["wd"], residual=x1)

    def block(x, w):
        h = n1(x, w["n1"])
        q, k, v = qkv_heads(qkv(h, w["wqkv"]), s, d)
        x1 = out(att(q, k, v).transpose(1, 2).reshape(s, d), w["wo"], x)
        return down(gated(n2(x1, w["n2"]), w["wg"], w["wu"]), w["wd"], x1)

    return block


def _timed(fn, mode):
    from arbiter.timing import measure_calls

    return _m(measure_calls([fn], "nvidia", mode=mode, min_reps=5, max_reps=60, time_cap_s=0.3, target_spread=0.03))


def run_llama(s: int, d: int, dtype: str, seed: int, stores: dict, compile_left: float, tune: bool = True) -> dict:
    """Every path of the llama block at one configuration, in one run: eager (default and tuned), bound
    handles, capture against a torch CUDA graph, compile (default, reduce-overhead) against torch.compile of
    the torch block in the same mode. Eager paths in stream mode (the user's back-to-back throughput) and
    device mode; graphs in device mode."""
    import torch

    import arbiter
    from arbiter import dispatch

    w = llama_weights(d, dtype, seed)
    x = torch.randn(s, d, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed + 1)).to(
        getattr(torch, dtype))
    ref = llama_torch(x.double(), {k: v.double() for k, v in w.items()})
    r: dict = {"block": "llama", "seq": s, "d": d, "ffn": llama_ffn(d), "dtype": dtype, "paths": {}, "errors": {},
               "failed": {}, "notes": []}
    dispatch.configure(store=stores["tier"], policy="tier")
    t0 = time.perf_counter()
    r["errors"]["arbiter eager"] = rel_error(llama_arbiter(x, w), ref)
    r["first_call_s"] = time.perf_counter() - t0
    r["errors"]["torch eager"] = rel_error(llama_torch(x, w), ref)
    paths: dict = {"torch eager": lambda: llama_torch(x, w), "arbiter eager": lambda: llama_arbiter(x, w)}
    try:
        bound = llama_bound(x, w)
        r["errors"]["arbiter bound"] = rel_error(bound(x, w), ref)
        paths["arbiter bound"] = lambda: bound(x, w)
    except Exception as exc:
        r["failed"]["arbiter bound"] = f"{type(exc).__name__}: {exc}"
    for name, make in (("arbiter graph", lambda: arbiter.capture(llama_arbiter, x, w).replay),
                       ("torch graph", lambda: torch_graph(llama_torch, x, w))):
        try:
            replay = make()
            r["errors"][name] = rel_error(replay(), ref)
            paths[name] = replay
        except Exception as exc:
            r["failed"][name] = f"{type(exc).__name__}: {str(exc)[:300]}"
    if compile_left > 0:
        t0 = time.perf_counter()
        for mode in ("default", "reduce-overhead"):
            tag = "" if mode == "default" else " ro"
            torch._dynamo.reset()
            for name, fn in ((f"arbiter compile{tag}", llama_ops), (f"torch compile{tag}", llama_torch)):
                compiled = torch.compile(fn, mode=mode, fullgraph=fn is llama_ops)
                try:
                    for _ in range(3):  # reduce-overhead records its graph on the third call
                        y = compiled(x, w)
                    r["errors"][name] = rel_error(y, ref)
                    paths[name] = lambda compiled=compiled: compiled(x, w)
                except Exception as exc:
                    r["failed"][name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                    if fn is llama_ops:  # the same block with contiguous heads, as a user would work around it
                        try:
                            torch._dynamo.reset()
                            compiled = torch.compile(lambda x, w: llama_ops(x, w, True), mode=mode, fullgraph=True)
                            for _ in range(3):
                                y = compiled(x, w)
                            r["errors"][name] = rel_error(y, ref)
                            paths[name] = lambda compiled=compiled: compiled(x, w)
                            r["notes"].append(f"{name}: contiguous heads (permuted heads failed)")
                        except Exception as exc2:
                            r["failed"][name] += f"; contiguous heads: {type(exc2).__name__}: {str(exc2)[:200]}"
        r["compile_s"] = time.perf_counter() - t0
    # Paired peers timed back to back, each path in its modes.
    for name, fn in paths.items():
        modes = ("device",) if "graph" in name else ("stream", "device")
        r["paths"][name] = {mode: _timed(fn, mode) for mode in modes}
    r["solutions"] = {"default": sorted({f"{x['op']}:{x['solution']}" + (f" (capture stand-in for "
                                                                       f"{x['capture_standin_for']})"
                                                                       if x.get("capture_standin_for") else "")
                                         for x in dispatch.stats() if x["installed"] or x.get("capture_standin_for")})}
    if not tune:
        r["notes"].append("tuned column not run (--no-tune)")
        return r
    # Tuned: policy tune on its own registry (stream mode for these eager keys), then the eager block again.
    dispatch.configure(store=stores["tune"], policy="tune")
    t0 = time.perf_counter()
    try:
        r["errors"]["arbiter eager tuned"] = rel_error(llama_arbiter(x, w), ref)
        r["tune_s"] = time.perf_counter() - t0
        r["paths"]["arbiter eager tuned"] = {mode: _timed(lambda: llama_arbiter(x, w), mode)
                                             for mode in ("stream", "device")}
        r["solutions"]["tuned"] = sorted({f"{x['op']}:{x['solution']} [{x['policy']}]" for x in dispatch.stats()
                                          if x["installed"]})
        r["tuning"] = tuning_record(stores["tune"])
    except Exception as exc:
        r["failed"]["arbiter eager tuned"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    dispatch.configure(store=stores["tier"], policy="tier")
    # The default picks timed again right after the tuned ones: tuned / default from adjacent measurements.
    llama_arbiter(x, w)
    r["paths"]["arbiter eager again"] = {mode: _timed(lambda: llama_arbiter(x, w), mode) for mode in ("stream",
                                                                                                     "device")}
    return r


def tuning_record(store) -> dict:
    """Per tuned key: the stored choice's note (who was timed against whom, the margin) and the three fastest
    solutions by median in each timing mode, so a run says why a candidate (a Triton tile) did or did not win."""
    import itertools

    out = {}
    for rec in store.solutions():
        timed = sorted(store.load_measurements(rec.key, rec.env), key=lambda m: (str(m.mode), m.median_s))
        fastest = [f"{mode} {m.candidate_name} {json.dumps(m.params, sort_keys=True)} {m.median_s * 1e6:.1f} us"
                   for mode, group in itertools.groupby(timed, key=lambda m: str(m.mode))
                   for m in itertools.islice(group, 3)]
        out[rec.key] = {"chosen": f"{rec.candidate_name} {json.dumps(rec.params, sort_keys=True)}",
                        "chosen_by": str(rec.chosen_by), "note": rec.note, "fastest": fastest}
    return out


def _ratio(p, peer, path, mode):
    """(peer / path, spread of the ratio): both medians' relative spreads added."""
    if peer not in p or path not in p or mode not in p[peer] or mode not in p[path]:
        return None
    a, b = p[peer][mode], p[path][mode]
    return a["median_us"] / b["median_us"], a["spread"] + b["spread"]


def llama_table(results: list[dict]) -> str:
    cols = [("eager (default)", "torch eager", "arbiter eager", "stream"),
            ("eager (tuned)", "torch eager", "arbiter eager tuned", "stream"),
            ("tuned / default", "arbiter eager again", "arbiter eager tuned", "stream"),
            ("bound", "torch eager", "arbiter bound", "stream"),
            ("capture vs torch graph", "torch graph", "arbiter graph", "device"),
            ("compile (default)", "torch compile", "arbiter compile", "stream"),
            ("compile (reduce-overhead)", "torch compile ro", "arbiter compile ro", "stream")]
    head = "| tokens × d (ffn), dtype | torch eager µs | arbiter eager µs | " + " | ".join(c[0] for c in cols) + " |"
    lines = ["Ratios are peer / arbiter time (≥ 1: the arbiter path is as fast or faster), ± the two medians' "
             "relative spreads (p20-p80) added; eager, bound and compile paths in stream mode (back-to-back "
             "blocks), graphs in device mode.", "", head, "|" + "---|" * (3 + len(cols))]
    for r in results:
        p = r["paths"]

        def us(name, mode="stream", p=p):
            return f"{p[name][mode]['median_us']:.1f}" if name in p and mode in p[name] else "—"

        cells = []
        for _, peer, path, mode in cols:
            got = _ratio(p, peer, path, mode)
            cells.append("—" if got is None else f"{got[0]:.2f} ±{got[1] * 100:.0f}%")
        lines.append(f"| {r['seq']} × {r['d']} ({r['ffn']}), {r['dtype']} | {us('torch eager')} | "
                     f"{us('arbiter eager')} | " + " | ".join(cells) + " |")
    extra = [f"{r['seq']}x{r['d']} {r['dtype']} {k}: {v}" for r in results for k, v in r.get("failed", {}).items()]
    extra += [f"{r['seq']}x{r['d']} {r['dtype']} {n}" for r in results for n in r.get("notes", [])]
    return "\n".join(lines + (["", "failed or worked around: " + "; ".join(extra)] if extra else []))


def llama_main(args) -> int:
    import torch
    import torch._dynamo

    from arbiter import dispatch, targets
    from arbiter.store import MemoryStore

    for limit in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 256)
    os.makedirs(args.out, exist_ok=True)
    # Fresh in-memory registries: the default picks are a fresh user's; the tuned ones come from this run only.
    stores = {"tier": MemoryStore(), "tune": MemoryStore()}
    env = targets.get("nvidia").environment()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{stamp}  {json.dumps(env)}", flush=True)
    start, compile_spent, results, skipped = time.perf_counter(), 0.0, [], []
    todo = LLAMA_QUICK if args.quick else LLAMA_GRID
    if args.tune_seconds is not None:
        dispatch.configure(tune_seconds=args.tune_seconds)  # the tuned column's keys, decided on their miss
    if args.configs:
        todo = [LLAMA_GRID[int(i)] for i in args.configs.split(",")]
    with open(os.path.join(args.out, "llama_block.jsonl"), "w") as f:
        f.write(json.dumps({"date": stamp, "env": env}) + "\n")
        for i, (s, d, dtype) in enumerate(todo):
            if time.perf_counter() - start > args.budget_seconds:
                skipped.append(f"{s}x{d} {dtype}")
                continue
            try:
                r = run_llama(s, d, dtype, i, stores, args.compile_budget - compile_spent, not args.no_tune)
            except Exception as exc:
                print(f"{s}x{d} {dtype}: FAILED {type(exc).__name__}: {exc}", flush=True)
                continue
            compile_spent += r.get("compile_s", 0.0)
            results.append(r)
            f.write(json.dumps(r) + "\n")
            f.flush()
            print(f"{s}x{d} {dtype}: " + ", ".join(f"{k} {v[next(iter(v))]['median_us']:.1f}"
                                                   for k, v in r["paths"].items())
                  + f" us (first calls {r['first_call_s']:.1f} s, tune {r.get('tune_s', 0):.1f} s, "
                    f"compile {r.get('compile_s', 0):.1f} s)", flush=True)
    text = llama_table(results)
    if skipped:
        text += "\n\nnot run (budget): " + ", ".join(skipped)
    with open(os.path.join(args.out, "llama_block.md"), "w") as f:
        f.write(f"{stamp} on {env.get('device')}\n\n{text}\n")
    print(text)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--budget-seconds", type=float, default=480.0, help="stop starting configurations after this")
    ap.add_argument("--compile-budget", type=float, default=240.0,
                    help="stop compiling torch.compile peers after this many seconds of compilation")
    ap.add_argument("--table-from", help="print the table of an earlier run's model_block.jsonl, run nothing")
    ap.add_argument("--llama", action="store_true",
                    help="the llama-style block (fused QKV, strided heads, SwiGLU through gated) through every "
                         "path: eager default and tuned, bound, capture, compile; report <out>/llama_block.md")
    ap.add_argument("--tune-seconds", type=float, default=None,
                    help="with --llama: the budget of each key tuned on a miss, for its gate and again for its "
                         "timing (arbiter.configure(tune_seconds=...)); default: uncapped, every solution gated "
                         "(Triton tiles compiled) and timed up to a second per mode: 169-299 s a configuration on "
                         "an H200 (2026-12-04)")
    ap.add_argument("--no-tune", action="store_true",
                    help="with --llama: leave the tuned column out")
    ap.add_argument("--configs", help="with --llama: the LLAMA_GRID entries to run, as comma-separated indices "
                                      "(0-based), so a grid can be split over calls; their tables join by "
                                      "--table-from on the concatenated llama_block.jsonl files")
    ap.add_argument("--registry", help="the registry file to use (default: a fresh <out>/model_block.db, so the "
                                       "default picks are what a fresh user gets)")
    args = ap.parse_args()
    if args.table_from:
        with open(args.table_from) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        results = [r for r in lines if "paths" in r]
        if results and all(r.get("block") == "llama" for r in results):
            print(f"{lines[0].get('date')} on {lines[0].get('env', {}).get('device')}\n\n{llama_table(results)}")
            return 0
        done = {(r["seq"], r["d"], r["dtype"]) for r in results}
        missing = [f"{s}x{d} {t}" for s, d, t in configs(False) if (s, d, t) not in done]
        print(f"{lines[0].get('date')} on {lines[0].get('env', {}).get('device')}\n")
        print(table(results) + "\n\n" + graph_table(results) + "\n\n" + summary(results)
              + ("\n\nnot run: " + ", ".join(missing) if missing else ""))
        return 0
    if cannot_run("model_block", "torch eager is the peer"):
        return 0
    if args.llama:
        return llama_main(args)
    import torch
    import torch._dynamo

    from arbiter import targets

    for limit in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 256)
    os.makedirs(args.out, exist_ok=True)
    if not args.registry:  # a fresh registry: the default picks are a fresh user's, not another run's tuning
        args.registry = os.path.join(args.out, "model_block.db")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(args.registry + suffix):
                os.remove(args.registry + suffix)
    os.environ["ARBITER_DB"] = args.registry  # read when the first call opens the registry
    env = targets.get("nvidia").environment()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{stamp}  {json.dumps(env)}", flush=True)
    start, compile_spent, results, skipped = time.perf_counter(), 0.0, [], []
    todo = configs(args.quick)
    with open(os.path.join(args.out, "model_block.jsonl"), "w") as f:
        f.write(json.dumps({"date": stamp, "env": env}) + "\n")
        for i, (s, d, dtype) in enumerate(todo):
            if time.perf_counter() - start > args.budget_seconds:
                skipped.append(f"{s}x{d} {dtype}")
                continue
            try:
                r = run_config(s, d, dtype, i, args.compile_budget - compile_spent)
            except Exception as exc:
                print(f"{s}x{d} {dtype}: FAILED {type(exc).__name__}: {exc}", flush=True)
                continue
            compile_spent += r.get("compile_s", 0.0)
            results.append(r)
            f.write(json.dumps(r) + "\n")
            f.flush()
            p = r["paths"]
            print(f"{s}x{d} {dtype}: " + ", ".join(f"{k} {v['device']['median_us']:.1f}" for k, v in p.items())
                  + f" us (first calls {r['first_call_s']:.1f} s, compile {r.get('compile_s', 0):.1f} s)", flush=True)
    text = table(results) + "\n\n" + graph_table(results) + "\n\n" + summary(results)
    if skipped:
        text += "\n\nnot run (budget): " + ", ".join(skipped)
    with open(os.path.join(args.out, "model_block.md"), "w") as f:
        f.write(f"{stamp} on {env.get('device')}\n\n{text}\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
