"""Times as ``afr runs`` takes them (``1h``, ``2d``, ``now``, ISO, unix seconds) and as the
read API takes them (unix seconds with a fraction)."""

from __future__ import annotations

import re
from datetime import datetime

__all__ = ["NS_PER_S", "api_time", "parse_time"]

NS_PER_S = 1_000_000_000


_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_RELATIVE = re.compile(r"(?:\d+(?:\.\d+)?[smhdw])+")
_RELATIVE_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_time(text: str, now_s: float) -> float:
    """Unix seconds for ``1h``/``2d``/``1h30m`` ago, ``now``, an ISO time (local when it names
    no zone) or unix seconds."""
    value = text.strip().lower()
    if value == "now":
        return now_s
    if _RELATIVE.fullmatch(value):
        ago = sum(float(n) * _UNITS_S[unit] for n, unit in _RELATIVE_PART.findall(value))
        return now_s - ago
    try:
        number = float(value)
    except ValueError:
        pass
    else:
        return number / NS_PER_S if number > 1e12 else number
    try:
        moment = datetime.fromisoformat(text.strip())
        return moment.astimezone().timestamp() if moment.tzinfo is None else moment.timestamp()
    except (ValueError, OverflowError, OSError):
        raise ValueError(
            "expected a time like 1h, 2d, 30m, now, or an ISO time like 2026-12-01T10:00"
        ) from None


def api_time(seconds: float) -> str:
    return f"{seconds:.6f}"
