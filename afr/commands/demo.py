"""``afr demo``: the sacred path end to end (the walk itself is ``afr.demo``, which loads the
Agents SDK: imported only when the command runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_demo_parser"]


def add_demo_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``afr demo``."""
    demo = commands.add_parser("demo", help="walk the sacred path end to end and say what happened")
    demo.add_argument("--data-dir", type=Path, help="default ./.afr/demo")
    demo.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from afr.demo import DEMO_DATA_DIR, run_demo

    return run_demo(args.data_dir or DEMO_DATA_DIR)
