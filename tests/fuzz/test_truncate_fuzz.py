"""The truncator on spans of any shape and size, under any sane configuration: it never raises;
every value it keeps is within its limit; every value it replaced is a valid JSON sentinel
holding the original's size and SHA-256 and a prefix of it; every name is within
``max_name_bytes`` and, when cut, says so with the original's hash; nothing it writes is
invalid UTF-8; a span over ``max_span_bytes`` is left over it only when no value of it would
shrink by becoming a sentinel.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from collector.model import SpanRecord
from collector.processors.truncate import SENTINEL_KEY, TruncationConfig, Truncator, sentinel
from tests.fuzz.strategies import any_text, fuzz_settings, record

# Sizes around the limits below, in characters of 1 to 4 UTF-8 bytes (and control
# characters, which JSON escapes to six bytes).
_UNITS = ["a", "é", "日", "😀", "\x01", '"', "\\", "\ud800"]


@st.composite
def sized_text(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        return draw(any_text)
    unit = draw(st.sampled_from(_UNITS))
    return draw(any_text) + unit * draw(st.integers(0, 3000)) + draw(any_text)


_NAMED_FIELDS = ("span_name", "scope_name", "scope_version", "service_name", "trace_state")
configs = st.builds(
    TruncationConfig,
    max_body_bytes=st.integers(256, 4096),
    max_span_bytes=st.integers(512, 20_000),
    preview_bytes=st.integers(0, 3000),
    field_limits=st.dictionaries(st.sampled_from(["input", "output", "k0", "k1", "gen_ai.tool.definitions"]), st.integers(256, 4096), max_size=3),
    max_name_bytes=st.integers(128, 2048),
    max_resource_value_bytes=st.integers(256, 4096),
)  # fmt: skip
maps = st.dictionaries(st.sampled_from(["k0", "k1", "k2"]) | sized_text(), sized_text(), max_size=5)


@st.composite
def spans(draw: st.DrawFn) -> SpanRecord:
    events = draw(st.lists(st.tuples(sized_text(), maps), max_size=2))
    links = draw(st.lists(st.tuples(sized_text(), maps), max_size=2))
    fields: dict[str, Any] = {name: draw(sized_text()) for name in _NAMED_FIELDS}
    return record(
        **fields,
        status_message=draw(sized_text()),
        input=draw(sized_text()),
        output=draw(sized_text()),
        span_attributes=draw(maps),
        body_attributes=draw(maps),
        resource_attributes=draw(maps),
        event_timestamps=[0] * len(events),
        event_names=[name for name, _ in events],
        event_attributes=[attributes for _, attributes in events],
        link_trace_ids=["1" * 32] * len(links),
        link_span_ids=["2" * 16] * len(links),
        link_trace_states=[state for state, _ in links],
        link_attributes=[attributes for _, attributes in links],
    )


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _valid_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_prefix(kept: str, original: str) -> None:
    """What a cut keeps is the original's beginning (less its lone surrogates, which are not
    UTF-8 and are dropped), and valid UTF-8."""
    assert _valid_utf8(kept)
    valid = original.encode("utf-8", "surrogatepass").decode("utf-8", "ignore")
    assert valid.startswith(kept)


def _check_value(stored: str, original: str, limit: int) -> None:
    assert _size(stored) <= limit, "a value over its limit"
    if stored == original:
        return
    document = json.loads(stored)
    raw = original.encode("utf-8", "surrogatepass")
    assert document[SENTINEL_KEY] is True
    assert document["original_bytes"] == len(raw)
    assert document["sha256"] == hashlib.sha256(raw).hexdigest()
    _check_prefix(document["preview"], original)
    assert _valid_utf8(stored)


def _check_name(stored: str, original: str, limit: int) -> None:
    assert _size(stored) <= limit, "a name over max_name_bytes"
    if stored == original:
        return
    raw = original.encode("utf-8", "surrogatepass")
    kept, mark = stored.rsplit("…[", 1)
    _check_prefix(kept, original)
    assert mark == f"{SENTINEL_KEY} {len(raw)} bytes sha256:{hashlib.sha256(raw).hexdigest()[:16]}]"
    assert _valid_utf8(stored)


def _limit(config: TruncationConfig, name: str) -> int:
    return config.field_limits.get(name, config.max_body_bytes)


def _check_map(
    stored: dict[str, str], original: dict[str, str], config: TruncationConfig, *, resource: bool
) -> None:
    assert len(stored) == len(original)
    for (key, value), (old_key, old_value) in zip(stored.items(), original.items(), strict=True):
        _check_name(key, old_key, config.max_name_bytes)
        limit = config.max_resource_value_bytes if resource else _limit(config, key)
        _check_value(value, old_value, limit)


def _span_values(span: SpanRecord) -> tuple[list[str], list[str]]:
    """The values a span's size counts, and the keys, in a fixed order."""
    maps = [
        span.span_attributes,
        span.body_attributes,
        *span.event_attributes,
        *span.link_attributes,
    ]
    values = [span.input, span.output, *(v for m in maps for v in m.values())]
    return values, [k for m in maps for k in m]


@fuzz_settings(70)
@given(spans(), configs)
def test_truncated_spans_keep_their_limits_and_provenance(
    span: SpanRecord, config: TruncationConfig
) -> None:
    original = copy.deepcopy(span)
    Truncator(config)([span])

    for name in _NAMED_FIELDS:
        _check_name(getattr(span, name), getattr(original, name), config.max_name_bytes)
    _check_name(span.status_message, original.status_message, config.max_body_bytes)
    for stored, old in zip(span.event_names + span.link_trace_states, original.event_names + original.link_trace_states, strict=True):  # fmt: skip
        _check_name(stored, old, config.max_name_bytes)
    for field in ("input", "output"):
        _check_value(getattr(span, field), getattr(original, field), _limit(config, field))
    pairs = [
        (span.span_attributes, original.span_attributes),
        (span.body_attributes, original.body_attributes),
        *zip(span.event_attributes, original.event_attributes, strict=True),
        *zip(span.link_attributes, original.link_attributes, strict=True),
    ]
    for stored_map, old_map in pairs:
        _check_map(stored_map, old_map, config, resource=False)
    _check_map(span.resource_attributes, original.resource_attributes, config, resource=True)

    values, keys = _span_values(span)
    if sum(map(_size, values + keys)) > config.max_span_bytes:
        # Left over the limit only if no value would shrink by becoming (a smaller) sentinel.
        for stored, old in zip(values, _span_values(original)[0], strict=True):
            replacement = sentinel(old, min(config.preview_bytes, 256))
            assert len(replacement) >= len(stored), "a span left over its limit"
    changed = any(
        getattr(span, name) != getattr(original, name)
        for name in (*_NAMED_FIELDS, "status_message", "input", "output", "span_attributes", "body_attributes", "event_names", "event_attributes", "link_trace_states", "link_attributes", "resource_attributes")
    )  # fmt: skip
    assert span.truncated == changed


@fuzz_settings(15)
@given(st.lists(spans(), min_size=2, max_size=4), configs)
def test_a_resource_shared_by_spans_is_bounded_once(
    batch: list[SpanRecord], config: TruncationConfig
) -> None:
    shared = batch[0].resource_attributes
    original = dict(shared)
    for span in batch:
        span.resource_attributes = shared
    Truncator(config)(batch)
    _check_map(shared, original, config, resource=True)
    assert all(span.resource_attributes is shared for span in batch)
