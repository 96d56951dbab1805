"""Sweeps without processes: the cron schedule and its slots (zones, catch-up), slot claims
on real SQLite shared by two stores, a sweep that records each eval once and resumes where
it stopped, and the scheduler loop on a clock the test moves (nothing sleeps)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from starlette.testclient import TestClient

from replay_worker.app import ReplayWorker
from replay_worker.evals.contract import EvalDocument, write_eval
from replay_worker.evals.runner import EvalOutcome, eval_trace_id
from replay_worker.hooks.signature import generate_secret
from replay_worker.schedule import Schedule, Slot, manual_slot, parse_schedule
from replay_worker.scheduler import ExecutionResult, SweepScheduler
from replay_worker.settings import WorkerSettings
from replay_worker.state import SWEEP_MAX_ATTEMPTS, Owner, ShardMismatch, StateStore, Sweep
from replay_worker.sweeps import SweepLost, SweepSummary, run_sweep, sweep_trace_id
from replay_worker.trigger import signed_headers
from tests.unit.replay_worker.test_eval_contract import document

A = Owner("hostA:100:aaaa", "hostA", 100)
B = Owner("hostB:200:bbbb", "hostB", 200)
DEAD_ON_A = Owner("hostA:2147483646:dead", "hostA", 2_147_483_646)  # no such pid
NIGHTLY = parse_schedule("0 3 * * *")


def at(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def epoch(year: int, month: int, day: int, hour: int = 0) -> float:
    return at(year, month, day, hour).timestamp()


class Clock:
    def __init__(self, moment: datetime) -> None:
        self.t = moment.timestamp()

    def __call__(self) -> float:
        return self.t


# -- the schedule ----------------------------------------------------------------------------


def test_the_default_schedule_is_three_in_the_morning_utc() -> None:
    assert WorkerSettings().sweep_cron == "0 3 * * *"
    assert NIGHTLY.zone.key == "UTC"
    assert NIGHTLY.latest(at(2026, 12, 1, 10)) == at(2026, 12, 1, 3)
    assert NIGHTLY.latest(at(2026, 12, 1, 3)) == at(2026, 12, 1, 3), "a slot is due at its instant"
    assert NIGHTLY.latest(at(2026, 12, 1, 2, 59, 59)) == at(2026, 11, 30, 3)
    assert NIGHTLY.next(at(2026, 12, 1, 3)) == at(2026, 12, 2, 3)


def test_a_zone_comes_from_the_setting_or_the_expression() -> None:
    paris = parse_schedule("0 3 * * *", "Europe/Paris")
    assert paris.latest(at(2026, 12, 1, 12)) == at(2026, 12, 1, 2), "03:00 CET is 02:00 UTC"
    assert paris.latest(at(2026, 7, 1, 12)) == at(2026, 7, 1, 1), "03:00 CEST is 01:00 UTC"
    prefixed = parse_schedule("CRON_TZ=Europe/Paris 0 3 * * *")
    assert prefixed.slot(at(2026, 12, 1, 2)) == paris.slot(at(2026, 12, 1, 2))
    # 02:30 does not exist in Paris on 2027-03-28: cron runs it when the clock jumps.
    half_past_two = parse_schedule("30 2 * * *", "Europe/Paris")
    assert half_past_two.next(at(2027, 3, 27, 12)) == at(2027, 3, 28, 1)


@pytest.mark.parametrize(
    ("expression", "zone", "reason"),
    [
        ("61 3 * * *", None, "bad sweep cron expression"),
        ("0 3 * *", None, "bad sweep cron expression"),
        ("0 3 * * *", "Mars/Olympus", "unknown time zone"),
        ("CRON_TZ=Europe/Paris 0 3 * * *", "Asia/Tokyo", "CRON_TZ=Europe/Paris"),
    ],
)
def test_a_bad_schedule_is_refused_at_start_up(
    expression: str, zone: str | None, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_schedule(expression, zone)
    with pytest.raises(ValidationError, match=reason):
        WorkerSettings(sweep_cron=expression, sweep_tz=zone)


def test_the_documented_environment_names_configure_sweeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AFR_SWEEP_CRON", "15 4 * * 1-5")
    monkeypatch.setenv("AFR_SWEEP_TZ", "America/New_York")
    monkeypatch.setenv("AFR_SWEEP_CATCHUP_S", "600")
    monkeypatch.setenv("AFR_SWEEP_ENABLED", "false")
    settings = WorkerSettings()
    assert (settings.sweep_cron, settings.sweep_tz, settings.sweep_catchup_s) == (
        "15 4 * * 1-5",
        "America/New_York",
        600.0,
    )
    assert settings.sweep_enabled is False
    monkeypatch.delenv("AFR_SWEEP_CRON")
    monkeypatch.setenv("AFR_WORKER_SWEEP_CRON", "0 1 * * *")
    assert WorkerSettings().sweep_cron == "0 1 * * *"


def test_a_missed_slot_is_due_only_within_the_catch_up_window() -> None:
    six_hours = 6 * 3600.0
    slot = NIGHTLY.slot(at(2026, 12, 1, 3))
    assert NIGHTLY.due(at(2026, 12, 1, 3), six_hours) == slot
    assert NIGHTLY.due(at(2026, 12, 1, 8, 59), six_hours) == slot, "down at 03:00, back at 08:59"
    assert NIGHTLY.due(at(2026, 12, 1, 9, 0, 1), six_hours) is None, "too late: wait for the next"
    hourly = parse_schedule("0 * * * *")
    assert hourly.due(at(2026, 12, 1, 9, 30), six_hours) == hourly.slot(at(2026, 12, 1, 9)), (
        "only the latest missed slot is caught up"
    )


def test_slot_ids_derive_from_the_schedule_and_the_instant() -> None:
    slot = NIGHTLY.slot(at(2026, 12, 1, 3))
    assert slot == NIGHTLY.slot(at(2026, 12, 1, 3))
    assert slot.label == "2026-12-01T03:00:00Z"
    assert slot.sweep_id.startswith("sweep_") and len(slot.sweep_id) == 22
    assert slot.sweep_id != NIGHTLY.slot(at(2026, 12, 2, 3)).sweep_id
    assert slot.sweep_id != parse_schedule("0 3 * * 1").slot(at(2026, 11, 30, 3)).sweep_id
    # A person naming the slot gets the same sweep; any other label is a manual slot.
    assert NIGHTLY.resolve("2026-12-01T03:00:00Z") == slot
    assert NIGHTLY.resolve("2026-12-01T04:00:00+01:00") == slot
    assert NIGHTLY.resolve("2026-12-01T04:00:00Z") == manual_slot("2026-12-01T04:00:00Z")
    assert NIGHTLY.resolve("rerun after the fix") == manual_slot("rerun after the fix")
    assert manual_slot("a").sweep_id != manual_slot("b").sweep_id


# -- slot claims in the state store ------------------------------------------------------------


def stores(state_at: Path | str) -> tuple[StateStore, StateStore]:
    return StateStore(state_at), StateStore(state_at)


T0 = epoch(2026, 12, 1, 3)


def test_a_slot_has_one_owner_and_a_dead_owners_slot_is_resumed(state_at: Path | str) -> None:
    left, right = stores(state_at)
    _, created = left.submit_sweep("sweep_1", "2026-12-01T03:00:00Z", "schedule", T0)
    same, again = right.submit_sweep("sweep_1", "2026-12-01T03:00:00Z", "hook", T0 + 1)
    assert created and not again and same.trigger == "schedule"
    claimed = left.claim_sweep(A, T0, lease_s=30)
    assert claimed is not None and claimed.attempts == 1 and claimed.started_at == T0
    assert right.claim_sweep(B, T0 + 10, lease_s=30) is None, "claimed: nobody else's"
    assert left.record_sweep_result("sweep_1", A, "eval_1", "passed", "r1", {"cost_usd": 1}, T0)
    assert not right.record_sweep_result("sweep_1", B, "eval_2", "passed", "r2", {}, T0)
    # A dies; its lease runs out and B resumes the slot.
    resumed = right.claim_sweep(B, T0 + 31, lease_s=30)
    assert resumed is not None and resumed.attempts == 2 and resumed.started_at == T0
    assert not left.renew_sweep("sweep_1", A, T0 + 60), "A learns it lost the slot"
    assert not left.record_sweep_result("sweep_1", A, "eval_2", "passed", "r2", {}, T0 + 32)
    assert not left.finish_sweep("sweep_1", A, {}, T0 + 33)
    assert [r.eval_id for r in right.sweep_results("sweep_1")] == ["eval_1"]
    assert right.record_sweep_result("sweep_1", B, "eval_1", "failed", "rX", {}, T0 + 34)
    (kept,) = right.sweep_results("sweep_1")
    assert (kept.status, kept.eval_run_id) == ("passed", "r1"), "an eval is recorded once"
    assert right.finish_sweep("sweep_1", B, {"passed": 1}, T0 + 40)
    for store, owner in ((left, A), (right, B)):
        assert store.claim_sweep(owner, T0 + 10_000, lease_s=30) is None, "finished: never again"
    done = left.get_sweep("sweep_1")
    assert done is not None and done.state == "finished" and done.summary == {"passed": 1}
    assert left.last_sweep() == done


def shard(store: StateStore, *args: Any, **kwargs: Any) -> tuple[Sweep, int]:
    """record_shard's sweep and count of shards recorded."""
    record = store.record_shard(*args, **kwargs)
    assert record.sweep is not None and record.recorded
    return record.sweep, record.done


