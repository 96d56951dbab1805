"""``afr runs list|show|tail``: the read API in a terminal.

Three parts, I/O kept apart from the pure renderers:

- ``RunsClient`` reads ``GET /api/v1/runs`` and ``GET /api/v1/runs/{id}`` and maps every
  failure to one ``RunsApiError`` line (the only place HTTP statuses become messages);
- ``render_*`` turn summaries and spans, shaped exactly as the API returns them, into lines
  that never exceed a ``Terminal``'s width, coloured with plain ANSI codes when it allows;
- ``tail_runs`` is the live loop, its clock, sleep and stop condition passed in.

Span and run names come from the agents being recorded: control characters (an ANSI escape
in a tool name) are replaced before anything reaches the terminal. The key is sent as a
header and never printed, not even in an error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

if TYPE_CHECKING:
    import httpx

__all__ = [
    "API_KEY_ENV",
    "API_URL_ENV",
    "DEFAULT_API_URL",
    "CollectorUnreachable",
    "RunsApiError",
    "RunsClient",
    "Terminal",
    "add_runs_parser",
    "colour_enabled",
    "list_lines",
    "parse_time",
    "render_run",
    "render_run_row",
    "run_command",
    "show_lines",
    "tail_runs",
    "terminal_for",
]

DEFAULT_API_URL = "http://127.0.0.1:4318"
API_URL_ENV = "AFR_API_URL"
API_KEY_ENV = "AFR_API_KEY"
DEFAULT_TIMEOUT_S = 30.0
TAIL_INTERVAL_S = 2.0
TAIL_LAG_S = 300.0
"""How far back each tail poll looks: a run is listed by its earliest span, which can be
stored well after it started (spans are exported as they end)."""
TAIL_SINCE = "5m"
BODY_PREVIEW_LINES = 6
"""Lines of a failing span's input or output shown without ``--full``."""

_NS = 1_000_000_000
_ROW_ID, _ROW_RESULT, _ROW_KIND, _ROW_TOOK = 32, 13, 7, 6
"""Row columns: id, verdict or status, kind, then the start (14) and duration: 80 in all."""
_MAX_INDENT = 24
_TOOK_WIDTH = 8
_LABEL_WIDTH = 10


# --- the client ----------------------------------------------------------------------------


class RunsApiError(Exception):
    """What went wrong, in one line for stderr (exit code 2). Never holds the key."""


class CollectorUnreachable(RunsApiError):
    """No answer, or a 5xx: worth retrying in a live view."""


class RunsClient:
    """The read API over HTTP, with the project key as a bearer token."""

    def __init__(
        self,
        base_url: str,
        key: str | None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        import httpx

        try:
            parts = urlsplit(base_url.rstrip("/"))
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError
            client = httpx.Client(
                base_url=base_url.rstrip("/"),
                headers={"authorization": f"Bearer {key}"} if key else {},
                timeout=timeout_s,
                transport=transport,
            )
        except (ValueError, httpx.InvalidURL):  # the URL is not quoted: it may hold a password
            raise RunsApiError(
                f"the collector URL is not an http(s) URL (--url, {API_URL_ENV})"
            ) from None
        self._shown_url = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]))
        self._has_key = bool(key)
        self._client = client

    @property
    def url(self) -> str:
        """The base URL as it may be shown (without any credentials in it)."""
        return self._shown_url

    def __enter__(self) -> RunsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def list_runs(self, params: Mapping[str, str]) -> dict[str, Any]:
        """One page: ``{"runs": [...], "next_cursor": str | None}``."""
        return self._get("/api/v1/runs", params, run_id=None)

    def iter_pages(self, params: Mapping[str, str]) -> Iterator[list[dict[str, Any]]]:
        """Every page, following ``next_cursor`` from the one ``params`` names."""
        query = dict(params)
        while True:
            page = self.list_runs(query)
            yield page["runs"]
            if not page.get("next_cursor"):
                return
            query["cursor"] = page["next_cursor"]

    def get_run(self, run_id: str) -> dict[str, Any]:
        """``{"run": summary, "spans": [...]}``."""
        return self._get(f"/api/v1/runs/{quote(run_id, safe='')}", {}, run_id=run_id)

    def _get(self, path: str, params: Mapping[str, str], *, run_id: str | None) -> dict[str, Any]:
        import httpx

        try:
            response = self._client.get(path, params=dict(params))
        except httpx.HTTPError as exc:
            raise CollectorUnreachable(
                f"collector unreachable at {self._shown_url} ({type(exc).__name__}); "
                f"is `afr up` running? (--url or {API_URL_ENV})"
            ) from None
        return self._answer(response, run_id)

    def _answer(self, response: httpx.Response, run_id: str | None) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            body = None
        message = body.get("error") if isinstance(body, dict) else None
        status = response.status_code
        if status == 200 and isinstance(body, dict):
            return body
        if status == 401:
            hint = "the key was refused" if self._has_key else "no key was found"
            raise RunsApiError(
                f"collector answered 401 unauthorized: {hint} "
                f"(set {API_KEY_ENV}, or --data-dir to the data directory of `afr up`)"
            )
        if status == 404 and run_id is not None:
            raise RunsApiError(f"no run {_clean(run_id)} in this key's project (404)")
        if status == 400:
            raise RunsApiError(f"bad request: {_clean(str(message or 'HTTP 400'))}")
        detail = f": {_clean(str(message))}" if message else ""
        if status >= 500:
            raise CollectorUnreachable(f"collector answered HTTP {status}{detail}")
        if status == 200:
            raise RunsApiError("collector answered with a body that is not a JSON object")
        raise RunsApiError(f"collector answered HTTP {status}{detail}")


