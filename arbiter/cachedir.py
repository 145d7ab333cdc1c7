"""The kernel cache folder, and the rule for it: nothing is imported or unpickled from a folder another user can
write.

Generated kernel sources are imported from this folder (Python runs them) and numba unpickles its cache index
from the ``__pycache__`` beside them, so whoever can write the folder can run code as the user who imports from
it. ``private_dir("synth", "cpu")`` is ``<root>/synth/cpu`` where the root is

1. ``$ARBITER_CACHE_DIR``, else ``$XDG_CACHE_HOME/kernel-arbiter`` (an absolute ``XDG_CACHE_HOME`` only, as the
   XDG Base Directory spec says), else ``~/.cache/kernel-arbiter``;
2. when that cannot be written or is not safe: ``$TMPDIR/kernel-arbiter-<uid>``;
3. when neither is usable: a new private folder of this process (``mkdtemp``, removed at exit), with one warning
   naming what was refused and why.

A folder is used only when it passes ``unsafe_reason``: the root and every folder below it that leads to the
kernels (and their ``__pycache__``) are owned by this user and not writable by group or others; every folder
above the root is owned by this user or root and is not writable by others unless sticky (``/tmp``: others may
not rename or remove what is ours in it). Missing folders are created with mode 0700. Symbolic links are
resolved first, so a link planted to another user's folder is judged by that folder.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import stat
import tempfile
import threading
import warnings
from pathlib import Path

_chosen: dict[tuple, Path] = {}
_lock = threading.Lock()


def cache_root() -> Path:
    """The preferred root: ``$ARBITER_CACHE_DIR``, else ``$XDG_CACHE_HOME/kernel-arbiter``, else ``~/.cache/...``."""
    explicit = os.environ.get("ARBITER_CACHE_DIR")
    if explicit:
        return Path(os.path.expanduser(explicit))
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path(os.path.expanduser("~")) / ".cache"  # relative: ignored
    return base / "kernel-arbiter"


def _who(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def unsafe_reason(path: Path, root: Path) -> str | None:
    """Why importing from ``path`` (inside ``root``) could run another user's code; None when it cannot."""
    me = os.geteuid()
    real, real_root = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    pycache = real / "__pycache__"
    chain = [*reversed(real.parents), real] + ([pycache] if pycache.exists() else [])  # outermost fault first
    for d in chain:
        st = os.stat(d)
        mode = stat.S_IMODE(st.st_mode)
        ours = d in (pycache, real, real_root) or real_root in d.parents
        if ours:
            if st.st_uid != me:
                return f"{d} is owned by {_who(st.st_uid)}, not by you ({_who(me)})"
            if mode & 0o022:
                return f"{d} is writable by others (mode {mode:04o}; `chmod go-w {d}` makes it yours alone)"
        else:
            if st.st_uid not in (me, 0):
                return f"{d}, a folder above it, is owned by {_who(st.st_uid)}"
            if mode & 0o022 and not mode & stat.S_ISVTX:
                return f"{d}, a folder above it, is writable by others (mode {mode:04o}) and not sticky"
    return None


def _make(path: Path, root: Path) -> None:
    """Create the missing folders of ``path`` with mode 0700 (Path.mkdir(parents=True) would give its parents
    the umask's mode, e.g. 0775 under a umask of 002)."""
    missing = []
    for d in [path, *path.parents]:
        if d.exists():
            break
        missing.append(d)
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it first; unsafe_reason judges it
            os.mkdir(d, 0o700)


def _usable(path: Path, root: Path) -> str | None:
    """None when ``path`` is created (if need be), safe and writable; else why not."""
    try:
        _make(path, root)
        why = unsafe_reason(path, root)
        if why is not None:
            return why
        probe = path / f".probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
        return None
    except OSError as exc:
        return f"{path} cannot be used ({exc.strerror or exc})"


def private_dir(*parts: str) -> Path:
    """``<root>/<parts>``: a folder only this user can write, for files that are imported or unpickled.

    Chosen once per process (per root); see the module docstring for the order and the checks.
    """
    preferred = cache_root()
    tmp_root = Path(tempfile.gettempdir()) / f"kernel-arbiter-{os.geteuid()}"
    ident = (str(preferred), str(tmp_root), parts)
    found = _chosen.get(ident)
    if found is not None:
        return found
    with _lock:
        found = _chosen.get(ident)
        if found is not None:
            return found
        refused = []
        for root in (preferred, tmp_root):
            path = root.joinpath(*parts)
            why = _usable(path, root)
            if why is None:
                found = path
                break
            refused.append(why)
        if found is None:  # the predictable names are taken or unsafe: a fresh folder of this process alone
            root = Path(tempfile.mkdtemp(prefix=f"kernel-arbiter-{os.geteuid()}-"))  # mode 0700
            atexit.register(shutil.rmtree, root, True)
            found = root.joinpath(*parts)
            _make(found, root)
        if refused and found != preferred.joinpath(*parts):
            warnings.warn(f"kernel-arbiter: not using the kernel cache {preferred.joinpath(*parts)}: "
                          f"{'; '.join(refused)}. Kernels are cached in {found} instead"
                          + (" for this process only (compiled again in each new process)"
                             if len(refused) == 2 else "")
                          + ". Set ARBITER_CACHE_DIR (or XDG_CACHE_HOME) to a folder of your own to keep them.",
                          RuntimeWarning, stacklevel=3)
        _chosen[ident] = found
    return found
