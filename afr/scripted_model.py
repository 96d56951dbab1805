"""A scripted, OpenAI-compatible model server for offline runs.

It answers ``POST /v1/responses`` and ``POST /v1/chat/completions`` from a script, so the
Agents SDK's real ``OpenAIResponsesModel`` and ``OpenAIChatCompletionsModel`` (and the real
``openai`` client under them) run unchanged, with realistic spans, and no API key.

A script is an ordered list of turns; each model request consumes the next turn. A turn may
name a guard (text the request's system instructions must contain) so a script that drifts
out of step fails loudly with a 409 instead of answering the wrong agent.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ScriptedModelServer", "ScriptedToolCall", "ScriptedTurn"]

_MAX_REQUEST_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class ScriptedToolCall:
    """One function call the scripted model makes. ``arguments`` is sent verbatim."""

    name: str
    arguments: str
    call_id: str


@dataclass(frozen=True)
class ScriptedTurn:
    """One model answer: tool calls, or a final text message."""

    text: str | None = None
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    expect_instructions_containing: str | None = None

    def __post_init__(self) -> None:
        if (self.text is None) == (not self.tool_calls):
            raise ValueError("a scripted turn has either text or tool calls, not both or neither")


@dataclass
class RecordedRequest:
    """A request the server received, for tests and the demo to inspect."""

    path: str
    body: dict[str, Any]


@dataclass
class _State:
    turns: list[ScriptedTurn]
    position: int = 0
    requests: list[RecordedRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


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
    input_tokens = _estimate_tokens(request)
    output_tokens = _estimate_tokens(output)
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
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
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
    prompt_tokens = _estimate_tokens(request)
    completion_tokens = _estimate_tokens(message)
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
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class _Handler(BaseHTTPRequestHandler):
    server: _ScriptedHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: tests and the demo read requests from the recorder instead

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _error(self, status: int, message: str) -> None:
        self._reply(status, {"error": {"message": message, "type": "scripted_model_error"}})

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
        with state.lock:
            state.requests.append(RecordedRequest(path=path, body=body))
            if state.position >= len(state.turns):
                self._error(409, f"script exhausted after {len(state.turns)} turns")
                return
            index = state.position
            turn = state.turns[index]
            guard = turn.expect_instructions_containing
            if guard is not None and guard not in _system_instructions(path, body):
                self._error(409, f"script turn {index} expects instructions containing {guard!r}")
                return
            state.position += 1
        if path.endswith("/responses"):
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

    def __init__(self, turns: list[ScriptedTurn]) -> None:
        self._state = _State(turns=list(turns))
        self._server: _ScriptedHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ScriptedModelServer:
        self._server = _ScriptedHTTPServer(self._state)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="afr-scripted-model", daemon=True
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
