"""The store-kept run summary (``runs`` + its materialized view) against the spans themselves.

Random runs are written through the real write path (``encode_block`` -> ``insert_rows``) in
random insert blocks, so a run is often split over several blocks (partial summary rows),
and some spans are delivered twice, in the same block or a later one. The oracle is the
full scan of the spans table with ``FINAL`` (what the read API did before the summary
existed); every filter of the read API, paged with small pages, must list exactly the runs
the oracle lists, in the same order, with the same figures.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from afr_common.prices import PriceBook, parse_price_table
from collector.blocks import encode_block
from collector.model import SpanRecord
from collector.store.client import ClickHouseStore
from collector.store.reader import RunFilter, RunReader, decode_cursor
from tests.records import span_record

NS = 1_000_000_000
BASE_NS = 1_700_000_000 * NS
PRICES = parse_price_table({"gpt-4o": [2.5, 10.0, 1.25, 3.0], "gpt-4o-mini": [0.15, 0.6]})
BOOK = PriceBook(PRICES, database=False)
WORKFLOWS = ("refunds", "bookings", "triage")
AGENTS = ("Triage", "Refunds", "Billing", "Search")
KINDS = ("capture", "capture", "capture", "replay", "eval", "sweep")
PROJECTS = ("alpha", "beta")

_ORACLE = """
SELECT
    TraceId,
    toUnixTimestamp64Nano(min(Timestamp)),
    toUnixTimestamp64Nano(max(Timestamp + toIntervalNanosecond(Duration))),
    countIf(StatusCode = 'Error'),
    count(),
    argMinIf(SpanId, Timestamp, StatusCode = 'Error'),
    argMinIf(SpanAttributes['gen_ai.workflow.name'], Timestamp, ParentSpanId = ''),
    argMinIf(AgentName, Timestamp, SpanType = 'agent' AND AgentName != ''),
    arraySort(groupUniqArrayIf(AgentName, AgentName != '')),
    sumIf(InputTokens, SpanType = 'llm'),
    sumIf(OutputTokens, SpanType = 'llm'),
    multiIf(countIf(RunKind = 'replay') > 0, 'replay', countIf(RunKind = 'eval') > 0, 'eval',
        countIf(RunKind = 'sweep') > 0, 'sweep', 'capture'),
    anyIf(SourceRunId, SourceRunId != ''),
    sum(multiIf(SpanType != 'llm', 0.,
        Model = 'gpt-4o', Uncached * 2.5 + CacheReadTokens * 1.25 + CacheCreationTokens * 3.0
            + OutputTokens * 10.0,
        Model = 'gpt-4o-mini',
            (Uncached + CacheReadTokens + CacheCreationTokens) * 0.15 + OutputTokens * 0.6,
        0.)),
    countIf(SpanType = 'llm' AND Model = 'unpriced' AND InputTokens + OutputTokens > 0),
    sumIf(CacheReadTokens, SpanType = 'llm'),
    sumIf(CacheCreationTokens, SpanType = 'llm'),
    sumIf(ReasoningTokens, SpanType = 'llm')
