"""Differential test: a stand-in accepts exactly the arguments the real SDK tool accepts.

Each tool below is a real ``@function_tool`` (``failure_error_function=None``, so a rejected
call raises ``ModelBehaviorError``; the body returns ``"ok"``). Its ``params_json_schema`` --
what capture records -- is round-tripped through JSON and given to ``argument_validator``;
then, for every argument string of a generated matrix and of hypothesis draws, the real
``FunctionTool.on_invoke_tool`` accepts it iff the stand-in validator does. Strict (the
SDK default) and non-strict tools are both covered.

``test_schema_ambiguities`` pins the cases a JSON schema cannot tell apart (documented in
``replay_worker/replay/validation.py``): there the stand-in knowingly differs.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import enum
import json
import uuid
from collections.abc import Callable, Iterator
from ipaddress import IPv4Address
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from agents import FunctionTool, function_tool
from agents.exceptions import ModelBehaviorError
from agents.tool_context import ToolContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import (
    AnyUrl,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    HttpUrl,
    Json,
    StrictInt,
)
from typing_extensions import TypedDict

from replay_worker.replay.validation import ArgumentValidator, argument_validator

# --- the real tools -------------------------------------------------------------------------


class Color(enum.StrEnum):
    RED = "red"
    GREEN = "green"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Geo(BaseModel):
    lat: float
    lon: float


class Address(BaseModel):
    street: str
    zip_code: Annotated[str, Field(pattern=r"^\d{5}$")]
    geo: Geo | None = None


class Passenger(TypedDict):
    name: str
    age: int


class LineItem(BaseModel):
    sku: str
    qty: Annotated[int, Field(ge=1)]


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Tree(BaseModel):
    value: int
    children: list[Tree] = []


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")
    a: int


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")
    a: int


class TypedExtras(BaseModel):
    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, int] = Field(init=False)
    a: int


async def book_flight(flight_id: str, passenger_count: int, date: datetime.date) -> str:
    return "ok"


async def scalars(i: int, f: float, b: bool, s: str) -> str:
    return "ok"


async def temporal(
    when: datetime.datetime, at: datetime.time, within: datetime.timedelta, ref: uuid.UUID
) -> str:
    return "ok"


async def choices(
    color: Color,
    priority: Priority,
    mode: Literal["fast", "slow"],
    one: Literal["x"],
    level: Literal[1, 2, 3],
) -> str:
    return "ok"


async def defaults(
    limit: int | None = None,
    count: int = 5,
    label: str = "all",
    verbose: bool = False,
    ratio: float = 0.5,
    color: Color = Color.RED,
    priority: Priority = Priority.LOW,
) -> str:
    return "ok"


async def collections(
    ids: list[int],
    tags: list[str] = [],  # noqa: B006 - the SDK copies defaults; a literal default shows in the schema
    pair: tuple[int, str] | None = None,
    unique: set[str] | None = None,
) -> str:
    return "ok"


async def nested(address: Address, passenger: Passenger, items: list[LineItem]) -> str:
    return "ok"


async def constrained(
    stars: Annotated[int, Field(ge=1, le=9)],
    code: Annotated[str, Field(pattern=r"^[A-Z]{3}$", min_length=3, max_length=3)],
    pct: Annotated[float, Field(gt=0, lt=100, multiple_of=0.5)],
    few: Annotated[list[int], Field(min_length=1, max_length=3)],
    name: Annotated[str, Field(max_length=5)] = "abc",
) -> str:
    return "ok"


async def unions(
    key: int | str,
    pet: Annotated[Cat | Dog, Field(discriminator="kind")],
    maybe: list[int] | None = None,
    either: bool | list[str] | None = None,
) -> str:
    return "ok"


async def tree(root: Tree) -> str:
    return "ok"


async def ping() -> str:
    return "ok"


async def networky(
    site: AnyUrl, home: HttpUrl, ip: IPv4Address, payload: Json[list[int]], where: Path
) -> str:
    return "ok"


async def anything(blob: Any = None, note: str | None = None) -> str:
    return "ok"


async def variadic(*numbers: int) -> str:
    return "ok"


# Non-strict only: the SDK refuses a strict schema for these.
async def mappings(
    counts: dict[str, int],
    meta: dict[str, Any] | None = None,
    closed: Closed | None = None,
    open_: Open | None = None,
    typed: TypedExtras | None = None,
    sized: Annotated[dict[str, float], Field(min_length=1, max_length=2)] | None = None,
) -> str:
    return "ok"


async def with_kwargs(name: str, size: int = 1, **extra: int) -> str:
    return "ok"


EXAMPLES: dict[Callable[..., Any], dict[str, Any]] = {
    book_flight: {"flight_id": "LH400", "passenger_count": 2, "date": "2026-12-05"},
    scalars: {"i": 1, "f": 1.5, "b": True, "s": "s"},
    temporal: {
        "when": "2026-12-05T10:30:00Z",
        "at": "10:30:00",
        "within": "PT5M",
        "ref": "3fa85f64-5717-4562-b3fc-2c963f66afa6",
    },
    choices: {"color": "red", "priority": 1, "mode": "fast", "one": "x", "level": 2},
    defaults: {
        "limit": 3,
        "count": 5,
        "label": "all",
        "verbose": False,
        "ratio": 0.5,
        "color": "green",
        "priority": 2,
    },
    collections: {"ids": [1, 2], "tags": ["a"], "pair": [1, "a"], "unique": ["a", "b"]},
    nested: {
        "address": {"street": "Main", "zip_code": "12345", "geo": {"lat": 1.0, "lon": 2.0}},
        "passenger": {"name": "Ada", "age": 36},
        "items": [{"sku": "A1", "qty": 1}],
    },
    constrained: {"stars": 5, "code": "ABC", "pct": 50.5, "few": [1], "name": "abc"},
    unions: {"key": 1, "pet": {"kind": "cat", "lives": 9}, "maybe": [1], "either": True},
    tree: {"root": {"value": 1, "children": [{"value": 2, "children": []}]}},
    ping: {},
    networky: {
        "site": "ftp://example.com/a",
        "home": "https://example.com/",
        "ip": "192.168.0.1",
        "payload": "[1, 2]",
        "where": "/tmp/x",
    },
    anything: {"blob": {"a": [1]}, "note": "n"},
    variadic: {"numbers": [1, 2]},
    mappings: {
        "counts": {"a": 1},
        "meta": {"k": "v"},
        "closed": {"a": 1},
        "open_": {"a": 1, "b": "x"},
        "typed": {"a": 1, "b": 2},
        "sized": {"x": 1.5},
    },
    with_kwargs: {"name": "n", "size": 2, "extra": {"a": 1}},
}
# Strict schemas cannot express mappings or **kwargs (the SDK refuses them), and in a strict
# schema ``*numbers`` reads exactly like a required ``numbers: list[int]`` (see ambiguities).
NON_STRICT_ONLY = {mappings, with_kwargs, variadic}


def make_tool(func: Callable[..., Any], strict: bool) -> FunctionTool:
    tool = function_tool(func, strict_mode=strict, failure_error_function=None)
    assert isinstance(tool, FunctionTool)
    return tool


TOOLS: list[tuple[FunctionTool, dict[str, Any]]] = [
    (make_tool(func, strict), example)
    for strict in (True, False)
    for func, example in EXAMPLES.items()
    if strict is False or func not in NON_STRICT_ONLY
]


def tool_id(entry: tuple[FunctionTool, dict[str, Any]]) -> str:
    tool = entry[0]
    return f"{tool.name}-{'strict' if tool.strict_json_schema else 'nonstrict'}"


def stand_in(tool: FunctionTool) -> Callable[[str], str | None]:
    """The validator as stubs.py builds it: from the captured schema alone (strictness
    inferred; ``test_strictness_inferred_from_the_schema_matches_the_flag`` pins that)."""
    captured = json.loads(json.dumps(tool.params_json_schema))  # what capture records
    return argument_validator(captured)


async def _sdk_accepts(tool: FunctionTool, arguments: str) -> bool:
    context = ToolContext(
        context=None, tool_name=tool.name, tool_call_id="call_1", tool_arguments=arguments
    )
    try:
        result = await tool.on_invoke_tool(context, arguments)
    except ModelBehaviorError:
        return False
    assert result == "ok"
    return True


def sdk_verdicts(tool: FunctionTool, cases: list[str]) -> list[bool]:
    async def run() -> list[bool]:
        return [await _sdk_accepts(tool, case) for case in cases]

    return asyncio.run(run())


def disagreements(tool: FunctionTool, cases: list[str]) -> list[str]:
    validator = stand_in(tool)
    out = []
    for case, sdk in zip(cases, sdk_verdicts(tool, cases), strict=True):
        reason = validator(case)
        if sdk != (reason is None):
            out.append(
                f"{case!r}: sdk={'accepts' if sdk else 'rejects'} stand-in={reason or 'accepts'}"
            )
    return out


# --- the matrix -----------------------------------------------------------------------------

PROBES: list[Any] = [
    # numbers and their lax spellings
    2,
    "2",
    2.0,
    2.5,
    "2.5",
    "2.0",
    1,
    0,
    -1,
    "1",
    "0",
    " 2 ",
    "1_000",
    3,
    5,
    9,
    10,
    99.5,
    100,
    0.5,
    0.25,
    1e-9,
    1e308,
    2**53 + 1,
    2**63,
    2**64,
    10**30,
    -(2**63) - 1,
    1733400000,
    # booleans
    True,
    False,
    "true",
    "false",
    "True",
    "yes",
    "on",
    "off",
    "t",
    # strings
    None,
    "",
    " ",
    "x",
    "s",
    "ünïcødé ✈",
    "ABC",
    "abc",
    "12345",
    "1234",
    "abcdef",
    "red",
    "RED",
    "green",
    "fast",
    "cat",
    "dog",
    # dates and times
    "2026-12-05",
    "2026-13-05",
    "2026-02-30",
    "2026-12-5",
    "20261205",
    "2026-12-05T10:30:00",
    "2026-12-05T10:30:00Z",
    "2026-12-05T10:30:00+02:00",
    "2026-12-05 10:30",
    "2026-12-05T25:00:00",
    "10:30",
    "10:30:00Z",
    "25:00",
    "P1D",
    "PT5M",
    "1 day",
    "00:05:00",
    86400,
    300.5,
    # identifiers, urls, addresses, paths, json
    "3fa85f64-5717-4562-b3fc-2c963f66afa6",
    "3fa85f645717",
    "https://example.com/a",
    "ftp://example.com",
    "example.com",
    "http://",
    "192.168.0.1",
    "999.1.1.1",
    "/tmp/x",
    "[1, 2]",
    '[1, "a"]',
    "{}",
    "not json",
    # containers
    [],
    [1],
    [1, 2],
    [1, "2"],
    [1, 2, 3, 4],
    [1.5],
    ["a"],
    ["a", "a"],
    [None],
    [[1]],
    [1, "a"],
    [1, "a", 2],
    {},
    {"a": 1},
    {"a": "1"},
    {"a": 1.5},
    {"lat": 1, "lon": "2"},
    {"kind": "cat", "lives": 9},
    {"kind": "dog", "good": "yes"},
    {"kind": "cow"},
    {"value": 1},
    {"value": "x", "children": []},
    {"street": "s", "zip_code": 12345},
    {"sku": "s", "qty": 0},
    {"name": "n", "age": "36"},
    {"size": 1},
    {"name": 2},
    {"numbers": 1},
    {"b": 1, "size": "2"},
]

WHOLE_ARGUMENTS = [
    "",
    " ",
    "{}",
    "[]",
    "null",
    "1",
    '"x"',
    "true",
    "{",
    "}",
    "{'a': 1}",
    '{"a": 1,}',
    "NaN",
    "[{}]",
    '{"": 1}',
    "\ufeff{}",
    "{}\n",
    " {} ",
    "{} {}",
    "\x00",
]


def _paths(value: Any, prefix: tuple[Any, ...] = (), depth: int = 0) -> Iterator[tuple[Any, ...]]:
    if depth > 3:
        return
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*prefix, key)
            yield from _paths(child, (*prefix, key), depth + 1)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield (*prefix, index)
            yield from _paths(child, (*prefix, index), depth + 1)


def _objects(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        yield prefix
        for key, child in value.items():
            yield from _objects(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _objects(child, (*prefix, index))


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copied = json.loads(json.dumps(value))
    target = copied
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return copied


def _delete(value: Any, path: tuple[Any, ...]) -> Any:
    copied = json.loads(json.dumps(value))
    target = copied
    for step in path[:-1]:
        target = target[step]
    del target[path[-1]]
    return copied


def matrix(example: dict[str, Any]) -> list[str]:
    cases = [json.dumps(example), *WHOLE_ARGUMENTS]
    for path in _paths(example):
        cases += [json.dumps(_replace(example, path, probe)) for probe in PROBES]
        cases.append(json.dumps(_delete(example, path)))
        # Tokens json.loads accepts but JSON does not, and numbers past float range.
        for token in ("NaN", "Infinity", "-Infinity", "1e400", "123456789012345678901234567890"):
            cases.append(json.dumps(_replace(example, path, "\0")).replace('"\\u0000"', token))
    for path in _objects(example):
        extra = _replace(example, path, {**_get(example, path), "unexpected_key": 1})
        cases.append(json.dumps(extra))
        cases.append(json.dumps(_replace(example, path, {})))
    for key in example:
        # Duplicate keys: json.loads keeps the last one.
        cases.append(json.dumps(example)[:-1] + f', "{key}": "dup"}}')
    return list(dict.fromkeys(cases))


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


@pytest.mark.parametrize("entry", TOOLS, ids=tool_id)
def test_matrix_agrees_with_the_sdk(entry: tuple[FunctionTool, dict[str, Any]]) -> None:
    tool, example = entry
    cases = matrix(example)
    verdicts = sdk_verdicts(tool, cases)
    assert verdicts[0], "the example is valid"
    assert not all(verdicts), "the matrix has rejections"
    assert sum(verdicts) > 1, "the matrix has more than one acceptance"
    assert disagreements(tool, cases) == []


def test_matrix_size() -> None:
    sizes = {tool_id(entry): len(matrix(entry[1])) for entry in TOOLS}
    assert len(sizes) == 2 * len(EXAMPLES) - len(NON_STRICT_ONLY)
    assert sum(sizes.values()) > 10_000, sizes


def test_lax_coercions_and_formats_from_the_issue() -> None:
    tool = make_tool(book_flight, strict=True)
    validator = stand_in(tool)
    valid = {"flight_id": "LH400", "passenger_count": 2, "date": "2026-12-05"}
    cases = {
        "coerced int": ({**valid, "passenger_count": "2"}, True),
        "integral float": ({**valid, "passenger_count": 2.0}, True),
        "fractional float": ({**valid, "passenger_count": 2.5}, False),
        "impossible date": ({**valid, "date": "2026-13-05"}, False),
        "extra key": ({**valid, "seat": "1A"}, True),
        "null": ({**valid, "date": None}, False),
        "missing": ({"flight_id": "LH400", "passenger_count": 2}, False),
    }
    for name, (arguments, accepted) in cases.items():
        raw = json.dumps(arguments)
        assert sdk_verdicts(tool, [raw]) == [accepted], name
        assert (validator(raw) is None) is accepted, name


def test_strictness_inferred_from_the_schema_matches_the_flag() -> None:
    for tool, _ in TOOLS:
        inferred = ArgumentValidator(json.loads(json.dumps(tool.params_json_schema)))
        assert inferred.strict is tool.strict_json_schema, tool_id((tool, {}))
        assert inferred.fully_mapped, tool_id((tool, {}))


# --- hypothesis -----------------------------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.sampled_from([p for p in PROBES if isinstance(p, str)]),
)
_keys = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["kind", "value", "children", "lat", "lon", "a", "sku", "qty", "name", "age"]),
)
_json = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=4),
    max_leaves=10,
)
_HYPOTHESIS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _agree(tool: FunctionTool, arguments: str) -> None:
    assert disagreements(tool, [arguments]) == []


@_HYPOTHESIS
@given(entry=st.sampled_from(TOOLS), data=st.data())
def test_random_values_at_example_paths(
    entry: tuple[FunctionTool, dict[str, Any]], data: st.DataObject
) -> None:
    tool, example = entry
    paths = list(_paths(example))
    if not paths:
        _agree(tool, json.dumps(data.draw(st.dictionaries(_keys, _json, max_size=3))))
        return
    path = data.draw(st.sampled_from(paths))
    _agree(tool, json.dumps(_replace(example, path, data.draw(_json))))


@_HYPOTHESIS
@given(entry=st.sampled_from(TOOLS), data=st.data())
def test_random_objects_over_the_tool_keys(
    entry: tuple[FunctionTool, dict[str, Any]], data: st.DataObject
) -> None:
    tool, example = entry
    keys = st.sampled_from([*example, "other"])
    arguments = data.draw(st.dictionaries(keys, _json, max_size=len(example) + 1))
    _agree(tool, json.dumps(arguments))


@settings(max_examples=150, deadline=None)
@given(entry=st.sampled_from(TOOLS), text=st.text(max_size=20))
def test_random_text(entry: tuple[FunctionTool, dict[str, Any]], text: str) -> None:
    _agree(entry[0], text)


# --- reasons, cache, fallback, ambiguities --------------------------------------------------


def test_reasons_never_quote_values_or_unknown_keys() -> None:
    secret = "s3cr3t-Value-42"
    tool = make_tool(mappings, strict=False)
    validator = stand_in(tool)
    for arguments in (
        {"counts": {secret: secret}},
        {"counts": {"a": 1}, "closed": {"a": secret, secret: 1}},
        {"counts": [secret]},
    ):
        reason = validator(json.dumps(arguments))
        assert reason is not None
        assert secret not in reason
        assert "counts" in reason or "closed" in reason, reason
    reason = stand_in(make_tool(book_flight, strict=True))(f'{{"flight_id": "{secret}"')
    assert reason == "arguments are not valid JSON"


def test_validators_are_cached_per_schema() -> None:
    tool = make_tool(nested, strict=True)
    first = argument_validator(json.loads(json.dumps(tool.params_json_schema)), strict=True)
    again = argument_validator(json.loads(json.dumps(tool.params_json_schema)), strict=True)
    assert first is again


def test_unmappable_sub_schemas_fall_back_to_jsonschema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "odd": {"not": {"type": "string"}},
            "range": {"allOf": [{"minimum": 1}, {"maximum": 5}]},
            "host": {"type": "string", "format": "ipv4-or-name"},
            "day": {"type": ["string", "null"], "format": "date", "minLength": 10},
        },
        "required": ["n", "odd"],
    }
    validator = argument_validator(schema)
    assert isinstance(validator, ArgumentValidator)
    assert validator.fallbacks == 4  # odd, range, host and the constrained date
    assert validator('{"n": "2", "odd": 1}') is None  # pydantic, lax, for n
    assert validator('{"n": 2, "odd": "x"}') == "invalid arguments: odd: json_schema"
    assert validator('{"n": 2, "odd": 1, "range": 7}') == "invalid arguments: range: json_schema"
    assert validator('{"n": 2, "odd": 1, "range": 3, "host": "h"}') is None
    assert validator('{"n": 2, "odd": 1, "day": "2026-13-05"}') is not None  # format checker
    assert validator('{"n": 2, "odd": 1, "day": null}') is None

    whole = argument_validator({"type": "object", "patternProperties": {"^x": {"type": "integer"}}})
    assert isinstance(whole, ArgumentValidator)
    assert not whole.fully_mapped
    assert whole('{"xa": 1}') is None
    assert whole('{"xa": "1"}') == "invalid arguments: (root): json_schema"
    assert whole("[]") == "arguments are not a JSON object"


def test_type_lists_and_typed_constraints_map_to_pydantic() -> None:
    validator = argument_validator(
        {
            "type": "object",
            "properties": {
                "v": {"type": ["integer", "string", "null"], "minimum": 1, "maxLength": 2}
            },
            "required": ["v"],
        }
    )
    assert isinstance(validator, ArgumentValidator)
    assert validator.fully_mapped
    accepted = ['{"v": 1}', '{"v": "ab"}', '{"v": null}', '{"v": 2.0}']
    rejected = ['{"v": 0}', '{"v": "abc"}', "{}", '{"v": []}']
    assert [validator(a) for a in accepted] == [None] * len(accepted)
    assert all(validator(r) is not None for r in rejected)


class PlainLevel(enum.Enum):
    LOW = 1
    HIGH = 2


async def strict_int(n: StrictInt) -> str:
    return "ok"


async def finite(x: FiniteFloat) -> str:
    return "ok"


async def aware(when: AwareDatetime) -> str:
    return "ok"


async def plain_enum(level: PlainLevel) -> str:
    return "ok"


async def required_nullable(x: int | None) -> str:
    return "ok"


async def amount(value: decimal.Decimal) -> str:
    return "ok"


async def int_keys(d: dict[int, int]) -> str:
    return "ok"


async def closed_nested(c: Closed) -> str:
    return "ok"


@pytest.mark.parametrize(
    ("func", "strict", "arguments", "sdk_accepts"),
    [
        # Same schema as a laxer type: the stand-in accepts what the SDK rejected.
        (strict_int, True, '{"n": "2"}', False),  # int
        (finite, True, '{"x": NaN}', False),  # float
        (aware, True, '{"when": "2026-12-05T10:30:00"}', False),  # datetime
        (plain_enum, True, '{"level": "1"}', False),  # IntEnum
        (required_nullable, True, "{}", False),  # int | None = None (strict strips the default)
        (amount, True, '{"value": "abc"}', False),  # float | str
        (int_keys, False, '{"d": {"a": 1}}', False),  # dict[str, int]
        (closed_nested, True, '{"c": {"a": 1, "b": 2}}', False),  # strict closes every object
        # Same schema as a stricter type: the stand-in rejects what the SDK accepted.
        (variadic, True, "{}", True),  # *numbers reads as a required list in a strict schema
    ],
    ids=lambda value: getattr(value, "__name__", None),
)
def test_schema_ambiguities(
    func: Callable[..., Any], strict: bool, arguments: str, sdk_accepts: bool
) -> None:
    """A JSON schema cannot tell these apart; the stand-in takes the common reading."""
    tool = make_tool(func, strict)
    assert sdk_verdicts(tool, [arguments]) == [sdk_accepts]
    assert (stand_in(tool)(arguments) is None) is not sdk_accepts
