"""Claims with leases: many hosts tune into one registry, each key tuned once per environment (issue 18).

A ``claims`` row (schema v5, ``ClaimRow``) per (problem key, environment fingerprint) says who tunes that key
for that environment. A host *offers* the keys it could tune (its command line's keys, or the keys production
processes recorded under its environment), then *claims* them one row at a time:

* the claim is one write transaction: ``SELECT ... FOR UPDATE SKIP LOCKED`` picks an open row (or one whose
  lease ran out) that no other host is claiming at this instant, and a conditional ``UPDATE`` takes it; the
  UPDATE's row count decides. On PostgreSQL ``SKIP LOCKED`` lets concurrent hosts pass each other's rows
  instead of queueing on them. SQLite ignores ``FOR UPDATE``; there the same statements run inside
  ``BEGIN IMMEDIATE`` (the database's one write lock), so no two claims interleave at all;
* a ``Lease`` renews the claim from a heartbeat thread (every third of the lease) while the key is tuned;
* ``finish`` marks the claim done inside the key's own ``Store.transaction()``: the solution and the done state
  commit together, and only while this holder still holds the claim (a host that stalled past its lease and
  lost the key to another finds rowcount 0 and commits nothing);
* a host that dies stops renewing: after ``expires`` another host's claim takes the key over.

``expires`` is Unix seconds from the claiming host's clock: hosts must keep their clocks in step (NTP) to well
within a lease. A holder whose clock stepped ahead (an expiry further ahead than its own lease from the reader's
now) would otherwise strand the key for the size of the step once it dies (issue 40 item 8). Every claim and
renewal writes ``updated`` with ``expires`` (the holder's lease is their difference); a reader that finds a
claim written more than ``CLOCK_SLACK_S`` in its future caps its expiry at its own now plus that holder's lease
(``claim`` writes the cap into the row; ``held`` and ``pending`` read it so). A live holder renews past the cap;
a dead one's key is claimable one lease later. An expiry more than ``MAX_LEASE_S`` ahead is no lease at all: it
is treated as expired.
"""
from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from datetime import timezone

from sqlalchemy import and_, func, insert, or_, select, update

from arbiter.errors import RegistryError
from arbiter.keys import ProblemKey
from arbiter.store.layered import LayeredStore
from arbiter.store.models import ClaimRow, MeasurementRow, RecordedKey, utcnow
from arbiter.store.sql import SqlStore

LEASE_S = 60.0  # a claim not renewed for this long is taken over by another host
MAX_LEASE_S = 86400.0  # the longest lease a claim may have; an expiry further ahead is not believed
CLOCK_SLACK_S = 10.0  # how far ahead of a reader's clock a holder's may be before its claim's expiry is capped


class LostClaim(RegistryError):
    """This host's lease ran out and another host took the key over: its result is not committed."""


_token: tuple[int, str] | None = None  # (pid, random token) of this process


def holder_name() -> str:
    """``host:pid:token``: who holds a claim (shown by ``arbiter stats --pending``). ``host:pid`` alone is not
    unique: two containers (PID namespaces) both run a ``worker:1``, and a stalled holder's late result was
    committed over the live one's (issue 28 item 6). The token is random per process (new in a forked child)."""
    global _token
    pid = os.getpid()
    if _token is None or _token[0] != pid:
        _token = (pid, secrets.token_hex(6))
    return f"{socket.gethostname()[:100]}:{pid}:{_token[1]}"


def sql_store(store):
    """The ``SqlStore`` that holds claims: the store itself, or the user layer of a layered one."""
    if isinstance(store, LayeredStore):
        store = store.user
    if not isinstance(store, SqlStore) or store.readonly:
        what = "read-only" if isinstance(store, SqlStore) else "in memory"
        raise RegistryError(f"{store!r}: claims need a writable registry database (--db/ARBITER_DB), shared by "
                            f"every host that tunes; this one is {what}.")
    return store