def test_the_shards_of_a_slot_are_recorded_once_and_the_last_one_completes_it(
    state_at: Path | str,
) -> None:
    """`afr eval run --shard I/N --slot` in N pods on one shared state: each shard records its
    outcomes once however often it is retried; the one that completes the set learns it, and
    no worker ever claims the slot."""
    left, right = stores(state_at)
    first, done = shard(
        left,
        "sweep_k",
        "afr-sweep-1",
        (2, 3),
        [("eval_b", "passed", "rb", {"cost_usd": 0.5})],
        started_at=T0 + 5,
        now=T0 + 60,
    )
    assert (first.state, first.trigger, first.started_at, done) == ("sharded", "shards", T0 + 5, 1)
    # Shard 2 retried (a pod lost after recording): nothing twice, its first record kept.
    again, done = shard(
        right, "sweep_k", "afr-sweep-1", (2, 3), [("eval_b", "failed", "rX", {})], T0 + 70, T0 + 90
    )
    assert (
        again.state == "sharded"
        and done == 1
        and [(r.eval_id, r.status) for r in left.sweep_results("sweep_k")] == [("eval_b", "passed")]
    )
    assert right.claim_sweep(B, T0 + 100, lease_s=30) is None, "a sharded slot is no worker's"
    _, done = shard(
        right, "sweep_k", "afr-sweep-1", (1, 3), [("eval_a", "errored", None, {})], T0, T0 + 120
    )
    assert done == 2
    last, done = shard(
        left, "sweep_k", "afr-sweep-1", (3, 3), [("eval_c", "passed", "rc", {})], T0 + 2, T0 + 150
    )
    assert (last.state, done, last.started_at) == ("sharded", 3, T0), "the earliest start"
    assert sorted(r.eval_id for r in right.sweep_results("sweep_k")) == [
        "eval_a",
        "eval_b",
        "eval_c",
    ]
    assert left.finish_shards("sweep_k", {"passed": 2, "errored": 1}, T0 + 160)
    assert not right.finish_shards("sweep_k", {}, T0 + 170), "finished once"
    finished, done = shard(right, "sweep_k", "afr-sweep-1", (3, 3), [], T0, T0 + 200)
    assert (finished.state, finished.summary, done) == ("finished", {"passed": 2, "errored": 1}, 3)
    assert left.last_sweep() == finished
    assert left.sweep_counts()["finished"] == 1


