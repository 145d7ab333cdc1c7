"""Emitted softmax on the CPU: one fused numba kernel over contiguous rows, parallel across rows.

Per row, one read pass keeps an online maximum ``m`` and denominator ``s``, one chunk at a time
(the chunk's max first, then ``s`` rescaled by ``exp(m_old - m_new)`` only when the max grows,
then the chunk's ``exp(x - m)`` summed), and one write pass stores ``exp(x - m) / s``.
NumPy's composed version makes four passes over the data and allocates temporaries.

Parameter (solution index): ``chunk``, the width of one online step. Wider chunks rescale less
often and give the vectoriser longer loops; narrower ones stay in L1 for the second read of the
chunk. It is a runtime argument: one compiled kernel per dtype serves every chunk.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import register
from arbiter.candidates.cpu._numba import (
    FASTMATH,
    NumbaKernelCandidate,
    dtype_reason,
    fast_exp,
    first_reason,
    layout_reason,
    njit,
    prange,
)


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def softmax_rows(x, out, chunk):
    """out[r, :] = softmax(x[r, :]) for 2-D C-contiguous x and out of one dtype."""
    rows, cols = x.shape
    for r in prange(rows):
        m = x.dtype.type(-np.inf)
        s = x.dtype.type(0)
        for c0 in range(0, cols, chunk):
            c1 = min(c0 + chunk, cols)
            cm = x[r, c0]
            for c in range(c0 + 1, c1):
                cm = max(cm, x[r, c])
            if cm == -np.inf:  # a fully masked chunk adds nothing (and exp(-inf - -inf) would be NaN)
                continue
            if cm > m:  # the running max grew: rescale what is summed so far
                s *= fast_exp(m - cm)
                m = cm
            for c in range(c0, c1):
                s += fast_exp(x[r, c] - m)
        inv = x.dtype.type(1) / s
        for c in range(cols):
            out[r, c] = fast_exp(x[r, c] - m) * inv


class NumbaSoftmax(NumbaKernelCandidate):
    name = "numba_softmax_fused"
    op = "softmax"
    kernel = staticmethod(softmax_rows)

    def applies_to(self, region):
        axis = True if region.axis_last else "axis inner: the kernel reduces along contiguous rows; needs the last axis"
        return first_reason(dtype_reason(region), layout_reason(region, "R", "walks C-contiguous rows"), axis)

    def param_space(self):
        return [{"chunk": 256}, {"chunk": 64}, {"chunk": 1024}]

    def run(self, region, params):
        out = region.alloc_out()
        cols = region.x.shape[-1]
        if out.size:
            x2, out2 = region.x.reshape(-1, cols), out.reshape(-1, cols)
            self.compile_log.ensure(region.dtype, (x2, out2, params["chunk"]))
            softmax_rows(x2, out2, params["chunk"])
        return out


register(NumbaSoftmax())
