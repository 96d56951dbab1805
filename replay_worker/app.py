"""The replay worker's HTTP service: a signed hook starts a replay, a job URL reports it.

``POST /hooks/replay``  body ``{"run_id": "...", "model": "...", "stubs": {"tool": "output"},
                        "policy": "exact" | "strict" | "lenient"}``
                        Standard Webhooks signature; 202 ``{"job_id", "state", "status_url"}``;
                        the same ``webhook-id`` again answers with the same job.
``GET /jobs/{job_id}``  state and, when done, the verdict (or why it failed), its cost and
                        any overrun; from the state store, so any worker on it answers.
``GET /healthz``        the day's spend and overrun, jobs by state, the replay pool; 503
                        with the reason when jobs are not being run.

Jobs run in a bounded pool of replay processes (``AFR_WORKER_CONCURRENCY``). Each reads its
run only through the collector's read API and writes its replay only as OTLP through afr's
exporter (``exporter.install``, in the replay process), to the collector.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import threading
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from replay_worker.hooks.signature import SignatureError, verify
from replay_worker.jobs import JobRunner
from replay_worker.settings import WorkerSettings
from replay_worker.state import Clock

__all__ = ["ReplayWorker", "WorkerThread"]

logger = logging.getLogger("afr.worker")

_RUN_ID = re.compile(r"^[0-9a-f]{32}$")
_MAX_HOOK_BYTES = 1024 * 1024


class ReplayWorker:
    def __init__(self, settings: WorkerSettings, *, clock: Clock = time.time) -> None:
        self.settings = settings
        self.jobs = JobRunner(settings, clock=clock)
        if settings.webhook_secret is None:
            logger.warning("no AFR_WORKER_WEBHOOK_SECRET: every replay hook will be refused")

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
            policy = payload.get("policy", "exact")
            if policy not in ("exact", "strict", "lenient"):
                raise ValueError("policy must be exact, strict or lenient")
            if not _RUN_ID.match(run_id):
                raise ValueError("run_id must be 32 hex digits")
            if model is not None and not isinstance(model, str):
                raise ValueError("model must be a string")
            if not isinstance(stubs, dict) or not all(isinstance(v, str) for v in stubs.values()):
                raise ValueError("stubs maps tool names to output strings")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return JSONResponse({"error": f"bad replay request: {exc}"}, status_code=400)
        job, _ = await self.jobs.submit(
            webhook_id, run_id, model, {str(k): v for k, v in stubs.items()}, policy
        )
        return JSONResponse(
            {"job_id": job.job_id, "state": job.state, "status_url": f"/jobs/{job.job_id}"},
            status_code=202,
        )

    async def job(self, request: Request) -> Response:
        job = await self.jobs.get(str(request.path_params["job_id"]))
        if job is None:
            return JSONResponse({"error": "no such job"}, status_code=404)
        return JSONResponse(job.to_json())

    async def health(self, request: Request) -> Response:
        failure = self.jobs.failure
        body = {"ok": failure is None, **await self.jobs.stats()}
        if failure is not None:
            body["error"] = failure
        return JSONResponse(body, status_code=200 if failure is None else 503)

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
        """Starts the job runner and serves on ``sock`` (or the configured host/port);
        returns the server, its task and the bound port. The task ends after the server
        stops (``server.should_exit``) and the runner has stopped with it."""
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.settings.host, self.settings.port))
        port = int(sock.getsockname()[1])
        server = uvicorn.Server(
            uvicorn.Config(self.app(), log_level="warning", lifespan="off", access_log=False)
        )
        await self.jobs.start()

        async def serve_then_stop() -> None:
            try:
                await server.serve(sockets=[sock])
            finally:
                await self.jobs.stop()

        task = asyncio.create_task(serve_then_stop())
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
