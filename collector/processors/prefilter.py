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
from bisect import bisect_right
from collections.abc import Mapping, Sequence
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


_UTF8 = (hyperscan.HS_FLAG_UTF8 | hyperscan.HS_FLAG_SINGLEMATCH) if hyperscan is not None else 0
# Every match reported, not only each pattern's first (``segments``).
_EVERY = hyperscan.HS_FLAG_UTF8 if hyperscan is not None else 0


class _First:
    """A match callback that keeps the first end offset and stops the scan."""

    __slots__ = ("end",)

    def __init__(self) -> None:
        self.end = -1

    def __call__(self, pattern: int, start: int, end: int, flags: int, context: Any) -> bool:
        self.end = end
        return True


class _Ends:
    """A match callback that collects (end, pattern) of every match, and stops the scan
    past ``limit`` of them. A match ending one byte after the same pattern's last, in the
    same segment (``data``'s byte before it is no separator), adds nothing: a long run (a
    base64 image) is one match, not one per byte."""

    __slots__ = ("data", "ends", "last", "limit")

    def __init__(self, data: bytes, limit: int) -> None:
        self.data = data
        self.ends: list[tuple[int, int]] = []
        self.last: dict[int, int] = {}
        self.limit = limit

    def __call__(self, pattern: int, start: int, end: int, flags: int, context: Any) -> bool:
        last = self.last
        if last.get(pattern) == end - 1 and self.data[end - 2]:
            last[pattern] = end
            return False
        last[pattern] = end
        ends = self.ends
        ends.append((end, pattern))
        return len(ends) > self.limit


