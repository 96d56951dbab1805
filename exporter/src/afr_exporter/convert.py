"""Agents SDK spans -> OpenTelemetry spans. Runs on the bridge's background thread only.

``SpanConverter`` is deliberately single-threaded: it keeps a little state per open trace
(the workflow root's time bounds and the tool calls models made, so a later ``function``
span gets its tool-call id), and the one worker thread that owns it is the only caller.

Ids are exact and stable: the OTel trace id *is* the SDK trace id; span ids are the first
64 bits of the SDK's 96-bit ids (hashed when an id does not have the SDK's shape); the
workflow root's span id is derived from the trace id. Re-exporting a run yields the same ids.
In a trace whose metadata sets ``afr.deterministic_ids``, span ids derive instead from the
trace id and each span's place in start order (``ordinal_span_id``), so running the same
thing again under the same trace id yields the same ids too.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agents.tracing import Span, Trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from afr_exporter import messages
from afr_exporter import semconv as sc
from afr_exporter.evaluation import checked_evaluations

__all__ = [
    "SpanConverter",
    "ordinal_span_id",
    "otel_span_id",
    "otel_trace_id",
    "workflow_span_id",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_MAX_PENDING_CALL_GROUPS = 10_000
_MAX_OPEN_TRACES = 10_000

Attributes = dict[str, Any]


def _hash_bits(text: str, n_bytes: int) -> int:
    value = int.from_bytes(hashlib.sha256(text.encode()).digest()[:n_bytes], "big")
    return value or 1  # zero is the invalid id in OTel


def otel_trace_id(sdk_trace_id: str) -> int:
    """``trace_<32 hex>`` -> the same 128 bits; anything else -> a stable hash."""
    hex_part = sdk_trace_id.removeprefix("trace_")
    if len(hex_part) == 32:
        try:
            return int(hex_part, 16) or _hash_bits(sdk_trace_id, 16)
        except ValueError:
            pass
    return _hash_bits(sdk_trace_id, 16)


def otel_span_id(sdk_span_id: str) -> int:
    """``span_<24 hex>`` -> its first 64 bits; anything else -> a stable hash."""
    hex_part = sdk_span_id.removeprefix("span_")
    if len(hex_part) == 24:
        try:
            return int(hex_part[:16], 16) or _hash_bits(sdk_span_id, 8)
        except ValueError:
            pass
    return _hash_bits(sdk_span_id, 8)


def workflow_span_id(sdk_trace_id: str) -> int:
    """The span id of a trace's workflow root, derived from the trace id alone."""
    return _hash_bits("afr-workflow:" + sdk_trace_id, 8)


def ordinal_span_id(sdk_trace_id: str, ordinal: int) -> int:
    """The span id of the ``ordinal``-th span started in a trace with deterministic ids."""
    return _hash_bits(f"afr-span:{sdk_trace_id}:{ordinal}", 8)


def _span_id(sdk_trace_id: str, sdk_span_id: str, ordinals: Mapping[str, int] | None) -> int:
    ordinal = ordinals.get(sdk_span_id) if ordinals is not None else None
    if ordinal is None:
        return otel_span_id(sdk_span_id)
    return ordinal_span_id(sdk_trace_id, ordinal)


def iso_to_ns(stamp: str | None) -> int | None:
    if not stamp:
        return None
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _as_dict(value: Any) -> dict[str, Any]:
    plain = messages.as_plain(value)
    return plain if isinstance(plain, dict) else {}


@dataclass
class _OpenTrace:
    sdk_trace_id: str
    name: str | None = None
    group_id: str | None = None
    metadata: dict[str, Any] | None = None
    started_ns: int | None = None
    first_start_ns: int | None = None
    last_end_ns: int | None = None
    spans_seen: int = 0

    def widen(self, start_ns: int, end_ns: int) -> None:
        if self.first_start_ns is None or start_ns < self.first_start_ns:
            self.first_start_ns = start_ns
        if self.last_end_ns is None or end_ns > self.last_end_ns:
            self.last_end_ns = end_ns
        self.spans_seen += 1


@dataclass
class _Draft:
    """What one converter method fills in; turned into a ReadableSpan in one place."""

    name: str
    attributes: Attributes = field(default_factory=dict)
    kind: SpanKind = SpanKind.INTERNAL

    def put(self, key: str, value: Any) -> None:
        if value is None:
            return
        if isinstance(value, str | bool | int | float):
            self.attributes[key] = value
        elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            self.attributes[key] = tuple(value)
        else:
            self.attributes[key] = to_json(value)


