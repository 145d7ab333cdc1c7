"""Vendor softmax on the CPU: composed NumPy passes (max, subtract+exp, sum, divide)."""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Candidate, Tier, register
from arbiter.candidates.cpu._common import accumulate_dtype


class NumpySoftmax(Candidate):
    name = "numpy_softmax"
    target = "cpu"
    op = "softmax"
    tier = Tier.HAND_TUNED

    def run(self, region, params):
        out = region.alloc_out()
        if out.size == 0:  # an empty axis or batch: nothing to normalise (max of nothing is undefined)
            return out
        x, axis = region.x, region.axis
        np.subtract(x, x.max(axis=axis, keepdims=True), out=out)
        np.exp(out, out=out)
        out /= out.sum(axis=axis, keepdims=True, dtype=accumulate_dtype(out.dtype))
        return out


register(NumpySoftmax())