def test_a_shard_with_another_count_is_refused_and_a_workers_sweep_is_left_alone(
    state_at: Path | str,
) -> None:
    store = StateStore(state_at)
    store.record_shard("sweep_n", "job-2", (1, 4), [("eval_a", "passed", "ra", {})], T0, T0)
    with pytest.raises(ShardMismatch, match="same N"):
        store.record_shard("sweep_n", "job-2", (1, 1), [("eval_b", "passed", "rb", {})], T0, T0)
    with pytest.raises(ShardMismatch):
        store.shard_status("sweep_n", (2, 3))
    assert [r.eval_id for r in store.sweep_results("sweep_n")] == ["eval_a"], "nothing of it"
    # A slot a worker runs (the same label, scheduled): shards record nothing into it.
    store.submit_sweep("sweep_w", "2026-12-01T03:00:00Z", "schedule", T0)
    assert store.claim_sweep(A, T0, lease_s=30) is not None
    record = store.record_shard("sweep_w", "x", (1, 1), [("eval_c", "failed", "rc", {})], T0, T0)
    assert record.sweep is not None and record.sweep.state == "running" and not record.recorded
    assert store.sweep_results("sweep_w") == []
    status = store.shard_status("sweep_none", (1, 2))
    assert (status.sweep, status.done, status.recorded) == (None, 0, False)
    store.close()


