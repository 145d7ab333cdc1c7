"""Publishing: one environment's solutions and verdicts as a read-only SQLite system registry (issue 18 item 3).

``arbiter export --env FINGERPRINT --out system.db`` copies, from the (shared) registry, the environment row,
its solutions and its verdicts, with the problem keys and candidates they point at, into a new SQLite file of
the current schema. Shipped in a container image as ``ARBITER_SYSTEM_DB``, it serves every published key
without a verdict computed or a measurement taken: the verdicts were computed by the gate of the tuning host,
whose environment key (device, libraries, versions) the serving host matches; a verdict or solution of another
environment would never be served there anyway (stale).

The file is written in rollback-journal mode (no ``-wal``/``-shm`` files needed beside it, so it opens in a
read-only image folder), compacted, and made read-only (mode 0444).
"""
from __future__ import annotations

import os
import tempfile

from sqlalchemy import Integer, insert, select

from arbiter.errors import RegistryError
from arbiter.store.models import CandidateRow, Environment, ProblemKeyRow, SolutionRow, VerdictRow
from arbiter.store.sql import SqlStore


def _rows(conn, model, *where) -> list[dict]:
    # a row id the target numbers itself is left out; a key's id (its text) is the key
    cols = [c for c in model.__table__.columns if not (c.name == "id" and isinstance(c.type, Integer))]
    return [dict(r._mapping) for r in conn.execute(select(*cols).where(*where)).all()]


def publish(source, fingerprint: str, out: str) -> dict[str, int]:
    """Write ``source``'s (a ``SqlStore``) rows of environment ``fingerprint`` to a new SQLite file ``out``.

    Returns rows written per table. RegistryError (naming the argument) for an unknown environment or an
    ``out`` that exists already (never overwritten: a published registry may be in use).
    """
    if os.path.exists(out):
        raise RegistryError(f"--out {out}: exists already; nothing was written. Remove it or give another path "
                            f"(a published registry is never overwritten in place).")

    def read(conn):
        env = _rows(conn, Environment, Environment.fingerprint == fingerprint)
        if not env:
            return None
        solutions = _rows(conn, SolutionRow, SolutionRow.env == fingerprint)
        verdicts = _rows(conn, VerdictRow, VerdictRow.env == fingerprint, VerdictRow.origin == "")
        keys = sorted({r["key"] for r in solutions} | {r["key"] for r in verdicts})
        identities = sorted({r["identity"] for r in solutions} | {r["identity"] for r in verdicts})
        return {"environments": env,
                "problem_keys": [r for k in _chunks(keys) for r in _rows(conn, ProblemKeyRow, ProblemKeyRow.id.in_(k))],
                "candidates": [r for i in _chunks(identities)
                               for r in _rows(conn, CandidateRow, CandidateRow.identity.in_(i))],
                "verdicts": verdicts, "solutions": solutions}

    found = source.transact(read, write=False)
    if found is None:
        known = ", ".join(e["fingerprint"] for e in source.environments()) or "none"
        raise RegistryError(f"--env {fingerprint}: no such environment in {source.where} (stored: {known}); "
                            f"nothing was written.")
    # Written under a name nobody could create first (mkstemp: O_EXCL, a random name, mode 0600, in out's folder
    # so the rename is atomic), then renamed into place once whole: a failure leaves no file at out. A
    # predictable name (out.partial-<pid>) could be created first by another user, who would then own the file.
    folder, name = os.path.split(os.path.abspath(out))
    fd, partial = tempfile.mkstemp(prefix=f".{name}.partial-", dir=folder)
    os.close(fd)
    try:
        target = SqlStore(partial)  # the current schema, in a new file
        try:
            def write(conn):
                for model, name in ((Environment, "environments"), (ProblemKeyRow, "problem_keys"),
                                    (CandidateRow, "candidates"), (VerdictRow, "verdicts"),
                                    (SolutionRow, "solutions")):
                    if found[name]:
                        conn.execute(insert(model), found[name])

            target.transact(write, write=True)
        finally:
            target.close()
        import sqlite3

        conn = sqlite3.connect(partial)
        try:  # no -wal/-shm beside a file shipped read-only; compacted
            conn.execute("PRAGMA journal_mode = DELETE")
            conn.execute("VACUUM")
        finally:
            conn.close()
        os.chmod(partial, 0o444)
        os.replace(partial, out)
    finally:
        for leftover in (partial, partial + "-wal", partial + "-shm"):
            if os.path.exists(leftover):
                os.remove(leftover)
    return {name: len(rows) for name, rows in found.items()}


def _chunks(items, size: int = 500):
    for i in range(0, len(items), size):
        yield items[i:i + size]
