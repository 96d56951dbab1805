"""Forks without a collector: the fixture's model calls from each capture shape, what the
planner refuses on fixtures a capture cannot give (version 2, uncaptured outputs), the
recorded-model stand-in on the SDK's streaming path and when the prefix leaves the source's
path, and evals written before forks (their ids do not move).

The matrix, the refusals a real capture gives and prefix determinism run end to end in
``tests/e2e/test_replay_fork.py``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Model, ModelResponse, RunConfig, Runner

from replay_worker.evals.contract import EvalDocument, ReplaySpec, load_eval, write_eval
from replay_worker.hooks.models import Fork
from replay_worker.replay.engine import run_fork
from replay_worker.replay.fixture import AgentSpec, CapturedCall, Fixture, ModelCall, _output_items
from replay_worker.replay.fork import OVERRIDE_ERROR, ForkError, plan_fork
from replay_worker.replay.recorded import RecordedModel, Tape
from tests.unit.replay_worker.test_eval_contract import document

CALL = {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q": "x"}'}
TEXT = {
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "done", "annotations": []}],
}
SCHEMA = {
    "type": "object",
    "properties": {"q": {"type": "string"}},
    "required": ["q"],
    "additionalProperties": False,
}


def fixture(**changes: Any) -> Fixture:
    fields: dict[str, Any] = dict(
        source_run_id="a" * 32,
        source_status="ok",
        workflow="lookup-desk",
        input="look it up",
        entry_agent="Desk",
        agents={
            "Desk": AgentSpec(
                instructions="Look things up.",
                model="gpt-4.1-mini",
                tools=[{"name": "lookup", "description": "", "parameters": SCHEMA, "strict": True}],
            )
        },
        tool_calls=[CapturedCall("lookup", "c1", '{"q": "x"}', '"found"', agent="Desk")],
        model_calls=[
            ModelCall("Desk", "responses", [dict(CALL, status="completed")], turn=1),
            ModelCall("Desk", "responses", [TEXT], turn=2),
        ],
    )
    fields.update(changes)
    return Fixture(**fields)


class NoLiveModel(Model):
    """A live model that must not be reached."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        raise AssertionError("a live model call in a recorded prefix")

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise AssertionError("a live model call in a recorded prefix")


def span(output: Any, **fields: Any) -> dict[str, Any]:
    return {"output": json.dumps(output), "attributes": {}, **fields}


@pytest.mark.parametrize(
    ("shape", "output"),
    [
        (
            "genai messages",
            [
                {
                    "role": "assistant",
                    "parts": [
                        {"type": "text", "content": "done"},
                        {
                            "type": "tool_call",
                            "id": "c1",
                            "name": "lookup",
                            "arguments": '{"q": "x"}',
                        },
                    ],
                }
            ],
        ),
        ("a whole Response (Logfire)", {"object": "response", "output": [TEXT, CALL]}),
        ("Responses output items", [TEXT, CALL]),
        (
            "a chat completion",
            {
                "choices": [
                    {
                        "message": {
                            "role": "assistant",
                            "content": "done",
                            "tool_calls": [
                                {
                                    "id": "c1",
                                    "type": "function",
                                    "function": {"name": "lookup", "arguments": '{"q": "x"}'},
                                }
                            ],
                        }
                    }
                ]
            },
        ),
    ],
)
def test_each_capture_shape_gives_the_same_sdk_items(shape: str, output: Any) -> None:
    items = _output_items(span(output))
    assert items is not None, shape
    assert [i["type"] for i in items] == ["message", "function_call"]
    assert items[0]["content"][0]["text"] == "done"
    assert {k: items[1][k] for k in ("call_id", "name", "arguments")} == {
        "call_id": "c1",
        "name": "lookup",
        "arguments": '{"q": "x"}',
    }


def test_an_output_afr_cannot_read_is_not_recorded_and_no_fork_passes_it() -> None:
    assert _output_items(span({"weird": True})) is None
    assert _output_items({"output": None, "attributes": {}}) is None
    unreadable = fixture(
        model_calls=[ModelCall("Desk", None, None, turn=1), ModelCall("Desk", None, [TEXT])]
    )
    assert plan_fork(unreadable, Fork(step="llm:1")).recorded == []
    with pytest.raises(ForkError, match="the output of model call llm:1 was not captured"):
        plan_fork(unreadable, Fork(step="llm:2"))


