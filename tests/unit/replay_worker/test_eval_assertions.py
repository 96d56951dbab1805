"""Assertions check what a replayed run did, and say what they expected and saw."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import TypeAdapter

from replay_worker.evals.assertions import (
    Observed,
    ObservedCall,
    PointerError,
    check,
    json_equal,
    json_type,
    resolve_pointer,
)
from replay_worker.evals.contract import Assertion, OutputSchema, ToolArgument
from replay_worker.replay.engine import ReplayResult

ASSERTION: TypeAdapter[Assertion] = TypeAdapter(Assertion)


def assertion(**fields: Any) -> Assertion:
    return ASSERTION.validate_python(fields)


def replay_result(**overrides: Any) -> ReplayResult:
    values: dict[str, Any] = dict(
        replay_run_id="0" * 32,
        verdict="FAILURE_FIXED",
        reason="the replay ran clean",
        approximate=False,
        replay_failed=False,
        final_output="Done: 12.00 has been refunded.",
        error=None,
        first_divergence=None,
        invocations=[
            {
                "step": 0,
                "tool": "refund_order",
                "arguments": '{"order_id": "A-1001", "amount": 12.0}',
                "outcome": "replay_stub_output",
            }
        ],
        handoffs=[("Triage Agent", "Refund Agent")],
        turns=3,
        guardrails=[{"name": "abuse_screen", "agent": "Triage Agent", "triggered": False}],
        final_output_json="Done: 12.00 has been refunded.",
        duration_s=1.5,
    )
    values.update(overrides)
    return ReplayResult(**values)


FIXED = Observed.from_replay(replay_result(), cost_usd=0.0021)
ORIGINAL = Observed.from_replay(
    replay_result(
        verdict="STILL_FAILING",
        invocations=[
            {
                "step": 0,
                "tool": "refund_order",
                "arguments": '{"order_id": "A-1001", "amount": "12.OO"}',
                "outcome": "captured_error",
            }
        ],
    ),
    cost_usd=0.0021,
)


# --- JSON Pointer, equality, types ---------------------------------------------------------

RFC_6901 = {
    "foo": ["bar", "baz"],
    "": 0,
    "a/b": 1,
    "c%d": 2,
    "e^f": 3,
    "g|h": 4,
    "i\\j": 5,
    'k"l': 6,
    " ": 7,
    "m~n": 8,
}


@pytest.mark.parametrize(
    ("pointer", "value"),
    [
        ("", RFC_6901),
        ("/foo", ["bar", "baz"]),
        ("/foo/0", "bar"),
        ("/", 0),
        ("/a~1b", 1),
        ("/c%d", 2),
        ("/e^f", 3),
        ("/g|h", 4),
        ("/i\\j", 5),
        ('/k"l', 6),
        ("/ ", 7),
        ("/m~0n", 8),
    ],
)
def test_pointers_resolve_as_rfc_6901_says(pointer: str, value: Any) -> None:
    assert resolve_pointer(RFC_6901, pointer) == value


def test_tilde_escapes_are_undone_in_order() -> None:
    # "~01" is "~1" unescaped once: the member named "~1", not "/".
    assert resolve_pointer({"~1": "tilde-one", "/": "slash"}, "/~01") == "tilde-one"


@pytest.mark.parametrize(
    ("pointer", "reason"),
    [
        ("/missing", "no member 'missing'"),
        ("/foo/2", "past the end"),
        ("/foo/01", "not an array index"),
        ("/foo/-", "not an array index"),
        ("/foo/0/x", "inside a string"),
        ("foo", "not a JSON Pointer"),
    ],
)
def test_a_pointer_that_does_not_resolve_says_where(pointer: str, reason: str) -> None:
    with pytest.raises(PointerError, match=reason):
        resolve_pointer(RFC_6901, pointer)


def test_json_equality_is_by_value_but_a_boolean_is_never_a_number() -> None:
    assert json_equal(12, 12.0)
    assert json_equal({"a": [1, {"b": 2.0}]}, {"a": [1.0, {"b": 2}]})
    assert not json_equal(True, 1)
    assert not json_equal(0, False)
    assert not json_equal("12.0", 12.0)
    assert not json_equal(None, 0)
    assert not json_equal({"a": 1}, {"a": 1, "b": 2})
    assert not json_equal([1, 2], [2, 1])


def test_json_types_follow_json_schema() -> None:
    values: list[Any] = [1, 2.0, 2.5, True, None, "x", [], {}]
    assert [json_type(v) for v in values] == [
        "integer",
        "integer",
        "number",
        "boolean",
        "null",
        "string",
        "array",
        "object",
    ]


# --- each assertion ------------------------------------------------------------------------


def test_the_corrected_argument_holds_with_the_fix_and_not_without() -> None:
    amount = assertion(kind="tool_argument", tool="refund_order", pointer="/amount", equals=12.0)
    fixed, original = check(amount, FIXED), check(amount, ORIGINAL)
    assert fixed.passed and fixed.actual == "12.0"
    assert not original.passed
    assert original.actual == '"12.OO"'
    assert original.expected == "refund_order /amount == 12.0 (last call)"
    assert original.kind == "tool_argument"


def test_argument_checks_by_pattern_and_type() -> None:
    assert check(
        assertion(
            kind="tool_argument", tool="refund_order", pointer="/order_id", matches="^A-\\d+$"
        ),
        FIXED,
    ).passed
    assert check(
        assertion(kind="tool_argument", tool="refund_order", pointer="/amount", type="number"),
        FIXED,
    ).passed
    # The malformed amount is a string; and its text does not look like a number.
    as_type = check(
        assertion(kind="tool_argument", tool="refund_order", pointer="/amount", type="number"),
        ORIGINAL,
    )
    assert (as_type.passed, as_type.actual) == (False, 'string "12.OO"')
    assert not check(
        assertion(
            kind="tool_argument", tool="refund_order", pointer="/amount", matches=r"^\d+\.\d+$"
        ),
        ORIGINAL,
    ).passed
    # Non-string values are matched as compact JSON.
    assert check(
        assertion(kind="tool_argument", tool="refund_order", pointer="", matches='"amount":12\\.0'),
        FIXED,
    ).passed


def test_an_invalid_pattern_fails_the_assertion_with_the_reason() -> None:
    # The contract refuses such a file; a document built another way still cannot crash a run.
    with pytest.raises(ValueError, match="RE2"):
        assertion(kind="tool_argument", tool="refund_order", pointer="/amount", matches="(?<=x)")
    unchecked = ToolArgument.model_construct(
        kind="tool_argument", tool="refund_order", pointer="/amount", matches="(?<=x)"
    )
    result = check(unchecked, FIXED)
    assert not result.passed
    assert "pattern is invalid" in result.actual


def test_argument_call_modes_any_all_last() -> None:
    seen = Observed(
        tool_calls=[
            ObservedCall("refund_order", {"amount": "12.OO"}, "invalid_arguments"),
            ObservedCall("refund_order", {"amount": 12.0}, "replay_stub_output"),
        ]
    )

    def holds(call: str) -> bool:
        return check(
            assertion(
                kind="tool_argument", tool="refund_order", pointer="/amount", equals=12, call=call
            ),
            seen,
        ).passed

    assert holds("any")
    assert holds("last")
    assert not holds("all")


def test_arguments_of_a_tool_never_called_or_not_json_fail() -> None:
    missing = check(
        assertion(kind="tool_argument", tool="cancel_order", pointer="/id", equals="x"), FIXED
    )
    assert (missing.passed, missing.actual) == (False, "cancel_order was not called")
    broken = Observed(tool_calls=[ObservedCall("refund_order", "{amount: 12", "invalid_arguments")])
    result = check(
        assertion(kind="tool_argument", tool="refund_order", pointer="/amount", equals=12), broken
    )
    assert not result.passed
    assert result.actual.startswith("unresolved")


def test_an_explicit_null_is_a_value_to_compare() -> None:
    seen = Observed(tool_calls=[ObservedCall("t", {"note": None}, "captured_output")])
    assert check(
        assertion(kind="tool_argument", tool="t", pointer="/note", equals=None), seen
    ).passed
    assert not check(
        assertion(kind="tool_argument", tool="t", pointer="/missing", equals=None), seen
    ).passed


def test_tool_called_counts_every_call_within_bounds() -> None:
    assert check(assertion(kind="tool_called", tool="refund_order"), FIXED).passed
    assert check(assertion(kind="tool_called", tool="refund_order"), ORIGINAL).passed
    looped = Observed(tool_calls=[ObservedCall("refund_order", {}, "replay_stub_output")] * 5)
    bounded = check(assertion(kind="tool_called", tool="refund_order", max_count=2), looped)
    assert (bounded.passed, bounded.expected, bounded.actual) == (
        False,
        "refund_order: 1..2 calls",
        "5 calls",
    )
    assert not check(assertion(kind="tool_called", tool="cancel_order"), FIXED).passed
    assert check(assertion(kind="tool_not_called", tool="cancel_order"), FIXED).passed
    assert not check(assertion(kind="tool_not_called", tool="refund_order"), FIXED).passed


def test_handoffs_and_tool_order() -> None:
    taken = check(
        assertion(kind="handoff_taken", from_agent="Triage Agent", to_agent="Refund Agent"), FIXED
    )
    assert taken.passed and taken.actual == "Triage Agent -> Refund Agent"
    reversed_ = assertion(kind="handoff_taken", from_agent="Refund Agent", to_agent="Triage Agent")
    assert not check(reversed_, FIXED).passed
    assert not check(reversed_, Observed()).passed
    seen = Observed(
        tool_calls=[
            ObservedCall(name, {}, "captured_output")
            for name in ("lookup", "refund_order", "email")
        ]
    )
    assert check(assertion(kind="tool_order", tools=["lookup", "email"]), seen).passed
    assert not check(assertion(kind="tool_order", tools=["email", "lookup"]), seen).passed
    assert not check(
        assertion(kind="tool_order", tools=["lookup", "email"], mode="strict"), seen
    ).passed
    assert check(
        assertion(kind="tool_order", tools=["lookup", "refund_order", "email"], mode="strict"),
        seen,
    ).passed


def test_turn_bound() -> None:
    assert check(assertion(kind="max_turns", turns=3), FIXED).passed
    bound = check(assertion(kind="max_turns", turns=2), FIXED)
    assert (bound.passed, bound.actual) == (False, "3 model calls")


def test_no_span_errored_sees_failed_calls_and_the_run_error() -> None:
    assert check(assertion(kind="no_span_errored"), FIXED).passed
    failed = check(assertion(kind="no_span_errored"), ORIGINAL)
    assert (failed.passed, failed.actual) == (False, "refund_order (captured_error)")
    crashed = Observed.from_replay(
        replay_result(error="MaxTurnsExceeded: Max turns (10) exceeded"), 0.0
    )
    assert check(assertion(kind="no_span_errored"), crashed).actual == "MaxTurnsExceeded"
    assert check(assertion(kind="no_span_errored", span_types=["tool"]), crashed).passed
    assert check(assertion(kind="no_span_errored", span_types=["run"]), ORIGINAL).passed
    # A labelled stand-in or an unavailable output is not an error of the run.
    unavailable = Observed(tool_calls=[ObservedCall("t", {}, "unavailable")])
    assert check(assertion(kind="no_span_errored"), unavailable).passed


def test_guardrail_outcome() -> None:
    assert check(assertion(kind="guardrail", name="abuse_screen", triggered=False), FIXED).passed
    assert not check(assertion(kind="guardrail", name="abuse_screen", triggered=True), FIXED).passed
    never = check(assertion(kind="guardrail", name="pii_screen", triggered=False), FIXED)
    assert (never.passed, never.actual) == (False, "pii_screen did not run")


REFUND_SCHEMA = {
    "title": "Refund",
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "amount": {"type": "number"},
        "refunded_on": {"type": "string", "format": "date"},
    },
    "required": ["order_id", "amount"],
}


def test_output_schema_validates_the_final_output_with_formats() -> None:
    schema = assertion(kind="output_schema", schema=REFUND_SCHEMA)
    good = Observed(
        final_output={"order_id": "A-1001", "amount": 12.0, "refunded_on": "2026-01-31"}
    )
    assert check(schema, good).passed
    bad_amount = Observed(final_output={"order_id": "A-1001", "amount": "12.OO"})
    result = check(schema, bad_amount)
    assert not result.passed
    assert result.actual.startswith("/amount: ")
    bad_date = Observed(final_output={"order_id": "A-1001", "amount": 1, "refunded_on": "31/01"})
    assert not check(schema, bad_date).passed, "formats are checked"
    assert check(schema, Observed()).actual == "no final output"
    # A text answer that is JSON is checked as JSON.
    text = Observed.from_replay(
        replay_result(final_output_json=json.loads('{"order_id": "A-1001", "amount": 12}')), 0.0
    )
    assert check(schema, text).passed


def test_an_invalid_schema_fails_with_the_reason() -> None:
    with pytest.raises(ValueError, match="JSON Schema"):
        assertion(kind="output_schema", schema={"type": "nope"})
    unchecked = OutputSchema.model_construct(kind="output_schema", json_schema={"type": "nope"})
    result = check(unchecked, Observed(final_output=1))
    assert not result.passed
    assert result.actual.startswith("the schema is invalid")


def test_cost_and_latency_bounds() -> None:
    assert check(assertion(kind="cost_at_most", usd=0.01), FIXED).passed
    cost = check(assertion(kind="cost_at_most", usd=0.001), FIXED)
    assert (cost.passed, cost.expected, cost.actual) == (False, "<= $0.0010", "$0.0021")
    assert check(assertion(kind="latency_at_most", seconds=2), FIXED).passed
    assert not check(assertion(kind="latency_at_most", seconds=1), FIXED).passed


def test_observed_from_a_replay_parses_arguments_in_order() -> None:
    assert FIXED.tool_calls == [
        ObservedCall("refund_order", {"order_id": "A-1001", "amount": 12.0}, "replay_stub_output")
    ]
    assert (FIXED.turns, FIXED.cost_usd, FIXED.duration_s) == (3, 0.0021, 1.5)
    assert [c.tool for c in ORIGINAL.failed_calls] == ["refund_order"]


REFUND_PARAMETERS = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}},
    "required": ["order_id"],
    "additionalProperties": False,
}


def test_arguments_are_checked_as_the_tool_receives_them() -> None:
    """The SDK drops keys the tool's schema does not declare: an amount sent to a tool with
    no amount parameter never reaches it."""
    result = replay_result()
    seen = Observed.from_replay(result, 0.0, {"refund_order": REFUND_PARAMETERS})
    (call,) = seen.tool_calls
    assert (call.arguments, call.ignored) == ({"order_id": "A-1001"}, ("amount",))
    amount = check(
        assertion(kind="tool_argument", tool="refund_order", pointer="/amount", equals=12.0), seen
    )
    assert (amount.passed, amount.actual) == (
        False,
        "'amount' sent, but refund_order has no such parameter",
    )
    # A schema that admits more keys keeps them; so does a tool with no known schema.
    open_schema = {**REFUND_PARAMETERS, "additionalProperties": {"type": "number"}}
    for schemas in ({"refund_order": open_schema}, {}, None):
        (kept,) = Observed.from_replay(result, 0.0, schemas).tool_calls
        assert kept.arguments == {"order_id": "A-1001", "amount": 12.0}
