"""Where lines go: a ``Terminal``'s width, colour and character set, found from the stream
and the environment (``FORCE_COLOR``, ``NO_COLOR``, ``TERM``)."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import tzinfo
from typing import IO

from afr.runs.widths import truncate

__all__ = [
    "BOLD",
    "DIM",
    "GREEN",
    "RED",
    "RESET",
    "YELLOW",
    "Terminal",
    "colour_enabled",
    "isatty",
    "terminal_for",
]

# Plain ANSI codes: every terminal that takes colour at all takes these.
RESET = "\x1b[0m"
BOLD = "\x1b[1m"
DIM = "\x1b[2m"
RED = "\x1b[31m"
GREEN = "\x1b[32m"
YELLOW = "\x1b[33m"


@dataclass(frozen=True)
class Terminal:
    """Where lines go: their width in columns, colour, and whether it can show ``…``."""

    width: int = 80
    colour: bool = False
    unicode: bool = True
    tz: tzinfo | None = None
    """Time zone of the times shown (None: local)."""

    @property
    def ellipsis(self) -> str:
        return "…" if self.unicode else "~"

    @property
    def cross(self) -> str:
        return "✗" if self.unicode else "x"

    @property
    def dot(self) -> str:
        return " · " if self.unicode else ", "

    def paint(self, text: str, *codes: str) -> str:
        if not self.colour or not codes or not text:
            return text
        return "".join(codes) + text + RESET

    def fit(self, text: str, width: int | None = None) -> str:
        return truncate(text, self.width if width is None else width, self.ellipsis)


def colour_enabled(stream: IO[str], environ: Mapping[str, str]) -> bool:
    """``FORCE_COLOR`` (non-empty, not ``0``/``false``) forces colour; ``NO_COLOR``
    (non-empty) or ``TERM=dumb`` turns it off; otherwise colour when writing to a tty."""
    force = environ.get("FORCE_COLOR", "")
    if force and force.lower() not in ("0", "false"):
        return True
    if environ.get("NO_COLOR") or environ.get("TERM") == "dumb":
        return False
    return isatty(stream)


def terminal_for(
    stream: IO[str], environ: Mapping[str, str], *, tz: tzinfo | None = None
) -> Terminal:
    """80 columns unless writing to a tty, then the tty's width."""
    width = max(20, shutil.get_terminal_size((80, 24)).columns) if isatty(stream) else 80
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        "…✗·".encode(encoding)
        unicode = True
    except (UnicodeEncodeError, LookupError):
        unicode = False
    return Terminal(width=width, colour=colour_enabled(stream, environ), unicode=unicode, tz=tz)


def isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
