"""Emitted layernorm on the CPU: one fused numba kernel over contiguous rows, parallel across rows.

Per row: a sum pass for the mean, a pass for the centred sum of squares (two-pass: no
cancellation when the mean is large against the spread, unlike ``E[x^2] - E[x]^2``), and one
write pass ``(x - mean) * inv * weight + bias``. The row is read three times but from cache;
NumPy's composed version makes five or more passes and allocates row-sized temporaries.
"""
from __future__ import annotations

import math

from arbiter.candidates import register
from arbiter.candidates.cpu._numba import (
    FASTMATH,
    NumbaKernelCandidate,
    dtype_reason,
    first_reason,
    layout_reason,
    njit,
    prange,
)


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def layernorm_rows(x, weight, bias, out, eps, has_bias):
    """out[r] = (x[r] - mean) / sqrt(var + eps) * weight (+ bias when has_bias) for 2-D C-contiguous x."""
    rows, cols = x.shape
    zero = x.dtype.type(0)
    for r in prange(rows):
        s = zero
        for c in range(cols):
            s += x[r, c]
        mean = s / cols
        ss = zero
        for c in range(cols):
            d = x[r, c] - mean
            ss += d * d
        inv = x.dtype.type(1.0 / math.sqrt(ss / cols + eps))
        if has_bias:
            for c in range(cols):
                out[r, c] = (x[r, c] - mean) * inv * weight[c] + bias[c]
        else:
            for c in range(cols):
                out[r, c] = (x[r, c] - mean) * inv * weight[c]


class NumbaLayerNorm(NumbaKernelCandidate):
    name = "numba_layernorm_fused"
    op = "layernorm"
    kernel = staticmethod(layernorm_rows)

    def applies_to(self, region):
        return first_reason(dtype_reason(region), layout_reason(region, "R", "walks C-contiguous rows"))

    def run(self, region, params):
        out = region.alloc_out()
        cols = region.x.shape[-1]
        if out.size:
            x2, out2 = region.x.reshape(-1, cols), out.reshape(-1, cols)
            # Without a bias the weight stands in for it (never read): one compiled signature serves both.
            bias = region.bias if region.bias is not None else region.weight
            args = (x2, region.weight, bias, out2, region.eps, region.bias is not None)
            self.compile_log.ensure(region.dtype, args)
            layernorm_rows(*args)
        return out


register(NumbaLayerNorm())
