"""``StateStore``: the worker's state on one engine, its jobs, spend and sweeps together
(one connection per process), and ``open_state_store``, which opens it as the settings
say."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from replay_worker.settings import WorkerSettings
from replay_worker.state.jobs import DEFAULT_MAX_JOBS_KEPT, JobsStore
from replay_worker.state.spend import SpendStore
from replay_worker.state.sweeps import SweepsStore
from replay_worker.state_engines import POSTGRES_SCHEMES, Engine, PostgresEngine, SQLiteEngine

__all__ = ["StateStore", "open_state_store"]


def open_state_store(settings: WorkerSettings, **options: Any) -> StateStore:
    """The worker's state store as its settings say: the PostgreSQL database of
    ``state_url``, or the SQLite file in ``data_dir``. Every process of a worker opens its
    store here."""
    if settings.state_url is not None:
        return StateStore(settings.state_url.get_secret_value(), **options)
    return StateStore(settings.state_path, **options)


class StateStore(JobsStore, SpendStore, SweepsStore):
    """One connection per process (threads share it under a lock); every process that opens
    the same state (a SQLite path, or a ``postgresql://`` URL) shares it. Methods are
    synchronous and short: call them from a thread when on an event loop. A PostgreSQL
    server that cannot be reached raises ``StateStoreUnavailable``, at open and on any call.
    """

    def __init__(
        self,
        where: Path | str,
        *,
        max_jobs_kept: int = DEFAULT_MAX_JOBS_KEPT,
        busy_timeout_s: float = 10.0,
    ) -> None:
        self._max_jobs_kept = max_jobs_kept
        self._engine: Engine
        # As the settings check it: URL schemes are case-insensitive ("PostgreSQL://" too).
        if isinstance(where, str) and urlsplit(where).scheme.lower() in POSTGRES_SCHEMES:
            self._engine = PostgresEngine(where, busy_timeout_s=busy_timeout_s)
            self.path: Path | None = None
        else:
            self.path = Path(where)
            self._engine = SQLiteEngine(self.path, busy_timeout_s=busy_timeout_s)
        self.location = self._engine.location
        """Where the state is, safe to print: the SQLite file, or the URL without password."""

    def __repr__(self) -> str:
        return f"StateStore({self.location!r})"

    @property
    def engine(self) -> Engine:
        return self._engine

    def close(self) -> None:
        self._engine.close()
