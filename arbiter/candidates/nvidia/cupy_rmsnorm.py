"""Composed RMSNorm on NVIDIA: CuPy passes (mean of squares, scale, weight), float32 for half types."""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, cupy


class CupyRMSNorm(NvidiaCandidate):
    name = "cupy_rmsnorm"
    op = "rmsnorm"
    tier = Tier.COMPOSED  # generic CuPy passes: the reference of last resort, not a vendor kernel
    priority = 10

    def run(self, region, params):
        cp = cupy()
        out = region.alloc_out()
        x, w = region.x, region.weight
        if x.dtype != np.float32 and x.dtype != np.float64:
            x, w = x.astype(np.float32), w.astype(np.float32)
        scale = 1.0 / cp.sqrt(cp.mean(x * x, axis=-1, keepdims=True) + region.eps)
        out[...] = x * scale * w
        return out


register(CupyRMSNorm())
