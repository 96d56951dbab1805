"""The sacred path's last step: the eval synthesized from the fixed replay of the seeded run,
run with ``afr eval run`` — the real replay engine, the real ``Runner`` and OpenAI model
classes against the scripted model, the worker's ledger, and each eval run written back to
a real collector as a run of kind ``eval``."""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from junitparser import Failure, JUnitXml, Skipped

from afr.cli import main
from afr.incident import failing_script, fixed_script
from afr.scripted_model import ScriptedModelServer, ScriptedTurn
from afr_exporter import semconv as sc
from replay_worker import eval_run as command
from replay_worker.eval_run import slot_sweep_id
from replay_worker.evals.contract import EvalDocument, ReplaySpec, write_eval
from replay_worker.evals.runner import eval_trace_id
from replay_worker.evals.synthesis import synthesize
from replay_worker.schedule import parse_schedule
from replay_worker.settings import WorkerSettings
from replay_worker.state import (
    StateStore,
    StateStoreUnavailable,
    nusd,
    open_state_store,
    utc_day,
)
from replay_worker.sweeps import sweep_trace_id
from tests.e2e.captured import capture_fixed_incident
from tests.integration.conftest import Running, start_collector

pytestmark = pytest.mark.slow

STUB = json.dumps({"status": "refunded", "order_id": "A-1001", "amount": 12.0})
AGENTS = "tests.e2e.eval_agents"


@dataclass
class World:
    running: Running
    source_run_id: str
    replay_run_id: str
    document: EvalDocument
    evals: Path
    """A directory holding just the synthesized eval."""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """The seeded failing run and its FAILURE_FIXED replay in a real collector, and the eval
    synthesized from them."""
    root = tmp_path_factory.mktemp("evals")
    thread, running = start_collector(root / "data")
    try:
        source, replayed = capture_fixed_incident(running)
        document = synthesize(source, running.run(replayed.replay_run_id))
        write_eval(document, root / "one")
        yield World(
            running,
            source["run"]["run_id"],
            replayed.replay_run_id,
            document,
            root / "one",
        )
    finally:
        thread.stop()


def variant(document: EvalDocument, name: str, **replay: Any) -> EvalDocument:
    """Another eval from the same capture (another id)."""
    return EvalDocument.create(
        name=name,
        provenance=document.provenance,
        fixture=document.fixture,
        replay=ReplaySpec.model_validate({**document.replay.model_dump(), **replay}),
        assertions=list(document.assertions),
    )


def configure(
    monkeypatch: pytest.MonkeyPatch,
    world: World,
    model_url: str,
    tmp_path: Path,
    *,
    collector: bool = True,
    **extra: str,
) -> None:
    monkeypatch.setenv("AFR_WORKER_MODEL_BASE_URL", model_url)
    monkeypatch.setenv("AFR_WORKER_MODEL_API_KEY", "scripted")
    monkeypatch.setenv("AFR_WORKER_DATA_DIR", str(tmp_path / "worker"))
    if collector:
        monkeypatch.setenv("AFR_WORKER_COLLECTOR_OTLP_ENDPOINT", world.running.grpc_endpoint)
        monkeypatch.setenv("AFR_WORKER_COLLECTOR_KEY", world.running.key)
    for name, value in extra.items():
        monkeypatch.setenv(f"AFR_WORKER_{name.upper()}", value)


def eval_run(*args: str | Path) -> int:
    return main(["eval", "run", *map(str, args)])


def script_with_answer(text: str) -> list[ScriptedTurn]:
    """The fixing model, wording its final answer its own way."""
    *calls, _ = fixed_script()
    return [*calls, ScriptedTurn(text=text, expect_instructions_containing="refund agent")]


NAME = sc.GEN_AI_EVALUATION_NAME
LABEL = sc.GEN_AI_EVALUATION_SCORE_LABEL
VALUE = sc.GEN_AI_EVALUATION_SCORE_VALUE
EXPLANATION = sc.GEN_AI_EVALUATION_EXPLANATION


