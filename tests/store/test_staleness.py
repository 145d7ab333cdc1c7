"""Staleness: a solution stored under another environment is never served, is listed, and is pruned."""
from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

import arbiter
from arbiter import dispatch, env
from arbiter.cli import app
from arbiter.regions import Softmax
from arbiter.store import default_store
from arbiter.targets import cpu


def _region():
    return Softmax(np.random.default_rng(0).standard_normal((8, 48)).astype(np.float32))


def test_a_changed_library_version_makes_the_stored_solution_stale(backend, monkeypatch):
    monkeypatch.setenv("ARBITER_DB", backend.new())
    st = default_store()  # the SQL registry at $ARBITER_DB
    dispatch.configure(store=st)
    region = _region()
    arbiter.run_arbitrated("softmax", region)
    old = env.environment("cpu")
    assert dispatch.verified_count() > 0 and st.load_solution(region.key.id, old.fingerprint) is not None

    real = cpu.TARGET.environment
    monkeypatch.setattr(cpu.TARGET, "environment", lambda: {**real(), "numpy": "0.0-upgraded"})
    env.reset()
    dispatch.reset()  # a new process, as far as dispatch knows
    new = env.environment("cpu")
    assert new.fingerprint != old.fingerprint

    arbiter.run_arbitrated("softmax", region)
    assert dispatch.verified_count() > 0  # not served from the old record: verification ran again here
    [row] = [r for r in arbiter.stats() if r["key"] == region.key.id]
    assert row["fallbacks"] == 0 and row["misses"] == 1  # a stale record is simply not found
    assert st.load_solution(region.key.id, new.fingerprint) is not None

    runner = CliRunner()
    out = json.loads(runner.invoke(app, ["stats", "--json"]).stdout)
    states = {r["env"]: r["state"] for r in out["solutions"] if r["key"] == region.key.id}
    assert states == {old.fingerprint: "stale", new.fingerprint: "current"}
    [stale] = out["stale_environments"]
    assert stale["fingerprint"] == old.fingerprint and stale["changed"] == {
        "numpy": {"stored": np.__version__, "now": "0.0-upgraded"}}
    assert "changed: numpy" in runner.invoke(app, ["stats"]).stdout

    result = runner.invoke(app, ["prune", "--stale"])
    assert result.exit_code == 0, result.stdout
    fresh = default_store()
    assert fresh.load_solution(region.key.id, old.fingerprint) is None
    assert fresh.load_solution(region.key.id, new.fingerprint) is not None
    assert json.loads(runner.invoke(app, ["stats", "--json"]).stdout)["stale_environments"] == []
