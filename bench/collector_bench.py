"""Collector ingest: spans/s to durable, export latency, peak RSS, against a parse-only baseline.

The collector runs as ``afr up`` in its own process on the embedded store; this process is
the load generator: agent-like traces (9 spans each, 2-4 KB per span with JSON message
bodies), pre-encoded, sent over OTLP/gRPC on several concurrent streams. Figures:

- parse-only baseline: decoding the same requests and walking every span and attribute in
  Python, single-threaded, in this process (what any Python collector must at least pay);
- saturation: all streams as fast as acknowledgements return; spans/s acknowledged (=durable
  in the fsynced write-ahead log) and spans/s inserted into ClickHouse;
- half rate: the same load paced at half the saturation rate; p50/p99 export latency.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
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


def _text(rng: random.Random, size: int, secret_every_bytes: int = 0) -> str:
    """Agent-like prose; with ``secret_every_bytes`` an e-mail, phone or key that often."""
    out: list[str] = []
    length = since_secret = 0
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


def _trace(rng: random.Random, start_ns: int, secret_every_bytes: int = 0) -> list[trace_pb2.Span]:
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
        else:
            attributes.append(_kv("afr.note", _text(rng, body_size, secret_every_bytes)))
        status = (
            trace_pb2.Status(code=trace_pb2.Status.STATUS_CODE_ERROR, message="Error running tool")
            if kind == "function"
            else trace_pb2.Status()
        )
        spans.append(
            trace_pb2.Span(
                trace_id=trace_id,
                span_id=ids[index],
                parent_span_id=b"" if parent is None else ids[parent],
                name=name,
                kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
                start_time_unix_nano=start_ns + index * 1_000_000,
                end_time_unix_nano=start_ns + index * 1_000_000 + 500_000,
                attributes=attributes,
                status=status,
            )
        )
    return spans


def make_requests(count: int, seed: int = 7, secret_every_bytes: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    now = time.time_ns()
    resource = resource_pb2.Resource(attributes=[_kv("service.name", "bench-agent")])
    requests = []
    for _ in range(count):
        spans = [s for _ in range(TRACES_PER_REQUEST) for s in _trace(rng, now, secret_every_bytes)]
        request = trace_service_pb2.ExportTraceServiceRequest(
            resource_spans=[
                trace_pb2.ResourceSpans(
                    resource=resource,
                    scope_spans=[
                        trace_pb2.ScopeSpans(
                            scope=common_pb2.InstrumentationScope(name="afr.exporter"), spans=spans
                        )
                    ],
                )
            ]
        )
        requests.append(request.SerializeToString())
    return requests


def parse_only_spans_per_s(requests: list[bytes]) -> float:
    started = time.perf_counter()
    spans = 0
    for raw in requests:
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(raw)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    spans += 1
                    for kv in span.attributes:
                        kv.value.WhichOneof("value")
    return spans / (time.perf_counter() - started)


async def _send(
    requests: list[bytes], port: int, key: str, interval_s: float | None
) -> tuple[float, list[float]]:
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
        call = channel.unary_unary(EXPORT)
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
) -> tuple[float, float, float]:
    """In-process cost of redact + truncate on the secret-free bench corpus, on the realistic
    one (a secret every ~2 KB) and on a secret-dense one (a secret every ~30 bytes)."""
    from collector.decode import decode_protobuf, to_records
    from collector.processors.redact import Redactor
    from collector.processors.truncate import Truncator

    redactor, truncator = Redactor(b"bench-key"), Truncator()

    def mb_per_s(corpus: list[bytes]) -> float:
        batches = [to_records(decode_protobuf(raw), "bench", 1).records for raw in corpus]
        started = time.perf_counter()
        for records in batches:
            truncator(redactor(records))
        return sum(len(raw) for raw in corpus) / (time.perf_counter() - started) / 1e6

    clean, realistic = mb_per_s(requests), mb_per_s(realistic_requests)

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
    return clean, realistic, dense_size / (time.perf_counter() - started) / 1e6


def run_collector(
    requests: list[bytes], env_extra: dict[str, str], *, half_rate: bool
) -> dict[str, float]:
    spans_total = len(requests) * TRACES_PER_REQUEST * 9
    data_dir = Path(tempfile.mkdtemp(prefix="afr-bench-"))
    key = KeyStore(data_dir / "keys.sqlite").create("bench")
    grpc_port, http_port = 43170 + os.getpid() % 100, 43270 + os.getpid() % 100
    env = {**os.environ, "AFR_DATA_DIR": str(data_dir), **env_extra}
    command = [
        sys.executable,
        "-m",
        "afr.cli",
        "up",
        "--no-worker",
        "--grpc-port",
        str(grpc_port),
        "--http-port",
        str(http_port),
    ]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    figures: dict[str, float] = {}
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("  read API"):
                break
        warm = make_requests(4, seed=99)
        asyncio.run(_send(warm, grpc_port, key, None))
        warm_rows = 4 * TRACES_PER_REQUEST * 9

        elapsed, latencies = asyncio.run(_send(requests, grpc_port, key, None))
        figures["acknowledged_spans_per_s"] = spans_total / elapsed
        health = httpx.get(f"http://127.0.0.1:{http_port}/healthz", timeout=10).json()
        figures["backlog_rows_at_end_of_send"] = health["pending_rows"]
        drain = _wait_inserted(http_port, warm_rows + spans_total, 120)
        figures["inserted_spans_per_s"] = spans_total / (elapsed + drain)
        figures["saturation_p50_ms"] = statistics.median(latencies) * 1000
        figures["saturation_p99_ms"] = statistics.quantiles(latencies, n=100)[98] * 1000
        if half_rate:
            half = make_requests(len(requests) // 2, seed=11)
            interval_s = TRACES_PER_REQUEST * 9 / (figures["acknowledged_spans_per_s"] / 2)
            _, half_latencies = asyncio.run(_send(half, grpc_port, key, interval_s))
            figures["half_rate_p50_ms"] = statistics.median(half_latencies) * 1000
            figures["half_rate_p99_ms"] = statistics.quantiles(half_latencies, n=100)[98] * 1000
        figures["collector_peak_rss_mib"] = _peak_rss_mib(process.pid)
        figures["workers_peak_rss_mib"] = sum(
            _peak_rss_mib(child) for child in _children(process.pid)
        )
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        if process.stdout is not None:
            process.stdout.close()
    return figures


def main(requests_count: int = 300) -> dict[str, float]:
    requests = make_requests(requests_count)
    spans_total = requests_count * TRACES_PER_REQUEST * 9
    bytes_per_span = sum(len(r) for r in requests) / spans_total
    realistic = make_requests(requests_count, secret_every_bytes=REALISTIC_SECRET_EVERY_BYTES)
    baseline = parse_only_spans_per_s(requests)
    clean_mb_s, realistic_mb_s, dense_mb_s = redaction_mb_per_s(requests[:40], realistic[:40])
    on = run_collector(requests, {}, half_rate=True)
    on_realistic = run_collector(realistic, {}, half_rate=False)
    off = run_collector(requests, {"AFR_REDACTION_ENABLED": "false"}, half_rate=False)

    figures = {
        "spans": spans_total,
        "bytes_per_span": bytes_per_span,
        "parse_only_spans_per_s": baseline,
        "redact_truncate_mb_per_s": clean_mb_s,
        "redact_truncate_realistic_mb_per_s": realistic_mb_s,
        "redact_truncate_dense_mb_per_s": dense_mb_s,
        **{f"redaction_on_{k}": v for k, v in on.items()},
        **{f"redaction_on_realistic_{k}": v for k, v in on_realistic.items()},
        **{f"redaction_off_{k}": v for k, v in off.items()},
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "collector.json").write_text(json.dumps(figures, indent=2))
    ack_on, ack_off = on["acknowledged_spans_per_s"], off["acknowledged_spans_per_s"]
    print(
        f"collector bench ({spans_total} spans, {bytes_per_span:.0f} B/span, {STREAMS} gRPC streams, "
        f"{TRACES_PER_REQUEST * 9} spans/request; afr up with one ingest worker per CPU)"
    )
    print(f"  parse-only baseline (this process)   {baseline:10.0f} spans/s")
    print(
        f"  redact + truncate, in process        {clean_mb_s:10.0f} MB/s (secret-free corpus), "
        f"{realistic_mb_s:.0f} MB/s (a secret every ~2 KB), {dense_mb_s:.0f} MB/s (every ~30 bytes)"
    )
    print(
        f"  acknowledged, redaction on           {ack_on:10.0f} spans/s = {ack_on / baseline:.2f}x baseline; target >= 20,000"
    )
    ack_realistic = on_realistic["acknowledged_spans_per_s"]
    print(
        f"  acknowledged, redaction on, realistic {ack_realistic:9.0f} spans/s (a secret every ~2 KB; "
        f"{ack_realistic / ack_on:.2f}x the secret-free corpus)"
    )
    print(
        f"  acknowledged, redaction off          {ack_off:10.0f} spans/s (on/off = {ack_on / ack_off:.2f})"
    )
    print(
        f"  inserted into ClickHouse (on / off)  {on['inserted_spans_per_s']:10.0f} / {off['inserted_spans_per_s']:.0f} spans/s "
        f"(send + drain); rows waiting for insert when sending ended: {on['backlog_rows_at_end_of_send']:.0f}"
    )
    print(
        f"  export latency at saturation         p50 {on['saturation_p50_ms']:6.0f} ms  p99 {on['saturation_p99_ms']:6.0f} ms"
    )
    print(
        f"  export latency at half that rate     p50 {on['half_rate_p50_ms']:6.0f} ms  p99 {on['half_rate_p99_ms']:6.0f} ms; target p99 < 500 ms"
    )
    print(
        f"  peak RSS: collector {on['collector_peak_rss_mib']:.0f} MiB, ingest workers {on['workers_peak_rss_mib']:.0f} MiB in all"
    )
    return figures


if __name__ == "__main__":
    main()
