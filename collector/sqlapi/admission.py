"""Who runs now, who waits, and who is refused: the SQL interface's admission of queries.

ClickHouse's own model (``max_concurrent_queries`` with ``queue_max_wait_ms``, and
``max_concurrent_queries_for_user``): a query that finds every slot taken waits for one, in a
bounded queue, for a bounded time; only past the queue's bound or that wait is it refused,
with TOO_MANY_SIMULTANEOUS_QUERIES. Grafana sends every panel's query of a dashboard at once
and its ClickHouse driver turns a refusal into a broken panel, so waiting is the normal path.

Fair between credentials: one credential holds at most ``max_running_per_credential`` slots
(one fewer than all of them, by default), so a team that fills its share never keeps another
team waiting behind it; a freed slot goes to the waiting credential that runs the fewest
queries (oldest first among equals), and within a credential queries run in arrival order.

Threading: every method runs on the event loop's thread. A worker thread that ends a query
gives its slot back through ``loop.call_soon_threadsafe(admission.release, credential)``.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from collector.sqlapi.errors import Code, SqlError

__all__ = ["Admission", "AdmissionLimits", "AdmissionStats", "memory_bytes", "sized_concurrency"]

_MAX_SLOTS_PER_CORE = 2
"""chDB releases the GIL while it computes and splits a query across its own threads: two
queries per core keep the cores busy while one of them waits on I/O or on Python."""
_MIN_SLOTS = 2


def memory_bytes(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """This machine's memory, or the container's limit when it is lower (cgroup v2 or v1)."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for name in ("memory.max", "memory/memory.limit_in_bytes"):
        try:
            text = (cgroup_root / name).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < physical:
            return int(text)
    return int(physical)


def sized_concurrency(cores: int, memory_budget_bytes: int, max_memory_per_query: int) -> int:
    """Slots for queries: two per core, no more than the memory budget holds at the per-query
    memory cap, and never fewer than two."""
    by_memory = memory_budget_bytes // max(1, max_memory_per_query)
    return max(_MIN_SLOTS, min(_MAX_SLOTS_PER_CORE * max(1, cores), by_memory))


@dataclass(frozen=True)
class AdmissionLimits:
    max_running: int
    max_running_per_credential: int
    max_queued: int
    max_queued_per_credential: int
    max_wait_s: float
    """0: a query that finds no slot is refused at once (ClickHouse's ``queue_max_wait_ms=0``)."""

    @classmethod
    def sized(
        cls,
        max_running: int,
        *,
        max_running_per_credential: int | None = None,
        max_queued: int = 256,
        max_wait_s: float = 10.0,
    ) -> AdmissionLimits:
        per_credential = max_running_per_credential or max(1, max_running - 1)
        return cls(
            max_running=max_running,
            max_running_per_credential=min(per_credential, max_running),
            max_queued=max_queued,
            max_queued_per_credential=max(1, max_queued // 2),
            max_wait_s=max_wait_s,
        )


@dataclass
class AdmissionStats:
    running: int = 0
    queued: int = 0
    waited: int = 0
    """Queries that found no free slot and were admitted after waiting."""
    refused_queue_full: int = 0
    refused_wait: int = 0
    """Queries refused because their wait passed ``max_wait_s``."""
    max_wait_s: float = 0.0
    """The longest wait of an admitted query."""


@dataclass
class _Waiter:
    credential: str
    future: asyncio.Future[None]
    since: float
    timer: asyncio.TimerHandle | None = field(default=None)


class Admission:
    def __init__(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        self.stats = AdmissionStats()
        self._running: dict[str, int] = {}
        self._waiting: dict[str, deque[_Waiter]] = {}

    def running_for(self, credential: str) -> int:
        return self._running.get(credential, 0)

    async def acquire(self, credential: str) -> None:
        """Returns once ``credential`` holds a slot (give it back with ``release``); raises
        SqlError(TOO_MANY_SIMULTANEOUS_QUERIES) when the queue is full or the wait too long.
        A caller cancelled while it waits leaves the queue (a slot granted at that moment is
        given back)."""
        if self._can_start(credential) and not self._waiting.get(credential):
            self._start(credential)
            return
        limits = self.limits
        if limits.max_wait_s <= 0:
            self.stats.refused_queue_full += 1
            raise self._refusal()
        if self.stats.queued >= limits.max_queued:
            self.stats.refused_queue_full += 1
            raise self._refusal(f"the queue is full: {limits.max_queued} queries wait already")
        if len(self._waiting.get(credential, ())) >= limits.max_queued_per_credential:
            self.stats.refused_queue_full += 1
            raise self._refusal(
                f"{limits.max_queued_per_credential} queries of this user wait already"
            )
        loop = asyncio.get_running_loop()
        waiter = _Waiter(credential, loop.create_future(), loop.time())
        waiter.timer = loop.call_later(limits.max_wait_s, self._expire, waiter)
        self._waiting.setdefault(credential, deque()).append(waiter)
        self.stats.queued += 1
        try:
            await waiter.future
        except asyncio.CancelledError:
            future = waiter.future
            if future.done() and not future.cancelled() and future.exception() is None:
                self.release(credential)  # granted as the caller left
            else:
                self._leave(waiter)
            raise
        finally:
            waiter.timer.cancel()
        waited = loop.time() - waiter.since
        self.stats.waited += 1
        self.stats.max_wait_s = max(self.stats.max_wait_s, waited)

    def release(self, credential: str) -> None:
        """Gives back one slot of ``credential`` and hands free slots to waiting queries."""
        held = self._running.get(credential, 0)
        if held <= 0:
            raise RuntimeError(f"release without a slot for credential {credential!r}")
        if held == 1:
            del self._running[credential]
        else:
            self._running[credential] = held - 1
        self.stats.running -= 1
        self._dispatch()

    def _can_start(self, credential: str) -> bool:
        return (
            self.stats.running < self.limits.max_running
            and self._running.get(credential, 0) < self.limits.max_running_per_credential
        )

    def _start(self, credential: str) -> None:
        self._running[credential] = self._running.get(credential, 0) + 1
        self.stats.running += 1

    def _dispatch(self) -> None:
        while self.stats.running < self.limits.max_running:
            eligible = [
                queue[0]
                for credential, queue in self._waiting.items()
                if queue and self._can_start(credential)
            ]
            if not eligible:
                return
            chosen = min(eligible, key=lambda w: (self._running.get(w.credential, 0), w.since))
            self._leave(chosen)
            if chosen.future.done():  # cancelled; its task has not resumed to leave yet
                continue
            self._start(chosen.credential)
            chosen.future.set_result(None)

    def _leave(self, waiter: _Waiter) -> None:
        queue = self._waiting.get(waiter.credential)
        if queue is None or waiter not in queue:
            return
        queue.remove(waiter)
        self.stats.queued -= 1
        if not queue:
            del self._waiting[waiter.credential]

    def _expire(self, waiter: _Waiter) -> None:
        if waiter.future.done():
            return
        self._leave(waiter)
        self.stats.refused_wait += 1
        waited_ms = int(self.limits.max_wait_s * 1000)
        waiter.future.set_exception(
            self._refusal(f"no slot came free within queue_max_wait_ms={waited_ms}")
        )

    def _refusal(self, why: str = "") -> SqlError:
        message = f"Too many simultaneous queries. Maximum: {self.limits.max_running}"
        return SqlError(
            Code.TOO_MANY_SIMULTANEOUS_QUERIES, f"{message} ({why})" if why else message
        )
