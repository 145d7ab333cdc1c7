"""Emitted GEMV on the CPU: matmul specialised to one row of output (M == 1) or one column (N == 1).

* ``M == 1``: ``out[j] = sum_p a[p] * b[p, j]``. Threads take ``block`` columns each; the inner loop
  runs along a contiguous row of ``b`` into a local accumulator, so it vectorises.
* ``N == 1``: ``out[i] = dot(a[i, :], b[:, 0])``. Threads take ``block`` rows each; each dot is a
  reassociated (vectorised) reduction over a contiguous row of ``a``.

Parameter (solution index): ``block``, the columns or rows one task takes. Runtime argument:
two compiled kernels per dtype serve every block.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Candidate, Tier, register
from arbiter.candidates.cpu._numba import (
    FASTMATH,
    NUMBA_MISSING,
    CompileLog,
    SerialLaunches,
    code_of,
    dtype_reason,
    first_reason,
    layout_reason,
    njit,
    prange,
    product_only_reason,
)


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_row(v, b, out, block):
    """out[j] = sum_p v[p] * b[p, j]: v [K], b [K, N] C-contiguous, out [N]."""
    k, n = b.shape
    for t in prange((n + block - 1) // block):
        j0 = t * block
        j1 = min(j0 + block, n)
        acc = np.zeros(j1 - j0, dtype=out.dtype)
        for p in range(k):
            vp = v[p]
            for j in range(j0, j1):
                acc[j - j0] += vp * b[p, j]
        out[j0:j1] = acc


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_col(a, v, out, block):
    """out[i] = sum_p a[i, p] * v[p]: a [M, K] C-contiguous, v [K], out [M]."""
    m, k = a.shape
    for t in prange((m + block - 1) // block):
        for i in range(t * block, min(t * block + block, m)):
            s = a.dtype.type(0)
            for p in range(k):
                s += a[i, p] * v[p]
            out[i] = s


class NumbaGemv(SerialLaunches, Candidate):
    name = "numba_gemv"
    target = "cpu"
    op = "matmul"
    tier = Tier.EMITTED
    priority = 1  # where it applies, it is the specialised emitted kernel: try it before the blocked one

    def __init__(self):
        self.compile_logs = {"row": CompileLog(gemv_row), "col": CompileLog(gemv_col)}
        self._last_log = None  # private: a public attribute is part of the behaviour identity

    @property
    def last_compile_s(self) -> float:
        return self._last_log.last_s if self._last_log else 0.0

    def available(self):
        return NUMBA_MISSING or True

    def applies_to(self, region):
        m, n = region.dims["m"], region.dims["n"]
        shape = True if 1 in (m, n) else \
            f"shape: M={m}, N={n}; GEMV needs M == 1 or N == 1 (numba_matmul_blocked covers the rest)"
        return first_reason(dtype_reason(region), shape, layout_reason(region, "RR", "reads C-contiguous a and b"),
                            product_only_reason(region))

    def param_space(self):
        return [{"block": 1024}, {"block": 128}, {"block": 8192}]

    def run(self, region, params):
        out = region.alloc_out()
        a, b = region.a, region.b
        if region.dims["n"] == 1:  # one column: a dot per row of a (also serves M == N == 1)
            kernel, which, args = gemv_col, "col", (a, b.reshape(-1), out.reshape(-1), params["block"])
        else:
            kernel, which, args = gemv_row, "row", (a.reshape(-1), b, out.reshape(-1), params["block"])
        log = self.compile_logs[which]
        log.ensure(region.dtype, args)
        self._last_log = log
        kernel(*args)
        return out

    def source(self):
        return code_of(__name__)


register(NumbaGemv())
