"""Vendor layernorm on the CPU: composed NumPy passes (mean, centred variance, scale, weight, bias)."""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Candidate, Tier, register
from arbiter.candidates.cpu._common import accumulate_dtype


class NumpyLayerNorm(Candidate):
    name = "numpy_layernorm"
    target = "cpu"
    op = "layernorm"
    tier = Tier.HAND_TUNED

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x.astype(accumulate_dtype(out.dtype), copy=False)
        centred = x - x.mean(axis=-1, keepdims=True)
        inv = 1.0 / np.sqrt(np.mean(np.square(centred), axis=-1, keepdims=True) + region.eps)
        centred *= inv
        centred *= region.weight
        if region.bias is not None:
            centred += region.bias
        np.copyto(out, centred, casting="same_kind")
        return out


register(NumpyLayerNorm())
