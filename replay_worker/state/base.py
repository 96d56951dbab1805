"""The one way the state store's parts (``jobs.py``, ``spend.py``, ``sweeps.py``) reach
their engine: every check-and-write is one transaction (``_transact``), every read one
statement (``_read``). ``state_engines.py`` says what makes a transaction atomic on each
engine and why a body may run more than once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from replay_worker.state_engines import Engine, Tx

__all__ = ["StoreBase"]

T = TypeVar("T")


class StoreBase:
    _engine: Engine

    def _transact(self, body: Callable[[Tx], T]) -> T:
        return self._engine.transact(body)

    def _read(self, sql: str, parameters: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self._engine.read(sql, parameters)

    def _write_one(self, sql: str, parameters: tuple[Any, ...]) -> bool:
        """One statement as its own transaction: True if it changed a row (the caller's
        condition held, e.g. the owner still holds the lease)."""
        return self._transact(lambda tx: tx.run(sql, parameters) == 1)
