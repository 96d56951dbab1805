"""Checking an eval's assertions against what a replayed run did.

Pure: an ``Observed`` (built from the engine's ``ReplayResult`` and the ledger's cost) and
an assertion of the ``afr.eval/v1`` contract in, an ``AssertionResult`` out. Every result
says what was expected and what was seen, as short text for the table and the JUnit report.

Semantics that a reader could otherwise guess differently:

- A tool "call" is every call the model made, whatever its outcome (an argument the stand-in
  refused still counts as a call, and its arguments are checked).
- Arguments are checked as the tool receives them: the SDK drops keys its schema does not
  declare (pydantic ignores extras), so a model that still sends ``amount`` to a tool that
  lost that parameter has not passed an amount (``ignored`` names what was dropped). This
  is what makes ``--agent`` catch a schema that lost a field, whatever the model sends.
- JSON Pointers are RFC 6901 (``~1`` is ``/``, ``~0`` is ``~``; ``""`` is the whole value);
  array indices are decimal without leading zeros.
- ``equals`` is JSON equality: ``12`` equals ``12.0``, but ``true`` is not ``1`` and
  ``"12.0"`` is not ``12.0``.
- ``matches`` is an RE2 search (linear time, whatever the pattern) in the value as text:
  a string as is, anything else as compact JSON.
- ``type`` names JSON types: ``integer`` is a number with no fractional part (``2.0``
  included, as JSON Schema has it); a boolean is never a number.
- ``no_span_errored`` fails on a tool call whose outcome failed (``FAILED_OUTCOMES``: a
  replayed captured error, arguments the real tool would refuse) and on the run's own error.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import re2

from afr_exporter import semconv as sc
from afr_exporter.evaluation import EvaluationAttributes, evaluation_result
from replay_worker.evals.contract import (
    Assertion,
    CostAtMost,
    GuardrailOutcome,
    HandoffTaken,
    LatencyAtMost,
    MaxTurns,
    NoSpanErrored,
    OutputSchema,
    ToolArgument,
    ToolCalled,
    ToolNotCalled,
    ToolOrder,
)
from replay_worker.replay.calls import FAILED_OUTCOMES, canonical_arguments
from replay_worker.replay.result import ReplayResult

__all__ = [
    "STATUS_LABELS",
    "AssertionResult",
    "Observed",
    "ObservedCall",
    "PointerError",
    "assertion_evaluation",
    "check",
    "check_all",
    "eval_evaluation",
    "json_equal",
    "json_type",
    "received",
    "resolve_pointer",
]

_MAX_SHOWN = 120  # characters of a value shown in a result


@dataclass(frozen=True)
class AssertionResult:
    kind: str
    expected: str
    actual: str
    passed: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "expected": self.expected,
            "actual": self.actual,
            "passed": self.passed,
        }


STATUS_LABELS = {
    "passed": sc.LABEL_PASS,
    "failed": sc.LABEL_FAIL,
    "inconclusive": sc.LABEL_INCONCLUSIVE,
    "errored": sc.LABEL_ERROR,
}
"""An eval's status as ``gen_ai.evaluation.score.label``: the conventions' own ``pass`` and
``fail``; ``inconclusive`` and ``error`` carry no score."""
_SCORES = {sc.LABEL_PASS: 1.0, sc.LABEL_FAIL: 0.0}


def _evaluated(
    name: str, label: str, explanation: str, error_type: str | None
) -> EvaluationAttributes:
    return evaluation_result(
        name,
        label=label,
        value=_SCORES.get(label),
        explanation=explanation,
        # The conventions' error.type: set when the evaluation itself ended in an error.
        error_type=(error_type or sc.ERROR_TYPE_OTHER) if label == sc.LABEL_ERROR else None,
    )


def assertion_evaluation(
    result: AssertionResult, eval_status: str, error_type: str | None = None
) -> EvaluationAttributes:
    """One assertion's outcome as a ``gen_ai.evaluation.result`` event, named
    ``afr.eval.assertion.<kind>``: ``pass`` (1.0) or ``fail`` (0.0) as checked — unless the
    eval as a whole is inconclusive (its replay depended on something unknown, so no check
    of it says anything) or errored (``error``, with ``error_type``, the class of what
    failed). Explained by what was expected and what was seen: the same short text the
    table and the JUnit report show, already stored in the run's ``afr.eval.assertions``."""
    label = STATUS_LABELS.get(eval_status, sc.LABEL_ERROR)
    if label in (sc.LABEL_PASS, sc.LABEL_FAIL):
        label = sc.LABEL_PASS if result.passed else sc.LABEL_FAIL
    return _evaluated(
        sc.EVALUATION_ASSERTION_PREFIX + result.kind,
        label,
        f"expected {result.expected}; seen {result.actual}",
        error_type,
    )


