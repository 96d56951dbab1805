"""``afr-runs``, Agent runs: runs, failures, error rate, tokens and cost over time; recent runs."""

from __future__ import annotations

from typing import Any

from afr.grafana.dashboards.common import (
    RECENT_RUNS,
    ROW_PROJECT,
    RUNS_UID,
    STATUS_COLOURS,
    VERDICT_COLOURS,
    agent_variable,
    coloured,
    common_variables,
    named,
    run_link,
    stat,
    table,
    timeseries,
    workflow_variable,
)
from afr.grafana.panels import Grid, custom_variable, dashboard, link, override, textbox
from afr.grafana.queries import (
    CONVERSATION_ID,
    COST,
    DETAILS,
    ERRORS,
    PRICES,
    SUMMARY,
    UNPRICED,
    UNPRICED_TEXT,
    USAGE,
    conversation_runs,
    eval_outcome,
    picked_runs,
    window_runs,
)
from afr_exporter import semconv as sc

__all__ = ["CONVERSATION_FIELDS", "CONVERSATION_RUNS", "agent_runs"]

_FILTERS = ("workflow", "agent", "status", "kind", "conversation")
CONVERSATION_RUNS = 200
"""Runs a conversation panel lists."""
CONVERSATION_FIELDS = [
    override("start", custom_width=180),
    coloured("status", STATUS_COLOURS, 80),
    coloured("verdict", VERDICT_COLOURS),
    named("duration_ms", "duration", unit="ms", decimals=0, custom_width=90),
    named("run_id", "run", links=[run_link()]),
]
"""The columns of a conversation's runs (the Run timeline shows them too)."""

_KNOWN_COST = f"if(sum({COST}) = 0 AND {{unpriced}} > 0, NULL, sum({COST}))"
"""The priced calls' cost of a set of runs; NULL (shown as unpriced, or a gap) when it has
nothing but calls no price knows: their cost is unknown, not $0."""