# --- times ---------------------------------------------------------------------------------

_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_RELATIVE = re.compile(r"(?:\d+(?:\.\d+)?[smhdw])+")
_RELATIVE_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_time(text: str, now_s: float) -> float:
    """Unix seconds for ``1h``/``2d``/``1h30m`` ago, ``now``, an ISO time (local when it names
    no zone) or unix seconds."""
    value = text.strip().lower()
    if value == "now":
        return now_s
    if _RELATIVE.fullmatch(value):
        ago = sum(float(n) * _UNITS_S[unit] for n, unit in _RELATIVE_PART.findall(value))
        return now_s - ago
    try:
        number = float(value)
    except ValueError:
        pass
    else:
        return number / _NS if number > 1e12 else number
    try:
        moment = datetime.fromisoformat(text.strip())
        return moment.astimezone().timestamp() if moment.tzinfo is None else moment.timestamp()
    except (ValueError, OverflowError, OSError):
        raise ValueError(
            "expected a time like 1h, 2d, 30m, now, or an ISO time like 2026-12-01T10:00"
        ) from None


def _api_time(seconds: float) -> str:
    return f"{seconds:.6f}"


# --- the terminal --------------------------------------------------------------------------

_RESET = "\x1b[0m"
_BOLD = "\x1b[1m"
_DIM = "\x1b[2m"
_RED = "\x1b[31m"
_GREEN = "\x1b[32m"
_YELLOW = "\x1b[33m"
# Colours of what a run came to: statuses, replay verdicts (replay_worker.replay.verdict)
# and eval outcomes (replay_worker.evals). Display only; an unknown value shows yellow.
_GOOD = frozenset({"ok", "FAILURE_FIXED", "UNCHANGED", "passed"})
_BAD = frozenset({"error", "STILL_FAILING", "REGRESSED", "failed", "errored"})


@dataclass(frozen=True)
class Terminal:
    """Where lines go: their width in columns, colour, and whether it can show ``…``."""

    width: int = 80
    colour: bool = False
    unicode: bool = True
    tz: tzinfo | None = None
    """Time zone of the times shown (None: local)."""

    @property
    def ellipsis(self) -> str:
        return "…" if self.unicode else "~"

    @property
    def cross(self) -> str:
        return "✗" if self.unicode else "x"

    @property
    def dot(self) -> str:
        return " · " if self.unicode else ", "

    def paint(self, text: str, *codes: str) -> str:
        if not self.colour or not codes or not text:
            return text
        return "".join(codes) + text + _RESET

    def fit(self, text: str, width: int | None = None) -> str:
        return truncate(text, self.width if width is None else width, self.ellipsis)


