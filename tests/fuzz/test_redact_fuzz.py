"""The redactor, as the collector builds it (``build_redactor``, default rules), on arbitrary
spans: it never raises; a secret planted anywhere in arbitrary text or JSON never survives
(the leak scanner of the redaction tests: no part, no 12-character piece, also decoded);
redacting what it stored changes nothing; text that no rule can match is left as it was.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import random
from pathlib import Path
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from collector.blocks import encode_block
from collector.model import SpanRecord
from collector.privacy import build_redactor
from collector.processors.redact import Redactor
from collector.processors.rules import is_sensitive_key
from collector.settings import CollectorSettings
from tests.fuzz.strategies import (
    any_text,
    fuzz_settings,
    huge_text,
    json_values,
    record,
    utf8_text,
    value_text,
)
from tests.secret_corpus import Kind, LeakScanner, Secret, all_kinds

KINDS = all_kinds()


@functools.cache
def redactor() -> Redactor:
    """One instance, as in the collector, where one serves every request."""
    settings = CollectorSettings(data_dir=Path("/nonexistent/afr-fuzz"), redaction_key="fuzz-key")
    return build_redactor(settings, {})


def _stored(span: SpanRecord) -> dict[str, Any]:
    return dataclasses.asdict(span)


# --- never raises --------------------------------------------------------------------------
deep_json = st.builds(
    lambda depth, opening: opening * depth, st.integers(1, 3000), st.sampled_from(["[", '{"a":'])
)
texts = value_text | huge_text() | deep_json
maps = st.dictionaries(
    any_text | st.sampled_from(["password", "api_key", "x-api-key"]), texts, max_size=4
)


@st.composite
def arbitrary_spans(draw: st.DrawFn) -> SpanRecord:
    events = draw(st.lists(st.tuples(any_text, maps), max_size=2))
    links = draw(st.lists(st.tuples(any_text, maps), max_size=2))
    return record(
        span_name=draw(any_text),
        status_message=draw(texts),
        trace_state=draw(any_text),
        scope_name=draw(any_text),
        service_name=draw(any_text),
        resource_attributes=draw(maps),
        span_attributes=draw(maps),
        body_attributes=draw(maps),
        input=draw(texts),
        output=draw(texts),
        event_timestamps=[0] * len(events),
        event_names=[name for name, _ in events],
        event_attributes=[attributes for _, attributes in events],
        link_trace_ids=["1" * 32] * len(links),
        link_span_ids=["2" * 16] * len(links),
        link_trace_states=[state for state, _ in links],
        link_attributes=[attributes for _, attributes in links],
    )


def _utf8(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


def _as_decoded(span: SpanRecord) -> SpanRecord:
    """Every text of the span valid UTF-8, as the decoder hands spans over (escapes stay)."""

    def clean(node: Any) -> Any:
        if isinstance(node, str):
            return _utf8(node)
        if isinstance(node, dict):
            return {clean(k): clean(v) for k, v in node.items()}
        if isinstance(node, list):
            return [clean(v) for v in node]
        return node

    return SpanRecord(**{f.name: clean(getattr(span, f.name)) for f in dataclasses.fields(span)})


@fuzz_settings(60)
@given(arbitrary_spans())
def test_redactor_never_raises_and_keeps_decoded_text_storable(span: SpanRecord) -> None:
    decoded = _as_decoded(span)
    redactor()([span])
    redactor()([decoded])
    encode_block([decoded])  # valid UTF-8 in, valid UTF-8 out: a row can hold it


# --- a planted secret never survives ----------------------------------------------------------
_SEPARATORS = [" ", "\n", "\t", ", ", " (", ") ", "; ", " | ", "\n\n"]


@st.composite
def secrets(draw: st.DrawFn) -> tuple[Kind, Secret]:
    kind = KINDS[draw(st.sampled_from(sorted(KINDS)))]
    return kind, kind.generate(random.Random(draw(st.integers(0, 2**32))))


@st.composite
def in_text(draw: st.DrawFn, secret: Secret) -> str:
    """The secret between two arbitrary texts, set apart by a separator (glued to a word,
    it would be part of that word, and no longer the secret)."""
    before, after = draw(utf8_text), draw(utf8_text)
    left, right = draw(st.sampled_from(_SEPARATORS)), draw(st.sampled_from(_SEPARATORS))
    return f"{before}{left if before else ''}{secret.text}{right if after else ''}{after}"


def _plant(document: Any, value: Any, path: list[int]) -> Any:
    """``document`` with ``value`` added where ``path`` leads (each step picks a child)."""
    if isinstance(document, list):
        if path and document and isinstance(document[path[0] % len(document)], list | dict):
            index = path[0] % len(document)
            return [
                *document[:index],
                _plant(document[index], value, path[1:]),
                *document[index + 1 :],
            ]
        at = path[0] % (len(document) + 1) if path else 0
        return [*document[:at], value, *document[at:]]
    if isinstance(document, dict):
        nested = [k for k, v in document.items() if isinstance(v, list | dict)]
        if path and nested:
            key = nested[path[0] % len(nested)]
            return {**document, key: _plant(document[key], value, path[1:])}
        return {**document, f"field{len(document)}": value}
    return [document, value]


@st.composite
def in_json(draw: st.DrawFn, kind: Kind, secret: Secret) -> str:
    """The secret as a value (or a key) somewhere in an arbitrary JSON document."""
    document = draw(json_values)
    path = draw(st.lists(st.integers(0, 10), max_size=6))
    if draw(st.booleans()):
        value: Any = kind.json_value(secret) if draw(st.booleans()) else draw(in_text(secret))
        planted = _plant(document, value, path)
    else:
        planted = _plant(document, {secret.text: draw(json_values)}, path)
    return json.dumps(planted, ensure_ascii=draw(st.booleans()))


_PLACES = ["attribute", "attribute_key", "name", "status", "input", "output", "event",
           "resource", "body", "link"]  # fmt: skip


def _place(span: SpanRecord, place: str, text: str) -> None:
    if place == "attribute":
        span.span_attributes["note"] = text
    elif place == "attribute_key":
        span.span_attributes[text] = "x"
    elif place == "name":
        span.span_name = text
    elif place == "status":
        span.status_code, span.status_message = "Error", text
    elif place in ("input", "output"):
        setattr(span, place, text)
        setattr(span, f"{place}_key", f"gen_ai.{place}.messages")
    elif place == "event":
        span.event_timestamps, span.event_names = [0], ["log"]
        span.event_attributes = [{"message": text}]
    elif place == "resource":
        span.resource_attributes = {"service.name": "svc", "owner": text}
    elif place == "body":
        span.body_attributes = {"gen_ai.system_instructions": text}
    elif place == "link":
        span.link_trace_ids, span.link_span_ids = ["1" * 32], ["2" * 16]
        span.link_trace_states, span.link_attributes = [""], [{"note": text}]


@st.composite
def planted_spans(draw: st.DrawFn) -> tuple[SpanRecord, Kind, Secret]:
    kind, secret = draw(secrets())
    text = draw(in_json(kind, secret) if draw(st.booleans()) else in_text(secret))
    span = record(span_attributes={"other": draw(value_text)})
    _place(span, draw(st.sampled_from(_PLACES)), text)
    return _as_decoded(span), kind, secret


@fuzz_settings(120)
@given(planted_spans())
def test_a_planted_secret_never_survives(planted: tuple[SpanRecord, Kind, Secret]) -> None:
    span, kind, secret = planted
    redactor()([span])
    leaks = LeakScanner({kind.name: secret}).scan_all(_stored(span))
    assert not leaks, f"{kind.name} survives: {sorted(leaks[kind.name])[:3]} in {_stored(span)}"


# --- idempotence ------------------------------------------------------------------------------
@fuzz_settings(70)
@given(planted_spans() | arbitrary_spans().map(lambda s: (_as_decoded(s), None, None)))
def test_redacting_what_was_stored_changes_nothing(planted: tuple[SpanRecord, Any, Any]) -> None:
    """A replay sends stored, pseudonymized text back in: it must come out as it went in."""
    span = planted[0]
    redactor()([span])
    once = copy.deepcopy(span)
    redactor()([span])
    assert _stored(span) == _stored(once)


# --- text no rule can match -------------------------------------------------------------------
# Lower-case words of at most 15 letters, set apart by spaces, commas, full stops and line
# breaks: no digit, '@', ':', '=', quote, '<', '%' or '\\', and no run of 16 token characters
# (a bearer token's shortest) or 31 base64 ones, so no detector and no key-name rule can match.
_WORDS = st.text(
    st.characters(min_codepoint=ord("a"), max_codepoint=ord("z")), min_size=1, max_size=15
)
safe_text = st.builds(
    lambda words, separators: "".join(w + s for w, s in zip(words, separators, strict=False)),
    st.lists(_WORDS, max_size=12),
    st.lists(st.sampled_from([" ", ", ", ". ", "\n", " - "]), min_size=12, max_size=12),
)
safe_keys = (
    st.lists(_WORDS, min_size=1, max_size=3)
    .map(".".join)
    .filter(lambda key: not is_sensitive_key(key))
)
safe_maps = st.dictionaries(safe_keys, safe_text, max_size=4)


@fuzz_settings(60)
@given(safe_text, safe_text, safe_text, safe_maps, safe_maps, st.lists(safe_maps, max_size=2))
def test_text_no_rule_can_match_is_left_as_it_was(
    name: str,
    status: str,
    body: str,
    attributes: dict[str, str],
    resource: dict[str, str],
    events: list[dict[str, str]],
) -> None:
    assume(name or status or body or attributes or resource or events)
    span = record(
        span_name=name,
        status_message=status,
        input=body,
        span_attributes=attributes,
        resource_attributes=resource,
        event_timestamps=[0] * len(events),
        event_names=["log"] * len(events),
        event_attributes=events,
    )
    before = _stored(copy.deepcopy(span))
    redactor()([span])
    assert _stored(span) == before
