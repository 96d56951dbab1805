"""Who asks: the SQL interface's admin credential, or a credential bound to one project.

The admin (``AFR_SQL_USER``, default ``afr``) reads every project: for operators. Its password
is ``AFR_SQL_PASSWORD`` when set, otherwise generated once into ``data_dir/sql.password``
(mode 0600, created exclusively like the local project's key). Project credentials are made
by ``afr sql-users create --project P`` (``collector.auth.SqlUserStore``: only a digest is
kept) and read that project's rows only (``tenancy``). ClickHouse clients send a credential
three ways, all accepted: HTTP Basic auth, the ``X-ClickHouse-User``/``X-ClickHouse-Key``
headers, or ``user``/``password`` URL parameters.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from collector.auth import SqlUserStore, digest
from collector.sqlapi.errors import Code, SqlError

__all__ = ["SQL_PASSWORD_FILE", "Principal", "SqlAuthenticator", "ensure_sql_password"]

_CACHE_TTL_S = 5.0
"""A revoked project credential stops working within this time (as a revoked API key)."""

SQL_PASSWORD_FILE = "sql.password"  # noqa: S105 - a file name, not a secret


def ensure_sql_password(data_dir: Path) -> SecretStr:
    """The generated password: created on first use (0600, O_EXCL), read afterwards."""
    path = data_dir / SQL_PASSWORD_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process created it between the check and the open
        else:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(24) + "\n")
    return SecretStr(path.read_text().strip())


@dataclass(frozen=True)
class Principal:
    user: str
    project: str | None
    """None: the admin credential, which reads every project."""


class SqlAuthenticator:
    def __init__(self, user: str, password: SecretStr, users: SqlUserStore | None = None) -> None:
        self._user = user.encode()
        self._password = password.get_secret_value().encode()
        self._users = users
        self._cache: dict[tuple[str, str], tuple[str, float]] = {}

    def check(self, headers: Mapping[str, str], params: Mapping[str, str]) -> Principal:
        """Returns who asks, or raises AUTHENTICATION_FAILED. As in ClickHouse, the three
        ways of sending credentials may not be mixed in one request."""
        header_user = headers.get("x-clickhouse-user")
        header_key = headers.get("x-clickhouse-key")
        authorization = headers.get("authorization")
        param_user, param_password = params.get("user"), params.get("password")
        ways = [
            header_user is not None or header_key is not None,
            authorization is not None,
            param_user is not None or param_password is not None,
        ]
        if sum(ways) > 1:
            raise SqlError(
                Code.AUTHENTICATION_FAILED,
                "Invalid authentication: it is not allowed to use Authorization HTTP header, "
                "X-ClickHouse-User/Key headers and authentication via parameters simultaneously",
            )
        if ways[0]:
            user, password = header_user or "", header_key or ""
        elif ways[1]:
            user, password = _basic(authorization or "")
        else:
            user, password = param_user or "", param_password or ""
        # Both compared, always: the time taken does not tell which one was wrong.
        user_ok = hmac.compare_digest(user.encode(), self._user)
        password_ok = hmac.compare_digest(password.encode(), self._password)
        if user_ok and password_ok:
            return Principal(user, None)
        project = None if user_ok else self._project_for(user, password)
        if project is None:
            raise SqlError(
                Code.AUTHENTICATION_FAILED,
                # Neither name nor password is echoed: a client may have swapped them.
                "Authentication failed: password is incorrect, or there is no user with such name",
            )
        return Principal(user, project)

    def _project_for(self, user: str, password: str) -> str | None:
        if self._users is None:
            return None
        key = (user, digest(password))
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is not None and cached[1] > now:
            return cached[0]
        project = self._users.project_for(user, password)
        if project is not None:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[key] = (project, now + _CACHE_TTL_S)
        return project


def _basic(header: str) -> tuple[str, str]:
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        raise SqlError(
            Code.AUTHENTICATION_FAILED, "Invalid authentication: only Basic authorization is served"
        )
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise SqlError(
            Code.AUTHENTICATION_FAILED, "Invalid authentication: bad Basic header"
        ) from None
    user, _, password = decoded.partition(":")
    return user, password
