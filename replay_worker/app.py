"""The replay worker's HTTP service: a signed hook starts a replay, a job URL reports it.

``POST /hooks/replay``  body ``{"run_id": "...", "model": "...", "stubs": {"tool": "output"}}``
                        Standard Webhooks signature; 202 ``{"job_id", "state", "status_url"}``;
                        the same ``webhook-id`` again answers with the same job.
``GET /jobs/{job_id}``  state and, when done, the verdict (or why it failed).
``GET /healthz``

The worker reads runs only through the collector's read API and writes its replays only as
OTLP through afr's exporter (``exporter.install``), to the collector.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import threading
from typing import Any

import uvicorn
from agents import Model
from openai import AsyncOpenAI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import exporter
from replay_worker.client import CollectorClient
from replay_worker.hooks.signature import SignatureError, verify
from replay_worker.jobs import JobRunner
from replay_worker.settings import WorkerSettings

__all__ = ["ReplayWorker", "WorkerThread", "openai_model_factory"]

logger = logging.getLogger("afr.worker")

_RUN_ID = re.compile(r"^[0-9a-f]{32}$")
_MAX_HOOK_BYTES = 1024 * 1024


def openai_model_factory(settings: WorkerSettings) -> Any:
    """Real model classes over the real ``openai`` client: OpenAI, or any compatible base URL."""
    from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
    from agents.models.openai_responses import OpenAIResponsesModel

    key = settings.model_api_key.get_secret_value() if settings.model_api_key else None
    client = AsyncOpenAI(
        base_url=settings.model_base_url, api_key=key or "missing-api-key", max_retries=1
    )

    def build(name: str) -> Model:
        if settings.model_api == "chat":
            return OpenAIChatCompletionsModel(model=name, openai_client=client)
        return OpenAIResponsesModel(model=name, openai_client=client)

    return build


class ReplayWorker:
    def __init__(
        self, settings: WorkerSettings, *, model_factory: Any = None, install_exporter: bool = True
    ) -> None:
        self.settings = settings
        key = settings.collector_key.get_secret_value() if settings.collector_key else None
        self._processor = None
        if install_exporter:
            headers = {"authorization": f"Bearer {key}"} if key else None
            self._processor = exporter.install(
                endpoint=settings.collector_otlp_endpoint, headers=headers
            )
        self.jobs = JobRunner(
            settings,
            CollectorClient(settings.collector_url, key),
            model_factory or openai_model_factory(settings),
            after_replay=self._flush,
        )
        if settings.webhook_secret is None:
            logger.warning("no AFR_WORKER_WEBHOOK_SECRET: every replay hook will be refused")

    def _flush(self) -> None:
        if self._processor is not None:
            self._processor.force_flush(10)

    async def hook(self, request: Request) -> Response:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > _MAX_HOOK_BYTES:
            return JSONResponse({"error": "hook body too large"}, status_code=413)
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():  # capped before anything is verified
            size += len(chunk)
            if size > _MAX_HOOK_BYTES:
                return JSONResponse({"error": "hook body too large"}, status_code=413)
            chunks.append(chunk)
        body = b"".join(chunks)
        secret = self.settings.webhook_secret
        if secret is None:
            return JSONResponse(
                {"error": "replay hooks are not configured on this worker"}, status_code=401
            )
        try:
            webhook_id = verify(
                secret.get_secret_value(),
                request.headers,
                body,
                tolerance_s=self.settings.webhook_tolerance_s,
            )
        except SignatureError as exc:
            return JSONResponse({"error": f"invalid signature: {exc}"}, status_code=401)
        try:
            payload = json.loads(body)
            run_id = str(payload["run_id"]).lower().removeprefix("trace_")
            model = payload.get("model")
            stubs = payload.get("stubs") or {}
            if not _RUN_ID.match(run_id):
                raise ValueError("run_id must be 32 hex digits")
            if model is not None and not isinstance(model, str):
                raise ValueError("model must be a string")
            if not isinstance(stubs, dict) or not all(isinstance(v, str) for v in stubs.values()):
                raise ValueError("stubs maps tool names to output strings")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return JSONResponse({"error": f"bad replay request: {exc}"}, status_code=400)
        job, _ = self.jobs.submit(webhook_id, run_id, model, {str(k): v for k, v in stubs.items()})
        return JSONResponse(
            {"job_id": job.job_id, "state": job.state, "status_url": f"/jobs/{job.job_id}"},
            status_code=202,
        )

    async def job(self, request: Request) -> Response:
        job = self.jobs.get(str(request.path_params["job_id"]))
        if job is None:
            return JSONResponse({"error": "no such job"}, status_code=404)
        return JSONResponse(job.to_json())

    async def health(self, request: Request) -> Response:
        return JSONResponse({"ok": True, "day_spent_usd": round(self.jobs.day.spent_usd, 6)})

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/hooks/replay", self.hook, methods=["POST"]),
                Route("/jobs/{job_id}", self.job, methods=["GET"]),
                Route("/healthz", self.health, methods=["GET"]),
            ]
        )

    async def serve(
        self, sock: socket.socket | None = None
    ) -> tuple[uvicorn.Server, asyncio.Task[None], int]:
        """Starts serving on ``sock`` (or the configured host/port); returns the server,
        its task and the bound port."""
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.settings.host, self.settings.port))
        port = int(sock.getsockname()[1])
        server = uvicorn.Server(
            uvicorn.Config(self.app(), log_level="warning", lifespan="off", access_log=False)
        )
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        return server, task, port


class WorkerThread:
    """A worker on a background thread with its own event loop (tests, demo)."""

    def __init__(self, settings: WorkerSettings, **kwargs: Any) -> None:
        self._settings = settings
        self._kwargs = kwargs
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="afr-worker", daemon=True
        )
        self.worker: ReplayWorker | None = None
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    def __enter__(self) -> WorkerThread:
        self._thread.start()

        async def start() -> None:
            self.worker = ReplayWorker(self._settings, **self._kwargs)
            self._server, self._task, self.port = await self.worker.serve()

        asyncio.run_coroutine_threadsafe(start(), self._loop).result(30)
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            if self._server is not None and self._task is not None:
                self._server.should_exit = True
                await self._task

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
