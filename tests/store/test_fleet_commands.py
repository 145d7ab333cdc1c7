"""Fleet commands (issue 28 item 8): ``--from-recorded --workers`` tunes the recorded keys, ``--watch --workers``
is refused with the way to do it, a recorded key that cannot be tuned on this host (MemoryError) is marked failed
with why instead of failing every run, a key whose holders keep dying is given up after ``MAX_ATTEMPTS``, and
recorded dims outside their key's bucket are never tuned under another key. Real ``arbiter tune`` processes."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from arbiter import env as envmod
from arbiter.store.claims import MAX_ATTEMPTS, Claims, pending
from arbiter.store.sql import SqlStore
from arbiter.suite import Problem

ROOT = Path(__file__).resolve().parents[2]


def _arbiter(db, *args, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "250"}
    return subprocess.run([sys.executable, "-m", "arbiter", "--db", db, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _record(db, dims, key_dims=None) -> str:
    """Record a softmax key as production's ``record`` policy does (``key_dims``: the key's own, when the
    recorded dims are to lie outside its bucket)."""
    key = Problem("softmax", key_dims or dims).key("cpu").id
    SqlStore(db).record_key(key, dims, envmod.environment("cpu").fingerprint)
    return key


def _claim(db, key):
    [row] = [r for r in Claims(SqlStore(db)).sql.transact(
        lambda conn: conn.exec_driver_sql("select state, note, attempts from claims where key = ?", (key,)).all(),
        write=False)]
    return row


def test_watch_with_workers_is_refused_with_the_way_to_do_it(tmp_path):
    """Before: ``--watch --workers 2`` returned at once, exit 0, nothing watched."""
    done = _arbiter(str(tmp_path / "r.db"), "tune", "--from-recorded", "--watch", "--workers", "2", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "one `arbiter tune --from-recorded --watch` per worker" in done.stdout + done.stderr


def test_from_recorded_with_workers_tunes_the_recorded_keys(tmp_path):
    """Before: "tuned 0 of 0 key(s)", the recorded key left pending."""
    db = str(tmp_path / "r.db")
    _record(db, {"rows": 8, "cols": 64})
    done = _arbiter(db, "tune", "--from-recorded", "--workers", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tuned 1 of 1 key(s)" in done.stdout, done.stdout
    assert pending(SqlStore(db)) == []


def test_a_recorded_key_too_big_for_the_host_is_marked_failed_once_not_retried_forever(tmp_path):
    """Before: every run (and watcher) ended in a MemoryError traceback, exit 1, and the claim reopened."""
    db = str(tmp_path / "r.db")
    key = _record(db, {"rows": 10**6, "cols": 10**6})
    runs = [_arbiter(db, "tune", "--from-recorded", cwd=tmp_path) for _ in range(2)]
    for done in runs:
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Traceback" not in done.stdout + done.stderr
    assert f"failed {key}: MemoryError" in runs[0].stdout and "1 failed" in runs[0].stdout, runs[0].stdout
    state, note, attempts = _claim(db, key)
    assert (state, attempts) == ("failed", 1) and note.startswith("MemoryError"), note


def test_recorded_dims_outside_the_keys_bucket_are_not_tuned_under_another_key(tmp_path):
    """Before: dims 1000x64 recorded under the 8x64 key were tuned as key rows1024 and the 8x64 claim marked
    done: the recorded key never got a solution, and nobody was told."""
    db = str(tmp_path / "r.db")
    key = _record(db, {"rows": 1000, "cols": 64}, key_dims={"rows": 8, "cols": 64})
    done = _arbiter(db, "tune", "--from-recorded", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    state, note, _ = _claim(db, key)
    assert state == "failed" and "fall in key" in note, note
    assert SqlStore(db).solutions() == []


def test_a_key_whose_holders_keep_dying_is_given_up_after_the_attempt_cap(tmp_path):
    db = str(tmp_path / "r.db")
    fingerprint = envmod.environment("cpu").fingerprint
    key = Problem("softmax", {"rows": 8, "cols": 64}).key("cpu").id
    claims = Claims(SqlStore(db), lease_s=0.05)
    claims.offer([key], fingerprint)
    for _ in range(MAX_ATTEMPTS):  # each holder dies holding it: the lease lapses
        assert Claims(SqlStore(db), lease_s=0.05).claim(fingerprint) == key
        time.sleep(0.1)
    assert claims.claim(fingerprint) is None
    state, note, attempts = _claim(db, key)
    assert (state, attempts) == ("failed", MAX_ATTEMPTS) and "gave up" in note
