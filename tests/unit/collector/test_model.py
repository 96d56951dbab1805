"""SpanRecord: its written-out constructor is the dataclass's, and a record behaves as a
dataclass whether the module runs compiled (collector.native) or from source."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from collector.model import SpanRecord
from tests.source_modules import source_module

_REQUIRED: dict[str, Any] = {
    "project_id": "p",
    "timestamp_ns": 1_700_000_000_000_000_000,
    "trace_id": "ab" * 16,
    "span_id": "cd" * 8,
    "parent_span_id": "",
    "trace_state": "",
    "span_name": "response",
    "span_kind": "Internal",
    "service_name": "svc",
    "resource_attributes": {"service.name": "svc"},
    "scope_name": "scope",
    "scope_version": "1",
    "span_attributes": {"llm.model_name": "gpt"},
    "duration_ns": 5,
    "status_code": "Ok",
    "status_message": "",
    "event_timestamps": [2],
    "event_names": ["e"],
    "event_attributes": [{"k": "v"}],
    "link_trace_ids": [],
    "link_span_ids": [],
    "link_trace_states": [],
    "link_attributes": [],
    "ingested_ns": 3,
}


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return inspect.Parameter.empty


def test_the_constructor_takes_the_fields_in_their_order_with_their_defaults() -> None:
    # The source's signature (a compiled __init__ shows none): the compiled one is built
    # from it, and the tests below call it.
    source = source_module("collector.model").SpanRecord
    fields = dataclasses.fields(source)
    parameters = list(inspect.signature(source.__init__).parameters.values())[1:]
    assert [p.name for p in parameters] == [f.name for f in fields]
    for parameter, field in zip(parameters, fields, strict=True):
        assert parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        expected = _default(field)
        if field.default_factory is not dataclasses.MISSING:
            # A fresh one per record: None stands for it in the signature.
            assert parameter.default is None, field.name
            assert getattr(source(**_REQUIRED), field.name) == expected
        else:
            assert parameter.default == expected, field.name


def test_every_field_is_set_from_its_argument_by_keyword_and_by_position() -> None:
    values: dict[str, Any] = dict(_REQUIRED)
    for field in dataclasses.fields(SpanRecord)[len(_REQUIRED) :]:
        default = _default(field)
        if isinstance(default, bool):
            values[field.name] = not default
        elif isinstance(default, int):
            values[field.name] = 7
        elif isinstance(default, str):
            values[field.name] = f"{field.name}-value"
        elif isinstance(default, dict):
            values[field.name] = {"body": field.name}
        else:
            values[field.name] = [field.name]
    by_keyword = SpanRecord(**values)
    by_position = SpanRecord(*values.values())
    assert dataclasses.asdict(by_keyword) == values
    assert dataclasses.asdict(by_position) == values


def test_mutable_defaults_are_not_shared_between_records() -> None:
    first, second = SpanRecord(**_REQUIRED), SpanRecord(**_REQUIRED)
    first.redactions.append("attr.x:email")
    first.body_attributes["k"] = "v"
    assert second.redactions == [] and second.body_attributes == {}


@pytest.mark.parametrize(
    "copied",
    [
        pytest.param(lambda r: pickle.loads(pickle.dumps(r)), id="pickle"),  # noqa: S301
        pytest.param(copy.deepcopy, id="deepcopy"),
        pytest.param(lambda r: dataclasses.replace(r), id="replace"),
    ],
)
def test_a_record_copies_whole(copied: Any) -> None:
    record = SpanRecord(**_REQUIRED, model="gpt", redactions=["attr.k:email"], truncated=True)
    again = copied(record)
    assert again == record and again is not record
    assert dataclasses.asdict(again) == dataclasses.asdict(record)


def test_no_attribute_beyond_the_fields() -> None:
    record = SpanRecord(**_REQUIRED)
    with pytest.raises(AttributeError):
        record.not_a_field = 1  # type: ignore[attr-defined]