def assertion_events(assertions: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The ``gen_ai.evaluation.result`` events (as stored) expected of an eval run whose
    ``afr.eval.assertions`` are these, its status passed or failed."""
    return [
        {
            NAME: sc.EVALUATION_ASSERTION_PREFIX + a["kind"],
            LABEL: "pass" if a["passed"] else "fail",
            VALUE: "1.0" if a["passed"] else "0.0",
            EXPLANATION: f"expected {a['expected']}; seen {a['actual']}",
        }
        for a in assertions
    ]


def stored_eval_run(world: World, run_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    run = world.running.run(run_id)
    (root,) = [s for s in run["spans"] if s["parent_span_id"] == ""]
    return run, root


def test_the_synthesized_eval_passes_against_the_fixing_model_and_is_recorded(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    junit = tmp_path / "junit.xml"
    with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
        configure(monkeypatch, world, model.base_url, tmp_path)
        code = eval_run(world.evals, "--junit", junit)
        requests = model.requests
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert f"[1/1] {world.document.id} passed" in err
    assert "eval runs recorded in the collector" in err
    rows = [line for line in out.splitlines() if line.startswith(("ok", "FAIL"))]
    assert len(rows) == len(world.document.assertions)
    assert all(row.startswith("ok") for row in rows)
    assert any("tool_argument" in row and "/amount" in row and "12.0" in row for row in rows)
    assert "1 eval: 1 passed, 0 failed, 0 inconclusive, 0 errored" in out
    assert requests and all(r.body.get("store") is False for r in requests), "the worker's path"
    assert all(r.body.get("max_output_tokens") for r in requests), "bounded by the ledger"

    (suite,) = list(JUnitXml.fromfile(str(junit)))
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (1, 0, 0, 0)
    (case,) = list(suite)
    run_id = (case.system_out or "").split()[2].rstrip(";")

    # Written back: a run of kind eval, linked to its source and to the fixing replay.
    run, root = stored_eval_run(world, run_id)
    assert run["run"]["kind"] == "eval"
    assert run["run"]["source_run_id"] == world.source_run_id
    assert run["run"]["status"] == "ok"
    links = {link["trace_id"]: link["attributes"] for link in root["links"]}
    assert set(links) == {world.source_run_id, world.replay_run_id}
    assert links[world.replay_run_id]["afr.link.role"] == "replay"
    metadata = json.loads(root["attributes"]["afr.trace.metadata"])
    assert metadata["afr.eval.id"] == world.document.id
    assert metadata["afr.eval.name"] == world.document.name
    assert metadata["afr.eval.status"] == "passed"
    assert metadata["afr.verdict"] == "FAILURE_FIXED"
    assert len(metadata["afr.eval.assertions"]) == len(world.document.assertions)
    assert all(a["passed"] for a in metadata["afr.eval.assertions"])
    assert "afr.sweep.id" not in metadata
    # In the OTel GenAI vocabulary too: the replay's verdict, the eval's, one per assertion.
    verdict, overall, *checked = world.running.evaluations(run_id)
    n = len(world.document.assertions)
    assert (verdict[NAME], verdict[LABEL], verdict[VALUE]) == (
        sc.EVALUATION_REPLAY_VERDICT,
        "FAILURE_FIXED",
        "1.0",
    )
    assert overall == {
        NAME: sc.EVALUATION_EVAL,
        LABEL: "pass",
        VALUE: "1.0",
        EXPLANATION: f"{n} of {n} assertions passed; the replay's verdict: FAILURE_FIXED",
    }
    assert checked == assertion_events(metadata["afr.eval.assertions"])
    # "Every eval run of this incident": the read API filters by source run.
    evals = world.running.api(
        "/api/v1/runs", kind="eval", source_run_id=world.source_run_id
    ).json()["runs"]
    assert run_id in [r["run_id"] for r in evals]
    assert {r["source_run_id"] for r in evals} == {world.source_run_id}
    linked = world.running.api("/api/v1/runs", source_run_id=world.source_run_id).json()["runs"]
    assert world.replay_run_id in [r["run_id"] for r in linked], "its replays too"
    assert world.running.api("/api/v1/runs", source_run_id="x").status_code == 400


def test_the_eval_fails_against_the_original_behaviour(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with ScriptedModelServer(failing_script(), per_conversation=True) as model:
        configure(monkeypatch, world, model.base_url, tmp_path)
        code = eval_run(world.evals, "--json", "--sweep-id", "sweep_test_original")
    out, err = capsys.readouterr()
    assert code == 1, out + err
    (outcome,) = json.loads(out)
    assert (outcome["status"], outcome["verdict"]) == ("failed", "STILL_FAILING")
    failed = {a["kind"]: a for a in outcome["assertions"] if not a["passed"]}
    assert failed["tool_argument"]["actual"] == '"12.OO"'
    assert "refund_order (captured_error)" in failed["no_span_errored"]["actual"]
    assert outcome["cost_usd"] > 0

    # "Every failing eval last night": failed eval runs are errored runs of kind eval.
    run, root = stored_eval_run(world, outcome["eval_run_id"])
    assert run["run"]["status"] == "error"
    metadata = json.loads(root["attributes"]["afr.trace.metadata"])
    assert (metadata["afr.eval.status"], metadata["afr.sweep.id"]) == (
        "failed",
        "sweep_test_original",
    )
    assert any(s["name"] == "eval.result" and s["status"]["code"] == "Error" for s in run["spans"])
    verdict, overall, *checked = world.running.evaluations(outcome["eval_run_id"])
    assert (verdict[LABEL], verdict[VALUE]) == ("STILL_FAILING", "0.0")
    assert (overall[LABEL], overall[VALUE]) == ("fail", "0.0")
    assert "(failed: " in overall[EXPLANATION] and "no_span_errored" in overall[EXPLANATION]
    assert checked == assertion_events(metadata["afr.eval.assertions"])
    assert {e[LABEL] for e in checked} == {"pass", "fail"}
    failing = world.running.api("/api/v1/runs", kind="eval", status="error").json()["runs"]
    assert outcome["eval_run_id"] in [r["run_id"] for r in failing]


def test_a_fixing_model_that_words_its_answer_differently_still_passes(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    answer = "Refund of 12.00 issued on A-1001; you'll see it in 3-5 days."
    with ScriptedModelServer(script_with_answer(answer), per_conversation=True) as model:
        configure(monkeypatch, world, model.base_url, tmp_path, collector=False)
        code = eval_run(world.evals, "--json")
    out, err = capsys.readouterr()
    assert code == 0, out + err
    (outcome,) = json.loads(out)
    assert outcome["status"] == "passed"
    assert "eval runs not recorded: no collector configured" in err


def script_without_amount() -> list[ScriptedTurn]:
    """A model under strict function calling: it cannot send a parameter the schema lacks."""
    handoff, refund, answer = fixed_script()
    (call,) = refund.tool_calls
    call = replace(call, arguments=json.dumps({"order_id": "A-1001"}))
    return [handoff, replace(refund, tool_calls=(call,)), answer]


@pytest.mark.parametrize(
    ("agent", "script", "failed"),
    [
        ("current", fixed_script, {}),
        # The model still sends amount; the SDK drops it (not a parameter any more): the
        # tool would refund in full, and the eval says so.
        (
            "amount_dropped",
            fixed_script,
            {"tool_argument": "'amount' sent, but refund_order has no such parameter"},
        ),
        (
            "amount_dropped",
            script_without_amount,
            {"tool_argument": "unresolved: no member 'amount'"},
        ),
    ],
)
def test_agent_option_runs_the_eval_against_the_agent_code_as_it_is_now(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    agent: str,
    script: Callable[[], list[ScriptedTurn]],
    failed: dict[str, str],
) -> None:
    with ScriptedModelServer(script(), per_conversation=True) as model:
        configure(monkeypatch, world, model.base_url, tmp_path, collector=False)
        code = eval_run(world.evals, "--agent", f"{AGENTS}:{agent}", "--json")
        schemas = [
            set(tool["parameters"]["properties"])
            for r in model.requests
            for tool in r.body.get("tools", [])
            if tool.get("name") == "refund_order"
        ]
    out, err = capsys.readouterr()
    assert code == (1 if failed else 0), out + err
    (outcome,) = json.loads(out)
    assert outcome["status"] == ("failed" if failed else "passed")
    assert outcome["verdict"] == "FAILURE_FIXED", "no tool failed: only the assertion catches it"
    assert {a["kind"]: a["actual"] for a in outcome["assertions"] if not a["passed"]} == failed
    # The model was offered the tool as the code defines it now.
    expected = {"order_id"} if agent == "amount_dropped" else {"order_id", "amount"}
    assert schemas and all(schema == expected for schema in schemas)


def test_inconclusive_fails_unless_allowed_and_junit_agrees(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without the labelled stub, the corrected call has no known outcome: INCONCLUSIVE."""
    evals = tmp_path / "evals"
    write_eval(world.document, evals)
    unstubbed = variant(world.document, "refund-desk: no stub", stub_outputs={})
    write_eval(unstubbed, evals)
    junit = tmp_path / "junit.xml"
    with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
        configure(monkeypatch, world, model.base_url, tmp_path, collector=False)
        strict = eval_run(evals, "--junit", junit)
        (suite,) = list(JUnitXml.fromfile(str(junit)))
        allowed = eval_run(evals, "--junit", junit, "--allow-inconclusive")
        (allowed_suite,) = list(JUnitXml.fromfile(str(junit)))
    out, err = capsys.readouterr()
    assert (strict, allowed) == (1, 0), out + err
    assert f"{unstubbed.id} inconclusive" in err
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (2, 1, 0, 0)
    assert (allowed_suite.tests, allowed_suite.failures, allowed_suite.skipped) == (2, 0, 1)
    cases = {case.name.split()[0]: case for case in allowed_suite}
    assert cases[world.document.id].is_passed
    assert isinstance(cases[unstubbed.id].result[0], Skipped)
    assert isinstance({c.name.split()[0]: c for c in suite}[unstubbed.id].result[0], Failure), (
        "inconclusive fails the report when it fails the run"
    )


def test_shards_cover_every_eval_exactly_once_and_a_shard_runs(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    evals = tmp_path / "evals"
    documents = [variant(world.document, f"refund-desk #{n}") for n in range(9)]
    for document in documents:
        write_eval(document, evals / ("a" if int(document.id[-1], 16) % 2 else "b"))
    ids = sorted(d.id for d in documents)
    with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
        configure(monkeypatch, world, model.base_url, tmp_path, collector=False)
        capsys.readouterr()
        for count in range(1, 8):
            seen: list[str] = []
            for index in range(1, count + 1):
                assert eval_run(evals, "--shard", f"{index}/{count}", "--list") == 0
                seen += [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()]
            assert sorted(seen) == ids, f"N={count}"
        # A shard runs what it lists, and only that.
        assert eval_run(evals, "--shard", "2/4", "--list") == 0
        listed = [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()]
        assert eval_run(evals, "--shard", "2/4", "--json") == 0
        ran = [o["eval_id"] for o in json.loads(capsys.readouterr().out)]
    assert sorted(ran) == sorted(listed)
    assert len(ran) in (2, 3)
    assert eval_run(evals, "--shard", "5/4") == 2


def test_several_processes_run_the_evals_and_record_them(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    evals = tmp_path / "evals"
    documents = [variant(world.document, f"refund-desk #{n}") for n in range(3)]
    for document in documents:
        write_eval(document, evals)
    with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
        configure(monkeypatch, world, model.base_url, tmp_path)
        code = eval_run(evals, "--workers", "2", "--json", "--sweep-id", "sweep_test_workers")
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "eval runs recorded in the collector" in err
    outcomes = json.loads(out)
    assert sorted(o["eval_id"] for o in outcomes) == sorted(d.id for d in documents)
    assert {o["status"] for o in outcomes} == {"passed"}
    for item in outcomes:
        run, root = stored_eval_run(world, item["eval_run_id"])
        assert run["run"]["kind"] == "eval"
        assert json.loads(root["attributes"]["afr.trace.metadata"])["afr.sweep.id"] == (
            "sweep_test_workers"
        )


def test_bad_input_and_spent_budgets(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    text = world.document.to_json_text().replace("refund-desk", "refund-desk (edited)", 1)
    (tampered / "eval.json").write_text(text)
    assert eval_run(tampered) == 2
    assert "/id: does not match the content" in capsys.readouterr().err
    assert eval_run(tmp_path / "nowhere") == 2
    assert eval_run(world.evals, "--agent", f"{AGENTS}:not_an_agent") == 2
    with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
        configure(monkeypatch, world, model.base_url, tmp_path, collector=False)
        monkeypatch.setenv("AFR_WORKER_JOB_BUDGET_USD", "0.000001")
        capsys.readouterr()
        code = eval_run(world.evals, "--json")
        requests = model.requests
    (outcome,) = json.loads(capsys.readouterr().out)
    assert code == 1
    assert outcome["status"] == "errored"
    assert "budget exhausted" in outcome["error"]
    assert requests == [], "nothing was sent that the budget did not allow"


def test_the_day_budget_is_the_one_of_the_worker_of_the_data_dir(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The day's spend is in the state of the worker `afr up` starts for the data directory
    (AFR_DATA_DIR, or --data-dir): what one spends the other sees, whatever the folder."""
    data_dir = tmp_path / "data"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    worker = WorkerSettings(data_dir=data_dir / "worker")  # as `afr up` starts it
    with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
        configure(monkeypatch, world, model.base_url, tmp_path, collector=False)
        monkeypatch.delenv("AFR_WORKER_DATA_DIR")
        monkeypatch.setenv("AFR_DATA_DIR", str(data_dir))
        monkeypatch.chdir(elsewhere)
        assert eval_run(world.evals, "--no-export") == 0
        store = open_state_store(worker)
        try:
            spent = store.day(utc_day(time.time()))
            assert spent.requests == len(model.requests) > 0 and spent.spent_usd > 0
            # The worker spends the rest of the day's budget...
            limit = spent.spent_usd + 0.01
            assert store.reserve(utc_day(time.time()), None, nusd(0.01), nusd(limit))
        finally:
            store.close()
        monkeypatch.setenv("AFR_WORKER_DAY_BUDGET_USD", str(limit))
        monkeypatch.setenv("AFR_DATA_DIR", str(tmp_path / "not-this-one"))
        sent = len(model.requests)
        capsys.readouterr()
        # ... and the evals of that data directory (named by --data-dir) can spend no more.
        code = eval_run(world.evals, "--no-export", "--json", "--data-dir", data_dir)
        requests = model.requests[sent:]
    (outcome,) = json.loads(capsys.readouterr().out)
    assert code == 1
    assert outcome["status"] == "errored"
    assert "budget exhausted" in outcome["error"]
    assert requests == [], "nothing was sent that the worker's spend did not leave room for"
    assert not (elsewhere / ".afr").exists(), "no state in the current folder"
    assert not (tmp_path / "not-this-one").exists()


def test_zero_based_shards_cover_every_eval_once_and_a_configmap_mount_counts_once(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A Kubernetes Indexed Job's pods run ``--shard $JOB_COMPLETION_INDEX/N`` (0..N-1)
    over the evals ConfigMap, which Kubernetes mounts as links into a hidden
    ``..<timestamp>`` directory beside them: still each eval exactly once."""
    mounted = tmp_path / "evals"
    data = mounted / "..2026_12_01_03_00_00.000000001"
    documents = [variant(world.document, f"refund-desk #{n}") for n in range(7)]
    for document in documents:
        write_eval(document, data)
    (mounted / "..data").symlink_to(data.name)
    for document in documents:
        (mounted / f"{document.id}.json").symlink_to(f"..data/{document.id}.json")
    ids = sorted(d.id for d in documents)
    configure(monkeypatch, world, "http://127.0.0.1:9", tmp_path, collector=False)
    capsys.readouterr()
    for count in range(1, 6):
        seen: list[str] = []
        for index in range(count):
            assert eval_run(mounted, "--shard", f"{index}/{count}", "--list") == 0
            seen += [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()]
        assert sorted(seen) == ids, f"N={count}"
    assert eval_run(mounted, "--shard", "0/4", "--list") == 0
    first = capsys.readouterr().out
    assert eval_run(mounted, "--shard", "4/4", "--list") == 0
    assert capsys.readouterr().out == first, "0/N and N/N are the same shard"


def test_a_shard_run_twice_for_one_slot_is_stored_once(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A pod of the nightly Indexed Job lost after its runs reached the collector but before
    its shard was recorded runs the shard again for the same slot: each eval's run has the
    same id and the same span ids, so the store holds it once."""
    evals = tmp_path / "evals"
    documents = [variant(world.document, f"refund-desk #{n}") for n in range(4)]
    for document in documents:
        write_eval(document, evals)
    slot = "afr-sweep-29410560"  # a CronJob's Job name: a slot of its own
    outcomes: list[dict[str, str]] = []
    with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
        configure(monkeypatch, world, model.base_url, tmp_path)
        monkeypatch.setattr(command, "_RECORD_RETRY_S", (0.0, 0.0))
        for attempt in range(2):
            if attempt == 0:
                monkeypatch.setattr(StateStore, "record_shard", _state_lost)
            capsys.readouterr()
            code = eval_run(evals, "--shard", "0/2", "--slot", slot, "--json")
            out, err = capsys.readouterr()
            assert code == (3 if attempt == 0 else 0), out + err
            assert "eval runs recorded in the collector" in err
            outcomes.append({o["eval_id"]: o["eval_run_id"] for o in json.loads(out)})
            monkeypatch.undo()
            configure(monkeypatch, world, model.base_url, tmp_path)
        settings = WorkerSettings()
    first, second = outcomes
    assert first == second and len(first) == 2, "the same evals, under the same run ids"
    sweep_id = slot_sweep_id(settings, slot)
    assert sweep_id == parse_schedule(settings.sweep_cron).resolve(slot).sweep_id
    for eval_id, run_id in first.items():
        assert run_id == eval_trace_id(sweep_id, eval_id).removeprefix("trace_")
        run, root = stored_eval_run(world, run_id)
        spans = run["spans"]
        assert len({s["span_id"] for s in spans}) == len(spans)
        names = Counter(s["name"] for s in spans)
        assert names["eval.result"] == 1 and names["replay.verdict"] == 1, "stored once"
        metadata = json.loads(root["attributes"]["afr.trace.metadata"])
        assert (metadata["afr.sweep.id"], metadata["afr.eval.status"]) == (sweep_id, "passed")
    # A slot of the schedule is the sweep the worker and `afr sweep run --slot` run.
    night = "2026-12-01T03:00:00Z"
    assert (
        slot_sweep_id(settings, night)
        == parse_schedule(settings.sweep_cron).resolve(night).sweep_id
    )


def _state_lost(*args: Any, **kwargs: Any) -> Any:
    raise StateStoreUnavailable("the state store at postgresql://afr:***@db/afr is unavailable")


def test_the_shard_that_completes_a_slot_writes_the_sweeps_summary_run_once(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The nightly Indexed Job: each pod runs `afr eval run --shard i/N --slot <job>` on the
    worker's shared state. The pod that records the last shard writes the sweep's summary
    run (kind sweep, linked to every eval run) and finishes the sweep; a retried pod, before
    or after that, writes nothing twice."""
    evals = tmp_path / "evals"
    documents = [variant(world.document, f"night #{n}") for n in range(4)]
    for document in documents:
        write_eval(document, evals)
    slot = "afr-sweep-29410562"
    with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
        configure(monkeypatch, world, model.base_url, tmp_path)
        settings = WorkerSettings()
        sweep_id = slot_sweep_id(settings, slot)
        summary_run = sweep_trace_id(sweep_id).removeprefix("trace_")
        for index, recorded in ((1, 1), (2, 2)):
            capsys.readouterr()
            assert eval_run(evals, "--shard", f"{index}/3", "--slot", slot) == 0
            err = capsys.readouterr().err
            assert f"shard {index}/3 recorded, {recorded} of 3 in" in err, err
            world.running.collector.flush()
            assert world.running.api(f"/api/v1/runs/{summary_run}").status_code == 404
        # Shard 2 again (its pod retried after it had recorded): nothing run, nothing paid.
        served = model.turns_served
        assert eval_run(evals, "--shard", "2/3", "--slot", slot) == 0
        assert "shard 2/3 is recorded already (2 of 3); its evals are not run again" in (
            capsys.readouterr().err
        )
        assert model.turns_served == served
        # The last shard (JOB_COMPLETION_INDEX 0) writes the summary run, then its pod is
        # lost before the sweep is marked finished: exit 3, and the retry finishes it.
        monkeypatch.setattr(command, "_RECORD_RETRY_S", (0.0, 0.0))
        monkeypatch.setattr(StateStore, "finish_shards", _state_lost)
        assert eval_run(evals, "--shard", "0/3", "--slot", slot) == 3
        capsys.readouterr()
        monkeypatch.undo()
        configure(monkeypatch, world, model.base_url, tmp_path)
        assert world.running.run(summary_run)["run"]["kind"] == "sweep", "written before"
        served = model.turns_served
        assert eval_run(evals, "--shard", "3/3", "--slot", slot) == 0
        err = capsys.readouterr().err
        assert "shard 3/3 is recorded already (3 of 3)" in err, err
        assert (
            f"all 3 shards recorded; sweep {sweep_id} finished (4 evals: 4 passed, 0 failed, "
            f"0 inconclusive, 0 errored), summary run {summary_run}"
        ) in err, err
        # Once more after the end: nothing run, nothing written.
        assert eval_run(evals, "--shard", "1/3", "--slot", slot) == 0, "retried after the end"
        err = capsys.readouterr().err
        assert "shard 1/3 is recorded already (3 of 3)" in err and "summary run" not in err
        # A pod of the same slot with another N is bad input: refused before it runs.
        assert eval_run(evals, "--shard", "1/2", "--slot", slot) == 2
        assert "every shard of a slot needs the same N" in capsys.readouterr().err
        assert model.turns_served == served
    expected = {d.id: eval_trace_id(sweep_id, d.id).removeprefix("trace_") for d in documents}
    stored = world.running.run(summary_run)
    assert (stored["run"]["kind"], stored["run"]["status"]) == ("sweep", "ok")
    assert len({s["span_id"] for s in stored["spans"]}) == len(stored["spans"]), "written once"
    (root,) = [s for s in stored["spans"] if s["parent_span_id"] == ""]
    links = {link["trace_id"]: link["attributes"]["afr.link.role"] for link in root["links"]}
    assert links == {run_id: eval_id for eval_id, run_id in expected.items()}
    metadata = json.loads(root["attributes"]["afr.trace.metadata"])
    assert (metadata["afr.sweep.id"], metadata["afr.sweep.slot"]) == (sweep_id, slot)
    assert metadata["afr.sweep.counts"] == {
        "passed": 4,
        "failed": 0,
        "inconclusive": 0,
        "errored": 0,
        "evals": 4,
    }
    for run_id in expected.values():
        assert world.running.run(run_id)["run"]["kind"] == "eval"
    store = StateStore(settings.state_path)
    try:
        sweep = store.get_sweep(sweep_id)
        assert sweep is not None and sweep.state == "finished" and sweep.summary is not None
        assert sweep.summary["sweep_run_id"] == summary_run
    finally:
        store.close()


def test_a_night_whose_shards_never_all_recorded_gets_an_errored_summary_run(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One shard of two records, the other never does (its retries used up). The next
    night's first shard, past AFR_SWEEP_TIMEOUT_S, fails that sweep and writes its summary
    run, errored, so `kind=sweep&status=error` lists the bad night."""
    evals = tmp_path / "evals"
    for n in range(2):
        write_eval(variant(world.document, f"half #{n}"), evals)
    monkeypatch.setenv("AFR_SWEEP_TIMEOUT_S", "3600")
    with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
        configure(monkeypatch, world, model.base_url, tmp_path)
        settings = WorkerSettings()
        bad_night, next_night = "afr-sweep-29410565", "afr-sweep-29412005"
        assert eval_run(evals, "--shard", "1/2", "--slot", bad_night) == 0
        bad_sweep = slot_sweep_id(settings, bad_night)
        # A day goes by (the state's clock is the wall clock: its record is made older).
        with sqlite3.connect(settings.state_path) as db:
            db.execute(
                "UPDATE sweeps SET created_at = created_at - 86400 WHERE sweep_id = ?",
                (bad_sweep,),
            )
        db.close()
        capsys.readouterr()
        assert eval_run(evals, "--shard", "1/2", "--slot", next_night) == 0
        err = capsys.readouterr().err
        assert f"slot {bad_night!r}: sweep {bad_sweep} failed: only 1 of 2 shards recorded" in err
    stored = world.running.run(sweep_trace_id(bad_sweep).removeprefix("trace_"))
    assert (stored["run"]["kind"], stored["run"]["status"]) == ("sweep", "error")
    (summary,) = [s for s in stored["spans"] if s["name"] == "sweep.summary"]
    assert "incomplete: only 1 of 2 shards recorded" in summary["status"]["message"]
    (result,) = world.running.evaluations(sweep_trace_id(bad_sweep).removeprefix("trace_"))
    assert (result[NAME], result[LABEL]) == (sc.EVALUATION_SWEEP, "fail")
    assert result[EXPLANATION].endswith("; incomplete: only 1 of 2 shards recorded")
    store = StateStore(settings.state_path)
    try:
        failed = store.get_sweep(bad_sweep)
        assert failed is not None and failed.state == "failed"
        following = store.get_sweep(slot_sweep_id(settings, next_night))
        assert following is not None and following.state == "sharded"
    finally:
        store.close()


def test_a_slot_needs_a_collector_and_excludes_a_sweep_id(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure(monkeypatch, world, "http://127.0.0.1:9", tmp_path, collector=False)
    assert eval_run(world.evals, "--slot", "afr-sweep-1") == 2
    assert "--slot records the eval runs" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        eval_run(world.evals, "--slot", "afr-sweep-1", "--sweep-id", "sweep_x")
    assert exited.value.code == 2


def test_a_slot_whose_runs_did_not_reach_the_collector_exits_3(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Exit 3 is what the nightly Job retries: the shard's results did not land."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{unused.getsockname()[1]}"
    with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
        configure(monkeypatch, world, model.base_url, tmp_path)
        monkeypatch.setenv("AFR_WORKER_COLLECTOR_OTLP_ENDPOINT", closed)
        monkeypatch.setattr(command, "_FLUSH_TIMEOUT_S", 2.0)  # nothing will get through
        capsys.readouterr()
        code = eval_run(world.evals, "--slot", "afr-sweep-29410561")
    err = capsys.readouterr().err
    assert code == 3, err
    assert "may be incomplete in the collector" in err


def test_an_unreachable_state_store_exits_3_without_the_password(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
        configure(monkeypatch, world, model.base_url, tmp_path)
        monkeypatch.setenv("AFR_WORKER_STATE_URL", f"postgresql://afr:pw-9f2c@127.0.0.1:{port}/afr")
        capsys.readouterr()
        code = eval_run(world.evals, "--shard", "1/2", "--slot", "afr-sweep-29410563")
    out, err = capsys.readouterr()
    assert code == 3, out + err
    assert "afr eval run: the state store at postgresql://afr:***@127.0.0.1:" in err
    assert "is unavailable" in err and "Traceback" not in err
    assert "pw-9f2c" not in out + err


def test_a_shard_whose_record_fails_exits_3_and_its_retry_completes_the_slot(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The state store lost between the eval runs and the shard's record: exit 3 (the Job
    runs the shard again), and the retry records it."""
    real = StateStore.record_shard
    slot = "afr-sweep-29410564"
    with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
        configure(monkeypatch, world, model.base_url, tmp_path)
        monkeypatch.setattr(command, "_RECORD_RETRY_S", (0.0, 0.0))
        tries: list[int] = []

        def lost(*args: Any, **kwargs: Any) -> Any:
            tries.append(1)
            return _state_lost()

        monkeypatch.setattr(StateStore, "record_shard", lost)
        capsys.readouterr()
        assert eval_run(world.evals, "--slot", slot) == 3
        err = capsys.readouterr().err
        assert "eval runs recorded in the collector" in err
        assert (
            f"afr eval run: shard 1/1 of slot {slot!r} could not be recorded\n"
            "afr eval run: the state store at postgresql://afr:***@db/afr is unavailable"
        ) in err
        assert len(tries) == 3, "tried three times before giving up"
        monkeypatch.setattr(StateStore, "record_shard", real)
        assert eval_run(world.evals, "--slot", slot) == 0
        assert f"slot {slot!r}: its one shard recorded; sweep" in capsys.readouterr().err


def test_a_state_written_by_a_newer_afr_exits_2_with_the_reason(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No retry mends it (exit 2, the Job fails), and it says what to do."""
    configure(monkeypatch, world, "http://127.0.0.1:9", tmp_path)
    state = WorkerSettings().state_path
    state.parent.mkdir(parents=True)
    with sqlite3.connect(state) as db:
        db.execute("PRAGMA user_version=99")
    db.close()
    capsys.readouterr()
    assert eval_run(world.evals, "--slot", "afr-sweep-29410566") == 2
    err = capsys.readouterr().err
    assert "was written by a newer afr (state schema 99); upgrade afr" in err
    assert "Traceback" not in err
