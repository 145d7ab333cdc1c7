"""Emitted tensor-core GEMM for float16/bfloat16 (``gemm_mma.cu``): mma.sync m16n8k16, float accumulation.

The solution index is the block tile and the warp grid. float32 is refused: tensor cores would
mean TF32, which misses the float32 budget; ``gemm_tiled`` serves float32.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.gpu import row_stride
from arbiter.candidates.nvidia._cuda import IDENTITY_EPILOGUE, NvidiaCandidate, check_gemm, finish_epilogue, gemm_output
from arbiter.targets.nvrtc import kernel

# (BM, BN, BK, WM, WN): block tile, K slice, warps along M and N.
TILES = [(64, 64, 32, 2, 2), (128, 128, 32, 2, 4), (32, 32, 32, 1, 2), (128, 64, 32, 2, 2), (64, 128, 32, 2, 2)]
MMA_TYPE = {"float16": '"f16"', "bfloat16": '"bf16"'}


def mma_kernel(dtype: str, tile: tuple, epilogue: str, extra: tuple = ()):
    """The compiled ``gemm_mma`` for a tile (BM, BN, BK, WM, WN) with an epilogue function's source."""
    bm, bn, bk, wm, wn = tile
    defines = (("BM", bm), ("BN", bn), ("BK", bk), ("WM", wm), ("WN", wn), ("MMA_TYPE", MMA_TYPE[dtype])) + extra
    return kernel("gemm_mma", dtype, ("gemm_mma.cu",), defines, epilogue)


def launch_mma(fn, tile, region, out, bias, residual, ldr):
    bm, bn, _, wm, wn = tile
    m, n, k = region.dims["m"], region.dims["n"], region.dims["k"]
    fn(((n + bn - 1) // bn, (m + bm - 1) // bm), (wm * wn * 32,),
       (region.a, region.b, out, np.int32(m), np.int32(n), np.int32(k),
        np.int64(row_stride(region.a)), np.int64(row_stride(region.b)), np.int64(row_stride(out)),
        bias, residual, np.int64(ldr)))


class GemmMma(NvidiaCandidate):
    name = "gemm_mma"
    op = "matmul"
    tier = Tier.EMITTED
    priority = 10
    templates = ("gemm_mma.cu",)
    dtypes = ("float16", "bfloat16")

    def param_space(self):
        return [{"tile": list(t)} for t in TILES]

    def applies_to(self, region):
        ok = check_gemm(region, self.dtypes)
        if ok is not True and region.dtype == "float32":
            # check_gemm gives True or a reason, never False
            return ok + " (tensor cores would mean TF32, over the float32 budget; gemm_tiled serves float32)"  # type: ignore[operator]
        return ok

    def run(self, region, params):
        out = region.alloc_out()
        tile = tuple(params["tile"])
        buf, extra = gemm_output(region, out)
        fn = mma_kernel(region.dtype, tile, IDENTITY_EPILOGUE, extra=extra)
        if region.dims["m"] and region.dims["n"]:
            launch_mma(fn, tile, region, buf, out, out, 0)
        finish_epilogue(region, buf, out)
        return out


register(GemmMma())
