"""A bounded pool of replay processes, each running one job at a time.

Processes come from a fork server that has imported the Agents SDK once (about 3 s of CPU
per fresh interpreter on a small machine, 10 ms per fork), and are reused for
``jobs_per_process`` jobs, so a job pays no start-up of its own. A process that dies fails
only its own job, with the reason, and its slot starts a new process for the next job; a job
that outlives its timeout is killed the same way. Each process holds the read end of a
lifeline pipe whose write end only the pool holds: if the worker dies, its replay processes
exit at once instead of living on as orphans. ``close`` drains, then kills what is left and
reports those jobs as interrupted, to be re-queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any, Literal

from replay_worker.protocol import CHILD_ENTRY, ChildConfig, JobSpec, Outcome, default_context

__all__ = ["PoolResult", "PoolStats", "ReplayPool"]

logger = logging.getLogger("afr.worker.pool")

_JOIN_TIMEOUT_S = 10.0
_start_lock = threading.Lock()


@dataclass(frozen=True)
class PoolResult:
    kind: Literal["done", "crashed", "timed_out", "interrupted"]
    outcome: Outcome | None = None
    reason: str | None = None


@dataclass
class PoolStats:
    size: int
    running: int = 0
    processes_started: int = 0
    crashed: int = 0
    timed_out: int = 0

    def to_json(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass
class _Child:
    process: BaseProcess
    conn: Connection
    lifeline: Connection
    jobs_done: int = 0

    def close_pipes(self) -> None:
        self.conn.close()
        self.lifeline.close()


@dataclass
class _Slot:
    index: int
    child: _Child | None = None
    starting: asyncio.Task[_Child] | None = None
    job_id: str | None = None
    interrupted: bool = False


def _death(process: BaseProcess) -> str:
    code = process.exitcode
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class ReplayPool:
    def __init__(
        self,
        size: int,
        config: ChildConfig,
        *,
        jobs_per_process: int = 100,
        context: BaseContext | None = None,
    ) -> None:
        self._config = config
        self._jobs_per_process = jobs_per_process
        self._context = context or default_context()
        self._slots = [_Slot(i) for i in range(size)]
        self._free: asyncio.Queue[_Slot] = asyncio.Queue()
        for slot in self._slots:
            self._free.put_nowait(slot)
        self._retiring: set[asyncio.Task[None]] = set()
        self._closing = False
        self.stats = PoolStats(size=size)

    def start(self) -> None:
        """Starts every replay process now, in the background, so the first jobs need not
        wait for one."""
        for slot in self._slots:
            self._prestart(slot)

    def pids(self) -> dict[str, int]:
        """Process id of each running job's replay process (tests, diagnostics)."""
        return {
            slot.job_id: slot.child.process.pid
            for slot in self._slots
            if slot.job_id is not None and slot.child is not None and slot.child.process.pid
        }

    def _start_child(self) -> _Child:
        parent_conn, child_conn = self._context.Pipe(duplex=True)
        lifeline_read, lifeline_write = self._context.Pipe(duplex=False)
        process = self._context.Process(  # type: ignore[attr-defined]
            target=CHILD_ENTRY,  # named: replay_worker.child loads the SDK (protocol.py)
            args=(child_conn, lifeline_read, self._config),
            name="afr-replay",
            daemon=True,
        )
        with _start_lock:
            process.start()
        child_conn.close()
        lifeline_read.close()
        self.stats.processes_started += 1
        return _Child(process, parent_conn, lifeline_write)

    def _prestart(self, slot: _Slot) -> None:
        """A replacement process starts (and loads what it needs) while the slot waits."""
        if slot.child is None and slot.starting is None and not self._closing:
            slot.starting = asyncio.get_running_loop().create_task(
                asyncio.to_thread(self._start_child)
            )

    async def _child_for(self, slot: _Slot) -> _Child:
        if slot.child is None:
            self._prestart(slot)
            assert slot.starting is not None
            starting, slot.starting = slot.starting, None
            slot.child = await starting
        return slot.child

    def _retire(self, slot: _Slot, child: _Child, *, kill: bool) -> None:
        """Stops a process in the background (the job's outcome does not wait for it) and
        starts its replacement."""
        slot.child = None
        task = asyncio.get_running_loop().create_task(self._stop_child(child, kill=kill))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        self._prestart(slot)

    async def _receive(self, child: _Child) -> Any:
        """The child's answer, or None when it died (end of file on its pipe)."""
        loop = asyncio.get_running_loop()
        readable: asyncio.Future[None] = loop.create_future()
        fd = child.conn.fileno()

        def on_readable() -> None:
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(fd, on_readable)
        try:
            await readable
        finally:
            loop.remove_reader(fd)
        try:
            return child.conn.recv()
        except (EOFError, OSError):
            return None

    async def _stop_child(self, child: _Child, *, kill: bool) -> None:
        if kill:
            child.process.kill()
        else:
            with contextlib.suppress(OSError):
                child.conn.send(None)
        await asyncio.to_thread(child.process.join, _JOIN_TIMEOUT_S)
        if child.process.exitcode is None:
            child.process.kill()
            await asyncio.to_thread(child.process.join, _JOIN_TIMEOUT_S)
        child.close_pipes()
        if child.process.exitcode is not None:
            child.process.close()

    async def run(self, spec: JobSpec, timeout_s: float) -> PoolResult:
        """Runs one job in a replay process; waits for a free slot first."""
        slot = await self._free.get()
        slot.job_id, slot.interrupted = spec.job_id, False
        self.stats.running += 1
        try:
            if self._closing:
                return PoolResult("interrupted", reason="the worker is shutting down")
            return await self._run_in(slot, spec, timeout_s)
        finally:
            self.stats.running -= 1
            slot.job_id = None
            self._free.put_nowait(slot)

    async def _run_in(self, slot: _Slot, spec: JobSpec, timeout_s: float) -> PoolResult:
        try:
            child = await self._child_for(slot)
        except Exception as exc:  # e.g. out of processes or memory: this job fails, not the pool
            self.stats.crashed += 1
            logger.exception("could not start a replay process for job %s", spec.job_id)
            return PoolResult(
                "crashed", reason=f"could not start a replay process: {type(exc).__name__}: {exc}"
            )
        try:
            child.conn.send(spec)
            answer = await asyncio.wait_for(self._receive(child), timeout_s)
        except TimeoutError:
            self.stats.timed_out += 1
            self._retire(slot, child, kill=True)
            return PoolResult(
                "timed_out", reason=f"the replay did not finish within {timeout_s:g} s"
            )
        except OSError:
            answer = None  # it died before it could read the job
        if answer is None:
            slot.child = None
            await asyncio.to_thread(child.process.join, _JOIN_TIMEOUT_S)
            death = _death(child.process)
            self._retire(slot, child, kill=True)
            if slot.interrupted:
                return PoolResult("interrupted", reason="the worker shut down during the replay")
            self.stats.crashed += 1
            logger.error("replay process for job %s %s", spec.job_id, death)
            return PoolResult("crashed", reason=f"the replay process {death} during the job")
        child.jobs_done += 1
        if child.jobs_done >= self._jobs_per_process:
            self._retire(slot, child, kill=False)
        return PoolResult("done", outcome=answer)

    async def close(self, grace_s: float) -> None:
        """Lets running jobs finish for ``grace_s``, kills the rest (their ``run`` returns
        ``interrupted``), and stops every process."""
        self._closing = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while any(slot.job_id is not None for slot in self._slots):
            if loop.time() >= deadline:
                for slot in self._slots:
                    if slot.job_id is not None and slot.child is not None:
                        slot.interrupted = True
                        slot.child.process.kill()
            await asyncio.sleep(0.05)
        for slot in self._slots:
            if slot.starting is not None:
                starting, slot.starting = slot.starting, None
                slot.child = await starting
            if slot.child is not None:
                child, slot.child = slot.child, None
                await self._stop_child(child, kill=False)
        while self._retiring:
            await asyncio.gather(*self._retiring)
