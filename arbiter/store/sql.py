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
from datetime import timezone
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import make_url

from arbiter import env as envmod
from arbiter.errors import RegistryError
from arbiter.keys import ProblemKey, params_id
from arbiter.oracles.budgets import Budget
from arbiter.store import migrate, trust
from arbiter.store.base import CountDelta, MeasurementRecord, SolutionRecord, Store, Verdict, VerdictKey, tier_of
from arbiter.store.diagnostics import (
    SYSTEM_FIX,
    UntrustedRegistry,
    UnwritableRegistry,
    check_sqlite_file,
    ownership,
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
        refused = None  # why another user could write this file (opened anyway only when named)
        if path is not None:
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
                raise UnwritableRegistry(f"{path}: cannot be written: {why}.", readable=os.access(path, os.R_OK))
            refused = trust.refusal(path)
            if refused is not None and not trust.named_trusted(path):
                raise UntrustedRegistry(f"{path}: {refused}. {trust.refusal_fix(path)}")
            if not open_here(path):  # checked when first opened here; re-reading it would drop SQLite's locks
                check_sqlite_file(path, fix)
        super().__init__(url, where=where, path=path, readonly=readonly, fix=fix)
        self.persistent = not readonly
        # Whether a stored verdict is taken as it is: only where no one but this user or root can have written it
        # (a file that passed trust.refusal); elsewhere a passed verdict must be in this user's ledger.
        # A server database is written by anyone with its credentials.
        self.trusts_verdicts = refused is None and (path is not None or make_url(url).get_backend_name() == "sqlite")
        self._solutions: dict[tuple[str, str], SolutionRecord] = {}
        self._verdicts: dict[VerdictKey, Verdict] = {}
        self._loaded: set[tuple[str, str]] = set()  # ("solutions"|"verdicts", env) already bulk-loaded
        self._open()

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
        row = conn.execute(select(Environment.fields).where(Environment.fingerprint == fingerprint)).first()
        if row is None:
            conn.execute(insert(Environment).values(fingerprint=fingerprint, target=target, fields=fields))
        elif fields and not row.fields:
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
        return Verdict(bool(row.passed), row.reason or "", _nan(row.rel_error), _nan(row.max_excess),
                       tuple(row.probes or ()), Budget(row.budget_rel_fro, row.budget_atol, row.budget_rtol),
                       bool(row.looser_budget), row.seconds or 0.0)

    def _verdict_rows(self, *where):
        cols = (VerdictRow.identity, VerdictRow.params, VerdictRow.key, VerdictRow.env, VerdictRow.passed,
                VerdictRow.reason, VerdictRow.rel_error, VerdictRow.max_excess, VerdictRow.probes,
                VerdictRow.budget_rel_fro, VerdictRow.budget_atol, VerdictRow.budget_rtol,
                VerdictRow.looser_budget, VerdictRow.seconds)
        rows = self.transact(lambda conn: conn.execute(select(*cols).where(*where)).all(), write=False)
        return {VerdictKey(r.identity, r.params, r.key, r.env): self._verdict(r) for r in rows}

    def load_verdict(self, vkey):
        """The verdict this installation's gate computed; None also for an imported one (``origin``), and for a
        passed one this user's gate did not vouch for where others may write the registry (``trusts_verdicts``,
        ``arbiter.store.trust``), so the gate runs again on first use and its verdict replaces the row
        (``save_verdict``)."""
        verdict = self._stored_verdict(vkey)
        if verdict is not None and verdict.passed and not self.trusts_verdicts \
                and not trust.LEDGER.vouches(vkey, verdict):
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
        # unpacked, not row.name: a start-up load builds one per stored solution of the environment (10,000s)
        key, candidate, identity, params, policy, env, margin, note, created = row
        return SolutionRecord(key, candidate, identity, dict(params or {}), policy, env, margin, note or "",
                              _utc(created))

    def _solution_rows(self, *where) -> list[SolutionRecord]:
        cols = (SolutionRow.key, SolutionRow.candidate, SolutionRow.identity, SolutionRow.params,
                SolutionRow.policy, SolutionRow.env, SolutionRow.margin, SolutionRow.note, SolutionRow.created)
        rows = self.transact(lambda conn: conn.execute(select(*cols).where(*where)).all(), write=False)
        return [self._record(r) for r in rows]

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
            found = select(SolutionRow.id).where(SolutionRow.key == record.key, SolutionRow.env == record.env)
            if conn.execute(found).first() is not None:
                return False
            self.put_env(conn, record.env, target, fields)
            self.put_key(conn, record.key)
            self.put_candidate(conn, record.identity, record.candidate_name, ctarget, op, tier)
            conn.execute(insert(SolutionRow).values(key=record.key, env=record.env, **values))  # a racing
            return True  # insert fails on uq_solution; the retry then finds that row and stores nothing

        stored = self.transact(write, write=True)
        with self.lock:
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
        cols = (MeasurementRow.candidate, MeasurementRow.params, MeasurementRow.mode, MeasurementRow.median_s,
                MeasurementRow.p20_s, MeasurementRow.p80_s, MeasurementRow.spread, MeasurementRow.reps,
                MeasurementRow.warmup_s, MeasurementRow.screened, MeasurementRow.dims)
        rows = self.transact(lambda conn: conn.execute(
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

    def counts(self):
        rows = self.transact(lambda conn: conn.execute(select(
            CounterRow.key, CounterRow.candidate, CounterRow.params, CounterRow.env, CounterRow.hits,
            CounterRow.misses, CounterRow.fallbacks, CounterRow.loads)).all(), write=False)
        return [CountDelta(*r) for r in rows]

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

        return self.transact(read, write=False)

    def contracts(self) -> dict[str, dict]:
        """Code identity -> the delegate contract stored with it (only candidates that declared one)."""
        rows = self.transact(lambda conn: conn.execute(select(CandidateRow.identity, CandidateRow.contract)
                                                   .where(CandidateRow.contract.is_not(None))).all(), write=False)
        return {identity: json.loads(text) for identity, text in rows}

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
