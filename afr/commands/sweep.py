"""``afr sweep run``: one sweep now, in the foreground."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from afr.commands.common import add_data_dir_flag, data_dir, loading_the_sdk, worker_data_dir

__all__ = ["add_sweep_parser"]


def add_sweep_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``afr sweep``."""
    sweep = commands.add_parser("sweep", help="sweeps: every eval of the evals directory")
    sweep_commands = sweep.add_subparsers(dest="sweep_command", required=True)
    sweep_run = sweep_commands.add_parser(
        "run",
        help="run one sweep now, in the foreground, and print its summary",
        description="Runs every eval of the evals directory as one sweep slot claimed in the "
        "worker's state store, so a slot never runs twice to completion (a worker's or this "
        "command's), writes the eval runs and the sweep's summary run (kind sweep) to the "
        "collector, and prints the summary. Exit status: 0 nothing failed or errored, 1 "
        "otherwise (or the slot is running elsewhere), 2 bad input.",
    )
    sweep_run.add_argument(
        "--evals", type=Path, help="evals directory (default AFR_WORKER_EVALS_DIR, ./evals)"
    )
    sweep_run.add_argument(
        "--slot",
        help="the slot to run: an instant of the schedule (2026-12-01T03:00:00Z: that "
        "scheduled slot, done once) or any label (a manual slot of its own); default: a new "
        "manual slot",
    )
    add_data_dir_flag(sweep_run)
    sweep_run.set_defaults(func=_sweep_run)


def _sweep_run(args: argparse.Namespace) -> int:
    import json

    from afr.local import read_local_key
    from replay_worker.settings import WorkerSettings

    with loading_the_sdk():
        from replay_worker.sweeps import SweepLost, run_foreground

    overrides: dict[str, Any] = {}
    if args.evals is not None:
        overrides["evals_dir"] = args.evals
    directory = data_dir(args.data_dir)
    worker_dir = worker_data_dir(directory)
    if worker_dir is not None:  # the state `afr up`'s worker uses
        overrides["data_dir"] = worker_dir
    if "AFR_WORKER_COLLECTOR_KEY" not in os.environ:
        overrides["collector_key"] = read_local_key(directory)
    try:
        settings = WorkerSettings(**overrides)
    except ValueError as exc:
        print(f"afr sweep run: {exc}", file=sys.stderr)
        return 2
    if not settings.evals_dir.is_dir():
        print(f"afr sweep run: no evals directory {settings.evals_dir}", file=sys.stderr)
        return 2
    try:
        summary, sweep = run_foreground(settings, slot_label=args.slot)
    except SweepLost as exc:
        print(f"afr sweep run: {exc}", file=sys.stderr)
        return 1
    if summary is None:
        if sweep.state != "finished":
            print(
                f"afr sweep run: sweep {sweep.sweep_id} (slot {sweep.slot}) is {sweep.state}"
                + (" in a worker" if sweep.state == "running" else "")
                + (
                    " (run as shards by `afr eval run --shard I/N --slot`: its last shard"
                    " finishes it)"
                    if sweep.state == "sharded"
                    else ""
                )
                + (f": {sweep.error['reason']}" if sweep.error else ""),
                file=sys.stderr,
            )
            return 1
        print(f"slot {sweep.slot} was swept already; its summary:", file=sys.stderr)
        print(json.dumps(sweep.summary, indent=2))
        done = sweep.summary or {}
        return 0 if done and not (done["failed"] or done["errored"]) else 1
    print(json.dumps(summary.to_json(), indent=2))
    print(
        f"sweep {summary.sweep_id}: {summary.passed} passed, {summary.failed} failed, "
        f"{summary.inconclusive} inconclusive, {summary.errored} errored; "
        f"${summary.cost_usd:.6f}, {summary.duration_s:.1f} s; run {summary.sweep_run_id}",
        file=sys.stderr,
    )
    return 0 if summary.ok else 1