def colour_enabled(stream: IO[str], environ: Mapping[str, str]) -> bool:
    """``FORCE_COLOR`` (non-empty, not ``0``/``false``) forces colour; ``NO_COLOR``
    (non-empty) or ``TERM=dumb`` turns it off; otherwise colour when writing to a tty."""
    force = environ.get("FORCE_COLOR", "")
    if force and force.lower() not in ("0", "false"):
        return True
    if environ.get("NO_COLOR") or environ.get("TERM") == "dumb":
        return False
    return _isatty(stream)


def terminal_for(
    stream: IO[str], environ: Mapping[str, str], *, tz: tzinfo | None = None
) -> Terminal:
    """80 columns unless writing to a tty, then the tty's width."""
    width = max(20, shutil.get_terminal_size((80, 24)).columns) if _isatty(stream) else 80
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        "…✗·".encode(encoding)
        unicode = True
    except (UnicodeEncodeError, LookupError):
        unicode = False
    return Terminal(width=width, colour=colour_enabled(stream, environ), unicode=unicode, tz=tz)


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


_BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def _clean(text: str) -> str:
    """One line of untrusted text made safe to print: whitespace controls become spaces,
    other controls (ESC, bidi overrides) ``?``."""
    out: list[str] = []
    for char in text:
        if char in "\t\n\r\v\f":
            out.append(" ")
        elif unicodedata.category(char) == "Cc" or char in _BIDI:
            out.append("?")
        else:
            out.append(char)
    return "".join(out)


def _char_width(char: str) -> int:
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def display_width(text: str) -> int:
    return sum(_char_width(c) for c in text)


def truncate(text: str, width: int, ellipsis: str = "…") -> str:
    """``text`` in at most ``width`` columns, ending with ``ellipsis`` when cut."""
    if display_width(text) <= width:
        return text
    room = max(0, width - display_width(ellipsis))
    used, kept = 0, []
    for char in text:
        cells = _char_width(char)
        if used + cells > room:
            break
        kept.append(char)
        used += cells
    return "".join(kept) + ellipsis[: max(0, width)]


def _pad(text: str, width: int) -> str:
    return text + " " * max(0, width - display_width(text))


def _wrap(text: str, width: int) -> list[str]:
    """Wrapped to ``width`` columns: at a space in the line's second half, else anywhere
    (bodies are JSON and ids as often as prose)."""
    lines: list[str] = []
    for raw in text.split("\n"):
        current: list[str] = []
        used = 0
        for char in _clean(raw):
            cells = _char_width(char)
            if used + cells > width and current:
                cut = "".join(current).rfind(" ")
                if cut > len(current) // 2:
                    lines.append("".join(current[:cut]))
                    current = current[cut + 1 :]
                else:
                    lines.append("".join(current))
                    current = []
                used = display_width("".join(current))
            current.append(char)
            used += cells
        lines.append("".join(current))
    return lines


# --- formatting values ---------------------------------------------------------------------


def format_duration(ns: int) -> str:
    ms = ns / 1e6
    if ms < 10:
        return f"{ms:.2f}ms"
    if ms < 1000:
        return f"{ms:.0f}ms"
    seconds = ns / _NS
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
    return datetime.fromtimestamp(ns / _NS, term.tz).astimezone(term.tz).strftime(fmt)


def _cost(value: Any) -> str | None:
    """``$0.0123``; None when absent or zero (no priced model call: unknown, not free)."""
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        return None
    return f"${value:.4f}" if value >= 0.01 else f"${value:.6f}"


def _verdict(summary: Mapping[str, Any]) -> str | None:
    verdict = summary.get("verdict")
    return _clean(str(verdict)) if verdict else None


def _result(summary: Mapping[str, Any]) -> str:
    """What a run came to: its verdict when it has one (replays, evals), else its status."""
    return _verdict(summary) or _clean(str(summary.get("status", "?")))


def _result_codes(summary: Mapping[str, Any]) -> tuple[str, ...]:
    result = _result(summary)
    if summary.get("status") == "error" or result in _BAD:
        return (_BOLD, _RED)
    return (_GREEN,) if result in _GOOD else (_YELLOW,)


