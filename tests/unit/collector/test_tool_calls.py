"""Tool-call ids joined from model spans: by order, name and arguments; the same whatever
order the spans come in; never a wrong id when a batch lacks the model span."""

from __future__ import annotations

import json
import random

import pytest

from collector.model import SpanRecord
from collector.processors.tool_calls import (
    canonical_arguments,
    history_calls,
    link_tool_calls,
    requested_calls,
)


def span(
    span_id: str,
    parent: str,
    start_s: int,
    span_type: str,
    *,
    tool: str = "",
    arguments: str = "",
    attributes: dict[str, str] | None = None,
) -> SpanRecord:
    record = SpanRecord(
        "p", start_s * 1_000_000_000, "t" * 32, span_id, parent, "", span_id, "Internal", "svc",
        {}, "scope", "", dict(attributes or {}), 1, "Unset", "", [], [], [], [], [], [], [], 0,
    )  # fmt: skip
    record.span_type, record.tool_name, record.input = span_type, tool, arguments
    return record


def model(span_id: str, parent: str, start_s: int, *calls: tuple[str, str, str]) -> SpanRecord:
    """A model span whose output (GenAI parts) asks for ``calls`` = (id, name, arguments)."""
    parts = [
        {"type": "tool_call", "id": i, "name": n, "arguments": json.loads(a)} for i, n, a in calls
    ]
    output = json.dumps([{"role": "assistant", "parts": parts}])
    return span(span_id, parent, start_s, "llm", attributes={"gen_ai.output.messages": output})


def ids(records: list[SpanRecord], whole_trace: bool = True) -> dict[str, str]:
    link_tool_calls(records, whole_trace=whole_trace)
    return {r.span_id: r.tool_call_id for r in records if r.span_type == "tool"}


X, Y = '{"amount": 1}', '{"amount": 2}'


def sibling_run() -> list[SpanRecord]:
    """OpenLLMetry has no turn spans: both turns' model and tool spans sit under the agent."""
    return [
        model("m1", "agent", 1, ("call_1", "refund", X)),
        span("t1", "agent", 2, "tool", tool="refund", arguments=X),
        model("m2", "agent", 3, ("call_2", "refund", X)),
        span("t2", "agent", 4, "tool", tool="refund", arguments=X),
    ]


def test_each_tool_span_takes_the_call_of_its_own_model_turn() -> None:
    assert ids(sibling_run()) == {"t1": "call_1", "t2": "call_2"}


def test_arguments_decide_before_order_and_order_decides_between_equals() -> None:
    records = [
        model("m", "turn", 1, ("c_x1", "refund", X), ("c_y", "refund", Y), ("c_x2", "refund", X)),
        span("ty", "turn", 2, "tool", tool="refund", arguments=' {"amount":2} '),
        span("tx1", "turn", 3, "tool", tool="refund", arguments=X),
        span("tx2", "turn", 4, "tool", tool="refund", arguments=X),
    ]
    assert ids(records) == {"ty": "c_y", "tx1": "c_x1", "tx2": "c_x2"}


@pytest.mark.parametrize("size", [10, 5_000], ids=["short arguments", "long arguments"])
def test_arguments_compare_by_meaning_however_long_and_however_often_seen(size: int) -> None:
    """A text of arguments is read once and remembered when short (a call comes again in
    every later model span's conversation); a long one is read each time. Either way the
    same arguments in another order or spacing are one value, and others are not."""
    note = "n" * size
    sent = json.dumps({"amount": 2, "note": note})
    spaced = ' {"note": "' + note + '",  "amount":2} '
    other = json.dumps({"amount": 3, "note": note})
    for _ in range(3):  # the first time and the remembered times alike
        records = [
            model("m", "turn", 1, ("c_other", "refund", other), ("c_sent", "refund", sent)),
            span("t", "turn", 2, "tool", tool="refund", arguments=spaced),
        ]
        assert ids(records) == {"t": "c_sent"}
    broken = "{not json " + note  # compared as it is
    assert [canonical_arguments(broken) for _ in range(2)] == [broken, broken]
    assert canonical_arguments(spaced) == canonical_arguments(json.loads(sent))


def test_the_join_does_not_depend_on_the_order_spans_arrive_in() -> None:
    def records() -> list[SpanRecord]:
        return [
            model("m1", "turn1", 1, ("a1", "lookup", X), ("a2", "refund", Y)),
            span("t1", "turn1", 2, "tool", tool="refund", arguments=Y),
            span("t2", "turn1", 3, "tool", tool="lookup", arguments=X),
            model("m2", "turn2", 4, ("b1", "refund", Y)),
            span("t3", "turn2", 5, "tool", tool="refund", arguments=Y),
        ]

    expected = ids(records())
    assert expected == {"t1": "a2", "t2": "a1", "t3": "b1"}
    for seed in range(5):
        shuffled = records()
        random.Random(seed).shuffle(shuffled)
        assert ids(shuffled) == expected


def test_a_batch_without_the_model_span_leaves_the_id_empty() -> None:
    assert ids([span("t", "turn", 2, "tool", tool="refund", arguments=X)]) == {"t": ""}
    other_turn = [
        model("m", "turn1", 1, ("c", "refund", X)),
        span("t", "turn2", 2, "tool", tool="refund", arguments=X),
    ]
    assert ids(other_turn) == {"t": ""}


