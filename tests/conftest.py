"""Shared fixtures: every test gets a fresh in-memory store and clean dispatch state."""
from __future__ import annotations

import contextlib

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
    yield
    dispatch.reset()
    env.reset()


def pytest_terminal_summary(terminalreporter):
    """The skipped tests as one line per reason, with its count (pytest's ``-rs`` prints a line per test function
    and location: about 190 lines here, most of them "no NVIDIA GPU"). ``-rs`` still lists them all."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped or "s" in (terminalreporter.config.option.reportchars or ""):
        return
    reasons: dict[str, int] = {}
    for report in skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    terminalreporter.write_line(f"{len(skipped)} skipped, for {len(reasons)} reason(s) (-rs lists each test):")
    for reason, n in sorted(reasons.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"  {n:4d}  {' '.join(reason.split())[:200]}")


def pytest_sessionfinish(session, exitstatus):
    """A PostgreSQL server the store tests started for this session stops with it (issue 29, item 9)."""
    from store_support import stop_started_server

    stop_started_server()


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

    with contextlib.ExitStack() as scopes:  # closed in reverse: the registered candidates come back last
        yield lambda target, op, *candidates: scopes.enter_context(REGISTRY.only(target, op, candidates))
