"""Untrusted text made safe to print: one line, no control characters (an ANSI escape in a
tool name would otherwise reach the terminal)."""

from __future__ import annotations

import unicodedata

__all__ = ["clean"]

_BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def clean(text: str) -> str:
    """One line of untrusted text made safe to print: whitespace controls become spaces,
    other controls (ESC, bidi overrides) ``?``."""
    out: list[str] = []
    for char in text:
        if char in "\t\n\r\v\f":
            out.append(" ")
        elif unicodedata.category(char) == "Cc" or char in _BIDI:
            out.append("?")
        else:
            out.append(char)
    return "".join(out)
