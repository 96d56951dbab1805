"""A replay fixture: everything needed to re-run a captured run, as a plain JSON document.

Built from the run as the collector's read API returns it (normalized spans). Versioned
(``afr.fixture/1``) because evals embed fixtures and outlive code versions::

    {"version": "afr.fixture/1", "source_run_id": ..., "source_status": "error",
     "workflow": ..., "input": "...", "entry_agent": "Triage Agent",
     "agents": {"<name>": {"instructions", "model", "model_settings", "tools": [{name,
                 description, parameters, strict}], "handoffs": [...], "output_type"}},
     "tool_calls": [{"tool", "call_id", "arguments", "output" | null, "error", "lossy",
                     "agent"}],
     "guardrails": [{"name", "agent", "triggered"}],
     "stub_outputs": {"<tool>": "<output>"}}

``output`` is null when the tool produced none (the malformed ``"12.OO"`` call was refused by
argument validation before the tool ran); ``stub_outputs`` holds explicitly labelled
stand-ins for such calls (``replay_stub_output``), supplied by whoever asks for the replay.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "FIXTURE_VERSION",
    "AgentSpec",
    "CapturedCall",
    "Fixture",
    "FixtureError",
    "build_fixture",
]

FIXTURE_VERSION = "afr.fixture/1"
_HANDOFF_PREFIX = "transfer_to_"


class FixtureError(ValueError):
    """The run lacks something a replay needs (no model span, no agent, no input)."""


@dataclass
class AgentSpec:
    instructions: str | None = None
    model: str | None = None
    model_settings: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] = field(default_factory=list)
    handoffs: list[str] = field(default_factory=list)
    output_type: str | None = None


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
class Fixture:
    source_run_id: str
    source_status: str
    workflow: str
    input: str
    entry_agent: str
    agents: dict[str, AgentSpec]
    tool_calls: list[CapturedCall]
    guardrails: list[dict[str, Any]] = field(default_factory=list)
    stub_outputs: dict[str, str] = field(default_factory=dict)
    version: str = FIXTURE_VERSION

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Fixture:
        if document.get("version") != FIXTURE_VERSION:
            raise FixtureError(f"unsupported fixture version {document.get('version')!r}")
        fields = dict(document)
        fields["agents"] = {name: AgentSpec(**spec) for name, spec in document["agents"].items()}
        fields["tool_calls"] = [CapturedCall(**call) for call in document["tool_calls"]]
        return cls(**fields)


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
    for message in messages or []:
        if message.get("role") != "user":
            if texts:
                break
            continue
        texts += [p.get("content", "") for p in message.get("parts", []) if p.get("type") == "text"]
    return "\n".join(t for t in texts if t)


def _tool_definition(definition: dict[str, Any]) -> dict[str, Any]:
    nested = definition.get("function")
    function: dict[str, Any] = nested if isinstance(nested, dict) else definition
    return {
        "name": function.get("name"),
        "description": function.get("description") or "",
        "parameters": function.get("parameters") or {"type": "object", "properties": {}},
        "strict": bool(function.get("strict", False)),
    }


def build_fixture(run: dict[str, Any]) -> Fixture:
    summary, spans = run["run"], sorted(run["spans"], key=lambda s: s["start_time_unix_nano"])
    by_id = {s["span_id"]: s for s in spans}
    agents: dict[str, AgentSpec] = {}
    entry: str | None = None
    for span in spans:
        if span["span_type"] == "agent" and span.get("agent_name"):
            name = span["agent_name"]
            spec = agents.setdefault(name, AgentSpec())
            attributes = span["attributes"]
            spec.handoffs = _json(attributes.get("afr.agent.handoffs")) or list(spec.handoffs)
            spec.output_type = attributes.get("afr.agent.output_type")
            entry = entry or name
    first_llm_input: Any = None
    for span in spans:
        if span["span_type"] != "llm":
            continue
        owner = _owner_agent(span, by_id)
        if owner is None:
            continue
        spec = agents.setdefault(owner, AgentSpec())
        attributes = span["attributes"]
        instructions = _json(attributes.get("gen_ai.system_instructions"))
        if instructions and spec.instructions is None:
            spec.instructions = "\n".join(
                p.get("content", "") for p in instructions if p.get("type") == "text"
            )
        spec.model = spec.model or span.get("model") or attributes.get("gen_ai.request.model")
        settings = _json(attributes.get("afr.model.settings")) or {}
        spec.model_settings = {
            k: v
            for k, v in settings.items()
            if k in ("temperature", "top_p", "parallel_tool_calls", "tool_choice")
        }
        definitions = _json(attributes.get("gen_ai.tool.definitions")) or []
        tools = [_tool_definition(d) for d in definitions if isinstance(d, dict)]
        spec.tools = [
            t for t in tools if t["name"] and not str(t["name"]).startswith(_HANDOFF_PREFIX)
        ]
        if first_llm_input is None:
            first_llm_input = _json(span.get("input")) or _json(
                attributes.get("gen_ai.input.messages")
            )
    calls = [
        CapturedCall(
            tool=span.get("tool_name") or span["name"],
            call_id=span.get("tool_call_id") or "",
            arguments=span.get("input") or "",
            output=None if span["status"]["code"] == "Error" else (span.get("output") or ""),
            error=span.get("error_type") or None,
            lossy=bool(span.get("truncated")) or bool(span.get("redactions")),
            agent=_owner_agent(span, by_id),
        )
        for span in spans
        if span["span_type"] == "tool"
    ]
    guardrails = [
        {
            "name": span["attributes"].get("afr.guardrail.name") or span["name"],
            "agent": _owner_agent(span, by_id),
            "triggered": span["attributes"].get("afr.guardrail.triggered") == "true",
        }
        for span in spans
        if span["span_type"] == "guardrail"
    ]
    user_input = _user_input(first_llm_input)
    if entry is None or not user_input:
        raise FixtureError("the run has no agent span or no user input: nothing to replay")
    return Fixture(
        source_run_id=summary["run_id"],
        source_status=summary["status"],
        workflow=summary["workflow"],
        input=user_input,
        entry_agent=entry,
        agents=agents,
        tool_calls=calls,
        guardrails=guardrails,
    )
