"""The audit of real calls (issue 25 item 8): a candidate right on every gate probe but wrong on the caller's
data is demoted by the audit; the demotion is stored and shown; the next call goes to the next passing
solution; rate 0 spends nothing."""
import json
import logging

import numpy as np
import pytest
from typer.testing import CliRunner

import arbiter
from arbiter import Candidate, Tier, audit, dispatch, request, select
from arbiter import env as envmod
from arbiter.candidates import REGISTRY
from arbiter.cli import app
from arbiter.decide import decide
from arbiter.regions import Softmax
from arbiter.report import collect, render
from arbiter.solution import Solution
from arbiter.store import VerdictKey
from arbiter.store.sql import SqlStore


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class QuantizedFastPath(Candidate):
    """Right on every random draw; wrong when every input is a small whole number (quantized logits in -8..8,
    which no gate probe draws: random values, huge magnitudes and masked -inf rows all miss it): its 'exact
    table' path forgets to normalise."""

    name, target, op, tier, priority = "quantized_fast_path", "cpu", "softmax", Tier.HAND_TUNED, 100

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x
        if np.all((x == np.round(x)) & (np.abs(x) <= 8)):
            out[...] = np.exp(x - x.max(axis=-1, keepdims=True))
        else:
            out[...] = _softmax(x)
        return out


class WrongAfterMany(Candidate):
    """Right for its first 1000 calls (far more than the gate makes), then a stale workspace: zeros."""

    name, target, op, tier, priority = "wrong_after_many", "cpu", "softmax", Tier.HAND_TUNED, 100

    def __init__(self):
        self.calls = 0

    def run(self, region, params):
        self.calls += 1
        out = region.alloc_out()
        out[...] = _softmax(region.x) if self.calls <= 1000 else 0.0
        return out


def _builtin():
    return REGISTRY.get("numpy_softmax", "cpu", "softmax")


def _quantized():
    return Softmax(np.random.default_rng(3).integers(-4, 5, (16, 64)).astype(np.float32))


def test_a_candidate_wrong_only_on_the_callers_data_is_demoted(only_candidates, caplog):
    wrong = QuantizedFastPath()
    only_candidates("cpu", "softmax", wrong, _builtin())
    arbiter.configure(audit=1.0)
    region = _quantized()
    with caplog.at_level(logging.WARNING, logger="arbiter.audit"):
        first = arbiter.run_arbitrated("softmax", region)  # the gate passed it: it serves, wrongly
        assert dispatch.route(region.key).label == "quantized_fast_path"
        assert not np.allclose(first, _softmax(region.x.astype(np.float64)), rtol=1e-4)
        assert audit.drain(30)
    assert any("quantized_fast_path" in r.getMessage() and "failed the audit" in r.getMessage()
               for r in caplog.records)
    # stored: the solution's verdict at this key now fails, with the real call's shape and reason
    st = dispatch.store()
    assert dispatch.route(region.key) is None  # taken out of the table: the next call misses
    vkey = VerdictKey.of(Solution.of(wrong, {}), region.key.id, envmod.environment("cpu").fingerprint)
    verdict = st.load_verdict(vkey)
    assert not verdict.passed and verdict.reason.startswith(audit.AUDIT_PREFIX)
    assert "16x64 float32" in verdict.reason
    # the next call is served by the next passing solution, and right
    second = arbiter.run_arbitrated("softmax", region)
    assert dispatch.route(region.key).label == "numpy_softmax"
    np.testing.assert_allclose(second, _softmax(region.x.astype(np.float64)), rtol=1e-5)
    # explain's decision shows the failed verdict
    rows = {r.label: r for r in decide(region, request.explain(), st).rows}
    assert rows["quantized_fast_path"].status == select.Status.FAILED
    assert rows["quantized_fast_path"].reason.startswith(audit.AUDIT_PREFIX)


