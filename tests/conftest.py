"""Shared fixtures: every test gets a fresh in-memory store and clean dispatch state."""
from __future__ import annotations

import numpy as np
import pytest

from arbiter import dispatch, env
from arbiter.store import MemoryStore


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch, tmp_path):
    monkeypatch.delenv("ARBITER_POLICY", raising=False)
    monkeypatch.setenv("ARBITER_DB", str(tmp_path / "registry.db"))
    dispatch.configure(store=MemoryStore())
    dispatch.reset()
    dispatch._state.policy = None
    yield
    dispatch.reset()
    env.reset()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


requires_gpu = pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU with CuPy here")
