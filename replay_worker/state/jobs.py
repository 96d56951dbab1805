"""Replay jobs in the state store: submitted once per webhook id, claimed with a lease
(``lease.py``), run at most ``MAX_ATTEMPTS`` times, finished with their outcome. Finished
jobs beyond a cap are forgotten, oldest first."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from replay_worker.money import usd
from replay_worker.state.base import StoreBase
from replay_worker.state.lease import Lease, Owner, pid_alive
from replay_worker.state_engines import Tx

__all__ = ["DEFAULT_MAX_JOBS_KEPT", "FINISHED", "MAX_ATTEMPTS", "Job", "JobState", "JobsStore"]

JobState = Literal["queued", "running", "succeeded", "failed"]
FINISHED: tuple[JobState, ...] = ("succeeded", "failed")
MAX_ATTEMPTS = 2
DEFAULT_MAX_JOBS_KEPT = 10_000

_LEASE = Lease("jobs", "job_id")


@dataclass
class Job:
    job_id: str
    run_id: str
    model: str | None
    stubs: dict[str, str]
    state: JobState
    created_at: float
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    cost_usd: float = 0.0
    overrun_usd: float = 0.0
    model_requests: int = 0
    policy: str = "exact"
    fork: dict[str, Any] | None = None
    """A fork's step and overrides (hooks/models.py ``Fork``), in ``job_forks``."""

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "run_id": self.run_id,
            "model": self.model,
            "policy": self.policy,
            "fork": self.fork,
            "state": self.state,
            "attempts": self.attempts,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "result": self.result,
            "error": self.error,
            "cost_usd": round(self.cost_usd, 6),
            "overrun_usd": round(self.overrun_usd, 6),
            "model_requests": self.model_requests,
        }


_SELECT_JOB = (
    "SELECT job_id, run_id, model, stubs, state, created_at, attempts, started_at, finished_at,"
    " result, error, cost_nusd, overrun_nusd, requests, policy,"
    " (SELECT fork FROM job_forks WHERE job_forks.job_id = jobs.job_id) FROM jobs"
)


def _job(row: tuple[Any, ...]) -> Job:
    (job_id, run_id, model, stubs, state, created, attempts, started, finished) = row[:9]
    result, error, cost, overrun, requests, policy, fork = row[9:]
    return Job(
        job_id=job_id,
        run_id=run_id,
        model=model,
        stubs=json.loads(stubs),
        policy=policy,
        state=state,
        created_at=created,
        attempts=attempts,
        started_at=started,
        finished_at=finished,
        result=json.loads(result) if result is not None else None,
        error=json.loads(error) if error is not None else None,
        cost_usd=usd(cost),
        overrun_usd=usd(overrun),
        model_requests=requests,
        fork=json.loads(fork) if fork is not None else None,
    )


def _job_by_id(tx: Tx, job_id: str) -> Job:
    row = tx.one(_SELECT_JOB + " WHERE job_id = ?", (job_id,))
    assert row is not None  # read in the transaction that just wrote it
    return _job(row)


