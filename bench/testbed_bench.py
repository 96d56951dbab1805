"""The fault testbed at full scale (issue 12): every scenario of ``testbed.scenarios``.

Each scenario runs against ``afr up`` (or the same collector with store faults) started as
a plain process, so restart times include the interpreter's imports, as a user's would.
Figures: load held (acknowledged spans/s, steady), faults survived, spans lost (must be
0), duplicates, peak RSS under hostile load, inputs tried; and every scenario's
accounting (sent, acknowledged, refused, retried, stored, dead-lettered) with the
invariants it broke, if any. ``python -m bench.testbed_bench [small|medium|full]
[scenario ...]`` runs a subset.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from testbed.scenarios import FULL, MEDIUM, SCENARIOS, SMALL, Report, Scale

RESULTS = Path(__file__).parent / "results"
SCALES = {scale.name: scale for scale in (SMALL, MEDIUM, FULL)}


def _line(report: Report) -> str:
    return (
        f"  {report.scenario:16} sent {report.sent:7} ack {report.acknowledged:7} "
        f"stored {report.stored:7} lost {report.lost:3} refused {report.refused:5} "
        f"retried {report.retried:6} resent {report.resent:6} dup rows {report.duplicates:6} "
        f"dead {report.dead_lettered:4} RSS {report.peak_rss_mib:5.0f} MiB "
        f"{report.duration_s:6.1f} s"
    )


def main(scale_name: str = "full", names: list[str] | None = None) -> dict[str, Any]:
    scale: Scale = SCALES[scale_name]
    chosen = names or list(SCENARIOS)
    workdir = Path(tempfile.mkdtemp(prefix="afr-testbed-bench-"))
    print(
        f"testbed bench ({scale.name}: {scale.spans} spans per scenario, {scale.senders} "
        f"senders, {scale.rounds} kill rounds, {scale.hostile_requests} hostile requests; "
        f"data in {workdir})"
    )
    reports: dict[str, Report] = {}
    started = time.monotonic()
    for name in chosen:
        reports[name] = report = SCENARIOS[name](scale, workdir, check=False)
        print(_line(report))
        for violation in report.violations():
            print(f"    VIOLATED: {violation}")
        for detail in report.details[:3]:
            print(f"      {detail}")
    wall_s = time.monotonic() - started
    steady = reports.get("steady")
    hostile = reports.get("hostile")
    violations = {n: r.violations() for n, r in reports.items() if r.violations()}
    summary: dict[str, Any] = {
        "scale": scale.name,
        "spans_per_scenario": scale.spans,
        "wall_s": wall_s,
        "load_held_spans_per_s": steady.acknowledged_per_s if steady else None,
        "faults_survived": sum(r.faults_survived for r in reports.values()),
        "spans_lost": sum(r.lost + r.pending for r in reports.values()),
        "good_spans_dead_lettered": sum(r.dead_lettered_unpoisoned for r in reports.values()),
        "duplicate_rows_seen": sum(r.duplicates for r in reports.values()),
        "duplicate_spans_sent": sum(r.duplicate_sends for r in reports.values()),
        "peak_rss_hostile_mib": hostile.peak_rss_mib if hostile else None,
        "peak_rss_any_mib": max(r.peak_rss_mib for r in reports.values()),
        "inputs_tried": hostile.inputs if hostile else {},
        "hostile_outcomes": hostile.outcomes if hostile else {},
        "violations": violations,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "testbed.json").write_text(
        json.dumps(
            {"summary": summary, "scenarios": {n: r.as_dict() for n, r in reports.items()}},
            indent=2,
            ensure_ascii=False,
        )
    )
    print(f"  load held (steady)        {summary['load_held_spans_per_s'] or 0:10.0f} spans/s")
    print(f"  faults survived           {summary['faults_survived']:10}")
    print(f"  spans lost (must be 0)    {summary['spans_lost']:10}")
    print(
        f"  duplicates                {summary['duplicate_spans_sent']:10} spans sent twice, "
        f"{summary['duplicate_rows_seen']} extra rows seen before deduplication"
    )
    if hostile is not None:
        print(
            f"  peak RSS, hostile load    {hostile.peak_rss_mib:10.0f} MiB "
            f"(bound {hostile.rss_bound_mib:.0f}); any scenario {summary['peak_rss_any_mib']:.0f}"
        )
        print(
            f"  inputs tried              {sum(hostile.inputs.values()):10} hostile requests "
            f"of {len(hostile.inputs)} kinds"
        )
    print(f"  scenarios with violations {len(violations):10} of {len(reports)}")
    if violations:
        print(f"  data kept for inspection in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)  # a full run leaves ~3 GB
    return summary


if __name__ == "__main__":
    arguments = sys.argv[1:]
    main(arguments[0] if arguments else "full", arguments[1:] or None)
