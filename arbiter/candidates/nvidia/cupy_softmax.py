"""Composed softmax on NVIDIA: CuPy passes (max, subtract+exp, sum, divide), float32 for half types."""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, cupy


class CupySoftmax(NvidiaCandidate):
    name = "cupy_softmax"
    op = "softmax"
    tier = Tier.COMPOSED  # generic CuPy passes: the reference of last resort, not a vendor kernel
    priority = 10

    def run(self, region, params):
        cp = cupy()
        out = region.alloc_out()
        x, axis = region.x, region.axis
        if x.dtype != np.float32 and x.dtype != np.float64:
            x = x.astype(np.float32)
        e = cp.exp(x - x.max(axis=axis, keepdims=True))
        e /= e.sum(axis=axis, keepdims=True)
        out[...] = e
        return out


register(CupySoftmax())
