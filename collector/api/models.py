"""The read API's requests and responses, defined once: the handlers (runs.py) parse and
answer through these models, and the OpenAPI document (openapi.py) is generated from them.

Query parameters are validated by ``RunQuery`` with messages that name the parameter (a
400's ``error``); the bounds that depend on settings (the page size) come in through the
validation context.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
)
from pydantic.alias_generators import to_camel

from afr_exporter.semconv import RUN_KINDS
from collector.store.reader import decode_cursor

__all__ = [
    "DiffQuery",
    "Divergence",
    "Error",
    "FailureStatus",
    "Guard",
    "OtlpTrace",
    "Run",
    "RunDetail",
    "RunDiff",
    "RunFailure",
    "RunList",
    "RunQuery",
    "Span",
    "dump",
]

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_WHOLE = re.compile(r"^[+-]?[0-9]{1,20}$")


def _run_kind(value: str) -> str:
    if value not in RUN_KINDS:
        raise ValueError(f"kind must be one of {', '.join(RUN_KINDS)}")
    return value


RunKind = Annotated[
    str, AfterValidator(_run_kind), Field(json_schema_extra={"enum": list(RUN_KINDS)})
]
RunStatus = Literal["ok", "error"]


class Error(BaseModel):
    """Every 4xx answer's body."""

    error: str = Field(description="what is wrong, naming the parameter at fault")


# --- GET /api/v1/runs ---------------------------------------------------------------------
def _time(value: object, info: ValidationInfo) -> int | float | None:
    """Unix seconds (float) or nanoseconds (> 1e12); empty is the default. Errors never
    quote the value. Whole numbers stay exact: a nanosecond time through a float would move
    by up to 256 ns and miss the run that starts at it."""
    if value is None or value == "":
        return None
    text = str(value).strip()
    if _WHOLE.match(text):
        whole = int(text)
        if abs(whole) > 2**63:
            raise ValueError(f"{info.field_name} must be unix seconds or nanoseconds")
        return whole
    try:
        number = float(str(value))
        if not math.isfinite(number) or abs(number) > 2**63:
            raise ValueError
    except ValueError:
        raise ValueError(f"{info.field_name} must be unix seconds or nanoseconds") from None
    return number


def _status(value: object) -> object:
    if value not in (None, "ok", "error"):
        raise ValueError("status must be ok or error")
    return value


def _limit(value: object, info: ValidationInfo) -> int:
    text = str(value)
    limit = int(text) if text.isdigit() else 0
    max_runs = (info.context or {}).get("max_runs")
    if limit < 1 or (max_runs is not None and limit > max_runs):
        raise ValueError(f"limit must be 1..{max_runs or ''}")
    return limit


def _source_run_id(value: object) -> str | None:
    text = str(value).lower().removeprefix("trace_") if value is not None else ""
    if not text:
        return None
    if not _HEX32.match(text):
        raise ValueError("source_run_id must be 32 hex digits")
    return text


def _conversation(value: object) -> str | None:
    if value is None or value == "":
        return None
    text = str(value)
    if len(text) > 256 or not text.isprintable():
        raise ValueError("conversation_id must be at most 256 printable characters")
    return text


def _cursor(value: object) -> str | None:
    if value is None or value == "":
        return None
    text = str(value)
    try:
        decode_cursor(text)
    except RecursionError:  # base64 of JSON nested deeper than Python parses
        raise ValueError("invalid cursor") from None
    return text


TimeParam = Annotated[int | float | None, BeforeValidator(_time)]


class RunQuery(BaseModel):
    """``GET /api/v1/runs``'s query parameters; any other parameter is ignored."""

    model_config = ConfigDict(extra="ignore")

    since: TimeParam = Field(
        None, description="unix seconds or nanoseconds; default: until minus the lookback"
    )
    until: TimeParam = Field(None, description="unix seconds or nanoseconds; default: now + 1 h")
    status: Annotated[RunStatus | None, BeforeValidator(_status)] = None
    workflow: str | None = None
    agent: str | None = None
    kind: RunKind | None = None
    source_run_id: Annotated[str | None, BeforeValidator(_source_run_id)] = Field(
        None, description="its replays and eval runs (32 hex digits)"
    )
    conversation_id: Annotated[str | None, BeforeValidator(_conversation)] = Field(
        None, description="the runs of one conversation (gen_ai.conversation.id)"
    )
    limit: Annotated[int, BeforeValidator(_limit)] = Field(
        50, ge=1, description="page size, at most AFR_API_MAX_RUNS"
    )
    cursor: Annotated[str | None, BeforeValidator(_cursor)] = Field(
        None, description="next_cursor of the previous page"
    )


