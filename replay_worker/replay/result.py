"""What a replay did, as plain data: the engine returns it, evals check it. No Agents SDK
here, so that checking a result (``evals/assertions.py``, and what synthesizes evals in the
worker's own process) does not load it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ReplayResult"]


@dataclass
class ReplayResult:
    replay_run_id: str
    verdict: str
    reason: str
    approximate: bool
    replay_failed: bool
    final_output: str | None
    error: str | None
    first_divergence: dict[str, Any] | None
    unavailable: list[dict[str, Any]] = field(default_factory=list)
    stubbed: list[dict[str, Any]] = field(default_factory=list)
    invocations: list[dict[str, Any]] = field(default_factory=list)
    # What happened, as assertions check it: handoffs taken (from, to), model calls (turns),
    # guardrails run, the final output as JSON, wall time.
    handoffs: list[tuple[str, str]] = field(default_factory=list)
    turns: int = 0
    guardrails: list[dict[str, Any]] = field(default_factory=list)
    final_output_json: Any = None
    duration_s: float = 0.0
    fork: dict[str, Any] | None = None
    """A fork's step, overrides and how many model calls were recorded and live."""

    def to_json(self) -> dict[str, Any]:
        return {
            "replay_run_id": self.replay_run_id,
            "verdict": self.verdict,
            "reason": self.reason,
            "approximate": self.approximate,
            "replay_failed": self.replay_failed,
            "final_output": self.final_output,
            "error": self.error,
            "first_divergence": self.first_divergence,
            "unavailable": self.unavailable,
            "stubbed": self.stubbed,
            "tool_calls": self.invocations,
            "handoffs": [list(h) for h in self.handoffs],
            "turns": self.turns,
            "guardrails": self.guardrails,
            "duration_s": round(self.duration_s, 3),
            **({"fork": self.fork} if self.fork is not None else {}),
        }
