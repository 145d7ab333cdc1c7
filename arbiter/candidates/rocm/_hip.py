"""What the ROCm candidates share: their base class and the declined epilogue.

Compile and kernel cache are the target's (``arbiter.targets.hiprtc``: the shared GPU templates with ``portable.cuh``
as their dialect). Nothing touches hip-python at import: candidates register, and list their reasons, without ROCm.
"""
from __future__ import annotations

from arbiter.candidates.gpu import GpuCandidate
from arbiter.targets import hiprtc


def no_epilogue(region) -> bool | str:
    """The rocm target has no array library to compose an epilogue after a kernel, so these decline one."""
    if getattr(region, "has_epilogue", False):
        return "computes a @ b only; the rocm target has no array library to compose the fused epilogue"
    return True


class RocmCandidate(GpuCandidate):
    """Base of the ROCm candidates: the rocm target, its hiprtc backend (float32 kernels), declined epilogues.

    An emitted GEMM's candidate is the shared template (``candidates/gpu_templates``) reused:
    ``class RocmGemv(RocmCandidate, Gemv)`` with a ``name`` keeps Gemv's param_space, applies_to and launch, and
    takes from this class (first in the MRO) the target, the backend, its dtypes and the declined epilogues.
    (Row kernels are table entries: ``rocm/rows.py``.)
    """

    target = "rocm"
    backend = hiprtc.BACKEND
    dtypes: tuple[str, ...] = hiprtc.KERNEL_DTYPES

    def applies_to(self, region):
        ok = super().applies_to(region)
        return ok if ok is not True else no_epilogue(region)
