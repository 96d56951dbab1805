"""The state store on a real PostgreSQL server, where it differs from a file: a server that is
down or refuses the login is named without the password, a lost connection fails one call
and the next reconnects, a newer schema is refused, money beyond 32 bits stays exact, and
the worker's settings choose the engine (the URL's password in no repr or error)."""

from __future__ import annotations

import socket
import traceback
from pathlib import Path

import psycopg
import pytest
from pydantic import ValidationError

from replay_worker.settings import WorkerSettings
from replay_worker.state import Owner, StateStore, StateStoreUnavailable, open_state_store
from replay_worker.state_engines import PostgresEngine
from tests.postgres import PostgresServer

T0 = 1_764_460_800.0
ME = Owner("hostA:1:a", "hostA", 1)
PASSWORD = "s3cret-Pa55:w/rd"  # ':' and '/' as a URL must escape them
ESCAPED = "s3cret-Pa55%3Aw%2Frd"


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # nothing listens once it is closed


def _assert_no_password(text: str) -> None:
    for secret in (PASSWORD, ESCAPED, "s3cret"):
        assert secret not in text, text


def test_a_server_that_is_down_is_named_without_its_password() -> None:
    port = _closed_port()
    url = f"postgresql://afr:{ESCAPED}@127.0.0.1:{port}/afr"
    with pytest.raises(StateStoreUnavailable) as caught:
        StateStore(url)
    message = str(caught.value)
    assert message.startswith(f"the state store at postgresql://afr:***@127.0.0.1:{port}/afr")
    assert "is unavailable" in message and "refused" in message.lower()
    _assert_no_password("".join(traceback.format_exception(caught.value)))


def test_a_refused_login_is_reported_without_the_password(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.url(password=ESCAPED)
    with pytest.raises(StateStoreUnavailable, match="password authentication failed") as caught:
        StateStore(url)
    _assert_no_password("".join(traceback.format_exception(caught.value)))


def _terminate_sessions(server: PostgresServer, database: str) -> None:
    with psycopg.connect(server.url(), autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND application_name = 'afr-worker'",
            (database,),
        )


def _close_database(server: PostgresServer, database: str, closed: bool) -> None:
    with psycopg.connect(server.url(), autocommit=True) as admin:
        admin.execute(
            f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS {str(not closed).lower()}'
        )


def test_a_connection_lost_while_idle_is_replaced_and_the_call_runs_once(
    postgres_server: PostgresServer,
) -> None:
    """A server restart (or a proxy's idle timeout) kills the idle session: nothing was
    committed on it, so the next read and the next transaction reconnect and run, once."""
    url = postgres_server.create_database()
    database = url.rsplit("/", 1)[1]
    store = StateStore(url)
    store.submit("msg_1", "job_1", "a" * 32, None, {}, T0)
    _terminate_sessions(postgres_server, database)
    job = store.get("job_1")  # a read
    assert job is not None and job.state == "queued"
    _terminate_sessions(postgres_server, database)
    claimed = store.claim(ME, T0, lease_s=30)  # a transaction
    assert claimed is not None and claimed.attempts == 1, "it ran once"
    assert store.claim(ME, T0, lease_s=30) is None


def test_a_connection_left_busy_is_never_used_again(postgres_server: PostgresServer) -> None:
    """A failed rollback can leave a command in progress on a connection psycopg does not
    mark broken ("another command is already in progress" on every use after): the store
    replaces it instead of failing each call on it (the heal after an outage flaked so)."""
    store = StateStore(postgres_server.create_database())
    store.submit("msg_1", "job_1", "a" * 32, None, {}, T0)
    engine = store.engine
    assert isinstance(engine, PostgresEngine)
    for call in ("read", "transaction"):
        conn = engine._conn  # the store's one connection, left with a query unread
        assert conn is not None
        conn.pgconn.send_query(b"SELECT 1")
        if call == "read":
            job = store.get("job_1")
            assert job is not None and job.state == "queued"
        else:
            claimed = store.claim(ME, T0, lease_s=30)
            assert claimed is not None and claimed.attempts == 1
        assert engine._conn is not conn


def test_a_server_that_stays_away_fails_each_call_and_the_store_heals_after(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.create_database()
    database = url.rsplit("/", 1)[1]
    store = StateStore(url)
    store.submit("msg_1", "job_1", "a" * 32, None, {}, T0)
    _close_database(postgres_server, database, True)
    try:
        _terminate_sessions(postgres_server, database)
        with pytest.raises(StateStoreUnavailable, match=r"afr_test:\*\*\*@"):
            store.get("job_1")
        with pytest.raises(StateStoreUnavailable):
            store.claim(ME, T0, lease_s=30)
    finally:
        _close_database(postgres_server, database, False)
    claimed = store.claim(ME, T0, lease_s=30)
    assert claimed is not None and claimed.attempts == 1, "the failed call changed nothing"


def test_a_state_written_by_a_newer_afr_is_refused(postgres_server: PostgresServer) -> None:
    url = postgres_server.create_database()
    StateStore(url).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE afr_state_meta SET value = 99 WHERE key = 'schema_version'")
    with pytest.raises(RuntimeError, match="newer afr"):
        StateStore(url)


def test_money_beyond_32_bits_stays_exact(postgres_server: PostgresServer) -> None:
    store = StateStore(postgres_server.create_database())
    big = 5_000 * 10**9 + 1  # $5,000.000000001 in nano-dollars
    assert store.reserve("2025-11-30", None, big, day_limit_nusd=2 * big)
    store.settle("2025-11-30", None, reserved_nusd=big, actual_nusd=big + 3)
    (row,) = store.engine.read("SELECT spent_nusd, overrun_nusd FROM spend")
    assert row == (big + 3, 3)


def test_the_settings_choose_the_engine_and_never_show_the_password(
    postgres_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = postgres_server.create_database()
    monkeypatch.setenv("AFR_WORKER_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("AFR_WORKER_STATE_URL", url)
    settings = WorkerSettings()
    store = open_state_store(settings)
    assert store.path is None and store.location == settings.state_location
    assert settings.state_location.startswith("postgresql://afr_test:***@127.0.0.1:")
    password = postgres_server.password
    for shown in (repr(settings), str(settings), repr(store), store.location):
        assert password not in shown
    assert not (tmp_path / "state.sqlite").exists()

    monkeypatch.delenv("AFR_WORKER_STATE_URL")
    local = open_state_store(WorkerSettings())
    assert local.path == tmp_path / "state.sqlite" and local.path.exists()

    monkeypatch.setenv("AFR_WORKER_STATE_URL", f"mysql://afr:{ESCAPED}@db/afr")
    with pytest.raises(ValidationError, match="must be a postgresql:// URL") as caught:
        WorkerSettings()
    _assert_no_password(str(caught.value))


def test_a_scheme_in_capitals_is_still_postgresql_and_never_a_file(
    postgres_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read as a path, "PostgreSQL://u:pw@host/db" made a SQLite file whose directory names
    held the password, and a private state per replica."""
    monkeypatch.chdir(tmp_path)
    url = postgres_server.create_database()
    shouting = "PostgreSQL" + url[url.index(":") :]
    store = StateStore(shouting)
    try:
        store.submit("msg_1", "job_1", "a" * 32, None, {}, T0)
        assert StateStore(url).get("job_1") is not None, "the same database"
        assert "***@" in store.location
        assert not list(tmp_path.iterdir()), "nothing written as a file"
    finally:
        store.close()
