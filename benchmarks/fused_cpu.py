"""The fused op kinds on the CPU against torch eager's unfused ops (issue 43 item 2), at llama sizes.

    python benchmarks/fused_cpu.py [--ops rope,add_rmsnorm,gated] [--rounds 9] [--calls 20] [--quick] [--out DIR]

Llama 7B/8B's shapes, float32:

* ``rope``: q ``[1, 32, S, 128]`` rotated by ``[S, 128]`` tables, S = 512 and 2048 (8 and 32 MiB), as torch's
  contiguous ``[B, H, S, D]`` and as llama's permuted view of ``[B, S, H, D]``. Peer: Hugging Face llama's
  ``x * cos + rotate_half(x) * sin`` (six kernels).
* ``add_rmsnorm``: x and the residual stream ``[1, T, 4096]``, T = 512 and 2048 (8 and 32 MiB each). Peers:
  ``h = x + residual`` then Hugging Face's ``LlamaRMSNorm`` (``h * rsqrt(mean(h^2) + eps) * weight``: four
  kernels), and ``h = x + residual`` then ``torch.rms_norm`` (torch's own norm kernel).
* ``gated`` (SwiGLU) from one concatenated gate/up weight (a fused ``gate_up_proj`` ``Linear`` weight ``[2N, d]``
  whose row blocks, transposed, are ``w_gate`` and ``w_up``): x ``[128, 1024]``, N = 2816 (a small llama's MLP; at
  7B's sizes one call takes seconds on this box). Peers: the model's own ``F.linear(x, w).chunk(2, -1)`` then
  ``silu(gate) * up`` (one GEMM), and Hugging Face's two GEMMs. GEMM-bound: the one GEMM is the gain, not memory.

Every path is what a user runs, timed in interleaved rounds in one process (the median µs per call and its p20-p80
range): the peers; ``arbiter.torch`` (``arbiter.torch.OPS[op]`` on the same tensors: wrappers and dispatch
included); ``run_arbitrated`` on NumPy arrays without out= (allocation included). The registry is a fresh file tuned
under ``ARBITER_POLICY=tune`` (the first call of each key gates and times every solution, as ``arbiter tune``
would); the winner is printed. Ratios are the first peer's median over the path's. At the default thread count and
at one thread (torch and numba both). ``--quick``: 2 rounds of 3 calls at the smaller size (a smoke run; too short
to quote)."""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("ARBITER_DB", str(Path(tempfile.mkdtemp()) / "fused.db"))
os.environ.setdefault("ARBITER_POLICY", "tune")

# (the registry and policy are set above, before arbiter is imported)
import numpy as np

import _rounds
import arbiter
from arbiter.ops.add_rmsnorm import AddRMSNorm
from arbiter.ops.rope import Rope, tables

EPS = 1e-6


def winner_of(key: str) -> str:
    return next((s["solution"] for s in arbiter.stats() if s["key"] == key and s["installed"]), "?")


def rope_case(torch, at, seq: int, permuted: bool):
    """(label, peers, arbiter paths, key) of one rope shape."""
    from arbiter.ops.rope.torch_ref import ref_rope

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, seq, 32, 128, generator=g).transpose(1, 2) if permuted else torch.randn(1, 32, seq, 128,
                                                                                                  generator=g)
    cos, sin = (torch.from_numpy(t.astype(np.float32)) for t in tables(seq, 128))
    xn, cn, sn = q.numpy(), cos.numpy(), sin.numpy()
    want = ref_rope(q, cos, sin)
    torch.testing.assert_close(at.OPS["rope"](q, cos, sin), want, rtol=1e-5, atol=1e-5)  # tunes the key
    np.testing.assert_allclose(arbiter.run_arbitrated("rope", Rope(xn, cn, sn)), want.numpy(), rtol=1e-5, atol=1e-5)
    label = f"rope [1, 32, {seq}, 128]" + (" permuted" if permuted else "")
    return (label, {"torch eager": lambda: ref_rope(q, cos, sin)},
            {"arbiter.torch": lambda: at.OPS["rope"](q, cos, sin),
             "run_arbitrated": lambda: arbiter.run_arbitrated("rope", Rope(xn, cn, sn))},
            Rope(xn, cn, sn).key.id)


