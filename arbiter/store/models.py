"""The registry schema as SQLAlchemy 2.x typed models (schema version ``SCHEMA_VERSION``).

One table a stored thing. Parents (environments, problem keys, candidates) are
written before the rows that point at them, in the same short transaction.
Unique constraints carry the "one of each" rules, so two writers can never
create two solutions for one (key, environment) or two verdicts for one
(identity, params, key, environment): a losing writer's insert fails and is
retried as an update (see ``arbiter.store.sql``).

Everything here is dialect-neutral SQL types (JSON is TEXT on SQLite, JSON on
PostgreSQL). Texts whose length the data decides (problem keys, parameter ids)
are unbounded ``Text``: PostgreSQL enforces ``VARCHAR(n)``, SQLite does not, and
a key must not be storable on one and not the other. NaN is stored as NULL (SQLite cannot keep it); infinities are kept.
"""
from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

SCHEMA_VERSION = 5


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class SchemaVersion(Base):
    """One row: the schema version of this file, and when it was last upgraded."""

    __tablename__ = "schema_version"
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    upgraded: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Environment(Base):
    """An environment key: its fingerprint and every field it digests (so a change can be named)."""

    __tablename__ = "environments"
    fingerprint: Mapped[str] = mapped_column(String(64), primary_key=True)
    target: Mapped[str] = mapped_column(String(32))
    fields: Mapped[dict] = mapped_column(JSON, default=dict)  # {} when only the fingerprint was known
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ProblemKeyRow(Base):
    """A problem key: its canonical text and the parts it is made of (for filters)."""

    __tablename__ = "problem_keys"
    id: Mapped[str] = mapped_column(Text, primary_key=True)  # unbounded: a long pointwise chain is in its text
    target: Mapped[str] = mapped_column(String(32), default="")
    op: Mapped[str] = mapped_column(String(64), default="")
    dtype: Mapped[str] = mapped_column(String(32), default="")
    layout: Mapped[str] = mapped_column(String(8), default="")
    attrs: Mapped[str] = mapped_column(Text, default="")
    bucket: Mapped[str] = mapped_column(Text, default="")


