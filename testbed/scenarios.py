"""The scenarios: load against a real collector process under one kind of fault each.

Every scenario sends the same kind of agent traffic (``testbed.traces``) with exact
accounting (``testbed.loadgen``), applies its fault, ends with the collector stopped
gracefully with a healthy store, and diffs the store against the ledger
(``testbed.validator``). The invariants, for every scenario:

- acknowledged == stored, after deduplication (+ dead-lettered, for rows the scenario made
  the store refuse for good), every stored span equal to what was sent, field by field;
- stored ⊆ sent: nothing stored that was not sent, refused, or sent under another key;
- every good span acknowledged in the end (retries honoured, nothing abandoned), every
  answer one the collector documents for that input (no server errors);
- bounded memory: the collector's process tree stays under the scale's RSS bound;
plus what the scenario is about actually happened (``failed_checks``): kills during
recovery, retry hints honoured, faults seen by the store.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.auth import KeyStore
from testbed.collector import CollectorProcess, Ports, RssSampler
from testbed.faults import TRANSIENT_ERRORS, FaultControl, FaultPlan, FaultStatus
from testbed.hostile import KINDS, hostile_requests
from testbed.launcher import Launcher
from testbed.loadgen import LoadGenerator, Request, Transport, plan_good
from testbed.traces import SPANS_PER_TRACE, TraceSet, span_key
from testbed.validator import dump_in_child, pending_in_log, validate

__all__ = [
    "FULL",
    "MEDIUM",
    "SCENARIOS",
    "SMALL",
    "Report",
    "Scale",
    "Testbed",
    "duplicates",
    "hostile",
    "sigkill",
    "sigterm",
    "slow_store",
    "steady",
    "store_down",
    "store_permanent",
    "store_transient",
]

PROJECT = "testbed"
ALL_TRANSPORTS = tuple(Transport)


@dataclass(frozen=True)
class Scale:
    name: str
    traces: int
    """Good traces per scenario (nine spans each)."""
    senders: int
    rounds: int
    """SIGKILL rounds (each: a kill under load, then one during recovery or start-up)."""
    traces_per_request: int
    hostile_requests: int
    ingest_workers: int | None
    """``AFR_INGEST_WORKERS``; None: ``afr up``'s default, one per CPU."""
    max_rss_mib: float
    """Bound on the collector process tree's resident set, any scenario, any moment."""
    deadline_s: float
    """A scenario's load must be settled by then; what is not is abandoned (a failure)."""
    batch_interval_s: float = 1.0
    fault_hold_s: float = 10.0
    """How long a store fault lasts (at least)."""
    transient_failures: int = 10
    """Inserts refused with transient errors, the codes in turn (the writer backs off
    between retries: 0.5 s, doubling up to 5 s, so each costs time)."""

    @property
    def spans(self) -> int:
        return self.traces * SPANS_PER_TRACE


SMALL = Scale(
    "small",
    traces=160,
    senders=4,
    rounds=2,
    traces_per_request=8,
    hostile_requests=26,
    ingest_workers=0,
    max_rss_mib=1024,
    deadline_s=120,
    batch_interval_s=0.2,
    fault_hold_s=1.5,
    transient_failures=len(TRANSIENT_ERRORS),
)
MEDIUM = Scale(
    "medium",
    traces=2_000,
    senders=6,
    rounds=4,
    traces_per_request=12,
    hostile_requests=120,
    ingest_workers=None,
    max_rss_mib=2048,
    deadline_s=600,
    fault_hold_s=5.0,
)
FULL = Scale(
    "full",
    traces=11_112,  # 100,008 spans
    senders=8,
    rounds=10,
    traces_per_request=16,
    hostile_requests=600,
    ingest_workers=None,
    max_rss_mib=2048,
    deadline_s=1800,
)


