"""Replay jobs: accepted at once, run one at a time in the background, kept in memory.

The worker is stateless apart from this table: a job's result also lives in the collector as
the replay run (kind ``replay``, linked to its source), so losing the table loses nothing
that cannot be read back.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents import Model

from replay_worker.client import CollectorClient, CollectorUnavailable, RunNotFound
from replay_worker.ledger import BudgetExceeded, DayBudget, JobLedger, LedgerModel
from replay_worker.replay.engine import run_replay
from replay_worker.replay.fixture import FixtureError, build_fixture
from replay_worker.settings import WorkerSettings

__all__ = ["Job", "JobRunner"]

logger = logging.getLogger("afr.worker.jobs")

_MAX_JOBS_KEPT = 10_000


@dataclass
class Job:
    job_id: str
    run_id: str
    model: str | None
    stubs: dict[str, str]
    state: str = "queued"  # queued | running | succeeded | failed
    created_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    cost_usd: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "run_id": self.run_id,
            "model": self.model,
            "state": self.state,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "result": self.result,
            "error": self.error,
            "cost_usd": round(self.cost_usd, 6),
        }


class JobRunner:
    def __init__(
        self,
        settings: WorkerSettings,
        client: CollectorClient,
        model_factory: Callable[[str], Model],
        *,
        after_replay: Callable[[], None] | None = None,
    ) -> None:
        self._settings = settings
        self._client = client
        self._model_factory = model_factory
        self._after_replay = after_replay
        self._jobs: dict[str, Job] = {}
        self._by_webhook: dict[str, str] = {}
        self._webhook_of: dict[str, str] = {}
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self.day = DayBudget(settings.day_budget_usd)

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def submit(
        self, webhook_id: str, run_id: str, model: str | None, stubs: dict[str, str]
    ) -> tuple[Job, bool]:
        """The job for this webhook id: a new one, or the one it already started."""
        existing = self._by_webhook.get(webhook_id)
        if existing is not None:
            return self._jobs[existing], False
        job = Job(job_id="job_" + secrets.token_hex(8), run_id=run_id, model=model, stubs=stubs)
        self._evict()
        self._jobs[job.job_id] = job
        self._by_webhook[webhook_id] = job.job_id
        self._webhook_of[job.job_id] = webhook_id
        task = asyncio.get_running_loop().create_task(self._run(job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job, True

    def _evict(self) -> None:
        """Forgets the oldest finished jobs beyond the cap (never a queued or running one),
        and their webhook ids with them."""
        excess = len(self._jobs) - _MAX_JOBS_KEPT + 1
        if excess <= 0:
            return
        finished = [j.job_id for j in self._jobs.values() if j.state in ("succeeded", "failed")]
        for job_id in finished[:excess]:
            self._jobs.pop(job_id)
            self._by_webhook.pop(self._webhook_of.pop(job_id), None)

    async def wait(self, job_id: str, timeout_s: float) -> Job | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = self._jobs.get(job_id)
            if job is None or job.state in ("succeeded", "failed"):
                return job
            await asyncio.sleep(0.05)
        return self._jobs.get(job_id)

    async def _fetch_run(self, run_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + self._settings.run_wait_s
        while True:
            try:
                return await self._client.get_run(run_id)
            except RunNotFound:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.25)

    async def _run(self, job: Job) -> None:
        async with self._lock:  # one replay at a time: the SDK's trace processors are global
            job.state = "running"
            ledger = JobLedger(
                self._settings.job_budget_usd, self.day, self._settings.prices_per_mtok
            )
            try:
                run = await self._fetch_run(job.run_id)
                fixture = build_fixture(run)

                def model_for(name: str) -> Model:
                    return LedgerModel(
                        self._model_factory(name), name, ledger, self._settings.max_output_tokens
                    )

                result = await run_replay(
                    fixture,
                    model_for,
                    model_override=job.model or self._settings.default_model,
                    stub_outputs=job.stubs,
                    max_turns=self._settings.max_turns,
                )
                job.result = {**result.to_json(), "source_status": fixture.source_status}
                job.state = "succeeded"
            except RunNotFound as exc:
                job.state, job.error = "failed", {"status": 404, "reason": str(exc)}
            except CollectorUnavailable as exc:
                job.state, job.error = "failed", {"status": 503, "reason": str(exc)}
            except BudgetExceeded as exc:
                job.state, job.error = (
                    "failed",
                    {"status": 402, "reason": f"budget exhausted: {exc}"},
                )
            except FixtureError as exc:
                job.state, job.error = "failed", {"status": 422, "reason": str(exc)}
            except Exception as exc:
                logger.exception("replay job %s failed", job.job_id)
                job.state, job.error = (
                    "failed",
                    {"status": 500, "reason": f"{type(exc).__name__}: {exc}"},
                )
            finally:
                job.cost_usd = ledger.spent_usd + ledger.reserved_usd
                job.finished_at = time.time()
                if self._after_replay is not None:
                    await asyncio.to_thread(self._after_replay)
