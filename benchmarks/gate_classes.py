"""The wrong-kernel classes of issue 15 against the gate: which are served, and the reason each is rejected.

    python benchmarks/gate_classes.py [--quick] [--out DIR]

Each wrong candidate (``tests/wrong_candidates.py``) is verified at a key where the old gate served it;
the verdict and its reason are printed as the gate gives them. Two classes are decisions rather than
single verdicts: verdict identity (a candidate re-registered with identical source and a 2x scale bug in a
captured constant) and declared looser accuracy without the caller's consent. Only public API is used, so
the script runs against older versions of the package too (to show what they served). The whole run takes
seconds, so ``--quick`` (taken by every benchmark) runs it unchanged; ``--out DIR``: the lines are also written to
``DIR/gate_classes.md``.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import arbiter
import wrong_candidates as W
from arbiter.regions import Attention, LayerNorm, Matmul, Pointwise, RMSNorm, Softmax
from arbiter.verify import verify

ATTN = {"batch": 1, "heads": 2, "q": 32, "k": 32, "d": 16}
CASES = [
    ("memoized output", W.Memoized, lambda: Softmax.random("cpu", "float32", {"rows": 20, "cols": 40})),
    ("benign only: softmax without max-subtraction", W.SoftmaxNoMax,
     lambda: Softmax.random("cpu", "float32", {"rows": 20, "cols": 40})),
    ("benign only: attention without max-subtraction", W.AttentionNoMax,
     lambda: Attention.random("cpu", "float32", ATTN)),
    ("benign only: rmsnorm ignoring eps", W.RMSNormNoEps,
     lambda: RMSNorm.random("cpu", "float32", {"rows": 16, "cols": 64})),
    ("benign only: layernorm ignoring eps", W.LayerNormNoEps,
     lambda: LayerNorm.random("cpu", "float32", {"rows": 16, "cols": 64})),
    ("benign only: one-pass variance (+300 offset)", W.LayerNormOnePass,
     lambda: LayerNorm.random("cpu", "float32", {"rows": 16, "cols": 256})),
    ("hard-coded scalar: eps = 1e-6", W.RMSNormFixedEps,
     lambda: RMSNorm.random("cpu", "float32", {"rows": 16, "cols": 64}, eps=1e-6)),
    ("hard-coded scalar: attention scale 1/sqrt(d)", W.AttentionFixedScale,
     lambda: Attention.random("cpu", "float32", ATTN)),
    ("hard-coded scalar: pointwise add 1.5", W.PointwiseFixedScalar,
     lambda: Pointwise.random("cpu", "float32", {"size": 500}, {"chain": "add[s]"}, scalars=[1.5])),
    ("corners: square-only GEMM (first call square)", W.SquareOnly,
     lambda: Matmul.random("cpu", "float32", {"m": 64, "n": 64, "k": 64})),
    ("corners: assumes seq_q == seq_k", W.SameLengths, lambda: Attention.random("cpu", "float32", ATTN)),
    ("corners: causal mask at the bottom-right corner", W.BottomRightCausal,
     lambda: Attention.random("cpu", "float32", ATTN, {"causal": "1"})),
    ("layouts: packed rows assumed at unit inner stride", W.AssumesDenseRows,
     lambda: Softmax.random("cpu", "float32", {"rows": 20, "cols": 40}, layout="P")),
    ("input clobbering: relu in place on x", W.ReluInPlace,
     lambda: Pointwise.random("cpu", "float32", {"size": 500}, {"chain": "relu"})),
    ("looser contract without consent: bf16 GEMM", W.Bf16Matmul,
     lambda: Matmul.random("cpu", "float32", {"m": 32, "n": 32, "k": 32})),
    ("correct: bf16x3 split GEMM", W.Bf16x3, lambda: Matmul.random("cpu", "float32", {"m": 48, "n": 40, "k": 300})),
    ("correct: one level of Strassen", W.StrassenOnce,
     lambda: Matmul.random("cpu", "float32", {"m": 48, "n": 40, "k": 70})),
    ("correct: softmax summed in another order", W.ReversedSoftmax,
     lambda: Softmax.random("cpu", "float32", {"rows": 20, "cols": 300})),
]


def _scaled(scale):
    def scaled_matmul(region):
        out = region.alloc_out()
        np.matmul(region.a, region.b, out=out)
        out *= scale
        return out
    return scaled_matmul


def identity_case() -> str:
    """Register scaled(1.0), decide a key, re-register scaled(2.0) (identical source) and decide again."""
    region = Matmul.random("cpu", "float32", {"m": 24, "n": 24, "k": 24})
    arbiter.candidate(op="matmul", name="scaled_vi", priority=100)(_scaled(1.0))
    arbiter.arbitrate("matmul", region)
    arbiter.candidate(op="matmul", name="scaled_vi", priority=100)(_scaled(2.0))
    try:
        decision = arbiter.arbitrate("matmul", region)
    except arbiter.NoCandidateError as exc:
        return f"rejected: {str(exc).splitlines()[0][:160]}"
    row = next(r for r in decision.rows if r.candidate.name == "scaled_vi")
    if decision.winner is row:
        out = arbiter.run_arbitrated("matmul", region)
        err = float(np.linalg.norm(out - region.a @ region.b) / np.linalg.norm(region.a @ region.b))
        return f"SERVED (cached verdict reused), relative error {err:.2f}"
    return f"rejected: {row.status} {row.reason}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the same run (it takes seconds); for a uniform smoke test")
    ap.add_argument("--out", help="also write the lines to DIR/gate_classes.md")
    args = ap.parse_args()
    lines = [f"kernel-arbiter {arbiter.__version__}; gate in {os.path.dirname(arbiter.__file__)}"]
    print(lines[-1], flush=True)
    for label, cls, region in CASES:
        v = verify(cls(), {}, region())
        lines.append(f"{label:<50} {'SERVED' if v.passed else 'rejected'}: "
                     f"{v.reason or '(passed ' + str(len(v.probes)) + ' probes)'}")
        print(lines[-1], flush=True)
    lines.append(f"{'verdict identity: 2x scale in a captured constant':<50} {identity_case()}")
    print(lines[-1], flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "gate_classes.md").write_text("```\n" + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
