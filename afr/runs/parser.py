"""``afr runs``'s argparse tree, apart from the commands so that building the ``afr`` parser
(every command does) loads no renderer and no HTTP client."""

from __future__ import annotations

import argparse
from pathlib import Path

from afr.runs.client import API_URL_ENV, DEFAULT_API_URL
from afr.runs.tail import TAIL_INTERVAL_S, TAIL_SINCE

__all__ = ["add_runs_parser"]


def add_runs_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """``afr runs list|show|diff|tail``; the caller sets the ``func`` that runs ``run_command``."""
    runs = commands.add_parser(
        "runs",
        help="runs in the terminal: list, show one, diff two, tail new ones",
        description="Reads the collector's read API (--url, or AFR_API_URL; default "
        f"{DEFAULT_API_URL}) with the project key in AFR_API_KEY or, failing that, the local "
        "project's key in --data-dir. Exit status 2 on any error, one line on stderr.",
    )
    sub = runs.add_subparsers(dest="runs_command", required=True)

    def connection(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--url", help=f"read API base URL (default {API_URL_ENV} or ...:4318)")
        parser.add_argument(
            "--data-dir", type=Path, help="where the local key is (default ./.afr/data)"
        )
        parser.add_argument("--json", action="store_true", help="JSON for scripts")

    def filters(parser: argparse.ArgumentParser, since_default: str | None) -> None:
        default = f" (default {since_default})" if since_default else " (default 7 days ago)"
        parser.add_argument("--since", default=since_default, help="1h, 2d, an ISO time" + default)
        parser.add_argument("--status", choices=("ok", "error"))
        parser.add_argument("--workflow")
        parser.add_argument("--agent", help="runs this agent took part in")
        parser.add_argument("--kind", help="capture, replay, eval or sweep")
        parser.add_argument("--source-run", metavar="RUN_ID", help="replays and evals of a run")
        parser.add_argument(
            "--conversation",
            metavar="ID",
            help="the runs of one conversation (gen_ai.conversation.id, the SDK's group_id)",
        )

    listing = sub.add_parser("list", help="run summaries, newest first")
    filters(listing, None)
    listing.add_argument("--until", help="1h, 2d, an ISO time (default now)")
    listing.add_argument("--limit", type=int, default=50, help="runs per page (default 50)")
    listing.add_argument("--all", action="store_true", help="every page, not just the first")
    listing.add_argument("--cursor", help="start at this page (a next_cursor)")
    connection(listing)

    show = sub.add_parser("show", help="one run: span tree, failing span, replays and evals")
    show.add_argument("run_id")
    show.add_argument("--full", action="store_true", help="the failing span's bodies in full")
    connection(show)

    diff = sub.add_parser(
        "diff",
        help="two runs step by step: the first divergence, token, cost and latency deltas",
        description="Aligns run B with run A (a source run and its replay or eval, or two "
        "captures of one workflow) and shows where B first differs, with B-minus-A deltas.",
    )
    diff.add_argument("run_a", metavar="A", help="the first run (e.g. the source)")
    diff.add_argument("run_b", metavar="B", help="the second run (e.g. its replay)")
    connection(diff)

    tail = sub.add_parser("tail", help="new runs as they arrive, until Ctrl-C")
    filters(tail, TAIL_SINCE)
    tail.add_argument("--interval-s", type=float, default=TAIL_INTERVAL_S)
    connection(tail)
    return runs
