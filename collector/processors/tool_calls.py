"""Tool-call ids: joined from the model span that requested the call onto the tool span.

No instrumentation but afr's own puts the id on the tool span (docs/reference.md §3): it sits on
the model span, in the model's output (OpenInference ``llm.output_messages.*``, GenAI
``gen_ai.output.messages``, Logfire ``response``/``output``, contrib's Python reprs) and in
the conversation later model spans were given (their input). The join is a pure function of
the spans of one trace, so it gives the same answer wherever it runs: at ingest over a batch
(it fills what that batch holds) and in the read API over the whole run (authoritative;
docs/adr/0009-trace-level-normalization.md).

Two passes, the same rule as afr's exporter first:
1. the model span's own output: a tool span claims a call of the latest model span under the
   same parent (the SDK runs a model turn's tools right after it, beside it), same name and
   arguments first, then same name;
2. what is left: calls seen in the conversation history of later model spans, in
   conversation order, same name and arguments (OpenLLMetry on Chat Completions records no
   model output at all).
At ingest a batch may lack spans, so there only joins no missing span could change are
made: the stored id is either the run view's or empty, never a different one.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from collector.model import SpanRecord, escape_surrogates

__all__ = ["ToolCall", "history_calls", "link_tool_calls", "native_tool_call_id", "requested_calls"]

_NATIVE_ID_KEYS = ("gen_ai.tool.call.id", "tool_call.id", "tool.id")
_OUTPUT_KEYS = ("gen_ai.output.messages", "output.value", "output", "response")
_INPUT_KEYS = ("gen_ai.input.messages", "input.value", "input", "raw_input")
_FLAT_CALL = re.compile(
    r"^llm\.(input|output)_messages\.(\d+)\.message\.tool_calls\.(\d+)\.tool_call\."
    r"(id|function\.name|function\.arguments)$"
)
_FLAT_RESULT = re.compile(r"^llm\.input_messages\.(\d+)\.message\.tool_call_id$")
# contrib -v2 writes the SDK's output objects as Python reprs inside a text part.
_REPR_OBJECT = "ResponseFunctionToolCall("
_REPR_FIELD = re.compile(r"\b(\w+)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")")
_MAX_REPR_CHARS = 256 * 1024


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    name: str
    arguments: str | None  # canonical JSON (or the raw text); None when not captured


def native_tool_call_id(attributes: Mapping[str, str]) -> str:
    """The id an instrumentation put on the tool span itself (afr, plain GenAI)."""
    for key in _NATIVE_ID_KEYS:
        if attributes.get(key):
            return attributes[key]
    return ""


def canonical_arguments(value: Any) -> str | None:
    """Arguments compared by meaning: ``{"a": 1}`` as a string or an object is one value."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        if len(value) <= _CACHED_ARGUMENTS_CHARS:
            return _canonical_text(value)
        return _canonical_text.__wrapped__(value)
    return _canonical_document(value)


# A model span's calls come again in every later model span's conversation and in the tool
# span that ran them: each arguments text is read and written sorted once, not each time
# (~2.3 of a realistic OpenInference span's ~10 us of normalization).
_CACHED_ARGUMENTS_CHARS = 2048


@functools.lru_cache(maxsize=1024)
def _canonical_text(text: str) -> str | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return str(text)
    return _canonical_document(value)


def _canonical_document(value: Any) -> str | None:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return None


def _json(text: str | None) -> Any:
    if not text or text[0] not in "[{":
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _call(call_id: Any, name: Any, arguments: Any) -> ToolCall | None:
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        return None
    # Parsed from JSON or a repr: an escaped lone surrogate stays escaped in the stored id.
    return ToolCall(escape_surrogates(call_id), name, canonical_arguments(arguments))


def _repr_calls(text: str) -> list[ToolCall]:
    """Tool calls in contrib -v2's text parts: ``ResponseFunctionToolCall(...)`` reprs
    (Responses) or a chat message dict repr (Chat Completions)."""
    if len(text) > _MAX_REPR_CHARS:
        return []
    if text.startswith("{") and "'tool_calls'" in text:
        try:
            message = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return []
        return _item_calls(message)
    calls = []
    for chunk in text.split(_REPR_OBJECT)[1:]:
        fields: dict[str, Any] = {}
        for match in _REPR_FIELD.finditer(chunk):
            if match.group(1) not in fields:
                try:
                    fields[match.group(1)] = ast.literal_eval(match.group(2))
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    continue
        call = _call(fields.get("call_id"), fields.get("name"), fields.get("arguments"))
        if call:
            calls.append(call)
    return calls


