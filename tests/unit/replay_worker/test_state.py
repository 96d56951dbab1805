"""The worker's state store on each engine, real SQLite and a real PostgreSQL server (the
``state_at`` fixture): jobs and webhook ids survive a reopen and are shared by every store on
the state, claims are exclusive, leases hand a dead worker's jobs over, and the day's budget
holds across processes. Time is passed in, never slept on."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from replay_worker.settings import WorkerSettings
from replay_worker.state import MAX_ATTEMPTS, Owner, StateStore, nusd

T0 = 1_764_460_800.0  # 2025-11-30T00:00:00Z
ME = Owner("hostA:100:aaaa", "hostA", 100)
OTHER = Owner("hostB:200:bbbb", "hostB", 200)


def store(state_at: Path | str, **kwargs: int) -> StateStore:
    return StateStore(state_at, **kwargs)


def test_jobs_and_webhook_ids_survive_a_reopen(state_at: Path | str) -> None:
    first = store(state_at)
    _, created = first.submit("msg_1", "job_1", "a" * 32, "gpt-4.1", {"t": "out"}, T0)
    assert created
    first.close()
    again = store(state_at)
    same, created = again.submit("msg_1", "job_other", "b" * 32, None, {}, T0 + 5)
    assert not created, "a webhook id seen before a restart starts nothing new"
    assert same.job_id == "job_1"
    loaded = again.get("job_1")
    assert loaded is not None
    assert (loaded.run_id, loaded.model, loaded.stubs, loaded.state, loaded.created_at) == (
        "a" * 32,
        "gpt-4.1",
        {"t": "out"},
        "queued",
        T0,
    )
    if isinstance(state_at, Path):
        assert state_at.stat().st_mode & 0o777 == 0o600


FORK = {
    "step": "call_book_1",
    "overrides": [{"kind": "tool_output", "call_id": "c", "output": "x"}],
}


def test_a_fork_job_keeps_its_fork_across_a_reopen_a_claim_and_the_cap(
    state_at: Path | str,
) -> None:
    first = store(state_at, max_jobs_kept=2)
    first.submit("msg_f", "job_f", "a" * 32, None, {}, T0, "exact", FORK)
    first.submit("msg_p", "job_p", "b" * 32, None, {}, T0 + 1)
    first.close()
    again = store(state_at, max_jobs_kept=2)
    claimed = again.claim(ME, T0 + 2, lease_s=30)
    assert claimed is not None and (claimed.job_id, claimed.fork) == ("job_f", FORK)
    plain = again.get("job_p")
    assert plain is not None and plain.fork is None
    again.finish("job_f", ME, "succeeded", {"verdict": "UNCHANGED"}, None, T0 + 3)
    finished = again.get("job_f")
    assert finished is not None and finished.to_json()["fork"] == FORK
    again.submit("msg_3", "job_3", "c" * 32, None, {}, T0 + 4)  # over the cap: job_f goes
    assert again.get("job_f") is None
    (count,) = again._engine.read("SELECT count(*) FROM job_forks")[0]
    assert count == 0, "its fork went with it"


def test_two_stores_on_one_file_share_jobs_and_claim_each_job_once(state_at: Path | str) -> None:
    left, right = store(state_at), store(state_at)
    left.submit("msg_1", "job_1", "a" * 32, None, {"t": "raw output"}, T0)
    duplicate, created = right.submit("msg_1", "job_2", "a" * 32, None, {}, T0)
    assert (duplicate.job_id, created) == ("job_1", False)
    claimed = right.claim(OTHER, T0 + 1, lease_s=30)
    assert claimed is not None and claimed.job_id == "job_1" and claimed.attempts == 1
    assert left.claim(ME, T0 + 1, lease_s=30) is None, "a claimed job is nobody else's"
    assert left.get("job_1").state == "running"  # type: ignore[union-attr]
    assert not left.finish("job_1", ME, "succeeded", {}, None, T0 + 2), "only its owner"
    assert right.finish("job_1", OTHER, "succeeded", {"verdict": "X"}, None, T0 + 2)
    done = left.get("job_1")
    assert done is not None and done.state == "succeeded" and done.result == {"verdict": "X"}
    assert done.stubs == {}, "the caller's stub outputs are not kept past the job"


def test_a_dead_workers_job_is_taken_over_when_its_lease_runs_out_then_failed(
    state_at: Path | str,
) -> None:
    state = store(state_at)
    state.submit("msg_1", "job_1", "a" * 32, None, {}, T0)
    assert state.claim(OTHER, T0, lease_s=30) is not None
    assert state.claim(ME, T0 + 29, lease_s=30) is None, "the lease still holds"
    state.renew(OTHER, ["job_1"], T0 + 60)
    assert state.claim(ME, T0 + 59, lease_s=30) is None, "renewed by its live owner"
    second = state.claim(ME, T0 + 61, lease_s=30)
    assert second is not None and second.attempts == 2
    assert not state.finish("job_1", OTHER, "succeeded", {}, None, T0 + 62), (
        "the old owner's late answer is dropped"
    )
    assert state.claim(OTHER, T0 + 92, lease_s=30) is None
    failed = state.get("job_1")
    assert failed is not None and failed.state == "failed"
    assert failed.error == {
        "status": 500,
        "reason": f"the worker running this job stopped {MAX_ATTEMPTS} times; not retried again",
    }


def test_at_start_jobs_of_a_dead_local_worker_are_requeued_at_once(state_at: Path | str) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    state = store(state_at)
    for n in (1, 2, 3):
        state.submit(f"msg_{n}", f"job_{n}", "a" * 32, None, {}, T0 + n)
    host = ME.host
    gone = Owner(f"{host}:{dead.pid}:dead", host, dead.pid)
    alive = Owner(f"{host}:{os.getpid()}:live", host, os.getpid())
    remote = Owner("elsewhere:1:x", "elsewhere", dead.pid)
    for owner in (gone, alive, remote):
        assert state.claim(owner, T0 + 10, lease_s=30) is not None
    assert state.recover(ME, T0 + 11) == ["job_1"], (
        "only the dead local owner's job: a live one, or one on another host, keeps it"
    )
    requeued = state.claim(ME, T0 + 12, lease_s=30)
    assert requeued is not None and requeued.job_id == "job_1" and requeued.attempts == 2


def test_a_job_interrupted_by_shutdown_goes_back_without_using_an_attempt(
    state_at: Path | str,
) -> None:
    state = store(state_at)
    state.submit("msg_1", "job_1", "a" * 32, None, {}, T0)
    state.claim(ME, T0, lease_s=30)
    assert state.release("job_1", ME)
    again = state.claim(OTHER, T0 + 1, lease_s=30)
    assert again is not None and again.attempts == 1


def test_only_finished_jobs_beyond_the_cap_are_forgotten_with_their_webhook_ids(
    state_at: Path | str,
) -> None:
    state = store(state_at, max_jobs_kept=2)
    state.submit("w1", "job_1", "a" * 32, None, {}, T0)
    state.claim(ME, T0, lease_s=30)
    state.finish("job_1", ME, "failed", None, {"status": 503, "reason": "x"}, T0 + 1)
    state.submit("w2", "job_2", "b" * 32, None, {}, T0 + 2)
    state.submit("w3", "job_3", "c" * 32, None, {}, T0 + 3)
    assert state.get("job_1") is None, "the oldest finished job is forgotten"
    state.submit("w4", "job_4", "d" * 32, None, {}, T0 + 4)
    assert state.get("job_2") is not None, "a queued job never is, even over the cap"
    again, created = state.submit("w1", "job_5", "a" * 32, None, {}, T0 + 5)
    assert created and again.job_id == "job_5", "its webhook id went with it"


def test_settle_charges_the_real_cost_on_the_reservation_day(state_at: Path | str) -> None:
    state = store(state_at)
    state.submit("w", "job_1", "a" * 32, None, {}, T0)
    assert state.reserve("2025-11-30", "job_1", 1_000, day_limit_nusd=10_000)
    state.settle("2025-11-30", "job_1", reserved_nusd=1_000, actual_nusd=2_500)
    day = state.day("2025-11-30")
    assert (nusd(day.spent_usd), nusd(day.overrun_usd), day.requests) == (2_500, 1_500, 1)
    job = state.get("job_1")
    assert job is not None
    assert (nusd(job.cost_usd), nusd(job.overrun_usd), job.model_requests) == (2_500, 1_500, 1)
    assert state.day("2025-12-01").spent_usd == 0


def _reserve_until_refused(
    where: Path | str, cost: int, limit: int, out: multiprocessing.Queue[int]
) -> None:
    state = StateStore(where)
    granted = 0
    while state.reserve("2025-11-30", None, cost, limit):
        granted += 1
    out.put(granted)


def test_processes_racing_for_the_day_budget_never_overspend(state_at: Path | str) -> None:
    StateStore(state_at).close()
    context = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue[int] = context.Queue()
    processes = [
        context.Process(target=_reserve_until_refused, args=(state_at, 7, 700, out))
        for _ in range(3)
    ]
    for process in processes:
        process.start()
    granted = [out.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(10)
    assert sum(granted) == 100, granted
    assert StateStore(state_at).day("2025-11-30").spent_usd == pytest.approx(700 / 1e9)


# --- where the state lives -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({}, Path(".afr/data/worker")),
        ({"AFR_DATA_DIR": "/srv/afr"}, Path("/srv/afr/worker")),
        ({"AFR_DATA_DIR": "/srv/afr", "AFR_WORKER_DATA_DIR": "/state"}, Path("/state")),
        ({"AFR_WORKER_DATA_DIR": "/state"}, Path("/state")),
    ],
)
def test_the_worker_keeps_its_state_in_the_data_dir_of_afr_up(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], expected: Path
) -> None:
    """`afr worker`, `afr eval run` and `--assist` read the state `afr up`'s worker writes
    (<AFR_DATA_DIR>/worker), so the day budget is one; AFR_WORKER_DATA_DIR names another."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert WorkerSettings().data_dir == expected
