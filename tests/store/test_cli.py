"""The registry commands: doctor, export/import, list, stats (zero hits)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import arbiter
from arbiter import dispatch
from arbiter.regions import RMSNorm
from arbiter.store import SolutionRecord, default_store
from arbiter.store.models import SCHEMA_VERSION
from arbiter.store.sql import SqlStore
from tests.export_support import read_doc, write_doc
from tests.store._workers import ENV, key

runner = CliRunner()


def _invoke(*args):
    return runner.invoke(app_(), list(args))


def app_():
    from arbiter.cli import app

    return app


def test_doctor_reports_a_garbage_registry_and_moves_it_aside_only_with_repair(tmp_path, monkeypatch):
    db = tmp_path / "registry.db"
    db.write_bytes(b"garbage" * 50)
    monkeypatch.setenv("ARBITER_DB", str(db))
    result = _invoke("doctor")
    assert result.exit_code == 1 and str(db) in result.stdout and "--repair" in result.stdout
    assert db.read_bytes() == b"garbage" * 50
    stats = _invoke("stats")  # any other command: the error names the file and the fix, no traceback
    assert stats.exit_code == 1 and "doctor --repair" in stats.stdout and "Traceback" not in stats.stdout
    result = _invoke("doctor", "--repair")
    assert result.exit_code == 0
    [aside] = [p for p in tmp_path.iterdir() if p.name.startswith("registry.db.corrupt-")]
    assert aside.read_bytes() == b"garbage" * 50 and not db.exists()
    assert _invoke("doctor").exit_code == 0
    SqlStore(str(db))
    assert "integrity ok" in _invoke("doctor").stdout


def test_export_import_merges_and_reports_conflicts(backend, tmp_path, monkeypatch):
    a, b, f = backend.new(), backend.new(), str(tmp_path / "x.json")
    sa, sb = SqlStore(a), SqlStore(b)
    sa.save_solution(SolutionRecord(key(1), "lab_kernel", "lab_kernel@1", {"tile": 8}, "measured", ENV, 0.2))
    sa.save_solution(SolutionRecord(key(2), "lab_kernel", "lab_kernel@1", {}, "tier", ENV))
    sb.save_solution(SolutionRecord(key(1), "lab_kernel", "lab_kernel@1", {"tile": 64}, "measured", ENV, 0.5))
    monkeypatch.setenv("ARBITER_DB", a)
    assert _invoke("export", f).exit_code == 0
    doc = read_doc(f)
    assert doc["format"] == "kernel-arbiter-registry" and doc["schema_version"] == SCHEMA_VERSION
    monkeypatch.setenv("ARBITER_DB", b)
    result = _invoke("import", f)
    assert result.exit_code == 0 and "1 conflict(s)" in result.stdout and "tile" in result.stdout
    st = SqlStore(b)
    assert st.load_solution(key(1), ENV).params == {"tile": 64}  # kept the registry's own
    assert st.load_solution(key(2), ENV).chosen_by == "tier"  # the new one merged in
    again = " ".join(_invoke("import", f).stdout.split())
    assert "added 0 environments, 0 candidates, 0 verdicts, 0 measurements, 0 solutions" in again
    assert "1 unchanged, 1 conflict(s), 0 replaced" in again
    assert _invoke("import", f, "--overwrite").exit_code == 0
    assert SqlStore(b).load_solution(key(1), ENV).params == {"tile": 8}


@pytest.mark.parametrize("mutate, fault", [
    (lambda d: d["solutions"][0].update(policy="fastest"), "solutions.0.policy"),
    (lambda d: d["solutions"][0].update(key="not a key"), "solutions.0.key"),
    (lambda d: d["solutions"][0].update(env="ffffffffff"), "solutions.0.env"),
    (lambda d: d.update(schema_version=99), "schema_version"),
    (lambda d: d["environments"][0].update(code="__import__('os')"), "environments.0.code"),
])
def test_import_rejects_a_malformed_file_naming_the_field(tmp_path, monkeypatch, mutate, fault):
    a, f = str(tmp_path / "a.db"), tmp_path / "x.json"
    SqlStore(a).save_solution(SolutionRecord(key(1), "lab_kernel", "lab_kernel@1", {}, "tier", ENV))
    monkeypatch.setenv("ARBITER_DB", a)
    _invoke("export", str(f))
    doc = read_doc(f)
    mutate(doc)
    write_doc(doc, f)
    monkeypatch.setenv("ARBITER_DB", str(tmp_path / "b.db"))
    result = _invoke("import", str(f))
    assert result.exit_code == 1 and fault in result.stdout and "nothing was imported" in result.stdout
    assert not (tmp_path / "b.db").exists()  # rejected before the registry was even opened


def test_import_of_broken_json_names_line_and_column(tmp_path):
    f = tmp_path / "x.json"
    f.write_text('{"format": "kernel-arbiter-registry",\n "schema_version": ')
    result = _invoke("import", str(f))
    assert result.exit_code == 1 and "line 2" in result.stdout


def test_list_shows_every_target_with_availability_and_reason():
    out = json.loads(_invoke("list", "--json").stdout)
    assert out["targets"]["cpu"]["available"] is True
    names = {(c["target"], c["name"]): c for c in out["candidates"]}
    assert names[("cpu", "numpy_matmul")]["available"] is True
    for name, state in out["targets"].items():
        if not state["available"]:
            assert state["reason"]  # e.g. nvidia without CuPy: unavailable, with why, not a crash
            assert all(not c["available"] and c["reason"] for c in out["candidates"] if c["target"] == name)


def test_stats_shows_persisted_counts_and_zero_hit_solutions(backend, monkeypatch):
    monkeypatch.setenv("ARBITER_DB", backend.new())
    st = default_store()
    dispatch.configure(store=st)
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    used = RMSNorm(x, np.ones(32, np.float32), 1e-6)
    for _ in range(3):
        arbiter.run_arbitrated("rmsnorm", used)
    unused = RMSNorm(np.ones((64, 100), np.float32), np.ones(100, np.float32), 1e-6)
    arbiter.arbitrate("rmsnorm", unused)  # decided and stored, never dispatched
    arbiter.flush()
    out = json.loads(_invoke("stats", "--json", "--op", "rmsnorm").stdout)
    rows = {r["key"]: r for r in out["solutions"]}
    assert (rows[used.key.id]["hits"], rows[used.key.id]["misses"]) == (2, 1)
    assert rows[used.key.id]["tier"] == "HAND_TUNED" and rows[used.key.id]["policy"] == "tier"
    assert rows[unused.key.id]["hits"] == 0 and out["zero_hit_solutions"] == 1
    assert "never dispatched" in _invoke("stats").stdout
    assert json.loads(_invoke("stats", "--json", "--op", "softmax").stdout)["solutions"] == []


def test_doctor_says_what_it_checked_and_names_a_missing_table(backend, monkeypatch):
    db = backend.new()
    SqlStore(db).save_solution(SolutionRecord(key(1), "lab_kernel", "lab_kernel@1", {}, "tier", ENV))
    monkeypatch.setenv("ARBITER_DB", db)
    ok = " ".join(_invoke("doctor").stdout.split())
    assert f"ok, schema v{SCHEMA_VERSION}" in ok and "unique constraint" in ok and "1 solutions" in ok
    assert ("integrity_check" in ok) == (backend.name == "sqlite") and ("server" in ok) == (backend.name != "sqlite")
    backend.script(db, "DROP TABLE recorded_keys")  # a half-restored registry
    bad = _invoke("doctor")
    text = " ".join(bad.stdout.split())
    assert bad.exit_code == 1 and "table recorded_keys is missing" in text and "nothing was changed" in text
    assert backend.query(db, "select count(*) from solutions") == [(1,)]  # doctor changed nothing


def test_a_server_database_that_does_not_exist_is_named_with_the_fix(postgres, monkeypatch):
    gone = postgres.new().rsplit("/", 1)[0] + "/arbiter_no_such_db"
    monkeypatch.setenv("ARBITER_DB", gone)
    result = _invoke("stats")
    text = " ".join(result.stdout.split())
    assert result.exit_code == 1 and "arbiter_no_such_db" in text and "CREATE DATABASE" in text
    assert "Traceback" not in text and ":arbiter@" not in text
