from __future__ import annotations

from pathlib import Path

import pytest

from tests.postgres import PostgresServer, postgres_server

__all__ = ["postgres_server", "state_at"]


@pytest.fixture(params=["sqlite", "postgres"])
def state_at(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a test's worker state lives, on each engine: a fresh SQLite file, or a fresh
    PostgreSQL database (its URL). Every ``StateStore(state_at)`` opens the same state."""
    if request.param == "sqlite":
        return tmp_path / "state.sqlite"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()
