"""The read-only ClickHouse HTTP interface on a real collector and its embedded store, with
spans ingested over real OTLP: clickhouse-connect, requests shaped as Grafana's ClickHouse
datasource sends them (clickhouse-go v2 over HTTP), refusals, limits, and ingest running on
while a query is stopped at its time cap."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import clickhouse_connect
import httpx
import pytest
from clickhouse_connect import common
from clickhouse_connect.datatypes.registry import get_from_name
from clickhouse_connect.driver.ctypes import RespBuffCls
from clickhouse_connect.driver.exceptions import DatabaseError
from clickhouse_connect.driver.query import QueryContext
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

from collector.auth import SqlUserStore
from collector.sqlapi import SQL_PASSWORD_FILE, ensure_sql_password
from tests.integration.conftest import Running, start_collector
from tests.waiting import wait_until

THREAD_CAP = 2
TIME_CAP_S = 2.5  # long enough that a loaded machine still sees both queries running
QUERY_CAP = 16 * 1024
QUEUE_WAIT_MS = 1000  # shorter than the time cap: a query queued behind two long ones is refused
LONG_QUERY = "SELECT count() FROM numbers(1000000000000) WHERE sipHash64(number) = 1"
# What clickhouse-go v2 sends over HTTP (conn_http.go): every request carries these, sorted
# as url.Values.Encode sorts them; Grafana's datasource asks gzip for HTTP (driver.go).
GO_PARAMS = {"client_protocol_version": "54460", "database": "afr", "default_format": "Native"}
GO_HEADERS = {
    "User-Agent": "clickhouse-go/2.40.1 (database/sql; lv:go/1.24.6; os:linux) "
    "grafana/12.2.0 clickhouse-datasource/4.11.0",
    "Accept-Encoding": "gzip",
}


@dataclass
class Sql:
    running: Running
    port: int
    password: str
    trace_id: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def post(
        self,
        sql: str | bytes,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        auth: tuple[str, str] | None = None,
    ) -> httpx.Response:
        return httpx.post(
            self.url + "/",
            params=params,
            content=sql,
            headers=headers,
            auth=auth or ("afr", self.password),
            timeout=30,
        )

    def client(self, **kwargs: Any) -> Any:
        return clickhouse_connect.get_client(
            host="127.0.0.1",
            port=self.port,
            username="afr",
            password=self.password,
            interface="http",
            database="afr",
            **kwargs,
        )

    def store_rows(self, sql: str) -> list[tuple[Any, ...]]:
        return self.running.store.query(sql.replace("afr.", "{db}."))

    def health(self) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(self.running.http_url + "/healthz", timeout=10).json()
        return body


def _export_trace(running: Running) -> str:
    """Two spans through the OTel SDK's OTLP/HTTP exporter into the collector."""
    provider = TracerProvider(resource=Resource.create({"service.name": "checkout"}))
    span_exporter = OTLPSpanExporter(
        endpoint=running.http_url + "/v1/traces", headers=running.headers()
    )
    provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    tracer = provider.get_tracer("shop", "1.0")
    with tracer.start_as_current_span("checkout", kind=SpanKind.SERVER) as parent:
        parent.set_attributes({"order.id": "A-1", "items": 3})
        with tracer.start_as_current_span("charge card", kind=SpanKind.CLIENT) as child:
            child.add_event("card declined", {"code": "51"})
            child.set_status(Status(StatusCode.ERROR, "card declined"))
    provider.shutdown()
    return f"{parent.get_span_context().trace_id:032x}"


@pytest.fixture(scope="module")
def sql(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sql]:
    data_dir = Path(tmp_path_factory.mktemp("sql")) / "data"
    thread, running = start_collector(
        data_dir,
        sql_port=0,
        sql_max_execution_time_s=TIME_CAP_S,
        sql_max_query_bytes=QUERY_CAP,
        # Three slots, two of them for one user; a query that finds none waits QUEUE_WAIT_MS.
        sql_max_concurrency=3,
        sql_queue_max_wait_ms=QUEUE_WAIT_MS,
        sql_max_threads=THREAD_CAP,
    )
    try:
        trace_id = _export_trace(running)
        running.run(trace_id)
        port = running.collector.sql_port
        assert port is not None
        password = (data_dir / SQL_PASSWORD_FILE).read_text().strip()
        yield Sql(running, port, password, trace_id)
    finally:
        thread.stop()


def _code(response: httpx.Response) -> int:
    return int(response.headers["x-clickhouse-exception-code"])


# --- clickhouse-connect ---------------------------------------------------------------------


