"""An instrumentation that sends GenAI content as log records, live: the OTel contrib OpenAI
instrumentation (``opentelemetry-instrumentation-openai-v2``) on the incident's Chat
Completions calls, through the real Runner, the scripted model server and the OTel SDK's
OTLP/gRPC span and log exporters, into a real collector. Its chat spans carry no content;
its log records do, in either generation of the conventions (one event per message, or the
``gen_ai.client.inference.operation.details`` event). Either way the read API gives each
model call the same messages, attached to its span."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Running, start_collector

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("opentelemetry.instrumentation.openai_v2") is None,
        reason="opentelemetry-instrumentation-openai-v2 is not installed (it is in .[dev])",
    ),
]

_MODES = ("legacy", "latest")
_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, dict[str, Any]]]:
    thread, running = start_collector(tmp_path_factory.mktemp("openai-v2") / "data")
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        for mode in _MODES:
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(_ROOT), str(_ROOT / "exporter" / "src")]),
            }
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "tests.integration.openai_v2_capture",
                    mode,
                    running.grpc_endpoint,
                    running.key,
                ],
                check=True,
                env=env,
                cwd=_ROOT,
                timeout=120,
                capture_output=True,
            )
            running.collector.flush()
            trace_ids = [
                str(row[0])
                for row in running.store.query(
                    "SELECT TraceId FROM {db}.otel_traces WHERE ServiceName = {s:String} "
                    "GROUP BY TraceId ORDER BY min(Timestamp)",
                    {"s": f"openai-v2-{mode}"},
                )
            ]
            runs[mode] = [running.run(trace_id) for trace_id in trace_ids]
        yield running, runs
    finally:
        thread.stop()


def _model_call(run: dict[str, Any]) -> dict[str, Any]:
    spans: list[dict[str, Any]] = [s for s in run["spans"] if s["span_type"] == "llm"]
    (span,) = spans
    return span


@pytest.mark.parametrize("mode", _MODES)
def test_each_chat_span_gets_its_content_from_its_log_records(
    captured: tuple[Running, dict[str, Any]], mode: str
) -> None:
    _, runs = captured
    calls = [_model_call(run) for run in runs[mode]]
    assert len(calls) == 3, "the incident makes three model calls"
    for run, call in zip(runs[mode], calls, strict=True):
        assert call["content_from_logs"] is True
        assert {entry["span_id"] for entry in run["logs"]} == {call["span_id"]}
        assert "gen_ai.input.messages" not in call["attributes"], "the span itself had none"
    first, second, last = (json.loads(c["input"]) for c in calls)
    assert [m["role"] for m in first] == ["system", "user"]
    assert first[1]["parts"][0]["content"].startswith("I was charged twice for order A-1001")
    # The refund agent's call: the bad arguments the model chose, as it chose them.
    (call,) = json.loads(calls[1]["output"])[0]["parts"]
    assert (call["type"], call["name"], call["arguments"]) == (
        "tool_call",
        "refund_order",
        {"order_id": "A-1001", "amount": "12.OO"},
    )
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert second[-1]["role"] == "tool"
    final = json.loads(calls[2]["output"])[0]["parts"][0]["content"]
    assert final.startswith("I'm sorry, I could not process the refund for order A-1001")


def _texts(messages: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [
        (
            m["role"],
            str(p.get("type")),
            str(p.get("content") or p.get("name") or p.get("result") or p.get("response") or ""),
        )
        for m in messages
        for p in m["parts"]
    ]


def test_both_generations_of_the_conventions_give_the_same_messages(
    captured: tuple[Running, dict[str, Any]],
) -> None:
    _, runs = captured
    legacy, latest = ([_model_call(r) for r in runs[mode]] for mode in _MODES)
    for old, new in zip(legacy, latest, strict=True):
        assert _texts(json.loads(old["input"])) == _texts(json.loads(new["input"]))
        assert _texts(json.loads(old["output"])) == _texts(json.loads(new["output"]))
