"""``afr runs tail``'s live loop: its clock, sleep and stop condition passed in, so tests
drive it on a manual clock."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from afr.runs.client import CollectorUnreachable
from afr.runs.times import NS_PER_S, api_time

__all__ = ["TAIL_INTERVAL_S", "TAIL_LAG_S", "TAIL_SINCE", "tail_runs"]

TAIL_SINCE = "5m"
"""Where ``afr runs tail`` starts unless ``--since`` says."""
TAIL_INTERVAL_S = 2.0
TAIL_LAG_S = 300.0
"""How far back each tail poll looks: a run is listed by its earliest span, which can be
stored well after it started (spans are exported as they end)."""


def tail_runs(
    list_pages: Callable[[Mapping[str, str]], Iterator[list[dict[str, Any]]]],
    emit: Callable[[dict[str, Any], bool], None],
    *,
    filters: Mapping[str, str],
    since_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    stop: Callable[[], bool] = lambda: False,
    warn: Callable[[str], None] = lambda message: None,
    interval_s: float = TAIL_INTERVAL_S,
    lag_s: float = TAIL_LAG_S,
) -> None:
    """Polls for runs started since ``since_s``, oldest first, each emitted once; again (with
    ``changed``) when an ok run turns out to have failed, as its late spans arrive.

    Each poll looks back ``lag_s`` from the previous one, so a run stored after it started
    is still seen; the ids already emitted are forgotten once they fall out of that window.
    A collector that stops answering after the first poll is retried (``warn`` says so once);
    the first poll's error, and a refused key or filter, are raised.
    """
    seen: dict[str, tuple[str, int]] = {}
    window_s = since_s
    polled = False
    unreachable = False
    while True:
        now_s = clock()
        params = {**filters, "since": api_time(window_s)}
        try:
            runs = [run for page in list_pages(params) for run in page]
        except CollectorUnreachable as exc:
            if not polled:
                raise
            if not unreachable:
                warn(f"{exc}; retrying every {interval_s:g}s")
            unreachable = True
        else:
            if unreachable:
                warn("collector answering again")
            polled, unreachable = True, False
            for run in sorted(runs, key=lambda r: (r.get("start_ns", 0), r.get("run_id", ""))):
                run_id, status = str(run.get("run_id")), str(run.get("status"))
                before = seen.get(run_id)
                if before is None or (before[0] == "ok" and status == "error"):
                    emit(run, before is not None)
                seen[run_id] = (status, int(run.get("start_ns", 0)))
            window_s = max(since_s, now_s - lag_s)
            horizon_ns = int(window_s * NS_PER_S)
            for run_id in [r for r, (_, start) in seen.items() if start < horizon_ns]:
                del seen[run_id]
        if stop():
            return
        sleep(interval_s)