class Run(BaseModel):
    """A run's summary (collector/store/reader.py)."""

    run_id: str = Field(description="32 hex digits: the OTel trace id")
    start_ns: int
    end_ns: int
    duration_ns: int
    status: RunStatus
    error_count: int
    span_count: int
    failing_span_id: str | None
    failing_span_name: str | None
    failing_error_type: str | None
    workflow: str
    root_agent: str
    agents: list[str]
    input_tokens: int = Field(description="every input token, the cached ones among them")
    output_tokens: int = Field(description="every output token, the reasoning ones among them")
    cache_read_tokens: int = Field(0, description="input tokens read from a prompt cache")
    cache_creation_tokens: int = Field(0, description="input tokens written to a prompt cache")
    reasoning_tokens: int = Field(0, description="output tokens spent reasoning")
    cost_usd: float | None = Field(
        description="each token kind priced at its model's rate (AFR_MODEL_PRICES, else the "
        "genai-prices database); null when a model call's model is unpriced "
        "(unpriced_models): the cost is then unknown, at least priced_cost_usd"
    )
    priced_cost_usd: float = Field(
        0.0, description="the cost of the model calls whose model has a price"
    )
    unpriced_models: list[str] = Field(
        default_factory=list, description="models of the run's calls that no price knows"
    )
    kind: RunKind
    source_run_id: str | None = Field(description="the run replayed")
    verdict: str | None = Field(description="a replay's or eval's verdict")
    eval_name: str | None
    sweep_id: str | None
    signature: str | None = Field(
        None,
        description="a failing run's failure signature (16 hex digits): its cluster is "
        "/api/v1/failures/{signature}",
    )
    conversation_id: str | None = Field(
        None,
        description="the conversation (session, thread) the run belongs to: "
        "gen_ai.conversation.id, the Agents SDK's group_id",
    )


class RunList(BaseModel):
    runs: list[Run] = Field(description="newest first")
    next_cursor: str | None = Field(description="the next page's cursor; null on the last")


# --- GET /api/v1/runs/{run_id} ------------------------------------------------------------
class SpanStatus(BaseModel):
    code: str = Field(description="Unset, Ok or Error")
    message: str


class SpanScope(BaseModel):
    name: str
    version: str


class SpanEvent(BaseModel):
    time_unix_nano: int
    name: str
    attributes: dict[str, str]


class SpanLink(BaseModel):
    trace_id: str
    span_id: str
    trace_state: str
    attributes: dict[str, str]


class Span(BaseModel):
    """A span after the trace-level normalization pass: as it arrived (ids, attributes,
    events, links) and what normalization found (span type, agent, tool, model, tokens)."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    duration_ns: int
    status: SpanStatus
    service_name: str
    resource_attributes: dict[str, str]
    scope: SpanScope
    trace_state: str
    attributes: dict[str, str] = Field(description="as they arrived (after redaction)")
    events: list[SpanEvent]
    links: list[SpanLink]
    span_type: str
    dialect: str
    agent_name: str
    tool_name: str
    tool_call_id: str
    model: str
    error_type: str
    input: str
    output: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    reasoning_tokens: int = 0
    run_kind: RunKind
    source_run_id: str
    redactions: list[str]
    truncated: bool
    content_from_logs: bool = Field(
        False,
        description="its input, output or system instructions came from its GenAI log "
        "records (the span itself carried none)",
    )


class LogEntry(BaseModel):
    """An OTLP log record of the run (``otel_logs``), after redaction and truncation."""

    time_unix_nano: int
    observed_time_unix_nano: int
    trace_id: str
    span_id: str = Field(description="the span it belongs to; empty for none")
    flags: int
    severity_text: str
    severity_number: int
    service_name: str
    event_name: str
    body: str = Field(description="a string body as is, any other as JSON")
    attributes: dict[str, str]
    resource_attributes: dict[str, str]
    scope_name: str
    scope_version: str
    scope_attributes: dict[str, str]
    redactions: list[str]
    truncated: bool
    log_id: str = Field(description="16 hex digits: the same record delivered twice, one id")


FailureStatus = Literal["recurring", "open", "fixed", "guarded"]


class Guard(BaseModel):
    """An eval synthesized from a fixing replay of one of the cluster's runs."""

    eval_name: str
    eval_runs: int = Field(description="its runs (afr eval run, sweeps)")
    first_run_ns: int
    last_run_ns: int
    last_run_id: str
    last_outcome: str | None = Field(description="passed, failed, errored or inconclusive")