def agent_runs() -> dict[str, Any]:
    variables = [
        *common_variables(),
        workflow_variable(),
        agent_variable(),
        custom_variable("status", "Status", ("ok", "error")),
        custom_variable("kind", "Kind", sc.RUN_KINDS),
        textbox(
            "conversation",
            "Conversation",
            "A conversation id (gen_ai.conversation.id, the Agents SDK's group_id): only "
            "its runs count, and its runs are listed in order; empty: every run.",
        ),
    ]
    per_run = window_runs(
        [f"{ERRORS} AS errors", f"{USAGE} AS usage", f"{DETAILS} AS details"], filters=_FILTERS
    )
    grid = Grid()
    grid.add(
        stat(
            "Runs in the window",
            f"WITH {PRICES}\n"
            "SELECT count() AS runs,\n"
            "    countIf(errors > 0) AS failed_runs,\n"
            "    if(runs > 0, failed_runs / runs, 0) AS error_rate,\n"
            "    sum(arraySum(usage.2)) AS input_tokens,\n"
            "    sum(arraySum(usage.3)) AS output_tokens,\n"
            "    sum(arraySum(details.2)) AS cache_read_tokens,\n"
            "    sum(arraySum(details.4)) AS reasoning_tokens,\n"
            f"    countIf(notEmpty({UNPRICED})) AS unpriced_runs,\n"
            f"    {_KNOWN_COST.format(unpriced='unpriced_runs')} AS cost_usd\n"
            f"FROM (\n{per_run}\n)",
            "Runs that started in the time range and pass the filters. A failed run has at "
            "least one errored span. Cost prices each kind of a model call's tokens (cached "
            "input, cache writes, reasoning output) at its model's rate in the store's "
            "model_prices (AFR_MODEL_PRICES, else the genai-prices database). A model neither "
            "knows is unpriced: its calls are not in the cost, Unpriced runs counts the runs "
            f"that have one, and a cost of nothing but such calls shows as {UNPRICED_TEXT}.",
            [
                named("runs", "Runs"),
                named("failed_runs", "Failed runs", color={"mode": "fixed", "fixedColor": "red"}),
                named("error_rate", "Error rate", unit="percentunit", decimals=1),
                named("input_tokens", "Input tokens", unit="short"),
                named("output_tokens", "Output tokens", unit="short"),
                named("cache_read_tokens", "Cached input tokens", unit="short"),
                named("reasoning_tokens", "Reasoning tokens", unit="short"),
                named(
                    "unpriced_runs",
                    "Unpriced runs",
                    color={"mode": "fixed", "fixedColor": "orange"},
                ),
                named("cost_usd", "Cost", unit="currencyUSD", decimals=4, noValue=UNPRICED_TEXT),
            ],
        ),
        24,
        4,
    )
    series = f"FROM (\n{per_run}\n)\nGROUP BY time\nORDER BY time"
    grid.add(
        timeseries(
            "Runs and failed runs",
            "SELECT $__timeInterval(start) AS time,\n"
            "    count() AS runs,\n    countIf(errors > 0) AS failed\n" + series,
            "short",
            "Runs by the time they started.",
            drawStyle="bars",
            fillOpacity=60,
        ),
        12,
        8,
    )
    grid.add(
        timeseries(
            "Error rate",
            "SELECT $__timeInterval(start) AS time,\n"
            "    countIf(errors > 0) / count() AS error_rate\n" + series,
            "percentunit",
            "Share of the runs started in each interval that have an errored span.",
        ),
        12,
        8,
    )
    grid.add(
        timeseries(
            "Tokens",
            "SELECT $__timeInterval(start) AS time,\n"
            "    sum(arraySum(usage.2)) AS input_tokens,\n"
            "    sum(arraySum(usage.3)) AS output_tokens,\n"
            "    sum(arraySum(details.2)) AS cached_input_tokens,\n"
            "    sum(arraySum(details.4)) AS reasoning_tokens\n" + series,
            "short",
            "Model tokens of the runs started in each interval (each model call counted once); "
            "cached input tokens are part of the input ones, reasoning tokens of the output.",
        ),
        12,
        8,
    )
    grid.add(
        timeseries(
            "Cost",
            f"WITH {PRICES}\n"
            "SELECT $__timeInterval(start) AS time,\n"
            f"    {_KNOWN_COST.format(unpriced=f'countIf(notEmpty({UNPRICED}))')} AS cost_usd\n"
            + series,
            "currencyUSD",
            "USD, each kind of a model call's tokens at its model's rate in the store's "
            "model_prices. Calls of a model no price knows are not in it; an interval of "
            "nothing but such calls has no value (a gap, not $0).",
            drawStyle="bars",
            fillOpacity=60,
        ),
        12,
        8,
    )
    candidates = window_runs([], filters=_FILTERS)
    grid.add(
        table(
            "Recent runs",
            "SELECT start, status, workflow, root_agent, duration_ms, span_count, error_count,\n"
            "    input_tokens, output_tokens, cost_usd, kind,\n"
            "    failing_span_name, failing_error_type,\n"
            f"    if(kind = 'eval', {eval_outcome('verdict', 'error_count')}, verdict) AS verdict,\n"
            "    run_id, source_run_id, conversation_id, project\n"
            f"FROM {SUMMARY}\n"
            f"WHERE {picked_runs(candidates, RECENT_RUNS)}\n"
            "ORDER BY start DESC, run_id, project",
            f"The newest {RECENT_RUNS} runs of the time range that pass the filters. A run id "
            "opens its timeline; a replay's or eval's source run opens the run it came from.",
            [
                override("start", custom_width=180),
                coloured("status", STATUS_COLOURS, 80),
                named("root_agent", "root agent"),
                named("duration_ms", "duration", unit="ms", decimals=0, custom_width=90),
                named("span_count", "spans", custom_width=70),
                named("error_count", "errors", custom_width=70),
                named("input_tokens", "tokens in", custom_width=90),
                named("output_tokens", "tokens out", custom_width=90),
                named(
                    "cost_usd",
                    "cost",
                    unit="currencyUSD",
                    decimals=4,
                    custom_width=90,
                    noValue=UNPRICED_TEXT,
                ),
                named("failing_span_name", "failing span"),
                named("failing_error_type", "error"),
                coloured("verdict", VERDICT_COLOURS),
                named("run_id", "run", links=[run_link()]),
                named("source_run_id", "source run", links=[run_link("Open the source run")]),
                named(
                    "conversation_id",
                    "conversation",
                    links=[
                        link(
                            "Show this conversation's runs",
                            RUNS_UID,
                            "var-conversation=${__data.fields.conversation_id}",
                            ROW_PROJECT,
                        )
                    ],
                ),
            ],
        ),
        24,
        12,
    )
    grid.add(
        table(
            "Conversation",
            conversation_runs(CONVERSATION_ID, CONVERSATION_RUNS),
            "The runs of the conversation chosen above, in the order they started (whatever "
            "the time range: the earlier runs are the later ones' context), each with its "
            "status, verdict and error. Empty when no conversation is chosen.",
            CONVERSATION_FIELDS,
        ),
        24,
        8,
    )
    return dashboard(
        RUNS_UID,
        "afr · Agent runs",
        "Every run afr recorded: captured, replayed, evaluated and swept.",
        variables,
        grid,
    )
