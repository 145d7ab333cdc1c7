"""An isolated child's timing against the in-process timing of the same solution (issue 40 item 7): the child is
kept between solutions and warmed before it times, so what it measures is what the caller's process would.

    python benchmarks/isolate_warm.py [--quick] [--out DIR]

Prints, per shape, the in-process median, the isolated child's median, and their ratio (1.0 = the same).
``--quick``: one alternation per case instead of three; ``--out DIR``: also write ``DIR/isolate_warm.md``."""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from arbiter.candidates import REGISTRY
from arbiter.isolate import Isolated
from arbiter.regions import LayerNorm, Matmul, Softmax
from arbiter.timing import measure

rng = np.random.default_rng(0)
f32 = np.float32
CASES = [
    ("torch_softmax", "softmax", "softmax 64x1000", Softmax(rng.standard_normal((64, 1000)).astype(f32))),
    ("numpy_matmul", "matmul", "matmul 256x256x256",
     Matmul(rng.standard_normal((256, 256)).astype(f32), rng.standard_normal((256, 256)).astype(f32))),
    ("numpy_layernorm", "layernorm", "layernorm 1024x1024",
     LayerNorm(rng.standard_normal((1024, 1024)).astype(f32), np.ones(1024, f32), np.zeros(1024, f32))),
]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="one alternation per case")
    p.add_argument("--out", default=None, help="also write DIR/isolate_warm.md")
    args = p.parse_args(argv)
    child = Isolated(timeout_s=300)
    rows = ["| case | solution | in process µs | isolated µs | ratio |", "| --- | --- | --- | --- | --- |"]
    print(f"{'case':24} {'solution':16} {'in process µs':>14} {'isolated µs':>12} {'ratio':>6}")
    try:
        for name, op, label, region in CASES:
            cand = REGISTRY.get(name, "cpu", op)
            if cand is None:  # torch not installed: its candidate is not registered
                continue
            here, there = [], []
            # alternated, each side after the other's BLAS threads stopped spinning (~0.1 s)
            for _ in range(1 if args.quick else 3):
                here.append(measure(cand, {}, region, time_cap_s=0.5).median_s)
                time.sleep(0.3)
                there.append(child.measure(cand, {}, region, time_cap_s=0.5).median_s)
                time.sleep(0.3)
            a, b = float(np.median(here)), float(np.median(there))
            print(f"{label:24} {name:16} {a * 1e6:14.1f} {b * 1e6:12.1f} {b / a:6.2f}")
            rows.append(f"| {label} | {name} | {a * 1e6:.1f} | {b * 1e6:.1f} | {b / a:.2f} |")
    finally:
        child.close()
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "isolate_warm.md"), "w") as f:
            f.write("# An isolated child's timing against the same solution in process (issue 40 item 7)\n\n"
                    + "\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