FROM (
    SELECT *, if(InputTokens >= CacheReadTokens + CacheCreationTokens,
        InputTokens - CacheReadTokens - CacheCreationTokens, InputTokens) AS Uncached
    FROM {db}.otel_traces FINAL
)
WHERE ProjectId = {project:String}
GROUP BY TraceId
"""


def _span(
    project: str, trace_id: str, index: int, parent: str, start_ns: int, **fields: Any
) -> SpanRecord:
    record = span_record(
        project_id=project,
        timestamp_ns=start_ns,
        trace_id=trace_id,
        span_id=f"{index:016x}",
        parent_span_id=parent,
        span_name=fields.pop("span_name", f"span {index}"),
        resource_attributes={},
        scope_name="test",
        span_attributes=fields.pop("span_attributes", {}),
        duration_ns=fields.pop("duration_ns", NS // 10),
        status_code=fields.pop("status_code", "Unset"),
        ingested_ns=fields.pop("ingested_ns", BASE_NS),
    )
    for name, value in fields.items():
        setattr(record, name, value)
    return record


def _random_run(rng: random.Random, project: str, number: int) -> list[SpanRecord]:
    trace_id = f"{rng.getrandbits(128):032x}"
    # Runs often share a start: paging must order by (start, run id) exactly.
    start = BASE_NS + rng.randrange(0, 400) * NS // 2
    kind = rng.choice(KINDS)
    source = f"{rng.getrandbits(128):032x}" if kind in ("replay", "eval") else ""
    if kind == "replay" and number % 3 == 0:
        source = "f" * 32  # several replays of one source run
    common = {"run_kind": kind, "source_run_id": source}
    root = _span(
        project,
        trace_id,
        number * 100,
        "",
        start,
        span_type="task",
        span_attributes={"gen_ai.workflow.name": rng.choice(WORKFLOWS)},
        duration_ns=rng.randrange(1, 30) * NS,
        **common,
    )
    spans = [root]
    for offset in range(1, rng.randrange(2, 9)):
        span_type = rng.choice(("agent", "llm", "function", "llm"))
        fields: dict[str, Any] = {"span_type": span_type, **common}
        if span_type == "agent":
            fields["agent_name"] = rng.choice(AGENTS)
        if span_type == "llm":
            fields["model"] = rng.choice(("gpt-4o", "gpt-4o-mini", "unpriced"))
            fields["input_tokens"] = rng.randrange(1, 5000)
            fields["output_tokens"] = rng.randrange(1, 500)
            if rng.random() < 0.6:  # a cached prompt; now and then reported apart (> input)
                fields["cache_read_tokens"] = rng.randrange(0, fields["input_tokens"] + 200)
                fields["cache_creation_tokens"] = rng.randrange(0, 100)
            if rng.random() < 0.5:  # reasoning is part of the output, at the output rate
                fields["reasoning_tokens"] = rng.randrange(0, fields["output_tokens"])
        if rng.random() < 0.15:
            fields["status_code"] = "Error"
            fields["error_type"] = "ToolError"
        spans.append(
            _span(
                project,
                trace_id,
                number * 100 + offset,
                root.span_id,
                start + offset * NS,
                **fields,
            )
        )
    return spans


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClickHouseStore]:
    rng = random.Random(20261201)
    data_dir: Path = tmp_path_factory.mktemp("run-summary")
    store = ClickHouseStore(f"chdb://{data_dir / 'chdb'}", "afr")
    store.migrate()
    store.set_model_prices(PRICES)
    # Merges would fold partial rows and duplicates away at their own pace: held off, every
    # query below meets them as the reader meets them between merges.
    store.command("SYSTEM STOP MERGES {db}.runs")
    store.command("SYSTEM STOP MERGES {db}.otel_traces")
    spans = [
        span for number in range(240) for span in _random_run(rng, PROJECTS[number % 2], number)
    ]
    rng.shuffle(spans)
    # Redeliveries: ~10% of spans again, some in the same block, some much later.
    spans += rng.sample(spans, len(spans) // 10)
    position = 0
    while position < len(spans):
        size = rng.randrange(1, 120)
        block = spans[position : position + size]
        if rng.random() < 0.2 and block:
            block.append(rng.choice(block))
        store.insert_rows(encode_block(block))
        position += size
    yield store
    store.close()


_ORACLES: dict[tuple[int, str], list[dict[str, Any]]] = {}


def _oracle(store: ClickHouseStore, project: str) -> list[dict[str, Any]]:
    key = (id(store), project)
    if key not in _ORACLES:
        _ORACLES[key] = _compute_oracle(store, project)
    return _ORACLES[key]


def _compute_oracle(store: ClickHouseStore, project: str) -> list[dict[str, Any]]:
    runs = []
    for row in store.query(_ORACLE, {"project": project}):
        (run_id, start, end, errors, count, failing, workflow, root_agent, agents) = row[:9]
        input_tokens, output_tokens, kind, source, cost, unpriced = row[9:15]
        cache_read, cache_creation, reasoning = row[15:]
        priced = round(cost / 1e6, 9)
        runs.append(
            {
                "run_id": run_id,
                "start_ns": start,
                "end_ns": end,
                "status": "error" if errors else "ok",
                "error_count": errors,
                "span_count": count,
                "failing_span_id": failing if errors else None,
                "workflow": workflow,
                "root_agent": root_agent,
                "agents": list(agents),
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "kind": kind,
                "source_run_id": source or None,
                "cache_read_tokens": cache_read,
                "cache_creation_tokens": cache_creation,
                "reasoning_tokens": reasoning,
                "cost_usd": None if unpriced else priced,
                "unpriced_models": ["unpriced"] if unpriced else [],
            }
        )
    runs.sort(key=lambda run: (run["start_ns"], run["run_id"]), reverse=True)
    return runs


def _matches(run: dict[str, Any], flt: RunFilter) -> bool:
    return (
        flt.since_ns <= run["start_ns"] < flt.until_ns
        and (flt.status is None or run["status"] == flt.status)
        and (flt.kind is None or run["kind"] == flt.kind)
        and (flt.workflow is None or run["workflow"] == flt.workflow)
        and (flt.agent is None or flt.agent in run["agents"])
        and (flt.source_run_id is None or run["source_run_id"] == flt.source_run_id)
    )


def _page_all(reader: RunReader, project: str, flt: RunFilter) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = []
    cursor = None
    for _ in range(500):
        page, next_cursor = reader.list_runs(project, _with(flt, cursor=cursor))
        listed += page
        if next_cursor is None:
            return listed
        cursor = decode_cursor(next_cursor)
    raise AssertionError("paging never ended")


def _with(flt: RunFilter, **changes: Any) -> RunFilter:
    return RunFilter(**{**flt.__dict__, **changes})


FILTERS: list[dict[str, Any]] = [
    {},
    {"status": "error"},
    {"status": "ok"},
    {"kind": "replay"},
    {"kind": "capture"},
    {"kind": "eval", "status": "error"},
    {"workflow": "refunds"},
    {"workflow": "bookings", "status": "error"},
    {"agent": "Billing"},
    {"agent": "Triage", "kind": "capture", "status": "ok"},
    {"source_run_id": "f" * 32},
    {"source_run_id": "f" * 32, "status": "ok"},
]
WINDOWS = [
    (0, 2**62),
    (BASE_NS + 50 * NS, BASE_NS + 150 * NS),
]


@pytest.mark.parametrize("limit", [3, 200])
@pytest.mark.parametrize("window", WINDOWS, ids=["all", "window"])
@pytest.mark.parametrize(
    "filters", FILTERS, ids=lambda f: ",".join(f"{k}={v[:8]}" for k, v in f.items()) or "none"
)
def test_every_filter_pages_exactly_the_runs_the_spans_hold(
    seeded: ClickHouseStore, filters: dict[str, Any], window: tuple[int, int], limit: int
) -> None:
    # A small first read (K=4) forces the cutoff rule and the growing rounds to do the work.
    reader = RunReader(seeded, query_timeout_s=10, max_spans=100, prices=BOOK)
    reader._FIRST_ROWS = 4
    for project in PROJECTS:
        flt = RunFilter(since_ns=window[0], until_ns=window[1], limit=limit, **filters)
        expected = [run for run in _oracle(seeded, project) if _matches(run, flt)]
        listed = _page_all(reader, project, flt)
        assert [run["run_id"] for run in listed] == [run["run_id"] for run in expected]
        for got, want in zip(listed, expected, strict=True):
            assert {key: got[key] for key in want if key != "cost_usd"} == {
                key: value for key, value in want.items() if key != "cost_usd"
            }
            assert got["cost_usd"] == (
                None if want["cost_usd"] is None else pytest.approx(want["cost_usd"], abs=1e-9)
            )


def test_duplicates_and_split_blocks_count_once(seeded: ClickHouseStore) -> None:
    split = seeded.query(
        "SELECT count() FROM (SELECT TraceId FROM {db}.runs GROUP BY TraceId HAVING count() > 1)"
    )[0][0]
    duplicated = seeded.query(
        "SELECT count() FROM (SELECT SpanId FROM {db}.otel_traces GROUP BY ProjectId, TraceId, "
        "SpanId HAVING count() > 1)"
    )[0][0]
    # The dataset really exercises what the summary must survive.
    assert split > 50 and duplicated > 50
    reader = RunReader(seeded, query_timeout_s=10, max_spans=100, prices=BOOK)
    for project in PROJECTS:
        listed = _page_all(reader, project, RunFilter(since_ns=0, until_ns=2**62, limit=200))
        assert (
            sum(run["span_count"] for run in listed)
            == seeded.query(
                "SELECT count() FROM {db}.otel_traces FINAL WHERE ProjectId = {p:String}",
                {"p": project},
            )[0][0]
        )


def test_the_view_the_dashboards_read_agrees_with_the_read_api(seeded: ClickHouseStore) -> None:
    reader = RunReader(seeded, query_timeout_s=10, max_spans=100, prices=BOOK)
    for project in PROJECTS:
        listed = _page_all(reader, project, RunFilter(since_ns=0, until_ns=2**62, limit=200))
        rows = seeded.query(
            "SELECT run_id, span_count, error_count, status, failing_span_id, workflow, "
            "root_agent, agents, input_tokens, output_tokens, round(cost_usd, 9), kind, "
            "cache_read_tokens, cache_creation_tokens, reasoning_tokens, "
            "round(priced_cost_usd, 9), unpriced_models "
            "FROM {db}.run_summary WHERE project = {p:String}",
            {"p": project},
        )
        by_id = {row[0]: row for row in rows}
        assert len(by_id) == len(listed)
        for run in listed:
            row = by_id[run["run_id"]]
            assert row[1:] == (
                run["span_count"],
                run["error_count"],
                run["status"],
                run["failing_span_id"] or "",
                run["workflow"],
                run["root_agent"],
                run["agents"],
                run["input_tokens"],
                run["output_tokens"],
                None if run["cost_usd"] is None else pytest.approx(run["cost_usd"]),
                run["kind"],
                run["cache_read_tokens"],
                run["cache_creation_tokens"],
                run["reasoning_tokens"],
                pytest.approx(run["priced_cost_usd"]),
                run["unpriced_models"],
            )


def test_runs_stored_before_the_summary_existed_are_backfilled(seeded: ClickHouseStore) -> None:
    # One chDB engine per process: another database of the same engine.
    store = ClickHouseStore(seeded._dsn, "afr_backfill")
    store.migrate()
    run = _random_run(random.Random(7), "alpha", 1)
    store.insert_rows(encode_block(run))
    # An install at migration 1: the summary objects did not exist when the spans came in.
    for name in ("runs_mv", "run_summary", "runs", "model_prices"):
        kind = "VIEW" if name in ("runs_mv", "run_summary") else "TABLE"
        store.command(f"DROP {kind} {{db}}.{name}")
    # And every later migration of the summary (4: its failure signatures, 5: its cache and
    # reasoning tokens, 7: its conversation) with it.
    store.command("DELETE FROM {db}.schema_migrations WHERE Version IN (2, 4, 5, 7)")
    store.command("OPTIMIZE TABLE {db}.schema_migrations FINAL")
    assert store.migrate() == [2, 4, 5, 7]
    reader = RunReader(store, query_timeout_s=10, max_spans=100, prices=BOOK)
    listed, _ = reader.list_runs("alpha", RunFilter(since_ns=0, until_ns=2**62))
    assert [r["run_id"] for r in listed] == [run[0].trace_id]
    assert listed[0]["span_count"] == len(run)


def test_afr_up_links_the_newest_failing_run_to_its_grafana_timeline(
    seeded: ClickHouseStore,
) -> None:
    from types import SimpleNamespace
    from urllib.parse import parse_qs, urlsplit

    from afr.commands.server import _grafana_line

    reader = RunReader(seeded, query_timeout_s=10, max_spans=100, prices=BOOK)
    newest = max(
        (
            (span_ns, run_id, project)
            for project in PROJECTS
            for run_id, span_ns in seeded.query(
                "SELECT TraceId, toUnixTimestamp64Nano(min(Timestamp)) FROM {db}.otel_traces "
                "WHERE ProjectId = {p:String} GROUP BY TraceId HAVING countIf(StatusCode = 'Error')",
                {"p": project},
            )
        ),
    )
    newest = (newest[0], newest[2], newest[1])
    assert reader.newest_failing_run() == (newest[1], newest[2])
    line = _grafana_line("http://grafana:3000/", SimpleNamespace(reader=reader))
    url = urlsplit(line.split()[-1])
    assert (url.netloc, url.path) == ("grafana:3000", "/d/afr-run")
    assert parse_qs(url.query) == {"var-project": [newest[1]], "var-run_id": [newest[2]]}
