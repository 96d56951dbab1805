"""The replay engine: a fixture and a model in, a traced replay run and its verdict out.

Agents are rebuilt from the fixture (instructions, model settings with ``store=False``,
stand-in tools with the captured schemas, handoffs, guardrails that replay their captured
outcome) and run through the real ``Runner``. The replay is its own trace, of kind
``replay``, linked to its source run (the exporter turns the trace metadata into
``afr.source_run_id`` and an OTel span link on the root).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    InputGuardrail,
    Model,
    ModelSettings,
    RunConfig,
    Runner,
    gen_trace_id,
    trace,
)
from agents.exceptions import AgentsException
from agents.tracing import custom_span

from replay_worker.replay.fixture import Fixture
from replay_worker.replay.stubs import MatchPolicy, StubRegistry
from replay_worker.replay.verdict import first_divergence, verdict

__all__ = ["ReplayResult", "run_replay"]

ModelFactory = Callable[[str], Model]


@dataclass
class ReplayResult:
    replay_run_id: str
    verdict: str
    replay_failed: bool
    final_output: str | None
    error: str | None
    first_divergence: dict[str, Any] | None
    divergences: list[dict[str, Any]] = field(default_factory=list)
    invocations: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "replay_run_id": self.replay_run_id,
            "verdict": self.verdict,
            "replay_failed": self.replay_failed,
            "final_output": self.final_output,
            "error": self.error,
            "first_divergence": self.first_divergence,
            "divergences": self.divergences,
            "tool_calls": self.invocations,
        }


def _guardrail(name: str, triggered: bool) -> InputGuardrail[Any]:
    async def replayed(context: Any, agent: Any, user_input: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info={"replayed": True}, tripwire_triggered=triggered)

    return InputGuardrail(guardrail_function=replayed, name=name)


def _agents(
    fixture: Fixture, registry: StubRegistry, model_for: ModelFactory, model_override: str | None
) -> dict[str, Agent[Any]]:
    agents: dict[str, Agent[Any]] = {}
    for name, spec in fixture.agents.items():
        settings = ModelSettings(
            store=False, **{k: v for k, v in spec.model_settings.items() if v is not None}
        )
        guardrails = [
            _guardrail(g["name"], bool(g["triggered"]))
            for g in fixture.guardrails
            if g.get("agent") == name
        ]
        agents[name] = Agent(
            name=name,
            instructions=spec.instructions,
            model=model_for(model_override or spec.model or "gpt-4.1-mini"),
            model_settings=settings,
            tools=[registry.tool(definition) for definition in spec.tools],
            input_guardrails=guardrails,
        )
    for name, spec in fixture.agents.items():
        agents[name].handoffs = [agents[target] for target in spec.handoffs if target in agents]
    return agents


async def run_replay(
    fixture: Fixture,
    model_for: ModelFactory,
    *,
    model_override: str | None = None,
    policy: MatchPolicy = "next",
    stub_outputs: dict[str, str] | None = None,
    max_turns: int = 12,
) -> ReplayResult:
    registry = StubRegistry(
        fixture.tool_calls, policy, {**fixture.stub_outputs, **(stub_outputs or {})}
    )
    agents = _agents(fixture, registry, model_for, model_override)
    replay_trace_id = gen_trace_id()
    metadata = {"afr.run_kind": "replay", "afr.source_run_id": fixture.source_run_id}
    error: str | None = None
    final_output: str | None = None
    with trace(
        f"replay of {fixture.workflow}", trace_id=replay_trace_id, metadata=metadata
    ) as current:
        try:
            result = await Runner.run(
                agents[fixture.entry_agent],
                fixture.input,
                max_turns=max_turns,
                run_config=RunConfig(trace_include_sensitive_data=True),
            )
            final_output = str(result.final_output)
        except AgentsException as exc:
            error = f"{type(exc).__name__}: {exc}"
        failed = error is not None or registry.failed
        outcome = verdict(fixture.source_status == "error", failed)
        divergence = first_divergence(fixture.tool_calls, registry.invocations)
        with custom_span(
            "replay.verdict",
            data={"verdict": outcome, "first_divergence": divergence, "error": error},
        ):
            pass
        trace_metadata = getattr(current, "metadata", None)
        if isinstance(trace_metadata, dict):  # the root span carries it, via the trace metadata
            trace_metadata["afr.verdict"] = outcome
    return ReplayResult(
        replay_run_id=replay_trace_id.removeprefix("trace_"),
        verdict=outcome,
        replay_failed=failed,
        final_output=final_output,
        error=error,
        first_divergence=divergence,
        divergences=[vars(d) for d in registry.divergences],
        invocations=[vars(i) for i in registry.invocations],
    )
