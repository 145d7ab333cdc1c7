"""Emitted RMSNorm (``rmsnorm.cu``): warp per row for short rows, block per row for long ones.

The solution index is the threads per row (32 = a warp, with ``rows_per_block`` rows a block) and
vector loads; threads grow (to 1024) when a row would not fit in registers.
"""
from __future__ import annotations

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, aligned16, check_rows
from arbiter.candidates.nvidia._rows import MAX_PER_THREAD, MAX_THREADS, launch_rmsnorm


class RMSNormRows(NvidiaCandidate):
    name = "rmsnorm_rows"
    op = "rmsnorm"
    tier = Tier.EMITTED
    priority = 5
    templates = ("rows_common.cuh", "rmsnorm.cu")

    def param_space(self):
        return [{"threads": 256, "vec": True}, {"threads": 32, "vec": True}, {"threads": 128, "vec": True},
                {"threads": 1024, "vec": True}, {"threads": 256, "vec": False}]

    def applies_to(self, region):
        return check_rows(region, self.dtypes, MAX_THREADS * MAX_PER_THREAD)

    def run(self, region, params):
        vec = params["vec"] and aligned16(region.weight)
        return launch_rmsnorm(region, region.alloc_out(), params["threads"], 4, vec, self.load_kernel)


register(RMSNormRows())