def _insert_ignoring_duplicates(conn):
    """INSERT ... ON CONFLICT DO NOTHING on the claims table (a racing host may offer the same key)."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    elif conn.dialect.name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as dialect_insert  # type: ignore[assignment]  # same API
    else:  # another dialect: the unique constraint still holds; a lost race is retried by SqlStore.transact
        return insert(ClaimRow)
    return dialect_insert(ClaimRow).on_conflict_do_nothing(index_elements=["key", "env"])


def _tuned():
    """A recorded key is tuned under its environment once it has measurements there. A ``record``-policy miss
    stores a tier solution at once (it serves meanwhile), so a solution alone does not say tuned."""
    return select(MeasurementRow.id).where(MeasurementRow.key == RecordedKey.key,
                                           MeasurementRow.env == RecordedKey.env).exists()


def _reopen_untuned(conn, env: str, keys=None) -> int:
    """Open again the ``done`` claims of ``env`` (among ``keys``) whose key has no measurements there any more
    (pruned, deleted by hand): done and measured commit together, so this never reopens a key just tuned."""
    measured = select(MeasurementRow.id).where(MeasurementRow.key == ClaimRow.key,
                                               MeasurementRow.env == ClaimRow.env).exists()
    stmt = update(ClaimRow).where(ClaimRow.env == env, ClaimRow.state == "done", ~measured)
    if keys is not None:
        stmt = stmt.where(ClaimRow.key.in_(keys))
    return conn.execute(stmt.values(state="open", holder="", note="", updated=utcnow())).rowcount


MAX_ATTEMPTS = 3  # a key claimed this often whose holders all died or lost it is marked failed, not retried


def _stamp(value) -> float:
    """Unix seconds of a stored ``updated`` (SQLite gives it back naive, in UTC)."""
    if value is None:
        return 0.0
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


def effective_expiry(expires: float, updated, now: float) -> float:
    """When a claim's lease ends by the reader's clock (``now``): ``expires`` as stored, unless the holder's
    clock was ahead when it wrote the claim (``updated`` more than ``CLOCK_SLACK_S`` after ``now``): then
    ``now`` plus the holder's lease (``expires - updated``, both from its clock). An expiry past ``now +
    MAX_LEASE_S + CLOCK_SLACK_S`` is expired (0): no holder's lease is that long."""
    expires = float(expires or 0.0)
    if expires > now + MAX_LEASE_S + CLOCK_SLACK_S:
        return 0.0
    written = _stamp(updated)
    if written > now + CLOCK_SLACK_S:
        return min(expires, now + min(max(expires - written, 0.0), MAX_LEASE_S))
    return expires


def _cap_future_claims(conn, env: str, now: float) -> None:
    """Write into ``env``'s claimed rows the cap ``effective_expiry`` gives (a holder whose clock stepped ahead
    and died would hold the key for the size of the step): only rows whose expiry is further ahead than
    the lease's most or that were written in this reader's future are touched."""
    rows = conn.execute(select(ClaimRow.id, ClaimRow.expires, ClaimRow.updated).where(
        ClaimRow.env == env, ClaimRow.state == "claimed", ClaimRow.expires > now)).all()
    for row in rows:
        capped = effective_expiry(row.expires, row.updated, now)
        if capped < row.expires:
            conn.execute(update(ClaimRow).where(ClaimRow.id == row.id, ClaimRow.expires == row.expires)
                         .values(expires=capped, updated=utcnow()))


def _claimable(now: float):
    return and_(or_(ClaimRow.state == "open", and_(ClaimRow.state == "claimed", ClaimRow.expires < now)),
                ClaimRow.attempts < MAX_ATTEMPTS)


def _give_up(conn, env: str, now: float) -> None:
    """Mark failed the claims of ``env`` whose attempts ran out (a key that kills every host that tunes it,
    e.g. one too big for the host's memory): without a cap it reopened forever."""
    conn.execute(update(ClaimRow).where(ClaimRow.env == env, ClaimRow.attempts >= MAX_ATTEMPTS, or_(
        ClaimRow.state == "open", and_(ClaimRow.state == "claimed", ClaimRow.expires < now))).values(
        state="failed", holder="", updated=utcnow(),
        note=f"gave up after {MAX_ATTEMPTS} attempts: each holder died or lost the key before finishing it"))


