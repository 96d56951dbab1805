"""The correction synthesis asserts: the leaves where a fixed call's arguments differ, and
the eval's name that says which."""

from __future__ import annotations

from typing import Any

import pytest

from replay_worker.evals.assertions import resolve_pointer
from replay_worker.evals.contract import (
    MaxTurns,
    NoSpanErrored,
    ToolArgument,
    ToolCalled,
    ToolNotCalled,
)
from replay_worker.evals.synthesis import changed_leaves, eval_name


@pytest.mark.parametrize(
    ("source", "replay", "expected"),
    [
        (
            {"order_id": "A-1", "amount": "12.OO"},
            {"order_id": "A-1", "amount": 12.0},
            [("/amount", 12.0)],
        ),
        ({"amount": 12}, {"amount": 12.0}, []),  # JSON-equal numbers are no correction
        ({"flag": 1}, {"flag": True}, [("/flag", True)]),  # a boolean is not a number
        (
            {"a/b": {"m~n": "x", "same": [1]}},
            {"a/b": {"m~n": "y", "same": [1]}},
            [("/a~1b/m~0n", "y")],  # RFC 6901 escaping
        ),
        ({"items": [1, 2]}, {"items": [1, 3, 4]}, [("/items/1", 3), ("/items/2", 4)]),
        (
            {"dates": "2026-13-05"},
            {"dates": {"from": "2026-12-05", "to": []}},
            [("/dates/from", "2026-12-05"), ("/dates/to", [])],
        ),
        ({"gone": 1, "kept": 2}, {"kept": 2}, []),  # nothing says "absent"
        ('{"amount": 12.OO}', {"amount": 12.0}, [("/amount", 12.0)]),  # the source was not JSON
        ({"x": 1}, "not json", [("", "not json")]),
    ],
)
def test_the_corrected_leaves_and_their_pointers(
    source: Any, replay: Any, expected: list[tuple[str, Any]]
) -> None:
    leaves = list(changed_leaves(source, replay))
    assert leaves == expected
    for pointer, value in leaves:  # every pointer resolves to its value in the fixed call
        assert resolve_pointer(replay, pointer) == value


def _fix(pointer: str, value: Any, tool: str = "book_flight") -> ToolArgument:
    return ToolArgument(tool=tool, pointer=pointer, equals=value, call="any")


_STRUCTURE = [
    ToolCalled(tool="book_flight", min_count=1, max_count=3),
    MaxTurns(turns=5),
    NoSpanErrored(),
]


def test_fixes_of_one_tool_at_other_paths_get_names_that_say_the_path() -> None:
    date = eval_name("flight-desk", [_fix("/date", "2026-12-07"), *_STRUCTURE])
    count = eval_name("flight-desk", [_fix("/passenger_count", 3), *_STRUCTURE])
    assert date == 'flight-desk: book_flight /date="2026-12-07" corrected'
    assert count == "flight-desk: book_flight /passenger_count=3 corrected"
    both = eval_name("flight-desk", [_fix("/date", "2026-12-07"), _fix("/passenger_count", 3)])
    assert both == 'flight-desk: book_flight /date="2026-12-07" /passenger_count=3 corrected'


def test_every_distinct_correction_gets_its_own_name() -> None:
    long_text = "Dear customer, your booking for the flight of the seventh"
    corrections: list[list[Any]] = [
        [_fix("/date", "2026-12-07")],
        [_fix("/date", "2026-12-08")],  # another value at the same path
        [_fix("/date", "2026-12-07"), _fix("/passenger_count", 3)],
        [_fix("/date", "2026-12-07", tool="rebook_flight")],
        [ToolNotCalled(tool="book_flight")],
        [ToolNotCalled(tool="cancel_booking"), _fix("/date", "2026-12-07")],
        [_fix("/note", long_text + " is confirmed")],
        [_fix("/note", long_text + " is cancelled")],  # apart only past the cut
        [],
    ]
    names = [eval_name("flight-desk", [*c, *_STRUCTURE]) for c in corrections]
    assert len(set(names)) == len(names), names
    assert names[4] == "flight-desk: book_flight not called"
    assert (
        names[5]
        == 'flight-desk: cancel_booking not called; book_flight /date="2026-12-07" corrected'
    )
    assert names[-1] == "flight-desk: failure fixed"
    shown = names[6].removeprefix("flight-desk: book_flight /note=").removesuffix(" corrected")
    assert len(shown) == 32 and shown.startswith('"Dear customer'), "a long value is cut short"
    # Stable: the same corrections, the same name.
    assert names == [eval_name("flight-desk", [*c, *_STRUCTURE]) for c in corrections]
