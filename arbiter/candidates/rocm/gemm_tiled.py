"""Emitted GEMM on AMD GPUs: the nvidia ``gemm_tiled`` candidate, its template compiled by hiprtc (float32).

The same template, tiles and launch geometry as the nvidia target's ``gemm_tiled``; only the compiler
(hiprtc, through ``portable.cuh``) differs. The solution index is the tile shape.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia.gemm_tiled import GemmTiled
from arbiter.candidates.rocm._hip import RocmCandidate


class RocmGemmTiled(RocmCandidate, GemmTiled):
    name = "rocm_gemm_tiled"


register(RocmGemmTiled())
