"""Each third-party Agents SDK instrumentation, live: the real incident through the real
``Runner`` and the scripted model server, exported by the real OTel OTLP/gRPC exporter to a
real collector, reads back as the same normalized run afr's own exporter gives.

The instrumentations are optional (``pip install -e '.[dev,instrumentations]'``; the contrib
``-v2`` package in an environment of its own, ``.[dev,instrumentations-contrib]``): each is
skipped, with the reason, where it is not installed.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from afr.incident import ModelApi, build_model, failing_script, run_incident
from afr.scripted_model import ScriptedModelServer
from tests.dialects import OPENLLMETRY_TYPES, SDK_TOOL_ERROR, SDK_TYPES
from tests.integration.conftest import Running

SERVICE = "afr-live-instrumentation"


@dataclass(frozen=True)
class Instrumentation:
    distribution: str  # the PyPI package
    dialect: str  # what the collector recognises it as
    span_types: Counter[str]
    workflow: str
    install: Callable[[BatchSpanProcessor], Callable[[], None]]  # returns its undo


def _instrumentor(module: str) -> Callable[[BatchSpanProcessor], Callable[[], None]]:
    def install(processor: BatchSpanProcessor) -> Callable[[], None]:
        provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
        provider.add_span_processor(processor)
        instrumentor = importlib.import_module(module).OpenAIAgentsInstrumentor()
        instrumentor.instrument(tracer_provider=provider)

        def undo() -> None:
            provider.force_flush()
            instrumentor.uninstrument()
            provider.shutdown()

        return undo

    return install


def _logfire(processor: BatchSpanProcessor) -> Callable[[], None]:
    import logfire
    from agents.tracing import get_trace_provider, set_trace_provider

    logfire.configure(
        send_to_logfire=False,
        console=False,
        metrics=False,
        service_name=SERVICE,
        additional_span_processors=[processor],
    )
    logfire.instrument_openai_agents()  # wraps the SDK's global trace provider

    def undo() -> None:
        logfire.shutdown(flush=True)
        wrapper = get_trace_provider()
        set_trace_provider(getattr(wrapper, "wrapped", wrapper))

    return undo


OTEL_MODULE = "opentelemetry.instrumentation.openai_agents"
INSTRUMENTATIONS = {
    "openinference": Instrumentation(
        "openinference-instrumentation-openai-agents",
        "openinference",
        SDK_TYPES,
        "refund-desk",
        _instrumentor("openinference.instrumentation.openai_agents"),
    ),
    "openllmetry": Instrumentation(
        "opentelemetry-instrumentation-openai-agents",
        "openllmetry",
        OPENLLMETRY_TYPES,
        "Agent Workflow",
        _instrumentor(OTEL_MODULE),
    ),
    "contrib_v2": Instrumentation(
        "opentelemetry-instrumentation-openai-agents-v2",
        "otel-contrib-v2",
        SDK_TYPES,
        "refund-desk",
        _instrumentor(OTEL_MODULE),
    ),
    "logfire": Instrumentation("logfire", "logfire", SDK_TYPES, "refund-desk", _logfire),
}


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


LIVE = [
    pytest.param(
        name,
        marks=pytest.mark.skipif(
            not _installed(instrumentation.distribution),
            reason=f"{instrumentation.distribution} is not installed (pip install -e "
            "'.[dev,instrumentations]', or '.[dev,instrumentations-contrib]' for contrib -v2)",
        ),
    )
    for name, instrumentation in sorted(INSTRUMENTATIONS.items())
]


@pytest.fixture
def exported_by(running: Running) -> Iterator[Callable[[Instrumentation, ModelApi], None]]:
    undo: list[Callable[[], None]] = []

    def run(instrumentation: Instrumentation, api: ModelApi) -> None:
        exporter = OTLPSpanExporter(endpoint=running.grpc_endpoint, headers=running.headers())
        undo.append(instrumentation.install(BatchSpanProcessor(exporter)))
        with ScriptedModelServer(failing_script()) as model:
            asyncio.run(run_incident(build_model(api, model.base_url)))
        undo.pop()()

    yield run
    for step in undo:
        step()


def _the_run(running: Running) -> dict[str, Any]:
    running.collector.flush()
    (summary,) = running.api("/api/v1/runs").json()["runs"]
    return running.run(summary["run_id"])


@pytest.mark.parametrize("api", ["responses", "chat"])
@pytest.mark.parametrize("name", LIVE)
def test_live_run_normalizes_like_afrs_own(
    running: Running,
    exported_by: Callable[[Instrumentation, ModelApi], None],
    name: str,
    api: ModelApi,
) -> None:
    instrumentation = INSTRUMENTATIONS[name]
    exported_by(instrumentation, api)
    run = _the_run(running)
    summary, spans = run["run"], run["spans"]
    assert {s["dialect"] for s in spans} == {instrumentation.dialect}
    assert Counter(s["span_type"] for s in spans) == instrumentation.span_types
    assert summary["agents"] == ["Refund Agent", "Triage Agent"]
    assert summary["workflow"] == instrumentation.workflow
    assert summary["failing_error_type"] == SDK_TOOL_ERROR
    assert all("{" not in s["name"] for s in spans)
    (tool,) = [s for s in spans if s["span_type"] == "tool"]
    assert (tool["tool_name"], tool["tool_call_id"]) == ("refund_order", "call_refund_1")
    assert "12.OO" in tool["input"]
    assert all("A-1001" in s["input"] for s in spans if s["span_type"] == "llm")
