"""``AFR_FAILURE_SIGNATURES``: on (the default), every failure kind of the replay matrix gets a
signature and clusters; off, the same failures are stored as failed runs with no cause and no
signature, and the failures list has nothing to show (ADR 34)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.booking_agent import FAILURE_KINDS
from tests.integration.conftest import capture_failures, start_collector

_SUMMARY = """
SELECT run_id, status, failure_cause, signature
FROM {db}.run_summary WHERE project = {project:String} AND run_id IN {ids:Array(String)}
"""


@pytest.mark.parametrize("signatures", [True, False], ids=["on", "off"])
def test_failing_runs_cluster_only_with_signatures_on(tmp_path: Path, signatures: bool) -> None:
    thread, running = start_collector(tmp_path / "data", failure_signatures=signatures)
    try:
        runs = {
            run_id: kind for kind, (run_id, _) in capture_failures(running, FAILURE_KINDS).items()
        }
        running.collector.flush()
        rows = running.store.query(_SUMMARY, {"project": "shop", "ids": list(runs)})
        summary = {row[0]: (row[1], row[2], row[3]) for row in rows}
        assert sorted(summary) == sorted(runs)
        assert {status for status, _, _ in summary.values()} == {"error"}, "failed either way"
        signatures_of = {run_id: signature for run_id, (_, _, signature) in summary.items()}
        listed = running.api("/api/v1/failures", limit="500")
        assert listed.status_code == 200, listed.text
        clustered = {c["signature"]: c["runs"] for c in listed.json()["failures"]}
        if signatures:
            assert all(summary[run_id][1] for run_id in runs), summary
            assert len(set(signatures_of.values())) == len(FAILURE_KINDS), signatures_of
            assert clustered == dict.fromkeys(signatures_of.values(), 1)
        else:
            assert set(summary.values()) == {("error", "", "")}, summary
            assert clustered == {}
    finally:
        thread.stop()
