"""A scripted, OpenAI-compatible model server for offline runs.

It answers ``POST /v1/responses`` and ``POST /v1/chat/completions`` from a script, so the
Agents SDK's real ``OpenAIResponsesModel`` and ``OpenAIChatCompletionsModel`` (and the real
``openai`` client under them) run unchanged, with realistic spans, and no API key.

A script is an ordered list of turns; each model request consumes the next turn. A turn may
name a guard (text the request's system instructions must contain) so a script that drifts
out of step fails loudly with a 409 instead of answering the wrong agent. A turn may also be
a scripted failure (``error_status``): the request is answered with that HTTP status and an
OpenAI-shaped error body, as a failing model call would be.

With ``per_conversation=True`` the turn is instead the number of model answers already in
the request's history, so any number of conversations (concurrent replays) each walk the
script from its start. A turn with ``variants`` is a flaky model: each time it is served it
answers with the next of itself and its variants. ``latency_s`` holds every answer back
like a real model would; ``max_in_flight`` and each request's timing show how many requests
were served at once.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ScriptedModelServer", "ScriptedToolCall", "ScriptedTurn", "ScriptedUsage"]

_MAX_REQUEST_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class ScriptedToolCall:
    """One function call the scripted model makes. ``arguments`` is sent verbatim."""

    name: str
    arguments: str
    call_id: str


@dataclass(frozen=True)
class ScriptedUsage:
    """The usage a turn reports instead of the estimate: totals and their cached and
    reasoning parts, as OpenAI's APIs report them (``input_tokens_details.cached_tokens``,
    ``output_tokens_details.reasoning_tokens``; Chat Completions' ``prompt_tokens_details``
    and ``completion_tokens_details``)."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0


@dataclass(frozen=True)
class ScriptedTurn:
    """One model answer: tool calls, a final text message, or (``error_status``) a failed
    model call: an HTTP error status with ``error_message``. ``usage``: the usage it
    reports (else an estimate from the request's and answer's sizes, nothing cached)."""

    text: str | None = None
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    expect_instructions_containing: str | None = None
    error_status: int | None = None
    error_message: str = "The scripted model failed this request."
    variants: tuple[ScriptedTurn, ...] = ()
    """A flaky model: the k-th time this turn is served (from 0) it answers as
    ``(self, *variants)[k % (1 + len(variants))]``, each with its own guard."""
    usage: ScriptedUsage | None = None

    def __post_init__(self) -> None:
        if self.error_status is not None:
            if self.text is not None or self.tool_calls:
                raise ValueError("a scripted error turn has neither text nor tool calls")
            if not 400 <= self.error_status <= 599:
                raise ValueError("a scripted error turn has an HTTP error status (400-599)")
            return
        if (self.text is None) == (not self.tool_calls):
            raise ValueError("a scripted turn has either text or tool calls, not both or neither")


@dataclass
class RecordedRequest:
    """A request the server received, for tests and the demo to inspect."""

    path: str
    body: dict[str, Any]
    received_s: float = 0.0
    """``time.monotonic()`` when the request arrived, and when its answer was sent."""
    answered_s: float = 0.0


@dataclass
class _State:
    turns: list[ScriptedTurn]
    per_conversation: bool = False
    latency_s: float = 0.0
    position: int = 0
    served: dict[int, int] = field(default_factory=dict)
    """How often each turn (by index) was served: which of its variants answers next."""
    requests: list[RecordedRequest] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _answers_in_history(path: str, body: dict[str, Any]) -> int:
    """Model answers already in a request's history: assistant messages (chat), or runs of
    consecutive model output items (responses: one answer may hold several calls)."""
    if not path.endswith("/responses"):
        return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
    items = body.get("input")
    if not isinstance(items, list):
        return 0
    answers, previous_was_output = 0, False
    for item in items:
        is_output = isinstance(item, dict) and (
            item.get("type") in ("function_call", "reasoning") or item.get("role") == "assistant"
        )
        if is_output and not previous_was_output:
            answers += 1
        previous_was_output = is_output
    return answers


def _estimate_tokens(payload: Any) -> int:
    # Deterministic stand-in for a tokenizer: ~4 bytes of JSON per token.
    return max(1, len(json.dumps(payload, sort_keys=True)) // 4)


def _system_instructions(path: str, body: dict[str, Any]) -> str:
    if path.endswith("/responses"):
        return str(body.get("instructions") or "")
    for message in body.get("messages", []):
        if message.get("role") in ("system", "developer"):
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


def _responses_body(turn: ScriptedTurn, request: dict[str, Any], index: int) -> dict[str, Any]:
    output: list[dict[str, Any]]
    if turn.text is not None:
        output = [
            {
                "type": "message",
                "id": f"msg_scripted_{index}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
            }
        ]
    else:
        output = [
            {
                "type": "function_call",
                "id": f"fc_scripted_{index}_{n}",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
                "status": "completed",
            }
            for n, call in enumerate(turn.tool_calls)
        ]
    usage = turn.usage or ScriptedUsage(_estimate_tokens(request), _estimate_tokens(output))
    input_details: dict[str, int] = {"cached_tokens": usage.cached_tokens}
    if usage.cache_write_tokens:
        input_details["cache_write_tokens"] = usage.cache_write_tokens
    return {
        "id": f"resp_scripted_{index}",
        "object": "response",
        "created_at": 1_764_000_000 + index,
        "model": request.get("model", "scripted"),
        "status": "completed",
        "output": output,
        "instructions": request.get("instructions"),
        "tools": request.get("tools", []),
        "tool_choice": request.get("tool_choice", "auto"),
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "temperature": request.get("temperature"),
        "top_p": request.get("top_p"),
        "max_output_tokens": request.get("max_output_tokens"),
        "metadata": {},
        "error": None,
        "incomplete_details": None,
        "text": {"format": {"type": "text"}},
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            "input_tokens_details": input_details,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        },
    }


