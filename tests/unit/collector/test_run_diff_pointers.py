"""JSON-pointer differences, as the run diff lists other arguments and outputs."""

from __future__ import annotations

from collector.api.diff import pointer_differences


def _pointers(a: object, b: object) -> list[tuple[str, object, object, bool, bool]]:
    return [(d.pointer, d.a, d.b, d.in_a, d.in_b) for d in pointer_differences(a, b)]


def test_objects_by_key_arrays_by_index_and_escaped_tokens() -> None:
    a = {"amount": "12.OO", "items": [1, 2], "a/b": {"~x": 1}, "same": [{"k": 1}]}
    b = {"amount": 12.0, "items": [1], "a/b": {"~x": 2}, "same": [{"k": 1}], "new": None}
    assert _pointers(a, b) == [
        ("/a~1b/~0x", 1, 2, True, True),
        ("/amount", "12.OO", 12.0, True, True),
        ("/items/1", 2, None, True, False),
        ("/new", None, None, False, True),
    ]


def test_numbers_equal_as_json_but_not_booleans_or_strings() -> None:
    assert _pointers({"n": 2}, {"n": 2.0}) == []
    assert _pointers({"n": 1}, {"n": True}) == [("/n", 1, True, True, True)]
    assert _pointers({"n": 2}, {"n": "2"}) == [("/n", 2, "2", True, True)]


def test_documents_of_another_shape_differ_whole() -> None:
    assert _pointers("not json", {"a": 1}) == [("", "not json", {"a": 1}, True, True)]
    assert _pointers([1], [1]) == []
