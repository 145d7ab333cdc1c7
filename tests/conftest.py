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


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` skip cleanly where no NVIDIA GPU with CuPy is present (CI has none)."""
    from gpu_support import gpu_available

    if gpu_available():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU with CuPy here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def only_candidates():
    """``only_candidates("cpu", "matmul", c1, c2)``: exactly these candidates for (target, op) during a test."""
    from arbiter.candidates import REGISTRY

    saved = {}

    def use(target, op, *candidates):
        REGISTRY.load_builtin(target)
        saved.setdefault((target, op), dict(REGISTRY._by_target_op.get((target, op), {})))
        REGISTRY._by_target_op[(target, op)] = {c.name: c for c in candidates}
        REGISTRY._changed()

    yield use
    for k, v in saved.items():
        REGISTRY._by_target_op[k] = v
    REGISTRY._changed()
