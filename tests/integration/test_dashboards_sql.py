"""Every query of afr's dashboards, expanded as Grafana and the ClickHouse plugin expand it,
run on a real collector's embedded store holding captured, replayed, evaluated and swept
runs, each delivered twice: the columns each panel needs, and the numbers a user reads —
the seeded run's failing span, its FAILURE_FIXED replay, each span and run counted once; the
failure clusters of the Failures dashboard and of a run's timeline are the read API's
(``GET /api/v1/failures``), on clusters in each status.
The same queries through the collector's SQL interface (clickhouse-connect over HTTP, as
Grafana's datasource would send them) give the same answers."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import SecretStr

from afr.grafana.dashboards import (
    EVALS_UID,
    FAILURES_UID,
    RUN_UID,
    RUNS_UID,
    TOOLS_UID,
    build_all,
)
from afr.grafana.interpolate import (
    ALL,
    TimeRange,
    Variable,
    expand_macros,
    interpolate,
    resolve_variables,
)
from afr.grafana.queries import AGENTS, ERRORS, KIND, WORKFLOW, failure_title, in_projects
from collector.store import failures as api_failures
from collector.store.client import ClickHouseStore
from tests.integration.conftest import Running, start_collector
from tests.integration.grafana_world import (
    OTHER_PROJECT,
    SWEEP_GREEN,
    SWEEP_MIXED,
    FailureWorld,
    Seeded,
    seed,
)

pytestmark = pytest.mark.slow

PROJECT = "shop"
SQL_PASSWORD = "dashboards-test-password"
DASHBOARDS = build_all()
TRACE_COLUMNS = {
    "traceID",
    "spanID",
    "parentSpanID",
    "serviceName",
    "operationName",
    "startTime",
    "duration",
    "tags",
    "serviceTags",
    "statusCode",
}


def _sql_interface_reason() -> str | None:
    try:
        import collector.sqlapi  # noqa: F401
        from collector.settings import CollectorSettings
    except ImportError as exc:
        return f"the collector's SQL interface (collector.sqlapi) is not importable yet: {exc}"
    if "sql_port" not in CollectorSettings.model_fields:
        return "the collector has no sql_port setting yet"
    return None


SQL_INTERFACE_MISSING = _sql_interface_reason()


@dataclass
class Result:
    columns: list[str]
    types: list[str]
    rows: list[tuple[Any, ...]]

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


@dataclass
class World:
    running: Running
    store: ClickHouseStore
    seeded: Seeded
    time_range: TimeRange

    def query(self, sql: str) -> Result:
        store: Any = self.store
        with store._lock:  # the store's one client: chDB hosts one engine per process
            result = store._client.query(sql)
        return Result(
            list(result.column_names),
            [t.name for t in result.column_types],
            [tuple(r) for r in result.result_rows],
        )

    @property
    def failures(self) -> FailureWorld:
        assert self.seeded.failures is not None
        return self.seeded.failures

    def range_for(self, uid: str) -> TimeRange:
        """The time range a dashboard is opened on: the last hour; the Failures dashboard's
        from the failure clusters' first day on."""
        if uid == FAILURES_UID:
            return TimeRange(self.failures.since, self.time_range.end, timedelta(hours=1))
        return self.time_range

    def variables(
        self, uid: str, time_range: TimeRange | None = None, /, **chosen: str | tuple[str, ...]
    ) -> dict[str, Variable]:
        return resolve_variables(
            DASHBOARDS[uid],
            lambda sql: self.query(sql).rows,
            time_range or self.range_for(uid),
            chosen,
        )

    def panel(
        self,
        uid: str,
        title: str,
        time_range: TimeRange | None = None,
        /,
        **chosen: str | tuple[str, ...],
    ) -> Result:
        """A panel's result with the project ``shop`` selected unless ``chosen`` says."""
        chosen.setdefault("project", PROJECT)
        time_range = time_range or self.range_for(uid)
        (found,) = [p for p in DASHBOARDS[uid]["panels"] if p["title"] == title]
        sql = interpolate(
            found["targets"][0]["rawSql"], self.variables(uid, time_range, **chosen), time_range
        )
        return self.query(sql)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("dashboards")
    sql: dict[str, Any] = {}
    if SQL_INTERFACE_MISSING is None:
        sql = {"sql_port": 0, "sql_password": SecretStr(SQL_PASSWORD)}
    thread, running = start_collector(root / "data", **sql)
    try:
        seeded = seed(running)
        now = datetime.now(UTC)
        yield World(
            running,
            running.store.inner,
            seeded,
            TimeRange(now - timedelta(hours=1), now + timedelta(minutes=1), timedelta(seconds=60)),
        )
    finally:
        thread.stop()


def _read_api_runs(world: World) -> dict[str, dict[str, Any]]:
    """Every seeded run of the project as the read API serves it (its own FINAL reads)."""
    return {run_id: world.running.run(run_id) for run_id in world.seeded.run_ids}


# -- the data is what the dashboards must cope with -------------------------------------------


def test_the_store_holds_duplicate_deliveries_and_another_project(world: World) -> None:
    shop = {"project": PROJECT}
    (raw,) = world.store.query(
        "SELECT count() FROM {db}.otel_traces WHERE ProjectId = {project:String}", shop
    )
    (final,) = world.store.query(
        "SELECT count() FROM {db}.otel_traces FINAL WHERE ProjectId = {project:String}", shop
    )
    assert raw[0] == 2 * final[0], "every span of the project was delivered twice"
    (runs_rows,) = world.store.query(
        "SELECT count() FROM {db}.runs WHERE ProjectId = {project:String}", shop
    )
    assert runs_rows[0] > len(world.seeded.run_ids), "the runs table holds unmerged rows"
    other = world.store.query(
        "SELECT uniqExact(TraceId) FROM {db}.otel_traces WHERE ProjectId = {project:String}",
        {"project": OTHER_PROJECT},
    )
    assert other == [(1,)]


# -- every query runs and returns what its panel needs --------------------------------------


def _link_fields(panel: Mapping[str, Any]) -> set[str]:
    text = str(panel["fieldConfig"])
    return set(re.findall(r"__data\.fields\.(\w+)", text))


def _override_columns(panel: Mapping[str, Any]) -> set[str]:
    return {
        o["matcher"]["options"]
        for o in panel["fieldConfig"]["overrides"]
        if o["matcher"]["id"] == "byName"
    }


