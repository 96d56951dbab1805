"""Verdicts are computed, not judged (DESIGN.md decision 7)."""

from __future__ import annotations

import json
from typing import Any

from replay_worker.replay.fixture import CapturedCall
from replay_worker.replay.stubs import ToolInvocation

__all__ = ["first_divergence", "verdict"]


def verdict(source_failed: bool, replay_failed: bool) -> str:
    if source_failed:
        return "STILL_FAILING" if replay_failed else "FAILURE_FIXED"
    return "REGRESSED" if replay_failed else "UNCHANGED"


def _parsed(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def _diff(source: Any, replay: Any) -> dict[str, Any]:
    if isinstance(source, dict) and isinstance(replay, dict):
        return {
            key: {"source": source.get(key), "replay": replay.get(key)}
            for key in sorted(set(source) | set(replay))
            if source.get(key) != replay.get(key)
        }
    return {} if source == replay else {"$": {"source": source, "replay": replay}}


def first_divergence(
    captured: list[CapturedCall], replayed: list[ToolInvocation]
) -> dict[str, Any] | None:
    """The first step where the replay's tool calls differ from the source run's: a
    different tool, or the same tool with different arguments (with the argument diff)."""
    for step in range(max(len(captured), len(replayed))):
        source = captured[step] if step < len(captured) else None
        replay = replayed[step] if step < len(replayed) else None
        if source is None or replay is None:
            return {
                "step": step,
                "tool": (replay or source).tool,  # type: ignore[union-attr]
                "kind": "extra_call" if source is None else "missing_call",
            }
        if source.tool != replay.tool:
            return {
                "step": step,
                "tool": replay.tool,
                "kind": "different_tool",
                "source_tool": source.tool,
            }
        diff = _diff(_parsed(source.arguments), _parsed(replay.arguments))
        if diff:
            return {
                "step": step,
                "tool": replay.tool,
                "kind": "different_arguments",
                "arguments": diff,
            }
    return None
