"""Synthesis: from a ``FAILURE_FIXED`` replay and its source run, the eval that keeps the
failure fixed (docs/architecture.md, decision 8).

``synthesize`` is pure: the two runs as the collector's read API returns them (``{"run":
summary, "spans": [...]}``) in, an ``afr.eval/v1`` document out; the same runs always give
the same document and id. ``fetch_runs`` reads them (the collector client is passed in);
``observed_from_run`` shows a stored replay as assertions see it. The eval embeds the **source's** fixture and replays it the way the fixing replay
did (its stub outputs, policy and model, from the replay root's ``afr.replay`` metadata; a
fork's step and overrides too), so it asks "does the model still fix this run?". What it
asserts:

- the correction: for each failed source call that the replay made again differently, the
  corrected value at each JSON Pointer where the arguments differ (leaves only, RFC 6901
  escaping), as ``tool_argument`` with ``call: "any"``; a tool whose calls failed in the
  source and that the replay never called is ``tool_not_called``;
- the stable structure: ``tool_called`` for each tool the replay called (at least once, at
  most ``max(n + 2, 2n)`` times for ``n`` calls: catches a loop, tolerates a retry), each
  handoff the replay took, a turn bound of the replay's model calls plus
  ``TURN_SLACK``, and no errored span.

Refused with ``SynthesisError`` and the reason: a run that is not a replay, a replay not
linked to its source (or given with another source), a verdict other than
``FAILURE_FIXED``, an approximate verdict (lenient matching), a replay that does not record
how it was replayed, a source no fixture can be built from.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

from pydantic import ValidationError

from afr_exporter import semconv as sc
from replay_worker.client import CollectorClient, RunNotFound
from replay_worker.evals.assertions import Observed, ObservedCall
from replay_worker.evals.contract import (
    EvalDocument,
    HandoffTaken,
    MaxTurns,
    NoSpanErrored,
    Provenance,
    ReplaySpec,
    ToolArgument,
    ToolCalled,
    ToolNotCalled,
)
from replay_worker.replay.calls import canonical_arguments
from replay_worker.replay.fixture import Fixture, FixtureError, build_fixture

__all__ = [
    "TURN_SLACK",
    "SynthesisError",
    "changed_leaves",
    "eval_name",
    "fetch_runs",
    "observed_from_run",
    "synthesize",
]

TURN_SLACK = 2
"""Model calls an eval allows beyond what the fixing replay needed."""
FIXED = "FAILURE_FIXED"
# Trace-metadata keys the replay engine sets on the replay's root (engine.run_replay).
_VERDICT_KEY = sc.METADATA_VERDICT
_REPLAY_KEY = sc.METADATA_REPLAY
_NS = 1_000_000_000
# A corrected value in an eval's name: a date or an amount whole, a long text cut short.
_SHOWN_CHARS = 32
_DIGEST_CHARS = 8


class SynthesisError(ValueError):
    """These runs give no eval; ``reason`` says why. ``verdict``: the replay's, when known."""

    def __init__(self, reason: str, *, verdict: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.verdict = verdict


def _json(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def _by_start(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(spans, key=lambda s: (s["start_time_unix_nano"], s["span_id"]))


def _root(spans: list[dict[str, Any]]) -> dict[str, Any]:
    roots = [s for s in spans if not s.get("parent_span_id")]
    if not roots:
        raise SynthesisError("the replay run has no root span")
    return _by_start(roots)[0]


def _verdict_data(spans: list[dict[str, Any]]) -> dict[str, Any]:
    for span in spans:
        attributes = span.get("attributes") or {}
        if (
            span["name"] == sc.REPLAY_VERDICT_SPAN
            or attributes.get(sc.AFR_CUSTOM_NAME) == sc.REPLAY_VERDICT_SPAN
        ):
            data = _json(attributes.get(sc.AFR_CUSTOM_DATA))
            return data if isinstance(data, dict) else {}
    return {}


def _iso_utc(unix_ns: int) -> str:
    """Exact and deterministic (no float): microseconds, UTC, ``Z``."""
    seconds, rest = divmod(int(unix_ns), _NS)
    moment = dt.datetime.fromtimestamp(seconds, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{rest // 1000:06d}Z"


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality: ``12 == 12.0``, but ``true`` is not ``1`` and ``"1"`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


_ABSENT = object()


def changed_leaves(source: Any, replay: Any, pointer: str = "") -> Iterator[tuple[str, Any]]:
    """``(JSON Pointer, replay value)`` of every leaf of ``replay`` that ``source`` does not
    hold at the same place. An empty object or array is a leaf; a key only the source has is
    not reported (no assertion says "absent")."""
    if source is not _ABSENT and _json_equal(source, replay):
        return
    if isinstance(replay, dict) and replay:
        inner = source if isinstance(source, dict) else {}
        for key in sorted(replay):
            yield from changed_leaves(
                inner.get(key, _ABSENT), replay[key], f"{pointer}/{_escape(str(key))}"
            )
    elif isinstance(replay, list) and replay:
        inner_list = source if isinstance(source, list) else []
        for index, item in enumerate(replay):
            before = inner_list[index] if index < len(inner_list) else _ABSENT
            yield from changed_leaves(before, item, f"{pointer}/{index}")
    else:
        yield pointer, replay


def _model_calls(spans: list[dict[str, Any]]) -> int:
    """The run's model calls: those sent (llm spans) and, in a fork, those answered from the
    capture (a ``replay.recorded_model_call`` span each), as the eval's replay counts them."""
    recorded = sum(
        1
        for s in spans
        if s["name"] == sc.REPLAY_RECORDED_MODEL_CALL_SPAN
        or (s.get("attributes") or {}).get(sc.AFR_CUSTOM_NAME) == sc.REPLAY_RECORDED_MODEL_CALL_SPAN
    )
    return recorded + sum(1 for s in spans if s["span_type"] == "llm")


def _loop_bound(calls: int) -> int:
    return max(calls + 2, 2 * calls)


def _handoff(span: dict[str, Any]) -> tuple[str, str] | None:
    attributes = span.get("attributes") or {}
    source = attributes.get(sc.AFR_HANDOFF_FROM) or span.get("agent_name") or ""
    target = attributes.get(sc.AFR_HANDOFF_TO) or ""
    if not target and " -> " in span["name"]:  # "handoff A -> B" style names
        named_from, _, target = span["name"].rpartition(" -> ")
        source = source or named_from.removeprefix("handoff ").strip()
    if source and target:
        return str(source), str(target).strip()
    return None


def _checked_replay(replay_run: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The replay's source run id and its ``afr.replay`` spec, or why it gives no eval."""
    summary, spans = replay_run["run"], replay_run["spans"]
    if summary.get("kind") != sc.RUN_KIND_REPLAY:
        raise SynthesisError(
            f"run {summary['run_id']} is a {summary.get('kind') or 'capture'} run, not a replay"
        )
    metadata = _json((_root(spans).get("attributes") or {}).get(sc.AFR_TRACE_METADATA)) or {}
    source_run_id = summary.get("source_run_id") or metadata.get(sc.METADATA_SOURCE_RUN_ID)
    if not source_run_id:
        raise SynthesisError(f"replay {summary['run_id']} is not linked to a source run")
    decided = _verdict_data(spans)
    verdict = metadata.get(_VERDICT_KEY) or decided.get("verdict")
    if verdict != FIXED:
        why = f": {decided['reason']}" if decided.get("reason") else ""
        raise SynthesisError(
            f"replay {summary['run_id']} has verdict {verdict or 'none'}, not {FIXED}{why}",
            verdict=verdict,
        )
    spec = metadata.get(_REPLAY_KEY)
    if not isinstance(spec, dict):
        raise SynthesisError(
            f"replay {summary['run_id']} does not record how it was replayed ({_REPLAY_KEY})",
            verdict=verdict,
        )
    approximate = decided.get("approximate")
    if approximate or (approximate is None and spec.get("policy") == "lenient"):
        raise SynthesisError(
            f"replay {summary['run_id']} is FAILURE_FIXED only approximately (lenient "
            "matching answered a call with another call's outcome): replay it with the "
            "exact policy first",
            verdict=verdict,
        )
    if summary.get("status") == "error":
        raise SynthesisError(
            f"replay {summary['run_id']} has errored spans although its verdict is {FIXED}",
            verdict=verdict,
        )
    return str(source_run_id), spec


def _replay_tool_calls(spans: list[dict[str, Any]], known_tools: set[str]) -> list[tuple[str, Any]]:
    """(tool, arguments as JSON) of the replay's function tool calls, in order."""
    calls = []
    for span in _by_start(spans):
        if span["span_type"] != "tool":
            continue
        tool = span.get("tool_name") or span["name"]
        if tool in known_tools:
            calls.append((str(tool), canonical_arguments(span.get("input") or "")))
    return calls


def _assertions(fixture: Fixture, replay_spans: list[dict[str, Any]]) -> list[Any]:
    """The corrections, then the stable structure."""
    known_tools = {str(t["name"]) for spec in fixture.agents.values() for t in spec.tools}
    replayed = _replay_tool_calls(replay_spans, known_tools)
    by_tool: dict[str, list[Any]] = {}
    for tool, arguments in replayed:
        by_tool.setdefault(tool, []).append(arguments)

    corrections: list[Any] = []
    seen: set[tuple[str, str, str]] = set()
    source_calls: dict[str, list[tuple[Any, bool]]] = {}
    for call in fixture.tool_calls:
        source_calls.setdefault(call.tool, []).append(
            (canonical_arguments(call.arguments), call.error is not None)
        )
    for tool, calls in source_calls.items():
        again = by_tool.get(tool, [])
        if any(failed for _, failed in calls) and not again:
            corrections.append(ToolNotCalled(tool=tool))
            continue
        # The i-th call of a tool in the replay is the i-th call of that tool in the source,
        # made again: a failed one made differently is the correction.
        for (arguments, failed), fixed in zip(calls, again, strict=False):
            if not failed:
                continue
            for pointer, value in changed_leaves(arguments, fixed):
                key = (tool, pointer, json.dumps(value, sort_keys=True))
                if key not in seen:
                    seen.add(key)
                    corrections.append(
                        ToolArgument(tool=tool, pointer=pointer, equals=value, call="any")
                    )

    structure: list[Any] = [
        ToolCalled(tool=tool, min_count=1, max_count=_loop_bound(len(calls)))
        for tool, calls in by_tool.items()
    ]
    handoffs = [
        h
        for h in (_handoff(s) for s in _by_start(replay_spans) if s["span_type"] == "handoff")
        if h
    ]
    structure += [
        HandoffTaken(from_agent=source, to_agent=target)
        for source, target in dict.fromkeys(handoffs)
    ]
    structure += [MaxTurns(turns=_model_calls(replay_spans) + TURN_SLACK), NoSpanErrored()]
    return corrections + structure


def eval_name(workflow: str, assertions: Sequence[Any]) -> str:
    """What the eval asserts, read from its corrections: ``flight-desk: book_flight
    /date="2026-12-07" corrected`` (each corrected pointer with its value, per tool in the
    order found; a tool the fix stopped calling is ``<tool> not called``). Evals of one tool
    that fix other pointers or values get other names; the structure's assertions go
    unnamed (every eval has them)."""
    fixes: dict[str, list[str]] = {}
    for assertion in assertions:
        if isinstance(assertion, ToolArgument):
            fixes.setdefault(assertion.tool, []).append(
                f"{assertion.pointer}={_shown(assertion.equals)}"
            )
        elif isinstance(assertion, ToolNotCalled):
            fixes.setdefault(assertion.tool, [])
    parts = [
        f"{tool} {' '.join(values)} corrected" if values else f"{tool} not called"
        for tool, values in fixes.items()
    ]
    return f"{workflow}: " + ("; ".join(parts) if parts else "failure fixed")


def _shown(value: Any) -> str:
    """A value as JSON, cut short: a long one keeps a digest of the whole, so two values
    that differ only past the cut still give two names."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    if len(text) <= _SHOWN_CHARS:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:_DIGEST_CHARS]
    return f"{text[: _SHOWN_CHARS - _DIGEST_CHARS - 2]}…#{digest}"


def synthesize(source_run: dict[str, Any], replay_run: dict[str, Any]) -> EvalDocument:
    """The eval that captures what the ``FAILURE_FIXED`` replay ``replay_run`` corrected in
    ``source_run``. Raises ``SynthesisError`` with the reason when these runs give none."""
    source_run_id, spec = _checked_replay(replay_run)
    summary = replay_run["run"]
    if source_run["run"]["run_id"] != source_run_id:
        raise SynthesisError(
            f"run {source_run['run']['run_id']} is not the source of replay "
            f"{summary['run_id']} (its source is {source_run_id})",
            verdict=FIXED,
        )
    try:
        fixture = build_fixture(source_run)
        replay = ReplaySpec.model_validate(spec)
    except FixtureError as exc:
        raise SynthesisError(f"the source run cannot be replayed: {exc}", verdict=FIXED) from None
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SynthesisError(
            f"the replay's {_REPLAY_KEY} metadata is not a replay spec: {where}: {first['msg']}",
            verdict=FIXED,
        ) from None
    assertions = _assertions(fixture, replay_run["spans"])
    return EvalDocument.create(
        name=eval_name(fixture.workflow, assertions),
        provenance=Provenance(
            source_run_id=source_run_id,
            replay_run_id=summary["run_id"],
            created_at=_iso_utc(summary["start_ns"]),
        ),
        # JSON-normalized, so the document in memory is the one its file reloads to.
        fixture=json.loads(json.dumps(fixture.to_json())),
        replay=replay,
        assertions=assertions,
    )


def observed_from_run(run: dict[str, Any]) -> Observed:
    """What a stored replay run did, as assertions see it (``assertions.check``): its tool
    calls with the stand-in's outcome, handoffs, model calls, guardrails, its error and wall
    time. The final output and the cost are not in the trace: ``None`` and 0."""
    spans = _by_start(run["spans"])
    outcomes: dict[str, str] = {}
    for span in spans:
        data = _json((span.get("attributes") or {}).get(sc.AFR_CUSTOM_DATA))
        if str(span["name"]).startswith("replay.") and isinstance(data, dict) and "outcome" in data:
            outcomes[span["parent_span_id"]] = str(data["outcome"])
    calls = [
        ObservedCall(
            str(span.get("tool_name") or span["name"]),
            canonical_arguments(span.get("input") or ""),
            outcomes.get(
                span["span_id"],
                "captured_error" if span["status"]["code"] == "Error" else "captured_output",
            ),
        )
        for span in spans
        if span["span_type"] == "tool"
    ]
    handoffs = [h for h in (_handoff(s) for s in spans if s["span_type"] == "handoff") if h]
    guardrails = [
        {
            "name": (s.get("attributes") or {}).get(sc.AFR_GUARDRAIL_NAME) or s["name"],
            "triggered": (s.get("attributes") or {}).get(sc.AFR_GUARDRAIL_TRIGGERED) == "true",
        }
        for s in spans
        if s["span_type"] == "guardrail"
    ]
    return Observed(
        tool_calls=calls,
        handoffs=handoffs,
        turns=_model_calls(spans),
        guardrails=guardrails,
        run_error=next(  # the run's own failure: an errored span that is not a tool call
            (
                str(s.get("error_type") or "error")
                for s in spans
                if s["status"]["code"] == "Error" and s["span_type"] != "tool"
            ),
            None,
        ),
        duration_s=run["run"].get("duration_ns", 0) / _NS,
    )


async def fetch_runs(
    client: CollectorClient, replay_run_id: str, *, wait_s: float = 0.0
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The replay run and its source, through the collector's read API: ``(source,
    replay)``. A run is visible up to one batch interval after it was acknowledged, so a
    missing one is asked for again for up to ``wait_s``. Raises ``RunNotFound``,
    ``CollectorUnavailable``, or ``SynthesisError`` (before reading the source) for a
    replay that gives no eval."""

    async def get(run_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return await client.get_run(run_id)
            except RunNotFound:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.25)

    replay = await get(replay_run_id)
    source_run_id, _ = _checked_replay(replay)  # a refusal needs no source
    return await get(source_run_id), replay
