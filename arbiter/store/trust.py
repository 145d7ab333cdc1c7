"""Whom a registry's rows may be trusted from: the registry's trust model (``docs/reliability.md``, "Registry
trust").

Two rules, for two ways another user could write what this process reads:

1. A SQLite registry file that another user owns or can write (or its folder, a folder above it, its ``-wal``,
   ``-shm`` or ``-journal``) is refused, as the kernel cache folder is, unless the caller names it in
   ``$ARBITER_TRUST_REGISTRY`` (paths separated by ``:``). Root may own what is above or the file itself (a
   shipped system registry); root opening another user's file is refused like anyone else.
2. A stored verdict says "passed" for this process only when this user's own gate computed it: each verdict the
   gate saves is vouched for in a ledger kept in the private cache folder (``arbiter.cachedir``: only this user
   can write it), by a digest of the verdict's key and findings. In every registry, whatever its file's mode now,
   a passed verdict that is not in the ledger is treated as never computed: the gate runs again here before that
   solution serves, and its own verdict replaces the row. Trust follows where a verdict came from: a file copied
   from one others could write, or made private with ``chmod go-w`` after they could, is this user's file with
   rows this user's gate never computed (issue 40 item 1). So no row anyone else writes (``verdicts.passed``
   flipped, ``solutions`` pointed at a failed candidate) makes this process serve a candidate its gate failed.
"""
from __future__ import annotations

import hashlib
import os
import stat
import threading

TRUST_ENV = "ARBITER_TRUST_REGISTRY"


def _who(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def named_trusted(path: str) -> bool:
    """Whether the caller named ``path`` in ``$ARBITER_TRUST_REGISTRY`` (trusted although others may write it)."""
    named = [p for p in os.environ.get(TRUST_ENV, "").split(os.pathsep) if p]
    real = os.path.realpath(path)
    return any(os.path.realpath(os.path.expanduser(p)) == real for p in named)


def refusal(path: str) -> str | None:
    """Why another user could write the SQLite registry at ``path`` (a file or a folder above it that another
    user owns or can write); None when only this user (or root) can. A missing file is judged by its folders."""
    me = os.geteuid()
    real = os.path.realpath(path)
    for d in [*reversed(_parents(real))]:
        try:
            st = os.stat(d)
        except OSError:
            return None  # not reachable: opening it fails with its own message
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid not in (me, 0):
            return f"the folder {d} is owned by {_who(st.st_uid)}, not by you ({_who(me)}) or root"
        if mode & 0o022 and not mode & stat.S_ISVTX:
            return f"the folder {d} is writable by others (mode {mode:04o}) and not sticky"
    for f in (real, real + "-wal", real + "-shm", real + "-journal"):
        try:
            st = os.stat(f)
        except FileNotFoundError:
            continue
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid not in (me, 0):
            return f"{f} is owned by {_who(st.st_uid)}, not by you ({_who(me)})"
        if mode & 0o022:
            return f"{f} is writable by others (mode {mode:04o})"
    return None


def _parents(real: str) -> list[str]:
    out, d = [], os.path.dirname(real)
    while True:
        out.append(d)
        up = os.path.dirname(d)
        if up == d:
            return out
        d = up


def refusal_fix(path: str) -> str:
    """What the caller can do about a refused registry file (the sentence after ``refusal``)."""
    return (f"It is refused: whoever can write it decides what this process serves. Use a registry of your own "
            f"(`cp {path} mine.db` and --db/ARBITER_DB mine.db), make it yours alone (`chmod go-w` on it and "
            f"its folder), or set {TRUST_ENV}={path} to open it anyway; either way, every passed verdict in it "
            f"that your gate did not compute is gated again here before its solution serves.")


# --- the ledger of verdicts this user's gate computed -------------------------------------------------------
def digest(vkey, verdict) -> str:
    """The ledger's line for one verdict: its key and what decides whether and where it may serve."""
    b = verdict.budget
    text = "\0".join([vkey.identity, vkey.params_id, vkey.key, vkey.env, str(bool(verdict.passed)),
                      str(bool(verdict.looser_budget))]
                     + [f"{float(x):.9g}" for x in (b.rel_fro, b.atol, b.rtol, verdict.rel_error, verdict.max_excess)])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class Ledger:
    """Digests of the verdicts this user's gate computed, appended to ``<private cache>/trust/verdicts``
    (mode 0600) by every process of this user; read once, then only what other processes appended since."""

    def __init__(self):
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self._offset = 0
        self._path: str | None = None

    def path(self) -> str:
        if self._path is None:
            from arbiter.cachedir import private_dir

            self._path = str(private_dir("trust") / "verdicts")
        return self._path

    def _catch_up(self) -> None:
        try:
            with open(self.path(), "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1  # a line another process is writing now is read next time
        self._seen.update(data[:end].decode("ascii", "replace").split())
        self._offset += end

    def vouches(self, vkey, verdict) -> bool:
        d = digest(vkey, verdict)
        with self._lock:
            if d not in self._seen:
                self._catch_up()
            return d in self._seen

    def vouch(self, vkey, verdict) -> None:
        d = digest(vkey, verdict)
        with self._lock:
            if d in self._seen:
                return
            fd = os.open(self.path(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, (d + "\n").encode())  # one short write: appends of processes never interleave
            finally:
                os.close(fd)
            self._seen.add(d)


LEDGER = Ledger()


def unvouched(store) -> tuple[list[tuple], list]:
    """What ``arbiter doctor`` reports about a ``SqlStore``: its own (not imported) passed verdicts this user's
    gate did not vouch for, as (VerdictKey, candidate name), and the stored solutions that rest on one of them
    (on a registry others may write, those are gated again before they serve; anywhere they are a row this
    user's gate never wrote: a flipped ``passed``, or a row from before the ledger)."""
    from arbiter.keys import params_id

    doubtful = {vkey: name for vkey, name, verdict in store.verdicts(imported=False)
                if verdict.passed and not LEDGER.vouches(vkey, verdict)}
    keys = {(v.identity, v.params_id, v.key, v.env) for v in doubtful}
    resting = [r for r in store.solutions() if (r.identity, params_id(r.params), r.key, r.env) in keys]
    return sorted(doubtful.items(), key=lambda kv: (kv[0].key, kv[1])), resting
