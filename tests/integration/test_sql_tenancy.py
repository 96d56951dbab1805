"""Per-project read access on the embedded store: a SQL credential bound to a project sees
that project's rows only, whatever SQL it sends, through a real collector's SQL interface
over spans of two projects ingested over real OTLP/HTTP. The adversarial matrix: the other
project's ids guessed, UNION, IN (SELECT ...), joins, CTEs, scalar subqueries, every table
and view of the store, the materialized views, table functions that read storage,
``system.*``, settings that would lift the filters, in the URL and in the query."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

from collector.auth import SqlUserStore
from collector.sqlapi import SQL_PASSWORD_FILE
from tests.integration import tenancy_attacks as attacks
from tests.integration.conftest import Running, start_collector

OURS, THEIRS = "shop", "elsewhere"
MARKER = "THEIRS-MARKER-7f3a"  # only in the other project's spans
GO_PARAMS = {"client_protocol_version": "54460", "database": "afr"}


@dataclass
class Tenancy:
    running: Running
    port: int
    admin_password: str
    user: str
    password: str
    our_trace: str
    their_trace: str

    def post(
        self,
        sql: str,
        params: dict[str, str] | None = None,
        auth: tuple[str, str] | None = None,
    ) -> httpx.Response:
        return httpx.post(
            f"http://127.0.0.1:{self.port}/",
            params={"database": "afr", **(params or {})},
            content=sql,
            auth=auth or (self.user, self.password),
            timeout=30,
        )


def _export_log(running: Running, key: str, service: str, marker: str, trace: str) -> None:
    """One log record of the run, through the OTel SDK's OTLP/HTTP log exporter."""
    from opentelemetry._logs import LogRecord
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor

    provider = LoggerProvider(resource=Resource.create({"service.name": service}))
    exporter = OTLPLogExporter(endpoint=running.http_url + "/v1/logs", headers=running.headers(key))
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    provider.get_logger("tenancy").emit(
        LogRecord(
            trace_id=int(trace, 16), span_id=1, body=f"log of {marker}", attributes={"note": marker}
        )
    )
    provider.shutdown()


def _export(running: Running, key: str, service: str, marker: str) -> str:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    exporter = OTLPSpanExporter(
        endpoint=running.http_url + "/v1/traces", headers=running.headers(key)
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tenancy")
    with tracer.start_as_current_span(f"run {marker}") as root:
        root.set_attribute("note", marker)
        with tracer.start_as_current_span("tool " + marker) as child:
            child.set_status(Status(StatusCode.ERROR, marker))
    provider.shutdown()
    return f"{root.get_span_context().trace_id:032x}"


@pytest.fixture(scope="module")
def tenancy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenancy]:
    data_dir = Path(tmp_path_factory.mktemp("tenancy")) / "data"
    thread, running = start_collector(data_dir, sql_port=0)
    try:
        their_key = running.collector.keys.create(THEIRS)
        our_trace = _export(running, running.key, "checkout", "ours")
        their_trace = _export(running, their_key, "billing", MARKER)
        _export_log(running, running.key, "checkout", "ours", our_trace)
        _export_log(running, their_key, "billing", MARKER, their_trace)
        running.run(our_trace)
        running.run(their_trace, their_key)
        created = SqlUserStore(running.settings.keys_path).create(OURS)
        port = running.collector.sql_port
        assert port is not None
        admin = (data_dir / SQL_PASSWORD_FILE).read_text().strip()
        yield Tenancy(running, port, admin, created.user, created.password, our_trace, their_trace)
    finally:
        thread.stop()


def _leaks(tenancy: Tenancy, text: str) -> bool:
    return any(s in text for s in (MARKER, tenancy.their_trace, THEIRS, "billing"))


