"""The registry backends every backend-neutral store test runs on: SQLite and PostgreSQL."""
from __future__ import annotations

import pytest

from store_support import Backend


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request, tmp_path):
    """A ``store_support.Backend``; its PostgreSQL case skips with the reason where no server is reachable."""
    b = Backend(request.param, tmp_path)
    yield b
    b.drop()


@pytest.fixture
def postgres(tmp_path):
    """The PostgreSQL backend alone, for what only a server database has (skips where none is reachable)."""
    b = Backend("postgresql", tmp_path)
    yield b
    b.drop()
