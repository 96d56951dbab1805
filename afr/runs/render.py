"""Run summaries and spans, shaped exactly as the read API returns them, as lines that never
exceed a ``Terminal``'s width: rows for ``list``/``tail``, the header, span tree, failing
span and linked runs for ``show``. Pure: no I/O.

Span and run names come from the agents being recorded: control characters (an ANSI escape
in a tool name) are replaced before anything reaches the terminal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from afr.runs.terminal import BOLD, DIM, GREEN, RED, YELLOW, Terminal
from afr.runs.text import clean
from afr.runs.times import NS_PER_S
from afr.runs.widths import pad, wrap

__all__ = [
    "BODY_PREVIEW_LINES",
    "FAILURE_STATUS_CODES",
    "format_duration",
    "render_failing_span",
    "render_linked",
    "render_logs",
    "render_run",
    "render_run_failure",
    "render_run_row",
    "render_tree",
]

BODY_PREVIEW_LINES = 6
"""Lines of a failing span's input or output shown without ``--full``."""

_ROW_ID, _ROW_RESULT, _ROW_KIND, _ROW_TOOK = 32, 13, 7, 6
"""Row columns: id, verdict or status, kind, then the start (14) and duration: 80 in all."""
_MAX_INDENT = 24
_TOOK_WIDTH = 8
_LABEL_WIDTH = 10
# Colours of what a run came to: statuses, replay verdicts (replay_worker.replay.verdict)
# and eval outcomes (replay_worker.evals). Display only; an unknown value shows yellow.
_GOOD = frozenset({"ok", "FAILURE_FIXED", "UNCHANGED", "passed"})
_BAD = frozenset({"error", "STILL_FAILING", "REGRESSED", "failed", "errored"})


def format_duration(ns: int) -> str:
    ms = ns / 1e6
    if ms < 10:
        return f"{ms:.2f}ms"
    if ms < 1000:
        return f"{ms:.0f}ms"
    seconds = ns / NS_PER_S
    if seconds < 10:
        return f"{seconds:.2f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, second = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{second:02d}s"
    hours, minute = divmod(minutes, 60)
    return f"{hours}h{minute:02d}m"


def _time(ns: int, term: Terminal, fmt: str) -> str:
    return datetime.fromtimestamp(ns / NS_PER_S, term.tz).astimezone(term.tz).strftime(fmt)


def _cost(value: Any) -> str | None:
    """``$0.0123``; None when absent or zero (no priced model call: unknown, not free)."""
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        return None
    return f"${value:.4f}" if value >= 0.01 else f"${value:.6f}"


def _run_cost(summary: Mapping[str, Any]) -> str | None:
    """The run's cost; with a model no price knows, "unpriced (model)" after the cost of its
    priced calls, if any: the total is unknown, never shown as $0 (ADR 39)."""
    unpriced = [clean(str(m)) or "(no model)" for m in summary.get("unpriced_models") or []]
    if not unpriced:
        return _cost(summary.get("cost_usd"))
    known = _cost(summary.get("priced_cost_usd"))
    text = f"unpriced ({', '.join(unpriced)})"
    return f"{known} + {text}" if known else text


def _token_details(summary: Mapping[str, Any]) -> str:
    """ " (800 cached, 40 cache writes, 120 reasoning)": the parts that are not zero."""
    parts = [
        f"{summary[field]} {label}"
        for field, label in (
            ("cache_read_tokens", "cached"),
            ("cache_creation_tokens", "cache writes"),
            ("reasoning_tokens", "reasoning"),
        )
        if summary.get(field)
    ]
    return f" ({', '.join(parts)})" if parts else ""


def _verdict(summary: Mapping[str, Any]) -> str | None:
    verdict = summary.get("verdict")
    return clean(str(verdict)) if verdict else None


def _result(summary: Mapping[str, Any]) -> str:
    """What a run came to: its verdict when it has one (replays, evals), else its status."""
    return _verdict(summary) or clean(str(summary.get("status", "?")))


def _result_codes(summary: Mapping[str, Any]) -> tuple[str, ...]:
    result = _result(summary)
    if summary.get("status") == "error" or result in _BAD:
        return (BOLD, RED)
    return (GREEN,) if result in _GOOD else (YELLOW,)


def _tokens(summary: Mapping[str, Any]) -> str:
    cached = f", {summary['cache_read_tokens']} cached" if summary.get("cache_read_tokens") else ""
    return f"{summary.get('input_tokens', 0)}/{summary.get('output_tokens', 0)} tokens{cached}"