def test_a_night_whose_shards_never_all_recorded_is_failed_by_a_later_first_shard(
    state_at: Path | str,
) -> None:
    store = StateStore(state_at)
    day = 24 * 3600.0
    store.record_shard("sweep_d1", "job-d1", (1, 2), [("eval_a", "passed", "ra", {})], T0, T0)
    # The next night's first shard, past the timeout, fails the night before.
    store.record_shard("sweep_d2", "job-d2", (1, 2), [], T0 + day, T0 + day, stale_after_s=3600)
    old = store.get_sweep("sweep_d1")
    assert old is not None and old.state == "failed"
    assert old.error == {
        "kind": "incomplete",
        "reason": "1 of 2 shards recorded before the sweep timed out",
    }
    # A shard of the failed night that comes back late records nothing and finishes nothing.
    late = store.record_shard(
        "sweep_d1", "job-d1", (2, 2), [("eval_b", "passed", "rb", {})], T0, T0 + day
    )
    assert late.sweep is not None and late.sweep.state == "failed" and late.done == 1
    record = store.record_shard(
        "sweep_d3", "job-d3", (1, 2), [], T0 + 2 * day, T0 + 2 * day, stale_after_s=3600
    )
    ((stale, done, count),) = record.stale
    assert (stale.sweep_id, done, count) == ("sweep_d2", 1, 2)
    store.close()


def test_a_state_of_the_previous_release_gains_the_shards_table_and_stays_readable_by_it(
    state_at: Path | str,
) -> None:
    """A worker state written before sharded slots gains their table when opened, and keeps
    the schema version the previous release accepts (it refuses a higher one): replicas of
    both releases share it during a rolling update, and a rollback still starts."""
    StateStore(state_at).close()
    if isinstance(state_at, Path):
        import sqlite3

        def versions() -> list[Any]:
            with sqlite3.connect(state_at) as db:
                found = [db.execute("PRAGMA user_version").fetchone()[0]]
            db.close()
            return found

        with sqlite3.connect(state_at) as db:
            db.execute("DROP TABLE sweep_shards")
        db.close()
        expected: list[Any] = [1]
    else:
        import psycopg

        def versions() -> list[Any]:
            with psycopg.connect(state_at) as conn:
                return conn.execute("SELECT key, value FROM afr_state_meta ORDER BY key").fetchall()

        with psycopg.connect(state_at, autocommit=True) as conn:
            conn.execute("DROP TABLE sweep_shards")
            conn.execute("DELETE FROM afr_state_meta WHERE key = 'schema_level'")  # as 0.1.0
        expected = [("schema_level", 3), ("schema_version", 1)]
    upgraded = StateStore(state_at)
    _, done = shard(upgraded, "sweep_u", "s", (1, 1), [("e", "passed", "r", {})], T0, T0)
    assert done == 1
    upgraded.close()
    assert versions() == expected


