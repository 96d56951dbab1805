"""afr's dashboards as Grafana will load them: the checked-in JSON is the generated JSON,
panels fit the grid, everything queries through the datasource variable, every link lands
on a dashboard and variables that exist, every query is bounded by the time range and
counts spans once; the expander reproduces the plugin's macros and Grafana's variables; the
provisioning files provision what the dashboards expect."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import yaml

from afr.grafana.dashboards import FAILURES_UID, FILE_NAMES, RUN_UID, build_all, render
from afr.grafana.dashboards.common import FAILURE_STATUS_COLOURS
from afr.grafana.interpolate import (
    ALL,
    MacroError,
    TimeRange,
    Variable,
    _macro_args,
    conditional_all,
    expand_macros,
    interpolate,
    replace_variables,
)
from afr.grafana.panels import DATASOURCE_UID, PLUGIN_ID
from afr.grafana.push import ClickHouseTarget, datasource_model
from collector.store.failures import FAILURE_STATUSES

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = build_all()
GLOBALS = {"__value", "__data", "__url_time_range", "__field", "__all_variables"}


def _panels() -> list[tuple[str, dict[str, Any]]]:
    return [(uid, p) for uid, d in DASHBOARDS.items() for p in d["panels"]]


def _queries() -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title or variable name, SQL) of every query."""
    found = [(uid, p["title"], t["rawSql"]) for uid, p in _panels() for t in p["targets"]]
    for uid, d in DASHBOARDS.items():
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                found.append((uid, f"${v['name']}", v["query"]["rawSql"]))
    return found


# -- the files -------------------------------------------------------------------------------


def test_the_checked_in_dashboards_are_the_generated_ones() -> None:
    """Edit afr/grafana/dashboards/, then: python -m afr.grafana.dashboards"""
    files = sorted((ROOT / "dashboards").glob("*.json"))
    assert [f.name for f in files] == sorted(FILE_NAMES.values())
    for uid, name in FILE_NAMES.items():
        text = (ROOT / "dashboards" / name).read_text()
        assert text == render(DASHBOARDS[uid]), f"dashboards/{name} is stale"
        assert json.loads(text)["uid"] == uid


def test_five_dashboards_with_their_uids() -> None:
    assert set(DASHBOARDS) == {"afr-runs", "afr-run", "afr-tools", "afr-evals", "afr-failures"}
    for d in DASHBOARDS.values():
        assert d["schemaVersion"] == 39 and "afr" in d["tags"]


# -- the model -------------------------------------------------------------------------------