def eval_evaluation(
    eval_status: str, explanation: str, error_type: str | None = None
) -> EvaluationAttributes:
    """An eval's status as a ``gen_ai.evaluation.result`` event named ``afr.eval``."""
    label = STATUS_LABELS.get(eval_status, sc.LABEL_ERROR)
    return _evaluated(sc.EVALUATION_EVAL, label, explanation, error_type)


@dataclass(frozen=True)
class ObservedCall:
    tool: str
    arguments: Any
    """Parsed JSON (as the tool receives it), or the raw text when the model sent something
    that is not JSON."""
    outcome: str
    ignored: tuple[str, ...] = ()
    """Top-level keys the model sent that the tool's schema does not declare (dropped)."""


def received(arguments: Any, schema: dict[str, Any] | None) -> tuple[Any, tuple[str, ...]]:
    """The arguments as a tool with this parameters schema receives them, and the top-level
    keys it drops. A schema that declares no ``properties``, or admits more keys
    (``additionalProperties`` true or a schema), keeps everything."""
    if not isinstance(arguments, dict) or not isinstance(schema, dict):
        return arguments, ()
    declared = schema.get("properties")
    extras = schema.get("additionalProperties", False)
    if not isinstance(declared, dict) or extras is True or isinstance(extras, dict):
        return arguments, ()
    kept = {k: v for k, v in arguments.items() if k in declared}
    return kept, tuple(k for k in arguments if k not in declared)


@dataclass(frozen=True)
class Observed:
    """What a replayed run did, as assertions see it."""

    tool_calls: list[ObservedCall] = field(default_factory=list)
    handoffs: list[tuple[str, str]] = field(default_factory=list)
    turns: int = 0
    guardrails: list[dict[str, Any]] = field(default_factory=list)
    run_error: str | None = None
    final_output: Any = None
    cost_usd: float = 0.0
    duration_s: float = 0.0

    @classmethod
    def from_replay(
        cls,
        result: ReplayResult,
        cost_usd: float,
        tool_schemas: dict[str, dict[str, Any]] | None = None,
    ) -> Observed:
        """``tool_schemas``: tool name -> the parameters schema the run's tools had (the
        fixture's, or the current code's with ``--agent``); without it, arguments are taken
        as the model sent them."""
        schemas = tool_schemas or {}
        calls = []
        for i in result.invocations:
            tool = str(i["tool"])
            arguments, ignored = received(
                canonical_arguments(str(i["arguments"])), schemas.get(tool)
            )
            calls.append(ObservedCall(tool, arguments, str(i["outcome"]), ignored))
        return cls(
            tool_calls=calls,
            handoffs=list(result.handoffs),
            turns=result.turns,
            guardrails=list(result.guardrails),
            run_error=result.error,
            final_output=result.final_output_json,
            cost_usd=cost_usd,
            duration_s=result.duration_s,
        )

    @property
    def failed_calls(self) -> list[ObservedCall]:
        return [c for c in self.tool_calls if c.outcome in FAILED_OUTCOMES]

    def calls_of(self, tool: str) -> list[ObservedCall]:
        return [c for c in self.tool_calls if c.tool == tool]


# --- JSON helpers ---------------------------------------------------------------------------


class PointerError(LookupError):
    """The pointer does not resolve in the value."""


_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")  # in this order (RFC 6901 §4)


def resolve_pointer(document: Any, pointer: str) -> Any:
    """The value at an RFC 6901 JSON Pointer; ``PointerError`` naming the first part that
    does not resolve."""
    if pointer == "":
        return document
    if not pointer.startswith("/"):
        raise PointerError(f"{pointer!r} is not a JSON Pointer")
    value = document
    for raw in pointer[1:].split("/"):
        part = _unescape(raw)
        if isinstance(value, dict):
            if part not in value:
                raise PointerError(f"no member {part!r}")
            value = value[part]
        elif isinstance(value, list):
            if not _ARRAY_INDEX.fullmatch(part):
                raise PointerError(f"{part!r} is not an array index")
            if int(part) >= len(value):
                raise PointerError(f"index {part} is past the end ({len(value)} items)")
            value = value[int(part)]
        else:
            raise PointerError(f"{part!r} is inside a {json_type(value)}")
    return value


