"""The replay worker's HTTP service: a signed hook starts a replay, a job URL reports it.

``POST /hooks/replay``  body ``{"run_id": "...", "model": "...", "stubs": {"tool": "output"},
                        "policy": "exact" | "strict" | "lenient", "fork": {"step": ...,
                        "overrides": [...]}}``; ``"signature": "..."`` instead of
                        ``run_id`` replays the newest production run that failed with it
                        (404 when none in 30 days, 503 when the collector cannot say).
                        Standard Webhooks signature; 202 ``{"job_id", "run_id", "state",
                        "status_url"}``;
                        the same ``webhook-id`` again answers with the same job. A fork is
                        checked against the run first (replay/fork.py): 422 naming the step,
                        override or capture at fault; 404 for a run the collector lacks.
``POST /hooks/evals``   body ``{"replay_run_id": "..."}``, signed the same way; synthesizes the
                        eval of a ``FAILURE_FIXED`` replay into the evals directory: 201
                        ``{"eval_id", "path", "eval"}``; 422 with the reason for any other
                        verdict; 404 for an unknown run. Deterministic, so a re-delivered
                        ``webhook-id`` (or another for the same run) gets the same answer
                        and file.
``POST /hooks/sweeps``  body ``{}`` or ``{"slot": "..."}``, signed the same way; queues the
                        sweep of that slot (default: a manual slot named by the webhook id;
                        an instant of the schedule, ``2026-12-01T03:00:00Z``, is that
                        scheduled slot): 202 ``{"sweep_id", "state", "status_url"}``; a slot
                        queued, running or finished already answers with the same sweep.
``GET /sweeps/{id}``    the sweep's state and, once finished, its summary.
``GET /jobs/{job_id}``  state and, when done, the verdict (or why it failed), its cost and
                        any overrun; from the state store, so any worker on it answers.
``GET /healthz``        the day's spend and overrun, jobs by state, the replay pool; 503
                        with the reason when jobs are not being run.
``GET /openapi.json``   this API's OpenAPI document (replay_worker/openapi.py).

Jobs run in a bounded pool of replay processes (``AFR_WORKER_CONCURRENCY``). Each reads its
run only through the collector's read API and writes its replay only as OTLP through afr's
exporter (``afr_exporter.install``, in the replay process), to the collector.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import socket
import threading
import time
from http import HTTPStatus
from typing import Any, TypeVar

import uvicorn
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from replay_worker.client import CollectorClient, CollectorUnavailable, RunNotFound
from replay_worker.hooks.models import (
    EvalHook,
    EvalWritten,
    Fork,
    Health,
    Job,
    JobAccepted,
    ReplayHook,
    Sweep,
    SweepAccepted,
    SweepHook,
    dump,
    problem,
)
from replay_worker.hooks.signature import SignatureError, verify
from replay_worker.hooks.status import (
    BadRequest,
    BodyTooLarge,
    HookError,
    NoEval,
    NoEvalsDirectory,
    NotFound,
    Unforkable,
    Unhealthy,
    Unsigned,
    error_response,
    status_of,
)
from replay_worker.jobs import JobRunner
from replay_worker.money import Clock
from replay_worker.openapi import OPENAPI
from replay_worker.protocol import ChildConfig
from replay_worker.schedule import parse_schedule
from replay_worker.scheduler import ProcessSweepExecutor, SweepScheduler
from replay_worker.settings import WorkerSettings
from replay_worker.state import StateStoreUnavailable
from replay_worker.state.jobs import Job as QueuedJob

__all__ = ["ReplayWorker", "WorkerThread"]

logger = logging.getLogger("afr.worker")

_MAX_HOOK_BYTES = 1024 * 1024
SIGNATURE_WINDOW_S = 30 * 86_400
"""A hook's signature replays the newest production run of this window that failed with it."""