class CandidateRow(Base):
    """A candidate's code identity (name@digest) with its name, target, op and tier at the time."""

    __tablename__ = "candidates"
    identity: Mapped[str] = mapped_column(String(256), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    target: Mapped[str] = mapped_column(String(32), default="")
    op: Mapped[str] = mapped_column(String(64), default="")
    tier: Mapped[str] = mapped_column(String(16), default="")
    # A delegate's Contract as JSON (provenance, accuracy, tolerances, determinism, coverage); NULL when none.
    contract: Mapped[str | None] = mapped_column(Text, nullable=True)


class VerdictRow(Base):
    """An F4 verdict for (code identity, solution index, problem key, environment)."""

    __tablename__ = "verdicts"
    __table_args__ = (UniqueConstraint("identity", "params", "key", "env", name="uq_verdict"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    identity: Mapped[str] = mapped_column(ForeignKey("candidates.identity"))
    params: Mapped[str] = mapped_column(Text)  # params_id text
    key: Mapped[str] = mapped_column(ForeignKey("problem_keys.id"))
    env: Mapped[str] = mapped_column(ForeignKey("environments.fingerprint"), index=True)
    passed: Mapped[bool] = mapped_column(Boolean)
    reason: Mapped[str] = mapped_column(Text, default="")
    rel_error: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_excess: Mapped[float | None] = mapped_column(Float, nullable=True)
    probes: Mapped[list] = mapped_column(JSON, default=list)
    budget_rel_fro: Mapped[float] = mapped_column(Float)
    budget_atol: Mapped[float] = mapped_column(Float)
    budget_rtol: Mapped[float] = mapped_column(Float)
    looser_budget: Mapped[bool] = mapped_column(Boolean, default=False)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    # Provenance: "" when this installation's gate computed it; "imported" when it came from a file (`arbiter
    # import`). An imported verdict never serves: the gate runs again on first use and replaces it.
    origin: Mapped[str] = mapped_column(String(16), default="")
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class MeasurementRow(Base):
    """One timing of one solution at a key: mode, repetitions, median and spread."""

    __tablename__ = "measurements"
    __table_args__ = (UniqueConstraint("key", "env", "candidate", "params", "mode", name="uq_measurement"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(ForeignKey("problem_keys.id"))
    env: Mapped[str] = mapped_column(ForeignKey("environments.fingerprint"), index=True)
    candidate: Mapped[str] = mapped_column(String(128))
    params: Mapped[str] = mapped_column(Text, default="{}")
    mode: Mapped[str] = mapped_column(String(16))  # device | latency | stream
    reps: Mapped[int] = mapped_column(Integer)
    median_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    p20_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    p80_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    spread: Mapped[float | None] = mapped_column(Float, nullable=True)
    warmup_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    screened: Mapped[bool] = mapped_column(Boolean, default=False)
    # The exact dimensions timed (JSON), inside the key's bucket: throughput needs them, the bucket can't give them.
    dims: Mapped[str | None] = mapped_column(Text, nullable=True)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class SolutionRow(Base):
    """The winner for one problem key under one environment (at most one: ``uq_solution``)."""

    __tablename__ = "solutions"
    __table_args__ = (UniqueConstraint("key", "env", name="uq_solution"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(ForeignKey("problem_keys.id"))
    env: Mapped[str] = mapped_column(ForeignKey("environments.fingerprint"), index=True)
    candidate: Mapped[str] = mapped_column(String(128))
    identity: Mapped[str] = mapped_column(ForeignKey("candidates.identity"))
    params: Mapped[dict] = mapped_column(JSON, default=dict)
    policy: Mapped[str] = mapped_column(String(16))  # tier | measured | forced
    margin: Mapped[float | None] = mapped_column(Float, nullable=True)
    note: Mapped[str] = mapped_column(Text, default="")
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CounterRow(Base):
    """Dispatch counts per (key, solution, environment), summed over every process that flushed."""

    __tablename__ = "counters"
    __table_args__ = (UniqueConstraint("key", "candidate", "params", "env", name="uq_counter"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(ForeignKey("problem_keys.id"))
    candidate: Mapped[str] = mapped_column(String(128))
    params: Mapped[str] = mapped_column(Text, default="{}")
    env: Mapped[str] = mapped_column(ForeignKey("environments.fingerprint"), index=True)
    hits: Mapped[int] = mapped_column(Integer, default=0)
    misses: Mapped[int] = mapped_column(Integer, default=0)
    fallbacks: Mapped[int] = mapped_column(Integer, default=0)
    loads: Mapped[int] = mapped_column(Integer, default=0)  # v4: a stored solution installed by a process


class RecordedKey(Base):
    """A key seen under the ``record`` miss policy, with its real dims, for later offline tuning."""

    __tablename__ = "recorded_keys"
    __table_args__ = (UniqueConstraint("key", "env", name="uq_recorded"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(ForeignKey("problem_keys.id"))
    env: Mapped[str] = mapped_column(ForeignKey("environments.fingerprint"))
    dims: Mapped[dict] = mapped_column(JSON, default=dict)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)



class ClaimRow(Base):
    """v5: a fleet host's claim on tuning one key under one environment (``arbiter.store.claims``).

    ``state``: ``open`` (to be tuned), ``claimed`` (``holder`` works on it until ``expires``, renewed while it
    works; a claim past ``expires`` is open again), ``done`` (its solution committed in the same transaction)
    or ``failed`` (no solution passed the gate; ``note`` says why). ``expires`` is Unix seconds from the
    holder's clock: hosts' clocks must agree to well within a lease.
    """

    __tablename__ = "claims"
    __table_args__ = (UniqueConstraint("key", "env", name="uq_claim"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(ForeignKey("problem_keys.id"))
    env: Mapped[str] = mapped_column(ForeignKey("environments.fingerprint"), index=True)
    state: Mapped[str] = mapped_column(String(8), default="open")
    holder: Mapped[str] = mapped_column(String(128), default="")
    expires: Mapped[float] = mapped_column(Float, default=0.0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # claims taken; more than 1 means a lease ran out
    note: Mapped[str] = mapped_column(Text, default="")
    updated: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
