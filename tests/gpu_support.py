"""GPU presence for tests (imported by name: `pythonpath = ["tests"]` in pyproject.toml)."""
from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


requires_gpu = pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU with CuPy here")
