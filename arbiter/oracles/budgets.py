"""The published error budget per (op, dtype).

A candidate's output ``y`` passes against the float64 oracle ``ref`` when

* the relative Frobenius error ``||y - ref|| / ||ref||`` is at most ``rel_fro``, and
* every element satisfies ``|y - ref| <= atol * rms(ref) + rtol * |ref|``
  (``atol`` is scaled by the RMS of the reference so one budget serves data of any magnitude), and
* ``y`` is finite wherever ``ref`` is.

The table is ``docs/budgets.md``; keep the two in step (a test compares them).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Budget:
    rel_fro: float
    atol: float
    rtol: float

    def looser_than(self, other: "Budget") -> bool:
        return self.rel_fro > other.rel_fro or self.atol > other.atol or self.rtol > other.rtol


# Defaults by dtype. float32 work lands near 1e-7; the budget leaves room for long
# reductions (K = 8192 sums) but stays far under TF32's ~3e-4.
DTYPE_BUDGETS: dict[str, Budget] = {
    "float64": Budget(rel_fro=1e-12, atol=1e-11, rtol=1e-11),
    "float32": Budget(rel_fro=1e-5, atol=1e-4, rtol=1e-4),
    "float16": Budget(rel_fro=5e-3, atol=1e-2, rtol=1e-2),
    "bfloat16": Budget(rel_fro=2e-2, atol=5e-2, rtol=5e-2),
}

# Per-op overrides, where an op's arithmetic needs it.
OP_BUDGETS: dict[tuple[str, str], Budget] = {
    # exp() of fp16 inputs and an fp16 output: unit roundoff 4.9e-4 on values in (0, 1].
    ("softmax", "float16"): Budget(rel_fro=5e-3, atol=1e-2, rtol=1e-2),
}


def budget_for(op: str, dtype: str) -> Budget:
    return OP_BUDGETS.get((op, dtype)) or DTYPE_BUDGETS[dtype]
