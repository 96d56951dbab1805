"""Normalize: one canonical agent span model, whatever instrumentation sent the span.

Recognised dialects (docs/reference.md §3): afr's own exporter, OpenInference, OpenLLMetry
(Traceloop), the OTel contrib ``-v2`` instrumentation, Pydantic Logfire, and plain OTel
GenAI conventions. Each dialect is one small function that fills the canonical fields from
the span's attributes; the first whose marker attribute is present wins. Unknown spans are
kept as ``other``, never dropped.

A span is classified from itself alone, so its stored type never depends on which export
batch carried it or its trace root. What only the whole trace can tell is done by
``normalize_trace``, a pure function applied wherever a trace is at hand: tool-call ids joined
from the model spans (at ingest too, for the spans a batch holds), and the task/turn spans
that OpenInference and contrib ``-v2`` send without saying so (in the read API's run view).
See docs/adr/0009-trace-level-normalization.md.

Bodies leave the attribute map here: the dialect's input/output attribute becomes
``Input``/``Output`` (its key is remembered), and any other attribute longer than
``BODY_ATTRIBUTE_BYTES`` moves to ``BodyAttributes``.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping

from afr_exporter.semconv import (
    AFR_HANDOFF_FROM,
    AFR_RUN_KIND,
    AFR_SOURCE_RUN_ID,
    AFR_SPAN_TYPE,
    RUN_KINDS,
)
from collector.model import SpanRecord, escape_surrogates
from collector.processors.log_content import attach_event_content
from collector.processors.tool_calls import link_tool_calls, native_tool_call_id

__all__ = [
    "BODY_ATTRIBUTE_BYTES",
    "canonical_error_type",
    "normalize",
    "normalize_trace",
    "render_template",
]

BODY_ATTRIBUTE_BYTES = 1024

_AFR_TYPES = {
    "workflow": "workflow",
    "agent": "agent",
    "response": "llm",
    "generation": "llm",
    "transcription": "llm",
    "speech": "llm",
    "speech_group": "llm",
    "function": "tool",
    "handoff": "handoff",
    "guardrail": "guardrail",
    "mcp_tools": "mcp",
    "turn": "turn",
    "task": "task",
    "custom": "custom",
}
_GENAI_OPERATIONS = {
    "invoke_workflow": "workflow",
    "invoke_agent": "agent",
    "create_agent": "agent",
    "chat": "llm",
    "text_completion": "llm",
    "generate_content": "llm",
    "embeddings": "llm",
    "execute_tool": "tool",
    "retrieval": "tool",
}
_OPENINFERENCE_KINDS = {
    "AGENT": "agent",
    "LLM": "llm",
    "EMBEDDING": "llm",
    "RERANKER": "llm",
    "TOOL": "tool",
    "RETRIEVER": "tool",
    "GUARDRAIL": "guardrail",
    "CHAIN": "custom",
    "EVALUATOR": "custom",
    "PROMPT": "custom",
}
_TRACELOOP_KINDS = {
    "workflow": "workflow",
    "agent": "agent",
    "tool": "tool",
    "handoff": "handoff",
    "task": "task",
}
_CONTRIB_SCOPE = "opentelemetry.instrumentation.openai_agents"
_CONTRIB_PLACEHOLDER_AGENT = "OpenAI Agent"
_CONTRIB_UNKNOWN = "unknown"  # contrib -v2's operation for SDK spans it has no name for
_HANDOFF_TOOL_PREFIX = "transfer_to_"
# The Agents SDK's span error messages (agents/ SpanError, docs/reference.md §1): the canonical
# ErrorType of a failure, whatever an instrumentation appended or wrapped around them.
_SDK_ERROR_MESSAGES = (
    "Error running tool (non-fatal)",
    "Error running tool",
    "Error getting response",
    "Error streaming response",
    "Max turns exceeded",
    "Guardrail tripwire triggered",
    "Multiple handoffs requested",
    "Tool not found",
    "Invalid JSON provided",
    "Invalid JSON",
    "Tool execution cancelled",
)
_ERROR_TYPE_CHARS = 200
_DICT_MESSAGE = re.compile(r"""^\{\s*['"]message['"]\s*:\s*('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
_APPENDED_DATA = re.compile(r"^(.+?): (?:\{.*\}|\[.*\]|None)$", re.DOTALL)
_TEMPLATE_FIELD = re.compile(r"\{([^{}!=:]+)(=)?(?:!([rsa]))?(?::[^{}]*)?\}")


_UINT64_MAX = 2**64 - 1


def _int(value: str | None) -> int:
    if not value:
        return 0
    try:
        return min(_UINT64_MAX, max(0, int(float(value))))
    except (ValueError, OverflowError):
        return 0


def _python_repr(value: str) -> str:
    # Attribute values arrive as strings; booleans and numbers were decoded from typed OTLP
    # values, so they print as Python would have printed the original.
    if value in ("true", "false"):
        return value.capitalize()
    try:
        float(value)
    except ValueError:
        return repr(value)
    return value


def render_template(template: str, attributes: Mapping[str, str]) -> str:
    """A Logfire message template (``Function: {name}``, ``Guardrail {name!r} {triggered=}``)
    filled from the span's attributes; unknown fields stay as written."""

    def field(match: re.Match[str]) -> str:
        key, equals, conversion = match.groups()
        if key not in attributes:
            return match.group(0)
        value = attributes[key]
        shown = _python_repr(value) if conversion == "r" or (equals and not conversion) else value
        return f"{key}={shown}" if equals else shown

    return _TEMPLATE_FIELD.sub(field, template)


def _wrapped_message(text: str) -> str | None:
    """The ``message`` of an SDK error sent whole: JSON (Logfire) or a dict repr (OpenLLMetry),
    with any lone surrogate its escape decoded to escaped again (collector/model.py)."""
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("message"), str):
            return escape_surrogates(parsed["message"])
        match = _DICT_MESSAGE.match(text)
        if match:
            try:
                literal = ast.literal_eval(match.group(1))
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return None
            return escape_surrogates(literal) if isinstance(literal, str) else None
    return None


def canonical_error_type(text: str) -> str:
    """One short ErrorType per failure: the SDK's message without the data an
    instrumentation appended (``msg: {...}``) or the dict it was wrapped in."""
    text = text.strip()
    message = _wrapped_message(text)
    if message is not None:
        text = message.strip()
    for known in _SDK_ERROR_MESSAGES:
        if text == known or text.startswith(known + ":"):
            return known
    appended = _APPENDED_DATA.match(text)
    if appended:
        text = appended.group(1)
    return text[:_ERROR_TYPE_CHARS]


def _bodies(record: SpanRecord, input_key: str | None, output_key: str | None) -> None:
    attrs = record.span_attributes
    if input_key and input_key in attrs:
        record.input = attrs.pop(input_key)
        record.input_key = input_key
    if output_key and output_key in attrs:
        record.output = attrs.pop(output_key)
        record.output_key = output_key


_CACHE_READ_KEYS = (
    "gen_ai.usage.cache_read.input_tokens",  # the conventions since v1.37
    "gen_ai.usage.cache_read_input_tokens",  # OpenLLMetry, Anthropic's name
    "gen_ai.usage.cached_input_tokens",
)
_CACHE_CREATION_KEYS = (
    "gen_ai.usage.cache_creation.input_tokens",
    "gen_ai.usage.cache_creation_input_tokens",
)
_REASONING_KEYS = (
    "gen_ai.usage.reasoning.output_tokens",
    "gen_ai.usage.reasoning_tokens",  # OpenLLMetry
)


def _first_int(attrs: Mapping[str, str], keys: tuple[str, ...]) -> int:
    for key in keys:
        value = attrs.get(key)
        if value:
            return _int(value)
    return 0


def _usage_details(record: SpanRecord) -> None:
    """The cache and reasoning tokens under any of their GenAI names; the ones a dialect
    already filled stay."""
    attrs = record.span_attributes
    record.cache_read_tokens = record.cache_read_tokens or _first_int(attrs, _CACHE_READ_KEYS)
    record.cache_creation_tokens = record.cache_creation_tokens or _first_int(
        attrs, _CACHE_CREATION_KEYS
    )
    record.reasoning_tokens = record.reasoning_tokens or _first_int(attrs, _REASONING_KEYS)


def _raw_usage_details(record: SpanRecord, key: str) -> None:
    """The details from a usage object sent whole as JSON (Logfire's ``gen_ai.usage.raw``,
    the SDK's ``usage``): the Responses API's and Chat Completions' field names."""
    raw = record.span_attributes.get(key)
    if not raw or not raw.startswith("{"):
        return
    try:
        usage = json.loads(raw)
    except (ValueError, RecursionError):
        return
    if not isinstance(usage, dict):
        return
    inputs = usage.get("input_tokens_details") or usage.get("prompt_tokens_details") or {}
    outputs = usage.get("output_tokens_details") or usage.get("completion_tokens_details") or {}
    if not isinstance(inputs, dict) or not isinstance(outputs, dict):
        return

    def number(*values: object) -> int:
        for value in values:
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return min(value, _UINT64_MAX)
        return 0

    record.cache_read_tokens = record.cache_read_tokens or number(
        inputs.get("cached_tokens"), usage.get("cached_input_tokens")
    )
    record.cache_creation_tokens = record.cache_creation_tokens or number(
        inputs.get("cache_write_tokens"), usage.get("cache_write_input_tokens")
    )
    record.reasoning_tokens = record.reasoning_tokens or number(outputs.get("reasoning_tokens"))


def _genai_common(record: SpanRecord) -> None:
    attrs = record.span_attributes
    record.agent_name = record.agent_name or attrs.get("gen_ai.agent.name", "")
    record.tool_name = record.tool_name or attrs.get("gen_ai.tool.name", "")
    record.model = (
        record.model or attrs.get("gen_ai.response.model") or attrs.get("gen_ai.request.model", "")
    )
    record.input_tokens = record.input_tokens or _int(
        attrs.get("gen_ai.usage.input_tokens") or attrs.get("gen_ai.usage.prompt_tokens")
    )
    record.output_tokens = record.output_tokens or _int(
        attrs.get("gen_ai.usage.output_tokens") or attrs.get("gen_ai.usage.completion_tokens")
    )
    _usage_details(record)
    if record.span_type == "tool":
        record.tool_call_id = record.tool_call_id or native_tool_call_id(attrs)
        _bodies(record, "gen_ai.tool.call.arguments", "gen_ai.tool.call.result")
    elif record.span_type == "llm":
        _bodies(record, "gen_ai.input.messages", "gen_ai.output.messages")
        if record.event_names and not (record.input and record.output):
            attach_event_content(record)  # the earlier conventions: content as span events


def _afr(record: SpanRecord) -> None:
    attrs = record.span_attributes
    record.dialect = "afr"
    record.span_type = _AFR_TYPES.get(attrs.get(AFR_SPAN_TYPE, ""), "other")
    if record.span_type == "handoff":
        record.agent_name = attrs.get(AFR_HANDOFF_FROM, "")
    _genai_common(record)
    kind = attrs.get(AFR_RUN_KIND)
    if kind in RUN_KINDS:
        record.run_kind = kind
    record.source_run_id = attrs.get(AFR_SOURCE_RUN_ID, "")


def _openinference(record: SpanRecord) -> None:
    attrs = record.span_attributes
    record.dialect = "openinference"
    kind = attrs.get("openinference.span.kind", "").upper()
    name = record.span_name
    lowered = name.lower()
    span_type = _OPENINFERENCE_KINDS.get(kind, "other")
    if span_type == "agent" and not record.parent_span_id and "agent.name" not in attrs:
        span_type = "workflow"  # the trace root is an AGENT span named after the workflow
    elif span_type == "tool" and lowered.startswith(("handoff", "transfer_to")):
        span_type = "handoff"
        record.agent_name = attrs.get("input.value", "")
    elif span_type == "custom" and "guardrail" in lowered:
        span_type = "guardrail"
    elif span_type == "custom" and name == "turn":
        # The SDK's turn span has no name of its own: OpenInference names it by its type.
        span_type = "turn"
    # Any other CHAIN is the SDK's task span (named after the workflow) or a custom span:
    # only its place in the trace tells which (normalize_trace).
    record.span_type = span_type
    if span_type == "agent":
        record.agent_name = attrs.get("agent.name") or attrs.get("graph.node.id") or name
    if span_type == "tool":
        record.tool_name = attrs.get("tool.name") or name
        record.tool_call_id = native_tool_call_id(attrs)
    record.model = attrs.get("llm.model_name", "")
    record.input_tokens = _int(attrs.get("llm.token_count.prompt"))
    record.output_tokens = _int(attrs.get("llm.token_count.completion"))
    record.cache_read_tokens = _int(attrs.get("llm.token_count.prompt_details.cache_read"))
    record.cache_creation_tokens = _int(attrs.get("llm.token_count.prompt_details.cache_write"))
    record.reasoning_tokens = _int(attrs.get("llm.token_count.completion_details.reasoning"))
    if span_type != "handoff":
        _bodies(record, "input.value", "output.value")


def _traceloop(record: SpanRecord) -> None:
    attrs = record.span_attributes
    record.dialect = "openllmetry"
    kind = attrs.get("traceloop.span.kind", "")
    span_type = _TRACELOOP_KINDS.get(kind)
    if span_type is None:
        op = attrs.get("gen_ai.operation.name", "")
        span_type = _GENAI_OPERATIONS.get(op) or ("llm" if "llm.request.type" in attrs else "other")
    record.span_type = span_type
    if span_type == "agent":
        record.agent_name = attrs.get("gen_ai.agent.name") or attrs.get("traceloop.entity.name", "")
    if span_type == "tool":
        record.tool_name = attrs.get("gen_ai.tool.name") or attrs.get("traceloop.entity.name", "")
    _genai_common(record)
    if not record.input_key:
        _bodies(record, "traceloop.entity.input", "traceloop.entity.output")


def _logfire_type(template: str, sdk_type: str) -> str:
    lowered = template.lower()
    if sdk_type in ("task", "turn"):
        return sdk_type
    for prefix, span_type in (
        ("agent run", "agent"),
        ("responses api", "llm"),
        ("chat completion", "llm"),
        ("generation", "llm"),
        ("function", "tool"),
        ("handoff", "handoff"),
        ("guardrail", "guardrail"),
        ("openai agents trace", "workflow"),
        ("agent workflow", "workflow"),
        ("mcp", "mcp"),
        ("turn", "turn"),
        ("task", "task"),
    ):
        if lowered.startswith(prefix):
            return span_type
    return "custom"


def _logfire(record: SpanRecord) -> None:
    attrs = record.span_attributes
    record.dialect = "logfire"
    template = attrs.get("logfire.msg_template", "")
    span_type = _logfire_type(template, attrs.get("sdk_span_type", ""))
    record.span_type = span_type
    # Logfire names a span by its unrendered template; the template itself stays an attribute.
    record.span_name = render_template(template, attrs) if template else record.span_name
    if span_type == "agent":
        record.agent_name = attrs.get("name", "")
    elif span_type == "tool":
        record.tool_name = attrs.get("name", "")
    elif span_type == "handoff":
        record.agent_name = attrs.get("from_agent", "")
    elif span_type == "workflow" and attrs.get("name"):
        attrs.setdefault("gen_ai.workflow.name", attrs["name"])  # what the run summary reads
    _genai_common(record)
    if not record.model:
        record.model = attrs.get("gen_ai.request.model") or attrs.get("model", "")
    if record.span_type == "llm":
        _raw_usage_details(record, "gen_ai.usage.raw")
        _raw_usage_details(record, "usage")
    if not record.input_key:
        # Responses API spans keep the SDK's input items in raw_input, not input.
        _bodies(record, "input" if "input" in attrs else "raw_input", None)
    if not record.output_key:
        _bodies(record, None, "output" if "output" in attrs else "response")
    error = attrs.get("error")
    if error and not record.error_type:
        record.error_type = canonical_error_type(error)


def _genai(record: SpanRecord) -> None:
    attrs = record.span_attributes
    op = attrs.get("gen_ai.operation.name", "")
    # OpenLLMetry and the contrib -v2 package share a scope name; only OpenLLMetry versions it
    # (its LLM spans carry no traceloop.span.kind, so they arrive here).
    shared_scope = record.scope_name.startswith(_CONTRIB_SCOPE)
    contrib = shared_scope and not record.scope_version
    record.dialect = "otel-contrib-v2" if contrib else ("openllmetry" if shared_scope else "genai")
    name = record.span_name
    span_type = _GENAI_OPERATIONS.get(op, "other")
    if op in ("handoff", "agent_handoff"):
        span_type = "handoff"
        record.agent_name = attrs.get("gen_ai.handoff.from_agent", "")
    elif op in ("guardrail", "guardrail_check") or "gen_ai.guardrail.name" in attrs:
        span_type = "guardrail"
    elif span_type == "agent" and not record.parent_span_id and record.span_kind == "Server":
        span_type = "workflow"  # contrib -v2 roots the trace in a SERVER invoke_agent span
    elif contrib and op == _CONTRIB_UNKNOWN:
        # The SDK's task, turn, custom and MCP spans: the SDK itself exports task and turn
        # as custom spans; their place in the trace tells them apart (normalize_trace).
        span_type = "custom"
    record.span_type = span_type
    agent = record.agent_name or attrs.get("gen_ai.agent.name", "")
    if span_type == "agent" and not agent and name.startswith(op + " "):
        agent = name[len(op) + 1 :]
    record.agent_name = agent if span_type != "workflow" else ""
    if span_type == "tool" and not attrs.get("gen_ai.tool.name") and name.startswith(op + " "):
        record.tool_name = name[len(op) + 1 :]
    _genai_common(record)
    if contrib and record.agent_name == _CONTRIB_PLACEHOLDER_AGENT:
        record.agent_name = ""  # stamped on every span, not an agent of the run


_DIALECTS: tuple[tuple[str, Callable[[SpanRecord], None]], ...] = (
    (AFR_SPAN_TYPE, _afr),
    ("openinference.span.kind", _openinference),
    ("traceloop.span.kind", _traceloop),
    ("logfire.msg_template", _logfire),
    ("gen_ai.operation.name", _genai),
)


def _error_type(record: SpanRecord) -> str:
    explicit = record.span_attributes.get("error.type")
    if explicit:
        return canonical_error_type(explicit)
    if record.status_code != "Error":
        return ""
    for name, attributes in zip(record.event_names, record.event_attributes, strict=False):
        if name == "exception" and attributes.get("exception.type"):
            return canonical_error_type(attributes["exception.type"])
    return canonical_error_type(record.status_message) or "error"


def normalize_one(record: SpanRecord) -> None:
    attrs = record.span_attributes
    for marker, fill in _DIALECTS:
        if marker in attrs:
            fill(record)
            break
    if record.span_type == "tool" and record.tool_name.startswith(_HANDOFF_TOOL_PREFIX):
        # The SDK's handoff tools are named transfer_to_<agent>; plain GenAI traces show a
        # handoff only as such a tool call.
        record.span_type = "handoff"
    record.error_type = record.error_type or _error_type(record)
    oversized = [key for key, value in attrs.items() if len(value) > BODY_ATTRIBUTE_BYTES]
    for key in oversized:
        record.body_attributes[key] = attrs.pop(key)


def normalize(records: list[SpanRecord]) -> list[SpanRecord]:
    """The ingest processor: every span on its own, then the tool-call ids this batch can join."""
    for record in records:
        normalize_one(record)
    link_tool_calls(records, whole_trace=False)
    return records


def _typed_by_structure(record: SpanRecord) -> bool:
    """A span whose instrumentation dropped the SDK type: task, turn or custom."""
    if record.span_type != "custom":
        return False
    attrs = record.span_attributes
    if record.dialect == "openinference":
        return attrs.get("openinference.span.kind", "").upper() == "CHAIN"
    return (
        record.dialect == "otel-contrib-v2"
        and attrs.get("gen_ai.operation.name") == _CONTRIB_UNKNOWN
    )


def _type_by_structure(records: list[SpanRecord]) -> None:
    # The SDK nests agent spans in the run's task span and a turn's model and tool spans in
    # a turn span under its agent span; custom spans sit anywhere else.
    by_id = {r.span_id: r for r in records}
    parents_of_agents = {r.parent_span_id for r in records if r.span_type == "agent"}
    for record in records:
        if not _typed_by_structure(record):
            continue
        parent = by_id.get(record.parent_span_id)
        if record.span_id in parents_of_agents:
            record.span_type = "task"
        elif parent is not None and parent.span_type == "agent":
            record.span_type = "turn"


def normalize_trace(records: list[SpanRecord]) -> None:
    """What only the whole trace tells, for ``records`` holding every span of their traces
    (the read API's run view). Pure and order-independent: the same spans, the same run."""
    _type_by_structure(records)
    link_tool_calls(records, whole_trace=True)
