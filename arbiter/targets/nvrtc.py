"""The nvidia target's kernel backend: the shared templates compiled by NVRTC (through CuPy).

``BACKEND`` (an ``arbiter.targets.kernels.KernelBackend``) is what the NVIDIA candidates and the synthesized
tier's CUDA generator (``arbiter.synth.cuda``) compile with. CUDA needs no dialect prelude: the templates are
written in it. CuPy is imported on the first compile only, and keeps its own on-disk cache too, so a new
process skips NVRTC for a known source.
"""
from __future__ import annotations

from arbiter.targets.kernels import KernelBackend
from arbiter.targets.nvidia import TARGET, cupy_module


def compile_source(source: str, name: str):
    """The kernel ``name`` of ``source`` compiled by NVRTC: a ``cupy.RawKernel``."""
    return cupy_module().RawModule(code=source, options=("--std=c++17",)).get_function(name)


BACKEND = KernelBackend("nvidia", __name__, compile_source, available=TARGET.cupy_available)
# The one entry point the NVIDIA-only candidates call (they never run on another target).
kernel = BACKEND.kernel