def _item_calls(item: Any) -> list[ToolCall]:
    """Calls in one item of any shape the dialects use: a Responses item or ``Response``, a
    Chat Completions message, a GenAI parts message."""
    if not isinstance(item, dict):
        return []
    if item.get("type") == "function_call":
        call = _call(item.get("call_id"), item.get("name"), item.get("arguments"))
        return [call] if call else []
    calls: list[ToolCall] = []
    if isinstance(item.get("output"), list):  # a whole Response object
        for entry in item["output"]:
            calls += _item_calls(entry)
    for tool_call in item.get("tool_calls") or []:
        if isinstance(tool_call, dict) and isinstance(tool_call.get("function"), dict):
            function = tool_call["function"]
            call = _call(tool_call.get("id"), function.get("name"), function.get("arguments"))
            calls += [call] if call else []
    for part in item.get("parts") or []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "tool_call":
            call = _call(part.get("id"), part.get("name"), part.get("arguments"))
            calls += [call] if call else []
        elif part.get("type") == "text" and isinstance(part.get("content"), str):
            calls += _repr_calls(part["content"])
    return calls


def _result_ids(items: list[Any]) -> list[str]:
    """Ids of tool results in a conversation, in order: always the real call id."""
    ids: list[str] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call_output" or item.get("tool_call_id"):
            ids.append(str(item.get("call_id") or item.get("tool_call_id") or ""))
        for part in item.get("parts") or []:
            if isinstance(part, dict) and part.get("type") == "tool_call_response":
                ids.append(str(part.get("id") or ""))
    return [i for i in ids if i]


def _with_result_ids(calls: list[ToolCall], result_ids: list[str]) -> list[ToolCall]:
    # OpenLLMetry (Responses) labels history calls with the item id (fc_...) and their results
    # with the call id: a call whose id no result has takes the next unclaimed result id.
    if not result_ids:
        return calls
    own = {call.call_id for call in calls}
    known = set(result_ids)
    spare = iter([i for i in result_ids if i not in own])
    return [
        call
        if call.call_id in known
        else ToolCall(next(spare, call.call_id), call.name, call.arguments)
        for call in calls
    ]


def _flat_calls(attributes: Mapping[str, str], side: str) -> tuple[list[ToolCall], list[str]]:
    """OpenInference's flattened ``llm.{side}_messages.N.message.tool_calls.M.tool_call.*``."""
    fields: dict[tuple[int, int], dict[str, str]] = {}
    results: dict[int, str] = {}
    if f"llm.{side}_messages.0.message.role" not in attributes:
        return [], []  # not OpenInference's shape: no key to scan
    prefix = f"llm.{side}_messages."
    # A model span carries dozens of flattened message fields, few of them tool calls.
    for key in [key for key in attributes if "tool_call" in key]:
        if not key.startswith(prefix):
            continue
        value = attributes[key]
        match = _FLAT_CALL.match(key)
        if match and match.group(1) == side:
            index = (int(match.group(2)), int(match.group(3)))
            fields.setdefault(index, {})[match.group(4)] = value
        elif side == "input" and (result := _FLAT_RESULT.match(key)):
            results[int(result.group(1))] = value
    calls = []
    for index in sorted(fields):
        found = fields[index]
        call = _call(found.get("id"), found.get("function.name"), found.get("function.arguments"))
        calls += [call] if call else []
    return calls, [results[i] for i in sorted(results)]


def _calls(
    attributes: Mapping[str, str], keys: tuple[str, ...], side: str, names: frozenset[str] | None
) -> list[ToolCall]:
    calls, result_ids = _flat_calls(attributes, side)
    for key in keys:
        text = attributes.get(key)
        if calls or not text or (names is not None and not any(n in text for n in names)):
            # One source holding calls is enough (OpenInference repeats its flattened
            # messages in JSON); a body that never names the tools holds none of their calls.
            continue
        document = _json(text)
        items = document if isinstance(document, list) else [document]
        for item in items:
            calls += _item_calls(item)
        result_ids += _result_ids(items)
    if side == "input":
        calls = _with_result_ids(calls, result_ids)
    unique: dict[str, ToolCall] = {}
    for call in calls:
        unique.setdefault(call.call_id, call)
    return list(unique.values())


def requested_calls(
    attributes: Mapping[str, str], names: frozenset[str] | None = None
) -> list[ToolCall]:
    """The tool calls a model span's output asked for, in order (of the tools ``names``)."""
    return _calls(attributes, _OUTPUT_KEYS, "output", names)


