"""Stand-in tools: the deterministic boundary of a replay (docs/architecture.md, decision 7).

A replay never runs a real tool. Each stand-in has the captured tool's name, description and
JSON schema. An invocation is answered from what was captured:

- a call that **matches** a captured call (same tool, same arguments after
  canonicalization) gets that call's captured **outcome** — its output, or the error the
  model was shown, which fails the replayed call exactly as it failed the original;
- any other call is first validated as the real tool would validate it (the SDK's own
  pydantic validation of the captured schema: lax coercions, ``format``, required and extra
  keys): rejected arguments fail with the SDK's message; accepted ones have no captured
  outcome, so they get the request's labelled ``replay_stub_output`` when one was given,
  otherwise the model is told the output is unavailable and the verdict can only be
  ``INCONCLUSIVE``.

A fork's ``tool_output`` / ``tool_error`` override sets a captured call's outcome: a call
matching it gets ``override_output`` / ``override_error`` (which fails the call).

Matching policies: ``exact`` (default: the first unused captured call with the same tool
and arguments, wherever it was), ``strict`` (the next captured call overall must be this
one), ``lenient`` (the next unused captured call of the same tool, whatever its arguments:
an approximation, and the verdict says so). Every outcome is a span of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from agents import FunctionTool, RunContextWrapper
from agents.tracing import SpanError, custom_span, get_current_span

from replay_worker.replay.calls import FAILED_OUTCOMES, ToolInvocation, canonical_arguments
from replay_worker.replay.fixture import CapturedCall
from replay_worker.replay.validation import argument_validator

__all__ = [
    "FAILED_OUTCOMES",
    "INVALID_ARGUMENTS_MESSAGE",
    "UNAVAILABLE_MESSAGE",
    "MatchPolicy",
    "StubRegistry",
    "ToolInvocation",
    "canonical_arguments",
]

MatchPolicy = Literal["exact", "strict", "lenient"]
# The SDK's default failure text, so a model sees a failed replayed call as it saw the original.
INVALID_ARGUMENTS_MESSAGE = "An error occurred while running the tool. Please try again."
UNAVAILABLE_MESSAGE = "The output of this tool call is unavailable in this replay."
INVALID_ARGUMENTS_ERROR = "Error running tool (non-fatal)"


@dataclass
class StubRegistry:
    calls: list[CapturedCall]
    policy: MatchPolicy = "exact"
    stub_outputs: dict[str, str] = field(default_factory=dict)
    used: set[int] = field(default_factory=set)
    invocations: list[ToolInvocation] = field(default_factory=list)
    overridden: frozenset[int] = frozenset()
    """Indices of the calls whose outcome a fork's override set."""

    @property
    def failed(self) -> bool:
        return any(i.outcome in FAILED_OUTCOMES for i in self.invocations)

    @property
    def unavailable(self) -> list[ToolInvocation]:
        return [i for i in self.invocations if i.outcome == "unavailable"]

    @property
    def stubbed(self) -> list[ToolInvocation]:
        return [i for i in self.invocations if i.outcome == "replay_stub_output"]

    @property
    def approximate(self) -> bool:
        """A lenient match answered a call with another call's outcome."""
        return any(
            i.captured_index is not None
            and canonical_arguments(self.calls[i.captured_index].arguments)
            != canonical_arguments(i.arguments)
            for i in self.invocations
        )

    def _match(self, tool: str, arguments: str) -> int | None:
        unused = [i for i in range(len(self.calls)) if i not in self.used]
        wanted = canonical_arguments(arguments)
        if self.policy == "strict":
            if unused:
                call = self.calls[unused[0]]
                if call.tool == tool and canonical_arguments(call.arguments) == wanted:
                    return unused[0]
            return None
        for index in unused:
            call = self.calls[index]
            if call.tool == tool and (
                self.policy == "lenient" or canonical_arguments(call.arguments) == wanted
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
        index = self._match(name, arguments)
        captured = self.calls[index] if index is not None else None
        reason: str | None = None
        error: str | None = None
        if captured is not None and captured.output is not None:
            self.used.add(index)  # type: ignore[arg-type]
            output = captured.output
            origin = "override" if index in self.overridden else "captured"
            outcome = f"{origin}_error" if captured.error else f"{origin}_output"
            error = captured.error
        # Strictness inferred from the schema: exact for SDK schemas, whatever the capture said.
        elif (reason := argument_validator(schema)(arguments)) is not None:
            outcome, output, error = (
                "invalid_arguments",
                INVALID_ARGUMENTS_MESSAGE,
                INVALID_ARGUMENTS_ERROR,
            )
        elif name in self.stub_outputs:
            outcome, output = "replay_stub_output", self.stub_outputs[name]
        else:
            outcome, output = "unavailable", UNAVAILABLE_MESSAGE
        if error is not None:
            span = get_current_span()
            if span is not None:  # the function span fails as the SDK fails it
                span.set_error(
                    SpanError(message=error, data={"tool_name": name, "replayed": outcome})
                )
        data: dict[str, Any] = {"tool": name, "step": step, "outcome": outcome}
        if captured is not None:
            data["captured_index"] = index
            data["captured_call_id"] = captured.call_id
            data["lossy"] = captured.lossy
        if reason is not None:
            data["reason"] = reason
        elif outcome == "unavailable":
            data["reason"] = (
                "no captured call with these arguments"
                if captured is None
                else "the captured call has no captured outcome"
            )
        with custom_span(f"replay.{outcome}", data=data):
            pass
        self.invocations.append(ToolInvocation(step, name, arguments, outcome, index, output))
        return output
