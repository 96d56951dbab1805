"""The day's spend in the state store: a request's worst-case cost is reserved against the
day's limit before it is sent, then settled to its real cost (``replay_worker/ledger.py``
says why). Every process on the state counts against one budget."""

from __future__ import annotations

from dataclasses import dataclass

from replay_worker.money import usd
from replay_worker.state.base import StoreBase
from replay_worker.state_engines import Tx

__all__ = ["DaySpend", "SpendStore"]


@dataclass(frozen=True)
class DaySpend:
    day: str
    spent_usd: float
    overrun_usd: float
    requests: int


class SpendStore(StoreBase):
    def reserve(self, day: str, job_id: str | None, cost_nusd: int, day_limit_nusd: int) -> bool:
        """Counts a request's worst-case cost against the day, if it fits; atomic across every
        process on this state. A reservation counts in full until it is settled."""

        def body(tx: Tx) -> bool:
            row = tx.one("SELECT spent_nusd FROM spend WHERE day = ?", (day,))
            spent = row[0] if row else 0
            if spent + cost_nusd > day_limit_nusd:
                return False
            tx.run(
                "INSERT INTO spend (day, spent_nusd, requests) VALUES (?, ?, 1)"
                " ON CONFLICT (day) DO UPDATE SET"
                " spent_nusd = spend.spent_nusd + excluded.spent_nusd,"
                " requests = spend.requests + 1",
                (day, cost_nusd),
            )
            if job_id is not None:
                tx.run(
                    "UPDATE jobs SET cost_nusd = cost_nusd + ?, requests = requests + 1"
                    " WHERE job_id = ?",
                    (cost_nusd, job_id),
                )
            return True

        return self._transact(body)

    def settle(self, day: str, job_id: str | None, reserved_nusd: int, actual_nusd: int) -> None:
        """Replaces a reservation by the real cost on the day it was reserved, even when that
        is more: the overrun is charged and recorded, never capped."""
        delta = actual_nusd - reserved_nusd
        overrun = max(0, delta)

        def body(tx: Tx) -> None:
            tx.run(
                "INSERT INTO spend (day, spent_nusd, overrun_nusd) VALUES (?, ?, ?)"
                " ON CONFLICT (day) DO UPDATE SET"
                " spent_nusd = greatest(0, spend.spent_nusd + excluded.spent_nusd),"
                " overrun_nusd = spend.overrun_nusd + excluded.overrun_nusd",
                (day, delta, overrun),
            )
            if job_id is not None:
                tx.run(
                    "UPDATE jobs SET cost_nusd = greatest(0, cost_nusd + ?),"
                    " overrun_nusd = overrun_nusd + ? WHERE job_id = ?",
                    (delta, overrun, job_id),
                )

        self._transact(body)

    def day(self, day: str) -> DaySpend:
        rows = self._read(
            "SELECT spent_nusd, overrun_nusd, requests FROM spend WHERE day = ?", (day,)
        )
        spent, overrun, requests = rows[0] if rows else (0, 0, 0)
        return DaySpend(day, usd(spent), usd(overrun), requests)
