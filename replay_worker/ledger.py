"""Cost is bounded before it is spent (docs/architecture.md, decision 9).

Every model call of the worker goes through ``LedgerModel``: it reserves the worst-case cost
of the request (input at one token per character, output at the call's ``max_tokens``, each
at the dearest rate of its kind: cache writes can cost more than plain input) before sending,
settles to the reported usage after (cached input and reasoning output at their own rates),
charges the
full reservation when the outcome is unknown (an error, a missing usage, a replay process
that died mid-request), and refuses — before any request leaves — once the job's or the
day's budget would be exceeded. Usage above the reservation is charged in full and recorded
as an overrun, never capped.

The day's spend lives in the state store, so every job of every worker process sharing it
counts against one budget. A request is charged to the UTC day its reservation was made,
even when it settles after midnight. The clock is passed in (epoch seconds).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from agents import Model, ModelResponse, ModelSettings, ModelTracing

from afr_common.prices import (
    CONSERVATIVE_RATES,
    UNLISTED_MODEL,
    PriceBook,
    Rates,
    Tokens,
    parse_price_table,
)
from replay_worker.money import Clock, nusd, usd, utc_day
from replay_worker.state import DaySpend, StateStore

__all__ = [
    "BudgetExceeded",
    "Clock",
    "DayBudget",
    "JobLedger",
    "LedgerModel",
    "Reservation",
    "utc_day",
]


class BudgetExceeded(Exception):
    """The request was not sent: its worst-case cost does not fit the budget left."""


class DayBudget:
    """Spending across all jobs of a UTC day, shared through the state store by every worker
    process that uses it."""

    def __init__(self, store: StateStore, limit_usd: float, clock: Clock = time.time) -> None:
        self.store = store
        self.limit_usd = limit_usd
        self.clock = clock

    def today(self) -> str:
        return utc_day(self.clock())

    def spend(self, day: str | None = None) -> DaySpend:
        return self.store.day(day or self.today())


@dataclass(frozen=True)
class Reservation:
    model: str
    day: str
    cost_nusd: int

    @property
    def cost_usd(self) -> float:
        return usd(self.cost_nusd)


class JobLedger:
    """One job's model spend. The job's budget is checked here (a job runs in one process);
    the day's is checked and recorded atomically in the store, with the job's row.

    ``prices_per_mtok`` (``AFR_WORKER_PRICES_PER_MTOK``) overrides the price database (the
    collector's, ``afr_common.prices``) model by model; its ``"*"`` entry prices a model
    neither knows, conservatively (``CONSERVATIVE_RATES`` when it has none)."""

    def __init__(
        self,
        limit_usd: float,
        day: DayBudget,
        prices_per_mtok: Mapping[str, Any],
        *,
        job_id: str | None = None,
    ) -> None:
        self.limit_usd = limit_usd
        self.day = day
        table = parse_price_table(prices_per_mtok, name="AFR_WORKER_PRICES_PER_MTOK")
        self.unlisted = table.pop(UNLISTED_MODEL, CONSERVATIVE_RATES)
        self.prices = PriceBook(table)
        self.job_id = job_id
        self._charged_nusd = 0  # settled costs plus outstanding reservations in full
        self._in_flight_nusd = 0
        self._overrun_nusd = 0
        self.requests = 0

    @property
    def cost_usd(self) -> float:
        return usd(self._charged_nusd)

    @property
    def in_flight_usd(self) -> float:
        return usd(self._in_flight_nusd)

    @property
    def overrun_usd(self) -> float:
        return usd(self._overrun_nusd)

    def price(self, model: str) -> Rates:
        return self.prices.rates(model) or self.unlisted

    def cost_nusd(self, model: str, tokens: Tokens) -> int:
        return nusd(self.price(model).cost_usd(tokens))

    def reserve(self, model: str, input_tokens: int, output_tokens: int) -> Reservation:
        cost = nusd(self.price(model).worst_case_usd(input_tokens, output_tokens))
        if self._charged_nusd + cost > nusd(self.limit_usd):
            raise BudgetExceeded(
                f"job budget ${self.limit_usd:.4f} would be exceeded by a request of up to "
                f"${usd(cost):.4f}"
            )
        day = self.day.today()
        if not self.day.store.reserve(day, self.job_id, cost, nusd(self.day.limit_usd)):
            raise BudgetExceeded(f"day budget ${self.day.limit_usd:.2f} is spent")
        self._charged_nusd += cost
        self._in_flight_nusd += cost
        self.requests += 1
        return Reservation(model, day, cost)

    def settle(
        self,
        reservation: Reservation,
        input_tokens: int | None,
        output_tokens: int | None,
        *,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
    ) -> float:
        """Replaces a reservation by the real cost and returns it (USD). Unknown usage keeps
        the full reservation; usage beyond it is charged and recorded as an overrun. The
        cache and reasoning tokens are parts of the input and output tokens."""
        if input_tokens is None or output_tokens is None:
            actual = reservation.cost_nusd
        else:
            tokens = Tokens(
                input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens
            )
            actual = self.cost_nusd(reservation.model, tokens)
        self.day.store.settle(reservation.day, self.job_id, reservation.cost_nusd, actual)
        self._in_flight_nusd -= reservation.cost_nusd
        self._charged_nusd += actual - reservation.cost_nusd
        self._overrun_nusd += max(0, actual - reservation.cost_nusd)
        return usd(actual)


class LedgerModel(Model):
    """Wraps a real model: every request is reserved, bounded, and settled."""

    def __init__(
        self, inner: Model, model_name: str, ledger: JobLedger, max_output_tokens: int
    ) -> None:
        self._inner = inner
        self._model_name = model_name
        self._ledger = ledger
        self._max_output_tokens = max_output_tokens

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        bounded = model_settings.resolve(
            ModelSettings(max_tokens=self._max_output_tokens, store=False)
        )
        request_chars = len(json.dumps([system_instructions, input], default=str)) + sum(
            len(json.dumps(getattr(t, "params_json_schema", {}) or {})) for t in tools
        )
        reservation = self._ledger.reserve(self._model_name, request_chars, self._max_output_tokens)
        try:
            response = await self._inner.get_response(
                system_instructions,
                input,
                bounded,
                tools,
                output_schema,
                handoffs,
                tracing,
                *args,
                **kwargs,
            )
        except BaseException:
            self._ledger.settle(reservation, None, None)
            raise
        usage = response.usage
        if not usage.requests:
            self._ledger.settle(reservation, None, None)
            return response
        inputs, outputs = usage.input_tokens_details, usage.output_tokens_details
        self._ledger.settle(
            reservation,
            usage.input_tokens,
            usage.output_tokens,
            cache_read_tokens=getattr(inputs, "cached_tokens", 0) or 0,
            cache_write_tokens=getattr(inputs, "cache_write_tokens", 0) or 0,
            reasoning_tokens=getattr(outputs, "reasoning_tokens", 0) or 0,
        )
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("replays run non-streaming")
