"""``afr replay``: ask the worker to replay a run, wait for the verdict."""

from __future__ import annotations

import argparse
import sys

from afr.commands.common import add_data_dir_flag

__all__ = ["add_replay_parser"]


def add_replay_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``afr replay``."""
    replay = commands.add_parser(
        "replay", help="replay a run through the worker and print the verdict"
    )
    replay.add_argument("run_id")
    replay.add_argument("--worker", default="http://127.0.0.1:8787")
    replay.add_argument("--model", help="model to replay against (default: the run's)")
    replay.add_argument(
        "--stub", action="append", default=[], help="tool=output: replay_stub_output for a tool"
    )
    replay.add_argument(
        "--policy",
        choices=("exact", "strict", "lenient"),
        default=None,
        help="how calls are matched to captured ones (lenient: approximate verdict)",
    )
    replay.add_argument("--timeout-s", type=float, default=300)
    add_data_dir_flag(replay)
    replay.set_defaults(func=_replay)


def _replay(args: argparse.Namespace) -> int:
    import json

    from afr.local import WEBHOOK_SECRET_FILE
    from collector.settings import CollectorSettings
    from replay_worker.settings import WorkerSettings
    from replay_worker.trigger import request_replay, wait_for_job

    # As the worker reads it: the environment, then AFR_WORKER_SECRETS_DIR; then the file a
    # local `afr up` wrote.
    configured = WorkerSettings().webhook_secret
    secret = configured.get_secret_value() if configured is not None else ""
    if not secret:
        path = (args.data_dir or CollectorSettings().data_dir) / WEBHOOK_SECRET_FILE
        if not path.exists():
            print(
                f"afr replay: no AFR_WORKER_WEBHOOK_SECRET (nor in AFR_WORKER_SECRETS_DIR)"
                f" and no {path}",
                file=sys.stderr,
            )
            return 2
        secret = path.read_text().strip()
    stubs = dict(item.split("=", 1) for item in args.stub)
    try:
        accepted = request_replay(
            args.worker, secret, args.run_id, model=args.model, stubs=stubs, policy=args.policy
        )
    except Exception as exc:
        print(f"afr replay: {exc}", file=sys.stderr)
        return 1
    job = wait_for_job(args.worker, accepted["job_id"], args.timeout_s)
    print(json.dumps(job, indent=2))
    if job["state"] != "succeeded":
        return 1
    result = job["result"]
    print(f"verdict {result['verdict']}; replay run {result['replay_run_id']}", file=sys.stderr)
    return 0