class Prefilter:
    """``patterns`` (RE2 syntax, over UTF-8 bytes) compiled into Hyperscan databases; a
    pattern's id is its index. Patterns in ``select_only`` count for ``first_end`` but are
    never reported by ``ids`` (scanned without them: fewer patterns, a faster scan)."""

    def __init__(
        self,
        patterns: Sequence[str],
        *,
        side: Sequence[int] = (),
        select_only: Sequence[int] = (),
        loose: Mapping[int, str] | None = None,
        bytes_only: bool = False,
    ) -> None:
        """``bytes_only``: only ever given ASCII (a ``shadow``): no database for UTF-8."""
        if hyperscan is None:
            raise RuntimeError("the hyperscan package is not installed")
        self._patterns = tuple(patterns)
        self._bytes_only = bytes_only
        # Patterns the databases cannot take are found in the mode they are built in: bytes
        # for shadows (a check over UTF-8 too took 0.7 s of every start, ADR 50).
        flags = hyperscan.HS_FLAG_SINGLEMATCH if bytes_only else _UTF8
        self.side = _side_of(self._patterns, tuple(sorted(set(side))), flags)
        self._select_only = frozenset(select_only)
        side_pattern = "|".join(f"(?:{unanchored(patterns[i])})" for i in self.side)
        options = re2.Options()
        options.max_mem = 64 << 20
        self._side = re2.compile(side_pattern.encode(), options) if self.side else None
        self._side_reported = tuple(i for i in self.side if i not in self._select_only)
        # Side patterns with a superset Hyperscan scans cheaply take it in ``segments``; the
        # rest are searched by RE2 there.
        self._loose = tuple(sorted((i, p) for i, p in (loose or {}).items() if i in self.side))
        rest = [i for i in self.side if i not in dict(self._loose)]
        rest_pattern = "|".join(f"(?:{unanchored(patterns[i])})" for i in rest)
        self._side_rest = re2.compile(rest_pattern.encode(), options) if rest else None
        self._local = threading.local()
        modes = (True,) if bytes_only else (True, False)
        for reported_only in (True, False):  # built now, not on the first request
            for ascii_only in modes:
                _compiled(self._patterns, self.side, self._skip(reported_only), ascii_only)
        for ascii_only in modes:
            _every_match(self._patterns, self.side, self._loose, ascii_only)

    def _skip(self, reported_only: bool) -> frozenset[int]:
        return self._select_only if reported_only else frozenset()

    def _database(
        self, reported_only: bool, ascii_only: bool, every: bool = False
    ) -> tuple[Any, Any]:
        """(database, this thread's scratch space for it); ASCII text is scanned by a
        database compiled for bytes, which is faster and the same on ASCII. ``every``: the
        database of ``segments``."""
        if self._bytes_only and not ascii_only:
            # Its patterns stand for text beyond ASCII only over shadows: over UTF-8 they
            # would miss a letter beyond ASCII, and a secret with it.
            raise ValueError("a bytes-only prefilter was given text beyond ASCII, not its shadow")
        # This thread's pairs by key: the memoized builders hash the tuple of every pattern
        # on each call (~180 strings), a cost paid per scan, several scans per span.
        chosen = getattr(self._local, "chosen", None)
        if chosen is None:
            chosen = self._local.chosen = {}
        key = (reported_only, ascii_only, every)
        pair = chosen.get(key)
        if pair is None:
            pair = chosen[key] = self._build(reported_only, ascii_only, every)
        return pair

    def _build(self, reported_only: bool, ascii_only: bool, every: bool) -> tuple[Any, Any]:
        if every:
            database = _every_match(self._patterns, self.side, self._loose, ascii_only)
        else:
            database = _compiled(self._patterns, self.side, self._skip(reported_only), ascii_only)
        if database is None:
            return None, None
        scratches = getattr(self._local, "scratches", None)
        if scratches is None:
            scratches = self._local.scratches = {}
        scratch = scratches.get(id(database))
        if scratch is None:  # a scratch space serves one scan at a time: one per thread
            scratch = scratches[id(database)] = hyperscan.Scratch(database)
        return database, scratch

    @staticmethod
    def covers(data: bytes) -> bool:
        """Whether the prefilter's answer for ``data`` (valid UTF-8) is RE2's."""
        if b"\x0b" in data:
            return False
        return data.isascii() or (b"\xc5\xbf" not in data and b"\xe2\x84\xaa" not in data)

    def ids(self, data: bytes) -> set[int]:
        """The patterns that match somewhere in ``data`` (a superset: never one fewer),
        those in ``select_only`` aside."""
        found: set[int] = set()
        database, scratch = self._database(True, data.isascii())
        if database is not None:
            database.scan(
                data,
                match_event_handler=lambda pattern, start, end, flags, context: found.add(pattern),
                scratch=scratch,
            )
        if self._side_reported and self._side is not None and self._side.search(data):
            found.update(self._side_reported)
        return found

    def segments(
        self, data: bytes, starts: Sequence[int], limit: int
    ) -> dict[int, set[int]] | None:
        """Which patterns match in each segment of ``data``, in one scan: segment ``i``
        begins at ``starts[i]`` (ascending, from 0; a NUL byte before each), a match belongs
        to the segment of its
        last byte, and only segments something matches in are keys. For every segment the
        set holds each pattern that matches in the segment taken alone, or in any text of it
        (a JSON string): a superset, the ``select_only`` patterns too (Hyperscan runs every
        pattern without its anchors, ``_expression``), and the ``loose`` form of a side
        pattern that has one. None when more than ``limit`` matches were found (text
        dense with matches: ``first_end`` is cheaper there) or the patterns did not compile
        that way."""
        database, scratch = self._database(False, data.isascii(), every=True)
        by_segment: dict[int, set[int]] = {}
        if database is None and len(self.side) - len(self._loose) < len(self._patterns):
            return None
        if database is not None:
            ends = _Ends(data, limit)
            try:
                database.scan(data, match_event_handler=ends, scratch=scratch)
            except hyperscan.ScanTerminated:
                return None
            side = frozenset(self.side)
            for end, pattern in ends.ends:
                index = bisect_right(starts, end - 1) - 1
                found = by_segment.get(index)
                if found is None:
                    found = by_segment[index] = set()
                if pattern in side:  # a loose side pattern: all of them are candidates
                    found.update(side)
                else:
                    found.add(pattern)
        if self._side_rest is not None:
            # One search per segment it matches in, resuming at the next segment (from the
            # separator before it, which a match may use as its left context).
            position = 0
            while (match := self._side_rest.search(data, position)) is not None:
                index = bisect_right(starts, match.end() - 1) - 1
                by_segment.setdefault(index, set()).update(self.side)
                if index + 1 >= len(starts):
                    break
                position = max(starts[index + 1] - 1, 0)
        return by_segment

    def first_end(self, data: bytes, start: int = 0) -> int:
        """Where the first match in ``data[start:]`` ends (an offset into ``data``); -1 when
        nothing matches there."""
        best = -1
        database, scratch = self._database(False, data.isascii())
        if database is not None:
            first = _First()
            with contextlib.suppress(hyperscan.ScanTerminated):  # the first match stops it
                database.scan(memoryview(data)[start:], match_event_handler=first, scratch=scratch)
            if first.end >= 0:
                best = start + first.end
        if self._side is not None:
            # Bounded by the first end found: a side match ending later changes nothing.
            match = (
                self._side.search(data, start) if best < 0 else self._side.search(data, start, best)
            )
            if match is not None and (best < 0 or match.end() < best):
                best = match.end()
        return best


