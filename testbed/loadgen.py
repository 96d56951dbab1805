"""The load generator: N concurrent OTLP senders with an exact ledger of every span.

Each sender is a thread with its own gRPC channel and HTTP connection; it takes the next
``Request`` of the plan and sends it until it settles, as an OTLP exporter should
(OTLP specification, "Retryable response codes"):

- acknowledged (OK / 200): its spans are acknowledged, less ``partial_success`` rejects;
- refused for good (INVALID_ARGUMENT/400, RESOURCE_EXHAUSTED/413 without a retry hint,
  UNAUTHENTICATED/401, 415, INTERNAL/500): its spans are refused, never resent;
- refused for now (UNAVAILABLE or RESOURCE_EXHAUSTED with ``RetryInfo``, 429/502/503/504
  with ``Retry-After``): resent after the hinted delay, counted as retried;
- no answer (collector down, connection reset, timeout): resent with backoff, counted, and
  its spans are "in doubt": they may be stored without ever having been acknowledged.

No transparent retries anywhere below (gRPC retries off, one HTTP attempt per send), so the
ledger counts every span that went on the wire.
"""

from __future__ import annotations

import enum
import gzip
import json
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx
from google.rpc import error_details_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from testbed.traces import (
    SPANS_PER_TRACE,
    TraceSet,
    encode_json,
    encode_protobuf,
    span_key,
    to_request,
)

__all__ = [
    "Auth",
    "LoadGenerator",
    "Outcome",
    "Request",
    "Transport",
    "plan_good",
]

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
RETRY_INFO_KEY = "google.rpc.retryinfo-bin"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_RETRYABLE_HTTP = {429, 502, 503, 504}
_MAX_BACKOFF_S = 1.0
_MAX_ANOMALIES = 50


class Transport(enum.StrEnum):
    GRPC = "grpc"
    HTTP_PROTOBUF = "http/protobuf"
    HTTP_JSON = "http/json"


class Auth(enum.Enum):
    KEY = "key"
    WRONG_KEY = "wrong key"
    NO_KEY = "no key"


class Outcome(enum.StrEnum):
    ACKED = "acknowledged"
    INVALID = "invalid"  # INVALID_ARGUMENT / 400
    TOO_LARGE = "too large"  # RESOURCE_EXHAUSTED without RetryInfo / 413
    UNAUTHENTICATED = "unauthenticated"  # UNAUTHENTICATED / 401
    UNSUPPORTED = "unsupported media type"  # 415
    SERVER_ERROR = "server error"  # INTERNAL, UNKNOWN, 500, ...: a defect, never expected
    RETRY_LATER = "retry later"  # UNAVAILABLE / RESOURCE_EXHAUSTED + RetryInfo, 503 ...
    NO_ANSWER = "no answer"  # connection refused or reset: collector down or dying
    TIMEOUT = "timeout"


SETTLED = frozenset(
    {
        Outcome.ACKED,
        Outcome.INVALID,
        Outcome.TOO_LARGE,
        Outcome.UNAUTHENTICATED,
        Outcome.UNSUPPORTED,
        Outcome.SERVER_ERROR,
    }
)


@dataclass(frozen=True)
class Request:
    """One export, as bytes on the wire, and what it carries."""

    kind: str
    """"good", or the name of a hostile input."""
    transport: Transport
    body: bytes
    spans: tuple[int, ...]
    """Keys of the well-formed spans in it (testbed.traces)."""
    bad_spans: int = 0
    """Spans with malformed ids: rejected one by one (partial success), the rest kept."""
    loose_spans: tuple[int, ...] = ()
    """Spans the collector may store rewritten (bounded, redacted) or reject one by one: an
    acknowledgement rejecting ``bad_spans`` acknowledges them, one rejecting all of them
    too refuses them."""
    auth: Auth = Auth.KEY
    content_type: str | None = None
    compress: bool = False
    """HTTP: ``body`` is gzip and says so; gRPC: sent with gzip compression."""
    expect: frozenset[Outcome] = frozenset({Outcome.ACKED})
    exact: bool = True
    """Acknowledged spans must read back equal to their spec, field by field; else they
    must only be there (inputs the collector is allowed to bound or rewrite)."""
    duplicate: bool = False
    """A deliberate second delivery of spans sent before."""


