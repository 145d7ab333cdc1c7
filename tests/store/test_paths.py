"""A registry path is a path: never parsed as URL text, and never a folder made on the user's behalf."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from arbiter.store import SolutionRecord
from arbiter.store.diagnostics import is_url
from arbiter.store.sql import SqlStore
from tests.store._workers import ENV, key


def _arbiter(cwd, *args, env=None):
    full = {name: v for name, v in os.environ.items() if name != "ARBITER_DB"}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "arbiter", *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("name", ["q?mode=ro.db", "pct%41%20.db", "hash#frag.db", "sp ace&x=1.db"])
def test_a_db_path_with_url_characters_is_the_file_of_that_name(tmp_path, name):
    # Before: `--db 'q?mode=ro.db'` wrote a file named `q`, `--db 'pct%41%20.db'` one named `pctA .db`.
    SqlStore(str(tmp_path / name)).close()  # `stats` reads a registry, it creates none (exit 1 on a missing one)
    result = _arbiter(tmp_path, "--db", name, "stats")
    assert result.returncode == 0, result.stdout + result.stderr  # it opened that file, not a URL's `q` or `pctA .db`
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))) == [name]
    st = SqlStore(str(tmp_path / name))
    st.save_solution(SolutionRecord(key(1), "lab_kernel", "lab_kernel@1", {}, "tier", ENV))
    assert SqlStore(str(tmp_path / name)).load_solution(key(1), ENV).candidate_name == "lab_kernel"
    # read-only opening quotes the path inside its SQLite URI the same way
    assert SqlStore(str(tmp_path / name), readonly=True).load_solution(key(1), ENV).candidate_name == "lab_kernel"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))) == [name]


def test_only_text_with_a_scheme_is_a_url():
    assert is_url("sqlite:///x.db") and is_url("postgresql+psycopg://u@h/db")
    assert not is_url("q?mode=ro.db") and not is_url("./a://b.db") and not is_url("x.db")


def test_a_db_in_a_missing_folder_is_not_created_and_is_named(tmp_path):
    # Before: ARBITER_DB=/nonexistent/dir/x.db silently created /nonexistent/dir.
    db = tmp_path / "no" / "such" / "x.db"
    result = _arbiter(tmp_path, "stats", env={"ARBITER_DB": str(db)})
    text = " ".join((result.stdout + result.stderr).split())
    assert f"its folder {db.parent} does not exist" in text and "mkdir -p" in text, text
    assert not (tmp_path / "no").exists()