# Queries a project credential may send: each answers, with its own project's rows only.
SCOPED = [
    "SELECT DISTINCT ProjectId FROM afr.otel_traces",
    "SELECT * FROM afr.otel_traces FORMAT JSONEachRow",
    "SELECT * FROM afr.otel_traces FINAL FORMAT JSONEachRow",
    "SELECT count() FROM afr.otel_traces WHERE ProjectId = 'elsewhere'",
    "SELECT SpanName FROM afr.otel_traces WHERE TraceId = '{their}'",
    "SELECT SpanName, ServiceName FROM afr.otel_traces WHERE SpanAttributes['note'] != ''",
    "SELECT TraceId FROM afr.otel_traces UNION ALL SELECT TraceId FROM afr.otel_traces "
    "WHERE ProjectId != 'shop'",
    "SELECT TraceId FROM afr.runs WHERE TraceId IN (SELECT TraceId FROM afr.otel_traces)",
    "SELECT a.TraceId, b.SpanName FROM afr.runs AS a "
    "JOIN afr.otel_traces AS b ON a.TraceId = b.TraceId",
    "WITH t AS (SELECT * FROM afr.otel_traces) SELECT SpanName, ProjectId FROM t",
    "SELECT (SELECT groupArray(SpanName) FROM afr.otel_traces) AS names",
    "SELECT (SELECT any(TraceId) FROM afr.otel_traces WHERE ProjectId = 'elsewhere') AS x",
    "SELECT * FROM (SELECT * FROM (SELECT ProjectId, TraceId, SpanName FROM afr.otel_traces))",
    "SELECT project, run_id, failing_span_name FROM afr.run_summary",
    "SELECT * FROM afr.otel_traces_trace_id_ts FINAL",
    "SELECT ProjectId, TraceId FROM afr.runs",
    "SELECT count() FROM afr.otel_traces",
    "SELECT uniqExact(ProjectId), count() FROM afr.otel_traces GROUP BY ProjectId WITH TOTALS",
    "SELECT arrayJoin(groupArray(SpanName)) FROM afr.otel_traces",
    "SELECT _part, SpanName FROM afr.otel_traces",
    "SELECT SpanName FROM afr.otel_traces LIMIT 1 BY ProjectId",
    "SELECT * FROM afr.otel_logs FORMAT JSONEachRow",
    "SELECT Body, LogAttributes, ServiceName FROM afr.logs",
    "SELECT count() FROM afr.otel_logs WHERE ProjectId = 'elsewhere'",
    "SELECT Body FROM afr.otel_logs WHERE TraceId = '{their}'",
    "SELECT TraceId FROM afr.otel_logs UNION ALL SELECT TraceId FROM afr.otel_traces",
    "SELECT Model FROM afr.model_prices",
    "SELECT name FROM system.databases",
    "SELECT name, engine FROM system.tables WHERE database = 'afr'",
    "SELECT name, type FROM system.columns WHERE database = 'afr' AND table = 'otel_traces'",
    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'afr'",
    "SHOW TABLES FROM afr",
    "SHOW DATABASES",
    "DESCRIBE TABLE afr.otel_traces",
    "EXISTS TABLE afr.runs",
    "SHOW PROCESSLIST",
    "SELECT 1",
    "SELECT number FROM numbers(3)",
    "SELECT version(), currentDatabase()",
]


@pytest.mark.parametrize("sql", SCOPED)
def test_a_project_credential_reads_its_own_project_only(tenancy: Tenancy, sql: str) -> None:
    response = tenancy.post(sql.format(their=tenancy.their_trace))
    assert response.status_code == 200, response.text
    assert not _leaks(tenancy, response.text), response.text


def test_it_reads_its_own_rows_whole(tenancy: Tenancy) -> None:
    ours = tenancy.post(
        f"SELECT count() FROM afr.otel_traces WHERE TraceId = '{tenancy.our_trace}'"  # noqa: S608
    )
    assert ours.text == "2\n"
    projects = tenancy.post("SELECT DISTINCT ProjectId FROM afr.otel_traces")
    assert projects.text == "shop\n"
    runs = tenancy.post("SELECT run_id, status FROM afr.run_summary")
    assert runs.text == f"{tenancy.our_trace}\terror\n"
    logs = tenancy.post("SELECT TraceId, Body FROM afr.logs")
    assert logs.text == f"{tenancy.our_trace}\tlog of ours\n"


