"""Every exact shape once (issue 38 item 4), by default: at audit rate 0 the first call of each signature new to the
process (the region memo marks it: ``region.first_call``) is checked against the oracle, on the audit thread
(``background``, the default) or before its result is returned (``before``: a failure serves the next solution);
``off`` turns it off. A kernel wrong at one width inside a bucket the gate probed elsewhere is demoted on the first
call at that width; the bucket's other widths keep it."""
from __future__ import annotations

import numpy as np
import pytest

import arbiter
from arbiter import audit, dispatch
from arbiter.candidates import REGISTRY
from arbiter.region_memo import Memoized
from arbiter.regions import Softmax
from audit_faults import OneWidth, softmax


def _x(cols, seed=0):
    return np.random.default_rng(seed).standard_normal((8, cols)).astype(np.float32)


def _served(region):
    route = dispatch.route(region.key)
    return None if route is None else route.label


def _builtin():
    return REGISTRY.get("numpy_softmax", "cpu", "softmax")


@pytest.fixture(autouse=True)
def _default_first_calls(monkeypatch):
    monkeypatch.delenv("ARBITER_FIRST_CALLS", raising=False)
    monkeypatch.delenv("ARBITER_AUDIT", raising=False)
    arbiter.configure(audit=0.0)
    Memoized.recipes.clear()  # "new to the process": the memo is the process's, shared with earlier tests
    yield
    arbiter.configure(first_calls="background")
    audit.configure_first_calls(None)


def test_the_first_call_at_a_new_width_is_checked_in_the_background_by_default(only_candidates):
    only_candidates("cpu", "softmax", OneWidth(), _builtin())
    assert audit.first_calls() == "background" and audit.rate() == 0.0
    arbiter.run_arbitrated("softmax", Softmax(_x(1000)))
    assert audit.drain(30) and _served(Softmax(_x(1000))) == "wrong_at_one_width"
    for cols in (600, 900):  # other widths of the bucket: right, kept
        arbiter.run_arbitrated("softmax", Softmax(_x(cols)))
    assert audit.drain(30) and _served(Softmax(_x(1000))) == "wrong_at_one_width"
    checked = audit.counts.checked
    for _ in range(5):  # the same signature again: not its first call, not checked
        arbiter.run_arbitrated("softmax", Softmax(_x(900, seed=3)))
    assert audit.drain(30) and audit.counts.checked == checked
    arbiter.run_arbitrated("softmax", Softmax(_x(777)))  # the first call at 777: wrong (served, then demoted)
    assert audit.drain(30) and _served(Softmax(_x(777))) is None  # out of the table: the next call misses
    y = arbiter.run_arbitrated("softmax", Softmax(_x(777, seed=1)))
    np.testing.assert_allclose(y, softmax(_x(777, seed=1).astype(np.float64)), rtol=1e-5)
    assert _served(Softmax(_x(777))) == "numpy_softmax"


def test_before_serving_a_wrong_first_call_is_never_returned(only_candidates):
    only_candidates("cpu", "softmax", OneWidth(), _builtin())
    arbiter.configure(first_calls="before")
    arbiter.run_arbitrated("softmax", Softmax(_x(1000)))
    assert _served(Softmax(_x(1000))) == "wrong_at_one_width"
    y = arbiter.run_arbitrated("softmax", Softmax(_x(777, seed=2)))  # checked now: the next solution serves it
    np.testing.assert_allclose(y, softmax(_x(777, seed=2).astype(np.float64)), rtol=1e-5)
    assert _served(Softmax(_x(777))) == "numpy_softmax"


def test_off_checks_nothing(only_candidates):
    fault = OneWidth()
    only_candidates("cpu", "softmax", fault, _builtin())
    arbiter.configure(first_calls="off")
    arbiter.run_arbitrated("softmax", Softmax(_x(1000)))
    arbiter.run_arbitrated("softmax", Softmax(_x(777)))
    assert audit.drain(30) and _served(Softmax(_x(777))) == "wrong_at_one_width"
    route = dispatch.route(Softmax(_x(777)).key)
    assert route.run == fault.run  # the candidate's own run: nothing between


def test_the_memo_marks_only_a_new_signature_and_a_region_run_twice_is_checked_once():
    first = Softmax(_x(321, seed=9))
    assert first.first_call
    assert not Softmax(_x(321, seed=10)).first_call  # the memo's recipe: not marked
    with pytest.raises(ValueError, match="first_calls"):
        arbiter.configure(first_calls="always")
