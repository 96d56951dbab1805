"""Find the step where a run's failure was decided: a bisection over its model calls.

A *probe* at step ``k`` forks the source run at ``llm:k`` with the change applied and the
model live from there on (a replay job like any other); its replays vote ``fixed``
(FAILURE_FIXED), ``not_fixed`` (any other verdict the run reached: STILL_FAILING,
REGRESSED, UNCHANGED) or ``undecided`` (INCONCLUSIVE, or no verdict: the job failed). The
answer is the **latest** step from which going live with the change still reaches
FAILURE_FIXED: the point after which the failure was inevitable.

**The monotonic assumption**: fixed from ``k`` means fixed from every earlier step (going
live earlier gives the change more of the run to act on). Under it, the answer is the
boundary between a run of fixed steps ``1..d`` and unfixed steps ``d+1..n``; ``d = 0``
when even ``llm:1`` does not fix it. Forking past the last call is the source itself, which
failed: the search starts with ``0`` (nothing known fixed) and ``n + 1`` (known failing)
as its bounds and halves the ``n + 1`` possible answers with each probe, so it decides
with ``ceil(log2(n + 1))`` probes at most (never more than ``ceil(log2 n) + 1``).
Probes that break the assumption (a step that is not fixed below one that is) are listed
in ``contradictions``; the bisection itself only probes between its bounds, so it can meet
one only through split votes (``Probe.split``), which the report shows.

**Repeats**: a live model is not deterministic, so each probe runs ``repeats`` replays and
is decided by a strict majority of the ``repeats`` asked for; a tie, a majority of
undecided replays, or too few replays (a budget stopped them) leave the probe undecided.
An undecided probe ends the bisection: guessing past it would make every later answer
depend on the guess. So does a budget (``max_replays``, or a probe that reports it could
not make its replays: the worker's day budget); the result then says what range it could
not decide.

Pure: the probe is injected (``Probe``: the CLI's posts replay hooks to the worker; tests
pass a function), no I/O, no Agents SDK.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "Bisection",
    "Decision",
    "Probe",
    "ProbeFunction",
    "Vote",
    "Votes",
    "bisect_failure",
    "decide",
    "probe_bound",
    "vote_of",
]

Decision = Literal["fixed", "not_fixed", "undecided"]
Status = Literal["found", "never_fixed", "undecided"]

FIXED_VERDICT = "FAILURE_FIXED"
UNDECIDED_VERDICT = "INCONCLUSIVE"


@dataclass(frozen=True)
class Vote:
    """What one replay of a probe said."""

    decision: Decision
    verdict: str | None = None
    """The replay's verdict; None when the job ended without one."""
    replay_run_id: str | None = None
    job_id: str | None = None
    detail: str | None = None
    """Why it is undecided (the verdict's reason, or why the job failed)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "verdict": self.verdict,
            "replay_run_id": self.replay_run_id,
            "job_id": self.job_id,
            "detail": self.detail,
        }


def vote_of(
    verdict: str | None,
    *,
    replay_run_id: str | None = None,
    job_id: str | None = None,
    detail: str | None = None,
) -> Vote:
    """A replay's vote from its verdict (None: the job gave none)."""
    if verdict == FIXED_VERDICT:
        decision: Decision = "fixed"
    elif verdict is None or verdict == UNDECIDED_VERDICT:
        decision = "undecided"
    else:
        decision = "not_fixed"
    return Vote(decision, verdict, replay_run_id, job_id, detail)


@dataclass(frozen=True)
class Votes:
    """What a probe function answers: the votes of the replays it made, and, when it could
    not make them all (or no more may be made after them), why."""

    votes: tuple[Vote, ...]
    stopped: str | None = None


ProbeFunction = Callable[[int, int], Votes]
"""``(step, repeats) -> Votes``: fork at ``llm:step`` ``repeats`` times with the change."""


@dataclass(frozen=True)
class Probe:
    step: int
    votes: tuple[Vote, ...]
    decision: Decision
    agreed: int
    """How many of the replays voted for ``decision`` (for an undecided probe: for the
    larger of fixed and not fixed)."""
    repeats: int

    @property
    def split(self) -> bool:
        """Its replays disagreed between fixed and not fixed."""
        decisions = {v.decision for v in self.votes}
        return {"fixed", "not_fixed"} <= decisions

    def to_json(self) -> dict[str, Any]:
        return {
            "step": f"llm:{self.step}",
            "decision": self.decision,
            "agreed": self.agreed,
            "repeats": self.repeats,
            "replays": [v.to_json() for v in self.votes],
        }


def decide(votes: tuple[Vote, ...], repeats: int) -> tuple[Decision, int]:
    """The probe's decision by a strict majority of ``repeats``, and how many agreed."""
    fixed = sum(1 for v in votes if v.decision == "fixed")
    not_fixed = sum(1 for v in votes if v.decision == "not_fixed")
    if fixed * 2 > repeats:
        return "fixed", fixed
    if not_fixed * 2 > repeats:
        return "not_fixed", not_fixed
    return "undecided", max(fixed, not_fixed)