def _usage(draft: _Draft, usage: Mapping[str, Any] | None) -> None:
    if not usage:
        return
    plain = _as_dict(usage)
    input_details = plain.get("input_tokens_details") or {}
    output_details = plain.get("output_tokens_details") or {}
    draft.put(sc.GEN_AI_USAGE_INPUT_TOKENS, plain.get("input_tokens"))
    draft.put(sc.GEN_AI_USAGE_OUTPUT_TOKENS, plain.get("output_tokens"))
    draft.put(
        sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
        input_details.get("cached_tokens", plain.get("cached_input_tokens")),
    )
    draft.put(
        sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
        input_details.get("cache_write_tokens", plain.get("cache_write_input_tokens")),
    )
    draft.put(sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, output_details.get("reasoning_tokens"))


def tool_definitions(tools: Sequence[Any], handoffs: Sequence[Any]) -> list[dict[str, Any]]:
    """Agent ``Tool`` and ``Handoff`` objects -> GenAI tool definitions with JSON schemas."""
    definitions: list[dict[str, Any]] = []
    for tool in tools:
        schema = getattr(tool, "params_json_schema", None)
        if schema is not None:
            definitions.append(
                {
                    "type": "function",
                    "name": getattr(tool, "name", None),
                    "description": getattr(tool, "description", None),
                    "parameters": schema,
                    "strict": getattr(tool, "strict_json_schema", None),
                }
            )
        else:
            definitions.append({"type": type(tool).__name__, "name": getattr(tool, "name", None)})
    for handoff in handoffs:
        definitions.append(
            {
                "type": "function",
                "name": getattr(handoff, "tool_name", None),
                "description": getattr(handoff, "tool_description", None),
                "parameters": getattr(handoff, "input_json_schema", None),
                "strict": getattr(handoff, "strict_json_schema", None),
                "handoff_to": getattr(handoff, "agent_name", None),
            }
        )
    return definitions


