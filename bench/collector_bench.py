"""Collector ingest: spans/s to durable, CPU, stage costs, latency, RSS, against floors.

The collector runs as ``afr up`` in its own process on the embedded store; this process is
the load generator: agent traces of 9 spans (~3.3 KB per span as OpenInference's OpenAI
Agents instrumentation records them, the default and issue 19's corpus; ~2.8 KB as afr's
exporter does: ``AFR_BENCH_DIALECT=afr``), pre-encoded, sent over OTLP/gRPC on several
concurrent streams. Two corpora: the
secret-free one, and the realistic one (a fresh e-mail, phone number, key or IP about every
2 KB of text, new in every request). For each, in the same run and on the same requests:

- two floors, served by ``bench.ingest_sinks`` over the same transport: a parse-only sink
  (decode and count) and a walk sink (decode and touch every attribute in Python);
- ``afr up`` at saturation: spans/s acknowledged (= durable in the fsynced write-ahead log)
  and inserted, CPU seconds per 1k spans (collector process and ingest workers), each
  stage's µs per span measured inside the workers (``/healthz``), export latency, peak RSS;
- the same ``afr up`` of the baseline version (``BASELINE_REF``, or
  ``AFR_BENCH_BASELINE_REF``) from a git worktree, so "x times today" is measured, not
  remembered;

then the secret-free corpus at half the saturation rate (p50/p99 export latency), redaction
off, a stability run on the realistic corpus (``AFR_BENCH_STABILITY_S``, default 300 s, in
30 s windows, each with the collector's and the workers' CPU per span, which tell a store
slowing down from a machine slowing down, and the peak RSS so far; 0 skips it), and
redaction MB/s in process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from collector.auth import KeyStore

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
TRACES_PER_REQUEST = 56  # 504 spans: the size of an OTel SDK batch
STREAMS = 6
REALISTIC_SECRET_EVERY_BYTES = 2048
RESULTS = Path(__file__).parent / "results"
# The code before issue 19 (ingest speed on real agent content): the same-run baseline.
BASELINE_REF = "b52997d"
# The traces the bench sends: "openinference" (OpenInference's OpenAI Agents
# instrumentation, as issue 19 measured: each model call's messages whole as JSON and again
# flattened, the conversation repeated call by call) or "afr" (afr's exporter).
DIALECT = os.environ.get("AFR_BENCH_DIALECT", "openinference")

_WORDS = [
    "refund",
    "order",
    "customer",
    "charged",
    "twice",
    "duplicate",
    "amount",
    "please",
    "process",
    "the",
    "payment",
    "card",
]


_KEY_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _email(rng: random.Random, domain: str = "-mail.example") -> str:
    return f"{rng.choice(_WORDS)}.{rng.randrange(10**4)}@{rng.choice(_WORDS)}{domain}"


def _api_key(rng: random.Random, length: int = 40) -> str:
    return "sk-proj-" + "".join(rng.choice(_KEY_ALPHABET) for _ in range(length))


def _card(rng: random.Random) -> str:
    """A Luhn-valid 16-digit card number (4-4-4-4), made up at run time."""
    payload = "4" + "".join(rng.choice("0123456789") for _ in range(14))
    total = 0
    for index, char in enumerate(reversed(payload)):
        value = int(char) * (2 if index % 2 == 0 else 1)
        total += value - 9 if value > 9 else value
    digits = payload + str((10 - total % 10) % 10)
    return " ".join(digits[i : i + 4] for i in range(0, 16, 4))


def _personal(rng: random.Random) -> str:
    """An e-mail address, a phone number or an API key, made up at run time."""
    choice = rng.randrange(3)
    if choice == 0:
        return _email(rng)
    if choice == 1:
        return f"+1 415-{rng.randrange(200, 999)}-{rng.randrange(10**4):04d}"
    return _api_key(rng)


def _dense_text(rng: random.Random, groups: int = 20) -> str:
    """Three secrets (an e-mail, a card, a key) every ~100 bytes: one every ~30 bytes."""
    return "".join(
        f"mail {_email(rng, '.example')} card {_card(rng)} key {_api_key(rng, 26)} "
        for _ in range(groups)
    )


def _text(rng: random.Random, size: int, secret_every_bytes: int = 0, phase: int = 0) -> str:
    """Agent-like prose; with ``secret_every_bytes`` an e-mail, phone or key that often, the
    first ``phase`` bytes sooner (0: a text shorter than that holds none)."""
    out: list[str] = []
    length, since_secret = 0, phase
    while length < size:
        word = rng.choice(_WORDS)
        if secret_every_bytes and since_secret >= secret_every_bytes:
            word, since_secret = _personal(rng), 0
        out.append(word)
        length += len(word) + 1
        since_secret += len(word) + 1
    return " ".join(out)


def _kv(key: str, value: Any) -> common_pb2.KeyValue:
    if isinstance(value, bool):
        return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(bool_value=value))
    if isinstance(value, int):
        return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(int_value=value))
    return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=str(value)))


_VALIDATION_REPORT = (
    "Invalid JSON input for tool refund_order: 2 validation errors for refund_order_args\n"
    "amount\n"
    "  Input should be a valid number, unable to parse string as a number "
    "[type=float_parsing, input_value='{amount}', input_type=str]\n"
    "    For further information visit https://errors.pydantic.dev/2.11/v/float_parsing\n"
    "order.id\n"
    "  Field required [type=missing, input_value={{'amount': '{amount}'}}, input_type=dict]"
)


def _tool_error(rng: random.Random) -> str:
    """The SDK's error data of a failed tool call, one of the three ways a failure cause's
    shape is derived (collector/processors/signature.py) in turn: a validation report,
    arguments rejected without one, a raised error holding values."""
    kind = rng.randrange(3)
    if kind == 0:
        error = _VALIDATION_REPORT.format(amount=f"{rng.randrange(100)}.OO")
    elif kind == 1:
        error = "Invalid JSON input for tool refund_order"
    else:
        order, day = rng.randrange(10**4), rng.randrange(1, 29)
        error = f"no order A-{order} for customer '{_email(rng)}' since 2026-11-{day:02d}"
    return json.dumps({"tool_name": "refund_order", "error": error})


def _trace(
    rng: random.Random, start_ns: int, secret_every_bytes: int = 0, failure_data: bool = False
) -> list[trace_pb2.Span]:
    trace_id = rng.randbytes(16)
    ids = [rng.randbytes(8) for _ in range(9)]
    shape = [
        ("invoke_workflow refund-desk", "workflow", None, {}),
        ("invoke_agent Triage Agent", "agent", 0, {"gen_ai.agent.name": "Triage Agent"}),
        ("guardrail abuse_screen", "guardrail", 1, {"afr.guardrail.name": "abuse_screen"}),
        ("chat gpt-4.1-mini", "response", 1, {"gen_ai.request.model": "gpt-4.1-mini"}),
        (
            "handoff Triage Agent -> Refund Agent",
            "handoff",
            1,
            {"afr.handoff.to_agent": "Refund Agent"},
        ),
        ("invoke_agent Refund Agent", "agent", 0, {"gen_ai.agent.name": "Refund Agent"}),
        ("chat gpt-4.1-mini", "response", 5, {"gen_ai.request.model": "gpt-4.1-mini"}),
        ("execute_tool refund_order", "function", 5, {"gen_ai.tool.name": "refund_order"}),
        ("chat gpt-4.1-mini", "response", 5, {"gen_ai.request.model": "gpt-4.1-mini"}),
    ]
    spans = []
    for index, (name, kind, parent, extra) in enumerate(shape):
        attributes = [
            _kv("afr.span.type", kind),
            _kv("afr.sdk.span_id", "span_" + ids[index].hex() + "00000000"),
            _kv("afr.sdk.trace_id", "trace_" + trace_id.hex()),
            *(_kv(k, v) for k, v in extra.items()),
        ]
        body_size = rng.randint(1500, 3000)
        if kind == "response":
            messages = [
                {
                    "role": "user",
                    "parts": [
                        {"type": "text", "content": _text(rng, body_size, secret_every_bytes)}
                    ],
                }
            ]
            output = [
                {"role": "assistant", "parts": [{"type": "text", "content": _text(rng, 400)}]}
            ]
            attributes += [
                _kv("gen_ai.operation.name", "chat"),
                _kv("gen_ai.input.messages", json.dumps(messages)),
                _kv("gen_ai.output.messages", json.dumps(output)),
                _kv("gen_ai.usage.input_tokens", body_size // 4),
                _kv("gen_ai.usage.output_tokens", 100),
            ]
        elif kind == "function":
            attributes += [
                _kv("gen_ai.operation.name", "execute_tool"),
                _kv(
                    "gen_ai.tool.call.arguments",
                    json.dumps(
                        {
                            "order_id": "A-1001",
                            "amount": "12.OO",
                            "note": _text(rng, body_size, secret_every_bytes),
                        }
                    ),
                ),
                _kv("gen_ai.tool.call.result", json.dumps({"error": _text(rng, 300)})),
            ]
            if failure_data:
                attributes.append(_kv("afr.error.data", _tool_error(rng)))
        else:
            attributes.append(_kv("afr.note", _text(rng, body_size, secret_every_bytes)))
        error = "Error running tool" if kind == "function" else ""
        spans.append(_span(trace_id, ids, index, parent, name, start_ns, attributes, error))
    return spans


def _span(
    trace_id: bytes,
    ids: list[bytes],
    index: int,
    parent: int | None,
    name: str,
    start_ns: int,
    attributes: list[common_pb2.KeyValue],
    error: str,
) -> trace_pb2.Span:
    """Span ``index`` of a trace (1 ms apart, 0.5 ms long), failed with ``error`` if any."""
    return trace_pb2.Span(
        trace_id=trace_id,
        span_id=ids[index],
        parent_span_id=b"" if parent is None else ids[parent],
        name=name,
        kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start_ns + index * 1_000_000,
        end_time_unix_nano=start_ns + index * 1_000_000 + 500_000,
        attributes=attributes,
        status=trace_pb2.Status(code=trace_pb2.Status.STATUS_CODE_ERROR, message=error)
        if error
        else trace_pb2.Status(),
    )


_TRIAGE_INSTRUCTIONS = (
    "You are the triage agent of an online shop. Route refund requests to the Refund Agent."
)
_REFUND_INSTRUCTIONS = (
    "You are the refund agent. Call refund_order with the order id and the amount as a "
    "number, then tell the customer the outcome."
)
_REFUND_PARAMETERS = {
    "properties": {
        "order_id": {"description": "The order to refund, e.g. A-1001.", "type": "string"},
        "amount": {"description": "The amount to refund.", "type": "number"},
        "note": {"description": "What the customer said.", "type": "string"},
    },
    "required": ["order_id", "amount", "note"],
    "title": "refund_order_args",
    "type": "object",
    "additionalProperties": False,
}
_HANDOFF_TOOL = {
    "name": "transfer_to_refund_agent",
    "parameters": {"additionalProperties": False, "type": "object", "properties": {}},
    "strict": True,
    "type": "function",
    "description": "Handoff to the Refund Agent agent to handle the request.",
}
_REFUND_TOOL = {
    "name": "refund_order",
    "parameters": _REFUND_PARAMETERS,
    "strict": True,
    "type": "function",
    "description": "Refund an amount on an order.",
}


def _response_value(
    number: int, instructions: str, tool: dict[str, Any], output: list[dict[str, Any]]
) -> str:
    """The Responses API object OpenInference stores whole as an LLM span's ``output.value``."""
    return json.dumps(
        {
            "id": f"resp_{number}",
            "created_at": 1764000000.0 + number,
            "error": None,
            "incomplete_details": None,
            "instructions": instructions,
            "metadata": {},
            "model": "gpt-4.1-mini",
            "object": "response",
            "output": output,
            "parallel_tool_calls": True,
            "temperature": None,
            "tool_choice": "auto",
            "tools": [tool],
            "top_p": None,
            "max_output_tokens": None,
            "previous_response_id": None,
            "reasoning": None,
            "service_tier": None,
            "status": "completed",
            "text": {"format": {"type": "text"}, "verbosity": None},
            "truncation": None,
            "usage": {
                "input_tokens": 346,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 60,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 406,
            },
            "user": None,
        },
        separators=(",", ":"),
    )


