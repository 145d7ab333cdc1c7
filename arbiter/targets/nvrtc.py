"""Kernel text and the NVRTC compile cache of the nvidia target: what the NVIDIA candidates and the
target-neutral generator (``arbiter.synth.cuda``) both compile with, so neither borrows from the other.

Nothing here imports CuPy at module load (candidates register, and list their reasons, on machines without
it). Kernel sources are the readable ``.cu``/``.cuh`` template files shipped beside the NVIDIA candidates
(``arbiter/candidates/nvidia/``, package data; the ROCm candidates read them too); a kernel is the template
text preceded by ``#define`` lines for its element type and parameters, so the compiled text (and its hash)
says exactly what ran.
"""
from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from arbiter.memo import Memo
from arbiter.targets.nvidia import cupy_module

TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "candidates" / "nvidia"
DTYPE_MACRO = {"float32": "ARB_F32", "float16": "ARB_F16", "bfloat16": "ARB_BF16"}
VEC16 = {"float32": 4, "float16": 8, "bfloat16": 8}  # elements per 16-byte load


@cache
def template(name: str) -> str:
    """The text of a kernel template file (``TEMPLATE_DIR``)."""
    return (TEMPLATE_DIR / name).read_text()


def kernel_source(dtype: str, defines: dict, files: tuple[str, ...], prelude: str = "") -> str:
    """Full CUDA C text: element type and parameter #defines, common.cuh, ``prelude``, then ``files``."""
    head = [f"#define {DTYPE_MACRO[dtype]} 1"] + [f"#define {k} {v}" for k, v in defines.items()]
    parts = ["\n".join(head), template("common.cuh"), prelude] + [template(f) for f in files]
    return "\n".join(p for p in parts if p)


_functions: Memo = Memo()  # (source digest, name) -> compiled function


def compiled(source: str, name: str):
    """The kernel ``name`` of ``source`` compiled with NVRTC; cached by the source's hash.

    CuPy keeps its own on-disk cache too, so a new process skips NVRTC for a known source.
    """
    key = (hashlib.sha256(source.encode()).hexdigest(), name)
    fn = _functions.get(key)
    if fn is None:
        module = cupy_module().RawModule(code=source, options=("--std=c++17",))
        fn = _functions[key] = module.get_function(name)
    return fn


_kernels: Memo = Memo()


def kernel(name: str, dtype: str, files: tuple[str, ...], defines: tuple = (), prelude: str = ""):
    """The compiled kernel ``name`` of ``files`` for ``dtype`` and ``defines`` ((name, value) pairs).

    Memoised on the arguments, so a warm call builds no source text and hashes nothing.
    """
    key = (name, dtype, files, defines, prelude)
    fn = _kernels.get(key)
    if fn is None:
        fn = _kernels[key] = compiled(kernel_source(dtype, dict(defines), files, prelude), name)
    return fn