def test_a_version_2_fixture_loads_replays_and_is_refused_a_fork_with_the_reason() -> None:
    current = fixture().to_json()
    older = {k: v for k, v in current.items() if k != "model_calls"} | {"version": "afr.fixture/2"}
    loaded = Fixture.from_json(json.loads(json.dumps(older)))
    assert loaded.model_calls is None
    assert loaded.to_json() == older, "it keeps its own shape"
    with pytest.raises(
        ForkError, match=r"\(afr\.fixture/2\) records no model calls.*afr\.fixture/3"
    ):
        plan_fork(loaded, Fork(step="llm:1"))


def test_the_plan_applies_overrides_to_a_copy() -> None:
    source = fixture()
    plan = plan_fork(
        source,
        Fork.model_validate(
            {
                "step": "c1",
                "overrides": [
                    {"kind": "tool_arguments", "call_id": "c1", "arguments": '{"q": "y"}'},
                    {"kind": "tool_error", "call_id": "c1", "error": "down"},
                    {"kind": "input", "input": "look up y"},
                ],
            }
        ),
    )
    assert [a.items[0]["arguments"] for a in plan.recorded] == ['{"q": "y"}']
    (call,) = plan.fixture.tool_calls
    assert (call.arguments, call.output, call.error) == ('{"q": "y"}', "down", OVERRIDE_ERROR)
    assert plan.overridden == {0}
    assert plan.fixture.input == "look up y"
    assert source.tool_calls[0].arguments == '{"q": "x"}', "the source's fixture is untouched"
    assert source.model_calls and source.model_calls[0].output == [dict(CALL, status="completed")]


def test_a_tool_arguments_override_outside_the_schema_is_refused() -> None:
    with pytest.raises(ForkError, match="do not fit the schema of lookup"):
        plan_fork(
            fixture(),
            Fork.model_validate(
                {
                    "step": "c1",
                    "overrides": [{"kind": "tool_arguments", "call_id": "c1", "arguments": "{}"}],
                }
            ),
        )


@pytest.mark.parametrize("streamed", [False, True])
def test_the_stand_in_answers_from_the_tape_on_both_sdk_paths(streamed: bool) -> None:
    """A fork whose every call is recorded (llm:2, then a tape the test builds whole): the
    Runner gets the captured calls and final text from ``get_response`` and from
    ``stream_response``, and the live model is never reached."""
    from agents import Agent, function_tool

    plan = plan_fork(fixture(), Fork(step="llm:2"))
    answers = [*plan.recorded, plan.recorded[0].__class__(2, "Desk", [TEXT])]
    called: list[str] = []

    @function_tool
    def lookup(q: str) -> str:
        """Looks q up."""
        called.append(q)
        return "found"

    agent: Agent[Any] = Agent(
        name="Desk", model=RecordedModel(Tape(answers), "Desk", NoLiveModel()), tools=[lookup]
    )
    config = RunConfig(tracing_disabled=True)

    async def run() -> Any:
        if not streamed:
            return (await Runner.run(agent, "look it up", run_config=config)).final_output
        result = Runner.run_streamed(agent, "look it up", run_config=config)
        async for _ in result.stream_events():
            pass
        return result.final_output

    assert asyncio.run(run()) == "done"
    assert called == ["x"]


def test_a_prefix_asked_for_by_another_agent_is_inconclusive_with_no_live_call() -> None:
    strayed = fixture(
        model_calls=[
            ModelCall("Elsewhere", "responses", [TEXT], turn=1),
            ModelCall("Desk", "responses", [TEXT], turn=2),
        ]
    )
    result = asyncio.run(run_fork(strayed, Fork(step="llm:2"), lambda name: NoLiveModel()))
    assert result.verdict == "INCONCLUSIVE"
    assert "recorded prefix diverged" in result.reason and "'Elsewhere'" in result.reason


def test_an_eval_written_before_forks_keeps_its_id_and_a_forked_one_round_trips(
    tmp_path: Path,
) -> None:
    plain = document()
    assert "fork" not in plain.content()["replay"], "no fork key: the content is as before"
    forked = document(
        replay=ReplaySpec(
            fork=Fork.model_validate(
                {"step": "llm:2", "overrides": [{"kind": "input", "input": "again"}]}
            )
        )
    )
    assert forked.id != plain.id
    for written in (plain, forked):
        loaded = load_eval(write_eval(written, tmp_path))
        assert (loaded.id, loaded.replay) == (written.id, written.replay)
    older = json.loads(plain.to_json_text())
    assert older["fixture"]["version"] in ("afr.fixture/2", "afr.fixture/3")
    assert EvalDocument.model_validate(older).id == plain.id