def _llm_attributes(
    number: int,
    instructions: str,
    tool: dict[str, Any],
    history: list[dict[str, Any]],
    output: list[dict[str, Any]],
) -> list[common_pb2.KeyValue]:
    """An OpenInference LLM span: the input items and the response whole as JSON, and every
    message flattened again into ``llm.input_messages.<i>.message.*``."""
    attributes = [
        _kv("openinference.span.kind", "LLM"),
        _kv("llm.system", "openai"),
        _kv("llm.model_name", "gpt-4.1-mini"),
        _kv("llm.token_count.prompt", 346),
        _kv("llm.token_count.completion", 60),
        _kv("llm.token_count.total", 406),
        _kv(
            "llm.invocation_parameters",
            json.dumps(
                {"model": "gpt-4.1-mini", "tool_choice": "auto", "instructions": instructions}
            ),
        ),
        _kv("llm.tools.0.tool.json_schema", json.dumps({"type": "function", "function": tool})),
        _kv("input.mime_type", "application/json"),
        _kv("input.value", json.dumps(history)),
        _kv("output.mime_type", "application/json"),
        _kv("output.value", _response_value(number, instructions, tool, output)),
        _kv("llm.input_messages.0.message.role", "system"),
        _kv("llm.input_messages.0.message.content", instructions),
    ]
    for index, item in enumerate(history, start=1):
        prefix = f"llm.input_messages.{index}.message"
        if item.get("type") == "function_call":
            attributes += [
                _kv(f"{prefix}.role", "assistant"),
                _kv(f"{prefix}.tool_calls.0.tool_call.id", item["call_id"]),
                _kv(f"{prefix}.tool_calls.0.tool_call.function.name", item["name"]),
                _kv(f"{prefix}.tool_calls.0.tool_call.function.arguments", item["arguments"]),
            ]
        elif item.get("type") == "function_call_output":
            attributes += [
                _kv(f"{prefix}.role", "tool"),
                _kv(f"{prefix}.tool_call_id", item["call_id"]),
                _kv(f"{prefix}.content", item["output"]),
            ]
        else:
            attributes += [
                _kv(f"{prefix}.role", item["role"]),
                _kv(f"{prefix}.content", item["content"]),
            ]
    for index, item in enumerate(output):
        prefix = f"llm.output_messages.{index}.message"
        if item["type"] == "function_call":
            attributes += [
                _kv(f"{prefix}.role", "assistant"),
                _kv(f"{prefix}.tool_calls.0.tool_call.id", item["call_id"]),
                _kv(f"{prefix}.tool_calls.0.tool_call.function.name", item["name"]),
                _kv(f"{prefix}.tool_calls.0.tool_call.function.arguments", item["arguments"]),
            ]
        else:
            text = item["content"][0]["text"]
            attributes += [_kv(f"{prefix}.role", "assistant"), _kv(f"{prefix}.content", text)]
    return attributes


