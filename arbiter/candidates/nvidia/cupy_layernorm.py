"""Composed LayerNorm on NVIDIA: CuPy passes (mean, centred variance, scale, weight, bias),
float32 for half types, rounded once into out."""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, cupy


class CupyLayerNorm(NvidiaCandidate):
    name = "cupy_layernorm"
    op = "layernorm"
    tier = Tier.COMPOSED  # generic CuPy passes: the reference of last resort, not a vendor kernel
    priority = 10

    def run(self, region, params):
        cp = cupy()
        out = region.alloc_out()
        x, w, b = region.x, region.weight, region.bias
        if x.dtype != np.float32 and x.dtype != np.float64:
            x, w = x.astype(np.float32), w.astype(np.float32)
            b = None if b is None else b.astype(np.float32)
        centred = x - x.mean(axis=-1, keepdims=True)
        y = centred * (1.0 / cp.sqrt(cp.mean(centred * centred, axis=-1, keepdims=True) + region.eps)) * w
        if b is not None:
            y += b
        out[...] = y
        return out


register(CupyLayerNorm())