# --- the shadow of a text beyond ASCII -----------------------------------------------------
# Hyperscan scans UTF-8 ~1.7x slower than bytes (108 against 196 MB/s on agent text), and
# one character beyond ASCII (an em dash, a curly quote) put a whole span there. The
# scan can run on a shadow instead: the text with each character beyond ASCII as one byte,
# \x02 for a no-break space and \x01 for any other, matched by patterns that name them so
# (``shadow_pattern``). One byte per character keeps every count and every offset in
# characters; what matches such a character in a pattern (a negated class, ``.``, ``\S``,
# ``\W``; a letter beyond ASCII; the no-break space) matches its byte, and nothing else
# does (an ASCII class, ``\w``, ``\b``'s word side, as in RE2). So the shadow's matches
# are a superset of the text's, which is all a selection needs.
# A UTF-8 sequence's lead byte becomes \x01 and its continuation bytes go: one pass of
# ``bytes.translate`` (an error handler of the ASCII codec cost ~5% of such a span).
_SHADOW_TABLE = bytes(range(0x80)) + b"\x01" * 0x80
_CONTINUATION_BYTES = bytes(range(0x80, 0xC0))


def shadow(data: bytes) -> bytes:
    """The shadow of ``data`` (valid UTF-8): each character beyond ASCII one byte."""
    return data.replace(b"\xc2\xa0", b"\x02").translate(_SHADOW_TABLE, _CONTINUATION_BYTES)


# What could name a shadow's own bytes (\x01, \x02): a range from below them, the bytes
# themselves, control characters as a class.
_NAMES_SHADOW_BYTES = re.compile(
    r"\\x(?:\{0*[0-2]\}|0[0-2])-(?!\])|\\x(?:\{0*[12]\}|0[12])|\[:cntrl:\]|\\c"
)
_HEX_ESCAPE = re.compile(r"x(?:\{([0-9A-Fa-f]+)\}|([0-9A-Fa-f]{2}))")


def shadow_pattern(pattern: str, *wide: str) -> str | None:
    """``pattern`` over shadows: each of ``wide`` (the classes of characters beyond ASCII the
    rules use, written the same way everywhere: a letter, a separator inside numbers) as
    the class of ``\\x01``, the no-break space as ``\\x02``; None when the pattern names
    any other character beyond ASCII (or holds one, or ``\\p``, ``\\P``, ``\\C``),
    which a shadow cannot stand for. A class of ``wide`` matches one character beyond
    ASCII other than the no-break space (whose byte is ``\\x02``): ``\\x01`` stands for
    every such character, a superset of the class."""
    text = pattern
    for characters in wide:
        text = text.replace(characters, "")
    if _NAMES_SHADOW_BYTES.search(text):
        return None  # [^\x00-\x1f]: a character beyond ASCII matches, its byte would not
    text = pattern
    for characters in wide:
        text = text.replace(characters, "[\\x01]")
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char != "\\":
            out.append(char)
            index += 1
            continue
        following = text[index + 1 : index + 2]
        if following in ("p", "P", "C"):
            return None
        hexadecimal = _HEX_ESCAPE.match(text, index + 1) if following == "x" else None
        if hexadecimal is None:
            out.append(text[index : index + 2])  # an escape of one character
            index += 2
            continue
        code = int(hexadecimal.group(1) or hexadecimal.group(2), 16)
        if code >= 0x80 and code != 0xA0:
            return None
        out.append("\\x02" if code == 0xA0 else text[index : hexadecimal.end()])
        index = hexadecimal.end()
    shadowed = "".join(out)
    return shadowed if shadowed.isascii() else None


def _expression(pattern: str) -> bytes:
    """``pattern`` as Hyperscan takes it: without names, nor anchors (a superset, which a
    value or a JSON string cut out of a span's text still matches where it sits)."""
    return _NAMED_GROUP.sub("(?:", unanchored(pattern)).encode()