def _function_call(
    name: str, label: str, arguments: str, span_id: bytes, output: str
) -> tuple[dict[str, str], dict[str, str]]:
    """A Responses API function call item (``call_<label>_<span id>``) and its output's."""
    call = {
        "arguments": arguments,
        "call_id": f"call_{label}_{span_id.hex()}",
        "name": name,
        "type": "function_call",
        "id": "fc_" + span_id.hex(),
        "status": "completed",
    }
    return call, {"call_id": call["call_id"], "output": output, "type": "function_call_output"}


def _openinference_trace(
    rng: random.Random, start_ns: int, secret_every_bytes: int = 0
) -> list[trace_pb2.Span]:
    """The same refund story as ``_trace`` as OpenInference's OpenAI Agents instrumentation
    records it (tests/data/dialects/openinference.json): each model call's input items and
    response whole as JSON, its messages flattened again, the conversation growing call
    by call, so the customer's message (fresh items in it) is in three spans twice."""
    trace_id = rng.randbytes(16)
    ids = [rng.randbytes(8) for _ in range(9)]
    # A fresh item every ~2 KB of text whatever the text's length: each starts at a random
    # point of that period.
    every = secret_every_bytes
    message = _text(rng, rng.randint(1000, 2400), every, rng.randrange(every) if every else 0)
    note = _text(rng, rng.randint(700, 1500), every, rng.randrange(every) if every else 0)
    answer = _text(rng, 400)
    user = {"content": message, "role": "user"}
    handoff_call, handoff_output = _function_call(
        "transfer_to_refund_agent", "handoff", "{}", ids[3], '{"assistant": "Refund Agent"}'
    )
    refund_call, refund_output = _function_call(
        "refund_order",
        "refund",
        json.dumps({"order_id": "A-1001", "amount": "12.OO", "note": note}),
        ids[6],
        "An error occurred while running the tool. Please try again.",
    )
    final = {
        "id": "msg_" + ids[8].hex(),
        "content": [{"annotations": [], "text": answer, "type": "output_text"}],
        "role": "assistant",
        "status": "completed",
        "type": "message",
    }
    agent = "AGENT"
    shape: list[tuple[str, int | None, list[common_pb2.KeyValue]]] = [
        ("refund-desk", None, [_kv("openinference.span.kind", agent)]),
        (
            "Triage Agent",
            0,
            [
                _kv("openinference.span.kind", agent),
                _kv("agent.name", "Triage Agent"),
                _kv("graph.node.id", "Triage Agent"),
            ],
        ),
        ("abuse_screen", 1, [_kv("openinference.span.kind", "GUARDRAIL")]),
        (
            "response",
            1,
            _llm_attributes(3, _TRIAGE_INSTRUCTIONS, _HANDOFF_TOOL, [user], [handoff_call]),
        ),
        (
            "handoff to Refund Agent",
            1,
            [
                _kv("openinference.span.kind", "TOOL"),
                _kv("input.value", "Triage Agent"),
                _kv("output.value", "Refund Agent"),
            ],
        ),
        (
            "Refund Agent",
            0,
            [
                _kv("openinference.span.kind", agent),
                _kv("agent.name", "Refund Agent"),
                _kv("graph.node.id", "Refund Agent"),
                _kv("graph.node.parent_id", "Triage Agent"),
            ],
        ),
        (
            "response",
            5,
            _llm_attributes(
                6,
                _REFUND_INSTRUCTIONS,
                _REFUND_TOOL,
                [user, handoff_call, handoff_output],
                [refund_call],
            ),
        ),
        (
            "refund_order",
            5,
            [
                _kv("openinference.span.kind", "TOOL"),
                _kv("tool.name", "refund_order"),
                _kv("tool.description", "Refund an amount on an order."),
                _kv("tool.parameters", json.dumps(_REFUND_PARAMETERS)),
                _kv("input.mime_type", "application/json"),
                _kv("input.value", refund_call["arguments"]),
                _kv("output.value", refund_output["output"]),
            ],
        ),
        (
            "response",
            5,
            _llm_attributes(
                8,
                _REFUND_INSTRUCTIONS,
                _REFUND_TOOL,
                [user, handoff_call, handoff_output, refund_call, refund_output],
                [final],
            ),
        ),
    ]
    return [
        _span(
            trace_id,
            ids,
            index,
            parent,
            name,
            start_ns,
            attributes,
            "Error running tool (non-fatal)" if name == "refund_order" else "",
        )
        for index, (name, parent, attributes) in enumerate(shape)
    ]


