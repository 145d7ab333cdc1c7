"""Vendor layernorm on the CPU: composed NumPy passes (shift, mean, centred variance, scale, weight, bias).

The statistics are shifted by each row's first element: ``x - x[0]`` is exact wherever the row is near its first
element (Sterbenz), so a constant row centres to exactly 0 and its answer is exactly the bias. Without the shift
the float32 mean of a constant row at a non-integer value (131.325) misses the constant by a few ulps, and
``(x - mean) / sqrt(eps)`` magnifies the miss ~300-fold: ``bias + 0.015`` (issue 38 item 1).
"""
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
        acc = accumulate_dtype(out.dtype)
        x = region.x.astype(acc, copy=False)
        centred = x - x[..., :1]
        centred -= centred.mean(axis=-1, keepdims=True)
        # x is not read again, so out holds the squares (even where it is x: in place): no temporary the size of
        # x, and the last pass writes out directly; that pays for the shift's extra pass
        squares = np.square(centred, out=out) if out.dtype == acc else np.square(centred)
        inv = 1.0 / np.sqrt(np.mean(squares, axis=-1, keepdims=True) + region.eps)
        centred *= inv
        if region.bias is None:
            np.multiply(centred, region.weight, out=out, casting="same_kind")
        else:
            centred *= region.weight
            np.add(centred, region.bias, out=out, casting="same_kind")
        return out


register(NumpyLayerNorm())
