"""matmul's probe families."""
from __future__ import annotations

import math

import numpy as np

from arbiter.ops import products
from arbiter.ops.family import SMALLEST_NORMAL, Family, poke


def _nonfinite(region, rng):
    """NaN and +Inf bias columns, Inf/NaN residual elements; a NaN row of a under an activation without either."""
    if region.bias is not None:  # a NaN column and a +Inf column through the activation
        n = region.bias.shape[0]
        nan = int(rng.integers(0, n))
        poke(region, region.bias, nan, np.nan)
        if n > 1:  # another column: drawn apart, the Inf overwrote the NaN one gate in n (a NaN-dropping relu passed)
            poke(region, region.bias, (nan + int(rng.integers(1, n))) % n, np.inf)
    if region.residual is not None:  # added after the activation: one element each
        m, n = region.residual.shape
        poke(region, region.residual, (rng.integers(0, m), rng.integers(0, n)), -np.inf)
        poke(region, region.residual, (rng.integers(0, m), rng.integers(0, n)), np.nan)
    if region.bias is None and region.residual is None and region.activation != "none":  # a NaN row of a
        poke(region, region.a, (rng.integers(0, region.a.shape[0]), slice(None)), np.nan)


def _subnormal(region, rng):
    """Subnormal a times b of unit scale (b is drawn 1/sqrt(k)): subnormal outputs."""
    region.a *= SMALLEST_NORMAL[region.dtype] / 8.0
    region.b *= math.sqrt(max(region.b.shape[0], 1))


def _left(region):
    return region.a


FAMILIES = (
    products.mixed_rows("matmul", _left),
    products.tiny("matmul", _left),
    Family("nonfinite", ("matmul",),
           "a NaN and an Inf bias column and Inf/NaN residual elements (with an epilogue; a NaN row of a without one) "
           "where the oracle propagates them; catches relu as fmax(x, 0) and other NaN-dropping shortcuts",
           _nonfinite, special=True),
    Family("subnormal", ("matmul",),
           "a below the smallest normal value, b of unit scale: outputs are subnormal, so a kernel that flushes "
           "them to zero fails",
           _subnormal, special=True),
)
