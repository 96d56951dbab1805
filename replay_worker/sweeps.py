"""Running one sweep: every eval of the evals directory, once per slot, then its summary run.

A sweep runs under a claim in the worker's state store (``StateStore.claim_sweep``): one
owner at a time, a lease it renews while it runs. Each eval's outcome is recorded as soon as
the eval's run is exported, and a resumed sweep (its process died, its worker restarted, its
lease ran out and another worker took it over) skips every eval already recorded. An eval
cut short and run again writes the same run: its trace id is ``eval_trace_id(sweep id, eval
id)`` and, because the engine marks a run with a chosen trace id ``afr.deterministic_ids``,
its span ids follow from that trace id and the order its spans start in. The store, keyed
by (project, trace id, span id), then holds it once. The limit is honest: a second run that
behaves differently (the live model answers otherwise) has other spans, and the spans the
first run exported before it was cut short stay beside them.

Once every eval is recorded the sweep writes its summary as a run of its own, kind
``sweep``, with a trace id derived from the sweep id: its trace metadata holds the counts
(passed, failed, inconclusive, errored), the cost and the duration, and ``afr.linked_runs``
links it to every eval run (role: the eval id). A sweep with a failed or errored eval ends
with an errored ``sweep.summary`` span, so ``kind=sweep&status=error`` lists the bad nights.
Only then is the slot marked finished, and a finished slot never runs again.

This module loads the Agents SDK: it runs in a sweep process (``sweep_process_main``) or in
``afr sweep run``, never in the worker's own process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from agents import trace
from agents.tracing import SpanError, custom_span

import afr_exporter
from afr_exporter import semconv as sc
from afr_exporter.evaluation import EvaluationAttributes, evaluation_result
from afr_exporter.semconv import (
    METADATA_SWEEP_COST_USD,
    METADATA_SWEEP_COUNTS,
    METADATA_SWEEP_DURATION_S,
    METADATA_SWEEP_ID,
    METADATA_SWEEP_SLOT,
    METADATA_SWEEP_TRIGGER,
)
from replay_worker.evals.contract import EvalDocument, EvalFileError, load_eval
from replay_worker.evals.runner import EvalOutcome, EvalSession, eval_trace_id
from replay_worker.money import Clock
from replay_worker.protocol import EXIT_PARENT_GONE, SweepTask
from replay_worker.schedule import Slot, manual_slot, parse_schedule
from replay_worker.settings import WorkerSettings
from replay_worker.state import Owner, StateStore, Sweep, open_state_store

__all__ = [
    "STATUSES",
    "SUMMARY_SPAN",
    "SWEEP_WORKFLOW",
    "EvalEntry",
    "SweepLost",
    "SweepSummary",
    "discover",
    "emit_summary_run",
    "eval_result",
    "run_foreground",
    "run_sweep",
    "summarize",
    "sweep_evaluation",
    "sweep_process_main",
    "sweep_trace_id",
]

logger = logging.getLogger("afr.worker.sweeps")

SWEEP_WORKFLOW = "afr-sweep"
SUMMARY_SPAN = "sweep.summary"

STATUSES = ("passed", "failed", "inconclusive", "errored")
_EXPORT_TIMEOUT_S = 30.0

RunOne = Callable[[Path, EvalDocument, str, str], Awaitable[EvalOutcome]]
"""Runs one eval (path, document, sweep id, trace id) and returns once its run is exported;
raises if it could not be exported (the sweep then stops, to be resumed)."""


class SweepLost(RuntimeError):
    """This owner no longer holds the sweep: its lease ran out and another worker took over."""


class ExportFailed(RuntimeError):
    """A run could not be handed to the collector: the sweep stops here, to be resumed."""


def sweep_trace_id(sweep_id: str) -> str:
    """The trace id of a sweep's summary run, derived from the sweep id."""
    return "trace_" + hashlib.sha256(f"sweep-run:{sweep_id}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class EvalEntry:
    """An eval file found in the directory: its document, or why it cannot be run."""

    eval_id: str
    path: Path
    document: EvalDocument | None = None
    error: str | None = None


def discover(evals_dir: Path) -> list[EvalEntry]:
    """Every ``*.json`` under ``evals_dir``, by path. A file that is not a valid eval is an
    entry too (``invalid:<path>``, errored with the reason) rather than the end of the
    sweep; an eval id found twice runs once (its first file)."""
    if not evals_dir.is_dir():
        return []
    entries: dict[str, EvalEntry] = {}
    for path in sorted(evals_dir.rglob("*.json")):
        try:
            document = load_eval(path)
        except EvalFileError as exc:
            key = f"invalid:{path.relative_to(evals_dir).as_posix()}"
            entries[key] = EvalEntry(key, path, error=str(exc))
            continue
        entries.setdefault(document.id, EvalEntry(document.id, path, document))
    return list(entries.values())


@dataclass
class SweepSummary:
    sweep_id: str
    slot: str
    trigger: str
    sweep_run_id: str
    passed: int = 0
    failed: int = 0
    inconclusive: int = 0
    errored: int = 0
    cost_usd: float = 0.0
    duration_s: float = 0.0
    results: list[dict[str, Any]] = field(default_factory=list)
    incomplete: str | None = None
    """Why the sweep ended before every eval was recorded (shards that never all recorded)."""

    @property
    def evals(self) -> int:
        return len(self.results)

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.errored == 0 and self.incomplete is None

    @property
    def counts(self) -> dict[str, int]:
        return {status: getattr(self, status) for status in STATUSES}

    @property
    def linked_runs(self) -> dict[str, str]:
        return {r["eval_id"]: r["eval_run_id"] for r in self.results if r.get("eval_run_id")}

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "evals": self.evals,
            "cost_usd": round(self.cost_usd, 6),
            "duration_s": round(self.duration_s, 3),
        }


