"""``afr failures list|show``: failure clusters read from ``GET /api/v1/failures`` and
rendered as lines that never exceed the terminal's width (the parser is
``afr.commands.failures``). Exit status 2 on any error, one line on stderr."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any

from afr.runs.cli import print_lines, resolve_key
from afr.runs.client import API_URL_ENV, DEFAULT_API_URL, RunsApiError, RunsClient
from afr.runs.render import FAILURE_STATUS_CODES
from afr.runs.terminal import BOLD, DIM, RED, YELLOW, Terminal, terminal_for
from afr.runs.text import clean
from afr.runs.times import NS_PER_S, api_time, parse_time
from afr.runs.widths import pad, wrap

if TYPE_CHECKING:
    import httpx

__all__ = ["render_failure", "render_failure_row", "run_failures"]

_STATUS_CODES = FAILURE_STATUS_CODES
_STATUS_WIDTH = 9


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"


def _when(ns: int, term: Terminal) -> str:
    return datetime.fromtimestamp(ns / NS_PER_S, term.tz).strftime("%m-%d %H:%M")


def render_failure_row(cluster: Mapping[str, Any], term: Terminal) -> list[str]:
    """Two lines: status, runs, last seen, signature; the title (indented)."""
    status = clean(str(cluster.get("status", "?")))
    head = (
        f"{pad(status, _STATUS_WIDTH)} {int(cluster.get('runs', 0)):>5} runs  "
        f"last {_when(int(cluster.get('last_seen_ns', 0)), term)}  "
        f"{clean(str(cluster.get('signature', '')))}"
    )
    line = term.fit(head)
    lines = [term.paint(line, *_STATUS_CODES.get(status, (YELLOW,)))]
    title = term.fit("  " + clean(str(cluster.get("title", ""))))
    lines.append(title)
    if status == "recurring":
        lines.append(term.paint(term.fit("  " + _recurring(cluster, term)), BOLD, RED))
    return lines


def _recurring(cluster: Mapping[str, Any], term: Terminal) -> str:
    guard = cluster.get("guard") or {}
    return (
        f"{_runs(int(cluster.get('runs_since_guard', 0)))} since eval "
        f"{clean(str(guard.get('eval_name', '?')))} first ran "
        f"({_when(int(cluster.get('recurring_since_ns') or 0), term)}), and it passes"
    )


def render_failure(cluster: Mapping[str, Any], term: Terminal) -> list[str]:
    """``afr failures show``: the cluster's title, status, figures, per-day counts, links."""
    status = clean(str(cluster.get("status", "?")))
    dot = term.dot

    def label(name: str, value: str) -> str:
        return term.fit(f"{pad(name, 10)}{value}")

    title = wrap(clean(str(cluster.get("title", ""))), term.width)
    lines = [
        *(term.paint(line, BOLD) for line in title),
        term.paint(label("status", status), *_STATUS_CODES.get(status, (YELLOW,))),
        label("signature", clean(str(cluster.get("signature", "")))),
        label(
            "seen",
            f"{_runs(int(cluster.get('runs', 0)))}{dot}first "
            f"{_when(int(cluster.get('first_seen_ns', 0)), term)}{dot}last "
            f"{_when(int(cluster.get('last_seen_ns', 0)), term)}",
        ),
        label("workflows", ", ".join(clean(str(w)) for w in cluster.get("workflows", [])) or "-"),
        label("agents", ", ".join(clean(str(a)) for a in cluster.get("agents", [])) or "-"),
    ]
    if status == "recurring":
        lines.append(term.paint(label("recurring", _recurring(cluster, term)), BOLD, RED))
    if cluster.get("fixed_by"):
        lines.append(label("fixed by", f"replay {clean(str(cluster['fixed_by']))}"))
    guard = cluster.get("guard")
    if guard:
        outcome = clean(str(guard.get("last_outcome") or "?"))
        lines.append(
            label(
                "guarded",
                f"eval {clean(str(guard.get('eval_name', '')))}{dot}last {outcome} "
                f"(run {clean(str(guard.get('last_run_id', '')))})",
            )
        )
    lines.append(term.paint("per day", DIM))
    for day in cluster.get("per_day", []):
        lines.append(term.fit(f"  {clean(str(day.get('day', '')))}  {int(day.get('runs', 0))}"))
    lines.append(term.paint("newest runs", DIM))
    lines += [term.fit(f"  {clean(str(r))}") for r in cluster.get("sample_run_ids", [])]
    return lines


def _params(args: argparse.Namespace, now_s: float) -> dict[str, str]:
    params: dict[str, str] = {}
    for flag in ("since", "until"):
        value = getattr(args, flag, None)
        if value:
            try:
                params[flag] = api_time(parse_time(value, now_s))
            except ValueError as exc:
                raise RunsApiError(f"--{flag}: {exc}") from None
    for name in ("workflow", "agent", "status", "cursor"):
        value = getattr(args, name, None)
        if value:
            params[name] = value
    if getattr(args, "limit", None):
        params["limit"] = str(args.limit)
    return params


def _list(
    args: argparse.Namespace,
    client: RunsClient,
    out: IO[str],
    err: IO[str],
    term: Terminal,
    now_s: float,
) -> int:
    params = _params(args, now_s)
    count = 0
    while True:
        page = client.list_failures(params)
        clusters = page["failures"]
        count += len(clusters)
        if args.json:
            print_lines([json.dumps(c) for c in clusters], out)
        else:
            print_lines([line for c in clusters for line in render_failure_row(c, term)], out)
        cursor = page.get("next_cursor")
        if not cursor:
            break
        if not args.all:
            print(f"more failures: --cursor {cursor} (or --all)", file=err)
            break
        params["cursor"] = cursor
    if not args.json and count == 0:
        print_lines(
            ["no failing runs match (the window is the last 7 days unless --since says)"], out
        )
    return 0


def run_failures(
    args: argparse.Namespace,
    *,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    environ: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.time,
    transport: httpx.BaseTransport | None = None,
) -> int:
    """Runs ``afr failures <list|show>``: 0, or 2 with one line on stderr. ``clock`` is
    what ``--since 2d`` counts back from, as for ``afr runs``."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    env = os.environ if environ is None else environ
    term = terminal_for(out, env)
    url = args.url or env.get(API_URL_ENV) or DEFAULT_API_URL
    command = args.failures_command
    try:
        with RunsClient(url, resolve_key(args, env), transport=transport) as client:
            if command == "list":
                return _list(args, client, out, err, term, clock())
            body = client.get_failure(args.signature.lower(), _params(args, clock()))
            if args.json:
                print_lines([json.dumps(body, indent=2)], out)
            else:
                print_lines(render_failure(body["failure"], term), out)
            return 0
    except RunsApiError as exc:
        print(f"afr failures {command}: {exc}", file=err)
        return 2
    except BrokenPipeError:
        return 0
