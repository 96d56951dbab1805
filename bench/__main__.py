"""Runs every benchmark and prints its figures; `python -m bench [name ...]`."""

from __future__ import annotations

import sys
from collections.abc import Callable

from bench import (
    bisect_bench,
    collector_bench,
    dashboard_bench,
    eval_bench,
    exporter_bench,
    failures_bench,
    logs_bench,
    read_bench,
    storage_bench,
    testbed_bench,
    worker_bench,
)

BENCHES: dict[str, Callable[[], object]] = {
    "exporter": exporter_bench.main,
    "collector": collector_bench.main,
    "worker": worker_bench.main,
    "eval": eval_bench.main,
    "read": read_bench.main,
    "dashboards": dashboard_bench.main,
    "failures": failures_bench.main,
    "storage": storage_bench.main,
    "testbed": testbed_bench.main,
    "bisect": bisect_bench.main,
    "logs": logs_bench.main,
}


def main(argv: list[str]) -> int:
    names = argv or list(BENCHES)
    for name in names:
        if name not in BENCHES:
            print(f"unknown benchmark {name!r}; known: {', '.join(BENCHES)}", file=sys.stderr)
            return 2
        BENCHES[name]()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