_SCOPES = {"afr": "afr.exporter", "openinference": "openinference.instrumentation.openai_agents"}


def make_requests(
    count: int,
    seed: int = 7,
    secret_every_bytes: int = 0,
    failures: bool = False,
    dialect: str = "afr",
) -> list[bytes]:
    """``count`` export requests of ``TRACES_PER_REQUEST`` traces; every trace's tool call
    fails (``Error running tool``), with the SDK's error data when ``failures``. ``dialect``:
    ``afr`` (afr's exporter) or ``openinference`` (``_openinference_trace``)."""
    rng = random.Random(seed)
    now = time.time_ns()
    resource = resource_pb2.Resource(attributes=[_kv("service.name", "bench-agent")])
    requests = []
    for _ in range(count):
        spans = [
            s
            for _ in range(TRACES_PER_REQUEST)
            for s in (
                _openinference_trace(rng, now, secret_every_bytes)
                if dialect == "openinference"
                else _trace(rng, now, secret_every_bytes, failures)
            )
        ]
        request = trace_service_pb2.ExportTraceServiceRequest(
            resource_spans=[
                trace_pb2.ResourceSpans(
                    resource=resource,
                    scope_spans=[
                        trace_pb2.ScopeSpans(
                            scope=common_pb2.InstrumentationScope(name=_SCOPES[dialect]),
                            spans=spans,
                        )
                    ],
                )
            ]
        )
        requests.append(request.SerializeToString())
    return requests


