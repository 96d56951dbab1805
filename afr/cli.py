"""The ``afr`` command: the composition root that wires the parts for one machine."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["main"]


def _seed(args: argparse.Namespace) -> int:
    from agents import gen_trace_id

    import exporter
    from afr.incident import RefundDesk, build_model, failing_script, run_incident
    from afr.scripted_model import ScriptedModelServer

    settings: dict[str, Any] = {}
    if args.endpoint:
        settings["endpoint"] = args.endpoint
    if args.protocol:
        settings["protocol"] = args.protocol
    processor = exporter.install(**settings)
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


def _demo(args: argparse.Namespace) -> int:
    from afr.demo import run_demo

    return run_demo()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="afr", description="afr, the Agent Flight Recorder")
    commands = parser.add_subparsers(dest="command", required=True)

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

    demo = commands.add_parser("demo", help="walk the sacred path end to end and say what happened")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