@dataclass
class Ledger:
    """Exact accounting, per span key and per request."""

    sent: set[int] = field(default_factory=set)
    span_sends: int = 0
    attempts: int = 0
    acknowledged: set[int] = field(default_factory=set)
    acknowledged_inexact: set[int] = field(default_factory=set)
    refused: dict[str, set[int]] = field(default_factory=dict)
    refused_requests: Counter[str] = field(default_factory=Counter)
    retried_spans: int = 0
    retry_later_answers: int = 0
    retry_wait_s: float = 0.0
    resent_spans: int = 0
    no_answers: int = 0
    timeouts: int = 0
    in_doubt: set[int] = field(default_factory=set)
    abandoned: set[int] = field(default_factory=set)
    duplicate_span_sends: int = 0
    rejected_spans: int = 0
    inputs: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    anomalies: list[str] = field(default_factory=list)
    anomaly_count: int = 0
    started_at: float = 0.0
    last_ack_at: float = 0.0

    @property
    def refused_spans(self) -> set[int]:
        return set().union(*self.refused.values()) if self.refused else set()

    def anomaly(self, text: str) -> None:
        self.anomaly_count += 1
        if len(self.anomalies) < _MAX_ANOMALIES:
            self.anomalies.append(text)


@dataclass(frozen=True)
class Answer:
    outcome: Outcome
    rejected: int = 0
    retry_after_s: float | None = None
    detail: str = ""


def plan_good(
    traces: TraceSet,
    trace_numbers: Iterable[int],
    *,
    traces_per_request: int,
    transports: Sequence[Transport],
    overlap_spans: int = 0,
    duplicate_every: int = 0,
) -> list[Request]:
    """Requests carrying every span of ``trace_numbers`` once, in windows of
    ``traces_per_request`` traces; transports in turn. ``overlap_spans``: each window also
    carries the last spans of the one before (a trace may so be split across requests and
    delivered twice); ``duplicate_every``: every n-th request is delivered again, later, on
    the next transport."""
    keys = [span_key(n, p) for n in trace_numbers for p in range(SPANS_PER_TRACE)]
    window = traces_per_request * SPANS_PER_TRACE
    requests: list[Request] = []
    start = 0
    while start < len(keys):
        begin = max(0, start - overlap_spans)
        chunk = keys[begin : start + window]
        transport = transports[len(requests) % len(transports)]
        requests.append(_good(traces, chunk, transport, duplicate=begin < start))
        start += window
    if duplicate_every:
        copies = []
        for index in range(0, len(requests), duplicate_every):
            original = requests[index]
            transport = transports[(index + 1) % len(transports)]
            copies.append((index, _good(traces, original.spans, transport, duplicate=True)))
        # Each copy goes a few requests after its original: sometimes while it is in flight.
        for offset, (index, copy) in enumerate(copies):
            requests.insert(min(len(requests), index + offset + 3), copy)
    return requests


def _good(
    traces: TraceSet, keys: Sequence[int], transport: Transport, *, duplicate: bool
) -> Request:
    specs = traces.spans(keys)
    if transport is Transport.HTTP_JSON:
        body = encode_json(specs)
    else:
        body = encode_protobuf(to_request(specs))
    return Request("good", transport, body, tuple(keys), duplicate=duplicate)