def test_clickhouse_connect_reads_the_afr_tables_as_the_store_has_them(sql: Sql) -> None:
    client = sql.client()
    # Its probe found block-info framing: every Native answer below is re-framed (protocol
    # 54405), not chDB's raw revision-0 output.
    assert client.protocol_version == 54405
    assert client.command("SELECT 1") == 1
    query = "SELECT * FROM afr.otel_traces ORDER BY SpanId"
    result = client.query(query)
    assert len(result.result_rows) == 2
    assert result.result_rows == sql.store_rows(query)
    types = dict(zip(result.column_names, (t.name for t in result.column_types), strict=True))
    assert types["SpanName"] == "LowCardinality(String)"
    assert types["SpanAttributes"] == "Map(LowCardinality(String), String)"
    assert types["Events.Timestamp"] == "Array(DateTime64(9))"
    assert types["Timestamp"] == "DateTime64(9)"
    assert types["Truncated"] == "Bool"
    nullable = client.query(
        "SELECT SpanName, nullIf(StatusMessage, '') AS message FROM otel_traces ORDER BY SpanName"
    )
    assert nullable.result_rows == [("charge card", "card declined"), ("checkout", None)]


def test_clickhouse_connect_binds_parameters_on_the_server(sql: Sql) -> None:
    query = (
        "SELECT count() FROM otel_traces WHERE TraceId = {trace:String} AND Duration >= {d:UInt64}"
    )
    parameters = {"trace": sql.trace_id, "d": 0}
    assert sql.client().query(query, parameters=parameters).result_rows == [(2,)]
    # Long parameters go as multipart/form-data fields instead of URL parameters.
    form = sql.client(form_encode_query_params=True)
    assert form.query(query, parameters=parameters).result_rows == [(2,)]


def test_clickhouse_connect_writes_are_refused_and_its_settings_capped(sql: Sql) -> None:
    client = sql.client()
    count = "SELECT count() FROM afr.otel_traces"
    before = sql.store_rows(count)
    with pytest.raises(DatabaseError, match="code: 164"):
        client.command("CREATE TABLE afr.stolen (a UInt8) ENGINE = Memory")
    # Its inserts put the statement inside an lz4 body: refused before any of it is read.
    with pytest.raises(DatabaseError, match="code: 89"):
        client.insert("otel_traces", [["x"]], column_names=["TraceId"])
    assert sql.store_rows(count) == before
    # The engine reports every setting read-only (readonly=1), so clickhouse-connect checks
    # them away unless told to send them; sent, they are honoured up to the caps.
    action = common.get_setting("invalid_setting_action")
    common.set_setting("invalid_setting_action", "send")
    try:
        sending = sql.client()
        settings = "SELECT getSetting('max_threads'), getSetting('max_execution_time')"
        assert sending.query(
            settings, settings={"max_threads": 1, "max_execution_time": 1}
        ).result_rows == [(1, 1.0)]
        with pytest.raises(DatabaseError, match="code: 164"):
            sending.query("SELECT 1", settings={"max_execution_time": 600})
    finally:
        common.set_setting("invalid_setting_action", action)


# --- Grafana's datasource (clickhouse-go v2, HTTP) --------------------------------------------


def _decode_as_clickhouse_go(body: bytes) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Block.Decode of clickhouse-go at revision 54460 (lib/proto/block.go): block info, then
    per column name, type, custom-serialization flag (must be 0), data. The column data is
    read by clickhouse-connect's own decoders."""
    buffer_class: Any = RespBuffCls  # untyped in clickhouse-connect
    source = buffer_class(_Source(body))
    context = QueryContext()
    names: list[str] = []
    rows: list[tuple[Any, ...]] = []
    while True:
        try:
            field = source.read_leb128()
        except Exception:  # end of the stream
            break
        assert (field, source.read_byte(), source.read_leb128()) == (1, 0, 2)
        assert source.read_bytes(4) == b"\xff\xff\xff\xff" and source.read_leb128() == 0
        columns, count = source.read_leb128(), source.read_leb128()
        names, data = [], []
        for _ in range(columns):
            names.append(source.read_leb128_str())
            kind = get_from_name(source.read_leb128_str())
            assert source.read_byte() == 0, "custom serialization flag"
            context.start_column(names[-1])
            data.append(kind.read_column(source, count, context) if count else [])
        rows += list(zip(*data, strict=True))
    return names, rows


class _Source:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.last_message = None
        self.exception_tag = None

    @property
    def gen(self) -> Iterator[bytes]:
        yield self.data

    def close(self) -> None:
        pass


