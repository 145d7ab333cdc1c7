"""A torch CPU model through ``arbiter.torch`` against the same model in plain torch (issue 39 item 5).

Three models, each written twice (plain torch, and with its ops through ``arbiter.torch``), same weights:

* **mlp**: ``[batch, d]`` -> matmul + bias + GELU (4d) -> matmul + bias -> LayerNorm;
* **block**: a pre-norm transformer block on ``[batch, seq, d]``: RMSNorm -> q, k, v projections -> 4-D attention
  (causal) -> output projection + residual -> LayerNorm -> SwiGLU (``gated``, hidden 4d) -> down projection +
  residual;
* **llama**: a llama decoder layer on ``[1, seq, d]`` (the ``Llama`` class: rotary embedding of q and k, and
  through arbiter.torch the fused ``add_rmsnorm`` and ``rope`` op kinds, issue 43 item 3).

Paths: eager forward (no gradients), eager forward + backward, and ``torch.compile`` forward (both models
compiled, outside the timing). Each configuration runs in its own process (thread counts and the policy are a
process's): torch's default thread count and 1 thread, the arbiter's default policy (``tier``) and tuned
(``ARBITER_POLICY=tune`` with a 0.5 s budget a key, the tuning done in warm-up calls before the timing), each on a
fresh in-memory registry. ``--busy`` runs the whole set again with one other CPU-bound process on the box.
Timing: the torch and arbiter variants of a path alternate in rounds (A B, B A, ...), each sample ``--calls``
calls back to back; median µs per call and the ratio torch / arbiter (above 1: the arbiter is faster).

    python benchmarks/torch_model.py [--quick] [--busy] [--models mlp,block,llama] [--configs 0:tier,1:tune] [--out DIR]

``--quick``: tiny models, 3 rounds, no compiled path (a smoke run; its figures are not results).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from _busy import busy_box  # noqa: E402 (benchmarks/, the script's folder, is on sys.path)


def child(threads: int | None, policy: str, quick: bool, only: list[str]) -> list[dict]:
    import numpy as np
    import torch
    import torch.nn.functional as F

    import arbiter
    import arbiter.torch as at
    from arbiter.ops.rope.torch_ref import ref_rope
    from arbiter.store import MemoryStore

    if threads:
        torch.set_num_threads(threads)
    arbiter.configure(store=MemoryStore(), policy=policy, tune_seconds=0.5 if policy == "tune" else None)
    g = torch.Generator().manual_seed(0)

    def p(*shape, scale=1.0):
        return torch.nn.Parameter(torch.randn(*shape, generator=g) * scale)

    class MLP(torch.nn.Module):
        def __init__(self, d, mine):
            super().__init__()
            self.mine = mine
            self.w1, self.b1 = p(d, 4 * d, scale=d ** -0.5), p(4 * d, scale=0.1)
            self.w2, self.b2 = p(4 * d, d, scale=(4 * d) ** -0.5), p(d, scale=0.1)
            self.ln_w, self.ln_b = p(d, scale=0.1), p(d, scale=0.1)

        def forward(self, x):
            if self.mine:
                h = at.matmul(x, self.w1, self.b1, None, "gelu")
                h = at.matmul(h, self.w2, self.b2)
                return at.layernorm(h, self.ln_w + 1, self.ln_b)
            h = F.gelu(torch.addmm(self.b1, x, self.w1))
            h = torch.addmm(self.b2, h, self.w2)
            return F.layer_norm(h, (h.shape[-1],), self.ln_w + 1, self.ln_b)

    class Block(torch.nn.Module):
        def __init__(self, d, heads, mine):
            super().__init__()
            self.mine, self.heads = mine, heads
            s = d ** -0.5
            self.norm1, self.norm2, self.norm2_b = p(d, scale=0.1), p(d, scale=0.1), p(d, scale=0.1)
            self.wq, self.wk, self.wv, self.wo = (p(d, d, scale=s) for _ in range(4))
            self.wg, self.wu = p(d, 4 * d, scale=s), p(d, 4 * d, scale=s)
            self.wd = p(4 * d, d, scale=(4 * d) ** -0.5)

        def split(self, t, b, n):
            return t.view(b, n, self.heads, -1).transpose(1, 2).contiguous()

        def forward(self, x):
            b, n, d = x.shape
            rows = x.reshape(b * n, d)
            if self.mine:
                h = at.rmsnorm(rows, self.norm1 + 1)
                q, k, v = (self.split(at.matmul(h, w), b, n) for w in (self.wq, self.wk, self.wv))
                o = at.attention(q, k, v, True).transpose(1, 2).reshape(b * n, d)
                rows = at.matmul(o, self.wo, None, rows)
                h = at.layernorm(rows, self.norm2 + 1, self.norm2_b)
                h = at.gated(h, self.wg, self.wu)
                return at.matmul(h, self.wd, None, rows).view(b, n, d)
            h = F.rms_norm(rows, (d,), self.norm1 + 1, 1e-6)
            q, k, v = (self.split(h @ w, b, n) for w in (self.wq, self.wk, self.wv))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b * n, d)
            rows = o @ self.wo + rows
            h = F.layer_norm(rows, (d,), self.norm2 + 1, self.norm2_b, 1e-5)
            h = F.silu(h @ self.wg) * (h @ self.wu)
            return (h @ self.wd + rows).view(b, n, d)

    class Llama(torch.nn.Module):
        """A llama decoder layer (Hugging Face's LlamaDecoderLayer, no KV cache): RMSNorm -> q, k, v projections ->
        rotary embedding of q and k (llama's permuted [B, S, H, D] views) -> causal attention -> output projection
        -> residual add and the next RMSNorm -> SwiGLU -> down projection + residual. Through arbiter.torch the
        residual add and the norm are one fused op (``add_rmsnorm``), and the rotation one pass a tensor
        (``rope``)."""

        def __init__(self, d, heads, hidden, seq, mine):
            super().__init__()
            self.mine, self.heads = mine, heads
            s = d ** -0.5
            self.norm1, self.norm2 = p(d, scale=0.1), p(d, scale=0.1)
            self.wq, self.wk, self.wv, self.wo = (p(d, d, scale=s) for _ in range(4))
            self.wg, self.wu = p(d, hidden, scale=s), p(d, hidden, scale=s)
            self.wd = p(hidden, d, scale=hidden ** -0.5)
            from arbiter.ops.rope import tables

            cos, sin = tables(seq, d // heads)
            self.register_buffer("cos", torch.from_numpy(cos.astype(np.float32)))
            self.register_buffer("sin", torch.from_numpy(sin.astype(np.float32)))

        def heads_of(self, t, b, n):  # [b*n, d] -> llama's [b, H, n, D] view (a permuted view of [b, n, H, D])
            return t.view(b, n, self.heads, -1).transpose(1, 2)

        def forward(self, x):
            b, n, d = x.shape
            rows = x.reshape(b * n, d)
            if self.mine:
                h = at.rmsnorm(rows, self.norm1 + 1)
                q, k, v = (self.heads_of(at.matmul(h, w), b, n) for w in (self.wq, self.wk, self.wv))
                q, k = at.rope(q, self.cos, self.sin), at.rope(k, self.cos, self.sin)
                o = at.attention(q, k, v, True).transpose(1, 2).reshape(b * n, d)
                rows, h = at.add_rmsnorm(at.matmul(o, self.wo), rows, self.norm2 + 1, 1e-6).unbind(0)
                return at.matmul(at.gated(h, self.wg, self.wu), self.wd, None, rows).view(b, n, d)
            h = F.rms_norm(rows, (d,), self.norm1 + 1, 1e-6)
            q, k, v = (self.heads_of(h @ w, b, n) for w in (self.wq, self.wk, self.wv))
            q, k = (ref_rope(t, self.cos, self.sin) for t in (q, k))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b * n, d)
            rows = o @ self.wo + rows
            h = F.rms_norm(rows, (d,), self.norm2 + 1, 1e-6)
            h = F.silu(h @ self.wg) * (h @ self.wu)
            return (h @ self.wd + rows).view(b, n, d)

    def twins(cls, *args):
        torch.manual_seed(0)
        g.manual_seed(0)
        ref = cls(*args, False)
        g.manual_seed(0)
        mine = cls(*args, True)
        return ref, mine

    if quick:
        models = [("mlp 8x32", twins(MLP, 32), (8, 32)), ("block 1x8x32", twins(Block, 32, 2), (1, 8, 32)),
                  ("llama 1x16x64", twins(Llama, 64, 2, 96, 16), (1, 16, 64))]
        rounds, calls = 3, 5
    else:
        models = [("mlp 64x256", twins(MLP, 256), (64, 256)), ("block 2x64x128", twins(Block, 128, 4), (2, 64, 128)),
                  ("llama 1x256x512", twins(Llama, 512, 8, 1376, 256), (1, 256, 512))]
    if only:
        models = [m for m in models if m[0].split()[0] in only]
        rounds, calls = 15, 20
    rows = []
    for name, (ref, mine), shape in models:
        x = torch.randn(*shape, generator=g)
        xg = x.clone().requires_grad_()
        with torch.no_grad():
            torch.testing.assert_close(mine(x), ref(x), rtol=2e-3, atol=2e-3)

        def forward(m, x=x):
            def run():
                with torch.no_grad():
                    m(x)
            return run

        def backward(m, xg=xg):
            def run():
                m(xg).sum().backward()
            return run

        paths = {"forward": (forward(ref), forward(mine)), "forward+backward": (backward(ref), backward(mine))}
        if not quick:
            torch._dynamo.reset()
            cref, cmine = torch.compile(ref), torch.compile(mine)
            paths["compiled forward"] = (forward(cref), forward(cmine))
        for path, (fr, fm) in paths.items():
            for _ in range(3):  # warm-up: compilation, the gate, and under policy tune the tuning of each key
                fr(), fm()
            samples: dict[str, list[float]] = {"torch": [], "arbiter": []}
            for r in range(2 * rounds):
                for side, fn in ((("torch", fr), ("arbiter", fm)) if r % 2 == 0 else (("arbiter", fm), ("torch", fr))):
                    fn()  # untimed: the switch from the other side
                    t0 = time.perf_counter_ns()
                    for _ in range(calls):
                        fn()
                    samples[side].append((time.perf_counter_ns() - t0) / calls / 1e3)
            t, a = float(np.median(samples["torch"])), float(np.median(samples["arbiter"]))
            rows.append({"model": name, "path": path, "threads": threads or torch.get_num_threads(),
                         "policy": policy, "torch_us": t, "arbiter_us": a, "ratio": t / a})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--busy", action="store_true", help="also run with one other CPU-bound process on the box")
    ap.add_argument("--out", default=None)
    ap.add_argument("--models", default="", help="comma-separated: mlp, block, llama (default: all)")
    ap.add_argument("--configs", default="", help="comma-separated threads:policy, e.g. 0:tier,1:tune (default: all)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)  # "threads,policy": one configuration
    args = ap.parse_args()
    if args.child:
        threads, policy = args.child.split(",")
        only = [m for m in args.models.split(",") if m]
        print(json.dumps(child(int(threads) or None, policy, args.quick, only)))
        return 0
    try:
        import torch  # noqa: F401
    except ImportError:
        print("skipped: needs PyTorch (pip install 'kernel-arbiter[torch]')")
        return 0
    conditions = ["quiet", "busy"] if args.busy else ["quiet"]
    configs = [(0, "tier")] if args.quick else [(0, "tier"), (0, "tune"), (1, "tier"), (1, "tune")]
    if args.configs:
        configs = [(int(c.split(":")[0]), c.split(":")[1]) for c in args.configs.split(",")]
    rows = []
    for condition in conditions:
        with busy_box(condition == "busy"):
            for threads, policy in configs:
                cmd = [sys.executable, __file__, "--child", f"{threads},{policy}", "--models", args.models] + (
                    ["--quick"] if args.quick else [])
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                                   os.environ.get("PYTHONPATH")]))}
                load = os.getloadavg()[0]
                done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
                if done.returncode:
                    print(done.stdout[-2000:], done.stderr[-4000:])
                    return 1
                for row in json.loads(done.stdout.strip().splitlines()[-1]):
                    rows.append({**row, "condition": condition, "load": load})
    lines = [f"# A torch CPU model through arbiter.torch against plain torch ({datetime.date.today()})", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores. µs per call, medians of interleaved rounds; "
             "ratio torch / arbiter (above 1: the arbiter is faster).", "",
             "| condition (load) | model | path | threads | policy | torch | arbiter | torch / arbiter |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['condition']} ({r['load']:.1f}) | {r['model']} | {r['path']} | {r['threads']} | "
                     f"{r['policy']} | {r['torch_us']:,.1f} | {r['arbiter_us']:,.1f} | {r['ratio']:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "torch_model.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
