"""``afr eval synthesize|schema|run``: portable regression evals (afr.eval/v1 files)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from afr.commands.common import (
    add_data_dir_flag,
    data_dir,
    loading_the_sdk,
    worker_data_dir,
    worker_data_dir_set,
)

__all__ = ["add_eval_parser"]


def add_eval_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``afr eval``."""
    # afr eval <command>: one parser for every eval command (synthesize, schema, run...).
    evals = commands.add_parser("eval", help="portable regression evals (afr.eval/v1 files)")
    eval_commands = evals.add_subparsers(dest="eval_command", required=True)
    synthesize = eval_commands.add_parser(
        "synthesize",
        help="write the eval a FAILURE_FIXED replay implies into the evals directory",
        description="Reads the replay run and its source through the collector's read API "
        "(AFR_WORKER_COLLECTOR_URL, key AFR_WORKER_COLLECTOR_KEY or the local project's key), "
        "derives the assertions that capture the correction, and writes <dir>/<eval id>.json. "
        "The same runs always give the same file.",
    )
    synthesize.add_argument("replay_run_id")
    synthesize.add_argument(
        "-o", "--output", type=Path, help="evals directory (default AFR_WORKER_EVALS_DIR, ./evals)"
    )
    synthesize.add_argument("--collector", help="collector URL (default AFR_WORKER_COLLECTOR_URL)")
    synthesize.add_argument(
        "--assist",
        action="store_true",
        help="also ask the configured model for assertions (kept only if valid and holding on "
        "the fixing replay; costs through the ledger; not deterministic)",
    )
    add_data_dir_flag(synthesize)
    synthesize.set_defaults(func=_eval_synthesize)
    schema = eval_commands.add_parser("schema", help="print or write the afr.eval/v1 JSON Schema")
    schema.add_argument("-o", "--output", type=Path, help="write it to this file")
    schema.set_defaults(func=_eval_schema)
    run_evals = eval_commands.add_parser(
        "run",
        help="replay every eval and check its assertions (exit 1 on a failed eval)",
        description="Replays each eval through the replay engine (tools answered from the "
        "captured outcomes, models and budgets as the worker's: AFR_WORKER_MODEL_*, "
        "AFR_WORKER_*_BUDGET_USD), checks its assertions, prints a table and writes each eval "
        "run to the collector when one is configured (AFR_WORKER_COLLECTOR_KEY, "
        "AFR_WORKER_COLLECTOR_OTLP_ENDPOINT). Exit status: 0 all passed, 1 any failed, "
        "errored or inconclusive, 2 bad input.",
    )
    run_evals.add_argument(
        "paths",
        nargs="*",
        type=Path,
        help="eval files or directories (default AFR_WORKER_EVALS_DIR, ./evals)",
    )
    run_evals.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="run against the agent as the code defines it now (its instructions, tool "
        "schemas, handoffs) instead of the captured one",
    )
    run_evals.add_argument("--model", help="model to run against (default: each eval's)")
    run_evals.add_argument(
        "--shard",
        metavar="I/N",
        help="run only shard I of N: I from 1 to N, or 0 to N-1 (a Kubernetes Indexed Job's "
        "JOB_COMPLETION_INDEX; 0/N is N/N); N machines cover each eval once",
    )
    run_evals.add_argument("--junit", type=Path, metavar="FILE", help="write a JUnit XML report")
    run_evals.add_argument(
        "--allow-inconclusive",
        action="store_true",
        help="an INCONCLUSIVE eval does not fail the run (a skipped test in JUnit)",
    )
    of_sweep = run_evals.add_mutually_exclusive_group()
    of_sweep.add_argument("--sweep-id", help="record the eval runs as part of this sweep")
    of_sweep.add_argument(
        "--slot",
        help="record the eval runs as the sweep of this slot (named as for afr sweep run "
        "--slot): every shard and retry of a slot writes each eval's run once; exit 3 when "
        "the runs did not all reach the collector",
    )
    run_evals.add_argument("--workers", type=int, default=1, help="eval processes (default 1)")
    run_evals.add_argument("--json", action="store_true", help="print the outcomes as JSON")
    run_evals.add_argument(
        "--list", action="store_true", help="print the evals this shard would run, and exit"
    )
    run_evals.add_argument(
        "--no-export", action="store_true", help="do not write the eval runs to the collector"
    )
    run_evals.add_argument(
        "--data-dir",
        type=Path,
        help="the day's spend and sweep slots are the worker's of this data directory, "
        "<data dir>/worker (default ./.afr/data: AFR_DATA_DIR; AFR_WORKER_DATA_DIR wins)",
    )
    run_evals.set_defaults(func=_eval_run)


