"""Every kind of secret in every OTLP placement, through a real collector, over every transport.

One scenario (module fixture), as a user runs afr:

1. ``afr up`` in its own process (DEBUG logging captured to a file) on a fresh data dir;
2. the same trace content (every kind of tests/secret_corpus.py planted in every placement an
   OTLP span has) delivered three times, as three runs: OTLP/gRPC, OTLP/HTTP protobuf and
   OTLP/HTTP JSON; plus undecodable bodies that carry a secret (issue item 6);
3. the collector stopped, and a new process started on the same data dir (with an ingest
   worker process this time), which receives the content a fourth time over gRPC;
4. the read API read (runs list, every run, every run's OTLP export), the collector stopped,
   every table of the store dumped (by a separate process), every file under the data dir
   and both processes' logs read.

The tests then look for every part of every secret, and every 12-character piece of one, in
each of those, also URL-, base64- and JSON-decoded; and check that a secret got the same
pseudonym in every delivery, transport and process.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tests.fakes import free_port
from tests.secret_corpus import Kind, LeakScanner, Secret, all_kinds
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

KINDS = all_kinds()
SECRETS: dict[str, Secret] = {
    name: kind.generate(random.Random(f"e2e:{name}")) for name, kind in KINDS.items()
}
DELIVERIES = ("grpc", "http_protobuf", "http_json", "grpc_after_restart")
ROOT_SPAN = bytes.fromhex("00000000000000a1")
LINK_TRACE = bytes.fromhex("0123456789abcdef0123456789abcdef")
_ROLES = ("agent", "llm", "tool")
_SPANS_PER_TRACE = 1 + len(_ROLES) * len(KINDS)
_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def trace_id(delivery: str) -> bytes:
    return hashlib.sha256(f"matrix-e2e:{delivery}".encode()).digest()[:16]


def span_id(kind_index: int, role: int) -> bytes:
    return (kind_index + 1).to_bytes(4, "big") + (role + 1).to_bytes(4, "big")


# --- the planted trace ------------------------------------------------------------------
def _kv(target: Any, key: str, value: Any) -> None:
    """Appends key=value to a repeated KeyValue field; value: str, int, bytes, list or dict."""
    entry: KeyValue = target.add()
    entry.key = key
    _any(entry.value, value)


def _any(target: AnyValue, value: Any) -> None:
    if isinstance(value, str):
        target.string_value = value
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, bytes):
        target.bytes_value = value
    elif isinstance(value, list):
        for item in value:
            _any(target.array_value.values.add(), item)
    elif isinstance(value, dict):
        for key, item in value.items():
            _kv(target.kvlist_value.values, key, item)
    else:
        raise TypeError(type(value))


def _json(document: Any) -> str:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


def _deep(value: Any, levels: int = 24) -> Any:
    for level in range(levels):
        value = {f"level{level}": value} if level % 2 else [value]
    return value


def _messages(value: Any) -> str:
    arguments = _json({"query": value, "limit": 5})
    return _json(
        [
            {"role": "user", "parts": [{"type": "text", "content": value}]},
            {
                "role": "assistant",
                "parts": [
                    {"type": "tool_call", "id": "call_1", "name": "lookup", "arguments": arguments}
                ],
            },
        ]
    )


def _plant(
    request: ExportTraceServiceRequest,
    index: int,
    kind: Kind,
    secret: Secret,
    tid: bytes,
    start_ns: int,
) -> None:
    text, value = secret.text, kind.json_value(secret)
    resource_spans = request.resource_spans.add()
    resource = resource_spans.resource.attributes
    _kv(resource, "service.name", text)
    _kv(resource, "owner", text)
    _kv(resource, text, "")
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = text
    scope_spans.scope.version = text
    _kv(scope_spans.scope.attributes, "note", text)
    _kv(scope_spans.scope.attributes, text, "")

    def span(role: int, name: str) -> Span:
        out: Span = scope_spans.spans.add()
        out.trace_id = tid
        out.span_id = span_id(index, role)
        out.parent_span_id = ROOT_SPAN
        out.name = name
        out.kind = Span.SPAN_KIND_INTERNAL
        out.start_time_unix_nano = start_ns + index * 1000 + role
        out.end_time_unix_nano = start_ns + index * 1000 + role + 500
        return out

    # An agent span: the agent name is derived from the span name, the error type from the
    # exception event.
    agent = span(0, f"invoke_agent {text}")
    agent.trace_state = f"vendor={text}"
    _kv(agent.attributes, "gen_ai.operation.name", "invoke_agent")
    agent.status.code = Status.STATUS_CODE_ERROR
    agent.status.message = text
    event = agent.events.add()
    event.time_unix_nano = start_ns + index * 1000 + 1
    event.name = "exception"
    _kv(event.attributes, "exception.type", text)
    _kv(event.attributes, "exception.message", text)
    _kv(event.attributes, text, "")

    # A model call: attribute values of every type, attribute keys, JSON bodies.
    llm = span(1, text)
    attributes = llm.attributes
    _kv(attributes, "afr.span.type", "response")
    _kv(attributes, "gen_ai.agent.name", text)
    _kv(attributes, "note", text)
    _kv(attributes, "tags", ["alpha", text])
    _kv(attributes, "context", {"note": text, text: "x"})
    _kv(attributes, "payload.text_bytes", text.encode())
    _kv(attributes, "payload.binary", b"\xff\xfe" + text.encode() + b"\x00\x01")
    _kv(attributes, text, "")
    _kv(attributes, "process.env", f"HOME=/home/agent\nCONTEXT={text}\nLANG=C")
    _kv(attributes, "gen_ai.input.messages", _messages(value))
    _kv(attributes, "gen_ai.output.messages", _json([{"role": "assistant", "content": value}]))
    _kv(attributes, "payload.keys", _json({"accounts": {str(value): {"balance": 12}}}))
    _kv(attributes, "payload.deep", _json(_deep(value)))
    _kv(attributes, "error.type", text)
    if kind.as_json_number:
        _kv(attributes, "payment.number", value)
    llm.status.code = Status.STATUS_CODE_ERROR
    llm.status.message = text
    log = llm.events.add()
    log.time_unix_nano = start_ns + index * 1000 + 2
    log.name = text
    _kv(log.attributes, "message", text)
    link = llm.links.add()
    link.trace_id = LINK_TRACE
    link.span_id = span_id(index, 0)
    link.trace_state = f"vendor={text}"
    _kv(link.attributes, "note", text)
    _kv(link.attributes, text, "")

    # A tool call: arguments and result become the run's Input/Output.
    tool = span(2, "execute_tool lookup")
    _kv(tool.attributes, "afr.span.type", "function")
    _kv(tool.attributes, "gen_ai.tool.name", "lookup")
    _kv(
        tool.attributes,
        "gen_ai.tool.call.arguments",
        _json({"query": value, "nested": _messages(value)}),
    )
    _kv(tool.attributes, "gen_ai.tool.call.result", _json({"result": value}))


def build_request(delivery: str, start_ns: int) -> ExportTraceServiceRequest:
    tid = trace_id(delivery)
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    _kv(resource_spans.resource.attributes, "service.name", "matrix-e2e")
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = "matrix"
    root = scope_spans.spans.add()
    root.trace_id, root.span_id = tid, ROOT_SPAN
    root.name = "invoke_workflow matrix"
    root.start_time_unix_nano = start_ns - 1
    root.end_time_unix_nano = start_ns + len(KINDS) * 1000 + 1000
    _kv(root.attributes, "afr.span.type", "workflow")
    for index, (name, kind) in enumerate(KINDS.items()):
        _plant(request, index, kind, SECRETS[name], tid, start_ns)
    return request


def _hex_ids(node: Any) -> Any:
    """protobuf's JSON mapping writes ids as base64; OTLP/JSON wants hex."""
    if isinstance(node, dict):
        return {
            key: base64.b64decode(value).hex()
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str)
            else _hex_ids(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(item) for item in node]
    return node