class SpanConverter:
    """Converts SDK spans and traces into OTel ``ReadableSpan`` objects ready to export."""

    def __init__(
        self,
        resource: Resource,
        *,
        capture_content: bool = True,
        latest_conventions: bool = False,
    ) -> None:
        """``latest_conventions`` (``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``):
        the workflow root is an ``invoke_agent`` span (the latest GenAI conventions folded the
        workflow into it) and agent spans carry ``gen_ai.agent.id``; else today's names."""
        self._resource = resource
        self._scope = InstrumentationScope(sc.SCOPE_NAME, _version())
        self._capture_content = capture_content
        self._latest = latest_conventions
        self._traces: OrderedDict[str, _OpenTrace] = OrderedDict()
        self._pending_calls: OrderedDict[tuple[str, str | None], list[messages.ToolCall]] = (
            OrderedDict()
        )

    # --- traces --------------------------------------------------------------------------
    def _open(self, sdk_trace_id: str) -> _OpenTrace:
        state = self._traces.get(sdk_trace_id)
        if state is None:
            state = self._traces[sdk_trace_id] = _OpenTrace(sdk_trace_id)
            while len(self._traces) > _MAX_OPEN_TRACES:
                self._traces.popitem(last=False)
        return state

    def trace_started(self, trace: Trace, started_ns: int) -> None:
        state = self._open(trace.trace_id)
        state.started_ns = started_ns
        self._remember_trace(state, trace)

    def _remember_trace(self, state: _OpenTrace, trace: Trace) -> None:
        state.name = trace.name
        state.group_id = getattr(trace, "group_id", None)
        metadata = getattr(trace, "metadata", None)
        state.metadata = dict(metadata) if isinstance(metadata, Mapping) else None

    def trace_ended(self, trace: Trace, ended_ns: int) -> ReadableSpan:
        """The workflow root span of ``trace``; forgets the trace's state."""
        state = self._traces.pop(trace.trace_id, None) or _OpenTrace(trace.trace_id)
        self._remember_trace(state, trace)
        for key in [k for k in self._pending_calls if k[0] == trace.trace_id]:
            del self._pending_calls[key]
        start = min(x for x in (state.started_ns, state.first_start_ns, ended_ns) if x is not None)
        end = max(x for x in (ended_ns, state.last_end_ns) if x is not None)
        name = state.name or "Agent workflow"
        operation = sc.OP_INVOKE_AGENT if self._latest else sc.OP_INVOKE_WORKFLOW
        draft = _Draft(f"{operation} {name}")
        draft.put(sc.AFR_SPAN_TYPE, "workflow")
        draft.put(sc.GEN_AI_OPERATION_NAME, operation)
        draft.put(sc.GEN_AI_WORKFLOW_NAME, name)
        draft.put(sc.AFR_WORKFLOW_NAME, name)
        draft.put(sc.GEN_AI_CONVERSATION_ID, state.group_id)
        draft.put(sc.AFR_SDK_TRACE_ID, trace.trace_id)
        metadata = dict(state.metadata or {})
        # Emitted as events below, not kept twice: the metadata holds what the run is.
        evaluations = [
            Event(sc.EVENT_GEN_AI_EVALUATION_RESULT, attributes, timestamp=end)
            for attributes in checked_evaluations(metadata.pop(sc.METADATA_EVALUATIONS, None))
        ]
        if metadata:
            draft.put(sc.AFR_TRACE_METADATA, to_json(metadata))
        kind = metadata.get(sc.METADATA_RUN_KIND)
        draft.put(sc.AFR_RUN_KIND, kind if kind in sc.RUN_KINDS else sc.RUN_KIND_CAPTURE)
        links: list[Link] = []
        source = metadata.get(sc.METADATA_SOURCE_RUN_ID)
        if isinstance(source, str) and source:
            source_sdk_id = source if source.startswith("trace_") else f"trace_{source}"
            draft.put(sc.AFR_SOURCE_RUN_ID, f"{otel_trace_id(source_sdk_id):032x}")
            source_context = SpanContext(
                otel_trace_id(source_sdk_id),
                workflow_span_id(source_sdk_id),
                is_remote=True,
                trace_flags=_SAMPLED,
            )
            links.append(Link(source_context, {sc.AFR_RUN_KIND: "source"}))
        linked = metadata.get(sc.METADATA_LINKED_RUNS)
        for role, run_id in linked.items() if isinstance(linked, Mapping) else []:
            if isinstance(run_id, str) and run_id:
                sdk_id = run_id if run_id.startswith("trace_") else f"trace_{run_id}"
                other = SpanContext(otel_trace_id(sdk_id), workflow_span_id(sdk_id), True, _SAMPLED)
                links.append(Link(other, {sc.AFR_LINK_ROLE: str(role)}))
        context = SpanContext(
            otel_trace_id(trace.trace_id),
            workflow_span_id(trace.trace_id),
            is_remote=False,
            trace_flags=_SAMPLED,
        )
        return ReadableSpan(
            name=draft.name,
            context=context,
            parent=None,
            resource=self._resource,
            attributes=draft.attributes,
            events=evaluations,
            links=links,
            kind=SpanKind.INTERNAL,
            instrumentation_scope=self._scope,
            status=Status(StatusCode.UNSET),
            start_time=start,
            end_time=end,
        )

    # --- spans ---------------------------------------------------------------------------
    def convert(
        self,
        span: Span[Any],
        tools_offered: list[dict[str, Any]] | None = None,
        run_start: RunStart | None = None,
        ordinals: Mapping[str, int] | None = None,
    ) -> ReadableSpan:
        """One finished SDK span -> one OTel span. ``tools_offered``: definitions the model
        was given, when they are not on the span itself (the Chat Completions path);
        ``run_start``: what the runner started a task span with; ``ordinals``: SDK span id ->
        place in start order, for a trace with deterministic ids."""
        data = span.span_data
        span_type = str(getattr(data, "type", "unknown"))
        method = getattr(self, f"_convert_{span_type}", None)
        draft: _Draft = (
            method(span, data, tools_offered) if method else self._convert_unknown(span, data)
        )
        if run_start is not None:
            self._run_start(draft, run_start)
        draft.put(sc.AFR_SPAN_TYPE, span_type)
        draft.put(sc.AFR_SDK_SPAN_ID, span.span_id)
        draft.put(sc.AFR_SDK_TRACE_ID, span.trace_id)
        draft.put(sc.AFR_SDK_PARENT_ID, span.parent_id)
        if not self._capture_content:
            draft.put(sc.AFR_CONTENT_CAPTURED, False)

        end = iso_to_ns(span.ended_at) or iso_to_ns(span.started_at) or time.time_ns()
        start = iso_to_ns(span.started_at) or end
        self._open(span.trace_id).widen(start, end)

        status = Status(StatusCode.UNSET)
        events: list[Event] = []
        error = span.error
        if error:
            message = str(error.get("message") or "error")
            status = Status(StatusCode.ERROR, message)
            draft.put(sc.ERROR_TYPE, message)
            detail = error.get("data")
            if detail is not None:
                draft.put(sc.AFR_ERROR_DATA, to_json(detail))
            events.append(
                Event(
                    "exception",
                    {"exception.type": message, "exception.message": _error_text(message, detail)},
                    timestamp=end,
                )
            )
        parent_id = (
            _span_id(span.trace_id, span.parent_id, ordinals)
            if span.parent_id
            else workflow_span_id(span.trace_id)
        )
        trace_id = otel_trace_id(span.trace_id)
        span_id = _span_id(span.trace_id, span.span_id, ordinals)
        return ReadableSpan(
            name=draft.name,
            context=SpanContext(trace_id, span_id, False, _SAMPLED),
            parent=SpanContext(trace_id, parent_id, False, _SAMPLED),
            resource=self._resource,
            attributes=draft.attributes,
            events=events,
            kind=draft.kind,
            instrumentation_scope=self._scope,
            status=status,
            start_time=start,
            end_time=end,
        )

    def _run_start(self, draft: _Draft, run_start: RunStart) -> None:
        run_input = run_start.input
        if not getattr(run_start.run_config, "trace_include_sensitive_data", True):
            run_input = None  # the run asked the SDK to keep content out of its traces
        if isinstance(run_input, str):
            self._content(draft, sc.AFR_RUN_INPUT, run_input)
        elif isinstance(run_input, list):  # input items; a resumed RunState is not an input
            self._content(draft, sc.AFR_RUN_INPUT, to_json(messages.as_plain(run_input)))
        if isinstance(run_start.max_turns, int):
            draft.put(sc.AFR_RUN_MAX_TURNS, run_start.max_turns)
        definitions = agent_definitions(run_start.starting_agent, run_start.run_config)
        if definitions and (run_input is None or not self._capture_content):
            for definition in definitions["agents"].values():  # content stays out
                definition["instructions"] = None
        if definitions:
            draft.put(sc.AFR_AGENTS, to_json(definitions))

    def _content(self, draft: _Draft, key: str, value: Any) -> None:
        if self._capture_content:
            draft.put(key, value)

    def _remember_calls(self, span: Span[Any], calls: list[messages.ToolCall]) -> None:
        if not calls:
            return
        key = (span.trace_id, span.parent_id)
        self._pending_calls.setdefault(key, []).extend(calls)
        while len(self._pending_calls) > _MAX_PENDING_CALL_GROUPS:
            self._pending_calls.popitem(last=False)

    def _claim_call(self, span: Span[Any], name: str, arguments: str | None) -> str | None:
        """The id of the model's tool call this function span executed (same parent span,
        same tool name, same arguments when they are known); each call is claimed once."""
        calls = self._pending_calls.get((span.trace_id, span.parent_id))
        if not calls:
            return None
        for exact in (True, False):
            for index, call in enumerate(calls):
                if call.name == name and (not exact or call.arguments == arguments):
                    del calls[index]
                    return call.call_id
        return None

    def _convert_agent(self, span: Span[Any], data: Any, _: object) -> _Draft:
        draft = _Draft(f"{sc.OP_INVOKE_AGENT} {data.name}")
        draft.put(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_AGENT)
        draft.put(sc.GEN_AI_AGENT_NAME, data.name)
        if self._latest:  # the SDK's agents have no id of their own: their name is one
            draft.put(sc.GEN_AI_AGENT_ID, data.name)
        draft.put(sc.AFR_AGENT_HANDOFFS, list(data.handoffs or []))
        draft.put(sc.AFR_AGENT_TOOLS, list(data.tools or []))
        draft.put(sc.AFR_AGENT_OUTPUT_TYPE, data.output_type)
        return draft

    def _convert_task(self, span: Span[Any], data: Any, _: object) -> _Draft:
        draft = _Draft(f"task {data.name}")
        draft.put(sc.AFR_TASK_NAME, data.name)
        draft.put(sc.AFR_USAGE_AGGREGATE, data.usage)
        return draft

    def _convert_turn(self, span: Span[Any], data: Any, _: object) -> _Draft:
        draft = _Draft(f"turn {data.turn} {data.agent_name}")
        draft.put(sc.AFR_TURN_NUMBER, data.turn)
        draft.put(sc.GEN_AI_AGENT_NAME, data.agent_name)
        draft.put(sc.AFR_USAGE_AGGREGATE, data.usage)
        return draft

    def _convert_response(self, span: Span[Any], data: Any, _: object) -> _Draft:
        response = data.response
        model = getattr(response, "model", None)
        draft = _Draft(f"{sc.OP_CHAT} {model or 'unknown'}", kind=SpanKind.CLIENT)
        draft.put(sc.GEN_AI_OPERATION_NAME, sc.OP_CHAT)
        draft.put(sc.GEN_AI_PROVIDER_NAME, sc.PROVIDER_OPENAI)
        draft.put(sc.AFR_MODEL_API, "responses")
        self._content(draft, sc.GEN_AI_INPUT_MESSAGES, messages.responses_input(data.input))
        if response is None:
            draft.put(sc.GEN_AI_RESPONSE_ID, getattr(data, "_response_id", None))
            _usage(draft, data.usage)
            return draft
        draft.put(sc.GEN_AI_REQUEST_MODEL, model)
        draft.put(sc.GEN_AI_RESPONSE_MODEL, model)
        draft.put(sc.GEN_AI_RESPONSE_ID, response.id)
        draft.put(sc.GEN_AI_REQUEST_TEMPERATURE, response.temperature)
        draft.put(sc.GEN_AI_REQUEST_TOP_P, response.top_p)
        draft.put(sc.GEN_AI_REQUEST_MAX_TOKENS, response.max_output_tokens)
        settings = {
            key: messages.as_plain(getattr(response, key, None))
            for key in (
                "temperature",
                "top_p",
                "max_output_tokens",
                "tool_choice",
                "parallel_tool_calls",
                "reasoning",
                "text",
                "truncation",
                "service_tier",
            )
            if getattr(response, key, None) is not None
        }
        draft.put(sc.AFR_MODEL_SETTINGS, settings)
        if response.instructions is not None:
            instructions = response.instructions
            parts = (
                [{"type": "text", "content": instructions}]
                if isinstance(instructions, str)
                else messages.as_plain(instructions)
            )
            self._content(draft, sc.GEN_AI_SYSTEM_INSTRUCTIONS, parts)
        if response.tools:
            draft.put(sc.GEN_AI_TOOL_DEFINITIONS, [messages.as_plain(t) for t in response.tools])
        calls = messages.tool_calls_in_responses_output(response.output)
        incomplete = getattr(response, "incomplete_details", None)
        if incomplete is not None and getattr(incomplete, "reason", None):
            finish = str(incomplete.reason)
        else:
            finish = "tool_calls" if calls else "stop"
        draft.put(sc.GEN_AI_RESPONSE_FINISH_REASONS, [finish])
        self._content(
            draft, sc.GEN_AI_OUTPUT_MESSAGES, messages.responses_output(response.output, finish)
        )
        self._remember_calls(span, calls)
        _usage(draft, data.usage or response.usage)
        return draft

    def _convert_generation(
        self, span: Span[Any], data: Any, tools_offered: list[dict[str, Any]] | None
    ) -> _Draft:
        draft = _Draft(f"{sc.OP_CHAT} {data.model or 'unknown'}", kind=SpanKind.CLIENT)
        draft.put(sc.GEN_AI_OPERATION_NAME, sc.OP_CHAT)
        draft.put(sc.GEN_AI_PROVIDER_NAME, sc.PROVIDER_OPENAI)
        draft.put(sc.AFR_MODEL_API, "chat_completions")
        draft.put(sc.GEN_AI_REQUEST_MODEL, data.model)
        config = {k: v for k, v in _as_dict(data.model_config).items() if v is not None}
        if config:
            draft.put(sc.AFR_MODEL_SETTINGS, config)
            draft.put(sc.GEN_AI_REQUEST_TEMPERATURE, config.get("temperature"))
            draft.put(sc.GEN_AI_REQUEST_TOP_P, config.get("top_p"))
            draft.put(sc.GEN_AI_REQUEST_MAX_TOKENS, config.get("max_tokens"))
        if tools_offered:
            draft.put(sc.GEN_AI_TOOL_DEFINITIONS, tools_offered)
        if data.input:
            instructions, converted = messages.chat_input([_as_dict(m) for m in data.input])
            if instructions is not None:
                self._content(
                    draft,
                    sc.GEN_AI_SYSTEM_INSTRUCTIONS,
                    [{"type": "text", "content": instructions}],
                )
            self._content(draft, sc.GEN_AI_INPUT_MESSAGES, converted)
        if data.output:
            output = [_as_dict(m) for m in data.output]
            calls = messages.tool_calls_in_chat_output(output)
            converted_output = messages.chat_output(output)
            draft.put(
                sc.GEN_AI_RESPONSE_FINISH_REASONS,
                [str(m.get("finish_reason")) for m in converted_output],
            )
            self._content(draft, sc.GEN_AI_OUTPUT_MESSAGES, converted_output)
            self._remember_calls(span, calls)
        _usage(draft, data.usage)
        return draft

    def _convert_function(self, span: Span[Any], data: Any, _: object) -> _Draft:
        draft = _Draft(f"{sc.OP_EXECUTE_TOOL} {data.name}")
        draft.put(sc.GEN_AI_OPERATION_NAME, sc.OP_EXECUTE_TOOL)
        draft.put(sc.GEN_AI_TOOL_NAME, data.name)
        draft.put(sc.GEN_AI_TOOL_TYPE, "function")
        draft.put(sc.GEN_AI_TOOL_CALL_ID, self._claim_call(span, data.name, data.input))
        self._content(draft, sc.GEN_AI_TOOL_CALL_ARGUMENTS, data.input)
        if data.output is not None:
            output = (
                data.output
                if isinstance(data.output, str)
                else to_json(messages.as_plain(data.output))
            )
            self._content(draft, sc.GEN_AI_TOOL_CALL_RESULT, output)
        draft.put(sc.AFR_MCP_DATA, data.mcp_data)
        return draft

    def _convert_handoff(self, span: Span[Any], data: Any, _: object) -> _Draft:
        draft = _Draft(f"handoff {data.from_agent} -> {data.to_agent}")
        draft.put(sc.GEN_AI_AGENT_NAME, data.from_agent)
        draft.put(sc.AFR_HANDOFF_FROM, data.from_agent)
        draft.put(sc.AFR_HANDOFF_TO, data.to_agent)
        return draft

    def _convert_guardrail(self, span: Span[Any], data: Any, _: object) -> _Draft:
        draft = _Draft(f"guardrail {data.name}")
        draft.put(sc.AFR_GUARDRAIL_NAME, data.name)
        draft.put(sc.AFR_GUARDRAIL_TRIGGERED, bool(data.triggered))
        return draft

    def _convert_custom(self, span: Span[Any], data: Any, _: object) -> _Draft:
        draft = _Draft(str(data.name))
        draft.put(sc.AFR_CUSTOM_NAME, data.name)
        self._content(draft, sc.AFR_CUSTOM_DATA, data.data)
        return draft

    def _convert_mcp_tools(self, span: Span[Any], data: Any, _: object) -> _Draft:
        draft = _Draft(f"mcp list_tools {data.server}")
        draft.put(sc.AFR_MCP_SERVER, data.server)
        draft.put(sc.AFR_MCP_TOOLS, list(data.result or []))
        return draft

    def _audio(self, name: str, data: Any) -> _Draft:
        draft = _Draft(f"{name} {data.model or 'unknown'}", kind=SpanKind.CLIENT)
        draft.put(sc.GEN_AI_REQUEST_MODEL, data.model)
        config = {k: v for k, v in _as_dict(data.model_config).items() if v is not None}
        if config:
            draft.put(sc.AFR_MODEL_SETTINGS, config)
        return draft

    def _convert_transcription(self, span: Span[Any], data: Any, _: object) -> _Draft:
        # The audio itself (base64) is not a useful trace attribute; its size and format are.
        draft = self._audio("transcription", data)
        draft.put(sc.AFR_AUDIO_INPUT_FORMAT, data.input_format)
        draft.put(sc.AFR_AUDIO_BYTES, len(data.input or ""))
        self._content(draft, sc.GEN_AI_OUTPUT_MESSAGES, _text_message("assistant", data.output))
        return draft

    def _convert_speech(self, span: Span[Any], data: Any, _: object) -> _Draft:
        draft = self._audio("speech", data)
        draft.put(sc.AFR_AUDIO_OUTPUT_FORMAT, data.output_format)
        draft.put(sc.AFR_AUDIO_BYTES, len(data.output or ""))
        self._content(draft, sc.GEN_AI_INPUT_MESSAGES, _text_message("user", data.input))
        return draft

    def _convert_speech_group(self, span: Span[Any], data: Any, _: object) -> _Draft:
        draft = _Draft("speech_group")
        self._content(draft, sc.GEN_AI_INPUT_MESSAGES, _text_message("user", data.input))
        return draft

    def _convert_unknown(self, span: Span[Any], data: Any) -> _Draft:
        span_type = str(getattr(data, "type", "unknown"))
        draft = _Draft(span_type)
        try:
            exported = data.export()
        except Exception:  # a span type we do not know may export anything, or fail
            exported = None
        self._content(draft, sc.AFR_SPAN_DATA, exported)
        return draft