def json_type(value: Any) -> str:
    """The JSON type name of a parsed value: ``integer`` for whole numbers."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if math.isfinite(value) and value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _has_type(value: Any, name: str) -> bool:
    actual = json_type(value)
    return actual == name or (name == "number" and actual == "integer")


def json_equal(left: Any, right: Any) -> bool:
    """Equality of JSON values: numbers by value, but a boolean is never a number."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(
            json_equal(a, b) for a, b in zip(left, right, strict=True)
        )
    return type(left) is type(right) and bool(left == right)


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 1] + "…"


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _times(count: int) -> str:
    return f"{count} call" + ("" if count == 1 else "s")


# --- the checks -----------------------------------------------------------------------------


def _tool_called(a: ToolCalled, seen: Observed) -> AssertionResult:
    count = len(seen.calls_of(a.tool))
    bound = f"{a.min_count}..{a.max_count}" if a.max_count is not None else f">= {a.min_count}"
    passed = count >= a.min_count and (a.max_count is None or count <= a.max_count)
    return AssertionResult(a.kind, f"{a.tool}: {bound} calls", _times(count), passed)


def _tool_not_called(a: ToolNotCalled, seen: Observed) -> AssertionResult:
    count = len(seen.calls_of(a.tool))
    return AssertionResult(a.kind, f"{a.tool}: no call", _times(count), count == 0)


def _argument_check(a: ToolArgument, value: Any) -> tuple[bool, str]:
    """Whether one resolved value holds, and what was seen."""
    if "equals" in a.model_fields_set:
        return json_equal(value, a.equals), _shown(value)
    if a.matches is not None:
        try:
            return re2.search(a.matches, _as_text(value)) is not None, _shown(value)
        except re2.error as exc:
            return False, f"the pattern is invalid: {exc}"
    assert a.type is not None  # the contract allows exactly one check
    return _has_type(value, a.type), f"{json_type(value)} {_shown(value)}"


def _tool_argument(a: ToolArgument, seen: Observed) -> AssertionResult:
    if "equals" in a.model_fields_set:
        check = f"== {_shown(a.equals)}"
    elif a.matches is not None:
        check = f"matches {a.matches!r}"
    else:
        check = f"is {a.type}"
    expected = f"{a.tool} {a.pointer or '(arguments)'} {check} ({a.call} call)"
    calls = seen.calls_of(a.tool)
    if not calls:
        return AssertionResult(a.kind, expected, f"{a.tool} was not called", False)
    chosen = calls[-1:] if a.call == "last" else calls
    outcomes: list[tuple[bool, str]] = []
    for call in chosen:
        try:
            value = resolve_pointer(call.arguments, a.pointer)
        except PointerError as exc:
            head = _unescape(a.pointer[1:].split("/", 1)[0]) if a.pointer else ""
            if head in call.ignored:
                outcomes.append((False, f"{head!r} sent, but {a.tool} has no such parameter"))
            else:
                outcomes.append((False, f"unresolved: {exc}"))
            continue
        outcomes.append(_argument_check(a, value))
    held = [ok for ok, _ in outcomes]
    passed = any(held) if a.call == "any" else all(held)
    shown = [text for _, text in outcomes]
    actual = shown[0] if len(shown) == 1 else "[" + ", ".join(shown) + "]"
    return AssertionResult(a.kind, expected, actual, passed)


def _handoff(a: HandoffTaken, seen: Observed) -> AssertionResult:
    taken = ", ".join(f"{f} -> {t}" for f, t in seen.handoffs) or "no handoff"
    return AssertionResult(
        a.kind,
        f"{a.from_agent} -> {a.to_agent}",
        taken,
        (a.from_agent, a.to_agent) in seen.handoffs,
    )


def _is_subsequence(wanted: list[str], seen: list[str]) -> bool:
    remaining = iter(seen)
    return all(any(name == tool for name in remaining) for tool in wanted)