class RunFailure(BaseModel):
    """A failing run among the production runs that failed the same way (its cluster,
    ``/api/v1/failures/{signature}``): seen N times since ...; fixed by ...; guarded by ..."""

    signature: str = Field(description="16 hex digits")
    title: str = Field(description="subject: shape of the cause, after the agent path")
    status: FailureStatus
    runs: int = Field(description="production runs with this signature since since_ns")
    since_ns: int = Field(
        description="the window looked at: AFR_TTL_DAYS or 30 days, or the run's start when older"
    )
    first_seen_ns: int
    last_seen_ns: int
    sample_run_ids: list[str] = Field(description="up to 5, newest first")
    fixed_by: str | None = Field(description="the first replay that reached FAILURE_FIXED")
    guard: Guard | None = Field(description="the eval guarding it (the recurring one first)")
    recurring_since_ns: int | None = Field(
        description="recurring: the guarding eval's first run, after which runs still failed"
    )
    runs_since_guard: int = Field(description="recurring: runs after the eval's first run")


class RunDetail(BaseModel):
    run: Run
    failure: RunFailure | None = Field(
        None, description="a failing run's cluster; null when it did not fail (or no cluster)"
    )
    spans: list[Span]
    logs: list[LogEntry] = Field(
        default_factory=list,
        description="the run's OTLP log records in time order (at most AFR_API_MAX_SPANS)",
    )


# --- GET /api/v1/runs/diff ---------------------------------------------------------------
def _diff_run_id(value: object, info: ValidationInfo) -> str:
    text = str(value if value is not None else "").strip().lower().removeprefix("trace_")
    if not text:
        raise ValueError(f"{info.field_name} is required: a run id")
    if not _HEX32.match(text):
        raise ValueError(f"{info.field_name} must be a run id (32 hex digits)")
    return text


DiffRunId = Annotated[str, BeforeValidator(_diff_run_id)]


class DiffQuery(BaseModel):
    """``GET /api/v1/runs/diff``'s query parameters: two different runs of the project."""

    model_config = ConfigDict(extra="ignore")

    a: DiffRunId = Field(description="the first run (a source run): 32 hex digits")
    b: DiffRunId = Field(description="the second run (a replay, an eval, another capture)")


StepType = Literal["task", "agent", "turn", "llm", "tool", "handoff", "guardrail"]
DivergenceKind = Literal[
    "missing_step",
    "extra_step",
    "step",
    "agent",
    "tool",
    "handoff",
    "arguments",
    "model",
    "output",
    "guardrail",
    "error",
]


class StepSide(BaseModel):
    """One run's span at an aligned step."""

    span_id: str
    name: str = Field(description="agent, tool, guardrail or model name; a handoff's target")
    call_id: str = Field(description="a tool call's id; empty elsewhere")
    status: RunStatus
    error_type: str
    duration_ns: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = Field(
        description="each token kind priced at its model's rate; null: the model is unpriced"
    )


class StepDelta(BaseModel):
    """b minus a."""

    duration_ns: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = Field(description="null when either side is unpriced")


class DiffStep(BaseModel):
    """A step of the alignment: the same step in both runs, or a step only one of them has."""

    index: int
    type: StepType
    name: str = Field(description="what aligns it: agent, tool, model-calling agent, guardrail")
    a: StepSide | None = Field(description="null: a has no such step")
    b: StepSide | None = Field(description="null: b has no such step")
    differences: list[DivergenceKind] = Field(description="empty: the step is the same")
    delta: StepDelta | None = Field(description="null unless both runs have the step")


