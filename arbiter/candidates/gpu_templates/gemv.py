"""Emitted GEMV template (``gemv.cu``): a matmul with N == 1, one warp per row of A, 16-byte loads.

The solution index is the warps per block and whether to use vector loads (taken only when every
row of A and x start 16-byte aligned; otherwise the scalar kernel runs, so odd K is always served).
Registered by each GPU target with its backend: ``candidates/nvidia/gemv.py``, ``candidates/rocm/gemv.py``.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier
from arbiter.candidates.gpu import aligned16, row_stride
from arbiter.candidates.gpu_templates.gemm import IDENTITY_EPILOGUE, TemplateGemm, check_gemm
from arbiter.targets.kernels import VEC16


class Gemv(TemplateGemm):
    name = "gemv_warp"
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
        return True

    def run(self, region, params):
        out = region.alloc_out()
        a, x = region.a, region.b
        m, k = region.dims["m"], region.dims["k"]
        lda = row_stride(a)
        vec = VEC16[region.dtype] if params["vec"] and lda % VEC16[region.dtype] == 0 and aligned16(a, x, out) else 1
        rows = params["rows"]
        buf, extra = self.gemm_output(region, out)
        fn = self.backend.kernel("gemv_warp", region.dtype, ("gemv.cu",), (("ROWS", rows), ("VEC", vec)) + extra,
                              IDENTITY_EPILOGUE)
        if m:
            fn(((m + rows - 1) // rows,), (rows * 32,),
               (a, x, buf, np.int32(m), np.int32(k), np.int64(lda), np.int64(row_stride(buf)), out, out,
                np.int64(0)))
        self.finish_epilogue(region, buf, out)
        return out

