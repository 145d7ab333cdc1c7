"""Emitted GEMM template on the CUDA cores (``gemm_tiled.cu``): shared-memory tiles, a micro-tile per thread.

Every dtype accumulates in float (float32 stays IEEE: no TF32). The solution index is the tile shape.
Any fused epilogue is composed afterwards by the target (CuPy ops on nvidia; rocm declines one); the synthesized
tier fuses it into the store. Registered by each GPU target with its backend (``candidates/<target>/gemm_tiled.py``).
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier
from arbiter.candidates.gpu import row_stride
from arbiter.candidates.gpu_templates.gemm import IDENTITY_EPILOGUE, TemplateGemm, check_gemm

# (BM, BN, BK, TM, TN); 256 threads each, except the 16x16 tile for tiny products.
TILES = [(64, 64, 16, 4, 4), (32, 32, 32, 2, 2), (16, 16, 16, 1, 1), (128, 128, 8, 8, 8), (128, 64, 16, 8, 4)]


def tiled_kernel(dtype: str, tile: tuple, epilogue: str, split_k: bool = False, extra: tuple = (), *,
                 load_kernel):
    """The compiled ``gemm_tiled`` for a tile (BM, BN, BK, TM, TN) with an epilogue function's source,
    loaded by ``load_kernel`` (the target's kernel backend's ``kernel``)."""
    bm, bn, bk, tm, tn = tile
    defines = (("BM", bm), ("BN", bn), ("BK", bk), ("TM", tm), ("TN", tn)) + ((("SPLIT_K", 1),) if split_k else ()) \
        + extra
    return load_kernel("gemm_tiled", dtype, ("gemm_tiled.cu",), defines, epilogue)


def launch_tiled(fn, tile, region, out, bias, residual, ldr, splits=1, k_per_split=None, partial=None):
    bm, bn, _, tm, tn = tile
    m, n, k = region.dims["m"], region.dims["n"], region.dims["k"]
    grid = ((n + bn - 1) // bn, (m + bm - 1) // bm, splits)
    fn(grid, ((bm // tm) * (bn // tn),),
       (region.a, region.b, out, np.int32(m), np.int32(n), np.int32(k),
        np.int64(row_stride(region.a)), np.int64(row_stride(region.b)), np.int64(row_stride(out)),
        bias, residual, np.int64(ldr), np.int32(k if k_per_split is None else k_per_split),
        partial if partial is not None else out))


class GemmTiled(TemplateGemm):
    name = "gemm_tiled"
    op = "matmul"
    tier = Tier.EMITTED
    priority = 5
    templates = ("gemm_tiled.cu",)

    def param_space(self):
        return [{"tile": list(t)} for t in TILES]

    def applies_to(self, region):
        return check_gemm(region, self.dtypes)

    def run(self, region, params):
        out = region.alloc_out()
        tile = tuple(params["tile"])
        buf, extra = self.gemm_output(region, out)
        fn = tiled_kernel(region.dtype, tile, IDENTITY_EPILOGUE, extra=extra, load_kernel=self.backend.kernel)
        if region.dims["m"] and region.dims["n"]:
            launch_tiled(fn, tile, region, buf, out, out, 0)  # out stands in for the unused epilogue pointers
        self.finish_epilogue(region, buf, out)
        return out

