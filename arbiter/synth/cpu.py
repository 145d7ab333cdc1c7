"""The synthesized tier's CPU backend: a chain rendered as a numba kernel, compiled and cached.

``source(chain, dtype, parallel)`` writes the kernel text (``TEMPLATE`` below, one line per step);
``kernel(chain, dtype, parallel)`` returns the compiled function. Each distinct source is written
once to ``<cache dir>/k_<content hash>.py`` and imported from there, so numba's on-disk cache
(``cache=True``, kept in ``<cache root>/numba``: ``arbiter.targets.numba_cache``) keeps its machine code across
processes; in a process the compiled kernel is kept
by content hash. The cache directory is ``<cache root>/synth/cpu``, the root being ``$ARBITER_CACHE_DIR``, else
``$XDG_CACHE_HOME/kernel-arbiter``, else ``~/.cache/kernel-arbiter``; it is used only when no other user can
write it (``arbiter.cachedir`` says how it is checked and what is used instead).

The kernel computes ``out[i, j] = chain(z[i, j])`` for 2-D ``z`` and ``out`` (which may be the same
array: the pass then runs in place), in the dtype of ``out`` (float32 or float64).
"""
from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
from pathlib import Path

from arbiter.synth import ACTIVATIONS, Chain, content_hash, render_expression

DTYPES = ("float32", "float64")

TEMPLATE = '''\
# Synthesized by arbiter.synth.cpu from the chain below; regenerated, never edited.
# chain: {chain}
# dtype: {dtype}, parallel: {parallel}
import math

import numpy as np
from numba import prange

from arbiter.targets.numba_cache import njit  # cached in the private folder only

T = np.{dtype}


@njit(parallel={parallel}, cache=True, fastmath={{"contract"}})
def kernel(z, out{params}):
    """out[i, j] = chain(z[i, j]); z may be out itself (the pass then runs in place)."""
    m, n = out.shape
    for i in {loop}(m):
        for j in range(n):
            v = z[i, j]
{body}
            out[i, j] = v
'''

# How each operand kind is read inside the loop over (i, j).
_READ = {"row": "{name}[j]", "col": "{name}[i]", "full": "{name}[i, j]", "scalar": "{name}"}
_SIGN = {"add": "+", "sub": "-", "mul": "*"}
_FUNCTIONS = {"erf": "math.erf", "tanh": "math.tanh", "exp": "math.exp", "max": "max"}


def source(chain: Chain, dtype: str, parallel: bool = True) -> str:
    """The numba source of ``chain`` computing in ``dtype``; raises ValueError for another dtype."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype: {dtype} is not one of {', '.join(DTYPES)} (numba has no other CPU floats)")
    lines = []
    for step in chain.steps:
        if step.op == "act":
            # Literals are cast to T so float32 chains stay in float32 arithmetic.
            expr = render_expression(ACTIVATIONS[step.arg], literal=lambda t: f"T({t})", functions=_FUNCTIONS)
            lines.append(f"v = {expr}  # {step.arg}")
        else:
            read = _READ[chain.operand(step.arg).kind].format(name=step.arg)
            lines.append(f"v = v {_SIGN[step.op]} {read}")
    body = "\n".join(" " * 12 + line for line in lines) or " " * 12 + "pass  # identity"
    params = "".join(f", {o.name}" for o in chain.operands)
    return TEMPLATE.format(chain=chain.text(), dtype=dtype, parallel=bool(parallel), params=params,
                           loop="prange" if parallel else "range", body=body)


def cache_dir() -> Path:
    """Where generated sources (and numba's cache of them) live: a folder only this user can write (they are
    imported, and numba unpickles its index beside them), created on first use. See ``arbiter.cachedir``."""
    from arbiter.cachedir import private_dir

    return private_dir("synth", "cpu")


class SynthKernel:
    """One generated kernel: its source, content hash, file, compiled function and compile seconds."""

    __slots__ = ("source", "hash", "path", "fn", "compile_s")

    def __init__(self, source_text: str, digest: str, path: Path, fn):
        self.source, self.hash, self.path, self.fn = source_text, digest, path, fn
        self.compile_s: dict[str, float] = {}

    def ensure(self, tag: str, args) -> float:
        """Compile (or load from numba's disk cache) for ``args`` before the first timed call."""
        if tag not in self.compile_s:
            from numba import typeof

            t0 = time.perf_counter()
            self.fn.compile(tuple(typeof(a) for a in args))
            self.compile_s[tag] = time.perf_counter() - t0
        return self.compile_s[tag]


_kernels: dict[str, SynthKernel] = {}
_lock = threading.Lock()


def load_source(text: str, stem: str, module_prefix: str, kernels: dict[str, SynthKernel]) -> SynthKernel:
    """The ``kernel`` function of the generated source ``text``, once per content hash (kept in ``kernels``).

    The text is written to ``<cache dir>/<stem>_<hash>.py`` and imported from there as module
    ``<module_prefix>_<hash>``, so numba's disk cache keeps the machine code across processes.
    """
    digest = content_hash(text)
    found = kernels.get(digest)
    if found is not None:
        return found
    with _lock:
        found = kernels.get(digest)
        if found is None:
            path = cache_dir() / f"{stem}_{digest}.py"
            if not path.exists() or path.read_text() != text:
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(text)
                os.replace(tmp, path)  # atomic: a concurrent process never imports half a file
            spec = importlib.util.spec_from_file_location(f"{module_prefix}_{digest}", path)
            assert spec is not None and spec.loader is not None  # a .py path always has a spec and a loader
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module  # numba's disk cache finds the kernel's globals by module name
            spec.loader.exec_module(module)
            found = kernels[digest] = SynthKernel(text, digest, path, module.kernel)
    return found


def kernel(chain: Chain, dtype: str, parallel: bool = True) -> SynthKernel:
    """The kernel for ``chain`` in ``dtype``: generated, written and imported once per content hash."""
    return load_source(source(chain, dtype, parallel), "k", "arbiter_synth_cpu", _kernels)