@dataclass(frozen=True)
class RunStart:
    """What ``Runner.run`` was called with, as the runner frame holds it."""

    input: Any
    max_turns: Any
    starting_agent: Any
    run_config: Any


_MAX_AGENTS = 64


def _set_settings(settings: Any) -> dict[str, Any]:
    dump = getattr(settings, "to_json_dict", None)
    if not callable(dump):
        return {}
    return {k: v for k, v in dump().items() if v is not None}


def _output_schema(agent: Any) -> dict[str, Any] | None:
    output_type = getattr(agent, "output_type", None)
    if output_type is None or output_type is str:
        return None
    try:
        from agents.agent_output import AgentOutputSchema, AgentOutputSchemaBase

        schema = (
            output_type
            if isinstance(output_type, AgentOutputSchemaBase)
            else AgentOutputSchema(output_type)
        )
        if schema.is_plain_text():
            return None
        return {
            "name": schema.name(),
            "schema": schema.json_schema(),
            "strict": schema.is_strict_json_schema(),
        }
    except Exception:  # a type the SDK cannot describe: the replay says what it lacks
        return None


def _agent_definition(agent: Any, overrides: dict[str, Any]) -> dict[str, Any]:
    instructions = getattr(agent, "instructions", None)
    model = getattr(agent, "model", None)
    handoffs = [
        getattr(h, "name", None) if hasattr(h, "handoffs") else getattr(h, "agent_name", None)
        for h in getattr(agent, "handoffs", None) or []
    ]
    return {
        "instructions": instructions if isinstance(instructions, str) else None,
        "model": model if isinstance(model, str) else getattr(model, "model", None),
        "model_settings": {
            **_set_settings(getattr(agent, "model_settings", None)),
            **overrides,
        },
        "tools": tool_definitions(list(getattr(agent, "tools", None) or []), []),
        "handoffs": [h for h in handoffs if isinstance(h, str)],
        "output": _output_schema(agent),
    }