def _numeric(type_name: str) -> bool:
    return bool(re.search(r"Int|Float|Decimal", type_name))


CONVERSATION = "conv_refund_desk_demo"
"""The incident's group id: its source run, replay and eval runs share it."""


def _opened_on(world: World, uid: str) -> list[dict[str, str]]:
    """What a dashboard is opened on: the run timeline on the failing source run (its
    failure's cluster) and on its replay (its tool calls against the source's)."""
    if uid == RUNS_UID:  # as opened, and on the source run's conversation
        return [{}, {"conversation": CONVERSATION}]
    if uid != RUN_UID:
        return [{}]
    runs = (world.seeded.source_run_id, world.seeded.replay_run_id)
    return [{"run_id": run_id, "project": PROJECT} for run_id in runs]


@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_every_query_runs_and_returns_the_columns_its_panel_needs(world: World, uid: str) -> None:
    time_range = world.range_for(uid)
    opened = [world.variables(uid, **chosen) for chosen in _opened_on(world, uid)]
    for spec in DASHBOARDS[uid]["templating"]["list"]:
        if spec["type"] == "query":
            assert opened[0][spec["name"]].options, f"variable {spec['name']} offers nothing"
    for panel in DASHBOARDS[uid]["panels"]:
        (target,) = panel["targets"]
        results = [
            world.query(interpolate(target["rawSql"], variables, time_range))
            for variables in opened
        ]
        title = panel["title"]
        assert any(r.rows for r in results), f"{uid} / {title}: no rows"
        (result, *_) = [r for r in results if r.rows]
        columns = set(result.columns)
        assert _link_fields(panel) <= columns, f"{uid} / {title}: a data link's field is missing"
        missing = _override_columns(panel) - columns - {"latency_ms"}
        assert not missing, f"{uid} / {title}: overrides name no column {missing}"
        if panel["type"] == "timeseries":
            assert result.columns[0] == "time" and "DateTime" in result.types[0], title
            labels = [t for t in result.types[1:] if not _numeric(t)]
            assert len(labels) <= 1, f"{title}: one label column at most (long format)"
            times = [row[0] for row in result.rows]
            assert times == sorted(times), f"{title}: a long frame must be sorted by time"
        elif panel["type"] == "stat":
            assert len(result.rows) == 1, title
        elif panel["type"] == "traces":
            assert target["format"] == 3 and target["queryType"] == "traces"
            assert columns >= TRACE_COLUMNS, TRACE_COLUMNS - columns


# -- Agent runs -----------------------------------------------------------------------------


def test_recent_runs_show_each_run_once_with_its_failing_span_and_verdict(world: World) -> None:
    seeded, api = world.seeded, _read_api_runs(world)
    rows = {r["run_id"]: r for r in world.panel(RUNS_UID, "Recent runs").dicts()}
    assert set(rows) == set(seeded.run_ids), "every run of the project, none of elsewhere"
    for run_id, served in api.items():
        row, run = rows[run_id], served["run"]
        assert row["span_count"] == len(served["spans"]) == run["span_count"], run_id
        assert (row["status"], row["error_count"]) == (run["status"], run["error_count"])
        assert (row["input_tokens"], row["output_tokens"]) == (
            run["input_tokens"],
            run["output_tokens"],
        )
        assert row["kind"] == run["kind"]
    source = rows[seeded.source_run_id]
    assert source["status"] == "error" and source["kind"] == "capture"
    assert source["failing_span_name"] == "execute_tool refund_order"
    assert source["failing_error_type"] == "Error running tool (non-fatal)"
    assert source["cost_usd"] > 0, "priced with the store's model prices"
    replay = rows[seeded.replay_run_id]
    assert (replay["kind"], replay["verdict"], replay["status"]) == (
        "replay",
        "FAILURE_FIXED",
        "ok",
    )
    assert replay["source_run_id"] == seeded.source_run_id
    verdicts = {
        (sweep_id, outcome.status): rows[outcome.eval_run_id or ""]["verdict"]
        for (sweep_id, _), outcome in seeded.eval_runs.items()
    }
    assert verdicts == {
        (SWEEP_MIXED, "passed"): "passed",
        (SWEEP_MIXED, "failed"): "failed",
        (SWEEP_GREEN, "passed"): "passed",
    }
    starts = [r["start"] for r in world.panel(RUNS_UID, "Recent runs").dicts()]
    assert starts == sorted(starts, reverse=True), "newest first"


def test_the_summary_and_series_count_runs_tokens_and_cost_once(world: World) -> None:
    api = _read_api_runs(world)
    (stat,) = world.panel(RUNS_UID, "Runs in the window").dicts()
    failed = sum(r["run"]["status"] == "error" for r in api.values())
    assert stat["runs"] == len(api) == 7
    assert stat["failed_runs"] == failed
    assert stat["error_rate"] == pytest.approx(failed / len(api))
    assert stat["input_tokens"] == sum(r["run"]["input_tokens"] for r in api.values())
    assert stat["output_tokens"] == sum(r["run"]["output_tokens"] for r in api.values())
    summary_cost = world.store.query(
        "SELECT sum(cost_usd) FROM {db}.run_summary WHERE project = 'shop' "
        "AND run_id IN {ids:Array(String)}",  # the window's (the failure clusters are older)
        {"ids": world.seeded.run_ids},
    )[0][0]
    assert stat["cost_usd"] == pytest.approx(summary_cost) and summary_cost > 0
    series = world.panel(RUNS_UID, "Runs and failed runs").dicts()
    assert sum(r["runs"] for r in series) == len(api)
    assert sum(r["failed"] for r in series) == failed
    tokens = world.panel(RUNS_UID, "Tokens").dicts()
    assert sum(r["input_tokens"] for r in tokens) == stat["input_tokens"]
    cost = world.panel(RUNS_UID, "Cost").dicts()
    assert sum(r["cost_usd"] for r in cost) == pytest.approx(stat["cost_usd"])


