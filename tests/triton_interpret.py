"""Running ``@triton.jit`` kernels on the CPU under Triton's interpreter, for the CPU tests of the Triton candidates.

Triton swaps its ``@triton.jit`` functions for interpreted ones only when it is imported under TRITON_INTERPRET=1
(its own reductions' combine functions included), so the interpreted tests of a file run in a fresh process:
``run_interpreted(__file__)`` from a driver test; in that process ``INTERPRETING`` is true and the tests whose names
contain ``interpreted`` run.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"


def run_interpreted(test_file: str) -> None:
    """Run ``test_file``'s ``interpreted`` tests under TRITON_INTERPRET=1 in a new process; fail with its output."""
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file, "-k",
                           "interpreted"], env=env, capture_output=True, text=True, timeout=900,
                          cwd=Path(__file__).parents[1])
    assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-6000:] + done.stderr[-3000:]


def interpreted_kernels():
    """``gpu_triton.kernels()`` interpreted (this process imported Triton under TRITON_INTERPRET=1), as a
    generator for a fixture; skips where this is not the interpreted process."""
    if not INTERPRETING:
        pytest.skip("run by the file's driver test under TRITON_INTERPRET=1")
    pytest.importorskip("triton")
    from arbiter.candidates import gpu_triton

    mp = pytest.MonkeyPatch()
    _index_on_numpy_2(mp)
    yield gpu_triton.kernels()
    mp.undo()


def _index_on_numpy_2(mp):
    """Triton's interpreter converts a scalar (a one-element array) to an index with ``int(array)``, which NumPy
    2.4 refuses for arrays of one dimension; ``range(0, C, BLOCK)`` with a runtime ``C`` needs it."""
    from triton.runtime import interpreter

    patch = interpreter._patch_lang_tensor

    def patched(tensor, scope):
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    mp.setattr(interpreter, "_patch_lang_tensor", patched)


def torch_view(array):
    """A zero-copy torch view of a NumPy operand (its strides kept; bfloat16 through its bits)."""
    import torch

    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view("int16")).view(torch.bfloat16)
    return torch.from_numpy(array)


def pointer(array) -> int:
    return array.__array_interface__["data"][0]
