"""``afr eval synthesize --assist``: the model proposes extra assertions; only those that
validate against the contract and hold on the fixing replay are kept.

Off by default: unlike synthesis, it is neither free nor deterministic. One request, through
the worker's one model path (``LedgerModel``: ``store=False``, cost reserved before it is
sent, settled after, refused once the budget is spent), with Structured Outputs and a strict
JSON schema. The schema is a strict-compatible mirror of the assertions a model can usefully
propose and a stored replay can check: ``tool_called``, ``tool_not_called``,
``tool_argument``, ``handoff_taken``, ``tool_order``, ``max_turns``, ``guardrail``. Not
offered: ``output_schema`` (free-form schemas are not strict-compatible, and the trace does
not hold the final output as JSON), cost and latency bounds (not in the trace, and
brittle), ``no_span_errored`` (synthesis always adds it). Strict mode cannot carry an
arbitrary JSON value, so an ``equals`` travels as JSON text (``equals_json``).

Every proposal is then judged locally, never trusted: converted to the contract's model
(invalid -> rejected with why), checked against the fixing replay as stored
(``assertions.check``; does not hold -> rejected with what was seen), and dropped when the
eval already has it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from agents import Agent, AgentOutputSchema, Model, ModelSettings, RunConfig, Runner
from pydantic import BaseModel, ConfigDict, ValidationError

from replay_worker.evals.assertions import check
from replay_worker.evals.contract import ASSERTION, EvalDocument
from replay_worker.evals.synthesis import observed_from_run
from replay_worker.ledger import DayBudget, JobLedger, LedgerModel
from replay_worker.model_client import openai_model_factory
from replay_worker.settings import WorkerSettings
from replay_worker.state import open_state_store

__all__ = ["ASSIST_INSTRUCTIONS", "AssistOutcome", "Proposals", "assist", "assist_with_settings"]

MAX_PROPOSALS = 8
ASSIST_INSTRUCTIONS = """\
You write regression assertions for an AI agent workflow. A captured run failed; a replay \
with a better model fixed it. You get the failure, what the fixing replay did, the tools' \
JSON schemas and the assertions the eval already has. Propose up to {limit} more \
assertions that ANY correct run on this input must satisfy and that the fixing replay \
satisfies. Structural only: which tools are called, how often and in which order, \
arguments at RFC 6901 JSON Pointers (prefer "type" or "matches" where a value may \
legitimately vary; "equals_json" is the expected value as JSON text), handoffs, the turn \
bound, guardrail outcomes. Never restate an existing assertion. Never assert on wording. \
For tool_argument set exactly one of equals_json, matches, type and the others to null."""

_JsonType = Literal["string", "number", "integer", "boolean", "object", "array", "null"]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _ToolCalled(_Wire):
    kind: Literal["tool_called"]
    tool: str
    min_count: int
    max_count: int | None


class _ToolNotCalled(_Wire):
    kind: Literal["tool_not_called"]
    tool: str


class _ToolArgument(_Wire):
    kind: Literal["tool_argument"]
    tool: str
    pointer: str
    equals_json: str | None
    matches: str | None
    type: _JsonType | None
    call: Literal["any", "all", "last"]


class _HandoffTaken(_Wire):
    kind: Literal["handoff_taken"]
    from_agent: str
    to_agent: str


class _ToolOrder(_Wire):
    kind: Literal["tool_order"]
    tools: list[str]
    mode: Literal["strict", "subsequence"]


class _MaxTurns(_Wire):
    kind: Literal["max_turns"]
    turns: int


class _Guardrail(_Wire):
    kind: Literal["guardrail"]
    name: str
    triggered: bool


class Proposals(_Wire):
    """What the model answers (the strict output schema)."""

    assertions: list[
        _ToolCalled
        | _ToolNotCalled
        | _ToolArgument
        | _HandoffTaken
        | _ToolOrder
        | _MaxTurns
        | _Guardrail
    ]


@dataclass
class AssistOutcome:
    kept: list[Any] = field(default_factory=list)
    """Contract assertions that validated and hold on the fixing replay."""
    rejected: list[dict[str, Any]] = field(default_factory=list)
    """``{"proposal", "reason"}`` of every proposal not kept."""

    def apply(self, document: EvalDocument) -> EvalDocument:
        """The document with the kept assertions appended (a new id: new content)."""
        if not self.kept:
            return document
        return EvalDocument.create(
            name=document.name,
            provenance=document.provenance,
            fixture=document.fixture,
            replay=document.replay,
            assertions=[*document.assertions, *self.kept],
        )


