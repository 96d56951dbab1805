"""A replayed tool call: what the stand-in did with it, which outcomes fail it, and how its
arguments compare with a captured call's.

Pure and free of the Agents SDK, so that what reads a replay's calls (the verdict, an eval's
assertions, synthesizing an eval from two stored runs) loads without it; ``stubs`` answers
the calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["FAILED_OUTCOMES", "ToolInvocation", "canonical_arguments"]

# Outcomes that fail the replayed call (as the original failed, or as a fork's override
# says); "unavailable" makes the verdict unknowable; "replay_stub_output" is a labelled
# stand-in; "override_output" is a fork's.
FAILED_OUTCOMES = frozenset({"captured_error", "invalid_arguments", "override_error"})


@dataclass
class ToolInvocation:
    """One call the replayed model made, and what the stand-in did with it."""

    step: int
    tool: str
    arguments: str
    outcome: str  # captured_output | captured_error | invalid_arguments | replay_stub_output | unavailable | override_output | override_error
    captured_index: int | None = None
    output: str | None = None


def canonical_arguments(arguments: str) -> Any:
    """Arguments as a value: JSON parsed (key order and whitespace do not matter), or the
    raw text when it is not JSON (the original call may have sent broken JSON)."""
    try:
        return json.loads(arguments or "{}")
    except ValueError:
        return arguments
