"""Layering: the user's read-write registry over an optional read-only system registry.

Lookups read the user layer first, then the system one; every write goes to
the user layer. ``open_default()`` is what ``arbiter.store.default_store()``
returns: ``$ARBITER_DB`` (a path or any SQLAlchemy URL, default
``./registry.db``) over ``$ARBITER_SYSTEM_DB`` when set. A user registry that
cannot be written degrades with one warning (served read-only when readable,
new results in memory), and so does one another user can write (``arbiter.store.trust``); a file that is not a
registry raises ``RegistryError``
naming it and the fix.
"""
from __future__ import annotations

import os
import warnings

from arbiter.store.base import MemoryStore, Store
from arbiter.store.diagnostics import (
    DiskFullRegistry,
    ReadOnlyFilesystemRegistry,
    UntrustedRegistry,
    UnwritableRegistry,
)
from arbiter.store.sql import SqlStore

DEFAULT_PATH = "registry.db"
_warned: set[str] = set()


class LayeredStore(Store):
    """``user`` (read-write) over ``system`` (read-only)."""

    def __init__(self, user: Store, system: Store):
        self.user, self.system = user, system

    def __repr__(self):
        return f"<LayeredStore {self.user!r} over {self.system!r}>"

    @property
    def persistent(self):  # type: ignore[override]  # derived: a layered store persists as its user layer
        return self.user.persistent  # every write goes to the user layer

    def transaction(self):
        return self.user.transaction()  # every write goes to the user layer

    def load_verdict(self, vkey):
        found = self.user.load_verdict(vkey)
        return found if found is not None else self.system.load_verdict(vkey)

    def save_verdict(self, vkey, verdict, candidate):
        self.user.save_verdict(vkey, verdict, candidate)

    def load_solution(self, key, env):
        found = self.user.load_solution(key, env)
        return found if found is not None else self.system.load_solution(key, env)

    def save_solution(self, record, environment=None):
        self.user.save_solution(record, environment)

    def add_solution(self, record, environment=None):
        if self.system.load_solution(record.key, record.env) is not None:
            return False  # the system registry's winner stands (lookups read it under an empty user layer)
        return self.user.add_solution(record, environment)

    def solutions(self, env=None):
        mine = self.user.solutions(env)
        seen = {(r.key, r.env) for r in mine}
        return mine + [r for r in self.system.solutions(env) if (r.key, r.env) not in seen]

    def save_measurements(self, key, env, measurements):
        self.user.save_measurements(key, env, measurements)

    def load_measurements(self, key, env):
        return self.user.load_measurements(key, env) or self.system.load_measurements(key, env)

    def add_counts(self, deltas):
        self.user.add_counts(deltas)  # counts are this user's dispatches

    def counts(self):
        return self.user.counts()

    def record_key(self, key, dims, env):
        self.user.record_key(key, dims, env)

    def recorded_keys(self):
        return self.user.recorded_keys()


class ReadOnlyUserStore(LayeredStore):
    """A user registry this process may read but not write, under an in-memory layer for its new results."""

    def __repr__(self):
        return f"<ReadOnlyUserStore memory over {self.system!r}>"


class MemoryOverRegistry(LayeredStore):
    """A writable registry that stopped taking writes while this process ran (its disk filled up, or it was
    made read-only): new verdicts and solutions stay in memory over it, as for a read-only registry, so calls
    are still served (issue 28 item 9). Counters still go to the registry: a flush that fails keeps them
    pending, and what is still pending when the process ends is reported with its number."""

    def __init__(self, registry: Store):
        super().__init__(MemoryStore(), registry)

    def __repr__(self):
        return f"<MemoryOverRegistry memory over {self.system!r}>"

    @property
    def persistent(self):  # type: ignore[override]  # its counters still go to the registry
        return True

    def add_counts(self, deltas):
        self.system.add_counts(deltas)

    def counts(self):
        return self.system.counts()


