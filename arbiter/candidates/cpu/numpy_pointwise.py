"""Vendor pointwise chains on the CPU: one NumPy ufunc pass per step, in place on one working buffer.

Every float type is worked in one float64 buffer and rounded once at the end, as the oracle computes: a float32
chain overflows in an intermediate where the oracle does not (``mul`` by a large value, then ``silu``: ``-inf / inf
= NaN`` where the oracle gives -0; the gate's ``huge`` family probes it).
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Candidate, Tier, register
from arbiter.candidates.cpu._common import SQRT_2_OVER_PI


# exp(-v) overflows to inf for very negative v, and sigmoid and silu are then 0, as they should be: no warning.
@np.errstate(over="ignore")
def _sigmoid(v):
    np.negative(v, out=v)
    with np.errstate(over="ignore"):  # exp -> inf for v << 0 gives 1 / inf = 0, the right value
        np.exp(v, out=v)
    v += 1.0
    np.reciprocal(v, out=v)


@np.errstate(over="ignore")
def _silu(v):
    with np.errstate(over="ignore"):  # as in _sigmoid
        v *= 1.0 / (1.0 + np.exp(-v))


def _gelu_tanh(v):
    v *= 0.5 * (1.0 + np.tanh(SQRT_2_OVER_PI * (v + 0.044715 * v * v * v)))


UNARY = {
    "neg": lambda v: np.negative(v, out=v),
    "abs": lambda v: np.abs(v, out=v),
    "relu": lambda v: np.maximum(v, 0, out=v),
    "exp": lambda v: np.exp(v, out=v),
    "tanh": lambda v: np.tanh(v, out=v),
    "sigmoid": _sigmoid,
    "silu": _silu,
    "gelu_tanh": _gelu_tanh,
    "square": lambda v: np.square(v, out=v),
}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


class NumpyPointwise(Candidate):
    name = "numpy_pointwise"
    target = "cpu"
    op = "pointwise"
    tier = Tier.HAND_TUNED

    def run(self, region, params):
        out = region.alloc_out()
        v = out if out.dtype == np.float64 else np.empty(out.shape, np.float64)
        np.copyto(v, region.x, casting="unsafe")
        for name, operand in region.ops:
            if operand is None:
                UNARY[name](v)
            else:
                BINARY[name](v, operand, out=v, casting="unsafe")
        if v is not out:
            np.copyto(out, v, casting="same_kind")
        return out


register(NumpyPointwise())
