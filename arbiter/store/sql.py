"""``SqlStore``: the Store contract on a SQLAlchemy database (SQLite ``registry.db`` by default).

Contract, beyond ``arbiter.store.Store``:

* Every write is one short transaction, except inside ``transaction()``, where a
  thread's writes commit together (a tuned key); a crash leaves the last
  committed state.
  Transient lock/busy/serialization errors are retried with backoff (for up to
  ``RETRY_SECONDS``), so ``database is locked`` never reaches a caller; anything
  else becomes ``RegistryError`` naming the database and the recovery command.
* Upserts are "update, else insert" under the models' unique constraints: a
  writer that loses an insert race gets an IntegrityError, and its whole
  transaction is retried (then as an update). Portable to any dialect.
* Reads for dispatch misses are served from per-environment caches filled by
  one query on first use (a start-up loads every solution of an environment at
  once); a key not in the cache is looked up once more in the database, so a
  solution another process committed since is still found.
* SQLite only (the clearly marked branch in ``_engine``): WAL journal, a busy
  timeout, ``BEGIN IMMEDIATE`` for write transactions (a deferred transaction
  that upgrades to a writer can fail without waiting), foreign keys on.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import re
import threading
import time
import urllib.parse
import weakref
from datetime import timezone
from typing import Any

from sqlalchemy import UniqueConstraint, create_engine, delete, event, func, insert, select, update
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DatabaseError, IntegrityError, OperationalError
from sqlalchemy.pool import StaticPool

from arbiter import env as envmod
from arbiter.errors import RegistryError
from arbiter.oracles.budgets import Budget
from arbiter.store import CountDelta, MeasurementRecord, SolutionRecord, Store, VerdictKey, flusher, migrate
from arbiter.store.models import (
    SCHEMA_VERSION,
    CandidateRow,
    CounterRow,
    Environment,
    MeasurementRow,
    ProblemKeyRow,
    RecordedKey,
    SolutionRow,
    VerdictRow,
)

BUSY_TIMEOUT_MS = 10_000  # SQLite waits this long for a lock before reporting busy
RETRY_SECONDS = 120.0  # then we back off and retry for this long in total
INTEGRITY_RETRIES = 5  # a unique-constraint race resolves on the next attempt; more means a real fault
SQLITE_MAGIC = b"SQLite format 3\x00"
_TRANSIENT = ("database is locked", "database is busy", "deadlock detected", "could not serialize",
              "database table is locked")
_TRANSIENT_SQLSTATES = ("40P01", "40001")  # deadlock detected, serialization failure: retry the transaction
_UNWRITABLE = ("unable to open database file", "readonly database", "read-only file system",
               "attempt to write a readonly")


_LIVE: weakref.WeakSet[SqlStore] = weakref.WeakSet()  # open stores, made fit for a forked child


def _after_fork_in_child() -> None:
    for store in list(_LIVE):
        store._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


class UnwritableRegistry(RegistryError):
    """The registry path cannot be written (``open_default`` degrades on this one). ``readable``: the file
    exists and this process may read it (it is then served read-only)."""

    def __init__(self, message: str, readable: bool = False):
        super().__init__(message)
        self.readable = readable


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(where: str) -> bool:
    """Whether ``where`` is a URL: only a string that starts with a scheme (``sqlite://``, ``postgresql+x://``)."""
    return bool(_SCHEME.match(where))


def to_url(where: str | URL) -> URL:
    """A SQLAlchemy URL for ``where``: a URL is parsed, anything else is a file path, taken literally.

    A path is never parsed as URL text: ``q?mode=ro.db`` is a file of that name (not ``q`` with a query) and
    ``pct%41.db`` keeps its ``%41``, so the URL is built from its parts rather than by pasting the path in.
    """
    if isinstance(where, URL):
        return where
    if is_url(where):
        return make_url(where)
    return URL.create("sqlite", database=os.path.abspath(os.path.expanduser(where)))


def sqlite_path(url: str | URL) -> str | None:
    """The file behind a SQLite URL; None for another dialect or an in-memory database."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or u.database in (None, "", ":memory:"):
        return None
    return u.database


def repair_hint(where: str) -> str:
    return f"Nothing was changed. Run `arbiter --db {where} doctor --repair` to move it aside and start afresh."


SYSTEM_FIX = "Nothing was changed. Point ARBITER_SYSTEM_DB at a kernel-arbiter registry file, or unset it."


def check_sqlite_file(path: str, fix: str | None = None) -> None:
    """Raise RegistryError naming ``path`` when it exists but is not a readable SQLite database.

    ``fix`` is the recovery sentence (default: ``repair_hint``, for a registry of one's own).
    """
    try:
        with open(path, "rb") as f:
            head = f.read(100)
    except FileNotFoundError:
        return
    except IsADirectoryError:
        raise RegistryError(f"{path}: is a folder, not a registry file. {fix or 'Give the path of a file in it.'}") \
            from None
    except OSError as exc:
        raise RegistryError(f"{path}: cannot be read ({exc.strerror}; {_ownership(path)}). "
                            f"{fix or 'Ask its owner for access, or use another --db/ARBITER_DB.'}") from exc
    if head and (len(head) < 100 or not head.startswith(SQLITE_MAGIC)):
        what = "truncated" if SQLITE_MAGIC.startswith(head[:16]) else "not a SQLite database"
        raise RegistryError(f"{path}: {what} ({os.path.getsize(path)} bytes). {fix or repair_hint(path)}")


def _ownership(path: str) -> str:
    """``owned by alice (uid 1000), mode 0600; you are bob (uid 1001)``: what a permission message needs."""
    import pwd

    def name(uid):
        try:
            return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
        except KeyError:
            return f"uid {uid}"

    try:
        st = os.stat(path)
    except OSError:
        return f"you are {name(os.geteuid())}"
    return f"owned by {name(st.st_uid)}, mode {st.st_mode & 0o777:04o}; you are {name(os.geteuid())}"


def unwritable_reason(path: str) -> str | None:
    """Why this process cannot keep a registry at ``path`` (None when it can): names the folder or the file."""
    folder = os.path.dirname(path) or "."
    # A missing folder is not created: a mistyped --db/ARBITER_DB would otherwise leave folders behind silently.
    if not os.path.exists(folder):
        return f"its folder {folder} does not exist (create it first, e.g. `mkdir -p {folder}`)"
    if not os.path.isdir(folder):
        return f"{folder} is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):  # SQLite creates its -wal/-shm files beside the registry
        return f"its folder {folder} is not writable ({_ownership(folder)})"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"the file is not writable ({_ownership(path)})"
    return None


def _readonly_sqlite_url(path: str) -> URL:
    """The URL that opens ``path`` for reading only, also where this process cannot write its folder.

    A WAL-mode registry needs a ``-shm`` file beside it even to be read; in a folder we cannot write (a shipped
    system registry, another user's folder) SQLite cannot create it and refuses to open. Then the file is opened
    ``immutable``: read as it is on disk, which is the whole registry when no ``-wal`` holds commits not yet
    copied into it (SQLite copies them when the last writer closes).
    """
    # A SQLite URI: the path is %-quoted, so "?", "#" and "%" in a file name stay part of the name.
    query = {"mode": "ro", "uri": "true"}
    url = URL.create("sqlite", database="file:" + urllib.parse.quote(os.path.abspath(path)), query=query)
    folder = os.path.dirname(path) or "."
    if os.access(folder, os.W_OK | os.X_OK) or os.path.exists(path + "-shm"):
        return url
    wal = path + "-wal"
    if os.path.exists(wal) and os.path.getsize(wal) > 0:
        raise RegistryError(f"{path}: its {wal} holds commits not yet in the file, and its folder is not writable "
                            f"by you ({_ownership(folder)}), so they cannot be read. Nothing was changed. Its owner "
                            f"can fold them in with `arbiter --db {path} doctor`.")
    return url.update_query_dict({"immutable": "1"})


def _engine(url: URL, readonly: bool):
    u = make_url(url)
    if u.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    # --- SQLite branch -------------------------------------------------------
    memory = sqlite_path(url) is None
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000}}
    if memory:
        kwargs["poolclass"] = StaticPool  # one connection, or each thread would see its own empty database
    if readonly and not memory:
        url = _readonly_sqlite_url(u.database)  # type: ignore[arg-type]  # a file: memory is handled above
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


def _contract_json(candidate) -> str | None:
    contract = getattr(candidate, "contract", None)
    return None if contract is None else json.dumps(dataclasses.asdict(contract), sort_keys=True)


def _num(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _nan(x):
    return math.nan if x is None else x


def _utc(dt):
    return dt.replace(tzinfo=timezone.utc) if dt is not None and dt.tzinfo is None else dt


def current_environment(target: str):
    """``(EnvironmentKey, "")`` for a target usable here, else ``(None, why not)``."""
    try:
        return envmod.environment(target), ""
    except Exception as exc:  # a target whose library is missing cannot say what its environment is
        return None, f"{type(exc).__name__}: {exc}"


def _key_target(key: str) -> str:
    return key.split(":", 1)[0]


def _schema_problems(conn) -> list[str]:
    """Tables, columns and unique constraints the models have but the database lacks (a hand-edited or
    half-restored registry); an extra table or column is not a problem."""
    from sqlalchemy import inspect

    from arbiter.store.models import Base

    found, problems = inspect(conn), []
    tables = set(found.get_table_names())
    for table in Base.metadata.sorted_tables:
        if table.name not in tables:
            problems.append(f"table {table.name} is missing")
            continue
        have = {c["name"] for c in found.get_columns(table.name)}
        problems += [f"column {table.name}.{c.name} is missing" for c in table.columns if c.name not in have]
        uniques = {tuple(sorted(u["column_names"])) for u in found.get_unique_constraints(table.name)}
        uniques |= {tuple(sorted(i["column_names"])) for i in found.get_indexes(table.name) if i.get("unique")}
        for want in (c for c in table.constraints if isinstance(c, UniqueConstraint)):
            if tuple(sorted(c.name for c in want.columns)) not in uniques:
                problems.append(f"unique constraint {want.name} on {table.name} is missing: two writers "
                                f"could store duplicates")
    return problems


class SqlStore(Store):
    """The registry in a SQL database. ``readonly`` opens it for reading only (a system registry, or a user
    registry this process may not write). ``fix`` is the recovery sentence when the file is not a registry
    (default: ``doctor --repair`` for a writable one; pointing ``ARBITER_SYSTEM_DB`` elsewhere for a read-only one).
    """

    def __init__(self, where: str, *, readonly: bool = False, fix: str | None = None):
        self.url = to_url(where)
        self.path = sqlite_path(self.url)
        self.where = self.path or make_url(self.url).render_as_string(hide_password=True)
        self.readonly = readonly
        self.fix = fix or (SYSTEM_FIX if readonly else repair_hint(self.where))
        if self.path is not None:
            if readonly:
                try:
                    os.stat(self.path)
                except FileNotFoundError:
                    raise RegistryError(f"{self.path}: does not exist. {self.fix}") from None
                except PermissionError:
                    raise RegistryError(f"{self.path}: cannot be reached: a folder above it is not open to you "
                                        f"({_ownership(os.path.dirname(self.path))}). {self.fix}") from None
            why = None if readonly else unwritable_reason(self.path)
            if why is not None:
                raise UnwritableRegistry(f"{self.path}: cannot be written: {why}.",
                                         readable=os.access(self.path, os.R_OK))
            check_sqlite_file(self.path, self.fix)
        self._engine = _engine(self.url, readonly)
        self._lock = threading.RLock()  # one DB operation at a time per store (in-memory SQLite needs it)
        self._solutions: dict[tuple[str, str], SolutionRecord] = {}
        self._verdicts: dict[VerdictKey, object] = {}
        self._loaded: set[tuple[str, str]] = set()  # ("solutions"|"verdicts", env) already bulk-loaded
        self._parents: set[tuple] = set()  # parent rows known committed: ("key", id), ("candidate", identity), ...
        self._pending: set[tuple] = set()  # parents written by the transaction in progress
        self._local = threading.local()  # .batch: the writes of this thread's open ``transaction()``
        _LIVE.add(self)
        self._open()
        if not readonly:
            flusher.start()

    def _after_fork_in_child(self) -> None:
        # The parent's pooled connections are the parent's (sharing one across processes corrupts its
        # protocol state); drop them here without closing them for the parent. A lock another parent thread
        # held at the fork would never be released in the child.
        self._engine.dispose(close=False)
        self._lock = threading.RLock()

    def __repr__(self):
        return f"<SqlStore {self.where}{' (read-only)' if self.readonly else ''}>"

    # --- transactions -------------------------------------------------------
    def _error(self, exc) -> RegistryError:
        detail = str(getattr(exc, "orig", exc))
        if any(s in detail.lower() for s in _UNWRITABLE):
            return UnwritableRegistry(f"{self.where}: cannot be written ({detail}).")
        if self.path is not None and any(s in detail for s in ("not a database", "malformed", "corrupt")):
            return RegistryError(f"{self.where}: {detail}. {self.fix}")
        if self.path is None and isinstance(exc, OperationalError) and "connect" in detail.lower():
            return RegistryError(f"{self.where}: cannot connect ({detail.strip()}). Check the URL, that the server "
                                 f"is running, and that the database exists (CREATE DATABASE); nothing was written.")
        return RegistryError(f"{self.where}: {detail}. Check it with `arbiter --db {self.where} doctor`.")

    def _run(self, fn, *, write: bool):
        """Run ``fn(connection)`` in one transaction, retrying transient failures; returns its result."""
        if write and self.readonly:
            raise RegistryError(f"{self.where}: opened read-only (a system registry); writes go to the user one.")
        deadline, delay, integrity = time.monotonic() + RETRY_SECONDS, 0.005, 0
        while True:
            try:
                with flusher.deferring_signals(), self._lock, self._engine.connect() as conn:
                    if write:
                        conn.execution_options(arbiter_write=True)
                    self._pending = set()
                    with conn.begin():
                        result = fn(conn)
                    self._parents |= self._pending  # committed
                    return result
            except IntegrityError as exc:  # lost an insert race: the retry finds the row and updates it
                self._parents = set()
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

    def _write(self, fn, after=None) -> None:
        """Run the write ``fn(connection)`` now (one transaction), or add it to this thread's open
        ``transaction()``; ``after()`` updates the caches once it is committed."""
        batch = getattr(self._local, "batch", None)
        if batch is not None:
            batch.append((fn, after))
            return
        self._run(fn, write=True)
        if after is not None:
            after()

    @contextlib.contextmanager
    def transaction(self):
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

            self._run(write, write=True)
            for _, after in batch:
                if after is not None:
                    after()

    def _open(self) -> None:
        try:
            found = self._run(migrate.read_version, write=False)
        except migrate.SchemaVersionError as exc:
            raise migrate.SchemaVersionError(f"{self.where}: {exc} {self.fix}") from None
        if found == SCHEMA_VERSION:
            return
        if self.readonly and found is None:
            raise RegistryError(f"{self.where}: a database, but not a kernel-arbiter registry (no schema_version "
                                f"table). {self.fix}")
        if self.readonly and found == 0:
            raise RegistryError(f"{self.where}: empty, no registry in it. {self.fix}")
        if self.readonly and found > SCHEMA_VERSION:
            raise migrate.NewerSchemaError(f"{self.where}: registry schema v{found} is newer than this "
                                           f"kernel-arbiter (v{SCHEMA_VERSION}); upgrade kernel-arbiter. "
                                           f"Nothing was changed.")
        if self.readonly:
            raise RegistryError(f"{self.where}: schema v{found}, this kernel-arbiter reads v{SCHEMA_VERSION}. "
                                f"Upgrade a writable copy with `arbiter --db COPY doctor`.")
        self._run(lambda conn: migrate.upgrade(conn, self.where), write=True)

    def version(self) -> int | None:
        return self._run(migrate.read_version, write=False)

    # --- parents ------------------------------------------------------------
    # Parents this store has seen committed are not looked up again (half the statements of a counter
    # flush). Parent rows are never deleted, so the set stays true; a foreign-key failure clears it anyway.
    def _put_env(self, conn, fingerprint: str, target: str, fields: dict) -> None:
        if ("env", fingerprint, True) in self._parents or ("env", fingerprint, bool(fields)) in self._parents:
            return
        self._pending.add(("env", fingerprint, bool(fields)))
        row = conn.execute(select(Environment.fields).where(Environment.fingerprint == fingerprint)).first()
        if row is None:
            conn.execute(insert(Environment).values(fingerprint=fingerprint, target=target, fields=fields))
        elif fields and not row.fields:
            conn.execute(update(Environment).where(Environment.fingerprint == fingerprint)
                         .values(fields=fields, target=target))

    def _put_key(self, conn, key: str) -> None:
        if ("key", key) in self._parents:
            return
        self._pending.add(("key", key))
        if conn.execute(select(ProblemKeyRow.id).where(ProblemKeyRow.id == key)).first() is not None:
            return
        parts = key.split(":")
        names = ("target", "op", "dtype", "layout", "attrs", "bucket")
        values = dict(zip(names, parts)) if len(parts) == len(names) else {}
        conn.execute(insert(ProblemKeyRow).values(id=key, **values))

    def _put_candidate(self, conn, identity: str, name: str, target: str, op: str, tier: str,
                       contract: str | None = None) -> None:
        if ("candidate", identity) in self._parents:
            return
        self._pending.add(("candidate", identity))
        if conn.execute(select(CandidateRow.identity).where(CandidateRow.identity == identity)).first() is None:
            conn.execute(insert(CandidateRow).values(identity=identity, name=name, target=target, op=op, tier=tier,
                                                     contract=contract))

    @staticmethod
    def _env_of(fingerprint: str, target: str, environment=None) -> tuple[str, dict]:
        """(target, fields) for an environment row: the given key, else the current one if it matches."""
        if environment is None or environment.fingerprint != fingerprint:
            environment, _ = current_environment(target)
        if environment is not None and environment.fingerprint == fingerprint:
            return environment.target, environment.as_dict()
        return target, {}  # only the fingerprint is known; a later writer may fill the fields in

    @staticmethod
    def _candidate_of(name: str, key: str) -> tuple[str, str, str]:
        """(target, op, tier name) for a candidate named in a record at ``key``."""
        parts = key.split(":")
        target, op = (parts[0], parts[1]) if len(parts) > 1 else ("", "")
        from arbiter.candidates import REGISTRY

        try:
            cand = REGISTRY.get(name, target, op) if target else None
        except ImportError:
            cand = None
        return target, op, cand.tier.name if cand is not None else ""

    # --- verdicts -----------------------------------------------------------
    @staticmethod
    def _verdict(row):
        from arbiter.verify import Verdict

        return Verdict(bool(row.passed), row.reason or "", _nan(row.rel_error), _nan(row.max_excess),
                       tuple(row.probes or ()), Budget(row.budget_rel_fro, row.budget_atol, row.budget_rtol),
                       bool(row.looser_budget), row.seconds or 0.0)

    def _verdict_rows(self, *where):
        cols = (VerdictRow.identity, VerdictRow.params, VerdictRow.key, VerdictRow.env, VerdictRow.passed,
                VerdictRow.reason, VerdictRow.rel_error, VerdictRow.max_excess, VerdictRow.probes,
                VerdictRow.budget_rel_fro, VerdictRow.budget_atol, VerdictRow.budget_rtol,
                VerdictRow.looser_budget, VerdictRow.seconds)
        rows = self._run(lambda conn: conn.execute(select(*cols).where(*where)).all(), write=False)
        return {VerdictKey(r.identity, r.params, r.key, r.env): self._verdict(r) for r in rows}

    def load_verdict(self, vkey):
        """The verdict this installation's gate computed; None also for an imported one (``origin``), so the
        gate runs again on first use and its verdict replaces the file's (``save_verdict``)."""
        own = VerdictRow.origin == ""
        if ("verdicts", vkey.env) not in self._loaded:
            found = self._verdict_rows(VerdictRow.env == vkey.env, own)
            with self._lock:
                self._verdicts.update(found)
                self._loaded.add(("verdicts", vkey.env))
        verdict = self._verdicts.get(vkey)
        if verdict is None:  # committed by another process since the bulk load?
            verdict = self._verdict_rows(VerdictRow.identity == vkey.identity, VerdictRow.params == vkey.params,
                                         VerdictRow.key == vkey.key, VerdictRow.env == vkey.env, own).get(vkey)
            if verdict is not None:
                self._verdicts[vkey] = verdict
        return verdict

    def save_verdict(self, vkey, verdict, candidate):
        target, fields = self._env_of(vkey.env, candidate.target)
        values = dict(passed=verdict.passed, reason=verdict.reason, rel_error=_num(verdict.rel_error),
                      max_excess=_num(verdict.max_excess), probes=list(verdict.probes),
                      budget_rel_fro=verdict.budget.rel_fro, budget_atol=verdict.budget.atol,
                      budget_rtol=verdict.budget.rtol, looser_budget=bool(verdict.looser_budget),
                      seconds=float(verdict.seconds), origin="")
        match = (VerdictRow.identity == vkey.identity, VerdictRow.params == vkey.params,
                 VerdictRow.key == vkey.key, VerdictRow.env == vkey.env)

        def write(conn):
            self._put_env(conn, vkey.env, target, fields)
            self._put_key(conn, vkey.key)
            self._put_candidate(conn, vkey.identity, candidate.name, candidate.target, candidate.op,
                                candidate.tier.name, _contract_json(candidate))
            if conn.execute(update(VerdictRow).where(*match).values(**values)).rowcount == 0:
                conn.execute(insert(VerdictRow).values(identity=vkey.identity, params=vkey.params, key=vkey.key,
                                                       env=vkey.env, **values))

        def cache():
            with self._lock:
                self._verdicts[vkey] = verdict

        self._write(write, cache)

    # --- solutions ----------------------------------------------------------
    @staticmethod
    def _record(row) -> SolutionRecord:
        # unpacked, not row.name: a start-up load builds one per stored solution of the environment (10,000s)
        key, candidate, identity, params, policy, env, margin, note, created = row
        return SolutionRecord(key, candidate, identity, dict(params or {}), policy, env, margin, note or "",
                              _utc(created))

    def _solution_rows(self, *where) -> list[SolutionRecord]:
        cols = (SolutionRow.key, SolutionRow.candidate, SolutionRow.identity, SolutionRow.params,
                SolutionRow.policy, SolutionRow.env, SolutionRow.margin, SolutionRow.note, SolutionRow.created)
        rows = self._run(lambda conn: conn.execute(select(*cols).where(*where)).all(), write=False)
        return [self._record(r) for r in rows]

    def _load_env_solutions(self, env: str) -> None:
        if ("solutions", env) not in self._loaded:
            found = self._solution_rows(SolutionRow.env == env)
            with self._lock:
                for record in found:
                    self._solutions.setdefault((record.key, record.env), record)
                self._loaded.add(("solutions", env))

    def load_solution(self, key, env):
        self._load_env_solutions(env)
        record = self._solutions.get((key, env))
        if record is None:  # committed by another process since the bulk load?
            found = self._solution_rows(SolutionRow.key == key, SolutionRow.env == env)
            if found:
                record = self._solutions[(key, env)] = found[0]
        return record

    def save_solution(self, record, environment=None):
        target, fields = self._env_of(record.env, _key_target(record.key), environment)
        ctarget, op, tier = self._candidate_of(record.candidate, record.key)
        values = dict(candidate=record.candidate, identity=record.identity, params=dict(record.params),
                      policy=record.policy, margin=_num(record.margin), note=record.note,
                      created=record.created)

        def write(conn):
            self._put_env(conn, record.env, target, fields)
            self._put_key(conn, record.key)
            self._put_candidate(conn, record.identity, record.candidate, ctarget, op, tier)
            stmt = update(SolutionRow).where(SolutionRow.key == record.key, SolutionRow.env == record.env)
            if conn.execute(stmt.values(**values)).rowcount == 0:
                conn.execute(insert(SolutionRow).values(key=record.key, env=record.env, **values))

        def cache():
            with self._lock:
                self._solutions[(record.key, record.env)] = record

        self._write(write, cache)

    def add_solution(self, record, environment=None):
        target, fields = self._env_of(record.env, _key_target(record.key), environment)
        ctarget, op, tier = self._candidate_of(record.candidate, record.key)
        values = dict(candidate=record.candidate, identity=record.identity, params=dict(record.params),
                      policy=record.policy, margin=_num(record.margin), note=record.note,
                      created=record.created)

        def write(conn):
            found = select(SolutionRow.id).where(SolutionRow.key == record.key, SolutionRow.env == record.env)
            if conn.execute(found).first() is not None:
                return False
            self._put_env(conn, record.env, target, fields)
            self._put_key(conn, record.key)
            self._put_candidate(conn, record.identity, record.candidate, ctarget, op, tier)
            conn.execute(insert(SolutionRow).values(key=record.key, env=record.env, **values))  # a racing
            return True  # insert fails on uq_solution; the retry then finds that row and stores nothing

        stored = self._run(write, write=True)
        with self._lock:
            if stored:
                self._solutions[(record.key, record.env)] = record
            else:  # another process's winner: the next lookup reads it from the database
                self._solutions.pop((record.key, record.env), None)
        return stored

    def solutions(self, env=None):
        if env is None:
            return self._solution_rows()
        self._load_env_solutions(env)
        return [r for (k, e), r in list(self._solutions.items()) if e == env]

    # --- measurements -------------------------------------------------------
    def save_measurements(self, key, env, measurements):
        target, fields = self._env_of(env, _key_target(key))
        from arbiter.candidates import params_id

        rows = [dict(key=key, env=env, candidate=m.candidate, params=params_id(m.params), mode=m.mode,
                     reps=int(m.reps), median_s=_num(m.median_s), p20_s=_num(m.p20_s), p80_s=_num(m.p80_s),
                     spread=_num(m.spread), warmup_s=_num(m.warmup_s), screened=bool(m.screened),
                     dims=None if m.dims is None else json.dumps(m.dims))
                for m in measurements]

        def write(conn):
            self._put_env(conn, env, target, fields)
            self._put_key(conn, key)
            conn.execute(delete(MeasurementRow).where(MeasurementRow.key == key, MeasurementRow.env == env))
            if rows:
                conn.execute(insert(MeasurementRow), rows)

        self._write(write)

    def load_measurements(self, key, env):
        import json

        cols = (MeasurementRow.candidate, MeasurementRow.params, MeasurementRow.mode, MeasurementRow.median_s,
                MeasurementRow.p20_s, MeasurementRow.p80_s, MeasurementRow.spread, MeasurementRow.reps,
                MeasurementRow.warmup_s, MeasurementRow.screened, MeasurementRow.dims)
        rows = self._run(lambda conn: conn.execute(
            select(*cols).where(MeasurementRow.key == key, MeasurementRow.env == env)
            .order_by(MeasurementRow.id)).all(), write=False)
        return [MeasurementRecord(r.candidate, json.loads(r.params), r.mode, _nan(r.median_s), _nan(r.p20_s),
                                  _nan(r.p80_s), _nan(r.spread), r.reps, _nan(r.warmup_s), bool(r.screened),
                                  None if r.dims is None else json.loads(r.dims))
                for r in rows]

    # --- counters and recorded keys -----------------------------------------
    def add_counts(self, deltas):
        # One global order for the rows a flush locks (environments, then keys, then counter rows, each sorted):
        # two processes flushing the same rows in their own orders deadlock on a server database (issue 20
        # item 1: 8 PostgreSQL writers hit hundreds of deadlocks and ran out of retries).
        merged: dict[tuple, CountDelta] = {}
        for d in deltas:
            if d.total():
                slot = merged.setdefault((d.env, d.key, d.candidate, d.params),
                                         CountDelta(d.key, d.candidate, d.params, d.env))
                slot.hits += d.hits
                slot.misses += d.misses
                slot.fallbacks += d.fallbacks
                slot.loads += d.loads
        if not merged:
            return
        deltas = [merged[k] for k in sorted(merged)]
        envs = {d.env: self._env_of(d.env, _key_target(d.key)) for d in deltas}

        def write(conn):
            for fingerprint, (target, fields) in sorted(envs.items()):
                self._put_env(conn, fingerprint, target, fields)
            for key in sorted({d.key for d in deltas}):
                self._put_key(conn, key)
            for d in deltas:
                stmt = (update(CounterRow)
                        .where(CounterRow.key == d.key, CounterRow.candidate == d.candidate,
                               CounterRow.params == d.params, CounterRow.env == d.env)
                        .values(hits=CounterRow.hits + d.hits, misses=CounterRow.misses + d.misses,
                                fallbacks=CounterRow.fallbacks + d.fallbacks, loads=CounterRow.loads + d.loads))
                if conn.execute(stmt).rowcount == 0:
                    conn.execute(insert(CounterRow).values(key=d.key, candidate=d.candidate, params=d.params,
                                                           env=d.env, hits=d.hits, misses=d.misses,
                                                           fallbacks=d.fallbacks, loads=d.loads))

        self._run(write, write=True)

    def counts(self):
        rows = self._run(lambda conn: conn.execute(select(
            CounterRow.key, CounterRow.candidate, CounterRow.params, CounterRow.env, CounterRow.hits,
            CounterRow.misses, CounterRow.fallbacks, CounterRow.loads)).all(), write=False)
        return [CountDelta(*r) for r in rows]

    def record_key(self, key, dims, env):
        target, fields = self._env_of(env, _key_target(key))

        def write(conn):
            self._put_env(conn, env, target, fields)
            self._put_key(conn, key)
            found = select(RecordedKey.id).where(RecordedKey.key == key, RecordedKey.env == env)
            if conn.execute(found).first() is None:
                conn.execute(insert(RecordedKey).values(key=key, env=env, dims=dict(dims)))

        self._run(write, write=True)

    def recorded_keys(self):
        rows = self._run(lambda conn: conn.execute(
            select(RecordedKey.key, RecordedKey.dims).order_by(RecordedKey.id)).all(), write=False)
        seen: dict[str, dict] = {}
        for key, dims in rows:
            seen.setdefault(key, dict(dims or {}))
        return list(seen.items())

    # --- maintenance (stats, prune, doctor, export) ---------------------------
    def environments(self) -> list[dict]:
        """Every stored environment: fingerprint, target, fields, and how many rows of each kind use it."""
        def read(conn):
            envs = conn.execute(select(Environment.fingerprint, Environment.target, Environment.fields)).all()
            counts: dict[str, dict[str, int]] = {}
            for name, model in (("solutions", SolutionRow), ("verdicts", VerdictRow),
                                ("measurements", MeasurementRow), ("counters", CounterRow),
                                ("recorded", RecordedKey)):
                for fp, n in conn.execute(select(model.env, func.count()).group_by(model.env)).all():
                    counts.setdefault(fp, {})[name] = n
            return [{"fingerprint": fp, "target": target, "fields": dict(fields or {}),
                     "rows": counts.get(fp, {})} for fp, target, fields in envs]

        return self._run(read, write=False)

    def contracts(self) -> dict[str, dict]:
        """Code identity -> the delegate contract stored with it (only candidates that declared one)."""
        rows = self._run(lambda conn: conn.execute(select(CandidateRow.identity, CandidateRow.contract)
                                                   .where(CandidateRow.contract.is_not(None))).all(), write=False)
        return {identity: json.loads(text) for identity, text in rows}

    def candidate_tiers(self) -> dict[str, str]:
        """Code identity -> tier name, as recorded when the candidate was first stored."""
        rows = self._run(lambda conn: conn.execute(select(CandidateRow.identity, CandidateRow.tier)).all(),
                         write=False)
        return dict(rows)

    def verdicts(self, env: str | None = None) -> list[tuple[VerdictKey, str, Any]]:  # Any: verify.Verdict
        """Every stored verdict (only ``env``'s when given) as (VerdictKey, candidate name, Verdict); read-only."""
        names = dict(self._run(lambda conn: conn.execute(select(CandidateRow.identity, CandidateRow.name)).all(),
                               write=False))
        found = self._verdict_rows(*(() if env is None else (VerdictRow.env == env,)))
        return [(vkey, names.get(vkey.identity, vkey.identity), verdict) for vkey, verdict in found.items()]

    def prune(self, fingerprints: list[str]) -> dict[str, int]:
        """Delete every solution, verdict, measurement, counter and recorded key of these environments.

        Environment rows stay (tiny, and they name what changed). Returns rows removed per table.
        """
        if not fingerprints:
            return {}

        def write(conn):
            removed = {}
            for name, model in (("solutions", SolutionRow), ("verdicts", VerdictRow),
                                ("measurements", MeasurementRow), ("counters", CounterRow),
                                ("recorded", RecordedKey)):
                removed[name] = conn.execute(delete(model).where(model.env.in_(fingerprints))).rowcount
            return removed

        removed = self._run(write, write=True)
        with self._lock:
            gone = set(fingerprints)
            self._solutions = {k: v for k, v in self._solutions.items() if k[1] not in gone}
            self._verdicts = {k: v for k, v in self._verdicts.items() if k.env not in gone}
        return removed

    def table_counts(self) -> dict[str, int]:
        models = (Environment, ProblemKeyRow, CandidateRow, VerdictRow, MeasurementRow, SolutionRow, CounterRow,
                  RecordedKey)
        return self._run(lambda conn: {m.__tablename__: conn.execute(select(func.count()).select_from(m)).scalar()
                                       for m in models}, write=False)

    def integrity_check(self) -> list[str]:
        """Problems found; [] when sound. See ``checks()`` for what is checked on this dialect."""
        def read(conn):
            problems = _schema_problems(conn)
            if conn.dialect.name == "sqlite":
                rows = [r[0] for r in conn.exec_driver_sql("PRAGMA integrity_check").all()]
                fk = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
                problems += ([] if rows == ["ok"] else rows) + [f"dangling reference in {r[0]} row {r[1]} to {r[2]}"
                                                                for r in fk]
            return problems

        return self._run(read, write=False)

    def checks(self) -> str:
        """What ``integrity_check`` covers here, in words (``arbiter doctor`` prints it)."""
        schema = "every table, column and unique constraint of the models present"
        if self.path is not None:
            return f"{schema}; SQLite integrity_check and foreign_key_check ok"
        return (f"{schema}; foreign keys are enforced by the server; its storage is checked by the server's own "
                f"tools (e.g. pg_amcheck), not by kernel-arbiter")

    def close(self) -> None:
        self._engine.dispose()
