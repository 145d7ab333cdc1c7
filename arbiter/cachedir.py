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
kernels, and every file, folder and link inside that (``__pycache__``, numba's index files), are owned by this
user and not writable by group or others (no links inside); every folder
above the root is owned by this user or root and is not writable by others unless sticky (``/tmp``: others may
not rename or remove what is ours in it). Missing folders are created with mode 0700. Symbolic links are
resolved first, so a link planted to another user's folder is judged by that folder.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import shlex
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
    """Why importing from ``path`` (inside ``root``) could run another user's code; None when it cannot.

    Checks the folders from ``/`` down to ``path`` and then everything inside ``path`` (files, subfolders such
    as ``__pycache__``, links): a file another user planted, or one others may rewrite, is unpickled or imported
    as ours. The reason ends with one command that fixes all it found (``chmod go-w`` on our folders, ``rm -rf``
    of what was planted or is writable by others: it is a cache, its kernels are compiled again).
    """
    me = os.geteuid()
    real, real_root = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    found: list[str] = []
    chmod: list[Path] = []
    remove: list[str] = []
    for d in [*reversed(real.parents), real]:  # outermost fault first
        st = os.stat(d)
        mode = stat.S_IMODE(st.st_mode)
        ours = d in (real, real_root) or real_root in d.parents
        if ours:
            if st.st_uid != me:
                return (f"{d} is owned by {_who(st.st_uid)}, not by you ({_who(me)}); use a folder of your own "
                        f"(ARBITER_CACHE_DIR), or remove it (`rm -rf {shlex.quote(str(d))}`: it is a cache)")
            if mode & 0o022:
                found.append(f"{d} is writable by others (mode {mode:04o})")
                chmod.append(d)
        else:
            if st.st_uid not in (me, 0):
                return f"{d}, a folder above it, is owned by {_who(st.st_uid)}"
            if mode & 0o022 and not mode & stat.S_ISVTX:
                return f"{d}, a folder above it, is writable by others (mode {mode:04o}) and not sticky"
    for entry, why in _inside(real, me):
        found.append(f"{entry} {why}")
        remove.append(shlex.quote(entry))
    if not found:
        return None
    shown = "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
    fix = " && ".join(([f"chmod go-w {' '.join(shlex.quote(str(d)) for d in chmod)}"] if chmod else [])
                      + ([f"rm -rf {' '.join(remove)}"] if remove else []))
    return f"{shown} (`{fix}` makes it yours alone" + ("; removed entries are compiled again)" if remove else ")")


def _inside(folder: Path, me: int):
    """(entry, why) for each file, folder or link under ``folder`` that another user owns or may write.

    A folder found so is reported without its contents (removing it removes them); links are reported as such:
    nothing the arbiter or numba writes here is a link."""
    for dirpath, dirnames, filenames in os.walk(folder):
        keep = []
        for name in sorted(dirnames) + sorted(filenames):
            entry = os.path.join(dirpath, name)
            try:
                st = os.lstat(entry)
            except FileNotFoundError:  # removed meanwhile (another process of ours replacing a cache file)
                continue
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                yield entry, f"is a symbolic link (to {os.readlink(entry)})"
            elif st.st_uid != me:
                yield entry, f"is owned by {_who(st.st_uid)}"
            elif mode & 0o022:
                yield entry, (f"is writable by others (mode {mode:04o})"
                              + (": anything in it may be another user's" if name in dirnames else ""))
            elif name in dirnames:
                keep.append(name)
        dirnames[:] = keep  # descend only into folders found sound


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