class Claims:
    """Claims of one holder in one registry (``store``: a ``SqlStore``, or a layered store over one)."""

    def __init__(self, store, *, holder: str | None = None, lease_s: float = LEASE_S):
        if not 0 < lease_s <= MAX_LEASE_S:
            raise ValueError(f"lease_s (--lease-seconds) must be more than 0 and at most {MAX_LEASE_S:g} s, "
                             f"got {lease_s}")
        self.sql = sql_store(store)
        self.holder = holder or holder_name()
        self.lease_s = float(lease_s)

    # --- offering ---------------------------------------------------------------
    def offer(self, keys, env: str, environment=None, *, reopen: bool = False) -> None:
        """Make ``keys`` (problem key ids) claimable under ``env``. Keys already offered keep their state, unless
        ``reopen`` (``tune --force``): then a done or failed claim is open again."""
        # In the order given: claims are taken in offer order, so one host tunes a suite in the suite's order
        # (a synthesized candidate's identity can depend on the keys a process built before).
        keys = list(dict.fromkeys(keys))
        if not keys:
            return
        sql = self.sql
        target, fields = sql.env_of(env, ProblemKey.parse(keys[0]).target, environment)

        def write(conn):
            sql.put_env(conn, env, target, fields)
            for key in sorted(keys):  # parents in one global order, as every writer does
                sql.put_key(conn, key)
            conn.execute(_insert_ignoring_duplicates(conn), [dict(key=k, env=env, state="open", holder="",
                                                                   expires=0.0, attempts=0, note="",
                                                                   updated=utcnow()) for k in keys])
            _reopen_untuned(conn, env, keys)
            if reopen:
                conn.execute(update(ClaimRow).where(ClaimRow.env == env, ClaimRow.key.in_(keys),
                                                    ClaimRow.state.in_(("done", "failed")))
                             .values(state="open", holder="", note="", updated=utcnow()))

        sql.transact(write, write=True)

    def offer_recorded(self, env: str) -> int:
        """Offer every key recorded under ``env`` that has no claim yet and is not tuned there; returns how many."""
        def write(conn):
            fresh = (select(RecordedKey.key, RecordedKey.env)
                     .where(RecordedKey.env == env,
                            ~select(ClaimRow.id).where(ClaimRow.key == RecordedKey.key,
                                                       ClaimRow.env == RecordedKey.env).exists(),
                            ~_tuned()))
            rows = [dict(key=k, env=e, state="open", holder="", expires=0.0, attempts=0, note="",
                         updated=utcnow()) for k, e in conn.execute(fresh).all()]
            if rows:
                conn.execute(_insert_ignoring_duplicates(conn), rows)
            return len(rows) + _reopen_untuned(conn, env)

        return self.sql.transact(write, write=True)

    # --- claiming ---------------------------------------------------------------
    def claim(self, env: str, keys=None) -> str | None:
        """Take one claimable key of ``env`` (among ``keys`` when given) for ``lease_s``; None when none is left."""
        keys = None if keys is None else sorted(set(keys))

        def write(conn):
            _cap_future_claims(conn, env, time.time())
            _give_up(conn, env, time.time())
            while True:
                now = time.time()
                pick = select(ClaimRow.id, ClaimRow.key).where(ClaimRow.env == env, _claimable(now))
                if keys is not None:
                    pick = pick.where(ClaimRow.key.in_(keys))
                row = conn.execute(pick.order_by(ClaimRow.id).limit(1).with_for_update(skip_locked=True)).first()
                if row is None:
                    return None
                taken = conn.execute(update(ClaimRow).where(ClaimRow.id == row.id, _claimable(now)).values(
                    state="claimed", holder=self.holder, expires=now + self.lease_s,
                    attempts=ClaimRow.attempts + 1, updated=utcnow())).rowcount
                if taken == 1:  # 0: another host took it between the pick and the update (the pick was stale)
                    return row.key

        return self.sql.transact(write, write=True)

    def renew(self, key: str, env: str) -> bool:
        """Push this holder's lease on (key, env) on by ``lease_s``; False when it is no longer ours."""
        def write(conn):
            # ``updated`` with ``expires``: their difference is this holder's lease (``effective_expiry``)
            return conn.execute(update(ClaimRow).where(*self._mine(key, env))
                                .values(expires=time.time() + self.lease_s, updated=utcnow())).rowcount == 1

        return self.sql.transact(write, write=True)

    def _mine(self, key, env):
        return (ClaimRow.key == key, ClaimRow.env == env, ClaimRow.state == "claimed",
                ClaimRow.holder == self.holder)

    def finish(self, key: str, env: str, state: str = "done", note: str = "") -> None:
        """Mark this holder's claim ``done`` (or ``failed``) in the caller's ``transaction()`` when one is open,
        so the key's solution and its claim's state commit together. Raises LostClaim (and the transaction
        commits nothing) when the claim is no longer this holder's."""
        assert state in ("done", "failed")

        def write(conn):
            n = conn.execute(update(ClaimRow).where(*self._mine(key, env))
                             .values(state=state, note=note, updated=utcnow())).rowcount
            if n != 1:
                raise LostClaim(f"{self.sql.where}: the claim on {key} ({env}) is no longer held by {self.holder} "
                                f"(its {self.lease_s:g} s lease ran out and another host took it over); this "
                                f"host's result for it is not committed.")

        self.sql.write(write)

    def held(self, env: str, keys=None) -> list[tuple[str, str, float]]:
        """(key, holder, expires) of ``env``'s claims (among ``keys``) another holder holds under a lease that
        has not run out: keys a run must wait for (they end done, or their lease lapses and they are claimable)
        rather than report itself finished."""
        now = time.time()

        def read(conn):
            stmt = select(ClaimRow.key, ClaimRow.holder, ClaimRow.expires, ClaimRow.updated).where(
                ClaimRow.env == env, ClaimRow.state == "claimed", ClaimRow.expires >= now,
                ClaimRow.holder != self.holder)
            if keys is not None:
                stmt = stmt.where(ClaimRow.key.in_(sorted(set(keys))))
            return conn.execute(stmt.order_by(ClaimRow.key)).all()

        rows = [(key, holder, effective_expiry(expires, updated, now))
                for key, holder, expires, updated in self.sql.transact(read, write=False)]
        return [r for r in rows if r[2] >= now]

    def release(self, key: str, env: str) -> None:
        """Give a claim back unfinished (a host stopping mid-key): open at once, not after the lease."""
        self.sql.transact(lambda conn: conn.execute(update(ClaimRow).where(*self._mine(key, env)).values(
            state="open", holder="", expires=0.0, updated=utcnow())), write=True)

    def lease(self, key: str, env: str) -> Lease:
        return Lease(self, key, env)


