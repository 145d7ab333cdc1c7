"""Emitted fused SwiGLU through Triton on NVIDIA GPUs: the shared template
(``candidates/gpu_templates/triton_gated.py``) compiled by Triton's CUDA backend, launched on CuPy's current stream.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.gpu_templates.triton_gated import TritonGated as TritonGatedTemplate


class TritonGated(TritonGatedTemplate):
    target = "nvidia"


register(TritonGated())