def test_an_id_the_tool_span_carries_is_kept_and_never_given_to_another() -> None:
    own = span("t1", "turn", 2, "tool", tool="refund", arguments=X)
    own.tool_call_id = "c1"
    own.span_attributes["gen_ai.tool.call.id"] = "c1"
    records = [
        model("m", "turn", 1, ("c1", "refund", X), ("c2", "refund", X)),
        own,
        span("t2", "turn", 3, "tool", tool="refund", arguments=X),
    ]
    assert ids(records) == {"t1": "c1", "t2": "c2"}


def test_history_fills_in_when_model_spans_record_no_output() -> None:
    # OpenLLMetry on Chat Completions: only the next model span's input shows the call.
    history = [
        {"role": "user", "parts": [{"type": "text", "content": "refund A-1001"}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "fc_1", "name": "refund", "arguments": {"amount": 1}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "failed"}]},
    ]  # fmt: skip
    records = [
        span("m1", "agent", 1, "llm"),
        span("t", "agent", 2, "tool", tool="refund", arguments=X),
        span("m2", "agent", 3, "llm", attributes={"gen_ai.input.messages": json.dumps(history)}),
    ]
    assert ids(records) == {"t": "call_1"}, "the result's call id, not the item id fc_1"


def test_history_needs_the_same_arguments() -> None:
    history = [
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "function": {"name": "refund", "arguments": Y}}],
        }
    ]
    records = [
        span("t", "agent", 2, "tool", tool="refund", arguments=X),
        span("m", "agent", 3, "llm", attributes={"input": json.dumps(history)}),
    ]
    assert ids(records) == {"t": ""}


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        (  # OpenInference, flattened
            {
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "refund",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": X,
            },
            [("c", "refund", '{"amount":1}')],
        ),
        (  # Logfire, Responses API: the Response object
            {"response": json.dumps({"output": [{"type": "function_call", "call_id": "c", "name": "refund", "arguments": X}]})},
            [("c", "refund", '{"amount":1}')],
        ),
        (  # contrib -v2, Responses API: a repr in a text part
            {"gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "ResponseFunctionToolCall(arguments='{\"amount\": 1}', call_id='c', name='refund', type='function_call', id='fc', namespace=None)"}]}])},
            [("c", "refund", '{"amount":1}')],
        ),
        (  # contrib -v2, Chat Completions: a dict repr in a text part
            {"gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "{'content': None, 'tool_calls': [{'id': 'c', 'function': {'arguments': '{\"amount\": 1}', 'name': 'refund'}, 'type': 'function'}]}"}]}])},
            [("c", "refund", '{"amount":1}')],
        ),
        ({"gen_ai.output.messages": "not json", "output": "[1, {}]"}, []),
    ],
)  # fmt: skip
def test_requested_calls_in_every_shape(
    attributes: dict[str, str], expected: list[tuple[str, str, str]]
) -> None:
    calls = requested_calls(attributes)
    assert [(c.call_id, c.name, c.arguments) for c in calls] == expected
    assert history_calls(attributes) == []


def test_an_ingest_batch_joins_only_what_no_missing_span_could_change() -> None:
    def turn() -> list[SpanRecord]:
        return [
            model("m", "turn", 1, ("call_a", "refund", X), ("call_b", "refund", X)),
            span("t1", "turn", 2, "tool", tool="refund", arguments=X),
            span("t2", "turn", 3, "tool", tool="refund", arguments=X),
        ]

    whole = ids(turn())
    assert whole == {"t1": "call_a", "t2": "call_b"}
    m, _, t2 = turn()
    assert ids([m, t2], whole_trace=False) == {"t2": ""}, "t1 may be the one that ran call_a"


def history_run() -> list[SpanRecord]:
    """OpenLLMetry on Chat Completions, the model retrying an identical call."""

    def model_given(span_id: str, start_s: int, call_ids: list[str]) -> SpanRecord:
        history = [
            {"role": "assistant", "tool_calls": [{"id": i, "function": {"name": "refund", "arguments": X}}]}
            for i in call_ids
        ]  # fmt: skip
        return span(span_id, "agent", start_s, "llm", attributes={"input": json.dumps(history)})

    return [
        model_given("m1", 1, []),
        span("t1", "agent", 2, "tool", tool="refund", arguments=X),
        model_given("m2", 3, ["call_1"]),
        span("t2", "agent", 4, "tool", tool="refund", arguments=X),
        model_given("m3", 5, ["call_1", "call_2"]),
    ]


def test_history_joins_in_conversation_order() -> None:
    assert ids(history_run()) == {"t1": "call_1", "t2": "call_2"}


@pytest.mark.parametrize("seed", range(30))
def test_a_stored_id_is_the_run_views_or_empty(seed: int) -> None:
    """Exporters send spans in contiguous batches: what ingest stores for any cut into
    batches never contradicts what the read API computes from the whole run."""
    rng = random.Random(seed)
    for build in (sibling_run, history_run):
        whole = ids(build())
        spans = build()
        cuts = sorted(rng.sample(range(1, len(spans)), rng.randint(0, len(spans) - 1)))
        stored: dict[str, str] = {}
        for start, end in zip([0, *cuts], [*cuts, len(spans)], strict=True):
            stored |= ids(spans[start:end], whole_trace=False)
        assert all(stored[s] in ("", whole[s]) for s in stored), (cuts, stored, whole)
