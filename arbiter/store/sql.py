"""``SqlStore``: the Store contract on a SQLAlchemy database (SQLite ``registry.db`` by default): the record
storage of verdicts, solutions, measurements, counters and recorded keys, with their parent rows.

Contract, beyond ``arbiter.store.Store``:

* Every write is one short transaction, except inside ``transaction()``, where a
  thread's writes commit together (a tuned key); a crash leaves the last
  committed state. Transient failures are retried and every other one becomes a
  ``RegistryError`` naming the database and the recovery command
  (``arbiter.store.transactions``, ``arbiter.store.diagnostics``).
* Upserts are "update, else insert" under the models' unique constraints: a
  writer that loses an insert race gets an IntegrityError, and its whole
  transaction is retried (then as an update). Portable to any dialect.
* Reads for dispatch misses are served from per-environment caches filled by
  one query on first use (a start-up loads every solution of an environment at
  once); a key not in the cache is looked up once more in the database, so a
  solution another process committed since is still found.

What is stored over the layers and whether it is current or stale (what ``prune`` removes):
``arbiter.store.inventory``.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import warnings
from datetime import timezone
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import make_url

from arbiter import env as envmod
from arbiter.errors import RegistryError
from arbiter.keys import ProblemKey, params_id
from arbiter.oracles.budgets import Budget
from arbiter.solution import ChosenBy, TimingMode
from arbiter.store import links, migrate, trust
from arbiter.store import rows as decode
from arbiter.store.base import CountDelta, MeasurementRecord, SolutionRecord, Store, Verdict, VerdictKey, tier_of
from arbiter.store.diagnostics import (
    SYSTEM_FIX,
    DiskFullRegistry,
    ReadOnlyFilesystemRegistry,
    UntrustedRegistry,
    UnwritableRegistry,
    check_driver,
    check_sqlite_file,
    check_usable_path,
    drop_new_companions,
    ownership,
    read_only_filesystem,
    refuse_foreign,
    repair_hint,
    schema_problems,
    sqlite_path,
    to_url,
    unwritable_reason,
)
from arbiter.store.models import (
    SCHEMA_VERSION,
    CandidateRow,
    ClaimRow,
    CounterRow,
    Environment,
    MeasurementRow,
    ProblemKeyRow,
    RecordedKey,
    SolutionRow,
    VerdictRow,
)
from arbiter.store.transactions import Database, open_here


def _contract_json(candidate) -> str | None:
    contract = getattr(candidate, "contract", None)
    return None if contract is None else json.dumps(dataclasses.asdict(contract), sort_keys=True)


def _num(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _nan(x):
    return math.nan if x is None else x


def _utc(dt):
    return dt.replace(tzinfo=timezone.utc) if dt is not None and dt.tzinfo is None else dt


@functools.lru_cache(maxsize=4096)  # a counter flush names the same few keys over and over
def _parsed(key: str) -> ProblemKey | None:
    """The parts of a stored key; None for text that is not a problem key (an imported row's, kept as it is)."""
    try:
        return ProblemKey.parse(key)
    except ValueError:
        return None


def _decodes_to_fields(value) -> bool:
    """Whether a stored environment's fields decode to a non-empty object."""
    try:
        return bool(decode.json_value(value, "fields"))
    except decode.BadRow:
        return False


def _key_target(key: str) -> str:
    parsed = _parsed(key)
    return "" if parsed is None else parsed.target



class SqlStore(Database, Store):
    """The registry in a SQL database. ``readonly`` opens it for reading only (a system registry, or a user
    registry this process may not write). ``fix`` is the recovery sentence when the file is not a registry
    (default: ``doctor --repair`` for a writable one; pointing ``ARBITER_SYSTEM_DB`` elsewhere for a read-only one).
    """

    def __init__(self, where: str, *, readonly: bool = False, fix: str | None = None):
        url = to_url(where)
        path = sqlite_path(url)
        where = path or make_url(url).render_as_string(hide_password=True)
        fix = fix or (SYSTEM_FIX if readonly else repair_hint(where))
        setting = "ARBITER_SYSTEM_DB" if fix == SYSTEM_FIX else "--db/ARBITER_DB"
        if path is None and url.get_backend_name() != "sqlite":
            check_driver(url, where, setting)  # before create_engine: its NoSuchModuleError/ImportError name neither
        if path is not None:
            check_usable_path(path, setting)  # a folder, a name too long: before any check that would misname it
            planted = links.planted_link(path)  # before anything follows it (issue 40 item 4); never overridden
            if planted is not None:
                raise UntrustedRegistry(f"{planted}.")  # it starts with the link's name
            if readonly:
                try:
                    os.stat(path)
                except FileNotFoundError:
                    raise RegistryError(f"{path}: does not exist. {fix}") from None
                except PermissionError:
                    raise RegistryError(f"{path}: cannot be reached: a folder above it is not open to you "
                                        f"({ownership(os.path.dirname(path))}). {fix}") from None
            why = None if readonly else unwritable_reason(path)
            if why is not None:
                kind = (ReadOnlyFilesystemRegistry if read_only_filesystem(os.path.dirname(path) or ".")
                        else UnwritableRegistry)
                raise kind(f"{path}: cannot be written: {why}.", readable=os.access(path, os.R_OK))
            refused = trust.refusal(path)
            if refused is not None and not trust.named_trusted(path):
                raise UntrustedRegistry(f"{path}: {refused}. {trust.refusal_fix(path)}")
            if not open_here(path):  # checked when first opened here; re-reading it would drop SQLite's locks
                check_sqlite_file(path, fix)
                if not readonly:  # read-only, before the WAL switch writes to another program's file
                    refuse_foreign(path)
        super().__init__(url, where=where, path=path, readonly=readonly, fix=fix)
        self.persistent = not readonly
        self._solutions: dict[tuple[str, str], SolutionRecord] = {}
        self._verdicts: dict[VerdictKey, Verdict] = {}
        self._loaded: set[tuple[str, str]] = set()  # ("solutions"|"verdicts", env) already bulk-loaded
        self._warned_rows: set[tuple[str, str, str]] = set()  # (table, key, env) of unreadable rows warned about
        absent = [] if path is None else [f for f in (path + "-wal", path + "-shm") if not os.path.lexists(f)]
        try:
            self._open()
        except BaseException as exc:
            self.close()  # a store that never opened must not count as holding the file (``open_here``)
            if isinstance(exc, DiskFullRegistry):
                drop_new_companions(absent)
            raise

    def __repr__(self):
        return f"<SqlStore {self.where}{' (read-only)' if self.readonly else ''}>"

    # --- schema -------------------------------------------------------------
    def _open(self) -> None:
        try:
            found = self.transact(migrate.read_version, write=False)
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
        self.transact(lambda conn: migrate.upgrade(conn, self.where), write=True)

    def forget_cached(self) -> None:
        """Drop what this store keeps in memory (after rows were written behind its back, e.g. an import):
        lookups refill it from the database."""
        with self.lock:
            self._loaded.clear()
            self._solutions.clear()
            self._verdicts.clear()

    def version(self) -> int | None:
        return self.transact(migrate.read_version, write=False)

    # --- parents ------------------------------------------------------------
    # Parents this store has seen committed are not looked up again (half the statements of a counter
    # flush). Parent rows are never deleted, so the set stays true; a foreign-key failure clears it anyway.
    def put_env(self, conn, fingerprint: str, target: str, fields: dict) -> None:
        if ("env", fingerprint, True) in self.known or ("env", fingerprint, bool(fields)) in self.known:
            return
        self.learn(("env", fingerprint, bool(fields)))
        row = conn.execute(select(decode.raw(Environment.fields)).where(Environment.fingerprint == fingerprint)).first()
        if row is None:
            conn.execute(insert(Environment).values(fingerprint=fingerprint, target=target, fields=fields))
        elif fields and not _decodes_to_fields(row.fields):  # (unreadable fields are unknown ones: written now)
            conn.execute(update(Environment).where(Environment.fingerprint == fingerprint)
                         .values(fields=fields, target=target))

    def put_key(self, conn, key: str) -> None:
        if ("key", key) in self.known:
            return
        self.learn(("key", key))
        if conn.execute(select(ProblemKeyRow.id).where(ProblemKeyRow.id == key)).first() is not None:
            return
        parsed = _parsed(key)
        values = {} if parsed is None else parsed.fields
        conn.execute(insert(ProblemKeyRow).values(id=key, **values))

    def put_candidate(self, conn, identity: str, name: str, target: str, op: str, tier: str,
                       contract: str | None = None) -> None:
        if ("candidate", identity) in self.known:
            return
        self.learn(("candidate", identity))
        if conn.execute(select(CandidateRow.identity).where(CandidateRow.identity == identity)).first() is None:
            conn.execute(insert(CandidateRow).values(identity=identity, name=name, target=target, op=op, tier=tier,
                                                     contract=contract))

    @staticmethod
    def env_of(fingerprint: str, target: str, environment=None) -> tuple[str, dict]:
        """(target, fields) for an environment row: the given key, else the current one if it matches."""
        if environment is None or environment.fingerprint != fingerprint:
            environment, _ = envmod.current_environment(target)
        if environment is not None and environment.fingerprint == fingerprint:
            return environment.target, environment.as_dict()
        return target, {}  # only the fingerprint is known; a later writer may fill the fields in

    @staticmethod
    def _candidate_of(name: str, key: str) -> tuple[str, str, str]:
        """(target, op, tier name) for a candidate named in a record at ``key``."""
        parsed = _parsed(key)
        if parsed is None:
            return "", "", ""
        return parsed.target, parsed.op, tier_of(name, parsed.target, parsed.op)

    # --- verdicts -----------------------------------------------------------
    @staticmethod
    def _verdict(row):
        """The Verdict of a row of ``VERDICT_COLUMNS``; ``decode.BadRow`` when a column does not decode."""
        num = decode.number
        return Verdict(decode.flag(row.passed, "passed"), row.reason or "", _nan(num(row.rel_error, "rel_error")),
                       _nan(num(row.max_excess, "max_excess")), tuple(decode.json_value(row.probes, "probes", list)),
                       Budget(decode.required(row.budget_rel_fro, "budget_rel_fro"),
                              decode.required(row.budget_atol, "budget_atol"),
                              decode.required(row.budget_rtol, "budget_rtol")),
                       decode.flag(row.looser_budget, "looser_budget"), num(row.seconds, "seconds") or 0.0)

    VERDICT_COLUMNS = (VerdictRow.identity, VerdictRow.params, VerdictRow.key, VerdictRow.env,
                       decode.raw(VerdictRow.passed), VerdictRow.reason, decode.raw(VerdictRow.rel_error),
                       decode.raw(VerdictRow.max_excess), decode.raw(VerdictRow.probes),
                       decode.raw(VerdictRow.budget_rel_fro), decode.raw(VerdictRow.budget_atol),
                       decode.raw(VerdictRow.budget_rtol), decode.raw(VerdictRow.looser_budget),
                       decode.raw(VerdictRow.seconds))

    def _verdict_rows(self, *where):
        found = self.transact(lambda conn: conn.execute(select(*self.VERDICT_COLUMNS).where(*where)).all(),
                              write=False)
        out = {}
        for r in found:
            try:
                out[VerdictKey(r.identity, r.params, r.key, r.env)] = self._verdict(r)
            except decode.BadRow as exc:  # as if never computed: the gate runs again and its verdict replaces it
                self.unreadable("verdicts", r.key, r.env, exc, "its solution is gated again before it serves")
        return out

    def unreadable(self, table: str, key: str, env: str, exc: Exception, consequence: str) -> None:
        """Warn once that a row of ``table`` at (``key``, ``env``) cannot be decoded and is taken as absent."""
        if (table, key, env) in self._warned_rows:
            return
        self._warned_rows.add((table, key, env))
        fix = (f"`arbiter --db {self.where} doctor` lists such rows, `doctor --repair` drops them (the other rows "
               f"are kept)" if not self.readonly else
               "publish the system registry again (`arbiter export --env FINGERPRINT --out FILE`), or point "
               "ARBITER_SYSTEM_DB elsewhere")
        warnings.warn(f"kernel-arbiter: {self.where}: the {table} row of key {key} (environment {env}) cannot be "
                      f"read ({exc}); it is treated as absent: {consequence}. Fix: {fix}.", RuntimeWarning,
                      stacklevel=4)

    def load_verdict(self, vkey):
        """The verdict this installation's gate computed; None also for an imported one (``origin``), and for a
        passed one this user's gate did not vouch for (``arbiter.store.trust``), so the gate runs again on first
        use and its verdict replaces the row (``save_verdict``). Trust follows where a verdict came from, not the
        file's mode now: a file copied from another user's, or made private with ``chmod go-w`` after others
        could write it, holds rows this user's gate never computed (issue 40 item 1)."""
        verdict = self._stored_verdict(vkey)
        if verdict is not None and verdict.passed and not trust.LEDGER.vouches(vkey, verdict):
            return None
        return verdict

    def _stored_verdict(self, vkey):
        own = VerdictRow.origin == ""
        if ("verdicts", vkey.env) not in self._loaded:
            found = self._verdict_rows(VerdictRow.env == vkey.env, own)
            with self.lock:
                self._verdicts.update(found)
                self._loaded.add(("verdicts", vkey.env))
        verdict = self._verdicts.get(vkey)
        if verdict is None:  # committed by another process since the bulk load?
            verdict = self._verdict_rows(VerdictRow.identity == vkey.identity, VerdictRow.params == vkey.params_id,
                                         VerdictRow.key == vkey.key, VerdictRow.env == vkey.env, own).get(vkey)
            if verdict is not None:
                self._verdicts[vkey] = verdict
        return verdict

    def save_verdict(self, vkey, verdict, candidate):
        target, fields = self.env_of(vkey.env, candidate.target)
        values = dict(passed=verdict.passed, reason=verdict.reason, rel_error=_num(verdict.rel_error),
                      max_excess=_num(verdict.max_excess), probes=list(verdict.probes),
                      budget_rel_fro=verdict.budget.rel_fro, budget_atol=verdict.budget.atol,
                      budget_rtol=verdict.budget.rtol, looser_budget=bool(verdict.looser_budget),
                      seconds=float(verdict.seconds), origin="")
        match = (VerdictRow.identity == vkey.identity, VerdictRow.params == vkey.params_id,
                 VerdictRow.key == vkey.key, VerdictRow.env == vkey.env)

        def write(conn):
            self.put_env(conn, vkey.env, target, fields)
            self.put_key(conn, vkey.key)
            self.put_candidate(conn, vkey.identity, candidate.name, candidate.target, candidate.op,
                                candidate.tier.name, _contract_json(candidate))
            if conn.execute(update(VerdictRow).where(*match).values(**values)).rowcount == 0:
                conn.execute(insert(VerdictRow).values(identity=vkey.identity, params=vkey.params_id, key=vkey.key,
                                                       env=vkey.env, **values))

        def cache():
            with self.lock:
                self._verdicts[vkey] = verdict

        if verdict.passed:  # vouched first: a row committed but not vouched is only gated again, never trusted
            trust.LEDGER.vouch(vkey, verdict)
        self.write(write, cache)

    # --- solutions ----------------------------------------------------------
    @staticmethod
    def _record(row) -> SolutionRecord:
        """The record of a row of ``SOLUTION_COLUMNS``; ``decode.BadRow`` when a column does not decode."""
        # unpacked, not row.name: a start-up load builds one per stored solution of the environment (10,000s)
        key, candidate, identity, params, policy, env, margin, note, created = row
        return SolutionRecord(key, candidate, identity, dict(decode.json_value(params, "params")),
                              decode.member(ChosenBy, policy, "policy"), env, decode.number(margin, "margin"),
                              note or "", decode.when(created, "created") or _utc(None))

    SOLUTION_COLUMNS = (SolutionRow.key, SolutionRow.candidate, SolutionRow.identity, decode.raw(SolutionRow.params),
                        SolutionRow.policy, SolutionRow.env, decode.raw(SolutionRow.margin), SolutionRow.note,
                        decode.raw(SolutionRow.created))

    def _solution_rows(self, *where) -> list[SolutionRecord]:
        found = self.transact(lambda conn: conn.execute(select(*self.SOLUTION_COLUMNS).where(*where)).all(),
                              write=False)
        out = []
        for r in found:
            try:
                out.append(self._record(r))
            except decode.BadRow as exc:  # one bad row must not break the whole environment's load (every dispatch)
                self.unreadable("solutions", r[0], r[5], exc, "the key is decided again by the miss policy, and "
                                "the decision replaces the row")
        return out

    def _load_env_solutions(self, env: str) -> None:
        if ("solutions", env) not in self._loaded:
            found = self._solution_rows(SolutionRow.env == env)
            with self.lock:
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
        target, fields = self.env_of(record.env, _key_target(record.key), environment)
        ctarget, op, tier = self._candidate_of(record.candidate_name, record.key)
        values = dict(candidate=record.candidate_name, identity=record.identity, params=dict(record.params),
                      policy=record.chosen_by, margin=_num(record.margin), note=record.note,
                      created=record.created)

        def write(conn):
            self.put_env(conn, record.env, target, fields)
            self.put_key(conn, record.key)
            self.put_candidate(conn, record.identity, record.candidate_name, ctarget, op, tier)
            stmt = update(SolutionRow).where(SolutionRow.key == record.key, SolutionRow.env == record.env)
            if conn.execute(stmt.values(**values)).rowcount == 0:
                conn.execute(insert(SolutionRow).values(key=record.key, env=record.env, **values))

        def cache():
            with self.lock:
                self._solutions[(record.key, record.env)] = record

        self.write(write, cache)

    def add_solution(self, record, environment=None):
        target, fields = self.env_of(record.env, _key_target(record.key), environment)
        ctarget, op, tier = self._candidate_of(record.candidate_name, record.key)
        values = dict(candidate=record.candidate_name, identity=record.identity, params=dict(record.params),
                      policy=record.chosen_by, margin=_num(record.margin), note=record.note,
                      created=record.created)

        def write(conn):
            found = conn.execute(select(SolutionRow.id, *self.SOLUTION_COLUMNS).where(
                SolutionRow.key == record.key, SolutionRow.env == record.env)).first()
            if found is not None and self._readable(found[1:]):
                return False
            self.put_env(conn, record.env, target, fields)
            self.put_key(conn, record.key)
            self.put_candidate(conn, record.identity, record.candidate_name, ctarget, op, tier)
            if found is not None:  # a row no reader can decode is no winner: the decision replaces it
                conn.execute(update(SolutionRow).where(SolutionRow.id == found[0]).values(**values))
                return True
            conn.execute(insert(SolutionRow).values(key=record.key, env=record.env, **values))  # a racing
            return True  # insert fails on uq_solution; the retry then finds that row and stores nothing

        stored = self.transact(write, write=True)
        with self.lock:
            if stored:
                self._solutions[(record.key, record.env)] = record
            else:  # another process's winner: the next lookup reads it from the database
                self._solutions.pop((record.key, record.env), None)
        return stored

    def _readable(self, row) -> bool:
        try:
            self._record(row)
        except decode.BadRow:
            return False
        return True

    def solutions(self, env=None):
        if env is None:
            return self._solution_rows()
        self._load_env_solutions(env)
        return [r for (k, e), r in list(self._solutions.items()) if e == env]

    # --- measurements -------------------------------------------------------
    def save_measurements(self, key, env, measurements):
        target, fields = self.env_of(env, _key_target(key))

        rows = [dict(key=key, env=env, candidate=m.candidate_name, params=params_id(m.params), mode=m.mode,
                     reps=int(m.reps), median_s=_num(m.median_s), p20_s=_num(m.p20_s), p80_s=_num(m.p80_s),
                     spread=_num(m.spread), warmup_s=_num(m.warmup_s), screened=bool(m.screened),
                     dims=None if m.dims is None else json.dumps(m.dims))
                for m in measurements]

        def write(conn):
            self.put_env(conn, env, target, fields)
            self.put_key(conn, key)
            conn.execute(delete(MeasurementRow).where(MeasurementRow.key == key, MeasurementRow.env == env))
            if rows:
                conn.execute(insert(MeasurementRow), rows)

        self.write(write)

    def load_measurements(self, key, env):
        found = self.transact(lambda conn: conn.execute(
            select(*self.MEASUREMENT_COLUMNS).where(MeasurementRow.key == key, MeasurementRow.env == env)
            .order_by(MeasurementRow.id)).all(), write=False)
        out = []
        for r in found:
            try:
                out.append(self._measurement(r))
            except decode.BadRow as exc:  # that solution's timing is missing: the others still decide and explain
                self.unreadable("measurements", key, env, exc, "that solution counts as not timed here")
        return out

    MEASUREMENT_COLUMNS = (MeasurementRow.candidate, MeasurementRow.params, MeasurementRow.mode,
                           decode.raw(MeasurementRow.median_s), decode.raw(MeasurementRow.p20_s),
                           decode.raw(MeasurementRow.p80_s), decode.raw(MeasurementRow.spread),
                           decode.raw(MeasurementRow.reps), decode.raw(MeasurementRow.warmup_s),
                           decode.raw(MeasurementRow.screened), MeasurementRow.dims)

    @staticmethod
    def _measurement(r) -> MeasurementRecord:
        """The record of a row of ``MEASUREMENT_COLUMNS``; ``decode.BadRow`` when a column does not decode."""
        params = decode.json_text(r.params, "params")
        if not isinstance(params, dict):
            raise decode.BadRow(f"params is not a JSON object: {decode.shown(r.params)}")
        dims = decode.json_text(r.dims, "dims")
        if dims is not None and not isinstance(dims, dict):
            raise decode.BadRow(f"dims is not a JSON object: {decode.shown(r.dims)}")
        return MeasurementRecord(r.candidate, params, decode.member(TimingMode, r.mode, "mode"),
                                 _nan(decode.number(r.median_s, "median_s")), _nan(decode.number(r.p20_s, "p20_s")),
                                 _nan(decode.number(r.p80_s, "p80_s")), _nan(decode.number(r.spread, "spread")),
                                 decode.whole(r.reps, "reps"), _nan(decode.number(r.warmup_s, "warmup_s")),
                                 decode.flag(r.screened, "screened"), dims)

    # --- counters and recorded keys -----------------------------------------
    def add_counts(self, deltas):
        # One global order for the rows a flush locks (environments, then keys, then counter rows, each sorted):
        # two processes flushing the same rows in their own orders deadlock on a server database (issue 20
        # item 1: 8 PostgreSQL writers hit hundreds of deadlocks and ran out of retries).
        merged: dict[tuple, CountDelta] = {}
        for d in deltas:
            if d.total():
                slot = merged.setdefault((d.env, d.key, d.candidate_name, d.params_id),
                                         CountDelta(d.key, d.candidate_name, d.params_id, d.env))
                slot.hits += d.hits
                slot.misses += d.misses
                slot.fallbacks += d.fallbacks
                slot.loads += d.loads
        if not merged:
            return
        deltas = [merged[k] for k in sorted(merged)]
        envs = {d.env: self.env_of(d.env, _key_target(d.key)) for d in deltas}

        def write(conn):
            for fingerprint, (target, fields) in sorted(envs.items()):
                self.put_env(conn, fingerprint, target, fields)
            for key in sorted({d.key for d in deltas}):
                self.put_key(conn, key)
            for d in deltas:
                stmt = (update(CounterRow)
                        .where(CounterRow.key == d.key, CounterRow.candidate == d.candidate_name,
                               CounterRow.params == d.params_id, CounterRow.env == d.env)
                        .values(hits=CounterRow.hits + d.hits, misses=CounterRow.misses + d.misses,
                                fallbacks=CounterRow.fallbacks + d.fallbacks, loads=CounterRow.loads + d.loads))
                if conn.execute(stmt).rowcount == 0:
                    conn.execute(insert(CounterRow).values(key=d.key, candidate=d.candidate_name, params=d.params_id,
                                                           env=d.env, hits=d.hits, misses=d.misses,
                                                           fallbacks=d.fallbacks, loads=d.loads))

        self.transact(write, write=True)

    COUNTER_COLUMNS = (CounterRow.key, CounterRow.candidate, CounterRow.params, CounterRow.env,
                       decode.raw(CounterRow.hits), decode.raw(CounterRow.misses), decode.raw(CounterRow.fallbacks),
                       decode.raw(CounterRow.loads))

    @staticmethod
    def _count(r) -> CountDelta:
        return CountDelta(r[0], r[1], r[2], r[3], *(decode.whole(v, name) for v, name in
                                                    zip(r[4:], ("hits", "misses", "fallbacks", "loads"))))

    def counts(self):
        found = self.transact(lambda conn: conn.execute(select(*self.COUNTER_COLUMNS)).all(), write=False)
        out = []
        for r in found:
            try:
                out.append(self._count(r))
            except decode.BadRow as exc:
                self.unreadable("counters", r[0], r[3], exc, "its counts are left out")
        return out

    def record_key(self, key, dims, env):
        target, fields = self.env_of(env, _key_target(key))

        def write(conn):
            self.put_env(conn, env, target, fields)
            self.put_key(conn, key)
            found = select(RecordedKey.id).where(RecordedKey.key == key, RecordedKey.env == env)
            if conn.execute(found).first() is None:
                conn.execute(insert(RecordedKey).values(key=key, env=env, dims=dict(dims)))

        self.transact(write, write=True)

    def recorded_keys(self):
        rows = self.transact(lambda conn: conn.execute(
            select(RecordedKey.key, decode.raw(RecordedKey.dims), RecordedKey.env).order_by(RecordedKey.id)).all(),
            write=False)
        seen: dict[str, dict] = {}
        for key, dims, env in rows:
            try:
                seen.setdefault(key, dict(decode.json_value(dims, "dims")))
            except decode.BadRow as exc:
                self.unreadable("recorded_keys", key, env, exc, "the recording is left out")
        return list(seen.items())

    # --- maintenance (stats, prune, doctor, export) ---------------------------
    def environments(self) -> list[dict]:
        """Every stored environment: fingerprint, target, fields, and how many rows of each kind use it."""
        def read(conn):
            envs = conn.execute(select(Environment.fingerprint, Environment.target,
                                       decode.raw(Environment.fields))).all()
            counts: dict[str, dict[str, int]] = {}
            for name, model in (("solutions", SolutionRow), ("verdicts", VerdictRow),
                                ("measurements", MeasurementRow), ("counters", CounterRow),
                                ("recorded", RecordedKey)):
                for fp, n in conn.execute(select(model.env, func.count()).group_by(model.env)).all():
                    counts.setdefault(fp, {})[name] = n
            return [{"fingerprint": fp, "target": target, "fields": self._env_fields(fp, fields),
                     "rows": counts.get(fp, {})} for fp, target, fields in envs]

        return self.transact(read, write=False)

    def _env_fields(self, fingerprint: str, fields) -> dict:
        """An environment row's fields; an unreadable one is taken as unknown ({}), as a row with only its
        fingerprint (a later writer of that environment fills them in)."""
        try:
            return dict(decode.json_value(fields, "fields"))
        except decode.BadRow as exc:
            self.unreadable("environments", "-", fingerprint, exc, "its fields are taken as unknown")
            return {}

    def contracts(self) -> dict[str, dict]:
        """Code identity -> the delegate contract stored with it (only candidates that declared one)."""
        rows = self.transact(lambda conn: conn.execute(select(CandidateRow.identity, CandidateRow.contract)
                                                   .where(CandidateRow.contract.is_not(None))).all(), write=False)
        out = {}
        for identity, text in rows:
            try:
                contract = decode.json_text(text, "contract")
                if not isinstance(contract, dict):
                    raise decode.BadRow(f"contract is not a JSON object: {decode.shown(text)}")
                out[identity] = contract
            except decode.BadRow as exc:
                self.unreadable("candidates", identity, "-", exc, "its contract is not shown")
        return out

    def candidate_tiers(self) -> dict[str, str]:
        """Code identity -> tier name, as recorded when the candidate was first stored."""
        rows = self.transact(lambda conn: conn.execute(select(CandidateRow.identity, CandidateRow.tier)).all(),
                         write=False)
        return dict(rows)

    def verdicts(self, env: str | None = None, *, imported: bool | None = None
                 ) -> list[tuple[VerdictKey, str, Any]]:  # Any: verify.Verdict
        """Every stored verdict (only ``env``'s when given) as (VerdictKey, candidate name, Verdict); read-only.
        ``imported``: True for only those that came from a file (``arbiter import``; never served, the gate runs
        again), False for only this installation's own, None for both."""
        names = dict(self.transact(lambda conn: conn.execute(select(CandidateRow.identity, CandidateRow.name)).all(),
                               write=False))
        where: tuple = () if env is None else (VerdictRow.env == env,)
        if imported is not None:
            where += ((VerdictRow.origin != "") if imported else (VerdictRow.origin == ""),)
        found = self._verdict_rows(*where)
        return [(vkey, names.get(vkey.identity, vkey.identity), verdict) for vkey, verdict in found.items()]

    def prune(self, fingerprints: list[str]) -> dict[str, int]:
        """Delete every solution, verdict, measurement, counter, recorded key and fleet claim of these environments.

        Environment rows stay (tiny, and they name what changed). Returns rows removed per table.
        """
        if not fingerprints:
            return {}

        def write(conn):
            removed = {}
            for name, model in (("solutions", SolutionRow), ("verdicts", VerdictRow),
                                ("measurements", MeasurementRow), ("counters", CounterRow),
                                ("recorded", RecordedKey), ("claims", ClaimRow)):
                removed[name] = conn.execute(delete(model).where(model.env.in_(fingerprints))).rowcount
            return removed

        removed = self.transact(write, write=True)
        with self.lock:
            gone = set(fingerprints)
            self._solutions = {k: v for k, v in self._solutions.items() if k[1] not in gone}
            self._verdicts = {k: v for k, v in self._verdicts.items() if k.env not in gone}
        return removed

    def unreadable_rows(self) -> list[decode.Unreadable]:
        """Every stored row that does not decode (``arbiter doctor``): the rows the readers above take as absent
        (``arbiter.store.rows``)."""
        def read(conn):
            found: list[decode.Unreadable] = []

            def check(table, stmt, decoder, ident, key, env):
                for r in conn.execute(stmt).all():
                    try:
                        decoder(r)
                    except decode.BadRow as exc:
                        found.append(decode.Unreadable(table, ident(r), key(r) or "", env(r) or "", str(exc),
                                                       decode.shown(tuple(r), 300)))

            check("solutions", select(SolutionRow.id, *self.SOLUTION_COLUMNS), lambda r: self._record(r[1:]),
                  lambda r: r[0], lambda r: r[1], lambda r: r[6])
            check("verdicts", select(VerdictRow.id, *self.VERDICT_COLUMNS), self._verdict,
                  lambda r: r.id, lambda r: r.key, lambda r: r.env)
            check("measurements", select(MeasurementRow.id, MeasurementRow.key, MeasurementRow.env,
                                         *self.MEASUREMENT_COLUMNS), self._measurement,
                  lambda r: r.id, lambda r: r.key, lambda r: r.env)
            check("counters", select(CounterRow.id, *self.COUNTER_COLUMNS), lambda r: self._count(r[1:]),
                  lambda r: r[0], lambda r: r[1], lambda r: r[4])
            check("recorded_keys", select(RecordedKey.id, RecordedKey.key, RecordedKey.env,
                                          decode.raw(RecordedKey.dims)),
                  lambda r: decode.json_value(r[3], "dims"), lambda r: r[0], lambda r: r[1], lambda r: r[2])
            check("claims", select(ClaimRow.id, ClaimRow.key, ClaimRow.env, decode.raw(ClaimRow.expires),
                                   decode.raw(ClaimRow.attempts), decode.raw(ClaimRow.updated)),
                  lambda r: (decode.number(r[3], "expires", nullable=False), decode.whole(r[4], "attempts"),
                             decode.when(r[5], "updated")),
                  lambda r: r[0], lambda r: r[1], lambda r: r[2])
            check("environments", select(Environment.fingerprint, decode.raw(Environment.fields)),
                  lambda r: decode.json_value(r[1], "fields"), lambda r: r[0], lambda r: "", lambda r: r[0])

            def contract(r):
                if r[1] is not None and not isinstance(decode.json_text(r[1], "contract"), dict):
                    raise decode.BadRow(f"contract is not a JSON object: {decode.shown(r[1])}")

            check("candidates", select(CandidateRow.identity, CandidateRow.contract), contract,
                  lambda r: r[0], lambda r: "", lambda r: "")
            return found

        return self.transact(read, write=False)

    def drop_unreadable(self, found: list[decode.Unreadable]) -> dict[str, int]:
        """``doctor --repair``: delete the rows ``unreadable_rows`` found (an environment's unreadable fields are
        emptied and a candidate's contract cleared instead: other rows refer to them). Returns rows per table."""
        by_id: dict[str, Any] = {"solutions": SolutionRow, "verdicts": VerdictRow, "measurements": MeasurementRow,
                 "counters": CounterRow, "recorded_keys": RecordedKey, "claims": ClaimRow}

        def write(conn):
            done: dict[str, int] = {}
            for bad in found:
                if bad.table in by_id:
                    model = by_id[bad.table]
                    n = conn.execute(delete(model).where(model.id == bad.ident)).rowcount
                elif bad.table == "environments":
                    n = conn.execute(update(Environment).where(Environment.fingerprint == bad.ident)
                                     .values(fields={})).rowcount
                else:
                    n = conn.execute(update(CandidateRow).where(CandidateRow.identity == bad.ident)
                                     .values(contract=None)).rowcount
                done[bad.table] = done.get(bad.table, 0) + n
            return done

        done = self.transact(write, write=True)
        self.forget_cached()
        self.known = set()  # (an environment's fields emptied: its next writer fills them in again)
        return done

    def table_counts(self) -> dict[str, int]:
        models = (Environment, ProblemKeyRow, CandidateRow, VerdictRow, MeasurementRow, SolutionRow, CounterRow,
                  RecordedKey)
        return self.transact(lambda conn: {m.__tablename__: conn.execute(select(func.count()).select_from(m)).scalar()
                                       for m in models}, write=False)

    def integrity_check(self) -> list[str]:
        """Problems found; [] when sound. See ``checks()`` for what is checked on this dialect."""
        def read(conn):
            problems = schema_problems(conn)
            if conn.dialect.name == "sqlite":
                rows = [r[0] for r in conn.exec_driver_sql("PRAGMA integrity_check").all()]
                fk = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
                problems += ([] if rows == ["ok"] else rows) + [f"dangling reference in {r[0]} row {r[1]} to {r[2]}"
                                                                for r in fk]
            return problems

        return self.transact(read, write=False)

    def checks(self) -> str:
        """What ``integrity_check`` covers here, in words (``arbiter doctor`` prints it)."""
        schema = "every table, column and unique constraint of the models present"
        if self.path is not None:
            return f"{schema}; SQLite integrity_check and foreign_key_check ok"
        return (f"{schema}; foreign keys are enforced by the server; its storage is checked by the server's own "
                f"tools (e.g. pg_amcheck), not by kernel-arbiter")
