"""Launch plumbing shared by the row-kernel candidates (softmax.cu, rmsnorm.cu over rows_common.cuh)."""
from __future__ import annotations

import numpy as np

from arbiter.candidates.nvidia._cuda import aligned16, next_pow2
from arbiter.memo import Memo
from arbiter.targets.nvrtc import VEC16, kernel

MAX_PER_THREAD = 64  # floats of a row held in registers per thread
MAX_THREADS = 1024


def plan(region, out, row_threads: int, vec: bool) -> tuple[int, int, int]:
    """(row threads, vector width, loads per thread) for this region's column count.

    The vector width is used only when every row starts 16-byte aligned; row threads grow (up to
    1024) when the row would not fit ``MAX_PER_THREAD`` registers per thread; loads per thread are
    rounded up to a power of two so one compiled kernel serves a range of widths.
    """
    cols = region.dims["cols"]
    v = VEC16[region.dtype]
    width = v if vec and cols % v == 0 and aligned16(region.x, out) else 1
    chunks = max(1, -(-cols // width))
    while row_threads < MAX_THREADS and chunks > row_threads * (MAX_PER_THREAD // width):
        row_threads *= 2
    iters = next_pow2(-(-chunks // row_threads))
    if iters * width > MAX_PER_THREAD:
        raise ValueError(f"cols: {cols} columns exceed {MAX_THREADS} threads x {MAX_PER_THREAD} registers")
    return row_threads, width, iters


def row_kernel(file: str, name: str, region, out, row_threads: int, rows_per_block: int, vec: bool,
               load_kernel=kernel):
    """(compiled kernel, grid, block) for one row kernel template, loaded by ``load_kernel`` (NVRTC by default)."""
    threads, width, iters = plan(region, out, row_threads, vec)
    rpb = rows_per_block if threads == 32 else 1
    defines = (("ROW_THREADS", threads), ("ROWS_PER_BLOCK", rpb), ("VEC", width), ("ITERS", iters))
    fn = load_kernel(name, region.dtype, ("rows_common.cuh", file), defines)
    rows = region.dims["rows"]
    return fn, ((rows + rpb - 1) // rpb,), (threads * rpb,)


# (template, dtype, rows, cols, threads, rows per block, vector loads, loader) -> (kernel, grid, block,
# integer arguments): what depends only on the route and the shape is worked out once, so a warm call
# only checks alignment, packs its arrays and launches.
_launches: Memo = Memo()


def _launch_plan(file: str, name: str, region, out, row_threads: int, rows_per_block: int, vec: bool,
                 load_kernel):
    vec = vec and aligned16(region.x, out)
    dims = region.dims
    key = (file, region.dtype, dims["rows"], dims["cols"], row_threads, rows_per_block, vec, load_kernel)
    found = _launches.get(key)
    if found is None:
        fn, grid, block = row_kernel(file, name, region, out, row_threads, rows_per_block, vec, load_kernel)
        rows, cols = dims["rows"], dims["cols"]
        if len(_launches) >= 65536:  # bounded like the key cache: a shape sweep can't grow it forever
            _launches.clear()
        found = _launches[key] = (fn, grid, block, (np.int32(rows), np.int32(cols), np.int64(cols), np.int64(cols)),
                                  rows > 0 and cols > 0)
    return found


def launch_softmax(region, out, row_threads: int, rows_per_block: int, vec: bool, load_kernel=kernel):
    fn, grid, block, ints, nonempty = _launch_plan("softmax.cu", "softmax_rows", region, out, row_threads,
                                                   rows_per_block, vec, load_kernel)
    if nonempty:
        fn(grid, block, (region.x, out) + ints)
    return out


def launch_rmsnorm(region, out, row_threads: int, rows_per_block: int, vec: bool, load_kernel=kernel):
    fn, grid, block, ints, nonempty = _launch_plan("rmsnorm.cu", "rmsnorm_rows", region, out, row_threads,
                                                   rows_per_block, vec, load_kernel)
    if nonempty:
        fn(grid, block, (region.x, region.weight, out) + ints + (np.float32(region.eps),))
    return out