class LoadGenerator:
    """Sends ``requests`` with ``senders`` threads; ``start``, then ``wait`` for the ledger."""

    def __init__(
        self,
        requests: Sequence[Request],
        *,
        grpc_port: int,
        http_port: int,
        key: str,
        senders: int,
        deadline_s: float,
        timeout_s: float = 30.0,
    ) -> None:
        self._queue: deque[Request] = deque(requests)
        self._grpc_target = f"127.0.0.1:{grpc_port}"
        self._http_url = f"http://127.0.0.1:{http_port}/v1/traces"
        self._key = key
        self._senders = senders
        self._deadline_s = deadline_s
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._deadline = 0.0
        self.ledger = Ledger()

    def start(self) -> LoadGenerator:
        self.ledger.started_at = time.monotonic()
        self._deadline = self.ledger.started_at + self._deadline_s
        for number in range(self._senders):
            thread = threading.Thread(target=self._sender, name=f"testbed-sender-{number}")
            thread.daemon = True
            thread.start()
            self._threads.append(thread)
        return self

    def acknowledged(self) -> int:
        with self._lock:
            return len(self.ledger.acknowledged)

    @property
    def done(self) -> bool:
        return not any(thread.is_alive() for thread in self._threads)

    def wait(self, timeout_s: float | None = None) -> Ledger:
        """Joins the senders (stopping them if ``timeout_s`` passes: the rest is abandoned)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for thread in self._threads:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(remaining)
        if not self.done:
            self.stop()
        with self._lock:
            for request in self._queue:  # never sent: as unsettled as the abandoned
                self.ledger.abandoned.update(request.spans, request.loose_spans)
            self._queue.clear()
        return self.ledger

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(self._timeout_s + 5)

    # --- one sender ----------------------------------------------------------------------
    def _sender(self) -> None:
        channel = grpc.insecure_channel(
            self._grpc_target,
            options=[
                ("grpc.max_send_message_length", 256 * 1024 * 1024),
                ("grpc.max_receive_message_length", 16 * 1024 * 1024),
                ("grpc.enable_retries", 0),
                # Back within 100-500 ms of a restart, not grpc's default of up to 120 s.
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.min_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 500),
            ],
        )
        export = channel.unary_unary(EXPORT)
        client = httpx.Client(timeout=httpx.Timeout(self._timeout_s, connect=5.0))
        try:
            while not self._stop.is_set():
                with self._lock:
                    if not self._queue:
                        return
                    request = self._queue.popleft()
                self._settle(request, export, client)
        finally:
            client.close()
            channel.close()

    def _settle(self, request: Request, export: Any, client: httpx.Client) -> None:
        ledger = self.ledger
        backoff_s = 0.05
        previous: Outcome | None = None
        while True:
            if self._stop.is_set() or time.monotonic() > self._deadline:
                with self._lock:
                    ledger.abandoned.update(request.spans, request.loose_spans)
                    ledger.outcomes[f"{request.kind}: abandoned"] += 1
                return
            with self._lock:
                ledger.attempts += 1
                ledger.span_sends += len(request.spans) + len(request.loose_spans)
                if previous is None:
                    if request.kind != "good":
                        ledger.inputs[request.kind] += 1
                    if request.duplicate:
                        ledger.duplicate_span_sends += sum(
                            1 for key in request.spans if key in ledger.sent
                        )
                    ledger.sent.update(request.spans, request.loose_spans)
                elif previous is Outcome.RETRY_LATER:
                    ledger.retried_spans += len(request.spans)
                else:
                    ledger.resent_spans += len(request.spans)
            if request.transport is Transport.GRPC:
                answer = self._send_grpc(request, export)
            else:
                answer = self._send_http(request, client)
            if self._record(request, answer):
                return
            previous = answer.outcome
            if answer.outcome is Outcome.RETRY_LATER and answer.retry_after_s is not None:
                wait_s = answer.retry_after_s
                with self._lock:
                    ledger.retry_wait_s += wait_s
            else:
                wait_s = backoff_s
                backoff_s = min(_MAX_BACKOFF_S, backoff_s * 2)
            self._stop.wait(wait_s)

    def _record(self, request: Request, answer: Answer) -> bool:
        """Books ``answer``; True when the request is settled."""
        ledger = self.ledger
        with self._lock:
            if answer.outcome not in SETTLED:
                if answer.outcome is Outcome.RETRY_LATER:
                    ledger.retry_later_answers += 1
                else:
                    ledger.in_doubt.update(request.spans, request.loose_spans)
                    if answer.outcome is Outcome.TIMEOUT:
                        ledger.timeouts += 1
                    else:
                        ledger.no_answers += 1
                return False
            ledger.outcomes[f"{request.kind}: {answer.outcome}"] += 1
            if answer.outcome not in request.expect:
                ledger.anomaly(
                    f"{request.kind} over {request.transport}: {answer.outcome} "
                    f"({answer.detail[:200]}), expected {sorted(request.expect)}"
                )
            if answer.outcome is Outcome.ACKED:
                self._acknowledge(request, answer)
            elif answer.outcome is Outcome.SERVER_ERROR:
                # Not a refusal the client can reason about: whatever it carried is in doubt.
                ledger.in_doubt.update(request.spans, request.loose_spans)
                ledger.refused_requests[str(answer.outcome)] += 1
            else:
                ledger.refused.setdefault(str(answer.outcome), set()).update(
                    request.spans, request.loose_spans
                )
                ledger.refused_requests[str(answer.outcome)] += 1
            return True

    def _acknowledge(self, request: Request, answer: Answer) -> None:
        ledger = self.ledger
        ledger.rejected_spans += answer.rejected
        loose_rejected = answer.rejected - request.bad_spans
        if loose_rejected not in (0, len(request.loose_spans)):
            # Which spans went is unknown: none of them counts as acknowledged.
            ledger.anomaly(
                f"{request.kind} over {request.transport}: {answer.rejected} spans rejected, "
                f"expected {request.bad_spans}"
                + (
                    f" or {request.bad_spans + len(request.loose_spans)}"
                    if request.loose_spans
                    else ""
                )
                + f" ({answer.detail[:200]})"
            )
            ledger.in_doubt.update(request.spans, request.loose_spans)
            return
        exact = ledger.acknowledged if request.exact else ledger.acknowledged_inexact
        exact.update(request.spans)
        if loose_rejected:
            ledger.refused.setdefault("rejected alone", set()).update(request.loose_spans)
        else:
            ledger.acknowledged_inexact.update(request.loose_spans)
        ledger.last_ack_at = time.monotonic()

    def _metadata(self, request: Request) -> list[tuple[str, str]]:
        if request.auth is Auth.NO_KEY:
            return []
        key = self._key if request.auth is Auth.KEY else "afr_testbed-wrong-key-0000"
        return [("authorization", f"Bearer {key}")]

    def _send_grpc(self, request: Request, export: Any) -> Answer:
        try:
            raw, _ = export.with_call(
                request.body,
                metadata=self._metadata(request),
                timeout=self._timeout_s,
                compression=grpc.Compression.Gzip if request.compress else None,
            )
        except grpc.RpcError as error:
            return _grpc_refusal(error)
        response = ExportTraceServiceResponse()
        response.ParseFromString(raw)
        rejected = response.partial_success.rejected_spans
        return Answer(Outcome.ACKED, rejected, detail=response.partial_success.error_message)

    def _send_http(self, request: Request, client: httpx.Client) -> Answer:
        as_json = request.transport is Transport.HTTP_JSON
        headers = dict(self._metadata(request))
        headers["content-type"] = request.content_type or (JSON if as_json else PROTOBUF)
        if request.compress:
            headers["content-encoding"] = "gzip"
        try:
            response = client.post(self._http_url, content=request.body, headers=headers)
        except httpx.TimeoutException as error:
            return Answer(Outcome.TIMEOUT, detail=type(error).__name__)
        except httpx.TransportError as error:
            return Answer(Outcome.NO_ANSWER, detail=type(error).__name__)
        status = response.status_code
        if status == 200:
            return _http_partial(response.content, as_json)
        detail = f"HTTP {status}: {response.text[:200]}"
        if status in _RETRYABLE_HTTP:
            retry_after = response.headers.get("retry-after")
            seconds = float(retry_after) if retry_after and retry_after.isdigit() else None
            return Answer(Outcome.RETRY_LATER, retry_after_s=seconds, detail=detail)
        outcome = {
            400: Outcome.INVALID,
            413: Outcome.TOO_LARGE,
            401: Outcome.UNAUTHENTICATED,
            415: Outcome.UNSUPPORTED,
        }.get(status, Outcome.SERVER_ERROR)
        return Answer(outcome, detail=detail)


def _retry_delay_s(error: Any) -> float | None:
    for key, value in error.trailing_metadata() or ():
        if key == RETRY_INFO_KEY:
            info = error_details_pb2.RetryInfo()
            info.ParseFromString(value)
            return float(info.retry_delay.seconds + info.retry_delay.nanos / 1e9)
    return None


def _grpc_refusal(error: Any) -> Answer:
    code = error.code()
    detail = f"{code.name}: {error.details()}"
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED):
        delay = _retry_delay_s(error)
        if delay is not None:
            return Answer(Outcome.RETRY_LATER, retry_after_s=delay, detail=detail)
        if code is grpc.StatusCode.UNAVAILABLE:
            return Answer(Outcome.NO_ANSWER, detail=detail)
        return Answer(Outcome.TOO_LARGE, detail=detail)
    if code in (grpc.StatusCode.CANCELLED, grpc.StatusCode.ABORTED):
        # Retryable in OTLP: what a collector that is stopping answers a call it had not
        # acknowledged. Not acknowledged, so sent again.
        return Answer(Outcome.NO_ANSWER, detail=detail)
    outcome = {
        grpc.StatusCode.INVALID_ARGUMENT: Outcome.INVALID,
        grpc.StatusCode.UNAUTHENTICATED: Outcome.UNAUTHENTICATED,
        grpc.StatusCode.DEADLINE_EXCEEDED: Outcome.TIMEOUT,
    }.get(code, Outcome.SERVER_ERROR)
    return Answer(outcome, detail=detail)


def _http_partial(content: bytes, as_json: bool) -> Answer:
    if as_json:
        try:
            partial = json.loads(content or b"{}").get("partialSuccess", {})
            return Answer(
                Outcome.ACKED,
                int(partial.get("rejectedSpans", 0)),
                detail=str(partial.get("errorMessage", "")),
            )
        except (ValueError, AttributeError) as error:
            return Answer(Outcome.SERVER_ERROR, detail=f"unreadable JSON response: {error}")
    response = ExportTraceServiceResponse()
    try:
        response.ParseFromString(content)
    except Exception as error:  # DecodeError: an answer no exporter could read
        return Answer(Outcome.SERVER_ERROR, detail=f"unreadable response: {type(error).__name__}")
    return Answer(
        Outcome.ACKED,
        response.partial_success.rejected_spans,
        detail=response.partial_success.error_message,
    )


def gzip_body(raw: bytes) -> bytes:
    return gzip.compress(raw, compresslevel=6)
