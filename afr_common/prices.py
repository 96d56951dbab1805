"""Model prices, defined once for the store, the read API, the dashboards and the worker's
budgets (ADR 39).

The default prices are pydantic's ``genai-prices`` database, the data its wheel ships: never
fetched at run time (its ``UpdatePrices`` is never started). ``AFR_MODEL_PRICES`` (and the
worker's ``AFR_WORKER_PRICES_PER_MTOK``) override it model by model. A model neither knows is
*unpriced*: its cost is unknown, never $0.

Every figure is USD per million tokens of one kind. The token counts follow the OTel GenAI
conventions: ``input`` counts every input token, the cache reads and cache writes among
them; ``output`` counts every output token, the reasoning tokens among them. A count whose
parts exceed it (a provider that reports its cached tokens apart, as Anthropic's API does)
is taken as the uncached part alone.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any, Final

__all__ = [
    "CONSERVATIVE_RATES",
    "DATABASE",
    "UNLISTED_MODEL",
    "PriceBook",
    "Rates",
    "Tokens",
    "parse_price_table",
]

UNLISTED_MODEL: Final = "*"
"""The worker's budget entry for a model no price knows (``AFR_WORKER_PRICES_PER_MTOK``)."""
DATABASE: Final = f"genai-prices {version('genai-prices')}"
"""Where the default prices come from, as the store's ``model_prices.Source`` names it."""
OVERRIDE: Final = "AFR_MODEL_PRICES"


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per million tokens of each kind."""

    input: float
    output: float
    cache_read: float
    cache_write: float
    reasoning: float
    source: str = OVERRIDE

    @classmethod
    def parse(cls, value: Any, *, source: str = OVERRIDE) -> Rates:
        """``[input, output]`` (cache reads and writes at the input rate, reasoning at the
        output rate), ``[input, output, cache_read, cache_write]``, the same with
        ``reasoning`` last, or an object with those names (``input`` and ``output``
        required). ValueError on anything else or a negative or non-finite figure."""
        if isinstance(value, Rates):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {
                "input",
                "output",
                "cache_read",
                "cache_write",
                "reasoning",
                "source",
            }
            if unknown or "input" not in value or "output" not in value:
                raise ValueError(
                    "a price object has input and output, and optionally cache_read, "
                    f"cache_write and reasoning (got {sorted(value)})"
                )
            figures = [value["input"], value["output"]]
            figures += [value.get(k) for k in ("cache_read", "cache_write", "reasoning")]
            source = str(value.get("source") or source)
        elif isinstance(value, list | tuple) and len(value) in (2, 4, 5):
            figures = [*value, *([None] * (5 - len(value)))]
        else:
            raise ValueError(
                "a price is [input, output], [input, output, cache_read, cache_write] "
                "(optionally reasoning last) or an object with those names, USD per million "
                "tokens"
            )
        numbers: list[float | None] = []
        for figure in figures:
            if figure is None:
                numbers.append(None)
                continue
            if isinstance(figure, bool) or not isinstance(figure, int | float):
                raise ValueError(f"a price is a number of USD per million tokens, not {figure!r}")
            if not math.isfinite(figure) or figure < 0:
                raise ValueError("prices are USD per million tokens, finite and >= 0")
            numbers.append(float(figure))
        price_in, price_out, cache_read, cache_write, reasoning = numbers
        if price_in is None or price_out is None:
            raise ValueError("a price has an input and an output figure")
        return cls(
            price_in,
            price_out,
            price_in if cache_read is None else cache_read,
            price_in if cache_write is None else cache_write,
            price_out if reasoning is None else reasoning,
            source,
        )

    def cost_usd(self, tokens: Tokens) -> float:
        """The cost of ``tokens`` at these rates."""
        return (
            tokens.uncached_input * self.input
            + tokens.cache_read * self.cache_read
            + tokens.cache_write * self.cache_write
            + tokens.plain_output * self.output
            + tokens.reasoning * self.reasoning
        ) / 1e6

    def worst_case_usd(self, input_tokens: int, output_tokens: int) -> float:
        """The most ``input_tokens`` and ``output_tokens`` can cost, whichever kind each
        turns out to be (a budget's reservation)."""
        worst_in = max(self.input, self.cache_read, self.cache_write)
        worst_out = max(self.output, self.reasoning)
        return (input_tokens * worst_in + output_tokens * worst_out) / 1e6


@dataclass(frozen=True, slots=True)
class Tokens:
    """One model call's token counts (the OTel GenAI usage attributes)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0

    @property
    def uncached_input(self) -> int:
        cached = self.cache_read + self.cache_write
        return self.input - cached if self.input >= cached else self.input

    @property
    def plain_output(self) -> int:
        return self.output - self.reasoning if self.output >= self.reasoning else self.output

    @property
    def any(self) -> bool:
        return bool(self.input or self.output or self.cache_read or self.cache_write)


def parse_price_table(value: Any, *, name: str = OVERRIDE) -> dict[str, Rates]:
    """A JSON object of model -> price (``Rates.parse``), as the settings give it."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{name}: a JSON object of model name -> price")
    table: dict[str, Rates] = {}
    for model, price in value.items():
        if not isinstance(model, str):
            raise ValueError(f"{name}: model names are strings")
        try:
            table[model] = Rates.parse(price, source=name)
        except ValueError as exc:
            raise ValueError(f"{name}: {model!r}: {exc}") from None
    return table


