"""The worker's small state (DESIGN.md decision 11): jobs, webhook-id deduplication, the
day's spend and sweep slots. By default one SQLite file under the worker's data directory,
for one machine; with ``AFR_WORKER_STATE_URL``, a PostgreSQL database that worker replicas on
several hosts share (ADR 12; the engines are in ``state_engines.py``).

Every worker process that opens the same state shares it: the HTTP processes that accept
hooks, and the replay processes that reserve and settle model costs. Each check-and-write is
one transaction the engine makes atomic across processes and hosts (SQLite: ``BEGIN
IMMEDIATE``; PostgreSQL: ``SERIALIZABLE``, run again after a serialization failure), so "is
this webhook id new?", "does this request fit the day's budget?" and "is this job or slot
free?" each have one answer. The SQLite file must be on a local disk (WAL needs shared
memory).

Money is stored as integer nano-dollars, so sums of many small charges stay exact.

A job is claimed with a lease its worker renews while the replay runs. A worker that dies
leaves its jobs ``running`` with a lease that runs out; whoever claims next re-queues them
(a worker on the same host does it at start, when it sees the owner's pid is gone). A job
runs at most ``MAX_ATTEMPTS`` times; after that it fails with the reason.

Sweep slots live here too: a sweep is claimed the same way (one owner, a renewed lease, a
dead owner's sweep resumed by the next), records each eval's outcome as it finishes, and is
marked finished once; a finished slot never runs again (ADR 16).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from replay_worker.money import Clock, nusd, usd, utc_day
from replay_worker.settings import WorkerSettings
from replay_worker.state_engines import (
    POSTGRES_SCHEMES,
    Engine,
    PostgresEngine,
    SQLiteEngine,
    StateSchemaTooNew,
    StateStoreUnavailable,
    Tx,
)

__all__ = [
    "MAX_ATTEMPTS",
    "Clock",
    "DaySpend",
    "Job",
    "JobState",
    "Owner",
    "ShardMismatch",
    "ShardRecord",
    "StateSchemaTooNew",
    "StateStore",
    "StateStoreUnavailable",
    "Sweep",
    "SweepResult",
    "SweepState",
    "nusd",
    "open_state_store",
    "usd",
    "utc_day",
]

JobState = Literal["queued", "running", "succeeded", "failed"]
FINISHED: tuple[JobState, ...] = ("succeeded", "failed")
MAX_ATTEMPTS = 2
SweepState = Literal["queued", "running", "finished", "failed", "sharded"]
"""``sharded``: a slot run as shards (``afr eval run --shard I/N --slot``), not by a worker;
no worker claims it, its last shard finishes it."""
SWEEP_MAX_ATTEMPTS = 3
"""A sweep whose process died this many times is failed (each attempt resumes the last)."""
DEFAULT_MAX_SWEEPS_KEPT = 1_000
DEFAULT_MAX_JOBS_KEPT = 10_000


@dataclass(frozen=True)
class Owner:
    """Who runs a claimed job: a worker process, named so that a worker on the same host can
    tell at start whether the owner is still alive."""

    worker_id: str
    host: str
    pid: int

    @classmethod
    def current(cls, token: str) -> Owner:
        host, pid = socket.gethostname(), os.getpid()
        return cls(f"{host}:{pid}:{token}", host, pid)


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

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "run_id": self.run_id,
            "model": self.model,
            "policy": self.policy,
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


@dataclass(frozen=True)
class DaySpend:
    day: str
    spent_usd: float
    overrun_usd: float
    requests: int


@dataclass
class Sweep:
    """One sweep slot: who runs it (a lease, like a job's) and, once finished, its summary."""

    sweep_id: str
    slot: str
    trigger: str
    state: SweepState
    created_at: float
    attempts: int = 0
    owner: str | None = None
    lease_until: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    summary: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "sweep_id": self.sweep_id,
            "slot": self.slot,
            "trigger": self.trigger,
            "state": self.state,
            "attempts": self.attempts,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "summary": self.summary,
            "error": self.error,
        }


@dataclass(frozen=True)
class SweepResult:
    """One eval's outcome in a sweep, recorded once (the first record wins)."""

    eval_id: str
    status: str
    eval_run_id: str | None
    result: dict[str, Any]
    recorded_at: float


