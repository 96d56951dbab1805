"""Model prices, defined once: the worker budgets replays with them and the store prices
the tokens of every run with them (the collector writes them to the ``model_prices`` table).

USD per million tokens (input, output). ``"*"`` prices any model not listed: conservatively
for a budget (the worker), while the cost shown for a run counts listed models only."""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_PRICES_PER_MTOK", "UNLISTED_MODEL"]

UNLISTED_MODEL: Final = "*"

DEFAULT_PRICES_PER_MTOK: Final[dict[str, tuple[float, float]]] = {
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    UNLISTED_MODEL: (10.00, 40.00),
}