def otlp_json(request: ExportTraceServiceRequest) -> bytes:
    return json.dumps(_hex_ids(json_format.MessageToDict(request))).encode()


# --- the collector process -------------------------------------------------------------
_LAUNCH = (
    "import logging, sys\n"
    "logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,\n"
    "    format='%(asctime)s %(name)s %(levelname)s %(message)s')\n"
    "from afr.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@dataclass
class Afr:
    process: subprocess.Popen[bytes]
    grpc_port: int
    http_port: int
    key: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.key}"}


def start_afr(data_dir: Path, log_path: Path, workers: int, batch_interval_s: float = 0.2) -> Afr:
    grpc_port, http_port = free_port(), free_port()
    env = {
        **os.environ,
        "AFR_INGEST_WORKERS": str(workers),
        "AFR_BATCH_INTERVAL_S": str(batch_interval_s),
        "AFR_WAL_FSYNC": "false",
    }
    command = [sys.executable, "-c", _LAUNCH, "up", "--no-worker", "--data-dir", str(data_dir)]
    command += ["--grpc-port", str(grpc_port), "--http-port", str(http_port)]
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    afr = Afr(process, grpc_port, http_port)
    key_file = data_dir / "local-project.key"

    def up() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"afr up exited with {process.returncode}: see {log_path}")
        return key_file.exists() and httpx.get(afr.url + "/healthz", timeout=2).status_code == 200

    try:
        wait_until(
            up,
            timeout_s=60,
            what=f"afr up to answer /healthz (see {log_path})",
            interval_s=0.1,
            ignoring=(httpx.HTTPError,),
        )
    except AssertionError:
        stop_afr(afr)
        raise
    afr.key = key_file.read_text().strip()
    return afr


