"""Sweep slots in the state store: a sweep is claimed like a job (one owner, a lease,
``lease.py``), records each eval's outcome as it finishes and is finished once; a finished
slot never runs again (ADR 16). A slot run as shards (``afr eval run --shard I/N --slot``,
ADR 26) is recorded shard by shard and finished by its last one."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from replay_worker.state.base import StoreBase
from replay_worker.state.lease import Lease, Owner, pid_alive
from replay_worker.state_engines import Tx

__all__ = [
    "DEFAULT_MAX_SWEEPS_KEPT",
    "SWEEP_MAX_ATTEMPTS",
    "ShardMismatch",
    "ShardRecord",
    "Sweep",
    "SweepResult",
    "SweepState",
    "SweepsStore",
]

SweepState = Literal["queued", "running", "finished", "failed", "sharded"]
"""``sharded``: a slot run as shards (``afr eval run --shard I/N --slot``), not by a worker;
no worker claims it, its last shard finishes it."""
SWEEP_MAX_ATTEMPTS = 3
"""A sweep whose process died this many times is failed (each attempt resumes the last)."""
DEFAULT_MAX_SWEEPS_KEPT = 1_000

_LEASE = Lease("sweeps", "sweep_id")


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


class SweepsStore(StoreBase):
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

        return self._transact(body)

    def claim_sweep(
        self, owner: Owner, now: float, lease_s: float, sweep_id: str | None = None
    ) -> Sweep | None:
        """Takes a queued sweep (the oldest, or ``sweep_id``), or one whose owner's lease ran
        out: one owner at a time, across every process on the state. A sweep claimed
        ``SWEEP_MAX_ATTEMPTS`` times already is failed instead."""
        only = (" AND sweep_id = ?", (sweep_id,)) if sweep_id is not None else ("", ())

        def body(tx: Tx) -> Sweep | None:
            while True:
                row = _LEASE.claimable(tx, now, where=only[0], parameters=only[1])
                if row is None:
                    return None
                claimed, attempts, _ = row
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
                # A resumed sweep keeps the time it first started.
                _LEASE.take(tx, claimed, owner, now, lease_s, started_at="coalesce(started_at, ?)")
                return _sweep_by_id(tx, claimed)

        return self._transact(body)

    def renew_sweep(self, sweep_id: str, owner: Owner, lease_until: float) -> bool:
        """False once this owner no longer holds the sweep (another worker took it over)."""
        return self._transact(lambda tx: _LEASE.renew(tx, owner, sweep_id, lease_until))

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
                "SELECT 1 FROM sweeps WHERE " + _LEASE.held(), (sweep_id, owner.worker_id)
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

        return self._transact(body)

    def shard_status(self, sweep_id: str, shard: tuple[int, int]) -> ShardRecord:
        """Whether this shard of the slot is recorded already (a retried pod need not run
        its evals again), and how many of its shards are."""

        def body(tx: Tx) -> ShardRecord:
            row = tx.one(_SELECT_SWEEP + " WHERE sweep_id = ?", (sweep_id,))
            if row is None:
                return ShardRecord(None, 0, False)
            done, recorded = _shards(tx, sweep_id, shard)
            return ShardRecord(_sweep(row), done, recorded)

        return self._transact(body)

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

        return self._transact(body)

    def finish_shards(self, sweep_id: str, summary: dict[str, Any], now: float) -> bool:
        """Marks a sharded sweep finished with its summary (False if it was already)."""
        sql = (
            "UPDATE sweeps SET state = 'finished', summary = ?, finished_at = ?"
            " WHERE sweep_id = ? AND state = 'sharded'"
        )
        parameters = (json.dumps(summary), now, sweep_id)
        return self._write_one(sql, parameters)

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
            " finished_at = ?, owner = NULL, lease_until = NULL WHERE " + _LEASE.held()
        )
        parameters = (json.dumps(summary), now, sweep_id, owner.worker_id)
        return self._write_one(sql, parameters)

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
            " WHERE " + _LEASE.held()
        )
        parameters = (
            0 if count_attempt else 1,
            json.dumps(error) if error is not None else None,
            sweep_id,
            owner.worker_id,
        )
        return self._write_one(sql, parameters)

    def recover_sweeps(
        self, owner: Owner, now: float, alive: Callable[[int], bool] = pid_alive
    ) -> list[str]:
        """At start: sweeps left running by a dead worker process of this host go back to
        the queue at once (the attempt counts); others' wait for their lease."""

        def body(tx: Tx) -> list[str]:
            recovered: list[str] = []
            for sweep_id, _ in _LEASE.orphans(tx, owner, alive):
                _LEASE.requeue(tx, sweep_id)
                recovered.append(sweep_id)
            return recovered

        return self._transact(body)

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
