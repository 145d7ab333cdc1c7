"""Emitted GEMV on AMD GPUs (N == 1): the shared ``gemv.cu`` template compiled by hiprtc (float32).

32 lanes a row as on NVIDIA (``portable.cuh`` pins the shuffle width to 32, so on wave64 GPUs a
wavefront serves two rows). The solution index is the rows per block and vector loads.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import IDENTITY_EPILOGUE, VEC16, check_gemm
from arbiter.candidates.rocm._hip import RocmCandidate, aligned16, kernel, no_epilogue, row_stride


class RocmGemv(RocmCandidate):
    name = "rocm_gemv"
    op = "matmul"
    tier = Tier.EMITTED
    priority = 20  # where it applies (N == 1) it is the specialist
    templates = ("gemv.cu",)

    def param_space(self):
        return [{"rows": 8, "vec": True}, {"rows": 4, "vec": True}, {"rows": 16, "vec": True},
                {"rows": 8, "vec": False}]

    def applies_to(self, region):
        ok = check_gemm(region, self.dtypes)
        if ok is not True:
            return ok
        if region.dims["n"] != 1:
            return f"GEMV needs N == 1, got N = {region.dims['n']}"
        return no_epilogue(region)

    def run(self, region, params):
        out = region.alloc_out()
        a, x = region.a, region.b
        m, k = region.dims["m"], region.dims["k"]
        lda, width = row_stride(a), VEC16[region.dtype]
        vec = width if params["vec"] and lda % width == 0 and aligned16(a, x, out) else 1
        rows = params["rows"]
        fn = kernel("gemv_warp", region.dtype, ("gemv.cu",), (("ROWS", rows), ("VEC", vec)), IDENTITY_EPILOGUE)
        if m:
            fn(((m + rows - 1) // rows,), (rows * 32,),
               (a, x, out, np.int32(m), np.int32(k), np.int64(lda), np.int64(row_stride(out)), None, None,
                np.int64(0)))
        return out


register(RocmGemv())