def _json_body(body: bytes) -> Any:
    """A hook's JSON body. JSON nested deeper than Python parses, or holding text that is not
    UTF-8 (an escaped lone surrogate: no state store, log or response can hold it), is
    refused as malformed (ValueError: 400), never a 500."""
    try:
        payload = json.loads(body)
    except RecursionError:
        raise ValueError("the body is nested too deeply") from None
    try:
        json.dumps(payload, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise ValueError("the body holds text that is not UTF-8 (a lone surrogate)") from None
    return payload


M = TypeVar("M", bound=BaseModel)


def _hook_body(model: type[M], body: bytes, what: str) -> M:
    """The body validated by its model; any fault is a ``BadRequest`` naming the field."""
    try:
        return model.model_validate(_json_body(body) if body.strip() else {})
    except ValidationError as exc:
        raise BadRequest(f"bad {what} request: {problem(exc)}") from None
    except ValueError as exc:  # not JSON, or JSON no store can hold
        raise BadRequest(f"bad {what} request: {exc}") from None


def _answer(model: BaseModel, status: int = HTTPStatus.OK) -> JSONResponse:
    """A success answer, built through its model (the document's schema of it)."""
    return JSONResponse(dump(model), status_code=status)


class ReplayWorker:
    def __init__(self, settings: WorkerSettings, *, clock: Clock = time.time) -> None:
        self.settings = settings
        self.jobs = JobRunner(settings, clock=clock)
        executor = ProcessSweepExecutor(
            ChildConfig(settings, clock), self.jobs.owner, settings.sweep_timeout_s
        )
        self.sweeps = SweepScheduler(
            self.jobs.store,
            self.jobs.owner,
            executor,
            schedule=parse_schedule(settings.sweep_cron, settings.sweep_tz),
            enabled=settings.sweep_enabled,
            evals_dir_exists=settings.evals_dir.is_dir,
            catchup_s=settings.sweep_catchup_s,
            lease_s=settings.job_lease_s,
            clock=clock,
            interrupt=executor.interrupt,
        )
        if settings.webhook_secret is None:
            logger.warning("no AFR_WORKER_WEBHOOK_SECRET: every replay hook will be refused")

    async def signed_request(self, request: Request) -> tuple[str, bytes]:
        """The webhook id and raw body of a request signed with the worker's secret
        (Standard Webhooks). Raises ``BodyTooLarge`` once the body passes the cap (before
        anything is verified), ``Unsigned`` when unsigned, badly signed or stale. Every hook
        of the worker goes through here."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > _MAX_HOOK_BYTES:
            raise BodyTooLarge("hook body too large")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():  # capped before anything is verified
            size += len(chunk)
            if size > _MAX_HOOK_BYTES:
                raise BodyTooLarge("hook body too large")
            chunks.append(chunk)
        body = b"".join(chunks)
        secret = self.settings.webhook_secret
        if secret is None:
            raise Unsigned("hooks are not configured on this worker (no webhook secret)")
        try:
            webhook_id = verify(
                secret.get_secret_value(),
                request.headers,
                body,
                tolerance_s=self.settings.webhook_tolerance_s,
            )
        except SignatureError as exc:
            raise Unsigned(f"invalid signature: {exc}") from None
        return webhook_id, body

    async def _check_fork(self, run_id: str, fork: Fork) -> None:
        """Raises ``Unforkable`` (or the collector client's errors) unless ``fork`` can be
        made on the run: before it is queued, so no model call is made for a bad one."""
        settings = self.settings
        client = self._collector()
        deadline = time.monotonic() + settings.run_wait_s
        while True:  # a run is visible up to one batch interval after it was acknowledged
            try:
                run = await client.get_run(run_id)
                break
            except RunNotFound:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.25)

        def plan() -> None:
            from replay_worker.replay.fixture import FixtureError, build_fixture
            from replay_worker.replay.fork import plan_fork

            try:
                plan_fork(build_fixture(run), fork)
            except FixtureError as exc:  # a ForkError too
                raise Unforkable(f"cannot fork run {run_id}: {exc}") from None

        await asyncio.to_thread(plan)

    async def _run_of(self, webhook_id: str, replay: ReplayHook) -> str | QueuedJob:
        """The run a hook replays: its ``run_id``, or its signature's newest production run
        (``RunNotFound`` when none, ``CollectorUnavailable``). A re-delivered hook answers
        with the job it started, whatever run is newest now."""
        if replay.run_id is not None:
            return replay.run_id
        started = await self.jobs.by_webhook(webhook_id)
        if started is not None:
            return started
        assert replay.signature is not None  # the model holds one of the two
        return await self._collector().newest_run_with(
            replay.signature, window_s=SIGNATURE_WINDOW_S
        )

    def _collector(self) -> CollectorClient:
        settings = self.settings
        key = settings.collector_key.get_secret_value() if settings.collector_key else None
        return CollectorClient(settings.collector_url, key)

    async def hook(self, request: Request) -> Response:
        try:
            webhook_id, body = await self.signed_request(request)
            replay = _hook_body(ReplayHook, body, "replay")
            run = await self._run_of(webhook_id, replay)
            if isinstance(run, str) and replay.fork is not None:
                await self._check_fork(run, replay.fork)
        except (HookError, RunNotFound, CollectorUnavailable) as error:
            return error_response(error)
        if isinstance(run, str):
            job, _ = await self._submit(webhook_id, run, replay)
        else:
            job = run
        accepted = JobAccepted(
            job_id=job.job_id, run_id=job.run_id, state=job.state, status_url=f"/jobs/{job.job_id}"
        )
        return _answer(accepted, HTTPStatus.ACCEPTED)

    async def _submit(
        self, webhook_id: str, run_id: str, replay: ReplayHook
    ) -> tuple[QueuedJob, bool]:
        return await self.jobs.submit(
            webhook_id,
            run_id,
            replay.model,
            dict(replay.stubs or {}),
            replay.policy,
            replay.fork.model_dump(mode="json") if replay.fork is not None else None,
        )

    async def eval_hook(self, request: Request) -> Response:
        try:
            _, body = await self.signed_request(request)
            run_id = _hook_body(EvalHook, body, "eval").replay_run_id
        except HookError as error:
            return error_response(error)
        # The eval modules load off the event loop, once, on first use; the imports below are
        # then instant. They do not load the Agents SDK (the worker's own process never does).
        await asyncio.to_thread(importlib.import_module, "replay_worker.evals.synthesis")
        from replay_worker.evals.contract import write_eval
        from replay_worker.evals.synthesis import SynthesisError, fetch_runs, synthesize

        settings = self.settings
        key = settings.collector_key.get_secret_value() if settings.collector_key else None
        client = CollectorClient(settings.collector_url, key)
        try:
            try:
                source, replay = await fetch_runs(client, run_id, wait_s=settings.run_wait_s)
                document = synthesize(source, replay)
            except SynthesisError as exc:
                raise NoEval(exc.reason, exc.verdict) from None
        except (NoEval, RunNotFound, CollectorUnavailable) as error:
            return error_response(error)
        path = await asyncio.to_thread(write_eval, document, settings.evals_dir)
        written = EvalWritten(
            eval_id=document.id,
            path=str(path),
            eval=document.model_dump(mode="json", by_alias=True),
        )
        return _answer(written, HTTPStatus.CREATED)

    async def sweep_hook(self, request: Request) -> Response:
        try:
            webhook_id, body = await self.signed_request(request)
            slot = _hook_body(SweepHook, body, "sweep").slot or webhook_id
            if not await asyncio.to_thread(self.settings.evals_dir.is_dir):
                raise NoEvalsDirectory(
                    f"no evals directory {self.settings.evals_dir} on this worker"
                )
        except HookError as error:
            return error_response(error)
        sweep, _ = await self.sweeps.submit(self.sweeps.schedule.resolve(slot.strip()), "hook")
        accepted = SweepAccepted(
            sweep_id=sweep.sweep_id,
            slot=sweep.slot,
            state=sweep.state,
            status_url=f"/sweeps/{sweep.sweep_id}",
        )
        return _answer(accepted, HTTPStatus.ACCEPTED)

    async def sweep(self, request: Request) -> Response:
        sweep = await self.sweeps.get(str(request.path_params["sweep_id"]))
        if sweep is None:
            return error_response(NotFound("no such sweep"))
        return _answer(Sweep.model_validate(sweep.to_json()))

    async def job(self, request: Request) -> Response:
        job = await self.jobs.get(str(request.path_params["job_id"]))
        if job is None:
            return error_response(NotFound("no such job"))
        return _answer(Job.model_validate(job.to_json()))

    async def health(self, request: Request) -> Response:
        failure = self.jobs.failure or self.sweeps.failure
        try:
            figures = {**await self.jobs.stats(), "sweeps": await self.sweeps.stats()}
        except StateStoreUnavailable as error:  # its message never holds the password
            failure, figures = str(error), {}
        report = Health.model_validate({"ok": failure is None, "error": failure, **figures})
        return _answer(report, HTTPStatus.OK if failure is None else status_of(Unhealthy))

    async def _state_store_unavailable(self, request: Request, error: Exception) -> Response:
        return error_response(error)

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(OPENAPI)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/hooks/replay", self.hook, methods=["POST"]),
                Route("/hooks/evals", self.eval_hook, methods=["POST"]),
                Route("/hooks/sweeps", self.sweep_hook, methods=["POST"]),
                Route("/sweeps/{sweep_id}", self.sweep, methods=["GET"]),
                Route("/jobs/{job_id}", self.job, methods=["GET"]),
                Route("/healthz", self.health, methods=["GET"]),
                Route("/openapi.json", self.openapi, methods=["GET"]),
            ],
            # Any route that reaches a state store it cannot reach: 503, said plainly.
            exception_handlers={StateStoreUnavailable: self._state_store_unavailable},
        )

    async def serve(
        self, sock: socket.socket | None = None
    ) -> tuple[uvicorn.Server, asyncio.Task[None], int]:
        """Starts the job runner and serves on ``sock`` (or the configured host/port);
        returns the server, its task and the bound port. The task ends after the server
        stops (``server.should_exit``) and the runner has stopped with it."""
        if sock is None:
            # IPPROTO_TCP: asyncio turns Nagle off only then (else ~40 ms per small reply).
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.settings.host, self.settings.port))
        port = int(sock.getsockname()[1])
        server = uvicorn.Server(
            uvicorn.Config(self.app(), log_level="warning", lifespan="off", access_log=False)
        )
        await self.jobs.start()
        await self.sweeps.start()

        async def serve_then_stop() -> None:
            try:
                await server.serve(sockets=[sock])
            finally:
                await self.sweeps.stop()  # before the jobs: it shares their state store
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
