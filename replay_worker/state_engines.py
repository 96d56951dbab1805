"""The two engines under the worker's state store (ADR 12): SQLite, one file on one machine
(the default), and PostgreSQL, shared by worker replicas on several hosts.

The store's logic (``replay_worker/state/``) is written once, as transactions of plain SQL
(``?`` placeholders, no literal ``?`` or ``%``); an engine runs each one atomically:

- SQLite: ``BEGIN IMMEDIATE`` takes the file's write lock at the first statement, so every
  transaction runs alone among the processes on the file.
- PostgreSQL: ``SERIALIZABLE``. The server guarantees that concurrent serializable
  transactions commit only if the outcome is that of some serial order, and aborts the
  others with a serialization failure (SQLSTATE 40001, or a deadlock, 40P01); such a
  transaction is run again from its start, at once, until it commits (at least one of a
  conflicting set always does). The same read-check-write code therefore means the same
  thing on both engines, with the database as the only lock.

A transaction body may run more than once: it only reads and writes through its ``Tx`` and
returns what it found, it keeps no other state.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from afr_common.urls import redact_url

if TYPE_CHECKING:  # loaded when a PostgreSQL state opens: the SQLite default never pays for it
    import psycopg

__all__ = [
    "POSTGRES_SCHEMES",
    "SCHEMA_LEVEL",
    "SCHEMA_VERSION",
    "Engine",
    "PostgresEngine",
    "SQLiteEngine",
    "StateSchemaTooNew",
    "StateStoreUnavailable",
    "Tx",
]

T = TypeVar("T")

POSTGRES_SCHEMES = ("postgresql", "postgres")
SCHEMA_VERSION = 1
"""What a reader must understand: afr refuses a state of a higher version. Only a change
older code would misread raises it; an added table does not."""
SCHEMA_LEVEL = 3
"""The tables there are, which older afr ignores: 2 added ``sweep_shards`` (a slot run as
shards by ``afr eval run --shard --slot``), 3 ``job_forks`` (a replay job's fork: step and
overrides; an older worker would run such a job as a plain replay). A PostgreSQL state below it gains the missing
tables when opened; a SQLite file runs the schema's ``IF NOT EXISTS`` statements at every
open."""

# One schema for both engines. BIGINT and DOUBLE PRECISION have SQLite's INTEGER and REAL
# affinities (64-bit integers, doubles), so a file created before them reads the same; in
# PostgreSQL, INTEGER and REAL would be 32 bits. Text compares byte by byte in both (the
# "C" collation in PostgreSQL), so ties in ORDER BY break the same way.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id        {text} PRIMARY KEY,
    webhook_id    {text} NOT NULL UNIQUE,
    run_id        {text} NOT NULL,
    model         {text},
    stubs         {text} NOT NULL,
    policy        {text} NOT NULL DEFAULT 'exact',
    state         {text} NOT NULL,
    attempts      BIGINT NOT NULL DEFAULT 0,
    owner         {text},
    owner_host    {text},
    owner_pid     BIGINT,
    lease_until   DOUBLE PRECISION,
    created_at    DOUBLE PRECISION NOT NULL,
    started_at    DOUBLE PRECISION,
    finished_at   DOUBLE PRECISION,
    result        {text},
    error         {text},
    cost_nusd     BIGINT NOT NULL DEFAULT 0,
    overrun_nusd  BIGINT NOT NULL DEFAULT 0,
    requests      BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, created_at);
CREATE TABLE IF NOT EXISTS job_forks (
    job_id        {text} PRIMARY KEY,
    fork          {text} NOT NULL
);
CREATE TABLE IF NOT EXISTS spend (
    day           {text} PRIMARY KEY,
    spent_nusd    BIGINT NOT NULL DEFAULT 0,
    overrun_nusd  BIGINT NOT NULL DEFAULT 0,
    requests      BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS sweeps (
    sweep_id      {text} PRIMARY KEY,
    slot          {text} NOT NULL,
    trigger       {text} NOT NULL,
    state         {text} NOT NULL,
    attempts      BIGINT NOT NULL DEFAULT 0,
    owner         {text},
    owner_host    {text},
    owner_pid     BIGINT,
    lease_until   DOUBLE PRECISION,
    created_at    DOUBLE PRECISION NOT NULL,
    started_at    DOUBLE PRECISION,
    finished_at   DOUBLE PRECISION,
    summary       {text},
    error         {text}
);
CREATE INDEX IF NOT EXISTS sweeps_by_state ON sweeps (state, created_at);
CREATE TABLE IF NOT EXISTS sweep_results (
    sweep_id      {text} NOT NULL,
    eval_id       {text} NOT NULL,
    status        {text} NOT NULL,
    eval_run_id   {text},
    result        {text} NOT NULL,
    recorded_at   DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (sweep_id, eval_id)
);
CREATE TABLE IF NOT EXISTS sweep_shards (
    sweep_id      {text} NOT NULL,
    shard_count   BIGINT NOT NULL,
    shard_index   BIGINT NOT NULL,
    recorded_at   DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (sweep_id, shard_count, shard_index)
);
"""


