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

Usage: python benchmarks/model_block.py [--out DIR] [--quick] [--budget-seconds S] [--compile-budget S]
``--quick``: two small configurations (CI smoke test); without a GPU it says so and exits 0.
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--budget-seconds", type=float, default=480.0, help="stop starting configurations after this")
    ap.add_argument("--compile-budget", type=float, default=240.0,
                    help="stop compiling torch.compile peers after this many seconds of compilation")
    ap.add_argument("--table-from", help="print the table of an earlier run's model_block.jsonl, run nothing")
    ap.add_argument("--registry", help="the registry file to use (default: a fresh <out>/model_block.db, so the "
                                       "default picks are what a fresh user gets)")
    args = ap.parse_args()
    if args.table_from:
        with open(args.table_from) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        results = [r for r in lines if "paths" in r]
        done = {(r["seq"], r["d"], r["dtype"]) for r in results}
        missing = [f"{s}x{d} {t}" for s, d, t in configs(False) if (s, d, t) not in done]
        print(f"{lines[0].get('date')} on {lines[0].get('env', {}).get('device')}\n")
        print(table(results) + "\n\n" + graph_table(results) + "\n\n" + summary(results)
              + ("\n\nnot run: " + ", ".join(missing) if missing else ""))
        return 0
    if cannot_run("model_block", "torch eager is the peer"):
        return 0
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