def test_slots_survive_a_restart_and_a_dead_worker_of_this_host_is_recovered_at_once(
    state_at: Path | str,
) -> None:
    first = StateStore(state_at)
    first.submit_sweep("sweep_1", "s", "schedule", T0)
    assert first.claim_sweep(DEAD_ON_A, T0, lease_s=3600) is not None
    first.record_sweep_result("sweep_1", DEAD_ON_A, "eval_1", "passed", "r1", {}, T0)
    first.close()
    restarted = StateStore(state_at)
    assert restarted.claim_sweep(A, T0 + 1, lease_s=30) is None, "its lease still runs"
    assert restarted.recover_sweeps(A, T0 + 1) == ["sweep_1"], "but its process is gone"
    resumed = restarted.claim_sweep(A, T0 + 1, lease_s=30)
    assert resumed is not None and resumed.attempts == 2
    assert [r.eval_id for r in restarted.sweep_results("sweep_1")] == ["eval_1"]


def test_a_slot_that_keeps_dying_fails_and_a_shutdown_costs_no_attempt(
    state_at: Path | str,
) -> None:
    store = StateStore(state_at)
    store.submit_sweep("sweep_1", "s", "hook", T0)
    store.claim_sweep(A, T0, lease_s=30)
    assert store.release_sweep("sweep_1", A, count_attempt=False)
    for attempt in range(1, SWEEP_MAX_ATTEMPTS + 1):
        claimed = store.claim_sweep(A, T0, lease_s=30)
        assert claimed is not None and claimed.attempts == attempt
        store.release_sweep("sweep_1", A, count_attempt=True, error={"reason": "killed"})
    assert store.claim_sweep(A, T0, lease_s=30) is None
    failed = store.get_sweep("sweep_1")
    assert failed is not None and failed.state == "failed"
    assert "3 times" in str(failed.error)
    assert store.sweep_counts() == {
        "queued": 0,
        "running": 0,
        "finished": 0,
        "failed": 1,
        "sharded": 0,
    }


# -- running a sweep ---------------------------------------------------------------------------


def evals_dir(tmp_path: Path, count: int = 3) -> tuple[Path, list[EvalDocument]]:
    directory = tmp_path / "evals"
    directory.mkdir()
    documents = [document(name=f"eval {n}") for n in range(count)]
    for doc in documents:
        write_eval(doc, directory)
    return directory, documents


