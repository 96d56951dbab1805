"""Normalize: one canonical agent span model, whatever instrumentation sent the span.

Recognised dialects (REFERENCE.md §3): afr's own exporter, OpenInference, OpenLLMetry
(Traceloop), the OTel contrib ``-v2`` instrumentation, Pydantic Logfire, and plain OTel
GenAI conventions. Each dialect is one small function that fills the canonical fields from
the span's attributes; the first whose marker attribute is present wins. Unknown spans are
kept as ``other``, never dropped.

Bodies leave the attribute map here: the dialect's input/output attribute becomes
``Input``/``Output`` (its key is remembered), and any other attribute longer than
``BODY_ATTRIBUTE_BYTES`` moves to ``BodyAttributes``.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from collector.model import SpanRecord

__all__ = ["BODY_ATTRIBUTE_BYTES", "normalize"]

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
_HANDOFF_TOOL_PREFIX = "transfer_to_"


_UINT64_MAX = 2**64 - 1


def _int(value: str | None) -> int:
    if not value:
        return 0
    try:
        return min(_UINT64_MAX, max(0, int(float(value))))
    except (ValueError, OverflowError):
        return 0


def _bodies(record: SpanRecord, input_key: str | None, output_key: str | None) -> None:
    attrs = record.span_attributes
    if input_key and input_key in attrs:
        record.input = attrs.pop(input_key)
        record.input_key = input_key
    if output_key and output_key in attrs:
        record.output = attrs.pop(output_key)
        record.output_key = output_key


def _genai_common(record: SpanRecord) -> None:
    attrs = record.span_attributes
    record.agent_name = record.agent_name or attrs.get("gen_ai.agent.name", "")
    record.tool_name = record.tool_name or attrs.get("gen_ai.tool.name", "")
    record.tool_call_id = record.tool_call_id or attrs.get("gen_ai.tool.call.id", "")
    record.model = (
        record.model or attrs.get("gen_ai.response.model") or attrs.get("gen_ai.request.model", "")
    )
    record.input_tokens = record.input_tokens or _int(
        attrs.get("gen_ai.usage.input_tokens") or attrs.get("gen_ai.usage.prompt_tokens")
    )
    record.output_tokens = record.output_tokens or _int(
        attrs.get("gen_ai.usage.output_tokens") or attrs.get("gen_ai.usage.completion_tokens")
    )
    if record.span_type == "tool":
        _bodies(record, "gen_ai.tool.call.arguments", "gen_ai.tool.call.result")
    elif record.span_type == "llm":
        _bodies(record, "gen_ai.input.messages", "gen_ai.output.messages")


def _afr(record: SpanRecord) -> None:
    attrs = record.span_attributes
    record.dialect = "afr"
    record.span_type = _AFR_TYPES.get(attrs.get("afr.span.type", ""), "other")
    if record.span_type == "handoff":
        record.agent_name = attrs.get("afr.handoff.from_agent", "")
    _genai_common(record)
    kind = attrs.get("afr.run.kind")
    if kind in ("capture", "replay", "eval"):
        record.run_kind = kind
    record.source_run_id = attrs.get("afr.source_run_id", "")


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
    elif span_type == "custom" and lowered.startswith("turn"):
        span_type = "turn"
    record.span_type = span_type
    if span_type == "agent":
        record.agent_name = attrs.get("agent.name") or attrs.get("graph.node.id") or name
    if span_type == "tool":
        record.tool_name = attrs.get("tool.name") or name
        record.tool_call_id = attrs.get("tool_call.id") or attrs.get("tool.id", "")
    record.model = attrs.get("llm.model_name", "")
    record.input_tokens = _int(attrs.get("llm.token_count.prompt"))
    record.output_tokens = _int(attrs.get("llm.token_count.completion"))
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


def _logfire(record: SpanRecord) -> None:
    attrs = record.span_attributes
    record.dialect = "logfire"
    template = attrs.get("logfire.msg_template", "")
    lowered = template.lower()
    sdk_type = attrs.get("sdk_span_type", "")
    if sdk_type in ("task", "turn"):
        span_type = sdk_type
    elif lowered.startswith("agent run"):
        span_type = "agent"
        record.agent_name = attrs.get("name", "")
    elif lowered.startswith(("responses api", "chat completion", "generation")):
        span_type = "llm"
    elif lowered.startswith("function"):
        span_type = "tool"
        record.tool_name = attrs.get("name", "")
    elif lowered.startswith("handoff"):
        span_type = "handoff"
        record.agent_name = attrs.get("from_agent", "")
    elif lowered.startswith("guardrail"):
        span_type = "guardrail"
    elif lowered.startswith("openai agents trace") or lowered.startswith("agent workflow"):
        span_type = "workflow"
    elif lowered.startswith("mcp"):
        span_type = "mcp"
    elif lowered.startswith("turn"):
        span_type = "turn"
    elif lowered.startswith("task"):
        span_type = "task"
    else:
        span_type = "custom"
    record.span_type = span_type
    _genai_common(record)
    if not record.model:
        record.model = attrs.get("gen_ai.request.model") or attrs.get("model", "")
    if not record.input_key:
        _bodies(record, "input", "output" if "output" in attrs else "response")
    error = attrs.get("error")
    if error and not record.error_type:
        try:
            parsed = json.loads(error)
            record.error_type = str(parsed.get("message", "")) if isinstance(parsed, dict) else ""
        except (json.JSONDecodeError, RecursionError):
            record.error_type = ""


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
    record.span_type = span_type
    agent = record.agent_name or attrs.get("gen_ai.agent.name", "")
    if contrib and agent == _CONTRIB_PLACEHOLDER_AGENT:
        agent = ""
    if span_type == "agent" and not agent and name.startswith(op + " "):
        agent = name[len(op) + 1 :]
    record.agent_name = agent if span_type != "workflow" else ""
    if span_type == "tool" and not attrs.get("gen_ai.tool.name") and name.startswith(op + " "):
        record.tool_name = name[len(op) + 1 :]
    _genai_common(record)


_DIALECTS: tuple[tuple[str, Callable[[SpanRecord], None]], ...] = (
    ("afr.span.type", _afr),
    ("openinference.span.kind", _openinference),
    ("traceloop.span.kind", _traceloop),
    ("logfire.msg_template", _logfire),
    ("gen_ai.operation.name", _genai),
)


def _error_type(record: SpanRecord) -> str:
    explicit = record.span_attributes.get("error.type")
    if explicit:
        return explicit
    if record.status_code != "Error":
        return ""
    for name, attributes in zip(record.event_names, record.event_attributes, strict=False):
        if name == "exception" and attributes.get("exception.type"):
            return attributes["exception.type"]
    return record.status_message[:200] or "error"


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
    roots: dict[str, str] = {}
    for record in records:
        normalize_one(record)
        if not record.parent_span_id:
            roots[record.trace_id] = record.span_name
    for record in records:
        # A CHAIN/custom span named like its trace's root is the SDK's task span
        # (OpenInference names both after the workflow).
        if (
            record.span_type == "custom"
            and record.dialect == "openinference"
            and record.parent_span_id
        ) and roots.get(record.trace_id) == record.span_name:
            record.span_type = "task"
    return records
