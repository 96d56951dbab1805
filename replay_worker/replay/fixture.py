"""A replay fixture: everything needed to re-run a captured run, as a plain JSON document.

Built from the run as the collector's read API returns it (normalized spans). Versioned
(``afr.fixture/3``) because evals embed fixtures and outlive code versions::

    {"version": "afr.fixture/3", "source_run_id": ..., "source_status": "error",
     "workflow": ..., "group_id": ..., "trace_metadata": {...},
     "input": "..." | [input items], "max_turns": 10 | null, "entry_agent": "Triage Agent",
     "agents": {"<name>": {"instructions", "model", "model_settings", "tools": [{name,
                 description, parameters, strict}], "handoffs": [...], "output_type",
                 "output": {"name", "schema", "strict"} | null}},
     "tool_calls": [{"tool", "call_id", "arguments", "output", "error", "lossy", "agent"}],
     "guardrails": [{"name", "agent", "triggered"}],
     "source_errors": [{"span_type", "error_type"}],
     "stub_outputs": {"<tool>": "<output>"},
     "model_calls": [{"agent", "api", "output": [SDK output items] | null, "error", "usage":
                      {"input_tokens", "output_tokens"}, "turn", "lossy"}] | null}

``model_calls`` (version 3) are the run's model calls in order, each with what the model
answered as the SDK's output items (Responses API shape, whichever API the call used): an
assistant ``message`` with its ``output_text`` (a structured output is its JSON text), and
``function_call`` items with ``call_id``, ``name`` and ``arguments`` (handoffs are
``transfer_to_*`` calls). A fork answers the calls before its step from them
(``fork.py``). ``output`` is ``null`` when the span kept no content the fork can read.
Version 2 fixtures (embedded in older evals) still load, with ``model_calls`` ``null``: they
replay, but cannot be forked.

Each captured call keeps its **outcome**: ``output`` is what the model was shown — the
tool's result, or the error text when the call failed (then ``error`` names the failure) —
and ``null`` only when nothing was captured. ``model_settings`` are only what the agent (or
the run config) set: a Responses API echo of the server's defaults is never taken for them.
Agents come from the definitions afr's exporter records on the task span (every agent
reachable by handoffs, also those the source never reached); for other instrumentations,
from what the spans show. A run that lacks something a replay needs is refused with every
missing piece named.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from afr_exporter import semconv as sc

__all__ = [
    "FIXTURE_VERSION",
    "FIXTURE_VERSIONS",
    "AgentSpec",
    "CapturedCall",
    "Fixture",
    "FixtureError",
    "ModelCall",
    "build_fixture",
    "recorded_agent",
]

FIXTURE_VERSION = "afr.fixture/3"
FIXTURE_VERSIONS = ("afr.fixture/2", FIXTURE_VERSION)
"""What loads: version 2 is version 3 without ``model_calls``."""
_HANDOFF_PREFIX = "transfer_to_"
# Settings a replay passes on (ModelSettings fields with plain values); the worker sets
# store=False and bounds max_tokens itself.
_REPLAYED_SETTINGS = (
    "temperature",
    "top_p",
    "frequency_penalty",
    "presence_penalty",
    "tool_choice",
    "parallel_tool_calls",
    "truncation",
    "max_tokens",
    "verbosity",
    "top_logprobs",
)
# What the Responses API echoes back when the request left a setting out.
_RESPONSES_DEFAULTS: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "truncation": "disabled",
}
# Span types whose errors the runner produces from model behaviour, tool outcomes and
# guardrail outcomes — what a replay reproduces. An error elsewhere (a custom span of the
# user's code) cannot be replayed.
REPLAYABLE_ERROR_SPANS = frozenset({"tool", "llm", "agent", "turn", "task", "handoff", "guardrail"})


class FixtureError(ValueError):
    """The run lacks something a replay needs; the message names every missing piece."""


@dataclass
class AgentSpec:
    instructions: str | None = None
    model: str | None = None
    model_settings: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] = field(default_factory=list)
    handoffs: list[str] = field(default_factory=list)
    output_type: str | None = None
    output: dict[str, Any] | None = None
    """The structured output the agent must produce: ``{"name", "schema", "strict"}``."""


@dataclass
class CapturedCall:
    tool: str
    call_id: str
    arguments: str
    output: str | None
    error: str | None = None
    lossy: bool = False
    agent: str | None = None


@dataclass
class ModelCall:
    """One model call of the source run, in order (``llm:N`` is the N-th, from 1)."""

    agent: str | None
    api: str | None
    """``responses`` or ``chat_completions`` (``afr.model.api``), when the span says."""
    output: list[dict[str, Any]] | None
    """What the model answered, as SDK output items; None: not captured in a usable form."""
    error: str | None = None
    usage: dict[str, int | None] = field(default_factory=dict)
    turn: int | None = None
    """The run's turn (its turn span, from 1) the call was made in, when there are spans."""
    lossy: bool = False
    """The output was truncated or redacted at capture."""