class PointerDifference(BaseModel):
    """A value that differs between two JSON documents, at its JSON pointer (RFC 6901)."""

    pointer: str = Field(description='"" is the whole document')
    a: Any = Field(None, description="a's value (null when absent there)")
    b: Any = Field(None, description="b's value (null when absent there)")
    in_a: bool
    in_b: bool


class Divergence(BaseModel):
    """The first step where the runs differ."""

    step: int = Field(description="index into steps")
    type: StepType
    name: str
    kind: DivergenceKind = Field(description="the difference that decides it")
    differences: list[DivergenceKind] = Field(description="every difference at this step")
    summary: str = Field(description="one line for a human")
    tool_step: int | None = Field(description="the index among tool calls, at a tool call")
    arguments: list[PointerDifference] = Field(description="other arguments, by JSON pointer")
    output: list[PointerDifference] = Field(description="another output, by JSON pointer")


class ToolDivergence(BaseModel):
    """The replay verdict's notion of the first divergence: tool calls compared by position."""

    step: int = Field(description="the index among tool calls")
    kind: Literal["missing_call", "extra_call", "different_tool", "different_arguments"]
    tool: str = Field(description="b's tool (a's when b has no call there)")
    a_tool: str | None = Field(description="a's tool, when it is another")
    arguments: list[PointerDifference]


class RecordedVerdict(BaseModel):
    """The verdict a replay or eval run recorded against its source (one of the two runs)."""

    run_id: str = Field(description="the replay or eval run")
    verdict: str
    reason: str
    first_divergence: dict[str, Any] | None = Field(description="as the replay recorded it")
    agrees: bool = Field(description="whether it is this diff's tool_divergence")


class RunDiff(BaseModel):
    """Two runs aligned step by step, where they first diverge, and what each step cost."""

    a: Run
    b: Run
    steps: list[DiffStep]
    first_divergence: Divergence | None = Field(description="null: the runs do the same")
    tool_divergence: ToolDivergence | None = Field(
        description="the first tool call that differs by position (the replay verdict's notion)"
    )
    verdict: RecordedVerdict | None = Field(
        description="when one run is a replay or eval of the other"
    )
    delta: StepDelta = Field(description="the whole runs: b minus a")


# --- GET /api/v1/runs/{run_id}/otlp -------------------------------------------------------
class _Otlp(BaseModel):
    """OTLP/JSON spells its fields in lowerCamelCase."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class OtlpValue(_Otlp):
    string_value: str


class OtlpKeyValue(_Otlp):
    key: str
    value: OtlpValue


class OtlpResource(_Otlp):
    attributes: list[OtlpKeyValue]


class OtlpScope(_Otlp):
    name: str
    version: str


class OtlpStatus(_Otlp):
    code: int = Field(description="0 unset, 1 ok, 2 error")
    message: str


class OtlpEvent(_Otlp):
    time_unix_nano: str
    name: str
    attributes: list[OtlpKeyValue]


class OtlpLink(_Otlp):
    trace_id: str
    span_id: str
    trace_state: str
    attributes: list[OtlpKeyValue]


class OtlpSpan(_Otlp):
    trace_id: str
    span_id: str
    parent_span_id: str
    trace_state: str
    name: str
    kind: int
    start_time_unix_nano: str
    end_time_unix_nano: str
    attributes: list[OtlpKeyValue]
    events: list[OtlpEvent]
    links: list[OtlpLink]
    status: OtlpStatus


class OtlpScopeSpans(_Otlp):
    scope: OtlpScope
    spans: list[OtlpSpan]


class OtlpResourceSpans(_Otlp):
    resource: OtlpResource
    scope_spans: list[OtlpScopeSpans]


class OtlpTrace(_Otlp):
    """An OTLP/JSON ``ExportTraceServiceRequest`` (hex ids; attribute values as strings, as
    the store keeps them)."""

    resource_spans: list[OtlpResourceSpans]


def dump(model: BaseModel) -> dict[str, Any]:
    """A response body exactly as the document describes it (aliases, JSON types)."""
    return model.model_dump(mode="json", by_alias=True)
