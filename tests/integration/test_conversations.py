"""Runs grouped by conversation (``gen_ai.conversation.id``, the Agents SDK's ``group_id``)
through the real collector: kept in the run summary whichever span carries it and however
often the run is delivered, filtered by the read API (alone, with other filters, paged,
scoped to the key's project), listed by ``afr runs list --conversation`` and shown by ``afr
runs show``."""

from __future__ import annotations

import io
import random
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from afr.cli import build_parser
from afr.runs.cli import run_command
from tests.integration.conftest import Running, start_collector

pytestmark = pytest.mark.slow

_NS = 1_000_000_000


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    thread, running = start_collector(tmp_path_factory.mktemp("conversations") / "data")
    yield running
    thread.stop()


def _attributes(values: dict[str, str]) -> list[dict[str, Any]]:
    return [{"key": k, "value": {"stringValue": v}} for k, v in values.items()]


def send_run(
    running: Running,
    start_ns: int,
    conversation: str | None,
    *,
    on_child: bool = False,
    failing: bool = False,
    key: str | None = None,
    times: int = 1,
) -> str:
    """A two-span GenAI run (an agent and its model call); the conversation id on the root,
    or only on the model call (``on_child``)."""
    trace_id = f"{random.getrandbits(128):032x}"
    root, child = f"{random.getrandbits(64):016x}", f"{random.getrandbits(64):016x}"
    common = {"gen_ai.conversation.id": conversation} if conversation else {}
    spans = [
        {
            "traceId": trace_id,
            "spanId": root,
            "name": "invoke_agent Support Agent",
            "kind": 1,
            "startTimeUnixNano": str(start_ns),
            "endTimeUnixNano": str(start_ns + _NS),
            "attributes": _attributes(
                {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": "Support Agent",
                    **({} if on_child else common),
                }
            ),
        },
        {
            "traceId": trace_id,
            "spanId": child,
            "parentSpanId": root,
            "name": "chat gpt-4.1-mini",
            "kind": 3,
            "startTimeUnixNano": str(start_ns + 1000),
            "endTimeUnixNano": str(start_ns + _NS // 2),
            "attributes": _attributes({"gen_ai.operation.name": "chat", **common}),
            "status": {"code": 2, "message": "rate limited"} if failing else {"code": 1},
        },
    ]
    body = {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "app"}, "spans": spans}]}]}
    for _ in range(times):
        answer = httpx.post(
            running.http_url + "/v1/traces", json=body, headers=running.headers(key), timeout=30
        )
        assert answer.status_code == 200, answer.text
        running.collector.flush()
    return trace_id


def listed(running: Running, key: str | None = None, **params: Any) -> list[dict[str, Any]]:
    running.collector.flush()
    answer = running.api("/api/v1/runs", key, since=1, **params)
    assert answer.status_code == 200, answer.text
    runs: list[dict[str, Any]] = answer.json()["runs"]
    return runs


def test_a_conversations_runs_whatever_span_carries_it_and_however_often_sent(
    running: Running,
) -> None:
    conversation = f"conv_{random.getrandbits(40):x}"
    base = time.time_ns() - 3600 * _NS
    first = send_run(running, base, conversation, times=2)
    second = send_run(running, base + 60 * _NS, conversation, on_child=True, failing=True)
    third = send_run(running, base + 120 * _NS, conversation)
    send_run(running, base + 30 * _NS, f"{conversation}_other")
    send_run(running, base + 90 * _NS, None)
    other_project = running.collector.keys.create(f"elsewhere-{random.getrandbits(20)}")
    theirs = send_run(running, base + 100 * _NS, conversation, key=other_project)

    runs = listed(running, conversation_id=conversation)
    assert [r["run_id"] for r in runs] == [third, second, first], "newest first, each once"
    assert {r["conversation_id"] for r in runs} == {conversation}
    assert [r["span_count"] for r in runs] == [2, 2, 2]
    assert [r["run_id"] for r in listed(running, conversation_id=conversation, status="error")] == [
        second
    ]
    walked: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"conversation_id": conversation, "limit": 1}
        if cursor:
            params["cursor"] = cursor
        page = running.api("/api/v1/runs", since=1, **params).json()
        walked += [r["run_id"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert walked == [third, second, first]
    assert running.run(second)["run"]["conversation_id"] == conversation
    assert [r["run_id"] for r in listed(running, other_project, conversation_id=conversation)] == [
        theirs
    ]
    assert listed(running, conversation_id="conv_nobody_has") == []


@pytest.mark.parametrize(
    ("value", "says"),
    [("x" * 300, "at most 256"), ("bad\u0007id", "printable")],
)
def test_a_bad_conversation_filter_is_a_400(running: Running, value: str, says: str) -> None:
    answer = running.api("/api/v1/runs", conversation_id=value)
    assert answer.status_code == 400
    assert says in answer.json()["error"]


def test_afr_runs_list_conversation_and_show(running: Running) -> None:
    conversation = f"conv_{random.getrandbits(40):x}"
    base = time.time_ns() - 1800 * _NS
    runs = [send_run(running, base + i * 10 * _NS, conversation) for i in range(2)]
    send_run(running, base + 5 * _NS, None)
    env = {"AFR_API_KEY": running.key, "NO_COLOR": "1"}

    def afr(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        args = build_parser().parse_args(["runs", *argv, "--url", running.http_url])
        code = run_command(args, stdout=out, stderr=err, environ=env)
        return code, out.getvalue(), err.getvalue()

    code, out, err = afr("list", "--conversation", conversation, "--since", "1d")
    assert code == 0, err
    shown = [line.split()[0] for line in out.splitlines() if line and not line.startswith(" ")]
    assert shown == list(reversed(runs))
    code, out, err = afr("show", runs[0])
    assert code == 0, err
    assert f"  conversation {conversation}" in out.splitlines()
