"""Every ``afr`` command, flag, default and help text, against a snapshot taken before the
parser was built per command group: a change to what a user types shows up here first.

After a deliberate change to the command line, rewrite the snapshot with
``python -m tests.unit.test_cli_parser`` and review its diff.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from afr.cli import build_parser

SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "cli_parser.json"


def _value(value: Any) -> Any:
    """A default, const or type as JSON: callables by name, paths and others by repr."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_value(v) for v in value]
    if callable(value):
        return f"<{getattr(value, '__name__', type(value).__name__)}>"
    return repr(value)


def describe(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """A parser and its subparsers, recursively: everything argparse holds about each one."""
    groups = [
        sorted(a.dest for a in group._group_actions) for group in parser._mutually_exclusive_groups
    ]
    out: dict[str, Any] = {
        "prog": parser.prog,
        "usage": parser.usage,
        "description": parser.description,
        "epilog": parser.epilog,
        "defaults": {k: _value(v) for k, v in sorted(parser._defaults.items())},
        "mutually_exclusive": sorted(groups),
        "actions": [],
    }
    for action in parser._actions:
        entry: dict[str, Any] = {
            "kind": type(action).__name__,
            "options": list(action.option_strings),
            "dest": action.dest,
            "default": _value(action.default),
            "const": _value(action.const),
            "type": _value(action.type),
            "choices": None,
            "nargs": _value(action.nargs),
            "required": action.required,
            "help": action.help,
            "metavar": _value(action.metavar),
        }
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            entry["choices"] = {
                name: {"help": helps.get(name), **describe(sub)}
                for name, sub in action.choices.items()
            }
        elif action.choices is not None:
            entry["choices"] = _value(list(action.choices))
        out["actions"].append(entry)
    return out


def snapshot_text() -> str:
    return json.dumps(describe(build_parser()), indent=1) + "\n"


def test_the_parser_is_what_the_snapshot_says() -> None:
    # As text: the order of commands and flags is what --help shows.
    assert snapshot_text() == SNAPSHOT.read_text(encoding="utf-8")


def test_the_snapshot_names_every_command() -> None:
    commands = describe(build_parser())["actions"][1]["choices"]
    assert set(commands) >= {
        "seed",
        "up",
        "worker",
        "replay",
        "keys",
        "eval",
        "sweep",
        "schema",
        "runs",
        "grafana",
        "secrets",
        "sql-users",
        "openapi",
        "demo",
    }
    assert commands["eval"]["actions"][1]["choices"]["run"]["defaults"] == {"func": "<_eval_run>"}


if __name__ == "__main__":
    SNAPSHOT.write_text(snapshot_text(), encoding="utf-8")