class ShardMismatch(ValueError):
    """A shard of a slot that other shards run with another number of shards."""


@dataclass(frozen=True)
class ShardRecord:
    """Where a slot run as shards stands after one shard looked or recorded itself."""

    sweep: Sweep | None
    """The slot's sweep; None when no shard has recorded yet."""
    done: int
    """Its shards recorded (of this shard's count)."""
    recorded: bool
    """This shard is recorded: before this call, or by it."""
    stale: list[tuple[Sweep, int, int]] = field(default_factory=list)
    """Sharded sweeps older than the timeout, failed by this call: (sweep, done, count)."""


_SELECT_SWEEP = (
    "SELECT sweep_id, slot, trigger, state, created_at, attempts, owner, lease_until,"
    " started_at, finished_at, summary, error FROM sweeps"
)


def _sweep(row: tuple[Any, ...]) -> Sweep:
    (sweep_id, slot, trigger, state, created, attempts, owner, lease_until) = row[:8]
    started, finished, summary, error = row[8:]
    return Sweep(
        sweep_id=sweep_id,
        slot=slot,
        trigger=trigger,
        state=state,
        created_at=created,
        attempts=attempts,
        owner=owner,
        lease_until=lease_until,
        started_at=started,
        finished_at=finished,
        summary=json.loads(summary) if summary is not None else None,
        error=json.loads(error) if error is not None else None,
    )


_SELECT_JOB = (
    "SELECT job_id, run_id, model, stubs, state, created_at, attempts, started_at, finished_at,"
    " result, error, cost_nusd, overrun_nusd, requests, policy FROM jobs"
)


def _job(row: tuple[Any, ...]) -> Job:
    (job_id, run_id, model, stubs, state, created, attempts, started, finished) = row[:9]
    result, error, cost, overrun, requests, policy = row[9:]
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
    )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _job_by_id(tx: Tx, job_id: str) -> Job:
    row = tx.one(_SELECT_JOB + " WHERE job_id = ?", (job_id,))
    assert row is not None  # read in the transaction that just wrote it
    return _job(row)


def _prune_sweeps(tx: Tx) -> None:
    """Before a sweep is added: the oldest ended sweeps beyond the cap are forgotten, with
    their results."""
    (count,) = tx.one("SELECT count(*) FROM sweeps") or (0,)
    excess = count - DEFAULT_MAX_SWEEPS_KEPT + 1
    if excess > 0:
        old = [
            (r[0],)
            for r in tx.all(
                "SELECT sweep_id FROM sweeps WHERE state IN ('finished', 'failed')"
                " ORDER BY finished_at LIMIT ?",
                (excess,),
            )
        ]
        tx.run_many("DELETE FROM sweeps WHERE sweep_id = ?", old)
        tx.run_many("DELETE FROM sweep_results WHERE sweep_id = ?", old)
        tx.run_many("DELETE FROM sweep_shards WHERE sweep_id = ?", old)


def _shards(tx: Tx, sweep_id: str, shard: tuple[int, int]) -> tuple[int, bool]:
    """(shards recorded of this count, this one among them); ShardMismatch when the slot's
    shards were recorded with another count."""
    index, count = shard
    rows = tx.all(
        "SELECT shard_count, shard_index FROM sweep_shards WHERE sweep_id = ?", (sweep_id,)
    )
    other = {n for n, _ in rows if n != count}
    if other:
        raise ShardMismatch(
            f"its shards were recorded as shards of {min(other)}, and this is shard "
            f"{index}/{count}: every shard of a slot needs the same N"
        )
    return len(rows), any(i == index for _, i in rows)


def _fail_stale_shards(tx: Tx, created_before: float, now: float) -> list[tuple[Sweep, int, int]]:
    """Fails the sharded sweeps created before ``created_before``: (sweep, done, count)."""
    failed: list[tuple[Sweep, int, int]] = []
    for row in tx.all(
        _SELECT_SWEEP + " WHERE state = 'sharded' AND created_at < ? ORDER BY created_at",
        (created_before,),
    ):
        sweep = _sweep(row)
        counts = tx.all(
            "SELECT shard_count, count(*) FROM sweep_shards WHERE sweep_id = ?"
            " GROUP BY shard_count",
            (sweep.sweep_id,),
        )
        count, done = max(counts) if counts else (0, 0)
        error = {
            "kind": "incomplete",
            "reason": f"{done} of {count} shards recorded before the sweep timed out",
        }
        tx.run(
            "UPDATE sweeps SET state = 'failed', error = ?, finished_at = ? WHERE sweep_id = ?",
            (json.dumps(error), now, sweep.sweep_id),
        )
        failed.append((_sweep_by_id(tx, sweep.sweep_id), int(done), int(count)))
    return failed


