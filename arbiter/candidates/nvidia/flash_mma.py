"""Emitted tensor-core flash attention for float16/bfloat16 (``flash_mma.cu``): FlashAttention-2 style.

One block serves ``bq`` query rows of one (batch, head), 16 a warp; key tiles of ``bk`` are staged in
shared memory (cp.async); scores and ``P @ V`` are ``mma.sync`` m16n8k16 products with float accumulation,
the online softmax runs in float registers, and ``P`` is rounded to the element type in registers to
feed the second product. Head sizes 64 and 128 (the kernel's fragment tiling), causal or not, any
``q_len``/``k_len``. q, k and v rows that are unit-stride and 16-byte aligned take 16-byte cp.async copies;
other strides (checked per call) take element loads in the same kernel text (``STRIDED``). The solution
index is the block shape (query rows a block, keys a tile).
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate
from arbiter.targets.nvrtc import kernel

HEAD_DIMS = (64, 128)
MAX_GRID_YZ = 65535  # heads ride on grid.y, batch on grid.z
MMA_TYPE = {"float16": '"f16"', "bfloat16": '"bf16"'}


def rows16(a) -> bool:
    """Unit-stride rows, each starting on a 16-byte boundary: what the 16-byte cp.async copies need
    (the strides of dims of size 1 never move a pointer, so they do not count)."""
    if a.data.ptr % 16 or a.strides[-1] != a.itemsize:
        return False
    for n, s in zip(a.shape[:-1], a.strides[:-1]):  # noqa: SIM110  # a loop: cheap on the warm path
        if n > 1 and s % 16:
            return False
    return True


class FlashMma(NvidiaCandidate):
    name = "flash_mma"
    op = "attention"
    tier = Tier.EMITTED
    priority = 6  # ahead of flash_attention (CUDA cores) where both apply
    templates = ("flash_mma.cu",)
    dtypes = ("float16", "bfloat16")

    def param_space(self):
        # bq: query rows a block (bq/16 warps); bk: keys a shared-memory tile. Registers a thread do not grow
        # with bq (16 rows a warp); bk 64 halves the block's barriers against 32.
        return [{"bq": 64, "bk": 64}, {"bq": 128, "bk": 64}, {"bq": 64, "bk": 32}, {"bq": 128, "bk": 32}]

    def applies_to(self, region):
        if region.dtype not in self.dtypes:
            return (f"dtype {region.dtype} is not one of float16, bfloat16 (tensor cores would mean TF32, over the "
                    f"{region.dtype} budget); flash_attention serves it")
        d = region.dims["d"]
        if d not in HEAD_DIMS:
            return f"head size {d} is not 64 or 128 (the kernel's fragment tiling); flash_attention serves it"
        if region.dims["heads"] > MAX_GRID_YZ or region.dims["batch"] > MAX_GRID_YZ:
            return f"grid: heads and batch each at most {MAX_GRID_YZ} (grid.y, grid.z)"
        return True

    def launch_plan(self, region, params: dict) -> tuple:
        """(kernel, grid, block, sizes, strides) of ``run(region, params)``: worked out once per shape, strides,
        path and solution (``backend.launches``), so a warm call checks alignment, packs its arrays and launches."""
        q, k, v = region.q, region.k, region.v
        strided = not (rows16(q) and rows16(k) and rows16(v))
        bq, bk = params["bq"], params["bk"]
        key = (self.name, region.dtype, region.causal, bq, bk, strided, q.shape, k.shape, q.strides, k.strides,
               v.strides)
        launches = self.backend.launches
        found = launches.get(key)
        if found is None:
            b, h, sq, sk, d = (region.dims[n] for n in ("batch", "heads", "q", "k", "d"))
            defines = (("HEAD_D", d), ("BQ", bq), ("BK", bk), ("CAUSAL", int(region.causal)),
                       ("STRIDED", int(strided)), ("MMA_TYPE", MMA_TYPE[region.dtype]))
            fn = kernel("flash_mma", region.dtype, self.templates, defines)
            strides = tuple(np.int64(s // a.itemsize) for a in (q, k, v) for s in a.strides)
            if len(launches) >= 65536:  # bounded: a shape sweep can't grow it forever
                launches.clear()
            found = launches[key] = (fn, ((sq + bq - 1) // bq, h, b), (bq // 16 * 32,),
                                     (np.int32(h), np.int32(sq), np.int32(sk)), strides)
        return found

    def run(self, region, params):
        out = region.alloc_out()
        if out.size == 0:
            return out
        fn, grid, block, sizes, strides = self.launch_plan(region, params)
        fn(grid, block, (region.q, region.k, region.v, out, *sizes, np.float32(region.scale), *strides))
        return out


register(FlashMma())
