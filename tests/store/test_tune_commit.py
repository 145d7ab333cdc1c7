"""A tuned key's verdicts, measurements and solution commit together (issue 20 item 5). Before: two commits
(measurements, then solution); a process killed between them left measurements without a solution, and later
``arbiter tune`` runs skipped the key as "tuned already"."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.store import _dispatchers

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(Path(_dispatchers.__file__))


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_a_tuner_killed_while_writing_the_solution_leaves_the_key_untuned_not_half_tuned(backend, tmp_path):
    db = backend.new()
    killed = subprocess.run([sys.executable, SCRIPT, "tune_killed_at_solution", db], cwd=ROOT, env=_env(),
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    q = lambda table: backend.query(db, f"select count(*) from {table}")[0][0]  # noqa: E731
    # all of the key or none of it: the kill came inside the one transaction, so none
    assert (q("verdicts"), q("measurements"), q("solutions")) == (0, 0, 0)

    again = subprocess.run([sys.executable, "-m", "arbiter", "--db", db, "tune", "--op", "rmsnorm", "--shape",
                            "8x64", "--budget-seconds", "30"], cwd=tmp_path, env={**_env(), "COLUMNS": "200"},
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "tuned already" not in again.stdout and "tuned 1 key(s)" in again.stdout
    assert q("solutions") == 1 and q("measurements") > 0 and q("verdicts") > 0
