"""The recorded instrumentation payloads (tests/data/dialects/, see NOTES.md there) and the
ways tests cut them into export requests."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import afr_exporter
from afr.incident import ModelApi, build_model, failing_script, run_incident
from afr.scripted_model import ScriptedModelServer

DIALECTS_DIR = Path(__file__).parent / "data" / "dialects"

# What the SDK emits for the canonical incident, once a whole trace is normalized.
SDK_TYPES = Counter(
    {
        "workflow": 1,
        "task": 1,
        "agent": 2,
        "turn": 3,
        "guardrail": 1,
        "llm": 3,
        "handoff": 1,
        "tool": 1,
    }
)
# OpenLLMetry drops the task, turn and guardrail spans; plain GenAI has no workflow either.
OPENLLMETRY_TYPES = Counter({"workflow": 1, "agent": 2, "llm": 3, "handoff": 1, "tool": 1})
PLAIN_GENAI_TYPES = Counter({"agent": 2, "llm": 3, "handoff": 1, "tool": 1})
SDK_TOOL_ERROR = "Error running tool (non-fatal)"


@dataclass(frozen=True)
class Recording:
    file: str
    dialect: str  # the Dialect the collector stores
    api: str  # "responses" | "chat": the Agents SDK model class the run used
    span_types: Counter[str]  # after the whole trace is normalized
    workflow: str

    @property
    def name(self) -> str:
        return self.file.removesuffix(".json")


RECORDINGS = (
    Recording("openinference.json", "openinference", "responses", SDK_TYPES, "refund-desk"),
    Recording("openinference_chat.json", "openinference", "chat", SDK_TYPES, "refund-desk"),
    Recording("openllmetry.json", "openllmetry", "responses", OPENLLMETRY_TYPES, "Agent Workflow"),
    Recording("openllmetry_chat.json", "openllmetry", "chat", OPENLLMETRY_TYPES, "Agent Workflow"),
    Recording("contrib_v2.json", "otel-contrib-v2", "responses", SDK_TYPES, "refund-desk"),
    Recording("contrib_v2_chat.json", "otel-contrib-v2", "chat", SDK_TYPES, "refund-desk"),
    Recording("logfire.json", "logfire", "responses", SDK_TYPES, "refund-desk"),
    Recording("logfire_chat.json", "logfire", "chat", SDK_TYPES, "refund-desk"),
)
PLAIN_GENAI = Recording(
    "plain_genai.json", "genai", "responses", PLAIN_GENAI_TYPES, "invoke_agent Triage Agent"
)
PLAIN_GENAI_PREVIOUS = Recording(
    "plain_genai_previous.json",
    "genai",
    "responses",
    PLAIN_GENAI_TYPES,
    "invoke_agent Triage Agent",
)
"""The same run in the generation of the conventions before (NOTES.md): ``gen_ai.system``,
prompt/completion token names, content as ``gen_ai.content.prompt``/``completion`` span
events in chat format."""


def request_body(recording: Recording) -> dict[str, Any]:
    """The recording as an OTLP/JSON ExportTraceServiceRequest."""
    body: dict[str, Any] = json.loads((DIALECTS_DIR / recording.file).read_text())
    return body


def otlp_json(request: Any) -> dict[str, Any]:
    """An ExportTraceServiceRequest as OTLP/JSON (hex ids), as the recordings are stored."""
    body: dict[str, Any] = MessageToDict(request)
    for resource in body["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return body


def afr_run_body(api: ModelApi) -> dict[str, Any]:
    """The canonical incident through afr's own exporter, live: afr's dialect never goes stale."""
    spans = InMemorySpanExporter()
    with ScriptedModelServer(failing_script()) as model:
        processor = afr_exporter.install(span_exporter=spans)
        asyncio.run(run_incident(build_model(api, model.base_url)))
        assert processor.force_flush(10)
    return otlp_json(encode_spans(spans.get_finished_spans()))


def with_trace_id(body: dict[str, Any], trace_id: str) -> dict[str, Any]:
    """A copy whose spans all belong to ``trace_id`` (one recording, many independent runs)."""
    body = copy.deepcopy(body)
    for span in _spans(body):
        span["traceId"] = trace_id
    return body


def _spans(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        span
        for resource in body["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def one_request_per_span(body: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    """Every span in its own request, shuffled, the trace root last: the worst batching an
    exporter can produce (no request holds a span together with its parent or children)."""
    requests = []
    for resource in body["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                requests.append(
                    {
                        "resourceSpans": [
                            {
                                **{k: v for k, v in resource.items() if k != "scopeSpans"},
                                "scopeSpans": [
                                    {
                                        **{k: v for k, v in scope.items() if k != "spans"},
                                        "spans": [span],
                                    }
                                ],
                            }
                        ]
                    }
                )
    random.Random(seed).shuffle(requests)
    requests.sort(key=lambda r: not _spans(r)[0].get("parentSpanId"))
    return requests