def _tokens(summary: Mapping[str, Any]) -> str:
    return f"{summary.get('input_tokens', 0)}/{summary.get('output_tokens', 0)} tokens"


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
        (_pad(term.fit(_clean(str(summary.get("run_id", ""))), _ROW_ID), _ROW_ID), (_BOLD,)),
        gap,
        (_pad(term.fit(_result(summary), _ROW_RESULT), _ROW_RESULT), _result_codes(summary)),
        gap,
        (_pad(term.fit(_clean(str(summary.get("kind", ""))), _ROW_KIND), _ROW_KIND), ()),
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
    agents = [_clean(str(a)) for a in summary.get("agents") or []]
    root = _clean(str(summary.get("root_agent") or (agents[0] if agents else "")))
    facts = [term.fit(_clean(str(summary.get("workflow") or "?")), 28)]
    if summary.get("eval_name"):
        facts.append(term.fit(_clean(str(summary["eval_name"])), 28))
    if root:
        facts.append(term.fit(root, 24) + (f" +{len(agents) - 1}" if len(agents) > 1 else ""))
    facts.append(f"{summary.get('span_count', 0)} spans")
    if summary.get("input_tokens") or summary.get("output_tokens"):
        facts.append(_tokens(summary))
    cost = _cost(summary.get("cost_usd"))
    if cost:
        facts.append(cost)
    lines.append(term.paint(term.fit("  " + term.dot.join(facts)), _DIM))
    if summary.get("status") == "error":
        failing = _clean(str(summary.get("failing_span_name") or "?"))
        error = _clean(str(summary.get("failing_error_type") or ""))
        more = int(summary.get("error_count") or 1) - 1
        text = f"  {term.cross} {note}{failing}" + (f": {error}" if error else "")
        text += f" (+{more} more)" if more > 0 else ""
        lines.append(term.paint(term.fit(text), _BOLD, _RED))
    return lines


# --- one run (show) ------------------------------------------------------------------------


def _label(term: Terminal, label: str, value: str, *codes: str) -> str:
    text = term.fit(f"  {label:<{_LABEL_WIDTH}}{value}")
    return term.paint(text, *codes) if codes else text


def _run_header(summary: Mapping[str, Any], term: Terminal) -> list[str]:
    status = _clean(str(summary.get("status", "?")))
    errors, spans = summary.get("error_count", 0), summary.get("span_count", 0)
    lines = [term.paint(term.fit(f"run {_clean(str(summary.get('run_id', '')))}"), _BOLD)]
    status_text = f"{status} ({errors} of {spans} spans failed)" if errors else status
    lines.append(_label(term, "status", status_text, *_status_codes(status)))
    verdict = _verdict(summary)
    if verdict:
        lines.append(_label(term, "verdict", verdict, *_result_codes(summary)))
    lines.append(_label(term, "kind", _clean(str(summary.get("kind", "?")))))
    if summary.get("source_run_id"):
        lines.append(_label(term, "source", _clean(str(summary["source_run_id"]))))
    for field, label in (("eval_name", "eval"), ("sweep_id", "sweep")):
        if summary.get(field):
            lines.append(_label(term, label, _clean(str(summary[field]))))
    lines.append(_label(term, "workflow", _clean(str(summary.get("workflow") or "?"))))
    agents = [_clean(str(a)) for a in summary.get("agents") or []]
    root = _clean(str(summary.get("root_agent") or ""))
    if agents:
        ordered = [f"{root} (root)"] * bool(root) + [a for a in agents if a != root]
        lines.append(_label(term, "agents", ", ".join(ordered)))
    started = _time(int(summary.get("start_ns", 0)), term, "%Y-%m-%d %H:%M:%S %Z")
    took = format_duration(int(summary.get("duration_ns", 0)))
    lines.append(_label(term, "started", f"{started}, took {took}"))
    tokens = f"{summary.get('input_tokens', 0)} in / {summary.get('output_tokens', 0)} out"
    lines.append(_label(term, "tokens", tokens))
    cost = _cost(summary.get("cost_usd"))
    if cost:
        lines.append(_label(term, "cost", cost))
    return lines


def _status_codes(status: str) -> tuple[str, ...]:
    return (_BOLD, _RED) if status == "error" else (_GREEN,) if status == "ok" else ()


def _is_error(span: Mapping[str, Any]) -> bool:
    status = span.get("status")
    return isinstance(status, dict) and status.get("code") == "Error"


