"""The registry load test in quick mode (benchmarks/registry_stress.py): worker processes dispatching and
flushing into one registry while another process imports an export and another tunes; no count lost, no
registry error reaching a caller. SQLite always; PostgreSQL where a server is reachable."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from store_support import postgres_server

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_quick_load_test_loses_no_count_and_surfaces_no_lock_error(database):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if database == "postgresql":
        url, why = postgres_server()
        if url is None:
            pytest.skip(f"PostgreSQL: {why}")
        env["ARBITER_TEST_PG"] = url
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "registry_stress.py"), "--procs", "4",
                           "--seconds", "3", "--import-keys", "100", "--db", database, "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    [row] = json.loads(done.stdout)
    assert row["dispatches"] > 4 * 5 and row["flushes"] >= 4
    assert row["lost"] == 0 and row["counted"] == row["dispatches"]
    assert row["errors_surfaced"] == 0, row["error_samples"]
    assert row["import_ok"] and row["import_peak_mb"] > 0 and row["tune_runs"] >= 1