def agent_definitions(starting_agent: Any, run_config: Any) -> dict[str, Any]:
    """The starting agent and every agent reachable from it by handoffs, as a replay needs
    them (the run config's model settings override the agent's, as the runner applies
    them). ``{}`` when the starting agent is not an agent."""
    name = getattr(starting_agent, "name", None)
    if not isinstance(name, str):
        return {}
    overrides = _set_settings(getattr(run_config, "model_settings", None))
    found: dict[str, Any] = {}
    pending = [starting_agent]
    while pending and len(found) < _MAX_AGENTS:
        agent = pending.pop()
        agent_name = getattr(agent, "name", None)
        if not isinstance(agent_name, str) or agent_name in found:
            continue
        found[agent_name] = _agent_definition(agent, overrides)
        pending += [h for h in getattr(agent, "handoffs", None) or [] if hasattr(h, "handoffs")]
    return {"entry": name, "agents": found}


def _text_message(role: str, text: str | None) -> list[dict[str, Any]] | None:
    if text is None:
        return None
    return [{"role": role, "parts": [{"type": "text", "content": text}]}]


def _error_text(message: str, detail: Any) -> str:
    if isinstance(detail, Mapping) and isinstance(detail.get("error"), str):
        return f"{message}: {detail['error']}"
    return message


def _version() -> str:
    from afr_exporter import __version__

    return __version__
