"""Composed LayerNorm on NVIDIA: CuPy passes (shift, mean, centred variance, scale, weight, bias),
float32 for half types, rounded once into out.

The statistics are shifted by each row's first element, as the CPU layernorms': ``x - x[..., :1]`` is exact
wherever the row is near its first element (Sterbenz), so a constant row centres to exactly 0 and its answer is
exactly the bias. Without the shift the float32 mean of a constant row at a non-integer value (131.325) misses the
constant by a few ulps, and ``(x - mean) / sqrt(eps)`` magnifies the miss (issue 38 item 1; the gate's
eps_dominated rows)."""
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
        centred = x - x[..., :1]  # a new array (x, the caller's, is never written)
        centred -= centred.mean(axis=-1, keepdims=True)
        centred *= 1.0 / cp.sqrt(cp.mean(centred * centred, axis=-1, keepdims=True) + region.eps)
        # float32 and float64: the last pass writes out directly (x is not read again, so out may be x), which pays
        # for the shift's pass; half types round once into out from float32
        last = out if out.dtype == centred.dtype else centred
        if b is None:
            cp.multiply(centred, w, out=last)
        else:
            centred *= w
            cp.add(centred, b, out=last)
        if last is not out:
            out[...] = last
        return out


register(CupyLayerNorm())