def history_calls(
    attributes: Mapping[str, str], names: frozenset[str] | None = None
) -> list[ToolCall]:
    """The tool calls in the conversation a model span was given, in order."""
    return _calls(attributes, _INPUT_KEYS, "input", names)


def _claim(
    calls: list[ToolCall], name: str, raw_arguments: str, *, by_name: bool, sure: bool
) -> str:
    """Takes the call a tool span executed out of ``calls``: same name and arguments first,
    then (``by_name``, or arguments not captured) same name, in order. ``sure``: only a call
    no other one could be mistaken for (at ingest, where the batch may lack spans)."""
    same_name = [index for index, call in enumerate(calls) if call.name == name]
    if not same_name:
        return ""
    arguments = canonical_arguments(raw_arguments)
    exact = [i for i in same_name if calls[i].arguments == arguments]
    loose = [i for i in same_name if arguments is None or calls[i].arguments is None]
    if by_name and not sure:
        loose = same_name
    chosen = exact or loose
    if not chosen or (sure and len(chosen) > 1):
        return ""
    return calls.pop(chosen[0]).call_id


def _has_twin(tool: SpanRecord, tools: list[SpanRecord]) -> bool:
    namesakes = [t for t in tools if t is not tool and t.tool_name == tool.tool_name]
    if not namesakes:
        return False
    arguments = canonical_arguments(tool.input)
    return any(canonical_arguments(t.input) == arguments for t in namesakes)


def _by_start(records: list[SpanRecord]) -> list[SpanRecord]:
    # Model spans first on a tie: a turn's tools start after its model call.
    return sorted(records, key=lambda r: (r.timestamp_ns, r.span_type != "llm", r.span_id))


def _join_trace(
    models: list[SpanRecord], tools: list[SpanRecord], taken: set[str], sure: bool
) -> dict[str, str]:
    joined: dict[str, str] = {}
    names = frozenset(t.tool_name for t in tools if t.tool_name)
    if not names:
        return joined
    pending: dict[str, list[ToolCall]] = {}
    parents = {t.parent_span_id for t in tools}
    for span in _by_start(models + tools):
        if span.span_type == "llm":
            if span.parent_span_id not in parents:
                continue  # no tool span beside it waits for an id
            requested = requested_calls(span.original_attributes(), names)
            pending[span.parent_span_id] = [c for c in requested if c.call_id not in taken]
            continue
        candidates = pending.get(span.parent_span_id, [])
        call_id = _claim(candidates, span.tool_name, span.input, by_name=True, sure=sure)
        if call_id:
            joined[span.span_id] = call_id
            taken.add(call_id)
    left = [t for t in tools if t.span_id not in joined]
    if not left:
        return joined
    # A call in a model span's history ran before that model span started: it can only be a
    # tool span's that started earlier.
    history: dict[str, tuple[ToolCall, int]] = {}
    for model in _by_start(models):
        for call in history_calls(model.original_attributes(), names):
            if call.call_id not in taken:
                first = history.get(call.call_id, (call, 0))[0]
                history[call.call_id] = (first, model.timestamp_ns)
    for tool in _by_start(left) if history else []:
        eligible = [call for call, seen_ns in history.values() if seen_ns > tool.timestamp_ns]
        if not eligible or (sure and _has_twin(tool, left)):
            continue
        call_id = _claim(eligible, tool.tool_name, tool.input, by_name=False, sure=sure)
        if call_id:
            joined[tool.span_id] = call_id
            del history[call_id]
    return joined


def link_tool_calls(records: Iterable[SpanRecord], *, whole_trace: bool) -> None:
    """Fills ``tool_call_id`` of tool spans that carry none of their own, per trace.

    ``whole_trace``: every span of each trace is in ``records`` (the read API's run view), so
    equal calls are told apart by order. Otherwise (an ingest batch) only a join no missing
    span could change is made; the rest stays empty for the run view to fill."""
    traces: dict[str, tuple[list[SpanRecord], list[SpanRecord], set[str]]] = {}
    for record in records:
        if record.span_type not in ("llm", "tool"):
            continue
        models, tools, taken = traces.setdefault(record.trace_id, ([], [], set()))
        if record.span_type == "llm":
            models.append(record)
        elif native := native_tool_call_id(record.span_attributes):
            taken.add(native)
        else:
            tools.append(record)
    for models, tools, taken in traces.values():
        if not tools or not models:
            continue
        joined = _join_trace(models, tools, taken, sure=not whole_trace)
        for tool in tools:
            tool.tool_call_id = joined.get(tool.span_id) or tool.tool_call_id
