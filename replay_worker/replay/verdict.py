"""Verdicts are computed, not judged (docs/architecture.md, decision 7).

Five verdicts: whether the source failed, whether the replay failed, and ``INCONCLUSIVE``
when the replay depended on something unknown — a tool output that was never captured and
not stubbed, or a source failure no replay can reproduce. An unknown outcome is never a
success. A replay whose calls equal the source's gets the source's outcomes, so it fails
exactly where the source failed: ``STILL_FAILING`` or ``UNCHANGED``, never a change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from afr_exporter import semconv as sc
from afr_exporter.evaluation import EvaluationAttributes, evaluation_result
from replay_worker.replay.calls import ToolInvocation
from replay_worker.replay.fixture import CapturedCall

__all__ = [
    "VERDICTS",
    "VERDICT_SCORES",
    "Verdict",
    "first_divergence",
    "judge",
    "verdict",
    "verdict_evaluation",
]

VERDICTS = ("FAILURE_FIXED", "STILL_FAILING", "REGRESSED", "UNCHANGED", "INCONCLUSIVE")

VERDICT_SCORES: dict[str, float | None] = {
    "FAILURE_FIXED": 1.0,
    "UNCHANGED": 1.0,
    "STILL_FAILING": 0.0,
    "REGRESSED": 0.0,
    "INCONCLUSIVE": None,
}
"""A verdict as ``gen_ai.evaluation.score.value``: whether the replay ran clean (1.0) or
failed (0.0), the one thing every verdict but one says; the label says the rest (fixed or
unchanged, still failing or regressed). An inconclusive replay has no score: an unknown
outcome is neither a pass nor a fail."""


@dataclass(frozen=True)
class Verdict:
    value: str
    reason: str
    approximate: bool = False
    """Decided with a lenient match: a call was answered with another call's outcome."""


def verdict_evaluation(decided: Verdict) -> EvaluationAttributes:
    """The verdict as a ``gen_ai.evaluation.result`` event: named ``afr.replay.verdict``,
    labelled with the verdict, scored by ``VERDICT_SCORES``, explained by its reason."""
    approximate = " (decided with a lenient match)" if decided.approximate else ""
    return evaluation_result(
        sc.EVALUATION_REPLAY_VERDICT,
        label=decided.value,
        value=VERDICT_SCORES.get(decided.value),
        explanation=decided.reason + approximate,
    )


def verdict(source_failed: bool, replay_failed: bool) -> str:
    if source_failed:
        return "STILL_FAILING" if replay_failed else "FAILURE_FIXED"
    return "REGRESSED" if replay_failed else "UNCHANGED"


def judge(
    *,
    source_failed: bool,
    replay_failures: list[str],
    unavailable_tools: list[str],
    unreplayable_source_errors: list[str],
    unknown_agents: list[str] | None = None,
    approximate: bool = False,
    prefix_diverged: str | None = None,
) -> Verdict:
    """The verdict and why. ``replay_failures``: what failed in the replay (tool calls that
    failed, the run's error); ``unavailable_tools``: calls answered "unavailable";
    ``prefix_diverged``: how a fork left the source's path where it answers from the
    capture (its outcome is then unknown)."""
    if prefix_diverged is not None:
        return Verdict(
            "INCONCLUSIVE", f"the fork's recorded prefix diverged: {prefix_diverged}", approximate
        )
    if unavailable_tools:
        return Verdict(
            "INCONCLUSIVE",
            "no captured outcome and no replay_stub_output for: "
            + ", ".join(dict.fromkeys(unavailable_tools)),
            approximate,
        )
    replay_failed = bool(replay_failures)
    if replay_failed and unknown_agents:
        return Verdict(
            "INCONCLUSIVE",
            "the replay failed, and the capture does not define agents it hands off to: "
            + ", ".join(unknown_agents),
            approximate,
        )
    if source_failed and not replay_failed and unreplayable_source_errors:
        return Verdict(
            "INCONCLUSIVE",
            "the source failed where a replay cannot reproduce it: "
            + ", ".join(dict.fromkeys(unreplayable_source_errors)),
            approximate,
        )
    value = verdict(source_failed, replay_failed)
    if replay_failed:
        reason = "the replay failed: " + "; ".join(dict.fromkeys(replay_failures))
    else:
        reason = "the replay ran clean" + (" (the source failed)" if source_failed else "")
    return Verdict(value, reason, approximate)


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
