"""What runs inside a replay process: one job at a time, from a run id to its outcome.

The Agents SDK's trace processors are process-global, so a replay owns its process while it
runs: the process installs afr's exporter once (pointing at the collector), builds the model
clients from the settings, and answers each job sent to it with a plain-JSON outcome after
the replay's spans are flushed. Model costs go through the ledger, on the shared state store.

Nothing here runs at import: the pool's fork server imports this module once, so that every
replay process starts with the SDK already loaded. The worker's own process never imports
it: the pool starts a process at ``child_main`` by name (``protocol.CHILD_ENTRY``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import Any, cast

import httpx2
from agents import Agent, Model, RunConfig, Runner, function_tool
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from agents.models.openai_responses import OpenAIResponsesModel
from openai import AsyncOpenAI

import afr_exporter
from replay_worker.client import CollectorClient, CollectorUnavailable, RunNotFound
from replay_worker.hooks.models import Fork
from replay_worker.ledger import BudgetExceeded, DayBudget, JobLedger, LedgerModel
from replay_worker.model_client import openai_model_factory
from replay_worker.protocol import EXIT_PARENT_GONE, ChildConfig, JobSpec, Outcome
from replay_worker.replay.engine import run_replay
from replay_worker.replay.fixture import FixtureError, build_fixture
from replay_worker.replay.stubs import MatchPolicy
from replay_worker.state import open_state_store

__all__ = ["ReplayProcess", "child_main", "warm_up"]

logger = logging.getLogger("afr.worker.replay")


def _canned_answer(api: str, call: bool) -> dict[str, Any]:
    """A model answer, as the wire carries it: a tool call, or a final text."""
    if api == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": None if call else "ok"}
        if call:
            message["tool_calls"] = [
                {
                    "id": "call_w",
                    "type": "function",
                    "function": {"name": "noop", "arguments": "{}"},
                }
            ]
        return {
            "id": "chatcmpl-warm-up",
            "object": "chat.completion",
            "created": 0,
            "model": "warm-up",
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if call else "stop"}
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    item: dict[str, Any] = (
        {
            "type": "function_call",
            "id": "fc_w",
            "call_id": "call_w",
            "name": "noop",
            "arguments": "{}",
            "status": "completed",
        }
        if call
        else {
            "type": "message",
            "id": "msg_w",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "ok", "annotations": []}],
        }
    )
    return {
        "id": "resp_warm_up",
        "object": "response",
        "created_at": 0,
        "model": "warm-up",
        "status": "completed",
        "output": [item],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 1,
            "output_tokens": 1,
            "total_tokens": 2,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _canned_client(api: str) -> Any:
    """An HTTP client for the openai client (httpx2, its own transport library) that answers
    a tool call first, then a final text."""
    calls = iter([True])

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, json=_canned_answer(api, next(calls, False)))

    return httpx2.AsyncClient(transport=httpx2.MockTransport(answer))


def warm_up() -> None:
    """Runs one agent turn with a tool call per model API against canned answers (no
    network, no tracing, no thread left behind). The openai client builds its pydantic
    schemas on the first request, about 1 s of CPU: done once in the fork server, every
    replay process forked from it starts with them built. Also imports the OTLP/gRPC
    exporter each replay process installs (~0.1-0.2 s per process otherwise); only
    imports: a gRPC channel, and its threads, must not exist before the fork. Never raises."""

    try:
        importlib.import_module("afr_exporter.processor")
        importlib.import_module("opentelemetry.exporter.otlp.proto.grpc.trace_exporter")
    except ImportError:  # installing the exporter will say what is missing
        logger.warning("replay warm-up: the OTLP exporter did not import", exc_info=True)

    @function_tool
    def noop() -> str:
        """Does nothing."""
        return "done"

    for api in ("responses", "chat"):
        try:
            client = AsyncOpenAI(
                api_key="warm-up",
                base_url="http://warm-up.invalid/v1",
                http_client=_canned_client(api),
            )
            model: Model = (
                OpenAIResponsesModel(model="warm-up", openai_client=client)
                if api == "responses"
                else OpenAIChatCompletionsModel(model="warm-up", openai_client=client)
            )
            agent: Agent[Any] = Agent(name="warm-up", instructions="-", model=model, tools=[noop])
            asyncio.run(Runner.run(agent, "-", run_config=RunConfig(tracing_disabled=True)))
        except Exception:  # a cold start is slower, never broken
            logger.warning("replay warm-up (%s API) failed", api, exc_info=True)


def _failed(status: int, reason: str) -> Outcome:
    return {"state": "failed", "error": {"status": status, "reason": reason}}


class ReplayProcess:
    """The per-process part: exporter, collector client, model clients, state store."""

    def __init__(self, config: ChildConfig) -> None:
        settings = config.settings
        self.settings = settings
        key = settings.collector_key.get_secret_value() if settings.collector_key else None
        headers = {"authorization": f"Bearer {key}"} if key else None
        self._processor = afr_exporter.install(
            endpoint=settings.collector_otlp_endpoint, headers=headers
        )
        self._client = CollectorClient(settings.collector_url, key)
        self._model_factory = openai_model_factory(settings)
        self._store = open_state_store(settings)
        self._day = DayBudget(self._store, settings.day_budget_usd, config.clock)

    async def _fetch_run(self, run_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.settings.run_wait_s
        while True:
            try:
                return await self._client.get_run(run_id)
            except RunNotFound:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.25)

    async def run(self, spec: JobSpec) -> Outcome:
        settings = self.settings
        ledger = JobLedger(
            settings.job_budget_usd, self._day, settings.prices_per_mtok, job_id=spec.job_id
        )
        try:
            run = await self._fetch_run(spec.run_id)
            fixture = build_fixture(run)

            def model_for(name: str) -> Model:
                return LedgerModel(
                    self._model_factory(name), name, ledger, settings.max_output_tokens
                )

            result = await run_replay(
                fixture,
                model_for,
                model_override=spec.model or settings.default_model,
                stub_outputs=spec.stubs,
                policy=cast(MatchPolicy, spec.policy),
                max_turns=settings.max_turns,
                fork=Fork.model_validate(spec.fork) if spec.fork is not None else None,
            )
            return {
                "state": "succeeded",
                "result": {**result.to_json(), "source_status": fixture.source_status},
            }
        except RunNotFound as exc:
            return _failed(404, str(exc))
        except CollectorUnavailable as exc:
            return _failed(503, str(exc))
        except BudgetExceeded as exc:
            return _failed(402, f"budget exhausted: {exc}")
        except FixtureError as exc:
            return _failed(422, str(exc))
        except Exception as exc:
            logger.exception("replay job %s failed", spec.job_id)
            return _failed(500, f"{type(exc).__name__}: {exc}")
        finally:
            # The replay's spans reach the collector before the job says it is done.
            await asyncio.to_thread(self._processor.force_flush, 10)

    def close(self) -> None:
        self._processor.shutdown(timeout=5)
        self._store.close()


def _exit_with_parent(lifeline: Connection) -> None:
    """The worker holds the other end and never writes: end of file means it is gone."""
    with contextlib.suppress(EOFError, OSError):
        lifeline.recv()
    os._exit(EXIT_PARENT_GONE)


def child_main(conn: Connection, lifeline: Connection, config: ChildConfig) -> None:
    """A replay process's loop: a JobSpec in, an Outcome out, until ``None`` or end of file."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group; the worker decides
    threading.Thread(
        target=_exit_with_parent, args=(lifeline,), name="afr-replay-lifeline", daemon=True
    ).start()
    loop = asyncio.new_event_loop()  # one loop for the process: model clients keep their pools
    replay: ReplayProcess | None = None
    try:
        try:  # before the first job arrives: a process is started ahead of need
            replay = ReplayProcess(config)
        except Exception:
            logger.exception("replay process could not start; retrying with its first job")
        while True:
            try:
                spec = conn.recv()
            except EOFError:
                break
            if spec is None:
                break
            try:
                if replay is None:
                    replay = ReplayProcess(config)
                outcome = loop.run_until_complete(replay.run(spec))
            except Exception as exc:
                logger.exception("replay process could not run job %s", spec.job_id)
                outcome = _failed(500, f"the replay process failed: {type(exc).__name__}: {exc}")
            conn.send(outcome)
    finally:
        if replay is not None:
            replay.close()
        loop.close()
