"""Verdicts, assertion outcomes and sweep results as the GenAI conventions' evaluation
events: the pure mappings, for every verdict and every outcome, and the converter that
turns ``afr.evaluations`` into ``gen_ai.evaluation.result`` events on the workflow root."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents.tracing.traces import TraceImpl
from opentelemetry.sdk.resources import Resource
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as upstream

from afr_exporter import semconv as sc
from afr_exporter.convert import SpanConverter
from afr_exporter.evaluation import MAX_EXPLANATION_CHARS, checked_evaluations, evaluation_result
from replay_worker.evals.assertions import (
    STATUS_LABELS,
    AssertionResult,
    assertion_evaluation,
    eval_evaluation,
)
from replay_worker.replay.verdict import VERDICTS, Verdict, judge, verdict_evaluation
from replay_worker.sweeps import SweepSummary, sweep_evaluation
from tests.fakes import RecordingProcessor

NAME = sc.GEN_AI_EVALUATION_NAME
LABEL = sc.GEN_AI_EVALUATION_SCORE_LABEL
VALUE = sc.GEN_AI_EVALUATION_SCORE_VALUE
EXPLANATION = sc.GEN_AI_EVALUATION_EXPLANATION


def test_the_names_are_the_conventions_own() -> None:
    """The attribute names equal the installed semantic conventions' constants (0.66b2;
    the event itself is named in the conventions' events.yaml, not in that package)."""
    assert sc.GEN_AI_EVALUATION_NAME == upstream.GEN_AI_EVALUATION_NAME
    assert sc.GEN_AI_EVALUATION_SCORE_LABEL == upstream.GEN_AI_EVALUATION_SCORE_LABEL
    assert sc.GEN_AI_EVALUATION_SCORE_VALUE == upstream.GEN_AI_EVALUATION_SCORE_VALUE
    assert sc.GEN_AI_EVALUATION_EXPLANATION == upstream.GEN_AI_EVALUATION_EXPLANATION
    assert sc.GEN_AI_RESPONSE_ID == upstream.GEN_AI_RESPONSE_ID
    assert sc.EVENT_GEN_AI_EVALUATION_RESULT == "gen_ai.evaluation.result"


@pytest.mark.parametrize(
    ("verdict", "value"),
    [
        ("FAILURE_FIXED", 1.0),
        ("UNCHANGED", 1.0),
        ("STILL_FAILING", 0.0),
        ("REGRESSED", 0.0),
        ("INCONCLUSIVE", None),
    ],
)
def test_every_verdict_is_labelled_with_itself_and_scored_by_whether_the_replay_ran_clean(
    verdict: str, value: float | None
) -> None:
    attributes = verdict_evaluation(Verdict(verdict, "why it is so"))
    expected: dict[str, Any] = {
        NAME: sc.EVALUATION_REPLAY_VERDICT,
        LABEL: verdict,
        EXPLANATION: "why it is so",
    }
    if value is not None:
        expected[VALUE] = value
    assert attributes == expected


def test_the_table_covers_every_verdict_the_engine_decides() -> None:
    labels = {verdict_evaluation(Verdict(v, "r"))[LABEL] for v in VERDICTS}
    assert labels == set(VERDICTS)


def test_a_judged_verdict_carries_its_reason_and_says_when_it_was_matched_leniently() -> None:
    decided = judge(
        source_failed=True,
        replay_failures=["refund_order (captured_error)"],
        unavailable_tools=[],
        unreplayable_source_errors=[],
        approximate=True,
    )
    attributes = verdict_evaluation(decided)
    assert attributes[LABEL] == "STILL_FAILING"
    assert attributes[VALUE] == 0.0
    assert attributes[EXPLANATION] == (
        "the replay failed: refund_order (captured_error) (decided with a lenient match)"
    )


PASSED = AssertionResult("tool_called", "refund_order: at least 1 calls", "1 call", True)
FAILED = AssertionResult("no_span_errored", "no error", "refund_order (captured_error)", False)


@pytest.mark.parametrize(
    ("result", "status", "label", "value"),
    [
        (PASSED, "passed", sc.LABEL_PASS, 1.0),
        (PASSED, "failed", sc.LABEL_PASS, 1.0),  # another assertion of the eval failed
        (FAILED, "failed", sc.LABEL_FAIL, 0.0),
        (PASSED, "inconclusive", sc.LABEL_INCONCLUSIVE, None),
        (FAILED, "inconclusive", sc.LABEL_INCONCLUSIVE, None),
        (PASSED, "errored", sc.LABEL_ERROR, None),
        (FAILED, "errored", sc.LABEL_ERROR, None),
    ],
)
def test_every_assertion_outcome_maps_to_a_label_and_a_score_where_one_applies(
    result: AssertionResult, status: str, label: str, value: float | None
) -> None:
    attributes = assertion_evaluation(result, status)
    assert attributes[NAME] == sc.EVALUATION_ASSERTION_PREFIX + result.kind
    assert attributes[LABEL] == label
    assert attributes.get(VALUE) == value
    assert attributes[EXPLANATION] == f"expected {result.expected}; seen {result.actual}"
    # error.type only where the evaluation itself ended in an error.
    assert attributes.get(sc.ERROR_TYPE) == (
        sc.ERROR_TYPE_OTHER if label == sc.LABEL_ERROR else None
    )