def _contract_form(proposal: BaseModel) -> dict[str, Any]:
    """A proposal as the contract writes it: a check the model set to null is absent, and
    ``equals_json`` is parsed into ``equals``."""
    raw = proposal.model_dump(mode="json")
    if raw["kind"] == "tool_argument":
        for name in ("equals_json", "matches", "type"):
            if raw[name] is None:
                del raw[name]
        if "equals_json" in raw:
            raw["equals"] = json.loads(raw.pop("equals_json"))  # ValueError: rejected
    elif raw["kind"] == "tool_called" and raw["max_count"] is None:
        del raw["max_count"]
    return raw


def _brief(document: EvalDocument, replay_run: dict[str, Any]) -> str:
    fixture = document.to_fixture()
    seen = observed_from_run(replay_run)
    return json.dumps(
        {
            "workflow": fixture.workflow,
            "input": fixture.input,
            "agents": {
                name: {
                    "tools": [
                        {"name": t["name"], "parameters": t.get("parameters")} for t in spec.tools
                    ],
                    "handoffs": spec.handoffs,
                }
                for name, spec in fixture.agents.items()
            },
            "source_failure": {
                "tool_calls": [
                    {"tool": c.tool, "arguments": c.arguments, "error": c.error}
                    for c in fixture.tool_calls
                ],
                "errors": fixture.source_errors,
            },
            "fixing_replay": {
                "tool_calls": [
                    {"tool": c.tool, "arguments": c.arguments, "outcome": c.outcome}
                    for c in seen.tool_calls
                ],
                "handoffs": [list(h) for h in seen.handoffs],
                "model_calls": seen.turns,
                "guardrails": seen.guardrails,
            },
            "existing_assertions": [
                a.model_dump(mode="json", by_alias=True) for a in document.assertions
            ],
        },
        indent=1,
        ensure_ascii=False,
    )


async def assist(
    document: EvalDocument,
    replay_run: dict[str, Any],
    model: Model,
    *,
    limit: int = MAX_PROPOSALS,
) -> AssistOutcome:
    """Asks ``model`` (a ``LedgerModel``: its cost goes through the ledger) once for extra
    assertions and judges each one locally. Raises what the model call raises
    (``BudgetExceeded`` included)."""
    agent: Agent[Any] = Agent(
        name="afr eval assistant",
        instructions=ASSIST_INSTRUCTIONS.format(limit=limit),
        model=model,
        model_settings=ModelSettings(store=False, temperature=0),
        output_type=AgentOutputSchema(Proposals, strict_json_schema=True),
    )
    result = await Runner.run(
        agent,
        _brief(document, replay_run),
        max_turns=1,
        run_config=RunConfig(tracing_disabled=True),  # not a run of the user's workflow
    )
    proposals: Proposals = result.final_output
    observed = observed_from_run(replay_run)
    existing = {json.dumps(a.model_dump(mode="json"), sort_keys=True) for a in document.assertions}
    outcome = AssistOutcome()
    for proposal in proposals.assertions[:limit]:
        shown = proposal.model_dump(mode="json")
        try:
            assertion = ASSERTION.validate_python(_contract_form(proposal))
        except (ValidationError, ValueError) as exc:
            reason = (
                exc.errors(include_url=False)[0]["msg"]
                if isinstance(exc, ValidationError)
                else f"equals_json is not JSON: {exc}"
            )
            outcome.rejected.append({"proposal": shown, "reason": f"invalid: {reason}"})
            continue
        key = json.dumps(assertion.model_dump(mode="json"), sort_keys=True)
        if key in existing:
            outcome.rejected.append({"proposal": shown, "reason": "already in the eval"})
            continue
        held = check(assertion, observed)
        if not held.passed:
            outcome.rejected.append(
                {
                    "proposal": shown,
                    "reason": f"does not hold on the fixing replay: expected {held.expected}, "
                    f"saw {held.actual}",
                }
            )
            continue
        existing.add(key)
        outcome.kept.append(assertion)
    return outcome


def assist_model_name(document: EvalDocument, settings: WorkerSettings) -> str:
    """The configured model (``AFR_WORKER_DEFAULT_MODEL``), else the one the fix used."""
    fixture = document.to_fixture()
    return (
        settings.default_model
        or document.replay.model
        or fixture.agents[fixture.entry_agent].model
        or "gpt-4.1-mini"
    )


async def assist_with_settings(
    document: EvalDocument, replay_run: dict[str, Any], settings: WorkerSettings
) -> tuple[AssistOutcome, float]:
    """``assist`` through the worker's model client and ledger, on its state store (the
    day's budget is shared with replays); returns the outcome and what it cost (USD)."""
    name = assist_model_name(document, settings)
    store = open_state_store(settings)
    try:
        ledger = JobLedger(
            settings.job_budget_usd,
            DayBudget(store, settings.day_budget_usd),
            settings.prices_per_mtok,
        )
        model = LedgerModel(
            openai_model_factory(settings)(name), name, ledger, settings.max_output_tokens
        )
        outcome = await assist(document, replay_run, model)
        return outcome, ledger.cost_usd
    finally:
        store.close()