def unanchored(pattern: str, also: tuple[str, ...] = ()) -> str:
    """``pattern`` with its anchors (``^``, ``$``, ``\\A``, ``\\z`` outside a character
    class, and the escapes in ``also``: ``\\b``) made empty: it matches wherever ``pattern``
    does, and where text was cut out of a longer one (``^`` after a quote, ``$`` before one)
    too."""
    out: list[str] = []
    index, size = 0, len(pattern)
    while index < size:
        char = pattern[index]
        if char == "\\":
            pair = pattern[index : index + 2]
            out.append("(?:)" if pair in ("\\A", "\\z") or pair in also else pair)
            index += 2
        elif char == "[":
            end = index + 1
            if pattern[end : end + 1] == "^":
                end += 1
            if pattern[end : end + 1] == "]":  # a literal ] first in a class
                end += 1
            while end < size and pattern[end] != "]":
                close = pattern.find(":]", end + 2) if pattern.startswith("[:", end) else -1
                if close != -1:  # a POSIX class, [:alpha:]: its ] does not end the class
                    end = close + 2
                else:
                    end += 2 if pattern[end] == "\\" else 1
            out.append(pattern[index : end + 1])
            index = end + 1
        else:
            out.append("(?:)" if char in "^$" else char)
            index += 1
    return "".join(out)


@functools.lru_cache(maxsize=16)
def _side_of(patterns: tuple[str, ...], side: tuple[int, ...], flags: int) -> tuple[int, ...]:
    """``side`` and every pattern Hyperscan cannot take with ``flags``: a non-ASCII literal
    (case folding beyond ASCII is RE2's alone) or syntax it has not (``\\C``, ``\\pN``...).
    The check's database is the one ``_compiled`` builds next for all of them (memoized)."""
    rest = set(side)
    rest.update(i for i, pattern in enumerate(patterns) if not pattern.isascii())
    chosen = {i: _expression(p) for i, p in enumerate(patterns) if i not in rest}
    if _database(chosen, flags) is None and chosen:
        rest.update(i for i, e in chosen.items() if _database({i: e}, flags) is None)
    return tuple(sorted(rest))


@functools.lru_cache(maxsize=32)
def _compiled(
    patterns: tuple[str, ...],
    side: tuple[int, ...],
    skip: frozenset[int],
    ascii_only: bool,
) -> Any:
    """The database of every pattern but ``side`` and ``skip``. Cached: one takes ~0.3-0.6 s
    to build, and every redactor of a process over the same rules shares it (scans are
    thread-safe, scratch spaces are not)."""
    chosen = {i: _expression(p) for i, p in enumerate(patterns) if i not in side and i not in skip}
    database = _database(chosen, hyperscan.HS_FLAG_SINGLEMATCH if ascii_only else _UTF8)
    if database is None and ascii_only:  # a pattern only UTF-8 mode takes (\x{2028})
        database = _database(chosen, _UTF8)
    return database


@functools.lru_cache(maxsize=16)
def _every_match(
    patterns: tuple[str, ...],
    side: tuple[int, ...],
    loose: tuple[tuple[int, str], ...],
    ascii_only: bool,
) -> Any:
    """The database of ``segments``: every pattern but ``side``, and the ``loose`` forms of
    side patterns, reporting every match (not each pattern's first)."""
    chosen = {i: _expression(p) for i, p in enumerate(patterns) if i not in side}
    chosen.update((i, _expression(p)) for i, p in loose)
    # Each pattern cut to a part every one of its matches holds (``_cut_or_whole``): the same
    # segments, without one report per byte of a long token (a key's 40 letters past the 20
    # its pattern needs), and from a literal where a loose start would make Hyperscan look at
    # every word; the patterns whole if Hyperscan will not take the cuts.
    heads = {i: _cut_or_whole(expression) for i, expression in chosen.items()}
    for flags in (0, _EVERY) if ascii_only else (_EVERY,):
        for expressions in (heads, chosen):
            database = _database(expressions, flags)
            if database is not None:
                return database
    return None


_QUANTIFIER = re.compile(r"(?:[*+?]|\{(\d+)(?:,(\d*))?\})\??")
_ZERO_WIDTH = frozenset({"\\b", "\\B", "(?:)"})


