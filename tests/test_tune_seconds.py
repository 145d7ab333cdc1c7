"""``arbiter.configure(tune_seconds=...)`` / ``ARBITER_TUNE_SECONDS``: the budget of a key tuned on a miss, for its
gate and again for its timing. Uncapped, every solution is gated (a GPU key compiles every Triton tile) and timed in
three modes, up to a second each: an eager llama block's seven keys took 169-299 s to tune on their first call
(H200, 2026-12-04)."""
import time

import numpy as np
import pytest

import arbiter
from arbiter import decide, dispatch, select
from arbiter.regions import Softmax
from arbiter.select import Status
from arbiter.store import MemoryStore
from arbiter.tune import tune_region


@pytest.fixture
def fresh():
    dispatch.configure(store=MemoryStore(), policy="tune")
    yield
    decide.set_tune_seconds(None)
    dispatch.configure(store=MemoryStore(), policy="tier")


def _spy(monkeypatch):
    seen = []
    real = decide.tune_region

    def spy(region, store, **kwargs):
        seen.append(kwargs.get("budget_s"))
        assert kwargs.get("gate_s") == kwargs.get("budget_s")  # one budget, for the gate and for the timing
        return real(region, store, **kwargs)

    monkeypatch.setattr(decide, "tune_region", spy)
    return seen


def _softmax():
    return Softmax(np.random.default_rng(2).standard_normal((8, 48)).astype(np.float32))


def test_the_budget_reaches_the_tuner_and_the_key_is_decided_by_measurement(fresh, monkeypatch):
    seen = _spy(monkeypatch)
    arbiter.configure(tune_seconds=0.3)
    region = _softmax()
    y = arbiter.run_arbitrated("softmax", region)
    x = region.x.astype(np.float64)
    np.testing.assert_allclose(y, np.exp(x) / np.exp(x).sum(-1, keepdims=True), rtol=1e-5)
    assert seen == [0.3]
    [row] = [r for r in arbiter.stats() if r["key"] == region.key.id]
    # Decided by timing: measurements stored for the key. Whether a margin separated ("measured") or the tier
    # default stayed ("tier") is the box's load, not the budget's doing (issue 41 item 4: no test on wall clock).
    from arbiter import dispatch
    from arbiter.env import environment

    assert row["policy"] in ("measured", "tier")
    assert dispatch.store().load_measurements(region.key.id, environment("cpu").fingerprint)


def test_the_environment_variable_sets_it_and_configure_overrides_it(fresh, monkeypatch):
    seen = _spy(monkeypatch)
    monkeypatch.setenv("ARBITER_TUNE_SECONDS", "0.25")
    arbiter.run_arbitrated("softmax", _softmax())
    arbiter.configure(tune_seconds=0.5)  # clears nothing it need not: a new key shows the new budget
    arbiter.run_arbitrated("softmax", Softmax(np.ones((3, 5), np.float32)))
    assert seen == [0.25, 0.5]


def test_unset_means_uncapped(fresh, monkeypatch):
    monkeypatch.delenv("ARBITER_TUNE_SECONDS", raising=False)
    assert decide.tune_seconds() is None


@pytest.mark.parametrize("bad", [0, -1, "soon", float("inf"), True])
def test_a_bad_budget_names_the_argument(fresh, bad):
    with pytest.raises(ValueError, match="tune_seconds"):
        arbiter.configure(tune_seconds=bad)


def test_a_bad_environment_value_names_the_variable(fresh, monkeypatch):
    monkeypatch.setenv("ARBITER_TUNE_SECONDS", "-3")
    with pytest.raises(ValueError, match="ARBITER_TUNE_SECONDS"):
        arbiter.run_arbitrated("softmax", _softmax())


def test_rounds_put_every_candidate_s_default_before_any_other_parameter_set():
    region = _softmax()
    rows = [r for r in select.screen(region, all_params=True) if r.status == Status.PENDING]
    firsts = [r.candidate.name for r in rows if r.params == r.candidate.param_space()[0]]
    ordered = select.breadth_first(rows)
    assert sorted(map(id, ordered)) == sorted(map(id, rows)) and ordered[0] is rows[0]
    assert [r.candidate.name for r in ordered[:len(firsts)]] == firsts


def test_the_gate_stops_starting_solutions_when_its_budget_is_spent(monkeypatch):
    """A slow gate (0.1 s a solution) under a 0.25 s gate budget: the first solutions gated are each candidate's
    default, those left are unchecked with a reason, and the stored note says how many; the key is still
    decided among the gated ones."""
    real = select.gate

    def slow(*args, **kwargs):
        time.sleep(0.1)
        return real(*args, **kwargs)

    monkeypatch.setattr(select, "gate", slow)
    store = MemoryStore()
    region = _softmax()
    decision = tune_region(region, store, mode="device", budget_s=0.2, gate_s=0.25)
    statuses = [r.status for r in select.breadth_first([r for r in decision.rows if r.status != Status.EXCLUDED])]
    gated = [r for r in decision.rows if r.status in (Status.PASSED, Status.FAILED)]
    untried = [r for r in decision.rows if r.reason == select.UNTRIED]
    assert len(gated) >= 2 and untried, statuses
    assert all(r.status == Status.UNCHECKED for r in untried)
    # breadth first: no candidate's second parameter set is gated while another candidate's default is not
    untried_defaults = [r for r in untried if r.params == r.candidate.param_space()[0]]
    gated_others = [r for r in gated if r.params != r.candidate.param_space()[0]]
    assert not (untried_defaults and gated_others), statuses
    assert decision.winner.status == Status.PASSED
    # an ungated solution never runs: not timed, nothing stored for it
    assert all(r.timing is None for r in untried)
    measured = store.load_measurements(region.key.id, decision.env.fingerprint)
    timed = {(m.candidate_name, str(m.params)) for m in measured}
    assert not timed & {(r.candidate.name, str(r.params)) for r in untried}
    [record] = store.solutions()
    assert f"{len(untried)} solution(s) not gated within the 0.25 s gate budget ({len(gated)} gated)" in record.note