def _sweep_by_id(tx: Tx, sweep_id: str) -> Sweep:
    row = tx.one(_SELECT_SWEEP + " WHERE sweep_id = ?", (sweep_id,))
    assert row is not None  # read in the transaction that just wrote it
    return _sweep(row)


def open_state_store(settings: WorkerSettings, **options: Any) -> StateStore:
    """The worker's state store as its settings say: the PostgreSQL database of
    ``state_url``, or the SQLite file in ``data_dir``. Every process of a worker opens its
    store here."""
    if settings.state_url is not None:
        return StateStore(settings.state_url.get_secret_value(), **options)
    return StateStore(settings.state_path, **options)


class StateStore:
    """One connection per process (threads share it under a lock); every process that opens
    the same state (a SQLite path, or a ``postgresql://`` URL) shares it. Methods are
    synchronous and short: call them from a thread when on an event loop. A PostgreSQL
    server that cannot be reached raises ``StateStoreUnavailable``, at open and on any call.
    """

    def __init__(
        self,
        where: Path | str,
        *,
        max_jobs_kept: int = DEFAULT_MAX_JOBS_KEPT,
        busy_timeout_s: float = 10.0,
    ) -> None:
        self._max_jobs_kept = max_jobs_kept
        self._engine: Engine
        # As the settings check it: URL schemes are case-insensitive ("PostgreSQL://" too).
        if isinstance(where, str) and urlsplit(where).scheme.lower() in POSTGRES_SCHEMES:
            self._engine = PostgresEngine(where, busy_timeout_s=busy_timeout_s)
            self.path: Path | None = None
        else:
            self.path = Path(where)
            self._engine = SQLiteEngine(self.path, busy_timeout_s=busy_timeout_s)
        self.location = self._engine.location
        """Where the state is, safe to print: the SQLite file, or the URL without password."""

    def __repr__(self) -> str:
        return f"StateStore({self.location!r})"

    @property
    def engine(self) -> Engine:
        return self._engine

    def close(self) -> None:
        self._engine.close()

    def _read(self, sql: str, parameters: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self._engine.read(sql, parameters)

    # -- jobs ---------------------------------------------------------------------------

    def submit(
        self,
        webhook_id: str,
        job_id: str,
        run_id: str,
        model: str | None,
        stubs: dict[str, str],
        now: float,
        policy: str = "exact",
    ) -> tuple[Job, bool]:
        """The job of this webhook id: the one it already started (``False``), or a new,
        queued one (``True``). Finished jobs beyond the cap are forgotten, oldest first, with
        their webhook ids; queued and running ones never are."""

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
            tx.run(
                "INSERT INTO jobs (job_id, webhook_id, run_id, model, stubs, policy, state,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, 'queued', ?)",
                (job_id, webhook_id, run_id, model, json.dumps(stubs), policy, now),
            )
            return Job(job_id, run_id, model, dict(stubs), "queued", now, policy=policy), True

        return self._engine.transact(body)

    def get(self, job_id: str) -> Job | None:
        rows = self._read(_SELECT_JOB + " WHERE job_id = ?", (job_id,))
        return _job(rows[0]) if rows else None

    def claim(self, owner: Owner, now: float, lease_s: float) -> Job | None:
        """Takes the oldest queued job, or one whose owner's lease ran out (its worker died:
        it runs again, up to MAX_ATTEMPTS, and what it already spent stays spent)."""

        def body(tx: Tx) -> Job | None:
            while True:
                row = tx.one(
                    "SELECT job_id, attempts, state FROM jobs WHERE state = 'queued'"
                    " OR (state = 'running' AND lease_until < ?)"
                    " ORDER BY created_at, job_id LIMIT 1",
                    (now,),
                )
                if row is None:
                    return None
                job_id, attempts, state = row
                if state == "running" and attempts >= MAX_ATTEMPTS:
                    self._abandon(tx, job_id, attempts, now)
                    continue
                tx.run(
                    "UPDATE jobs SET state = 'running', attempts = attempts + 1, owner = ?,"
                    " owner_host = ?, owner_pid = ?, lease_until = ?, started_at = ?"
                    " WHERE job_id = ?",
                    (owner.worker_id, owner.host, owner.pid, now + lease_s, now, job_id),
                )
                return _job_by_id(tx, job_id)

        return self._engine.transact(body)

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
            rows = tx.all(
                "SELECT job_id, attempts, owner_pid FROM jobs WHERE state = 'running'"
                " AND owner_host = ? AND owner != ?",
                (owner.host, owner.worker_id),
            )
            for job_id, attempts, pid in rows:
                if pid is not None and alive(pid):
                    continue
                if attempts >= MAX_ATTEMPTS:
                    self._abandon(tx, job_id, attempts, now)
                else:
                    tx.run(
                        "UPDATE jobs SET state = 'queued', owner = NULL, lease_until = NULL"
                        " WHERE job_id = ?",
                        (job_id,),
                    )
                recovered.append(job_id)
            return recovered

        return self._engine.transact(body)

    def renew(self, owner: Owner, job_ids: list[str], lease_until: float) -> None:
        if not job_ids:
            return
        self._engine.transact(
            lambda tx: tx.run_many(
                "UPDATE jobs SET lease_until = ? WHERE job_id = ? AND owner = ?"
                " AND state = 'running'",
                [(lease_until, job_id, owner.worker_id) for job_id in job_ids],
            )
        )

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
            " lease_until = NULL, stubs = '{}'"
            " WHERE job_id = ? AND owner = ? AND state = 'running'"
        )
        parameters = (
            state,
            json.dumps(result) if result is not None else None,
            json.dumps(error) if error is not None else None,
            now,
            job_id,
            owner.worker_id,
        )
        return self._engine.transact(lambda tx: tx.run(sql, parameters) == 1)

    def release(self, job_id: str, owner: Owner) -> bool:
        """Puts a job interrupted by this worker's shutdown back in the queue, attempt not
        counted; the next worker runs it from the start."""
        sql = (
            "UPDATE jobs SET state = 'queued', attempts = greatest(0, attempts - 1),"
            " owner = NULL, lease_until = NULL"
            " WHERE job_id = ? AND owner = ? AND state = 'running'"
        )
        return self._engine.transact(lambda tx: tx.run(sql, (job_id, owner.worker_id)) == 1)

    def counts(self) -> dict[str, int]:
        counts = {"queued": 0, "running": 0, "succeeded": 0, "failed": 0}
        for state, count in self._read("SELECT state, count(*) FROM jobs GROUP BY state"):
            counts[state] = count
        return counts

    # -- spend --------------------------------------------------------------------------

    def reserve(self, day: str, job_id: str | None, cost_nusd: int, day_limit_nusd: int) -> bool:
        """Counts a request's worst-case cost against the day, if it fits; atomic across every
        process on this state. A reservation counts in full until it is settled."""

        def body(tx: Tx) -> bool:
            row = tx.one("SELECT spent_nusd FROM spend WHERE day = ?", (day,))
            spent = row[0] if row else 0
            if spent + cost_nusd > day_limit_nusd:
                return False
            tx.run(
                "INSERT INTO spend (day, spent_nusd, requests) VALUES (?, ?, 1)"
                " ON CONFLICT (day) DO UPDATE SET"
                " spent_nusd = spend.spent_nusd + excluded.spent_nusd,"
                " requests = spend.requests + 1",
                (day, cost_nusd),
            )
            if job_id is not None:
                tx.run(
                    "UPDATE jobs SET cost_nusd = cost_nusd + ?, requests = requests + 1"
                    " WHERE job_id = ?",
                    (cost_nusd, job_id),
                )
            return True

        return self._engine.transact(body)

    def settle(self, day: str, job_id: str | None, reserved_nusd: int, actual_nusd: int) -> None:
        """Replaces a reservation by the real cost on the day it was reserved, even when that
        is more: the overrun is charged and recorded, never capped."""
        delta = actual_nusd - reserved_nusd
        overrun = max(0, delta)

        def body(tx: Tx) -> None:
            tx.run(
                "INSERT INTO spend (day, spent_nusd, overrun_nusd) VALUES (?, ?, ?)"
                " ON CONFLICT (day) DO UPDATE SET"
                " spent_nusd = greatest(0, spend.spent_nusd + excluded.spent_nusd),"
                " overrun_nusd = spend.overrun_nusd + excluded.overrun_nusd",
                (day, delta, overrun),
            )
            if job_id is not None:
                tx.run(
                    "UPDATE jobs SET cost_nusd = greatest(0, cost_nusd + ?),"
                    " overrun_nusd = overrun_nusd + ? WHERE job_id = ?",
                    (delta, overrun, job_id),
                )

        self._engine.transact(body)

    def day(self, day: str) -> DaySpend:
        rows = self._read(
            "SELECT spent_nusd, overrun_nusd, requests FROM spend WHERE day = ?", (day,)
        )
        spent, overrun, requests = rows[0] if rows else (0, 0, 0)
        return DaySpend(day, usd(spent), usd(overrun), requests)

    # -- sweeps -------------------------------------------------------------------------

    def submit_sweep(
        self, sweep_id: str, slot: str, trigger: str, now: float
    ) -> tuple[Sweep, bool]:
        """The sweep of this id: the one already known (``False``), whatever its state, or a
        new, queued one (``True``). Finished sweeps beyond the cap are forgotten, oldest
        first, with their results."""

        def body(tx: Tx) -> tuple[Sweep, bool]:
            row = tx.one(_SELECT_SWEEP + " WHERE sweep_id = ?", (sweep_id,))
            if row is not None:
                return _sweep(row), False
            _prune_sweeps(tx)
            tx.run(
                "INSERT INTO sweeps (sweep_id, slot, trigger, state, created_at)"
                " VALUES (?, ?, ?, 'queued', ?)",
                (sweep_id, slot, trigger, now),
            )
            return Sweep(sweep_id, slot, trigger, "queued", now), True

        return self._engine.transact(body)

    def claim_sweep(
        self, owner: Owner, now: float, lease_s: float, sweep_id: str | None = None
    ) -> Sweep | None:
        """Takes a queued sweep (the oldest, or ``sweep_id``), or one whose owner's lease ran
        out: one owner at a time, across every process on the state. A sweep claimed
        ``SWEEP_MAX_ATTEMPTS`` times already is failed instead."""
        claimable = (
            "SELECT sweep_id, attempts FROM sweeps WHERE (state = 'queued'"
            " OR (state = 'running' AND lease_until < ?))"
        )
        parameters: tuple[Any, ...] = (now,)
        find = claimable
        if sweep_id is not None:
            find, parameters = claimable + " AND sweep_id = ?", (now, sweep_id)
        find += " ORDER BY created_at, sweep_id LIMIT 1"

        def body(tx: Tx) -> Sweep | None:
            while True:
                row = tx.one(find, parameters)
                if row is None:
                    return None
                claimed, attempts = row
                if attempts >= SWEEP_MAX_ATTEMPTS:
                    error = {
                        "reason": f"the sweep stopped unfinished {attempts} times; not retried"
                    }
                    tx.run(
                        "UPDATE sweeps SET state = 'failed', error = ?, finished_at = ?,"
                        " owner = NULL, lease_until = NULL WHERE sweep_id = ?",
                        (json.dumps(error), now, claimed),
                    )
                    continue
                tx.run(
                    "UPDATE sweeps SET state = 'running', attempts = attempts + 1, owner = ?,"
                    " owner_host = ?, owner_pid = ?, lease_until = ?,"
                    " started_at = coalesce(started_at, ?) WHERE sweep_id = ?",
                    (owner.worker_id, owner.host, owner.pid, now + lease_s, now, claimed),
                )
                return _sweep_by_id(tx, claimed)

        return self._engine.transact(body)

    def renew_sweep(self, sweep_id: str, owner: Owner, lease_until: float) -> bool:
        """False once this owner no longer holds the sweep (another worker took it over)."""
        sql = (
            "UPDATE sweeps SET lease_until = ? WHERE sweep_id = ? AND owner = ?"
            " AND state = 'running'"
        )
        parameters = (lease_until, sweep_id, owner.worker_id)
        return self._engine.transact(lambda tx: tx.run(sql, parameters) == 1)

    def record_sweep_result(
        self,
        sweep_id: str,
        owner: Owner,
        eval_id: str,
        status: str,
        eval_run_id: str | None,
        result: dict[str, Any],
        now: float,
    ) -> bool:
        """Records one eval's outcome while this owner holds the sweep (False otherwise). An
        eval already recorded keeps its first record: its run was written under the same
        derived ids either way."""

        def body(tx: Tx) -> bool:
            held = tx.one(
                "SELECT 1 FROM sweeps WHERE sweep_id = ? AND owner = ? AND state = 'running'",
                (sweep_id, owner.worker_id),
            )
            if held is None:
                return False
            tx.run(
                "INSERT INTO sweep_results (sweep_id, eval_id, status, eval_run_id, result,"
                " recorded_at) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (sweep_id, eval_id) DO NOTHING",
                (sweep_id, eval_id, status, eval_run_id, json.dumps(result), now),
            )
            return True

        return self._engine.transact(body)

    def shard_status(self, sweep_id: str, shard: tuple[int, int]) -> ShardRecord:
        """Whether this shard of the slot is recorded already (a retried pod need not run
        its evals again), and how many of its shards are."""

        def body(tx: Tx) -> ShardRecord:
            row = tx.one(_SELECT_SWEEP + " WHERE sweep_id = ?", (sweep_id,))
            if row is None:
                return ShardRecord(None, 0, False)
            done, recorded = _shards(tx, sweep_id, shard)
            return ShardRecord(_sweep(row), done, recorded)

        return self._engine.transact(body)

    def record_shard(
        self,
        sweep_id: str,
        slot: str,
        shard: tuple[int, int],
        results: Sequence[tuple[str, str, str | None, dict[str, Any]]],
        started_at: float,
        now: float,
        *,
        stale_after_s: float | None = None,
    ) -> ShardRecord:
        """Records one shard (index, count) of a slot run as shards: its evals' outcomes
        (eval id, status, eval run id, result; an eval already recorded keeps its first
        record) and the shard itself, once however often it is retried.

        The slot's sweep is created ``sharded`` by its first shard: no worker claims it.
        That shard also fails the ``sharded`` sweeps created more than ``stale_after_s``
        before (shards that never all recorded), returned in ``stale`` for their summary
        runs. A sweep in any other state (a worker's, or ended) is left as it is. When
        ``done`` reaches the count and the sweep is still ``sharded``, the caller writes the
        summary run, then calls ``finish_shards``. ShardMismatch: the slot's other shards
        were recorded with another count."""
        index, count = shard

        def body(tx: Tx) -> ShardRecord:
            stale: list[tuple[Sweep, int, int]] = []
            row = tx.one(_SELECT_SWEEP + " WHERE sweep_id = ?", (sweep_id,))
            if row is None:
                if stale_after_s is not None:
                    stale = _fail_stale_shards(tx, now - stale_after_s, now)
                _prune_sweeps(tx)
                tx.run(
                    "INSERT INTO sweeps (sweep_id, slot, trigger, state, created_at, started_at)"
                    " VALUES (?, ?, 'shards', 'sharded', ?, ?) ON CONFLICT (sweep_id) DO NOTHING",
                    (sweep_id, slot, now, started_at),
                )
            else:
                known = _sweep(row)
                if known.state != "sharded":
                    done, recorded = _shards(tx, sweep_id, shard)
                    return ShardRecord(known, done, recorded)
                if started_at < (known.started_at or now):
                    tx.run(
                        "UPDATE sweeps SET started_at = ? WHERE sweep_id = ?",
                        (started_at, sweep_id),
                    )
            _shards(tx, sweep_id, shard)  # the same N as the others, or refused
            tx.run_many(
                "INSERT INTO sweep_results (sweep_id, eval_id, status, eval_run_id, result,"
                " recorded_at) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (sweep_id, eval_id) DO NOTHING",
                [
                    (sweep_id, eval_id, status, run_id, json.dumps(result), now)
                    for eval_id, status, run_id, result in results
                ],
            )
            tx.run(
                "INSERT INTO sweep_shards (sweep_id, shard_count, shard_index, recorded_at)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (sweep_id, shard_count, shard_index) DO NOTHING",
                (sweep_id, count, index, now),
            )
            done, _ = _shards(tx, sweep_id, shard)
            return ShardRecord(_sweep_by_id(tx, sweep_id), done, True, stale)

        return self._engine.transact(body)

    def finish_shards(self, sweep_id: str, summary: dict[str, Any], now: float) -> bool:
        """Marks a sharded sweep finished with its summary (False if it was already)."""
        sql = (
            "UPDATE sweeps SET state = 'finished', summary = ?, finished_at = ?"
            " WHERE sweep_id = ? AND state = 'sharded'"
        )
        parameters = (json.dumps(summary), now, sweep_id)
        return self._engine.transact(lambda tx: tx.run(sql, parameters) == 1)

    def sweep_results(self, sweep_id: str) -> list[SweepResult]:
        rows = self._read(
            "SELECT eval_id, status, eval_run_id, result, recorded_at FROM sweep_results"
            " WHERE sweep_id = ? ORDER BY recorded_at, eval_id",
            (sweep_id,),
        )
        return [SweepResult(e, s, r, json.loads(j), t) for e, s, r, j, t in rows]

    def finish_sweep(
        self, sweep_id: str, owner: Owner, summary: dict[str, Any], now: float
    ) -> bool:
        """Marks the sweep finished with its summary; False if this owner no longer holds
        it. A finished sweep is never claimed again."""
        sql = (
            "UPDATE sweeps SET state = 'finished', summary = ?, error = NULL,"
            " finished_at = ?, owner = NULL, lease_until = NULL"
            " WHERE sweep_id = ? AND owner = ? AND state = 'running'"
        )
        parameters = (json.dumps(summary), now, sweep_id, owner.worker_id)
        return self._engine.transact(lambda tx: tx.run(sql, parameters) == 1)

    def release_sweep(
        self,
        sweep_id: str,
        owner: Owner,
        *,
        count_attempt: bool,
        error: dict[str, Any] | None = None,
    ) -> bool:
        """Puts a sweep this owner holds back in the queue, to be resumed by whoever claims
        it next: after its process died (``count_attempt``) or at shutdown (not counted)."""
        sql = (
            "UPDATE sweeps SET state = 'queued', owner = NULL, lease_until = NULL,"
            " attempts = greatest(0, attempts - ?), error = coalesce(?, error)"
            " WHERE sweep_id = ? AND owner = ? AND state = 'running'"
        )
        parameters = (
            0 if count_attempt else 1,
            json.dumps(error) if error is not None else None,
            sweep_id,
            owner.worker_id,
        )
        return self._engine.transact(lambda tx: tx.run(sql, parameters) == 1)

    def recover_sweeps(
        self, owner: Owner, now: float, alive: Callable[[int], bool] = pid_alive
    ) -> list[str]:
        """At start: sweeps left running by a dead worker process of this host go back to
        the queue at once (the attempt counts); others' wait for their lease."""

        def body(tx: Tx) -> list[str]:
            recovered: list[str] = []
            rows = tx.all(
                "SELECT sweep_id, owner_pid FROM sweeps WHERE state = 'running'"
                " AND owner_host = ? AND owner != ?",
                (owner.host, owner.worker_id),
            )
            for sweep_id, pid in rows:
                if pid is not None and alive(pid):
                    continue
                tx.run(
                    "UPDATE sweeps SET state = 'queued', owner = NULL, lease_until = NULL"
                    " WHERE sweep_id = ?",
                    (sweep_id,),
                )
                recovered.append(sweep_id)
            return recovered

        return self._engine.transact(body)

    def get_sweep(self, sweep_id: str) -> Sweep | None:
        rows = self._read(_SELECT_SWEEP + " WHERE sweep_id = ?", (sweep_id,))
        return _sweep(rows[0]) if rows else None

    def last_sweep(self) -> Sweep | None:
        """The sweep that ended last (finished or failed)."""
        rows = self._read(
            _SELECT_SWEEP + " WHERE state IN ('finished', 'failed')"
            " ORDER BY finished_at DESC LIMIT 1"
        )
        return _sweep(rows[0]) if rows else None

    def sweep_counts(self) -> dict[str, int]:
        counts = {"queued": 0, "running": 0, "finished": 0, "failed": 0, "sharded": 0}
        for state, count in self._read("SELECT state, count(*) FROM sweeps GROUP BY state"):
            counts[state] = count
        return counts