def _span_text(span: Mapping[str, Any]) -> str:
    name = _clean(str(span.get("name", "")))
    text = f"{name} [{_clean(str(span.get('span_type') or '?'))}]"
    for field in ("agent_name", "tool_name", "model"):
        value = _clean(str(span.get(field) or ""))
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
    header = _pad(f"spans ({len(spans)})", term.width - _TOOK_WIDTH) + "took".rjust(_TOOK_WIDTH)
    lines = [term.paint(term.fit(header), _BOLD)]
    for depth, span in _tree_order(spans):
        red = _is_error(span)
        indent = "  " * min(depth, _MAX_INDENT // 2)
        mark = f"{term.cross} " if red else "  "
        took = format_duration(int(span.get("duration_ns", 0))).rjust(_TOOK_WIDTH)
        room = max(1, term.width - len(mark) - len(indent) - _TOOK_WIDTH - 1)
        text = term.fit(_span_text(span), room)
        line = term.fit(mark + indent + _pad(text, room) + " " + took)
        lines.append(term.paint(line, _BOLD, _RED) if red else line)
        if red:
            error = _clean(str(span.get("error_type") or span["status"].get("message") or ""))
            if error:
                lines.append(term.paint(term.fit(f"  {indent}  error: {error}"), _RED))
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
    wrapped = _wrap(text if full else text[: (BODY_PREVIEW_LINES + 1) * (room + 1)], room)
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
    where = _clean(str(span.get("span_type") or "?"))
    if span.get("tool_call_id"):
        where += f", call {_clean(str(span['tool_call_id']))}"
    title = f"failing span: {_clean(str(span.get('name', '')))} ({where})"
    lines = ["", term.paint(term.fit(title), _BOLD, _RED)]
    error = str(span.get("error_type") or "")
    message = str((span.get("status") or {}).get("message") or "")
    if error:
        lines += _field(term, "error", error, _RED, full=full)
    if message and message != error:
        lines += _field(term, "message", message, _RED, full=full)
    for text in _exception_messages(span):
        if text not in (error, message):
            lines += _field(term, "exception", text, _RED, full=full)
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
    lines = ["", term.paint(term.fit(title), _BOLD)]
    if not runs:
        lines.append(term.fit(f"  none yet: afr replay {run_id} makes one"))
    for run in runs:
        lines.append(_line(term, [("  ", ()), *_row_head(run, term)]))
    if more:
        lines.append(term.fit(f"  more: afr runs list --all --source-run {run_id}"))
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
    # A capture's replays and evals; other kinds rarely have runs of their own.
    if linked is not None and (linked or summary.get("kind") == "capture"):
        run_id = _clean(str(summary.get("run_id", "")))
        lines += render_linked(run_id, linked, term, more=more_linked)
    return lines


# --- the live view -------------------------------------------------------------------------


def tail_runs(
    list_pages: Callable[[Mapping[str, str]], Iterator[list[dict[str, Any]]]],
    emit: Callable[[dict[str, Any], bool], None],
    *,
    filters: Mapping[str, str],
    since_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    stop: Callable[[], bool] = lambda: False,
    warn: Callable[[str], None] = lambda message: None,
    interval_s: float = TAIL_INTERVAL_S,
    lag_s: float = TAIL_LAG_S,
) -> None:
    """Polls for runs started since ``since_s``, oldest first, each emitted once; again (with
    ``changed``) when an ok run turns out to have failed, as its late spans arrive.

    Each poll looks back ``lag_s`` from the previous one, so a run stored after it started
    is still seen; the ids already emitted are forgotten once they fall out of that window.
    A collector that stops answering after the first poll is retried (``warn`` says so once);
    the first poll's error, and a refused key or filter, are raised.
    """
    seen: dict[str, tuple[str, int]] = {}
    window_s = since_s
    polled = False
    unreachable = False
    while True:
        now_s = clock()
        params = {**filters, "since": _api_time(window_s)}
        try:
            runs = [run for page in list_pages(params) for run in page]
        except CollectorUnreachable as exc:
            if not polled:
                raise
            if not unreachable:
                warn(f"{exc}; retrying every {interval_s:g}s")
            unreachable = True
        else:
            if unreachable:
                warn("collector answering again")
            polled, unreachable = True, False
            for run in sorted(runs, key=lambda r: (r.get("start_ns", 0), r.get("run_id", ""))):
                run_id, status = str(run.get("run_id")), str(run.get("status"))
                before = seen.get(run_id)
                if before is None or (before[0] == "ok" and status == "error"):
                    emit(run, before is not None)
                seen[run_id] = (status, int(run.get("start_ns", 0)))
            window_s = max(since_s, now_s - lag_s)
            horizon_ns = int(window_s * _NS)
            for run_id in [r for r, (_, start) in seen.items() if start < horizon_ns]:
                del seen[run_id]
        if stop():
            return
        sleep(interval_s)


# --- the commands --------------------------------------------------------------------------


def add_runs_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """``afr runs list|show|tail``; the caller sets the ``func`` that runs ``run_command``."""
    runs = commands.add_parser(
        "runs",
        help="runs in the terminal: list, show one, tail new ones",
        description="Reads the collector's read API (--url, or AFR_API_URL; default "
        f"{DEFAULT_API_URL}) with the project key in AFR_API_KEY or, failing that, the local "
        "project's key in --data-dir. Exit status 2 on any error, one line on stderr.",
    )
    sub = runs.add_subparsers(dest="runs_command", required=True)

    def connection(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--url", help=f"read API base URL (default {API_URL_ENV} or ...:4318)")
        parser.add_argument(
            "--data-dir", type=Path, help="where the local key is (default ./.afr/data)"
        )
        parser.add_argument("--json", action="store_true", help="JSON for scripts")

    def filters(parser: argparse.ArgumentParser, since_default: str | None) -> None:
        default = f" (default {since_default})" if since_default else " (default 7 days ago)"
        parser.add_argument("--since", default=since_default, help="1h, 2d, an ISO time" + default)
        parser.add_argument("--status", choices=("ok", "error"))
        parser.add_argument("--workflow")
        parser.add_argument("--agent", help="runs this agent took part in")
        parser.add_argument("--kind", help="capture, replay, eval or sweep")
        parser.add_argument("--source-run", metavar="RUN_ID", help="replays and evals of a run")

    listing = sub.add_parser("list", help="run summaries, newest first")
    filters(listing, None)
    listing.add_argument("--until", help="1h, 2d, an ISO time (default now)")
    listing.add_argument("--limit", type=int, default=50, help="runs per page (default 50)")
    listing.add_argument("--all", action="store_true", help="every page, not just the first")
    listing.add_argument("--cursor", help="start at this page (a next_cursor)")
    connection(listing)

    show = sub.add_parser("show", help="one run: span tree, failing span, replays and evals")
    show.add_argument("run_id")
    show.add_argument("--full", action="store_true", help="the failing span's bodies in full")
    connection(show)

    tail = sub.add_parser("tail", help="new runs as they arrive, until Ctrl-C")
    filters(tail, TAIL_SINCE)
    tail.add_argument("--interval-s", type=float, default=TAIL_INTERVAL_S)
    connection(tail)
    return runs


def _resolve_key(args: argparse.Namespace, environ: Mapping[str, str]) -> str | None:
    key = environ.get(API_KEY_ENV, "").strip()
    if key:
        return key
    from afr.local import read_local_key

    data_dir = args.data_dir
    try:
        if data_dir is None:
            from collector.settings import CollectorSettings

            data_dir = CollectorSettings().data_dir
        return read_local_key(data_dir)
    except OSError as exc:
        raise RunsApiError(f"cannot read the local key in {data_dir}: {exc.strerror}") from None
    except ValueError as exc:  # an invalid AFR_* setting: say which, not the whole report
        raise RunsApiError(f"settings: {str(exc).splitlines()[0]}") from None


def _filter_params(args: argparse.Namespace, now_s: float) -> dict[str, str]:
    params: dict[str, str] = {}
    for flag in ("since", "until"):
        value = getattr(args, flag, None)
        if value:
            try:
                params[flag] = _api_time(parse_time(value, now_s))
            except ValueError as exc:
                raise RunsApiError(f"--{flag}: {exc}") from None
    for name, param in (
        ("status", "status"),
        ("workflow", "workflow"),
        ("agent", "agent"),
        ("kind", "kind"),
        ("source_run", "source_run_id"),
    ):
        value = getattr(args, name, None)
        if value:
            params[param] = value
    return params


def _print_lines(lines: list[str], out: IO[str]) -> None:
    out.write("".join(line + "\n" for line in lines))
    out.flush()


def _list(
    args: argparse.Namespace,
    client: RunsClient,
    out: IO[str],
    err: IO[str],
    term: Terminal,
    now_s: float,
) -> int:
    params = _filter_params(args, now_s)
    params["limit"] = str(args.limit)
    if args.cursor:
        params["cursor"] = args.cursor
    if not args.all:
        page = client.list_runs(params)
        pages: Iterator[list[dict[str, Any]]] = iter([page["runs"]])
        next_cursor = page.get("next_cursor")
    else:
        pages, next_cursor = client.iter_pages(params), None
    count = 0
    for runs in pages:
        count += len(runs)
        if args.json:
            _print_lines([json.dumps(run) for run in runs], out)
        else:
            _print_lines([line for run in runs for line in render_run_row(run, term)], out)
    if not args.json and count == 0:
        _print_lines(["no runs match (the window is the last 7 days unless --since says)"], out)
    if next_cursor:
        print(f"more runs: --cursor {next_cursor} (or --all)", file=err)
    return 0


def show_lines(client: RunsClient, run_id: str, term: Terminal, *, full: bool = False) -> list[str]:
    """``afr runs show``: the run read from the API, with its replays and evals."""
    body = client.get_run(run_id)
    summary = body.get("run") or {}
    linked = client.list_runs(
        {
            "source_run_id": str(summary.get("run_id", "")),
            "since": _api_time(int(summary.get("start_ns", 0)) / _NS),
            "limit": "50",
        }
    )
    return render_run(
        body, term, linked=linked["runs"], more_linked=bool(linked.get("next_cursor")), full=full
    )


def list_lines(client: RunsClient, params: Mapping[str, str], term: Terminal) -> list[str]:
    """``afr runs list``, one page: each run's row."""
    return [line for run in client.list_runs(params)["runs"] for line in render_run_row(run, term)]


def _show(args: argparse.Namespace, client: RunsClient, out: IO[str], term: Terminal) -> int:
    if args.json:
        _print_lines([json.dumps(client.get_run(args.run_id), indent=2)], out)
    else:
        _print_lines(show_lines(client, args.run_id, term, full=args.full), out)
    return 0


def _tail(
    args: argparse.Namespace,
    client: RunsClient,
    out: IO[str],
    err: IO[str],
    term: Terminal,
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> int:
    if not args.interval_s > 0:
        raise RunsApiError("--interval-s must be more than 0")
    now_s = clock()
    params = _filter_params(args, now_s)
    since_s = float(params.pop("since", "") or parse_time(TAIL_SINCE, now_s))

    def emit(run: dict[str, Any], changed: bool) -> None:
        if args.json:
            _print_lines([json.dumps(run)], out)
        else:
            _print_lines(render_run_row(run, term, note="now failing: " if changed else ""), out)

    def warn(message: str) -> None:
        print(f"afr runs tail: {message}", file=err, flush=True)

    if _isatty(err):
        warn(f"new runs from {client.url} every {args.interval_s:g}s; Ctrl-C stops")
    tail_runs(
        client.iter_pages,
        emit,
        filters=params,
        since_s=since_s,
        clock=clock,
        sleep=sleep,
        warn=warn,
        interval_s=args.interval_s,
    )
    return 0


def run_command(
    args: argparse.Namespace,
    *,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    environ: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    transport: httpx.BaseTransport | None = None,
) -> int:
    """Runs ``afr runs <list|show|tail>``: 0, or 2 with one line on stderr."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    env = os.environ if environ is None else environ
    term = terminal_for(out, env)
    url = args.url or env.get(API_URL_ENV) or DEFAULT_API_URL
    command = args.runs_command
    try:
        with RunsClient(url, _resolve_key(args, env), transport=transport) as client:
            if command == "list":
                return _list(args, client, out, err, term, clock())
            if command == "show":
                return _show(args, client, out, term)
            return _tail(args, client, out, err, term, clock=clock, sleep=sleep)
    except RunsApiError as exc:
        print(f"afr runs {command}: {exc}", file=err)
        return 2
    except KeyboardInterrupt:
        return 0 if command == "tail" else 130
    except BrokenPipeError:  # `afr runs list | head`
        _silence(out)
        return 0


def _silence(stream: IO[str]) -> None:
    """Points a closed pipe at /dev/null so the interpreter's final flush does not fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
    except (OSError, ValueError, AttributeError):
        pass
