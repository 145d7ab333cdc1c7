"""Symbolic links planted where another user can write (issue 40 item 4): in a folder others can write (sticky or
not), on a box with ``fs.protected_symlinks=0`` (the sticky bit then does not stop a link from being followed), a
planted ``victim.db -> /victim/0700dir/new.db`` made the victim create its registry where the link's maker chose,
and a planted ``victim.db-wal`` pushed the registry to memory with a message about the link's target's owner. Now
such a link (the file, a folder on its path, or ``-wal``/``-shm``/``-journal``) is refused, naming the link, its
target and the fix, and nothing is created; a link in a folder only its user can write is followed as before.

The check is about who can write the link's folder, so most cases plant the links as the same user in a 0o1777
(or 0o777, 0o775) folder; one plants it as a real second user (``arbiter_other``; skipped where it cannot be
made)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from tests.targets.test_numba_cache import OTHER, _as_other, needs_other_user

ROOT = Path(__file__).resolve().parents[2]

VICTIM = """
    import json, warnings
    import numpy as np
    import arbiter
    from arbiter import dispatch
    from arbiter.regions import Softmax
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = np.ones((4, 8), np.float32)
        y = arbiter.run_arbitrated("softmax", Softmax(x))
        arbiter.flush()
    print("RESULT " + json.dumps({"ok": bool(np.allclose(y, 1 / 8)), "store": repr(dispatch.store()),
                                  "warnings": [str(w.message) for w in caught if "kernel-arbiter" in str(w.message)]}))
"""


def _env(db: Path) -> dict:
    env = {**os.environ, "ARBITER_DB": str(db), "COLUMNS": "1000",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for name in ("ARBITER_SYSTEM_DB", "ARBITER_TRUST_REGISTRY"):
        env.pop(name, None)
    return env


def _victim(db: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(VICTIM)], cwd=ROOT, env=_env(db),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.split("RESULT ", 1)[1])


def _doctor(db: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "arbiter", "--db", str(db), "doctor"], cwd=ROOT, env=_env(db),
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def place():
    """A folder of the test's own (the link's targets go in ``private``, mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="arbiter-links-"))
    path.chmod(0o755)
    (path / "private").mkdir(mode=0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _shared(place: Path, mode: int) -> Path:
    shared = place / "shared"
    shared.mkdir()
    shared.chmod(mode)
    return shared


def _refused(result: dict, link: Path, target: Path) -> None:
    assert result["ok"], result  # still served (from memory)
    assert result["store"].startswith("<MemoryStore"), result
    assert len(result["warnings"]) == 1, result["warnings"]
    text = result["warnings"][0]
    assert f"{link} is a symbolic link to {target}" in text and "others can write" in text, text
    assert f"rm {link}" in text, text  # the fix


@pytest.mark.parametrize("mode", [0o1777, 0o777, 0o775], ids=["sticky", "world", "group"])
def test_a_registry_link_in_a_folder_others_can_write_is_refused(place, mode):
    """Before: the registry was created at the link's target, in the victim's 0700 folder."""
    shared = _shared(place, mode)
    target = place / "private" / "new.db"
    link = shared / "victim.db"
    link.symlink_to(target)
    result = _victim(link)
    _refused(result, link, target)
    assert f"--db {target}" in result["warnings"][0]  # use the target itself, if it is yours
    assert list((place / "private").iterdir()) == []  # nothing created where the link points
    doctor = _doctor(link)
    assert doctor.returncode == 1 and "symbolic link" in doctor.stdout, doctor.stdout + doctor.stderr
    assert list((place / "private").iterdir()) == []


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_a_companion_link_in_a_folder_others_can_write_is_refused_by_name(place, suffix):
    """Before (``-wal``): in memory, with a message about the owner of the link's target, not the link."""
    shared = _shared(place, 0o1777)
    db = shared / "victim.db"
    target = place / "private" / f"elsewhere{suffix}"
    link = shared / f"victim.db{suffix}"
    link.symlink_to(target)
    result = _victim(db)
    _refused(result, link, target)
    assert not db.exists() and list((place / "private").iterdir()) == []


def test_a_folder_on_the_path_that_is_a_link_in_a_shared_folder_is_refused(place):
    shared = _shared(place, 0o1777)
    (shared / "dir").symlink_to(place / "private")
    result = _victim(shared / "dir" / "registry.db")
    _refused(result, shared / "dir", place / "private")
    assert list((place / "private").iterdir()) == []


def test_a_link_in_a_folder_only_its_user_can_write_is_followed(place):
    """Regression guard: one's own link, in one's own folder (mode 0755), works as before."""
    target = place / "private" / "mine.db"
    link = place / "mine.db"
    link.symlink_to(target)
    result = _victim(link)
    assert result["ok"] and result["warnings"] == [] and "SqlStore" in result["store"], result
    assert target.exists()
    assert _doctor(link).returncode == 0


@needs_other_user
def test_a_link_planted_by_another_user_in_a_sticky_folder_is_refused(place):
    """The attack as the issue made it: ``arbiter_other`` plants the link in a 1777 folder; root is the victim."""
    shared = _shared(place, 0o1777)
    target = place / "private" / "new.db"
    link = shared / "victim.db"
    _as_other(f"ln -s {target} {link}")
    assert link.is_symlink() and link.lstat().st_uid != os.geteuid()
    result = _victim(link)
    _refused(result, link, target)
    assert list((place / "private").iterdir()) == []
    assert OTHER  # (the second user's name, for the reader)