def _as_grafana(sql: Sql, query: str, **settings: str) -> httpx.Response:
    # clickhouse-go puts the credential in the URL over plain HTTP: Go sends it as Basic auth.
    response = sql.post(query, params={**GO_PARAMS, **settings}, headers=GO_HEADERS)
    assert response.status_code == 200, response.text
    assert response.headers["content-encoding"] == "gzip"
    assert response.headers["x-clickhouse-format"] == "Native"
    return response


def test_grafana_handshake_ping_and_panels_decode_as_clickhouse_go_does(sql: Sql) -> None:
    hello = _as_grafana(sql, "SELECT displayName(), version(), revision(), timezone()")
    names, rows = _decode_as_clickhouse_go(hello.content)
    assert names == ["displayName()", "version()", "revision()", "timezone()"]
    (display_name, version, revision, timezone) = rows[0]
    assert (version.split(".")[0], timezone) == ("26", "UTC")
    assert revision >= 54454  # clickhouse-go decodes later answers at this revision
    assert hello.headers["x-clickhouse-server-display-name"] == display_name
    assert _decode_as_clickhouse_go(_as_grafana(sql, "SELECT 1").content) == (["1"], [(1,)])
    assert _decode_as_clickhouse_go(_as_grafana(sql, "SELECT version()").content)[1] == [(version,)]
    panel = (
        "SELECT toStartOfMinute(Timestamp) AS time, ServiceName, count() AS spans "
        "FROM otel_traces WHERE Timestamp >= now() - INTERVAL 1 DAY "
        "GROUP BY time, ServiceName ORDER BY time"
    )
    assert _decode_as_clickhouse_go(_as_grafana(sql, panel).content)[1] == sql.store_rows(
        panel.replace("otel_traces", "afr.otel_traces")
    )
    every_type = "SELECT * FROM otel_traces ORDER BY SpanId"
    names, rows = _decode_as_clickhouse_go(_as_grafana(sql, every_type).content)
    assert rows == sql.store_rows(every_type.replace("otel_traces", "afr.otel_traces"))
    # The run summary view: SimpleAggregateFunction, Tuple, nested Arrays.
    summary = "SELECT * FROM run_summary"
    assert _decode_as_clickhouse_go(_as_grafana(sql, summary).content)[1] == sql.store_rows(
        "SELECT * FROM afr.run_summary"
    )
    # The datasource's row limit is the `limit` setting.
    assert len(_decode_as_clickhouse_go(_as_grafana(sql, every_type, limit="1").content)[1]) == 1


def test_an_empty_native_answer_has_no_body(sql: Sql) -> None:
    response = sql.post("SELECT 1 WHERE 0", params=GO_PARAMS)
    assert (response.status_code, response.content) == (200, b"")


def test_headers_formats_url_query_and_gzip_bodies(sql: Sql) -> None:
    response = sql.post(
        "SELECT SpanName, Duration FROM otel_traces ORDER BY SpanName FORMAT JSON",
        params={"default_format": "TabSeparated", "query_id": "q-1"},
    )
    assert response.status_code == 200
    assert response.headers["x-clickhouse-format"] == "JSON"
    assert response.headers["content-type"] == "application/json; charset=UTF-8"
    assert response.headers["x-clickhouse-query-id"] == "q-1"
    assert response.headers["x-clickhouse-timezone"] == "UTC"
    summary = json.loads(response.headers["x-clickhouse-summary"])
    assert int(summary["read_rows"]) >= 2 and int(summary["elapsed_ns"]) > 0
    assert [row["SpanName"] for row in response.json()["data"]] == ["charge card", "checkout"]
    # The query may start in the URL and go on in the body (ClickHouse joins them).
    joined = httpx.get(
        sql.url + "/",
        params={"query": "SELECT number FROM numbers(3)", "user": "afr", "password": sql.password},
    )
    assert joined.text == "0\n1\n2\n"
    split = sql.post("WHERE number > 0", params={"query": "SELECT number FROM numbers(3)"})
    assert split.text == "1\n2\n"
    zipped = sql.post(
        gzip.compress(b"SELECT 40 + 2"),
        headers={"Content-Encoding": "gzip"},
        params={"default_format": "JSONEachRow"},
    )
    assert zipped.json() == {"plus(40, 2)": 42}
    by_headers = httpx.post(
        sql.url + "/",
        content="SELECT currentDatabase()",
        headers={"X-ClickHouse-User": "afr", "X-ClickHouse-Key": sql.password},
    )
    assert by_headers.text == "afr\n"


