"""``afr replay bisect``'s command line: it takes a replay's change options exactly as
``afr replay`` does (the flags are declared in both parsers: this keeps them together), and
``afr replay bisect`` reaches it while ``afr replay RUN`` still replays. End to end in
``tests/e2e/test_replay_bisect.py``."""

from __future__ import annotations

import argparse

from afr.cli import build_parser
from afr.commands.bisect import COMMAND, bisect_argv
from afr.commands.replay import fork_overrides

CHANGE: tuple[str, ...] = ("output", "error", "arguments", "instructions", "agent_model")
CHANGE += ("agent_settings", "guardrail", "input", "model", "stub", "policy", "worker", "timeout_s")


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions}


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


def test_bisect_takes_the_change_options_of_a_replay() -> None:
    parsers = _subparsers()
    replay, bisect = _actions(parsers["replay"]), _actions(parsers[COMMAND])
    for dest in CHANGE:
        ours, theirs = bisect[dest], replay[dest]
        same = ("option_strings", "default", "choices", "metavar", "nargs", "type")
        assert [getattr(ours, k) for k in same] == [getattr(theirs, k) for k in same], dest
    flags = [
        "replay bisect",
        "0" * 32,
        "--output",
        "c1=ok",
        "--instructions",
        "A=be brief",
        "--agent-settings",
        'A={"temperature": 0}',
        "--input",
        "hello",
    ]
    args = build_parser().parse_args(flags)
    assert fork_overrides(args) == [
        {"kind": "tool_output", "call_id": "c1", "output": "ok"},
        {"kind": "instructions", "agent": "A", "instructions": "be brief"},
        {"kind": "model_settings", "agent": "A", "settings": {"temperature": 0}},
        {"kind": "input", "input": "hello"},
    ]


def test_replay_bisect_is_its_own_command_and_replay_still_takes_a_run() -> None:
    run = "0" * 32
    assert bisect_argv(["replay", "bisect", run, "--repeats", "3"]) == [
        COMMAND,
        run,
        "--repeats",
        "3",
    ]
    assert bisect_argv(["replay", run, "--from", "llm:2"]) == ["replay", run, "--from", "llm:2"]
    parser = build_parser()
    args = parser.parse_args(bisect_argv(["replay", "bisect", run, "--repeats", "3"]))
    assert (args.command, args.run_id, args.repeats, args.max_replays) == (COMMAND, run, 3, None)
    args = parser.parse_args(bisect_argv(["replay", run]))
    assert (args.command, args.run_id) == ("replay", run)
