"""The gate's golden verdicts (issue 27 item 2): what ``arbiter.gate.GATE_RULES_VERSION`` stands for.

Each case gates one candidate (the NumPy built-ins, which every install has, and the known-wrong and correct
alternatives of ``tests/wrong_candidates.py``) at one small key on a fixed gate seed (``ARBITER_GATE_SEED``),
and records the verdict's outcome, reason, probes run, budget and rounded errors; plus the published budget
table. ``tests/test_gate_version.py`` fails when these change while the version stays: a change to the gate's
behaviour must bump the version (so every stored verdict is taken again), and then the file is regenerated:

    PYTHONPATH=. python tests/gate_golden.py --write

(from the repository root; it writes ``tests/gate_golden.json``).
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "gate_golden.json"
SEED = 20251203
DTYPES = ("float32", "float64", "float16", "bfloat16", "complex64", "complex128")


def _regions():
    from arbiter.regions import FFT, Attention, Gated, LayerNorm, Matmul, Pointwise, RMSNorm, Softmax

    # the region's own data never reaches the gate (it draws fresh probes): only its key, dims and scalars
    return {
        "matmul": lambda: Matmul.random("cpu", "float32", {"m": 24, "n": 40, "k": 56},
                                        {"activation": "silu", "bias": "1", "residual": "1"}),
        "matmul_square": lambda: Matmul.random("cpu", "float32", {"m": 64, "n": 64, "k": 64}),
        "softmax": lambda: Softmax.random("cpu", "float32", {"rows": 20, "cols": 40}),
        "softmax_strided": lambda: Softmax.random("cpu", "float32", {"rows": 20, "cols": 40}, layout="S"),
        "rmsnorm": lambda: RMSNorm.random("cpu", "float32", {"rows": 16, "cols": 64}, eps=1e-6),
        "layernorm": lambda: LayerNorm.random("cpu", "float32", {"rows": 16, "cols": 256}),
        "attention": lambda: Attention.random("cpu", "float32", {"batch": 1, "heads": 2, "q": 16, "k": 16, "d": 16}),
        "attention_causal": lambda: Attention.random("cpu", "float32", {"batch": 1, "heads": 2, "q": 32, "k": 32,
                                                                        "d": 16}, {"causal": "1"}),
        "fft": lambda: FFT.random("cpu", "complex64", {"batch": 4, "n": 96}, {"kind": "c2c"}),
        "gated": lambda: Gated.random("cpu", "float32", {"m": 16, "n": 32, "k": 24}),
        "pointwise": lambda: Pointwise.random("cpu", "float32", {"size": 500}, {"chain": "add[s]"}, scalars=[1.5]),
        "pointwise_relu": lambda: Pointwise.random("cpu", "float32", {"size": 500}, {"chain": "relu"}),
    }


def cases():
    """[(case id, candidate, region factory)]: every NumPy built-in at its op's keys, then the wrong and correct
    alternatives of ``wrong_candidates`` at the key that exposes each."""
    sys.path.insert(0, str(HERE))
    import wrong_candidates as w
    from arbiter.candidates import REGISTRY

    regions = _regions()
    found = []
    for rid, make in regions.items():
        op = rid.split("_")[0]
        for cand in REGISTRY.candidates("cpu", op):
            if cand.name.startswith("numpy_"):
                found.append((f"{cand.name}@{rid}", cand, make))
    for cls, rid in [(w.Memoized, "softmax"), (w.SoftmaxNoMax, "softmax"), (w.AttentionNoMax, "attention"),
                     (w.RMSNormNoEps, "rmsnorm"), (w.LayerNormNoEps, "layernorm"), (w.LayerNormOnePass, "layernorm"),
                     (w.LayerNormUnshiftedMean, "layernorm"),
                     (w.RMSNormFixedEps, "rmsnorm"), (w.AttentionFixedScale, "attention"),
                     (w.PointwiseFixedScalar, "pointwise"), (w.SquareOnly, "matmul_square"),
                     (w.AssumesDenseRows, "softmax_strided"), (w.SameLengths, "attention_causal"),
                     (w.BottomRightCausal, "attention_causal"), (w.ReluInPlace, "pointwise_relu"),
                     (w.Bf16Matmul, "matmul_square"), (w.StrassenOnce, "matmul_square"),
                     (w.ReversedSoftmax, "softmax")]:
        cand = cls()
        found.append((f"{cand.name}@{rid}", cand, regions[rid]))
    return found


def _rounded(x: float) -> str:
    """An error to one significant digit: what the gate decided on, not the BLAS's last bits."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan"
    return "0" if x == 0 else f"{x:.0e}"


_NUMBER = re.compile(r"-?\d+\.\d+(?:e[+-]?\d+)?|-?\d+e[+-]?\d+")


def _reason(text: str) -> str:
    """A verdict's reason with every decimal number to one significant digit (indices, counts and seeds stay)."""
    return _NUMBER.sub(lambda m: f"{float(m.group()):.0e}", text)


def current() -> dict:
    """The golden record as the gate behaves now."""
    from arbiter.gate import GATE_RULES_VERSION
    from arbiter.ops import OPS
    from arbiter.oracles.budgets import budget_for
    from arbiter.verify import verify

    before = os.environ.get("ARBITER_GATE_SEED")
    os.environ["ARBITER_GATE_SEED"] = str(SEED)
    try:
        verdicts = {}
        for cid, cand, make in cases():
            v = verify(cand, cand.param_space()[0], make())
            verdicts[cid] = {"passed": v.passed, "reason": _reason(v.reason), "probes": list(v.probes),
                             "budget": [v.budget.rel_fro, v.budget.atol, v.budget.rtol],
                             # a pass's error is the BLAS's last bits; a failure's is what the gate decided on
                             "rel_error": "" if v.passed else _rounded(v.rel_error),
                             "max_excess": "" if v.passed else _rounded(v.max_excess)}
    finally:
        if before is None:
            del os.environ["ARBITER_GATE_SEED"]
        else:
            os.environ["ARBITER_GATE_SEED"] = before
    budgets = {f"{op} {dt}": [b.rel_fro, b.atol, b.rtol] for op in sorted(OPS) for dt in DTYPES
               for b in [budget_for(op, dt)]}
    return {"version": GATE_RULES_VERSION, "seed": SEED, "budgets": budgets, "verdicts": verdicts}


def main(argv):
    record = current()
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    if "--write" in argv:
        GOLDEN.write_text(text)
        print(f"wrote {GOLDEN}: gate rules version {record['version']}, {len(record['verdicts'])} verdicts")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