def _eval_synthesize(args: argparse.Namespace) -> int:
    """Two runs read, one file written: no Agents SDK (``--assist`` loads it, to ask a model)."""
    import re

    from replay_worker.client import CollectorClient, CollectorUnavailable, RunNotFound
    from replay_worker.evals.contract import write_eval
    from replay_worker.evals.synthesis import SynthesisError, fetch_runs, synthesize
    from replay_worker.settings import WorkerSettings

    run_id = args.replay_run_id.lower().removeprefix("trace_")
    if not re.fullmatch(r"[0-9a-f]{32}", run_id):
        print("afr eval synthesize: a run id is 32 hex digits", file=sys.stderr)
        return 2
    settings = WorkerSettings()
    key: str | None
    if settings.collector_key:
        key = settings.collector_key.get_secret_value()
    else:  # the local project's key, where `afr up` keeps it
        from afr.local import read_local_key
        from collector.settings import CollectorSettings

        key = read_local_key(args.data_dir or CollectorSettings().data_dir)
    client = CollectorClient(args.collector or settings.collector_url, key)
    try:
        source, replay = asyncio.run(fetch_runs(client, run_id, wait_s=settings.run_wait_s))
        document = synthesize(source, replay)
    except SynthesisError as exc:
        print(f"afr eval synthesize: refused: {exc}", file=sys.stderr)
        return 1
    except (RunNotFound, CollectorUnavailable) as exc:
        print(f"afr eval synthesize: {exc}", file=sys.stderr)
        return 1
    if args.assist:
        with loading_the_sdk():
            from replay_worker.evals.assist import assist_with_settings

        if args.data_dir is not None and "AFR_WORKER_DATA_DIR" not in os.environ:
            settings = settings.model_copy(update={"data_dir": args.data_dir / "worker"})
        try:
            outcome, cost_usd = asyncio.run(assist_with_settings(document, replay, settings))
        except Exception as exc:  # the model, its budget: nothing is written
            print(
                f"afr eval synthesize: --assist failed: {type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
            return 1
        for rejected in outcome.rejected:
            print(f"  not kept: {rejected['reason']}: {rejected['proposal']}", file=sys.stderr)
        print(
            f"--assist kept {len(outcome.kept)} of "
            f"{len(outcome.kept) + len(outcome.rejected)} proposed assertions (${cost_usd:.6f})",
            file=sys.stderr,
        )
        document = outcome.apply(document)
    path = write_eval(document, args.output or settings.evals_dir)
    print(path)
    print(
        f"{document.id}: {document.name} ({len(document.assertions)} assertions)", file=sys.stderr
    )
    return 0


def _eval_run(args: argparse.Namespace) -> int:
    with loading_the_sdk():
        from replay_worker.eval_run import RunOptions, parse_shard, run_command
        from replay_worker.settings import WorkerSettings

    try:
        shard = parse_shard(args.shard) if args.shard else None
        if args.workers < 1:
            raise ValueError("--workers must be at least 1")
    except ValueError as exc:
        print(f"afr eval run: {exc}", file=sys.stderr)
        return 2
    try:
        # The worker's state, as `afr up` starts it, holds the day's spend: one day budget
        # for the worker's replays and these evals.
        worker_dir = worker_data_dir(data_dir(args.data_dir))
    except ValueError as exc:  # an invalid AFR_* setting: say which, not the whole report
        print(f"afr eval run: settings: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    options = RunOptions(
        paths=args.paths or [WorkerSettings().evals_dir],
        agent=args.agent,
        model=args.model,
        shard=shard,
        junit=args.junit,
        allow_inconclusive=args.allow_inconclusive,
        sweep_id=args.sweep_id,
        slot=args.slot,
        json_output=args.json,
        workers=args.workers,
        export=not args.no_export,
        list_only=args.list,
    )
    # run_command builds the worker's settings from the environment (and so do the eval
    # processes it starts).
    with worker_data_dir_set(worker_dir):
        return run_command(options)


def _eval_schema(args: argparse.Namespace) -> int:
    from replay_worker.evals.contract import json_schema_text

    if args.output is None:
        sys.stdout.write(json_schema_text())
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json_schema_text())
    print(args.output)
    return 0
