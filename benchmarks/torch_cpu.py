"""``arbiter.torch`` on the CPU against plain torch, in one run: per op and for a small transformer-style block.

Three tables, every path timed in the same interleaved rounds (A, B, C, A, B, C, ...), each figure the median
µs per call over the rounds with the p20-p80 range beside it:

* **per op** (no gradients): torch's own op; ``run_arbitrated`` on a prebuilt NumPy region (the arbiter's own
  cost: dispatch plus the winning kernel); ``arbiter.torch.<op>`` (the public call: region from the tensors,
  dispatch, tensor back); ``torch.ops.arbiter.<op>`` (the custom op through torch's dispatcher, what a compiled
  graph calls). ``at / region`` is the public call's cost over ``run_arbitrated``'s (issue 29's goal: <= 2).
* **forward + backward per op**: ``op(x...)`` then ``backward`` of a weighted sum, torch against arbiter.torch.
* **block** ([batch, seq, d] input, RMSNorm -> SwiGLU (``gated``) -> down projection + residual -> softmax):
  eager forward, eager forward + backward, and ``torch.compile(fullgraph=True)`` forward, each the torch block
  against the same block written with ``arbiter.torch``.

    python benchmarks/torch_cpu.py [--rounds 15] [--calls 200] [--threads N] [--clock wall|cpu] [--quick] [--out DIR]

``--quick``: 3 rounds of 20 calls and one small block (a smoke run; too short to quote). The report is printed
and written to ``<out>/torch_cpu.md``. Thread count: torch's default unless ``--threads``; ``--clock cpu`` times
the calling thread's CPU time (with ``--threads 1`` the steadier figure on a loaded machine).
"""
from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import _rounds
import arbiter
import arbiter.torch as at
from arbiter import regions

CLOCKS = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}
clock = CLOCKS["wall"]


def interleaved(paths: dict, calls: int, rounds: int) -> dict:
    return _rounds.interleaved(paths, calls, rounds, clock)  # the clock --clock chose


def fmt(stat) -> str:
    med, lo, hi = stat
    return f"{med:.1f} ({lo:.1f}-{hi:.1f})"


def op_cases():
    """(name, torch call, arbiter.torch call, prebuilt NumPy region, custom-op call, inputs needing grad)."""
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    x, w = r(16, 128), r(128).abs() + 0.5
    a, b, bias = r(16, 64), r(64, 64) / 8, r(64)
    q, k, v = r(1, 2, 16, 32), r(1, 2, 16, 32), r(1, 2, 16, 32)
    xn, wn = x.numpy(), w.numpy()
    return [
        ("softmax 16x128", lambda x: torch.softmax(x, -1), lambda x: at.softmax(x, -1),
         regions.Softmax(xn), lambda x: torch.ops.arbiter.softmax(x, -1), (x,)),
        ("rmsnorm 16x128", lambda x: F.rms_norm(x, (128,), w, 1e-6), lambda x: at.rmsnorm(x, w, 1e-6),
         regions.RMSNorm(xn, wn), lambda x: torch.ops.arbiter.rmsnorm(x, w, 1e-6), (x,)),
        ("layernorm 16x128", lambda x: F.layer_norm(x, (128,), w, w, 1e-5), lambda x: at.layernorm(x, w, w),
         regions.LayerNorm(xn, wn, wn), lambda x: torch.ops.arbiter.layernorm(x, w, w, 1e-5), (x,)),
        ("matmul+bias 16x64x64", lambda a: torch.addmm(bias, a, b), lambda a: at.matmul(a, b, bias),
         regions.Matmul(a.numpy(), b.numpy(), bias=bias.numpy()),
         lambda a: torch.ops.arbiter.matmul(a, b, bias, None, "none"), (a,)),
        ("matmul+gelu 16x64x64", lambda a: F.gelu(torch.addmm(bias, a, b)),
         lambda a: at.matmul(a, b, bias, None, "gelu"),
         regions.Matmul(a.numpy(), b.numpy(), bias=bias.numpy(), activation="gelu"),
         lambda a: torch.ops.arbiter.matmul(a, b, bias, None, "gelu"), (a,)),
        ("attention 1x2x16x32", lambda q: F.scaled_dot_product_attention(q, k, v), lambda q: at.attention(q, k, v),
         regions.Attention(q.numpy(), k.numpy(), v.numpy()), lambda q: torch.ops.arbiter.attention(q, k, v),
         (q,)),
    ]


