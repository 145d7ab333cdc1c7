"""Messages that name the cause and the setting (issue 40 item 10): a URL scheme SQLAlchemy does not know or whose
driver is missing, a path too long, a folder, a read-only filesystem, and failed recorded keys in ``stats
--pending``. Each through the real CLI in a new process, and the library where it decides."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest

from arbiter import env as envmod
from arbiter.errors import RegistryError
from arbiter.store.layered import open_user
from arbiter.store.sql import SqlStore
from arbiter.suite import Problem
from tests.test_cli_output import ROOT, _env, joined, ok


def _run(*args, db=None, columns="250") -> subprocess.CompletedProcess:
    extra = {} if db is None else {"ARBITER_DB": str(db)}
    return subprocess.run([sys.executable, "-m", "arbiter", *map(str, args)], capture_output=True, text=True,
                          timeout=600, env=_env(columns, **extra), cwd=ROOT)


def _one_error(done: subprocess.CompletedProcess, prefix: str = "error:") -> str:
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "Traceback" not in said, said
    lines = [line for line in said.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(prefix), said
    return lines[0]


@pytest.mark.parametrize("url", ["nosuchdriver://x/y", "mysql://u:secret@h/d", "postgresql+asyncpg://u@h/d"])
def test_a_url_whose_scheme_or_driver_is_missing_names_the_setting_and_the_fix(url):
    scheme = url.split("://")[0]
    for how in ("env", "option"):
        for command in (["stats"], ["tune", "--op", "softmax", "--shape", "4x8"]):
            done = _run(*command, db=url) if how == "env" else _run("--db", url, *command)
            line = _one_error(done)
            assert "--db/ARBITER_DB" in line and repr(scheme) in line and "secret" not in line, line
            assert "SQLite file path" in line and "Nothing was changed" in line, line
            if scheme == "nosuchdriver":
                assert "SQLAlchemy knows no database of scheme" in line, line
                assert "postgresql+psycopg://" in line and "pip install 'kernel-arbiter[postgres]'" in line, line
            else:
                assert "driver of scheme" in line and "is not installed" in line, line
    done = _run("doctor", db=url)  # no "restore it from a backup": nothing was opened
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    assert "backup" not in done.stdout and repr(scheme) in done.stdout, done.stdout
    with pytest.raises(RegistryError, match="ARBITER_DB"):
        SqlStore(url)


def test_a_path_too_long_is_named_shortened_with_the_cause(tmp_path):
    long = str(tmp_path / ("a" * 5000))
    for command in (["stats"], ["tune", "--op", "softmax", "--shape", "4x8"], ["explain", "--op", "softmax",
                                                                              "--shape", "4x8"]):
        line = _one_error(_run(*command, db=long))
        assert line.startswith(f"error: {long[:60]}… ({len(long)} characters)"), line
        assert "file name is too long" in line and "over the 255" in line, line
        assert "Set --db/ARBITER_DB to a shorter path" in line and "Errno" not in line, line
    done = _run("doctor", db=long)  # before: "no registry yet (created on first use)", exit 0
    assert done.returncode == 1 and "file name is too long" in joined(done.stdout), done.stdout
    with pytest.raises(RegistryError, match="file name is too long"):
        SqlStore(long)


def test_a_folder_is_named_as_one_with_the_file_to_give(tmp_path):
    folder = tmp_path / "regs"
    folder.mkdir()
    for command in (["stats"], ["tune", "--op", "softmax", "--shape", "4x8"]):
        line = _one_error(_run(*command, db=folder))
        assert line == (f"error: {folder}: is a folder, not a registry file; nothing was changed. Name a file in "
                        f"it: --db/ARBITER_DB {folder}/registry.db."), line
        assert "--repair" not in line
    for command in (["doctor"], ["doctor", "--repair"]):
        line = _one_error(_run(*command, db=folder), "problem:")
        assert "is a folder, not a registry file" in line and f"{folder}/registry.db" in line, line
        assert "--repair" not in line, line
    assert os.listdir(folder) == []


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder holding a registry, bind-mounted read-only on itself (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only filesystem needs root")
    folder = tmp_path / "ro"
    folder.mkdir()
    store = SqlStore(str(folder / "r.db"))
    store.close()
    for args in (["mount", "--bind", folder, folder], ["mount", "-o", "remount,bind,ro", folder]):
        done = subprocess.run(list(map(str, args)), capture_output=True, text=True)
        if done.returncode != 0:
            subprocess.run(["umount", str(folder)], capture_output=True)
            pytest.skip(f"cannot mount a read-only filesystem here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)  # lazy: a test's engine may hold the file


def test_a_read_only_filesystem_is_named_as_such_not_as_permissions(read_only_folder):
    db = read_only_folder / "r.db"
    line = _one_error(_run("--db", db, "tune", "--op", "softmax", "--shape", "4x8"))
    assert "is on a read-only filesystem" in line and "not writable" not in line, line
    line = _one_error(_run("--db", read_only_folder / "new.db", "tune", "--op", "softmax", "--shape", "4x8"))
    assert "is on a read-only filesystem" in line, line
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = open_user(str(db))
    said = " ".join(str(w.message) for w in caught)
    assert "read-only filesystem" in said and "Remount it read-write" in said, said
    assert "Make it writable for you" not in said, said
    assert store.solutions() == []  # served read-only
    store.system.close()  # the read-only SqlStore under the in-memory layer


def test_stats_pending_shows_a_failed_key_as_failed_and_how_to_retry(tmp_path):
    """Before: the failed key was listed as "1 pending key(s) ... tune them with `arbiter tune --from-recorded`",
    which then said "nothing recorded to tune"."""
    db = tmp_path / "r.db"
    key = Problem("softmax", {"rows": 8, "cols": 64}).key("cpu").id
    SqlStore(str(db)).record_key(key, {"rows": 1000, "cols": 64}, envmod.environment("cpu").fingerprint)
    first = ok(_run("--db", db, "tune", "--from-recorded"))
    assert f"failed {key}" in first and "1 failed" in first, first
    out = joined(ok(_run("--db", db, "stats", "--pending")))
    assert "0 pending key(s)" in out and f"failed {key} under" in out and "fall in key" in out, out
    assert "`arbiter tune --from-recorded --force` retries them" in out, out
    found = json.loads(ok(_run("--db", db, "stats", "--pending", "--json")))
    assert found["pending"] == [] and [r["key"] for r in found["failed"]] == [key], found
    again = joined(ok(_run("--db", db, "tune", "--from-recorded")))
    assert "nothing recorded" not in again and "1 recorded key(s) failed to tune before" in again, again
    forced = joined(ok(_run("--db", db, "tune", "--from-recorded", "--force")))  # retried: it fails again, with why
    assert f"failed {key}" in forced and "1 failed" in forced, forced
    [row] = json.loads(ok(_run("--db", db, "stats", "--pending", "--json")))["failed"]
    assert row["attempts"] == 2, row