_SELECT_META = (
    "SELECT key, value FROM afr_state_meta WHERE key IN ('schema_version', 'schema_level')"
)


def _meta(rows: Sequence[Sequence[Any]]) -> tuple[int | None, int]:
    values = {str(key): int(value) for key, value in rows}
    # A state written before levels existed holds every table of level 1.
    version = values.get("schema_version")
    return version, values.get("schema_level", 1 if version is not None else 0)


def _schema(text_type: str) -> list[str]:
    return [s for s in _SCHEMA.format(text=text_type).split(";") if s.strip()]


class StateSchemaTooNew(RuntimeError):
    """The state was written by a newer afr (a higher schema version): no retry mends it."""


class StateStoreUnavailable(RuntimeError):
    """The state store cannot be reached (a PostgreSQL server down, refusing the login, the
    connection lost). The message says where, never with the password."""


class Tx(Protocol):
    """The statements of one transaction (``?`` placeholders)."""

    def one(self, sql: str, parameters: Sequence[Any] = ()) -> tuple[Any, ...] | None: ...

    def all(self, sql: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def run(self, sql: str, parameters: Sequence[Any] = ()) -> int:
        """Runs a write; the number of rows it changed."""
        ...

    def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...


class Engine(Protocol):
    """Thread-safe: one connection per engine, shared by the threads of a process under a
    lock. Methods block; callers on an event loop call them from a thread."""

    location: str
    """Where the state is, safe to print (no password)."""

    def transact(self, body: Callable[[Tx], T]) -> T:
        """Runs ``body`` as one atomic transaction (perhaps more than once, see above)."""
        ...

    def read(self, sql: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """One statement on its own consistent snapshot."""
        ...

    def close(self) -> None: ...


# -- SQLite -------------------------------------------------------------------------------


class _SQLiteTx:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def one(self, sql: str, parameters: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = self._db.execute(sql, parameters).fetchone()
        return row

    def all(self, sql: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._db.execute(sql, parameters).fetchall()

    def run(self, sql: str, parameters: Sequence[Any] = ()) -> int:
        return self._db.execute(sql, parameters).rowcount

    def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self._db.executemany(sql, rows)


class SQLiteEngine:
    """One file (WAL, mode 0600) on a local disk, shared by every process that opens it."""

    def __init__(self, path: Path, *, busy_timeout_s: float) -> None:
        self.path = path
        self.location = str(path)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # spend and job inputs: owner only
        os.close(fd)
        self._db = sqlite3.connect(
            path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        # PostgreSQL's name for a scalar max, so one SQL text serves both engines.
        self._db.create_function("greatest", 2, max, deterministic=True)
        self._lock = threading.Lock()
        with self._lock:
            # Switching a new file to WAL can answer "database is locked" at once, without
            # the busy handler, while another process switches it: retried to the timeout.
            deadline = time.monotonic() + busy_timeout_s
            while True:
                try:
                    self._db.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or time.monotonic() >= deadline:
                        raise
                    time.sleep(random.uniform(0.001, 0.02))
            # A committed transaction survives a crash of any process; only a power loss may
            # take the last ones back (WAL + NORMAL), which costs no fsync per model call.
            self._db.execute("PRAGMA synchronous=NORMAL")
        self.transact(self._create_schema)

    def _create_schema(self, tx: Tx) -> None:
        (version,) = tx.one("PRAGMA user_version") or (0,)
        if version > SCHEMA_VERSION:
            raise StateSchemaTooNew(
                f"{self.path} was written by a newer afr (state schema {version}); upgrade afr"
            )
        for statement in _schema("TEXT"):
            tx.run(statement)
        tx.run(f"PRAGMA user_version={SCHEMA_VERSION}")

    def transact(self, body: Callable[[Tx], T]) -> T:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                result = body(_SQLiteTx(self._db))
                self._db.execute("COMMIT")  # a COMMIT that fails (disk full) rolls back too
            except BaseException:
                if self._db.in_transaction:  # SQLite may have rolled back already
                    self._db.execute("ROLLBACK")
                raise
            return result

    def read(self, sql: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, parameters).fetchall()

    def close(self) -> None:
        with self._lock:
            self._db.close()


# -- PostgreSQL ---------------------------------------------------------------------------


def _secrets_of(url: str) -> list[str]:
    """The password as it may appear in a message: as written and percent-decoded."""
    found: list[str] = []
    try:
        parts = urlsplit(url)
        if parts.password:
            found += [parts.password, unquote(parts.password)]
        found += [v for k, v in parse_qsl(parts.query) if k.lower().endswith("password")]
    except ValueError:
        pass
    return [s for s in found if s]


class _PostgresTx:
    def __init__(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        self._conn = conn

    @staticmethod
    def _sql(sql: str) -> bytes:
        # Our statements are constants; psycopg takes %s where they say ?.
        return sql.replace("?", "%s").encode()

    def one(self, sql: str, parameters: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        return self._conn.execute(self._sql(sql), parameters).fetchone()

    def all(self, sql: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._conn.execute(self._sql(sql), parameters).fetchall()

    def run(self, sql: str, parameters: Sequence[Any] = ()) -> int:
        return self._conn.execute(self._sql(sql), parameters).rowcount

    def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self._conn.cursor() as cursor:
            cursor.executemany(self._sql(sql), rows)


_CONNECTION_LOST = ("08", "57P")
"""SQLSTATE classes of a connection that failed or a server that is shutting down."""


class PostgresEngine:
    """A PostgreSQL database shared by every worker replica, on any host.

    Writes are ``SERIALIZABLE`` transactions, run again at once after a serialization
    failure; a transaction that cannot commit within ``busy_timeout_s`` raises (as SQLite's
    busy timeout does). A lost connection is opened again on the next call; the call that
    saw it fail raises ``StateStoreUnavailable`` (whether its commit happened is unknown).
    """

    def __init__(self, url: str, *, busy_timeout_s: float, connect_timeout_s: float = 10.0) -> None:
        scheme = urlsplit(url).scheme
        url = scheme.lower() + url[len(scheme) :]  # libpq takes only lower-case schemes
        self.location = redact_url(url)
        self._url = url
        self._secrets = _secrets_of(url)
        self._busy_timeout_s = busy_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        # Closes the session of an engine dropped without close(): a weakref callback runs
        # before the connection's own finalizer even when both are garbage in one cycle
        # (a __del__ here could run after the connection's, which warns it was left open).
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self.serialization_retries = 0
        """Transactions run again after a serialization failure, since this engine opened."""
        self._open_schema()

    def __repr__(self) -> str:
        return f"PostgresEngine({self.location!r})"

    def _schema_version(self) -> tuple[int | None, int]:
        """(schema version, schema level); (None, 0) before the first start."""
        import psycopg.errors as pg_errors

        try:
            rows = self.read(_SELECT_META)
        except pg_errors.UndefinedTable:
            return None, 0
        return _meta(rows)

    def _open_schema(self) -> None:
        """Creates the tables once, however many replicas start together. The usual start
        (the schema is there) is one read. Otherwise: the version table, whose creation a
        racing replica may win (the loser's DDL fails on the catalogue's unique index and
        runs again, to find it); then, under a lock on that table that queues the replicas
        one behind another, the tables, unless the one before did it."""
        import psycopg.errors as pg_errors

        version, level = self._schema_version()
        self._check_version(version)
        if version == SCHEMA_VERSION and level >= SCHEMA_LEVEL:
            return
        self._transact(
            lambda tx: tx.run(
                'CREATE TABLE IF NOT EXISTS afr_state_meta (key TEXT COLLATE "C" PRIMARY KEY,'
                " value BIGINT NOT NULL)"
            ),
            (pg_errors.UniqueViolation, pg_errors.DuplicateTable, pg_errors.DuplicateObject),
        )
        self.transact(self._create_schema)

    def _check_version(self, version: int | None) -> None:
        if version is not None and version > SCHEMA_VERSION:
            raise StateSchemaTooNew(
                f"{self.location} was written by a newer afr (state schema {version}); upgrade afr"
            )

    def _create_schema(self, tx: Tx) -> None:
        # Before any query: a serializable transaction's snapshot is taken at its first
        # query, so once the lock is ours, this one sees what the replica before it wrote.
        tx.run("LOCK TABLE afr_state_meta IN SHARE ROW EXCLUSIVE MODE")
        version, level = _meta(tx.all(_SELECT_META))
        self._check_version(version)
        if version == SCHEMA_VERSION and level >= SCHEMA_LEVEL:
            return
        for statement in _schema('TEXT COLLATE "C"'):
            tx.run(statement)
        tx.run_many(
            "INSERT INTO afr_state_meta (key, value) VALUES (?, ?)"
            " ON CONFLICT (key) DO UPDATE SET value = greatest(afr_state_meta.value, excluded.value)",
            [("schema_version", SCHEMA_VERSION), ("schema_level", SCHEMA_LEVEL)],
        )

    def _scrub(self, message: str) -> str:
        for secret in self._secrets:
            message = message.replace(secret, "***")
        return message

    def _busy(self, exc: BaseException) -> StateStoreUnavailable:
        """Contention that outlasted ``busy_timeout_s``: as unavailable (503), said why."""
        reason = self._scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else "")
        return StateStoreUnavailable(
            f"the state store at {self.location} is busy: a write could not complete in"
            f" {self._busy_timeout_s:g} s ({reason or type(exc).__name__})"
        )

    def _unavailable(self, exc: BaseException) -> StateStoreUnavailable:
        reason = self._scrub(str(exc).strip()) or type(exc).__name__
        return StateStoreUnavailable(f"the state store at {self.location} is unavailable: {reason}")

    def _connection(self) -> psycopg.Connection[tuple[Any, ...]]:
        import psycopg

        if self._conn is not None:
            if not self._conn.closed and not self._conn.broken:
                return self._conn
            self._drop_connection()
        conn: psycopg.Connection[tuple[Any, ...]] | None = None
        try:
            conn = psycopg.connect(
                self._url,
                autocommit=True,  # reads are single statements; writes open a transaction
                connect_timeout=max(1, round(self._connect_timeout_s)),
                application_name="afr-worker",
            )
            conn.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
            # A row lock held by a stuck session fails the write instead of hanging it.
            conn.execute(
                "SELECT set_config('lock_timeout', %s, false)",
                (f"{round(self._busy_timeout_s * 1000)}ms",),
            )
        except psycopg.Error as exc:
            if conn is not None:
                conn.close()
            raise self._unavailable(exc) from None
        self._conn = conn
        self._finalizer = weakref.finalize(self, conn.close)
        return conn

    def _drop_connection(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # closes the connection, once
            self._finalizer = None
        elif self._conn is not None:
            self._conn.close()
        self._conn = None

    def _lost(self, exc: Exception) -> bool:
        import psycopg

        if isinstance(exc, psycopg.InterfaceError) or self._conn is None or self._conn.closed:
            return True
        state = getattr(exc, "sqlstate", None)
        return state is None or state.startswith(_CONNECTION_LOST)

    def transact(self, body: Callable[[Tx], T]) -> T:
        return self._transact(body, ())

    def _transact(self, body: Callable[[Tx], T], also_retry: tuple[type[Exception], ...]) -> T:
        import psycopg
        import psycopg.errors as pg_errors

        retry: tuple[type[Exception], ...] = (
            pg_errors.SerializationFailure,
            pg_errors.DeadlockDetected,
            *also_retry,
        )
        deadline = time.monotonic() + self._busy_timeout_s
        reconnected = False
        with self._lock:
            while True:
                conn = self._connection()
                committing = False
                try:
                    with conn.transaction():  # BEGIN ISOLATION LEVEL SERIALIZABLE
                        result = body(_PostgresTx(conn))
                        committing = True  # leaving the block sends COMMIT
                    return result
                except retry as exc:
                    if time.monotonic() >= deadline:
                        raise self._busy(exc) from None
                    self.serialization_retries += 1
                    # Jittered, growing pause: contenders that abort each other spread out.
                    time.sleep(random.uniform(0, min(0.05, 0.001 * 2**self.serialization_retries)))
                except pg_errors.LockNotAvailable as exc:  # lock_timeout: a stuck session
                    raise self._busy(exc) from None
                except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                    if not self._lost(exc):
                        raise
                    # Never used again, even when psycopg did not mark it broken (a command
                    # left in progress by a failed rollback): its state is unknown.
                    self._drop_connection()
                    if committing or reconnected:
                        # Lost at COMMIT, its outcome unknown; or lost again right away.
                        raise self._unavailable(exc) from None
                    # Lost before COMMIT (a connection the server closed while idle, say):
                    # nothing was committed, so the transaction runs again, once, anew.
                    reconnected = True

    def read(self, sql: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        with self._lock:
            for attempt in (1, 2):  # a read on a connection lost while idle runs again, once
                conn = self._connection()
                try:
                    return _PostgresTx(conn).all(sql, parameters)
                except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                    if not self._lost(exc):
                        raise
                    self._drop_connection()  # as in _transact: never used again
                    if attempt == 2:
                        raise self._unavailable(exc) from None
            raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            self._drop_connection()