def test_the_filters_narrow_the_runs(world: World) -> None:
    seeded = world.seeded

    def run_ids(**chosen: str | tuple[str, ...]) -> set[str]:
        return {r["run_id"] for r in world.panel(RUNS_UID, "Recent runs", **chosen).dicts()}

    assert run_ids(kind="replay") == {seeded.replay_run_id}
    assert run_ids(kind=("capture", "sweep")) == {seeded.source_run_id, *seeded.sweep_runs.values()}
    errored = run_ids(status="error")
    assert seeded.source_run_id in errored and seeded.replay_run_id not in errored
    assert run_ids(status="ok") == set(seeded.run_ids) - errored
    assert run_ids(workflow="afr-sweep") == set(seeded.sweep_runs.values())
    assert seeded.sweep_runs[SWEEP_GREEN] not in run_ids(agent="Refund Agent")
    assert seeded.source_run_id in run_ids(agent="Refund Agent")
    assert run_ids(project=OTHER_PROJECT) == {seeded.source_run_id}, "the other tenant's copy"
    (other,) = world.panel(RUNS_UID, "Recent runs", project=OTHER_PROJECT).dicts()
    assert other["span_count"] == 13


def test_the_runs_table_merges_agree_with_the_run_summary_view(world: World) -> None:
    """The dashboards merge the runs table themselves (fast windows): the same answers as the
    view for every run, or the schema changed under them."""
    merges = ", ".join((KIND, f"if({ERRORS} > 0, 'error', 'ok')", WORKFLOW, f"arraySort({AGENTS})"))
    mine = world.store.query(
        "SELECT TraceId, " + merges + " FROM {db}.runs WHERE ProjectId = {project:String} "  # noqa: S608
        "GROUP BY ProjectId, TraceId ORDER BY TraceId",
        {"project": PROJECT},
    )
    view = world.store.query(
        "SELECT run_id, kind, status, workflow, agents FROM {db}.run_summary "
        "WHERE project = {project:String} ORDER BY run_id",
        {"project": PROJECT},
    )
    assert mine == view
    assert in_projects() == "ProjectId IN (${project:singlequote})"


# -- Run timeline ---------------------------------------------------------------------------


def timeline(world: World, title: str, run_id: str, **chosen: str) -> list[dict[str, Any]]:
    """A panel of the run timeline as a link from a table of runs opens it: in the row's
    project."""
    return world.panel(RUN_UID, title, run_id=run_id, **chosen).dicts()


def test_the_run_timeline_shows_each_span_once_and_the_failing_one_stands_out(
    world: World,
) -> None:
    source = world.seeded.source_run_id
    served = world.running.run(source)
    trace = timeline(world, "Trace", source)
    assert sorted(s["spanID"] for s in trace) == sorted(s["span_id"] for s in served["spans"])
    errored = [s for s in trace if s["statusCode"] == 2]
    assert [s["operationName"] for s in errored] == ["execute_tool refund_order"]
    agents = {s["serviceName"] for s in trace}
    assert {"Triage Agent", "Refund Agent"} <= agents, "spans coloured by agent"
    spans = timeline(world, "Spans", source)
    assert len(spans) == 13
    assert [s["at_ms"] for s in spans] == sorted(s["at_ms"] for s in spans)
    (failing,) = [s for s in spans if s["status"] == "FAILING"]
    assert (failing["span"], failing["tool"], failing["error"]) == (
        "execute_tool refund_order",
        "refund_order",
        "Error running tool (non-fatal)",
    )
    (run,) = timeline(world, "Run", source)
    assert (run["status"], run["kind"], run["span_count"], run["error_count"]) == (
        "error",
        "capture",
        13,
        1,
    )


def test_the_run_timeline_shows_its_log_records_once_each_in_time_order(world: World) -> None:
    """Delivered twice (merges stopped: both copies are in the table) and once to another
    project: the logs panel shows the run's own records once each, linked to its trace."""
    source = world.seeded.source_run_id
    rows = timeline(world, "Log records", source)
    assert len(rows) == world.seeded.source_logs == 4
    stored = world.query(
        f"SELECT count() FROM afr.otel_logs WHERE TraceId = '{source}' AND ProjectId = 'shop'"  # noqa: S608
    )
    assert stored.rows[0][0] == 2 * world.seeded.source_logs, "both deliveries are stored"
    assert [r["timestamp"] for r in rows] == sorted(r["timestamp"] for r in rows)
    assert {r["traceID"] for r in rows} == {source}
    model_calls = {
        s["span_id"] for s in world.running.run(source)["spans"] if s["span_type"] == "llm"
    }
    assert {r["spanID"] for r in rows} == model_calls | {""}
    assert rows[0]["level"] == "WARN" and rows[0]["body"] == "refund requested for order A-1001"


def test_a_conversation_lists_its_runs_once_each_in_order_in_both_dashboards(
    world: World,
) -> None:
    """The source run's conversation: its runs as the read API's conversation filter gives
    them (delivered twice, and once to another project: each once, this project's only), in
    start order, the same on the Run timeline and on Agent runs; the filter narrows Recent
    runs to them."""
    api = world.running.api(
        "/api/v1/runs", conversation_id=CONVERSATION, since=1, limit=100
    ).json()["runs"]
    expected = sorted((r["start_ns"], r["run_id"]) for r in api)
    assert world.seeded.source_run_id in {r for _, r in expected}
    assert world.seeded.replay_run_id in {r for _, r in expected}
    on_timeline = timeline(world, "This conversation", world.seeded.source_run_id)
    on_runs = world.panel(RUNS_UID, "Conversation", conversation=CONVERSATION).dicts()
    assert [r["run_id"] for r in on_timeline] == [r for _, r in expected]
    assert [r["run_id"] for r in on_runs] == [r for _, r in expected]
    assert {r["project"] for r in on_runs} == {PROJECT}
    assert world.panel(RUNS_UID, "Conversation").dicts() == [], "no conversation chosen"
    recent = world.panel(RUNS_UID, "Recent runs", conversation=CONVERSATION).dicts()
    assert recent and {r["conversation_id"] for r in recent} == {CONVERSATION}
    everything = world.panel(RUNS_UID, "Recent runs").dicts()
    assert len(everything) > len(recent), "the sweeps' summary runs have no conversation"
    assert world.panel(RUNS_UID, "Recent runs", conversation="no-such").dicts() == []


