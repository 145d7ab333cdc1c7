"""What the gate tests share about the built-in candidates."""
from __future__ import annotations

from arbiter.candidates import REGISTRY
from arbiter.verify import verify


def assert_builtins_pass(op: str, region) -> int:
    """Every available built-in CPU candidate of ``op`` that applies to ``region`` passes the gate there (its first
    parameter set); returns how many were gated, at least one."""
    served = 0
    for cand in REGISTRY.candidates("cpu", op):
        if cand.available() is not True:
            continue
        verdict = verify(cand, (cand.param_space() or [{}])[0], region)
        if "does not apply" in verdict.reason:
            continue
        assert verdict.passed, f"{cand.name}: {verdict.reason}"
        served += 1
    assert served >= 1
    return served
