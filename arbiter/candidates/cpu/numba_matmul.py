"""Emitted matmul on the CPU: a blocked, parallel numba kernel with tile parameters.

The output is cut into ``tm x tn`` tiles, handed to threads with ``prange``; each tile
accumulates in a local ``tm x tn`` block over ``tk``-deep slices of K (a slice of ``a`` and one
of ``b`` stay in cache while they are reused), and its innermost loop runs along a contiguous row
of ``b`` so it vectorises. Tails (sizes that are not multiples of a tile) are clipped, not padded.

Parameters (solution indices): ``tm``, ``tn``, ``tk``. They are runtime arguments, so one
compiled kernel per dtype serves every tile shape.

It computes ``a @ b`` only: a region with an epilogue is the synthesized tier's.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import register
from arbiter.candidates.cpu._numba import (
    FASTMATH,
    NumbaKernelCandidate,
    dtype_reason,
    first_reason,
    layout_reason,
    njit,
    prange,
    product_only_reason,
)


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def matmul_blocked(a, b, out, tm, tn, tk):
    """out = a @ b for C-contiguous a [M, K], b [K, N], out [M, N], in tm x tn x tk tiles."""
    m, k = a.shape
    n = b.shape[1]
    tiles_n = (n + tn - 1) // tn
    tiles = ((m + tm - 1) // tm) * tiles_n
    for t in prange(tiles):
        i0 = (t // tiles_n) * tm
        j0 = (t % tiles_n) * tn
        i1 = min(i0 + tm, m)
        j1 = min(j0 + tn, n)
        acc = np.zeros((i1 - i0, j1 - j0), dtype=out.dtype)
        for k0 in range(0, k, tk):
            k1 = min(k0 + tk, k)
            for i in range(i0, i1):
                for p in range(k0, k1):
                    aip = a[i, p]
                    for j in range(j0, j1):
                        acc[i - i0, j - j0] += aip * b[p, j]
        for i in range(i0, i1):
            for j in range(j0, j1):
                out[i, j] = acc[i - i0, j - j0]


class NumbaMatmulBlocked(NumbaKernelCandidate):
    name = "numba_matmul_blocked"
    op = "matmul"
    kernel = staticmethod(matmul_blocked)

    def applies_to(self, region):
        return first_reason(dtype_reason(region), layout_reason(region, "RR", "reads C-contiguous a and b"),
                            product_only_reason(region))

    def param_space(self):
        return [{"tm": 64, "tn": 64, "tk": 128}, {"tm": 32, "tn": 128, "tk": 64},
                {"tm": 128, "tn": 32, "tk": 256}, {"tm": 16, "tn": 256, "tk": 64}]

    def run(self, region, params):
        out = region.alloc_out()
        args = (region.a, region.b, out, params["tm"], params["tn"], params["tk"])
        self.compile_log.ensure(region.dtype, args)
        matmul_blocked(*args)
        return out


register(NumbaMatmulBlocked())
