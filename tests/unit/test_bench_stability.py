"""The collector bench's stability summary: throughput judged in the machine's own speed."""

from __future__ import annotations

import re
from collections.abc import Sequence

from bench.collector_bench import _stability


def _windows(spans_per_s: Sequence[float], workers_us: Sequence[float]) -> list[dict[str, float]]:
    return [
        {
            "spans_per_s": rate,
            "collector_cpu_us_per_span": 60.0,
            "workers_cpu_us_per_span": cpu,
            "collector_peak_rss_mib": 700.0,
            "workers_peak_rss_mib": 200.0,
        }
        for rate, cpu in zip(spans_per_s, workers_us, strict=True)
    ]


def _adjusted(summary: str) -> float:
    found = re.search(r"in the machine's speed of each window ([0-9.]+)x", summary)
    assert found is not None, summary
    return float(found.group(1))


def test_a_machine_that_slows_down_is_not_read_as_a_collector_that_does() -> None:
    """Throughput falling by a fifth while the same Python work costs a fifth more per span
    is the machine: flat in its speed. Falling while that work costs the same is the
    collector (its store, its merges) slowing down."""
    slower_machine = _stability(_windows([10_000] * 3 + [8_000] * 3, [100] * 3 + [125] * 3))
    assert "last third / first 0.80x" in slower_machine
    assert _adjusted(slower_machine) == 1.0
    slower_collector = _stability(_windows([10_000] * 3 + [8_000] * 3, [100] * 6))
    assert _adjusted(slower_collector) == 0.8
