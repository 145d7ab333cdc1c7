"""The fused RoPE op kind on the CPU against torch eager's unfused rotation (issue 43 item 2), at llama sizes.

    python benchmarks/rope_cpu.py [--rounds 9] [--calls 20] [--quick] [--out DIR]

q of llama 7B/8B: ``[1, 32, S, 128]`` float32 rotated by ``[S, 128]`` tables, S = 512 and 2048 (8 and 32 MiB), as
torch's contiguous ``[B, H, S, D]`` and as llama's permuted view of ``[B, S, H, D]``. Every path is what a user runs,
timed in interleaved rounds in one process (the median µs per call and its p20-p80 range):

* ``torch eager``: Hugging Face llama's ``x * cos + rotate_half(x) * sin`` (the peer: six kernels);
* ``arbiter.torch``: ``arbiter.torch.OPS["rope"]`` on the same tensors (wrappers and dispatch included);
* ``run_arbitrated``: on NumPy arrays without out= (allocation included).

The registry is a fresh file tuned under ``ARBITER_POLICY=tune`` (the first call of each key gates and times every
solution, as ``arbiter tune`` would); the winner is printed. Ratios are torch eager's median over the path's.
At the default thread count and at one thread (torch and numba both). ``--quick``: 2 rounds of 3 calls at S = 512
(a smoke run; too short to quote)."""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("ARBITER_DB", str(Path(tempfile.mkdtemp()) / "rope.db"))
os.environ.setdefault("ARBITER_POLICY", "tune")

# (the registry and policy are set above, before arbiter is imported)
import numpy as np

import arbiter
from arbiter.ops.rope import Rope, tables


def interleaved(paths: dict, calls: int, rounds: int) -> dict:
    """{name: (median, p20, p80) µs per call}, the paths timed in turn each round after one warm-up round."""
    samples: dict[str, list[float]] = {name: [] for name in paths}
    for r in range(rounds + 1):
        for name, fn in paths.items():
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            if r:
                samples[name].append((time.perf_counter_ns() - t0) / calls / 1000)
    return {name: (float(np.median(s)), float(np.percentile(s, 20)), float(np.percentile(s, 80)))
            for name, s in samples.items()}


def case(torch, at, seq: int, permuted: bool, calls: int, rounds: int) -> list[str]:
    from arbiter.ops.rope.torch_ref import ref_rope

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, seq, 32, 128, generator=g).transpose(1, 2) if permuted else torch.randn(1, 32, seq, 128,
                                                                                                  generator=g)
    cos, sin = (torch.from_numpy(t.astype(np.float32)) for t in tables(seq, 128))
    xn, cn, sn = q.numpy(), cos.numpy(), sin.numpy()
    want = ref_rope(q, cos, sin)
    torch.testing.assert_close(at.OPS["rope"](q, cos, sin), want, rtol=1e-5, atol=1e-5)  # tunes the key
    np.testing.assert_allclose(arbiter.run_arbitrated("rope", Rope(xn, cn, sn)), want.numpy(), rtol=1e-5, atol=1e-5)
    key = Rope(xn, cn, sn).key.id
    winner = next((s["solution"] for s in arbiter.stats() if s["key"] == key and s["installed"]), "?")
    paths = {"torch eager": lambda: ref_rope(q, cos, sin),
             "arbiter.torch": lambda: at.OPS["rope"](q, cos, sin),
             "run_arbitrated": lambda: arbiter.run_arbitrated("rope", Rope(xn, cn, sn))}
    got = interleaved(paths, calls, rounds)
    base = got["torch eager"][0]
    shape = f"[1, 32, {seq}, 128]" + (" permuted" if permuted else "")
    return [f"| {shape} | {torch.get_num_threads()} | {name} | {med:.0f} ({lo:.0f}-{hi:.0f}) | {base / med:.2f}x | "
            f"{winner if name != 'torch eager' else ''} |" for name, (med, lo, hi) in got.items()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="2 rounds of 3 calls at S = 512")
    p.add_argument("--out", default=None, help="also write DIR/rope_cpu.md")
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed (the peer)")
        return 0
    import arbiter.torch as at

    rounds, calls = (2, 3) if args.quick else (args.rounds, args.calls)
    seqs = (512,) if args.quick else (512, 2048)
    rows = ["| q | threads | path | µs per call (p20-p80) | torch eager / path | winner |",
            "| --- | --- | --- | --- | --- | --- |"]
    default = torch.get_num_threads()
    for threads in (default, 1) if default > 1 else (1,):
        torch.set_num_threads(threads)
        try:
            import numba

            numba.set_num_threads(threads)
        except ImportError:
            pass
        for seq in seqs:
            for permuted in (False, True):
                rows += case(torch, at, seq, permuted, calls, rounds)
    text = "\n".join(rows) + (f"\n\n{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load "
                              f"{os.getloadavg()[0]:.1f}; torch {torch.__version__}; medians of {rounds} rounds of "
                              f"{calls} calls\n")
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "rope_cpu.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
