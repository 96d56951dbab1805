"""The SQL interface's pure parts: statement, setting and format policy, ClickHouse's error
shape and status mapping, the credential, and Native re-framing for protocol-versioned
clients (on bytes the engine wrote, captured here)."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from collector.auth import SqlUserStore
from collector.settings import CollectorSettings
from collector.sqlapi.credentials import (
    SQL_PASSWORD_FILE,
    Principal,
    SqlAuthenticator,
    ensure_sql_password,
)
from collector.sqlapi.errors import Code, SqlError, from_engine, http_status, render
from collector.sqlapi.formats import output_format
from collector.sqlapi.lexer import tokens
from collector.sqlapi.native import BLOCK_INFO, transcode
from collector.sqlapi.options import Limits, connection_settings, resolve_options
from collector.sqlapi.policy import check_statement, denied_functions, refuse_writes

DENIED = denied_functions(["file", "url", "remote", "numbers", "merge", "python", "newReader"])
LIMITS = Limits(
    max_execution_time_s=30,
    max_memory_bytes=1 << 30,
    max_result_bytes=1 << 28,
    max_result_rows=None,
    max_query_bytes=1 << 20,
)
KNOWN = frozenset(
    {
        "max_execution_time",
        "max_memory_usage",
        "max_result_bytes",
        "max_threads",
        "limit",
        "session_timezone",
        "readonly",
        "allow_ddl",
        "allow_experimental_eval_table_function",
        "format_schema",
        "output_format_json_quote_64bit_integers",
    }
)


def _refused(sql: str) -> SqlError:
    with pytest.raises(SqlError) as caught:
        check_statement(sql, DENIED)
    return caught.value


# --- statements -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1",
        "WITH 1 AS x\nSELECT x",
        "SHOW TABLES FROM afr",
        "DESCRIBE TABLE afr.otel_traces",
        "EXISTS TABLE afr.otel_traces",
        "EXPLAIN\nSELECT 1",
        "(SELECT 1) UNION ALL (SELECT 2)",
        "SELECT * FROM numbers(10)",
        "SELECT * FROM merge('afr', 'otel')",
        "SELECT 'file(/etc/passwd)', 'INTO OUTFILE', 'x; KILL'",
        "SELECT `file` FROM t",
        "SELECT 1;",
    ],
)
def test_read_statements_pass(sql: str) -> None:
    assert check_statement(sql, DENIED).format is None


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        ("INSERT INTO afr.otel_traces FORMAT Values", Code.READONLY),
        ("CREATE TABLE t (a UInt8) ENGINE = Memory", Code.READONLY),
        ("DROP TABLE afr.otel_traces", Code.READONLY),
        ("ALTER TABLE afr.otel_traces DELETE WHERE 1", Code.READONLY),
        ("SET max_threads = 1", Code.READONLY),
        ("KILL QUERY WHERE 1 ASYNC", Code.READONLY),
        ("SYSTEM FLUSH LOGS", Code.READONLY),
        ("USE afr", Code.READONLY),
        ("SELECT *\nFROM afr.t\nINTO OUTFILE 'x'", Code.READONLY),
        ("SELECT file('/etc/passwd')", Code.ACCESS_DENIED),
        ("SELECT FILE ('/etc/passwd')", Code.ACCESS_DENIED),
        ("SELECT `file`('/etc/passwd')", Code.ACCESS_DENIED),
        ("SELECT * FROM url('http://x', 'TSV', 'a String')", Code.ACCESS_DENIED),
        ("SELECT * FROM remote('h', system.one)", Code.ACCESS_DENIED),
        ("SELECT * FROM python(frame)", Code.ACCESS_DENIED),
        ("SELECT aiGenerate('say hi')", Code.ACCESS_DENIED),
        ("SELECT * FROM newReader()", Code.ACCESS_DENIED),
        ("SELECT 1; SELECT 2", Code.SYNTAX_ERROR),
        ("", Code.SYNTAX_ERROR),
        ("SELECT 'unterminated", Code.SYNTAX_ERROR),
    ],
)
def test_refused_statements(sql: str, code: Code) -> None:
    assert _refused(sql).code == code


def test_a_write_is_refused_early_from_its_first_word_and_nothing_is_allowed_early() -> None:
    with pytest.raises(SqlError) as caught:
        refuse_writes("INSERT INTO afr.otel_traces FORMAT Native")
    assert caught.value.code == Code.READONLY
    refuse_writes("SELECT 1")
    refuse_writes("")
    refuse_writes("'unterminated")  # the engine's parser will say what is wrong with it


def test_an_unknown_table_function_of_the_catalog_is_refused_and_a_known_safe_one_is_not() -> None:
    denied = denied_functions(["numbers", "someNewLakeReader"])
    assert "somenewlakereader" in denied
    assert "numbers" not in denied
    assert {"file", "url", "s3", "remote", "python"} <= denied


@pytest.mark.parametrize(
    ("sql", "fmt"),
    [
        ("SELECT 1\nFORMAT JSONEachRow", "JSONEachRow"),
        ("SELECT 1\nSETTINGS max_threads = 1\nFORMAT Native", "Native"),
        ("SELECT 1 FORMAT `JSON`;", "JSON"),
        ("SELECT format\nFROM t", None),
        ("SELECT format('{}', 1)", None),
        # A SETTINGS clause may follow; it hid the format, and an unserved one ran.
        ("SELECT 1\nFORMAT Template\nSETTINGS readonly = 1", "Template"),
        ("SELECT 1 FORMAT JSON SETTINGS max_threads = 1;", "JSON"),
        ("SELECT * FROM (SELECT 1 FORMAT JSON) FORMAT CSV", "CSV"),
    ],
)
def test_the_format_clause_is_found(sql: str, fmt: str | None) -> None:
    assert check_statement(sql, DENIED).format == fmt


def test_tokens_keep_quoted_text_whole_and_drop_comments() -> None:
    toks = tokens("SELECT 'a\\'b;', `c``d`, $$e'f$$ -- g(\n/* h /* i */ j */ {p:String}")
    assert [(t.kind, t.text) for t in toks] == [
        ("word", "SELECT"),
        ("string", "a'b;"),
        ("punct", ","),
        ("ident", "c`d"),
        ("punct", ","),
        ("string", "e'f"),
        ("param", "{p:String}"),
    ]


# --- settings -------------------------------------------------------------------------------


def _options(**params: str) -> dict[str, str]:
    resolved = resolve_options(list(params.items()), known_settings=KNOWN, limits=LIMITS)
    return resolved.settings


def test_params_transport_and_settings_are_sorted_apart() -> None:
    resolved = resolve_options(
        [
            ("param_x", "a&b=c"),
            ("database", "afr"),
            ("default_format", "Native"),
            ("client_protocol_version", "54460"),
            ("session_id", "s"),
            ("user", "afr"),
            ("password", "secret"),
            ("limit", "100"),
        ],
        known_settings=KNOWN,
        limits=LIMITS,
    )
    assert resolved.params == {"x": "a&b=c"}
    assert resolved.settings == {"limit": "100"}
    assert (resolved.database, resolved.default_format) == ("afr", "Native")
    assert resolved.client_protocol_version == 54460
    assert "secret" not in repr(resolved)


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"no_such_setting": "1"}, Code.UNKNOWN_SETTING),
        ({"readonly": "0"}, Code.READONLY),
        ({"allow_ddl": "1"}, Code.READONLY),
        ({"allow_experimental_eval_table_function": "1"}, Code.READONLY),
        ({"format_schema": "x.proto"}, Code.READONLY),
        ({"max_execution_time": "31"}, Code.READONLY),
        ({"max_execution_time": "0"}, Code.READONLY),
        ({"max_memory_usage": str((1 << 30) + 1)}, Code.READONLY),
        ({"max_result_bytes": "0"}, Code.READONLY),
        ({"max_query_size": str((1 << 20) + 1)}, Code.READONLY),
        ({"max_execution_time": "soon"}, Code.BAD_ARGUMENTS),
        # chDB percent-decodes its connection string before splitting it at '&'.
        ({"max_threads": "1&readonly=0"}, Code.BAD_ARGUMENTS),
        ({"max_threads": "1%26readonly%3D0"}, Code.BAD_ARGUMENTS),
        ({"max_threads": ""}, Code.BAD_ARGUMENTS),
        ({"database": "afr&readonly=0"}, Code.UNKNOWN_DATABASE),
        ({"client_protocol_version": "new"}, Code.BAD_ARGUMENTS),
    ],
)
def test_refused_settings(params: dict[str, str], code: Code) -> None:
    with pytest.raises(SqlError) as caught:
        _options(**params)
    assert caught.value.code == code


def test_a_limit_at_or_below_the_cap_is_honoured_and_ours_come_last() -> None:
    options = resolve_options(
        [("max_execution_time", "5"), ("max_threads", "2"), ("session_timezone", "Europe/Paris")],
        known_settings=KNOWN,
        limits=LIMITS,
    )
    settings = connection_settings(options, LIMITS, database="afr", query_bytes=1 << 20)
    assert settings[0] == ("max_threads", "2")
    assert dict(settings)["max_execution_time"] == "5"
    assert dict(settings)["max_memory_usage"] == str(1 << 30)
    assert dict(settings)["session_timezone"] == "Europe/Paris"
    assert settings[-1] == ("readonly", "1")
    assert _options(max_execution_time="30") == {"max_execution_time": "30"}


def test_defaults_are_the_caps_utc_and_the_store_database() -> None:
    options = resolve_options([], known_settings=KNOWN, limits=LIMITS)
    settings = dict(connection_settings(options, LIMITS, database="afr", query_bytes=1 << 20))
    assert settings["max_execution_time"] == "30"
    assert settings["max_result_bytes"] == str(1 << 28)
    assert settings["session_timezone"] == "UTC"
    assert settings["database"] == "afr"
    assert options.max_query_bytes == 1 << 20


def test_output_formats_are_case_insensitive_and_file_reading_ones_are_not_served() -> None:
    assert output_format("jsoneachrow").name == "JSONEachRow"
    assert output_format("Native").content_type == "application/octet-stream"
    assert output_format("TSV").content_type.startswith("text/tab-separated-values")
    for name in ("Template", "Protobuf", "CapnProto", "NoSuchFormat"):
        with pytest.raises(SqlError) as caught:
            output_format(name)
        assert caught.value.code == Code.UNKNOWN_FORMAT


def test_settings_refuse_the_sql_interface_on_a_clickhouse_server() -> None:
    with pytest.raises(ValidationError, match="point Grafana"):
        CollectorSettings(sql_port=0, clickhouse_url="http://localhost:8123/afr")
    assert CollectorSettings(sql_port=0).sql_port == 0


# --- errors ---------------------------------------------------------------------------------


def test_engine_errors_are_unnested_into_clickhouses_shape() -> None:
    error = from_engine(
        "Code: 164. DB::Exception: Code: 164. DB::Exception: Cannot modify 'max_threads' "
        "setting in readonly mode. (READONLY) (version 26.9.2.1). (READONLY)"
    )
    assert (error.code, error.name) == (164, "READONLY")
    assert error.message == "Cannot modify 'max_threads' setting in readonly mode"
    assert render(error, "26.9.2.1") == (
        b"Code: 164. DB::Exception: Cannot modify 'max_threads' setting in readonly mode. "
        b"(READONLY) (version 26.9.2.1)\n"
    )
    connect = from_engine(
        "Failed to create connection: Code: 27. DB::Exception: Cannot parse input. "
        "(CANNOT_PARSE_INPUT_ASSERTION_FAILED)"
    )
    assert (connect.code, connect.name) == (27, "CANNOT_PARSE_INPUT_ASSERTION_FAILED")
    assert from_engine("segfault").code == Code.UNKNOWN_EXCEPTION


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (Code.SYNTAX_ERROR, 400),
        (Code.UNKNOWN_QUERY_PARAMETER, 400),
        (Code.BAD_QUERY_PARAMETER, 400),
        (Code.UNKNOWN_TABLE, 404),
        (Code.UNKNOWN_DATABASE, 404),
        (Code.UNKNOWN_IDENTIFIER, 404),
        (Code.UNKNOWN_FUNCTION, 404),
        (Code.UNKNOWN_SETTING, 404),
        (Code.AUTHENTICATION_FAILED, 401),
        (Code.READONLY, 403),
        (Code.ACCESS_DENIED, 403),
        (Code.QUERY_IS_TOO_LARGE, 413),
        (Code.TIMEOUT_EXCEEDED, 408),
        (Code.TOO_MANY_SIMULTANEOUS_QUERIES, 503),
        (Code.NOT_IMPLEMENTED, 501),
        (241, 500),  # MEMORY_LIMIT_EXCEEDED
    ],
)
def test_status_mapping(code: int, status: int) -> None:
    assert http_status(code) == status


# --- credentials ----------------------------------------------------------------------------


def test_the_password_file_is_generated_once_with_mode_0600(tmp_path: Path) -> None:
    first = ensure_sql_password(tmp_path / "data")
    path = tmp_path / "data" / SQL_PASSWORD_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_sql_password(tmp_path / "data").get_secret_value() == first.get_secret_value()
    assert len(first.get_secret_value()) >= 32


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_the_three_ways_clickhouse_clients_authenticate() -> None:
    auth = SqlAuthenticator("afr", SecretStr("s3cret"))
    admin = Principal("afr", None)
    assert auth.check({"authorization": _basic("afr", "s3cret")}, {}) == admin
    assert auth.check({"x-clickhouse-user": "afr", "x-clickhouse-key": "s3cret"}, {}) == admin
    assert auth.check({}, {"user": "afr", "password": "s3cret"}) == admin


def test_a_project_credential_is_its_project_until_revoked(tmp_path: Path) -> None:
    users = SqlUserStore(tmp_path / "keys.sqlite")
    created = users.create("shop", "grafana_shop")
    auth = SqlAuthenticator("afr", SecretStr("s3cret"), users)
    as_shop = {"authorization": _basic("grafana_shop", created.password)}
    assert auth.check(as_shop, {}) == Principal("grafana_shop", "shop")
    with pytest.raises(SqlError):
        auth.check({"authorization": _basic("grafana_shop", "s3cret")}, {})
    with pytest.raises(SqlError):  # the admin's name never takes a project's password
        auth.check({"authorization": _basic("afr", created.password)}, {})
    fresh = SqlAuthenticator("afr", SecretStr("s3cret"), users)
    assert users.revoke("grafana_shop")
    with pytest.raises(SqlError):
        fresh.check(as_shop, {})
    with pytest.raises(ValueError, match="exists already"):
        users.create("shop", "grafana_shop")
    replaced = users.create("shop", "grafana_shop", replace=True)
    assert (
        fresh.check({"authorization": _basic("grafana_shop", replaced.password)}, {}).project
        == "shop"
    )
    assert users.project_for("grafana_shop", created.password) is None


@pytest.mark.parametrize("project", ["", "a b", "x'y", "é", "a" * 129])
def test_sql_credentials_are_for_plain_project_names(tmp_path: Path, project: str) -> None:
    with pytest.raises(ValueError, match="projects named"):
        SqlUserStore(tmp_path / "keys.sqlite").create(project)


@pytest.mark.parametrize(
    ("headers", "params"),
    [
        ({}, {}),
        ({"authorization": _basic("afr", "wrong")}, {}),
        ({"authorization": _basic("default", "s3cret")}, {}),
        ({"authorization": "Bearer s3cret"}, {}),
        ({"authorization": "Basic !!"}, {}),
        ({"authorization": _basic("afr", "s3cret")}, {"user": "afr"}),
        ({"x-clickhouse-user": "afr", "x-clickhouse-key": "s3cret"}, {"password": "s3cret"}),
    ],
)
def test_a_wrong_missing_or_mixed_credential_is_refused_without_echo(
    headers: dict[str, str], params: dict[str, str]
) -> None:
    auth = SqlAuthenticator("afr", SecretStr("s3cret"))
    with pytest.raises(SqlError) as caught:
        auth.check(headers, params)
    assert caught.value.code == Code.AUTHENTICATION_FAILED
    assert "s3cret" not in caught.value.message
    assert "wrong" not in caught.value.message


# --- Native re-framing ----------------------------------------------------------------------


def _s(text: str) -> bytes:
    return bytes([len(text)]) + text.encode()


U64_1 = (1).to_bytes(8, "little")
LC_GROUP = b"\x00\x06" + bytes(6) + (2).to_bytes(8, "little") + b"\x00"
# (name, type, the column's bytes) exactly as chDB 26.9 writes them (revision 0).
COLUMNS = [
    ("l", "LowCardinality(String)", U64_1 + LC_GROUP + b"\x01a" + U64_1 + b"\x01"),
    (
        "m",
        "Map(LowCardinality(String), String)",
        U64_1 + U64_1 + LC_GROUP + b"\x01k" + U64_1 + b"\x01" + b"\x01v",
    ),
    ("an", "Array(Nullable(UInt8))", (2).to_bytes(8, "little") + b"\x01\x00" + b"\x00\x01"),
    ("nu", "Nullable(UInt8)", b"\x00\x01"),
    ("s", "String", b"\x01x"),
    ("t", "Tuple(UInt8, String)", b"\x07\x01y"),
    ("d", "DateTime64(9, 'UTC')", bytes(8)),
    ("nt", "Tuple(a Nullable(String), `b c` Array(String))", b"\x00\x01z" + U64_1 + b"\x01w"),
]


def _block(flag: bytes, info: bytes) -> bytes:
    head = info + bytes([len(COLUMNS), 1])
    return head + b"".join(_s(name) + _s(kind) + flag + data for name, kind, data in COLUMNS)


def test_native_gets_block_info_and_the_serialization_flag_clickhouse_go_reads() -> None:
    revision0 = _block(b"", b"") * 2
    transcoded = transcode(revision0, 54460)
    assert transcoded.body == _block(b"\x00", BLOCK_INFO) * 2
    assert transcoded.rows == 2


def test_native_before_custom_serialization_gets_block_info_only() -> None:
    assert transcode(_block(b"", b""), 54405).body == _block(b"", BLOCK_INFO)


def test_native_for_revision_0_is_passed_through() -> None:
    assert transcode(b"not even parsed", 0).body == b"not even parsed"


def test_native_with_an_unknown_layout_is_refused_clearly() -> None:
    aggregate = b"\x01\x01" + _s("s") + _s("AggregateFunction(uniqExact, String)") + b"\x01" * 17
    with pytest.raises(SqlError) as caught:
        transcode(aggregate, 54460)
    assert caught.value.code == Code.NOT_IMPLEMENTED
    assert "finalizeAggregation" in caught.value.message
    with pytest.raises(SqlError):
        transcode(_block(b"", b"")[:-3], 54460)
