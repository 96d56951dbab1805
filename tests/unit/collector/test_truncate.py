"""Truncation keeps provenance: valid UTF-8 and JSON at every boundary, the original's hash."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from collector.processors.truncate import SENTINEL_KEY, TruncationConfig, Truncator
from tests.unit.collector.test_redact import span

LIMIT = 1024


def truncator(**overrides: object) -> Truncator:
    config = TruncationConfig(max_body_bytes=LIMIT, preview_bytes=100, **overrides)  # type: ignore[arg-type]
    return Truncator(config)


def check_sentinel(stored: str, original: str) -> dict[str, object]:
    document: dict[str, object] = json.loads(stored)
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


# Every name-like field and every place a large value can hide, at and over the bound.
NAME_LIMIT = 256


def _placements(value: str) -> dict[str, Any]:
    return {
        "span_name": {"span_name": value},
        "scope_name": {"scope_name": value},
        "scope_version": {"scope_version": value},
        "service_name": {"service_name": value},
        "trace_state": {"trace_state": value},
        "event_name": {
            "event_names": [value],
            "event_timestamps": [1],
            "event_attributes": [{}],
        },
        "link_trace_state": {
            "link_trace_ids": ["a" * 32],
            "link_span_ids": ["b" * 16],
            "link_trace_states": [value],
            "link_attributes": [{}],
        },
        "span_attribute_key": {"span_attributes": {value: "v"}},
        "event_attribute_key": {
            "event_names": ["e"],
            "event_timestamps": [1],
            "event_attributes": [{value: "v"}],
        },
        "resource_key": {"resource_attributes": {value: "v"}},
    }


def _stored_names(record: Any) -> list[str]:
    names = [
        record.span_name,
        record.scope_name,
        record.scope_version,
        record.service_name,
        record.trace_state,
        *record.event_names,
        *record.link_trace_states,
    ]
    for mapping in (
        record.span_attributes,
        record.resource_attributes,
        *record.event_attributes,
        *record.link_attributes,
    ):
        names += list(mapping)
    return names


@pytest.mark.parametrize("unit", ["a", "é", "😀"])
@pytest.mark.parametrize("over", [False, True])
@pytest.mark.parametrize("placement", list(_placements("")))
def test_every_name_is_bounded_with_its_provenance(unit: str, over: bool, placement: str) -> None:
    width = len(unit.encode())
    value = unit * ((NAME_LIMIT // width) + (1 if over else 0))
    assert (len(value.encode()) > NAME_LIMIT) is over
    record = span(**_placements(value)[placement])
    truncator(max_name_bytes=NAME_LIMIT)([record])
    names = _stored_names(record)
    assert all(len(name.encode()) <= NAME_LIMIT for name in names)
    if not over:
        assert value in names and not record.truncated
        return
    assert value not in names and record.truncated
    (cut,) = [name for name in names if SENTINEL_KEY in name]
    kept, _, mark = cut.partition("…[")
    assert value.startswith(kept) and len(kept.encode()) > NAME_LIMIT // 2
    digest = hashlib.sha256(value.encode()).hexdigest()[:16]
    assert mark == f"{SENTINEL_KEY} {len(value.encode())} bytes sha256:{digest}]"


def test_a_long_status_message_is_bounded_by_the_body_limit() -> None:
    record = span(status_message="boom " * 1000, status_code="Error")
    truncator()([record])
    assert len(record.status_message.encode()) <= LIMIT and record.truncated
    assert record.status_message.startswith("boom boom")


def test_a_large_resource_value_is_cut_once_and_shared_by_every_span() -> None:
    resource = {"service.name": "svc", "blob": "x" * (1024 * 1024), "small": "kept"}
    records = [span(resource_attributes=resource, span_id=f"{i:016x}") for i in range(200)]
    cutter = truncator(max_resource_value_bytes=512)
    cutter(records)
    for record in records:
        assert record.resource_attributes is resource
        assert record.truncated
    check_sentinel(resource["blob"], "x" * (1024 * 1024))
    assert len(resource["blob"].encode()) <= 512
    assert resource["small"] == "kept"
    assert cutter.truncated_values == 1, "the shared resource is bounded once, not per span"


def test_a_resource_within_bounds_leaves_spans_untouched() -> None:
    resource = {"service.name": "svc", "host.name": "h" * 100}
    records = [span(resource_attributes=resource) for _ in range(3)]
    truncator()(records)
    assert not any(record.truncated for record in records)
    assert resource == {"service.name": "svc", "host.name": "h" * 100}
