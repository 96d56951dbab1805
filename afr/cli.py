"""The ``afr`` command: the composition root that wires the parts for one machine.

Each command group builds its own part of the parser next to the code that runs it
(``afr.commands.*``, ``afr.runs.parser``, ``afr.grafana.command`` and the ``*_cli``
modules); this module only puts them in order and dispatches.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

# Standard library only at import, each of them: cheap for every command.
from afr.commands.bisect import add_bisect_parser, bisect_argv
from afr.commands.demo import add_demo_parser
from afr.commands.evals import add_eval_parser
from afr.commands.failures import add_failures_parser
from afr.commands.keys import add_keys_parser
from afr.commands.replay import add_replay_parser
from afr.commands.schema import add_schema_parser
from afr.commands.seed import add_seed_parser
from afr.commands.server import add_up_parser, add_worker_parser
from afr.commands.sweep import add_sweep_parser
from afr.grafana.command import add_grafana_parser
from afr.openapi_cli import add_openapi_parser
from afr.runs.parser import add_runs_parser
from afr.secrets_cli import add_secrets_parser
from afr.sql_users_cli import add_sql_users_parser

__all__ = ["build_parser", "main"]


def _runs(args: argparse.Namespace) -> int:
    from afr.runs.cli import run_command

    return run_command(args)


def _grafana(args: argparse.Namespace) -> int:
    from afr.grafana.command import run_command

    return run_command(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="afr", description="afr, the Agent Flight Recorder")
    commands = parser.add_subparsers(dest="command", required=True)
    add_seed_parser(commands)
    add_up_parser(commands)
    add_worker_parser(commands)
    add_replay_parser(commands)
    add_bisect_parser(commands)  # afr replay bisect RUN
    add_keys_parser(commands)
    add_eval_parser(commands)
    add_sweep_parser(commands)
    add_schema_parser(commands)
    add_runs_parser(commands).set_defaults(func=_runs)  # afr runs list|show|diff|tail
    add_failures_parser(commands)  # afr failures list|show
    add_grafana_parser(commands).set_defaults(func=_grafana)  # afr grafana push
    add_secrets_parser(commands)  # afr secrets init
    add_sql_users_parser(commands)  # afr sql-users create|list|revoke
    add_openapi_parser(commands)  # afr openapi [--write|--check]
    add_demo_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(bisect_argv(list(sys.argv[1:] if argv is None else argv)))
    try:
        code: int = args.func(args)
    except Exception as error:
        # An install without the extra: say what to do. Only a command that loaded the
        # store's client can have raised it (the eval commands never do, nor pay its import).
        store = sys.modules.get("collector.store.client")
        if store is not None and isinstance(error, store.EmbeddedStoreMissing):
            print(f"afr: {error}", file=sys.stderr)
            return 2
        raise
    return code


if __name__ == "__main__":
    sys.exit(main())
