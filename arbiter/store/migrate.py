"""The migration ladder: bring any older registry up to ``SCHEMA_VERSION`` without losing a row.

An explicit ladder, not Alembic (``docs/registry.md`` says why): ``STEPS[v]``
upgrades a file from version ``v`` to ``v + 1``. ``ensure(engine)`` runs the
missing steps in one write transaction, so a crash mid-upgrade leaves the old
version intact, and two processes opening the same old file upgrade it once
(the second finds the new version when it gets the write lock).

Each step uses only portable DDL (``ALTER TABLE ... ADD COLUMN`` with a type
compiled for the connection's dialect, and ``CREATE TABLE`` from the models).
"""
from __future__ import annotations

from sqlalchemy import delete, insert, inspect, select, update
from sqlalchemy.engine import Connection

from arbiter.errors import RegistryError
from arbiter.store.models import (
    SCHEMA_VERSION,
    Base,
    CandidateRow,
    ClaimRow,
    CounterRow,
    MeasurementRow,
    RecordedKey,
    SchemaVersion,
    SolutionRow,
    VerdictRow,
    utcnow,
)


def _add_column(conn: Connection, model, name: str, fill) -> None:
    column = model.__table__.c[name]
    kind = column.type.compile(dialect=conn.dialect)
    conn.exec_driver_sql(f"ALTER TABLE {model.__tablename__} ADD COLUMN {name} {kind}")
    if fill is not None:
        conn.execute(update(model).values({name: fill}))


def _v1_to_v2(conn: Connection) -> None:
    """v2: solution notes, measurement percentiles/warm-up/screening, and the ``record`` policy's keys."""
    _add_column(conn, SolutionRow, "note", "")
    for name in ("p20_s", "p80_s", "warmup_s"):
        _add_column(conn, MeasurementRow, name, None)
    _add_column(conn, MeasurementRow, "screened", False)
    RecordedKey.__table__.create(conn)  # type: ignore[attr-defined]  # a mapped class's __table__ is a Table


def _v2_to_v3(conn: Connection) -> None:
    """v3: delegate contracts stored with their candidate; the exact dimensions each measurement timed."""
    _add_column(conn, CandidateRow, "contract", None)
    _add_column(conn, MeasurementRow, "dims", None)


def _v3_to_v4(conn: Connection) -> None:
    """v4: ``counters.loads``, a stored solution installed by a process, counted apart from misses (a key
    decided now; before v4 a load counted as a miss, and the two cannot be told apart afterwards: old misses
    stay misses, loads start at 0); and ``verdicts.origin``, each verdict's provenance (imported verdicts are
    gated again before they serve; rows already there were computed here)."""
    _add_column(conn, CounterRow, "loads", 0)
    _add_column(conn, VerdictRow, "origin", "")


def _v4_to_v5(conn: Connection) -> None:
    """v5: ``claims``, fleet hosts' leases on tuning a key under an environment (``arbiter.store.claims``);
    empty at first: claims are offered from recorded keys and tune's key lists when hosts ask for work."""
    ClaimRow.__table__.create(conn)  # type: ignore[attr-defined]  # a mapped class's __table__ is a Table


STEPS = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5}
_PG_LOCK = 0x6B61_7262  # the advisory lock id of schema upgrades ("karb"); any constant shared by all writers
assert sorted(STEPS) == list(range(1, SCHEMA_VERSION)), "the ladder must have one step per version"


class NewerSchemaError(RegistryError):
    """A sound registry written by a newer kernel-arbiter: never damaged, never ours to move or change."""


class SchemaVersionError(RegistryError):
    """A schema_version row no release ever wrote (missing, zero, negative): the registry is damaged."""


def read_version(conn: Connection) -> int | None:
    """The file's schema version; 0 for an empty database; None for tables that are not a registry.

    Raises SchemaVersionError when the schema_version table holds no version any release wrote (1 or more).
    """
    tables = set(inspect(conn).get_table_names())
    if not tables:
        return 0
    if SchemaVersion.__tablename__ not in tables:
        return None
    found = conn.execute(select(SchemaVersion.version)).scalar()
    if not isinstance(found, int) or found < 1:
        raise SchemaVersionError(f"schema version {found} in its schema_version table is not one kernel-arbiter "
                                 f"writes (1 to {SCHEMA_VERSION} here); the registry is damaged.")
    return found


def upgrade(conn: Connection, where: str) -> int:
    """Create or upgrade the schema inside ``conn``'s (write) transaction; returns the version found.

    Raises RegistryError naming ``where`` for a database that is not a registry or is newer than this code.
    """
    if conn.dialect.name == "postgresql":
        # Two processes opening one fresh server database would both find v0 and both CREATE TABLE (one then
        # fails: "relation already exists"). SQLite's BEGIN IMMEDIATE serializes them; here a transaction-scoped
        # advisory lock does, and the second reads the version only after the first committed it.
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_LOCK})")
    found = read_version(conn)
    if found is None:
        raise RegistryError(f"{where}: this database has tables but no schema_version; it is not a "
                            f"kernel-arbiter registry. Point --db/ARBITER_DB at another file.")
    if found > SCHEMA_VERSION:
        raise NewerSchemaError(f"{where}: registry schema v{found} is newer than this kernel-arbiter "
                            f"(v{SCHEMA_VERSION}); upgrade kernel-arbiter or use another --db.")
    if found == 0:
        Base.metadata.create_all(conn)
    else:
        for version in range(found, SCHEMA_VERSION):
            STEPS[version](conn)
    if found != SCHEMA_VERSION:
        conn.execute(delete(SchemaVersion))
        conn.execute(insert(SchemaVersion).values(version=SCHEMA_VERSION, upgraded=utcnow()))
    return found
