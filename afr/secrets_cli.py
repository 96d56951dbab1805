"""``afr secrets init DIR``: a deployment's secrets, generated once into a directory.

Each secret is a file named like the variable that reads it (``AFR_CLICKHOUSE_PASSWORD``,
``AFR_WORKER_COLLECTOR_KEY``...), mode 0600 in a 0700 directory: the collector and the worker
read them through their ``secrets_dir`` setting (``AFR_SECRETS_DIR``,
``AFR_WORKER_SECRETS_DIR``), as pydantic-settings reads a secrets directory. Run again, it
keeps every secret it finds and creates only the missing ones, so it can run on every start
(deploy/compose's ``secrets`` service does). Values are never printed, only the names and
whether each was created or kept (the project key's last four characters).

Stdlib only at import: the parser is built for every ``afr`` command.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from xml.sax.saxutils import escape

__all__ = [
    "CLICKHOUSE_PASSWORD",
    "COLLECTOR_KEY",
    "GRAFANA_ADMIN_PASSWORD",
    "GRAFANA_CLICKHOUSE_PASSWORD",
    "REDACTION_KEY",
    "WEBHOOK_SECRET",
    "add_secrets_parser",
    "clickhouse_users_xml",
    "init_secrets",
    "run_command",
]

# File names: the variable each one fills (pydantic-settings matches them case-insensitively).
CLICKHOUSE_PASSWORD = "AFR_CLICKHOUSE_PASSWORD"  # noqa: S105 - a file name
"""The collector's ClickHouse user's password (the store's owner: DDL and inserts)."""
REDACTION_KEY = "AFR_REDACTION_KEY"
"""HMAC key of the collector's pseudonyms."""
COLLECTOR_KEY = "AFR_WORKER_COLLECTOR_KEY"
"""A project API key (``afr keys``): the worker's, and the one to give an exporter."""
WEBHOOK_SECRET = "AFR_WORKER_WEBHOOK_SECRET"  # noqa: S105 - a file name
"""Standard Webhooks secret signing the worker's hooks."""
GRAFANA_CLICKHOUSE_PASSWORD = "grafana_clickhouse_password"  # noqa: S105 - a file name
"""The password of Grafana's read-only ClickHouse user (the SQL credential)."""
GRAFANA_ADMIN_PASSWORD = "grafana_admin_password"  # noqa: S105 - a file name
"""Grafana's ``admin`` password (``GF_SECURITY_ADMIN_PASSWORD__FILE``)."""

CLICKHOUSE_WRITER = "afr"
CLICKHOUSE_READER = "grafana"
_REDACTION_KEY_FILE = "redaction.key"  # collector/privacy.py's, in the data directory
_LOCAL_KEY_FILE = "local-project.key"  # afr/local.py's


def _token() -> str:
    return secrets.token_urlsafe(32)


def _redaction_key() -> str:
    return secrets.token_hex(32)  # the form the collector generates itself


def _webhook_secret() -> str:
    from replay_worker.hooks.signature import generate_secret

    return generate_secret()


GENERATED: dict[str, Callable[[], str]] = {
    CLICKHOUSE_PASSWORD: _token,
    REDACTION_KEY: _redaction_key,
    WEBHOOK_SECRET: _webhook_secret,
    GRAFANA_CLICKHOUSE_PASSWORD: _token,
    GRAFANA_ADMIN_PASSWORD: _token,
}


def _read(path: Path) -> str | None:
    try:
        value = path.read_text().strip()
    except FileNotFoundError:
        return None
    return value or None


def _write(path: Path, value: str, *, mode: int = 0o600) -> None:
    """Writes ``value`` whole or not at all (a temporary file renamed over ``path``)."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(value + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)  # whatever the umask took away
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _ensure(directory: Path, name: str, make: Callable[[], str], seed: Path | None) -> bool:
    """Keeps the secret ``name`` if present; else writes ``seed``'s content (a secret the
    collector generated before there was a secrets directory) or a new one. True: created."""
    path = directory / name
    if _read(path) is not None:
        if path.stat().st_mode & 0o077:  # never chmod what is right: it may be read-only
            path.chmod(0o600)
        return False
    _write(path, (_read(seed) if seed is not None else None) or make())
    return True


def _ensure_project_key(directory: Path, data_dir: Path, project: str) -> tuple[str, bool]:
    """The project key in ``directory``, created in the collector's key store
    (``<data_dir>/keys.sqlite``) unless the one there is still an active key of ``project``
    (a key whose store was lost, or that was revoked, is replaced)."""
    from collector.auth import KeyStore, digest

    keys = KeyStore(data_dir / "keys.sqlite")
    path = directory / COLLECTOR_KEY
    key = _read(path)
    created = key is None or keys.project_for(digest(key)) != project
    if created:
        key = keys.create(project)
        _write(path, key)
    assert key is not None
    local = data_dir / _LOCAL_KEY_FILE
    if project == "local" and _read(local) is None:
        _write(local, key)  # so `afr up` on this data dir makes no second key
    return key, created


def clickhouse_users_xml(writer_password: str, reader_password: str) -> str:
    """ClickHouse ``users.d`` configuration for the two users, holding only the passwords'
    SHA-256: ``afr``, the store's owner (the collector: DDL and inserts), and ``grafana``,
    read-only (``readonly=1``; the Grafana plugin sets ``max_execution_time`` on every
    query, so that one setting stays changeable). The ``default`` user, passwordless in the
    image, is confined to the container itself."""

    def sha256(value: str) -> str:
        return hashlib.sha256(value.encode()).hexdigest()

    return f"""<!-- Written by `afr secrets init`: the passwords' SHA-256 only, never a password. -->