def stop_afr(afr: Afr) -> None:
    if afr.process.poll() is None:
        afr.process.send_signal(signal.SIGTERM)
        try:
            afr.process.wait(30)
        except subprocess.TimeoutExpired:
            afr.process.kill()
            afr.process.wait(10)


# --- deliveries --------------------------------------------------------------------------
def send(afr: Afr, delivery: str, request: ExportTraceServiceRequest) -> str:
    """Delivers; returns "ok" or what went wrong."""
    if delivery.startswith("grpc"):
        with grpc.insecure_channel(f"127.0.0.1:{afr.grpc_port}") as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
            try:
                response = stub.Export(
                    request, metadata=[("authorization", f"Bearer {afr.key}")], timeout=60
                )
            except grpc.RpcError as error:
                return f"gRPC {error.code()}: {error.details()}"
        rejected = response.partial_success.rejected_spans
        return "ok" if not rejected else f"{rejected} rejected"
    as_json = delivery == "http_json"
    answer = httpx.post(
        afr.url + "/v1/traces",
        content=otlp_json(request) if as_json else request.SerializeToString(),
        headers={
            **afr.headers,
            "content-type": "application/json" if as_json else "application/x-protobuf",
        },
        timeout=60,
    )
    return "ok" if answer.status_code == 200 and "rejected" not in answer.text else answer.text


def wait_for_run(afr: Afr, delivery: str, timeout_s: float = 30) -> dict[str, Any]:
    """The run once all its spans are stored, else what is stored by the timeout: the checks
    below report what is missing rather than stopping the module's fixture."""
    run_id = trace_id(delivery).hex()
    body: dict[str, Any] = {}

    def complete() -> bool:
        response = httpx.get(f"{afr.url}/api/v1/runs/{run_id}", headers=afr.headers, timeout=30)
        if response.status_code == 200:
            body.clear()
            body.update(response.json())
        return len(body.get("spans", [])) >= _SPANS_PER_TRACE

    with contextlib.suppress(AssertionError):
        wait_until(complete, timeout_s=timeout_s, what=f"run {run_id} stored", interval_s=0.2)
    return body


# --- issue item 6: undecodable bodies that carry a secret -------------------------------
_ECHO_PARTS = [KINDS[k].generate(random.Random(f"e2e:item6:{k}")) for k in ("openai_key", "email")]
_ECHO = " ".join(secret.text for secret in _ECHO_PARTS)
ECHO_SECRET = Secret(_ECHO, tuple(part for secret in _ECHO_PARTS for part in secret.parts))


def _attribute_body(value: dict[str, Any]) -> bytes:
    return json.dumps(
        {"resourceSpans": [{"resource": {"attributes": [{"key": "k", "value": value}]}}]}
    ).encode()


def _span_body(**fields: Any) -> bytes:
    span = {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "name": "x",
        "startTimeUnixNano": "1764000000000000000",
        "endTimeUnixNano": "1764000000000000001",
        **fields,
    }
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


def _invalid_utf8_protobuf() -> bytes:
    """A well-formed request whose string field holds invalid UTF-8 around the secret."""
    raw = ECHO_SECRET.text.encode()
    placeholder = "Q" * (len(raw) + 2)
    request = ExportTraceServiceRequest()
    _kv(request.resource_spans.add().resource.attributes, "k", placeholder)
    serialized: bytes = request.SerializeToString()
    return serialized.replace(placeholder.encode(), b"\xff\xfe" + raw)


