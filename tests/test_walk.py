"""One way into selection (issue 27 item 3): a miss reaches selection through ``arbiter.decide.decide`` alone, and
the walk of ``region`` from ``run_arbitrated`` (``benchmarks/walk.py``: the arbiter functions it is handed to, once
per call site, and the returns that go down again) stays short."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from arbiter import dispatch
from arbiter.regions import Matmul
from arbiter.store import MemoryStore

WALK = Path(__file__).resolve().parents[1] / "benchmarks" / "walk.py"


def _walk_module():
    spec = importlib.util.spec_from_file_location("walk", WALK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("policy", ["tier"])
def test_a_miss_reaches_selection_through_decide_alone(policy, monkeypatch):
    # selection's walk: the served call's first-call check (issue 38 item 4, arbiter.audit) is off for it
    monkeypatch.setenv("ARBITER_FIRST_CALLS", "off")
    walk = _walk_module()
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((24, 24)).astype(np.float32) for _ in range(2))
    dispatch.reset()
    dispatch.configure(store=MemoryStore())
    try:
        stops, climbs, listed = walk.walk(Matmul(a, b), policy)
    finally:
        dispatch.reset()
    # Before: _miss -> _decide_miss -> _stored, nearest_winners, decide_and_store (and _serve_disabled, tune_region
    # and select.decide for a stand-in beside them): five ways in, chosen in dispatch.
    under_miss = [name for depth, name in listed if depth == 2]
    assert under_miss == ["decide.py:decide", "dispatch.py:_install"], listed
    assert stops <= 20 and climbs <= 5, listed
