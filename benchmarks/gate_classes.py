"""The wrong-kernel classes of issues 15 and 25 against the gate: which are served, and the reason each is rejected.

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
_RNG = np.random.default_rng(25)


def _f32(*shape):
    return _RNG.standard_normal(shape).astype(np.float32)


def _in_place_residual():
    r = _f32(40, 24)
    return Matmul(_f32(40, 36), _f32(36, 24) / 6, residual=r, out=r)


def _in_place_softmax():
    x = _f32(20, 100)
    return Softmax(x, out=x)


# Issue 25: the caller's call (layouts, aliasing, special values, plan, large shapes, repeats, scalars).
CASES_25 = [
    ("layouts: W[:, :K].T read as a dense transpose", W.DenseTransposeAssumed,
     lambda: Matmul(_f32(40, 36), _f32(24, 41)[:, :36].T)),
    ("layouts: 3-D rmsnorm rows taken as shape[0]", W.RowsFromFirstAxis, lambda: RMSNorm(_f32(4, 6, 64), _f32(64))),
    ("layouts: strided bias read as packed", W.BiasAssumedContiguous,
     lambda: Matmul(_f32(40, 36), _f32(36, 24) / 6, bias=_f32(48)[::2])),
    ("layouts: stride-0 residual added to row 0 only", W.BroadcastResidualOnce,
     lambda: Matmul(_f32(40, 36), _f32(36, 24) / 6, residual=np.broadcast_to(_f32(24), (40, 24)))),
    ("layouts: misaligned pointer path skips element 0", W.MisalignedPeel,
     lambda: Pointwise(_f32(300), [("relu",)])),
    ("aliasing: out=residual gives 2(a@b)", W.ResidualAddedTwice, _in_place_residual),
    ("aliasing: softmax(x, out=x) re-reads x", W.SoftmaxThreePass, _in_place_softmax),
    ("aliasing: last tile written past the output", W.WritesPastTile,
     lambda: Matmul(_f32(30, 16), _f32(16, 24))),
    ("values: relu as fmax(x, 0) drops NaN", W.ReluFmax, lambda: Pointwise(_f32(300), [("relu",)])),
    ("values: online softmax, masked leading block", W.OnlineSoftmaxNoGuard, lambda: Softmax(_f32(20, 100))),
    ("values: exp saturating above 64", W.FastExpSaturating, lambda: Pointwise(_f32(300), [("exp",)])),
    ("values: subnormals flushed to zero", W.FlushesSubnormals, lambda: Matmul(_f32(32, 32), _f32(32, 32))),
    ("values: zero first/last element = zero row", W.ZeroEndsShortcut, lambda: RMSNorm(_f32(16, 64), _f32(64))),
    ("plan: tiny family at a cap-bound 520^3 key", W.TinyThreshold,
     lambda: Matmul.random("cpu", "float32", {"m": 520, "n": 520, "k": 520})),
    ("plan: K in (768, 1024), K % 128 != 0", W.WrongAboveK768,
     lambda: Matmul(_f32(16, 1024), _f32(1024, 16) / 32)),
    ("large: one wrong 1x8 fragment, gelu 640x640x384", W.OneWrongFragment,
     lambda: Matmul.random("cpu", "float32", {"m": 640, "n": 640, "k": 384}, {"activation": "gelu"})),
    ("repeats: another sum order one call in 8", W.RacySumOrder, lambda: Matmul(_f32(64, 64), _f32(64, 64))),
    ("scalars: scale == 1.0 read as 'not given'", W.ScaleOneMeansDefault,
     lambda: Attention(_f32(1, 2, 16, 16), _f32(1, 2, 16, 16), _f32(1, 2, 16, 16))),
    ("correct: stride-aware GEMM, W[:, :K].T", W.StrideAwareMatmul,
     lambda: Matmul(_f32(40, 36), _f32(24, 41)[:, :36].T)),
    ("correct: stride-aware GEMM, out=residual", W.StrideAwareMatmul, _in_place_residual),
    ("correct: rmsnorm row by row, out=x", W.InPlaceRMSNorm,
     lambda: (lambda x: RMSNorm(x, _f32(64), out=x))(_f32(16, 64))),
    ("correct: Kahan-summed rmsnorm", W.KahanRMSNorm, lambda: RMSNorm(_f32(16, 256), _f32(256))),
    ("correct: online softmax with -inf guards", W.OnlineSoftmaxGuarded, lambda: Softmax(_f32(20, 100))),
    ("correct: racy order, declared nondeterministic", W.RacySumOrderDeclared,
     lambda: Matmul(_f32(64, 64), _f32(64, 64))),
]
# Overlaps of out= with an input that the aliasing contract refuses (docs/architecture.md).
REFUSED = [
    ("aliasing: Matmul(a, b, out=a)", lambda: (lambda a: Matmul(a, _f32(16, 16), out=a))(_f32(16, 16))),
    ("aliasing: RMSNorm(buf, buf[0], out=buf)", lambda: (lambda b: RMSNorm(b, b[0], out=b))(_f32(8, 8))),
    ("aliasing: Softmax(buf[1:], out=buf[:-1])", lambda: (lambda b: Softmax(b[1:], out=b[:-1]))(_f32(9, 8))),
]
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
    ("benign only: unshifted layernorm mean", W.LayerNormUnshiftedMean,
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
    for label, cls, region in CASES + CASES_25:
        try:
            v = verify(cls(), {}, region())
        except arbiter.RegionError as exc:  # a construction this version refuses
            lines.append(f"{label:<50} refused: {exc}")
            print(lines[-1], flush=True)
            continue
        lines.append(f"{label:<50} {'SERVED' if v.passed else 'rejected'}: "
                     f"{v.reason or '(passed ' + str(len(v.probes)) + ' probes)'}")
        print(lines[-1], flush=True)
    for label, build in REFUSED:
        try:
            build()
            lines.append(f"{label:<50} ACCEPTED (computed wrong in place)")
        except arbiter.RegionError as exc:
            lines.append(f"{label:<50} refused: {exc}")
        print(lines[-1], flush=True)
    lines.append(f"{'verdict identity: 2x scale in a captured constant':<50} {identity_case()}")
    print(lines[-1], flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "gate_classes.md").write_text("```\n" + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
