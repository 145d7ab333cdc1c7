"""Vendor RMSNorm on the CPU: composed NumPy passes (mean of squares, scale, weight)."""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Candidate, Tier, register
from arbiter.candidates.cpu._common import accumulate_dtype


class NumpyRMSNorm(Candidate):
    name = "numpy_rmsnorm"
    target = "cpu"
    op = "rmsnorm"
    tier = Tier.HAND_TUNED

    def run(self, region, params):
        out = region.alloc_out()
        acc = accumulate_dtype(out.dtype)
        x = region.x.astype(acc, copy=False)
        scale = 1.0 / np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + region.eps)
        np.multiply(x * scale, region.weight, out=out, casting="same_kind")
        return out


register(NumpyRMSNorm())
