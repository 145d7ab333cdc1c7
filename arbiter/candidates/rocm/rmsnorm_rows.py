"""Emitted RMSNorm on AMD GPUs (the shared ``rmsnorm.cu``, hiprtc, float32): 32 threads or a block a row."""
from __future__ import annotations

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import check_rows
from arbiter.candidates.nvidia._rows import MAX_PER_THREAD, MAX_THREADS
from arbiter.candidates.rocm._hip import RocmCandidate, aligned16
from arbiter.candidates.rocm._rows import launch_rmsnorm


class RocmRMSNormRows(RocmCandidate):
    name = "rocm_rmsnorm_rows"
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
        return launch_rmsnorm(region, region.alloc_out(), params["threads"], 4, vec)


register(RocmRMSNormRows())
