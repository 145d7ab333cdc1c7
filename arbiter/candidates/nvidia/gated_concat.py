"""Fused gate/up (SwiGLU) on NVIDIA: ONE cuBLAS GEMM on the concatenated weights ``[w_gate | w_up]``
(``[K, 2N]``), then ``gated_epilogue.cu`` (silu(g) * u) in one pass.

One GEMM launch of twice the width instead of two, and x is read once. The weights are concatenated on
every call (a copy of 2 K N elements): a model would keep them concatenated; this candidate cannot
assume the caller's arrays are adjacent, and the timings include the copy.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, cupy
from arbiter.targets.nvrtc import kernel

THREADS = 256


class GatedConcat(NvidiaCandidate):
    name = "gated_concat"
    capturable = False  # cupy.matmul takes CuPy's cuBLAS handle, which raises under stream capture
    op = "gated"
    tier = Tier.EMITTED
    priority = 6
    templates = ("gated_epilogue.cu",)

    def applies_to(self, region):
        return self.check_dtype(region)

    def run(self, region, params):
        cp = cupy()
        out = region.alloc_out()
        m, n = region.dims["m"], region.dims["n"]
        if out.size == 0:
            return out
        z = cp.matmul(region.x, cp.concatenate((region.w_gate, region.w_up), axis=1))
        fn = kernel("gated_epilogue", region.dtype, ("gated_epilogue.cu",))
        fn(((m * n + THREADS - 1) // THREADS,), (THREADS,), (z, out, np.int64(m), np.int32(n)))
        return out


register(GatedConcat())
