"""The store: where verdicts, measurements, solutions and counters persist.

``Store`` is the contract the core uses; ``MemoryStore`` keeps everything in
this process, and ``arbiter.store.sql`` keeps it in a SQLAlchemy database
(SQLite ``registry.db`` by default). The core never imports SQLAlchemy itself,
and nothing on the dispatch hot path touches a store.

The package, one idea a module: ``base`` (the values and the contract, re-exported here), ``models`` and
``migrate`` (the schema), ``diagnostics`` (paths, files, permissions, what a failure says), ``transactions``
(retry through contention), ``sql`` (record storage), ``layered`` (a system registry under the user's),
``inventory`` (what is stored, current or stale, shared by the CLI, the report and ``tune --retune-stale``),
``flusher`` (dispatch counts in the background), ``claims``, ``transfer`` and ``publish`` (fleets, export,
import). It imports nothing above it: what it needs from above (dispatch's flush, the candidates' tiers) is
handed down.
"""
from __future__ import annotations

from arbiter.store.base import (
    CountDelta,
    MeasurementRecord,
    MemoryStore,
    SolutionRecord,
    Store,
    Verdict,
    VerdictKey,
    set_tier_lookup,
    tier_of,
)

__all__ = ["CountDelta", "MeasurementRecord", "MemoryStore", "SolutionRecord", "Store", "Verdict", "VerdictKey",
           "default_store", "set_tier_lookup", "tier_of"]


def default_store() -> Store:
    """The store a process uses when none was configured: the SQL registry at ``$ARBITER_DB`` (a path or
    SQLAlchemy URL; default ``./registry.db``) over the read-only ``$ARBITER_SYSTEM_DB`` when set.

    Raises ``RegistryError`` naming the file and ``arbiter doctor --repair`` when it is not a registry;
    an unwritable path gives an in-memory store and one warning (see ``arbiter.store.layered``).
    """
    from arbiter.store.layered import open_default  # here, not above: SQLAlchemy loads only with a registry

    return open_default()
