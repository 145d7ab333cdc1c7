"""Emitted row kernels on NVIDIA GPUs: every entry of the row-kernel table offered on nvidia, compiled by NVRTC.

``softmax_warp``, ``softmax_block``, ``rmsnorm_rows`` and ``layernorm_rows``: see ``arbiter.candidates.gpu_rows``
for the table (templates, parameters, requirements) and the one candidate class they share.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.gpu_rows import ROW_SPECS, RowKernel
from arbiter.targets import nvrtc

for spec in ROW_SPECS:
    if "nvidia" in spec.targets:
        register(RowKernel(spec, nvrtc.BACKEND))
