"""Emitted softmax on AMD GPUs, 32 threads a row (the shared ``softmax.cu``, hiprtc, float32).

On wave64 GPUs one wavefront serves two rows (``portable.cuh`` pins shuffles to width 32).
"""
from __future__ import annotations

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import check_rows
from arbiter.candidates.rocm._hip import RocmCandidate
from arbiter.candidates.rocm._rows import launch_softmax

MAX_COLS = 32 * 64


class RocmSoftmaxWarp(RocmCandidate):
    name = "rocm_softmax_warp"
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
        return launch_softmax(region, region.alloc_out(), 32, params["rows_per_block"], params["vec"])


register(RocmSoftmaxWarp())