async def _send(
    requests: list[bytes], port: int, key: str, interval_s: float | None, method: str = EXPORT
) -> tuple[float, list[float]]:
    """``requests`` over ``STREAMS`` gRPC channels (``method``: the OTLP export called), paced
    at ``interval_s`` per request when given: (elapsed s, each export's latency)."""
    latencies: list[float] = []
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for raw in requests:
        queue.put_nowait(raw)
    metadata = (("authorization", f"Bearer {key}"),)
    options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
    channels = [
        grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) for _ in range(STREAMS)
    ]
    started = time.perf_counter()

    async def stream(channel: grpc.aio.Channel, offset: float) -> None:
        call = channel.unary_unary(method)
        next_at = started + offset
        while not queue.empty():
            raw = queue.get_nowait()
            if interval_s is not None:
                delay = next_at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                next_at += interval_s * STREAMS
            sent = time.perf_counter()
            await call(raw, metadata=metadata, timeout=30)
            latencies.append(time.perf_counter() - sent)

    step = interval_s or 0
    await asyncio.gather(*(stream(ch, n * step) for n, ch in enumerate(channels)))
    elapsed = time.perf_counter() - started
    for channel in channels:
        await channel.close()
    return elapsed, latencies


def _peak_rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return 0.0
    return 0.0


