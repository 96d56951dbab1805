"""Projects and API keys.

A key is shown once, at creation; only its SHA-256 digest and last four characters are
stored (SQLite under the data directory: small, and readable by ``afr keys`` while the
collector runs, which the single-process embedded ClickHouse would not allow). A request's
key is hashed, looked up by digest, and compared in constant time. Keys are never logged or
echoed: errors say only that the key is missing or invalid.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from collector.errors import Unauthenticated

__all__ = [
    "DEFAULT_PROJECT",
    "Authenticator",
    "CreatedSqlUser",
    "KeyInfo",
    "KeyStore",
    "SqlUserInfo",
    "SqlUserStore",
]

logger = logging.getLogger("afr.collector.auth")

DEFAULT_PROJECT = "default"
KEY_PREFIX = "afr_"
_CACHE_TTL_S = 5.0


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class KeyInfo:
    key_id: str
    project: str
    last4: str
    created_at: str
    revoked_at: str | None


class _SqliteFile:
    """The keys' SQLite file (0600, its directory 0700): a connection per thread, and the
    table ``DDL`` made on first use."""

    DDL = ""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._path = path
        self._local = threading.local()
        with self._connect() as db:
            db.execute(self.DDL)
        path.chmod(0o600)

    def _connect(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "db", None)
        if connection is None:
            connection = sqlite3.connect(self._path, timeout=5, isolation_level=None)
            self._local.db = connection
        return connection


class KeyStore(_SqliteFile):
    DDL = (
        "CREATE TABLE IF NOT EXISTS api_keys (digest TEXT PRIMARY KEY, project TEXT NOT NULL,"
        " last4 TEXT NOT NULL, created_at TEXT NOT NULL, revoked_at TEXT)"
    )

    def create(self, project: str) -> str:
        """A new key for ``project``; the only time the clear key exists."""
        if (
            not project
            or len(project) > 128
            or not project.replace("-", "").replace("_", "").isalnum()
        ):
            raise ValueError("project names are 1-128 letters, digits, '-' or '_'")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        now = datetime.now(UTC).isoformat(timespec="seconds")
        self._connect().execute(
            "INSERT INTO api_keys (digest, project, last4, created_at) VALUES (?, ?, ?, ?)",
            (digest(key), project, key[-4:], now),
        )
        return key

    def list(self) -> list[KeyInfo]:
        rows = self._connect().execute(
            "SELECT digest, project, last4, created_at, revoked_at FROM api_keys ORDER BY created_at"
        )
        return [KeyInfo(d[:12], p, l4, c, r) for d, p, l4, c, r in rows]

    def revoke(self, key_id: str) -> bool:
        """Revokes the key whose id (the start of its digest, as listed) is ``key_id``."""
        if len(key_id) < 8:
            return False
        now = datetime.now(UTC).isoformat(timespec="seconds")
        cursor = self._connect().execute(
            "UPDATE api_keys SET revoked_at = ? WHERE substr(digest, 1, ?) = ? AND revoked_at IS NULL",
            (now, len(key_id), key_id),
        )
        return cursor.rowcount > 0

    def project_for(self, key_digest: str) -> str | None:
        row = (
            self._connect()
            .execute(
                "SELECT digest, project FROM api_keys WHERE digest = ? AND revoked_at IS NULL",
                (key_digest,),
            )
            .fetchone()
        )
        if row is None or not hmac.compare_digest(row[0], key_digest):
            return None
        return str(row[1])


class Authenticator:
    """Turns an ``authorization`` header value into a project, or raises Unauthenticated."""

    def __init__(self, keys: KeyStore | None) -> None:
        self._keys = keys
        self._cache: dict[str, tuple[str, float]] = {}
        if keys is None:
            logger.warning(
                "authentication is OFF: every request is stored as project %r", DEFAULT_PROJECT
            )

    @property
    def enabled(self) -> bool:
        return self._keys is not None

    def authenticate(self, authorization: str | None) -> str:
        if self._keys is None:
            return DEFAULT_PROJECT
        if not authorization:
            raise Unauthenticated("missing API key: send 'authorization: Bearer <key>'")
        scheme, _, key = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthenticated("malformed authorization header: expected 'Bearer <key>'")
        key_digest = digest(key.strip())
        now = time.monotonic()
        cached = self._cache.get(key_digest)
        if cached is not None and cached[1] > now:
            return cached[0]
        project = self._keys.project_for(key_digest)
        if project is None:
            raise Unauthenticated("invalid API key")
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[key_digest] = (project, now + _CACHE_TTL_S)
        return project


SQL_PASSWORD_PREFIX = "afrsql_"  # noqa: S105 - a prefix that tells the password's kind, not a secret
_SQL_USER = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_SQL_PROJECT = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


@dataclass(frozen=True)
class SqlUserInfo:
    user: str
    project: str
    last4: str
    created_at: str
    revoked_at: str | None


@dataclass(frozen=True)
class CreatedSqlUser:
    user: str
    project: str
    password: str
    """The only time it exists in the clear: shown once, then only its digest is kept."""
    password_sha256: str


class SqlUserStore(_SqliteFile):
    """SQL credentials bound to one project (``afr sql-users``): a user name, the SHA-256 of a
    high-entropy password, the project, in the keys' SQLite file. Every query of such a user
    sees only its project's rows (collector/sqlapi/tenancy.py on the embedded store, row
    policies on a ClickHouse server)."""

    DDL = (
        "CREATE TABLE IF NOT EXISTS sql_users (user TEXT PRIMARY KEY, digest TEXT NOT NULL,"
        " project TEXT NOT NULL, last4 TEXT NOT NULL, created_at TEXT NOT NULL,"
        " revoked_at TEXT)"
    )

    def create(
        self, project: str, user: str | None = None, *, replace: bool = False
    ) -> CreatedSqlUser:
        """A new credential for ``project``. ``user`` defaults to ``<project>_<8 hex>``; with
        ``replace`` a credential of that name is replaced (its old password stops working)."""
        _check_project(project)
        name = user or f"{project.replace('-', '_')}_{secrets.token_hex(4)}"
        if not _SQL_USER.match(name):
            raise ValueError(
                "SQL user names start with a letter, then up to 63 letters, digits, '-' or '_'"
            )
        password = SQL_PASSWORD_PREFIX + secrets.token_urlsafe(32)
        now = datetime.now(UTC).isoformat(timespec="seconds")
        db = self._connect()
        existing = db.execute("SELECT project FROM sql_users WHERE user = ?", (name,)).fetchone()
        if existing is not None and not replace:
            raise ValueError(f"the SQL user {name!r} exists already (revoke it, or pick a name)")
        db.execute(
            "INSERT OR REPLACE INTO sql_users (user, digest, project, last4, created_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (name, digest(password), project, password[-4:], now),
        )
        return CreatedSqlUser(name, project, password, digest(password))

    def list(self) -> list[SqlUserInfo]:
        rows = self._connect().execute(
            "SELECT user, project, last4, created_at, revoked_at FROM sql_users ORDER BY created_at"
        )
        return [SqlUserInfo(u, p, l4, c, r) for u, p, l4, c, r in rows]

    def revoke(self, user: str) -> bool:
        now = datetime.now(UTC).isoformat(timespec="seconds")
        cursor = self._connect().execute(
            "UPDATE sql_users SET revoked_at = ? WHERE user = ? AND revoked_at IS NULL", (now, user)
        )
        return cursor.rowcount > 0

    def project_for(self, user: str, password: str) -> str | None:
        """The project of an active credential whose password is ``password``; None otherwise
        (the digests are compared in constant time, also when the user is unknown)."""
        row = (
            self._connect()
            .execute(
                "SELECT digest, project FROM sql_users WHERE user = ? AND revoked_at IS NULL",
                (user,),
            )
            .fetchone()
        )
        stored = row[0] if row is not None else "0" * 64
        matches = hmac.compare_digest(stored, digest(password))
        return str(row[1]) if row is not None and matches else None


def _check_project(project: str) -> None:
    if not _SQL_PROJECT.match(project):
        raise ValueError(
            "SQL credentials are for projects named with 1-128 ASCII letters, digits, '-' or '_'"
        )
