"""Money and days as the worker counts them: integer nano-dollars, so sums of many small
charges stay exact, and the UTC day a charge belongs to. The clock is passed in everywhere
(``Clock``), so tests move time without waiting for it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

__all__ = ["Clock", "nusd", "usd", "utc_day"]

Clock = Callable[[], float]
"""Seconds since the epoch, like ``time.time`` (the default everywhere)."""


def nusd(amount_usd: float) -> int:
    """USD to integer nano-dollars (exact sums; every price table value is far coarser)."""
    return round(amount_usd * 1e9)


def usd(amount_nusd: int) -> float:
    return amount_nusd / 1e9


def utc_day(epoch_s: float) -> str:
    return dt.datetime.fromtimestamp(epoch_s, dt.UTC).date().isoformat()