def _chat_body(turn: ScriptedTurn, request: dict[str, Any], index: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    if turn.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in turn.tool_calls
        ]
    return _chat_answer(turn, request, index, message, turn.usage)


def _chat_answer(
    turn: ScriptedTurn,
    request: dict[str, Any],
    index: int,
    message: dict[str, Any],
    usage: ScriptedUsage | None,
) -> dict[str, Any]:
    reported: dict[str, Any]
    if usage is None:  # as before usage could be scripted: no details at all
        prompt_tokens = _estimate_tokens(request)
        completion_tokens = _estimate_tokens(message)
        reported = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
    else:
        prompt_details: dict[str, int] = {"cached_tokens": usage.cached_tokens}
        if usage.cache_write_tokens:
            prompt_details["cache_write_tokens"] = usage.cache_write_tokens
        reported = {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            "prompt_tokens_details": prompt_details,
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        }
    return {
        "id": f"chatcmpl-scripted-{index}",
        "object": "chat.completion",
        "created": 1_764_000_000 + index,
        "model": request.get("model", "scripted"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if turn.tool_calls else "stop",
            }
        ],
        "usage": reported,
    }


class _Handler(BaseHTTPRequestHandler):
    server: _ScriptedHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: tests and the demo read requests from the recorder instead

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        raw = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
        except (BrokenPipeError, ConnectionResetError):
            return  # the client went away (a killed replay): nothing to answer

    def _error(self, status: int, message: str, error_type: str = "scripted_model_error") -> None:
        self._reply(status, {"error": {"message": message, "type": error_type}})

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if not (path.endswith("/responses") or path.endswith("/chat/completions")):
            self._error(
                404, f"the scripted model serves /v1/responses and /v1/chat/completions, not {path}"
            )
            return
        length = int(self.headers.get("content-length") or 0)
        if length > _MAX_REQUEST_BYTES:
            self._error(413, "request too large for the scripted model")
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError as exc:
            self._error(400, f"request body is not JSON: {exc.msg}")
            return
        if body.get("stream"):
            self._error(400, "the scripted model answers non-streaming requests only")
            return
        state = self.server.state
        record = RecordedRequest(path=path, body=body, received_s=time.monotonic())
        with state.lock:
            state.requests.append(record)
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            self._answer(state, path, body)
        finally:
            with state.lock:
                state.in_flight -= 1
                record.answered_s = time.monotonic()

    def _answer(self, state: _State, path: str, body: dict[str, Any]) -> None:
        if state.latency_s:
            time.sleep(state.latency_s)
        with state.lock:
            index = _answers_in_history(path, body) if state.per_conversation else state.position
            if index >= len(state.turns):
                self._error(409, f"script exhausted after {len(state.turns)} turns")
                return
            turn = state.turns[index]
            if turn.variants:
                served = state.served.get(index, 0)
                state.served[index] = served + 1
                turn = (turn, *turn.variants)[served % (1 + len(turn.variants))]
            guard = turn.expect_instructions_containing
            if guard is not None and guard not in _system_instructions(path, body):
                self._error(409, f"script turn {index} expects instructions containing {guard!r}")
                return
            state.position += 1
        if turn.error_status is not None:
            kind = "server_error" if turn.error_status >= 500 else "invalid_request_error"
            self._error(turn.error_status, turn.error_message, kind)
        elif path.endswith("/responses"):
            self._reply(200, _responses_body(turn, body, index))
        else:
            self._reply(200, _chat_body(turn, body, index))


class _ScriptedHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: _State) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


class ScriptedModelServer:
    """Serves a script on a loopback port. Use as a context manager or start()/stop()."""

    def __init__(
        self,
        turns: list[ScriptedTurn],
        *,
        per_conversation: bool = False,
        latency_s: float = 0.0,
    ) -> None:
        self._state = _State(
            turns=list(turns), per_conversation=per_conversation, latency_s=latency_s
        )
        self._server: _ScriptedHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ScriptedModelServer:
        self._server = _ScriptedHTTPServer(self._state)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            # stop() waits for the loop to see the shutdown: poll often, so it is quick
            kwargs={"poll_interval": 0.02},
            name="afr-scripted-model",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """The OpenAI base URL to give a client, e.g. ``http://127.0.0.1:PORT/v1``."""
        if self._server is None:
            raise RuntimeError("the scripted model server is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._state.lock:
            return list(self._state.requests)

    @property
    def turns_served(self) -> int:
        with self._state.lock:
            return self._state.position

    @property
    def latency_s(self) -> float:
        return self._state.latency_s

    @latency_s.setter
    def latency_s(self, value: float) -> None:
        self._state.latency_s = value

    @property
    def max_in_flight(self) -> int:
        """The most requests this server was answering at the same moment."""
        with self._state.lock:
            return self._state.max_in_flight

    def script(self, turns: list[ScriptedTurn], *, per_conversation: bool | None = None) -> None:
        """Serves ``turns`` from now on, from their start, and forgets recorded requests: one
        server (and the worker pointed at it) serves many scripts in turn."""
        with self._state.lock:
            self._state.turns = list(turns)
            self._state.position = 0
            self._state.served.clear()
            if per_conversation is not None:
                self._state.per_conversation = per_conversation
            self._state.requests.clear()
            self._state.max_in_flight = self._state.in_flight

    def clear(self) -> None:
        """Forgets recorded requests and the in-flight peak (the script position stays)."""
        with self._state.lock:
            self._state.requests.clear()
            self._state.max_in_flight = self._state.in_flight
