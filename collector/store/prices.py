"""The store's ``model_prices`` table: the price of every model the store holds (ADR 39).

SQL prices runs from this table (the ``run_summary`` view, the dashboards, SQL users), and
SQL cannot ask the price database, whose models match by pattern (``gpt-4o-2024-08-06`` is
``gpt-4o``). So the collector writes a row for each model it has seen: at start, the
overrides (``AFR_MODEL_PRICES``) and every model of the store's model calls; then each new
model the moment a request brings it, off the ingest path. A model no price knows gets no
row: SQL shows its calls as unpriced.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from afr_common.prices import PriceBook, Rates

__all__ = ["ModelPrices"]

logger = logging.getLogger("afr.collector.prices")


class _PriceStore(Protocol):
    def set_model_prices(self, prices: Mapping[str, Rates]) -> None: ...

    def add_model_prices(self, prices: Mapping[str, Rates]) -> None: ...

    def stored_models(self, timeout_s: float = ...) -> list[str]: ...


class ModelPrices:
    """Keeps ``model_prices`` pricing every model seen. ``store`` None (a store that is not
    ClickHouse's, in tests): the table is left alone."""

    def __init__(self, store: _PriceStore | None, book: PriceBook) -> None:
        self._store = store
        self.book = book
        self._known: set[str] = set()
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def load(self) -> None:
        """Rewrites the table: the overrides and the prices of the store's models."""
        if self._store is None:
            return
        try:
            models = self._store.stored_models()
        except Exception as exc:  # a huge store timed out: new models still get their row
            logger.warning("could not list the store's models to price them: %s", exc)
            models = []
        self._store.set_model_prices(self.book.table(models))
        with self._lock:
            self._known.update(models)
            self._known.update(self.book.overrides)

    def saw(self, models: Iterable[str]) -> None:
        """Models of model calls just accepted: a row for each one priced and new. Returns
        at once; the insert runs on a thread of its own."""
        if self._store is None:
            return
        with self._lock:
            new = [model for model in models if model not in self._known]
            if not new:
                return
            self._known.update(new)
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="afr-prices")
            self._executor.submit(self._add, new)

    def _add(self, models: list[str]) -> None:
        assert self._store is not None
        table = {model: rates for model in models if (rates := self.book.rates(model))}
        try:
            self._store.add_model_prices(table)
        except Exception as exc:  # the store is down: the next request with them retries
            logger.warning("could not store the prices of %d models: %s", len(table), exc)
            with self._lock:
                self._known.difference_update(models)

    def flush(self) -> None:
        """Waits for the inserts submitted so far (tests, shutdown)."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