class Evals:
    """A stand-in for running evals: records each run; fails where told to."""

    def __init__(self, statuses: dict[str, str] | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.statuses = statuses or {}
        self.crash_on: str | None = None
        self.summaries: list[SweepSummary] = []

    async def run_one(
        self, path: Path, doc: EvalDocument, sweep_id: str, trace_id: str
    ) -> EvalOutcome:
        self.calls.append((doc.id, trace_id))
        if doc.id == self.crash_on:
            self.crash_on = None
            raise RuntimeError("the sweep process was killed")
        return EvalOutcome(
            eval_id=doc.id,
            name=doc.name,
            path=str(path),
            status=self.statuses.get(doc.id, "passed"),  # type: ignore[arg-type]
            verdict="FAILURE_FIXED",
            eval_run_id=trace_id.removeprefix("trace_"),
            cost_usd=0.25,
            duration_s=0.1,
        )

    async def emit(self, summary: SweepSummary) -> None:
        self.summaries.append(summary)

    def sweep(
        self, store: StateStore, owner: Owner, directory: Path, clock: Callable[[], float]
    ) -> Callable[[Sweep], Coroutine[Any, Any, SweepSummary]]:
        async def run(sweep: Sweep) -> SweepSummary:
            return await run_sweep(
                sweep,
                store=store,
                owner=owner,
                evals_dir=directory,
                run_one=self.run_one,
                emit_summary=self.emit,
                clock=clock,
            )

        return run


def test_a_sweep_runs_each_eval_under_derived_ids_and_links_its_summary(tmp_path: Path) -> None:
    directory, documents = evals_dir(tmp_path)
    (directory / "broken.json").write_text("{not json")
    failing = documents[1].id
    evals = Evals({failing: "failed"})
    store = StateStore(tmp_path / "state.sqlite")
    clock = Clock(at(2026, 12, 1, 3))
    store.submit_sweep("sweep_1", "2026-12-01T03:00:00Z", "schedule", clock())
    claimed = store.claim_sweep(A, clock(), lease_s=30)
    assert claimed is not None
    clock.t += 90
    summary = asyncio.run(evals.sweep(store, A, directory, clock)(claimed))
    assert sorted(evals.calls) == sorted((d.id, eval_trace_id("sweep_1", d.id)) for d in documents)
    assert summary.counts == {"passed": 2, "failed": 1, "inconclusive": 0, "errored": 1}
    assert summary.evals == 4 and not summary.ok
    assert summary.cost_usd == pytest.approx(0.75)
    assert summary.duration_s == pytest.approx(90)
    assert summary.sweep_run_id == sweep_trace_id("sweep_1").removeprefix("trace_")
    assert summary.linked_runs == {
        d.id: eval_trace_id("sweep_1", d.id).removeprefix("trace_") for d in documents
    }
    (broken,) = [r for r in summary.results if r["status"] == "errored"]
    assert broken["eval_id"] == "invalid:broken.json" and "not JSON" in broken["error"]
    assert evals.summaries == [summary]
    finished = store.get_sweep("sweep_1")
    assert finished is not None and finished.state == "finished"
    assert finished.summary == json.loads(json.dumps(summary.to_json()))


def test_a_sweep_stopped_midway_resumes_without_running_a_recorded_eval_again(
    tmp_path: Path,
) -> None:
    directory, documents = evals_dir(tmp_path)
    store = StateStore(tmp_path / "state.sqlite")
    clock = Clock(at(2026, 12, 1, 3))
    evals = Evals()
    ordered = sorted(documents, key=lambda d: str(directory / f"{d.id}.json"))
    evals.crash_on = ordered[1].id
    store.submit_sweep("sweep_1", "s", "schedule", clock())
    first = store.claim_sweep(A, clock(), lease_s=30)
    assert first is not None
    with pytest.raises(RuntimeError, match="killed"):
        asyncio.run(evals.sweep(store, A, directory, clock)(first))
    assert [r.eval_id for r in store.sweep_results("sweep_1")] == [ordered[0].id]
    # The worker died with it: its lease runs out and another worker takes the slot over.
    other = StateStore(tmp_path / "state.sqlite")
    clock.t += 31
    second = other.claim_sweep(B, clock(), lease_s=30)
    assert second is not None
    summary = asyncio.run(evals.sweep(other, B, directory, clock)(second))
    ran = [eval_id for eval_id, _ in evals.calls]
    assert ran == [ordered[0].id, ordered[1].id, ordered[1].id, ordered[2].id], (
        "the recorded eval is skipped; the one cut short runs again, under the same trace id"
    )
    assert len({trace_id for _, trace_id in evals.calls}) == 3
    assert summary.counts["passed"] == 3 and len(evals.summaries) == 1
    # The first owner, had it lived on, could no longer record anything.
    with pytest.raises(SweepLost):
        asyncio.run(evals.sweep(store, A, directory, clock)(first))


# -- the scheduler loop ------------------------------------------------------------------------


class StopLoop(Exception):
    pass


class World:
    """Virtual time shared by the schedulers under test: it moves only when every one of
    them sleeps, to the earliest wake-up, so none sees time jump in the middle of its work.
    Sweeps run in-process and take no time."""

    def __init__(
        self,
        tmp_path: Path,
        start: datetime,
        until: datetime,
        state_at: Path | str | None = None,
    ) -> None:
        self.clock = Clock(start)
        self.until = until.timestamp()
        self.directory, self.documents = evals_dir(tmp_path)
        self.path = state_at if state_at is not None else tmp_path / "state.sqlite"
        self.evals = Evals()
        self.executed: list[str] = []
        self.participants = 1
        self.stopped = False
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    async def sleep(self, delay_s: float) -> None:
        if self.stopped:
            raise StopLoop
        entry = (self.clock.t + max(delay_s, 0.001), asyncio.get_running_loop().create_future())
        self._sleepers.append(entry)
        try:
            self._advance()
            await entry[1]
        finally:
            if entry in self._sleepers:
                self._sleepers.remove(entry)

    def _advance(self) -> None:
        if len(self._sleepers) < self.participants:
            return
        wake_at = min(w for w, _ in self._sleepers)
        if wake_at > self.until:
            self.stopped = True
            for _, future in self._sleepers:
                future.set_exception(StopLoop())
            return
        self.clock.t = max(self.clock.t, wake_at)
        for w, future in self._sleepers:
            if w <= self.clock.t:
                future.set_result(None)

    def scheduler(
        self,
        owner: Owner,
        *,
        schedule: Schedule = NIGHTLY,
        execute: Callable[[Sweep], Awaitable[ExecutionResult]] | None = None,
        **kwargs: Any,
    ) -> SweepScheduler:
        store = StateStore(self.path)
        run = self.evals.sweep(store, owner, self.directory, self.clock)

        async def in_process(sweep: Sweep) -> ExecutionResult:
            self.executed.append(sweep.sweep_id)
            summary = await run(sweep)
            return ExecutionResult("finished", summary=summary.to_json())

        return SweepScheduler(
            store,
            owner,
            execute or in_process,
            schedule=schedule,
            clock=self.clock,
            sleep=self.sleep,
            poll_s=kwargs.pop("poll_s", 1800.0),  # simulated days: few idle ticks
            **kwargs,
        )


def run_until_stopped(world: World, *schedulers: SweepScheduler) -> None:
    world.participants = len(schedulers)

    async def main() -> None:
        results = await asyncio.gather(
            *(s.run_forever() for s in schedulers), return_exceptions=True
        )
        for result in results:
            if not isinstance(result, StopLoop):
                raise AssertionError(f"the loop ended with {result!r}")

    asyncio.run(main())


def test_each_slot_runs_once_even_with_two_workers_on_one_state(
    tmp_path: Path, state_at: Path | str
) -> None:
    world = World(tmp_path, at(2026, 12, 1, 2, 0), until=at(2026, 12, 3, 1, 0), state_at=state_at)
    run_until_stopped(world, world.scheduler(A), world.scheduler(B))
    slots = [NIGHTLY.slot(at(2026, 12, 1, 3)), NIGHTLY.slot(at(2026, 12, 2, 3))]
    assert world.executed == [s.sweep_id for s in slots], "two nights, one sweep each"
    assert len(world.evals.calls) == 6, "three evals a night, each once"
    store = StateStore(world.path)
    for slot in slots:
        sweep = store.get_sweep(slot.sweep_id)
        assert sweep is not None and sweep.state == "finished" and sweep.slot == slot.label
        assert sweep.started_at == epoch(2026, int(slot.label[5:7]), int(slot.label[8:10]), 3)
        assert len(store.sweep_results(slot.sweep_id)) == 3


@pytest.mark.parametrize(
    ("back_at", "runs"), [(at(2026, 12, 1, 8, 30), True), (at(2026, 12, 1, 9, 30), False)]
)
def test_a_worker_that_was_down_at_three_catches_up_within_the_window(
    tmp_path: Path, back_at: datetime, runs: bool
) -> None:
    world = World(tmp_path, back_at, until=back_at + timedelta(minutes=10))
    run_until_stopped(world, world.scheduler(A, catchup_s=6 * 3600))
    missed = NIGHTLY.slot(at(2026, 12, 1, 3)).sweep_id
    assert world.executed == ([missed] if runs else [])


def test_the_same_slot_triggered_twice_yields_one_set_of_results(tmp_path: Path) -> None:
    world = World(tmp_path, at(2026, 12, 1, 2, 59), until=at(2026, 12, 1, 4))
    scheduler = world.scheduler(A)
    slot: Slot = NIGHTLY.resolve("2026-12-01T03:00:00Z")  # a hook naming tonight's slot

    async def main() -> None:
        _, created = await scheduler.submit(slot, "hook")
        assert created
        await scheduler.tick()
        _, created = await scheduler.submit(slot, "hook")
        assert not created
        with pytest.raises(StopLoop):
            await scheduler.run_forever()  # 03:00 comes: the slot is already done

    asyncio.run(main())
    assert world.executed == [slot.sweep_id]
    assert len(world.evals.calls) == 3 and len(world.evals.summaries) == 1


def test_a_sweep_whose_process_dies_is_retried_then_failed(tmp_path: Path) -> None:
    world = World(tmp_path, at(2026, 12, 1, 3), until=at(2026, 12, 1, 3, 30))
    deaths: list[str] = []

    async def dies(sweep: Sweep) -> ExecutionResult:
        deaths.append(sweep.sweep_id)
        return ExecutionResult("crashed", "the sweep process was killed by signal SIGKILL")

    run_until_stopped(world, world.scheduler(A, execute=dies))
    assert len(deaths) == SWEEP_MAX_ATTEMPTS
    sweep = StateStore(world.path).get_sweep(deaths[0])
    assert sweep is not None and sweep.state == "failed"


def test_a_hook_with_sweeps_disabled_still_runs(tmp_path: Path) -> None:
    world = World(tmp_path, at(2026, 12, 1, 2), until=at(2026, 12, 1, 5))
    scheduler = world.scheduler(A, enabled=False)

    async def main() -> None:
        await scheduler.submit(manual_slot("by hand"), "hook")
        with pytest.raises(StopLoop):
            await scheduler.run_forever()

    asyncio.run(main())
    assert world.executed == [manual_slot("by hand").sweep_id], "and no scheduled slot ran"


def test_a_scheduler_that_dies_says_why(tmp_path: Path) -> None:
    class Broken(Schedule):
        def due(self, now: datetime, catchup_s: float) -> Slot | None:
            raise RuntimeError("clock went backwards")

    world = World(tmp_path, at(2026, 12, 1, 2), until=at(2026, 12, 1, 5))
    scheduler = world.scheduler(A, schedule=Broken(NIGHTLY.cron, NIGHTLY.zone))

    async def main() -> None:
        await scheduler.start()
        assert scheduler._task is not None
        await asyncio.wait({scheduler._task})

    asyncio.run(main())
    assert scheduler.failure is not None and "clock went backwards" in scheduler.failure


# -- the hook ----------------------------------------------------------------------------------


def test_the_signed_hook_queues_the_named_slot_once(tmp_path: Path) -> None:
    secret = generate_secret()
    settings = WorkerSettings(
        webhook_secret=secret, data_dir=tmp_path / "worker", evals_dir=tmp_path / "evals"
    )
    worker = ReplayWorker(settings)
    client = TestClient(worker.app())

    def post(payload: dict[str, Any] | None, webhook_id: str) -> Any:
        body = json.dumps(payload).encode() if payload is not None else b""
        return client.post(
            "/hooks/sweeps", content=body, headers=signed_headers(secret, body, webhook_id)
        )

    try:
        assert post({}, "msg_0").status_code == 409, "no evals directory"
        (tmp_path / "evals").mkdir()
        assert client.post("/hooks/sweeps", json={}).status_code == 401
        tonight = NIGHTLY.slot(at(2026, 12, 1, 3))
        first = post({"slot": "2026-12-01T03:00:00Z"}, "msg_1")
        again = post({"slot": "2026-12-01T03:00:00Z"}, "msg_2")
        assert first.status_code == again.status_code == 202
        assert first.json()["sweep_id"] == again.json()["sweep_id"] == tonight.sweep_id
        by_id = post(None, "msg_3").json()
        assert by_id["sweep_id"] == manual_slot("msg_3").sweep_id
        assert post(None, "msg_3").json()["sweep_id"] == by_id["sweep_id"], "re-delivered"
        assert post({"slot": 3}, "msg_4").status_code == 400
        status = client.get(f"/sweeps/{tonight.sweep_id}").json()
        assert (status["state"], status["slot"], status["trigger"]) == (
            "queued",
            tonight.label,
            "hook",
        )
        assert client.get("/sweeps/sweep_nope").status_code == 404
    finally:
        worker.jobs.store.close()