@dataclass
class Report:
    scenario: str
    scale: str
    sent: int = 0
    acknowledged: int = 0
    refused: int = 0
    retried: int = 0
    """Span resends after a retryable refusal (UNAVAILABLE/503 and a retry hint)."""
    resent: int = 0
    """Span resends after no answer (collector down or dying, timeouts)."""
    no_answers: int = 0
    in_doubt: int = 0
    abandoned: int = 0
    stored: int = 0
    lost: int = 0
    pending: int = 0
    duplicates: int = 0
    """Rows beyond one per span found in the store before deduplication."""
    duplicate_sends: int = 0
    """Spans delivered again on purpose (overlapping and repeated requests)."""
    inconsistent_duplicates: int = 0
    dead_lettered: int = 0
    dead_lettered_unpoisoned: int = 0
    not_sent: int = 0
    refused_but_stored: int = 0
    stored_unacknowledged: int = 0
    mismatched: int = 0
    checked_fields: int = 0
    peak_rss_mib: float = 0.0
    rss_bound_mib: float = 0.0
    duration_s: float = 0.0
    acknowledged_per_s: float = 0.0
    faults: list[str] = field(default_factory=list)
    faults_survived: int = 0
    """Kills, graceful stops under load and store fault windows (hostile inputs aside)."""
    inputs: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    anomalies: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    failed_checks: list[str] = field(default_factory=list)

    def violations(self) -> list[str]:
        found = []
        if self.lost:
            found.append(f"{self.lost} acknowledged spans not stored")
        if self.pending:
            found.append(f"{self.pending} acknowledged spans left in the write-ahead log")
        if self.dead_lettered_unpoisoned:
            found.append(f"{self.dead_lettered_unpoisoned} good spans dead-lettered")
        if self.not_sent:
            found.append(f"{self.not_sent} stored spans never sent (stored ⊄ sent)")
        if self.refused_but_stored:
            found.append(f"{self.refused_but_stored} refused spans stored")
        if self.stored_unacknowledged:
            found.append(f"{self.stored_unacknowledged} spans stored, never acknowledged")
        if self.mismatched:
            found.append(f"{self.mismatched} stored spans differ from what was sent")
        if self.inconsistent_duplicates:
            found.append(f"{self.inconsistent_duplicates} spans stored as differing copies")
        if self.abandoned:
            found.append(f"{self.abandoned} spans never settled before the deadline")
        if self.anomalies:
            found.append(f"{len(self.anomalies)} unexpected answers")
        if self.peak_rss_mib > self.rss_bound_mib:
            found.append(f"peak RSS {self.peak_rss_mib:.0f} MiB > bound {self.rss_bound_mib:.0f}")
        return found + self.failed_checks

    def assert_invariants(self) -> None:
        found = self.violations()
        if found:
            lines = [f"{self.scenario} ({self.scale}): " + "; ".join(found)]
            lines += [f"  answer: {a}" for a in self.anomalies[:10]]
            lines += [f"  detail: {d}" for d in self.details[:15]]
            lines += [f"  fault: {f}" for f in self.faults[:15]]
            raise AssertionError("\n".join(lines))

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Testbed:
    """One scenario's world: a data directory with the project's key, fixed ports, the
    collector process (plain ``afr up`` or the faulty launcher), an RSS sampler."""

    def __init__(
        self,
        scenario: str,
        scale: Scale,
        workdir: Path,
        *,
        faulty: bool = False,
        settings: Mapping[str, str] | None = None,
        launcher: Launcher | None = None,
    ) -> None:
        self.scenario = scenario
        self.scale = scale
        self.workdir = workdir / scenario
        self.data_dir = self.workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.key = KeyStore(self.data_dir / "keys.sqlite").create(PROJECT)
        self.ports = Ports.pick()
        self.traces = TraceSet(
            seed=zlib.crc32(scenario.encode()),
            base_ns=(time.time_ns() - 60 * 1_000_000_000) // 1_000_000 * 1_000_000,
        )
        env = {"AFR_BATCH_INTERVAL_S": str(scale.batch_interval_s), **(settings or {})}
        if scale.ingest_workers is not None:
            env["AFR_INGEST_WORKERS"] = str(scale.ingest_workers)
        self.faults = FaultControl(self.workdir / "faults") if faulty else None
        self.process = CollectorProcess(
            self.data_dir,
            self.ports,
            env=env,
            log_path=self.workdir / "collector.log",
            fault_files=(self.faults.control_path, self.faults.status_path)
            if self.faults
            else None,
            launcher=launcher,
        )
        self.rss = RssSampler()
        self.events: list[str] = []
        self.fault_count = 0
        self.failed_checks: list[str] = []
        self._started = time.monotonic()

    def __enter__(self) -> Testbed:
        self.rss.__enter__()
        self.rss.watch(self.process)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.process.close()
        finally:
            self.rss.__exit__()

    # --- helpers for scenarios -----------------------------------------------------------
    def start(self) -> float:
        """Starts the collector; seconds until it answers."""
        started = time.monotonic()
        self.process.start()
        return time.monotonic() - started

    def good_requests(self, **plan: Any) -> list[Request]:
        return plan_good(
            self.traces,
            range(self.scale.traces),
            traces_per_request=self.scale.traces_per_request,
            transports=plan.pop("transports", ALL_TRANSPORTS),
            **plan,
        )

    def load(self, requests: Sequence[Request]) -> LoadGenerator:
        return LoadGenerator(
            requests,
            grpc_port=self.ports.grpc,
            http_port=self.ports.http,
            key=self.key,
            senders=self.scale.senders,
            deadline_s=self.scale.deadline_s,
        ).start()

    def event(self, text: str, *, fault: bool = False) -> None:
        """Notes what happened; ``fault``: a fault the collector had to survive."""
        self.events.append(f"{time.monotonic() - self._started:6.1f}s {text}")
        self.fault_count += fault

    def check(self, ok: bool, text: str) -> None:
        if not ok:
            self.failed_checks.append(text)

    def wait_acknowledged(self, load: LoadGenerator, spans: int, timeout_s: float) -> int:
        """Polls until ``spans`` are acknowledged (or the load is done)."""
        deadline = time.monotonic() + timeout_s
        while load.acknowledged() < spans and not load.done:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{spans} spans not acknowledged in {timeout_s} s")
            time.sleep(0.02)
        return load.acknowledged()

    def status(self) -> FaultStatus:
        assert self.faults is not None
        status = self.faults.status()
        assert status is not None, "the faulty store has not written its status"
        return status

    def wait_status(
        self, predicate: Callable[[FaultStatus], bool], what: str, timeout_s: float = 60
    ) -> FaultStatus:
        assert self.faults is not None
        pid = self.process.pid
        return self.faults.wait(lambda s: s.pid == pid and predicate(s), timeout_s, what)

    def kill(self, why: str) -> None:
        result = self.process.kill()
        self.event(f"SIGKILL {why}", fault=True)
        self.check(
            not result.orphans, f"processes left behind by a killed collector: {result.orphans}"
        )

    def hold_fault(
        self, plan: FaultPlan, until: Callable[[FaultStatus], bool], what: str
    ) -> FaultStatus:
        """Applies ``plan`` for at least ``scale.fault_hold_s`` and until ``until`` holds."""
        assert self.faults is not None
        ends = time.monotonic() + self.scale.fault_hold_s
        self.faults.apply(plan)
        self.wait_status(until, what)
        while time.monotonic() < ends:
            time.sleep(0.05)
        return self.status()

    # --- the end of every scenario -------------------------------------------------------
    def finish(
        self,
        load: LoadGenerator,
        *,
        poisoned: frozenset[int] = frozenset(),
        drain_plan: FaultPlan | None = None,
    ) -> Report:
        ledger = load.wait(max(1.0, self.scale.deadline_s - (time.monotonic() - self._started)))
        duration = time.monotonic() - ledger.started_at
        ack_span = max(1e-9, (ledger.last_ack_at or time.monotonic()) - ledger.started_at)
        # Every scenario restarts what it kills: a collector gone now exited on its own.
        self.check(
            self.process.alive, f"the collector exited on its own: {self.process.log_tail(5)}"
        )
        # Drain: a healthy store (but for faults that are for good), then a graceful stop,
        # which inserts what was acknowledged.
        if self.faults is not None:
            self.faults.apply(drain_plan or FaultPlan())
        for _ in range(3):
            if not self.process.alive:
                self.start()
            stop = self.process.terminate()
            self.check(stop.exit_code == 0, f"final graceful stop exited with {stop.exit_code}")
            left = len(pending_in_log(self.data_dir))
            if not left:
                break
            self.event(f"{left} rows still in the log after a graceful stop: restarting to drain")
        self.rss.sample()
        from collector.settings import CollectorSettings

        settings = CollectorSettings(data_dir=self.data_dir)
        dump_path = self.workdir / "stored.jsonl"
        summary = dump_in_child(settings.store_dsn, settings.database, dump_path)
        result = validate(
            self.traces, PROJECT, ledger, dump_path, summary, self.data_dir, poisoned=poisoned
        )
        acknowledged = ledger.acknowledged | ledger.acknowledged_inexact
        return Report(
            scenario=self.scenario,
            scale=self.scale.name,
            sent=len(ledger.sent),
            acknowledged=len(acknowledged),
            refused=len(ledger.refused_spans),
            retried=ledger.retried_spans,
            resent=ledger.resent_spans,
            no_answers=ledger.no_answers + ledger.timeouts,
            in_doubt=len(ledger.in_doubt - acknowledged),
            abandoned=len(ledger.abandoned),
            stored=result.stored,
            lost=result.lost,
            pending=result.pending,
            duplicates=result.duplicate_rows,
            duplicate_sends=ledger.duplicate_span_sends,
            inconsistent_duplicates=len(result.inconsistent_duplicates),
            dead_lettered=result.dead_lettered,
            dead_lettered_unpoisoned=result.dead_lettered_unpoisoned,
            not_sent=result.not_sent,
            refused_but_stored=result.refused_but_stored,
            stored_unacknowledged=result.stored_unacknowledged,
            mismatched=result.mismatched,
            checked_fields=result.checked_fields,
            peak_rss_mib=self.rss.peak_tree_mib,
            rss_bound_mib=self.scale.max_rss_mib,
            duration_s=duration,
            acknowledged_per_s=len(ledger.acknowledged) / ack_span,
            faults=self.events,
            faults_survived=self.fault_count,
            inputs=dict(ledger.inputs),
            outcomes=dict(ledger.outcomes),
            anomalies=ledger.anomalies,
            details=result.details,
            failed_checks=self.failed_checks,
        )


