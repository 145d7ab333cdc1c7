"""Emitted gated projection (SwiGLU) on the CPU: blocked BLAS GEMMs with a fused numba epilogue.

For each block of ``block_rows`` rows of x, the two GEMMs write ``x_blk @ w_gate`` and
``x_blk @ w_up`` into two block-sized scratch buffers (still in cache), and one fused pass
writes ``silu(g) * u`` to the output. The composed version allocates two full [M, N] products
and makes four more passes over them (exp, add, divide, multiply).

Parameter (solution index): ``block_rows``: taller blocks call BLAS fewer times; shorter ones keep
the scratch in cache for the epilogue.

The epilogue is serial on purpose: BLAS already uses every core for the GEMMs, and handing the
cores from OpenBLAS's (spin-waiting) threads to numba's pool and back once per block cost
milliseconds per block on a shared 2-core machine (measured with ``parallel=True``: 7.8 ms against
0.7 ms composed at 16x1024x512).
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import register
from arbiter.candidates.cpu._common import blas_identity
from arbiter.candidates.cpu._numba import FASTMATH, NumbaKernelCandidate, dtype_reason, fast_exp, njit


@njit(cache=True, fastmath=FASTMATH)
def swiglu_epilogue(gate, up, out):
    """out = silu(gate) * up for 2-D C-contiguous arrays of one dtype and shape."""
    rows, cols = out.shape
    one = out.dtype.type(1)
    for r in range(rows):
        for c in range(cols):
            g = gate[r, c]
            out[r, c] = g / (one + fast_exp(-g)) * up[r, c]


class NumbaGated(NumbaKernelCandidate):
    name = "numba_gated_fused"
    op = "gated"
    kernel = staticmethod(swiglu_epilogue)

    def applies_to(self, region):
        return dtype_reason(region)

    def param_space(self):
        return [{"block_rows": 128}, {"block_rows": 32}, {"block_rows": 512}]

    def run(self, region, params):
        out = region.alloc_out()
        m, n = out.shape
        if out.size == 0:
            return out
        step = min(params["block_rows"], m)
        gate, up = np.empty((step, n), out.dtype), np.empty((step, n), out.dtype)
        self.compile_log.ensure(region.dtype, (gate, up, out))
        x, wg, wu = region.x, region.w_gate, region.w_up
        for r0 in range(0, m, step):
            r1 = min(r0 + step, m)
            g, u = gate[: r1 - r0], up[: r1 - r0]
            np.matmul(x[r0:r1], wg, out=g)
            np.matmul(x[r0:r1], wu, out=u)
            swiglu_epilogue(g, u, out[r0:r1])
        return out

    def source(self):
        return super().source() + blas_identity()


register(NumbaGated())
