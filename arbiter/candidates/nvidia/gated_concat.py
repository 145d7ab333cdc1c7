"""Fused gate/up (SwiGLU) on NVIDIA: ONE cuBLAS GEMM on the concatenated weights ``[w_gate | w_up]``
(``[K, 2N]``), then ``gated_epilogue.cu`` (silu(g) * u) in one pass.

One GEMM launch of twice the width instead of two, and x is read once. Where the caller's two weights are the
halves of one concatenated weight (``keys.follows``: a model's fused ``gate_up_proj``; the key says so, attribute
``shares`` ``w_up>w_gate``, and the gate's probes are such halves) the GEMM reads that weight in place; otherwise
the weights are concatenated on every call (a copy of 2 K N elements), and the timings include the copy.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, cupy
from arbiter.keys import concatenated
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
        whole = concatenated(region.w_gate, region.w_up)  # the caller's own concatenated weight: no copy
        z = cp.matmul(region.x, whole if whole is not None else cp.concatenate((region.w_gate, region.w_up), axis=1))
        fn = kernel("gated_epilogue", region.dtype, ("gated_epilogue.cu",))
        fn(((m * n + THREADS - 1) // THREADS,), (THREADS,), (z, out, np.int64(m), np.int32(n)))
        return out


register(GatedConcat())
