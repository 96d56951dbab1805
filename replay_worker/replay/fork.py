"""A fork: a replay that goes live at a step of the source run, with overrides applied there.

``plan_fork`` checks a ``Fork`` request (hooks/models.py) against a fixture and returns the
plan the engine runs, or raises ``ForkError`` naming what is wrong — before any model call,
so the hook answers 422 and ``afr replay --from`` exits with the message. Pure, and free of
the Agents SDK: the worker's own process validates a fork hook with it.

**Steps.** ``llm:N`` is the N-th model call of the run (from 1); ``turn:N`` the first model
call of the N-th turn (with no turn spans, the N-th model call); a tool call id is the model
call that issued it (a handoff's ``transfer_to_*`` call id too). ``recorded`` model calls
come before the step: the engine answers them with the captured output (``recorded.py``),
and goes live from the next one. For a tool call step those are the calls up to the one
that issued it (so the issued call itself runs with the fork's overrides); for ``llm:N``
and ``turn:N`` the calls before it. ``llm:1`` and ``turn:1`` exist for every run: nothing
is recorded, the overrides apply from the start.

**Overrides**, each at the step or after it:

- ``tool_output`` / ``tool_error``: the outcome of a captured tool call (by call id), given to
  the model when the replay makes that call again; a call issued before the step already
  had its captured outcome seen by a recorded model call, so it is refused;
- ``tool_arguments``: the arguments of a tool call the last recorded model call issued (fork
  at that call id): checked against the tool's captured schema; the call has no captured
  outcome then (unless a ``tool_output``/``tool_error`` gives one): stub or unavailable;
- ``instructions`` / ``agent_model`` / ``model_settings``: an agent's, for its live calls;
- ``guardrail``: an input guardrail's outcome; input guardrails run before the first model
  call, so only a fork at ``llm:1`` (``turn:1``) can change it;
- ``input``: the run's user input, as the live calls see it.

``first_divergence`` of a fork is computed against the source's own calls, so an arguments
override shows at its step; the calls before ``tool_calls_before`` are the prefix's,
unchanged by construction.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

from replay_worker.hooks.models import (
    Fork,
    OverrideAgentModel,
    OverrideGuardrail,
    OverrideInput,
    OverrideInstructions,
    OverrideModelSettings,
    OverrideToolArguments,
    OverrideToolError,
    OverrideToolOutput,
)
from replay_worker.replay.fixture import (
    FIXTURE_VERSION,
    CapturedCall,
    Fixture,
    FixtureError,
    ModelCall,
)
from replay_worker.replay.validation import argument_validator

__all__ = [
    "OVERRIDE_ERROR",
    "ForkError",
    "ForkPlan",
    "RecordedAnswer",
    "plan_fork",
]

OVERRIDE_ERROR = "tool error (fork override)"
"""The error a ``tool_error`` override fails its call with (the span's error message)."""
_SHOWN = 12  # known names listed in a refusal, at most
# ModelSettings a fork may set, and the JSON types each takes (fixture._REPLAYED_SETTINGS).
_SETTINGS: dict[str, tuple[type, ...]] = {
    "temperature": (int, float),
    "top_p": (int, float),
    "frequency_penalty": (int, float),
    "presence_penalty": (int, float),
    "tool_choice": (str,),
    "parallel_tool_calls": (bool,),
    "truncation": (str,),
    "max_tokens": (int,),
    "verbosity": (str,),
    "top_logprobs": (int,),
}


class ForkError(FixtureError):
    """The fork cannot be made as asked; the message names the step, the override or the
    part of the capture at fault."""


@dataclass(frozen=True)
class RecordedAnswer:
    """What a recorded model call answers: the N-th call (from 1), its agent, its items."""

    index: int
    agent: str | None
    items: list[dict[str, Any]]


@dataclass(frozen=True)
class ForkPlan:
    request: Fork
    fixture: Fixture
    """The source's fixture with the overrides applied: what the replay runs."""
    recorded: list[RecordedAnswer]
    source_calls: list[CapturedCall]
    """The source's own tool calls: what ``first_divergence`` compares with."""
    overridden: frozenset[int]
    """Indices of the tool calls whose outcome an override sets."""
    tool_calls_before: int
    """How many of the source's tool calls (in order) the prefix makes unchanged."""

    def to_json(self) -> dict[str, Any]:
        return {
            **self.request.model_dump(mode="json"),
            "recorded_model_calls": len(self.recorded),
            "tool_calls_before": self.tool_calls_before,
        }


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return (shown + ", ...") if len(names) > _SHOWN else (shown or "none")


def _issuers(calls: list[ModelCall]) -> dict[str, int]:
    """call id -> the model call (from 1) whose output issued it."""
    issued: dict[str, int] = {}
    for index, call in enumerate(calls, start=1):
        for item in call.output or []:
            if item.get("type") == "function_call":
                issued.setdefault(str(item["call_id"]), index)
    return issued


def _step(fixture: Fixture, calls: list[ModelCall], step: str) -> tuple[int, str | None]:
    """(how many model calls are recorded, the tool call id the step names, if it does)."""
    run = fixture.source_run_id
    kind, _, number = step.partition(":")
    if kind in ("llm", "turn") and number.isdigit():
        n = int(number)
        if kind == "turn" and any(c.turn is not None for c in calls):
            last = max(c.turn or 0 for c in calls)
            if n > max(last, 1):
                raise ForkError(
                    f"step {step} does not exist: run {run} has {last} turns with model calls"
                    f" (turn:1..turn:{last})"
                )
            return sum(1 for c in calls if c.turn is not None and c.turn < n), None
        if n > max(len(calls), 1):
            raise ForkError(
                f"step {step} does not exist: run {run} made {len(calls)} model calls"
                f" (llm:1..llm:{len(calls)})"
            )
        return n - 1, None
    issued = _issuers(calls)
    if step in issued:
        return issued[step], step
    if any(c.call_id == step for c in fixture.tool_calls):
        raise ForkError(
            f"step {step}: no recorded model call issued this tool call (the capture kept no"
            " output of its model call); fork at llm:N instead"
        )
    raise ForkError(
        f"step {step!r} does not exist: it is not llm:N, turn:N, or a call id of run {run}"
        f" (its call ids: {_listed(list(issued))})"
    )


def _check_prefix(calls: list[ModelCall], recorded: int, step: str) -> None:
    for index, call in enumerate(calls[:recorded], start=1):
        if call.error is not None:
            raise ForkError(f"step {step}: model call llm:{index} failed ({call.error})")
        if call.output is None:
            raise ForkError(
                f"step {step}: the output of model call llm:{index} was not captured (a run"
                " traced without its content, or by an instrumentation whose output afr cannot"
                f" read): a fork can start at llm:{index} at the latest"
            )


def _tool_schema(fixture: Fixture, call: CapturedCall) -> dict[str, Any] | None:
    agents = [fixture.agents[call.agent]] if call.agent in fixture.agents else []
    for spec in agents + list(fixture.agents.values()):
        for tool in spec.tools:
            if tool.get("name") == call.tool:
                schema = tool.get("parameters")
                return schema if isinstance(schema, dict) else None
    return None


def _with_input(fixture: Fixture, text: str) -> str | list[Any]:
    if isinstance(fixture.input, str):
        return text
    items = copy.deepcopy(fixture.input)
    for item in reversed(items):
        if isinstance(item, dict) and item.get("role") == "user":
            item["content"] = text
            return items
    return [*items, {"role": "user", "content": text}]


def plan_fork(fixture: Fixture, fork: Fork) -> ForkPlan:
    """The plan of ``fork`` on ``fixture``, or ``ForkError`` with what is wrong."""
    if fixture.model_calls is None:
        raise ForkError(
            f"this fixture ({fixture.version}) records no model calls, so its prefix cannot be"
            f" answered: a fork needs {FIXTURE_VERSION} (replay the source run, or synthesize"
            " the eval again)"
        )
    calls = fixture.model_calls
    step = fork.step
    recorded, step_call = _step(fixture, calls, step)
    _check_prefix(calls, recorded, step)
    issued = _issuers(calls)
    by_id = {c.call_id: i for i, c in reversed(list(enumerate(fixture.tool_calls)))}
    tool_calls = list(fixture.tool_calls)
    agents = dict(fixture.agents)
    guardrails = [dict(g) for g in fixture.guardrails]
    answers = [copy.deepcopy(c.output or []) for c in calls[:recorded]]
    run_input = fixture.input
    overridden: set[int] = set()
    outcome: dict[int, tuple[str, str | None]] = {}
    at = f"llm:{recorded + 1}"  # where the model goes live, for the messages
    for override in fork.overrides:
        if isinstance(override, OverrideToolOutput | OverrideToolError | OverrideToolArguments):
            call_id = override.call_id
            if call_id not in by_id:
                what = "a handoff, not a tool call" if call_id in issued else "never called"
                raise ForkError(
                    f"{override.kind} {call_id}: that call was {what} in run"
                    f" {fixture.source_run_id} (its tool calls: {_listed(list(by_id))})"
                )
            index = by_id[call_id]
            issuer = issued.get(call_id)
            if issuer is None and recorded > 0:
                raise ForkError(
                    f"{override.kind} {call_id}: no recorded model call issued it, so the fork"
                    f" cannot place it after step {step}; fork at llm:1"
                )
            if issuer is not None and issuer < recorded:
                raise ForkError(
                    f"{override.kind} {call_id}: model call llm:{issuer} issued it, before"
                    f" step {step} (live from {at}): the recorded calls after it saw its"
                    f" captured outcome; fork at {call_id} or earlier"
                )
            call = tool_calls[index]
            if isinstance(override, OverrideToolArguments):
                if issuer is None or issuer != recorded or step_call is None:
                    raise ForkError(
                        f"tool_arguments {call_id}: its arguments are what the live model sends"
                        f" at step {step}; fork at {call_id} to override them"
                    )
                schema = _tool_schema(fixture, call)
                reason = argument_validator(schema or {"type": "object"})(override.arguments)
                if reason is not None:
                    raise ForkError(
                        f"tool_arguments {call_id}: the arguments do not fit the schema of"
                        f" {call.tool}: {reason}"
                    )
                for item in answers[issuer - 1]:
                    if item.get("call_id") == call_id:
                        item["arguments"] = override.arguments
                tool_calls[index] = dataclasses.replace(
                    call, arguments=override.arguments, output=None, error=None
                )
            else:
                outcome[index] = (
                    (override.output, None)
                    if isinstance(override, OverrideToolOutput)
                    else (override.error, OVERRIDE_ERROR)
                )
        elif isinstance(
            override, OverrideInstructions | OverrideAgentModel | OverrideModelSettings
        ):
            if override.agent not in agents:
                raise ForkError(
                    f"{override.kind} {override.agent!r}: no such agent in run"
                    f" {fixture.source_run_id} (its agents: {_listed(list(agents))})"
                )
            spec = agents[override.agent]
            if isinstance(override, OverrideInstructions):
                agents[override.agent] = dataclasses.replace(
                    spec, instructions=override.instructions
                )
            elif isinstance(override, OverrideAgentModel):
                agents[override.agent] = dataclasses.replace(spec, model=override.model)
            else:
                for key, value in override.settings.items():
                    types = _SETTINGS.get(key)
                    if types is None:
                        raise ForkError(
                            f"model_settings {override.agent!r}: {key} is not a setting a"
                            f" replay passes on (settings: {', '.join(_SETTINGS)})"
                        )
                    if value is not None and (
                        not isinstance(value, types)
                        or (isinstance(value, bool) and bool not in types)
                    ):
                        raise ForkError(
                            f"model_settings {override.agent!r}: {key} must be"
                            f" {' or '.join(t.__name__ for t in types)}"
                        )
                settings = {**spec.model_settings, **override.settings}
                agents[override.agent] = dataclasses.replace(
                    spec, model_settings={k: v for k, v in settings.items() if v is not None}
                )
        elif isinstance(override, OverrideGuardrail):
            matching = [g for g in guardrails if g.get("name") == override.name]
            if not matching:
                names = [str(g.get("name")) for g in guardrails]
                raise ForkError(
                    f"guardrail {override.name!r}: no such guardrail ran in run"
                    f" {fixture.source_run_id} (its guardrails: {_listed(names)})"
                )
            if recorded > 0:
                raise ForkError(
                    f"guardrail {override.name!r}: input guardrails run before the first model"
                    f" call, and step {step} records {recorded}; fork at llm:1 to change it"
                )
            for guardrail in matching:
                guardrail["triggered"] = override.triggered
        elif isinstance(override, OverrideInput):
            run_input = _with_input(fixture, override.input)
    for index, (text, error) in outcome.items():
        tool_calls[index] = dataclasses.replace(tool_calls[index], output=text, error=error)
        overridden.add(index)

    if step_call is not None and step_call in by_id:
        before = by_id[step_call]
    else:
        before = sum(1 for c in fixture.tool_calls if 0 < issued.get(c.call_id, 0) <= recorded)
    return ForkPlan(
        request=fork,
        fixture=dataclasses.replace(
            fixture,
            tool_calls=tool_calls,
            agents=agents,
            guardrails=guardrails,
            input=run_input,
        ),
        recorded=[
            RecordedAnswer(index, calls[index - 1].agent, answer)
            for index, answer in enumerate(answers, start=1)
        ],
        source_calls=list(fixture.tool_calls),
        overridden=frozenset(overridden),
        tool_calls_before=before,
    )
