"""Emitted fused SwiGLU (``gated.cu``): both GEMMs and the gate in one CUDA-core kernel.

x is staged once per K-slice for both weight tiles; silu(g) * u is applied in registers, so neither
product is ever written to memory. Float accumulation for every dtype (float32 stays IEEE: no TF32).
The solution index is the tile shape. Needs C-contiguous x, w_gate and w_up (layout RRR).
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate
from arbiter.targets.nvrtc import kernel

# (BM, BN, BK, TM, TN)
TILES = [(64, 64, 16, 4, 4), (32, 32, 32, 2, 2), (128, 64, 16, 8, 4), (16, 16, 16, 1, 1)]


class GatedTiled(NvidiaCandidate):
    name = "gated_tiled"
    op = "gated"
    tier = Tier.EMITTED
    priority = 5
    templates = ("gated.cu",)

    def param_space(self):
        return [{"tile": list(t)} for t in TILES]

    def applies_to(self, region):
        ok = self.check_dtype(region)
        if ok is not True:
            return ok
        if region.layout != "RRR":
            return (f"needs C-contiguous x, w_gate and w_up (layout RRR), got {region.layout}; the vendor "
                    f"candidates serve others")
        return True

    def run(self, region, params):
        out = region.alloc_out()
        m, n, k = region.dims["m"], region.dims["n"], region.dims["k"]
        if out.size == 0:
            return out
        bm, bn, bk, tm, tn = params["tile"]
        fn = kernel("gated_tiled", region.dtype, ("gated.cu",),
                    (("BM", bm), ("BN", bn), ("BK", bk), ("TM", tm), ("TN", tn)))
        fn(((n + bn - 1) // bn, (m + bm - 1) // bm), ((bm // tm) * (bn // tn),),
           (region.x, region.w_gate, region.w_up, out, np.int32(m), np.int32(n), np.int32(k)))
        return out


register(GatedTiled())
