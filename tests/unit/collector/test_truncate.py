"""Truncation keeps provenance: valid UTF-8 and JSON at every boundary, the original's hash."""

from __future__ import annotations

import hashlib
import json

import pytest

from collector.processors.truncate import SENTINEL_KEY, TruncationConfig, Truncator
from tests.unit.collector.test_redact import span

LIMIT = 1024


def truncator(**overrides: object) -> Truncator:
    config = TruncationConfig(max_body_bytes=LIMIT, preview_bytes=100, **overrides)  # type: ignore[arg-type]
    return Truncator(config)


def check_sentinel(stored: str, original: str) -> dict[str, object]:
    document = json.loads(stored)
    raw = original.encode()
    assert document[SENTINEL_KEY] is True
    assert document["original_bytes"] == len(raw)
    assert document["sha256"] == hashlib.sha256(raw).hexdigest()
    preview = document["preview"]
    assert isinstance(preview, str)
    assert original.startswith(preview)
    preview.encode("utf-8")  # valid UTF-8, no lone surrogates
    return document


@pytest.mark.parametrize("unit", ["a", "é", "😀", "日"])
@pytest.mark.parametrize("size_delta", [-1, 0, 1])
def test_limit_boundaries_with_multibyte_characters(unit: str, size_delta: int) -> None:
    width = len(unit.encode())
    count = LIMIT // width + (1 if LIMIT % width else 0)
    value = unit * count
    while len(value.encode()) > LIMIT + size_delta:
        value = value[:-1]
    while (
        len(value.encode()) < LIMIT + size_delta
        and len((value + unit).encode()) <= LIMIT + size_delta
    ):
        value += unit
    record = span(output=value)
    truncator()([record])
    if len(value.encode()) <= LIMIT:
        assert record.output == value
        assert not record.truncated
    else:
        document = check_sentinel(record.output, value)
        assert len(str(document["preview"]).encode()) <= 100
        assert record.truncated


def test_exactly_at_the_limit_is_kept() -> None:
    value = "x" * LIMIT
    record = span(input=value)
    truncator()([record])
    assert record.input == value
    assert not record.truncated


def test_nested_json_body_becomes_a_valid_json_sentinel() -> None:
    body = json.dumps({"messages": [{"role": "user", "content": "é" * 2000}], "n": [1, 2, 3]})
    record = span(input=body, span_attributes={"small": "ok"})
    truncator()([record])
    check_sentinel(record.input, body)
    assert record.span_attributes == {"small": "ok"}
    assert record.truncated


def test_attributes_events_and_per_field_limits() -> None:
    big = "y" * 5000
    record = span(
        span_attributes={"gen_ai.tool.definitions": big, "keep": "z" * 3000},
        event_names=["e"],
        event_timestamps=[1],
        event_attributes=[{"exception.stacktrace": big}],
    )
    truncator(field_limits={"keep": 4096})([record])
    check_sentinel(record.span_attributes["gen_ai.tool.definitions"], big)
    check_sentinel(record.event_attributes[0]["exception.stacktrace"], big)
    assert record.span_attributes["keep"] == "z" * 3000, "its own, larger limit"


def test_an_oversized_span_is_trimmed_largest_first() -> None:
    record = span(
        input="a" * 900, output="b" * 900, span_attributes={"c": "c" * 900, "d": "d" * 10}
    )
    Truncator(TruncationConfig(max_body_bytes=LIMIT, max_span_bytes=2000, preview_bytes=100))(
        [record]
    )
    sizes = (
        len(record.input)
        + len(record.output)
        + sum(len(k) + len(v) for k, v in record.span_attributes.items())
    )
    assert sizes <= 2000
    assert record.truncated
    assert record.span_attributes["d"] == "d" * 10
