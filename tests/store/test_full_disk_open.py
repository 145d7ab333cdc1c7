"""A process that starts on a full disk (issue 40 item 2): SQLite in WAL mode must create ``-wal`` and ``-shm``
files even to open a registry for writing, which fails there ("disk I/O error"). Before: every call raised
``RegistryError: ...: disk I/O error``, ``doctor`` called the sound registry damaged and ``doctor --repair`` moved it
aside. Now the registry is served read-only (``immutable``: no file created) with one warning naming the full
disk, and ``doctor`` says the disk is full (no repair advice); ``--repair`` moves nothing.

A real full filesystem: a 2 MiB tmpfs, mounted for the test (root only; skipped with the reason elsewhere)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

WARM = """
    import numpy as np, arbiter
    from arbiter.regions import Softmax
    for rows in (4, 8):
        arbiter.run_arbitrated("softmax", Softmax(np.ones((rows, 16), np.float32)))
    arbiter.flush()
"""

SERVE = """
    import json, warnings
    import numpy as np
    import arbiter
    from arbiter import dispatch
    from arbiter.regions import Softmax
    served, errors = 0, []
    rng = np.random.default_rng(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for rows in (4, 8, 12):  # two stored keys, one unseen
            x = rng.standard_normal((rows, 16)).astype(np.float32)
            try:
                y = arbiter.run_arbitrated("softmax", Softmax(x))
                e = np.exp(x - x.max(-1, keepdims=True))
                np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)
                served += 1
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
        arbiter.flush()
    print("RESULT " + json.dumps({"served": served, "errors": errors, "store": repr(dispatch.store()),
                                  "warnings": [str(w.message) for w in caught if "kernel-arbiter" in str(w.message)]}))
"""


def _env(db: Path) -> dict:
    env = {**os.environ, "ARBITER_DB": str(db), "COLUMNS": "1000",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("ARBITER_SYSTEM_DB", None)
    return env


def _python(code: str, db: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=_env(db), capture_output=True,
                          text=True, timeout=300)


def _arbiter(db: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "arbiter", "--db", str(db), *args], cwd=ROOT, env=_env(db),
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs at ``tmp_path/disk`` (unmounted afterwards)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount(8) to mount a small tmpfs (a real full filesystem)")
    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs", str(disk)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _fill(folder: Path) -> None:
    """Write a file until the filesystem refuses another byte (ENOSPC)."""
    with open(folder / "filler", "wb", buffering=0) as f:
        for size in (1 << 16, 4096, 512, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                continue
    assert os.statvfs(folder).f_bfree == 0


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_process_starting_on_a_full_disk_serves_the_registry_read_only(tmp_path, small_disk):
    made = tmp_path / "made.db"
    warm = _python(WARM, made)
    assert warm.returncode == 0, warm.stderr
    db = small_disk / "registry.db"
    shutil.copyfile(made, db)  # a sound registry, closed (no -wal, -shm)
    _fill(small_disk)
    before = _digest(db)

    done = _python(SERVE, db)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert result["errors"] == [] and result["served"] == 3, result  # before: 0 served, 3 disk I/O errors
    assert "ReadOnlyUserStore" in result["store"], result
    assert len(result["warnings"]) == 1, result["warnings"]  # one warning, naming the file and the full disk
    assert str(db) in result["warnings"][0] and "disk is full" in result["warnings"][0], result["warnings"]
    assert _digest(db) == before
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "registry.db"]  # no -wal/-shm left

    doctor = _arbiter(db, "doctor")
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert "disk is full" in doctor.stdout and "not damaged" in doctor.stdout, doctor.stdout
    assert "--repair" not in doctor.stdout and "damaged;" not in doctor.stdout, doctor.stdout
    repair = _arbiter(db, "doctor", "--repair")
    assert repair.returncode == 1 and "disk is full" in repair.stdout, repair.stdout + repair.stderr
    assert "moved" not in repair.stdout, repair.stdout  # before: moved aside, every key tuned again
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "registry.db"]
    assert _digest(db) == before

    (small_disk / "filler").unlink()  # space again: the same file is a sound registry, written as before
    doctor = _arbiter(db, "doctor")
    assert doctor.returncode == 0 and "integrity ok" in doctor.stdout, doctor.stdout + doctor.stderr