# Reads that would go below the filters, or around them: refused, with a reason.
REFUSED: list[tuple[str, int | tuple[int, ...]]] = [
    ("SELECT * FROM afr.runs_mv", 497),
    ("SELECT * FROM afr.otel_traces_trace_id_ts_mv", 497),
    ("SELECT * FROM merge('afr', 'otel_traces')", 497),
    ("SELECT * FROM merge('afr', '.*')", 497),
    ("SELECT * FROM mergeTreeIndex('afr', 'otel_traces', with_marks = true)", 497),
    ("SELECT * FROM view(SELECT * FROM afr.otel_traces)", 497),
    (
        "SELECT * FROM viewIfPermitted(SELECT TraceId FROM afr.runs_mv ELSE null('TraceId String'))",
        497,
    ),
    ("SELECT query FROM system.processes", 497),
    ("SELECT query FROM system.query_log", (60, 497)),  # chDB has no query log: either
    ("SELECT * FROM system.parts WHERE database = 'afr'", 497),
    ("SELECT * FROM system.user_processes", 497),
    ("SELECT * FROM afr.otel_traces WHERE TraceId IN (SELECT query_id FROM system.processes)", 497),
    ("SELECT dictGet('afr.d', 'x', 1)", (36, 497)),  # none exists; refused by name if one did
    ("SELECT joinGet('afr.j', 'x', 1)", (60, 497)),
    ("EXPLAIN SELECT * FROM afr.otel_traces", 497),
    ("SELECT * FROM afr.otel_traces SETTINGS additional_table_filters = {}", 164),
    ("SELECT * FROM remote('127.0.0.1', afr.otel_traces)", 497),
    ("SELECT * FROM clusterAllReplicas('default', afr.otel_traces)", 497),
    ("SELECT * FROM file('/etc/passwd')", 497),
    ("SELECT 1; SELECT * FROM afr.runs_mv", 62),
]


@pytest.mark.parametrize(("sql", "code"), REFUSED)
def test_reads_around_the_filters_are_refused(
    tenancy: Tenancy, sql: str, code: int | tuple[int, ...]
) -> None:
    response = tenancy.post(sql)
    assert response.status_code in (400, 403, 404), response.text
    codes = code if isinstance(code, tuple) else (code,)
    assert int(response.headers["x-clickhouse-exception-code"]) in codes, response.text
    assert not _leaks(tenancy, response.text)


@pytest.mark.parametrize(
    "setting",
    [
        {"additional_table_filters": "{}"},
        {"additional_result_filter": "1"},
        {"use_query_cache": "1"},
        {"enable_reads_from_query_cache": "1"},
        {"readonly": "0"},
        {"enable_analyzer": "0"},
        {"database": "system"},
    ],
)
def test_settings_in_the_url_do_not_lift_the_filters(
    tenancy: Tenancy, setting: dict[str, str]
) -> None:
    response = tenancy.post("SELECT SpanName, ProjectId FROM afr.otel_traces", setting)
    if response.status_code == 200:
        assert not _leaks(tenancy, response.text)
        assert "shop" in response.text
    else:
        assert response.status_code in (403, 404), response.text
    processes = tenancy.post("SELECT query FROM processes", setting)
    assert processes.status_code != 200 or not _leaks(tenancy, processes.text)


def test_the_admin_credential_still_reads_every_project(tenancy: Tenancy) -> None:
    response = tenancy.post(
        "SELECT DISTINCT ProjectId FROM afr.otel_traces ORDER BY ProjectId",
        auth=("afr", tenancy.admin_password),
    )
    assert response.text == "elsewhere\nshop\n"


def test_grafana_reads_a_project_credential_in_native_as_clickhouse_go_does(
    tenancy: Tenancy,
) -> None:
    response = tenancy.post(
        "SELECT TraceId, SpanName FROM afr.otel_traces", {**GO_PARAMS, "default_format": "Native"}
    )
    assert response.status_code == 200, response.text
    assert tenancy.our_trace.encode() in response.content
    assert tenancy.their_trace.encode() not in response.content


