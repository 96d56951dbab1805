"""Replay jobs: accepted at once, kept in the state store, run in parallel in a bounded pool
of replay processes.

Any number of workers may share one state store: a hook accepted by one is deduplicated
against all, a job is claimed by exactly one (whichever has a free replay process first),
and ``GET /jobs/{id}`` answers from the store in every worker. A job also lives in the
collector as its replay run (kind ``replay``, linked to its source).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from typing import Any

from replay_worker.money import Clock, utc_day
from replay_worker.pool import PoolResult, ReplayPool
from replay_worker.protocol import ChildConfig, JobSpec
from replay_worker.settings import WorkerSettings
from replay_worker.state import FINISHED, Job, Owner, StateStore, open_state_store

__all__ = ["Job", "JobRunner"]

logger = logging.getLogger("afr.worker.jobs")

_POLL_S = 1.0
"""How often an idle worker looks for jobs it was not told about: ones accepted by another
worker on the same state, or left behind by a dead one."""


class JobRunner:
    """Accepts jobs into the store and runs them. ``start`` before use, ``stop`` to end;
    ``clock`` (epoch seconds) stamps jobs, leases and the day's spend, and is given to the
    replay processes, so it must pickle."""

    def __init__(
        self,
        settings: WorkerSettings,
        *,
        store: StateStore | None = None,
        clock: Clock = time.time,
    ) -> None:
        self._settings = settings
        self.store = store or open_state_store(settings)
        self._clock = clock
        self.owner = Owner.current(secrets.token_hex(4))
        self.pool: ReplayPool | None = None
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(settings.concurrency)
        self._running: dict[str, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.failure: str | None = None
        """Why the runner stopped running jobs, when it did (health goes red with it)."""
        self.recovered: list[str] = []

    async def _store_call(self, method: Any, *args: Any) -> Any:
        return await asyncio.to_thread(method, *args)

    # -- the surface --------------------------------------------------------------------

    async def submit(
        self,
        webhook_id: str,
        run_id: str,
        model: str | None,
        stubs: dict[str, str],
        policy: str = "exact",
        fork: dict[str, Any] | None = None,
    ) -> tuple[Job, bool]:
        """The job for this webhook id: a new, queued one, or the one it already started.
        ``fork``: a ``Fork`` as JSON (checked by the hook)."""
        job_id = "job_" + secrets.token_hex(8)
        job: Job
        created: bool
        job, created = await self._store_call(
            self.store.submit,
            webhook_id,
            job_id,
            run_id,
            model,
            stubs,
            self._clock(),
            policy,
            fork,
        )
        if created:
            self._wake.set()
        return job, created

    async def get(self, job_id: str) -> Job | None:
        job: Job | None = await self._store_call(self.store.get, job_id)
        return job

    async def by_webhook(self, webhook_id: str) -> Job | None:
        job: Job | None = await self._store_call(self.store.by_webhook, webhook_id)
        return job

    async def wait(self, job_id: str, timeout_s: float) -> Job | None:
        """The job once finished (or as it is when ``timeout_s`` of real time has passed)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            job = await self.get(job_id)
            if job is None or job.state in FINISHED or loop.time() >= deadline:
                return job
            await asyncio.sleep(0.05)

    async def stats(self) -> dict[str, Any]:
        day = utc_day(self._clock())
        spend = await self._store_call(self.store.day, day)
        counts = await self._store_call(self.store.counts)
        return {
            "day": day,
            "day_spent_usd": round(spend.spent_usd, 6),
            "day_overrun_usd": round(spend.overrun_usd, 6),
            "day_budget_usd": self._settings.day_budget_usd,
            "day_model_requests": spend.requests,
            "jobs": counts,
            "pool": self.pool.stats.to_json() if self.pool is not None else None,
        }

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        self.recovered = await self._store_call(self.store.recover, self.owner, self._clock())
        if self.recovered:
            logger.warning(
                "re-queued %d job(s) left running by a stopped worker: %s",
                len(self.recovered),
                ", ".join(self.recovered),
            )
        self.pool = ReplayPool(
            self._settings.concurrency,
            ChildConfig(self._settings, self._clock),
            jobs_per_process=self._settings.jobs_per_process,
        )
        self.pool.start()
        for coroutine in (self._dispatch(), self._renew_leases()):
            task = asyncio.get_running_loop().create_task(coroutine)
            task.add_done_callback(self._supervise)
            self._tasks.append(task)

    def _supervise(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.failure = f"{task.get_coro().__qualname__} stopped: {type(exc).__name__}: {exc}"  # type: ignore[union-attr]
            logger.error("replay jobs are not being run: %s", self.failure, exc_info=exc)

    async def stop(self) -> None:
        """Stops taking jobs, lets running ones finish for ``shutdown_grace_s``, puts the
        rest back in the queue, and ends every replay process."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.pool is not None:
            await self.pool.close(self._settings.shutdown_grace_s)
        if self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)
        await self._store_call(self.store.close)

    # -- running ------------------------------------------------------------------------

    async def _dispatch(self) -> None:
        """Claims a job whenever a replay process is free."""
        while True:
            await self._slots.acquire()
            job: Job | None = None
            try:
                while job is None:
                    self._wake.clear()
                    try:
                        job = await self._store_call(
                            self.store.claim, self.owner, self._clock(), self._settings.job_lease_s
                        )
                    except Exception:  # a locked or unavailable store: try again later
                        logger.exception("could not claim a job from %s", self.store.location)
                    if job is None:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._wake.wait(), _POLL_S)
            except BaseException:
                self._slots.release()
                raise
            task = asyncio.get_running_loop().create_task(self._execute(job))
            self._running[job.job_id] = task

    async def _execute(self, job: Job) -> None:
        assert self.pool is not None
        try:
            spec = JobSpec(job.job_id, job.run_id, job.model, job.stubs, job.policy, job.fork)
            result = await self.pool.run(spec, self._settings.job_timeout_s)
            await self._record(job, result)
        except Exception:
            logger.exception("could not record the outcome of job %s", job.job_id)
        finally:
            self._running.pop(job.job_id, None)
            self._slots.release()

    async def _record(self, job: Job, result: PoolResult) -> None:
        if result.kind == "interrupted":
            await self._store_call(self.store.release, job.job_id, self.owner)
            return
        if result.kind == "done" and result.outcome is not None:
            state = result.outcome["state"]
            outcome_result, error = result.outcome.get("result"), result.outcome.get("error")
        else:
            state, outcome_result = "failed", None
            error = {"status": 500, "reason": result.reason}
        recorded = await self._store_call(
            self.store.finish, job.job_id, self.owner, state, outcome_result, error, self._clock()
        )
        if not recorded:
            logger.warning(
                "job %s was taken over by another worker (its lease ran out); its outcome "
                "here is dropped",
                job.job_id,
            )

    async def _renew_leases(self) -> None:
        interval = self._settings.job_lease_s / 3
        while True:
            await asyncio.sleep(interval)
            try:
                await self._store_call(
                    self.store.renew,
                    self.owner,
                    list(self._running),
                    self._clock() + self._settings.job_lease_s,
                )
            except Exception:
                logger.exception("could not renew job leases in %s", self.store.location)
