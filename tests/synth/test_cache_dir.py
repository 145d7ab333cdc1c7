"""The kernel cache folder: generated kernels are imported and numba unpickles its index from there, so a folder
another user can write is never used. Another user is simulated by ``chown`` to ``nobody`` (the tests run as
root in CI); those cases skip when not root."""
from __future__ import annotations

import os
import pickle
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path

import pytest

from arbiter import cachedir
from arbiter.synth import Chain, Operand, Step
from arbiter.synth import cpu as synth_cpu

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a folder another user's (chown)")
CHAIN = Chain((Operand("w", "row"),), (Step("mul", "w"), Step("act", "relu")))


@pytest.fixture
def sticky_tmp():
    """A fresh folder like /tmp (mode 1777, root's): every user may create their own entries in it."""
    path = Path(tempfile.mkdtemp(prefix="arbiter-sticky-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path)


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("ARBITER_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    cachedir._chosen.clear()
    yield monkeypatch
    cachedir._chosen.clear()


class _Payload:
    """What a hostile user plants as numba's cache index: unpickling it creates ``marker`` (it could run anything)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _compile_in_child(env: dict) -> subprocess.CompletedProcess:
    code = textwrap.dedent("""
        import numpy as np
        from arbiter.synth import Chain, Operand, Step
        from arbiter.synth import cpu as synth_cpu
        chain = Chain((Operand("w", "row"),), (Step("mul", "w"), Step("act", "relu")))
        k = synth_cpu.kernel(chain, "float64", parallel=False)
        z, out, w = -np.ones((2, 3)), np.zeros((2, 3)), np.arange(3.0)
        k.fn(z, out, w)
        assert (out == 0).all()
        print("CACHE", k.path.parent)
    """)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


@as_root
def test_a_pickle_planted_in_another_users_cache_folder_is_never_unpickled(tmp_path, sticky_tmp, clean_env):
    # Before: with ~/.cache unusable, the kernel cache fell back to $TMPDIR/kernel-arbiter-<uid>/synth/cpu even
    # when another user had created it; the kernel was imported from there and numba unpickled the planted index.
    learn = tmp_path / "learn"
    env = {**os.environ, "ARBITER_CACHE_DIR": str(learn), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    env.pop("XDG_CACHE_HOME", None)
    assert _compile_in_child(env).returncode == 0
    names = [p.name for p in learn.rglob("*.nbi")]
    assert names, "numba wrote no cache index to learn its name from"
    [source] = (learn / "synth" / "cpu").glob("k_*.py")

    marker = tmp_path / "attacker-ran-code"
    planted = sticky_tmp / f"kernel-arbiter-{os.geteuid()}" / "synth" / "cpu"
    (planted / "__pycache__").mkdir(parents=True)
    shutil.copy(source, planted / source.name)
    for name in names:
        (planted / "__pycache__" / name).write_bytes(pickle.dumps(_Payload(str(marker))))
    for p in [planted.parent.parent, *planted.parent.parent.rglob("*")]:
        os.chown(p, NOBODY, NOBODY)  # another user made all of it
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    env.pop("ARBITER_CACHE_DIR")
    env.update(HOME=str(blocker), XDG_CACHE_HOME=str(blocker), TMPDIR=str(sticky_tmp))  # ~/.cache unusable

    result = _compile_in_child(env)
    assert result.returncode == 0, result.stderr
    assert not marker.exists(), "the planted pickle was unpickled"
    used = Path(result.stdout.split("CACHE ", 1)[1].strip())
    assert planted.parent.parent not in used.parents and used.parent.parent.name.startswith("kernel-arbiter-")
    err = " ".join(result.stderr.split())
    assert f"{planted.parent.parent} is owned by nobody (uid {NOBODY})" in err and "for this process only" in err, err
    assert not used.exists()  # the private folder of that process was removed at its exit


def _refused(path: Path, clean_env, sticky_tmp) -> tuple[Path, str]:
    clean_env.setenv("ARBITER_CACHE_DIR", str(path))
    clean_env.setattr(tempfile, "tempdir", str(sticky_tmp))
    blocker = sticky_tmp / f"kernel-arbiter-{os.geteuid()}"
    blocker.write_text("")  # the per-user fallback is taken too: the private one of this process is used
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        used = cachedir.private_dir("synth", "cpu")
    [w] = [str(x.message) for x in caught]
    return used, w


@as_root
def test_a_cache_root_owned_by_another_user_is_refused(tmp_path, sticky_tmp, clean_env):
    theirs = tmp_path / "theirs"
    (theirs / "synth" / "cpu").mkdir(parents=True)
    for p in (theirs, theirs / "synth", theirs / "synth" / "cpu"):
        os.chown(p, NOBODY, NOBODY)
        p.chmod(0o755)
    used, w = _refused(theirs, clean_env, sticky_tmp)
    assert theirs not in used.parents and f"{theirs} is owned by nobody" in w
    assert stat.S_IMODE(os.stat(used).st_mode) == 0o700 and os.stat(used).st_uid == os.geteuid()


@pytest.mark.parametrize("mode", [0o775, 0o777, 0o757])
def test_a_cache_folder_writable_by_group_or_others_is_refused(tmp_path, sticky_tmp, clean_env, mode):
    open_ = tmp_path / "open"
    (open_ / "synth" / "cpu").mkdir(parents=True)
    (open_ / "synth").chmod(mode)
    used, w = _refused(open_, clean_env, sticky_tmp)
    assert open_ not in used.parents and f"{open_ / 'synth'} is writable by others (mode {mode:04o}" in w


def test_a_pycache_of_another_user_inside_an_own_folder_is_refused(tmp_path, sticky_tmp, clean_env):
    mine = tmp_path / "mine"
    (mine / "synth" / "cpu" / "__pycache__").mkdir(parents=True)
    (mine / "synth" / "cpu" / "__pycache__").chmod(0o777)
    used, w = _refused(mine, clean_env, sticky_tmp)
    assert mine not in used.parents and "__pycache__ is writable by others" in w


@as_root
def test_a_link_to_another_users_folder_is_judged_by_that_folder(tmp_path, sticky_tmp, clean_env):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    link = tmp_path / "link"
    link.symlink_to(theirs)
    used, w = _refused(link, clean_env, sticky_tmp)
    assert "owned by nobody" in w and theirs not in Path(os.path.realpath(used)).parents


def test_the_cache_follows_xdg_cache_home_and_is_created_private(tmp_path, clean_env):
    clean_env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    clean_env.setattr(synth_cpu, "_kernels", {})  # kernels this process already made elsewhere are not reused
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a usable folder: no warning
        k = synth_cpu.kernel(CHAIN, "float64", parallel=False)
    folder = tmp_path / "xdg" / "kernel-arbiter" / "synth" / "cpu"
    assert synth_cpu.cache_dir() == folder and (folder / f"k_{k.hash}.py").read_text() == k.source
    for d in (tmp_path / "xdg", tmp_path / "xdg" / "kernel-arbiter", folder):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    clean_env.setenv("ARBITER_CACHE_DIR", str(tmp_path / "override"))  # the override wins over XDG
    assert synth_cpu.cache_dir() == tmp_path / "override" / "synth" / "cpu"
    clean_env.delenv("ARBITER_CACHE_DIR")
    clean_env.setenv("XDG_CACHE_HOME", "relative/cache")  # not absolute: ignored, as the XDG spec says
    assert cachedir.cache_root() == Path(os.path.expanduser("~")) / ".cache" / "kernel-arbiter"