def _atoms(pattern: str) -> list[tuple[str, str]] | None:
    """``pattern`` (one alternative, no ``|`` outside its groups) as (atom, quantifier)
    pairs; None for syntax this does not read (``\\Q``, a flag group)."""
    atoms: list[tuple[str, str]] = []
    index, size = 0, len(pattern)
    while index < size:
        char = pattern[index]
        if char == "\\":
            if pattern[index + 1 : index + 2] == "Q":
                return None
            end = index + 2
            if pattern[index + 1 : index + 2] in ("x", "p", "P") and pattern[end : end + 1] == "{":
                end = pattern.index("}", end) + 1
        elif char == "[":
            end = _class_end(pattern, index) + 1
        elif char == "(":
            depth, end = 0, index
            while True:
                if pattern[end] == "\\":
                    end += 2
                    continue
                if pattern[end] == "[":
                    end = _class_end(pattern, end) + 1
                    continue
                depth += {"(": 1, ")": -1}.get(pattern[end], 0)
                end += 1
                if depth == 0:
                    break
            if pattern[index + 1] == "?" and not pattern.startswith(("(?:", "(?P<", "(?i:"), index):
                return None  # a flag group, (?i), whose scope runs past it, or (?s:...)
        else:
            end = index + 1
        quantifier = _QUANTIFIER.match(pattern, end)
        tail = quantifier.group() if quantifier is not None else ""
        atoms.append((pattern[index:end], tail))
        index = end + len(tail)
    return atoms


def _class_end(pattern: str, start: int) -> int:
    """The index of the ``]`` closing the class opened at ``start``."""
    end = start + 1
    if pattern[end : end + 1] == "^":
        end += 1
    if pattern[end : end + 1] == "]":
        end += 1
    while pattern[end] != "]":
        close = pattern.find(":]", end + 2) if pattern.startswith("[:", end) else -1
        end = close + 2 if close != -1 else end + (2 if pattern[end] == "\\" else 1)
    return end


def _alternatives(pattern: str) -> list[str]:
    """``pattern`` split at its top-level ``|``."""
    parts: list[str] = []
    depth, start, index = 0, 0, 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if char == "[":
            index = _class_end(pattern, index) + 1
            continue
        if char in "()":
            depth += 1 if char == "(" else -1
        elif char == "|" and depth == 0:
            parts.append(pattern[start:index])
            start = index + 1
        index += 1
    parts.append(pattern[start:])
    return parts


def _cut_or_whole(expression: bytes) -> bytes:
    """``_head`` of ``_from_literal`` of a Hyperscan expression: a pattern every match of
    ``expression`` holds a match of, within the match. The segments scan finds the same
    segments with it, since no match runs over a segment's end (the NUL between two). The
    expression itself where the cut cannot read it (syntax RE2 took that this reader does not
    know stays whole, never stops a start)."""
    try:
        return _head(_from_literal(expression.decode())).encode()
    except (IndexError, ValueError):
        return expression


def _from_literal(pattern: str) -> str:
    """``pattern`` with each alternative begun where Hyperscan can start from a literal: its
    leading assertions (``\\b``), optional atoms and characters of a set
    (``[a-z0-9._-]*?``, ``[0-9a-f]+``: ``_loose_start``) left off when what follows begins
    with a literal every way it can match (``(?:otp|cvv2?|pin)``, ``-``, ``@``). What is
    left matches the end of the alternative's match, so every match of ``pattern`` holds a
    match of it. A start Hyperscan cannot anchor on a literal made it try every word of the
    text (bench/README.md, stop 53). An alternative in which no literal follows its loose
    start (a US SSN's ``\\d{3}(?:[ -]|[\\x01])\\d{2}``, an IBAN's ``(?i:[A-Z]{2}...)``) is
    kept whole: a digit or a letter is no narrower than the word boundary before it. A
    leading ``(?i)`` is read as the group it scopes, ``(?i:...)``."""
    if pattern.startswith("(?i)"):
        return f"(?i:{_from_literal(pattern[4:])})"
    cut: list[str] = []
    for alternative in _alternatives(pattern):
        atoms = _atoms(alternative)
        if atoms is not None:
            start = 0
            while start < len(atoms) - 1 and _loose_start(atoms[start][0], atoms[start][1]):
                start += 1
            atom, quantifier = atoms[start]
            if start and not quantifier and _begins_with_literal(atom):
                alternative = "".join(a + q for a, q in atoms[start:])
        cut.append(alternative)
    return "|".join(cut)


_CLASS_ESCAPES = frozenset("dDwWsSpPC")


def _is_class(atom: str) -> bool:
    """Whether ``atom`` stands for one character of a set (a class, a class escape, ``.``)."""
    if atom[:1] == "\\":
        return atom[1:2] in _CLASS_ESCAPES
    return atom == "." or atom.startswith("[")


