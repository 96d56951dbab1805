"""Run diff end to end: ``GET /api/v1/runs/diff`` and ``afr runs diff`` on real runs.

The replay matrix's travel desk (``tests/booking_agent.py``): each failure kind captured for
real on both model APIs (the real ``Runner`` and the SDK's OpenAI model classes against the
scripted model server, ``afr_exporter.install`` shipping to a real collector), replayed with
``run_replay`` by each replay model (``same``, ``fixed``, ``breaking``) and the replay
exported back, linked to its source, as the worker does. The diff of each replay against its
source, read from the collector, must agree with the replay's own first divergence: the
positional tool divergence equals it, the verdict the replay recorded is reported with it,
and no step differs before the tool step the verdict names unless it is the cause (another
handoff, another output, an error).

Then two captures of the same workflow: identical runs (no divergence), runs differing in one
tool argument (that pointer), and a model error on one side only.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import gen_trace_id
from agents.tracing import set_trace_processors

import afr_exporter
from afr.cli import build_parser
from afr.runs.cli import run_command
from afr.scripted_model import ScriptedModelServer
from replay_worker.client import CollectorClient
from replay_worker.replay.engine import ReplayResult, run_replay
from replay_worker.replay.fixture import build_fixture
from tests.booking_agent import (
    FAILURE_KINDS,
    BookingDesk,
    ModelApi,
    ReplayModel,
    SourceKind,
    build_model,
    replay_script,
    run_booking,
    source_script,
    stub_outputs,
)
from tests.integration.conftest import Running, start_collector

pytestmark = pytest.mark.slow

APIS: tuple[ModelApi, ...] = ("responses", "chat")
MODELS: tuple[ReplayModel, ...] = ("same", "fixed", "breaking")


class Runs:
    """Runs captured and replayed through one real collector, each exported to it."""

    def __init__(self, running: Running) -> None:
        self.running = running
        self.client = CollectorClient(running.http_url, running.key)

    def capture(self, api: ModelApi, kind: SourceKind) -> str:
        trace_id = gen_trace_id()
        processor = afr_exporter.install(
            endpoint=self.running.grpc_endpoint, headers=self.running.headers()
        )
        try:
            with (
                ScriptedModelServer(source_script(kind)) as server,
                contextlib.suppress(Exception),  # the failing source runs raise
            ):
                asyncio.run(
                    run_booking(
                        build_model(api, server.base_url), BookingDesk(), kind, trace_id=trace_id
                    )
                )
            assert processor.force_flush(10)
        finally:
            set_trace_processors([])
        run_id = trace_id.removeprefix("trace_")
        self.running.run(run_id)
        return run_id

    def replay(
        self, api: ModelApi, kind: SourceKind, source_id: str, model: ReplayModel
    ) -> ReplayResult:
        fixture = build_fixture(asyncio.run(self.client.get_run(source_id)))
        processor = afr_exporter.install(
            endpoint=self.running.grpc_endpoint, headers=self.running.headers()
        )
        try:
            with ScriptedModelServer(replay_script(kind, model)) as server:
                replay_model = build_model(api, server.base_url)
                result = asyncio.run(
                    run_replay(
                        fixture, model_for=lambda name: replay_model, stub_outputs=stub_outputs()
                    )
                )
            assert processor.force_flush(10)
        finally:
            set_trace_processors([])
        self.running.run(result.replay_run_id)
        return result

    def diff(self, a: str, b: str) -> dict[str, Any]:
        response = self.running.api("/api/v1/runs/diff", a=a, b=b)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    thread, running = start_collector(Path(tmp_path_factory.mktemp("diff")) / "data")
    try:
        yield Runs(running)
    finally:
        thread.stop()


def _expected_tool_divergence(recorded: dict[str, Any] | None) -> dict[str, Any] | None:
    """The verdict's first divergence in the diff's terms: its argument keys as pointers."""
    if recorded is None:
        return None
    arguments = recorded.get("arguments") or {}
    return {
        "step": recorded["step"],
        "kind": recorded["kind"],
        "tool": recorded["tool"],
        "a_tool": recorded.get("source_tool"),
        "arguments": [
            {
                "pointer": "" if key == "$" else f"/{key}",
                "a": change["source"],
                "b": change["replay"],
                "in_a": True,
                "in_b": True,
            }
            for key, change in sorted(arguments.items())
        ],
    }


def _comparable(tool: dict[str, Any] | None) -> dict[str, Any] | None:
    """A missing argument is null on its side, as the verdict shows it (``dict.get``)."""
    if tool is None:
        return None
    return {**tool, "arguments": [{**d, "in_a": True, "in_b": True} for d in tool["arguments"]]}


@pytest.mark.parametrize("kind", FAILURE_KINDS)
@pytest.mark.parametrize("api", APIS)
def test_a_replays_diff_agrees_with_its_verdict(
    runs: Runs, api: ModelApi, kind: SourceKind
) -> None:
    source_id = runs.capture(api, kind)
    for model in MODELS:
        result = runs.replay(api, kind, source_id, model)
        diff = runs.diff(source_id, result.replay_run_id)
        where = f"{api}/{kind}/{model}: {json.dumps(diff['first_divergence'])}"

        assert diff["a"]["run_id"] == source_id and diff["b"]["kind"] == "replay"
        assert diff["verdict"] == {
            "run_id": result.replay_run_id,
            "verdict": result.verdict,
            "reason": result.reason,
            "first_divergence": result.first_divergence,
            "agrees": True,
        }, where
        assert _comparable(diff["tool_divergence"]) == _expected_tool_divergence(
            result.first_divergence
        ), where
        first = diff["first_divergence"]
        # The source's behaviour, answered with the source's outcomes; and a tripped input
        # guardrail, which trips again whatever the model (it sees only the input).
        if model == "same" or kind == "guardrail_tripped":
            assert first is None, where
            assert all(not step["differences"] for step in diff["steps"]), where
            continue
        assert first is not None, where
        if result.first_divergence is not None:
            # Nothing differs before the tool call the verdict names, unless at a step that
            # decides it: the divergence is that call, or before it (another handoff, ...).
            tool_steps = [s["index"] for s in diff["steps"] if s["type"] == "tool"]
            at = result.first_divergence["step"]
            if first["type"] == "tool":
                assert first["tool_step"] == at, where
            assert first["step"] <= (tool_steps[at] if at < len(tool_steps) else len(diff["steps"]))
        # Per-step deltas: b minus a, wherever both runs have the step.
        for step in diff["steps"]:
            if step["a"] and step["b"]:
                assert step["delta"]["input_tokens"] == (
                    step["b"]["input_tokens"] - step["a"]["input_tokens"]
                )
                assert step["delta"]["duration_ns"] == (
                    step["b"]["duration_ns"] - step["a"]["duration_ns"]
                )
            else:
                assert step["delta"] is None and step["differences"] in (
                    ["missing_step"],
                    ["extra_step"],
                )


def test_two_captures_of_the_same_workflow(runs: Runs) -> None:
    first, again = runs.capture("responses", "success"), runs.capture("responses", "success")
    same = runs.diff(first, again)
    assert same["first_divergence"] is None and same["tool_divergence"] is None
    assert same["verdict"] is None, "no replay of the other"
    assert [s["type"] for s in same["steps"]][:4] == ["task", "agent", "turn", "guardrail"]
    assert all(s["a"] and s["b"] and not s["differences"] for s in same["steps"])

    # passenger_count "2" instead of 2: the SDK coerced it, only the argument differs.
    coerced = runs.diff(first, runs.capture("responses", "coerced_count"))
    divergence = coerced["first_divergence"]
    assert divergence["kind"] == "arguments" and divergence["name"] == "book_flight"
    assert divergence["differences"] == ["arguments"]
    assert divergence["tool_step"] == 1
    assert divergence["arguments"] == [
        {"pointer": "/passenger_count", "a": 2, "b": "2", "in_a": True, "in_b": True}
    ]
    assert divergence["summary"] == "tool call book_flight: other arguments at /passenger_count"
    assert coerced["tool_divergence"]["arguments"] == divergence["arguments"]
    assert [s["index"] for s in coerced["steps"] if s["differences"]] == [divergence["step"]]

    # The first model call failed in b only: an error on one side, then only a's steps.
    failed = runs.capture("responses", "model_error")
    broken = runs.diff(first, failed)
    divergence = broken["first_divergence"]
    assert (divergence["type"], divergence["kind"]) == ("llm", "error")
    assert divergence["summary"].startswith("model call of Intake Agent: failed in b only")
    assert broken["steps"][divergence["step"]]["b"]["status"] == "error"
    assert broken["tool_divergence"]["kind"] == "missing_call"
    assert broken["b"]["status"] == "error" and broken["delta"]["output_tokens"] < 0

    # afr runs diff: the same diff in a plain terminal, and --json is the API's answer.
    out, err = io.StringIO(), io.StringIO()
    argv = ["runs", "diff", first, failed, "--url", runs.running.http_url]
    environ = {"AFR_API_KEY": runs.running.key, "COLUMNS": "80"}
    assert (
        run_command(build_parser().parse_args(argv), stdout=out, stderr=err, environ=environ) == 0
    )
    shown = out.getvalue().splitlines()
    assert err.getvalue() == "" and all(len(line) <= 80 for line in shown)
    assert shown[1].startswith(f"A {first}  capture  ok")
    assert shown[2].startswith(f"B {failed}  capture  error")
    assert any(
        line.startswith(f"first divergence at step {divergence['step']}: model call of")
        for line in shown
    )
    assert any(line.startswith("- ") and "tool search_flights" in line for line in shown)
    out = io.StringIO()
    assert (
        run_command(
            build_parser().parse_args([*argv, "--json"]), stdout=out, stderr=err, environ=environ
        )
        == 0
    )
    assert json.loads(out.getvalue()) == runs.diff(first, failed)


def test_the_diff_route_refuses_what_it_cannot_diff(runs: Runs) -> None:
    run_id = runs.capture("chat", "success")
    missing = "0" * 32
    cases = [
        ({"a": run_id}, 400, "b: Field required"),
        ({"a": run_id, "b": run_id}, 400, "a and b are the same run: diff two different runs"),
        ({"a": run_id, "b": "nope"}, 400, "b must be a run id (32 hex digits)"),
        ({"a": missing, "b": run_id}, 404, f"no such run: a={missing}"),
        ({"a": run_id, "b": f"trace_{missing}"}, 404, f"no such run: b={missing}"),
    ]
    for params, status, error in cases:
        response = runs.running.api("/api/v1/runs/diff", **params)
        assert (response.status_code, response.json()) == (status, {"error": error}), params
    other = runs.running.collector.keys.create("elsewhere")
    response = runs.running.api("/api/v1/runs/diff", other, a=run_id, b=missing)
    assert response.status_code == 404, "another project's run is unknown"

    err = io.StringIO()
    argv = ["runs", "diff", run_id, missing, "--url", runs.running.http_url]
    code = run_command(
        build_parser().parse_args(argv),
        stdout=io.StringIO(),
        stderr=err,
        environ={"AFR_API_KEY": runs.running.key},
    )
    assert (code, err.getvalue()) == (
        2,
        f"afr runs diff: no such run: b={missing} in this key's project (404)\n",
    )
