"""Stand-in tools: the deterministic boundary of a replay (DESIGN.md decision 7).

A replay never runs a real tool. Each stand-in has the captured tool's name, description and
JSON schema; an invocation is validated against that schema exactly as the real tool's
argument model would (invalid arguments fail the same way, non-fatally, with the SDK's own
message), then matched to the captured sequence and answered with the captured output:

- policy ``next`` (default): the next unused captured call of that tool;
- policy ``exact``: the first unused call with the same arguments (JSON-equal);
- policy ``strict``: the next captured call overall must be this tool with these arguments.

A matched call without captured output is answered by an explicitly labelled
``replay_stub_output`` when one was supplied, otherwise the replay records a divergence and
tells the model the output is unavailable. Every stub hit, stub, divergence and lossy
(redacted or truncated) output is a span of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema
from agents import FunctionTool, RunContextWrapper
from agents.tracing import SpanError, custom_span, get_current_span

from replay_worker.replay.fixture import CapturedCall

__all__ = [
    "INVALID_ARGUMENTS_MESSAGE",
    "UNAVAILABLE_MESSAGE",
    "MatchPolicy",
    "StubRegistry",
    "ToolInvocation",
]

MatchPolicy = Literal["next", "exact", "strict"]
# The SDK's default failure text, so a model sees a failed replayed call as it saw the original.
INVALID_ARGUMENTS_MESSAGE = "An error occurred while running the tool. Please try again."
UNAVAILABLE_MESSAGE = "The output of this tool call is unavailable in this replay."


@dataclass
class ToolInvocation:
    """One call the replayed model made, and what the stand-in did with it."""

    step: int
    tool: str
    arguments: str
    outcome: str  # stub_hit | replay_stub_output | divergence | invalid_arguments
    captured_index: int | None = None
    output: str | None = None


def _same_arguments(a: str, b: str) -> bool:
    try:
        return bool(json.loads(a) == json.loads(b))
    except ValueError:
        return a == b


@dataclass
class StubRegistry:
    calls: list[CapturedCall]
    policy: MatchPolicy = "next"
    stub_outputs: dict[str, str] = field(default_factory=dict)
    used: set[int] = field(default_factory=set)
    invocations: list[ToolInvocation] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(i.outcome == "invalid_arguments" for i in self.invocations)

    @property
    def divergences(self) -> list[ToolInvocation]:
        return [i for i in self.invocations if i.outcome == "divergence"]

    def _match(self, tool: str, arguments: str) -> int | None:
        unused = [i for i in range(len(self.calls)) if i not in self.used]
        if self.policy == "strict":
            if (
                unused
                and self.calls[unused[0]].tool == tool
                and _same_arguments(self.calls[unused[0]].arguments, arguments)
            ):
                return unused[0]
            return None
        for index in unused:
            call = self.calls[index]
            if call.tool == tool and (
                self.policy == "next" or _same_arguments(call.arguments, arguments)
            ):
                return index
        return None

    def tool(self, definition: dict[str, Any]) -> FunctionTool:
        name = str(definition["name"])
        schema = definition.get("parameters") or {"type": "object", "properties": {}}
        registry = self

        async def invoke(context: RunContextWrapper[Any], arguments: str) -> str:
            return registry.invoke(name, schema, arguments)

        return FunctionTool(
            name=name,
            description=str(definition.get("description") or ""),
            params_json_schema=schema,
            on_invoke_tool=invoke,
            strict_json_schema=bool(definition.get("strict", False)),
        )

    def invoke(self, name: str, schema: dict[str, Any], arguments: str) -> str:
        step = len(self.invocations)
        try:
            jsonschema.validate(json.loads(arguments or "{}"), schema)
        except (ValueError, jsonschema.ValidationError) as exc:
            reason = (
                exc.message
                if isinstance(exc, jsonschema.ValidationError)
                else "arguments are not JSON"
            )
            span = get_current_span()
            if span is not None:
                span.set_error(
                    SpanError(
                        message="Error running tool (non-fatal)",
                        data={"tool_name": name, "error": reason},
                    )
                )
            self.invocations.append(ToolInvocation(step, name, arguments, "invalid_arguments"))
            return INVALID_ARGUMENTS_MESSAGE
        index = self._match(name, arguments)
        captured = self.calls[index] if index is not None else None
        if index is not None:
            self.used.add(index)
        if captured is not None and captured.output is not None:
            outcome, output = "stub_hit", captured.output
        elif name in self.stub_outputs:
            outcome, output = "replay_stub_output", self.stub_outputs[name]
        else:
            outcome, output = "divergence", UNAVAILABLE_MESSAGE
        data: dict[str, Any] = {"tool": name, "step": step, "captured_index": index}
        if captured is not None:
            data["captured_call_id"] = captured.call_id
            data["captured_arguments"] = captured.arguments
            data["lossy"] = captured.lossy
        if outcome == "divergence":
            data["reason"] = (
                "no captured call"
                if captured is None
                else "captured call has no output and no replay_stub_output"
            )
        with custom_span(f"replay.{outcome}", data=data):
            pass
        if captured is not None and captured.lossy and outcome == "stub_hit":
            with custom_span(
                "replay.lossy_stub", data={"tool": name, "step": step, "captured_index": index}
            ):
                pass
        self.invocations.append(ToolInvocation(step, name, arguments, outcome, index, output))
        return output
