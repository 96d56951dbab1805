"""``afr runs list|show|diff|tail``: the commands (their parser is ``afr.runs.parser``). They
read the API through ``afr.runs.client``, render with ``afr.runs.render`` (a diff with
``afr.runs.diff_render``) and tail with ``afr.runs.tail``. Exit status 2 on any error, one line on stderr."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import IO, TYPE_CHECKING, Any

from afr.runs.client import API_KEY_ENV, API_URL_ENV, DEFAULT_API_URL, RunsApiError, RunsClient
from afr.runs.diff_render import render_diff
from afr.runs.render import render_run, render_run_row
from afr.runs.tail import TAIL_SINCE, tail_runs
from afr.runs.terminal import Terminal, isatty, terminal_for
from afr.runs.times import NS_PER_S, api_time, parse_time

if TYPE_CHECKING:
    import httpx

__all__ = ["diff_lines", "list_lines", "print_lines", "resolve_key", "run_command", "show_lines"]


def _resolve_key(args: argparse.Namespace, environ: Mapping[str, str]) -> str | None:
    key = environ.get(API_KEY_ENV, "").strip()
    if key:
        return key
    from afr.local import read_local_key

    data_dir = args.data_dir
    try:
        if data_dir is None:
            from collector.settings import CollectorSettings

            data_dir = CollectorSettings().data_dir
        return read_local_key(data_dir)
    except OSError as exc:
        raise RunsApiError(f"cannot read the local key in {data_dir}: {exc.strerror}") from None
    except ValueError as exc:  # an invalid AFR_* setting: say which, not the whole report
        raise RunsApiError(f"settings: {str(exc).splitlines()[0]}") from None


resolve_key = _resolve_key
"""The project key as every read command finds it (``afr failures`` too)."""


def _filter_params(args: argparse.Namespace, now_s: float) -> dict[str, str]:
    params: dict[str, str] = {}
    for flag in ("since", "until"):
        value = getattr(args, flag, None)
        if value:
            try:
                params[flag] = api_time(parse_time(value, now_s))
            except ValueError as exc:
                raise RunsApiError(f"--{flag}: {exc}") from None
    for name, param in (
        ("status", "status"),
        ("workflow", "workflow"),
        ("agent", "agent"),
        ("kind", "kind"),
        ("source_run", "source_run_id"),
        ("conversation", "conversation_id"),
    ):
        value = getattr(args, name, None)
        if value:
            params[param] = value
    return params


def print_lines(lines: list[str], out: IO[str]) -> None:
    out.write("".join(line + "\n" for line in lines))
    out.flush()


def _list(
    args: argparse.Namespace,
    client: RunsClient,
    out: IO[str],
    err: IO[str],
    term: Terminal,
    now_s: float,
) -> int:
    params = _filter_params(args, now_s)
    params["limit"] = str(args.limit)
    if args.cursor:
        params["cursor"] = args.cursor
    if not args.all:
        page = client.list_runs(params)
        pages: Iterator[list[dict[str, Any]]] = iter([page["runs"]])
        next_cursor = page.get("next_cursor")
    else:
        pages, next_cursor = client.iter_pages(params), None
    count = 0
    for runs in pages:
        count += len(runs)
        if args.json:
            print_lines([json.dumps(run) for run in runs], out)
        else:
            print_lines([line for run in runs for line in render_run_row(run, term)], out)
    if not args.json and count == 0:
        print_lines(["no runs match (the window is the last 7 days unless --since says)"], out)
    if next_cursor:
        print(f"more runs: --cursor {next_cursor} (or --all)", file=err)
    return 0


def show_lines(client: RunsClient, run_id: str, term: Terminal, *, full: bool = False) -> list[str]:
    """``afr runs show``: the run read from the API, with its replays and evals."""
    body = client.get_run(run_id)
    summary = body.get("run") or {}
    linked = client.list_runs(
        {
            "source_run_id": str(summary.get("run_id", "")),
            "since": api_time(int(summary.get("start_ns", 0)) / NS_PER_S),
            "limit": "50",
        }
    )
    return render_run(
        body, term, linked=linked["runs"], more_linked=bool(linked.get("next_cursor")), full=full
    )


def list_lines(client: RunsClient, params: Mapping[str, str], term: Terminal) -> list[str]:
    """``afr runs list``, one page: each run's row."""
    return [line for run in client.list_runs(params)["runs"] for line in render_run_row(run, term)]


def _show(args: argparse.Namespace, client: RunsClient, out: IO[str], term: Terminal) -> int:
    if args.json:
        print_lines([json.dumps(client.get_run(args.run_id), indent=2)], out)
    else:
        print_lines(show_lines(client, args.run_id, term, full=args.full), out)
    return 0


def diff_lines(client: RunsClient, run_a: str, run_b: str, term: Terminal) -> list[str]:
    """``afr runs diff A B``: run B aligned with run A, read from the API."""
    return render_diff(client.diff_runs(run_a, run_b), term)


def _diff(args: argparse.Namespace, client: RunsClient, out: IO[str], term: Terminal) -> int:
    if args.json:
        print_lines([json.dumps(client.diff_runs(args.run_a, args.run_b), indent=2)], out)
    else:
        print_lines(diff_lines(client, args.run_a, args.run_b, term), out)
    return 0


def _tail(
    args: argparse.Namespace,
    client: RunsClient,
    out: IO[str],
    err: IO[str],
    term: Terminal,
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> int:
    if not args.interval_s > 0:
        raise RunsApiError("--interval-s must be more than 0")
    now_s = clock()
    params = _filter_params(args, now_s)
    since_s = float(params.pop("since", "") or parse_time(TAIL_SINCE, now_s))

    def emit(run: dict[str, Any], changed: bool) -> None:
        if args.json:
            print_lines([json.dumps(run)], out)
        else:
            print_lines(render_run_row(run, term, note="now failing: " if changed else ""), out)

    def warn(message: str) -> None:
        print(f"afr runs tail: {message}", file=err, flush=True)

    if isatty(err):
        warn(f"new runs from {client.url} every {args.interval_s:g}s; Ctrl-C stops")
    tail_runs(
        client.iter_pages,
        emit,
        filters=params,
        since_s=since_s,
        clock=clock,
        sleep=sleep,
        warn=warn,
        interval_s=args.interval_s,
    )
    return 0


def run_command(
    args: argparse.Namespace,
    *,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    environ: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    transport: httpx.BaseTransport | None = None,
) -> int:
    """Runs ``afr runs <list|show|diff|tail>``: 0, or 2 with one line on stderr."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    env = os.environ if environ is None else environ
    term = terminal_for(out, env)
    url = args.url or env.get(API_URL_ENV) or DEFAULT_API_URL
    command = args.runs_command
    try:
        with RunsClient(url, _resolve_key(args, env), transport=transport) as client:
            if command == "list":
                return _list(args, client, out, err, term, clock())
            if command == "show":
                return _show(args, client, out, term)
            if command == "diff":
                return _diff(args, client, out, term)
            return _tail(args, client, out, err, term, clock=clock, sleep=sleep)
    except RunsApiError as exc:
        print(f"afr runs {command}: {exc}", file=err)
        return 2
    except KeyboardInterrupt:
        return 0 if command == "tail" else 130
    except BrokenPipeError:  # `afr runs list | head`
        _silence(out)
        return 0


def _silence(stream: IO[str]) -> None:
    """Points a closed pipe at /dev/null so the interpreter's final flush does not fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
    except (OSError, ValueError, AttributeError):
        pass
