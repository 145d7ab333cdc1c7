"""``arbiter doctor``: it repairs only what is damaged and ours to move; never a folder, never a newer registry."""
from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from arbiter.errors import RegistryError
from arbiter.store import SolutionRecord
from arbiter.store.models import SCHEMA_VERSION
from arbiter.store.sql import SqlStore
from tests.store._workers import ENV, key


def _doctor(*args, db):
    from arbiter.cli import app

    result = CliRunner().invoke(app, ["--db", str(db), "doctor", *args])
    return result, " ".join(result.stdout.split())


@pytest.mark.parametrize("repair", [False, True])
def test_doctor_refuses_a_folder_and_never_moves_it(tmp_path, monkeypatch, repair):
    # Before: "damaged ... doctor --repair", and --repair renamed the folder (`--db .` would rename the cwd).
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    monkeypatch.chdir(folder)
    for db in (folder, "."):
        result, text = _doctor(*(["--repair"] if repair else []), db=db)
        assert result.exit_code == 1 and "is a folder" in text and "--repair" not in text, text
        assert "nothing was changed" in text and "registry.db" in text  # the fix: a file in it
        assert (folder / "keep.txt").read_text() == "mine" and sorted(os.listdir(tmp_path)) == ["work"]
        assert "Traceback" not in result.stdout


def test_a_newer_schema_registry_is_named_and_never_moved_aside(backend, tmp_path):
    # Before: called damaged, and `doctor --repair` moved a valid newer registry aside.
    db = backend.new()
    SqlStore(db).save_solution(SolutionRecord(key(1), "lab_kernel", "lab_kernel@1", {}, "tier", ENV))
    backend.script(db, f"update schema_version set version = {SCHEMA_VERSION + 1}")
    for args in ((), ("--repair",)):
        result, text = _doctor(*args, db=db)
        assert result.exit_code == 1, text
        assert f"schema v{SCHEMA_VERSION + 1} is newer" in text and "upgrade kernel-arbiter" in text, text
        assert "damaged" not in text and "moved" not in text
    if backend.name == "sqlite":
        assert [n for n in os.listdir(os.path.dirname(db)) if not n.endswith(("-wal", "-shm"))] == \
            [os.path.basename(db)]
    assert backend.query(db, "select count(*) from solutions") == [(1,)]


@pytest.mark.parametrize("version", [-1, 0])
def test_a_schema_version_no_release_wrote_is_a_clear_error(backend, version):
    # Before: version -1 ended in a KeyError traceback from the migration ladder.
    db = backend.new()
    SqlStore(db).close()
    backend.script(db, f"update schema_version set version = {version}")
    with pytest.raises(RegistryError, match=rf"schema version {version} .*not one kernel-arbiter writes"):
        SqlStore(db)
    result, text = _doctor(db=db)
    assert result.exit_code == 1 and f"schema version {version}" in text and "Traceback" not in result.stdout
    assert backend.query(db, "select version from schema_version") == [(version,)]  # unchanged