def serve_from_memory(store: Store, why: Exception) -> Store | None:
    """The store to use once ``store`` refused a write with ``why`` (an ``UnwritableRegistry``: a full disk, a
    registry made read-only): the same registry read, with new results in memory. None when ``store`` is one
    already (nothing more to fall back to). One warning per registry."""
    if isinstance(store, (MemoryOverRegistry, MemoryStore, ReadOnlyUserStore)):
        return None
    text = f"kernel-arbiter: {why} New results stay in memory for this process; calls are still served."
    if text not in _warned:
        _warned.add(text)
        warnings.warn(text, RuntimeWarning, stacklevel=3)
    return MemoryOverRegistry(store)


IN_MEMORY = ":memory:"  # ARBITER_DB / --db naming no file: everything stays in this process, by request


def open_user(where: str, *, writable: bool = False) -> Store:
    """The user registry at ``where`` (``:memory:``: an in-memory store, asked for). When this process cannot
    write it (one warning per path, never a crash): a registry it can read is still served, read-only, under an
    in-memory layer that takes this process's new results; otherwise an in-memory store. A registry another user
    can write is not opened at all unless named in ``$ARBITER_TRUST_REGISTRY`` (``arbiter.store.trust``): an
    in-memory store and one warning naming the file and the fix. The file is never changed, so nothing in it is
    lost.

    ``writable=True`` (the commands whose point is to write it: ``tune``, ``run``): no fallback; the
    ``UnwritableRegistry`` is raised, its message saying how to keep results in memory on purpose."""
    if where == IN_MEMORY:
        return MemoryStore()
    try:
        return SqlStore(where)
    except UnwritableRegistry as exc:
        if writable:
            raise UnwritableRegistry(f"{exc} Nothing was written. To keep this run's results in this process only, "
                                     f"pass --db {IN_MEMORY} (ARBITER_DB={IN_MEMORY}).", exc.readable) from None
        if isinstance(exc, UntrustedRegistry):
            return _degraded(where, str(exc), MemoryStore(), "Using an in-memory registry: new results", "")
        fix = ("" if isinstance(exc, DiskFullRegistry)  # its message says what to do: free space
               else "Remount it read-write, or set ARBITER_DB or --db to a path on a writable filesystem."
               if isinstance(exc, ReadOnlyFilesystemRegistry)
               else "Make it writable for you, or set ARBITER_DB or --db to a path of your own.")
        if exc.readable:
            try:
                kept = SqlStore(where, readonly=True, fix=f"Nothing was changed. {fix}")
            except UntrustedRegistry as untrusted:
                return _degraded(where, f"{exc} {untrusted}", MemoryStore(),
                                 "Using an in-memory registry: new results", "")
            return _degraded(where, str(exc), ReadOnlyUserStore(MemoryStore(), kept),
                             "Its solutions are served read-only; new results", fix)
        return _degraded(where, str(exc), MemoryStore(), "Using an in-memory registry: new results", fix)


def _degraded(where: str, why: str, store: Store, what: str, fix: str) -> Store:
    if where not in _warned:
        _warned.add(where)
        warnings.warn(f"kernel-arbiter: {why} {what} stay in memory for this process and will not persist. "
                      f"{fix}".rstrip(), RuntimeWarning, stacklevel=4)
    return store


def open_default(*, writable: bool = False) -> Store:
    """``$ARBITER_DB`` (default ``./registry.db``) over ``$ARBITER_SYSTEM_DB`` when set; ``writable``: see
    ``open_user``."""
    user = open_user(os.environ.get("ARBITER_DB") or DEFAULT_PATH, writable=writable)
    system = os.environ.get("ARBITER_SYSTEM_DB")
    if system:  # a broken system registry is an error (naming ARBITER_SYSTEM_DB), not a silent loss of its rows
        return LayeredStore(user, SqlStore(system, readonly=True))
    return user