def test_the_selected_span_shows_what_it_got_and_returned(world: World) -> None:
    source = world.seeded.source_run_id
    selected = "Selected span: input and output"
    default = {r["part"]: r for r in timeline(world, selected, source)}
    assert default["input"]["span"] == "execute_tool refund_order", "the failing span by default"
    assert '"12.OO"' in default["input"]["body"]
    assert default["input"]["attribute"] == "gen_ai.tool.call.arguments"
    assert default["error"]["attribute"] == "Error running tool (non-fatal)"
    spans = timeline(world, "Spans", source)
    (llm, *_) = [s for s in spans if s["type"] == "llm"]
    chosen = {r["part"]: r for r in timeline(world, selected, source, span_id=llm["span_id"])}
    assert chosen["input"]["span"] == llm["span"]
    assert chosen["input"]["attribute"] == "gen_ai.input.messages"
    assert "I was charged twice" in chosen["input"]["body"]
    clean = world.seeded.replay_run_id
    (root_span,) = {r["span"] for r in timeline(world, selected, clean)}
    assert root_span.startswith("invoke_workflow"), "no failing span: the root"


def test_a_run_links_its_replays_evals_and_source(world: World) -> None:
    seeded = world.seeded
    linked = timeline(world, "Source, replays and evals", seeded.source_run_id)
    by_run = {r["run_id"]: r for r in linked}
    assert by_run[seeded.replay_run_id]["relation"] == "replay"
    assert by_run[seeded.replay_run_id]["verdict"] == "FAILURE_FIXED"
    evals = {o.eval_run_id: o.status for o in seeded.eval_runs.values()}
    assert {k: r["verdict"] for k, r in by_run.items() if r["relation"] == "eval"} == evals
    assert set(by_run) == {seeded.replay_run_id, *evals}, "its own, nothing else"
    (source,) = timeline(world, "Source, replays and evals", seeded.replay_run_id)
    assert (source["relation"], source["run_id"]) == ("source", seeded.source_run_id)
    assert timeline(world, "Trace", "") == []
    assert timeline(world, "Source, replays and evals", "") == []
    everywhere = world.panel(RUN_UID, "Spans", run_id=seeded.source_run_id, project=(ALL,)).dicts()
    assert len(everywhere) == 13, "All projects: one project's copy of a run, not both"


def test_a_run_outside_the_time_range_shows_nothing(world: World) -> None:
    source = world.seeded.source_run_id
    past = TimeRange(
        world.time_range.start - timedelta(days=3), world.time_range.start - timedelta(days=2)
    )
    later = World(world.running, world.store, world.seeded, past)
    assert timeline(later, "Spans", source) == []
    assert timeline(later, "Run", source) == []


# -- Tools and failures ---------------------------------------------------------------------


def test_tools_models_errors_guardrails_and_handoffs_count_each_span_once(world: World) -> None:
    spans = [s for run in _read_api_runs(world).values() for s in run["spans"]]
    tools = [s for s in spans if s["span_type"] == "tool"]
    (refund,) = world.panel(TOOLS_UID, "Tools").dicts()
    assert refund["tool"] == "refund_order"
    assert refund["calls"] == len(tools)
    assert refund["errors"] == sum(s["status"]["code"] == "Error" for s in tools) == 2
    assert refund["runs"] == len({s["trace_id"] for s in tools})
    assert refund["p50_ms"] <= refund["p95_ms"] <= refund["p99_ms"]
    assert refund["last_failed_run"] in world.seeded.run_ids
    (model,) = world.panel(TOOLS_UID, "Models").dicts()
    llm = [s for s in spans if s["span_type"] == "llm"]
    assert (model["calls"], model["input_tokens"]) == (
        len(llm),
        sum(s["input_tokens"] for s in llm),
    )
    errors = {r["error_type"]: r for r in world.panel(TOOLS_UID, "Top error types").dicts()}
    assert errors["Error running tool (non-fatal)"]["errors"] == 2, "the source and the failed eval"
    (guardrail,) = world.panel(TOOLS_UID, "Guardrail trips").dicts()
    assert guardrail["guardrail"] == "abuse_screen"
    assert guardrail["checks"] == sum(s["span_type"] == "guardrail" for s in spans)
    assert guardrail["trips"] == 0
    (handoff,) = world.panel(TOOLS_UID, "Handoff paths").dicts()
    assert (handoff["from_agent"], handoff["to_agent"]) == ("Triage Agent", "Refund Agent")
    assert handoff["handoffs"] == sum(s["span_type"] == "handoff" for s in spans)
    series = world.panel(TOOLS_UID, "Tool calls and errors").dicts()
    assert sum(r["calls"] for r in series) == len(tools)


def test_the_failing_spans_follow_the_tool_and_error_type_filters(world: World) -> None:
    failing = world.panel(TOOLS_UID, "Failing spans").dicts()
    keys = [(r["project"], r["run_id"], r["span_id"]) for r in failing]
    assert len(keys) == len(set(keys)) == 4, "once each"
    everywhere = world.panel(TOOLS_UID, "Failing spans", project=(ALL,)).dicts()
    assert len(everywhere) == 5, "and the source run's copy in the other project"
    tool_only = world.panel(TOOLS_UID, "Failing spans", tool="refund_order").dicts()
    assert tool_only and all(r["tool"] == "refund_order" for r in tool_only)
    assert world.seeded.source_run_id in {r["run_id"] for r in tool_only}
    typed = world.panel(TOOLS_UID, "Failing spans", error_type="eval failed").dicts()
    assert typed and {r["span"] for r in typed} == {"eval.result"}


# -- Replays and evals ----------------------------------------------------------------------