def summarize(
    sweep: Sweep, store: StateStore, now: float, *, incomplete: str | None = None
) -> SweepSummary:
    """The summary of every eval recorded for the sweep, across all of its attempts;
    ``incomplete``: why it ended before every eval was recorded."""
    summary = SweepSummary(sweep.sweep_id, sweep.slot, sweep.trigger, "", incomplete=incomplete)
    summary.sweep_run_id = sweep_trace_id(sweep.sweep_id).removeprefix("trace_")
    for recorded in sorted(store.sweep_results(sweep.sweep_id), key=lambda r: r.eval_id):
        status = recorded.status if recorded.status in STATUSES else "errored"
        setattr(summary, status, getattr(summary, status) + 1)
        summary.cost_usd += float(recorded.result.get("cost_usd") or 0.0)
        summary.results.append({**recorded.result, "eval_id": recorded.eval_id, "status": status})
    summary.duration_s = max(0.0, now - (sweep.started_at or now))
    return summary


def eval_result(outcome: EvalOutcome) -> dict[str, Any]:
    """What a sweep records of one eval's outcome."""
    return {
        "name": outcome.name,
        "path": outcome.path,
        "verdict": outcome.verdict,
        "eval_run_id": outcome.eval_run_id,
        "cost_usd": round(outcome.cost_usd, 9),
        "duration_s": round(outcome.duration_s, 3),
        "error": outcome.error,
        "failed_assertions": [a.to_json() for a in outcome.failed_assertions],
    }


async def _keep_lease(
    store: StateStore,
    sweep_id: str,
    owner: Owner,
    clock: Clock,
    lease_s: float,
    lost: asyncio.Event,
) -> None:
    while not lost.is_set():
        await asyncio.sleep(lease_s / 3)
        try:
            held = await asyncio.to_thread(store.renew_sweep, sweep_id, owner, clock() + lease_s)
        except Exception:  # a busy store: the next renewal may get through before the lease ends
            logger.exception("could not renew the lease of sweep %s", sweep_id)
            continue
        if not held:
            lost.set()


async def run_sweep(
    sweep: Sweep,
    *,
    store: StateStore,
    owner: Owner,
    evals_dir: Path,
    run_one: RunOne,
    emit_summary: Callable[[SweepSummary], Awaitable[None]],
    clock: Clock = time.time,
    lease_s: float = 30.0,
    eval_timeout_s: float = 600.0,
) -> SweepSummary:
    """Runs the evals of ``evals_dir`` not yet recorded for ``sweep`` (claimed by ``owner``),
    records each, emits the summary run and marks the sweep finished. Raises ``SweepLost``
    when another worker took the sweep over, ``ExportFailed`` (or whatever ``run_one``
    raises besides) when it must stop unfinished; either way it can be resumed."""
    sweep_id = sweep.sweep_id
    lost = asyncio.Event()
    keeper = asyncio.create_task(_keep_lease(store, sweep_id, owner, clock, lease_s, lost))
    try:
        done = {r.eval_id for r in await asyncio.to_thread(store.sweep_results, sweep_id)}
        entries = await asyncio.to_thread(discover, evals_dir)
        for entry in entries:
            if entry.eval_id in done:
                continue
            if lost.is_set():
                raise SweepLost(f"sweep {sweep_id} was taken over by another worker")
            if entry.document is None:
                status, run_id = "errored", None
                result: dict[str, Any] = {
                    "name": entry.path.name,
                    "path": str(entry.path),
                    "error": entry.error,
                    "cost_usd": 0.0,
                }
            else:
                trace_id = eval_trace_id(sweep_id, entry.eval_id)
                try:
                    outcome = await asyncio.wait_for(
                        run_one(entry.path, entry.document, sweep_id, trace_id), eval_timeout_s
                    )
                    status, run_id, result = (
                        outcome.status,
                        outcome.eval_run_id,
                        eval_result(outcome),
                    )
                except TimeoutError:
                    status, run_id = "errored", trace_id.removeprefix("trace_")
                    result = {
                        "name": entry.document.name,
                        "path": str(entry.path),
                        "eval_run_id": run_id,
                        "error": f"the eval did not finish within {eval_timeout_s:g} s",
                        "cost_usd": 0.0,
                    }
            recorded = await asyncio.to_thread(
                store.record_sweep_result,
                sweep_id,
                owner,
                entry.eval_id,
                status,
                run_id,
                result,
                clock(),
            )
            if not recorded:
                raise SweepLost(f"sweep {sweep_id} was taken over by another worker")
        summary = await asyncio.to_thread(summarize, sweep, store, clock())
        await emit_summary(summary)
        finished = await asyncio.to_thread(
            store.finish_sweep, sweep_id, owner, summary.to_json(), clock()
        )
        if not finished:
            raise SweepLost(f"sweep {sweep_id} was taken over by another worker")
        return summary
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper


def sweep_evaluation(summary: SweepSummary) -> EvaluationAttributes:
    """The sweep's result as a ``gen_ai.evaluation.result`` event named ``afr.sweep``:
    ``pass`` when no eval failed or errored and every eval was recorded, else ``fail``; the
    score is the share of evals that passed (none for a sweep without evals); explained by
    the counts. Each eval run carries its own events; the sweep run links to them."""
    counts = ", ".join(f"{getattr(summary, status)} {status}" for status in STATUSES)
    incomplete = f"; incomplete: {summary.incomplete}" if summary.incomplete else ""
    return evaluation_result(
        sc.EVALUATION_SWEEP,
        label=sc.LABEL_PASS if summary.ok else sc.LABEL_FAIL,
        value=summary.passed / summary.evals if summary.evals else None,
        explanation=f"{summary.evals} evals: {counts}{incomplete}",
    )


def emit_summary_run(summary: SweepSummary) -> None:
    """The sweep's summary as a run of kind ``sweep`` (through the SDK and afr's exporter,
    like every run of the worker), linked to each eval run; same ids every time."""
    metadata: dict[str, Any] = {
        sc.METADATA_RUN_KIND: sc.RUN_KIND_SWEEP,
        sc.METADATA_DETERMINISTIC_IDS: True,
        METADATA_SWEEP_ID: summary.sweep_id,
        METADATA_SWEEP_SLOT: summary.slot,
        METADATA_SWEEP_TRIGGER: summary.trigger,
        METADATA_SWEEP_COUNTS: {**summary.counts, "evals": summary.evals},
        METADATA_SWEEP_COST_USD: round(summary.cost_usd, 6),
        METADATA_SWEEP_DURATION_S: round(summary.duration_s, 3),
        sc.METADATA_LINKED_RUNS: summary.linked_runs,
        sc.METADATA_EVALUATIONS: [sweep_evaluation(summary)],
    }
    evals = [
        {k: r.get(k) for k in ("eval_id", "name", "status", "eval_run_id", "error")}
        for r in summary.results
    ]
    with (
        trace(SWEEP_WORKFLOW, trace_id=f"trace_{summary.sweep_run_id}", metadata=metadata),
        custom_span(
            SUMMARY_SPAN,
            data={
                **summary.counts,
                "evals": summary.evals,
                "cost_usd": round(summary.cost_usd, 6),
                "duration_s": round(summary.duration_s, 3),
                "results": evals,
            },
        ) as span,
    ):
        if not summary.ok:
            incomplete = f"; incomplete: {summary.incomplete}" if summary.incomplete else ""
            span.set_error(
                SpanError(
                    message=f"sweep: {summary.failed} failed, {summary.errored} errored"
                    + incomplete,
                    data={"not_passed": [e for e in evals if e["status"] in ("failed", "errored")]},
                )
            )


# -- where a sweep runs: a sweep process of the worker, or ``afr sweep run`` ---------------


