"""Running evals: each one is a replay of its fixture through the replay engine (tools
stubbed from the captured outcomes, model calls through the ledger), with its assertions
checked while the run's trace is still open.

An eval run is a run of kind ``eval``: linked to its source run (``afr.source_run_id`` and
an OTel link) and to the replay the eval was made from (``afr.linked_runs`` -> a link with
``afr.link.role = replay``), its trace metadata carrying the eval id and name, the sweep id
(when a sweep ran it), the status and every assertion's result. An eval that did not pass
also ends with an errored ``eval.result`` span, so the read API's ``status=error`` with
``kind=eval`` lists exactly the runs to look at.

``--agent``: the eval can run against the agents as the code defines them *now*
(``current_agents``): their instructions, tools' schemas and handoffs replace the captured
ones, while every tool call is still answered from the captured outcomes. A prompt or
schema change then fails the eval on the next deploy, not only a model change.

The Agents SDK's trace processors are process-global: evals in one process run one at a
time (parallelism is one process per shard, ``shard``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from agents import Agent, Model, gen_trace_id
from agents.tracing import SpanError, custom_span

from afr_exporter import semconv as sc
from afr_exporter.convert import agent_definitions
from afr_exporter.semconv import (
    METADATA_EVAL_ASSERTIONS,
    METADATA_EVAL_ID,
    METADATA_EVAL_NAME,
    METADATA_EVAL_STATUS,
    METADATA_SWEEP_ID,
)
from replay_worker.evals.assertions import (
    AssertionResult,
    Observed,
    assertion_evaluation,
    check_all,
    eval_evaluation,
)
from replay_worker.evals.contract import EvalDocument
from replay_worker.ledger import BudgetExceeded, DayBudget, JobLedger, LedgerModel
from replay_worker.model_client import openai_model_factory
from replay_worker.money import Clock
from replay_worker.replay.engine import ReplayResult, run_replay
from replay_worker.replay.fixture import AgentSpec, Fixture, FixtureError, recorded_agent
from replay_worker.replay.fork import ForkError
from replay_worker.settings import WorkerSettings
from replay_worker.state import open_state_store

__all__ = [
    "EVAL_RESULT_SPAN",
    "LINK_ROLE_REPLAY",
    "AgentLoadError",
    "EvalOutcome",
    "EvalSession",
    "EvalStatus",
    "current_agents",
    "eval_trace_id",
    "load_agent",
    "run_eval",
    "shard",
]

logger = logging.getLogger("afr.evals")

EvalStatus = Literal["passed", "failed", "inconclusive", "errored"]
ModelFactory = Callable[[str], Model]

LINK_ROLE_REPLAY = "replay"
EVAL_RESULT_SPAN = "eval.result"


@dataclass
class EvalOutcome:
    eval_id: str
    name: str
    path: str | None
    status: EvalStatus
    verdict: str | None
    assertions: list[AssertionResult] = field(default_factory=list)
    eval_run_id: str | None = None
    cost_usd: float = 0.0
    duration_s: float = 0.0
    """Wall time of the whole eval (harness included); the run's own is in ``latency_at_most``."""
    error: str | None = None

    @property
    def failed_assertions(self) -> list[AssertionResult]:
        return [a for a in self.assertions if not a.passed]

    def to_json(self) -> dict[str, Any]:
        return {
            "eval_id": self.eval_id,
            "name": self.name,
            "path": self.path,
            "status": self.status,
            "verdict": self.verdict,
            "assertions": [a.to_json() for a in self.assertions],
            "eval_run_id": self.eval_run_id,
            "cost_usd": self.cost_usd,
            "duration_s": round(self.duration_s, 3),
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EvalOutcome:
        return cls(**{**data, "assertions": [AssertionResult(**a) for a in data["assertions"]]})


def eval_trace_id(sweep_id: str | None, eval_id: str) -> str:
    """The eval run's trace id: derived from the sweep and the eval, so a sweep slot that
    runs again writes the same run (docs/architecture.md, decision 11); random outside a sweep."""
    if sweep_id is None:
        return gen_trace_id()
    return "trace_" + hashlib.sha256(f"{sweep_id}:{eval_id}".encode()).hexdigest()[:32]


T = TypeVar("T")


def _eval_key(item: Any) -> str:
    """The sort key of what ``shard`` splits: an ``EvalDocument``, a ``(path, document)``
    pair as ``load_evals`` returns them, or a string."""
    if isinstance(item, EvalDocument):
        return item.id
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], EvalDocument):
        return f"{item[1].id}\0{item[0]}"
    return str(item)


