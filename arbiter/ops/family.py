"""The probe family value, and what families share: dtype ranges and writing host values into any target's arrays.

An op kind lists its families (``OpKind.families``); ``arbiter.probes`` gathers them into the catalogue the gate
draws from and ``docs/budgets.md`` publishes.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from arbiter import targets
from arbiter.oracles.budgets import Budget, budget_for

FINFO_MAX = {"float16": 65504.0, "bfloat16": 3.3895e38, "float32": 3.4028e38, "float64": 1.7976e308,
              "complex64": 3.4028e38, "complex128": 1.7976e308}
SMALLEST_NORMAL = {"float16": 2.0 ** -14, "bfloat16": 2.0 ** -126, "float32": 2.0 ** -126, "float64": 2.0 ** -1022}

# The special-value families (nonfinite, masked_blocks, huge, subnormal, zero_ends: ``Family.special``) and the
# gate's one-element pointer shift are probed on the targets that declare their candidates verified against them
# on the device (``Target.special_values_verified``: cpu and nvidia; not rocm, which shares nvidia's templates but
# was never run on an AMD GPU).


def exp_range(dtype: str) -> float:
    """ln(largest finite value): exp(x) overflows ``dtype`` beyond it (88.7 for float32, 11.1 for float16)."""
    return math.log(FINFO_MAX[dtype])


@dataclass(frozen=True)
class Family:
    """One value family: ``apply(region, rng)`` rewrites a fresh probe region's operands in place."""

    name: str
    ops: tuple[str, ...]
    text: str  # what it draws and which corner it catches (published)
    apply: Callable
    # dtype -> Budget for this family, where the maths needs more room than the op's budget; None: the op's.
    budget: Callable | None = None
    budget_text: str = ""
    # A special-value family: probed only on targets with ``special_values_verified`` (see above); else every one.
    special: bool = False

    def budget_for(self, op: str, dtype: str) -> Budget:
        return self.budget(op, dtype) if self.budget is not None else budget_for(op, dtype)


def scaled(b: Budget, f: float) -> Budget:
    """``b`` times ``f``, capped at rel_fro 0.1, atol and rtol 1."""
    return Budget(rel_fro=min(b.rel_fro * f, 1e-1), atol=min(b.atol * f, 1.0), rtol=min(b.rtol * f, 1.0))


def scaled_budget(factor: Callable[[str], float]) -> Callable[[str, str], Budget]:
    """A family budget: the op's budget times ``factor(dtype)`` (``scaled``)."""
    def budget(op: str, dtype: str) -> Budget:
        return scaled(budget_for(op, dtype), factor(dtype))
    return budget


def _benign(region, rng):
    """Standard normal operands as ``Region.random`` draws them (layernorm rows offset by +3)."""


BENIGN = Family("benign", ("*",), "zero-mean unit-variance operands as `Region.random` draws them (normal; uniform "
                "above 2^18 elements, where drawing normals would cost more than the run; layernorm rows offset by +3)",
                _benign)


# --- writing host values into a region's arrays, on any target ----------------------------------------------
def host_array(region, shape, values):
    """``values`` (a host float64 array) as an array of ``region``'s dtype on its target."""
    return targets.get(region.target).from_host(np.asarray(values, dtype=np.float64).reshape(shape), region.dtype)


def row_offsets(region, values):
    """One value per row, as a column that broadcasts over a row-major 2-D operand of ``region``."""
    return targets.get(region.target).from_host(np.asarray(values, dtype=np.float64)[:, None], region.dtype)


def host_rows(region):
    """(host float64 copy of x, its rows-first view): what the row families rewrite before writing back."""
    host = np.asarray(targets.get(region.target).to_host(region.x), dtype=np.float64).copy()
    return host, (host if getattr(region, "axis_last", True) else host.T)


def write_x(region, host):
    region.x[...] = targets.get(region.target).from_host(host, region.dtype)


def poke(region, array, index, value):
    """``array[index] = value`` on any target (a host round trip of one array: probes are small or rare)."""
    host = np.asarray(targets.get(region.target).to_host(array), dtype=np.float64).copy()
    host[index] = value
    array[...] = targets.get(region.target).from_host(host, region.dtype)