UNDECODABLE_JSON = {
    "int_value": _attribute_body({"intValue": _ECHO}),
    "double_value": _attribute_body({"doubleValue": _ECHO}),
    "start_time": _span_body(startTimeUnixNano=_ECHO),
    "lone_surrogate": _attribute_body({"stringValue": _ECHO + "\ud800"}),
    "invalid_utf8": _attribute_body({"stringValue": "@@"}).replace(
        b"@@", _ECHO.encode() + b"\xff\xfe"
    ),
    "truncated": _attribute_body({"stringValue": _ECHO + " and more"})[:-25],
}


@dataclass
class Refusal:
    case: str
    status: str
    message: str


def refuse_undecodable(afr: Afr) -> list[Refusal]:
    out = []
    for case, body in UNDECODABLE_JSON.items():
        answer = httpx.post(
            afr.url + "/v1/traces",
            content=body,
            headers={**afr.headers, "content-type": "application/json"},
            timeout=30,
        )
        try:
            message = str(answer.json().get("message", answer.text))
        except ValueError:
            message = answer.text
        out.append(Refusal(f"http_json.{case}", str(answer.status_code), message))
    for case, body in {
        "garbage": b"\x0a\x7f" + ECHO_SECRET.text.encode(),
        "invalid_utf8": _invalid_utf8_protobuf(),
    }.items():
        answer = httpx.post(
            afr.url + "/v1/traces",
            content=body,
            headers={**afr.headers, "content-type": "application/x-protobuf"},
            timeout=30,
        )
        status = status_pb2.Status()
        try:
            status.ParseFromString(answer.content)
            message = status.message
        except Exception:
            message = answer.text
        out.append(Refusal(f"http_protobuf.{case}", str(answer.status_code), message))
    with grpc.insecure_channel(f"127.0.0.1:{afr.grpc_port}") as channel:
        export = channel.unary_unary(_EXPORT)
        try:
            export(
                _invalid_utf8_protobuf(),
                metadata=[("authorization", f"Bearer {afr.key}")],
                timeout=30,
            )
            out.append(Refusal("grpc.invalid_utf8", "OK", ""))
        except grpc.RpcError as error:
            out.append(Refusal("grpc.invalid_utf8", str(error.code()), error.details() or ""))
    # A span with a malformed id is refused on its own: the partial-success message neither.
    answer = httpx.post(
        afr.url + "/v1/traces",
        content=_span_body(spanId=_ECHO),
        headers={**afr.headers, "content-type": "application/json"},
        timeout=30,
    )
    out.append(Refusal("http_json.partial_success", str(answer.status_code), answer.text))
    return out


# --- the scenario ------------------------------------------------------------------------
_DUMP = (
    "import json, sys\n"
    "from collector.store.client import ClickHouseStore\n"
    "store = ClickHouseStore(sys.argv[1], 'afr')\n"
    'tables = store.query("SELECT database, name FROM system.tables WHERE engine NOT IN '
    "('View', 'MaterializedView') AND (database NOT IN ('system', 'INFORMATION_SCHEMA', "
    "'information_schema') OR name LIKE '%log%')\")\n"
    "out = {}\n"
    "for db, name in tables:\n"
    "    try:\n"
    "        rows = store.query(f'SELECT * APPLY(toString) FROM `{db}`.`{name}`')\n"
    "    except Exception as exc:\n"
    "        rows = [('unreadable', type(exc).__name__)]\n"
    "    columns = [r[0] for r in store.query('SELECT name FROM system.columns WHERE database = "
    "{d:String} AND table = {t:String} ORDER BY position', {'d': db, 't': name})]\n"
    "    out[f'{db}.{name}'] = {'columns': columns, 'rows': rows}\n"
    "store.close()\n"
    "json.dump(out, sys.stdout, default=repr)\n"
)


@dataclass
class Outcome:
    data_dir: Path
    deliveries: dict[str, str] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    api: dict[str, Any] = field(default_factory=dict)
    refusals: list[Refusal] = field(default_factory=list)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    """Every file under the data dir: while acknowledged spans wait in the write-ahead log,
    and at the end."""


def _snapshot(data_dir: Path, label: str) -> dict[str, bytes]:
    return {
        f"{label}: {path.relative_to(data_dir)}": path.read_bytes()
        for path in sorted(data_dir.rglob("*"))
        if path.is_file()
    }


