"""Candidates of the ``rocm`` target (AMD GPUs through hip-python), one module each.

The emitted kernels are the NVIDIA target's own templates (``arbiter/candidates/nvidia/*.cu``)
compiled by hiprtc with ``portable.cuh`` (beside this file) placed before ``common.cuh``; ``_hip.py``
does that. The vendor candidate calls hipBLAS.
"""
