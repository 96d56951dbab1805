"""The normalizer on spans carrying any mix of the dialects' attributes, with any values.

``normalize`` (ingest) and ``normalize_trace`` (the read API's run view) never raise; a span
gets one of the declared types; derived fields are strings the store can hold (valid UTF-8
when the span was); nothing the span carried is lost (bodies move, they are not dropped); and
``normalize_trace`` keeps its promises (docs/adr/0009): idempotent, independent of span
order, and never contradicted by what ingest stored for any cut of the trace into batches.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from afr_exporter.semconv import RUN_KINDS
from collector.blocks import encode_block
from collector.model import SPAN_TYPES, SpanRecord
from collector.processors.normalize import BODY_ATTRIBUTE_BYTES, normalize, normalize_trace
from tests.fuzz.strategies import (
    BASE_NS,
    any_text,
    fuzz_settings,
    huge_text,
    record,
    value_text,
)

_DERIVED_TEXT = (
    "span_type", "dialect", "agent_name", "tool_name", "tool_call_id", "model", "error_type",
    "input", "output", "input_key", "output_key", "run_kind", "source_run_id", "span_name",
)  # fmt: skip
_TOOLS = ["lookup", "refund_order", "transfer_to_refund_agent"]
# "\ud800" is a lone surrogate: written into JSON (or a repr) as its escape.
_CALL_IDS = ["call_1", "call_2", "fc_1", "\ud800", ""]
_ARGUMENTS = ['{"a": 1}', '{"a":1}', '{"a": 2}', "", "{", '"\\ud800"']

# Markers and kinds first: each dialect's function runs only when its marker is present.
_MARKERS: dict[str, list[str]] = {
    "afr.span.type": ["workflow", "agent", "response", "generation", "function", "handoff",
                      "guardrail", "mcp_tools", "turn", "task", "custom", "speech", "x"],
    "openinference.span.kind": ["AGENT", "LLM", "TOOL", "CHAIN", "GUARDRAIL", "RETRIEVER",
                                "EMBEDDING", "agent", "llm", "tool", "chain", "?"],
    "traceloop.span.kind": ["workflow", "agent", "tool", "handoff", "task", "llm", ""],
    "logfire.msg_template": ["Agent run: {name!r}", "Function: {name}", "Responses API with {gen_ai.request.model!r}",
                             "Handoff: {from_agent} → {to_agent}", "Guardrail {name!r} {triggered=}",
                             "OpenAI Agents trace: {name}", "Turn {n}", "{", "}", "{}", "{0}", "{name:>{width}}",
                             "{a.b}", "{name!x}", "{name=!r:>10}", "MCP: list tools", "task"],
    "gen_ai.operation.name": ["invoke_workflow", "invoke_agent", "create_agent", "chat",
                              "text_completion", "embeddings", "execute_tool", "retrieval",
                              "handoff", "agent_handoff", "guardrail", "guardrail_check",
                              "unknown", ""],
}  # fmt: skip
_NAMED: dict[str, list[str]] = {
    "afr.run.kind": [*RUN_KINDS, "x", ""],
    "sdk_span_type": ["task", "turn", "agent", ""],
    "gen_ai.tool.name": _TOOLS,
    "tool.name": _TOOLS,
    "name": [*_TOOLS, "Triage Agent"],
    "traceloop.entity.name": _TOOLS,
    "gen_ai.tool.call.id": _CALL_IDS,
    "tool_call.id": _CALL_IDS,
    "tool.id": _CALL_IDS,
    "gen_ai.tool.call.arguments": _ARGUMENTS,
    "input.value": _ARGUMENTS,
    "traceloop.entity.input": _ARGUMENTS,
    "gen_ai.usage.input_tokens": ["12", "-3", "1e400", "nan", "inf", "9" * 5000, "1.5", ""],
    "llm.token_count.prompt": ["12", "-3", "1e400", "nan", "9" * 5000],
}
_FREE_KEYS = [
    "afr.handoff.from_agent", "afr.source_run_id", "gen_ai.agent.name", "gen_ai.tool.call.result",
    "gen_ai.request.model", "gen_ai.response.model", "gen_ai.usage.output_tokens",
    "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens", "gen_ai.guardrail.name",
    "gen_ai.handoff.from_agent", "gen_ai.workflow.name", "gen_ai.system_instructions",
    "error.type", "agent.name", "graph.node.id", "llm.model_name", "llm.token_count.completion",
    "output.value", "traceloop.entity.output", "llm.request.type", "from_agent", "model",
    "input", "raw_input", "output", "response", "error", "triggered", "logfire.span_type",
    "llm.input_messages.0.message.role", "llm.output_messages.0.message.role",
    "llm.output_messages.0.message.tool_calls.0.tool_call.id",
    "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
    "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments",
    "llm.input_messages.1.message.tool_call_id", "llm.input_messages.99999999999999999999.message.tool_call_id",
]  # fmt: skip
_MESSAGE_KEYS = [
    "gen_ai.output.messages", "gen_ai.input.messages", "output.value", "input.value",
    "output", "response", "input", "raw_input",
]  # fmt: skip


@st.composite
def tool_call_bodies(draw: st.DrawFn) -> str:
    """A model span's messages holding tool calls, in each dialect's shape."""
    calls = draw(
        st.lists(
            st.tuples(st.sampled_from(_CALL_IDS), st.sampled_from(_TOOLS), st.sampled_from(_ARGUMENTS)),
            max_size=3,
        )
    )  # fmt: skip
    shape = draw(st.sampled_from(["parts", "responses", "chat", "repr", "dict_repr", "result"]))
    if shape == "parts":
        parts = [{"type": "tool_call", "id": i, "name": n, "arguments": a} for i, n, a in calls]
        return json.dumps([{"role": "assistant", "parts": parts}])
    if shape == "responses":
        return json.dumps(
            [
                {"type": "function_call", "call_id": i, "name": n, "arguments": a}
                for i, n, a in calls
            ]
        )
    if shape == "chat":
        tool_calls = [{"id": i, "function": {"name": n, "arguments": a}} for i, n, a in calls]
        return json.dumps(
            [{"role": "assistant", "tool_calls": tool_calls}, {"tool_call_id": "call_1"}]
        )
    if shape == "repr":
        text = " ".join(
            f"ResponseFunctionToolCall(arguments={a!r}, call_id={i!r}, name={n!r})"
            for i, n, a in calls
        )
        return json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}])
    if shape == "dict_repr":
        message = {
            "content": None,
            "tool_calls": [{"id": i, "function": {"arguments": a, "name": n}} for i, n, a in calls],
        }
        return json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": repr(message)}]}]
        )
    return json.dumps([{"type": "function_call_output", "call_id": i} for i, _, _ in calls])


values = value_text | tool_call_bodies() | huge_text()
# An error as instrumentations write it: text, "msg: {data}", the SDK's dict (JSON or repr).
error_texts = (
    value_text
    | st.builds(lambda m: json.dumps({"message": m, "data": {}}), any_text)
    | st.builds(lambda m: repr({"message": m}), any_text)
    | st.builds(lambda m: f"{m}: {{'x': 1}}", any_text)
    | st.sampled_from(
        ["Error running tool (non-fatal): {}", "Max turns exceeded", "Tool not found: x"]
    )
)


@st.composite
def attribute_maps(draw: st.DrawFn) -> dict[str, str]:
    attributes: dict[str, str] = {}
    for marker in draw(st.lists(st.sampled_from(sorted(_MARKERS)), max_size=2, unique=True)):
        attributes[marker] = draw(st.sampled_from(_MARKERS[marker]) | value_text)
    for key in draw(st.lists(st.sampled_from(sorted(_NAMED)), max_size=4, unique=True)):
        attributes[key] = draw(st.sampled_from(_NAMED[key]) | value_text)
    for key in draw(st.lists(st.sampled_from(_FREE_KEYS), max_size=4, unique=True)):
        attributes[key] = draw(values)
    for key in draw(st.lists(st.sampled_from(_MESSAGE_KEYS), max_size=2, unique=True)):
        attributes[key] = draw(tool_call_bodies())
    for key in draw(st.lists(st.sampled_from(["error.type", "error"]), max_size=1)):
        attributes[key] = draw(error_texts)
    return attributes


_SPAN_NAMES = st.sampled_from(
    ["invoke_agent Triage Agent", "execute_tool lookup", "chat gpt-4.1", "turn", "handoff",
     "transfer_to_refund_agent", "Guardrail check", "invoke_agent ", "step", ""]
) | value_text  # fmt: skip


@st.composite
def spans(
    draw: st.DrawFn, span_id: str = "b7ad6b7169203331", parents: tuple[str, ...] = ("",)
) -> SpanRecord:
    status = draw(st.sampled_from(["Unset", "Ok", "Error"]))
    exception = {"exception.type": draw(error_texts), "exception.message": draw(value_text)}
    return record(
        span_id=span_id,
        parent_span_id=draw(st.sampled_from(parents)),
        timestamp_ns=BASE_NS + draw(st.integers(0, 5)),
        span_name=draw(_SPAN_NAMES),
        span_kind=draw(st.sampled_from(["Internal", "Server", "Client"])),
        scope_name=draw(st.sampled_from(["", "opentelemetry.instrumentation.openai_agents", "logfire"])),
        scope_version=draw(st.sampled_from(["", "0.62.0"])),
        span_attributes=draw(attribute_maps()),
        status_code=status,
        status_message=draw(error_texts),
        event_timestamps=[BASE_NS],
        event_names=[draw(st.sampled_from(["exception", "log"]))],
        event_attributes=[exception],
    )  # fmt: skip


def _valid_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _as_decoded(span: SpanRecord) -> SpanRecord:
    """The span as the decoder hands it over: its texts valid UTF-8 (a raw lone surrogate
    becomes U+FFFD; JSON escapes such as ``\\ud800``, being ASCII, stay)."""

    def scrub(text: str) -> str:
        return text.encode("utf-8", "replace").decode("utf-8")

    clean = copy.deepcopy(span)
    clean.span_name, clean.status_message = scrub(span.span_name), scrub(span.status_message)
    clean.span_attributes = {scrub(k): scrub(v) for k, v in span.span_attributes.items()}
    clean.event_attributes = [
        {scrub(k): scrub(v) for k, v in attributes.items()} for attributes in span.event_attributes
    ]
    return clean


def _check_invariants(before: SpanRecord, after: SpanRecord) -> None:
    assert after.span_type in SPAN_TYPES
    assert after.run_kind in RUN_KINDS
    for name in _DERIVED_TEXT:
        assert isinstance(getattr(after, name), str), name
    for count in (after.input_tokens, after.output_tokens):
        assert isinstance(count, int) and 0 <= count <= 2**64 - 1
    assert len(after.error_type) <= 200
    assert all(len(value) <= BODY_ATTRIBUTE_BYTES for value in after.span_attributes.values())
    # Bodies move (to Input/Output or BodyAttributes), nothing is dropped or changed.
    restored = after.original_attributes()
    assert all(restored.get(key) == value for key, value in before.span_attributes.items())


def _check_storable(after: SpanRecord) -> None:
    """What ingest derived from a decoded span: valid UTF-8, so rows and responses hold it."""
    for name in _DERIVED_TEXT:
        assert _valid_utf8(getattr(after, name)), (name, getattr(after, name))
    encode_block([after])


@fuzz_settings(100)
@given(spans())
def test_normalize_one_span_never_raises_and_keeps_its_promises(span: SpanRecord) -> None:
    decoded = _as_decoded(span)
    before = copy.deepcopy(span)
    normalize([span])
    _check_invariants(before, span)
    before = copy.deepcopy(decoded)
    normalize([decoded])
    _check_invariants(before, decoded)
    _check_storable(decoded)


_SPAN_IDS = [f"{i:016x}" for i in range(1, 9)]


@st.composite
def traces(draw: st.DrawFn) -> list[SpanRecord]:
    """One trace: unique span ids, parents among them, ties in start time."""
    count = draw(st.integers(1, 7))
    ids = _SPAN_IDS[:count]
    return [draw(spans(span_id, parents=("", *ids[:index]))) for index, span_id in enumerate(ids)]


def _view(records: list[SpanRecord]) -> dict[str, tuple[str, str]]:
    return {r.span_id: (r.span_type, r.tool_call_id) for r in records}


@fuzz_settings(30)
@given(traces(), st.randoms(use_true_random=False), st.data())
def test_normalize_trace_is_idempotent_order_free_and_never_contradicts_ingest(
    trace: list[SpanRecord], rng: Any, data: st.DataObject
) -> None:
    trace = [_as_decoded(span) for span in trace]
    originals = copy.deepcopy(trace)
    for before, after in zip(originals, normalize(trace), strict=True):
        _check_invariants(before, after)
    stored = copy.deepcopy(trace)  # what ingest stored from one batch holding the trace

    run = copy.deepcopy(stored)
    normalize_trace(run)
    for span in run:
        _check_storable(span)  # what the read API serves
    view = _view(run)
    again = copy.deepcopy(run)
    normalize_trace(again)
    assert _view(again) == view, "normalize_trace is not idempotent"
    shuffled = copy.deepcopy(stored)
    rng.shuffle(shuffled)
    normalize_trace(shuffled)
    assert _view(shuffled) == view, "normalize_trace depends on span order"

    # The same trace sent in consecutive batches (in end order, as exporters send spans).
    ordered = sorted(copy.deepcopy(originals), key=lambda r: r.timestamp_ns + r.duration_ns)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(ordered) - 1)), max_size=3)))
    batched: list[SpanRecord] = []
    for start, end in zip([0, *cuts], [*cuts, len(ordered)], strict=True):
        batched += normalize(ordered[start:end])
    for span in batched:
        if span.span_type == "tool" and span.tool_call_id:
            assert span.tool_call_id == view[span.span_id][1], (cuts, span.span_id)
    normalize_trace(batched)
    assert _view(batched) == view, "the run view depends on how its spans were batched"