def _tool_order(a: ToolOrder, seen: Observed) -> AssertionResult:
    names = [c.tool for c in seen.tool_calls]
    passed = names == a.tools if a.mode == "strict" else _is_subsequence(a.tools, names)
    label = "exactly" if a.mode == "strict" else "in order"
    return AssertionResult(
        a.kind, f"{label}: {', '.join(a.tools)}", ", ".join(names) or "no tool call", passed
    )


def _max_turns(a: MaxTurns, seen: Observed) -> AssertionResult:
    return AssertionResult(
        a.kind, f"<= {a.turns} model calls", f"{seen.turns} model calls", seen.turns <= a.turns
    )


def _no_span_errored(a: NoSpanErrored, seen: Observed) -> AssertionResult:
    types = set(a.span_types or ("tool", "run"))
    errors: list[str] = []
    if "tool" in types:
        errors += [f"{c.tool} ({c.outcome})" for c in seen.failed_calls]
    if "run" in types and seen.run_error:
        errors.append(seen.run_error.split(":", 1)[0])
    expected = "no errored " + "/".join(sorted(types)) + " span"
    return AssertionResult(a.kind, expected, "; ".join(errors) or "none errored", not errors)


def _guardrail(a: GuardrailOutcome, seen: Observed) -> AssertionResult:
    expected = f"{a.name} " + ("triggered" if a.triggered else "not triggered")
    ran = [g for g in seen.guardrails if g.get("name") == a.name]
    if not ran:
        return AssertionResult(a.kind, expected, f"{a.name} did not run", False)
    triggered = any(bool(g.get("triggered")) for g in ran)
    actual = f"{a.name} " + ("triggered" if triggered else "not triggered")
    return AssertionResult(a.kind, expected, actual, triggered == a.triggered)


def _output_schema(a: OutputSchema, seen: Observed) -> AssertionResult:
    title = a.json_schema.get("title")
    expected = f"final output valid against {title or 'the schema'}"
    if seen.final_output is None:
        return AssertionResult(a.kind, expected, "no final output", False)
    try:
        validator_class = jsonschema.validators.validator_for(a.json_schema)
        validator_class.check_schema(a.json_schema)
        validator = validator_class(a.json_schema, format_checker=jsonschema.FormatChecker())
        error = jsonschema.exceptions.best_match(validator.iter_errors(seen.final_output))
    except jsonschema.exceptions.SchemaError as exc:
        return AssertionResult(a.kind, expected, f"the schema is invalid: {exc.message}", False)
    if error is None:
        return AssertionResult(a.kind, expected, "valid", True)
    where = "".join(f"/{p}" for p in error.absolute_path) or "/"
    return AssertionResult(a.kind, expected, f"{where}: {error.message}"[:_MAX_SHOWN], False)


def _cost(a: CostAtMost, seen: Observed) -> AssertionResult:
    return AssertionResult(
        a.kind, f"<= ${a.usd:.4f}", f"${seen.cost_usd:.4f}", seen.cost_usd <= a.usd
    )


def _latency(a: LatencyAtMost, seen: Observed) -> AssertionResult:
    return AssertionResult(
        a.kind,
        f"<= {a.seconds:g} s",
        f"{seen.duration_s:.2f} s",
        seen.duration_s <= a.seconds,
    )


def check(assertion: Assertion, observed: Observed) -> AssertionResult:
    """One assertion against what the run did. Never raises on what the run produced."""
    match assertion:
        case ToolCalled():
            return _tool_called(assertion, observed)
        case ToolNotCalled():
            return _tool_not_called(assertion, observed)
        case ToolArgument():
            return _tool_argument(assertion, observed)
        case HandoffTaken():
            return _handoff(assertion, observed)
        case ToolOrder():
            return _tool_order(assertion, observed)
        case MaxTurns():
            return _max_turns(assertion, observed)
        case NoSpanErrored():
            return _no_span_errored(assertion, observed)
        case GuardrailOutcome():
            return _guardrail(assertion, observed)
        case OutputSchema():
            return _output_schema(assertion, observed)
        case CostAtMost():
            return _cost(assertion, observed)
        case LatencyAtMost():
            return _latency(assertion, observed)


def check_all(assertions: list[Assertion], observed: Observed) -> list[AssertionResult]:
    return [check(a, observed) for a in assertions]
