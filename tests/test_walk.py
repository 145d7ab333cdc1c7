"""One way into selection (issue 27 item 3, issue 41 item 3): every key is decided through ``arbiter.decide.decide``
with one ``Request``, a stored winner is gated once per miss, and
the walk of ``region`` from ``run_arbitrated`` (``benchmarks/walk.py``: the arbiter functions it is handed to, once
per call site, and the returns that go down again) stays short."""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import arbiter
from arbiter import Candidate, Tier, dispatch, select
from arbiter import env as envmod
from arbiter.regions import Matmul
from arbiter.solution import ChosenBy, Solution
from arbiter.store import MemoryStore, SolutionRecord

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


def test_selection_is_entered_through_decide_alone():
    # issue 41 item 3: misses, arbitrate, capture stand-ins, arbiter tune / run / explain and tuning workers hand
    # one Request to arbiter.decide.decide; select.choose and tune.tune_region are called from nowhere else
    root = Path(__file__).resolve().parents[1] / "arbiter"
    callers: dict[str, set] = {"choose": set(), "tune_region": set(), "decide": set()}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", getattr(node.func, "id", None))
                if name in callers:
                    callers[name].add(str(path.relative_to(root)))
    assert callers["choose"] == {"decide.py", "tune.py"}, callers
    assert callers["tune_region"] == {"decide.py"}, callers
    assert callers["decide"] == {"dispatch.py", "cli/tune.py", "cli/tune_run.py", "cli/run.py", "parallel.py"}, callers


class _Wrong(Candidate):
    """A matmul off by one everywhere: whatever stored it, it fails the gate now."""

    name, target, op, tier = "walk_wrong", "cpu", "matmul", Tier.HAND_TUNED

    def run(self, region, params):
        out = region.out if region.out is not None else np.empty((region.m, region.n), region.a.dtype)
        np.matmul(region.a, region.b, out=out)
        out += 1
        return out


def test_a_stored_winner_is_gated_once_per_miss(monkeypatch, only_candidates):
    # The key's stored winner fails the gate now: the miss's stand-in is chosen with its verdict known, not fetched
    # (or, without a registry, computed) a second time (it was twice before: in _stored and again in selection).
    from arbiter import verify
    from arbiter.candidates.cpu.numpy_matmul import NumpyMatmul

    only_candidates("cpu", "matmul", _Wrong(), NumpyMatmul())
    monkeypatch.setenv("ARBITER_FIRST_CALLS", "off")
    rng = np.random.default_rng(1)
    region = Matmul(*(rng.standard_normal((24, 24)).astype(np.float32) for _ in range(2)))
    st = MemoryStore()
    env = envmod.environment("cpu")
    st.save_solution(SolutionRecord.of(region.key.id, Solution.of(_Wrong(), {}), ChosenBy.FORCED, env.fingerprint),
                     env)
    gated = []
    real = verify.verdict_for
    monkeypatch.setattr(select, "verdict_for", lambda cand, *a, **k: gated.append(cand.name) or real(cand, *a, **k))
    dispatch.reset()
    dispatch.configure(store=st)
    try:
        arbiter.run_arbitrated("matmul", region)
        assert dispatch.route(region.key).label == "numpy_matmul"
        assert dispatch.stats()[0]["fallbacks"] == 1
    finally:
        dispatch.reset()
    assert gated == ["walk_wrong", "numpy_matmul"]
