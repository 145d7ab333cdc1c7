"""Emitted GEMV on NVIDIA GPUs (N == 1): the shared ``gemv_warp`` template (``candidates/gpu_templates/gemv.py``)
compiled by NVRTC, fused epilogues composed with CuPy.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.gpu_templates.gemv import Gemv as GemvTemplate
from arbiter.candidates.nvidia._cuda import CupyEpilogue, NvidiaCandidate


class Gemv(NvidiaCandidate, CupyEpilogue, GemvTemplate):
    name = "gemv_warp"


register(Gemv())
