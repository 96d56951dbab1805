"""A span's failure cause: where and how it failed, the shape of the cause, never its values."""

from __future__ import annotations

import json

from collector.processors.normalize import normalize
from collector.processors.signature import cause_shape, failure_causes, masked_message
from tests.records import span_record

PYDANTIC_REPORT = (
    "Invalid JSON input for tool refund_order: 2 validation errors for refund_order_args\n"
    "amount\n"
    "  Input should be a valid number, unable to parse string as a number "
    "[type=float_parsing, input_value='12.OO', input_type=str]\n"
    "    For further information visit https://errors.pydantic.dev/2.11/v/float_parsing\n"
    "order.id\n"
    "  Field required [type=missing, input_value={'amount': '12.OO'}, input_type=dict]"
)


def _tool_error(arguments: str, error: str) -> list[str]:
    record = span_record(
        span_name="execute_tool refund_order",
        status_code="Error",
        status_message="Error running tool (non-fatal)",
        span_attributes={
            "afr.span.type": "function",
            "gen_ai.tool.name": "refund_order",
            "gen_ai.tool.call.arguments": arguments,
            "afr.error.data": json.dumps({"tool_name": "refund_order", "error": error}),
        },
    )
    cause: list[str] = json.loads(failure_causes(normalize([record]))[0].failure_cause)
    return cause


def test_a_validation_report_gives_the_failed_pointers_and_classes_not_the_values() -> None:
    assert cause_shape("Error running tool (non-fatal)", PYDANTIC_REPORT, "") == (
        "/amount: string where number; /order/id: missing"
    )


def test_rejected_arguments_without_a_report_give_their_classes() -> None:
    cause = _tool_error(
        '{"order_id": "A-1001", "amount": "12.OO"}', "Invalid JSON input for tool x"
    )
    assert cause == [
        "tool",
        "tool:refund_order",
        "Error running tool (non-fatal)",
        "rejected {amount: string, order_id: string}",
    ]
    other_value = _tool_error('{"amount": "abc", "order_id": "B-7"}', "Invalid JSON input for tool")
    assert other_value == cause
    wrong_class = _tool_error('{"amount": 12.5, "order_id": "B-7"}', "Invalid JSON input for tool")
    assert wrong_class != cause


def test_a_raised_error_keeps_its_sentence_and_masks_its_values() -> None:
    a = _tool_error("{}", "no flight FL-100 on 2026-12-25 for 'Ann'")
    b = _tool_error("{}", "no flight FL-200 on 2027-01-02 for 'Bob'")
    assert a == b
    assert a[3] == "no flight <v> on <v> for <v>"
    assert _tool_error("{}", "refund window closed")[3] == "refund window closed"


def test_a_status_code_is_kept_other_numbers_are_not() -> None:
    assert masked_message("Error code: 500 - upstream failure") != masked_message(
        "Error code: 429 - upstream failure"
    )
    assert masked_message("timeout after 30.5s") == masked_message("timeout after 12s")


def test_a_span_that_did_not_fail_has_no_cause() -> None:
    record = span_record(span_attributes={"afr.span.type": "function", "error.type": "x"})
    assert failure_causes(normalize([record]))[0].failure_cause == ""


def test_what_failed_inside_an_agent_turn_is_named() -> None:
    record = span_record(
        span_name="turn 2 Support Agent",
        status_code="Error",
        status_message="Tool not found",
        span_attributes={
            "afr.span.type": "turn",
            "gen_ai.agent.name": "Support Agent",
            "error.type": "Tool not found",
            "afr.error.data": json.dumps({"tool_name": "book_flight"}),
        },
    )
    cause = json.loads(failure_causes(normalize([record]))[0].failure_cause)
    assert cause == ["turn", "tool:book_flight", "Tool not found", ""]