def _figure(price: Any) -> float | None:
    if price is None:
        return None
    base = getattr(price, "base", price)  # TieredPrices: the rate below the first tier
    return float(base)


@functools.cache
def _snapshot() -> Any:
    # The package's own data (data.py), not its process-wide snapshot: UpdatePrices, if
    # anything in the process started it, replaces that one with downloaded prices.
    from genai_prices import data
    from genai_prices.data_snapshot import DataSnapshot

    return DataSnapshot(providers=data.providers, from_auto_update=False)


def database_rates(model: str, at: datetime | None = None) -> Rates | None:
    """The database's prices of ``model`` at ``at`` (now when None), or None when it does not
    know the model or prices it by no token (per request, per image)."""
    if not model:
        return None
    try:
        _, info = _snapshot().find_provider_model(model, None, None, None)
    except LookupError:
        return None
    prices = info.get_prices(at or datetime.now(UTC))
    price_in = _figure(prices.input_mtok)
    price_out = _figure(prices.output_mtok)
    if price_in is None and price_out is None:
        return None
    price_in = price_in or 0.0
    price_out = price_out or 0.0
    cache_read = _figure(prices.cache_read_mtok)
    cache_write = _figure(prices.cache_write_mtok)
    reasoning = _figure(prices.output_reasoning_mtok)
    return Rates(
        price_in,
        price_out,
        price_in if cache_read is None else cache_read,
        price_in if cache_write is None else cache_write,
        price_out if reasoning is None else reasoning,
        DATABASE,
    )


class PriceBook:
    """Prices by model: ``overrides`` first, then the database (``database=False``: the
    overrides alone). Lookups are cached: the database's prices are those of the first
    lookup of a model in this process."""

    def __init__(self, overrides: Mapping[str, Rates] | None = None, *, database: bool = True):
        self.overrides: dict[str, Rates] = dict(overrides or {})
        self._database = database
        self._cache: dict[str, Rates | None] = {}

    def rates(self, model: str) -> Rates | None:
        if model in self.overrides:
            return self.overrides[model]
        try:
            return self._cache[model]
        except KeyError:
            found = database_rates(model) if self._database else None
            self._cache[model] = found
            return found

    def cost_usd(self, model: str, tokens: Tokens) -> float | None:
        """The call's cost; 0 for a call without tokens; None when ``model`` is unpriced."""
        if not tokens.any:
            return 0.0
        rates = self.rates(model)
        return None if rates is None else rates.cost_usd(tokens)

    def table(self, models: Iterable[str] = ()) -> dict[str, Rates]:
        """The overrides and the priced ones of ``models``: what the store's ``model_prices``
        holds."""
        table = dict(self.overrides)
        for model in models:
            if model not in table and (rates := self.rates(model)) is not None:
                table[model] = rates
        return table


CONSERVATIVE_RATES: Final = Rates(10.0, 40.0, 10.0, 10.0, 40.0, UNLISTED_MODEL)
"""The worker's default budget price of a model no price knows (its ``"*"`` entry)."""
