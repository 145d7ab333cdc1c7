"""``arbiter.configure(tune_seconds=...)`` / ``ARBITER_TUNE_SECONDS``: the timing budget of a key tuned on a miss.
On a GPU each solution is timed in three modes, up to a second each: an eager llama block's seven keys took 204 s
to tune on their first call (H200, 2026-12-04)."""
import numpy as np
import pytest

import arbiter
from arbiter import decide, dispatch
from arbiter.regions import Softmax
from arbiter.store import MemoryStore


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
    assert row["policy"] == "measured"


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
