"""Emitted GEMM on AMD GPUs: the shared ``gemm_tiled.cu`` template compiled by hiprtc (float32).

The same template, tiles and launch geometry as the nvidia target's ``gemm_tiled``; only the compiler
(hiprtc, through ``portable.cuh``) differs. The solution index is the tile shape.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import IDENTITY_EPILOGUE, check_gemm
from arbiter.candidates.nvidia.gemm_tiled import TILES
from arbiter.candidates.rocm._hip import RocmCandidate, kernel, no_epilogue, row_stride


class RocmGemmTiled(RocmCandidate):
    name = "rocm_gemm_tiled"
    op = "matmul"
    tier = Tier.EMITTED
    priority = 5
    templates = ("gemm_tiled.cu",)

    def param_space(self):
        return [{"tile": list(t)} for t in TILES]

    def applies_to(self, region):
        ok = check_gemm(region, self.dtypes)
        return ok if ok is not True else no_epilogue(region)

    def run(self, region, params):
        out = region.alloc_out()
        bm, bn, bk, tm, tn = params["tile"]
        defines = (("BM", bm), ("BN", bn), ("BK", bk), ("TM", tm), ("TN", tn))
        fn = kernel("gemm_tiled", region.dtype, ("gemm_tiled.cu",), defines, IDENTITY_EPILOGUE)
        m, n, k = region.dims["m"], region.dims["n"], region.dims["k"]
        if m and n:
            grid = ((n + bn - 1) // bn, (m + bm - 1) // bm, 1)
            fn(grid, ((bm // tm) * (bn // tn),),
               (region.a, region.b, out, np.int32(m), np.int32(n), np.int32(k),
                np.int64(row_stride(region.a)), np.int64(row_stride(region.b)), np.int64(row_stride(out)),
                None, None, np.int64(0), np.int32(k), None))
        return out


register(RocmGemmTiled())
