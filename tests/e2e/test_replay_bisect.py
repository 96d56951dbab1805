"""``afr replay bisect``: the step where a failure was decided, end to end.

Source runs of the long travel desk (``testbed/bisect_desk.py``) are captured for real (the
real ``Runner`` and the SDK's OpenAI model classes against the scripted model server, afr's
exporter, a real collector on chDB) and bisected by the real command (``afr.cli.main``)
through a real worker: each probe is a signed replay hook, a replay job, a replay run
written back to the collector and linked to its source. The scripted model answers by
position in the conversation with the scenario's fixed script, so a fork fixes the run only
when it goes live at or before the deciding call.

- Scenarios with a known deciding step (an early bad handoff, a middle bad tool argument,
  a last-turn formatting failure): found within ceil(log2 n) + 1 probes, each probe a
  linked replay run with its verdict, and the live calls at the model server exactly what
  the probes' forks make (the recorded prefixes send nothing).
- A flaky model: ``--repeats 3`` decides by majority and says 2 of 3 agreed; ``--repeats 2``
  with a coin-flip model ties, and the report gives the range it could not decide.
- Budgets: ``--max-replays`` and the worker's day budget stop it with the undecided range.
- Bad input (an unknown run, a run that did not fail, one with no model call, a change no
  step takes, bad flags): a clear error, exit status 2, no replay and no model call.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from afr.scripted_model import ScriptedModelServer, ScriptedTurn
from replay_worker.app import WorkerThread
from replay_worker.hooks.signature import generate_secret
from testbed.bisect_desk import Scenario, capture, flaky, scenario
from tests.booking_agent import ModelApi
from tests.e2e.test_replay_matrix import Captures
from tests.e2e.workers import scripted_worker_settings
from tests.integration.conftest import Running, start_collector

pytestmark = pytest.mark.slow


@dataclass
class Stack:
    running: Running
    model: ScriptedModelServer
    secret: str
    root: Path
    workers: dict[tuple[ModelApi, float], WorkerThread] = field(default_factory=dict)
    sources: dict[tuple[ModelApi, tuple[ScriptedTurn, ...]], str] = field(default_factory=dict)

    def worker(self, api: ModelApi, day_budget_usd: float = 10.0) -> WorkerThread:
        key = (api, day_budget_usd)
        if key not in self.workers:
            settings = scripted_worker_settings(
                self.running,
                self.secret,
                self.model.base_url,
                self.root / f"worker-{api}-{day_budget_usd}",
                model_api=api,
                sweep_enabled=False,
                run_wait_s=0.5,
                day_budget_usd=day_budget_usd,
            )
            self.workers[key] = WorkerThread(settings).__enter__()
        return self.workers[key]

    def source(self, chosen: Scenario, api: ModelApi) -> str:
        key = (api, chosen.source)
        if key not in self.sources:
            run_id = capture(
                chosen, api, self.model, self.running.grpc_endpoint, self.running.headers()
            )
            self.running.run(run_id)
            self.sources[key] = run_id
        return self.sources[key]

    def jobs(self, api: ModelApi, day_budget_usd: float = 10.0) -> int:
        health = httpx.get(self.worker(api, day_budget_usd).url + "/healthz", timeout=10).json()
        return int(sum(health["jobs"].values()))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = Path(tmp_path_factory.mktemp("bisect"))
    thread, running = start_collector(root / "data")
    try:
        with ScriptedModelServer([], per_conversation=True) as model:
            stack = Stack(running, model, generate_secret(), root)
            try:
                yield stack
            finally:
                for worker in stack.workers.values():
                    worker.__exit__(None, None, None)
    finally:
        thread.stop()


def bisect(
    stack: Stack,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    run_id: str,
    *flags: str,
    api: ModelApi = "responses",
    day_budget_usd: float = 10.0,
    json_report: bool = True,
) -> tuple[int, Any, str]:
    """``afr replay bisect`` as a user runs it: (exit status, the report, stderr)."""
    from afr.cli import main

    monkeypatch.setenv("AFR_WORKER_WEBHOOK_SECRET", stack.secret)
    monkeypatch.setenv("AFR_API_KEY", stack.running.key)
    worker = stack.worker(api, day_budget_usd).url
    argv = ["replay", "bisect", run_id, "--worker", worker, "--url", stack.running.http_url]
    code = main([*argv, *(["--json"] if json_report else []), *flags])
    captured = capsys.readouterr()
    report = json.loads(captured.out) if json_report and captured.out else captured.out
    return code, report, captured.err


def _replays(stack: Stack, report: dict[str, Any]) -> list[dict[str, Any]]:
    return [replay for probe in report["probes"] for replay in probe["replays"]]


CASES = [
    ("handoff", "responses", 12, None),
    ("handoff", "chat", 12, None),
    ("argument", "responses", 40, 23),
    ("argument", "chat", 21, 9),
    ("format", "responses", 16, None),
    ("format", "chat", 7, None),
]


@pytest.mark.parametrize(("name", "api", "steps", "deciding"), CASES)
def test_bisect_finds_the_deciding_step_within_the_bound(
    stack: Stack,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: Any,
    api: ModelApi,
    steps: int,
    deciding: int | None,
) -> None:
    chosen = scenario(name, steps, deciding)
    run_id = stack.source(chosen, api)
    stack.model.script(list(chosen.fixed), per_conversation=True)
    code, report, err = bisect(stack, monkeypatch, capsys, run_id, *chosen.change, api=api)
    requests = stack.model.requests
    shown = json.dumps(report, indent=1)
    assert code == 0, err + shown

    assert report["model_calls"] == chosen.steps == steps
    assert (report["status"], report["deciding_step"]) == ("found", f"llm:{chosen.deciding}")
    assert report["contradictions"] == [] and report["split_probes"] == []
    probes = report["probes"]
    assert len(probes) <= math.ceil(math.log2(chosen.steps)) + 1, shown
    for probe in probes:
        step = int(probe["step"].removeprefix("llm:"))
        expected = "fixed" if step <= chosen.deciding else "not_fixed"
        assert (probe["decision"], probe["agreed"]) == (expected, 1), shown
    # Counted at the model server: each probe's live calls, none for a recorded prefix.
    live = [chosen.live_calls(int(p["step"].removeprefix("llm:"))) for p in probes]
    assert len(requests) == sum(live), (live, shown)

    # Every probe is a replay run like any other: linked to its source, its fork and verdict
    # in its metadata.
    for probe in probes:
        (replay,) = probe["replays"]
        stored = stack.running.run(replay["replay_run_id"])
        assert (stored["run"]["kind"], stored["run"]["source_run_id"]) == ("replay", run_id)
        (root,) = [s for s in stored["spans"] if s["parent_span_id"] == ""]
        metadata = json.loads(root["attributes"]["afr.trace.metadata"])
        assert metadata["afr.replay"]["fork"]["step"] == probe["step"]
        assert metadata["afr.replay"]["fork"]["overrides"] == list(chosen.overrides)
        assert metadata["afr.verdict"] == replay["verdict"]
        assert replay["verdict"] == (
            "FAILURE_FIXED" if probe["decision"] == "fixed" else "STILL_FAILING"
        )
    linked = stack.running.api("/api/v1/runs", source_run_id=run_id, kind="replay").json()
    assert len(linked["runs"]) >= len(probes)


def test_the_text_report_says_where_it_was_decided(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    chosen = scenario("argument", 12, 5)
    run_id = stack.source(chosen, "responses")
    stack.model.script(list(chosen.fixed), per_conversation=True)
    code, text, err = bisect(stack, monkeypatch, capsys, run_id, *chosen.change, json_report=False)
    assert code == 0, err
    assert "decided at llm:5 (Booking Agent: book_flight): live from llm:5 with the change" in text
    assert "from llm:6 on it is not" in text
    assert "no contradiction observed" in text
    assert f"afr runs list --source-run {run_id}" in text


def test_repeats_decide_by_majority_with_a_flaky_model(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    chosen = scenario("argument", 12, 6)
    run_id = stack.source(chosen, "responses")
    # The corrected booking is made 2 times of 3.
    stack.model.script(list(flaky(chosen, 3).fixed), per_conversation=True)
    code, report, err = bisect(stack, monkeypatch, capsys, run_id, *chosen.change, "--repeats", "3")
    shown = json.dumps(report, indent=1)
    assert code == 0, err + shown
    assert report["deciding_step"] == "llm:6" and report["repeats"] == 3
    for probe in report["probes"]:
        fixed = int(probe["step"].removeprefix("llm:")) <= 6
        assert len(probe["replays"]) == 3
        assert probe["agreed"] == (2 if fixed else 3), shown
        assert (f"{probe['step']}" in report["split_probes"]) == fixed
    assert report["replays"] == 3 * len(report["probes"])


def test_a_tie_is_undecided_and_the_report_gives_the_open_range(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    chosen = scenario("format", 9)
    run_id = stack.source(chosen, "responses")
    stack.model.script(list(flaky(chosen, 2).fixed), per_conversation=True)  # right 1 of 2
    code, report, err = bisect(stack, monkeypatch, capsys, run_id, *chosen.change, "--repeats", "2")
    assert code == 1, err
    assert report["status"] == "undecided" and report["deciding_step"] is None
    assert report["undecided"] == {"from": "llm:1", "to": "llm:9"}
    (probe,) = report["probes"]
    assert (probe["step"], probe["decision"], probe["agreed"]) == ("llm:5", "undecided", 1)
    assert report["stopped"] == "the probe at llm:5 is undecided (1 fixed, 1 not fixed of 2)"


def test_max_replays_stops_it_with_the_range_it_could_not_decide(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    chosen = scenario("argument", 40, 23)
    run_id = stack.source(chosen, "responses")
    stack.model.script(list(chosen.fixed), per_conversation=True)
    code, report, _ = bisect(
        stack, monkeypatch, capsys, run_id, *chosen.change, "--max-replays", "2"
    )
    assert code == 1
    assert [(p["step"], p["decision"]) for p in report["probes"]] == [
        ("llm:20", "fixed"),
        ("llm:30", "not_fixed"),
    ]
    assert report["undecided"] == {"from": "llm:21", "to": "llm:29"}
    assert report["stopped"] == "max replays reached: 2 made of 2, a probe takes 1"
    code, text, _ = bisect(
        stack, monkeypatch, capsys, run_id, *chosen.change, "--max-replays", "1", json_report=False
    )
    assert code == 1
    assert "undecided: llm:21..llm:40 not decided (fixed from llm:20)" in text


def test_the_day_budget_stops_it(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    chosen = scenario("argument", 12, 5)
    run_id = stack.source(chosen, "responses")
    stack.model.script(list(chosen.fixed), per_conversation=True)
    # A day budget no model call fits: the ledger refuses the first, before it is sent.
    code, report, _ = bisect(
        stack, monkeypatch, capsys, run_id, *chosen.change, day_budget_usd=1e-9
    )
    assert code == 1 and stack.model.requests == []
    (probe,) = report["probes"]
    assert probe["decision"] == "undecided" and probe["replays"][0]["verdict"] is None
    assert "budget exhausted: day budget" in report["stopped"]
    assert report["undecided"] == {"from": "llm:1", "to": "llm:12"}
    # Spent: the next bisection asks for no replay at all.
    jobs = stack.jobs("responses", 1e-9)
    code, report, _ = bisect(stack, monkeypatch, capsys, run_id, *chosen.change, day_budget_usd=0.0)
    assert code == 1 and report["probes"] == [] and stack.jobs("responses", 0.0) == 0
    assert report["stopped"].startswith("the worker's day budget is spent")
    assert stack.jobs("responses", 1e-9) == jobs


def test_bad_input_is_refused_with_the_reason_and_makes_no_replay(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    chosen = scenario("format", 6)
    failed = stack.source(chosen, "responses")
    reply = dataclasses.replace(chosen.fixed[-1], expect_instructions_containing=None)
    succeeding = (*chosen.fixed[:-1], reply)
    succeeded = stack.source(Scenario("format", 6, succeeding, succeeding, (), ()), "responses")
    no_model_call = Captures(stack.running).source("responses", "guardrail_tripped").run_id
    stack.model.script(list(chosen.fixed), per_conversation=True)
    jobs = stack.jobs("responses")
    cases: list[tuple[str, tuple[str, ...], str]] = [
        ("f" * 32, (), f"no run {'f' * 32} in this key's project (404)"),
        (succeeded, (), f"run {succeeded} did not fail (status ok)"),
        (no_model_call, (), f"run {no_model_call} made no model call"),
        (
            failed,
            ("--output", "call_nope=x"),
            f"no step of run {failed} takes this change: tool_output call_nope: that call was"
            " never called",
        ),
        (failed, ("--arguments", 'call_book_1={"date": "x"}'), "--arguments: a tool call's"),
        (failed, ("--instructions", "Nobody=x"), "instructions 'Nobody': no such agent"),
        (failed, ("--agent-settings", "Booking Agent=[1]"), "the value must be a JSON object"),
        (failed, ("--stub", "no-equals"), "--stub takes TOOL=OUTPUT"),
    ]
    for run_id, flags, message in cases:
        code, _, err = bisect(stack, monkeypatch, capsys, run_id, *flags)
        assert code == 2, (run_id, flags, err)
        assert message in err, (flags, err)
    for flags, message in (
        (("--repeats", "0"), "--repeats: must be at least 1, not 0"),
        (("--max-replays", "x"), "--max-replays: not a whole number: 'x'"),
    ):
        with pytest.raises(SystemExit) as exited:
            bisect(stack, monkeypatch, capsys, failed, *flags)
        assert exited.value.code == 2
        assert message in capsys.readouterr().err
    assert stack.model.requests == [], "no model call for refused input"
    assert stack.jobs("responses") == jobs, "no replay for refused input"
