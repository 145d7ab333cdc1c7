"""Vendor RoPE on the CPU: composed NumPy passes. ``out = x * cos``, then each half gets its rotation partner's
term (``-x2 * sin1`` into the first, ``x1 * sin2`` into the second), each through one half-sized temporary: three
passes over x-sized memory where torch eager's concatenated ``rotate_half`` makes six. Half precision: computed in
float32, rounded once."""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Candidate, Tier, register
from arbiter.candidates.cpu._common import accumulate_dtype


class NumpyRope(Candidate):
    name = "numpy_rope"
    target = "cpu"
    op = "rope"
    tier = Tier.HAND_TUNED

    def run(self, region, params):
        out = region.alloc_out()
        acc = accumulate_dtype(out.dtype)
        x, cos, sin = (a.astype(acc, copy=False) for a in (region.x, region.cos, region.sin))
        h = x.shape[-1] // 2
        z = out if acc == out.dtype else np.empty(out.shape, acc)
        np.multiply(x, cos, out=z)
        z[..., :h] -= x[..., h:] * sin[:, :h]
        z[..., h:] += x[..., :h] * sin[:, h:]
        if z is not out:
            out[...] = z
        return out


register(NumpyRope())