def _workdir(workdir: Path | None) -> Path:
    return workdir if workdir is not None else Path(tempfile.mkdtemp(prefix="afr-testbed-"))


def _finish(report: Report, check: bool) -> Report:
    if check:
        report.assert_invariants()
    return report


# --- scenarios ---------------------------------------------------------------------------


def steady(
    scale: Scale,
    workdir: Path | None = None,
    *,
    check: bool = True,
    launcher: Launcher | None = None,
) -> Report:
    """Steady load over gRPC, HTTP/protobuf and HTTP/JSON: the baseline every fault is
    measured against (and "load held": acknowledged spans per second)."""
    with Testbed("steady", scale, _workdir(workdir), launcher=launcher) as bed:
        requests = bed.good_requests()
        bed.start()
        report = bed.finish(bed.load(requests))
    return _finish(report, check)


def sigkill(
    scale: Scale,
    workdir: Path | None = None,
    *,
    check: bool = True,
    launcher: Launcher | None = None,
) -> Report:
    """SIGKILL under load, ``scale.rounds`` times; after each, the restart is killed again
    while it recovers its write-ahead log (odd rounds) or while it starts (even rounds).
    A slow store keeps acknowledged rows waiting in the log, so there is always something
    to recover."""
    with Testbed("sigkill", scale, _workdir(workdir), faulty=True, launcher=launcher) as bed:
        assert bed.faults is not None
        requests = bed.good_requests()
        bed.start()
        bed.faults.apply(FaultPlan(insert_delay_s=1.0, insert_delay_per_row_s=20e-6))
        load = bed.load(requests)
        during_recovery = 0
        for round_number in range(scale.rounds):
            share = scale.spans * (round_number + 1) // (scale.rounds + 1)
            acknowledged = bed.wait_acknowledged(load, share, scale.deadline_s / 2)
            bed.kill(f"under load ({acknowledged} spans acknowledged)")
            if round_number % 2 == 0:
                seconds = bed.start()
                recovered = bed.process.recovered_rows
                status = bed.status()
                if not recovered or status.pid != bed.process.pid:
                    bed.event(f"restarted in {seconds:.1f} s with nothing to recover")
                    continue
                inserted = status.rows_inserted
                bed.kill(
                    f"during recovery ({inserted} of {recovered} recovered rows inserted, "
                    f"restart took {seconds:.1f} s)"
                )
                during_recovery += inserted < recovered
            else:
                bed.process.start(wait=False)
                assert bed.faults is not None
                bed.faults.wait(
                    lambda s: s.pid == bed.process.pid, 60, "the restarted collector's store"
                )
                bed.kill("during start-up (store open, log not yet recovered)")
            seconds = bed.start()
            bed.event(f"restarted in {seconds:.1f} s, recovering {bed.process.recovered_rows} rows")
        bed.check(
            scale.rounds == 0 or during_recovery > 0,
            "no kill landed while the collector was recovering its log",
        )
        report = bed.finish(load)
    return _finish(report, check)


