"""Worker replicas racing on one state, as separate processes released together by a barrier,
on each engine (``state_at``: a SQLite file, a PostgreSQL database): a webhook id starts one
job, a job is claimed by one replica, the day's budget is never exceeded, a sweep slot has
one owner and each eval result is recorded once, the shards of a slot finishing together
complete it once, and replicas starting together on an empty database all come up. Each process opens its own store, as a replica does."""

from __future__ import annotations

import multiprocessing
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from replay_worker.state import Owner, StateStore

T0 = 1_764_460_800.0  # 2025-11-30T00:00:00Z
REPLICAS = 8
_TIMEOUT_S = 90


def owner(n: int) -> Owner:
    return Owner(f"host{n}:{1000 + n}:r{n}", f"host{n}", 1000 + n)


def race(target: Any, *args: Any) -> list[Any]:
    """Runs ``target(n, barrier, *args, out)`` in REPLICAS processes; their results.

    Forked where the platform can (a spawned interpreter spends seconds importing psycopg
    when eight start at once on two cores); each process opens its own store, and a
    forked one leaves through ``os._exit``, never touching a connection of this one."""
    forks = "fork" in multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork") if forks else multiprocessing.get_context("spawn")
    barrier = context.Barrier(REPLICAS)
    out: multiprocessing.Queue[Any] = context.Queue()
    processes = [
        context.Process(target=target, args=(n, barrier, *args, out)) for n in range(REPLICAS)
    ]
    for process in processes:
        process.start()
    try:
        results = [out.get(timeout=_TIMEOUT_S) for _ in processes]
    finally:
        for process in processes:
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join()
    assert all(p.exitcode == 0 for p in processes), [p.exitcode for p in processes]
    return results


# -- the replicas ---------------------------------------------------------------------------


def _submit_same_hook(
    n: int, barrier: Barrier, where: Path | str, out: multiprocessing.Queue[Any]
) -> None:
    store = StateStore(where)
    barrier.wait()
    job, created = store.submit("msg_same", f"job_{n}", "a" * 32, None, {"t": "out"}, T0 + n)
    out.put((job.job_id, created))
    store.close()


def _claim_until_empty(
    n: int, barrier: Barrier, where: Path | str, out: multiprocessing.Queue[Any]
) -> None:
    store = StateStore(where)
    barrier.wait()
    claimed: list[str] = []
    while (job := store.claim(owner(n), T0 + 10, lease_s=30)) is not None:
        claimed.append(job.job_id)
    out.put(claimed)
    store.close()


def _reserve_until_refused(
    n: int, barrier: Barrier, where: Path | str, out: multiprocessing.Queue[Any]
) -> None:
    store = StateStore(where)
    barrier.wait()
    granted = 0
    # Some settle below, some above their reservation: the budget still caps reservations.
    while store.reserve("2025-11-30", None, 7, 700):
        granted += 1
        store.settle("2025-11-30", None, 7, 7 if granted % 3 else 0)
    out.put(granted)
    store.close()


def _run_the_slot(
    n: int, barrier: Barrier, where: Path | str, out: multiprocessing.Queue[Any]
) -> None:
    store = StateStore(where)
    me = owner(n)
    barrier.wait()
    _, created = store.submit_sweep("sweep_night", "2026-12-01T03:00:00Z", "schedule", T0)
    sweep = store.claim_sweep(me, T0, lease_s=30, sweep_id="sweep_night")
    recorded = []
    for eval_n in range(5):  # every replica tries; only the owner's records count
        eval_id = f"eval_{eval_n}"
        if store.record_sweep_result("sweep_night", me, eval_id, "passed", f"run{n}", {}, T0):
            recorded.append(eval_id)
    finished = store.finish_sweep("sweep_night", me, {"by": n}, T0 + 1)
    out.put((n, created, sweep is not None, recorded, finished))
    store.close()


def _take_over_expired_slot(
    n: int, barrier: Barrier, where: Path | str, out: multiprocessing.Queue[Any]
) -> None:
    store = StateStore(where)
    barrier.wait()
    sweep = store.claim_sweep(owner(n), T0 + 31, lease_s=30)
    out.put(None if sweep is None else (n, sweep.attempts))
    store.close()


def _open_at_once(
    n: int, barrier: Barrier, where: Path | str, out: multiprocessing.Queue[Any]
) -> None:
    barrier.wait()
    store = StateStore(where)  # creates the schema if nobody has yet
    _, created = store.submit(f"msg_{n}", f"job_{n}", "a" * 32, None, {}, T0)
    out.put(created)
    store.close()