def _children(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return children


def _wait_inserted(http_port: int, rows: int, timeout_s: float) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        health = httpx.get(f"http://127.0.0.1:{http_port}/healthz", timeout=10).json()
        if health["inserted_rows"] >= rows:
            return time.perf_counter() - started
        time.sleep(0.05)
    raise TimeoutError(f"collector inserted fewer than {rows} rows in {timeout_s} s")


def redaction_mb_per_s(
    requests: list[bytes], realistic_requests: list[bytes]
) -> tuple[float, float, float, float]:
    """In-process cost of redact + truncate on the secret-free bench corpus, on the realistic
    one (a secret every ~2 KB), on the realistic one with text beyond ASCII (an em dash in
    each text of 200 characters or more, as model output has them: ADR 50) and on a
    secret-dense one (a secret every ~30 bytes)."""
    from collector.decode import decode_protobuf, to_records
    from collector.processors.redact import Redactor
    from collector.processors.truncate import Truncator

    redactor, truncator = Redactor(b"bench-key"), Truncator()

    def mb_per_s(corpus: list[bytes], wide: bool = False) -> float:
        batches = [to_records(decode_protobuf(raw), "bench", 1).records for raw in corpus]
        if wide:
            for record in (record for records in batches for record in records):
                record.span_attributes = {
                    key: value.replace(" please", " please \u2014", 1)
                    if len(value) >= 200
                    else value
                    for key, value in record.span_attributes.items()
                }
        started = time.perf_counter()
        for records in batches:
            truncator(redactor(records))
        return sum(len(raw) for raw in corpus) / (time.perf_counter() - started) / 1e6

    clean, realistic = mb_per_s(requests), mb_per_s(realistic_requests)
    wide = mb_per_s(realistic_requests, wide=True)

    dense_text = _dense_text(random.Random(7))
    dense = [to_records(decode_protobuf(raw), "bench", 1).records for raw in requests[:10]]
    dense_size = 0
    for records in dense:
        for record in records:
            record.span_attributes["afr.note"] = dense_text
            dense_size += sum(len(v) for v in record.span_attributes.values())
    started = time.perf_counter()
    for records in dense:
        truncator(redactor(records))
    return clean, realistic, wide, dense_size / (time.perf_counter() - started) / 1e6


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds the processes have used so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def _ports() -> tuple[int, int]:
    return 43170 + os.getpid() % 100, 43270 + os.getpid() % 100


def run_collector(
    requests: list[bytes],
    env_extra: dict[str, str],
    *,
    half_rate: bool,
    source: Path | None = None,
) -> dict[str, float]:
    """``afr up`` from this checkout, or from ``source`` (another version's tree), fed
    ``requests`` at saturation (and at half that rate when asked)."""
    spans_total = len(requests) * TRACES_PER_REQUEST * 9
    figures: dict[str, float] = {}
    with _collector(env_extra, source) as (process, key, grpc_port, http_port):
        warm = make_requests(4, seed=99, dialect=DIALECT)
        asyncio.run(_send(warm, grpc_port, key, None))
        warm_rows = 4 * TRACES_PER_REQUEST * 9

        tree = [process.pid, *_children(process.pid)]
        cpu_before = _cpu_s([process.pid]), _cpu_s(tree[1:])
        elapsed, latencies = asyncio.run(_send(requests, grpc_port, key, None))
        figures["acknowledged_spans_per_s"] = spans_total / elapsed
        health = httpx.get(f"http://127.0.0.1:{http_port}/healthz", timeout=10).json()
        figures["backlog_rows_at_end_of_send"] = health["pending_rows"]
        drain = _wait_inserted(http_port, warm_rows + spans_total, 180)
        cpu_after = _cpu_s([process.pid]), _cpu_s(tree[1:])
        # Per 1k spans, over send and drain: the collector process (receivers, log, inserts
        # into the embedded store) and the ingest workers.
        figures["collector_cpu_s_per_1k"] = (cpu_after[0] - cpu_before[0]) / spans_total * 1000
        figures["workers_cpu_s_per_1k"] = (cpu_after[1] - cpu_before[1]) / spans_total * 1000
        figures["inserted_spans_per_s"] = spans_total / (elapsed + drain)
        figures["saturation_p50_ms"] = statistics.median(latencies) * 1000
        figures["saturation_p99_ms"] = statistics.quantiles(latencies, n=100)[98] * 1000
        health = httpx.get(f"http://127.0.0.1:{http_port}/healthz", timeout=10).json()
        for stage, us in health["pipeline"].get("stage_us_per_span", {}).items():
            figures[f"stage_{stage}_us"] = us
        if "insert_us_per_row" in health:
            figures["stage_insert_us"] = health["insert_us_per_row"]
        if half_rate:
            half = make_requests(len(requests) // 2, seed=11, dialect=DIALECT)
            interval_s = TRACES_PER_REQUEST * 9 / (figures["acknowledged_spans_per_s"] / 2)
            _, half_latencies = asyncio.run(_send(half, grpc_port, key, interval_s))
            figures["half_rate_p50_ms"] = statistics.median(half_latencies) * 1000
            figures["half_rate_p99_ms"] = statistics.quantiles(half_latencies, n=100)[98] * 1000
        figures["collector_peak_rss_mib"] = _peak_rss_mib(process.pid)
        figures["workers_peak_rss_mib"] = sum(
            _peak_rss_mib(child) for child in _children(process.pid)
        )
    return figures


def run_sink(requests: list[bytes], mode: str) -> float:
    """Spans/s a ``bench.ingest_sinks`` floor takes the same requests at."""
    port = _ports()[0]
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.ingest_sinks", mode, str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        process.stdout.readline()  # serving
        asyncio.run(_send(requests[:4], port, "sink", None))
        elapsed, _ = asyncio.run(_send(requests, port, "sink", None))
    finally:
        process.kill()
        process.wait(30)
        if process.stdout is not None:
            process.stdout.close()
    return len(requests) * TRACES_PER_REQUEST * 9 / elapsed


def run_stability(seconds: float, window_s: float = 30.0) -> list[dict[str, float]]:
    """Each window of a long run on the realistic corpus (a pool of distinct requests sent
    over and over; fresh content until the pool wraps): acknowledged spans/s, and the CPU µs
    per span of the collector process (receivers, log, inserts, ClickHouse's merges) and of
    the ingest workers (the per-span Python work alone). The workers' figure moves with the
    machine, not with the store: a throughput that falls while it stays level is the store
    (merges growing with the data) slowing down; one that falls with it is the machine."""
    pool = make_requests(
        120, seed=77, secret_every_bytes=REALISTIC_SECRET_EVERY_BYTES, dialect=DIALECT
    )
    windows: list[dict[str, float]] = []
    with _collector({}) as (process, key, grpc_port, _http_port):
        workers = _children(process.pid)
        began = time.perf_counter()
        while time.perf_counter() - began < seconds:
            window_began, sent = time.perf_counter(), 0
            collector_cpu, workers_cpu = _cpu_s([process.pid]), _cpu_s(workers)
            while time.perf_counter() - window_began < window_s:
                asyncio.run(_send(pool[:24], grpc_port, key, None))
                pool = pool[24:] + pool[:24]
                sent += 24 * TRACES_PER_REQUEST * 9
            windows.append(
                {
                    "spans_per_s": sent / (time.perf_counter() - window_began),
                    "collector_cpu_us_per_span": (_cpu_s([process.pid]) - collector_cpu)
                    / sent
                    * 1e6,
                    "workers_cpu_us_per_span": (_cpu_s(workers) - workers_cpu) / sent * 1e6,
                    # Peak RSS so far: the merges grow with the data.
                    "collector_peak_rss_mib": _peak_rss_mib(process.pid),
                    "workers_peak_rss_mib": sum(_peak_rss_mib(w) for w in workers),
                }
            )
    return windows


@contextlib.contextmanager
def _collector(
    env_extra: dict[str, str], source: Path | None = None
) -> Iterator[tuple[subprocess.Popen[str], str, int, int]]:
    """``afr up`` on a fresh data directory, from this checkout or from ``source`` (another
    version's tree), serving: (process, an API key, gRPC port, HTTP port); stopped after."""
    data_dir = Path(tempfile.mkdtemp(prefix="afr-bench-"))
    key = KeyStore(data_dir / "keys.sqlite").create("bench")
    grpc_port, http_port = _ports()
    env = {**os.environ, "AFR_DATA_DIR": str(data_dir), **env_extra}
    if source is not None:  # its own exporter too (the installed one is this checkout's)
        env["PYTHONPATH"] = os.pathsep.join((str(source), str(source / "exporter" / "src")))
    command = [
        sys.executable, "-m", "afr.cli", "up", "--no-worker",
        "--grpc-port", str(grpc_port), "--http-port", str(http_port),
    ]  # fmt: skip
    errors = (data_dir / "stderr.log").open("w")
    process = subprocess.Popen(
        command, env=env, cwd=source, stdout=subprocess.PIPE, stderr=errors, text=True
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("  read API"):
                break
        else:
            process.wait(60)
            tail = (data_dir / "stderr.log").read_text()[-2000:]
            raise RuntimeError(f"afr up exited ({process.returncode}) before serving:\n{tail}")
        yield process, key, grpc_port, http_port
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        if process.stdout is not None:
            process.stdout.close()
        errors.close()
        shutil.rmtree(data_dir, ignore_errors=True)


@contextlib.contextmanager
def _baseline_tree(ref: str) -> Iterator[Path | None]:
    """A checkout of ``ref`` (the code before the change being measured) to run in the same
    bench run; None where git or the ref is not there."""
    root = Path(__file__).resolve().parent.parent
    git = shutil.which("git") or "git"
    tree = Path(tempfile.mkdtemp(prefix="afr-bench-baseline-")) / "tree"
    added = subprocess.run(
        [git, "-C", str(root), "worktree", "add", "--detach", str(tree), ref],
        capture_output=True,
        check=False,
    )
    try:
        yield tree if added.returncode == 0 else None
    finally:
        if added.returncode == 0:
            subprocess.run(
                [git, "-C", str(root), "worktree", "remove", "--force", str(tree)],
                capture_output=True,
                check=False,
            )
        shutil.rmtree(tree.parent, ignore_errors=True)


def main(requests_count: int = 300) -> dict[str, Any]:
    requests = make_requests(requests_count, dialect=DIALECT)
    spans_total = requests_count * TRACES_PER_REQUEST * 9
    bytes_per_span = sum(len(r) for r in requests) / spans_total
    realistic = make_requests(
        requests_count, secret_every_bytes=REALISTIC_SECRET_EVERY_BYTES, dialect=DIALECT
    )
    clean_mb_s, realistic_mb_s, wide_mb_s, dense_mb_s = redaction_mb_per_s(
        requests[:40], realistic[:40]
    )
    ref = os.environ.get("AFR_BENCH_BASELINE_REF", BASELINE_REF)
    figures: dict[str, Any] = {
        "spans": spans_total,
        "dialect": DIALECT,
        "bytes_per_span": bytes_per_span,
        "baseline_ref": ref,
        "redact_truncate_mb_per_s": clean_mb_s,
        "redact_truncate_realistic_mb_per_s": realistic_mb_s,
        "redact_truncate_realistic_wide_mb_per_s": wide_mb_s,
        "redact_truncate_dense_mb_per_s": dense_mb_s,
    }
    with _baseline_tree(ref) as baseline:
        for corpus, corpus_requests in (("secret_free", requests), ("realistic", realistic)):
            figures[f"{corpus}_parse_sink_spans_per_s"] = run_sink(corpus_requests, "parse")
            figures[f"{corpus}_walk_sink_spans_per_s"] = run_sink(corpus_requests, "walk")
            now = run_collector(corpus_requests, {}, half_rate=corpus == "secret_free")
            figures.update({f"{corpus}_{k}": v for k, v in now.items()})
            if baseline is not None:
                before = run_collector(corpus_requests, {}, half_rate=False, source=baseline)
                figures.update({f"{corpus}_baseline_{k}": v for k, v in before.items()})
    off = run_collector(requests, {"AFR_REDACTION_ENABLED": "false"}, half_rate=False)
    figures.update({f"redaction_off_{k}": v for k, v in off.items()})
    stability_s = float(os.environ.get("AFR_BENCH_STABILITY_S", "300"))
    figures["stability_windows"] = run_stability(stability_s) if stability_s else []
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "collector.json").write_text(json.dumps(figures, indent=2))
    _report(figures)
    return figures


def _report(f: dict[str, Any]) -> None:
    print(
        f"collector bench ({f['spans']} spans per corpus of {f['dialect']} traces, "
        f"{f['bytes_per_span']:.0f} B/span, "
        f"{STREAMS} gRPC streams, {TRACES_PER_REQUEST * 9} spans/request; afr up with one "
        f"ingest worker per CPU; baseline: the code at {f['baseline_ref']}, same run)"
    )
    print(
        f"  redact + truncate, in process: {f['redact_truncate_mb_per_s']:.0f} MB/s secret-free, "
        f"{f['redact_truncate_realistic_mb_per_s']:.0f} MB/s realistic (a secret every ~2 KB), "
        f"{f['redact_truncate_realistic_wide_mb_per_s']:.0f} MB/s realistic beyond ASCII (an "
        "em dash in each long text), "
        f"{f['redact_truncate_dense_mb_per_s']:.0f} MB/s dense (every ~30 bytes)"
    )
    for corpus in ("secret_free", "realistic"):
        ack = f[f"{corpus}_acknowledged_spans_per_s"]
        parse, walk = f[f"{corpus}_parse_sink_spans_per_s"], f[f"{corpus}_walk_sink_spans_per_s"]
        before = f.get(f"{corpus}_baseline_acknowledged_spans_per_s")
        versus = f"; {ack / before:.2f}x the baseline's {before:,.0f}" if before else ""
        print(
            f"  {corpus}: {ack:,.0f} spans/s acknowledged durable{versus}; "
            f"{ack / parse:.3f}x the parse-only sink ({parse:,.0f}), "
            f"{ack / walk:.2f}x the walk sink ({walk:,.0f})"
        )
        cpu = f[f"{corpus}_collector_cpu_s_per_1k"] + f[f"{corpus}_workers_cpu_s_per_1k"]
        stages = ", ".join(
            f"{key.removeprefix(f'{corpus}_stage_').removesuffix('_us')} {value:.0f}"
            for key, value in f.items()
            if key.startswith(f"{corpus}_stage_")
        )
        print(
            f"    CPU {cpu:.3f} s per 1k spans (collector {f[f'{corpus}_collector_cpu_s_per_1k']:.3f}, "
            f"workers {f[f'{corpus}_workers_cpu_s_per_1k']:.3f}); µs per span: {stages}"
        )
        print(
            f"    export p50 {f[f'{corpus}_saturation_p50_ms']:.0f} / p99 "
            f"{f[f'{corpus}_saturation_p99_ms']:.0f} ms at saturation; peak RSS collector "
            f"{f[f'{corpus}_collector_peak_rss_mib']:.0f} MiB + workers "
            f"{f[f'{corpus}_workers_peak_rss_mib']:.0f} MiB"
        )
    print(
        f"  secret-free at half rate: export p50 {f['secret_free_half_rate_p50_ms']:.0f} / p99 "
        f"{f['secret_free_half_rate_p99_ms']:.0f} ms (target p99 < 500 ms)"
    )
    print(
        f"  redaction off (secret-free): {f['redaction_off_acknowledged_spans_per_s']:,.0f} spans/s"
    )
    windows = f["stability_windows"]
    if windows:
        print(f"  stability, realistic, {len(windows)} windows of 30 s: {_stability(windows)}")


def _stability(windows: list[dict[str, float]]) -> str:
    """The windows' spread, and their last third against their first: throughput, and the
    CPU per span of the collector process and of the workers (see ``run_stability``)."""

    def trend(values: list[float]) -> float:
        third = max(1, len(values) // 3)
        first, last = values[:third], values[-third:]
        return (sum(last) / len(last)) / (sum(first) / len(first))

    def spread(key: str) -> str:
        values = [w[key] for w in windows]
        return f"{min(values):,.0f}-{max(values):,.0f} (last third / first {trend(values):.2f}x)"

    # Throughput in the machine's own speed of the window: spans/s times the workers' CPU
    # per span (the same Python work on every window, so it moves with the machine alone).
    # On a shared machine whose speed drifts (0.84x and 1.18x in two rounds of one day) this
    # stays near 1.00x unless the collector's store or loop slows down. A worker slowing
    # down by itself would hide here: its CPU per span, printed beside, shows that.
    adjusted = trend([w["spans_per_s"] * w["workers_cpu_us_per_span"] for w in windows])
    last = windows[-1]
    return (
        f"{spread('spans_per_s')} spans/s; in the machine's speed of each window "
        f"{adjusted:.2f}x; CPU µs per span: collector "
        f"{spread('collector_cpu_us_per_span')}, workers {spread('workers_cpu_us_per_span')}; "
        f"peak RSS collector {last['collector_peak_rss_mib']:.0f} MiB + workers "
        f"{last['workers_peak_rss_mib']:.0f} MiB"
    )


if __name__ == "__main__":
    main()
