"""Emitted softmax on AMD GPUs, 32 threads a row: the nvidia ``softmax_warp`` candidate, compiled by hiprtc (float32).

On wave64 GPUs one wavefront serves two rows (``portable.cuh`` pins shuffles to width 32).
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia.softmax_warp import SoftmaxWarp
from arbiter.candidates.rocm._hip import RocmCandidate


class RocmSoftmaxWarp(RocmCandidate, SoftmaxWarp):  # type: ignore[misc]  # templates: declared in RocmCandidate, valued in the nvidia class
    name = "rocm_softmax_warp"


register(RocmSoftmaxWarp())
