"""Cost is bounded before it is spent (DESIGN.md decision 9).

Every model call of the worker goes through ``LedgerModel``: it reserves the worst-case cost
of the request (input at one token per character, output at the call's ``max_tokens``,
priced from the table) before sending, settles to the reported usage after, charges the
full reservation when the outcome is unknown (an error, a missing usage), and refuses —
before any request leaves — once the job's or the day's budget would be exceeded.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from agents import Model, ModelResponse, ModelSettings, ModelTracing

__all__ = ["BudgetExceeded", "DayBudget", "JobLedger", "LedgerModel"]


class BudgetExceeded(Exception):
    """The request was not sent: its worst-case cost does not fit the budget left."""


@dataclass
class DayBudget:
    """Spending across all jobs of a UTC day, shared by the worker's jobs."""

    limit_usd: float
    spent_usd: float = 0.0
    day: dt.date = field(default_factory=lambda: dt.datetime.now(dt.UTC).date())
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _roll(self) -> None:
        today = dt.datetime.now(dt.UTC).date()
        if today != self.day:
            self.day, self.spent_usd = today, 0.0


@dataclass
class JobLedger:
    limit_usd: float
    day: DayBudget
    prices_per_mtok: dict[str, tuple[float, float]]
    reserved_usd: float = 0.0
    spent_usd: float = 0.0
    requests: int = 0

    def price(self, model: str) -> tuple[float, float]:
        return self.prices_per_mtok.get(model) or self.prices_per_mtok["*"]

    def reserve(self, model: str, input_tokens: int, output_tokens: int) -> float:
        price_in, price_out = self.price(model)
        cost = (input_tokens * price_in + output_tokens * price_out) / 1e6
        with self.day.lock:
            self.day._roll()
            if self.spent_usd + self.reserved_usd + cost > self.limit_usd:
                raise BudgetExceeded(
                    f"job budget ${self.limit_usd:.4f} would be exceeded by a request of up to ${cost:.4f}"
                )
            if self.day.spent_usd + cost > self.day.limit_usd:
                raise BudgetExceeded(f"day budget ${self.day.limit_usd:.2f} is spent")
            self.reserved_usd += cost
            self.day.spent_usd += cost
            self.requests += 1
        return cost

    def settle(
        self, reserved: float, model: str, input_tokens: int | None, output_tokens: int | None
    ) -> None:
        """Replaces a reservation by the real cost; unknown usage keeps the full reservation."""
        if input_tokens is None or output_tokens is None:
            actual = reserved
        else:
            price_in, price_out = self.price(model)
            actual = min(reserved, (input_tokens * price_in + output_tokens * price_out) / 1e6)
        with self.day.lock:
            self.reserved_usd -= reserved
            self.spent_usd += actual
            # Across UTC midnight the reservation was counted on the previous day: never
            # let the refund drive the new day's spend below what it really spent.
            self.day._roll()
            self.day.spent_usd = max(0.0, self.day.spent_usd + actual - reserved)


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
        reserved = self._ledger.reserve(self._model_name, request_chars, self._max_output_tokens)
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
            self._ledger.settle(reserved, self._model_name, None, None)
            raise
        usage = response.usage
        self._ledger.settle(
            reserved,
            self._model_name,
            usage.input_tokens if usage.requests else None,
            usage.output_tokens if usage.requests else None,
        )
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("replays run non-streaming")