def test_verdicts_sweeps_and_failing_evals(world: World) -> None:
    seeded = world.seeded
    (stat,) = world.panel(EVALS_UID, "Replays and evals in the window").dicts()
    assert stat == {
        "replays": 1,
        "fixed": 1,
        "eval_runs": 3,
        "evals_passed": 2,
        "evals_not_passed": 1,
        "sweeps": 2,
    }
    verdicts = world.panel(EVALS_UID, "Replay verdicts").dicts()
    assert {k: sum(r[k] for r in verdicts) for k in verdicts[0] if k != "time"} == {
        "FAILURE_FIXED": 1,
        "STILL_FAILING": 0,
        "REGRESSED": 0,
        "UNCHANGED": 0,
        "INCONCLUSIVE": 0,
    }
    outcomes = world.panel(EVALS_UID, "Eval outcomes").dicts()
    assert {k: sum(r[k] for r in outcomes) for k in outcomes[0] if k != "time"} == {
        "passed": 2,
        "failed": 1,
        "inconclusive": 0,
        "errored": 0,
    }
    sweeps = {r["sweep_id"]: r for r in world.panel(EVALS_UID, "Sweeps").dicts()}
    assert {
        k: (r["evals"], r["passed"], r["failed"], r["pass_rate"]) for k, r in sweeps.items()
    } == {
        SWEEP_MIXED: (2, 1, 1, 0.5),
        SWEEP_GREEN: (1, 1, 0, 1.0),
    }
    assert {k: r["sweep_run_id"] for k, r in sweeps.items()} == seeded.sweep_runs
    rates = sorted(r["pass_rate"] for r in world.panel(EVALS_UID, "Sweep pass rate").dicts())
    assert rates == [0.5, 1.0]
    (failing,) = world.panel(EVALS_UID, "Failing evals").dicts()
    failed = seeded.eval_runs[(SWEEP_MIXED, seeded.failing.name)]
    assert failing["run_id"] == failed.eval_run_id
    assert failing["source_run_id"] == seeded.source_run_id
    assert (failing["outcome"], failing["sweep_id"]) == ("failed", SWEEP_MIXED)
    (replay,) = world.panel(EVALS_UID, "Replays").dicts()
    assert (replay["run_id"], replay["verdict"], replay["source_run_id"]) == (
        seeded.replay_run_id,
        "FAILURE_FIXED",
        seeded.source_run_id,
    )


# -- Failures -------------------------------------------------------------------------------


def _api_failures(
    world: World, time_range: TimeRange, project_key: str | None = None, **params: str
) -> list[dict[str, Any]]:
    """GET /api/v1/failures over the dashboard's window as its macros give it (whole
    seconds: ``toDateTime``)."""
    answer = world.running.api(
        "/api/v1/failures",
        key=project_key,
        since=int(time_range.start.timestamp()),
        until=int(time_range.end.timestamp()),
        limit=500,
        **params,
    )
    assert answer.status_code == 200, answer.text
    failures: list[dict[str, Any]] = answer.json()["failures"]
    return failures


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ns(when: datetime) -> int:
    """A time as the dashboard's client returns it (UTC, to the microsecond) in ns."""
    return (when.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1) * 1000


def _us(ns: int) -> int:
    return ns // 1000 * 1000


def _as_api(row: dict[str, Any]) -> dict[str, Any]:
    """A row of a cluster table in the read API's terms."""
    return {
        "signature": row["signature"],
        "title": row["title"],
        "status": row["status"],
        "runs": row["runs"],
        "first_seen_ns": _ns(row["first_seen"]),
        "last_seen_ns": _ns(row["last_seen"]),
        "newest_run": row["newest_run"],
        "workflows": row["workflows"].split(", ") if row["workflows"] else [],
        "agents": row["agents"].split(", "),
        "fixed_by": row["fixed_by"] or None,
        "guard": row["guard_eval"] or None,
        "guard_outcome": row["guard_outcome"] or None,
        "guard_run": row["guard_run"] or None,
        "runs_since_guard": row["runs_since_guard"],
    }


def _from_api(cluster: dict[str, Any]) -> dict[str, Any]:
    guard = cluster["guard"] or {}
    return {
        "signature": cluster["signature"],
        "title": cluster["title"],
        "status": cluster["status"],
        "runs": cluster["runs"],
        "first_seen_ns": _us(cluster["first_seen_ns"]),
        "last_seen_ns": _us(cluster["last_seen_ns"]),
        "newest_run": cluster["sample_run_ids"][0],
        "workflows": cluster["workflows"],
        "agents": cluster["agents"],
        "fixed_by": cluster["fixed_by"],
        "guard": guard.get("eval_name"),
        "guard_outcome": guard.get("last_outcome"),
        "guard_run": guard.get("last_run_id"),
        "runs_since_guard": cluster["runs_since_guard"],
    }


def _clusters(world: World, time_range: TimeRange, **chosen: str) -> list[dict[str, Any]]:
    rows = world.panel(FAILURES_UID, "Failure clusters", time_range, **chosen).dicts()
    return [_as_api(row) for row in rows]


@pytest.mark.parametrize(
    ("chosen", "params"),
    [
        ({}, {}),
        ({"status": "recurring"}, {"status": "recurring"}),
        ({"status": "fixed"}, {"status": "fixed"}),
        ({"workflow": "refund-desk-eu"}, {"workflow": "refund-desk-eu"}),
        ({"agent": "Refund Agent UK"}, {"agent": "Refund Agent UK"}),
    ],
    ids=["all", "recurring", "fixed", "workflow", "agent"],
)
def test_the_failure_clusters_are_the_apis(
    world: World, chosen: dict[str, str], params: dict[str, str]
) -> None:
    """The same clusters in the same order with the same figures and statuses, over the
    four clusters' two weeks and over everything up to now."""
    failures = world.failures
    for time_range in (
        TimeRange(failures.since, failures.until),
        world.range_for(FAILURES_UID),
    ):
        api = [_from_api(c) for c in _api_failures(world, time_range, **params)]
        assert api, "the filter keeps something"
        assert _clusters(world, time_range, **chosen) == api


def test_the_failure_world_has_a_cluster_in_each_status(world: World) -> None:
    failures = world.failures
    window = TimeRange(failures.since, failures.until)
    found = {c["signature"]: c for c in _clusters(world, window)}
    assert {status: found[s]["status"] for status, s in failures.signatures.items()} == {
        status: status for status in failures.signatures
    }
    assert set(found) == set(failures.signatures.values()), "the seeded runs are weeks later"
    for status, signature in failures.signatures.items():
        cluster, runs = found[signature], failures.runs[status]
        assert cluster["runs"] == len(runs), "each run once, though delivered twice"
        assert cluster["newest_run"] == runs[-1]
        assert cluster["first_seen_ns"] == _ns(failures.starts[runs[0]])
        assert cluster["agents"] == sorted(["Triage Agent", failures.agents[status]])
        assert cluster["title"].endswith(f"after Triage Agent → {failures.agents[status]}")
        assert cluster["fixed_by"] == failures.fixes.get(status)
        assert cluster["guard"] == failures.evals.get(status)
    guarded = found[failures.signatures["guarded"]]
    assert guarded["guard_outcome"] == "failed", "its newest run's: it catches the failure"
    assert found[failures.signatures["recurring"]]["runs_since_guard"] == 2
    assert found[failures.signatures["open"]]["workflows"] == sorted(
        ["refund-desk", failures.other_workflow]
    )
    order = [c["status"] for c in _clusters(world, window)]
    assert order[:2] == ["recurring", "open"], "recurring first, as the API lists them"