def test_an_errored_eval_names_the_class_of_what_failed() -> None:
    assert assertion_evaluation(PASSED, "errored", "APIConnectionError")[sc.ERROR_TYPE] == (
        "APIConnectionError"
    )
    attributes = eval_evaluation("errored", "the model call failed: APIConnectionError: down")
    assert attributes == {
        NAME: sc.EVALUATION_EVAL,
        LABEL: sc.LABEL_ERROR,
        EXPLANATION: "the model call failed: APIConnectionError: down",
        sc.ERROR_TYPE: sc.ERROR_TYPE_OTHER,
    }


@pytest.mark.parametrize("status", sorted(STATUS_LABELS))
def test_every_eval_status_has_a_label(status: str) -> None:
    attributes = eval_evaluation(status, "because")
    assert attributes[LABEL] == STATUS_LABELS[status]
    assert attributes.get(VALUE) == {"passed": 1.0, "failed": 0.0}.get(status)


def _summary(**counts: Any) -> SweepSummary:
    summary = SweepSummary("s1", "20250101T030000Z", "schedule", "ab" * 16, **counts)
    total = sum(counts.get(s, 0) for s in ("passed", "failed", "inconclusive", "errored"))
    summary.results = [{"eval_id": f"e{i}"} for i in range(total)]
    return summary


@pytest.mark.parametrize(
    ("counts", "label", "value"),
    [
        ({"passed": 4}, sc.LABEL_PASS, 1.0),
        ({"passed": 3, "inconclusive": 1}, sc.LABEL_PASS, 0.75),
        ({"passed": 1, "failed": 1}, sc.LABEL_FAIL, 0.5),
        ({"passed": 3, "errored": 1}, sc.LABEL_FAIL, 0.75),
        ({}, sc.LABEL_PASS, None),
    ],
)
def test_a_sweep_passes_without_failed_or_errored_evals_and_scores_its_pass_rate(
    counts: dict[str, int], label: str, value: float | None
) -> None:
    attributes = sweep_evaluation(_summary(**counts))
    assert attributes[NAME] == sc.EVALUATION_SWEEP
    assert attributes[LABEL] == label
    assert attributes.get(VALUE) == value
    total = sum(counts.values())
    assert attributes[EXPLANATION] == (
        f"{total} evals: {counts.get('passed', 0)} passed, {counts.get('failed', 0)} failed, "
        f"{counts.get('inconclusive', 0)} inconclusive, {counts.get('errored', 0)} errored"
    )


def test_an_incomplete_sweep_fails_and_says_why() -> None:
    summary = _summary(passed=2)
    summary.incomplete = "shard 2 of 2 never recorded"
    attributes = sweep_evaluation(summary)
    assert attributes[LABEL] == sc.LABEL_FAIL
    assert str(attributes[EXPLANATION]).endswith("; incomplete: shard 2 of 2 never recorded")


def test_a_long_explanation_is_cut_and_absent_parts_are_left_out() -> None:
    attributes = evaluation_result("n", explanation="x" * (MAX_EXPLANATION_CHARS + 50))
    assert set(attributes) == {NAME, EXPLANATION}
    assert len(str(attributes[EXPLANATION])) == MAX_EXPLANATION_CHARS
    assert str(attributes[EXPLANATION]).endswith("…")


def test_malformed_entries_are_skipped_and_foreign_keys_dropped() -> None:
    entries = [
        {NAME: "kept", LABEL: "pass", VALUE: 1, "secret": "x", sc.GEN_AI_RESPONSE_ID: 3},
        {LABEL: "no name"},
        "not a map",
        {NAME: "bad score", VALUE: "1.0"},
        {NAME: "not a number", VALUE: float("nan")},
        {NAME: "a boolean is no score", VALUE: True},
    ]
    assert checked_evaluations(entries) == [
        {NAME: "kept", LABEL: "pass", VALUE: 1.0},
        {NAME: "bad score"},
        {NAME: "not a number"},
        {NAME: "a boolean is no score"},
    ]
    assert checked_evaluations("afr.evaluations") == []
    assert checked_evaluations(None) == []


def test_the_workflow_root_carries_one_event_per_evaluation_and_not_the_list_twice() -> None:
    converter = SpanConverter(Resource.create({"service.name": "unit"}))
    evaluations = [
        verdict_evaluation(Verdict("FAILURE_FIXED", "the replay ran clean (the source failed)")),
        assertion_evaluation(PASSED, "passed"),
    ]
    metadata = {sc.METADATA_RUN_KIND: "replay", sc.METADATA_EVALUATIONS: evaluations}
    trace = TraceImpl(
        "replay",
        "trace_" + "0f" * 16,
        None,
        metadata,
        RecordingProcessor(),  # type: ignore[arg-type]
    )
    converter.trace_started(trace, 1_000)
    root = converter.trace_ended(trace, 2_000)
    assert [e.name for e in root.events] == [sc.EVENT_GEN_AI_EVALUATION_RESULT] * 2
    assert [dict(e.attributes or {}) for e in root.events] == evaluations
    assert all(e.timestamp == root.end_time for e in root.events)
    kept = json.loads(str((root.attributes or {})[sc.AFR_TRACE_METADATA]))
    assert kept == {sc.METADATA_RUN_KIND: "replay"}
    assert metadata[sc.METADATA_EVALUATIONS] == evaluations, "the caller's metadata untouched"
