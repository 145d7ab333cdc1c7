"""Oracle for ``layernorm`` over the last axis in float64 (two-pass mean and biased variance)."""
from __future__ import annotations

import numpy as np

from arbiter.oracles import host64


def oracle(region) -> np.ndarray:
    x = host64(region, region.x)
    centred = x - x.mean(axis=-1, keepdims=True)
    var = np.mean(centred * centred, axis=-1, keepdims=True)
    y = centred / np.sqrt(var + region.eps) * host64(region, region.weight)
    if region.bias is not None:
        y = y + host64(region, region.bias)
    return y
