"""Claims with a lease, the one way jobs and sweeps get an owner (``jobs.py``,
``sweeps.py``): a claimed row is ``running`` under an owner and a ``lease_until`` its owner
renews; a row whose lease ran out is claimable again (its worker died), and a worker on the
same host hands back at start the rows of an owner whose process is gone.

Every statement runs inside the caller's transaction (``Tx``), so a claim, a renewal or a
release is one atomic step on either engine.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from replay_worker.state_engines import Tx

__all__ = ["Lease", "Owner", "pid_alive"]


@dataclass(frozen=True)
class Owner:
    """Who runs a claimed job: a worker process, named so that a worker on the same host can
    tell at start whether the owner is still alive."""

    worker_id: str
    host: str
    pid: int

    @classmethod
    def current(cls, token: str) -> Owner:
        host, pid = socket.gethostname(), os.getpid()
        return cls(f"{host}:{pid}:{token}", host, pid)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Lease:
    """The lease columns of one table (``owner``, ``owner_host``, ``owner_pid``,
    ``lease_until``, ``state``, ``attempts``), keyed by ``key``."""

    table: str
    key: str

    def claimable(
        self, tx: Tx, now: float, *, where: str = "", parameters: Sequence[Any] = ()
    ) -> tuple[Any, ...] | None:
        """(key, attempts, state) of the oldest row that is queued or whose lease ran out,
        among those ``where`` (an ``AND`` condition) admits."""
        return tx.one(
            f"SELECT {self.key}, attempts, state FROM {self.table} WHERE (state = 'queued'"
            f" OR (state = 'running' AND lease_until < ?)){where}"
            f" ORDER BY created_at, {self.key} LIMIT 1",
            (now, *parameters),
        )

    def take(
        self, tx: Tx, key: str, owner: Owner, now: float, lease_s: float, *, started_at: str
    ) -> None:
        """Makes ``owner`` the row's owner, one attempt more; ``started_at``: the SQL the
        column is set to (``?`` for now)."""
        tx.run(
            f"UPDATE {self.table} SET state = 'running', attempts = attempts + 1, owner = ?,"
            f" owner_host = ?, owner_pid = ?, lease_until = ?, started_at = {started_at}"
            f" WHERE {self.key} = ?",
            (owner.worker_id, owner.host, owner.pid, now + lease_s, now, key),
        )

    def held(self) -> str:
        """The condition of a write that only the row's current owner may make (``?``: the
        key, then the owner's id)."""
        return f"{self.key} = ? AND owner = ? AND state = 'running'"

    def renew(self, tx: Tx, owner: Owner, key: str, lease_until: float) -> bool:
        """Extends the lease of a row ``owner`` holds; False if it holds it no longer."""
        sql = f"UPDATE {self.table} SET lease_until = ? WHERE {self.held()}"
        return tx.run(sql, (lease_until, key, owner.worker_id)) == 1

    def orphans(self, tx: Tx, owner: Owner, alive: Callable[[int], bool]) -> list[tuple[Any, ...]]:
        """(key, attempts) of the rows left running by another worker process of this host
        that is gone. Others' rows are left to their leases: a live worker elsewhere may
        run them."""
        rows = tx.all(
            f"SELECT {self.key}, attempts, owner_pid FROM {self.table} WHERE state = 'running'"
            " AND owner_host = ? AND owner != ?",
            (owner.host, owner.worker_id),
        )
        return [(key, attempts) for key, attempts, pid in rows if pid is None or not alive(pid)]

    def requeue(self, tx: Tx, key: str) -> None:
        tx.run(
            f"UPDATE {self.table} SET state = 'queued', owner = NULL, lease_until = NULL"
            f" WHERE {self.key} = ?",
            (key,),
        )