class _Runtime:
    """What running evals needs in a process: afr's exporter to the collector, the eval
    model path (``EvalSession``: ledger, budgets) and the state store."""

    def __init__(self, settings: WorkerSettings, clock: Clock) -> None:
        key = settings.collector_key.get_secret_value() if settings.collector_key else None
        headers = {"authorization": f"Bearer {key}"} if key else None
        self.processor = afr_exporter.install(
            endpoint=settings.collector_otlp_endpoint, headers=headers
        )
        self.session = EvalSession(settings, clock=clock)
        self.store = open_state_store(settings)
        self.settings = settings
        self.clock = clock

    async def _flush(self, what: str) -> None:
        """Returns once everything enqueued is in the collector; raises if any of it was
        dropped instead (an empty queue alone does not say the export succeeded)."""
        dropped = self.processor.stats.dropped
        flushed = await asyncio.to_thread(self.processor.force_flush, _EXPORT_TIMEOUT_S)
        if not flushed or self.processor.stats.dropped > dropped:
            raise ExportFailed(f"{what} could not be exported to the collector")

    async def run_one(
        self, path: Path, document: EvalDocument, sweep_id: str, trace_id: str
    ) -> EvalOutcome:
        outcome = await self.session.run(document, path=path, sweep_id=sweep_id, trace_id=trace_id)
        await self._flush(f"the run of eval {document.id}")
        return outcome

    async def emit_summary(self, summary: SweepSummary) -> None:
        emit_summary_run(summary)
        await self._flush("the sweep's summary run")

    async def run(self, sweep: Sweep, owner: Owner, evals_dir: Path) -> SweepSummary:
        return await run_sweep(
            sweep,
            store=self.store,
            owner=owner,
            evals_dir=evals_dir,
            run_one=self.run_one,
            emit_summary=self.emit_summary,
            clock=self.clock,
            lease_s=self.settings.job_lease_s,
            eval_timeout_s=self.settings.job_timeout_s,
        )

    def close(self) -> None:
        self.processor.shutdown(timeout=5)
        self.session.close()
        self.store.close()


def _exit_with_parent(lifeline: Connection) -> None:
    """The worker holds the other end and never writes: end of file means it is gone."""
    with contextlib.suppress(EOFError, OSError):
        lifeline.recv()
    os._exit(EXIT_PARENT_GONE)


def sweep_process_main(
    conn: Connection, lifeline: Connection, config: Any, task: SweepTask
) -> None:
    """A sweep process: runs the claimed sweep and answers ``{"kind", "reason", "summary"}``
    (kinds as ``scheduler.ExecutionResult``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group; the worker decides
    threading.Thread(
        target=_exit_with_parent, args=(lifeline,), name="afr-sweep-lifeline", daemon=True
    ).start()
    settings: WorkerSettings = config.settings
    answer: dict[str, Any]
    runtime: _Runtime | None = None
    try:
        runtime = _Runtime(settings, config.clock)
        sweep = runtime.store.get_sweep(task.sweep_id)
        if sweep is None:
            raise RuntimeError(f"sweep {task.sweep_id} is not in the state store")
        summary = asyncio.run(runtime.run(sweep, task.owner, settings.evals_dir))
        answer = {"kind": "finished", "summary": summary.to_json()}
    except SweepLost as exc:
        answer = {"kind": "lost", "reason": str(exc)}
    except Exception as exc:
        logger.exception("sweep %s stopped", task.sweep_id)
        answer = {"kind": "failed", "reason": f"{type(exc).__name__}: {exc}"}
    finally:
        if runtime is not None:
            runtime.close()
    conn.send(answer)
    conn.close()


def run_foreground(
    settings: WorkerSettings,
    *,
    slot_label: str | None = None,
    clock: Clock = time.time,
) -> tuple[SweepSummary | None, Sweep]:
    """``afr sweep run``: claims the slot (``slot_label``, else a new manual slot) in the
    worker's state store and runs it here. Returns the summary, or None with the sweep as
    it stands when the slot is not this process's to run (finished already, or running in
    a worker); raises what stopped it, after putting it back in the queue to be resumed."""
    schedule = parse_schedule(settings.sweep_cron, settings.sweep_tz)
    slot: Slot
    if slot_label:
        slot = schedule.resolve(slot_label)
    else:
        now_label = datetime.fromtimestamp(clock(), UTC).strftime("%Y%m%dT%H%M%SZ")
        slot = manual_slot(f"cli:{now_label}:{secrets.token_hex(4)}")
    owner = Owner.current("cli-" + secrets.token_hex(4))
    store = open_state_store(settings)
    try:
        store.submit_sweep(slot.sweep_id, slot.label, "cli", clock())
        claimed = store.claim_sweep(owner, clock(), settings.job_lease_s, slot.sweep_id)
        if claimed is None:
            current = store.get_sweep(slot.sweep_id)
            assert current is not None
            return None, current
    finally:
        store.close()
    runtime = _Runtime(settings, clock)
    try:
        try:
            summary = asyncio.run(runtime.run(claimed, owner, settings.evals_dir))
        except SweepLost:
            raise
        except BaseException as exc:
            interrupted = isinstance(exc, KeyboardInterrupt)
            runtime.store.release_sweep(
                claimed.sweep_id,
                owner,
                count_attempt=not interrupted,
                error=None if interrupted else {"kind": "failed", "reason": str(exc)},
            )
            raise
        finished = runtime.store.get_sweep(claimed.sweep_id)
        assert finished is not None
        return summary, finished
    finally:
        runtime.close()
