"""The rocm target's kernel backend: the shared templates compiled by hiprtc for the device's architecture.

A ROCm kernel's source is the NVIDIA target's kernel text with one difference, its dialect: ``portable.cuh``
(beside this module) comes right after the ``#define`` lines, before ``common.cuh``. There is no second copy
of any kernel. Nothing touches hip-python at import: candidates register, and list their reasons, without ROCm.
"""
from __future__ import annotations

from pathlib import Path

from arbiter.targets import rocm
from arbiter.targets.kernels import KernelBackend

PORTABLE = (Path(__file__).parent / "portable.cuh").read_text()
# float16/bfloat16 conversions in common.cuh are PTX inline assembly, which HIP cannot compile
# (portable.cuh says so); until common.cuh routes them through portable.cuh, kernels serve float32.
KERNEL_DTYPES = ("float32",)


def gcn_arch() -> str:
    """What hiprtc compiles for: the device's full architecture, features included."""
    return rocm.TARGET.gcn_arch()


def compile_source(source: str, name: str) -> rocm.Kernel:
    """The kernel ``name`` of ``source`` compiled by hiprtc for this device and loaded."""
    return rocm.Kernel(rocm.compile_source(source, name, gcn_arch()), name)


BACKEND = KernelBackend("rocm", __name__, compile_source, dialect=PORTABLE, dtypes=KERNEL_DTYPES, device=gcn_arch)
