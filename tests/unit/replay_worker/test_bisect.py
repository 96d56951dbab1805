"""The bisection over a run's model calls (replay_worker/replay/bisect.py), with probe
functions whose deciding step is known: every run length from 1 to 40 and every deciding
position (none included), repeats and majorities, budgets, and what breaks the monotonic
assumption. End to end, through the worker, in ``tests/e2e/test_replay_bisect.py``."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from replay_worker.replay.bisect import (
    Vote,
    Votes,
    bisect_failure,
    decide,
    probe_bound,
    vote_of,
)

FIXED, STILL, UNKNOWN = "FAILURE_FIXED", "STILL_FAILING", "INCONCLUSIVE"


class Probes:
    """A probe function over a verdict per (step, repeat), counting what it was asked."""

    def __init__(self, verdict: Callable[[int, int], str | None]) -> None:
        self.verdict = verdict
        self.asked: list[tuple[int, int]] = []
        self.replays = 0

    def __call__(self, step: int, repeats: int) -> Votes:
        self.asked.append((step, repeats))
        votes = []
        for _ in range(repeats):
            verdict = self.verdict(step, self.replays)
            self.replays += 1
            votes.append(vote_of(verdict, replay_run_id=f"run{self.replays}"))
        return Votes(tuple(votes))


def fixed_through(deciding: int) -> Probes:
    return Probes(lambda step, _: FIXED if step <= deciding else STILL)


@pytest.mark.parametrize("steps", range(1, 41))
def test_every_deciding_position_is_found_within_the_bound(steps: int) -> None:
    bound = math.ceil(math.log2(steps)) + 1
    assert probe_bound(steps) <= bound
    for deciding in range(steps + 1):  # 0: not even llm:1 fixes it
        probes = fixed_through(deciding)
        result = bisect_failure(steps, probes)
        assert (result.fixed_through, result.failing_from) == (deciding, deciding + 1)
        assert result.status == ("found" if deciding else "never_fixed")
        assert result.deciding_step == (deciding or None)
        assert result.undecided_range is None and result.stopped is None
        assert len(probes.asked) == len(result.probes) <= probe_bound(steps) <= bound
        assert all(1 <= step <= steps for step, _ in probes.asked)
        assert len(set(probes.asked)) == len(probes.asked), "no step probed twice"
        assert result.contradictions == () and result.replays == len(probes.asked)


def test_the_report_names_the_probes_and_the_assumption() -> None:
    result = bisect_failure(40, fixed_through(17))
    shown = result.to_json()
    assert shown["deciding_step"] == "llm:17" and shown["status"] == "found"
    assert [p["step"] for p in shown["probes"]] == [
        "llm:20",
        "llm:10",
        "llm:15",
        "llm:17",
        "llm:18",
    ]
    assert [p["decision"] for p in shown["probes"]] == [
        "not_fixed",
        "fixed",
        "fixed",
        "fixed",
        "not_fixed",
    ]
    assert shown["probe_bound"] == 6 and shown["replays"] == 5
    assert "earlier step" in shown["monotonic_assumption"]
    assert shown["probes"][0]["replays"][0]["verdict"] == STILL


def test_repeats_decide_by_majority_and_say_how_many_agreed() -> None:
    # The deciding step is 7 of 12; every third replay says the opposite.
    probes = Probes(
        lambda step, n: (
            (FIXED if step <= 7 else STILL) if n % 3 else (STILL if step <= 7 else FIXED)
        )
    )
    result = bisect_failure(12, probes, repeats=3)
    assert result.deciding_step == 7
    assert all(p.agreed == 2 and p.repeats == 3 and p.split for p in result.probes)
    assert all(r == 3 for _, r in probes.asked)
    assert result.replays == 3 * len(result.probes)
    assert result.to_json()["split_probes"] == [f"llm:{p.step}" for p in result.probes]


def test_a_tie_leaves_the_probe_undecided_and_the_range_open() -> None:
    probes = Probes(lambda step, n: FIXED if n % 2 else STILL)
    result = bisect_failure(40, probes, repeats=2)
    assert result.status == "undecided" and result.deciding_step is None
    assert result.undecided_range == (1, 40)
    assert len(result.probes) == 1 and result.probes[0].decision == "undecided"
    assert result.stopped == "the probe at llm:20 is undecided (1 fixed, 1 not fixed of 2)"
    assert result.to_json()["undecided"] == {"from": "llm:1", "to": "llm:40"}


def test_inconclusive_or_failed_replays_count_against_a_majority() -> None:
    assert decide((vote_of(FIXED), vote_of(UNKNOWN), vote_of(None)), 3) == ("undecided", 1)
    assert decide((vote_of(FIXED), vote_of(FIXED), vote_of(None)), 3) == ("fixed", 2)
    assert decide((vote_of("REGRESSED"),), 1) == ("not_fixed", 1)
    assert decide((vote_of(FIXED),), 3) == ("undecided", 1), "a majority of what was asked"
    # The first probe (llm:20) is inconclusive: the bisection stops there.
    probes = Probes(lambda step, _: UNKNOWN if step > 15 else FIXED)
    result = bisect_failure(40, probes)
    assert result.undecided_range == (1, 40) and "1 undecided" in (result.stopped or "")


def test_max_replays_stops_it_and_says_what_is_left() -> None:
    probes = fixed_through(29)
    result = bisect_failure(40, probes, repeats=2, max_replays=5)
    # llm:20 (fixed), llm:30 (not): a third probe would make 6 replays
    assert [p.step for p in result.probes] == [20, 30] and probes.replays == 4
    assert result.status == "undecided" and result.undecided_range == (21, 29)
    assert result.stopped == "max replays reached: 4 made of 5, a probe takes 2"
    # Enough for the whole bisection: decided, no stop.
    assert bisect_failure(40, fixed_through(29), max_replays=6).deciding_step == 29


def test_a_probe_that_reports_a_spent_budget_ends_it() -> None:
    def probe(step: int, repeats: int) -> Votes:
        if step == 20:
            return Votes((vote_of(FIXED),))
        return Votes((), stopped="the worker's day budget is spent ($0.01 of $0.01)")

    result = bisect_failure(40, probe)
    assert [p.step for p in result.probes] == [20], "no replay made at llm:30: no probe"
    assert result.undecided_range == (21, 40)
    assert result.stopped == "the worker's day budget is spent ($0.01 of $0.01)"
    # A decided probe after which nothing more can be made still counts.
    last = bisect_failure(1, lambda step, r: Votes((vote_of(FIXED),), stopped="day budget spent"))
    assert last.deciding_step == 1 and last.stopped is None
    middle = bisect_failure(3, lambda step, r: Votes((vote_of(FIXED),), stopped="spent"))
    assert (middle.undecided_range, middle.stopped) == ((3, 3), "spent")


def test_contradictions_of_the_assumption_are_listed() -> None:
    # Non-monotonic: fixed only from the odd steps. Bisection never probes outside its
    # bounds, so its own probes cannot contradict each other...
    result = bisect_failure(40, Probes(lambda step, _: FIXED if step % 2 else STILL))
    assert result.status == "found" and result.contradictions == ()
    # ...but a probe's split votes show, and contradictions among probes are computed.
    from replay_worker.replay.bisect import Probe, _contradictions

    probes = [
        Probe(5, (Vote("not_fixed"),), "not_fixed", 1, 1),
        Probe(9, (Vote("fixed"),), "fixed", 1, 1),
        Probe(2, (Vote("fixed"),), "fixed", 1, 1),
    ]
    assert _contradictions(probes) == ((5, 9),)


def test_bad_arguments_are_refused() -> None:
    probes = fixed_through(1)
    for kwargs, message in (
        ({"steps": 0}, "at least one step"),
        ({"steps": 3, "repeats": 0}, "repeats"),
        ({"steps": 3, "max_replays": 0}, "max_replays"),
    ):
        with pytest.raises(ValueError, match=message):
            bisect_failure(probe=probes, **kwargs)
    assert probes.asked == []
