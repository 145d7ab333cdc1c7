"""The kernel backend of a GPU target: kernel text from the shared templates, compiled and cached.

Both GPU targets compile the same readable ``.cu``/``.cuh`` templates (shipped beside the NVIDIA candidates,
``arbiter/candidates/gpu_templates/``, package data). A kernel's source is its element type and parameters as
``#define`` lines, the target's *dialect* prelude (nothing for CUDA; ``portable.cuh`` for HIP), ``common.cuh``,
an optional prelude of the caller's (a generated epilogue), then the template files: the compiled text, and its
hash, say exactly what ran. A ``KernelBackend`` is that recipe plus the target's compiler and its caches (by
arguments, so a warm call builds no text and hashes nothing; by source hash, so equal texts compile once; the
candidates' launch plans, which hold its kernels).
``arbiter.targets.nvrtc`` (NVRTC through CuPy) and ``arbiter.targets.hiprtc`` (hiprtc through hip-python) each
make one; candidates and ``arbiter.synth`` compile through their target's, never through another's.

Nothing here imports a GPU library: candidates register (and list their reasons) on machines without one.
"""
from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from arbiter import targets
from arbiter.memo import Memo

TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "candidates" / "gpu_templates"
DTYPE_MACRO = {"float32": "ARB_F32", "float16": "ARB_F16", "bfloat16": "ARB_BF16"}
VEC16 = {"float32": 4, "float16": 8, "bfloat16": 8}  # elements per 16-byte load


@cache
def template(name: str) -> str:
    """The text of a kernel template file (``TEMPLATE_DIR``)."""
    return (TEMPLATE_DIR / name).read_text()


def _backend_of(module: str) -> KernelBackend:
    return importlib.import_module(module).BACKEND


class KernelBackend:
    """Compile and kernel cache of one GPU target.

    ``compile(source, name)`` is the target's compiler: the launchable kernel ``name`` of ``source`` (called as
    ``fn(grid, block, args)``). ``dialect`` is the prelude that makes the shared templates compile there;
    ``dtypes`` the element types its kernels serve; ``device()`` names what code is compiled for, when one
    source compiles differently per device (hiprtc: the GPU architecture), so the compile cache keys on it.
    ``available()`` says whether it can compile and launch here (NVRTC needs CuPy, which the nvidia target can
    run without). ``module`` is where the backend lives (its ``BACKEND``): a candidate holding it pickles by
    reference, and a child process (``arbiter.isolate``) uses its own backend and caches.
    """

    def __init__(self, target: str, module: str, compile: Callable[[str, str], Any], *, dialect: str = "",
                 dtypes: tuple[str, ...] = tuple(DTYPE_MACRO), device: Callable[[], str] = str,
                 available: Callable[[], bool | str] | None = None):
        self.target, self.module, self.compile, self.dialect, self.dtypes = target, module, compile, dialect, dtypes
        self.device = device
        # True, or why this backend cannot compile and launch here; by default its target's gate
        self.available = available or (lambda: targets.get(target).available())
        self._compiled: Memo = Memo()  # (source digest, name, device) -> kernel
        self._kernels: Memo = Memo()  # kernel() arguments -> kernel
        # Candidates' launch plans (kernel, grid, block, fixed arguments), by keys of their own: they hold this
        # backend's kernels, so they live and are cleared with them.
        self.launches: Memo = Memo()

    def __reduce__(self):
        return _backend_of, (self.module,)

    def __repr__(self):
        return f"<kernel backend of {self.target}>"

    def source(self, dtype: str, defines: dict, files: tuple[str, ...], prelude: str = "") -> str:
        """Full kernel text: element type and parameter #defines, the dialect, common.cuh, ``prelude``, ``files``."""
        head = [f"#define {DTYPE_MACRO[dtype]} 1"] + [f"#define {k} {v}" for k, v in defines.items()]
        parts = ["\n".join(head), self.dialect, template("common.cuh"), prelude] + [template(f) for f in files]
        return "\n".join(p for p in parts if p)

    def identity_text(self, files: tuple[str, ...]) -> str:
        """What of this backend a candidate compiling ``files`` computes with: the dialect, common.cuh, the files."""
        return "".join([self.dialect, template("common.cuh")] + [template(f) for f in files])

    def compiled(self, source: str, name: str):
        """The kernel ``name`` of ``source``, compiled once per source hash (and device)."""
        key = (hashlib.sha256(source.encode()).hexdigest(), name, self.device())
        fn = self._compiled.get(key)
        if fn is None:
            fn = self._compiled[key] = self.compile(source, name)
        return fn

    def kernel(self, name: str, dtype: str, files: tuple[str, ...], defines: tuple = (), prelude: str = ""):
        """The kernel ``name`` of ``files`` for ``dtype`` and ``defines`` ((name, value) pairs), after ``prelude``.

        Memoised on the arguments, so a warm call builds no source text and hashes nothing.
        """
        key = (name, dtype, files, defines, prelude)
        fn = self._kernels.get(key)
        if fn is None:
            fn = self._kernels[key] = self.compiled(self.source(dtype, dict(defines), files, prelude), name)
        return fn

    def clear(self) -> None:
        """Forget every compiled kernel (the runtime they were loaded into went away: a test's fake device)."""
        self._compiled.clear()
        self._kernels.clear()
        self.launches.clear()