def add_rmsnorm_case(torch, at, tokens: int):
    """(label, peers, arbiter paths, key) of one add_rmsnorm shape."""
    g = torch.Generator().manual_seed(0)
    x, res = torch.randn(1, tokens, 4096, generator=g), torch.randn(1, tokens, 4096, generator=g)
    w = torch.randn(4096, generator=g)

    def llama():  # a llama decoder layer's residual add and the next LlamaRMSNorm (float32 in, float32 out)
        h = x + res
        return h, w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS))

    def rms_norm():
        h = x + res
        return h, torch.rms_norm(h, (4096,), w, EPS)

    xn, rn, wn = x.numpy(), res.numpy(), w.numpy()
    want = llama()
    for got in (at.OPS["add_rmsnorm"](x, res, w, EPS), torch.from_numpy(np.asarray(
            arbiter.run_arbitrated("add_rmsnorm", AddRMSNorm(xn, rn, wn, EPS))))):  # (the first call tunes the key)
        torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-4)
    return (f"add_rmsnorm [1, {tokens}, 4096]", {"torch eager (LlamaRMSNorm)": llama,
                                                   "torch eager (torch.rms_norm)": rms_norm},
            {"arbiter.torch": lambda: at.OPS["add_rmsnorm"](x, res, w, EPS),
             "run_arbitrated": lambda: arbiter.run_arbitrated("add_rmsnorm", AddRMSNorm(xn, rn, wn, EPS))},
            AddRMSNorm(xn, rn, wn, EPS).key.id)


def gated_case(torch, at, tokens: int, d: int, hidden: int):
    """(label, peers, arbiter paths, key) of SwiGLU from one concatenated gate/up weight (a fused ``gate_up_proj``
    ``Linear`` weight ``[2 hidden, d]``)."""
    from arbiter.regions import Gated

    g = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, d, generator=g)
    w = torch.randn(2 * hidden, d, generator=g) / d ** 0.5
    w_gate, w_up = w[:hidden].T, w[hidden:].T

    def fused_linear():  # the model's own code on its fused weight: one GEMM, then silu and the product
        gate, up = torch.nn.functional.linear(x, w).chunk(2, -1)
        return torch.nn.functional.silu(gate) * up

    def two_gemms():  # Hugging Face llama's LlamaMLP (gate_proj and up_proj apart)
        return torch.nn.functional.silu(x @ w_gate) * (x @ w_up)

    xn, wn = x.numpy(), w.numpy()
    want = fused_linear()
    torch.testing.assert_close(at.gated(x, w_gate, w_up), want, rtol=1e-4, atol=1e-4)  # (tunes the key)
    region = Gated(xn, wn[:hidden].T, wn[hidden:].T)
    np.testing.assert_allclose(arbiter.run_arbitrated("gated", region), want.numpy(), rtol=1e-4, atol=1e-4)
    return (f"gated [{tokens}, {d}] x [{d}, 2x{hidden}] concatenated", {"torch eager (fused Linear)": fused_linear,
                                                                       "torch eager (two GEMMs)": two_gemms},
            {"arbiter.torch": lambda: at.gated(x, w_gate, w_up),
             "run_arbitrated": lambda: arbiter.run_arbitrated("gated", Gated(xn, wn[:hidden].T, wn[hidden:].T))},
            region.key.id)


def cases(torch, at, ops: list[str], quick: bool):
    if "rope" in ops:
        for seq in (512,) if quick else (512, 2048):
            for permuted in (False, True):
                yield rope_case(torch, at, seq, permuted)
    if "add_rmsnorm" in ops:
        for tokens in (512,) if quick else (512, 2048):
            yield add_rmsnorm_case(torch, at, tokens)
    if "gated" in ops:
        yield gated_case(torch, at, 32, 128, 352) if quick else gated_case(torch, at, 128, 1024, 2816)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ops", default="rope,add_rmsnorm,gated", help="comma-separated: rope, add_rmsnorm, gated")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="2 rounds of 3 calls at the smaller size")
    p.add_argument("--out", default=None, help="also write DIR/fused_cpu.md")
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed (the peer)")
        return 0
    import arbiter.torch as at

    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    rounds, calls = (2, 3) if args.quick else (args.rounds, args.calls)
    rows = ["| op and shape | threads | path | µs per call (p20-p80) | first peer / path | winner |",
            "| --- | --- | --- | --- | --- | --- |"]
    default = torch.get_num_threads()
    for threads in (default, 1) if default > 1 else (1,):
        torch.set_num_threads(threads)
        try:
            import numba

            numba.set_num_threads(threads)
        except ImportError:
            pass
        for label, peers, paths, key in cases(torch, at, ops, args.quick):
            got = _rounds.interleaved({**peers, **paths}, calls, rounds)
            base = got[next(iter(peers))][0]
            winner = winner_of(key)
            rows += [f"| {label} | {threads} | {name} | {med:.0f} ({lo:.0f}-{hi:.0f}) | {base / med:.2f}x | "
                     f"{winner if name in paths else ''} |" for name, (med, lo, hi) in got.items()]
    text = "\n".join(rows) + (f"\n\n{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load "
                              f"{os.getloadavg()[0]:.1f}; torch {torch.__version__}; medians of {rounds} rounds of "
                              f"{calls} calls\n")
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "fused_cpu.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
