"""Candidates of the ``rocm`` target (AMD GPUs through hip-python), one module each.

The emitted kernels are the shared GPU templates (``arbiter/candidates/gpu_templates/``) compiled by the
rocm kernel backend (``arbiter.targets.hiprtc``: hiprtc, with ``portable.cuh`` placed before ``common.cuh``).
The vendor candidate calls hipBLAS.
"""