@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_panels_have_unique_ids_and_fit_the_grid_without_overlapping(uid: str) -> None:
    panels = DASHBOARDS[uid]["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["y"] >= 0 and g["w"] > 0 and g["h"] > 0
        assert g["x"] + g["w"] <= 24, p["title"]
        covered = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & covered, f"{p['title']} overlaps another panel"
        cells |= covered


@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_every_panel_and_variable_queries_through_the_datasource_variable(uid: str) -> None:
    variables = {v["name"]: v for v in DASHBOARDS[uid]["templating"]["list"]}
    source = variables["datasource"]
    assert (source["type"], source["query"]) == ("datasource", PLUGIN_ID)
    assert source["current"]["value"] == DATASOURCE_UID
    assert variables["database"]["type"] == "constant" and variables["database"]["query"] == "afr"
    ds = {"type": PLUGIN_ID, "uid": "${datasource}"}
    for p in DASHBOARDS[uid]["panels"]:
        assert p["datasource"] == ds, p["title"]
        assert p["targets"] and all(t["datasource"] == ds for t in p["targets"]), p["title"]
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"] == ds, v["name"]


def _link_urls() -> list[tuple[str, str, str]]:
    found = []
    for uid, p in _panels():
        text = json.dumps(p["fieldConfig"])
        for url in re.findall(r'"url": "([^"]*)"', text):
            found.append((uid, p["title"], url))
    return found


def test_every_data_link_opens_a_dashboard_with_variables_it_has() -> None:
    links = _link_urls()
    assert len(links) >= 15
    for uid, title, url in links:
        parts = urlsplit(url)
        match = re.fullmatch(r"/d/([\w-]+)/[\w-]+", parts.path)
        assert match, url
        target = match.group(1)
        assert target in DASHBOARDS, f"{uid} / {title}: no dashboard {target}"
        names = {v["name"] for v in DASHBOARDS[target]["templating"]["list"]}
        for key, _ in parse_qsl(
            parts.query.replace("${", "").replace("}", ""), keep_blank_values=True
        ):
            if key.startswith("var-"):
                assert key[4:] in names, f"{uid} / {title}: {target} has no variable {key[4:]}"
        for name, fmt in re.findall(r"\$\{(\w+)(?::(\w+))?\}", parts.query):
            if name in GLOBALS:
                continue
            assert fmt == "queryparam", url
            assert name in names, f"{uid} / {title}: {target} has no variable {name}"
            own = {v["name"] for v in DASHBOARDS[uid]["templating"]["list"]}
            assert name in own, f"{uid} / {title}: this dashboard has no variable {name}"
        assert "${__url_time_range}" in url, "links keep the time range"


def test_dashboard_links_point_at_afrs_dashboards() -> None:
    for d in DASHBOARDS.values():
        for link in d["links"]:
            assert link["type"] == "dashboards" and link["tags"] == ["afr"]
            assert all("afr" in other["tags"] for other in DASHBOARDS.values())


@pytest.mark.parametrize(("uid", "name", "sql"), _queries(), ids=lambda v: str(v)[:40])
def test_every_query_is_bounded_in_time_and_uses_known_variables(
    uid: str, name: str, sql: str
) -> None:
    assert re.search(r"\$__(timeFilter|fromTime|toTime)\b", sql), f"{uid} / {name}: unbounded"
    assert "${database}." in sql and "afr." not in sql.replace("afr.guardrail", "").replace(
        "afr.handoff", ""
    ), f"{uid} / {name}: tables come from ${{database}}"
    names = {v["name"] for v in DASHBOARDS[uid]["templating"]["list"]}
    for ref in re.findall(r"\$\{(\w+)(?::\w+)?\}|\$(?!__)(\w+)", sql):
        assert (ref[0] or ref[1]) in names, f"{uid} / {name}: no variable {ref}"
    for call in re.finditer(r"\$__conditionalAll\(", sql):
        args = _macro_args(sql, call.end() - 1)
        assert len(args) == 2, f"{uid} / {name}: the plugin would split {args}"


@pytest.mark.parametrize(("uid", "name", "sql"), _queries(), ids=lambda v: str(v)[:40])
def test_every_read_of_the_spans_table_counts_each_span_once(uid: str, name: str, sql: str) -> None:
    for read in re.finditer(r"\$\{database\}\.otel_traces\b(?!_)(.{0,80})", sql, re.S):
        after = read.group(1)
        deduped = after.startswith(" FINAL") or "LIMIT 1 BY ProjectId, TraceId, SpanId" in sql
        assert deduped or name.startswith("$"), f"{uid} / {name}: spans counted twice"
    for read in re.finditer(r"\$\{database\}\.runs\b", sql):
        select = sql[: read.start()].rsplit("SELECT", 1)[1].lstrip()
        merged = select.startswith(("DISTINCT", "min(", "max(")) or "GROUP BY" in sql[read.end() :]
        assert merged, f"{uid} / {name}: rows of the runs table read unmerged"


def test_the_trace_panel_uses_the_plugins_trace_mode() -> None:
    (trace,) = [p for p in DASHBOARDS["afr-run"]["panels"] if p["type"] == "traces"]
    (target,) = trace["targets"]
    assert (target["format"], target["queryType"], target["editorType"]) == (3, "traces", "sql")
    meta = target["meta"]["builderOptions"]["meta"]
    assert meta["isTraceIdMode"] and meta["otelEnabled"] and meta["traceId"] == "${run_id}"


# -- the Failures dashboard and a run's failure -----------------------------------------------


def _panel(uid: str, title: str) -> dict[str, Any]:
    (found,) = [p for p in DASHBOARDS[uid]["panels"] if p["title"] == title]
    panel: dict[str, Any] = found
    return panel


def _links(panel: dict[str, Any], column: str) -> list[str]:
    return [
        link["url"]
        for o in panel["fieldConfig"]["overrides"]
        if o["matcher"]["options"] == column
        for prop in o["properties"]
        if prop["id"] == "links"
        for link in prop["value"]
    ]


def test_the_failures_dashboard_filters_by_project_workflow_agent_status_and_signature() -> None:
    variables = {v["name"]: v for v in DASHBOARDS[FAILURES_UID]["templating"]["list"]}
    assert list(variables) == [
        "datasource",
        "database",
        "project",
        "workflow",
        "agent",
        "status",
        "signature",
    ]
    status = variables["status"]
    assert status["type"] == "custom" and status["includeAll"] and status["multi"]
    assert [o["value"] for o in status["options"][1:]] == list(FAILURE_STATUSES)
    assert variables["signature"]["type"] == "textbox"
    assert set(FAILURE_STATUS_COLOURS["options"]) == set(FAILURE_STATUSES)
    for panel in DASHBOARDS[FAILURES_UID]["panels"]:
        sql = panel["targets"][0]["rawSql"]
        for name in ("workflow", "agent", "status", "signature"):
            assert f"${name})" in sql, f"{panel['title']}: not filtered by {name}"
    assert DASHBOARDS[FAILURES_UID]["time"]["from"] == "now-30d", "a week has a month before it"


def test_recurring_failures_come_first_and_in_red() -> None:
    panels = DASHBOARDS[FAILURES_UID]["panels"]
    first = min(panels, key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    assert first["title"] == "Recurring failures" and first["gridPos"]["w"] == 24
    assert first["fieldConfig"]["defaults"]["color"] == {"mode": "fixed", "fixedColor": "red"}
    assert "status = 'recurring'" in first["targets"][0]["rawSql"]
    assert [p["type"] for p in panels] == ["table", "stat", "timeseries", "table", "table"]


@pytest.mark.parametrize(
    ("uid", "title"),
    [
        (FAILURES_UID, "Recurring failures"),
        (FAILURES_UID, "New this week"),
        (FAILURES_UID, "Failure clusters"),
        (RUN_UID, "This failure"),
    ],
)
def test_a_cluster_links_to_its_runs_and_a_signature_to_its_cluster(uid: str, title: str) -> None:
    panel = _panel(uid, title)
    selected = panel["targets"][0]["rawSql"].rsplit("\nSELECT ", 1)[1].split("\nFROM ")[0]
    (signature,) = _links(panel, "signature")
    assert (
        signature.startswith(f"/d/{FAILURES_UID}/") and "var-signature=${__value.raw}" in signature
    )
    assert "var-project=${__data.fields.project}" in signature, "in the row's project"
    for column in ("newest_run", "fixed_by", "guard_run"):
        if re.search(rf"\b{column}\b", selected):
            (url,) = _links(panel, column)
            assert url.startswith(f"/d/{RUN_UID}/") and "var-run_id=${__value.raw}" in url


def test_the_tool_calls_panel_says_what_it_compares() -> None:
    panel = _panel(RUN_UID, "Tool calls against the source run")
    description = panel["description"]
    for said in ("by position", "top-level JSON field", "afr runs diff", "first divergence"):
        assert said in description
    sql = panel["targets"][0]["rawSql"]
    assert "FULL OUTER JOIN" in sql and "SpanType = 'tool'" in sql
    (source,) = _links(panel, "source_span_id")
    assert "var-run_id=${__data.fields.source_run_id}" in source


# -- the plugin's macros (test vectors of pkg/macros/macros_test.go) -------------------------

FROM = datetime(2014, 11, 12, 11, 45, 26, 123000, tzinfo=UTC)
TO = datetime(2015, 11, 12, 11, 45, 26, 456000, tzinfo=UTC)
RANGE = TimeRange(FROM, TO, timedelta(minutes=1))


@pytest.mark.parametrize(
    ("sql", "expanded"),
    [
        (
            "select * from foo where $__timeFilter(cast(sth as timestamp))",
            "select * from foo where cast(sth as timestamp) >= toDateTime(1415792726) AND "
            "cast(sth as timestamp) <= toDateTime(1447328726)",
        ),
        (
            "select * from foo where $__timeFilter(cast(sth as timestamp) )",
            "select * from foo where cast(sth as timestamp) >= toDateTime(1415792726) AND "
            "cast(sth as timestamp) <= toDateTime(1447328726)",
        ),
        (
            "select * from foo where $__timeFilter_ms(cast(sth as timestamp))",
            "select * from foo where cast(sth as timestamp) >= "
            "fromUnixTimestamp64Milli(1415792726123) AND cast(sth as timestamp) <= "
            "fromUnixTimestamp64Milli(1447328726456)",
        ),
        (
            "select * from foo where ( date >= $__fromTime and date <= $__toTime ) limit 100",
            "select * from foo where ( date >= toDateTime(1415792726) and date <= "
            "toDateTime(1447328726) ) limit 100",
        ),
        (
            "select * from foo where ( date >= $__fromTime_ms ) and ( date <= $__toTime_ms )",
            "select * from foo where ( date >= fromUnixTimestamp64Milli(1415792726123) ) and "
            "( date <= fromUnixTimestamp64Milli(1447328726456) )",
        ),
        (
            "SELECT $__timeInterval($__fromTime) AS from_time",
            "SELECT toStartOfInterval(toDateTime(toDateTime(1415792726)), INTERVAL 60 second) "
            "AS from_time",
        ),
        (
            "SELECT $__timeInterval_ms($__fromTime_ms)",
            "SELECT toStartOfInterval(toDateTime64(fromUnixTimestamp64Milli(1415792726123), 3), "
            "INTERVAL 60000 millisecond)",
        ),
        (
            "select * from foo where $__timeFilter(coalesce(closed_at, $__toTime))",
            "select * from foo where coalesce(closed_at, toDateTime(1447328726)) >= "
            "toDateTime(1415792726) AND coalesce(closed_at, toDateTime(1447328726)) <= "
            "toDateTime(1447328726)",
        ),
        (
            "select * from foo where msg = 'it\\'s -- fine' and $__fromTime",
            "select * from foo where msg = 'it\\'s -- fine' and toDateTime(1415792726)",
        ),
        (
            "select * from foo where msg = 'it''s' and $__fromTime",
            "select * from foo where msg = 'it''s' and toDateTime(1415792726)",
        ),
        (
            "SELECT `a--b`, `c/*d` FROM t WHERE $__fromTime",
            "SELECT `a--b`, `c/*d` FROM t WHERE toDateTime(1415792726)",
        ),
        (
            "SELECT $doc$a--b$doc$ AS x FROM t WHERE $__toTime",
            "SELECT $doc$a--b$doc$ AS x FROM t WHERE toDateTime(1447328726)",
        ),
        (
            "SELECT 1 -- $__fromTime\nWHERE $__dateFilter(d)",
            "SELECT 1               \nWHERE d >= toDate('2014-11-12') AND d <= toDate('2015-11-12')",
        ),
        (
            "$__dateTimeFilter(d, t)",
            "(d >= toDate('2014-11-12') AND d <= toDate('2015-11-12')) AND "
            "(t >= toDateTime(1415792726) AND t <= toDateTime(1447328726))",
        ),
        (
            "$__timeFrom(ts) $__timeTo(ts)",
            "ts >= toDateTime(1415792726) ts <= toDateTime(1447328726)",
        ),
        ("$__timeGroup(ts, 5m)", "toStartOfInterval(toDateTime(ts), INTERVAL 300 second)"),
        ("$__interval_s $__interval_ms $__interval", "60 60000 1m"),
        ("$__unknown(x) stays", "$__unknown(x) stays"),
    ],
)
def test_macros_expand_as_the_plugin_expands_them(sql: str, expanded: str) -> None:
    assert expand_macros(sql, RANGE) == expanded


def test_the_interval_is_at_least_a_second_and_bad_macros_are_refused() -> None:
    short = TimeRange(FROM, TO, timedelta(milliseconds=200))
    assert expand_macros("$__timeInterval(t) $__interval_s", short) == (
        "toStartOfInterval(toDateTime(t), INTERVAL 1 second) 1"
    )
    for bad in (
        "$__timeFilter()",
        "$__timeFilter(a, b)",
        "$__timeFrom()",
        "$__timeGroup(ts, soon)",
    ):
        with pytest.raises(MacroError):
            expand_macros(bad, RANGE)


# -- Grafana's template variables and the plugin's $__conditionalAll -------------------------

VARIABLES = {
    "project": Variable("project", (ALL,), ("shop", "o'hara")),
    "tool": Variable("tool", ("refund_order",), ("refund_order", "lookup")),
    "empty": Variable("empty", ()),
    "run_id": Variable("run_id", "abc"),
    "custom": Variable("custom", (ALL,), ("a",), all_value=".*"),
}


@pytest.mark.parametrize(
    ("sql", "replaced"),
    [
        ("IN (${project:singlequote})", "IN ('shop','o\\'hara')"),
        ("IN ($project)", "IN ('shop','o'hara')"),
        (
            "IN (${tool:singlequote}) $tool [[tool]]",
            "IN ('refund_order') 'refund_order' 'refund_order'",
        ),
        ("= '${run_id}' = ${run_id:singlequote} = $run_id", "= 'abc' = 'abc' = abc"),
        (
            "${project:csv} ${project:pipe} ${project:doublequote}",
            'shop,o\'hara shop|o\'hara "shop","o\'hara"',
        ),
        ("${project:queryparam}", "var-project=shop&var-project=o%27hara"),
        ("${custom:singlequote}", ".*"),
        (
            "$nope ${nope:singlequote} $__timeFilter(x)",
            "$nope ${nope:singlequote} $__timeFilter(x)",
        ),
    ],
)
def test_variables_are_replaced_as_grafana_replaces_them(sql: str, replaced: str) -> None:
    assert replace_variables(sql, VARIABLES) == replaced


@pytest.mark.parametrize(
    ("sql", "replaced"),
    [
        ("WHERE $__conditionalAll(p IN ($project), $project)", "WHERE 1=1"),
        (
            "WHERE $__conditionalAll(t IN (${tool:singlequote}), ${tool})",
            "WHERE t IN (${tool:singlequote})",
        ),
        ("WHERE $__conditionalAll(e IN ($empty), $empty)", "WHERE 1=1"),
        (
            "$__conditionalAll(hasAny(a, [$tool]), $tool) AND $__conditionalAll(x, $project)",
            "hasAny(a, [$tool]) AND 1=1",
        ),
        ("$__conditionalAll(x IN ['a', 'b'], $tool)", "$__conditionalAll(x IN ['a', 'b'], $tool)"),
        ("$__conditionalAll(x = '$$', $tool)", "x = '$'"),
    ],
)
def test_conditional_all_is_applied_as_the_plugin_applies_it(sql: str, replaced: str) -> None:
    assert conditional_all(sql, VARIABLES) == replaced


def test_a_whole_query_is_expanded_in_the_plugins_order() -> None:
    sql = (
        "SELECT * FROM t WHERE $__timeFilter(ts) AND p IN (${project:singlequote}) "
        "AND $__conditionalAll(tool IN (${tool:singlequote}), $tool)"
    )
    assert interpolate(sql, VARIABLES, RANGE) == (
        "SELECT * FROM t WHERE ts >= toDateTime(1415792726) AND ts <= toDateTime(1447328726) "
        "AND p IN ('shop','o\\'hara') AND tool IN ('refund_order')"
    )


# -- provisioning ----------------------------------------------------------------------------


def test_the_provisioned_datasource_is_the_one_the_dashboards_and_push_expect() -> None:
    document = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/datasources/afr.yaml").read_text()
    )
    assert document["apiVersion"] == 1
    (source,) = document["datasources"]
    pushed = datasource_model(ClickHouseTarget())
    assert (source["uid"], source["type"], source["name"]) == (
        pushed["uid"],
        pushed["type"],
        pushed["name"],
    )
    data = source["jsonData"]
    assert data["traces"] == pushed["jsonData"]["traces"]
    assert (data["protocol"], data["defaultDatabase"]) == ("http", "afr")
    assert data["host"] == "${AFR_CLICKHOUSE_HOST}" and data["port"] == "${AFR_CLICKHOUSE_PORT}"
    assert source["secureJsonData"]["password"] == "${AFR_CLICKHOUSE_PASSWORD}"


def test_the_dashboard_provider_reads_the_mounted_dashboards_into_the_afr_folder() -> None:
    document = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/dashboards/afr.yaml").read_text()
    )
    (provider,) = document["providers"]
    assert provider["type"] == "file" and provider["folder"] == "afr"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards/afr"