def one_op(case, calls: int, rounds: int) -> tuple[str, str]:
    """The per-op row and the forward + backward row of one case."""
    name, ref, mine, region, custom, inputs = case
    op = region.op
    stats = interleaved({"torch": lambda: ref(*inputs), "region": lambda: arbiter.run_arbitrated(op, region),
                         "at": lambda: mine(*inputs), "custom": lambda: custom(*inputs)}, calls, rounds)
    row = (f"| {name} | {fmt(stats['torch'])} | {fmt(stats['region'])} | {fmt(stats['at'])} | "
           f"{fmt(stats['custom'])} | {stats['at'][0] / stats['region'][0]:.2f} | "
           f"{stats['at'][0] / stats['torch'][0]:.2f} |")
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    weight = torch.randn(ref(*inputs).shape)

    def fb(fn):
        def run():
            (fn(*leaves) * weight).sum().backward()
        return run

    stats = interleaved({"torch": fb(ref), "at": fb(mine)}, max(1, calls // 2), rounds)
    return row, f"| {name} | {fmt(stats['torch'])} | {fmt(stats['at'])} | {stats['at'][0] / stats['torch'][0]:.2f} |"


def per_op(calls: int, rounds: int) -> list[str]:
    lines = ["## Per op, no gradients (µs per call, median (p20-p80))", "",
             "| op | torch | run_arbitrated (region prebuilt) | arbiter.torch | torch.ops.arbiter | "
             "arbiter.torch / run_arbitrated | arbiter.torch / torch |", "|---|---|---|---|---|---|---|"]
    grad_lines = ["## Per op, forward + backward (µs per call, median (p20-p80))", "",
                  "| op | torch | arbiter.torch | arbiter.torch / torch |", "|---|---|---|---|"]
    for case in op_cases():
        row, grad_row = one_op(case, calls, rounds)
        lines.append(row)
        grad_lines.append(grad_row)
    return lines + [""] + grad_lines


class Block(torch.nn.Module):
    """RMSNorm -> SwiGLU -> down projection + residual -> softmax, in torch or through arbiter.torch."""

    def __init__(self, d: int, hidden: int, arbitrated: bool):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.arbitrated = arbitrated
        self.norm = torch.nn.Parameter(torch.rand(d, generator=g) + 0.5)
        self.w_gate = torch.nn.Parameter(torch.randn(d, hidden, generator=g) / d ** 0.5)
        self.w_up = torch.nn.Parameter(torch.randn(d, hidden, generator=g) / d ** 0.5)
        self.w_down = torch.nn.Parameter(torch.randn(hidden, d, generator=g) / hidden ** 0.5)
        self.b_down = torch.nn.Parameter(torch.zeros(d))

    def forward(self, x):
        if self.arbitrated:
            h = at.rmsnorm(x, self.norm, 1e-6)
            h = at.gated(h, self.w_gate, self.w_up)
            h = at.matmul(h, self.w_down, self.b_down, x)
            return at.softmax(h, -1)
        h = F.rms_norm(x, (x.shape[-1],), self.norm, 1e-6)
        h = F.silu(h @ self.w_gate) * (h @ self.w_up)
        h = torch.addmm(self.b_down, h.reshape(-1, h.shape[-1]), self.w_down).view(x.shape) + x
        return torch.softmax(h, -1)


def block_rows(batch: int, seq: int, d: int, calls: int, rounds: int) -> list[str]:
    x = torch.randn(batch, seq, d)
    mine, ref = Block(d, 4 * d, True), Block(d, 4 * d, False)
    xg = x.clone().requires_grad_()

    def forward(module):
        def run():
            with torch.no_grad():
                module(x)
        return run

    def fb(module):
        def run():
            module(xg)[..., :3].sum().backward()
        return run

    with torch.no_grad():
        torch.testing.assert_close(mine(x), ref(x), rtol=1e-4, atol=1e-5)
    paths = {"eager forward": (forward(ref), forward(mine)), "eager forward + backward": (fb(ref), fb(mine))}
    torch._dynamo.reset()
    compiled_ref, compiled_mine = (torch.compile(ref, fullgraph=True), torch.compile(mine, fullgraph=True))
    forward(compiled_ref)(), forward(compiled_mine)()  # compiled outside the timing
    paths["compiled forward"] = (forward(compiled_ref), forward(compiled_mine))
    lines = []
    for path, (fr, fm) in paths.items():
        stats = interleaved({"torch": fr, "arbiter": fm}, calls, rounds)
        lines.append(f"| {batch} x {seq} x {d} | {path} | {fmt(stats['torch'])} | {fmt(stats['arbiter'])} | "
                     f"{stats['torch'][0] / stats['arbiter'][0]:.2f} |")
    return lines


def block(shapes, calls: int, rounds: int) -> list[str]:
    lines = ["## Block, [batch, seq, d] (µs per call, median (p20-p80); ratio torch / arbiter, > 1: arbiter faster)",
             "", "| batch x seq x d (hidden 4d) | path | torch | arbiter.torch | torch / arbiter |",
             "|---|---|---|---|---|"]
    for batch, seq, d in shapes:
        lines += block_rows(batch, seq, d, calls, rounds)
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's own)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="wall: perf_counter; cpu: this thread's CPU time (with --threads 1, steadier on a shared, "
                         "loaded machine: time spent waiting for a core is not counted)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 3 rounds of 20 calls, one small block")
    ap.add_argument("--out", type=Path, default=Path("."))
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    global clock
    clock = CLOCKS[args.clock]
    rounds, calls = (3, 20) if args.quick else (args.rounds, args.calls)
    shapes = [(2, 8, 64)] if args.quick else [(2, 8, 64), (4, 64, 256)]
    head = [f"# arbiter.torch on the CPU against torch ({platform.processor() or platform.machine()}, "
            f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.clock} clock, {rounds} "
            f"interleaved rounds of {calls} calls)", ""]
    lines = head + per_op(calls, rounds) + [""] + block(shapes, max(1, calls // 4), rounds)
    report = "\n".join(lines) + "\n"
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "torch_cpu.md").write_text(report)


if __name__ == "__main__":
    main()