def test_recurring_new_this_week_and_the_counts(world: World) -> None:
    failures = world.failures
    window = TimeRange(failures.since, failures.until)
    (recurring,) = world.panel(FAILURES_UID, "Recurring failures", window).dicts()
    assert recurring["signature"] == failures.signatures["recurring"]
    assert (recurring["guard_eval"], recurring["runs_since_guard"]) == ("guards-jp", 2)
    assert _ns(recurring["recurring_since"]) == _ns(failures.at(2.0))
    assert recurring["newest_run"] == failures.runs["recurring"][-1]
    (counts,) = world.panel(FAILURES_UID, "Clusters by status", window).dicts()
    assert counts == {
        "recurring": 1,
        "open": 1,
        "guarded": 1,
        "fixed": 1,
        "new_this_week": 1,
        "failing_runs": sum(len(runs) for runs in failures.runs.values()),
    }
    (new,) = world.panel(FAILURES_UID, "New this week", window).dicts()
    assert new["signature"] == failures.signatures["guarded"], "first seen on day 9 of 14"
    # Up to now, the seeded refund failure (this hour) is the new one; guarded, and open in
    # the other project.
    everything = world.range_for(FAILURES_UID)
    new_now = world.panel(FAILURES_UID, "New this week", everything, project=(ALL,)).dicts()
    assert {(r["project"], r["status"]) for r in new_now} == {
        (PROJECT, "guarded"),
        (OTHER_PROJECT, "open"),
    }
    assert len({r["signature"] for r in new_now}) == 1, "one signature, one cluster a project"
    (elsewhere,) = _api_failures(world, everything, world.seeded.other_key)
    assert elsewhere["status"] == "open" and elsewhere["signature"] == new_now[0]["signature"]
    none = world.panel(FAILURES_UID, "Recurring failures", window, status="open").dicts()
    assert none == [], "the status filter applies to the recurring table too"


@pytest.mark.parametrize(
    ("cause", "path"),
    [
        ('["tool", "tool:refund_order", "ValidationError", "/amount: string where number"]', []),
        ('["tool", "tool:refund_order", "Error running tool", "Error running tool: <v>"]', ["A"]),
        ('["guardrail", "guardrail:abuse", "", ""]', ["Triage Agent", "Refund Agent"]),
        ('["agent", "", "MaxTurnsExceeded", ""]', ["A", "B", "A"]),
        ('["", "", "", ""]', []),
        ("not a JSON array", ["A"]),
        ('["three", "parts", "only"]', []),
    ],
)
def test_the_failure_title_is_the_apis(world: World, cause: str, path: list[str]) -> None:
    title_sql = failure_title("{cause:String}", "{path:Array(String)}")
    ((title,),) = world.store.query(f"SELECT {title_sql}", {"cause": cause, "path": path})
    assert title == api_failures.failure_title(cause, path)


def test_the_trend_counts_failing_runs_per_day_and_signature(world: World) -> None:
    failures = world.failures
    window = TimeRange(failures.since, failures.until)
    series = world.panel(FAILURES_UID, "Failing runs per day", window).dicts()
    api = _api_failures(world, window)
    titles = {f"{c['title']} · {c['signature'][:6]}": c for c in api}
    found: dict[str, dict[str, int]] = {}
    for row in series:
        found.setdefault(row["failure"], {})[row["time"].date().isoformat()] = row["runs"]
    assert found == {
        label: {d["day"]: d["runs"] for d in c["per_day"]} for label, c in titles.items()
    }
    one = failures.signatures["recurring"]
    only = world.panel(FAILURES_UID, "Failing runs per day", window, signature=one).dicts()
    assert {r["failure"][-6:] for r in only} == {one[:6]}, "a signature shows only its cluster"
    assert sum(r["runs"] for r in only) == 3


# -- a run's failure and a replay against its source ------------------------------------------


def _api_cluster(world: World, signature: str, time_range: TimeRange) -> dict[str, Any]:
    answer = world.running.api(
        f"/api/v1/failures/{signature}",
        since=int(time_range.start.timestamp()),
        until=int(time_range.end.timestamp()),
    )
    assert answer.status_code == 200, answer.text
    cluster: dict[str, Any] = answer.json()["failure"]
    return cluster


def test_a_failing_run_says_how_often_it_was_seen_and_what_was_done(world: World) -> None:
    seeded = world.seeded
    (this,) = timeline(world, "This failure", seeded.source_run_id)
    api = _api_cluster(world, this["signature"], world.time_range)
    assert (this["status"], this["seen"], _ns(this["since"])) == (
        api["status"],
        api["runs"],
        _us(api["first_seen_ns"]),
    )
    assert (this["status"], this["seen"], this["fixed_by"]) == ("guarded", 1, seeded.replay_run_id)
    passing = seeded.eval_runs[(SWEEP_GREEN, seeded.passing.name)]
    assert (this["guard_eval"], this["guard_outcome"], this["guard_run"]) == (
        seeded.passing.name,
        "passed",
        passing.eval_run_id,
    ), "the eval whose newest run is newest, and that run's outcome"
    assert this["guard_eval"] == api["guard"]["eval_name"]
    assert this["recurring_since"] is None
    assert timeline(world, "This failure", seeded.replay_run_id) == [], "no failure, nothing"

    failures = world.failures
    newest = failures.runs["recurring"][-1]
    window = TimeRange(failures.since, failures.until)
    (recurring,) = world.panel(RUN_UID, "This failure", window, run_id=newest).dicts()
    api = _api_cluster(world, failures.signatures["recurring"], window)
    assert (recurring["status"], recurring["seen"], recurring["runs_since_guard"]) == (
        "recurring",
        3,
        2,
    )
    assert _ns(recurring["recurring_since"]) == _us(api["recurring_since_ns"])
    assert (recurring["fixed_by"], recurring["guard_eval"]) == (
        failures.fixes["recurring"],
        "guards-jp",
    )
    (elsewhere,) = timeline(world, "This failure", seeded.source_run_id, project=OTHER_PROJECT)
    assert (elsewhere["status"], elsewhere["fixed_by"]) == ("open", ""), "that project's cluster"


