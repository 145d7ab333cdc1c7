"""numba's own cache for the arbiter's kernels (issue 28 items 3 and 4): another user who can write the folder
numba would cache in plants a pickle that the next compile unpickles as its victim. Run with a real second user
(``arbiter_other``, created when missing); skipped where not root or without ``useradd``."""
from __future__ import annotations

import inspect
import os
import pickle
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

OTHER = "arbiter_other"


def _other_user() -> str | None:
    """The second local user's name, created when missing; None when this cannot be done here."""
    if os.geteuid() != 0 or shutil.which("su") is None:
        return None
    try:
        pwd.getpwnam(OTHER)
    except KeyError:
        if shutil.which("useradd") is None or subprocess.run(["useradd", "-m", OTHER]).returncode != 0:
            return None
    return OTHER


needs_other_user = pytest.mark.skipif(_other_user() is None, reason="needs root, su and useradd (a second user)")


class _Payload:
    """What the other user plants as an index: unpickling it creates ``marker`` (it could run anything)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _as_other(command: str) -> None:
    subprocess.run(["su", OTHER, "-s", "/bin/bash", "-c", command], check=True, timeout=60)


@pytest.fixture
def shared():
    """A folder like /tmp (mode 1777): both users reach it."""
    path = Path(tempfile.mkdtemp(prefix="arbiter-numba-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _plant(folder: Path, names: list[str], marker: Path, shared: Path) -> list[Path]:
    """The other user creates ``folder`` (mode 0777, theirs, where missing) and writes the payload as each name."""
    payload = shared / "payload.bin"
    payload.write_bytes(pickle.dumps(_Payload(str(marker))))
    payload.chmod(0o644)
    _as_other(f"mkdir -p -m 777 {folder} && "
              + " && ".join(f"cp {payload} {folder / n}" for n in names))
    return [folder / n for n in names]


def _run(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=300)


BUILTIN = """
    import numpy as np
    from arbiter.candidates.cpu import numba_softmax as m
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    out = np.empty_like(x)
    m.softmax_rows(x, out, 1)
    assert abs(out.sum(axis=1) - 1).max() < 1e-5
    print("CACHE", m.softmax_rows.stats.cache_path)
"""


@needs_other_user
def test_a_pickle_planted_in_a_world_writable_numba_cache_dir_is_never_unpickled(shared, tmp_path):
    # Before: numba's NUMBA_CACHE_DIR locator came first for the built-in kernels: the other user's index was
    # unpickled by root (the marker appeared, owned by root). Now the kernels cache only in the private folder.
    from numba.core.caching import UserProvidedCacheLocator

    from arbiter.candidates.cpu import numba_softmax

    fn = numba_softmax.softmax_rows.py_func
    source = inspect.getfile(fn)
    sub = UserProvidedCacheLocator.get_suitable_cache_subpath(source)
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}"
    name = f"numba_softmax.softmax_rows-{fn.__code__.co_firstlineno}.{tag}.nbi"
    numba_dir = shared / "numba-cache"
    numba_dir.mkdir(mode=0o777)
    numba_dir.chmod(0o777)  # world-writable, as the issue found it
    marker = shared / "attacker-ran-code"
    [planted] = _plant(numba_dir / sub, [name], marker, shared)

    own = tmp_path / "cache"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(numba_dir), "ARBITER_CACHE_DIR": str(own),
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    result = _run(BUILTIN, env)
    assert result.returncode == 0, result.stderr
    assert not marker.exists(), "the planted pickle was unpickled"
    used = Path(result.stdout.split("CACHE ", 1)[1].strip())
    assert own / "numba" in used.parents and list(used.glob("*.nbi")), used
    assert planted.exists()  # left as it was: not ours to remove, never read


@needs_other_user
def test_a_synthesized_kernel_ignores_numba_cache_dir_too(shared, tmp_path):
    code = """
        import numpy as np
        from arbiter.synth import Chain, Operand, Step
        from arbiter.synth import cpu as synth_cpu
        k = synth_cpu.kernel(Chain((Operand("w", "row"),), (Step("mul", "w"),)), "float64", parallel=False)
        z, out, w = -np.ones((2, 3)), np.zeros((2, 3)), np.arange(3.0)
        k.fn(z, out, w)
        print("CACHE", k.fn.stats.cache_path)
    """
    numba_dir = shared / "numba-cache"
    numba_dir.mkdir(mode=0o777)
    numba_dir.chmod(0o777)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(numba_dir), "ARBITER_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    result = _run(code, env)
    assert result.returncode == 0, result.stderr
    used = Path(result.stdout.split("CACHE ", 1)[1].strip())
    assert tmp_path / "cache" / "numba" in used.parents and list(used.glob("*.nbi"))
    assert not list(numba_dir.rglob("*.nbi"))  # nothing of ours in the folder others can write


SYNTH = """
    import numpy as np
    from arbiter.synth import Chain, Operand, Step
    from arbiter.synth import cpu as synth_cpu
    k = synth_cpu.kernel(Chain((Operand("w", "row"),), (Step("mul", "w"), Step("act", "relu"))), "float64",
                         parallel=False)
    z, out, w = -np.ones((2, 3)), np.zeros((2, 3)), np.arange(3.0)
    k.fn(z, out, w)
    print("CACHE", k.path.parent)
