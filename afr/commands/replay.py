"""``afr replay``: ask the worker to replay a run, wait for the verdict. With ``--from STEP``
the replay is a fork: the model calls before STEP are answered from the capture, the
override flags apply at STEP, the model is live from there on."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from afr.commands.common import add_data_dir_flag

__all__ = ["add_replay_parser", "fork_overrides", "hook_secret"]

# flag -> (override kind, the target's key, the value's key); every one is TARGET=VALUE.
_TARGETED: dict[str, tuple[str, str, str]] = {
    "output": ("tool_output", "call_id", "output"),
    "error": ("tool_error", "call_id", "error"),
    "arguments": ("tool_arguments", "call_id", "arguments"),
    "instructions": ("instructions", "agent", "instructions"),
    "agent_model": ("agent_model", "agent", "model"),
    "agent_settings": ("model_settings", "agent", "settings"),
    "guardrail": ("guardrail", "name", "triggered"),
}


def add_replay_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``afr replay``."""
    replay = commands.add_parser(
        "replay", help="replay a run through the worker and print the verdict"
    )
    replay.add_argument("run_id", nargs="?", help="the run to replay (or --signature)")
    replay.add_argument(
        "--signature",
        metavar="SIG",
        help="replay the newest production run that failed with this failure signature"
        " (afr failures list)",
    )
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
    fork = replay.add_argument_group(
        "fork", "replay from a step: the calls before it answered from the capture ($0)"
    )
    fork.add_argument(
        "--from",
        dest="step",
        metavar="STEP",
        help="fork at STEP: a tool call id, llm:N (the N-th model call) or turn:N",
    )
    fork.add_argument(
        "--output", action="append", default=[], metavar="CALL_ID=TEXT", help="the call's output"
    )
    fork.add_argument(
        "--error",
        action="append",
        default=[],
        metavar="CALL_ID=TEXT",
        help="the call fails, the model is shown TEXT",
    )
    fork.add_argument(
        "--arguments",
        action="append",
        default=[],
        metavar="CALL_ID=JSON",
        help="the call's arguments (checked against the tool's schema; fork at that call)",
    )
    fork.add_argument("--instructions", action="append", default=[], metavar="AGENT=TEXT")
    fork.add_argument("--agent-model", action="append", default=[], metavar="AGENT=MODEL")
    fork.add_argument(
        "--agent-settings",
        action="append",
        default=[],
        metavar="AGENT=JSON",
        help="model settings over the agent's, e.g. '{\"temperature\": 0}'",
    )
    fork.add_argument(
        "--guardrail",
        action="append",
        default=[],
        metavar="NAME=true|false",
        help="an input guardrail's outcome (fork at llm:1)",
    )
    fork.add_argument("--input", metavar="TEXT", help="the run's user input")
    replay.add_argument("--timeout-s", type=float, default=300)
    add_data_dir_flag(replay)
    replay.set_defaults(func=_replay)


def _value(flag: str, text: str) -> Any:
    if flag == "agent_settings":
        settings = json.loads(text)
        if not isinstance(settings, dict):
            raise ValueError("a JSON object")
        return settings
    if flag == "guardrail":
        if text.lower() not in ("true", "false"):
            raise ValueError("true or false")
        return text.lower() == "true"
    return text


def fork_overrides(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The hook's ``fork.overrides`` from the flags; ValueError says which flag is wrong."""
    overrides: list[dict[str, Any]] = []
    for flag, (kind, target_key, value_key) in _TARGETED.items():
        name = "--" + flag.replace("_", "-")
        for item in getattr(args, flag):
            target, equals, text = item.partition("=")
            if not equals or not target:
                raise ValueError(f"{name} takes TARGET=VALUE, not {item!r}")
            try:
                value = _value(flag, text)
            except ValueError as exc:
                raise ValueError(f"{name} {target}: the value must be {exc}") from None
            overrides.append({"kind": kind, target_key: target, value_key: value})
    if args.input is not None:
        overrides.append({"kind": "input", "input": args.input})
    return overrides


def hook_secret(data_dir: Path | None) -> str:
    """The replay hook's secret as the worker reads it: the environment, then
    AFR_WORKER_SECRETS_DIR; then the file a local ``afr up`` wrote under ``data_dir``.
    ValueError says what is missing (never the secret)."""
    from afr.local import WEBHOOK_SECRET_FILE
    from collector.settings import CollectorSettings
    from replay_worker.settings import WorkerSettings

    configured = WorkerSettings().webhook_secret
    secret = configured.get_secret_value() if configured is not None else ""
    if secret:
        return secret
    path = (data_dir or CollectorSettings().data_dir) / WEBHOOK_SECRET_FILE
    if not path.exists():
        raise ValueError(
            f"no AFR_WORKER_WEBHOOK_SECRET (nor in AFR_WORKER_SECRETS_DIR) and no {path}"
        )
    return path.read_text().strip()


def _replay(args: argparse.Namespace) -> int:
    from replay_worker.trigger import request_replay, wait_for_job

    try:
        secret = hook_secret(args.data_dir)
    except ValueError as exc:
        print(f"afr replay: {exc}", file=sys.stderr)
        return 2
    if (args.run_id is None) == (args.signature is None):
        print("afr replay: give one of a run id and --signature", file=sys.stderr)
        return 2
    stubs = dict(item.split("=", 1) for item in args.stub)
    try:
        overrides = fork_overrides(args)
    except ValueError as exc:
        print(f"afr replay: {exc}", file=sys.stderr)
        return 2
    if overrides and args.step is None:
        print("afr replay: overrides apply at a step: give --from STEP", file=sys.stderr)
        return 2
    fork = {"step": args.step, "overrides": overrides} if args.step is not None else None
    try:
        accepted = request_replay(
            args.worker,
            secret,
            args.run_id,
            signature=args.signature,
            model=args.model,
            stubs=stubs,
            policy=args.policy,
            fork=fork,
        )
    except Exception as exc:
        print(f"afr replay: {exc}", file=sys.stderr)
        return 1
    if args.signature is not None:
        print(
            f"replaying run {accepted['run_id']}, the newest with {args.signature}", file=sys.stderr
        )
    job = wait_for_job(args.worker, accepted["job_id"], args.timeout_s)
    print(json.dumps(job, indent=2))
    if job["state"] != "succeeded":
        return 1
    result = job["result"]
    print(f"verdict {result['verdict']}; replay run {result['replay_run_id']}", file=sys.stderr)
    if "fork" in result:
        forked = result["fork"]
        divergence = result.get("first_divergence")
        print(
            f"fork at {forked['step']}: {forked['recorded_model_calls']} model call(s) from the"
            f" capture, {forked['live_model_calls']} live; first divergence: "
            + (f"tool call {divergence['step']} ({divergence['kind']})" if divergence else "none"),
            file=sys.stderr,
        )
    return 0