class Lease:
    """A context manager that renews a claim every third of its lease from a heartbeat thread while the key is
    worked on. ``lost`` is set when a renewal finds the claim gone (the key went to another host)."""

    def __init__(self, claims: Claims, key: str, env: str):
        self.claims, self.key, self.env = claims, key, env
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="arbiter-claim-heartbeat", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.claims.lease_s / 3):
            try:
                if not self.claims.renew(self.key, self.env):
                    self.lost.set()
                    return
            except RegistryError:  # the server is away for a moment: try again on the next beat
                continue

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False


def pending(store) -> list[dict]:
    """Recorded keys not tuned in their environment (no measurements there), with their claim's state: one
    dict each (env, target, key, state, holder, expires, attempts, note), sorted by environment then key.
    ``store``: a ``SqlStore`` (read-only is fine)."""
    sql = store

    def read(conn):
        rows = conn.execute(
            select(RecordedKey.env, RecordedKey.key, ClaimRow.state, ClaimRow.holder, ClaimRow.expires,
                   ClaimRow.attempts, ClaimRow.note, ClaimRow.updated)
            .outerjoin(ClaimRow, and_(ClaimRow.key == RecordedKey.key, ClaimRow.env == RecordedKey.env))
            .where(~_tuned())
            .order_by(RecordedKey.env, RecordedKey.key)).all()
        return rows

    now = time.time()
    out = []
    for env, key, state, holder, expires, attempts, note, updated in sql.transact(read, write=False):
        if state == "claimed":
            expires = effective_expiry(expires, updated, now)
        if state == "claimed" and expires < now:
            state = "expired"
        out.append(dict(env=env, target=ProblemKey.parse(key).target, key=key, state=state or "open",
                        holder=holder or "", expires=expires, attempts=attempts or 0, note=note or ""))
    return out


def counts(store, env: str | None = None) -> dict[str, int]:
    """Claims per state (only ``env``'s when given): what a test or ``stats`` checks."""
    sql = sql_store(store)
    where = () if env is None else (ClaimRow.env == env,)
    rows = sql.transact(lambda conn: conn.execute(select(ClaimRow.state, func.count()).where(*where)
                                              .group_by(ClaimRow.state)).all(), write=False)
    return dict(rows)

