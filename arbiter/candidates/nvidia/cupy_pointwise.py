"""Composed pointwise chains on NVIDIA: one CuPy ufunc pass per step, in place on one working
buffer (float32 for half types, rounded once into out)."""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, cupy

SQRT_2_OVER_PI = 0.7978845608028654


def _unary(cp, name, v):
    if name == "neg":
        cp.negative(v, out=v)
    elif name == "abs":
        cp.abs(v, out=v)
    elif name == "relu":
        cp.maximum(v, 0, out=v)
    elif name == "exp":
        cp.exp(v, out=v)
    elif name == "tanh":
        cp.tanh(v, out=v)
    elif name == "sigmoid":
        v[...] = 1.0 / (1.0 + cp.exp(-v))
    elif name == "silu":
        v *= 1.0 / (1.0 + cp.exp(-v))
    elif name == "gelu_tanh":
        v *= 0.5 * (1.0 + cp.tanh(SQRT_2_OVER_PI * (v + 0.044715 * v * v * v)))
    else:  # square
        cp.square(v, out=v)


class CupyPointwise(NvidiaCandidate):
    name = "cupy_pointwise"
    op = "pointwise"
    tier = Tier.COMPOSED  # generic CuPy passes: the reference of last resort, not a vendor kernel
    priority = 10

    def run(self, region, params):
        cp = cupy()
        out = region.alloc_out()
        half = out.dtype != np.float32 and out.dtype != np.float64
        v = cp.empty(out.shape, np.float32) if half else out
        v[...] = region.x
        binary = {"add": cp.add, "sub": cp.subtract, "mul": cp.multiply, "max": cp.maximum, "min": cp.minimum}
        for name, operand in region.ops:
            if operand is None:
                _unary(cp, name, v)
            elif isinstance(operand, float):
                binary[name](v, np.float32(operand) if v.dtype == np.float32 else operand, out=v)
            else:
                binary[name](v, operand, out=v)
        if v is not out:
            out[...] = v
        return out


register(CupyPointwise())