def _read_api(afr: Afr, outcome: Outcome) -> None:
    runs = httpx.get(
        afr.url + "/api/v1/runs", headers=afr.headers, params={"limit": 200}, timeout=30
    )
    outcome.api["GET /api/v1/runs"] = runs.json()
    for delivery in DELIVERIES:
        run_id = trace_id(delivery).hex()
        for path in (f"/api/v1/runs/{run_id}", f"/api/v1/runs/{run_id}/otlp"):
            response = httpx.get(afr.url + path, headers=afr.headers, timeout=30)
            outcome.api[f"GET {path}"] = (
                response.json() if response.status_code == 200 else response.text
            )


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    base = tmp_path_factory.mktemp("matrix-e2e")
    data_dir = base / "data"
    result = Outcome(data_dir)
    start_ns = time.time_ns() - 60 * 1_000_000_000
    logs = {name: base / f"afr-{name}.log" for name in ("first", "restarted", "read")}
    afr = start_afr(data_dir, logs["first"], workers=0)
    try:
        for delivery in DELIVERIES[:3]:
            result.deliveries[delivery] = send(afr, delivery, build_request(delivery, start_ns))
        result.refusals = refuse_undecodable(afr)
        for delivery in DELIVERIES[:3]:
            result.runs[delivery] = wait_for_run(afr, delivery)
    finally:
        stop_afr(afr)
    # A new process on the same data dir, with an ingest worker process; it inserts only on
    # shutdown, so the acknowledged spans are seen in its write-ahead log on disk first.
    afr = start_afr(data_dir, logs["restarted"], workers=1, batch_interval_s=300)
    try:
        delivery = DELIVERIES[3]
        result.deliveries[delivery] = send(afr, delivery, build_request(delivery, start_ns))
        result.files.update(_snapshot(data_dir, "acknowledged, not yet inserted"))
    finally:
        stop_afr(afr)
    afr = start_afr(data_dir, logs["read"], workers=0)
    try:
        result.runs[DELIVERIES[3]] = wait_for_run(afr, DELIVERIES[3])
        _read_api(afr, result)
    finally:
        stop_afr(afr)
    result.files.update(_snapshot(data_dir, "at the end"))
    dump = subprocess.run(
        [sys.executable, "-c", _DUMP, f"chdb://{(data_dir / 'chdb').resolve()}"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert dump.returncode == 0, dump.stderr.decode(errors="replace")[-2000:]
    result.tables = json.loads(dump.stdout)
    result.logs = {name: path.read_text(errors="replace") for name, path in logs.items()}
    result.logs["store dump"] = dump.stderr.decode(errors="replace")
    return result


# --- the checks ----------------------------------------------------------------------------
SCANNER = LeakScanner({**SECRETS, "item6.echo": ECHO_SECRET})


def _report(leaks: dict[str, dict[str, set[str]]]) -> str:
    """{where: {kind: pieces}} -> one line per kind, with where it was found."""
    by_kind: dict[str, list[str]] = {}
    for where, found in leaks.items():
        for kind in found:
            by_kind.setdefault(kind, []).append(where)
    return "\n".join(
        f"  {kind}: {len(places)} places, e.g. {sorted(places)[:4]}"
        for kind, places in sorted(by_kind.items())
    )


def test_every_delivery_is_accepted_and_stored(outcome: Outcome) -> None:
    assert outcome.deliveries == dict.fromkeys(DELIVERIES, "ok")
    counts = {d: len(outcome.runs[d].get("spans", [])) for d in DELIVERIES}
    assert counts == dict.fromkeys(DELIVERIES, _SPANS_PER_TRACE)


def test_no_secret_in_the_read_api(outcome: Outcome) -> None:
    leaks: dict[str, dict[str, set[str]]] = {}
    for endpoint, body in outcome.api.items():
        if isinstance(body, dict) and "spans" in body:
            for span in body["spans"]:
                if not SCANNER.scan_all(span):
                    continue
                for name, value in span.items():
                    found = SCANNER.scan_all(value)
                    if found:
                        leaks[f"{endpoint} span {span['span_id']} .{name}"] = found
        else:
            found = SCANNER.scan_all(body)
            if found:
                leaks[endpoint] = found
    assert not leaks, "found in the read API:\n" + _report(leaks)


def test_no_secret_in_any_table(outcome: Outcome) -> None:
    assert any(name.endswith(".otel_traces") or "span" in name for name in outcome.tables)
    assert "afr.runs" in outcome.tables, "the run summary is scanned too"
    unread = [
        name
        for name, content in outcome.tables.items()
        if content["rows"] and content["rows"][0][0] == "unreadable"
    ]
    assert not unread, f"tables that could not be scanned: {unread}"
    leaks: dict[str, dict[str, set[str]]] = {}
    for table, content in outcome.tables.items():
        columns = content["columns"]
        for row in content["rows"]:
            for index, value in enumerate(row):
                column = columns[index] if index < len(columns) else str(index)
                found = SCANNER.scan_all(value)
                if found:
                    leaks.setdefault(f"{table}.{column}", {}).update(found)
    assert not leaks, "found in the store:\n" + _report(leaks)


def test_no_secret_in_any_file_under_the_data_dir(outcome: Outcome) -> None:
    wal = [raw for name, raw in outcome.files.items() if name.endswith(".wal") and raw]
    assert wal, "the acknowledged spans were seen in the write-ahead log"
    leaks: dict[str, dict[str, set[str]]] = {}
    for name, raw in outcome.files.items():
        found = SCANNER.scan_all(raw.decode("utf-8", "replace").splitlines())
        if found:
            leaks[name] = found
    assert not leaks, "found on disk:\n" + _report(leaks)


def test_no_secret_in_the_log(outcome: Outcome) -> None:
    assert "afr collector up" in outcome.logs["first"], "the log was captured"
    leaks: dict[str, dict[str, set[str]]] = {}
    for name, text in outcome.logs.items():
        for number, line in enumerate(text.splitlines(), 1):
            found = SCANNER.scan_all(line)
            if found:
                leaks[f"{name} log line {number}: {line[:80]!r}"] = found
    assert not leaks, "found in the log:\n" + _report(leaks)


def _comparable(span: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in span.items() if key != "trace_id"}


def test_same_secret_same_pseudonym_across_transports_and_restart(outcome: Outcome) -> None:
    """The same content, delivered four ways, is stored the same way: every secret got the
    same pseudonym over gRPC and HTTP, as protobuf and JSON, before and after a restart."""
    kind_of = {
        span_id(index, role).hex(): f"{name}/{_ROLES[role]}"
        for index, name in enumerate(KINDS)
        for role in range(len(_ROLES))
    }
    reference = {s["span_id"]: _comparable(s) for s in outcome.runs["grpc"].get("spans", [])}
    assert reference
    differences: dict[str, set[str]] = {}
    for delivery in DELIVERIES[1:]:
        for span in outcome.runs[delivery].get("spans", []):
            other = _comparable(span)
            expected = reference.get(span["span_id"], {})
            fields = sorted(k for k in other if other[k] != expected.get(k))
            if fields:
                where = kind_of.get(span["span_id"], span["span_id"])
                differences.setdefault(delivery, set()).add(f"{where}:{','.join(fields)}")
    assert not differences, "stored differently from the gRPC delivery:\n" + "\n".join(
        f"  {delivery}: {len(spans)} spans, e.g. {sorted(spans)[:6]}"
        for delivery, spans in differences.items()
    )


@pytest.mark.parametrize(
    "case",
    [
        *(f"http_json.{c}" for c in UNDECODABLE_JSON),
        "http_protobuf.garbage",
        "http_protobuf.invalid_utf8",
        "grpc.invalid_utf8",
        "http_json.partial_success",
    ],
)
def test_undecodable_bodies_are_refused_without_echoing_content(
    outcome: Outcome, case: str
) -> None:
    refusal = next(r for r in outcome.refusals if r.case == case)
    if case.endswith("partial_success"):
        assert refusal.status == "200"
    else:
        assert refusal.status in ("400", "StatusCode.INVALID_ARGUMENT"), refusal
        assert any(c.isdigit() for c in refusal.message), f"no position in {refusal.message!r}"
    leaked = LeakScanner({"echo": ECHO_SECRET}).scan_all(refusal.message)
    assert not leaked, f"the answer echoes the content: {refusal.message[:300]!r}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_PAGEOUT is Linux's")
def test_each_afr_up_gave_back_its_stores_start_up_pages_and_stored_every_span(
    outcome: Outcome,
) -> None:
    """Once serving, ``afr up`` gives back the pages of chDB's library only its start-up
    read (ADR 55); the three processes above then stored every delivery (the first test).
    How much goes depends on what else maps the library: the kernel leaves a page another
    process maps too (this test process has chDB loaded), so only that it ran is checked
    here; ``test_process_memory`` measures what it gives back in a process of its own."""
    for name in ("first", "restarted", "read"):
        released = re.search(
            r"gave back the embedded store's start-up pages: resident (\d+) -> (\d+) MiB",
            outcome.logs[name],
        )
        assert released is not None, f"afr up ({name}) logged no release"
        # (Not less by much here: other threads run on between the two readings.)
        assert int(released[2]) <= int(released[1]) + 32
