"""Transactions on a registry database that survive contention: one short transaction per write (or one per
``transaction()`` block), transient lock/busy/deadlock/serialization failures retried with backoff for up to
``RETRY_SECONDS``, a lost insert race retried as a whole (then as an update), and every other failure turned
into a ``RegistryError`` naming the registry (``arbiter.store.diagnostics.registry_error``).

SQLite only (the clearly marked branch in ``make_engine``): WAL journal, a busy timeout, ``BEGIN IMMEDIATE`` for
write transactions (a deferred transaction that upgrades to a writer can fail without waiting), foreign keys on.

``Database`` is what ``arbiter.store.sql.SqlStore`` (the record storage) builds on; ``arbiter.store.claims`` and
``arbiter.fleet`` run their own statements through its ``transact``.
"""
from __future__ import annotations

import contextlib
import os
import random
import threading
import time
import weakref
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DatabaseError, IntegrityError, OperationalError
from sqlalchemy.pool import StaticPool

from arbiter.errors import RegistryError
from arbiter.store import flusher
from arbiter.store.diagnostics import readonly_sqlite_url, registry_error, sqlite_path

BUSY_TIMEOUT_MS = 10_000  # SQLite waits this long for a lock before reporting busy
RETRY_SECONDS = 120.0  # then we back off and retry for this long in total
INTEGRITY_RETRIES = 5  # a unique-constraint race resolves on the next attempt; more means a real fault
_TRANSIENT = ("database is locked", "database is busy", "deadlock detected", "could not serialize",
              "database table is locked")
_TRANSIENT_SQLSTATES = ("40P01", "40001")  # deadlock detected, serialization failure: retry the transaction

_LIVE: weakref.WeakSet[Database] = weakref.WeakSet()  # open databases, made fit for a forked child


def _after_fork_in_child() -> None:
    for database in list(_LIVE):
        database.after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


def open_here(path: str) -> bool:
    """Whether a database of this process still has the file ``path`` open (the same file, by device and inode).

    POSIX drops every lock a process holds on a file when it closes *any* descriptor of it: reading the header
    of a registry that SQLite has open here would silently release SQLite's locks, and another process could
    then checkpoint and delete the WAL under this one's connections, losing its later commits.
    """
    try:
        wanted = os.stat(path)
    except OSError:
        return False
    for database in list(_LIVE):
        if database.path is None or database.closed:
            continue
        try:
            st = os.stat(database.path)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (wanted.st_dev, wanted.st_ino):
            return True
    return False


def make_engine(url: URL, readonly: bool):
    u = make_url(url)
    if u.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    # --- SQLite branch -------------------------------------------------------
    memory = sqlite_path(url) is None
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000}}
    if memory:
        kwargs["poolclass"] = StaticPool  # one connection, or each thread would see its own empty database
    if readonly and not memory:
        url = readonly_sqlite_url(u.database)  # type: ignore[arg-type]  # a file: memory is handled above
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # pysqlite must not BEGIN on its own; _on_begin does
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys = ON")
        if not readonly and not memory:
            cur.execute("PRAGMA journal_mode = WAL")  # readers never block the writer, nor it them
            cur.execute("PRAGMA synchronous = NORMAL")  # durable against process crashes in WAL mode
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        # A writer takes the lock up front; a deferred one could fail on upgrade without waiting.
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("arbiter_write") else "BEGIN")

    return engine


class Database:
    """One registry database: its engine, one operation at a time per process object, and transactions
    retried through contention. ``where`` names it in messages; ``path`` is its SQLite file (None for a
    server); ``fix`` is the recovery sentence when the file is not a registry.

    ``known``: facts about rows a committed transaction found or wrote (parent rows: ``("key", id)``, ...),
    so they are not looked up again; a transaction adds its own with ``learn``, kept only once it commits,
    and a lost race forgets them all.
    """

    def __init__(self, url: URL, *, where: str, path: str | None, readonly: bool, fix: str):
        self.url, self.where, self.path, self.readonly, self.fix = url, where, path, readonly, fix
        self.engine = make_engine(url, readonly)
        self.lock = threading.RLock()  # one DB operation at a time per store (in-memory SQLite needs it)
        self.known: set[tuple] = set()
        self._learned: set[tuple] = set()  # learnt by the transaction in progress
        self._local = threading.local()  # .batch: the writes of this thread's open ``transaction()``
        self.closed = False
        _LIVE.add(self)

    def after_fork_in_child(self) -> None:
        # The parent's pooled connections are the parent's (sharing one across processes corrupts its
        # protocol state); drop them here without closing them for the parent. A lock another parent thread
        # held at the fork would never be released in the child.
        self.engine.dispose(close=False)
        self.lock = threading.RLock()

    def learn(self, fact: tuple) -> None:
        """Note ``fact`` about a row; trusted by later transactions once this one commits."""
        self._learned.add(fact)

    def transact(self, fn, *, write: bool):
        """Run ``fn(connection)`` in one transaction, retrying transient failures; returns its result."""
        if write and self.readonly:
            raise RegistryError(f"{self.where}: opened read-only (a system registry); writes go to the user one.")
        deadline, delay, integrity = time.monotonic() + RETRY_SECONDS, 0.005, 0
        while True:
            try:
                with flusher.deferring_signals(), self.lock, self.engine.connect() as conn:
                    if write:
                        conn.execution_options(arbiter_write=True)
                    self._learned = set()
                    with conn.begin():
                        result = fn(conn)
                    self.known |= self._learned  # committed
                    return result
            except IntegrityError as exc:  # lost an insert race: the retry finds the row and updates it
                self.known = set()
                integrity += 1
                if integrity > INTEGRITY_RETRIES:
                    raise self._error(exc) from exc
            except OperationalError as exc:
                text = str(exc.orig).lower()
                transient = getattr(exc.orig, "sqlstate", None) in _TRANSIENT_SQLSTATES or any(
                    s in text for s in _TRANSIENT)
                if not transient or time.monotonic() > deadline:
                    raise self._error(exc) from exc
            except DatabaseError as exc:
                raise self._error(exc) from exc
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.25)

    def _error(self, exc) -> RegistryError:
        return registry_error(exc, self.where, self.path, self.fix)

    def write(self, fn, after=None) -> None:
        """Run the write ``fn(connection)`` now (one transaction), or add it to this thread's open
        ``transaction()``; ``after()`` updates the caches once it is committed."""
        batch = getattr(self._local, "batch", None)
        if batch is not None:
            batch.append((fn, after))
            return
        self.transact(fn, write=True)
        if after is not None:
            after()

    @contextlib.contextmanager
    def transaction(self):
        """This thread's writes inside commit together when it ends, or not at all when it raises (see
        ``arbiter.store.Store.transaction``); nested, it joins the outer one."""
        if getattr(self._local, "batch", None) is not None:
            yield  # nested: the outer transaction commits everything
            return
        batch = self._local.batch = []
        try:
            yield
        finally:
            self._local.batch = None  # on an exception nothing of it was written, and nothing will be
        if batch:
            def write(conn):
                for fn, _ in batch:
                    fn(conn)

            self.transact(write, write=True)
            for _, after in batch:
                if after is not None:
                    after()

    def close(self) -> None:
        self.closed = True
        self.engine.dispose()
