"""When sweeps run: the cron schedule, its slots (both in ``schedule.py``), and the worker's
loop that runs them.

A schedule is a five-field cron expression (Debian cron semantics, including its handling
of DST changes, through ``cronsim``) read in a time zone: ``AFR_SWEEP_TZ``, or a
``CRON_TZ=<zone>`` prefix of the expression, else UTC. Each instant it names is a *slot*.

A slot's sweep id is derived, never drawn: ``sha256("<cron>|<slot in UTC>")`` for a slot of
the schedule, ``sha256("manual|<label>")`` for one a person names (``POST /hooks/sweeps``:
the webhook id unless the body names a slot; ``afr sweep run --slot``). A label that is an
instant of the schedule (``2026-12-01T03:00:00Z``) *is* that scheduled slot. Every worker,
every restart and every retry therefore agrees on which sweep a slot is, and the state
store (``claim_sweep``) lets exactly one of them run it at a time and none run it again
once finished.

The loop (``SweepScheduler``) queues the schedule's due slot, claims whatever sweep is
queued or abandoned (a hook's, a dead worker's), and runs it in a sweep process
(``ProcessSweepExecutor``), one at a time. A slot missed while no worker ran (down at
03:00) runs once when a worker comes back within ``AFR_SWEEP_CATCHUP_S``; only the latest
missed slot is caught up. Time comes from an injected clock and sleep: tests move time
without waiting for it.

Nothing here imports the Agents SDK: the sweep itself runs in its own process, started at
``replay_worker.sweeps`` by name (``protocol.SWEEP_ENTRY``), as replays are.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any, Literal

from replay_worker.money import Clock
from replay_worker.protocol import SWEEP_ENTRY, ChildConfig, SweepTask, default_context
from replay_worker.schedule import Schedule, Slot, utc_label
from replay_worker.state import Owner, StateStore, Sweep

__all__ = [
    "ExecutionResult",
    "ProcessSweepExecutor",
    "SweepExecutor",
    "SweepScheduler",
]

logger = logging.getLogger("afr.worker.sweeps")

Trigger = Literal["schedule", "hook", "cli", "shards"]
"""Who started a sweep (``shards``: the first shard of a slot run as shards, ADR 26)."""
Sleep = Callable[[float], Awaitable[None]]

POLL_S = 5.0
"""How often an idle scheduler looks for sweeps it was not told about: queued by a hook on
another worker, or left by a dead one."""


# -- running a sweep -----------------------------------------------------------------------


@dataclass(frozen=True)
class ExecutionResult:
    kind: Literal["finished", "lost", "failed", "crashed", "timed_out", "interrupted"]
    reason: str | None = None
    summary: dict[str, Any] | None = None


SweepExecutor = Callable[[Sweep], Awaitable[ExecutionResult]]
"""Runs one claimed sweep to its end (the sweep records its results and finishes itself in
the store) and says how it ended."""


def _death(process: BaseProcess) -> str:
    code = process.exitcode
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


_start_lock = threading.Lock()


class ProcessSweepExecutor:
    """Runs each sweep in a process of its own, forked like the replay processes (the SDK's
    trace processors are process-global), with a lifeline pipe so that it exits at once if
    the worker dies. ``config`` is the replay pool's ``ChildConfig``."""

    def __init__(
        self,
        config: ChildConfig,
        owner: Owner,
        timeout_s: float,
        context: BaseContext | None = None,
    ) -> None:
        self._config = config
        self._owner = owner
        self._timeout_s = timeout_s
        self._context = context or default_context()
        self._process: BaseProcess | None = None
        self._interrupted = False

    def pid(self) -> int | None:
        """The running sweep process's id (tests, diagnostics)."""
        return self._process.pid if self._process is not None else None

    def _start(self, task: SweepTask) -> tuple[BaseProcess, Connection, Connection]:
        parent_conn, child_conn = self._context.Pipe(duplex=False)
        lifeline_read, lifeline_write = self._context.Pipe(duplex=False)
        process = self._context.Process(  # type: ignore[attr-defined]
            target=SWEEP_ENTRY,  # named: replay_worker.sweeps loads the SDK (protocol.py)
            args=(child_conn, lifeline_read, self._config, task),
            name="afr-sweep",
            daemon=True,
        )
        with _start_lock:
            process.start()
        child_conn.close()
        lifeline_read.close()
        return process, parent_conn, lifeline_write

    async def __call__(self, sweep: Sweep) -> ExecutionResult:
        self._interrupted = False
        process, conn, lifeline = await asyncio.to_thread(
            self._start, SweepTask(sweep.sweep_id, self._owner)
        )
        self._process = process
        try:
            answer = await asyncio.wait_for(_receive(conn), self._timeout_s)
        except TimeoutError:
            process.kill()
            return ExecutionResult(
                "timed_out", f"the sweep did not finish within {self._timeout_s:g} s"
            )
        finally:
            await asyncio.to_thread(process.join, 10)
            if process.exitcode is None:
                process.kill()
                await asyncio.to_thread(process.join, 10)
            conn.close()
            lifeline.close()
            self._process = None
        if answer is None:
            if self._interrupted:
                return ExecutionResult("interrupted", "the worker shut down during the sweep")
            return ExecutionResult("crashed", f"the sweep process {_death(process)}")
        return ExecutionResult(answer["kind"], answer.get("reason"), summary=answer.get("summary"))

    def interrupt(self) -> None:
        """Ends the running sweep at once (shutdown); it is resumed by the next worker."""
        process = self._process
        if process is not None and process.exitcode is None:
            self._interrupted = True
            process.kill()


