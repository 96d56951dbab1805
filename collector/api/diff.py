"""Two runs diffed step by step: ``GET /api/v1/runs/diff`` (runs.py) and ``afr runs diff``.

Pure: two runs' summaries and normalized spans (as ``GET /api/v1/runs/{run_id}`` serves them)
and the price table in, a ``RunDiff`` out.

A run's steps are its agent, turn, model-call, tool-call, handoff and guardrail spans (and
its task), in tree order: a parent before its children, siblings by start time. Steps align
on their type and name (the agent; the tool, and the call id when both runs have it; the
agent that called the model; the guardrail) with the longest common subsequence, so a step
only one run has does not shift every step after it.

What is compared at an aligned step, in the order that decides its kind: which agent, tool
or handoff target; a tool call's arguments (JSON pointers); the model; the output (a tool's
result by JSON pointer; a model call's text: the tool calls it asked for are the tool and
handoff steps); a guardrail's outcome; an error on one side only (or another error type).
The **first divergence** is the first step that differs. An agent's, turn's or task's own
error is only the first divergence when nothing inside differs: a container fails because
of something in it, and that is the step worth showing.

For a replay or eval against its source, ``tool_divergence`` is the verdict's notion (tool
calls by position, as ``replay_worker.replay.verdict.first_divergence`` compares a replay's
calls with the captured ones), and ``verdict`` is what the replay recorded: the two agree.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from afr_common.prices import PriceBook, Tokens
from afr_exporter import semconv as sc
from collector.api.models import (
    DiffStep,
    Divergence,
    PointerDifference,
    RecordedVerdict,
    Run,
    RunDiff,
    Span,
    StepDelta,
    StepSide,
    ToolDivergence,
)

__all__ = ["STEP_TYPES", "diff_runs", "pointer_differences", "recorded_verdict", "run_steps"]

STEP_TYPES: Final = ("task", "agent", "turn", "llm", "tool", "handoff", "guardrail")
_CONTAINERS: Final = frozenset({"task", "agent", "turn"})
_HANDOFF_TOOL_PREFIX: Final = "transfer_to_"  # the SDK's handoff tools
_MISSING: Final = object()
# What decides a step's kind, first to last (models.DivergenceKind).
_PRECEDENCE: Final = (
    "missing_step",
    "extra_step",
    "step",
    "agent",
    "tool",
    "handoff",
    "arguments",
    "model",
    "output",
    "guardrail",
    "error",
)
_WHAT: Final = {
    "task": "the task",
    "agent": "agent",
    "turn": "turn of",
    "llm": "model call of",
    "tool": "tool call",
    "handoff": "handoff from",
    "guardrail": "guardrail",
}


@dataclass(frozen=True)
class Step:
    """One span as a step: what aligns it and what is compared."""

    type: str
    name: str
    span: Span
    label: str
    """What StepSide.name shows: the agent, tool, model, handoff target or guardrail."""
    arguments: Any = None
    output: Any = None
    model: str = ""
    triggered: bool | None = None

    @property
    def failed(self) -> bool:
        return self.span.status.code == "Error"

    @property
    def error(self) -> str:
        return (self.span.error_type or self.span.status.message) if self.failed else ""

    @property
    def error_message(self) -> str:
        """What the error said (the exception's message): a 400 is not a 500."""
        if not self.failed:
            return ""
        for event in self.span.events:
            if event.name == "exception" and event.attributes.get("exception.message"):
                return event.attributes["exception.message"]
        return self.span.attributes.get(sc.AFR_ERROR_DATA, "")


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _model_output(output: str, ran: set[str]) -> Any:
    """A model call's output as compared: the text parts of its output messages (GenAI
    semconv), or the body as it is when it is no such document. A tool call it asked for
    that ran (its id is a tool span's) or is a handoff is a step of its own; one that never
    ran (the SDK refused it: no such tool) is part of the output, by name and arguments."""
    parsed = _json(output)
    if not isinstance(parsed, list):
        return output
    texts: list[str] = []
    unrun: list[dict[str, Any]] = []
    for message in parsed:
        parts = message.get("parts") if isinstance(message, dict) else None
        for part in parts if isinstance(parts, list) else []:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text":
                texts.append(str(part.get("content", "")))
            elif part.get("type") == "tool_call" and part.get("id") not in ran:
                name = str(part.get("name") or "")
                if not name.startswith(_HANDOFF_TOOL_PREFIX):
                    unrun.append({"name": name, "arguments": _json(str(part.get("arguments")))})
    text = "\n".join(texts)
    return {"text": text, "calls_not_run": unrun} if unrun else text


def _tree_order(spans: Sequence[Span]) -> list[Span]:
    ids = {span.span_id for span in spans}
    children: dict[str, list[Span]] = {}
    for span in spans:
        parent = span.parent_span_id if span.parent_span_id in ids else ""
        children.setdefault(parent, []).append(span)
    for siblings in children.values():
        siblings.sort(key=lambda s: (s.start_time_unix_nano, s.span_id), reverse=True)
    ordered: list[Span] = []
    seen: set[str] = set()
    stack = list(children.get("", []))  # a stack: no recursion limit on deep runs
    while stack:
        span = stack.pop()
        if span.span_id in seen:
            continue
        seen.add(span.span_id)
        ordered.append(span)
        stack += children.get(span.span_id, [])
    return ordered + [s for s in spans if s.span_id not in seen]  # parent cycles


def _owner(span: Span, by_id: Mapping[str, Span]) -> str:
    current: Span | None = span
    while current is not None:
        if current.span_type in ("turn", "agent") and current.agent_name:
            return current.agent_name
        current = by_id.get(current.parent_span_id)
    return ""


def _handoff_target(span: Span) -> str:
    target = span.attributes.get(sc.AFR_HANDOFF_TO) or span.attributes.get(
        "gen_ai.handoff.to_agent", ""
    )
    return target or span.name.rpartition("->")[2].strip()


def run_steps(spans: Sequence[Span]) -> list[Step]:
    """A run's steps, in tree order."""
    by_id = {span.span_id: span for span in spans}
    ran = {s.tool_call_id for s in spans if s.span_type == "tool" and s.tool_call_id}
    steps = []
    for span in _tree_order(spans):
        kind = span.span_type
        if kind not in STEP_TYPES:
            continue
        if kind in ("agent", "turn"):
            name = span.agent_name or span.name
            steps.append(Step(kind, name, span, name))
        elif kind == "task":
            steps.append(Step(kind, "", span, span.name))
        elif kind == "llm":
            owner = _owner(span, by_id)
            model = span.model
            steps.append(
                Step(kind, owner, span, model, output=_model_output(span.output, ran), model=model)
            )
        elif kind == "tool":
            name = span.tool_name or span.name
            steps.append(
                Step(kind, name, span, name, arguments=_json(span.input), output=_json(span.output))
            )
        elif kind == "handoff":
            source = span.agent_name or span.attributes.get(sc.AFR_HANDOFF_FROM, "")
            steps.append(Step(kind, source, span, _handoff_target(span)))
        else:
            name = span.attributes.get(sc.AFR_GUARDRAIL_NAME) or span.name
            triggered = span.attributes.get(sc.AFR_GUARDRAIL_TRIGGERED) == "true"
            steps.append(Step(kind, name, span, name, triggered=triggered))
    return steps


# --- JSON pointers -------------------------------------------------------------------------
def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def pointer_differences(a: Any, b: Any, pointer: str = "") -> list[PointerDifference]:
    """Every value that differs between two JSON documents, by JSON pointer (RFC 6901):
    objects by key, arrays by index, anything else whole."""
    out: list[PointerDifference] = []
    stack: list[tuple[str, Any, Any]] = [(pointer, a, b)]
    while stack:
        where, left, right = stack.pop()
        if isinstance(left, dict) and isinstance(right, dict):
            keys = sorted(set(left) | set(right), reverse=True)
            stack += [
                (f"{where}/{_escape(str(k))}", left.get(k, _MISSING), right.get(k, _MISSING))
                for k in keys
            ]
        elif isinstance(left, list) and isinstance(right, list):
            size = max(len(left), len(right))
            stack += [
                (
                    f"{where}/{i}",
                    left[i] if i < len(left) else _MISSING,
                    right[i] if i < len(right) else _MISSING,
                )
                for i in reversed(range(size))
            ]
        elif (
            left is _MISSING or right is _MISSING or left != right or type(left) is not type(right)
        ):
            if left is not _MISSING and right is not _MISSING and _same_number(left, right):
                continue
            out.append(
                PointerDifference(
                    pointer=where,
                    a=None if left is _MISSING else left,
                    b=None if right is _MISSING else right,
                    in_a=left is not _MISSING,
                    in_b=right is not _MISSING,
                )
            )
    return out


def _same_number(left: Any, right: Any) -> bool:
    """2 and 2.0 are the same JSON number; True is not 1."""
    numbers = (int, float)
    return (
        isinstance(left, numbers)
        and isinstance(right, numbers)
        and not isinstance(left, bool)
        and not isinstance(right, bool)
        and left == right
    )


# --- alignment ----------------------------------------------------------------------------
def _keys(steps: Sequence[Step], shared_calls: set[str]) -> list[tuple[str, str, str]]:
    """What aligns a step; a tool call's id only when both runs have it (a live model names
    its calls anew each run)."""
    return [
        (s.type, s.name, s.span.tool_call_id if s.span.tool_call_id in shared_calls else "")
        for s in steps
    ]


def _align(a: Sequence[Step], b: Sequence[Step]) -> list[tuple[Step | None, Step | None]]:
    calls_a = {s.span.tool_call_id for s in a if s.type == "tool" and s.span.tool_call_id}
    calls_b = {s.span.tool_call_id for s in b if s.type == "tool" and s.span.tool_call_id}
    keys_a, keys_b = _keys(a, calls_a & calls_b), _keys(b, calls_a & calls_b)
    pairs: list[tuple[Step | None, Step | None]] = []
    matcher = difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            pairs += list(zip(a[a0:a1], b[b0:b1], strict=True))
            continue
        common = min(a1 - a0, b1 - b0) if tag == "replace" else 0
        pairs += list(zip(a[a0 : a0 + common], b[b0 : b0 + common], strict=True))
        pairs += [(step, None) for step in a[a0 + common : a1]]
        pairs += [(None, step) for step in b[b0 + common : b1]]
    return pairs


def _differences(a: Step | None, b: Step | None) -> list[str]:
    if a is None or b is None:
        return ["missing_step" if b is None else "extra_step"]
    if a.type != b.type:
        return ["step"]
    found = []
    if a.name != b.name:
        found.append({"agent": "agent", "tool": "tool", "turn": "agent"}.get(a.type, "step"))
    if a.type == "handoff" and a.label != b.label:
        found.append("handoff")
    if a.type == "tool" and pointer_differences(a.arguments, b.arguments):
        found.append("arguments")
    if a.model and b.model and a.model != b.model:  # a failed call may not name it
        found.append("model")
    if pointer_differences(a.output, b.output) if a.type == "tool" else a.output != b.output:
        found.append("output")
    if a.triggered != b.triggered:
        found.append("guardrail")
    # A tool's error message is not compared: what the model saw is its output (compared
    # above), and a replay's stand-in fails the span with the captured outcome, not the text.
    messages = (a.error_message, b.error_message) if a.type != "tool" else ()
    if a.failed != b.failed or a.error != b.error or len(set(messages)) > 1:
        found.append("error")
    return sorted(set(found), key=_PRECEDENCE.index)


def _cost(span: Span, prices: PriceBook) -> float | None:
    tokens = Tokens(
        span.input_tokens,
        span.output_tokens,
        span.cache_read_tokens,
        span.cache_creation_tokens,
        span.reasoning_tokens,
    )
    cost = prices.cost_usd(span.model, tokens)
    return None if cost is None else round(cost, 9)


def _side(step: Step | None, prices: PriceBook) -> StepSide | None:
    if step is None:
        return None
    span = step.span
    return StepSide(
        span_id=span.span_id,
        name=step.label,
        call_id=span.tool_call_id,
        status="error" if step.failed else "ok",
        error_type=step.error,
        duration_ns=span.duration_ns,
        input_tokens=span.input_tokens,
        output_tokens=span.output_tokens,
        cache_read_tokens=span.cache_read_tokens,
        reasoning_tokens=span.reasoning_tokens,
        cost_usd=_cost(span, prices),
    )


def _delta(a: StepSide | Run, b: StepSide | Run) -> StepDelta:
    return StepDelta(
        duration_ns=b.duration_ns - a.duration_ns,
        input_tokens=b.input_tokens - a.input_tokens,
        output_tokens=b.output_tokens - a.output_tokens,
        cache_read_tokens=b.cache_read_tokens - a.cache_read_tokens,
        reasoning_tokens=b.reasoning_tokens - a.reasoning_tokens,
        cost_usd=(
            None if a.cost_usd is None or b.cost_usd is None else round(b.cost_usd - a.cost_usd, 9)
        ),
    )


def _summary(step: DiffStep, kind: str, a: Step | None, b: Step | None, pointers: str) -> str:
    one = a or b
    assert one is not None
    what = f"{_WHAT[one.type]} {one.name}".strip() if one.type != "task" else _WHAT["task"]
    if kind in ("missing_step", "extra_step"):
        return f"only {'a' if kind == 'missing_step' else 'b'} has {what}"
    assert a is not None
    assert b is not None
    if kind == "step":
        return f"{_WHAT[a.type]} {a.name} in a, {_WHAT[b.type]} {b.name} in b"
    if kind in ("agent", "tool"):
        return f"{kind} {a.name} in a, {b.name} in b"
    if kind == "handoff":
        return f"{what}: to {a.label} in a, to {b.label} in b"
    if kind == "model":
        return f"{what}: {a.model or '?'} in a, {b.model or '?'} in b"
    if kind == "arguments":
        return f"{what}: other arguments at {pointers}"
    if kind == "output":
        return f"{what}: another output" + (f" at {pointers}" if pointers else "")
    if kind == "guardrail":
        return f"{what}: {'triggered' if a.triggered else 'passed'} in a, " + (
            f"{'triggered' if b.triggered else 'passed'} in b"
        )
    if a.failed != b.failed:
        failed = a if a.failed else b
        return f"{what}: failed in {'a' if a.failed else 'b'} only ({failed.error})"
    return f"{what}: another error: {a.error_message or a.error} in a, " + (
        f"{b.error_message or b.error} in b"
    )


def _divergence(
    steps: list[DiffStep], pairs: list[tuple[Step | None, Step | None]]
) -> Divergence | None:
    tool_index = {"a": 0, "b": 0}
    first: tuple[int, int | None] | None = None
    deferred: tuple[int, int | None] | None = None
    for index, (step, (a, b)) in enumerate(zip(steps, pairs, strict=True)):
        at_tool = tool_index["a" if a is not None else "b"] if step.type == "tool" else None
        if step.differences:
            container_error = step.type in _CONTAINERS and step.differences == ["error"]
            if not container_error:
                first = (index, at_tool)
                break
            deferred = deferred or (index, at_tool)
        for side, present in (("a", a), ("b", b)):
            tool_index[side] += present is not None and present.type == "tool"
    chosen = first or deferred
    if chosen is None:
        return None
    index, tool_step = chosen
    step, (a, b) = steps[index], pairs[index]
    kind = step.differences[0]
    arguments = (
        pointer_differences(a.arguments, b.arguments)
        if a is not None and b is not None and a.type == b.type == "tool"
        else []
    )
    output = (
        pointer_differences(a.output, b.output)
        if a is not None and b is not None and a.type == b.type and "output" in step.differences
        else []
    )
    shown = arguments if kind == "arguments" else output if kind == "output" else []
    pointers = ", ".join(d.pointer or "(the whole value)" for d in shown)
    return Divergence(
        step=index,
        type=step.type,
        name=step.name,
        kind=kind,
        differences=step.differences,
        summary=_summary(step, kind, a, b, pointers),
        tool_step=tool_step,
        arguments=arguments,
        output=output,
    )


def _tool_divergence(a: Sequence[Step], b: Sequence[Step]) -> ToolDivergence | None:
    """Tool calls by position, as the replay verdict compares them."""
    calls_a = [s for s in a if s.type == "tool"]
    calls_b = [s for s in b if s.type == "tool"]
    for index in range(max(len(calls_a), len(calls_b))):
        left = calls_a[index] if index < len(calls_a) else None
        right = calls_b[index] if index < len(calls_b) else None
        if left is None or right is None:
            one = right or left
            assert one is not None
            kind = "extra_call" if left is None else "missing_call"
            return ToolDivergence(step=index, kind=kind, tool=one.name, a_tool=None, arguments=[])
        if left.name != right.name:
            return ToolDivergence(
                step=index, kind="different_tool", tool=right.name, a_tool=left.name, arguments=[]
            )
        pointers = pointer_differences(left.arguments, right.arguments)
        if pointers:
            return ToolDivergence(
                step=index,
                kind="different_arguments",
                tool=right.name,
                a_tool=None,
                arguments=pointers,
            )
    return None


def _recorded(spans: Sequence[Span]) -> dict[str, Any] | None:
    for span in spans:
        if span.attributes.get(sc.AFR_CUSTOM_NAME) == sc.REPLAY_VERDICT_SPAN:
            data = _json(span.attributes.get(sc.AFR_CUSTOM_DATA, ""))
            return data if isinstance(data, dict) else None
    return None


def _agrees(recorded: Mapping[str, Any] | None, ours: ToolDivergence | None) -> bool:
    if recorded is None or ours is None:
        return recorded is None and ours is None
    keys = {d.pointer.split("/")[1] if d.pointer else "$" for d in ours.arguments}
    keys = {k.replace("~1", "/").replace("~0", "~") for k in keys}
    return (
        recorded.get("step") == ours.step
        and recorded.get("kind") == ours.kind
        and recorded.get("tool") == ours.tool
        and recorded.get("source_tool") == ours.a_tool
        and set(recorded.get("arguments") or {}) == keys
    )


def recorded_verdict(
    replay: Run, replay_spans: Sequence[Span], source_spans: Sequence[Span]
) -> RecordedVerdict | None:
    """What a replay or eval run recorded against its source, and whether a positional
    comparison of the two runs' tool calls finds the same first divergence."""
    data = _recorded(replay_spans)
    if data is None:
        return None
    recorded = data.get("first_divergence")
    recorded = recorded if isinstance(recorded, dict) else None
    ours = _tool_divergence(run_steps(source_spans), run_steps(replay_spans))
    return RecordedVerdict(
        run_id=replay.run_id,
        verdict=str(data.get("verdict") or replay.verdict or ""),
        reason=str(data.get("reason") or ""),
        first_divergence=recorded,
        agrees=_agrees(recorded, ours),
    )


def diff_runs(
    a: Run,
    a_spans: Sequence[Span],
    b: Run,
    b_spans: Sequence[Span],
    prices: PriceBook | None = None,
) -> RunDiff:
    """Run ``b`` against run ``a``: deltas are b minus a."""
    table = prices if prices is not None else PriceBook()
    steps_a, steps_b = run_steps(a_spans), run_steps(b_spans)
    pairs = _align(steps_a, steps_b)
    steps = []
    for index, (left, right) in enumerate(pairs):
        one = left or right
        assert one is not None
        side_a, side_b = _side(left, table), _side(right, table)
        steps.append(
            DiffStep(
                index=index,
                type=one.type,
                name=one.name,
                a=side_a,
                b=side_b,
                differences=_differences(left, right),
                delta=_delta(side_a, side_b) if side_a and side_b else None,
            )
        )
    verdict = None
    if b.source_run_id == a.run_id:
        verdict = recorded_verdict(b, b_spans, a_spans)
    elif a.source_run_id == b.run_id:
        verdict = recorded_verdict(a, a_spans, b_spans)
    return RunDiff(
        a=a,
        b=b,
        steps=steps,
        first_divergence=_divergence(steps, pairs),
        tool_divergence=_tool_divergence(steps_a, steps_b),
        verdict=verdict,
        delta=_delta(a, b),
    )
