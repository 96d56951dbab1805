"""``GET /api/v1/failures`` and ``/api/v1/failures/{signature}``: the query and the answers
(collector/store/failures.py computes them). Apart from models.py so the run models stay
one screen; the OpenAPI document is generated from both."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from collector.api.models import FailureStatus, Guard, TimeParam
from collector.store.failures import FAILURE_STATUSES, decode_failure_cursor

__all__ = ["FailureCluster", "FailureDetail", "FailureList", "FailureQuery", "Guard"]


def _status(value: object) -> object:
    if value in (None, ""):
        return None
    if value not in FAILURE_STATUSES:
        raise ValueError(f"status must be one of {', '.join(FAILURE_STATUSES)}")
    return value


def _limit(value: object) -> int:
    text = str(value)
    limit = int(text) if text.isdigit() else 0
    if not 1 <= limit <= 500:
        raise ValueError("limit must be 1..500")
    return limit


def _cursor(value: object) -> str | None:
    if value is None or value == "":
        return None
    decode_failure_cursor(str(value))
    return str(value)


class FailureQuery(BaseModel):
    """``GET /api/v1/failures``'s query parameters; any other parameter is ignored."""

    model_config = ConfigDict(extra="ignore")

    since: TimeParam = Field(
        None, description="unix seconds or nanoseconds; default: until minus 7 days"
    )
    until: TimeParam = Field(None, description="unix seconds or nanoseconds; default: now + 1 h")
    workflow: str | None = Field(None, description="only this workflow's runs count")
    agent: str | None = Field(None, description="only the runs this agent ran in count")
    status: Annotated[FailureStatus | None, BeforeValidator(_status)] = None
    limit: Annotated[int, BeforeValidator(_limit)] = Field(
        50, ge=1, description="page size, at most 500"
    )
    cursor: Annotated[str | None, BeforeValidator(_cursor)] = Field(
        None, description="next_cursor of the previous page"
    )


class DayCount(BaseModel):
    day: str = Field(description="UTC date, YYYY-MM-DD")
    runs: int


class FailureCluster(BaseModel):
    """The failing production runs of the window that share a failure signature (ADR 34)."""

    signature: str = Field(description="16 hex digits")
    title: str = Field(description="subject: shape of the cause, after the agent path")
    cause: list[str] = Field(description="[span type, subject, error type, shape]")
    path: list[str] = Field(description="the agents that led to the failure, in order")
    status: FailureStatus
    runs: int
    first_seen_ns: int
    last_seen_ns: int
    per_day: list[DayCount] = Field(description="runs per UTC day that had any")
    sample_run_ids: list[str] = Field(description="up to 5, newest first")
    workflows: list[str]
    agents: list[str] = Field(description="every agent of the cluster's runs")
    fixed_by: str | None = Field(description="the first replay that reached FAILURE_FIXED")
    guard: Guard | None = Field(description="the eval guarding it (the recurring one first)")
    recurring_since_ns: int | None = Field(
        description="recurring: the guarding eval's first run, after which runs still failed"
    )
    runs_since_guard: int = Field(description="recurring: runs after the eval's first run")


class FailureList(BaseModel):
    failures: list[FailureCluster] = Field(
        description="recurring first, then open by last seen, then the rest by last seen"
    )
    next_cursor: str | None = Field(description="the next page's cursor; null on the last")


class FailureDetail(BaseModel):
    failure: FailureCluster
