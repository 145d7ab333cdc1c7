"""Emitted row ops through Triton on NVIDIA GPUs: ``triton_softmax``, ``triton_rmsnorm`` and ``triton_layernorm``,
the shared template (``candidates/gpu_templates/triton_rows.py``) compiled by Triton's CUDA backend, launched on
CuPy's current stream. Below the CUDA row kernels (``rows.py``) in the tier; measurement decides when tuning.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.gpu_templates import triton_rows


class TritonSoftmax(triton_rows.TritonSoftmax):
    target = "nvidia"


class TritonRMSNorm(triton_rows.TritonRMSNorm):
    target = "nvidia"


class TritonLayerNorm(triton_rows.TritonLayerNorm):
    target = "nvidia"


register(TritonSoftmax())
register(TritonRMSNorm())
register(TritonLayerNorm())