# --- runs as rows (list, tail) -------------------------------------------------------------


def _line(term: Terminal, parts: list[tuple[str, tuple[str, ...]]]) -> str:
    """Coloured pieces laid out in a row, cut to the terminal's width with an ellipsis."""
    plain = "".join(text for text, _ in parts)
    fitted = term.fit(plain)
    kept = len(plain) if fitted == plain else len(fitted) - len(term.ellipsis)
    out, start = [], 0
    for text, codes in parts:
        piece = plain[start : min(start + len(text), kept)]
        if piece:
            out.append(term.paint(piece, *codes))
        start += len(text)
    return "".join(out) + fitted[kept:]


def _row_head(summary: Mapping[str, Any], term: Terminal) -> list[tuple[str, tuple[str, ...]]]:
    gap = ("  " if term.width >= 80 else " ", ())  # narrower: keep the duration in view
    return [
        (pad(term.fit(clean(str(summary.get("run_id", ""))), _ROW_ID), _ROW_ID), (BOLD,)),
        gap,
        (pad(term.fit(_result(summary), _ROW_RESULT), _ROW_RESULT), _result_codes(summary)),
        gap,
        (pad(term.fit(clean(str(summary.get("kind", ""))), _ROW_KIND), _ROW_KIND), ()),
        gap,
        (_time(int(summary.get("start_ns", 0)), term, "%m-%d %H:%M:%S"), ()),
    ]


def render_run_row(summary: Mapping[str, Any], term: Terminal, *, note: str = "") -> list[str]:
    """One run in two lines (three when it failed): id, result (verdict or status), kind,
    start and duration; workflow, agents, spans, tokens and cost; the failing span, in red.
    ``note`` prefixes the failing span (tail: a run that turned out to fail)."""
    took = format_duration(int(summary.get("duration_ns", 0))).rjust(_ROW_TOOK)
    head = _row_head(summary, term)
    lines = [_line(term, [*head, (head[1][0] + took, ())])]
    agents = [clean(str(a)) for a in summary.get("agents") or []]
    root = clean(str(summary.get("root_agent") or (agents[0] if agents else "")))
    facts = [term.fit(clean(str(summary.get("workflow") or "?")), 28)]
    if summary.get("eval_name"):
        facts.append(term.fit(clean(str(summary["eval_name"])), 28))
    if root:
        facts.append(term.fit(root, 24) + (f" +{len(agents) - 1}" if len(agents) > 1 else ""))
    facts.append(f"{summary.get('span_count', 0)} spans")
    if summary.get("input_tokens") or summary.get("output_tokens"):
        facts.append(_tokens(summary))
    cost = _run_cost(summary)
    if cost:
        facts.append(cost)
    lines.append(term.paint(term.fit("  " + term.dot.join(facts)), DIM))
    if summary.get("status") == "error":
        failing = clean(str(summary.get("failing_span_name") or "?"))
        error = clean(str(summary.get("failing_error_type") or ""))
        more = int(summary.get("error_count") or 1) - 1
        text = f"  {term.cross} {note}{failing}" + (f": {error}" if error else "")
        text += f" (+{more} more)" if more > 0 else ""
        lines.append(term.paint(term.fit(text), BOLD, RED))
    return lines


# --- one run (show) ------------------------------------------------------------------------


def _label(term: Terminal, label: str, value: str, *codes: str) -> str:
    text = term.fit(f"  {label + ' ':<{_LABEL_WIDTH}}{value}")
    return term.paint(text, *codes) if codes else text