def _api_diff(world: World, source: str, run_id: str) -> dict[str, Any]:
    answer = world.running.api("/api/v1/runs/diff", a=source, b=run_id)
    assert answer.status_code == 200, answer.text
    diff: dict[str, Any] = answer.json()
    return diff


_TOOL_KINDS = {
    "only in the source": "missing_call",
    "only in this run": "extra_call",
    "another tool": "different_tool",
    "other arguments": "different_arguments",
}


def test_a_replay_and_its_evals_show_their_tool_calls_against_the_source(world: World) -> None:
    """The first row that differs in tool or arguments is the diff's (and the verdict's)
    first tool divergence; an eval of the original behaviour calls the tool the same way."""
    seeded = world.seeded
    source = seeded.source_run_id
    compared = [
        seeded.replay_run_id,
        *(o.eval_run_id or "" for o in seeded.eval_runs.values()),
    ]
    for run_id in compared:
        rows = timeline(world, "Tool calls against the source run", run_id)
        diff = _api_diff(world, source, run_id)
        calls = [s for s in diff["steps"] if s["type"] == "tool"]
        assert len(rows) == len(calls), run_id
        assert all(r["source_run_id"] == source for r in rows)
        for row, step in zip(rows, calls, strict=True):
            sides = (step["a"], step["b"])
            assert (row["source_span_id"], row["span_id"]) == tuple(
                side["span_id"] if side else "" for side in sides
            )
            assert (row["source_status"], row["status"]) == tuple(
                side["status"] if side else "" for side in sides
            )
        first = next((r for r in rows if r["difference"] in _TOOL_KINDS), None)
        divergence = diff["tool_divergence"]
        if divergence is None:
            assert first is None, run_id
            continue
        assert first is not None, run_id
        assert (first["step"], _TOOL_KINDS[first["difference"]]) == (
            divergence["step"],
            divergence["kind"],
        )
        pointers = ", ".join(a["pointer"] for a in divergence["arguments"])
        assert first["arguments"] == f"different at {pointers}"
    (fixed,) = timeline(world, "Tool calls against the source run", seeded.replay_run_id)
    assert (fixed["tool"], fixed["arguments"], fixed["difference"]) == (
        "refund_order",
        "different at /amount",
        "other arguments",
    )
    assert (fixed["source_status"], fixed["status"], fixed["output"]) == (
        "error",
        "ok",
        "different",
    )
    original = seeded.eval_runs[(SWEEP_MIXED, seeded.failing.name)].eval_run_id or ""
    (same,) = timeline(world, "Tool calls against the source run", original)
    assert (same["arguments"], same["output"], same["difference"]) == ("same", "same", "same")
    assert timeline(world, "Tool calls against the source run", source) == [], "no source"


# -- the same through the collector's SQL interface -------------------------------------------


@pytest.mark.skipif(SQL_INTERFACE_MISSING is not None, reason=SQL_INTERFACE_MISSING or "")
def test_the_sql_interface_answers_every_query_the_same(world: World) -> None:
    import clickhouse_connect

    port = world.running.collector.sql_port
    assert port, "the collector started its SQL interface"
    client = clickhouse_connect.get_client(
        host="127.0.0.1", port=port, username="afr", password=SQL_PASSWORD
    )
    try:
        for uid, dashboard in DASHBOARDS.items():
            chosen = {"run_id": world.seeded.source_run_id} if uid == RUN_UID else {}
            variables = world.variables(uid, **chosen)  # All projects: the run is in two
            for panel in dashboard["panels"]:
                sql = interpolate(panel["targets"][0]["rawSql"], variables, world.range_for(uid))
                embedded = world.query(sql)
                over_http = client.query(sql)
                assert list(over_http.column_names) == embedded.columns, panel["title"]
                assert [_plain(r) for r in over_http.result_rows] == [
                    _plain(r) for r in embedded.rows
                ], panel["title"]
    finally:
        client.close()


def _plain(row: Any) -> tuple[Any, ...]:
    """A row comparable across clients: times as UTC instants, floats to 12 significant
    digits (a float sum's last bits depend on the order the engine's threads add in)."""
    return tuple(
        v.astimezone(UTC).replace(tzinfo=None)
        if isinstance(v, datetime) and v.tzinfo
        else float(f"{v:.12g}")
        if isinstance(v, float)
        else v
        for v in row
    )


# The queries the plugin's OTel trace mode builds on the datasource's trace defaults (Explore's
# query builder, the "View trace" link), as grafana-clickhouse-datasource 4.20.0 generates them
# (src/data/sqlGenerator.ts): no FINAL, no project filter, no LIMIT on a trace.
EXPLORE_TRACE = """WITH '{trace}' as trace_id, (SELECT min(Start) FROM "afr"."traces_trace_id_ts" \
WHERE TraceId = trace_id) as trace_start, (SELECT max(End) + 1 FROM "afr"."traces_trace_id_ts" \
WHERE TraceId = trace_id) as trace_end SELECT "TraceId" as traceID, "SpanId" as spanID, \
"ParentSpanId" as parentSpanID, "ServiceName" as serviceName, "SpanName" as operationName, \
multiply(toUnixTimestamp64Nano("Timestamp"), 0.000001) as startTime, \
multiply("Duration", 0.000001) as duration, \
arrayMap(key -> map('key', key, 'value',"SpanAttributes"[key]), mapKeys("SpanAttributes")) as tags, \
arrayMap(key -> map('key', key, 'value',"ResourceAttributes"[key]), mapKeys("ResourceAttributes")) \
as serviceTags, if("StatusCode" IN ('Error', 'STATUS_CODE_ERROR'), 2, 0) as statusCode \
FROM "afr"."traces" WHERE traceID = trace_id AND "Timestamp" >= trace_start \
AND "Timestamp" <= trace_end ORDER BY startTime ASC"""
EXPLORE_SEARCH = """SELECT "TraceId" as traceID, "ServiceName" as serviceName, \
"SpanName" as operationName, "Timestamp" as startTime, multiply("Duration", 0.000001) as duration \
FROM "afr"."traces" WHERE ( Timestamp >= $__fromTime AND Timestamp <= $__toTime ) \
AND ( ParentSpanId = '' ) AND ( Duration > 0 ) ORDER BY Timestamp DESC, Duration DESC LIMIT 1000"""


