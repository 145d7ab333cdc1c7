"""Emitted GEMM (epilogues fused) through Triton on NVIDIA GPUs: the shared template
(``candidates/gpu_templates/triton_matmul.py``) compiled by Triton's CUDA backend, launched on CuPy's current stream.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.gpu_templates.triton_matmul import TritonMatmul as TritonMatmulTemplate


class TritonMatmul(TritonMatmulTemplate):
    target = "nvidia"


register(TritonMatmul())
