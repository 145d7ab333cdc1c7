"""Launch plumbing of the ROCm row kernels: the nvidia target's row plan, the shared templates via hiprtc."""
from __future__ import annotations

import numpy as np

from arbiter.candidates.nvidia._rows import plan
from arbiter.candidates.rocm._hip import kernel


def row_kernel(file: str, name: str, region, out, row_threads: int, rows_per_block: int, vec: bool):
    """(loaded kernel, grid, block) for one row template (``softmax.cu``, ``rmsnorm.cu``)."""
    threads, width, iters = plan(region, out, row_threads, vec)
    rpb = rows_per_block if threads == 32 else 1
    defines = (("ROW_THREADS", threads), ("ROWS_PER_BLOCK", rpb), ("VEC", width), ("ITERS", iters))
    fn = kernel(name, region.dtype, ("rows_common.cuh", file), defines)
    return fn, ((region.dims["rows"] + rpb - 1) // rpb,), (threads * rpb,)


def launch_softmax(region, out, row_threads: int, rows_per_block: int, vec: bool):
    fn, grid, block = row_kernel("softmax.cu", "softmax_rows", region, out, row_threads, rows_per_block, vec)
    rows, cols = region.dims["rows"], region.dims["cols"]
    if rows and cols:
        fn(grid, block, (region.x, out, np.int32(rows), np.int32(cols), np.int64(cols), np.int64(cols)))
    return out


def launch_rmsnorm(region, out, row_threads: int, rows_per_block: int, vec: bool):
    fn, grid, block = row_kernel("rmsnorm.cu", "rmsnorm_rows", region, out, row_threads, rows_per_block, vec)
    rows, cols = region.dims["rows"], region.dims["cols"]
    if rows and cols:
        fn(grid, block, (region.x, region.weight, out, np.int32(rows), np.int32(cols), np.int64(cols),
                         np.int64(cols), np.float32(region.eps)))
    return out
