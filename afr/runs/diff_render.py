"""``afr runs diff``: a run diff (``GET /api/v1/runs/diff``, collector.api.models.RunDiff) as
lines that never exceed a ``Terminal``'s width. Pure: no I/O.

The two runs, the whole-run deltas, the aligned steps (``=`` the same, ``≠`` different,
``-`` only in A, ``+`` only in B; the first divergence in red), then the first divergence
with its JSON-pointer differences, and a replay's recorded verdict and whether it agrees.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from afr.runs.render import format_duration
from afr.runs.terminal import BOLD, DIM, GREEN, RED, YELLOW, Terminal
from afr.runs.text import clean
from afr.runs.widths import pad

__all__ = ["render_diff"]

_MARKS = {"same": "=", "different": "≠", "a": "-", "b": "+"}
_VALUE_CHARS = 60
_WHAT = {"llm": "model", "tool": "tool", "handoff": "handoff"}


def _signed_duration(ns: int) -> str:
    return ("+" if ns >= 0 else "-") + format_duration(abs(ns))


def _deltas(delta: Mapping[str, Any]) -> str:
    parts = [_signed_duration(int(delta.get("duration_ns", 0)))]
    tokens_in, tokens_out = int(delta.get("input_tokens", 0)), int(delta.get("output_tokens", 0))
    if tokens_in or tokens_out:
        parts.append(f"{tokens_in:+d}/{tokens_out:+d} tokens")
    if "cost_usd" in delta and delta["cost_usd"] is None:
        parts.append("cost unpriced")
    else:
        cost = float(delta.get("cost_usd") or 0.0)
        if cost:
            parts.append(f"{'+' if cost > 0 else '-'}${abs(cost):.6f}")
    return " ".join(parts)


def _run_line(label: str, run: Mapping[str, Any], term: Terminal) -> str:
    result = run.get("verdict") or run.get("status") or "?"
    took = format_duration(int(run.get("duration_ns", 0)))
    tokens = f"{run.get('input_tokens', 0)}/{run.get('output_tokens', 0)} tokens"
    text = (
        f"{label} {clean(str(run.get('run_id', '')))}  {clean(str(run.get('kind', '?')))}  "
        f"{clean(str(result))}  {took}  {tokens}"
    )
    return term.fit(text)


def _step_name(step: Mapping[str, Any]) -> str:
    kind = str(step.get("type", "?"))
    name = clean(str(step.get("name") or ""))
    sides = [s for s in (step.get("a"), step.get("b")) if isinstance(s, dict)]
    labels = list(dict.fromkeys(clean(str(s.get("name") or "")) for s in sides))
    text = f"{_WHAT.get(kind, kind)} {name}".strip()
    if kind == "handoff":
        text += " -> " + " | ".join(labels)
    elif kind == "llm" and labels and labels != [name]:
        text += " (" + " | ".join(label for label in labels if label) + ")"
    if kind == "tool" and sides and sides[0].get("call_id"):
        text += f" [{clean(str(sides[0]['call_id']))}]"
    return text


def _value(value: Any, present: bool) -> str:
    if not present:
        return "(absent)"
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return clean(text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 1] + "…")


def _pointer_lines(label: str, diffs: list[Mapping[str, Any]], term: Terminal) -> list[str]:
    lines = []
    for diff in diffs:
        pointer = clean(str(diff.get("pointer") or "")) or "(whole value)"
        a = _value(diff.get("a"), bool(diff.get("in_a")))
        b = _value(diff.get("b"), bool(diff.get("in_b")))
        lines.append(term.fit(f"    {label} {pointer}: A {a}  B {b}"))
    return lines


def _mark(step: Mapping[str, Any]) -> str:
    if step.get("a") is None:
        return _MARKS["b"]
    if step.get("b") is None:
        return _MARKS["a"]
    return _MARKS["different"] if step.get("differences") else _MARKS["same"]


def render_diff(diff: Mapping[str, Any], term: Terminal) -> list[str]:
    """``afr runs diff A B``."""
    a: Mapping[str, Any] = diff.get("a") or {}
    b: Mapping[str, Any] = diff.get("b") or {}
    lines = [
        term.paint(term.fit("run diff: B against A"), BOLD),
        _run_line("A", a, term),
        _run_line("B", b, term),
        term.fit(f"  B - A: {_deltas(diff.get('delta') or {})}"),
    ]
    first: Mapping[str, Any] | None = diff.get("first_divergence")
    steps: list[Mapping[str, Any]] = list(diff.get("steps") or [])
    lines += ["", term.paint(term.fit(f"steps ({len(steps)})"), BOLD)]
    delta_width = 30
    for step in steps:
        mark = _mark(step)
        delta = step.get("delta")
        shown_delta = _deltas(delta) if isinstance(delta, dict) else ""
        room = max(10, term.width - 6 - delta_width)
        text = pad(term.fit(_step_name(step), room), room)
        line = term.fit(f"{mark} {int(step.get('index', 0)):>3} {text} {shown_delta}")
        if first is not None and step.get("index") == first.get("step"):
            lines.append(term.paint(line, BOLD, RED))
        elif mark != _MARKS["same"]:
            lines.append(term.paint(line, YELLOW))
        else:
            lines.append(term.paint(line, DIM))
    lines.append("")
    if first is None:
        lines.append(term.paint(term.fit("no divergence: B does what A did"), GREEN))
    else:
        title = f"first divergence at step {first.get('step')}: {clean(str(first.get('summary')))}"
        lines.append(term.paint(term.fit(title), BOLD, RED))
        others = [str(k) for k in first.get("differences") or [] if k != first.get("kind")]
        if others:
            lines.append(term.fit("  also: " + ", ".join(others)))
        lines += _pointer_lines("arguments", list(first.get("arguments") or []), term)
        lines += _pointer_lines("output", list(first.get("output") or []), term)
    verdict: Mapping[str, Any] | None = diff.get("verdict")
    if verdict:
        agrees = "agrees" if verdict.get("agrees") else "DOES NOT agree"
        text = (
            f"verdict of {clean(str(verdict.get('run_id')))}: {clean(str(verdict.get('verdict')))}"
            f" ({clean(str(verdict.get('reason') or ''))}); its first divergence {agrees} "
            "with the tool calls compared here"
        )
        lines.append(term.paint(term.fit(text), *((GREEN,) if verdict.get("agrees") else (RED,))))
    return lines
