"""Emitted GEMM on the CUDA cores: the shared ``gemm_tiled`` template (``candidates/gpu_templates/gemm_tiled.py``)
compiled by NVRTC, fused epilogues composed with CuPy. The solution index is the tile shape.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.gpu_templates.gemm_tiled import GemmTiled as GemmTiledTemplate
from arbiter.candidates.nvidia._cuda import CupyEpilogue, NvidiaCandidate


class GemmTiled(NvidiaCandidate, CupyEpilogue, GemmTiledTemplate):
    name = "gemm_tiled"


register(GemmTiled())
