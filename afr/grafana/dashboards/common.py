"""What the dashboards share: their uids, the project, workflow and agent variables, links
to a run's timeline and to a failure cluster, the colours of statuses and verdicts, and
panels of the kinds every dashboard has."""

from __future__ import annotations

from typing import Any

from afr.grafana.panels import (
    DEFAULT_DATABASE,
    FORMAT_TABLE,
    FORMAT_TIME_SERIES,
    constant,
    datasource_variable,
    link,
    override,
    panel,
    query_variable,
    target,
)
from afr.grafana.queries import RUNS, WORKFLOW_OF_ROW, in_projects

__all__ = [
    "EVALS_UID",
    "FAILURES_UID",
    "FAILURE_STATUS_COLOURS",
    "OPEN_RUN",
    "PROJECT",
    "RECENT_RUNS",
    "ROW_PROJECT",
    "RUNS_UID",
    "RUN_UID",
    "STATUS_COLOURS",
    "TOOLS_UID",
    "VERDICT_COLOURS",
    "agent_variable",
    "coloured",
    "common_variables",
    "failure_link",
    "named",
    "run_link",
    "stat",
    "table",
    "timeseries",
    "workflow_variable",
]

RUNS_UID = "afr-runs"
RUN_UID = "afr-run"
TOOLS_UID = "afr-tools"
EVALS_UID = "afr-evals"
FAILURES_UID = "afr-failures"
RECENT_RUNS = 200
"""Rows of a table of runs: the newest ones of the window."""

PROJECT = "${project:queryparam}"
OPEN_RUN = "var-run_id=${__value.raw}&var-span_id="


ROW_PROJECT = "var-project=${__data.fields.project}"


def run_link(title: str = "Open the run timeline", *, row_project: bool = True) -> dict[str, Any]:
    """To the run timeline of the run id in the cell; in the row's ``project`` when the table
    has that column, else in the projects selected here."""
    return link(title, RUN_UID, OPEN_RUN, ROW_PROJECT if row_project else PROJECT)


def failure_link(title: str = "Show this failure's cluster") -> dict[str, Any]:
    """To the Failures dashboard showing only the signature in the cell, in the row's
    ``project``."""
    return link(title, FAILURES_UID, "var-signature=${__value.raw}", ROW_PROJECT)


def _project_variable() -> dict[str, Any]:
    return query_variable(
        "project",
        "Project",
        f"SELECT DISTINCT ProjectId FROM {RUNS} WHERE $__timeFilter(Start) ORDER BY ProjectId",
    )


def common_variables() -> list[dict[str, Any]]:
    return [datasource_variable(), constant("database", DEFAULT_DATABASE), _project_variable()]


def workflow_variable() -> dict[str, Any]:
    """The workflows (root span's workflow name) of the runs in the window."""
    return query_variable(
        "workflow",
        "Workflow",
        f"SELECT DISTINCT {WORKFLOW_OF_ROW} AS workflow FROM {RUNS}\n"
        f"WHERE {in_projects()} AND $__timeFilter(Start) AND workflow != ''\n"
        "ORDER BY workflow",
    )


def agent_variable() -> dict[str, Any]:
    """The agents that ran in the runs of the window."""
    return query_variable(
        "agent",
        "Agent",
        f"SELECT DISTINCT arrayJoin(Agents) AS agent FROM {RUNS}\n"
        f"WHERE {in_projects()} AND $__timeFilter(Start)\nORDER BY agent",
    )


# -- shared field settings ------------------------------------------------------------------

STATUS_COLOURS = {
    "type": "value",
    "options": {
        "ok": {"color": "green", "index": 0},
        "error": {"color": "red", "index": 1},
    },
}
VERDICT_COLOURS = {
    "type": "value",
    "options": {
        "FAILURE_FIXED": {"color": "green", "index": 0},
        "UNCHANGED": {"color": "blue", "index": 1},
        "STILL_FAILING": {"color": "red", "index": 2},
        "REGRESSED": {"color": "dark-red", "index": 3},
        "INCONCLUSIVE": {"color": "orange", "index": 4},
        "passed": {"color": "green", "index": 5},
        "failed": {"color": "red", "index": 6},
        "inconclusive": {"color": "orange", "index": 7},
        "errored": {"color": "dark-red", "index": 8},
    },
}
FAILURE_STATUS_COLOURS = {
    "type": "value",
    "options": {
        "recurring": {"color": "red", "index": 0},
        "open": {"color": "orange", "index": 1},
        "guarded": {"color": "blue", "index": 2},
        "fixed": {"color": "green", "index": 3},
    },
}
"""A failure cluster's status (``collector/store/failures.py``): recurring is the alarm."""
_COLOUR_TEXT = {"type": "color-text"}


def coloured(column: str, mapping: dict[str, Any], width: int = 120) -> dict[str, Any]:
    return override(column, mappings=[mapping], custom_cellOptions=_COLOUR_TEXT, custom_width=width)


def timeseries(title: str, sql: str, unit: str, description: str, **custom: Any) -> dict[str, Any]:
    return panel(
        "timeseries",
        title,
        [target(sql, FORMAT_TIME_SERIES)],
        description=description,
        defaults={
            "unit": unit,
            "min": 0,
            "custom": {"drawStyle": "line", "lineWidth": 2, "fillOpacity": 10, **custom},
        },
        options={
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "none"},
        },
    )


def table(
    title: str,
    sql: str,
    description: str,
    overrides: list[dict[str, Any]],
    *,
    defaults: dict[str, Any] | None = None,
    fmt_extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return panel(
        "table",
        title,
        [target(sql, FORMAT_TABLE, **(fmt_extra or {}))],
        description=description,
        defaults={
            "custom": {"align": "auto", "inspect": True, "filterable": True},
            **(defaults or {}),
        },
        overrides=overrides,
        options={"showHeader": True, "cellHeight": "sm", "footer": {"show": False}},
    )


def stat(title: str, sql: str, description: str, overrides: list[dict[str, Any]]) -> dict[str, Any]:
    return panel(
        "stat",
        title,
        [target(sql, FORMAT_TABLE)],
        description=description,
        defaults={"color": {"mode": "fixed", "fixedColor": "text"}},
        overrides=overrides,
        options={
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "/.*/", "values": False},
            "textMode": "value_and_name",
            "colorMode": "value",
            "graphMode": "none",
            "justifyMode": "auto",
            "orientation": "vertical",
            "wideLayout": True,
        },
    )


def named(column: str, name: str, **more: Any) -> dict[str, Any]:
    return override(column, displayName=name, **more)
