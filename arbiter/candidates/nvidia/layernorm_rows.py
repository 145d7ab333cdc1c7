"""Emitted LayerNorm (``layernorm.cu``): warp per row for short rows, block per row for long ones.

Same scaffolding as ``rmsnorm_rows`` (``rows_common.cuh``, ``_rows.plan``): the row is read once
into registers, mean and variance are two register passes, the result is written once. The
solution index is the threads per row (32 = a warp, four rows a block) and vector loads.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, aligned16, check_rows, kernel
from arbiter.candidates.nvidia._rows import MAX_PER_THREAD, MAX_THREADS, plan


class LayerNormRows(NvidiaCandidate):
    name = "layernorm_rows"
    op = "layernorm"
    tier = Tier.EMITTED
    priority = 5
    templates = ("rows_common.cuh", "layernorm.cu")

    def param_space(self):
        return [{"threads": 256, "vec": True}, {"threads": 32, "vec": True}, {"threads": 128, "vec": True},
                {"threads": 1024, "vec": True}, {"threads": 256, "vec": False}]

    def applies_to(self, region):
        return check_rows(region, self.dtypes, MAX_THREADS * MAX_PER_THREAD)

    def run(self, region, params):
        out = region.alloc_out()
        weights = (region.weight,) + ((region.bias,) if region.bias is not None else ())
        threads, width, iters = plan(region, out, params["threads"], params["vec"] and aligned16(*weights))
        rpb = 4 if threads == 32 else 1
        defines = (("ROW_THREADS", threads), ("ROWS_PER_BLOCK", rpb), ("VEC", width), ("ITERS", iters),
                   ("HAS_BIAS", int(region.bias is not None)))
        fn = kernel("layernorm_rows", region.dtype, ("rows_common.cuh", "layernorm.cu"), defines)
        rows, cols = region.dims["rows"], region.dims["cols"]
        if rows and cols:
            bias = region.bias if region.bias is not None else region.weight  # unread when HAS_BIAS is 0
            fn(((rows + rpb - 1) // rpb,), (threads * rpb,),
               (region.x, region.weight, bias, out, np.int32(rows), np.int32(cols), np.int64(cols),
                np.int64(cols), np.float32(region.eps)))
        return out


register(LayerNormRows())
