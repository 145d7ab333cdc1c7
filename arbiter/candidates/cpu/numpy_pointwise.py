"""Vendor pointwise chains on the CPU: one NumPy ufunc pass per step, in place on one working buffer.

A float32 chain is worked in the output itself, in float32 (NumPy's SIMD loops: float64 ``exp`` is 4x slower),
and checked once at the end: a chain that overflowed in an intermediate where the float64 oracle does not
(``mul`` by a large value, then ``silu``: ``-inf / inf = NaN`` where the oracle gives -0; the gate's ``huge``
family probes it) leaves a non-finite value, and only then is it worked again in float64 and rounded once, as
the oracle computes. The functions of a chain tend to their limits at infinity (tanh, sigmoid, exp of a negative,
relu, max, min), so an intermediate overflow that ends finite ends at the oracle's value. Half precision is always
worked in float64 (per-step rounding in float16 is far over its budget).
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Candidate, Tier, register
from arbiter.candidates.cpu._common import SQRT_2_OVER_PI


# exp(-v) overflows to inf for very negative v, and sigmoid and silu are then 0, as they should be: ``run`` works
# the whole chain under one np.errstate (1.6 us each: per step it cost more than a 4096-element chain).
def _sigmoid(v):
    np.negative(v, out=v)
    np.exp(v, out=v)
    v += 1.0
    np.reciprocal(v, out=v)


def _silu(v):
    s = np.negative(v)  # one scratch buffer: v / (1 + exp(-v))
    np.exp(s, out=s)
    s += 1.0
    np.divide(v, s, out=v)


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
        with np.errstate(over="ignore", invalid="ignore"):
            if out.dtype == np.float32:
                _chain(out, region)
                if np.isfinite(out).all():
                    return out
            v = out if out.dtype == np.float64 else np.empty(out.shape, np.float64)
            _chain(v, region)
        if v is not out:
            np.copyto(out, v, casting="same_kind")
        return out


def _chain(v, region) -> None:
    """``region``'s chain worked in ``v`` (x copied in, then one in-place pass per step)."""
    np.copyto(v, region.x, casting="unsafe")
    for name, operand in region.ops:
        if operand is None:
            UNARY[name](v)
        else:
            BINARY[name](v, operand, out=v, casting="unsafe")


register(NumpyPointwise())