def test_explore_on_the_trace_view_shows_each_span_once_for_the_credentials_project(
    world: World,
) -> None:
    import clickhouse_connect

    from collector.auth import SqlUserStore

    port = world.running.collector.sql_port
    assert port, "the collector started its SQL interface"
    users = SqlUserStore(world.running.settings.keys_path)
    source = world.seeded.source_run_id
    served = world.running.run(source)
    dashboard_trace = {s["spanID"]: s["serviceName"] for s in timeline(world, "Trace", source)}
    for project in (PROJECT, OTHER_PROJECT):
        credential = users.create(project)
        client = clickhouse_connect.get_client(
            host="127.0.0.1", port=port, username=credential.user, password=credential.password
        )
        try:
            trace = list(client.query(EXPLORE_TRACE.format(trace=source)).named_results())
            spans = [row["spanID"] for row in trace]
            # Delivered twice, stored under two projects: each span once, one project's.
            assert sorted(spans) == sorted(s["span_id"] for s in served["spans"])
            # One service-name rule: the agent, in Explore as in the dashboard.
            assert {row["spanID"]: row["serviceName"] for row in trace} == dashboard_trace
            search = list(
                client.query(expand_macros(EXPLORE_SEARCH, world.time_range)).named_results()
            )
            traces = [row["traceID"] for row in search]
            assert len(traces) == len(set(traces)), "a trace listed twice"
            if project == OTHER_PROJECT:
                assert traces == [source], "only the other project's one run"
            else:
                assert set(traces) == set(world.seeded.run_ids)
        finally:
            client.close()


def test_the_trace_search_panel_lists_each_root_once(world: World) -> None:
    rows = world.panel(RUN_UID, "Trace search", run_id=world.seeded.source_run_id).dicts()
    assert sorted(r["traceID"] for r in rows) == sorted(world.seeded.run_ids)
    assert {r["project"] for r in rows} == {PROJECT}
    starts = [r["startTime"] for r in rows]
    assert starts == sorted(starts, reverse=True)


# -- a dashboard opens whole -------------------------------------------------------------------

# What clickhouse-go v2.47 (the plugin's driver) sends over HTTP with every query.
GO_PARAMS = {"client_protocol_version": "54460", "database": "afr", "default_format": "Native"}
GO_HEADERS = {
    "User-Agent": "clickhouse-go/2.47.0 (database/sql; lv:go/1.24.6; os:linux) "
    "grafana/12.1.0 clickhouse-datasource/4.20.0",
    "Accept-Encoding": "gzip",
    "Content-Type": "text/plain",
}
LOADS = 10
JITTER_S = 0.02  # clickhouse-go sends a dashboard's queries within ~20 ms of each other


def load_phases(world: World, uid: str) -> list[list[str]]:
    """A dashboard load as Grafana makes it: its query variables' SQL at once, then every
    panel's query at once (the run timeline opened on the seeded run)."""
    chosen = {"run_id": world.seeded.source_run_id} if uid == RUN_UID else {}
    variables = world.variables(uid, **chosen)
    time_range = world.range_for(uid)
    templating = [
        interpolate(spec["query"]["rawSql"], variables, time_range)
        for spec in DASHBOARDS[uid]["templating"]["list"]
        if spec["type"] == "query"
    ]
    panels = [
        interpolate(panel["targets"][0]["rawSql"], variables, time_range)
        for panel in DASHBOARDS[uid]["panels"]
    ]
    return [templating, panels]


def _send_together(
    port: int, queries: list[tuple[tuple[str, str], str]], seed: int
) -> list[tuple[str, int, str]]:
    """Every (credential, sql) at once from its own connection, with clickhouse-go's jitter;
    (sql, status, error code) of each answer."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    delays = random.Random(seed)
    jitter = [delays.uniform(0, JITTER_S) for _ in queries]

    def send(index: int) -> tuple[str, int, str]:
        (user, password), sql = queries[index]
        time.sleep(jitter[index])  # the load's shape, not a wait for a result
        response = httpx.post(
            f"http://127.0.0.1:{port}/",
            params=GO_PARAMS,
            headers=GO_HEADERS,
            content=sql,
            auth=(user, password),
            timeout=60,
        )
        return sql, response.status_code, response.headers.get("x-clickhouse-exception-code", "")

    with ThreadPoolExecutor(len(queries)) as pool:
        return list(pool.map(send, range(len(queries))))


def _failed(answers: list[tuple[str, int, str]]) -> list[str]:
    return [f"{status} code {code}: {sql[:80]!r}" for sql, status, code in answers if status != 200]


@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_a_dashboard_loaded_as_grafana_loads_it_renders_every_panel(world: World, uid: str) -> None:
    port = world.running.collector.sql_port
    assert port, "the collector started its SQL interface"
    admin = ("afr", SQL_PASSWORD)
    phases = load_phases(world, uid)
    assert len(phases[1]) >= 5, "a dashboard of several panels"
    failures: list[str] = []
    for load in range(LOADS):
        for phase, queries in enumerate(phases):
            if queries:
                answers = _send_together(port, [(admin, q) for q in queries], load * 10 + phase)
                failures += _failed(answers)
    assert failures == [], f"{len(failures)} panel queries failed in {LOADS} loads: {failures[:3]}"


def test_two_users_loading_two_dashboards_at_once_render_every_panel(world: World) -> None:
    from collector.auth import SqlUserStore

    port = world.running.collector.sql_port
    assert port, "the collector started its SQL interface"
    team = SqlUserStore(world.running.settings.keys_path).create(PROJECT)
    users = [("afr", SQL_PASSWORD), (team.user, team.password)]
    failures: list[str] = []
    for load, pair in enumerate(
        [
            (RUNS_UID, TOOLS_UID),
            (RUN_UID, EVALS_UID),
            (TOOLS_UID, EVALS_UID),
            (FAILURES_UID, RUN_UID),
        ]
    ):
        phases = [load_phases(world, uid) for uid in pair]
        for phase in range(2):
            together = [
                (user, sql)
                for user, uid_phases in zip(users, phases, strict=True)
                for sql in uid_phases[phase]
            ]
            failures += _failed(_send_together(port, together, 1000 + load * 10 + phase))
    assert failures == [], f"{len(failures)} panel queries failed: {failures[:3]}"
    health = world.running.api("/healthz").json()["sql"]
    assert health["refused_busy"] == 0
