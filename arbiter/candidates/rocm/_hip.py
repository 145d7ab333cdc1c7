"""Helpers shared by the ROCm candidates: kernels from the shared templates via hiprtc.

A ROCm kernel's source is the NVIDIA target's kernel text with one difference: ``portable.cuh``
(beside this module) comes right after the ``#define`` lines, before ``common.cuh``. The template
files are read from ``arbiter/candidates/nvidia/``; there is no second copy of any kernel here.
Nothing touches hip-python at import: candidates register, and list their reasons, without ROCm.
"""
from __future__ import annotations

import hashlib
import inspect
from pathlib import Path
from typing import ClassVar

from arbiter import targets
from arbiter.candidates import Candidate
from arbiter.candidates.nvidia._cuda import NvidiaCandidate
from arbiter.memo import Memo
from arbiter.targets import rocm
from arbiter.targets.nvrtc import DTYPE_MACRO, template

PORTABLE = (Path(__file__).parent / "portable.cuh").read_text()
# float16/bfloat16 conversions in common.cuh are PTX inline assembly, which HIP cannot compile
# (portable.cuh says so); until common.cuh routes them through portable.cuh, kernels serve float32.
KERNEL_DTYPES = ("float32",)


def kernel_source(dtype: str, defines: dict, files: tuple[str, ...], prelude: str = "") -> str:
    """Full HIP text: element type and parameter #defines, portable.cuh, common.cuh, ``prelude``, ``files``."""
    head = [f"#define {DTYPE_MACRO[dtype]} 1"] + [f"#define {k} {v}" for k, v in defines.items()]
    parts = ["\n".join(head), PORTABLE, template("common.cuh"), prelude] + [template(f) for f in files]
    return "\n".join(p for p in parts if p)


_compiled: Memo = Memo()  # (source, name, arch) -> rocm.Kernel
_kernels: Memo = Memo()


def compiled(source: str, name: str) -> rocm.Kernel:
    """The kernel ``name`` of ``source`` compiled by hiprtc for this device; cached by the source's hash."""
    arch = rocm.TARGET.gcn_arch()
    key = (hashlib.sha256(source.encode()).hexdigest(), name, arch)
    fn = _compiled.get(key)
    if fn is None:
        fn = _compiled[key] = rocm.Kernel(rocm.compile_source(source, name, arch), name)
    return fn


def kernel(name: str, dtype: str, files: tuple[str, ...], defines: tuple = (), prelude: str = "") -> rocm.Kernel:
    """The loaded kernel ``name`` of ``files`` for ``dtype`` and ``defines``; memoised on the arguments."""
    key = (name, dtype, files, defines, prelude)
    fn = _kernels.get(key)
    if fn is None:
        fn = _kernels[key] = compiled(kernel_source(dtype, dict(defines), files, prelude), name)
    return fn


def no_epilogue(region) -> bool | str:
    """The rocm target has no array library to compose an epilogue after a kernel, so these decline one."""
    if getattr(region, "has_epilogue", False):
        return "computes a @ b only; the rocm target has no array library to compose the fused epilogue"
    return True


class RocmCandidate(Candidate):
    """Base of the ROCm candidates: availability from the target, portable.cuh and templates in the identity.

    An emitted kernel's candidate is the nvidia one reused: ``class RocmGemv(RocmCandidate, Gemv)`` with a
    ``name`` keeps Gemv's param_space, applies_to and launch geometry, and takes from this class (first in
    the MRO) the target, float32, hiprtc as ``load_kernel`` and the declined epilogues.
    """

    target = "rocm"
    # Shared .cu/.cuh files (in arbiter/candidates/nvidia/). Declared without a value: a default here
    # would shadow the reused nvidia class's, so source() reads it with getattr.
    templates: ClassVar[tuple[str, ...]]
    dtypes: ClassVar[tuple[str, ...]] = KERNEL_DTYPES
    load_kernel = staticmethod(kernel)

    def available(self):
        return targets.get("rocm").available()

    def applies_to(self, region):
        ok = super().applies_to(region)
        return ok if ok is not True else no_epilogue(region)

    def source(self):
        # A reused nvidia class's code runs here too, so its change must re-verify this candidate as well.
        reused = [inspect.getsource(c) for c in type(self).__mro__[1:]
                  if issubclass(c, NvidiaCandidate) and c is not NvidiaCandidate]
        files = getattr(self, "templates", ())
        texts = [PORTABLE, template("common.cuh")] + [template(f) for f in files] if files else []
        return Candidate.source(self) + "".join(reused + texts)
