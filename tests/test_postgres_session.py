"""A test session stops the PostgreSQL server it started (issue 29, item 9): the README's test command left one
listening on port 55432 after it ended. Run on a port and data folder of its own, so a server someone else runs
is never touched."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _has_postgres() -> bool:
    import glob

    try:
        import psycopg  # noqa: F401
    except ImportError:
        return False
    return bool(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))


@pytest.mark.slow
@pytest.mark.skipif(not _has_postgres(), reason="no PostgreSQL binaries or no psycopg here")
def test_a_session_stops_the_server_it_started_and_leaves_a_running_one(tmp_path):
    data = f"/tmp/arbiter-pg-session-{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if k != "ARBITER_TEST_PG"}
    env |= {"ARBITER_PG_PORT": "55497", "ARBITER_PG_DATA": data, "PYTHONPATH": str(ROOT)}

    def up() -> str:
        return subprocess.run(["bash", str(ROOT / ".ci" / "postgres.sh"), "up"], env=env, capture_output=True,
                              text=True, timeout=60).stdout.strip()

    def session() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "tests/store/test_sql.py::test_one_solution_per_key_and_environment_last_write_wins"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)

    try:
        assert up() == "down"
        done = session()
        assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout + done.stderr  # sqlite + postgresql
        assert up() == "down"  # started by the session, stopped by it
        subprocess.run(["bash", str(ROOT / ".ci" / "postgres.sh")], env=env, capture_output=True, timeout=120,
                       check=True)  # a server running before the session ...
        assert session().returncode == 0
        assert up() == "up"  # ... is left running
    finally:
        subprocess.run(["bash", str(ROOT / ".ci" / "postgres.sh"), "stop"], env=env, capture_output=True,
                       timeout=60)
        subprocess.run(["rm", "-rf", data])
