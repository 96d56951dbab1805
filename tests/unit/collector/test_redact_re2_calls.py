"""The redactor's searches over bytes call RE2's binding directly (``redact._Bytes``), not
through the re2 module's Python layer: each must find what the module finds, with the same
offsets for every group, the same ``lastindex`` and the same bytes, from every start and to
every end, and it must do so too where the binding is not there (the module is used)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import re2

from collector.processors import redact

PATTERNS = [
    rb"(?P<a>ab)|(?P<b>a(?P<b__value>c+))",  # alternatives, an inner group
    rb"x*",  # matches the empty text: the search moves on a byte after each empty match
    rb"\bkey=(?P<v>[^&\s]+)(?:&(?P<w>\w+))?",  # a group that may not take part
    rb"^(?:ab|)",  # anchored at the text's start, empty or not
    rb"((a)(b))|((c)d)",  # nested groups ending at the same place: lastindex is the outer
    rb"[\x00-\x1f\"\\]",  # one byte of a class, as the escape checks look for
]
TEXTS = [
    b"",
    b"abacc ab",
    b"key=v1&w2 key=zz key=",
    b"cd ab\x00acccab\x00",
    b"x xx\nxxx",
    b'a "quoted" \\ line\n',
]
BOUNDS = [(0, -1), (1, -1), (3, 5), (-4, 2), (2, 100), (7, 3), (100, -1)]


def _module_bounds(text: bytes, pos: int, endpos: int) -> tuple[int, int | None]:
    return pos, None if endpos < 0 else endpos


def _seen(found: Any, groups: int) -> tuple[Any, ...] | None:
    """What a caller reads of a match: each group's span and bytes, and ``lastindex``."""
    if found is None:
        return None
    spans = tuple(found.span(group) for group in range(groups + 1))
    starts = tuple(found.start(group) for group in range(groups + 1))
    ends = tuple(found.end(group) for group in range(groups + 1))
    texts = tuple(found.group(group) for group in range(groups + 1))
    return spans, starts, ends, texts, found.lastindex


def _both(pattern: bytes) -> list[tuple[str, Any]]:
    compiled = re2.compile(pattern)
    direct = redact._Bytes(compiled)
    through_module = redact._Bytes(compiled)
    through_module.regexp = None  # as where the binding is not there
    return [("direct", direct), ("through the module", through_module)]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_search_and_match_find_what_the_re2_module_finds(pattern: bytes) -> None:
    compiled = re2.compile(pattern)
    for (name, searcher), text, (pos, endpos) in itertools.product(_both(pattern), TEXTS, BOUNDS):
        module_pos, module_end = _module_bounds(text, pos, endpos)
        for method in ("search", "match"):
            expected = getattr(compiled, method)(text, module_pos, module_end)
            found = getattr(searcher, method)(text, pos, endpos)
            assert _seen(found, compiled.groups) == _seen(expected, compiled.groups), (
                name,
                method,
                text,
                pos,
                endpos,
            )


@pytest.mark.parametrize("pattern", PATTERNS)
def test_finditer_gives_every_match_the_re2_module_gives(pattern: bytes) -> None:
    compiled = re2.compile(pattern)
    for (name, searcher), text, pos in itertools.product(_both(pattern), TEXTS, [0, 1, 4, 99]):
        expected = [_seen(m, compiled.groups) for m in compiled.finditer(text, pos)]
        found = [_seen(m, compiled.groups) for m in searcher.finditer(text, pos)]
        assert found == expected, (name, text, pos)


def test_the_redactors_matchers_search_bytes_directly() -> None:
    """The binding is there in every environment this project installs (google-re2), so the
    fast path is the one taken; the matchers' patterns are those of their text twins."""
    redactor = redact.Redactor(b"k" * 16)
    matcher = redact._matcher(redactor._detectors[:3], redactor._options)
    assert matcher.data.regexp is not None
    assert matcher.data.pattern == matcher.text.pattern.encode()
    assert redact._ESCAPED_IN_JSON.regexp is not None