def _least(quantifier: str) -> int:
    """The least count of ``quantifier`` (1 without one)."""
    counted = _QUANTIFIER.fullmatch(quantifier) if quantifier else None
    if counted is None:
        return 1
    if counted.group(1):
        return int(counted.group(1))
    return 1 if quantifier[0] == "+" else 0


def _loose_start(atom: str, quantifier: str) -> bool:
    """Whether a leading ``atom`` may be left off the start of a match: an assertion, an
    optional atom, or one character of a set however repeated (``[0-9a-f]+``, ``\\d{3}``, a
    group of classes: an e-mail address's ``(?:\\b[A-Za-z0-9._%+-]|[\\x01])``)."""
    return atom in _ZERO_WIDTH or _least(quantifier) == 0 or _is_class_like(atom)


def _is_class_like(atom: str) -> bool:
    """Whether ``atom`` stands for one character of a set: a class, or a group each of
    whose alternatives is one class (after assertions, if any)."""
    if _is_class(atom):
        return True
    opening = _group_opening(atom)
    if opening is None:
        return False
    for alternative in _alternatives(atom[len(opening) : -1]):
        atoms = _atoms(alternative)
        if atoms is None:
            return False
        core = [(a, q) for a, q in atoms if a not in _ZERO_WIDTH]
        if len(core) != 1 or core[0][1] or not _is_class(core[0][0]):
            return False
    return True


def _group_opening(atom: str) -> str | None:
    """The opening of a group ``atom`` whose inside these readers read: ``(?:``, ``(?i:`` or
    a plain ``(``; None for any other atom (a flag group, a look-around, no group)."""
    if not (atom.startswith("(") and atom.endswith(")")):
        return None
    opening = next((o for o in ("(?:", "(?i:") if atom.startswith(o)), "(")
    return None if opening == "(" and atom[1:2] == "?" else opening


def _begins_with_literal(atom: str) -> bool:
    """Whether every match of ``atom`` begins with a literal character: the character
    itself, an escaped one (``\\.``, ``\\x01``), or a group each of whose alternatives
    begins so, once."""
    if atom.startswith("("):
        opening = _group_opening(atom)
        if opening is None:
            return False  # a flag group, a look-around, or syntax this does not read
        for alternative in _alternatives(atom[len(opening) : -1]):
            atoms = _atoms(alternative)
            if not atoms or _least(atoms[0][1]) == 0 or not _begins_with_literal(atoms[0][0]):
                return False
        return True
    return atom not in _ZERO_WIDTH and not _is_class(atom) and atom not in ("^", "$")


def _head(pattern: str) -> str:
    """A pattern that matches where ``pattern`` does and ends as early as it can there:
    each alternative without its trailing assertions (``\\b``) and optional atoms, and its
    last repeat down to its least count (``[A-Z]{20,}`` to ``[A-Z]{20}``, a group within
    itself cut so). Every match of ``pattern`` begins with a match of it, so it finds the
    same segments; ``pattern`` unchanged where nothing is cut or the cut would match
    nothing."""
    heads = []
    for alternative in _alternatives(pattern):
        atoms = _atoms(alternative)
        if atoms is None:
            return pattern
        while atoms:
            atom, quantifier = atoms[-1]
            least = _least(quantifier)
            if atom in _ZERO_WIDTH or least == 0:
                atoms.pop()
                continue
            opening = _group_opening(atom)
            if least == 1 and opening is not None:
                inner = _head(atom[len(opening) : -1])
                if inner != atom[len(opening) : -1]:
                    atoms[-1] = (f"{opening}{inner})", "")
                    break
            if quantifier:
                atoms[-1] = (atom, "" if least == 1 else f"{{{least}}}")
            break
        head = "".join(a + q for a, q in atoms)
        if not head:
            return pattern  # it would match the empty string everywhere
        heads.append(head)
    return "|".join(heads)


def _database(expressions: dict[int, bytes], flags: int) -> Any:
    """The database of ``expressions``; None when Hyperscan will not take them. The same set
    compiled twice is compiled once (``_side_of``'s check, then ``_compiled``)."""
    if not expressions:
        return None
    return _database_of(tuple(expressions.items()), flags)


@functools.lru_cache(maxsize=8)
def _database_of(items: tuple[tuple[int, bytes], ...], flags: int) -> Any:
    database = hyperscan.Database()
    try:
        database.compile(
            expressions=[expression for _, expression in items],
            ids=[i for i, _ in items],
            elements=len(items),
            flags=[flags] * len(items),
        )
    except hyperscan.error:
        return None
    return database