async def _receive(conn: Connection) -> Any:
    """The sweep process's answer, or None when it died first (end of file on its pipe)."""
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()

    def on_readable() -> None:
        if not readable.done():
            readable.set_result(None)

    fd = conn.fileno()
    loop.add_reader(fd, on_readable)
    try:
        await readable
    finally:
        loop.remove_reader(fd)
    try:
        return conn.recv()
    except (EOFError, OSError):
        return None


# -- the loop --------------------------------------------------------------------------------


class SweepScheduler:
    """Queues the schedule's slots and runs claimed sweeps, one at a time, in the worker.
    ``start`` before use, ``stop`` to end. Supervised: if the loop dies, ``failure`` says
    why (and ``/healthz`` turns red with it)."""

    def __init__(
        self,
        store: StateStore,
        owner: Owner,
        execute: SweepExecutor,
        *,
        schedule: Schedule,
        enabled: bool = True,
        evals_dir_exists: Callable[[], bool] = lambda: True,
        catchup_s: float = 6 * 3600.0,
        lease_s: float = 30.0,
        clock: Clock = time.time,
        sleep: Sleep = asyncio.sleep,
        poll_s: float = POLL_S,
        interrupt: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.owner = owner
        self.schedule = schedule
        self._execute = execute
        self._enabled = enabled
        self._evals_dir_exists = evals_dir_exists
        self._catchup_s = catchup_s
        self._lease_s = lease_s
        self._clock = clock
        self._sleep = sleep
        self._poll_s = poll_s
        self._interrupt = interrupt
        self._wake = asyncio.Event()
        self._queued_slot: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.running: Sweep | None = None
        self.failure: str | None = None
        self.recovered: list[str] = []

    def now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    async def submit(self, slot: Slot, trigger: Trigger) -> tuple[Sweep, bool]:
        """The sweep of this slot: a new, queued one, or the one it already is (whatever
        its state: a finished slot is not run again)."""
        result: tuple[Sweep, bool] = await asyncio.to_thread(
            self.store.submit_sweep, slot.sweep_id, slot.label, trigger, self._clock()
        )
        if result[1]:
            self._wake.set()
        return result

    async def get(self, sweep_id: str) -> Sweep | None:
        sweep: Sweep | None = await asyncio.to_thread(self.store.get_sweep, sweep_id)
        return sweep

    async def stats(self) -> dict[str, Any]:
        counts = await asyncio.to_thread(self.store.sweep_counts)
        last = await asyncio.to_thread(self.store.last_sweep)
        now = self.now()
        return {
            "enabled": self._enabled,
            "cron": self.schedule.cron,
            "zone": self.schedule.zone.key,
            "next_slot": utc_label(self.schedule.next(now)) if self._enabled else None,
            "running": self.running.sweep_id if self.running is not None else None,
            "counts": counts,
            "last": last.to_json() if last is not None else None,
        }

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self.recovered = await asyncio.to_thread(
            self.store.recover_sweeps, self.owner, self._clock()
        )
        if self.recovered:
            logger.warning(
                "re-queued %d sweep(s) left running by a stopped worker: %s",
                len(self.recovered),
                ", ".join(self.recovered),
            )
        self._task = asyncio.get_running_loop().create_task(self.run_forever())
        self._task.add_done_callback(self._supervise)

    def _supervise(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.failure = f"the sweep scheduler stopped: {type(exc).__name__}: {exc}"
            logger.error("sweeps are not being run: %s", self.failure, exc_info=exc)

    async def stop(self, timeout_s: float = 15.0) -> None:
        """Stops the loop; a sweep still running is ended and put back in the queue (the
        next worker resumes it, skipping the evals it finished)."""
        if self._task is None:
            return
        self._stopping = True
        if self.running is not None and self._interrupt is not None:
            self._interrupt()
        self._wake.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._task), timeout_s)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    # -- running ----------------------------------------------------------------------------

    async def run_forever(self) -> None:
        while not self._stopping:
            if await self.tick():
                continue
            if self._stopping:
                return
            now = self.now()
            delay = self._poll_s
            if self._enabled:
                delay = min(delay, max(0.0, (self.schedule.next(now) - now).total_seconds()))
            self._wake.clear()
            await self._wait(delay)

    async def _wait(self, delay_s: float) -> None:
        sleeper = asyncio.ensure_future(self._sleep(delay_s))
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleeper, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for future in (sleeper, woken):
                future.cancel()
            await asyncio.gather(sleeper, woken, return_exceptions=True)
        if sleeper.done() and not sleeper.cancelled() and sleeper.exception() is not None:
            raise sleeper.exception()  # type: ignore[misc]

    async def tick(self) -> Sweep | None:
        """One pass: queues the due slot (once), then claims and runs one sweep if any is
        queued or abandoned. Returns the sweep it ran."""
        if self._stopping:
            return None
        if self._enabled:
            due = self.schedule.due(self.now(), self._catchup_s)
            if (
                due is not None
                and due.sweep_id != self._queued_slot
                and await asyncio.to_thread(self._evals_dir_exists)
            ):
                await self.submit(due, "schedule")
                self._queued_slot = due.sweep_id
        try:
            sweep: Sweep | None = await asyncio.to_thread(
                self.store.claim_sweep, self.owner, self._clock(), self._lease_s
            )
        except Exception:  # a locked or unavailable store: try again on the next tick
            logger.exception("could not claim a sweep from %s", self.store.location)
            return None
        if sweep is None:
            return None
        await self._run(sweep)
        return sweep

    async def _run(self, sweep: Sweep) -> None:
        self.running = sweep
        logger.info(
            "sweep %s (slot %s, %s) starts, attempt %d",
            sweep.sweep_id,
            sweep.slot,
            sweep.trigger,
            sweep.attempts,
        )
        try:
            result = await self._execute(sweep)
        except asyncio.CancelledError:
            await asyncio.to_thread(
                self.store.release_sweep, sweep.sweep_id, self.owner, count_attempt=False
            )
            raise
        except Exception as exc:
            logger.exception("sweep %s could not be run", sweep.sweep_id)
            result = ExecutionResult("crashed", f"{type(exc).__name__}: {exc}")
        finally:
            self.running = None
        await self._record(sweep, result)

    async def _record(self, sweep: Sweep, result: ExecutionResult) -> None:
        if result.kind == "finished":
            logger.info("sweep %s finished: %s", sweep.sweep_id, _counts(result.summary))
            return
        if result.kind == "lost":
            logger.warning("sweep %s was taken over by another worker", sweep.sweep_id)
            return
        interrupted = result.kind == "interrupted"
        logger.log(
            logging.INFO if interrupted else logging.ERROR,
            "sweep %s stopped unfinished (%s): %s; it resumes on its next claim",
            sweep.sweep_id,
            result.kind,
            result.reason,
        )
        await asyncio.to_thread(
            self.store.release_sweep,
            sweep.sweep_id,
            self.owner,
            count_attempt=not interrupted,
            error=None if interrupted else {"kind": result.kind, "reason": result.reason},
        )


def _counts(summary: dict[str, Any] | None) -> str:
    if not summary:
        return "no summary"
    return ", ".join(
        f"{summary.get(k, 0)} {k}" for k in ("passed", "failed", "inconclusive", "errored")
    )
