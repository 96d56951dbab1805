"""Every fault scenario of the testbed at small scale (issue 12), against real collector
processes on the embedded store: acknowledged == stored after deduplication, stored ⊆ sent,
field-by-field equality, bounded memory. ``make bench`` runs the same at full scale.

The collectors are forked from one launcher (``testbed.launcher``) that has imported the
collector already, so the many restarts cost ~1.5 s each rather than ~7 s.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.collector import descendants
from testbed.hostile import KINDS
from testbed.launcher import Launcher
from testbed.scenarios import (
    SMALL,
    Report,
    duplicates,
    hostile,
    sigkill,
    sigterm,
    slow_store,
    steady,
    store_down,
    store_permanent,
    store_transient,
)


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    before = set(descendants(os.getpid()))
    with Launcher() as launcher:
        yield launcher
        # Every scenario stopped or killed what it started, on failure too.
        left = set(descendants(os.getpid())) - before - {launcher.pid}
        assert not left, f"processes left running: {sorted(left)}"


def _clean(report: Report) -> None:
    """What every scenario's report shows when nothing went wrong (the scenario asserted
    the invariants already; these are the figures a reader checks first)."""
    assert report.lost == 0
    assert report.acknowledged > 0
    assert report.stored >= report.acknowledged - report.dead_lettered
    assert report.mismatched == 0
    assert report.not_sent == 0


def test_steady_load_is_stored_exactly_as_sent(launcher: Launcher, tmp_path: Path) -> None:
    report = steady(SMALL, tmp_path, launcher=launcher)
    _clean(report)
    assert report.acknowledged == report.sent == report.stored == SMALL.spans
    assert report.checked_fields >= SMALL.spans * 20, "compared field by field"
    assert report.retried == report.resent == 0


@pytest.mark.slow
def test_sigkill_under_load_and_during_recovery_loses_nothing(
    launcher: Launcher, tmp_path: Path
) -> None:
    report = sigkill(SMALL, tmp_path, launcher=launcher)
    _clean(report)
    assert report.stored == SMALL.spans
    assert report.resent > 0, "senders saw the collector go away and sent again"
    assert any("during recovery" in fault for fault in report.faults)
    assert any("during start-up" in fault for fault in report.faults)


def test_sigterm_under_load_stops_cleanly_and_loses_nothing(
    launcher: Launcher, tmp_path: Path
) -> None:
    report = sigterm(SMALL, tmp_path, launcher=launcher)
    _clean(report)
    assert report.stored == SMALL.spans


def test_store_down_for_a_while_loses_nothing(launcher: Launcher, tmp_path: Path) -> None:
    report = store_down(SMALL, tmp_path, launcher=launcher)
    _clean(report)
    assert report.stored == SMALL.spans
    assert report.dead_lettered == 0


@pytest.mark.slow
def test_transient_store_errors_are_retried_not_dead_lettered(
    launcher: Launcher, tmp_path: Path
) -> None:
    report = store_transient(SMALL, tmp_path, launcher=launcher)
    _clean(report)
    assert report.dead_lettered == 0
    assert report.stored == SMALL.spans


def test_rows_the_store_refuses_for_good_are_dead_lettered_alone(
    launcher: Launcher, tmp_path: Path
) -> None:
    report = store_permanent(SMALL, tmp_path, launcher=launcher)
    _clean(report)
    assert report.dead_lettered > 0
    assert report.dead_lettered_unpoisoned == 0
    assert report.stored == SMALL.spans - report.dead_lettered


def test_duplicate_and_overlapping_deliveries_are_stored_once(
    launcher: Launcher, tmp_path: Path
) -> None:
    report = duplicates(SMALL, tmp_path, launcher=launcher)
    _clean(report)
    assert report.duplicate_sends > 0
    assert report.stored == SMALL.spans
    assert report.inconsistent_duplicates == 0, "a span sent over gRPC and JSON reads the same"


def test_hostile_traffic_is_refused_or_bounded_and_good_traffic_unharmed(
    launcher: Launcher, tmp_path: Path
) -> None:
    report = hostile(SMALL, tmp_path, launcher=launcher)
    _clean(report)
    assert set(report.inputs) == set(KINDS), "every kind of hostile input was tried"
    assert report.refused > 0
    good = {k: v for k, v in report.outcomes.items() if k.startswith("good:")}
    assert good == {"good: acknowledged": sum(good.values())}


def test_slow_store_behind_a_small_log_refuses_retryably_and_loses_nothing(
    launcher: Launcher, tmp_path: Path
) -> None:
    report = slow_store(SMALL, tmp_path, launcher=launcher)
    _clean(report)
    assert report.retried > 0, "the full log answered retry-later and senders honoured it"
    assert report.stored == SMALL.spans