def test_settings_reach_the_engine_and_the_caps_always_apply(sql: Sql) -> None:
    response = sql.post(
        "SELECT getSetting('readonly'), getSetting('max_execution_time'), "
        "getSetting('output_format_json_quote_64bit_integers'), getSetting('max_threads')",
        params={"output_format_json_quote_64bit_integers": "1", "max_threads": "1"},
    )
    assert response.text.split("\t") == ["1", str(TIME_CAP_S), "true", "1\n"]
    # Engine threads per query: a client may lower the cap, never raise it ("0" is "auto").
    for threads_asked, runs_on in (("1", 1), (str(THREAD_CAP + 6), THREAD_CAP), ("0", THREAD_CAP)):
        threads = sql.post(
            "SELECT getSetting('max_threads')", params={"max_threads": threads_asked}
        )
        assert threads.text == f"{runs_on}\n", threads_asked
    assert sql.post("SELECT getSetting('max_threads')").text == f"{THREAD_CAP}\n"
    lowered = sql.post(
        "SELECT getSetting('max_execution_time')", params={"max_execution_time": "1"}
    )
    assert lowered.text == "1\n"
    # Query threads run below ingest's priority, whatever the client asks (root could raise it).
    for asked in ({}, {"os_thread_priority": "-20"}, {"os_thread_priority": "0"}):
        niced = sql.post("SELECT getSetting('os_thread_priority')", params=asked)
        assert niced.text == "10\n", asked


def test_ping_and_root(sql: Sql) -> None:
    assert httpx.get(sql.url + "/ping").text == "Ok.\n"
    assert httpx.get(sql.url + "/").text == "Ok.\n"
    assert httpx.get(sql.url + "/nope").status_code == 404


# --- refusals -------------------------------------------------------------------------------


REFUSED = [
    ("INSERT INTO otel_traces (TraceId) VALUES ('x')", {}, 164),
    ("CREATE TABLE afr.stolen (a UInt8) ENGINE = Memory", {}, 164),
    ("DROP TABLE afr.otel_traces", {}, 164),
    ("ALTER TABLE afr.otel_traces DELETE WHERE 1", {}, 164),
    ("TRUNCATE TABLE afr.otel_traces", {}, 164),
    ("SET max_threads = 1", {}, 164),
    ("KILL QUERY WHERE 1", {}, 164),
    ("SELECT 1 SETTINGS readonly = 0", {}, 164),
    ("SELECT 1", {"readonly": "0"}, 164),
    ("SELECT 1", {"max_execution_time": "60"}, 164),
    ("SELECT 1", {"max_threads": "1&readonly=0"}, 36),
    ("SELECT file('/etc/hostname')", {}, 497),
    ("SELECT * FROM file('/etc/hostname', 'LineAsString')", {}, 497),
    ("SELECT * FROM url('http://127.0.0.1:1/x', 'TSV', 'a String')", {}, 497),
    ("SELECT * FROM remote('127.0.0.1', system.one)", {}, 497),
    ("SELECT * FROM otel_traces INTO OUTFILE 'stolen.tsv'", {}, 164),
    ("SELECT 1; DROP TABLE afr.otel_traces", {}, 62),
]


@pytest.mark.parametrize(("query", "params", "code"), REFUSED)
def test_writes_outside_reads_and_limit_lifts_are_refused(
    sql: Sql, query: str, params: dict[str, str], code: int
) -> None:
    tables = "SELECT name FROM system.tables WHERE database = 'afr' ORDER BY name"
    before = (sql.store_rows(tables), sql.store_rows("SELECT count() FROM afr.otel_traces"))
    response = sql.post(query, params=params)
    assert (response.status_code, _code(response)) == (400 if code in (36, 62) else 403, code)
    assert response.text.startswith(f"Code: {code}. DB::Exception: ")
    after = (sql.store_rows(tables), sql.store_rows("SELECT count() FROM afr.otel_traces"))
    assert after == before
    assert not Path("stolen.tsv").exists()


def test_bad_credentials_are_refused_and_never_echoed(sql: Sql) -> None:
    wrong = sql.post("SELECT 1", auth=("afr", "not-" + sql.password))
    assert (wrong.status_code, _code(wrong)) == (401, 516)
    assert wrong.headers["www-authenticate"].startswith("Basic")
    assert sql.password not in wrong.text and "not-" not in wrong.text
    missing = httpx.post(sql.url + "/", content="SELECT 1")
    assert (missing.status_code, _code(missing)) == (401, 516)
    in_params = httpx.post(
        sql.url + "/", content="SELECT 1", params={"user": "afr", "password": "guess"}
    )
    assert (in_params.status_code, _code(in_params)) == (401, 516)
    assert "guess" not in in_params.text
    with pytest.raises(Exception, match="516"):
        clickhouse_connect.get_client(
            host="127.0.0.1", port=sql.port, username="afr", password="guess", interface="http"
        )


