"""The worker's HTTP requests and responses, defined once: the handlers (app.py) read hook
bodies and build answers through these models, and the OpenAPI document (openapi.py) is
generated from them.

A hook body's validators raise with messages that name the field at fault (a 400's
``error``); ``bad_request`` turns pydantic's own errors into the same shape.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

__all__ = [
    "Error",
    "EvalHook",
    "EvalRefused",
    "EvalWritten",
    "Fork",
    "Health",
    "Job",
    "JobAccepted",
    "Override",
    "PoolStats",
    "ReplayHook",
    "Sweep",
    "SweepAccepted",
    "SweepHook",
    "SweepStats",
    "dump",
    "problem",
]

RUN_ID_PATTERN = r"^(?:trace_)?[0-9a-fA-F]{32}$"
_HEX32 = re.compile(r"^[0-9a-f]{32}$")


def _run_id(value: object, info: ValidationInfo) -> str:
    """A run id, lower case, without the ``trace_`` prefix."""
    text = value.lower().removeprefix("trace_") if isinstance(value, str) else ""
    if not _HEX32.match(text):
        raise ValueError(f"{info.field_name} must be 32 hex digits")
    return text


def _stubs(value: object) -> object:
    if value is not None and not (
        isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    ):
        raise ValueError("stubs maps tool names to output strings")
    return value


def _slot(value: object) -> object:
    if value is not None and (not isinstance(value, str) or not value.strip() or len(value) > 200):
        raise ValueError("slot must be a non-empty string of at most 200 characters")
    return value.strip() if isinstance(value, str) else value


RunId = Annotated[str, Field(pattern=RUN_ID_PATTERN), BeforeValidator(_run_id)]

SIGNATURE_PATTERN = r"^[0-9a-fA-F]{16}$"
_HEX16 = re.compile(r"^[0-9a-f]{16}$")


def _signature(value: object) -> str:
    text = value.strip().lower() if isinstance(value, str) else ""
    if not _HEX16.match(text):
        raise ValueError("signature must be a failure signature: 16 hex digits")
    return text


Signature = Annotated[str, Field(pattern=SIGNATURE_PATTERN), BeforeValidator(_signature)]


# --- a fork: where a replay goes live, and what it changes there ----------------------------
STEP_PATTERN = r"^(?:(?:llm|turn):[1-9][0-9]{0,5}|[^\s:]{1,200})$"
"""``llm:N`` (the N-th model call, from 1), ``turn:N``, or a tool call id (a handoff's too;
one with a colon or a space cannot be a step)."""


class _Override(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OverrideToolOutput(_Override):
    """The tool call answers with ``output``."""

    kind: Literal["tool_output"]
    call_id: str = Field(min_length=1, max_length=200)
    output: str


class OverrideToolError(_Override):
    """The tool call fails; the model is shown ``error``."""

    kind: Literal["tool_error"]
    call_id: str = Field(min_length=1, max_length=200)
    error: str


class OverrideToolArguments(_Override):
    """The model issued the tool call with these arguments (JSON text, checked against the
    tool's captured schema)."""

    kind: Literal["tool_arguments"]
    call_id: str = Field(min_length=1, max_length=200)
    arguments: str


class OverrideInstructions(_Override):
    kind: Literal["instructions"]
    agent: str = Field(min_length=1)
    instructions: str = Field(min_length=1)


class OverrideAgentModel(_Override):
    kind: Literal["agent_model"]
    agent: str = Field(min_length=1)
    model: str = Field(min_length=1, max_length=200)


class OverrideModelSettings(_Override):
    """Model settings merged over the agent's (``temperature``, ``top_p``, ``max_tokens``...)."""

    kind: Literal["model_settings"]
    agent: str = Field(min_length=1)
    settings: dict[str, str | int | float | bool | None] = Field(min_length=1)


class OverrideGuardrail(_Override):
    kind: Literal["guardrail"]
    name: str = Field(min_length=1)
    triggered: bool


class OverrideInput(_Override):
    """The run's user input (the last user message when the input is a list of items)."""

    kind: Literal["input"]
    input: str = Field(min_length=1)


Override = Annotated[
    OverrideToolOutput
    | OverrideToolError
    | OverrideToolArguments
    | OverrideInstructions
    | OverrideAgentModel
    | OverrideModelSettings
    | OverrideGuardrail
    | OverrideInput,
    Field(discriminator="kind"),
]


class Fork(BaseModel):
    """Fork the run at ``step``: the model calls before it are answered from the capture
    (no request, $0), the overrides apply at it, the model is live from it on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step: str = Field(pattern=STEP_PATTERN, description="llm:N, turn:N, or a tool call id")
    overrides: list[Override] = Field(default_factory=list, max_length=100)

    @field_validator("overrides")
    @classmethod
    def _once_each(cls, overrides: list[Any]) -> list[Any]:
        seen: set[tuple[str, str]] = set()
        for override in overrides:
            # An output and an error for one call contradict each other: one outcome a call.
            group = (
                "tool outcome" if override.kind in ("tool_output", "tool_error") else override.kind
            )
            target = next(
                (
                    str(getattr(override, k))
                    for k in ("call_id", "agent", "name")
                    if hasattr(override, k)
                ),
                "",
            )
            if (group, target) in seen:
                raise ValueError(f"fork.overrides: two {group} overrides for {target or 'the run'}")
            seen.add((group, target))
        return overrides


# --- requests ------------------------------------------------------------------------------
class ReplayHook(BaseModel):
    """``POST /hooks/replay``: replay a stored run."""

    run_id: RunId | None = Field(
        None, description="the run (OTel trace id) to replay; or give signature"
    )
    signature: Signature | None = Field(
        None,
        description="a failure signature (/api/v1/failures): replay the newest production "
        "run of the last 30 days that failed with it",
    )
    model: str | None = Field(None, description="model to replay with; default: the run's")
    stubs: Annotated[dict[str, str] | None, BeforeValidator(_stubs)] = Field(
        None, description="tool name -> output to answer with"
    )
    policy: Literal["exact", "strict", "lenient"] = "exact"
    fork: Fork | None = Field(
        None, description="fork the run at a step with overrides; default: replay it whole"
    )

    @model_validator(mode="after")
    def _one_run(self) -> ReplayHook:
        if (self.run_id is None) == (self.signature is None):
            raise ValueError("give exactly one of run_id and signature")
        return self


class EvalHook(BaseModel):
    """``POST /hooks/evals``: turn a FAILURE_FIXED replay into a regression eval."""

    replay_run_id: RunId


class SweepHook(BaseModel):
    """``POST /hooks/sweeps``: queue a sweep (an empty body, or no slot: a manual slot named
    by the webhook id)."""

    slot: Annotated[str | None, BeforeValidator(_slot)] = Field(
        None,
        min_length=1,
        max_length=200,
        pattern=r"\S",
        description="a label, or an instant of the schedule (2026-12-01T03:00:00Z)",
    )


def problem(error: ValidationError) -> str:
    """The first problem of a body, naming its field: a validator's own message does;
    pydantic's is prefixed with the field's name (``body`` when the body is not an object)."""
    first = error.errors(include_url=False, include_input=False)[0]
    cause = first.get("ctx", {}).get("error")
    if first["type"] == "value_error" and cause is not None:
        return str(cause)
    field = ".".join(str(part) for part in first["loc"]) or "body"
    return f"{field}: {first['msg']}"


# --- responses -----------------------------------------------------------------------------
class Error(BaseModel):
    """Every refusal's body."""

    error: str = Field(description="what is wrong, naming the field at fault")


class EvalRefused(BaseModel):
    error: str
    verdict: str | None = None


class JobAccepted(BaseModel):
    job_id: str
    run_id: str = Field(description="the run replayed (the newest one, for a signature)")
    state: str
    status_url: str


class Job(BaseModel):
    """A replay job (replay_worker/state/jobs.py ``Job.to_json``)."""

    job_id: str
    run_id: str
    model: str | None
    policy: str
    state: str
    attempts: int
    created_at: float
    started_at: float | None
    finished_at: float | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    cost_usd: float
    overrun_usd: float
    model_requests: int
    fork: dict[str, Any] | None = Field(None, description="the fork asked for (step, overrides)")


class EvalWritten(BaseModel):
    eval_id: str
    path: str
    eval: dict[str, Any] = Field(description="the afr.eval/v1 document written")


class SweepAccepted(BaseModel):
    sweep_id: str
    slot: str
    state: str
    status_url: str


class Sweep(BaseModel):
    """A sweep (replay_worker/state/sweeps.py ``Sweep.to_json``)."""

    sweep_id: str
    slot: str
    trigger: str
    state: str
    attempts: int
    created_at: float
    started_at: float | None
    finished_at: float | None
    summary: dict[str, Any] | None
    error: dict[str, Any] | None


class PoolStats(BaseModel):
    """The replay pool (replay_worker/pool.py ``PoolStats``)."""

    size: int
    running: int
    processes_started: int
    crashed: int
    timed_out: int


class SweepStats(BaseModel):
    """The sweep scheduler (replay_worker/scheduler.py ``SweepScheduler.stats``)."""

    enabled: bool
    cron: str
    zone: str
    next_slot: str | None
    running: str | None
    counts: dict[str, int]
    last: Sweep | None


class Health(BaseModel):
    """``GET /healthz`` (replay_worker/jobs.py ``JobRunner.stats`` and the sweeps')."""

    ok: bool
    error: str | None = Field(None, description="why jobs are not being run")
    # What follows is read from the state store: null while it cannot be reached.
    day: str | None = None
    day_spent_usd: float | None = None
    day_overrun_usd: float | None = None
    day_budget_usd: float | None = None
    day_model_requests: int | None = None
    jobs: dict[str, int] | None = Field(None, description="jobs by state")
    pool: PoolStats | None = Field(None, description="null until the pool starts")
    sweeps: SweepStats | None = None


def dump(model: BaseModel) -> dict[str, Any]:
    """A response body exactly as the document describes it."""
    return model.model_dump(mode="json")
