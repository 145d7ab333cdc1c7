"""Oracle for ``layernorm`` over the last axis in float64 (two-pass mean and biased variance).

The row is shifted by its first element before its mean is taken (layernorm is shift-invariant): the shift is exact
where the row is near its first element, so a constant row centres to exactly 0 and its answer is exactly the bias.
Unshifted, the float64 mean of a float64 constant row at a non-integer value misses it by an ulp, and
``(x - mean) / sqrt(eps)`` made the reference itself 3 to 20x the float64 budget off the bias.
"""
from __future__ import annotations

import numpy as np

from arbiter.oracles import host64


def oracle(region) -> np.ndarray:
    x = host64(region, region.x)
    shifted = x - x[..., :1]
    centred = shifted - shifted.mean(axis=-1, keepdims=True)
    var = np.mean(centred * centred, axis=-1, keepdims=True)
    y = centred / np.sqrt(var + region.eps) * host64(region, region.weight)
    if region.bias is not None:
        y = y + host64(region, region.bias)
    return y
