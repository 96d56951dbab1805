"""Stand-in tools answer from captured outcomes; verdicts mean what they say."""

from __future__ import annotations

import json

import pytest

from replay_worker.replay.fixture import CapturedCall
from replay_worker.replay.stubs import (
    INVALID_ARGUMENTS_MESSAGE,
    UNAVAILABLE_MESSAGE,
    StubRegistry,
)
from replay_worker.replay.verdict import first_divergence, judge, verdict

BOOK = {
    "type": "object",
    "properties": {
        "flight_id": {"type": "string"},
        "passenger_count": {"type": "integer"},
        "date": {"type": "string", "format": "date"},
    },
    "required": ["flight_id", "passenger_count", "date"],
    "additionalProperties": False,
}
LOOKUP = {"type": "object", "properties": {"q": {"type": "integer"}}, "required": ["q"]}
TOOL_FAILED = "An error occurred while running the tool. Please try again."


def args(**values: object) -> str:
    return json.dumps(values)


def calls() -> list[CapturedCall]:
    return [
        CapturedCall("lookup", "c1", '{"q": 1}', '{"hit": 1}'),
        CapturedCall(
            "book_flight",
            "c2",
            args(flight_id="F1", passenger_count=2, date="2026-12-05"),
            TOOL_FAILED,  # the tool ran and raised: the model was shown the SDK's failure text
            "Error running tool (non-fatal)",
        ),
        CapturedCall("lookup", "c3", '{"q": 2}', '{"hit": 2}'),
        CapturedCall(
            "book_flight",
            "c4",
            args(flight_id="F2", passenger_count="2", date="2026-12-06"),
            '"booked"',
        ),
    ]


def test_an_identical_call_gets_the_captured_outcome_error_included() -> None:
    registry = StubRegistry(calls())
    # Key order and whitespace do not make a call different.
    same = '{"date": "2026-12-05", "passenger_count": 2,   "flight_id": "F1"}'
    assert registry.invoke("book_flight", BOOK, same) == TOOL_FAILED
    assert registry.failed, "an identical failing call fails again"
    assert [i.outcome for i in registry.invocations] == ["captured_error"]


def test_a_call_the_sdk_coerced_is_answered_like_the_original() -> None:
    registry = StubRegistry(calls())
    answer = registry.invoke(
        "book_flight", BOOK, args(flight_id="F2", passenger_count="2", date="2026-12-06")
    )
    assert answer == '"booked"'
    assert not registry.failed


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        (args(flight_id="F1", passenger_count=2, date="2026-13-05"), "format: no 13th month"),
        (args(flight_id="F1", passenger_count=2.5, date="2026-12-05"), "2.5 is no integer"),
        (args(flight_id="F1", date="2026-12-05"), "a required key is missing"),
        ("{not json", "broken JSON"),
    ],
)
def test_new_arguments_the_real_tool_would_reject_fail_the_call(arguments: str, why: str) -> None:
    registry = StubRegistry(calls(), stub_outputs={"book_flight": '"booked"'})
    assert registry.invoke("book_flight", BOOK, arguments) == INVALID_ARGUMENTS_MESSAGE, why
    assert registry.failed


def test_new_arguments_the_real_tool_accepts_get_the_labelled_stub_or_are_unavailable() -> None:
    corrected = args(flight_id="F1", passenger_count="3", date="2026-12-07")
    stubbed = StubRegistry(calls(), stub_outputs={"book_flight": '"booked (stub)"'})
    assert stubbed.invoke("book_flight", BOOK, corrected) == '"booked (stub)"'
    assert [i.outcome for i in stubbed.stubbed] == ["replay_stub_output"]
    unknown = StubRegistry(calls())
    assert unknown.invoke("book_flight", BOOK, corrected) == UNAVAILABLE_MESSAGE
    assert [i.tool for i in unknown.unavailable] == ["book_flight"]
    assert not unknown.failed


def test_each_captured_outcome_answers_one_call() -> None:
    registry = StubRegistry(calls())
    assert registry.invoke("lookup", LOOKUP, '{"q": 2}') == '{"hit": 2}', "matched wherever it was"
    assert registry.invoke("lookup", LOOKUP, '{"q": 2}') == UNAVAILABLE_MESSAGE, "used up"


def test_lenient_policy_answers_with_the_next_output_and_says_it_approximated() -> None:
    registry = StubRegistry(calls(), "lenient")
    assert registry.invoke("lookup", LOOKUP, '{"q": 9}') == '{"hit": 1}'
    assert registry.approximate
    exact = StubRegistry(calls(), "lenient")
    exact.invoke("lookup", LOOKUP, '{"q": 1}')
    assert not exact.approximate, "the same arguments: no approximation"


def test_strict_policy_wants_the_next_captured_call() -> None:
    strict = StubRegistry(calls(), "strict")
    assert strict.invoke("lookup", LOOKUP, '{"q": 2}') == UNAVAILABLE_MESSAGE, "q=1 comes first"
    assert strict.invoke("lookup", LOOKUP, '{"q": 1}') == '{"hit": 1}'


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
    decided = judge(
        source_failed=source_failed,
        replay_failures=["book_flight (captured_error)"] if replay_failed else [],
        unavailable_tools=[],
        unreplayable_source_errors=[],
    )
    assert decided.value == expected


def test_an_unknown_outcome_is_never_a_success() -> None:
    decided = judge(
        source_failed=True,
        replay_failures=[],
        unavailable_tools=["book_flight"],
        unreplayable_source_errors=[],
    )
    assert (decided.value, "book_flight" in decided.reason) == ("INCONCLUSIVE", True)
    unreproducible = judge(
        source_failed=True,
        replay_failures=[],
        unavailable_tools=[],
        unreplayable_source_errors=["custom Error"],
    )
    assert unreproducible.value == "INCONCLUSIVE"
    still = judge(
        source_failed=True,
        replay_failures=["MaxTurnsExceeded"],
        unavailable_tools=[],
        unreplayable_source_errors=["custom Error"],
    )
    assert still.value == "STILL_FAILING", "a replay that fails still fails"


def test_first_divergence_names_step_tool_and_argument_diff() -> None:
    registry = StubRegistry(calls())
    registry.invoke("lookup", LOOKUP, '{"q": 1}')
    registry.invoke("book_flight", BOOK, args(flight_id="F1", passenger_count=2, date="2026-12-08"))
    assert first_divergence(calls(), registry.invocations) == {
        "step": 1,
        "tool": "book_flight",
        "kind": "different_arguments",
        "arguments": {"date": {"source": "2026-12-05", "replay": "2026-12-08"}},
    }
    assert first_divergence(calls()[:1], registry.invocations[:1]) is None
    assert first_divergence(calls(), registry.invocations[:1])["kind"] == "missing_call"  # type: ignore[index]
