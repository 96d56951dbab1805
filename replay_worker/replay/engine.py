"""The replay engine: a fixture and a model in, a traced replay run and its verdict out.

Agents are rebuilt from the fixture (instructions, the model settings the agents set with
``store=False``, stand-in tools with the captured schemas, handoffs, guardrails that replay
their captured outcome) and run through the real ``Runner`` with the source's input and
``max_turns``. The replay is its own trace, of kind ``replay``, under the source's workflow
name, group id and trace metadata, linked to its source run (the exporter turns the trace
metadata into ``afr.source_run_id`` and an OTel span link on the root).

A **fork** (``fork=``, or ``run_fork``) is the same run with a plan from ``fork.py``: the
overrides applied to the fixture, each agent's model behind a ``RecordedModel`` that answers
the calls before the step from the capture, and the first divergence computed against the
source's own calls. How it was forked goes into ``afr.replay`` with the rest (an eval
synthesized from it forks the same way) and into the result (``fork``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    InputGuardrail,
    Model,
    ModelSettings,
    RunConfig,
    RunHooks,
    Runner,
    gen_trace_id,
    trace,
)
from agents.tracing import custom_span

from afr_exporter import semconv as sc
from afr_exporter.semconv import METADATA_DETERMINISTIC_IDS
from replay_worker.hooks.models import Fork, OverrideAgentModel
from replay_worker.ledger import BudgetExceeded
from replay_worker.replay.calls import FAILED_OUTCOMES
from replay_worker.replay.fixture import Fixture
from replay_worker.replay.fork import ForkPlan, plan_fork
from replay_worker.replay.output import CapturedOutputSchema
from replay_worker.replay.recorded import RecordedModel, Tape
from replay_worker.replay.result import ReplayResult
from replay_worker.replay.stubs import MatchPolicy, StubRegistry
from replay_worker.replay.verdict import first_divergence, judge, verdict_evaluation

__all__ = ["ReplayResult", "run_fork", "run_replay"]

ModelFactory = Callable[[str], Model]


class _Observer(RunHooks[Any]):
    """Records what the run did while it runs (a failed run returns no RunResult)."""

    def __init__(self) -> None:
        self.handoffs: list[tuple[str, str]] = []
        self.turns = 0

    async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
        self.handoffs.append((str(from_agent.name), str(to_agent.name)))

    async def on_llm_start(self, context: Any, agent: Any, *args: Any) -> None:
        self.turns += 1


def _guardrail(name: str, triggered: bool, ran: list[dict[str, Any]]) -> InputGuardrail[Any]:
    async def replayed(context: Any, agent: Any, user_input: Any) -> GuardrailFunctionOutput:
        ran.append({"name": name, "agent": agent.name, "triggered": triggered})
        return GuardrailFunctionOutput(output_info={"replayed": True}, tripwire_triggered=triggered)

    return InputGuardrail(guardrail_function=replayed, name=name)


def _agents(
    fixture: Fixture,
    registry: StubRegistry,
    model_for: ModelFactory,
    model_override: str | None,
    guardrails_ran: list[dict[str, Any]],
    fork: ForkPlan | None = None,
    tape: Tape | None = None,
) -> dict[str, Agent[Any]]:
    agents: dict[str, Agent[Any]] = {}
    # A fork's agent_model override beats the request's model, which beats the capture's.
    agent_models = {
        o.agent: o.model
        for o in (fork.request.overrides if fork else [])
        if isinstance(o, OverrideAgentModel)
    }
    for name, spec in fixture.agents.items():
        settings = ModelSettings(
            store=False, **{k: v for k, v in spec.model_settings.items() if v is not None}
        )
        guardrails = [
            _guardrail(g["name"], bool(g["triggered"]), guardrails_ran)
            for g in fixture.guardrails
            if g.get("agent") == name
        ]
        output = spec.output
        model = model_for(agent_models.get(name) or model_override or spec.model or "gpt-4.1-mini")
        agents[name] = Agent(
            name=name,
            instructions=spec.instructions,
            model=RecordedModel(tape, name, model) if tape is not None else model,
            model_settings=settings,
            tools=[registry.tool(definition) for definition in spec.tools],
            input_guardrails=guardrails,
            output_type=CapturedOutputSchema(
                str(output.get("name") or spec.output_type or "output"),
                output["schema"],
                bool(output.get("strict", True)),
            )
            if output and isinstance(output.get("schema"), dict)
            else None,
        )
    for name, spec in fixture.agents.items():
        agents[name].handoffs = [agents[target] for target in spec.handoffs if target in agents]
    return agents


async def run_replay(
    fixture: Fixture,
    model_for: ModelFactory,
    *,
    model_override: str | None = None,
    policy: MatchPolicy = "exact",
    stub_outputs: dict[str, str] | None = None,
    max_turns: int = 12,
    run_kind: str = "replay",
    trace_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
    on_result: Callable[[ReplayResult], Mapping[str, Any] | None] | None = None,
    fork: Fork | None = None,
) -> ReplayResult:
    """``max_turns``: used when the source's own bound was not captured. An eval runs the
    same engine with ``run_kind="eval"``, its own (derived) ``trace_id`` and ``metadata``
    (``afr.linked_runs`` links more runs than the source). ``on_result`` is called with the
    result while the run's trace is still open: what it returns is added to the trace
    metadata, and spans it opens belong to the run (an eval checks its assertions there).
    ``fork``: go live at its step with its overrides; raises ``ForkError`` (before any
    model call) when the fork cannot be made on this fixture."""
    plan = plan_fork(fixture, fork) if fork is not None else None
    source_calls = fixture.tool_calls
    if plan is not None:
        fixture = plan.fixture
    registry = StubRegistry(
        fixture.tool_calls,
        policy,
        {**fixture.stub_outputs, **(stub_outputs or {})},
        overridden=plan.overridden if plan is not None else frozenset(),
    )
    guardrails_ran: list[dict[str, Any]] = []
    tape = Tape(plan.recorded) if plan is not None else None
    agents = _agents(fixture, registry, model_for, model_override, guardrails_ran, plan, tape)
    observer = _Observer()
    replay_trace_id = trace_id or gen_trace_id()
    stubs = {**fixture.stub_outputs, **(stub_outputs or {})}
    # How it was replayed, so an eval synthesized from it replays the same way.
    how: dict[str, Any] = {"policy": policy, "stub_outputs": stubs, "model": model_override}
    if fork is not None:
        how["fork"] = fork.model_dump(mode="json")
    metadata = {
        **fixture.trace_metadata,
        **(metadata or {}),
        sc.METADATA_RUN_KIND: run_kind,
        sc.METADATA_SOURCE_RUN_ID: fixture.source_run_id,
        sc.METADATA_REPLAY: how,
    }
    if trace_id is not None:  # a caller-chosen run id: running it again rewrites the same spans
        metadata[METADATA_DETERMINISTIC_IDS] = True
    started = clock()
    final_json: Any = None
    error: str | None = None
    final_output: str | None = None
    with trace(
        fixture.workflow,
        trace_id=replay_trace_id,
        group_id=fixture.group_id,
        metadata=metadata,
    ) as current:
        try:
            run_result = await Runner.run(
                agents[fixture.entry_agent],
                fixture.input,
                max_turns=fixture.max_turns or max_turns,
                run_config=RunConfig(trace_include_sensitive_data=True),
                hooks=observer,
            )
            final_output = str(run_result.final_output)
            final_json = _as_json(run_result.final_output)
        except BudgetExceeded:
            raise  # the job fails: nothing was sent that the budget did not allow
        except Exception as exc:  # the run failed: max turns, a guardrail, a model error...
            error = f"{type(exc).__name__}: {exc}"
        failures = [
            f"{i.tool} ({i.outcome})" for i in registry.invocations if i.outcome in FAILED_OUTCOMES
        ]
        if error is not None:
            failures.append(error.split(":", 1)[0])
        decided = judge(
            source_failed=fixture.source_failed,
            replay_failures=failures,
            unavailable_tools=[i.tool for i in registry.unavailable],
            unreplayable_source_errors=[
                f"{e['span_type']} {e['error_type']}" for e in fixture.unreplayable_errors
            ],
            unknown_agents=sorted(
                {t for spec in fixture.agents.values() for t in spec.handoffs} - set(fixture.agents)
            ),
            approximate=registry.approximate,
            prefix_diverged=tape.diverged if tape is not None else None,
        )
        divergence = first_divergence(source_calls, registry.invocations)
        forked: dict[str, Any] | None = None
        if plan is not None and tape is not None:
            forked = {**plan.to_json(), "live_model_calls": observer.turns - tape.position}
        data: dict[str, Any] = {
            "verdict": decided.value,
            "reason": decided.reason,
            "approximate": decided.approximate,
            "first_divergence": divergence,
            "error": error,
        }
        if forked is not None:
            data["fork"] = forked
        with custom_span(sc.REPLAY_VERDICT_SPAN, data=data):
            pass
        result = ReplayResult(
            replay_run_id=replay_trace_id.removeprefix("trace_"),
            verdict=decided.value,
            reason=decided.reason,
            approximate=decided.approximate,
            replay_failed=bool(failures),
            final_output=final_output,
            error=error,
            first_divergence=divergence,
            unavailable=[vars(i) for i in registry.unavailable],
            stubbed=[vars(i) for i in registry.stubbed],
            invocations=[vars(i) for i in registry.invocations],
            handoffs=observer.handoffs,
            turns=observer.turns,
            guardrails=guardrails_ran,
            final_output_json=final_json,
            duration_s=clock() - started,
            fork=forked,
        )
        extra = on_result(result) if on_result is not None else None
        trace_metadata = getattr(current, "metadata", None)
        if isinstance(trace_metadata, dict):  # the root span carries it, via the trace metadata
            trace_metadata[sc.METADATA_VERDICT] = decided.value
            extra = dict(extra or {})
            # The verdict first, then what the caller evaluated of the result (an eval's).
            trace_metadata[sc.METADATA_EVALUATIONS] = [
                verdict_evaluation(decided),
                *extra.pop(sc.METADATA_EVALUATIONS, []),
            ]
            trace_metadata.update(extra)
    return result


async def run_fork(
    fixture: Fixture,
    fork: Fork,
    model_for: ModelFactory,
    **options: Any,
) -> ReplayResult:
    """Fork ``fixture`` at ``fork.step`` with its overrides, the model live from there on
    (``model_for``): the replay's result with its verdict, first divergence and ``fork``.
    Raises ``ForkError`` before any model call when the fork cannot be made. ``options``
    are ``run_replay``'s (``model_override``, ``stub_outputs``, ``policy``...)."""
    return await run_replay(fixture, model_for, fork=fork, **options)


def _as_json(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
