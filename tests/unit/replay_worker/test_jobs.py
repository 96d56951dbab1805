"""The job runner with real replay processes and a real state store: jobs outlive their
worker, workers on one store share them, a replay process that dies or hangs fails only its
own job, and no replay process outlives its worker. No model is reached: the collector here
is either absent (the job fails at once, 503) or a socket that never answers (it hangs)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replay_worker.jobs import JobRunner
from replay_worker.settings import WorkerSettings
from replay_worker.state import pid_alive
from tests.fakes import ManualClock, free_port
from tests.waiting import wait_until_async

RUN = "a" * 32


@pytest.fixture
def silent_collector() -> Iterator[str]:
    """Accepts connections (the kernel's backlog) and never answers a request."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


def settings(tmp_path: Path, collector_url: str, **overrides: Any) -> WorkerSettings:
    values: dict[str, Any] = dict(
        data_dir=tmp_path / "worker",
        collector_url=collector_url,
        model_base_url="http://127.0.0.1:9/v1",
        concurrency=1,
        shutdown_grace_s=0,
    )
    values.update(overrides)
    return WorkerSettings(**values)


async def running_pid(runner: JobRunner, job_id: str) -> int:
    """The replay process of a job once it runs (real time: real processes)."""
    pool = runner.pool
    assert pool is not None
    return await wait_until_async(
        lambda: pool.pids().get(job_id), timeout_s=30, what=f"job {job_id}'s replay process"
    )


def test_jobs_and_webhook_ids_survive_a_worker_restart(tmp_path: Path) -> None:
    config = settings(tmp_path, f"http://127.0.0.1:{free_port()}")

    async def scenario() -> None:
        first = JobRunner(config)
        await first.start()
        job, created = await first.submit("msg_1", RUN, None, {})
        assert created
        finished = await first.wait(job.job_id, 60)
        assert finished is not None and finished.state == "failed"
        assert finished.error is not None and finished.error["status"] == 503
        await first.stop()

        second = JobRunner(config)
        await second.start()
        try:
            again = await second.get(job.job_id)
            assert again is not None and again.to_json() == finished.to_json()
            same, created = await second.submit("msg_1", RUN, None, {})
            assert (same.job_id, created) == (job.job_id, False)
        finally:
            await second.stop()

    asyncio.run(scenario())


def test_two_workers_on_one_state_run_a_webhook_once(tmp_path: Path) -> None:
    config = settings(tmp_path, f"http://127.0.0.1:{free_port()}")

    async def scenario() -> None:
        left, right = JobRunner(config), JobRunner(config)
        await left.start()
        await right.start()
        try:
            job, created = await left.submit("msg_1", RUN, None, {})
            same, created_again = await right.submit("msg_1", RUN, None, {})
            assert created and not created_again
            assert same.job_id == job.job_id
            done = await right.wait(job.job_id, 60)
            assert done is not None and done.state == "failed" and done.attempts == 1
            assert (await left.get(job.job_id)) == done, "either worker answers for it"
            assert (await left.stats())["jobs"] == (await right.stats())["jobs"]
        finally:
            await left.stop()
            await right.stop()

    asyncio.run(scenario())


def test_a_dying_replay_process_fails_only_its_job_and_frees_its_slot(
    tmp_path: Path, silent_collector: str
) -> None:
    async def scenario() -> None:
        runner = JobRunner(settings(tmp_path, silent_collector))
        await runner.start()
        try:
            first, _ = await runner.submit("msg_1", RUN, None, {})
            first_pid = await running_pid(runner, first.job_id)
            os.kill(first_pid, signal.SIGKILL)
            failed = await runner.wait(first.job_id, 30)
            assert failed is not None and failed.state == "failed"
            assert failed.error == {
                "status": 500,
                "reason": "the replay process killed by signal SIGKILL during the job",
            }
            second, _ = await runner.submit("msg_2", RUN, None, {})
            second_pid = await running_pid(runner, second.job_id)
            assert second_pid != first_pid, "a new process in the freed slot"
            assert runner.pool is not None and runner.pool.stats.crashed == 1
        finally:
            await runner.stop()
        assert not pid_alive(second_pid), "no replay process outlives its worker"

    asyncio.run(scenario())


def test_a_job_interrupted_by_shutdown_runs_again_on_the_next_start(
    tmp_path: Path, silent_collector: str
) -> None:
    config = settings(tmp_path, silent_collector)

    async def scenario() -> None:
        runner = JobRunner(config)
        await runner.start()
        job, _ = await runner.submit("msg_1", RUN, None, {})
        pid = await running_pid(runner, job.job_id)
        await runner.stop()  # grace 0: the replay is killed, the job goes back to the queue
        assert not pid_alive(pid)
        after = JobRunner(config)
        assert (await after.get(job.job_id)).state == "queued"  # type: ignore[union-attr]
        await after.start()
        try:
            await running_pid(after, job.job_id)
            again = await after.get(job.job_id)
            assert again is not None and again.attempts == 1, "a shutdown uses no attempt"
        finally:
            await after.stop()

    asyncio.run(scenario())


def test_a_replay_past_its_timeout_is_killed_and_its_job_fails(
    tmp_path: Path, silent_collector: str
) -> None:
    async def scenario() -> None:
        runner = JobRunner(settings(tmp_path, silent_collector, job_timeout_s=1))
        await runner.start()
        try:
            job, _ = await runner.submit("msg_1", RUN, None, {})
            pid = await running_pid(runner, job.job_id)
            failed = await runner.wait(job.job_id, 30)
        finally:
            await runner.stop()
        assert failed is not None and failed.error == {
            "status": 500,
            "reason": "the replay did not finish within 1 s",
        }
        assert not pid_alive(pid)

    asyncio.run(scenario())


def test_jobs_and_the_day_follow_the_injected_clock(tmp_path: Path) -> None:
    clock = ManualClock(1_764_547_199.5)  # 2025-11-30T23:59:59.5Z
    config = settings(tmp_path, f"http://127.0.0.1:{free_port()}")

    async def scenario() -> None:
        runner = JobRunner(config, clock=clock)
        await runner.start()
        try:
            job, _ = await runner.submit("msg_1", RUN, None, {})
            assert job.created_at == clock.now
            assert (await runner.stats())["day"] == "2025-11-30"
            done = await runner.wait(job.job_id, 60)
            assert done is not None and done.started_at == done.finished_at == clock.now
            clock.advance(1)
            assert (await runner.stats())["day"] == "2025-12-01"
        finally:
            await runner.stop()

    asyncio.run(scenario())
