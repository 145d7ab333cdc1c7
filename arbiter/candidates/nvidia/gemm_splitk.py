"""Emitted split-K GEMM for small M x N with large K (``gemm_tiled.cu`` with SPLIT_K, ``splitk_reduce.cu``).

K is cut into ``splits`` ranges computed by separate blocks into a float32 workspace; a second kernel
sums the partials in a fixed order (deterministic) and stores. The solution index is the tile and the
number of splits. It applies where the whole bucket has M*N <= 2**18 and K >= max(M, N, 1024): there
too few output tiles exist to fill the GPU without splitting K.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.gpu import row_stride
from arbiter.candidates.gpu_templates.gemm_tiled import launch_tiled, tiled_kernel
from arbiter.candidates.nvidia._cuda import (
    IDENTITY_EPILOGUE,
    NvidiaCandidate,
    check_gemm,
    cupy,
    finish_epilogue,
    gemm_output,
)
from arbiter.targets.nvrtc import kernel

# (BM, BN, BK, TM, TN, splits)
CONFIGS = [(32, 32, 32, 2, 2, 8), (16, 64, 32, 1, 4, 16), (32, 64, 32, 2, 4, 32), (64, 64, 16, 4, 4, 4)]
MAX_MN = 1 << 18
MIN_K = 1024


class GemmSplitK(NvidiaCandidate):
    name = "gemm_splitk"
    op = "matmul"
    tier = Tier.EMITTED
    priority = 3
    templates = ("gemm_tiled.cu", "splitk_reduce.cu")

    def param_space(self):
        return [{"tile": list(c[:5]), "splits": c[5]} for c in CONFIGS]

    def applies_to(self, region):
        ok = check_gemm(region, self.dtypes)
        if ok is not True:
            return ok
        b = dict(region.key.bucket)
        if b["m"] * b["n"] > MAX_MN or b["k"] < max(b["m"], b["n"], MIN_K):
            return (f"split-K serves buckets with M*N <= {MAX_MN} and K >= max(M, N, {MIN_K}); "
                    f"this bucket is {b['m']}x{b['n']}x{b['k']}")
        return True

    def run(self, region, params):
        cp = cupy()
        out = region.alloc_out()
        tile = tuple(params["tile"])
        m, n, k = region.dims["m"], region.dims["n"], region.dims["k"]
        bk = tile[2]
        per = -(-k // params["splits"])
        per = max(bk, -(-per // bk) * bk)  # whole K slices per split
        splits = -(-k // per)
        partial = cp.empty((splits, m, n), dtype=np.float32)
        gemm = tiled_kernel(region.dtype, tile, IDENTITY_EPILOGUE, split_k=True, load_kernel=kernel)
        launch_tiled(gemm, tile, region, out, out, out, 0, splits=splits, k_per_split=per, partial=partial)
        buf, extra = gemm_output(region, out)
        reduce = kernel("splitk_reduce", region.dtype, ("splitk_reduce.cu",), extra, IDENTITY_EPILOGUE)
        total = m * n
        reduce(((total + 255) // 256,), (256,),
               (partial, buf, np.int32(m), np.int32(n), np.int32(splits), np.int64(row_stride(buf)),
                out, out, np.int64(0)))
        finish_epilogue(region, buf, out)
        return out


register(GemmSplitK())
