"""``afr-failures``, Failures: the failing production runs grouped by failure signature
(ADR 34), each cluster with what was done about it -- recurring ones first, clusters by
status, new this week, the trend per signature, every cluster.

The clusters are ``queries.failure_clusters``: the read API's (``GET /api/v1/failures``) in
SQL, with its statuses; a test compares the two on the same data."""

from __future__ import annotations

from typing import Any

from afr.grafana.dashboards.common import (
    FAILURE_STATUS_COLOURS,
    FAILURES_UID,
    RECENT_RUNS,
    agent_variable,
    coloured,
    common_variables,
    failure_link,
    named,
    run_link,
    stat,
    table,
    timeseries,
    workflow_variable,
)
from afr.grafana.panels import Grid, custom_variable, dashboard, textbox
from afr.grafana.queries import FAILURE_STATUSES, all_or, failure_clusters, values

__all__ = ["NEW_DAYS", "failures"]

NEW_DAYS = 7
"""A cluster is new when its first run in the window started in the window's last days."""
_NEW = f"first_seen >= $__toTime - INTERVAL {NEW_DAYS} DAY"
_STATUS = all_or(f"status IN ({values('status')})", "status")
_SIGNATURE = all_or(f"signature = {values('signature')}", "signature")
_CLUSTERS = f"WITH {failure_clusters(having=(_SIGNATURE,))}\n"
_RED = {"mode": "fixed", "fixedColor": "red"}


def _cluster_columns(*columns: str) -> list[dict[str, Any]]:
    """The overrides of these columns, as every cluster table shows them."""
    overrides = {
        "status": coloured("status", FAILURE_STATUS_COLOURS, 90),
        "signature": named("signature", "signature", links=[failure_link()], custom_width=150),
        "title": named("title", "failure", custom_minWidth=320),
        "first_seen": named("first_seen", "first seen", custom_width=170),
        "last_seen": named("last_seen", "last seen", custom_width=170),
        "newest_run": named("newest_run", "newest run", links=[run_link("Open the newest run")]),
        "fixed_by": named(
            "fixed_by", "fixed by", links=[run_link("Open the replay that fixed it")]
        ),
        "guard_eval": named("guard_eval", "guarded by"),
        "guard_outcome": named("guard_outcome", "last eval outcome", custom_width=110),
        "guard_run": named(
            "guard_run", "eval's newest run", links=[run_link("Open the eval's newest run")]
        ),
        "runs_since_guard": named("runs_since_guard", "runs since the eval", custom_width=110),
        "recurring_since": named("recurring_since", "eval first ran", custom_width=170),
    }
    return [overrides[c] for c in columns]


