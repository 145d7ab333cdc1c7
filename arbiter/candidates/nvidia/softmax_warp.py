"""Emitted softmax, one warp per row (``softmax.cu``): short rows, several rows per block, row in registers.

The solution index is rows per block and vector loads. It serves buckets of up to 2048 columns
(64 registers per lane); longer rows go to ``softmax_block``.
"""
from __future__ import annotations

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, check_rows
from arbiter.candidates.nvidia._rows import launch_softmax

MAX_COLS = 32 * 64


class SoftmaxWarp(NvidiaCandidate):
    name = "softmax_warp"
    op = "softmax"
    tier = Tier.EMITTED
    priority = 5
    templates = ("rows_common.cuh", "softmax.cu")

    def param_space(self):
        return [{"rows_per_block": 4, "vec": True}, {"rows_per_block": 8, "vec": True},
                {"rows_per_block": 4, "vec": False}]

    def applies_to(self, region):
        return check_rows(region, self.dtypes, MAX_COLS)

    def run(self, region, params):
        return launch_softmax(region, region.alloc_out(), 32, params["rows_per_block"], params["vec"], self.load_kernel)


register(SoftmaxWarp())
