"""``afr seed``: the canonical failing run, through the real Agents SDK, exported over OTLP."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

__all__ = ["add_seed_parser"]


def add_seed_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``afr seed``."""
    seed = commands.add_parser(
        "seed",
        help="produce the canonical failing run and export it through the bridge",
        description="Runs the refund-desk incident through the real Agents SDK Runner against "
        "the scripted model and exports it over OTLP (OTEL_EXPORTER_OTLP_* apply).",
    )
    seed.add_argument("--api", choices=["responses", "chat"], default="responses")
    seed.add_argument("--endpoint", help="OTLP endpoint (default: OTEL_EXPORTER_OTLP_ENDPOINT)")
    seed.add_argument("--protocol", choices=["grpc", "http/protobuf"])
    seed.add_argument("--flush-timeout-s", type=float, default=15.0)
    seed.set_defaults(func=_seed)


def _seed(args: argparse.Namespace) -> int:
    from agents import gen_trace_id

    import afr_exporter
    from afr.incident import RefundDesk, build_model, failing_script, run_incident
    from afr.scripted_model import ScriptedModelServer

    settings: dict[str, Any] = {}
    if args.endpoint:
        settings["endpoint"] = args.endpoint
    if args.protocol:
        settings["protocol"] = args.protocol
    processor = afr_exporter.install(**settings)
    desk = RefundDesk()
    trace_id = gen_trace_id()
    with ScriptedModelServer(failing_script()) as model:
        result = asyncio.run(
            run_incident(build_model(args.api, model.base_url), desk, trace_id=trace_id)
        )
    flushed = processor.force_flush(args.flush_timeout_s)
    processor.shutdown(timeout=1)
    stats = processor.stats
    print(f"seeded the failing refund-desk run ({args.api} API); refunds made: {len(desk.refunds)}")
    print(f"final answer: {result.final_output}")
    print(f"run id: {trace_id.removeprefix('trace_')}")
    print(
        f"spans exported {stats.exported}, dropped {stats.dropped}"
        + ("" if flushed else " (flush timed out: is the collector up?)")
    )
    return 0 if flushed and stats.dropped == 0 else 1