<clickhouse>
  <profiles>
    <afr_readonly>
      <readonly>1</readonly>
      <constraints>
        <max_execution_time><changeable_in_readonly/></max_execution_time>
      </constraints>
    </afr_readonly>
  </profiles>
  <users>
    <default>
      <networks replace="replace"><ip>::1</ip><ip>127.0.0.1</ip></networks>
    </default>
    <{CLICKHOUSE_WRITER}>
      <password_sha256_hex>{escape(sha256(writer_password))}</password_sha256_hex>
      <networks><ip>::/0</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </{CLICKHOUSE_WRITER}>
    <{CLICKHOUSE_READER}>
      <password_sha256_hex>{escape(sha256(reader_password))}</password_sha256_hex>
      <networks><ip>::/0</ip></networks>
      <profile>afr_readonly</profile>
      <quota>default</quota>
    </{CLICKHOUSE_READER}>
  </users>
</clickhouse>
"""


def init_secrets(
    directory: Path,
    *,
    data_dir: Path | None = None,
    project: str = "local",
    clickhouse_users: Path | None = None,
) -> dict[str, str]:
    """Creates the missing secrets in ``directory``; returns ``{name: "created" | "kept"}``.

    With ``data_dir`` (the collector's), also the project key, created in its key store, and
    a redaction key the collector generated there before is carried over rather than
    replaced (a new one would give every secret new pseudonyms). With ``clickhouse_users``,
    writes the ClickHouse users file for the current passwords.
    """
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.chmod(0o700)
    outcome: dict[str, str] = {}
    for name, make in GENERATED.items():
        seed = data_dir / _REDACTION_KEY_FILE if data_dir and name == REDACTION_KEY else None
        outcome[name] = "created" if _ensure(directory, name, make, seed) else "kept"
    if data_dir is not None:
        key, created = _ensure_project_key(directory, data_dir, project)
        outcome[COLLECTOR_KEY] = f"{'created' if created else 'kept'} (...{key[-4:]})"
    if clickhouse_users is not None:
        writer = _read(directory / CLICKHOUSE_PASSWORD)
        reader = _read(directory / GRAFANA_CLICKHOUSE_PASSWORD)
        assert writer is not None
        assert reader is not None
        users = clickhouse_users_xml(writer, reader).rstrip("\n")
        if _read(clickhouse_users) == users:
            outcome[str(clickhouse_users)] = "kept"
        else:
            clickhouse_users.parent.mkdir(parents=True, exist_ok=True)
            # Hashes only, and ClickHouse reads it as another user: readable, not a secret.
            _write(clickhouse_users, users, mode=0o644)
            outcome[str(clickhouse_users)] = "written"
    return outcome


def add_secrets_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    secrets_parser = commands.add_parser("secrets", help="a deployment's generated secrets")
    secrets_commands = secrets_parser.add_subparsers(dest="secrets_command", required=True)
    init = secrets_commands.add_parser(
        "init",
        help="create the missing secrets in a directory (keeps existing ones)",
        description="Writes each secret as a file named like the variable reading it "
        "(mode 0600): the ClickHouse passwords, the redaction key, the webhook secret, "
        "Grafana's admin password and, with --data-dir, a project API key. Existing secrets "
        "are kept; values are never printed.",
    )
    init.add_argument("directory", type=Path, help="the secrets directory")
    init.add_argument(
        "--data-dir",
        type=Path,
        help="the collector's data directory: create the project key in its key store",
    )
    init.add_argument("--project", default="local", help="the key's project (default local)")
    init.add_argument(
        "--clickhouse-users",
        type=Path,
        metavar="FILE",
        help="also write ClickHouse's users.d file for the two users (password hashes only)",
    )
    init.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    try:
        outcome = init_secrets(
            args.directory,
            data_dir=args.data_dir,
            project=args.project,
            clickhouse_users=args.clickhouse_users,
        )
    except (OSError, ValueError) as exc:
        print(f"afr secrets init: {exc}", file=sys.stderr)
        return 2
    for name, what in outcome.items():
        print(f"{name}: {what}")
    return 0