@dataclass
class Fixture:
    source_run_id: str
    source_status: str
    workflow: str
    input: str | list[Any]
    entry_agent: str
    agents: dict[str, AgentSpec]
    tool_calls: list[CapturedCall]
    guardrails: list[dict[str, Any]] = field(default_factory=list)
    source_errors: list[dict[str, str]] = field(default_factory=list)
    max_turns: int | None = None
    group_id: str | None = None
    trace_metadata: dict[str, Any] = field(default_factory=dict)
    stub_outputs: dict[str, str] = field(default_factory=dict)
    model_calls: list[ModelCall] | None = None
    """None: not recorded (a version 2 fixture)."""
    version: str = FIXTURE_VERSION

    def to_json(self) -> dict[str, Any]:
        document = asdict(self)
        if self.version != FIXTURE_VERSION:  # an older fixture keeps its own shape
            document.pop("model_calls", None)
        return document

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Fixture:
        version = document.get("version")
        if version not in FIXTURE_VERSIONS:
            raise FixtureError(f"unsupported fixture version {version!r}")
        fields = dict(document)
        if version != FIXTURE_VERSION and "model_calls" in fields:
            raise FixtureError(f"a {version} fixture has no model_calls")
        fields["agents"] = {name: AgentSpec(**spec) for name, spec in document["agents"].items()}
        fields["tool_calls"] = [CapturedCall(**call) for call in document["tool_calls"]]
        if fields.get("model_calls") is not None:
            fields["model_calls"] = [ModelCall(**call) for call in document["model_calls"]]
        return cls(**fields)

    @property
    def source_failed(self) -> bool:
        return self.source_status == "error"

    @property
    def unreplayable_errors(self) -> list[dict[str, str]]:
        """Source failures no replay can reproduce (or fix): errors outside the runner."""
        return [e for e in self.source_errors if e["span_type"] not in REPLAYABLE_ERROR_SPANS]


def _json(value: str | None) -> Any:
    if not value:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None