def test_bad_and_revoked_project_credentials_are_refused_without_echo(tenancy: Tenancy) -> None:
    store = SqlUserStore(tenancy.running.settings.keys_path)
    wrong = tenancy.post("SELECT 1", auth=(tenancy.user, tenancy.password + "x"))
    assert (wrong.status_code, wrong.headers["x-clickhouse-exception-code"]) == (401, "516")
    assert tenancy.password not in wrong.text and tenancy.user not in wrong.text
    admin_name = tenancy.post("SELECT 1", auth=("afr", tenancy.password))
    assert admin_name.status_code == 401  # a project password never opens the admin
    doomed = store.create(OURS, "doomed")
    assert store.revoke("doomed")
    revoked = tenancy.post("SELECT 1", auth=("doomed", doomed.password))
    assert revoked.status_code == 401
    assert [u.user for u in store.list() if u.revoked_at is None] == [tenancy.user]
    stored = tenancy.running.settings.keys_path.read_bytes()
    assert doomed.password.encode() not in stored
    assert tenancy.password.encode() not in stored


# --- the reviewer's corpus (tests/integration/tenancy_attacks.py) ------------------------------


def _their_values(tenancy: Tenancy, text: str) -> list[str]:
    return [s for s in (MARKER, tenancy.their_trace) if s in text]


def _ids(cases: list[Any]) -> list[str]:
    return [case[0] for case in cases]


@pytest.mark.parametrize(("name", "sql", "params"), attacks.LEAKS, ids=_ids(attacks.LEAKS))
def test_no_value_of_theirs_in_any_answer_or_error(
    tenancy: Tenancy, name: str, sql: str, params: dict[str, str]
) -> None:
    response = tenancy.post(sql, params)
    assert not _their_values(tenancy, response.text), response.text
    assert response.status_code < 500, response.text


@pytest.mark.parametrize(
    ("name", "sql", "params", "only_theirs"), attacks.ORACLES, ids=_ids(attacks.ORACLES)
)
def test_no_answer_that_only_their_rows_could_give(
    tenancy: Tenancy, name: str, sql: str, params: dict[str, str], only_theirs: str
) -> None:
    response = tenancy.post(sql, params)
    assert only_theirs not in response.text, response.text
    assert not _their_values(tenancy, response.text), response.text


@pytest.mark.parametrize(("name", "sql", "params"), attacks.HELD, ids=_ids(attacks.HELD))
def test_spellings_functions_and_settings_hold(
    tenancy: Tenancy, name: str, sql: str, params: dict[str, str]
) -> None:
    response = tenancy.post(sql, params)
    assert not _leaks(tenancy, response.text), response.text
    assert response.status_code < 500, response.text


@pytest.mark.parametrize(
    ("name", "sql", "params"),
    attacks.FIVE_XX + attacks.LIMITS,
    ids=_ids(attacks.FIVE_XX + attacks.LIMITS),
)
def test_bad_queries_get_a_client_error_and_the_server_stays_up(
    tenancy: Tenancy, name: str, sql: str, params: dict[str, str]
) -> None:
    response = tenancy.post(sql, params)
    assert not _their_values(tenancy, response.text), response.text
    if (name, sql, params) in attacks.FIVE_XX:
        assert response.status_code < 500, response.text
    alive = tenancy.post("SELECT 1")
    assert (alive.status_code, alive.text) == (200, "1\n")


@pytest.mark.parametrize(
    ("name", "sql", "params"), attacks.LAYER2_GAPS, ids=_ids(attacks.LAYER2_GAPS)
)
def test_the_query_tree_check_refuses_by_itself(
    tenancy: Tenancy, name: str, sql: str, params: dict[str, str]
) -> None:
    response = tenancy.post(sql, params)
    assert response.status_code == 403, response.text
    assert not _their_values(tenancy, response.text), response.text


def test_query_parameters_bind_for_a_project_credential(tenancy: Tenancy) -> None:
    response = tenancy.post(
        "SELECT count() FROM afr.otel_traces WHERE ProjectId = {p:String}", {"param_p": "shop"}
    )
    assert (response.status_code, response.text) == (200, "2\n"), response.text
