"""What the product ops (matmul, gated) share: probe families on the left operand, the report's work model."""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from arbiter.ops.family import Family, row_offsets

WORK_TEXT = "2·m·n·k FLOP"


def work(dims: dict, dtype: str) -> tuple[float, str] | None:
    if {"m", "n", "k"} <= dims.keys():
        return 2.0 * dims["m"] * dims["n"] * dims["k"], "FLOP"
    return None


def mixed_rows(op: str, left: Callable) -> Family:
    def apply(region, rng):
        """Rows of the left operand scaled by 10^U(-3, 3), some exactly zero: magnitudes and signs mixed."""
        a = left(region)
        rows = a.shape[0]
        scale = 10.0 ** rng.uniform(-3, 3, rows)
        scale *= np.where(rng.random(rows) < 0.5, -1.0, 1.0)
        scale[rng.random(rows) < 0.1] = 0.0
        if region.dtype in ("float16", "bfloat16"):
            scale = np.clip(scale, -8.0, 8.0)  # stays far from half precision's range
        a *= row_offsets(region, scale)

    return Family("mixed_rows", (op,), "rows of the left operand scaled by +-10^U(-3,3), 10% exactly zero", apply)


TINY = {"float16": 2.0 ** -6, "bfloat16": 1e-18, "float32": 1e-18, "float64": 1e-150}


def tiny(op: str, left: Callable, quadratic: bool = False) -> Family:
    """``quadratic``: the output is a product of two projections of the left operand (gated), so the factor is the
    square root of the linear one: with the full one it would fall to the denormals that GPUs flush to zero."""
    def apply(region, rng):
        """Small but normal values (outputs ~1e-3 of the dtype's normal range above its smallest normal)."""
        a = left(region)
        factor = TINY[region.dtype]
        a *= math.sqrt(factor) if quadratic else factor

    text = ("left operand scaled to 1e-18 (float32), 2^-6 (float16), 1e-150 (float64)"
            + (", the square root of that (the output is quadratic in x)" if quadratic else "")
            + ": outputs small but normal; catches absolute thresholds and flush-to-zero of normal values")
    return Family("tiny", (op,), text, apply)