def test_a_candidate_wrong_after_many_calls_is_demoted(only_candidates):
    only_candidates("cpu", "softmax", WrongAfterMany(), _builtin())
    arbiter.configure(audit=0.5)
    x = np.random.default_rng(4).standard_normal((8, 32)).astype(np.float32)
    for i in range(1200):
        arbiter.run_arbitrated("softmax", Softmax(x))
        if i % 8 == 7:  # the checker keeps up (at most 8 samples wait): none of the late calls' samples is dropped
            assert audit.drain(30)
    assert audit.drain(30)
    np.testing.assert_allclose(arbiter.run_arbitrated("softmax", Softmax(x)), _softmax(x.astype(np.float64)),
                               rtol=1e-5)
    assert dispatch.route(Softmax(x).key).label == "numpy_softmax"


def test_rate_zero_spends_nothing(only_candidates, monkeypatch):
    wrong = QuantizedFastPath()
    only_candidates("cpu", "softmax", wrong, _builtin())
    monkeypatch.setenv("ARBITER_AUDIT", "0")
    monkeypatch.setenv("ARBITER_FIRST_CALLS", "off")  # (on, a first call is checked: tests/test_first_calls.py)
    assert audit.drain(30)  # an earlier test's samples still being checked would count here
    before = audit.Counts(**vars(audit.counts))
    monkeypatch.setattr(audit, "_submit", lambda job: pytest.fail("sampled at rate 0"))
    region = _quantized()
    for _ in range(50):
        arbiter.run_arbitrated("softmax", region)
    route = dispatch.route(region.key)
    assert route.run == wrong.run  # the candidate's own run: no wrapper, no branch on the hot path
    assert audit.counts == before and route.label == "quantized_fast_path"


def test_the_environment_variable_sets_the_rate_and_bad_values_name_it(only_candidates, monkeypatch):
    only_candidates("cpu", "softmax", QuantizedFastPath(), _builtin())
    monkeypatch.setenv("ARBITER_AUDIT", "1")
    region = _quantized()
    arbiter.run_arbitrated("softmax", region)
    assert audit.drain(30)
    assert arbiter.run_arbitrated("softmax", region) is not None
    assert dispatch.route(region.key).label == "numpy_softmax"
    monkeypatch.setenv("ARBITER_AUDIT", "often")
    with pytest.raises(ValueError, match="ARBITER_AUDIT"):
        audit.rate()
    with pytest.raises(ValueError, match="audit"):
        arbiter.configure(audit=2)


def test_stats_explain_and_report_show_the_demotion(only_candidates, tmp_path, monkeypatch):
    only_candidates("cpu", "softmax", QuantizedFastPath(), _builtin())
    path = tmp_path / "audit.db"
    monkeypatch.setenv("ARBITER_DB", str(path))
    sql = SqlStore(str(path))
    arbiter.configure(store=sql, audit=1.0)
    region = _quantized()
    arbiter.run_arbitrated("softmax", region)
    assert audit.drain(30)
    arbiter.run_arbitrated("softmax", region)
    dispatch.flush()
    done = CliRunner().invoke(app, ["stats", "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.output)
    [failure] = data["audit_failures"]
    assert failure["solution"] == "quantized_fast_path" and failure["key"] == region.key.id
    assert "16x64 float32" in failure["reason"]
    [row] = [r for r in data["solutions"] if r["key"] == region.key.id]
    assert row["winner"] == "quantized_fast_path" and row["state"] == "demoted by the audit"
    shown = json.loads(CliRunner().invoke(app, ["explain", "--op", "softmax", "--shape", "16x64", "--json"]).output)
    assert shown["key"] == region.key.id
    [row] = [r for r in shown["rows"] if r["solution"] == "quantized_fast_path"]
    assert row["status"] == "failed" and row["reason"].startswith(audit.AUDIT_PREFIX)
    text = CliRunner().invoke(app, ["stats"]).output
    assert "failed the audit of real calls: quantized_fast_path" in text
    page = render(collect([("user", sql)]))
    assert "demoted by the audit of real calls" in page and audit.AUDIT_PREFIX in page
