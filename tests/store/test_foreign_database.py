"""Another program's SQLite database named as a registry (issue 40 item 5). Before: refused ("not a kernel-arbiter
registry"), yet its journal mode had been switched to WAL and its bytes changed by the refusal itself (the WAL
pragma ran on connect, before the schema was read). Now whether a file is a registry is read read-only first: it
is refused, byte-identical, journal mode unchanged, through the library and the CLI. Real processes and files."""
from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from arbiter.errors import RegistryError
from arbiter.store.sql import SqlStore

ROOT = Path(__file__).resolve().parents[2]


def _foreign(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
    conn.execute("INSERT INTO notes (text) VALUES ('theirs')")
    conn.commit()
    conn.close()


def _state(path: Path) -> tuple[str, str, list[str]]:
    """(sha256 of the file, its journal mode read without changing it, the files beside it)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    conn.close()
    return digest, mode, sorted(p.name for p in path.parent.iterdir())


def _env(db: Path) -> dict:
    env = {**os.environ, "ARBITER_DB": str(db), "COLUMNS": "1000",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("ARBITER_SYSTEM_DB", None)
    return env


def test_a_foreign_database_is_refused_unchanged_by_the_library(tmp_path):
    db = tmp_path / "foreign.db"
    _foreign(db)
    before = _state(db)
    assert before[1] == "delete"
    with pytest.raises(RegistryError, match="not a kernel-arbiter registry") as caught:
        SqlStore(str(db))
    assert str(db) in str(caught.value) and "Nothing was changed" in str(caught.value)
    assert _state(db) == before  # before: journal mode "wal", another sha256


CLI = [("stats",), ("tune", "--op", "softmax", "--shape", "4x8")]


@pytest.mark.parametrize("args", CLI, ids=["stats", "tune"])
def test_a_foreign_database_is_refused_unchanged_by_the_cli(tmp_path, args):
    db = tmp_path / "foreign.db"
    _foreign(db)
    before = _state(db)
    done = subprocess.run([sys.executable, "-m", "arbiter", "--db", str(db), *args], cwd=ROOT, env=_env(db),
                          capture_output=True, text=True, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "not a kernel-arbiter registry" in said and "Traceback" not in said, said
    assert _state(db) == before


def test_a_process_dispatching_with_a_foreign_database_leaves_it_unchanged(tmp_path):
    db = tmp_path / "foreign.db"
    _foreign(db)
    before = _state(db)
    code = """
        import numpy as np, arbiter
        from arbiter.errors import RegistryError
        from arbiter.regions import Softmax
        try:
            arbiter.run_arbitrated("softmax", Softmax(np.ones((4, 8), np.float32)))
        except RegistryError as exc:
            print("REFUSED", exc)
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=_env(db),
                          capture_output=True, text=True, timeout=300)
    assert "REFUSED" in done.stdout and "not a kernel-arbiter registry" in done.stdout, done.stdout + done.stderr
    assert _state(db) == before
