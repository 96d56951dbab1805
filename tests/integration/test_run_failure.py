"""A failing run's failure among the others, on the run itself: ``GET /api/v1/runs/{id}``'s
``failure`` ("seen N times since ...; fixed by ...; guarded by ...") and ``afr runs show``,
through the real collector, from runs of real failure kinds sent again under new ids and
times. Each answer is checked against the cluster ``/api/v1/failures/{signature}`` gives for
the same window, and against what was sent."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC
from typing import Any

import pytest

from afr.runs.cli import show_lines
from afr.runs.client import RunsClient
from afr.runs.terminal import Terminal
from afr_exporter import semconv as sc
from tests.booking_agent import SourceKind
from tests.integration.conftest import capture_failures, start_collector
from tests.integration.test_failure_clusters import World

pytestmark = pytest.mark.slow

_KINDS: tuple[SourceKind, ...] = ("schema_rejection", "tool_raised", "guardrail_tripped")
_NS = 1_000_000_000
_HOUR_NS = 3600 * _NS
_DAY_NS = 24 * _HOUR_NS
_WINDOW_NS = 30 * _DAY_NS


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    thread, running = start_collector(tmp_path_factory.mktemp("run-failure") / "data")
    world = World(running)
    for kind, (run_id, template) in capture_failures(running, _KINDS).items():
        world.templates[kind] = template
        world.start_ns[kind] = min(
            int(span["startTimeUnixNano"])
            for rs in template["resourceSpans"]
            for ss in rs["scopeSpans"]
            for span in ss["spans"]
        )
        world.signatures[kind] = str(world.running.run(run_id)["run"]["signature"])
    yield world
    thread.stop()


def _detail(world: World, run_id: str, key: str | None = None) -> dict[str, Any]:
    world.running.collector.flush()
    answer = world.running.api(f"/api/v1/runs/{run_id}", key)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _agrees_with_its_cluster(world: World, detail: dict[str, Any]) -> dict[str, Any]:
    """The run's failure is its signature's cluster over the same window, field by field."""
    failure: dict[str, Any] = detail["failure"]
    assert failure["signature"] == detail["run"]["signature"]
    cluster = world.running.api(
        f"/api/v1/failures/{failure['signature']}",
        since=failure["since_ns"],
        until=time.time_ns() + _HOUR_NS,
    ).json()["failure"]
    for field, value in failure.items():
        if field != "since_ns":
            assert cluster[field] == value, field
    return failure


def _show(world: World, run_id: str) -> str:
    client = RunsClient(world.running.http_url, world.running.key)
    try:
        return "\n".join(show_lines(client, run_id, Terminal(width=120, tz=UTC)))
    finally:
        client.close()


def test_the_run_counts_the_runs_of_the_last_30_days_or_since_it_started(world: World) -> None:
    kind = _KINDS[0]
    now = time.time_ns()
    old = world.run_at(kind, now - 40 * _DAY_NS)
    middle = world.run_at(kind, now - 10 * _DAY_NS)
    recent = world.run_at(kind, now - 2 * _DAY_NS)
    before = time.time_ns()
    detail = _detail(world, recent)
    after = time.time_ns()
    assert detail["run"]["signature"] == world.signatures[kind]
    failure = _agrees_with_its_cluster(world, detail)
    # The capture (now), the middle and the recent run; not the one of 40 days ago.
    assert failure["runs"] == 3
    assert before - _WINDOW_NS <= failure["since_ns"] <= after - _WINDOW_NS
    assert failure["first_seen_ns"] == now - 10 * _DAY_NS
    assert failure["status"] == "open" and failure["fixed_by"] is None
    assert failure["guard"] is None and failure["recurring_since_ns"] is None
    assert ", after " in failure["title"]
    # A run older than the window is counted from its own start: all four.
    old_detail = _detail(world, old)
    old_failure = _agrees_with_its_cluster(world, old_detail)
    assert old_failure["since_ns"] == now - 40 * _DAY_NS == old_detail["run"]["start_ns"]
    assert old_failure["runs"] == 4 and old_failure["first_seen_ns"] == now - 40 * _DAY_NS
    assert _detail(world, middle)["failure"]["runs"] == 3


def test_a_run_that_did_not_fail_has_no_failure(world: World) -> None:
    source = world.run_at(_KINDS[0], time.time_ns() - _DAY_NS)
    replay = world.linked_run(
        "replay", source, time.time_ns() - _HOUR_NS, {sc.METADATA_VERDICT: "FAILURE_FIXED"}
    )
    detail = _detail(world, replay)
    assert detail["run"]["status"] == "ok"
    assert detail["run"]["signature"] is None and detail["failure"] is None
    assert "failure " not in _show(world, replay)


def test_open_fixed_guarded_recurring_on_the_run_and_in_afr_runs_show(world: World) -> None:
    kind = _KINDS[1]
    now = time.time_ns()
    source = world.run_at(kind, now - 5 * _DAY_NS)
    signature = world.signatures[kind]

    def stage() -> tuple[dict[str, Any], str]:
        return _agrees_with_its_cluster(world, _detail(world, source)), _show(world, source)

    failure, shown = stage()
    assert failure["status"] == "open"
    assert f"failure open  {signature}" in shown
    assert "seen 2 times since" in shown  # it and the capture
    assert f"not fixed yet: afr replay --signature {signature}" in shown

    world.linked_run(
        "replay", source, now - 5 * _DAY_NS + _HOUR_NS, {sc.METADATA_VERDICT: "STILL_FAILING"}
    )
    assert stage()[0]["status"] == "open"

    fix = world.linked_run(
        "replay", source, now - 5 * _DAY_NS + 2 * _HOUR_NS, {sc.METADATA_VERDICT: "FAILURE_FIXED"}
    )
    failure, shown = stage()
    assert (failure["status"], failure["fixed_by"]) == ("fixed", fix)
    assert f"fixed by replay {fix}" in shown and "not guarded: afr eval synthesize" in shown

    meta = {sc.METADATA_EVAL_NAME: "tool-guard", sc.METADATA_EVAL_STATUS: "failed"}
    failed_eval = world.linked_run("eval", source, now - 5 * _DAY_NS + 3 * _HOUR_NS, meta)
    failure, shown = stage()
    assert failure["status"] == "guarded"
    assert failure["guard"]["last_run_id"] == failed_eval
    assert f"guarded by eval tool-guard · last failed (run {failed_eval})" in shown

    # The eval passes, yet the capture (after the eval first ran) failed the same way.
    world.linked_run(
        "eval",
        source,
        now - 5 * _DAY_NS + 4 * _HOUR_NS,
        {**meta, sc.METADATA_EVAL_STATUS: "passed"},
    )
    failure, shown = stage()
    assert failure["status"] == "recurring"
    assert failure["recurring_since_ns"] == now - 5 * _DAY_NS + 3 * _HOUR_NS
    assert failure["runs_since_guard"] == 1
    world.run_at(kind, now - _HOUR_NS)
    failure, shown = stage()
    assert (failure["status"], failure["runs_since_guard"], failure["runs"]) == ("recurring", 2, 3)
    assert f"failure recurring  {signature}" in shown
    assert "recurring: 2 run(s) since the eval first ran" in shown
    assert f"more: afr failures show {signature}" in shown
    # The newer failing run of the cluster says the same of it.
    newest = world.running.api(f"/api/v1/failures/{signature}").json()["failure"]
    assert _detail(world, newest["sample_run_ids"][0])["failure"]["status"] == "recurring"


def test_another_projects_runs_are_neither_shown_nor_counted(world: World) -> None:
    kind = _KINDS[2]
    now = time.time_ns()
    mine = world.run_at(kind, now - 3 * _DAY_NS)
    counted = _detail(world, mine)["failure"]["runs"]
    other = world.running.collector.keys.create("elsewhere")
    assert world.running.api(f"/api/v1/runs/{mine}", other).status_code == 404
    theirs = world.run_at(kind, now - _DAY_NS, project_key=other)
    their_failure = _detail(world, theirs, other)["failure"]
    assert (their_failure["runs"], their_failure["signature"]) == (1, world.signatures[kind])
    assert their_failure["sample_run_ids"] == [theirs]
    failure = _detail(world, mine)["failure"]
    assert failure["runs"] == counted and theirs not in failure["sample_run_ids"]


@pytest.mark.parametrize("route", ["runs", "failures"])
def test_a_nanosecond_bound_is_exact(world: World, route: str) -> None:
    """A run starting at exactly ``since`` is in, one nanosecond later is out: a bound in
    nanoseconds is read whole, not through a float (which moves it by up to 256 ns)."""
    start = time.time_ns() - 7 * _DAY_NS + 123_456_789
    run_id = world.run_at(_KINDS[0], start)
    world.running.collector.flush()

    def found(since: int) -> list[str]:
        until = start + _HOUR_NS
        if route == "runs":
            page = world.running.api("/api/v1/runs", since=since, until=until).json()
            return [r["run_id"] for r in page["runs"]]
        page = world.running.api("/api/v1/failures", since=since, until=until).json()
        return [r for c in page["failures"] for r in c["sample_run_ids"]]

    assert run_id in found(start)
    assert run_id not in found(start + 1)
    assert world.running.api("/api/v1/runs", since="1e400").status_code == 400
    assert world.running.api("/api/v1/runs", since=str(2**64)).status_code == 400
