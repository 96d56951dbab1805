"""Sharding, eval run ids, the JUnit report and the table: the parts of ``afr eval run``
that need no model."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from junitparser import Error, Failure, JUnitXml, Skipped

from replay_worker.eval_run import parse_shard, render_table
from replay_worker.evals.assertions import AssertionResult
from replay_worker.evals.junit import write_junit
from replay_worker.evals.runner import (
    AgentLoadError,
    EvalOutcome,
    current_agents,
    eval_trace_id,
    load_agent,
    shard,
)

IDS = st.lists(st.from_regex(r"eval_[0-9a-f]{16}", fullmatch=True), unique=True, max_size=40)


@given(IDS)
def test_shards_cover_every_eval_exactly_once_for_1_to_7_machines(ids: list[str]) -> None:
    for count in range(1, 8):
        shards = [shard(ids, index, count) for index in range(1, count + 1)]
        covered = [item for part in shards for item in part]
        assert sorted(covered) == sorted(ids), f"N={count}"
        sizes = [len(part) for part in shards]
        assert max(sizes) - min(sizes) <= 1, "balanced"
        # The order the files were found in does not change the split.
        assert [shard(list(reversed(ids)), i, count) for i in range(1, count + 1)] == shards


def test_a_shard_outside_1_to_n_is_refused() -> None:
    with pytest.raises(ValueError, match="1 <= I <= N"):
        shard(["a"], 0, 2)
    with pytest.raises(ValueError, match="1 <= I <= N"):
        shard(["a"], 3, 2)
    assert parse_shard("2/4") == (2, 4)
    for bad in ("2", "4/3", "a/b", "1/0", "0/0", "-1/2", "1/-2", " 1/2", "1/2/3"):
        with pytest.raises(ValueError, match="--shard"):
            parse_shard(bad)


@given(IDS)
def test_shard_numbers_from_0_or_from_1_both_cover_every_eval_exactly_once(
    ids: list[str],
) -> None:
    """A CI matrix counts 1..N, a Kubernetes Indexed Job 0..N-1 (JOB_COMPLETION_INDEX):
    either way the N shards are the same N shards, so each eval runs exactly once."""
    for count in range(1, 8):
        one_based = [shard(ids, *parse_shard(f"{i}/{count}")) for i in range(1, count + 1)]
        zero_based = [shard(ids, *parse_shard(f"{i}/{count}")) for i in range(count)]
        for shards in (one_based, zero_based):
            covered = [item for part in shards for item in part]
            assert sorted(covered) == sorted(ids), f"N={count}"
        assert sorted(map(tuple, zero_based)) == sorted(map(tuple, one_based))
        assert parse_shard(f"0/{count}") == parse_shard(f"{count}/{count}") == (count, count)


def test_eval_runs_of_a_sweep_have_derived_ids() -> None:
    first = eval_trace_id("sweep_2026-01-31", "eval_0123456789abcdef")
    assert first == eval_trace_id("sweep_2026-01-31", "eval_0123456789abcdef")
    expected = hashlib.sha256(b"sweep_2026-01-31:eval_0123456789abcdef").hexdigest()[:32]
    assert first == "trace_" + expected
    assert first != eval_trace_id("sweep_2026-02-01", "eval_0123456789abcdef")
    assert eval_trace_id(None, "eval_0123456789abcdef") != eval_trace_id(
        None, "eval_0123456789abcdef"
    ), "outside a sweep, every run is new"


def outcome(eval_id: str, status: str, *, passed: bool = True) -> EvalOutcome:
    return EvalOutcome(
        eval_id=eval_id,
        name=f"refund-desk {status}",
        path=f"evals/{eval_id}.json",
        status=status,  # type: ignore[arg-type]
        verdict={"inconclusive": "INCONCLUSIVE", "errored": None}.get(status, "FAILURE_FIXED"),
        assertions=[]
        if status == "errored"
        else [
            AssertionResult("tool_called", "refund_order: >= 1 calls", "1 call", True),
            AssertionResult(
                "tool_argument", "refund_order /amount == 12.0 (last call)", '"12.OO"', passed
            ),
        ],
        eval_run_id="ab" * 16,
        cost_usd=0.0012,
        duration_s=0.5,
        error="budget exhausted: day budget $0.00 is spent" if status == "errored" else None,
    )


OUTCOMES = [
    outcome("eval_0000000000000001", "passed"),
    outcome("eval_0000000000000002", "failed", passed=False),
    outcome("eval_0000000000000003", "inconclusive"),
    outcome("eval_0000000000000004", "errored"),
]


@pytest.mark.parametrize("allow_inconclusive", [False, True])
def test_junit_report_parses_and_counts_match(tmp_path: Path, allow_inconclusive: bool) -> None:
    path = tmp_path / "reports" / "evals.xml"
    write_junit(path, OUTCOMES, allow_inconclusive=allow_inconclusive, duration_s=2.0)
    xml = JUnitXml.fromfile(str(path))
    (suite,) = list(xml)
    assert (suite.name, suite.tests, suite.errors) == ("afr.eval", 4, 1)
    assert (suite.failures, suite.skipped) == ((1, 1) if allow_inconclusive else (2, 0))
    cases = {case.name.split()[0]: case for case in suite}
    assert cases["eval_0000000000000001"].is_passed
    (failure,) = cases["eval_0000000000000002"].result
    assert isinstance(failure, Failure)
    assert "tool_argument" in failure.message
    assert '"12.OO"' in (failure.text or "")
    (inconclusive,) = cases["eval_0000000000000003"].result
    assert isinstance(inconclusive, Skipped if allow_inconclusive else Failure)
    (error,) = cases["eval_0000000000000004"].result
    assert isinstance(error, Error)
    assert "budget" in error.message


def test_the_table_has_a_row_per_assertion_and_says_why_an_eval_did_not_pass() -> None:
    table = render_table(OUTCOMES).splitlines()
    assert table[0].split() == ["result", "eval", "assertion", "expected", "actual"]
    failed = [line for line in table if line.startswith("FAIL")]
    assert len(failed) == 1
    assert "eval_0000000000000002" in failed[0] and '"12.OO"' in failed[0]
    assert any(line.startswith("INCONCLUSIVE") for line in table)
    assert any(line.startswith("ERROR") and "budget exhausted" in line for line in table)


def test_outcomes_survive_json() -> None:
    for item in OUTCOMES:
        assert EvalOutcome.from_json(item.to_json()).to_json() == item.to_json()


def test_agent_targets_that_do_not_name_an_agent_are_refused() -> None:
    for target, reason in [
        ("tests.e2e.eval_agents", "MODULE:ATTR"),
        ("tests.e2e.no_such_module:agent", "cannot import"),
        ("tests.e2e.eval_agents:nobody", "no attribute"),
        ("tests.e2e.eval_agents:not_an_agent", "not an agents.Agent"),
    ]:
        with pytest.raises(AgentLoadError, match=reason):
            load_agent(target)


def test_the_current_agents_are_read_as_the_exporter_records_them() -> None:
    entry, agents = current_agents(load_agent("tests.e2e.eval_agents:amount_dropped"))
    assert entry == "Triage Agent"
    assert agents["Triage Agent"].handoffs == ["Refund Agent"]
    (tool,) = agents["Refund Agent"].tools
    assert tool["name"] == "refund_order"
    assert set(tool["parameters"]["properties"]) == {"order_id"}