def _run_header(summary: Mapping[str, Any], term: Terminal) -> list[str]:
    status = clean(str(summary.get("status", "?")))
    errors, spans = summary.get("error_count", 0), summary.get("span_count", 0)
    lines = [term.paint(term.fit(f"run {clean(str(summary.get('run_id', '')))}"), BOLD)]
    status_text = f"{status} ({errors} of {spans} spans failed)" if errors else status
    lines.append(_label(term, "status", status_text, *_status_codes(status)))
    verdict = _verdict(summary)
    if verdict:
        lines.append(_label(term, "verdict", verdict, *_result_codes(summary)))
    lines.append(_label(term, "kind", clean(str(summary.get("kind", "?")))))
    if summary.get("source_run_id"):
        lines.append(_label(term, "source", clean(str(summary["source_run_id"]))))
    for field, label in (("eval_name", "eval"), ("sweep_id", "sweep")):
        if summary.get(field):
            lines.append(_label(term, label, clean(str(summary[field]))))
    lines.append(_label(term, "workflow", clean(str(summary.get("workflow") or "?"))))
    if summary.get("conversation_id"):
        conversation = clean(str(summary["conversation_id"]))
        lines.append(_label(term, "conversation", conversation))
    agents = [clean(str(a)) for a in summary.get("agents") or []]
    root = clean(str(summary.get("root_agent") or ""))
    if agents:
        ordered = [f"{root} (root)"] * bool(root) + [a for a in agents if a != root]
        lines.append(_label(term, "agents", ", ".join(ordered)))
    started = _time(int(summary.get("start_ns", 0)), term, "%Y-%m-%d %H:%M:%S %Z")
    took = format_duration(int(summary.get("duration_ns", 0)))
    lines.append(_label(term, "started", f"{started}, took {took}"))
    tokens = f"{summary.get('input_tokens', 0)} in / {summary.get('output_tokens', 0)} out"
    lines.append(_label(term, "tokens", tokens + _token_details(summary)))
    cost = _run_cost(summary)
    if cost:
        lines.append(_label(term, "cost", cost, *((YELLOW,) if "unpriced" in cost else ())))
    return lines


def _status_codes(status: str) -> tuple[str, ...]:
    return (BOLD, RED) if status == "error" else (GREEN,) if status == "ok" else ()


def _is_error(span: Mapping[str, Any]) -> bool:
    status = span.get("status")
    return isinstance(status, dict) and status.get("code") == "Error"


def _span_text(span: Mapping[str, Any]) -> str:
    name = clean(str(span.get("name", "")))
    text = f"{name} [{clean(str(span.get('span_type') or '?'))}]"
    for field in ("agent_name", "tool_name", "model"):
        value = clean(str(span.get(field) or ""))
        if value and value not in name:
            text += f" {value}"
    tokens_in, tokens_out = span.get("input_tokens") or 0, span.get("output_tokens") or 0
    if tokens_in or tokens_out:
        text += f" {tokens_in}/{tokens_out} tokens"
    return text


def _tree_order(spans: list[Mapping[str, Any]]) -> list[tuple[int, Mapping[str, Any]]]:
    """(depth, span) in tree order, siblings by start; a span whose parent is not in the run
    (cut off by the span limit, or sent late) is shown as a root."""
    ids = {s.get("span_id") for s in spans}
    children: dict[str, list[Mapping[str, Any]]] = {}
    for span in spans:
        parent = span.get("parent_span_id") or ""
        children.setdefault(parent if parent in ids else "", []).append(span)
    for siblings in children.values():
        siblings.sort(key=lambda s: s.get("start_time_unix_nano", 0), reverse=True)
    ordered: list[tuple[int, Mapping[str, Any]]] = []
    visited: set[str] = set()
    stack = [(0, span) for span in children.get("", [])]  # a stack: no recursion limit
    while stack:
        depth, span = stack.pop()
        span_id = str(span.get("span_id"))
        if span_id in visited:
            continue
        visited.add(span_id)
        ordered.append((depth, span))
        stack += [(depth + 1, child) for child in children.get(span_id, [])]
    ordered += [(0, s) for s in spans if str(s.get("span_id")) not in visited]  # cycles
    return ordered


