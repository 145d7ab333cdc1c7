"""Helpers for the op-kind tests: gate every applicable candidate of a region, forced by name."""
from __future__ import annotations

import numpy as np
import pytest

import arbiter
from arbiter.candidates import REGISTRY
from arbiter.ops import op_kind
from arbiter.verify import budget_of, compare


def force_each(region, expected: set[str]) -> dict:
    """Force every candidate that applies to ``region`` through ``arbiter.arbitrate`` (so through the F4
    gate), dispatch it, and check the served output against the oracle. ``expected`` must all apply.
    Returns {name: Decision}."""
    applicable = [c for c in REGISTRY.candidates(region.target, region.op) if c.applies_to(region) is True]
    names = {c.name for c in applicable}
    assert expected <= names, f"expected {expected - names} to apply to {region}"
    decisions = {}
    ref = op_kind(region.op).oracle(region)
    for cand in applicable:
        decision = arbiter.arbitrate(region.op, region, force=cand.name)
        assert decision.winner.candidate is cand and decision.winner.verdict.passed, str(decision)
        out = np.asarray(arbiter.run_arbitrated(region.op, region))
        y = out.astype(np.complex128 if np.iscomplexobj(out) else np.float64)
        reason, _, _ = compare(y, ref, budget_of(cand, region.op, region.dtype)[0], parts=op_kind(region.op).parts)
        assert reason == "", f"{cand.name}: {reason}"
        decisions[cand.name] = decision
    return decisions


@pytest.fixture
def every_candidate():
    return force_each
