"""Emitted tensor-core GEMM for float16/bfloat16 (``gemm_mma.cu``): mma.sync m16n8k16 fed by ldmatrix from a
cp.async multi-stage shared-memory ring, float accumulation.

The solution index is the block tile, the warp grid and the ring depth. Each call takes the asynchronous
16-byte copy path when its operands allow it (``cp_async_path``: K and N multiples of 8, 16-byte aligned
pointers), else the same kernel with bounds-checked element loads, slower and correct at any shape: the
choice is made per call (pointer alignment is not part of the problem key), so a tile's verdict covers both.
float32 is refused: tensor cores would mean TF32, which misses the float32 budget; ``gemm_tiled`` serves
float32.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.gpu import aligned16, row_stride
from arbiter.candidates.nvidia._cuda import IDENTITY_EPILOGUE, NvidiaCandidate, check_gemm, finish_epilogue, gemm_output
from arbiter.memo import Memo
from arbiter.targets.nvidia import cupy_module
from arbiter.targets.nvrtc import BACKEND, kernel

# (BM, BN, BK, WM, WN, STAGES): block tile, K slice per stage, warps along M and N, ring depth. The first is
# the default: 8 warps of 64x32, two blocks an SM. The 128x256 / 256x128 tiles give each warp 64x64: a quarter
# fewer bytes through L2 and shared memory per mma, one block an SM. BK = 64 halves the barriers per K.
# 128x64 and 64x64 keep more blocks busy on small products. A ring the device cannot hold is cut (``fit_ring``).
TILES = [(128, 128, 32, 2, 4, 4), (128, 256, 32, 2, 4, 4), (256, 128, 32, 4, 2, 4), (128, 128, 64, 2, 4, 3),
         (128, 64, 32, 2, 2, 4), (64, 64, 32, 2, 2, 4)]
SMALLEST_OPT_IN = 99 * 1024  # shared memory a block may opt into on sm_86/sm_89 (A100: 163 KiB, H100/H200: 227 KiB)
MMA_TYPE = {"float16": '"f16"', "bfloat16": '"bf16"'}
PAD = 8  # elements of padding per shared row (gemm_mma.cu's PAD)
ELEMENT_BYTES = 2


def shared_bytes(tile: tuple) -> int:
    """Dynamic shared memory of ``tile``'s ring: STAGES x (A slice BM x (BK+PAD) + B slice BK x (BN+PAD))."""
    bm, bn, bk, _, _, stages = tile
    return stages * (bm * (bk + PAD) + bk * (bn + PAD)) * ELEMENT_BYTES


def fit_ring(tile: tuple, limit: int) -> tuple:
    """``tile`` with its ring cut to the stages ``limit`` bytes of shared memory hold (two at the least: every
    tile's two-stage ring fits ``SMALLEST_OPT_IN``). Same results, fewer slices in flight."""
    stages = tile[5]
    per_stage = shared_bytes(tile) // stages
    return tuple(tile[:5]) + (max(2, min(stages, limit // per_stage)),)


_opt_in: Memo = Memo()  # device id -> bytes


def shared_limit() -> int:
    """Dynamic shared memory a block may opt into on the current device (bytes)."""
    runtime = cupy_module().cuda.runtime
    device = runtime.getDevice()
    limit = _opt_in.get(device)
    if limit is None:
        limit = _opt_in[device] = int(runtime.getDeviceProperties(device).get("sharedMemPerBlockOptin")
                                      or SMALLEST_OPT_IN)
    return limit


def threads(tile: tuple) -> int:
    return tile[3] * tile[4] * 32


def mma_defines(dtype: str, tile: tuple, cp_async: bool) -> tuple:
    """The template's #defines for ``tile`` (BM, BN, BK, WM, WN, STAGES) and load path."""
    bm, bn, bk, wm, wn, stages = tile
    return (("BM", bm), ("BN", bn), ("BK", bk), ("WM", wm), ("WN", wn), ("STAGES", stages),
            ("MMA_TYPE", MMA_TYPE[dtype]), ("CP_ASYNC", int(cp_async)))


def cp_async_path(region, out) -> bool:
    """Whether this call's operands allow 16-byte copies: K and N multiples of 8 (A and B are C-contiguous,
    so every row starts 16 bytes after a 16-byte boundary) and a, b and ``out`` 16-byte aligned (``out``
    is C-contiguous too, N wide: paired stores stay aligned)."""
    return region.dims["k"] % 8 == 0 and region.dims["n"] % 8 == 0 and aligned16(region.a, region.b, out)


def with_shared_memory(fn, tile: tuple):
    """``fn`` allowed ``tile``'s dynamic shared memory (above the 48 KiB default needs the opt-in)."""
    fn.max_dynamic_shared_size_bytes = shared_bytes(tile)
    return fn


def mma_kernel(dtype: str, tile: tuple, epilogue: str, cp_async: bool, extra: tuple = ()) -> tuple:
    """(the compiled ``gemm_mma`` for ``tile`` with an epilogue function's source, ready to launch; the tile it
    was compiled for: ``tile`` with its ring fitted to the device)."""
    key = ("gemm_mma", dtype, tile, epilogue, cp_async, extra)
    plan = BACKEND.launches.get(key)
    if plan is None:
        fitted = fit_ring(tile, shared_limit())
        fn = kernel("gemm_mma", dtype, ("gemm_mma.cu",), mma_defines(dtype, fitted, cp_async) + extra, epilogue)
        plan = BACKEND.launches[key] = (with_shared_memory(fn, fitted), fitted)
    return plan


def launch_mma(fn, tile, region, out, bias, residual, ldr):
    bm, bn = tile[0], tile[1]
    m, n, k = region.dims["m"], region.dims["n"], region.dims["k"]
    blocks = ((m + bm - 1) // bm) * ((n + bn - 1) // bn)  # one dimension: the kernel orders blocks in groups
    fn((blocks,), (threads(tile),),
       (region.a, region.b, out, np.int32(m), np.int32(n), np.int32(k),
        np.int64(row_stride(region.a)), np.int64(row_stride(region.b)), np.int64(row_stride(out)),
        bias, residual, np.int64(ldr)), shared_mem=shared_bytes(tile))


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

    def launch_plan(self, region, params: dict, out, extra: tuple = ()) -> tuple:
        """(kernel, fitted tile) that ``run(region, params)`` launches (``launch_mma``) writing ``out`` (``extra``:
        the #defines of ``gemm_output``): what a caller timing the kernel alone needs (``benchmarks/gemm_tc.py``)."""
        return mma_kernel(region.dtype, tuple(params["tile"]), IDENTITY_EPILOGUE, cp_async_path(region, out), extra)

    def run(self, region, params):
        out = region.alloc_out()
        buf, extra = gemm_output(region, out)
        if region.dims["m"] and region.dims["n"]:
            fn, tile = self.launch_plan(region, params, buf, extra)
            launch_mma(fn, tile, region, buf, out, out, 0)
        finish_epilogue(region, buf, out)
        return out


register(GemmMma())
