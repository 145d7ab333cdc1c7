"""Emitted softmax, one block per row (``softmax.cu``): long rows held in registers across the block.

The solution index is the block size and vector loads; the block grows (to 1024) when a row needs it.
"""
from __future__ import annotations

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, check_rows
from arbiter.candidates.nvidia._rows import MAX_PER_THREAD, MAX_THREADS, launch_softmax


class SoftmaxBlock(NvidiaCandidate):
    name = "softmax_block"
    op = "softmax"
    tier = Tier.EMITTED
    priority = 4
    templates = ("rows_common.cuh", "softmax.cu")

    def param_space(self):
        return [{"threads": 256, "vec": True}, {"threads": 128, "vec": True}, {"threads": 512, "vec": True},
                {"threads": 1024, "vec": True}, {"threads": 256, "vec": False}]

    def applies_to(self, region):
        return check_rows(region, self.dtypes, MAX_THREADS * MAX_PER_THREAD)

    def run(self, region, params):
        return launch_softmax(region, region.alloc_out(), params["threads"], 1, params["vec"], self.load_kernel)


register(SoftmaxBlock())
