"""Emitted fused attention (``attention.cu``): online softmax over key tiles, no score matrix.

One block serves ``warps * rows`` query rows of one (batch, head); every key tile of 32 is staged in
shared memory once for all of them. The kernel is specialised on the head size (bucketed exactly) and
the causal flag; it reads q, k and v through their strides, so every layout is served. The solution
index is the block shape (warps, query rows a warp; fewer rows where shared memory needs it). CUDA cores
only, float accumulation: it is the fused structure, not a tensor-core kernel (see docs/gpu_results.md for
how far that is from SDPA).
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate
from arbiter.targets.nvrtc import kernel

MAX_D = 128
SMEM_FLOATS = 48 * 1024 // 4  # static shared memory: Q rows + a padded K tile + a V tile (float each)


def rows_that_fit(d: int, warps: int, rows: int) -> int:
    """``rows`` a warp, lowered until the block's Q rows fit beside the K and V tiles (32 keys)."""
    block_rows = (SMEM_FLOATS - 32 * (2 * d + 1)) // max(d, 1)
    return max(1, min(rows, block_rows // warps))


class FlashAttention(NvidiaCandidate):
    name = "flash_attention"
    op = "attention"
    tier = Tier.EMITTED
    priority = 5
    templates = ("attention.cu",)

    def param_space(self):
        return [{"warps": 4, "rows": 4}, {"warps": 4, "rows": 8}, {"warps": 8, "rows": 2}, {"warps": 8, "rows": 4}]

    def applies_to(self, region):
        ok = self.check_dtype(region)
        if ok is not True:
            return ok
        if region.dims["d"] > MAX_D:
            return f"head size {region.dims['d']} > {MAX_D} (shared-memory tiles); the vendor candidates serve it"
        return True

    def run(self, region, params):
        out = region.alloc_out()
        b, h, sq, sk, d = (region.dims[n] for n in ("batch", "heads", "q", "k", "d"))
        if out.size == 0:
            return out
        warps = params["warps"]
        rows = rows_that_fit(d, warps, params["rows"])
        defines = (("HEAD_D", d), ("WARPS", warps), ("ROWS", rows), ("CAUSAL", int(region.causal)))
        fn = kernel("attention_fused", region.dtype, ("attention.cu",), defines)
        strides = []
        for a in (region.q, region.k, region.v):
            strides += [np.int64(s // a.itemsize) for s in a.strides]
        fn(((sq + warps * rows - 1) // (warps * rows), b * h), (warps * 32,),
           (region.q, region.k, region.v, out, np.int32(h), np.int32(sq), np.int32(sk), np.float32(region.scale),
            *strides))
        return out


register(FlashAttention())
