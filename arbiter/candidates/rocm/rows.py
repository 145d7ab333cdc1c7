"""Emitted row kernels on AMD GPUs: the row-kernel table's entries offered on rocm, compiled by hiprtc (float32).

``rocm_softmax_warp``, ``rocm_softmax_block`` and ``rocm_rmsnorm_rows``: the nvidia entries' templates, parameters
and launch (``arbiter.candidates.gpu_rows``); only the backend differs. 32 threads a row as on NVIDIA: on wave64
GPUs one wavefront serves two rows (``portable.cuh`` pins shuffles to width 32). The hiprtc backend's dtypes
(float32) limit the entries'.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.gpu_rows import ROW_SPECS, RowKernel
from arbiter.targets import hiprtc

for spec in ROW_SPECS:
    if "rocm" in spec.targets:
        register(RowKernel(spec, hiprtc.BACKEND, name=f"rocm_{spec.name}"))