def _owner_agent(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> str | None:
    current: dict[str, Any] | None = span
    while current is not None:
        if current["span_type"] in ("turn", "agent") and current.get("agent_name"):
            return str(current["agent_name"])
        current = by_id.get(current["parent_span_id"])
    return None


def _user_input(messages: Any) -> str:
    texts: list[str] = []
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        if message.get("role") != "user":
            if texts:
                break
            continue
        parts = message.get("parts")
        if isinstance(parts, list):
            texts += [
                str(p.get("content", ""))
                for p in parts
                if isinstance(p, dict) and p.get("type") == "text"
            ]
        elif isinstance(message.get("content"), str):
            texts.append(message["content"])
    return "\n".join(t for t in texts if t)


def _response_object(span: dict[str, Any]) -> dict[str, Any]:
    """The Responses API ``Response`` an instrumentation kept whole (Logfire's ``response``
    attribute, which normalization made the span's output), or {}."""
    parsed = _json(span.get("output"))
    if isinstance(parsed, dict) and parsed.get("object") == "response":
        return parsed
    return {}


def _openinference_system(attributes: dict[str, Any]) -> str | None:
    index = 0
    while (role := attributes.get(f"llm.input_messages.{index}.message.role")) is not None:
        if role == "system":
            return str(attributes.get(f"llm.input_messages.{index}.message.content") or "")
        index += 1
    return None


def _instructions(span: dict[str, Any], attributes: dict[str, Any], messages: Any) -> str | None:
    response = _response_object(span)
    if isinstance(response.get("instructions"), str):
        return str(response["instructions"])
    flattened = _openinference_system(attributes)
    if flattened is not None:
        return flattened
    parts = _json(attributes.get(sc.GEN_AI_SYSTEM_INSTRUCTIONS))
    if isinstance(parts, list):
        return "\n".join(
            str(p.get("content", ""))
            for p in parts
            if isinstance(p, dict) and p.get("type") == "text"
        )
    if isinstance(parts, str):
        return parts
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") == "system":
            text = _user_input([{**message, "role": "user"}])
            return text or None
    return None


def _tool_definition(definition: dict[str, Any]) -> dict[str, Any]:
    nested = definition.get("function")
    function: dict[str, Any] = nested if isinstance(nested, dict) else definition
    return {
        "name": function.get("name"),
        "type": definition.get("type") or "function",
        "description": function.get("description") or "",
        "parameters": function.get("parameters") or {"type": "object", "properties": {}},
        "strict": bool(function.get("strict", False)),
    }


def _tool_definitions(span: dict[str, Any], attributes: dict[str, Any]) -> list[dict[str, Any]]:
    definitions = _json(attributes.get(sc.GEN_AI_TOOL_DEFINITIONS))
    if not isinstance(definitions, list) and isinstance(_response_object(span).get("tools"), list):
        definitions = _response_object(span)["tools"]
    if not isinstance(definitions, list):  # OpenInference: llm.tools.{i}.tool.json_schema
        definitions = []
        index = 0
        while (schema := attributes.get(f"llm.tools.{index}.tool.json_schema")) is not None:
            definitions.append(_json(schema))
            index += 1
    return [_tool_definition(d) for d in definitions if isinstance(d, dict)]


def _settings(
    task_settings: dict[str, Any] | None, attributes: dict[str, Any], api: str | None
) -> dict[str, Any]:
    if task_settings is not None:  # exactly what the agent and the run config set
        captured = task_settings
        defaults: dict[str, Any] = {}
    else:
        captured = _json(attributes.get(sc.AFR_MODEL_SETTINGS)) or {}
        # The Chat Completions span holds the request's settings; a Responses span holds the
        # server's echo, defaults included.
        defaults = _RESPONSES_DEFAULTS if api != "chat_completions" else {}
    return {
        k: v
        for k, v in captured.items()
        if k in _REPLAYED_SETTINGS
        and v is not None
        and not isinstance(v, dict | list)
        and defaults.get(k, _NOTHING) != v
    }


_NOTHING = object()


def _tool_results(spans: list[dict[str, Any]]) -> dict[str, str]:
    """call id -> what the model was shown for it, read from the model calls' inputs."""
    results: dict[str, str] = {}
    for span in spans:
        if span["span_type"] != "llm":
            continue
        messages = _json(span.get("input")) or _json(
            span["attributes"].get(sc.GEN_AI_INPUT_MESSAGES)
        )
        for message in messages if isinstance(messages, list) else []:
            parts = message.get("parts") if isinstance(message, dict) else None
            for part in parts if isinstance(parts, list) else []:
                if isinstance(part, dict) and part.get("type") == "tool_call_response":
                    response = part.get("response")
                    if part.get("id") and response is not None:
                        results[str(part["id"])] = (
                            response if isinstance(response, str) else json.dumps(response)
                        )
    return results


def _run_input(spans: list[dict[str, Any]]) -> str | list[Any] | None:
    """The input the run started with: recorded on the task span by afr's exporter, else an
    input body on the workflow, task or agent span (other instrumentations), else the user
    messages of the first model call."""
    for span in spans:
        recorded = span["attributes"].get(sc.AFR_RUN_INPUT)
        if span["span_type"] == "task" and recorded:
            parsed = _json(recorded) if recorded.lstrip()[:1] == "[" else None
            return parsed if isinstance(parsed, list) else recorded
    for span in spans:
        if span["span_type"] in ("workflow", "task", "agent") and span.get("input"):
            parsed = _json(span["input"])
            text = _user_input(parsed) if isinstance(parsed, list) else None
            return text or (span["input"] if parsed is None else None)
    for span in spans:
        if span["span_type"] == "llm":
            text = _user_input(
                _json(span.get("input")) or _json(span["attributes"].get(sc.GEN_AI_INPUT_MESSAGES))
            )
            if text:
                return text
    return None


def _text_item(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _call_item(call_id: Any, name: Any, arguments: Any) -> dict[str, Any] | None:
    if not call_id or not name:
        return None
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {})
    return {
        "type": "function_call",
        "call_id": str(call_id),
        "name": str(name),
        "arguments": arguments,
        "status": "completed",
    }


def _parts_items(messages: list[Any]) -> list[dict[str, Any]] | None:
    """GenAI output messages (``gen_ai.output.messages``: parts of type text / tool_call):
    each message's text first, then its calls, as the SDK's items come."""
    items: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("parts"), list):
            return None
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for part in message["parts"]:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                texts.append(str(part.get("content") or ""))
            elif kind == "tool_call":
                item = _call_item(part.get("id"), part.get("name"), part.get("arguments"))
                if item is None:
                    return None
                calls.append(item)
            elif kind != "reasoning":  # a reasoning summary is not needed to answer again
                return None
        items += ([_text_item("".join(texts))] if texts else []) + calls
    return items


