"""``python -m testbed.faulty_collector``: ``afr up --no-worker`` whose store has faults.

The same collector as ``afr up`` (settings from ``AFR_*``, one ingest worker per CPU unless
``AFR_INGEST_WORKERS`` says otherwise, the GC tuning, SIGTERM/SIGINT stop it gracefully, the
same banner lines), built with ``collector.server.Collector(store=FaultyStore(...))``: the
store's faults follow the control file (``testbed.faults``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.faulty_collector")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--control", type=Path, required=True, help="the FaultPlan file")
    parser.add_argument("--status", type=Path, required=True, help="where FaultStatus goes")
    args = parser.parse_args(argv)

    from collector.server import Collector, build_store, tune_gc_for_ingest
    from collector.settings import CollectorSettings
    from testbed.faults import FaultyStore

    tune_gc_for_ingest()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = CollectorSettings(
        data_dir=args.data_dir, grpc_port=args.grpc_port, http_port=args.http_port
    )
    if "AFR_INGEST_WORKERS" not in os.environ:
        settings = settings.model_copy(update={"ingest_workers": os.cpu_count() or 1})

    async def serve() -> None:
        settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        # What Collector builds when it is given no store, wrapped.
        store = FaultyStore(build_store(settings), args.control, args.status)
        collector = Collector(settings, store=store)
        await collector.start()
        print(f"afr collector up (store {settings.store_location}, faults from {args.control})")
        print(f"  OTLP/gRPC  http://{settings.grpc_host}:{collector.grpc_port}")
        print(f"  OTLP/HTTP  http://{settings.http_host}:{collector.http_port}/v1/traces")
        print(f"  read API   http://{settings.http_host}:{collector.http_port}/api/v1/runs")
        if collector.recovered_rows:
            print(
                f"  recovered {collector.recovered_rows} acknowledged spans from the write-ahead log"
            )
        sys.stdout.flush()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await collector.stop()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
