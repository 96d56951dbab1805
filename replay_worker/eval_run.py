"""``afr eval run``: load, shard, run, report.

Progress goes to stderr, one line per eval as it finishes; the assertion table (and the
summary) to stdout, or the outcomes as JSON with ``--json``. Exit status: 0 when every eval
passed (or was inconclusive, with ``--allow-inconclusive``), 1 when any failed, errored or
was inconclusive, 2 when the command could not start (a bad eval file, a bad ``--shard``,
an ``--agent`` that does not import, a ``--slot`` with no collector to record it in), 3 when
``--slot`` was given and the eval runs did not all reach the collector (a Kubernetes Job
retries that shard; the runs' ids are the slot's, so the retry replaces rather than adds)
or the worker's state store (the day's spend, the slot's shards) could not be reached.

With ``--slot``, each shard (``--shard I/N``; none is 1/1) is recorded in the worker's state
store (``AFR_WORKER_STATE_URL``, shared by every shard of a Kubernetes Job) once its runs
are in the collector: its evals' outcomes, under the slot's sweep. The shard that completes
the set writes the sweep's summary run (kind ``sweep``, as a worker's sweep does) and marks
the sweep finished; a retried shard records nothing twice, and a summary written twice has
the same ids.

Models and budgets are the worker's (``AFR_WORKER_MODEL_*``, ``AFR_WORKER_*_BUDGET_USD``,
the day's spend in ``AFR_WORKER_DATA_DIR``). Eval runs are written to the collector
(``AFR_WORKER_COLLECTOR_OTLP_ENDPOINT``, ``AFR_WORKER_COLLECTOR_KEY``) when one is
configured; without one (CI) the evals still run, and the output says they were not
recorded.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

from agents.tracing import set_trace_processors

import afr_exporter
from replay_worker.evals.contract import EvalDocument, EvalFileError, load_evals
from replay_worker.evals.junit import write_junit
from replay_worker.evals.runner import (
    AgentLoadError,
    EvalOutcome,
    EvalSession,
    current_agents,
    load_agent,
    shard,
)
from replay_worker.protocol import default_context
from replay_worker.replay.fixture import AgentSpec
from replay_worker.schedule import parse_schedule
from replay_worker.settings import WorkerSettings
from replay_worker.state import (
    ShardMismatch,
    ShardRecord,
    StateSchemaTooNew,
    StateStore,
    StateStoreUnavailable,
    Sweep,
    open_state_store,
)
from replay_worker.sweeps import STATUSES, SweepSummary, emit_summary_run, eval_result, summarize

__all__ = [
    "RunOptions",
    "eval_files",
    "parse_shard",
    "render_table",
    "run_command",
    "slot_sweep_id",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNRECORDED = 0, 1, 2, 3
_CELL = 60
_FLUSH_TIMEOUT_S = 15.0


@dataclass
class RunOptions:
    paths: list[Path] = field(default_factory=lambda: [Path("evals")])
    agent: str | None = None
    model: str | None = None
    shard: tuple[int, int] | None = None
    junit: Path | None = None
    allow_inconclusive: bool = False
    sweep_id: str | None = None
    slot: str | None = None
    """A sweep slot, named as for ``afr sweep run --slot`` (an instant of the worker's
    schedule is that scheduled slot; any other label, such as a Job's name, a slot of its
    own): the runs are recorded under its sweep id, so every shard and every retry of one
    slot writes each eval's run under the same ids."""
    json_output: bool = False
    workers: int = 1
    export: bool = True
    list_only: bool = False
    """Print the evals this shard would run (id and path) and exit."""


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` -> (the 1-based shard, N). ``I`` is taken modulo N, from 0 to N: 1..N (a CI
    matrix) and 0..N-1 (a Kubernetes Indexed Job's ``JOB_COMPLETION_INDEX``) both name
    every shard once; ``0/N`` and ``N/N`` are the same shard."""
    index, slash, count = text.partition("/")
    if not slash or not index.isdigit() or not count.isdigit():
        raise ValueError(f"--shard {text!r}: expected I/N, e.g. 2/4 (I from 1 to N, or 0 to N-1)")
    shard_index, shards = int(index), int(count)
    if shards < 1 or not 0 <= shard_index <= shards:
        raise ValueError(f"--shard {text!r}: need N >= 1 and 0 <= I <= N")
    return (shard_index - 1) % shards + 1, shards


# --- the report ---------------------------------------------------------------------------


def _cell(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _CELL else text[: _CELL - 1] + "…"


def _rows(outcome: EvalOutcome) -> Iterable[tuple[str, str, str, str, str]]:
    label = f"{outcome.eval_id} {outcome.name}"
    for a in outcome.assertions:
        yield ("ok" if a.passed else "FAIL", label, a.kind, a.expected, a.actual)
    if outcome.status == "inconclusive":
        yield ("INCONCLUSIVE", label, "verdict", "a conclusive replay", str(outcome.verdict))
    if outcome.status == "errored":
        yield ("ERROR", label, "run", "the eval runs", outcome.error or "")


def render_table(outcomes: list[EvalOutcome]) -> str:
    header = ("result", "eval", "assertion", "expected", "actual")
    rows = [tuple(_cell(c) for c in row) for o in outcomes for row in _rows(o)]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _summary(outcomes: list[EvalOutcome], wall_s: float) -> str:
    counts = {
        s: sum(1 for o in outcomes if o.status == s)
        for s in ("passed", "failed", "inconclusive", "errored")
    }
    cost = sum(o.cost_usd for o in outcomes)
    parts = ", ".join(f"{n} {s}" for s, n in counts.items())
    evals = "1 eval" if len(outcomes) == 1 else f"{len(outcomes)} evals"
    return f"{evals}: {parts} in {wall_s:.1f}s (model cost ${cost:.4f})"


def _progress(done: int, total: int, outcome: EvalOutcome, out: TextIO) -> None:
    detail = f" ({outcome.error})" if outcome.error else ""
    print(
        f"[{done}/{total}] {outcome.eval_id} {outcome.status} {outcome.duration_s:.1f}s{detail}",
        file=out,
        flush=True,
    )


# --- running --------------------------------------------------------------------------------


@dataclass
class _Work:
    path: Path
    document: EvalDocument


@dataclass(frozen=True)
class _Plan:
    settings: WorkerSettings
    export: bool
    model: str | None
    sweep_id: str | None
    entry_agent: str | None
    agents: dict[str, AgentSpec] | None


def _exporting(settings: WorkerSettings, wanted: bool) -> bool:
    return wanted and (
        settings.collector_key is not None or "collector_otlp_endpoint" in settings.model_fields_set
    )


def _install_exporter(settings: WorkerSettings) -> Any:
    key = settings.collector_key.get_secret_value() if settings.collector_key else None
    headers = {"authorization": f"Bearer {key}"} if key else None
    return afr_exporter.install(endpoint=settings.collector_otlp_endpoint, headers=headers)


def _no_tracing_upload() -> None:
    """No collector: the SDK's default processor would upload the eval runs to OpenAI."""
    set_trace_processors([])


async def _run_here(
    plan: _Plan, work: list[_Work], on_done: Callable[[EvalOutcome], None]
) -> list[EvalOutcome]:
    session = EvalSession(plan.settings)
    outcomes: list[EvalOutcome] = []
    try:
        for item in work:
            outcome = await session.run(
                item.document,
                path=item.path,
                model_override=plan.model,
                agents_override=plan.agents,
                entry_agent=plan.entry_agent,
                sweep_id=plan.sweep_id,
            )
            outcomes.append(outcome)
            on_done(outcome)
    finally:
        session.close()
    return outcomes


# One eval process's state (``--workers``): its session, exporter and event loop, kept for
# every eval the process runs (the model clients keep their connection pools on one loop).
_process: dict[str, Any] = {}


def _process_init(plan: _Plan) -> None:
    _process["plan"] = plan
    _process["processor"] = _install_exporter(plan.settings) if plan.export else None
    if not plan.export:
        _no_tracing_upload()
    _process["session"] = EvalSession(plan.settings)
    _process["loop"] = asyncio.new_event_loop()


def _process_run(path: Path, document: EvalDocument) -> dict[str, Any]:
    plan: _Plan = _process["plan"]
    session: EvalSession = _process["session"]
    loop: asyncio.AbstractEventLoop = _process["loop"]
    outcome = loop.run_until_complete(
        session.run(
            document,
            path=path,
            model_override=plan.model,
            agents_override=plan.agents,
            entry_agent=plan.entry_agent,
            sweep_id=plan.sweep_id,
        )
    )
    processor = _process["processor"]
    export: dict[str, Any] = {}
    if processor is not None:  # the process may end without a chance to flush later
        flushed = processor.force_flush(_FLUSH_TIMEOUT_S)
        export = {"pid": os.getpid(), "flushed": flushed, "dropped": processor.stats.dropped}
    return {"outcome": outcome.to_json(), "export": export}


@dataclass
class _Exported:
    """What the eval processes' exporters said (``--workers``)."""

    unflushed: int = 0
    dropped_by_process: dict[int, int] = field(default_factory=dict)

    def add(self, export: dict[str, Any]) -> None:
        if export:
            self.unflushed += 0 if export["flushed"] else 1
            self.dropped_by_process[export["pid"]] = export["dropped"]  # a running count


def _run_in_processes(
    plan: _Plan,
    work: list[_Work],
    workers: int,
    on_done: Callable[[EvalOutcome], None],
    exported: _Exported,
) -> list[EvalOutcome]:
    finished: dict[int, EvalOutcome] = {}
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=default_context(),
        initializer=_process_init,
        initargs=(plan,),
    ) as pool:
        futures: dict[Future[dict[str, Any]], int] = {
            pool.submit(_process_run, item.path, item.document): n for n, item in enumerate(work)
        }
        for future in as_completed(futures):
            n = futures[future]
            try:
                answer = future.result()
                outcome = EvalOutcome.from_json(answer["outcome"])
                exported.add(answer["export"])
            except Exception as exc:  # the eval's process died
                document = work[n].document
                outcome = EvalOutcome(
                    document.id,
                    document.name,
                    str(work[n].path),
                    "errored",
                    None,
                    error=f"the eval process failed: {type(exc).__name__}: {exc}",
                )
            finished[n] = outcome
            on_done(outcome)
    return [finished[n] for n in range(len(work))]


def run_command(
    options: RunOptions, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    missing = [p for p in options.paths if not p.exists()]
    if missing:
        print(f"afr eval run: no such file or directory: {', '.join(map(str, missing))}", file=err)
        return EXIT_USAGE
    try:
        loaded = load_evals(eval_files(options.paths))
    except EvalFileError as exc:
        print(f"afr eval run: {exc}", file=err)
        return EXIT_USAGE
    if not loaded:
        print(
            f"afr eval run: no eval files (*.json) under {', '.join(map(str, options.paths))}",
            file=err,
        )
        return EXIT_USAGE
    selected = (
        shard(loaded, *options.shard)
        if options.shard
        else sorted(loaded, key=lambda e: (e[1].id, str(e[0])))
    )
    if options.list_only:
        for path, document in selected:
            print(f"{document.id}\t{path}", file=out)
        return EXIT_OK
    entry: str | None = None
    agents: dict[str, AgentSpec] | None = None
    if options.agent:
        try:
            entry, agents = current_agents(load_agent(options.agent))
        except AgentLoadError as exc:
            print(f"afr eval run: --agent {exc}", file=err)
            return EXIT_USAGE
    settings = WorkerSettings()
    export = _exporting(settings, options.export)
    sweep_id = options.sweep_id
    if options.slot is not None:
        if not export:
            print(
                "afr eval run: --slot records the eval runs of a slot, but they would not be "
                "recorded: set AFR_WORKER_COLLECTOR_KEY and AFR_WORKER_COLLECTOR_OTLP_ENDPOINT "
                "(and drop --no-export)",
                file=err,
            )
            return EXIT_USAGE
        sweep_id = slot_sweep_id(settings, options.slot)
        print(f"slot {options.slot!r}: sweep {sweep_id}", file=err)
    shard_of = options.shard or (1, 1)
    bad = {"failed", "errored"} | (set() if options.allow_inconclusive else {"inconclusive"})
    # The day's spend is in the worker's state, and a slot's shards: unreachable, no eval
    # can run (exit 3, as for runs that did not land: a later try may get through).
    try:
        store = open_state_store(settings)
    except Exception as exc:
        return _state_failed(settings, exc, err)
    try:
        if options.slot is not None:
            assert sweep_id is not None
            status = _with_retries(lambda: store.shard_status(sweep_id, shard_of))
            if status.recorded:
                # A pod retried after its shard was recorded: its evals are not run (nor
                # paid for) again; the slot is completed if that is what it was stopped at.
                return _recorded_shard(
                    settings, store, options.slot, shard_of, status, selected, bad, err
                )
    except ShardMismatch as exc:
        print(f"afr eval run: slot {options.slot!r}: {exc}", file=err)
        return EXIT_USAGE
    except Exception as exc:
        return _state_failed(settings, exc, err)
    finally:
        store.close()
    plan = _Plan(settings, export, options.model, sweep_id, entry, agents)
    where = f" (shard {options.shard[0]}/{options.shard[1]})" if options.shard else ""
    against = f" against {options.agent}" if options.agent else " against the captured agents"
    print(
        f"running {len(selected)} of {len(loaded)} evals{where}{against}"
        + (f", {options.workers} processes" if options.workers > 1 else ""),
        file=err,
        flush=True,
    )
    work = [_Work(path, document) for path, document in selected]
    done = 0

    def on_done(outcome: EvalOutcome) -> None:
        nonlocal done
        done += 1
        _progress(done, len(work), outcome, err)

    started = time.monotonic()
    started_at = time.time()
    processor = None
    exported = _Exported()
    try:
        if options.workers > 1 and len(work) > 1:
            workers = min(options.workers, len(work))
            outcomes = _run_in_processes(plan, work, workers, on_done, exported)
        else:
            processor = _install_exporter(settings) if export else None
            if not export:
                _no_tracing_upload()
            outcomes = asyncio.run(_run_here(plan, work, on_done))
    except StateStoreUnavailable as exc:  # its message never holds the URL's password
        print(f"afr eval run: {exc}", file=err)
        if processor is not None:
            processor.shutdown(timeout=1)
        return EXIT_UNRECORDED
    wall_s = time.monotonic() - started

    if options.json_output:
        print(json.dumps([o.to_json() for o in outcomes], indent=2), file=out)
    else:
        if outcomes:
            print(render_table(outcomes), file=out)
        print(_summary(outcomes, wall_s), file=out)
    if options.junit is not None:
        write_junit(
            options.junit,
            outcomes,
            allow_inconclusive=options.allow_inconclusive,
            duration_s=wall_s,
        )
        print(f"JUnit report: {options.junit}", file=err)
    recorded = _report_export(settings, export, processor, exported, err)
    if options.slot is not None:
        if not recorded:
            return EXIT_UNRECORDED  # the slot's results did not land: worth running again
        assert sweep_id is not None
        code = _record_shard(settings, sweep_id, options.slot, shard_of, outcomes, started_at, err)
        if code != EXIT_OK:
            return code
    return EXIT_FAILED if any(o.status in bad for o in outcomes) else EXIT_OK


def eval_files(paths: list[Path]) -> list[Path]:
    """The ``*.json`` files under ``paths`` (a file given is taken as it is), leaving out
    what lies in a hidden directory below a given one: Kubernetes mounts a ConfigMap as links
    to the same files in a ``..<timestamp>`` directory beside them, so every eval would be
    found, and run, twice."""
    files: list[Path] = []
    for path in paths:
        if not path.is_dir():
            files.append(path)
            continue
        for found in path.rglob("*.json"):
            if not any(part.startswith(".") for part in found.relative_to(path).parts):
                files.append(found)
    return files


def slot_sweep_id(settings: WorkerSettings, label: str) -> str:
    """The sweep id of the slot ``label`` names, as the worker and ``afr sweep run --slot``
    derive it (``AFR_SWEEP_CRON``/``AFR_SWEEP_TZ``): the same label, the same eval run ids."""
    return parse_schedule(settings.sweep_cron, settings.sweep_tz).resolve(label).sweep_id


_RECORD_RETRY_S = (1.0, 4.0)
"""Waits between tries of a shard's record while the state store is unavailable: a lost
record costs the shard's evals run again."""

T = TypeVar("T")


def _with_retries(call: Callable[[], T]) -> T:
    for wait_s in (*_RECORD_RETRY_S, None):
        try:
            return call()
        except StateStoreUnavailable:
            if wait_s is None:
                raise
            time.sleep(wait_s)
    raise AssertionError("unreachable")


def _state_failed(settings: WorkerSettings, exc: BaseException, err: TextIO) -> int:
    """The worker's state store failed: exit 2 when no retry can mend it (a state written by
    a newer afr), else 3 (unreachable, busy, anything else: the shard is worth running
    again)."""
    if isinstance(exc, StateSchemaTooNew | StateStoreUnavailable):
        print(f"afr eval run: {exc}", file=err)  # their messages never hold the password
        return EXIT_USAGE if isinstance(exc, StateSchemaTooNew) else EXIT_UNRECORDED
    # Others say only their type: a driver's message may quote the URL.
    print(
        f"afr eval run: the worker's state store ({settings.state_location}): {type(exc).__name__}",
        file=err,
    )
    return EXIT_UNRECORDED


def _recorded_shard(
    settings: WorkerSettings,
    store: StateStore,
    slot: str,
    shard_of: tuple[int, int],
    status: ShardRecord,
    selected: list[tuple[Path, EvalDocument]],
    bad: set[str],
    err: TextIO,
) -> int:
    """A shard recorded already: completes the slot if it was stopped just before, and
    exits as the shard's recorded outcomes say."""
    index, count = shard_of
    print(
        f"slot {slot!r}: shard {index}/{count} is recorded already ({status.done} of {count});"
        " its evals are not run again",
        file=err,
    )
    assert status.sweep is not None
    if status.sweep.state == "sharded" and status.done >= count:
        code = _complete_slot(settings, store, status.sweep, count, err)
        if code != EXIT_OK:
            return code
    mine = {document.id for _, document in selected}
    statuses = [r.status for r in store.sweep_results(status.sweep.sweep_id) if r.eval_id in mine]
    return EXIT_FAILED if any(s in bad for s in statuses) else EXIT_OK


def _record_shard(
    settings: WorkerSettings,
    sweep_id: str,
    slot: str,
    shard_of: tuple[int, int],
    outcomes: list[EvalOutcome],
    started_at: float,
    err: TextIO,
) -> int:
    """Records this shard of the slot in the worker's state store; the shard that completes
    the set writes the sweep's summary run and finishes the sweep, and the first shard of a
    slot writes the errored summary runs of earlier slots whose shards never all recorded.
    EXIT_OK, or why not (3: worth running the shard again; 2: it never will be)."""
    index, count = shard_of
    results = [(o.eval_id, o.status, o.eval_run_id, eval_result(o)) for o in outcomes]
    store = None
    try:
        store = open_state_store(settings)
        opened = store
        record = _with_retries(
            lambda: opened.record_shard(
                sweep_id,
                slot,
                shard_of,
                results,
                started_at,
                time.time(),
                stale_after_s=settings.sweep_timeout_s,
            )
        )
        for stale, stale_done, stale_count in record.stale:
            reason = f"only {stale_done} of {stale_count} shards recorded"
            if _write_summary(
                settings, summarize(stale, store, time.time(), incomplete=reason), err
            ):
                print(f"slot {stale.slot!r}: sweep {stale.sweep_id} failed: {reason}", file=err)
        assert record.sweep is not None
        if record.sweep.state != "sharded":
            print(
                f"slot {slot!r}: sweep {sweep_id} is {record.sweep.state} in the worker's state "
                f"({settings.state_location}); its summary run is not this command's to write",
                file=err,
            )
            return EXIT_OK
        if record.done < count:
            print(
                f"slot {slot!r}: shard {index}/{count} recorded, {record.done} of {count} in "
                f"{settings.state_location}; the last one writes the sweep's summary run",
                file=err,
            )
            return EXIT_OK
        return _complete_slot(settings, store, record.sweep, count, err)
    except ShardMismatch as exc:
        print(f"afr eval run: slot {slot!r}: {exc}", file=err)
        return EXIT_USAGE
    except Exception as exc:  # any failure here: the shard is run again, the cause said
        print(
            f"afr eval run: shard {index}/{count} of slot {slot!r} could not be recorded",
            file=err,
        )
        return _state_failed(settings, exc, err)
    finally:
        if store is not None:
            store.close()


def _write_summary(settings: WorkerSettings, summary: SweepSummary, err: TextIO) -> bool:
    """Writes a sweep's summary run to the collector; False when it did not get there."""
    processor = _install_exporter(settings)
    emit_summary_run(summary)
    flushed = processor.force_flush(_FLUSH_TIMEOUT_S) and not processor.stats.dropped
    processor.shutdown(timeout=1)
    if not flushed:
        print(
            f"warning: the summary run of sweep {summary.sweep_id} did not reach the collector "
            f"at {settings.collector_otlp_endpoint}",
            file=err,
        )
    return flushed


def _complete_slot(
    settings: WorkerSettings, store: StateStore, sweep: Sweep, count: int, err: TextIO
) -> int:
    """Every shard is recorded: the summary run, then the sweep finished (in that order, so
    that a pod lost in between leaves it to the retry, which writes the same run again)."""
    summary = summarize(sweep, store, time.time())
    if not _write_summary(settings, summary, err):
        return EXIT_UNRECORDED
    finished = _with_retries(
        lambda: store.finish_shards(sweep.sweep_id, summary.to_json(), time.time())
    )
    shards = f"all {count} shards" if count > 1 else "its one shard"
    counts = ", ".join(f"{getattr(summary, s)} {s}" for s in STATUSES)
    print(
        f"slot {sweep.slot!r}: {shards} recorded; sweep {sweep.sweep_id} "
        f"{'finished' if finished else 'was finished already'} ({summary.evals} evals: "
        f"{counts}), summary run {summary.sweep_run_id}",
        file=err,
    )
    return EXIT_OK


def _report_export(
    settings: WorkerSettings, export: bool, processor: Any, exported: _Exported, err: TextIO
) -> bool:
    """Says where the eval runs went; True when every span reached the collector."""
    if not export:
        print(
            "eval runs not recorded: no collector configured "
            "(set AFR_WORKER_COLLECTOR_KEY and AFR_WORKER_COLLECTOR_OTLP_ENDPOINT)",
            file=err,
        )
        return False
    if processor is not None:
        exported.unflushed = 0 if processor.force_flush(_FLUSH_TIMEOUT_S) else 1
        processor.shutdown(timeout=1)
        exported.dropped_by_process = {0: processor.stats.dropped}
    dropped = sum(exported.dropped_by_process.values())
    where = settings.collector_otlp_endpoint
    if not exported.unflushed and not dropped:
        print(f"eval runs recorded in the collector at {where}", file=err)
        return True
    print(
        f"warning: eval runs may be incomplete in the collector at {where}: "
        f"{dropped} spans dropped" + (", a flush timed out" if exported.unflushed else ""),
        file=err,
    )
    return False
