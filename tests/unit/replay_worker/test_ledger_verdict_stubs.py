"""The cost ledger, the verdict table, and the stand-in tools' matching policies."""

from __future__ import annotations

import json

import pytest

from replay_worker.ledger import BudgetExceeded, DayBudget, JobLedger
from replay_worker.replay.fixture import CapturedCall
from replay_worker.replay.stubs import INVALID_ARGUMENTS_MESSAGE, UNAVAILABLE_MESSAGE, StubRegistry
from replay_worker.replay.verdict import first_divergence, verdict
from replay_worker.settings import DEFAULT_PRICES_PER_MTOK


def ledger(limit: float = 1.0, day: float = 10.0) -> JobLedger:
    return JobLedger(limit, DayBudget(day), dict(DEFAULT_PRICES_PER_MTOK))


def test_reserve_worst_case_then_settle_to_usage() -> None:
    book = ledger()
    reserved = book.reserve("gpt-4.1-mini", 10_000, 2_000)
    assert reserved == pytest.approx((10_000 * 0.40 + 2_000 * 1.60) / 1e6)
    book.settle(reserved, "gpt-4.1-mini", 1_000, 100)
    assert book.reserved_usd == pytest.approx(0)
    assert book.spent_usd == pytest.approx((1_000 * 0.40 + 100 * 1.60) / 1e6)
    assert book.day.spent_usd == pytest.approx(book.spent_usd)


def test_unknown_outcome_is_charged_the_full_reservation() -> None:
    book = ledger()
    reserved = book.reserve("some-new-model", 1_000, 1_000)
    assert reserved == pytest.approx((1_000 * 10 + 1_000 * 40) / 1e6), (
        "unknown models priced conservatively"
    )
    book.settle(reserved, "some-new-model", None, None)
    assert book.spent_usd == pytest.approx(reserved)


def test_budgets_refuse_before_the_request() -> None:
    book = ledger(limit=0.001)
    with pytest.raises(BudgetExceeded, match="job budget"):
        book.reserve("gpt-4.1", 1_000_000, 0)
    assert book.requests == 0
    shared = DayBudget(0.002)
    first, second = (
        JobLedger(1.0, shared, dict(DEFAULT_PRICES_PER_MTOK)),
        JobLedger(1.0, shared, dict(DEFAULT_PRICES_PER_MTOK)),
    )
    first.settle(first.reserve("gpt-4.1", 1_000, 0), "gpt-4.1", None, None)
    with pytest.raises(BudgetExceeded, match="day budget"):
        second.reserve("gpt-4.1", 1_000, 0)


@pytest.mark.parametrize(
    ("source_failed", "replay_failed", "expected"),
    [
        (True, False, "FAILURE_FIXED"),
        (True, True, "STILL_FAILING"),
        (False, True, "REGRESSED"),
        (False, False, "UNCHANGED"),
    ],
)
def test_verdict_table(source_failed: bool, replay_failed: bool, expected: str) -> None:
    assert verdict(source_failed, replay_failed) == expected


SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
    "required": ["order_id", "amount"],
    "additionalProperties": False,
}


def calls() -> list[CapturedCall]:
    return [
        CapturedCall("lookup", "c1", '{"q": 1}', '{"hit": 1}'),
        CapturedCall(
            "refund_order",
            "c2",
            '{"order_id": "A", "amount": "12.OO"}',
            None,
            "Error running tool (non-fatal)",
        ),
        CapturedCall("lookup", "c3", '{"q": 2}', '{"hit": 2}'),
    ]


def test_next_policy_answers_with_captured_outputs_in_order() -> None:
    registry = StubRegistry(calls())
    lookup = {"type": "object", "properties": {"q": {"type": "integer"}}}
    assert registry.invoke("lookup", lookup, '{"q": 2}') == '{"hit": 1}', (
        "next unused call, whatever the arguments"
    )
    assert registry.invoke("lookup", lookup, '{"q": 2}') == '{"hit": 2}'
    assert registry.invoke("lookup", lookup, '{"q": 3}') == UNAVAILABLE_MESSAGE
    assert [i.outcome for i in registry.invocations] == ["stub_hit", "stub_hit", "divergence"]


def test_exact_and_strict_policies() -> None:
    lookup = {"type": "object", "properties": {"q": {"type": "integer"}}}
    exact = StubRegistry(calls(), "exact")
    assert exact.invoke("lookup", lookup, '{"q": 2}') == '{"hit": 2}'
    strict = StubRegistry(calls(), "strict")
    assert strict.invoke("lookup", lookup, '{"q": 2}') == UNAVAILABLE_MESSAGE, (
        "the next captured call is q=1"
    )
    assert strict.invoke("lookup", lookup, '{"q": 1}') == '{"hit": 1}'


def test_schema_violations_fail_like_the_real_tool_and_stubs_are_labelled() -> None:
    registry = StubRegistry(calls(), stub_outputs={"refund_order": '{"status": "refunded"}'})
    assert (
        registry.invoke("refund_order", SCHEMA, '{"order_id": "A", "amount": "12.OO"}')
        == INVALID_ARGUMENTS_MESSAGE
    )
    assert registry.failed
    assert (
        registry.invoke("refund_order", SCHEMA, '{"order_id": "A", "amount": 12.0}')
        == '{"status": "refunded"}'
    )
    assert [i.outcome for i in registry.invocations] == ["invalid_arguments", "replay_stub_output"]


def test_first_divergence_names_step_tool_and_argument_diff() -> None:
    registry = StubRegistry(calls())
    lookup = {"type": "object", "properties": {"q": {"type": "integer"}}}
    registry.invoke("lookup", lookup, '{"q": 1}')
    registry.invoke("refund_order", SCHEMA, json.dumps({"order_id": "A", "amount": 12.0}))
    assert first_divergence(calls(), registry.invocations) == {
        "step": 1,
        "tool": "refund_order",
        "kind": "different_arguments",
        "arguments": {"amount": {"source": "12.OO", "replay": 12.0}},
    }
    assert first_divergence(calls()[:1], registry.invocations[:1]) is None
    assert first_divergence(calls(), registry.invocations[:1])["kind"] == "missing_call"  # type: ignore[index]


def test_job_table_evicts_finished_jobs_and_their_webhook_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    from replay_worker import jobs as jobs_module
    from replay_worker.client import CollectorClient
    from replay_worker.jobs import JobRunner
    from replay_worker.settings import WorkerSettings

    monkeypatch.setattr(jobs_module, "_MAX_JOBS_KEPT", 2)

    async def scenario() -> None:
        runner = JobRunner(
            WorkerSettings(),
            CollectorClient("http://127.0.0.1:9", None, timeout_s=0.5),
            lambda name: None,
        )  # type: ignore[arg-type,return-value]
        first, _ = runner.submit("w1", "a" * 32, None, {})
        await runner.wait(first.job_id, 10)
        assert first.state == "failed"
        second, _ = runner.submit("w2", "b" * 32, None, {})
        await runner.wait(second.job_id, 10)
        runner.submit("w3", "c" * 32, None, {})
        assert runner.get(first.job_id) is None, "the oldest finished job is forgotten"
        again, created = runner.submit("w1", "a" * 32, None, {})
        assert created, "its webhook id is forgotten too: a retry starts a new job, no KeyError"
        assert again.job_id != first.job_id

    asyncio.run(scenario())