def shard(
    items: Sequence[T], index: int, count: int, *, key: Callable[[T], str] = _eval_key
) -> list[T]:
    """Shard ``index`` of ``count`` (1-based, as ``--shard I/N``): the items sorted by eval
    id, every ``count``-th from the ``index``-th. Every item is in exactly one shard, shard
    sizes differ by at most one, and the split depends only on the set, not on file order or
    machine, so N machines with the same checkout cover every eval exactly once."""
    if count < 1 or not 1 <= index <= count:
        raise ValueError(f"shard {index}/{count}: need 1 <= I <= N")
    ordered = sorted(items, key=key)
    return ordered[index - 1 :: count]


# --- the agents as the code defines them now ---------------------------------------------


class AgentLoadError(ValueError):
    """``MODULE:ATTR`` does not name an importable ``agents.Agent`` a replay can use."""


def load_agent(target: str) -> Agent[Any]:
    """Imports ``MODULE:ATTR`` (the current directory is importable, as for ``python -m``).
    ``ATTR`` is an ``Agent`` or a function of no arguments returning one."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise AgentLoadError(f"{target!r}: expected MODULE:ATTR, e.g. myapp.agents:triage")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentLoadError(f"{target!r}: cannot import {module_name}: {exc}") from None
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise AgentLoadError(f"{target!r}: {module_name} has no attribute {attribute}")
        value = getattr(value, part)
    if not isinstance(value, Agent) and callable(value):
        value = value()
    if not isinstance(value, Agent):
        raise AgentLoadError(f"{target!r} is a {type(value).__name__}, not an agents.Agent")
    return value


def current_agents(agent: Agent[Any]) -> tuple[str, dict[str, AgentSpec]]:
    """The entry agent's name and every agent reachable from it by handoffs, as replay
    specs: the same definitions afr's exporter records at the start of a live run."""
    definitions = agent_definitions(agent, None)
    hosted = sorted(
        str(t.get("name") or t.get("type"))
        for d in definitions["agents"].values()
        for t in d.get("tools") or []
        if isinstance(t, dict) and t.get("type") != "function"
    )
    if hosted:
        raise AgentLoadError(f"hosted tools a replay cannot stub: {', '.join(hosted)}")
    specs = {
        name: recorded_agent(definition, None) for name, definition in definitions["agents"].items()
    }
    return str(definitions["entry"]), specs


# --- one eval -------------------------------------------------------------------------------


# Model failures that say nothing about the agent (the service, the network, the account):
# the eval could not be done. A request the model refused (400, 409, 422) may be the agent's
# doing (a tool schema the API rejects) and fails the eval like any other run error.
_MODEL_SERVICE_ERRORS = frozenset(
    {
        "APIConnectionError",
        "APITimeoutError",
        "AuthenticationError",
        "PermissionDeniedError",
        "NotFoundError",
        "RateLimitError",
        "InternalServerError",
        "ModelTimeoutError",
    }
)


_UNCHECKED = "the eval's run ended before its assertions were checked"


def _explained(
    status: EvalStatus, result: ReplayResult, results: list[AssertionResult], outcome: EvalOutcome
) -> str:
    """Why an eval has its status, in a sentence (its ``afr.eval`` evaluation event)."""
    if status == "errored":
        return outcome.error or _UNCHECKED
    if status == "inconclusive":
        return f"the replay was inconclusive: {result.reason}"
    failed = [r.kind for r in results if not r.passed]
    checked = f"{len(results) - len(failed)} of {len(results)} assertions passed"
    kinds = f" (failed: {', '.join(failed)})" if failed else ""
    return f"{checked}{kinds}; the replay's verdict: {result.verdict}"


