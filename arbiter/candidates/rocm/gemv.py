"""Emitted GEMV on AMD GPUs (N == 1): the shared ``gemv_warp`` template, its ``gemv.cu`` compiled by hiprtc (float32).

32 lanes a row as on NVIDIA (``portable.cuh`` pins the shuffle width to 32, so on wave64 GPUs a
wavefront serves two rows). The solution index is the rows per block and vector loads.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.gpu_templates.gemv import Gemv
from arbiter.candidates.rocm._hip import RocmCandidate


class RocmGemv(RocmCandidate, Gemv):
    name = "rocm_gemv"


register(RocmGemv())
