"""What the candidates of every GPU target share: their base class and the launch arithmetic.

A GPU candidate compiles the shared templates through its target's kernel backend (``backend``:
``arbiter.targets.nvrtc.BACKEND`` on nvidia, ``arbiter.targets.hiprtc.BACKEND`` on rocm), so one candidate's
launch code runs on either target; the backend's dialect and compiler are all that differ.
"""
from __future__ import annotations

import inspect

from arbiter.candidates import Candidate
from arbiter.targets.kernels import KernelBackend


def row_stride(array) -> int:
    """Elements between consecutive rows of a 2-D array."""
    return array.strides[0] // array.itemsize


def aligned16(*arrays) -> bool:
    for a in arrays:  # noqa: SIM110  # a loop, not all(<generator>): half the cost, on every warm call
        if a.data.ptr % 16:
            return False
    return True


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


class GpuCandidate(Candidate):
    """Base of the GPU candidates: availability from the target, the templates compiled in the code identity."""

    backend: KernelBackend  # the target's compile and kernel cache
    templates: tuple[str, ...] = ()  # .cu/.cuh files whose text is part of this candidate's identity
    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")

    def available(self):
        return self.backend.available()

    def check_dtype(self, region) -> bool | str:
        if region.dtype not in self.dtypes:
            return f"dtype {region.dtype} is not one of {', '.join(self.dtypes)}"
        return True

    def source(self):
        # Every class that names a candidate: a candidate reused on another target (``class RocmGemv(RocmCandidate,
        # Gemv)``) runs the reused class's code too, so its change must re-verify this candidate as well.
        named = [inspect.getsource(c) for c in type(self).__mro__[1:] if "name" in vars(c) and c is not Candidate]
        texts = [self.backend.identity_text(self.templates)] if self.templates else []
        return Candidate.source(self) + "".join(named + texts)