class JobsStore(StoreBase):
    _max_jobs_kept: int

    def submit(
        self,
        webhook_id: str,
        job_id: str,
        run_id: str,
        model: str | None,
        stubs: dict[str, str],
        now: float,
        policy: str = "exact",
        fork: dict[str, Any] | None = None,
    ) -> tuple[Job, bool]:
        """The job of this webhook id: the one it already started (``False``), or a new,
        queued one (``True``). Finished jobs beyond the cap are forgotten, oldest first, with
        their webhook ids (and forks); queued and running ones never are."""

        def body(tx: Tx) -> tuple[Job, bool]:
            row = tx.one(_SELECT_JOB + " WHERE webhook_id = ?", (webhook_id,))
            if row is not None:
                return _job(row), False
            (count,) = tx.one("SELECT count(*) FROM jobs") or (0,)
            excess = count - self._max_jobs_kept + 1
            if excess > 0:
                tx.run(
                    "DELETE FROM jobs WHERE job_id IN (SELECT job_id FROM jobs"
                    " WHERE state IN ('succeeded', 'failed') ORDER BY finished_at LIMIT ?)",
                    (excess,),
                )
                tx.run("DELETE FROM job_forks WHERE job_id NOT IN (SELECT job_id FROM jobs)")
            tx.run(
                "INSERT INTO jobs (job_id, webhook_id, run_id, model, stubs, policy, state,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, 'queued', ?)",
                (job_id, webhook_id, run_id, model, json.dumps(stubs), policy, now),
            )
            if fork is not None:
                tx.run(
                    "INSERT INTO job_forks (job_id, fork) VALUES (?, ?)",
                    (job_id, json.dumps(fork)),
                )
            job = Job(job_id, run_id, model, dict(stubs), "queued", now, policy=policy, fork=fork)
            return job, True

        return self._transact(body)

    def get(self, job_id: str) -> Job | None:
        rows = self._read(_SELECT_JOB + " WHERE job_id = ?", (job_id,))
        return _job(rows[0]) if rows else None

    def by_webhook(self, webhook_id: str) -> Job | None:
        """The job this webhook id already started, if any (a re-delivered hook)."""
        rows = self._read(_SELECT_JOB + " WHERE webhook_id = ?", (webhook_id,))
        return _job(rows[0]) if rows else None

    def claim(self, owner: Owner, now: float, lease_s: float) -> Job | None:
        """Takes the oldest queued job, or one whose owner's lease ran out (its worker died:
        it runs again, up to MAX_ATTEMPTS, and what it already spent stays spent)."""

        def body(tx: Tx) -> Job | None:
            while True:
                row = _LEASE.claimable(tx, now)
                if row is None:
                    return None
                job_id, attempts, state = row
                if state == "running" and attempts >= MAX_ATTEMPTS:
                    self._abandon(tx, job_id, attempts, now)
                    continue
                _LEASE.take(tx, job_id, owner, now, lease_s, started_at="?")
                return _job_by_id(tx, job_id)

        return self._transact(body)

    @staticmethod
    def _abandon(tx: Tx, job_id: str, attempts: int, now: float) -> None:
        error = {
            "status": 500,
            "reason": f"the worker running this job stopped {attempts} times; not retried again",
        }
        tx.run(
            "UPDATE jobs SET state = 'failed', error = ?, finished_at = ?, owner = NULL,"
            " lease_until = NULL WHERE job_id = ?",
            (json.dumps(error), now, job_id),
        )

    def recover(
        self, owner: Owner, now: float, alive: Callable[[int], bool] = pid_alive
    ) -> list[str]:
        """At start: jobs left running by a dead worker process of this host go back to the
        queue (or fail, past MAX_ATTEMPTS) without waiting for their lease. Others' jobs are
        left to their leases: a live worker elsewhere may be running them."""

        def body(tx: Tx) -> list[str]:
            recovered: list[str] = []
            for job_id, attempts in _LEASE.orphans(tx, owner, alive):
                if attempts >= MAX_ATTEMPTS:
                    self._abandon(tx, job_id, attempts, now)
                else:
                    _LEASE.requeue(tx, job_id)
                recovered.append(job_id)
            return recovered

        return self._transact(body)

    def renew(self, owner: Owner, job_ids: list[str], lease_until: float) -> None:
        if not job_ids:
            return

        def body(tx: Tx) -> None:
            for job_id in job_ids:
                _LEASE.renew(tx, owner, job_id, lease_until)

        self._transact(body)

    def finish(
        self,
        job_id: str,
        owner: Owner,
        state: JobState,
        result: dict[str, Any] | None,
        error: dict[str, Any] | None,
        now: float,
    ) -> bool:
        """Records the outcome and forgets the job's stub outputs; False if this owner no
        longer holds the job (its lease ran out and another worker took it over)."""
        # The hook's stub outputs are the caller's raw data: kept only while needed.
        sql = (
            "UPDATE jobs SET state = ?, result = ?, error = ?, finished_at = ?, owner = NULL,"
            " lease_until = NULL, stubs = '{}' WHERE " + _LEASE.held()
        )
        parameters = (
            state,
            json.dumps(result) if result is not None else None,
            json.dumps(error) if error is not None else None,
            now,
            job_id,
            owner.worker_id,
        )
        return self._write_one(sql, parameters)

    def release(self, job_id: str, owner: Owner) -> bool:
        """Puts a job interrupted by this worker's shutdown back in the queue, attempt not
        counted; the next worker runs it from the start."""
        sql = (
            "UPDATE jobs SET state = 'queued', attempts = greatest(0, attempts - 1),"
            " owner = NULL, lease_until = NULL WHERE " + _LEASE.held()
        )
        return self._write_one(sql, (job_id, owner.worker_id))

    def counts(self) -> dict[str, int]:
        counts = {"queued": 0, "running": 0, "succeeded": 0, "failed": 0}
        for state, count in self._read("SELECT state, count(*) FROM jobs GROUP BY state"):
            counts[state] = count
        return counts