def _status(verdict: str, results: list[AssertionResult]) -> EvalStatus:
    if verdict == "INCONCLUSIVE":
        return "inconclusive"
    return "passed" if all(r.passed for r in results) else "failed"


def _tool_schemas(agents: dict[str, AgentSpec]) -> dict[str, dict[str, Any]]:
    schemas: dict[str, dict[str, Any]] = {}
    for spec in agents.values():
        for tool in spec.tools:
            if isinstance(tool.get("parameters"), dict):
                schemas.setdefault(str(tool["name"]), tool["parameters"])
    return schemas


def _with_agents(
    document: EvalDocument, agents: dict[str, AgentSpec] | None, entry: str | None
) -> Fixture:
    fixture = document.to_fixture()
    if agents is None:
        return fixture
    # Instructions the code builds at run time are not in a definition: the captured ones
    # stand in for them, as they do when a capture is replayed.
    merged = {
        name: spec
        if spec.instructions is not None or name not in fixture.agents
        else dataclasses.replace(spec, instructions=fixture.agents[name].instructions)
        for name, spec in agents.items()
    }
    return dataclasses.replace(fixture, agents=merged, entry_agent=entry or next(iter(agents)))


async def run_eval(
    document: EvalDocument,
    *,
    model_for: ModelFactory,
    ledger: JobLedger | None = None,
    model_override: str | None = None,
    agents_override: dict[str, AgentSpec] | None = None,
    entry_agent: str | None = None,
    sweep_id: str | None = None,
    trace_id: str | None = None,
    path: Path | str | None = None,
    max_turns: int = 12,
    clock: Callable[[], float] = time.monotonic,
) -> EvalOutcome:
    """Replays the eval and checks its assertions. Never raises for the eval's sake: a run
    that could not be done (a bad fixture, the budget, a model client that failed to build)
    is ``errored`` with the reason.

    ``model_for`` builds the run's models (the worker's: ``LedgerModel`` over ``ledger``,
    whose spend is the eval's cost); ``model_override`` beats the eval's ``replay.model``;
    ``agents_override`` (with ``entry_agent``, default its first agent) replaces the
    captured agents (``current_agents``); ``trace_id`` defaults to ``eval_trace_id``."""
    started = clock()
    run_trace_id = trace_id or eval_trace_id(sweep_id, document.id)
    outcome = EvalOutcome(
        eval_id=document.id,
        name=document.name,
        path=str(path) if path is not None else None,
        status="errored",
        verdict=None,
    )
    try:
        fixture = _with_agents(document, agents_override, entry_agent)
    except (FixtureError, TypeError, KeyError, StopIteration) as exc:
        outcome.error = f"the eval's fixture cannot be replayed: {exc}"
        outcome.duration_s = clock() - started
        return outcome

    def on_result(result: ReplayResult) -> dict[str, Any]:
        cost = ledger.cost_usd if ledger is not None else 0.0
        observed = Observed.from_replay(result, cost, _tool_schemas(fixture.agents))
        results = check_all(list(document.assertions), observed)
        status = _status(result.verdict, results)
        outcome.status, outcome.verdict, outcome.assertions = status, result.verdict, results
        if result.error and result.error.split(":", 1)[0] in _MODEL_SERVICE_ERRORS:
            status = outcome.status = "errored"
            outcome.error = f"the model call failed: {result.error}"
        with custom_span(
            EVAL_RESULT_SPAN,
            data={
                "eval_id": document.id,
                "status": status,
                "verdict": result.verdict,
                "assertions": [r.to_json() for r in results],
            },
        ) as span:
            if status != "passed":
                span.set_error(
                    SpanError(
                        message=f"eval {status}",
                        data={
                            "failed": [r.to_json() for r in results if not r.passed],
                            "verdict": result.verdict,
                            "reason": result.reason,
                        },
                    )
                )
        error_type = result.error.split(":", 1)[0] if status == "errored" and result.error else None
        return {
            METADATA_EVAL_STATUS: status,
            METADATA_EVAL_ASSERTIONS: [r.to_json() for r in results],
            sc.METADATA_EVALUATIONS: [
                eval_evaluation(status, _explained(status, result, results, outcome), error_type),
                *(assertion_evaluation(r, status, error_type) for r in results),
            ],
        }

    metadata: dict[str, Any] = {
        METADATA_EVAL_ID: document.id,
        METADATA_EVAL_NAME: document.name,
        METADATA_EVAL_STATUS: "errored",  # until the assertions are checked: fail closed
        sc.METADATA_EVALUATIONS: [eval_evaluation("errored", _UNCHECKED)],
        sc.METADATA_LINKED_RUNS: {LINK_ROLE_REPLAY: document.provenance.replay_run_id},
    }
    if sweep_id is not None:
        metadata[METADATA_SWEEP_ID] = sweep_id
    try:
        await run_replay(
            fixture,
            model_for,
            model_override=model_override or document.replay.model,
            policy=document.replay.policy,
            stub_outputs=dict(document.replay.stub_outputs),
            max_turns=max_turns,
            run_kind=sc.RUN_KIND_EVAL,
            trace_id=run_trace_id,
            metadata=metadata,
            on_result=on_result,
            fork=document.replay.fork,
        )
        outcome.eval_run_id = run_trace_id.removeprefix("trace_")
    except ForkError as exc:  # raised before the run starts: no run was made
        outcome.error = f"the eval's fork cannot be replayed: {exc}"
    except BudgetExceeded as exc:
        outcome.eval_run_id = run_trace_id.removeprefix("trace_")
        outcome.error = f"budget exhausted: {exc}"
    except Exception as exc:
        logger.exception("eval %s could not run", document.id)
        outcome.error = f"{type(exc).__name__}: {exc}"
    if outcome.error is not None:  # set only when the eval could not be done
        outcome.status = "errored"
    outcome.cost_usd = ledger.cost_usd if ledger is not None else 0.0
    outcome.duration_s = clock() - started
    return outcome