def probe_bound(steps: int) -> int:
    """Probes the bisection needs at most for ``steps`` model calls: ceil(log2(n + 1))."""
    return math.ceil(math.log2(steps + 1)) if steps > 0 else 0


@dataclass(frozen=True)
class Bisection:
    steps: int
    """The steps bisected: ``llm:1..llm:steps``."""
    repeats: int
    status: Status
    fixed_through: int
    """The latest step known fixed (0: none)."""
    failing_from: int
    """The earliest step known not fixed (``steps + 1``: none, past the last call the run is
    its source, which failed)."""
    probes: tuple[Probe, ...]
    stopped: str | None
    """Why the bisection ended before it decided (None when it decided)."""
    contradictions: tuple[tuple[int, int], ...] = field(default=())
    """(j, k): the probe at ``llm:j`` was not fixed, the later one at ``llm:k`` was."""

    @property
    def deciding_step(self) -> int | None:
        """The latest step from which the change fixes the run, once found."""
        return self.fixed_through if self.status == "found" else None

    @property
    def undecided_range(self) -> tuple[int, int] | None:
        """The steps whose outcome the bisection could not decide (first, last), when it
        stopped early."""
        if self.status != "undecided":
            return None
        return self.fixed_through + 1, self.failing_from - 1

    @property
    def replays(self) -> int:
        return sum(len(p.votes) for p in self.probes)

    def to_json(self) -> dict[str, Any]:
        undecided = self.undecided_range
        return {
            "status": self.status,
            "deciding_step": None if self.deciding_step is None else f"llm:{self.deciding_step}",
            "steps": self.steps,
            "repeats": self.repeats,
            "fixed_through": self.fixed_through,
            "failing_from": self.failing_from,
            "undecided": None
            if undecided is None
            else {"from": f"llm:{undecided[0]}", "to": f"llm:{undecided[1]}"},
            "stopped": self.stopped,
            "probe_bound": probe_bound(self.steps),
            "replays": self.replays,
            "monotonic_assumption": (
                "fixed from llm:k implies fixed from every earlier step; the bisection"
                " probes only between its bounds"
            ),
            "contradictions": [
                {"not_fixed": f"llm:{j}", "fixed": f"llm:{k}"} for j, k in self.contradictions
            ],
            "split_probes": [f"llm:{p.step}" for p in self.probes if p.split],
            "probes": [p.to_json() for p in self.probes],
        }


def _contradictions(probes: list[Probe]) -> tuple[tuple[int, int], ...]:
    fixed = sorted({p.step for p in probes if p.decision == "fixed"})
    unfixed = sorted({p.step for p in probes if p.decision == "not_fixed"})
    return tuple((j, k) for j in unfixed for k in fixed if j < k)


def bisect_failure(
    steps: int,
    probe: ProbeFunction,
    *,
    repeats: int = 1,
    max_replays: int | None = None,
) -> Bisection:
    """Bisects ``llm:1..llm:steps`` with ``probe``. ``max_replays``: replays in all (a probe
    starts only when all its ``repeats`` fit)."""
    if steps < 1:
        raise ValueError("a bisection needs at least one step")
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    if max_replays is not None and max_replays < 1:
        raise ValueError("max_replays must be at least 1")
    low, high = 0, steps + 1  # fixed through low (0: nothing known), failing from high
    probes: list[Probe] = []
    made = 0
    stopped: str | None = None
    while high - low > 1:
        if max_replays is not None and made + repeats > max_replays:
            stopped = f"max replays reached: {made} made of {max_replays}, a probe takes {repeats}"
            break
        step = (low + high) // 2
        answer = probe(step, repeats)
        if not answer.votes and answer.stopped is not None:  # no replay made: no probe
            stopped = answer.stopped
            break
        made += len(answer.votes)
        decision, agreed = decide(answer.votes, repeats)
        probes.append(Probe(step, answer.votes, decision, agreed, repeats))
        if decision == "fixed":
            low = step
        elif decision == "not_fixed":
            high = step
        else:
            stopped = answer.stopped or (
                f"the probe at llm:{step} is undecided ({_tally(answer.votes, repeats)})"
            )
            break
        if answer.stopped is not None and high - low > 1:
            stopped = answer.stopped
            break
    if high - low <= 1:
        status: Status = "found" if low > 0 else "never_fixed"
        stopped = None
    else:
        status = "undecided"
    return Bisection(
        steps=steps,
        repeats=repeats,
        status=status,
        fixed_through=low,
        failing_from=high,
        probes=tuple(probes),
        stopped=stopped,
        contradictions=_contradictions(probes),
    )


def _tally(votes: tuple[Vote, ...], repeats: int) -> str:
    counts = {d: sum(1 for v in votes if v.decision == d) for d in ("fixed", "not_fixed")}
    undecided = len(votes) - counts["fixed"] - counts["not_fixed"]
    missing = repeats - len(votes)
    parts = [f"{counts['fixed']} fixed", f"{counts['not_fixed']} not fixed"]
    if undecided:
        parts.append(f"{undecided} undecided")
    if missing > 0:
        parts.append(f"{missing} not made")
    return ", ".join(parts) + f" of {repeats}"
