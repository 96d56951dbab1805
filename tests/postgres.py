"""A throwaway PostgreSQL server for tests: ``initdb`` in a temporary directory, started on a
free loopback port with password authentication, stopped and deleted at the end.

PostgreSQL refuses to run as root, and tests here run as root: the cluster then belongs to
an unprivileged user (``postgres`` where the Debian package made one, else ``nobody``) and
its programs run through ``setpriv``. The server is a child of the test process and dies
with it, however that ends. Durability is off (``fsync``, full-page writes): a test's
database is thrown away with the cluster.

``postgres_server`` is session-scoped (one server, ~2 s to create and start); each test gets
a fresh database from ``PostgresServer.create_database``. Skipped, with the reason, only when
the PostgreSQL binaries are not installed (``scripts/system-deps.sh`` installs them).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.waiting import wait_until

__all__ = ["PostgresServer", "find_postgres_bin", "postgres_server", "running_postgres"]

_SEARCH = [Path("/usr/local/bin"), *sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)]
SUPERUSER = "afr_test"
_INITDB = ["--username", SUPERUSER, "--auth", "scram-sha-256", "--encoding", "UTF8"]
_INITDB += ["--no-locale", "--no-sync"]
_SETTINGS = [
    arg
    for setting in (
        "listen_addresses=127.0.0.1",
        "fsync=off",
        "full_page_writes=off",
        "synchronous_commit=off",
        "max_connections=200",
    )
    for arg in ("-c", setting)
]


def find_postgres_bin() -> Path | None:
    """The directory holding ``initdb`` and ``postgres``: on PATH, /usr/local/bin, or the
    newest /usr/lib/postgresql/<version>/bin (Debian's package keeps them off PATH)."""
    found = [shutil.which("initdb")] + [str(d / "initdb") for d in _SEARCH]
    for initdb in found:
        if initdb is None or not Path(initdb).exists():
            continue
        directory = Path(initdb).resolve().parent  # a link in /usr/local/bin: its target's
        if (directory / "postgres").exists():
            return directory
    return None


@dataclass
class PostgresServer:
    host: str
    port: int
    user: str
    password: str
    root: Path

    def url(self, database: str = "postgres", *, password: str | None = None) -> str:
        secret = self.password if password is None else password
        return f"postgresql://{self.user}:{secret}@{self.host}:{self.port}/{database}"

    def create_database(self) -> str:
        """A new, empty database; its URL."""
        import psycopg

        name = "t_" + secrets.token_hex(6)
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} STRATEGY FILE_COPY".encode())
        return self.url(name)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Runner:
    """Runs PostgreSQL's programs as the cluster's owner, through ``setpriv`` (util-linux):
    it drops root and sets the parent-death signal, so a server started by a test session
    that is killed (even by SIGKILL) shuts down with it instead of staying behind."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.user: str | None = None
        if os.geteuid() == 0:
            names = {p.pw_name for p in pwd.getpwall()}
            self.user = "postgres" if "postgres" in names else "nobody"
        self.setpriv = shutil.which("setpriv")

    def own(self, path: Path) -> None:
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def command(self, program: str, *args: str) -> list[str]:
        command = [str(self.bin_dir / program), *args]
        if self.setpriv is None:
            if self.user is not None:
                raise RuntimeError("PostgreSQL cannot run as root and setpriv is missing")
            return command
        prefix = [self.setpriv, "--pdeathsig", "INT"]  # SIGINT: a fast shutdown
        if self.user is not None:
            prefix += ["--reuid", self.user, "--regid", self.user, "--clear-groups"]
        return [*prefix, "--", *command]


def _ready(data: Path) -> bool:
    """What ``pg_ctl -w`` waits for: the postmaster's status line says it accepts connections."""
    try:
        lines = (data / "postmaster.pid").read_text().splitlines()
    except OSError:
        return False
    return len(lines) >= 8 and lines[7].strip() == "ready"


def _start(
    run: _Runner, data: Path, sockets: Path, log: Path
) -> tuple[subprocess.Popen[bytes], int]:
    for _ in range(5):  # a port found free may be taken before the server binds it
        port = _free_port()
        with log.open("ab") as sink:
            server = subprocess.Popen(
                run.command(
                    "postgres", "-D", str(data), "-p", str(port), "-k", str(sockets), *_SETTINGS
                ),
                stdout=sink,
                stderr=sink,
                cwd=data.parent,
            )

        def settled(server: subprocess.Popen[bytes] = server) -> bool:
            return server.poll() is not None or _ready(data)  # exited: its port taken

        # Polling its status file, as pg_ctl does; not settled in time: stopped, tried again.
        with contextlib.suppress(AssertionError):
            wait_until(settled, timeout_s=60, what="PostgreSQL to start or exit")
        if server.poll() is None and _ready(data):
            return server, port
        _stop(server)
    raise RuntimeError(f"PostgreSQL did not start:\n{log.read_text()[-2000:]}")


def _stop(server: subprocess.Popen[bytes]) -> None:
    for sig, wait_s in ((signal.SIGINT, 30.0), (signal.SIGQUIT, 10.0), (signal.SIGKILL, 10.0)):
        if server.poll() is not None:
            return
        server.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(wait_s)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_abandoned_clusters() -> None:
    """Deletes the directories left by test sessions that were killed before they could
    (their servers died with them): those whose session's pid is gone."""
    for root in Path(tempfile.gettempdir()).glob("afr-pg-*"):
        try:
            session = int((root / "session.pid").read_text())
        except (OSError, ValueError):
            continue  # being set up this instant, or not ours
        if not _alive(session):
            shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def running_postgres(bin_dir: Path) -> Iterator[PostgresServer]:
    """A PostgreSQL server for the duration of the block; stopped (and its files deleted)
    on the way out, whatever happened inside."""
    _remove_abandoned_clusters()
    run = _Runner(bin_dir)
    root = Path(tempfile.mkdtemp(prefix="afr-pg-"))
    (root / "session.pid").write_text(str(os.getpid()))
    data, sockets = root / "data", root / "sockets"
    password = secrets.token_urlsafe(12)
    server: subprocess.Popen[bytes] | None = None
    try:
        sockets.mkdir()
        (root / "pwfile").write_text(password + "\n")
        for path in (root, sockets, root / "pwfile"):
            run.own(path)
        initdb = subprocess.run(
            run.command(
                "initdb", "--pgdata", str(data), "--pwfile", str(root / "pwfile"), *_INITDB
            ),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=root,
        )
        if initdb.returncode != 0:
            raise RuntimeError(f"initdb failed: {initdb.stderr or initdb.stdout}")
        server, port = _start(run, data, sockets, root / "log")
        yield PostgresServer("127.0.0.1", port, SUPERUSER, password, root)
    finally:
        if server is not None:
            _stop(server)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        pytest.skip(
            "PostgreSQL is not installed (no initdb and postgres on PATH, in /usr/local/bin or "
            "/usr/lib/postgresql/*/bin): run scripts/system-deps.sh"
        )
    with running_postgres(bin_dir) as server:
        yield server
