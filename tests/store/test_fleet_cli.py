"""The fleet's commands (issue 18 items 1-3): schema v5 upgrade, environment classes and ``--env``,
``stats --pending``, ``--watch`` stopping on a signal, and ``export --env --out`` served read-only."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arbiter.store import CountDelta
from arbiter.store.models import SCHEMA_VERSION
from arbiter.store.sql import SqlStore
from tests.store import _fleet
from tests.store._workers import ENV, key

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(Path(_fleet.__file__))
N = 3


def _env(**extra):
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "COLUMNS": "250", **extra}


def _arbiter(db, *args, cwd, **extra):
    done = subprocess.run([sys.executable, "-m", "arbiter", "--db", db, *args], cwd=cwd, env=_env(**extra),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _fleet_run(*args, cwd, **extra):
    done = subprocess.run([sys.executable, SCRIPT, *args], cwd=cwd, env=_env(**extra), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("start", [3, 4])
def test_a_v3_or_v4_registry_is_upgraded_to_v5_with_an_empty_claims_table(backend, start):
    assert SCHEMA_VERSION == 5
    db = backend.new()
    st = SqlStore(db)
    st.add_counts([CountDelta(key(1), "lab_kernel", "{}", ENV, hits=7, misses=2, fallbacks=1, loads=4)])
    st.close()
    # as a v4 (or v3) kernel-arbiter left the file: no claims table (nor counters.loads, verdicts.origin)
    v3 = "; ALTER TABLE counters DROP COLUMN loads; ALTER TABLE verdicts DROP COLUMN origin"
    backend.script(db, "DROP TABLE claims" + (v3 if start == 3 else "")
                   + f"; UPDATE schema_version SET version = {start}")
    again = SqlStore(db)
    assert again.version() == SCHEMA_VERSION
    assert [(c.hits, c.misses, c.fallbacks, c.loads) for c in again.counts()] == [(7, 2, 1, 4 if start == 4 else 0)]
    assert backend.query(db, "select count(*) from claims") == [(0,)]
    assert again.integrity_check() == []


@pytest.mark.slow
def test_a_host_tunes_only_its_environments_recorded_keys_unless_it_states_another_then_publishes(backend, tmp_path):
    db = backend.new()
    SqlStore(db).close()
    fp = _fleet_run("record", db, "A", str(N), cwd=tmp_path).split()[2]  # production on a host of class A
    pending = json.loads(_arbiter(db, "stats", "--pending", "--json", cwd=tmp_path))["pending"]
    assert [(r["env"], r["state"]) for r in pending] == [(fp, "open")] * N

    own = _arbiter(db, "tune", "--from-recorded", cwd=tmp_path)  # this host's own environment recorded nothing
    assert "tuned 0 key(s)" in own and fp not in own
    stated = _arbiter(db, "tune", "--from-recorded", "--env", fp, cwd=tmp_path)
    assert f"tuning for environment {fp} (stated compatible; differs from this host's" in stated
    assert "test_class: None here, A there" in stated and f"tuned {N} key(s) on cpu under {fp}" in stated
    assert json.loads(_arbiter(db, "stats", "--pending", "--json", cwd=tmp_path))["pending"] == []
    assert backend.query(db, "select env, state, count(*) from claims group by env, state") == [(fp, "done", N)]

    bad = subprocess.run([sys.executable, "-m", "arbiter", "--db", db, "tune", "--from-recorded", "--env",
                          "0123abcd"], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    said = bad.stdout + bad.stderr  # one "error: --env: ..." line (friendly), as every other bad option
    assert bad.returncode == 2 and "--env" in said and fp in said, said

    # published: a read-only SQLite system registry, served with the user registry elsewhere
    system = tmp_path / "image" / "system.db"
    system.parent.mkdir()
    out = _arbiter(db, "export", "--env", fp, "--out", str(system), cwd=tmp_path)
    assert f"published {fp} to {system} (read-only): 1 environments, {N} problem_keys" in out
    assert oct(system.stat().st_mode & 0o777) == "0o444" and sorted(os.listdir(system.parent)) == ["system.db"]
    again = subprocess.run([sys.executable, "-m", "arbiter", "--db", db, "export", "--env", fp, "--out",
                            str(system)], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode != 0 and "exists already" in again.stderr + again.stdout

    home = tmp_path / "serving"
    home.mkdir()
    os.chmod(system.parent, 0o555)  # shipped in an image: a folder nobody writes
    try:
        served = _fleet_run("serve", "-", "A", str(N), cwd=home, ARBITER_DB=str(home / "user.db"),
                            ARBITER_SYSTEM_DB=str(system))
    finally:
        os.chmod(system.parent, 0o755)
    assert "verified 0" in served, served
    user = SqlStore(str(home / "user.db"))
    assert user.solutions() == [] and user.verdicts() == []
    assert sorted((c.loads, c.misses) for c in user.counts()) == [(1, 0)] * N


def test_watch_stops_cleanly_on_sigint_and_sigterm(tmp_path):
    db = str(tmp_path / "registry.db")
    for signum in (signal.SIGINT, signal.SIGTERM):
        proc = subprocess.Popen([sys.executable, "-m", "arbiter", "--db", db, "tune", "--from-recorded", "--watch",
                                 "--poll-seconds", "0.2"], cwd=tmp_path, env=_env(ARBITER_VERBOSE="1"),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        for line in proc.stdout:  # waiting for keys: then signal it
            lines.append(line)
            if "looking again every 0.2 s" in line:
                break
        time.sleep(0.3)
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=60)
        text = "".join(lines) + out
        assert proc.returncode == 0, text
        assert f"{signal.Signals(signum).name}: stopping after the current key" in text and "tuned 0 key(s)" in text
        assert "Traceback" not in text
