"""The correction synthesis asserts: the leaves where a fixed call's arguments differ."""

from __future__ import annotations

from typing import Any

import pytest

from replay_worker.evals.assertions import resolve_pointer
from replay_worker.evals.synthesis import changed_leaves


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