def failures() -> dict[str, Any]:
    variables = [
        *common_variables(),
        workflow_variable(),
        agent_variable(),
        custom_variable("status", "Status", FAILURE_STATUSES),
        textbox(
            "signature",
            "Signature",
            "One failure signature (16 hex digits; set by a click on a signature); empty: all.",
        ),
    ]
    shown = f"LIMIT {RECENT_RUNS}"
    grid = Grid()
    grid.add(
        table(
            "Recurring failures",
            _CLUSTERS
            + "SELECT title, runs_since_guard, recurring_since, guard_eval, guard_outcome,\n"
            "    guard_run, fixed_by, runs, last_seen, newest_run, signature, project\n"
            "FROM failure_clusters\n"
            f"WHERE status = 'recurring' AND {_STATUS}\n"
            f"ORDER BY last_seen DESC, signature, project\n{shown}",
            "Failures an eval guards, whose eval's newest run passed, yet production runs with "
            "the same signature started after the eval first ran: the fix did not ship, or the "
            "eval does not catch the failure. Runs since the eval count the window's runs.",
            _cluster_columns(
                "title",
                "runs_since_guard",
                "recurring_since",
                "guard_eval",
                "guard_outcome",
                "guard_run",
                "fixed_by",
                "last_seen",
                "newest_run",
                "signature",
            ),
            defaults={
                "color": _RED,
                "custom": {
                    "align": "auto",
                    "inspect": True,
                    "filterable": True,
                    "cellOptions": {"type": "color-text"},
                },
            },
        ),
        24,
        7,
    )
    grid.add(
        stat(
            "Clusters by status",
            _CLUSTERS + "SELECT countIf(status = 'recurring') AS recurring,\n"
            "    countIf(status = 'open') AS open,\n"
            "    countIf(status = 'guarded') AS guarded,\n"
            "    countIf(status = 'fixed') AS fixed,\n"
            f"    countIf({_NEW}) AS new_this_week,\n"
            "    sum(runs) AS failing_runs\n"
            f"FROM failure_clusters\nWHERE {_STATUS}",
            "Failure signatures of the production runs that started in the time range, by "
            "status: open (no replay fixed it), fixed (a replay reached FAILURE_FIXED), guarded "
            "(an eval synthesized from such a replay runs), recurring (guarded, the eval "
            f"passes, and the failure came back). New: first seen in the range's last "
            f"{NEW_DAYS} days.",
            [
                named("recurring", "Recurring", color=_RED),
                named("open", "Open", color={"mode": "fixed", "fixedColor": "orange"}),
                named("guarded", "Guarded", color={"mode": "fixed", "fixedColor": "blue"}),
                named("fixed", "Fixed", color={"mode": "fixed", "fixedColor": "green"}),
                named("new_this_week", "New this week"),
                named("failing_runs", "Failing runs"),
            ],
        ),
        24,
        4,
    )
    grid.add(
        timeseries(
            "Failing runs per day",
            _CLUSTERS + "SELECT day.1 AS time,\n"
            "    concat(title, ' · ', substring(signature, 1, 6)) AS failure,\n"
            "    sum(day.2) AS runs\n"
            "FROM failure_clusters\n"
            "ARRAY JOIN arrayZip(per_day.1, per_day.2) AS day\n"
            f"WHERE {_STATUS}\n"
            "GROUP BY time, failure\nORDER BY time, failure",
            "short",
            "Failing production runs per day (UTC) and signature (its title and first six "
            "digits), over the clusters the filters keep.",
            drawStyle="bars",
            fillOpacity=60,
            stacking={"mode": "normal", "group": "A"},
        ),
        12,
        9,
    )
    grid.add(
        table(
            "New this week",
            _CLUSTERS + "SELECT first_seen, title, status, runs, last_seen, newest_run, signature,"
            " project\n"
            "FROM failure_clusters\n"
            f"WHERE {_NEW} AND {_STATUS}\n"
            f"ORDER BY first_seen DESC, signature, project\n{shown}",
            f"Signatures first seen in the time range's last {NEW_DAYS} days (over a range "
            f"shorter than {NEW_DAYS} days, every one: pick a longer range to see what is "
            "new).",
            _cluster_columns(
                "first_seen", "title", "status", "last_seen", "newest_run", "signature"
            ),
        ),
        12,
        9,
    )
    grid.add(
        table(
            "Failure clusters",
            _CLUSTERS + "SELECT signature, title, status, runs, first_seen, last_seen,\n"
            "    arrayStringConcat(workflows, ', ') AS workflows,\n"
            "    arrayStringConcat(agents, ', ') AS agents,\n"
            "    newest_run, fixed_by, guard_eval, guard_outcome, guard_run, runs_since_guard,\n"
            "    project\n"
            "FROM failure_clusters\n"
            f"WHERE {_STATUS}\n"
            f"ORDER BY rank, last_seen DESC, signature, project\n{shown}",
            "Every failure signature of the production runs in the time range, in the order of "
            "GET /api/v1/failures (recurring, open, then guarded and fixed; newest first): its "
            "runs, first and last seen, the workflows and agents of its runs, the newest run, "
            "the replay that fixed it and the eval that guards it with its newest outcome. A "
            "signature shows only that cluster here.",
            _cluster_columns(
                "signature",
                "title",
                "status",
                "first_seen",
                "last_seen",
                "newest_run",
                "fixed_by",
                "guard_eval",
                "guard_outcome",
                "guard_run",
                "runs_since_guard",
            ),
        ),
        24,
        12,
    )
    return dashboard(
        FAILURES_UID,
        "afr · Failures",
        "The same failure recognised across runs: which are new, which keep coming back, "
        "which were fixed and whether the fix is guarded.",
        variables,
        grid,
        time_from="now-30d",
    )
