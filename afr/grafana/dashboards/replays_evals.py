"""``afr-evals``, Replays and evals: verdicts over time, sweeps' pass rates, failing evals."""

from __future__ import annotations

from typing import Any

from afr.grafana.dashboards.common import (
    EVALS_UID,
    RECENT_RUNS,
    STATUS_COLOURS,
    VERDICT_COLOURS,
    coloured,
    common_variables,
    named,
    run_link,
    stat,
    table,
    timeseries,
    workflow_variable,
)
from afr.grafana.panels import Grid, dashboard, override
from afr.grafana.queries import (
    ERRORS,
    EVAL_STATUSES,
    KIND,
    SUMMARY,
    VERDICT,
    VERDICTS,
    eval_outcome,
    picked_runs,
    window_runs,
)
from afr_exporter import semconv as sc

__all__ = ["replays_and_evals"]


def _kind_is(kind: str) -> str:
    if kind not in sc.RUN_KINDS:
        raise ValueError(f"no run kind {kind!r}")
    return f"{KIND} = '{kind}'"


def replays_and_evals() -> dict[str, Any]:
    variables = [
        *common_variables(),
        workflow_variable(),
    ]
    only_workflow = ("workflow",)
    outcome = eval_outcome("verdict", "errors")
    judged = window_runs(
        [f"{KIND} AS kind", f"{VERDICT} AS verdict", f"{ERRORS} AS errors"],
        filters=only_workflow,
    )
    grid = Grid()
    grid.add(
        stat(
            "Replays and evals in the window",
            "SELECT countIf(kind = 'replay') AS replays,\n"
            "    countIf(kind = 'replay' AND verdict = 'FAILURE_FIXED') AS fixed,\n"
            "    countIf(kind = 'eval') AS eval_runs,\n"
            f"    countIf(kind = 'eval' AND {outcome} = 'passed') AS evals_passed,\n"
            f"    countIf(kind = 'eval' AND {outcome} != 'passed') AS evals_not_passed,\n"
            "    countIf(kind = 'sweep') AS sweeps\n"
            f"FROM (\n{judged}\n)",
            "Replays, eval runs and sweeps started in the time range.",
            [
                named("replays", "Replays"),
                named("fixed", "FAILURE_FIXED", color={"mode": "fixed", "fixedColor": "green"}),
                named("eval_runs", "Eval runs"),
                named(
                    "evals_passed", "Evals passed", color={"mode": "fixed", "fixedColor": "green"}
                ),
                named(
                    "evals_not_passed",
                    "Evals not passed",
                    color={"mode": "fixed", "fixedColor": "red"},
                ),
                named("sweeps", "Sweeps"),
            ],
        ),
        24,
        4,
    )
    verdicts = timeseries(
        "Replay verdicts",
        "SELECT $__timeInterval(start) AS time,\n"
        + _count_each("verdict", VERDICTS)
        + f"FROM (\n{judged}\n)\nWHERE kind = 'replay'\nGROUP BY time\nORDER BY time",
        "short",
        "Replays by the time they ran, by verdict.",
        drawStyle="bars",
        fillOpacity=70,
        stacking={"mode": "normal", "group": "A"},
    )
    verdicts["fieldConfig"]["overrides"] = _series_colours(VERDICT_COLOURS, VERDICTS)
    grid.add(verdicts, 12, 8)
    outcomes = timeseries(
        "Eval outcomes",
        "SELECT $__timeInterval(start) AS time,\n"
        + _count_each(outcome, EVAL_STATUSES)
        + f"FROM (\n{judged}\n)\nWHERE kind = 'eval'\nGROUP BY time\nORDER BY time",
        "short",
        "Eval runs (afr eval run, sweeps) by the time they ran, by outcome.",
        drawStyle="bars",
        fillOpacity=70,
        stacking={"mode": "normal", "group": "A"},
    )
    outcomes["fieldConfig"]["overrides"] = _series_colours(VERDICT_COLOURS, EVAL_STATUSES)
    grid.add(outcomes, 12, 8)
    sweeps = window_runs(
        [
            f"{KIND} AS kind",
            f"{VERDICT} AS verdict",
            f"{ERRORS} AS errors",
            "max(SweepId) AS sweep_id",
        ],
        filters=only_workflow,
        having=("sweep_id != ''",),
    )
    per_sweep = (
        "SELECT sweep_id, min(start) AS started,\n"
        "    countIf(kind = 'eval') AS evals,\n"
        + "".join(
            f"    countIf(kind = 'eval' AND {outcome} = '{status}') AS {status},\n"
            for status in EVAL_STATUSES
        )
        + "    if(evals > 0, passed / evals, 0) AS pass_rate,\n"
        "    anyIf(TraceId, kind = 'sweep') AS sweep_run_id\n"
        f"FROM (\n{sweeps}\n)\nGROUP BY sweep_id"
    )
    grid.add(
        timeseries(
            "Sweep pass rate",
            f"SELECT started AS time, pass_rate\nFROM (\n{per_sweep}\n)\nORDER BY time, sweep_id",
            "percentunit",
            "Each sweep's share of passed evals, at the time it started.",
            drawStyle="line",
            showPoints="always",
            pointSize=8,
        ),
        8,
        8,
    )
    grid.add(
        table(
            "Sweeps",
            f"SELECT * FROM (\n{per_sweep}\n)\nORDER BY started DESC, sweep_id\nLIMIT 100",
            "Each sweep's evals by outcome; its summary run opens its timeline.",
            [
                override("sweep_id", custom_width=200),
                override("started", custom_width=180),
                override(
                    "pass_rate",
                    unit="percentunit",
                    min=0,
                    max=1,
                    decimals=0,
                    custom_cellOptions={"type": "gauge", "mode": "basic"},
                    thresholds={
                        "mode": "absolute",
                        "steps": [
                            {"color": "red", "value": None},
                            {"color": "orange", "value": 0.5},
                            {"color": "green", "value": 1},
                        ],
                    },
                ),
                named("sweep_run_id", "summary run", links=[run_link(row_project=False)]),
            ],
        ),
        16,
        8,
    )
    failing = window_runs(
        [],
        filters=only_workflow,
        having=(
            _kind_is(sc.RUN_KIND_EVAL),
            f"{eval_outcome(VERDICT, ERRORS)} != 'passed'",
        ),
    )
    grid.add(
        table(
            "Failing evals",
            f"SELECT start, eval_name, {eval_outcome('verdict', 'error_count')} AS outcome,\n"
            "    failing_span_name, failing_error_type, sweep_id, run_id, source_run_id,\n"
            "    project\n"
            f"FROM {SUMMARY}\n"
            f"WHERE {picked_runs(failing, RECENT_RUNS)}\n"
            "ORDER BY start DESC, run_id, project",
            "Eval runs that did not pass, newest first, with the span that failed; the eval "
            "run and the run it was made from open their timelines.",
            [
                override("start", custom_width=180),
                named("eval_name", "eval"),
                coloured("outcome", VERDICT_COLOURS, 110),
                named("failing_span_name", "failing span"),
                named("failing_error_type", "error"),
                named("sweep_id", "sweep"),
                named("run_id", "eval run", links=[run_link()]),
                named("source_run_id", "source run", links=[run_link("Open the source run")]),
            ],
        ),
        24,
        9,
    )
    replays = window_runs([], filters=only_workflow, having=(_kind_is(sc.RUN_KIND_REPLAY),))
    grid.add(
        table(
            "Replays",
            "SELECT start, verdict, status, workflow, duration_ms, run_id, source_run_id,\n"
            "    project\n"
            f"FROM {SUMMARY}\n"
            f"WHERE {picked_runs(replays, RECENT_RUNS)}\n"
            "ORDER BY start DESC, run_id, project",
            "Replays, newest first, with their verdicts; the replay and its source open "
            "their timelines.",
            [
                override("start", custom_width=180),
                coloured("verdict", VERDICT_COLOURS, 140),
                coloured("status", STATUS_COLOURS, 80),
                named("duration_ms", "duration", unit="ms", decimals=0),
                named("run_id", "replay run", links=[run_link()]),
                named("source_run_id", "source run", links=[run_link("Open the source run")]),
            ],
        ),
        24,
        9,
    )
    return dashboard(
        EVALS_UID,
        "afr · Replays and evals",
        "What replays found and whether the evals made from them still pass.",
        variables,
        grid,
        time_from="now-7d",
    )


def _count_each(expression: str, values: tuple[str, ...]) -> str:
    """One column per value (a wide frame: a series each, coloured by name)."""
    return ",\n".join(f"    countIf({expression} = '{v}') AS {v}" for v in values) + "\n"


def _series_colours(mapping: dict[str, Any], names: tuple[str, ...]) -> list[dict[str, Any]]:
    """A fixed colour for each series named after a mapped value (a verdict, an outcome)."""
    return [
        {
            "matcher": {"id": "byName", "options": name},
            "properties": [
                {
                    "id": "color",
                    "value": {"mode": "fixed", "fixedColor": mapping["options"][name]["color"]},
                }
            ],
        }
        for name in names
    ]
