"""The failures bench measures what it says it does: its generated store, at a tenth of the
bench's size (``python -m bench failures`` seeds it the same way), holds the failing runs,
the ~50 signatures and every cluster status the figures are about, read back through
``FailureReader``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

_RUNS = 20_000


def test_the_bench_store_has_its_failing_runs_signatures_and_every_status(tmp_path: Path) -> None:
    seeded = subprocess.run(
        [sys.executable, "-m", "bench.failures_bench", str(tmp_path / "chdb")],
        env={**os.environ, "AFR_BENCH_FAILURE_RUNS": str(_RUNS)},
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert seeded.returncode == 0, seeded.stderr[-2000:]
    figures = json.loads(seeded.stdout.strip().splitlines()[-1])
    assert figures["runs_stored"] == _RUNS
    assert figures["spans_stored"] == _RUNS * 10 + _RUNS // 10  # 1% delivered twice
    # A tenth of the runs fail in production; the window leaves out the first hour's.
    assert 0.98 * _RUNS / 10 <= figures["failing_runs_in_window"] <= _RUNS / 10
    assert 45 <= figures["clusters"] <= 50
    assert set(figures["statuses"]) == {"open", "fixed", "guarded", "recurring"}
    assert len(figures["reader_queries_p50_ms"]) == 2, "one query for clusters, one for links"
    # The reader of the code before the bench's baseline ref finds the same clusters (where
    # git has that commit).
    assert figures.get("same_as_baseline", True) is True