def sigterm(
    scale: Scale,
    workdir: Path | None = None,
    *,
    check: bool = True,
    launcher: Launcher | None = None,
) -> Report:
    """SIGTERM under load: a graceful stop answers what it took, inserts everything it
    acknowledged and exits 0, promptly; senders retry through the restart."""
    with Testbed("sigterm", scale, _workdir(workdir), launcher=launcher) as bed:
        requests = bed.good_requests()
        bed.start()
        load = bed.load(requests)
        acknowledged = bed.wait_acknowledged(load, scale.spans // 2, scale.deadline_s / 2)
        stop = bed.process.terminate(timeout_s=60)
        left = len(pending_in_log(bed.data_dir))
        bed.event(
            f"SIGTERM under load ({acknowledged} spans acknowledged): exit {stop.exit_code} "
            f"in {stop.seconds:.1f} s, {left} rows left in the log",
            fault=True,
        )
        bed.check(stop.exit_code == 0, f"SIGTERM: exit code {stop.exit_code}")
        bed.check(stop.seconds < 30, f"SIGTERM: took {stop.seconds:.1f} s to stop")
        bed.check(left == 0, f"SIGTERM with a healthy store left {left} rows in the log")
        bed.check(not stop.orphans, f"processes left behind by a stopped collector: {stop.orphans}")
        bed.start()
        report = bed.finish(load)
    return _finish(report, check)


def store_down(
    scale: Scale,
    workdir: Path | None = None,
    *,
    check: bool = True,
    launcher: Launcher | None = None,
) -> Report:
    """The store unreachable for a while (inserts and ``SELECT 1`` fail): exports go on being
    acknowledged from the log, health says the store is failing, and everything arrives
    once it is back."""
    with Testbed("store-down", scale, _workdir(workdir), faulty=True, launcher=launcher) as bed:
        assert bed.faults is not None
        requests = bed.good_requests()
        bed.start()
        load = bed.load(requests)
        bed.wait_acknowledged(load, scale.spans // 4, scale.deadline_s / 2)
        status = bed.hold_fault(
            FaultPlan(mode="down"), lambda s: s.down_failures >= 3, "three failed inserts"
        )
        health = bed.process.health()
        bed.event(
            f"store down: {status.down_failures} inserts failed; /healthz {health and health[0]}",
            fault=True,
        )
        bed.check(
            health is not None and health[0] == 503,
            f"/healthz while the store is down answered {health and health[0]}, not 503",
        )
        bed.faults.apply(FaultPlan())
        report = bed.finish(load)
    return _finish(report, check)


def store_transient(
    scale: Scale,
    workdir: Path | None = None,
    *,
    check: bool = True,
    launcher: Launcher | None = None,
) -> Report:
    """The store up but refusing inserts for a while with retryable errors (252
    TOO_MANY_PARTS, 241 MEMORY_LIMIT_EXCEEDED, 159 TIMEOUT_EXCEEDED, 209/210 network), in
    turn, ``scale.transient_failures`` times: the same rows must be inserted once it
    recovers, none dead-lettered."""
    with Testbed(
        "store-transient", scale, _workdir(workdir), faulty=True, launcher=launcher
    ) as bed:
        assert bed.faults is not None
        requests = bed.good_requests()
        bed.start()
        load = bed.load(requests)
        bed.wait_acknowledged(load, scale.spans // 4, scale.deadline_s / 2)
        wanted = scale.transient_failures
        status = bed.hold_fault(
            FaultPlan(mode="transient"),
            lambda s: s.transient_failures >= wanted,
            f"{wanted} transient insert failures",
        )
        bed.event(
            f"store refused {status.transient_failures} inserts: codes {status.codes}", fault=True
        )
        bed.faults.apply(FaultPlan())
        report = bed.finish(load)
    return _finish(report, check)


def store_permanent(
    scale: Scale,
    workdir: Path | None = None,
    *,
    check: bool = True,
    launcher: Launcher | None = None,
) -> Report:
    """The store refusing some rows for good (27 CANNOT_PARSE_INPUT_ASSERTION_FAILED) in
    every batch they travel in: exactly those are dead-lettered, every other row stored."""
    with Testbed(
        "store-permanent", scale, _workdir(workdir), faulty=True, launcher=launcher
    ) as bed:
        assert bed.faults is not None
        # Tool spans, which nothing links to or names as parent, of a trace in every 40 (16
        # at most), spread over the run: isolating each costs a bisection of its batch.
        count = max(1, min(16, scale.traces // 40))
        numbers = range(3, scale.traces, max(1, scale.traces // count))
        poisoned = frozenset(span_key(n, 7) for n in numbers)
        plan = FaultPlan(poison_span_ids=tuple(bed.traces.span_id(n, 7).hex() for n in numbers))
        bed.faults.apply(plan)
        bed.event(f"the store refuses {len(poisoned)} spans for good", fault=True)
        requests = bed.good_requests()
        bed.start()
        report = bed.finish(bed.load(requests), poisoned=poisoned, drain_plan=plan)
        status = bed.faults.status()
        report.faults.append(
            f"the store refused {status.poison_refusals if status else '?'} inserts (bisection)"
        )
        if report.dead_lettered != len(poisoned):
            report.failed_checks.append(
                f"{report.dead_lettered} spans dead-lettered, {len(poisoned)} poisoned"
            )
    return _finish(report, check)


def duplicates(
    scale: Scale,
    workdir: Path | None = None,
    *,
    check: bool = True,
    launcher: Launcher | None = None,
) -> Report:
    """Duplicate and overlapping deliveries: windows overlapping by half a request (traces
    split across requests), every third request sent again on another transport, often
    while the first is in flight. Stored once each, identical copies."""
    with Testbed("duplicates", scale, _workdir(workdir), launcher=launcher) as bed:
        overlap = scale.traces_per_request * SPANS_PER_TRACE // 2 + 1
        requests = bed.good_requests(overlap_spans=overlap, duplicate_every=3)
        bed.start()
        report = bed.finish(bed.load(requests))
        if not report.duplicate_sends:
            report.failed_checks.append("no span was delivered twice")
    return _finish(report, check)


def hostile(
    scale: Scale,
    workdir: Path | None = None,
    *,
    check: bool = True,
    launcher: Launcher | None = None,
    kinds: Sequence[str] | None = None,
) -> Report:
    """Good traffic with hostile requests mixed in (``testbed.hostile``: oversize, gzip
    bombs, malformed protobuf and JSON, invalid UTF-8, lone surrogates, wrong and missing
    keys, wrong content type, malformed ids beside good spans, huge names and values), RSS
    sampled throughout: each refused or bounded as documented, the good traffic untouched."""
    max_request_bytes = 2 * 1024 * 1024
    chosen = list(kinds or KINDS)
    with Testbed(
        "hostile",
        scale,
        _workdir(workdir),
        settings={"AFR_MAX_REQUEST_BYTES": str(max_request_bytes)},
        launcher=launcher,
    ) as bed:
        good = bed.good_requests()
        bad = hostile_requests(
            bed.traces, scale.hostile_requests, max_request_bytes=max_request_bytes, kinds=chosen
        )
        requests: list[Request] = []
        every = max(1, len(good) // max(1, len(bad)))
        for index, request in enumerate(good):
            requests.append(request)
            if index % every == 0 and bad:
                requests.append(bad.pop())
        requests += bad
        bed.start()
        idle_tree = bed.rss.sample()[1]
        report = bed.finish(bed.load(requests))
        report.faults.append(
            f"{sum(report.inputs.values())} hostile requests of {len(report.inputs)} kinds; "
            f"RSS idle {idle_tree:.0f} MiB, peak {report.peak_rss_mib:.0f} MiB"
        )
        missing = set(chosen) - set(report.inputs)
        if missing and scale.hostile_requests >= len(chosen):
            report.failed_checks.append(f"inputs not tried: {sorted(missing)}")
    return _finish(report, check)


def slow_store(
    scale: Scale,
    workdir: Path | None = None,
    *,
    check: bool = True,
    launcher: Launcher | None = None,
) -> Report:
    """A slow store (each insert 0.5 s) behind a small write-ahead log (1 MiB): the log
    fills, exports are refused as retryable with a hint, senders wait as told and resend;
    memory stays bounded and everything acknowledged arrives."""
    with Testbed(
        "slow-store",
        scale,
        _workdir(workdir),
        faulty=True,
        settings={"AFR_WAL_MAX_BYTES": str(1024 * 1024), "AFR_RETRY_AFTER_S": "0.5"},
        launcher=launcher,
    ) as bed:
        assert bed.faults is not None
        bed.faults.apply(FaultPlan(insert_delay_s=0.5))
        bed.event("every insert takes 0.5 s, behind a 1 MiB log", fault=True)
        requests = bed.good_requests()
        bed.start()
        report = bed.finish(bed.load(requests))
        if not report.retried:
            report.failed_checks.append("the log never filled: no retryable refusal was sent")
    return _finish(report, check)


Scenario = Callable[..., Report]
SCENARIOS: dict[str, Scenario] = {
    "steady": steady,
    "sigkill": sigkill,
    "sigterm": sigterm,
    "store-down": store_down,
    "store-transient": store_transient,
    "store-permanent": store_permanent,
    "duplicates": duplicates,
    "hostile": hostile,
    "slow-store": slow_store,
}