def _record_a_shard(
    n: int, barrier: Barrier, where: Path | str, out: multiprocessing.Queue[Any]
) -> None:
    """Pod n of an Indexed Job of REPLICAS pods, all finishing at once."""
    store = StateStore(where)
    barrier.wait()
    results = [(f"eval_{n}", "passed", f"run_{n}", {"cost_usd": 0.25})]
    record = store.record_shard("sweep_shards", "job-1", (n + 1, REPLICAS), results, T0, T0)
    assert record.sweep is not None
    out.put((n, record.sweep.state, record.done))
    store.close()


# -- the tests ------------------------------------------------------------------------------


def test_replicas_sending_the_same_webhook_id_start_one_job(state_at: Path | str) -> None:
    StateStore(state_at).close()
    results = race(_submit_same_hook, state_at)
    assert sum(created for _, created in results) == 1, results
    (winner,) = {job_id for job_id, _ in results}
    assert StateStore(state_at).counts()["queued"] == 1
    assert winner.startswith("job_")


def test_replicas_claiming_together_run_each_job_once(state_at: Path | str) -> None:
    store = StateStore(state_at)
    jobs = [f"job_{i:02}" for i in range(24)]
    for i, job_id in enumerate(jobs):
        store.submit(f"msg_{i}", job_id, "a" * 32, None, {}, T0 + i)
    claimed = [
        job_id for per_replica in race(_claim_until_empty, state_at) for job_id in per_replica
    ]
    assert sorted(claimed) == jobs, "every job claimed, none twice"
    assert store.counts() == {"queued": 0, "running": 24, "succeeded": 0, "failed": 0}


def test_replicas_reserving_together_never_exceed_the_days_budget(state_at: Path | str) -> None:
    StateStore(state_at).close()
    granted = race(_reserve_until_refused, state_at)
    day = StateStore(state_at).day("2025-11-30")
    spent_nusd = round(day.spent_usd * 1e9)
    assert day.requests == sum(granted)
    refunded = sum(g // 3 for g in granted)  # every third settled at 0
    assert spent_nusd == 7 * (sum(granted) - refunded), "every charge counted once"
    # The last replica to stop was refused with nothing after it: the budget is used up.
    assert 700 - 7 < spent_nusd <= 700, "and never exceeded"


def test_a_slot_raced_by_replicas_has_one_owner_and_each_result_once(
    state_at: Path | str,
) -> None:
    StateStore(state_at).close()
    results = race(_run_the_slot, state_at)
    assert sum(created for _, created, _, _, _ in results) == 1
    owners = [(n, recorded, finished) for n, _, won, recorded, finished in results if won]
    assert len(owners) == 1, results
    (_, recorded, finished) = owners[0]
    assert recorded == [f"eval_{i}" for i in range(5)] and finished
    assert not any(r for _, _, won, r, f in results if not won and (r or f)), "no other wrote"
    store = StateStore(state_at)
    assert [r.eval_id for r in store.sweep_results("sweep_night")] == recorded
    sweep = store.get_sweep("sweep_night")
    assert sweep is not None and sweep.state == "finished" and sweep.attempts == 1


def test_the_shards_of_a_slot_finishing_together_complete_it_once(state_at: Path | str) -> None:
    StateStore(state_at).close()
    results = race(_record_a_shard, state_at)
    assert sorted(done for _, _, done in results) == list(range(1, REPLICAS + 1)), results
    assert all(state == "sharded" for _, state, _ in results)
    store = StateStore(state_at)
    recorded = sorted(r.eval_id for r in store.sweep_results("sweep_shards"))
    assert recorded == sorted(f"eval_{n}" for n in range(REPLICAS)), "every shard's result"


def test_an_expired_slot_is_taken_over_by_one_replica(state_at: Path | str) -> None:
    store = StateStore(state_at)
    store.submit_sweep("sweep_night", "s", "schedule", T0)
    assert store.claim_sweep(owner(99), T0, lease_s=30) is not None  # then its worker died
    takeovers = [r for r in race(_take_over_expired_slot, state_at) if r is not None]
    assert len(takeovers) == 1 and takeovers[0][1] == 2, takeovers
    sweep = store.get_sweep("sweep_night")
    assert sweep is not None and sweep.owner == owner(takeovers[0][0]).worker_id


def test_replicas_starting_together_on_an_empty_state_all_come_up(state_at: Path | str) -> None:
    assert race(_open_at_once, state_at) == [True] * REPLICAS
    assert StateStore(state_at).counts()["queued"] == REPLICAS