"""


@needs_other_user
def test_following_the_printed_advice_removes_what_another_user_planted_in_the_cache(shared, tmp_path):
    # Before: a 0777 __pycache__ under ARBITER_CACHE_DIR was refused with "`chmod go-w <__pycache__>`"; after
    # that command the other user's index file stayed, the folder was accepted, and it was unpickled.
    base = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "TMPDIR": str(shared)}
    base.pop("XDG_CACHE_HOME", None)
    learn = tmp_path / "learn"
    assert _run(SYNTH, {**base, "ARBITER_CACHE_DIR": str(learn)}).returncode == 0
    names = sorted({p.name for p in learn.rglob("*.nbi")})
    assert names

    mine = shared / "mine"
    pycache = mine / "synth" / "cpu" / "__pycache__"
    pycache.mkdir(parents=True)
    for d in (mine, mine / "synth", mine / "synth" / "cpu"):
        d.chmod(0o755)
    pycache.chmod(0o777)  # as the issue found it
    marker = shared / "attacker-ran-code"
    planted = _plant(pycache, names, marker, shared)
    env = {**base, "ARBITER_CACHE_DIR": str(mine)}

    first = _run(SYNTH, env)
    assert first.returncode == 0, first.stderr
    warning = " ".join(first.stderr.split())
    assert "not using the kernel cache" in warning and f"{pycache} is writable by others (mode 0777)" in warning
    [advice] = re.findall(r"\(`([^`]+)` makes it yours alone", warning)
    subprocess.run(["bash", "-c", advice], check=True)

    second = _run(SYNTH, env)
    assert second.returncode == 0, second.stderr
    assert "not using the kernel cache" not in second.stderr, second.stderr
    assert Path(second.stdout.split("CACHE ", 1)[1].strip()) == mine / "synth" / "cpu"
    assert not marker.exists(), "the planted pickle was unpickled"
    assert not any(p.exists() for p in planted)


@needs_other_user
def test_a_file_of_another_user_inside_a_sound_cache_folder_is_named_and_the_advice_removes_it(shared, monkeypatch):
    # Before: only the folders were checked: another user's index inside a folder of ours (planted while it was
    # open, before a `chmod go-w`) was accepted and would be unpickled.
    from arbiter import cachedir

    mine = shared / "mine"
    folder = mine / "numba" / "candidates_0123"
    folder.mkdir(parents=True)
    for d in (mine, mine / "numba", folder):
        d.chmod(0o755)
    folder.chmod(0o777)
    _as_other(f"echo planted > {folder}/k.kernel-14.py311.nbi")
    folder.chmod(0o755)  # what `chmod go-w` did: the folder is sound now, the planted file is still there
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(mine))
    why = cachedir.unsafe_reason(mine / "numba", mine)
    assert why is not None and f"{folder}/k.kernel-14.py311.nbi is owned by {OTHER}" in why, why
    [advice] = re.findall(r"\(`([^`]+)` makes it yours alone", why)
    subprocess.run(["bash", "-c", advice], check=True)
    assert cachedir.unsafe_reason(mine / "numba", mine) is None and folder.is_dir()
    assert not (folder / "k.kernel-14.py311.nbi").exists()
