"""Registry backends for the store tests: a SQLite file, and a fresh PostgreSQL database per test.

PostgreSQL comes from ``$ARBITER_TEST_PG`` (a SQLAlchemy URL of a role allowed to CREATE DATABASE;
``.ci/run`` sets it from ``.ci/postgres.sh``). Unset, and PostgreSQL's binaries are installed here,
``.ci/postgres.sh`` is run to start (or reuse) a server on loopback; one it started is stopped when the test
session ends (``stop_started_server``, from ``tests/conftest.py``). ``ARBITER_TEST_PG=skip`` turns the
PostgreSQL cases off. With no server, or no psycopg, those cases skip with the reason.
"""
from __future__ import annotations

import contextlib
import functools
import glob
import os
import subprocess
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PG_ENV = "ARBITER_TEST_PG"


@functools.cache
def postgres_server() -> tuple[str | None, str]:
    """``(admin URL, "")`` for a reachable PostgreSQL server, else ``(None, why not)``. Probed once a session."""
    url = os.environ.get(PG_ENV, "").strip()
    if url == "skip":
        return None, f"{PG_ENV}=skip"
    if not url:
        if not glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"):
            return None, f"no PostgreSQL server: set {PG_ENV} to a URL, or run .ci/postgres.sh (installs one)"
        try:
            was = _script("up")
            url = _script().splitlines()[-1]
        except (subprocess.SubprocessError, IndexError) as exc:
            return None, f".ci/postgres.sh could not start a server: {exc}"
        if was == "down":
            _started.append(url)
    try:
        import psycopg  # noqa: F401  (the driver the URL names)
    except ImportError:
        return None, "psycopg is not installed: pip install -e '.[postgres]'"
    from sqlalchemy import create_engine, text

    try:
        engine = create_engine(url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as exc:  # any reason the server cannot be used is a reason to skip
        return None, f"PostgreSQL at {_hidden(url)} is not reachable: {str(exc).splitlines()[0]}"
    return url, ""


_started: list[str] = []  # the server this session started (stopped at its end)


def _script(*args: str) -> str:
    return subprocess.run(["bash", str(ROOT / ".ci" / "postgres.sh"), *args], capture_output=True, text=True,
                          timeout=120, check=True).stdout.strip()


def stop_started_server() -> None:
    """Stop the PostgreSQL server this test session started (a server that was running before is left alone)."""
    if _started:
        _started.clear()
        # a failure leaves nothing more to do at the session's end; the next session reuses or restarts it
        with contextlib.suppress(subprocess.SubprocessError):
            _script("stop")


def _hidden(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


class Backend:
    """One registry backend for a test: ``new()`` gives the URL of a fresh, empty registry database."""

    def __init__(self, name: str, tmp_path: Path):
        self.name, self.tmp_path = name, tmp_path
        self._made: list[str] = []
        self._admin = None
        if name == "postgresql":
            admin, why = postgres_server()
            if admin is None:
                import pytest

                pytest.skip(f"PostgreSQL backend: {why}")
            from sqlalchemy import create_engine

            self._admin_url = admin
            self._admin = create_engine(admin, isolation_level="AUTOCOMMIT", poolclass=_null_pool())

    def new(self) -> str:
        if self.name == "sqlite":
            path = self.tmp_path / f"registry-{len(self._made)}.db"
            self._made.append(str(path))
            return str(path)
        from sqlalchemy import text
        from sqlalchemy.engine import make_url

        name = f"arbiter_test_{uuid.uuid4().hex[:12]}"
        with self._admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        self._made.append(name)
        return make_url(self._admin_url).set(database=name).render_as_string(hide_password=False)

    def query(self, url: str, sql: str) -> list[tuple]:
        """Rows of one SQL statement, read straight from the database (not through a SqlStore)."""
        from sqlalchemy import create_engine, text

        from arbiter.store.diagnostics import to_url

        engine = create_engine(to_url(url), poolclass=_null_pool())
        try:
            with engine.connect() as conn:
                return [tuple(r) for r in conn.execute(text(sql)).all()]
        finally:
            engine.dispose()

    def script(self, url: str, statements: str) -> None:
        """Run ``;``-separated DDL/DML in one transaction (building an old-schema registry by hand)."""
        from sqlalchemy import create_engine

        from arbiter.store.diagnostics import to_url

        engine = create_engine(to_url(url), poolclass=_null_pool())
        try:
            with engine.begin() as conn:
                for stmt in filter(str.strip, statements.split(";")):
                    conn.exec_driver_sql(stmt)
        finally:
            engine.dispose()

    def drop(self) -> None:
        if self._admin is None:
            return
        from sqlalchemy import text
        from sqlalchemy.exc import DBAPIError

        with self._admin.connect() as conn:
            for name in self._made:  # FORCE: a store the test left open still holds connections
                try:
                    conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                except DBAPIError:
                    # A server whose role cannot end an autovacuum worker (no pg_signal_backend): a plain DROP
                    # signals the worker itself and waits for it; the test's own connections are closed by now.
                    conn.rollback()
                    _drop_when_free(conn, name)
        self._admin.dispose()


def _drop_when_free(conn, name: str) -> None:
    import time

    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    for attempt in range(10):
        try:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
            return
        except DBAPIError:
            conn.rollback()
            if attempt == 9:
                raise
            time.sleep(0.5)


def _null_pool():
    from sqlalchemy.pool import NullPool

    return NullPool