class EvalSession:
    """The worker's model path for evals run in this process: the model client from the
    settings (``AFR_WORKER_MODEL_*``), every call through ``LedgerModel`` with a job budget
    per eval (``job_budget_usd``) and the day's budget shared through the worker's state
    store (``data_dir``). Exporting the eval runs is the caller's: ``afr_exporter.install``."""

    def __init__(
        self,
        settings: WorkerSettings,
        *,
        model_factory: ModelFactory | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.settings = settings
        self._factory = model_factory or openai_model_factory(settings)
        self._store = open_state_store(settings)
        self._day = DayBudget(self._store, settings.day_budget_usd, clock)

    async def run(
        self,
        document: EvalDocument,
        *,
        path: Path | str | None = None,
        model_override: str | None = None,
        agents_override: dict[str, AgentSpec] | None = None,
        entry_agent: str | None = None,
        sweep_id: str | None = None,
        trace_id: str | None = None,
    ) -> EvalOutcome:
        """``model_override`` beats the eval's model, which beats ``default_model``."""
        settings = self.settings
        ledger = JobLedger(settings.job_budget_usd, self._day, settings.prices_per_mtok)

        def model_for(name: str) -> Model:
            return LedgerModel(self._factory(name), name, ledger, settings.max_output_tokens)

        return await run_eval(
            document,
            model_for=model_for,
            ledger=ledger,
            model_override=model_override or document.replay.model or settings.default_model,
            agents_override=agents_override,
            entry_agent=entry_agent,
            sweep_id=sweep_id,
            trace_id=trace_id,
            path=path,
            max_turns=settings.max_turns,
        )

    def close(self) -> None:
        self._store.close()
