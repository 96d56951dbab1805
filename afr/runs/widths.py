"""Text measured, cut, padded and wrapped in terminal cells.

Widths come from ``wcwidth`` per grapheme cluster (what a terminal draws as one): a ZWJ
family, a flag, a skin tone or a ``❤️`` with its emoji selector is two cells, a combining
accent none, CJK two; a cut never falls inside a cluster, so no half flag or orphaned
joiner is printed. ``unicodedata.east_asian_width`` measured code points one by one and got
every emoji sequence wrong (a family as eight cells, ``❤️`` as one).
"""

from __future__ import annotations

from collections.abc import Iterator

import wcwidth

from afr.runs.text import clean

__all__ = ["display_width", "pad", "truncate", "wrap"]


def _width(text: str) -> int:
    # Text here is cleaned first; "ignore" makes a stray control zero cells instead of
    # letting an escape sequence move the measured cursor.
    return int(wcwidth.width(text, control_codes="ignore"))


def _clusters(text: str) -> Iterator[tuple[str, int]]:
    """Each grapheme cluster of ``text`` with its width in cells."""
    for cluster in wcwidth.iter_graphemes(text):
        yield cluster, _width(cluster)


def display_width(text: str) -> int:
    """Cells ``text`` takes in a terminal."""
    return _width(text)


def truncate(text: str, width: int, ellipsis: str = "…") -> str:
    """``text`` in at most ``width`` columns, ending with ``ellipsis`` when cut."""
    if display_width(text) <= width:
        return text
    room = max(0, width - display_width(ellipsis))
    used, kept = 0, []
    for cluster, cells in _clusters(text):
        if used + cells > room:
            break
        kept.append(cluster)
        used += cells
    return "".join(kept) + ellipsis[: max(0, width)]


def pad(text: str, width: int) -> str:
    """``text`` followed by spaces to ``width`` columns."""
    return text + " " * max(0, width - display_width(text))


def wrap(text: str, width: int) -> list[str]:
    """Wrapped to ``width`` columns: at a space in the line's second half, else anywhere
    (bodies are JSON and ids as often as prose)."""
    lines: list[str] = []
    for raw in text.split("\n"):
        current: list[str] = []
        used = 0
        for cluster, cells in _clusters(clean(raw)):
            if used + cells > width and current:
                cut = next((i for i in range(len(current) - 1, -1, -1) if current[i] == " "), -1)
                if cut > len(current) // 2:
                    lines.append("".join(current[:cut]))
                    current = current[cut + 1 :]
                else:
                    lines.append("".join(current))
                    current = []
                used = display_width("".join(current))
            current.append(cluster)
            used += cells
        lines.append("".join(current))
    return lines