def render_tree(spans: list[Mapping[str, Any]], term: Terminal) -> list[str]:
    """The span tree: name, span type, agent/tool/model, tokens, duration; errors marked
    ``✗`` and red, with their error type underneath."""
    header = pad(f"spans ({len(spans)})", term.width - _TOOK_WIDTH) + "took".rjust(_TOOK_WIDTH)
    lines = [term.paint(term.fit(header), BOLD)]
    for depth, span in _tree_order(spans):
        red = _is_error(span)
        indent = "  " * min(depth, _MAX_INDENT // 2)
        mark = f"{term.cross} " if red else "  "
        took = format_duration(int(span.get("duration_ns", 0))).rjust(_TOOK_WIDTH)
        room = max(1, term.width - len(mark) - len(indent) - _TOOK_WIDTH - 1)
        text = term.fit(_span_text(span), room)
        line = term.fit(mark + indent + pad(text, room) + " " + took)
        lines.append(term.paint(line, BOLD, RED) if red else line)
        if red:
            error = clean(str(span.get("error_type") or span["status"].get("message") or ""))
            if error:
                lines.append(term.paint(term.fit(f"  {indent}  error: {error}"), RED))
    return lines


def _body_text(body: str, *, full: bool) -> str:
    """A body as shown: JSON re-serialized (compact, or indented with ``full``), else as is."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body
    if isinstance(parsed, dict | list):
        return json.dumps(parsed, ensure_ascii=False, indent=2 if full else None)
    return body


def _field(term: Terminal, label: str, text: str, *codes: str, full: bool) -> list[str]:
    """A labelled value wrapped under its label: at most ``BODY_PREVIEW_LINES`` lines and a
    count of what was left out, unless ``full``."""
    room = max(10, term.width - 2 - _LABEL_WIDTH)
    # A preview wraps only the head of a body (up to 256 KiB): enough for its lines.
    wrapped = wrap(text if full else text[: (BODY_PREVIEW_LINES + 1) * (room + 1)], room)
    if not full and len(wrapped) > BODY_PREVIEW_LINES:
        wrapped = wrapped[:BODY_PREVIEW_LINES]
        hidden = len(text) - sum(len(line) + 1 for line in wrapped)
        wrapped[-1] = term.fit(wrapped[-1] + term.ellipsis, room)
        wrapped.append(f"({hidden} more characters: --full shows them)")
    lines = []
    for i, line in enumerate(wrapped):
        prefix = f"  {label:<{_LABEL_WIDTH}}" if i == 0 else " " * (2 + _LABEL_WIDTH)
        lines.append(term.paint(term.fit(prefix + line), *codes))
    return lines


def _exception_messages(span: Mapping[str, Any]) -> list[str]:
    messages = []
    for event in span.get("events") or []:
        attributes = event.get("attributes") or {}
        if event.get("name") == "exception" and attributes.get("exception.message"):
            messages.append(str(attributes["exception.message"]))
    return messages


def render_failing_span(span: Mapping[str, Any], term: Terminal, *, full: bool) -> list[str]:
    """The failing span's error, exception, input and output (a preview unless ``full``)."""
    where = clean(str(span.get("span_type") or "?"))
    if span.get("tool_call_id"):
        where += f", call {clean(str(span['tool_call_id']))}"
    title = f"failing span: {clean(str(span.get('name', '')))} ({where})"
    lines = ["", term.paint(term.fit(title), BOLD, RED)]
    error = str(span.get("error_type") or "")
    message = str((span.get("status") or {}).get("message") or "")
    if error:
        lines += _field(term, "error", error, RED, full=full)
    if message and message != error:
        lines += _field(term, "message", message, RED, full=full)
    for text in _exception_messages(span):
        if text not in (error, message):
            lines += _field(term, "exception", text, RED, full=full)
    for label in ("input", "output"):
        body = str(span.get(label) or "")
        lines += _field(term, label, _body_text(body, full=full) or "(empty)", full=full)
    if span.get("truncated"):
        lines.append(_label(term, "note", "a value was cut by the collector's size limits"))
    return lines


def render_linked(
    run_id: str, runs: list[Mapping[str, Any]], term: Terminal, *, more: bool
) -> list[str]:
    """The replays and evals of run ``run_id``: id, verdict or status, kind, start."""
    title = f"replays and evals ({len(runs)}{'+' if more else ''})"
    lines = ["", term.paint(term.fit(title), BOLD)]
    if not runs:
        lines.append(term.fit(f"  none yet: afr replay {run_id} makes one"))
    for run in runs:
        lines.append(_line(term, [("  ", ()), *_row_head(run, term)]))
    if more:
        lines.append(term.fit(f"  more: afr runs list --all --source-run {run_id}"))
    return lines


LOG_LINES = 20
"""Log records ``afr runs show`` prints (the newest are the read API's, ``--json``)."""


def render_logs(
    logs: list[Mapping[str, Any]], spans: list[Mapping[str, Any]], term: Terminal
) -> list[str]:
    """The run's log records, in time order: time, severity, the span they belong to (its
    name) or ``-``, the event name, the body's first line."""
    if not logs:
        return []
    names = {str(s.get("span_id")): clean(str(s.get("name", ""))) for s in spans}
    lines = ["", term.paint(term.fit(f"log records ({len(logs)})"), BOLD)]
    for entry in logs[:LOG_LINES]:
        span = names.get(str(entry.get("span_id") or ""), "") or "-"
        severity = clean(str(entry.get("severity_text") or entry.get("severity_number") or ""))
        event = clean(str(entry.get("event_name") or ""))
        body = clean(str(entry.get("body") or "")).splitlines() or [""]
        when = _time(int(entry.get("time_unix_nano", 0)), term, "%H:%M:%S.%f")[:-3]
        text = f"  {when} {severity or '-':5} {term.fit(span, 24)}  {event + ' ' if event else ''}{body[0]}"
        lines.append(term.fit(text))
    if len(logs) > LOG_LINES:
        lines.append(term.fit(f"  {len(logs) - LOG_LINES} more: afr runs show --json"))
    return lines


FAILURE_STATUS_CODES: dict[str, tuple[str, ...]] = {
    "recurring": (BOLD, RED),
    "open": (RED,),
    "fixed": (YELLOW,),
    "guarded": (GREEN,),
}
"""Colours of a failure cluster's status (``afr failures`` too)."""


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


def render_run_failure(failure: Mapping[str, Any], term: Terminal) -> list[str]:
    """A failing run among the production runs that failed the same way (the read API's
    ``failure``): seen N times since ...; fixed by ...; guarded by ...; recurring, in red."""
    status = clean(str(failure.get("status", "?")))
    signature = clean(str(failure.get("signature", "")))
    when = "%m-%d %H:%M"
    head = [
        ("failure ", (BOLD,)),
        (status, FAILURE_STATUS_CODES.get(status, (YELLOW,))),
        (f"  {signature}", (DIM,)),
    ]
    title = wrap(clean(str(failure.get("title", ""))), max(1, term.width - 2))
    lines = ["", _line(term, head), *(term.fit("  " + line) for line in title)]
    lines.append(
        term.fit(
            f"  seen {_times(int(failure.get('runs', 0)))} since "
            f"{_time(int(failure.get('since_ns', 0)), term, when)}{term.dot}first "
            f"{_time(int(failure.get('first_seen_ns', 0)), term, when)}{term.dot}last "
            f"{_time(int(failure.get('last_seen_ns', 0)), term, when)}"
        )
    )
    fixed_by = failure.get("fixed_by")
    if fixed_by:
        lines.append(term.fit(f"  fixed by replay {clean(str(fixed_by))}"))
    else:
        lines.append(
            term.paint(
                term.fit(f"  not fixed yet: afr replay --signature {signature} replays the newest"),
                YELLOW,
            )
        )
    guard = failure.get("guard")
    if guard:
        outcome = clean(str(guard.get("last_outcome") or "?"))
        lines.append(
            term.fit(
                f"  guarded by eval {clean(str(guard.get('eval_name', '')))}{term.dot}last "
                f"{outcome} (run {clean(str(guard.get('last_run_id', '')))})"
            )
        )
    elif fixed_by:
        lines.append(term.fit("  not guarded: afr eval synthesize on the fixing replay"))
    if status == "recurring":
        since = failure.get("recurring_since_ns") or 0
        lines.append(
            term.paint(
                term.fit(
                    f"  recurring: {int(failure.get('runs_since_guard', 0))} run(s) since the "
                    f"eval first ran ({_time(int(since), term, when)}), and it passes"
                ),
                BOLD,
                RED,
            )
        )
    lines.append(term.fit(f"  more: afr failures show {signature}"))
    return lines


def render_run(
    body: Mapping[str, Any],
    term: Terminal,
    *,
    linked: list[Mapping[str, Any]] | None = None,
    more_linked: bool = False,
    full: bool = False,
) -> list[str]:
    """``afr runs show``: the run's header, its span tree, the failing span, and the runs
    linked to it (``None``: not looked up)."""
    summary: Mapping[str, Any] = body.get("run") or {}
    spans: list[Mapping[str, Any]] = list(body.get("spans") or [])
    lines = _run_header(summary, term)
    lines += ["", *render_tree(spans, term)]
    failing_id = summary.get("failing_span_id")
    failing = next((s for s in spans if failing_id and s.get("span_id") == failing_id), None)
    if failing is None:
        failing = next((s for s in spans if _is_error(s)), None)
    if failing is not None:
        lines += render_failing_span(failing, term, full=full)
    failure = body.get("failure")
    if isinstance(failure, Mapping):
        lines += render_run_failure(failure, term)
    lines += render_logs(list(body.get("logs") or []), spans, term)
    # A capture's replays and evals; other kinds rarely have runs of their own.
    if linked is not None and (linked or summary.get("kind") == "capture"):
        run_id = clean(str(summary.get("run_id", "")))
        lines += render_linked(run_id, linked, term, more=more_linked)
    return lines
