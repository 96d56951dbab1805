"""The SQL interface's admission: queries wait for a slot instead of being refused, fairly
between users, and only a full queue or a wait past its bound is refused (code 202)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from collector.sqlapi.admission import (
    Admission,
    AdmissionLimits,
    memory_bytes,
    sized_concurrency,
)
from collector.sqlapi.errors import Code, SqlError, http_status

GiB = 1024**3


def _run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _limits(**overrides: Any) -> AdmissionLimits:
    values: dict[str, Any] = {
        "max_running": 2,
        "max_running_per_credential": 2,
        "max_queued": 8,
        "max_queued_per_credential": 8,
        "max_wait_s": 30.0,
    }
    values.update(overrides)
    return AdmissionLimits(**values)


def test_a_query_past_the_slots_waits_and_runs_when_one_frees() -> None:
    async def scenario() -> None:
        admission = Admission(_limits())
        await admission.acquire("grafana")
        await admission.acquire("grafana")
        third = asyncio.create_task(admission.acquire("grafana"))
        await _settle()
        assert not third.done() and admission.stats.queued == 1
        admission.release("grafana")
        await third
        assert (admission.stats.running, admission.stats.queued, admission.stats.waited) == (
            2,
            0,
            1,
        )

    _run(scenario())


def test_a_whole_dashboard_at_once_runs_every_query_in_arrival_order() -> None:
    async def scenario() -> None:
        admission = Admission(_limits(max_queued=16, max_queued_per_credential=16))
        order: list[int] = []

        async def panel(n: int) -> None:
            await admission.acquire("grafana")
            order.append(n)
            await asyncio.sleep(0)
            admission.release("grafana")

        await asyncio.gather(*(panel(n) for n in range(12)))
        assert order == list(range(12))
        assert admission.stats.running == 0 and admission.stats.refused_wait == 0

    _run(scenario())


def test_the_wait_is_bounded_and_refused_in_clickhouse_terms() -> None:
    async def scenario() -> None:
        admission = Admission(_limits(max_running=1, max_running_per_credential=1, max_wait_s=0.05))
        await admission.acquire("a")  # never released: a query stuck at its time cap
        with pytest.raises(SqlError) as refused:
            await admission.acquire("a")
        assert refused.value.code == Code.TOO_MANY_SIMULTANEOUS_QUERIES
        assert http_status(refused.value.code) == 503
        assert "Maximum: 1" in refused.value.message
        assert "queue_max_wait_ms=50" in refused.value.message
        assert (admission.stats.queued, admission.stats.refused_wait) == (0, 1)
        admission.release("a")
        await admission.acquire("a")  # the refused one left nothing behind

    _run(scenario())


def test_no_wait_configured_refuses_at_once() -> None:
    async def scenario() -> None:
        admission = Admission(_limits(max_running=1, max_running_per_credential=1, max_wait_s=0))
        await admission.acquire("a")
        with pytest.raises(SqlError, match="Maximum: 1"):
            await admission.acquire("a")

    _run(scenario())


@pytest.mark.parametrize(
    ("total", "per_user", "message"),
    [(3, 8, "the queue is full: 3"), (8, 2, "2 queries of this user wait already")],
)
def test_past_the_queue_bound_a_query_is_refused_at_once(
    total: int, per_user: int, message: str
) -> None:
    async def scenario() -> None:
        admission = Admission(
            _limits(
                max_running=1,
                max_running_per_credential=1,
                max_queued=total,
                max_queued_per_credential=per_user,
            )
        )
        await admission.acquire("a")
        waiting = [asyncio.create_task(admission.acquire("a")) for _ in range(min(total, per_user))]
        await _settle()
        with pytest.raises(SqlError, match=message):
            await admission.acquire("a")
        assert admission.stats.refused_queue_full == 1
        for _ in waiting:
            admission.release("a")
            await _settle()
        await asyncio.gather(*waiting)

    _run(scenario())


def test_one_user_cannot_take_every_slot_while_another_waits() -> None:
    async def scenario() -> None:
        admission = Admission(AdmissionLimits.sized(4, max_queued=64))
        assert admission.limits.max_running_per_credential == 3
        team_a = [asyncio.create_task(admission.acquire("team-a")) for _ in range(10)]
        await _settle()
        assert admission.running_for("team-a") == 3
        team_b = asyncio.create_task(admission.acquire("team-b"))
        await _settle()
        assert team_b.done(), "the other team waited behind a full share"
        # A slot freed by team a goes to the team running fewer queries first.
        team_c = asyncio.create_task(admission.acquire("team-c"))
        team_b2 = asyncio.create_task(admission.acquire("team-b"))
        await _settle()
        admission.release("team-a")
        await _settle()
        assert team_c.done() and not team_b2.done()
        for _ in range(20):
            for team in ("team-a", "team-b", "team-c"):
                if admission.running_for(team):
                    admission.release(team)
                    await _settle()
        await asyncio.gather(*team_a, team_b, team_c, team_b2)
        assert admission.stats.running == 0

    _run(scenario())


def test_a_client_that_leaves_while_waiting_leaves_no_slot_behind() -> None:
    async def scenario() -> None:
        admission = Admission(_limits(max_running=1, max_running_per_credential=1))
        await admission.acquire("a")
        gone = asyncio.create_task(admission.acquire("a"))
        await _settle()
        gone.cancel()
        await _settle()
        assert admission.stats.queued == 0
        admission.release("a")
        assert admission.stats.running == 0
        # Granted at the moment the client left: the slot comes back.
        await admission.acquire("a")
        granted_then_cancelled = asyncio.create_task(admission.acquire("a"))
        await _settle()
        admission.release("a")  # grants the waiter ...
        granted_then_cancelled.cancel()  # ... which is cancelled before it resumes
        await _settle()
        assert admission.stats.running == 0

    _run(scenario())


def test_a_release_without_a_slot_is_a_bug_not_a_silent_miscount() -> None:
    with pytest.raises(RuntimeError, match="release without a slot"):
        Admission(_limits()).release("a")


@pytest.mark.parametrize(
    ("cores", "budget", "per_query", "slots"),
    [
        (2, 6 * GiB, GiB, 4),  # two per core
        (16, 6 * GiB, GiB, 6),  # the memory budget holds six 1 GiB queries
        (1, 512 * 1024**2, GiB, 2),  # never fewer than two
        (64, 512 * GiB, GiB, 128),
    ],
)
def test_concurrency_is_sized_from_cores_and_memory(
    cores: int, budget: int, per_query: int, slots: int
) -> None:
    assert sized_concurrency(cores, budget, per_query) == slots


def test_a_container_limit_lower_than_the_machine_is_the_memory(tmp_path: Path) -> None:
    (tmp_path / "memory.max").write_text(f"{2 * GiB}\n")
    assert memory_bytes(tmp_path) == 2 * GiB
    (tmp_path / "memory.max").write_text("max\n")  # no limit: the machine's memory
    assert memory_bytes(tmp_path) == memory_bytes(tmp_path / "missing") > 2 * GiB
