"""``afr failures list|show``: the failure clusters of ``GET /api/v1/failures`` in the
terminal. The parser only: the command (``afr.runs.failures``) loads on use."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_failures_parser"]

_STATUSES = ("recurring", "open", "fixed", "guarded")


def add_failures_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``afr failures``."""
    failures = commands.add_parser(
        "failures",
        help="failure clusters: the same failure across runs, fixed, guarded or recurring",
        description="Reads the collector's read API like `afr runs` (--url or AFR_API_URL, "
        "the key in AFR_API_KEY or --data-dir). Recurring failures come first: an eval "
        "guards them and passes, yet production runs still fail the same way.",
    )
    sub = failures.add_subparsers(dest="failures_command", required=True)

    def common(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--since", help="1h, 2d, an ISO time (default 7 days ago)")
        parser.add_argument("--until", help="1h, 2d, an ISO time (default now)")
        parser.add_argument("--workflow", help="count only this workflow's runs")
        parser.add_argument("--agent", help="count only the runs this agent took part in")
        parser.add_argument("--url", help="read API base URL (default AFR_API_URL or ...:4318)")
        parser.add_argument(
            "--data-dir", type=Path, help="where the local key is (default ./.afr/data)"
        )
        parser.add_argument("--json", action="store_true", help="JSON for scripts")

    listing = sub.add_parser("list", help="clusters: recurring, then open by last seen")
    common(listing)
    listing.add_argument("--status", choices=_STATUSES)
    listing.add_argument("--limit", type=int, default=50, help="clusters per page (default 50)")
    listing.add_argument("--all", action="store_true", help="every page, not just the first")
    listing.add_argument("--cursor", help="start at this page (a next_cursor)")

    show = sub.add_parser("show", help="one cluster: per-day runs, samples, fix and guard")
    show.add_argument("signature", help="16 hex digits")
    common(show)
    failures.set_defaults(func=_failures)


def _failures(args: argparse.Namespace) -> int:
    from afr.runs.failures import run_failures

    return run_failures(args)
