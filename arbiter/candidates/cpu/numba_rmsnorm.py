"""Emitted RMSNorm on the CPU: one fused numba kernel over contiguous rows, parallel across rows.

Per row: one read pass sums the squares (vectorised: the sum is reassociated across SIMD lanes),
one pass writes ``x * (1 / sqrt(mean + eps)) * weight``. NumPy's composed version makes five
passes and allocates three temporaries the size of ``x``.
"""
from __future__ import annotations

import math

from arbiter.candidates import register
from arbiter.candidates.cpu._numba import (
    FASTMATH,
    NumbaKernelCandidate,
    contiguous_reason,
    dtype_reason,
    first_reason,
    layout_reason,
    njit,
    prange,
)


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def rmsnorm_rows(x, weight, eps, out):
    """out[r, :] = x[r, :] / sqrt(mean(x[r, :]**2) + eps) * weight, 2-D C-contiguous x and out."""
    rows, cols = x.shape
    for r in prange(rows):
        s = x.dtype.type(0)
        for c in range(cols):
            s += x[r, c] * x[r, c]
        inv = x.dtype.type(1.0 / math.sqrt(s / cols + eps))
        for c in range(cols):
            out[r, c] = x[r, c] * inv * weight[c]


class NumbaRMSNorm(NumbaKernelCandidate):
    name = "numba_rmsnorm_fused"
    op = "rmsnorm"
    kernel = staticmethod(rmsnorm_rows)

    def applies_to(self, region):
        return first_reason(dtype_reason(region), layout_reason(region, "R", "walks C-contiguous rows"),
                            contiguous_reason("weight", region.weight))

    def run(self, region, params):
        out = region.alloc_out()
        cols = region.x.shape[-1]
        if out.size:
            args = (region.x.reshape(-1, cols), region.weight, region.eps, out.reshape(-1, cols))
            self.compile_log.ensure(region.dtype, args)
            rmsnorm_rows(*args)
        return out


register(NumbaRMSNorm())