def _chat_items(message: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A Chat Completions assistant message (``content``, ``tool_calls``)."""
    items: list[dict[str, Any]] = []
    if isinstance(message.get("content"), str) and message["content"]:
        items.append(_text_item(message["content"]))
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            return None
        item = _call_item(call.get("id"), function.get("name"), function.get("arguments"))
        if item is None:
            return None
        items.append(item)
    return items


def _response_items(output: list[Any]) -> list[dict[str, Any]] | None:
    """Responses API output items, as a ``Response`` holds them."""
    items: list[dict[str, Any]] = []
    for item in output:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            texts = [
                str(c.get("text") or "")
                for c in item.get("content") or []
                if isinstance(c, dict) and c.get("type") == "output_text"
            ]
            items.append(_text_item("".join(texts)))
        elif kind == "function_call":
            call = _call_item(item.get("call_id"), item.get("name"), item.get("arguments"))
            if call is None:
                return None
            items.append(call)
        elif kind != "reasoning":
            return None
    return items


def _output_items(span: dict[str, Any]) -> list[dict[str, Any]] | None:
    """What a model call answered, as SDK output items, from whichever form the span kept:
    GenAI output messages (afr's exporter and the GenAI dialects), a whole ``Response``, a
    list of Responses output items, a Chat Completions message or completion. None when the
    span kept none of these (no content captured)."""
    parsed = _json(span.get("output")) or _json(span["attributes"].get(sc.GEN_AI_OUTPUT_MESSAGES))
    if isinstance(parsed, dict):
        if parsed.get("object") == "response" and isinstance(parsed.get("output"), list):
            return _response_items(parsed["output"])
        choices = parsed.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            message = choices[0].get("message")
            return _chat_items(message) if isinstance(message, dict) else None
        if parsed.get("role") == "assistant":
            return _chat_items(parsed)
        return None
    if not isinstance(parsed, list) or not parsed:
        return None
    if all(isinstance(m, dict) and "parts" in m for m in parsed):
        return _parts_items(parsed)
    if all(isinstance(i, dict) and "type" in i for i in parsed):
        return _response_items(parsed)
    if len(parsed) == 1 and isinstance(parsed[0], dict) and parsed[0].get("role") == "assistant":
        return _chat_items(parsed[0])
    return None


def _model_calls(spans: list[dict[str, Any]], by_id: dict[str, dict[str, Any]]) -> list[ModelCall]:
    turns = {
        s["span_id"]: n
        for n, s in enumerate((s for s in spans if s["span_type"] == "turn"), start=1)
    }

    def turn_of(span: dict[str, Any]) -> int | None:
        current = by_id.get(span["parent_span_id"])
        while current is not None:
            if current["span_id"] in turns:
                return turns[current["span_id"]]
            current = by_id.get(current["parent_span_id"])
        return None

    calls = []
    for span in spans:
        if span["span_type"] != "llm":
            continue
        failed = span["status"]["code"] == "Error"
        calls.append(
            ModelCall(
                agent=_owner_agent(span, by_id),
                api=span["attributes"].get(sc.AFR_MODEL_API),
                output=None if failed else _output_items(span),
                error=(span.get("error_type") or "error") if failed else None,
                usage={
                    "input_tokens": span.get("input_tokens"),
                    "output_tokens": span.get("output_tokens"),
                },
                turn=turn_of(span),
                lossy=bool(span.get("truncated")) or bool(span.get("redactions")),
            )
        )
    return calls


def _snake(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def recorded_agent(definition: dict[str, Any], seen: AgentSpec | None) -> AgentSpec:
    """An agent as the exporter recorded it at the start of the run; what the spans showed
    fills what the recording could not hold (dynamic instructions)."""
    tools = [
        {k: v for k, v in _tool_definition(t).items() if k != "type"}
        for t in definition.get("tools") or []
        if isinstance(t, dict) and t.get("type") == "function" and t.get("name")
    ]
    output = definition.get("output")
    return AgentSpec(
        instructions=definition.get("instructions") or (seen.instructions if seen else None),
        model=definition.get("model") or (seen.model if seen else None),
        model_settings=_settings(definition.get("model_settings") or {}, {}, None),
        tools=tools,
        handoffs=[str(h) for h in definition.get("handoffs") or []],
        output_type=(output or {}).get("name") or (seen.output_type if seen else None),
        output=output if isinstance(output, dict) else None,
    )


def build_fixture(run: dict[str, Any]) -> Fixture:
    summary, spans = run["run"], sorted(run["spans"], key=lambda s: s["start_time_unix_nano"])
    by_id = {s["span_id"]: s for s in spans}
    task = next((s for s in spans if s["span_type"] == "task"), None)
    task_attributes = task["attributes"] if task else {}
    max_turns = _json(task_attributes.get(sc.AFR_RUN_MAX_TURNS))

    agents: dict[str, AgentSpec] = {}
    entry: str | None = None
    for span in spans:
        if span["span_type"] == "agent" and span.get("agent_name"):
            name = span["agent_name"]
            spec = agents.setdefault(name, AgentSpec())
            attributes = span["attributes"]
            spec.handoffs = _json(attributes.get(sc.AFR_AGENT_HANDOFFS)) or list(spec.handoffs)
            spec.output_type = attributes.get(sc.AFR_AGENT_OUTPUT_TYPE)
            entry = entry or name
    hosted: set[str] = set()
    seen_llm: set[str] = set()
    handoff_tools: dict[str, set[str]] = {}
    for span in spans:
        if span["span_type"] != "llm":
            continue
        owner = _owner_agent(span, by_id)
        if owner is None:
            continue
        spec = agents.setdefault(owner, AgentSpec())
        attributes = span["attributes"]
        messages = _json(span.get("input")) or _json(attributes.get(sc.GEN_AI_INPUT_MESSAGES))
        if spec.instructions is None:
            spec.instructions = _instructions(span, attributes, messages)
        spec.model = spec.model or span.get("model") or attributes.get(sc.GEN_AI_REQUEST_MODEL)
        if owner not in seen_llm:
            seen_llm.add(owner)
            spec.model_settings = _settings(None, attributes, attributes.get(sc.AFR_MODEL_API))
        tools = _tool_definitions(span, attributes)
        hosted |= {str(t["name"] or t["type"]) for t in tools if t["type"] != "function"}
        offered = [
            {k: v for k, v in t.items() if k != "type"}
            for t in tools
            if t["type"] == "function" and t["name"]
        ]
        if offered:
            spec.tools = [t for t in offered if not str(t["name"]).startswith(_HANDOFF_PREFIX)]
            handoff_tools.setdefault(owner, set()).update(
                str(t["name"]) for t in offered if str(t["name"]).startswith(_HANDOFF_PREFIX)
            )
    # Handoffs the agent spans did not list (other instrumentations): the SDK's handoff tools
    # are named transfer_to_<agent name in snake case>.
    by_tool_name = {_HANDOFF_PREFIX + _snake(name): name for name in agents}
    for owner, names in handoff_tools.items():
        if not agents[owner].handoffs:
            agents[owner].handoffs = sorted(by_tool_name[n] for n in names if n in by_tool_name)
    recorded = _json(task_attributes.get(sc.AFR_AGENTS))
    if isinstance(recorded, dict) and isinstance(recorded.get("agents"), dict):
        entry = str(recorded.get("entry") or entry or "") or None
        for name, definition in recorded["agents"].items():
            agents[name] = spec = recorded_agent(definition, agents.get(name))
            hosted |= {
                str(t.get("name") or t.get("type"))
                for t in definition.get("tools") or []
                if isinstance(t, dict) and t.get("type") != "function"
            }
    if hosted:
        raise FixtureError(
            f"the run used hosted tools a replay cannot stub: {', '.join(sorted(hosted))}"
        )

    shown = _tool_results(spans)
    calls = []
    for span in spans:
        if span["span_type"] != "tool":
            continue
        call_id = span.get("tool_call_id") or ""
        output = span.get("output")
        if output is None or (output == "" and span["status"]["code"] == "Error"):
            output = shown.get(call_id)
        calls.append(
            CapturedCall(
                tool=span.get("tool_name") or span["name"],
                call_id=call_id,
                arguments=span.get("input") or "",
                output=output,
                error=(span.get("error_type") or "error")
                if span["status"]["code"] == "Error"
                else None,
                lossy=bool(span.get("truncated")) or bool(span.get("redactions")),
                agent=_owner_agent(span, by_id),
            )
        )
    guardrails = [
        {
            "name": span["attributes"].get(sc.AFR_GUARDRAIL_NAME) or span["name"],
            "agent": _owner_agent(span, by_id),
            "triggered": span["attributes"].get(sc.AFR_GUARDRAIL_TRIGGERED) == "true",
        }
        for span in spans
        if span["span_type"] == "guardrail"
    ]
    source_errors = [
        {"span_type": span["span_type"], "error_type": span.get("error_type") or "error"}
        for span in spans
        if span["status"]["code"] == "Error"
    ]
    run_input = _run_input(spans)

    missing = []
    if entry is None:
        missing.append("an agent span (which agent the run started with)")
    if not run_input:
        missing.append("the run's input (no task span input and no user message)")
    for name, spec in agents.items():
        if spec.instructions is None and name in seen_llm:
            missing.append(f"the instructions of agent {name!r}")
    offered_names = {t["name"] for spec in agents.values() for t in spec.tools}
    for call in calls:
        if call.tool not in offered_names and not call.tool.startswith(_HANDOFF_PREFIX):
            missing.append(f"the schema of tool {call.tool!r}")
    if missing or entry is None or not run_input:
        raise FixtureError(
            "the run cannot be replayed: it lacks " + "; ".join(dict.fromkeys(missing))
        )

    workflow_span = next((s for s in spans if s["span_type"] == "workflow"), None)
    workflow_attributes = workflow_span["attributes"] if workflow_span else {}
    metadata = _json(workflow_attributes.get(sc.AFR_TRACE_METADATA))
    return Fixture(
        source_run_id=summary["run_id"],
        source_status=summary["status"],
        workflow=summary["workflow"],
        input=run_input,
        entry_agent=entry,
        agents=agents,
        tool_calls=calls,
        guardrails=guardrails,
        source_errors=source_errors,
        max_turns=max_turns if isinstance(max_turns, int) else None,
        group_id=workflow_attributes.get(sc.GEN_AI_CONVERSATION_ID) or None,
        trace_metadata={k: v for k, v in (metadata or {}).items() if not str(k).startswith("afr.")},
        model_calls=_model_calls(spans, by_id),
    )
