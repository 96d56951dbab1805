"""Which detectors can match a text, found in one pass: a Hyperscan prefilter before RE2.

RE2 runs the detectors as one alternation of ~100 patterns, and its lazy DFA is built from
the text it meets: every new token (a fresh e-mail, key or phone number) adds states, so on
agent content, where such values are new every couple of kilobytes, the scan ran at
~20 MB/s instead of the ~150 MB/s it reaches on text it has seen, and a long-lived ingest
worker never warmed up (its DFA cache fills and is flushed). Hyperscan compiles all the
patterns ahead of time into automata that need no warm-up, and says which of them match a
text (``ids``) and where the first match ends (``first_end``). RE2 then runs only the
detectors that can match, on only the texts where they can: a small alternation, whose DFA
stays small and warm. Results are the same as with the whole alternation, because a
detector that matches nowhere in a text can never be the alternative chosen in it.

Where the two engines could disagree the prefilter declines (``covers`` is False) and the
caller scans with RE2 alone, as it did before: text that is not valid UTF-8 (a lone
surrogate), that holds a character RE2's case folding maps to ASCII (U+017F to ``s``, the
Kelvin sign U+212A to ``k``: Hyperscan folds ASCII only), or a vertical tab (which PCRE's ``\\s``
counts as space and RE2's does not). Patterns Hyperscan cannot compile, and those a caller
names (``side``), run in an RE2 alternation beside it; if any of them matches, all of them
count as candidates. Without the ``hyperscan`` package (no wheel for the platform),
``AVAILABLE`` is False and callers keep the RE2 path (ADR 29).
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from collections.abc import Sequence
from typing import Any

import re2

hyperscan: Any
try:
    import hyperscan
except ImportError:  # pragma: no cover - the wheel exists for every platform CI runs on
    hyperscan = None

__all__ = ["AVAILABLE", "Prefilter"]

AVAILABLE = hyperscan is not None

_NAMED_GROUP = re.compile(r"\(\?P<[A-Za-z0-9_]+>")


class _First:
    """A match callback that keeps the first end offset and stops the scan."""

    __slots__ = ("end",)

    def __init__(self) -> None:
        self.end = -1

    def __call__(self, pattern: int, start: int, end: int, flags: int, context: Any) -> bool:
        self.end = end
        return True


class Prefilter:
    """``patterns`` (RE2 syntax, over UTF-8 bytes) compiled into one Hyperscan database;
    a pattern's id is its index."""

    def __init__(self, patterns: Sequence[str], *, side: Sequence[int] = ()) -> None:
        if hyperscan is None:
            raise RuntimeError("the hyperscan package is not installed")
        compiled, self.side = _compile(tuple(patterns), tuple(sorted(set(side))))
        self._database = compiled
        side_pattern = "|".join(f"(?:{patterns[i]})" for i in self.side)
        options = re2.Options()
        options.max_mem = 64 << 20
        self._side = re2.compile(side_pattern.encode(), options) if self.side else None
        self._local = threading.local()

    def _scratch(self) -> Any:
        # A scratch space may serve one scan at a time: one per thread.
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = hyperscan.Scratch(self._database)
        return scratch

    @staticmethod
    def covers(data: bytes) -> bool:
        """Whether the prefilter's answer for ``data`` (valid UTF-8) is RE2's."""
        if b"\x0b" in data:
            return False
        return data.isascii() or (b"\xc5\xbf" not in data and b"\xe2\x84\xaa" not in data)

    def ids(self, data: bytes) -> set[int]:
        """The patterns that match somewhere in ``data`` (a superset: never one fewer)."""
        found: set[int] = set()
        if self._database is not None:
            self._database.scan(
                data,
                match_event_handler=lambda pattern, start, end, flags, context: found.add(pattern),
                scratch=self._scratch(),
            )
        if self._side is not None and self._side.search(data) is not None:
            found.update(self.side)
        return found

    def first_end(self, data: bytes, start: int = 0) -> int:
        """Where the first match in ``data[start:]`` ends (an offset into ``data``); -1 when
        nothing matches there."""
        best = -1
        if self._database is not None:
            first = _First()
            with contextlib.suppress(hyperscan.ScanTerminated):  # the first match stops it
                self._database.scan(
                    memoryview(data)[start:], match_event_handler=first, scratch=self._scratch()
                )
            if first.end >= 0:
                best = start + first.end
        if self._side is not None:
            match = self._side.search(data, start)
            if match is not None and (best < 0 or match.end() < best):
                best = match.end()
        return best


@functools.lru_cache(maxsize=16)
def _compile(patterns: tuple[str, ...], side: tuple[int, ...]) -> tuple[Any, tuple[int, ...]]:
    """(database, the side patterns): every pattern Hyperscan compiles exactly goes in the
    database; the rest join ``side``. Cached: a database takes ~0.5 s to build, and every
    redactor of a process over the same rules shares one (scans are thread-safe, scratch
    spaces are not)."""
    flags = hyperscan.HS_FLAG_UTF8 | hyperscan.HS_FLAG_SINGLEMATCH
    rest = set(side)
    # A non-ASCII literal goes to RE2: case folding beyond ASCII is RE2's alone.
    rest.update(i for i, pattern in enumerate(patterns) if not pattern.isascii())
    chosen = {
        i: _NAMED_GROUP.sub("(?:", pattern).encode()
        for i, pattern in enumerate(patterns)
        if i not in rest
    }
    database = _database(chosen, flags)
    if database is None and chosen:  # some syntax Hyperscan has not (\C, \pN...): find it
        for index, expression in list(chosen.items()):
            if _database({index: expression}, flags) is None:
                rest.add(index)
                del chosen[index]
        database = _database(chosen, flags)
    return database, tuple(sorted(rest))


def _database(expressions: dict[int, bytes], flags: int) -> Any:
    if not expressions:
        return None
    database = hyperscan.Database()
    try:
        database.compile(
            expressions=list(expressions.values()),
            ids=list(expressions),
            elements=len(expressions),
            flags=[flags] * len(expressions),
        )
    except hyperscan.error:
        return None
    return database