@pytest.mark.parametrize(
    ("query", "params", "headers", "status", "code"),
    [
        ("SELEC 1", {}, {}, 400, 62),
        ("", {}, {}, 400, 62),
        ("SELECT * FROM no_such_table", {}, {}, 404, 60),
        ("SELECT * FROM nodb.t", {}, {}, 404, 81),
        ("SELECT no_such_column FROM otel_traces", {}, {}, 404, 47),
        ("SELECT no_such_function(1)", {}, {}, 404, 46),
        ("SELECT {n:UInt8}", {"param_n": "abc"}, {}, 400, 457),
        ("SELECT {n:UInt8}", {}, {}, 400, 456),
        ("SELECT 1", {"no_such_setting": "1"}, {}, 404, 115),
        ("SELECT 1", {"default_format": "Template"}, {}, 404, 73),
        ("SELECT 1", {"client_protocol_version": "x"}, {}, 400, 36),
        ("SELECT 1", {}, {"Content-Encoding": "br"}, 415, 89),
        ("SELECT 1", {}, {"Content-Encoding": "gzip"}, 400, 271),
        ("SELECT 1 /* " + "x" * QUERY_CAP + " */", {}, {}, 413, 229),
        ("SELECT 1", {"compress": "1"}, {}, 501, 48),
    ],
)
def test_malformed_input_gets_a_clickhouse_error_never_a_server_fault(
    sql: Sql, query: str, params: dict[str, str], headers: dict[str, str], status: int, code: int
) -> None:
    response = sql.post(query, params=params, headers=headers)
    assert (response.status_code, _code(response)) == (status, code), response.text
    assert response.text.startswith(f"Code: {code}. DB::Exception: ")
    assert response.text.rstrip().endswith(")")


def test_a_huge_query_in_the_url_is_refused_too(sql: Sql) -> None:
    response = httpx.get(
        sql.url + "/",
        params={"query": "SELECT '" + "x" * QUERY_CAP + "'"},
        auth=("afr", sql.password),
    )
    assert (response.status_code, _code(response)) == (413, 229)


# --- limits and ingest ------------------------------------------------------------------------


def test_long_queries_stop_at_the_cap_while_ingest_goes_on(sql: Sql) -> None:
    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        long = [pool.submit(sql.post, LONG_QUERY) for _ in range(2)]
        wait_until(
            lambda: sql.health()["sql"]["running"] == 2,
            timeout_s=10,
            what="both long queries running",
            interval_s=0.01,
        )
        queued_at = time.monotonic()
        busy = sql.post("SELECT 1")  # the user's two slots are taken: it waits, then gives up
        assert time.monotonic() - queued_at >= QUEUE_WAIT_MS / 1000
        assert (busy.status_code, _code(busy)) == (503, 202)
        assert "queue_max_wait_ms=1000" in busy.text
        assert busy.headers["retry-after"] == "1"
        # Another user is not kept waiting behind the first one's share of the slots.
        team = SqlUserStore(sql.running.settings.keys_path).create("shop")
        other_user = sql.post("SELECT 1", auth=(team.user, team.password))
        assert other_user.text == "1\n"
        export_started = time.monotonic()
        trace_id = _export_trace(sql.running)  # acknowledged, or the SDK would have raised
        acknowledged_s = time.monotonic() - export_started
        assert not any(future.done() for future in long), "ingest waited for the queries"
        responses = [future.result() for future in long]
    elapsed_s = time.monotonic() - started
    for response in responses:
        assert (response.status_code, _code(response)) == (408, 159)
        assert "Timeout exceeded" in response.text
    assert TIME_CAP_S <= elapsed_s < TIME_CAP_S + 5
    assert acknowledged_s < TIME_CAP_S
    assert len(sql.running.run(trace_id)["spans"]) == 2
    assert sql.health()["sql"]["running"] == 0
    assert sql.health()["sql"]["serving"] is True
    assert sql.post("SELECT 1").text == "1\n"


def test_the_password_file_is_0600_and_generated_once(sql: Sql) -> None:
    path = sql.running.settings.data_dir / SQL_PASSWORD_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    assert ensure_sql_password(sql.running.settings.data_dir).get_secret_value() == sql.password
    assert path.read_text().strip() == sql.password
