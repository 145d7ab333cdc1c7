"""Emitted GEMM on AMD GPUs: the shared ``gemm_tiled`` template compiled by hiprtc (float32).

The same template (``candidates/gpu_templates/gemm_tiled.py``), tiles and launch geometry as the nvidia target's
``gemm_tiled``; only the compiler (hiprtc, through ``portable.cuh``) differs. The solution index is the tile shape.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.gpu_templates.gemm_tiled import GemmTiled
from arbiter.candidates.rocm._hip import RocmCandidate


class RocmGemmTiled(RocmCandidate, GemmTiled):
    name = "rocm_gemm_tiled"


register(RocmGemmTiled())
