"""Failure clusters through the real collector: runs of real failure kinds (captured once from
the booking agent, resent under new ids and times through the OTLP/HTTP receiver), checked
against an oracle computed from what was sent; statuses from runs shaped as the replay worker
shapes its replays and eval runs (``afr.run.kind``, ``afr.source_run_id``, the root's trace
metadata with the verdict, the eval's name and status)."""

from __future__ import annotations

import copy
import io
import itertools
import json
import random
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from afr.cli import build_parser
from afr.runs.failures import run_failures
from afr_exporter import semconv as sc
from tests.booking_agent import SourceKind
from tests.integration.conftest import Running, capture_failures, start_collector

pytestmark = pytest.mark.slow

_KINDS: tuple[SourceKind, ...] = ("schema_rejection", "tool_raised", "guardrail_tripped")
_NS = 1_000_000_000
_HOUR_NS = 3600 * _NS
_NUMBERS = itertools.count(1)


class World:
    def __init__(self, running: Running) -> None:
        self.running = running
        self.templates: dict[SourceKind, dict[str, Any]] = {}
        self.signatures: dict[SourceKind, str] = {}
        self.start_ns: dict[SourceKind, int] = {}

    def send(self, body: dict[str, Any], key: str | None = None) -> None:
        answer = httpx.post(
            self.running.http_url + "/v1/traces",
            json=body,
            headers=self.running.headers(key),
            timeout=30,
        )
        assert answer.status_code == 200, answer.text

    def run_at(
        self,
        kind: SourceKind,
        start_ns: int,
        *,
        workflow: str | None = None,
        project_key: str | None = None,
    ) -> str:
        """A fresh run of ``kind`` starting at ``start_ns`` (in the project of
        ``project_key``, default the world's); its id."""
        body = copy.deepcopy(self.templates[kind])
        trace_id = f"{next(_NUMBERS):08x}{random.getrandbits(96):024x}"
        shift = start_ns - self.start_ns[kind]
        span_ids: dict[str, str] = {"": ""}
        for resource_spans in body["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    old = span["traceId"]
                    span["traceId"] = trace_id
                    for key in ("spanId", "parentSpanId"):
                        span[key] = span_ids.setdefault(span[key], f"{random.getrandbits(64):016x}")
                    for key in ("startTimeUnixNano", "endTimeUnixNano"):
                        span[key] = str(int(span[key]) + shift)
                    for event in span.get("events", []):
                        event["timeUnixNano"] = str(int(event["timeUnixNano"]) + shift)
                    for attribute in span.get("attributes", []):
                        value = attribute["value"]
                        if "stringValue" in value:
                            value["stringValue"] = value["stringValue"].replace(old, trace_id)
                        if workflow and attribute["key"] == "gen_ai.workflow.name":
                            value["stringValue"] = workflow
        self.send(body, project_key)
        return trace_id

    def linked_run(self, kind: str, source: str, start_ns: int, metadata: dict[str, Any]) -> str:
        """A replay or eval run of ``source`` as the worker marks one: its kind and source on
        the span, its verdict (or eval name and status) in the root's trace metadata."""
        trace_id = f"{next(_NUMBERS):08x}{random.getrandbits(96):024x}"
        attributes = {
            sc.AFR_SPAN_TYPE: "workflow",
            sc.AFR_RUN_KIND: kind,
            sc.AFR_SOURCE_RUN_ID: source,
            sc.AFR_TRACE_METADATA: json.dumps(metadata),
        }
        span = {
            "traceId": trace_id,
            "spanId": f"{random.getrandbits(64):016x}",
            "parentSpanId": "",
            "name": f"{kind} of {source}",
            "kind": 1,
            "startTimeUnixNano": str(start_ns),
            "endTimeUnixNano": str(start_ns + _NS),
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
            "status": {"code": 1},
        }
        self.send(
            {
                "resourceSpans": [
                    {
                        "resource": {"attributes": []},
                        "scopeSpans": [{"scope": {"name": "afr"}, "spans": [span]}],
                    }
                ]
            }
        )
        return trace_id

    def failures(self, **params: Any) -> list[dict[str, Any]]:
        self.running.collector.flush()
        answer = self.running.api("/api/v1/failures", **params)
        assert answer.status_code == 200, answer.text
        failures: list[dict[str, Any]] = answer.json()["failures"]
        return failures


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    thread, running = start_collector(tmp_path_factory.mktemp("clusters") / "data")
    world = World(running)
    runs = capture_failures(running, _KINDS)
    captured = {kind: run_id for kind, (run_id, _) in runs.items()}
    for kind, (_, template) in runs.items():
        world.templates[kind] = template
        world.start_ns[kind] = min(
            int(span["startTimeUnixNano"])
            for rs in template["resourceSpans"]
            for ss in rs["scopeSpans"]
            for span in ss["spans"]
        )
    rows = running.store.query(
        "SELECT run_id, signature FROM {db}.run_summary WHERE project = 'shop' "
        "AND run_id IN {ids:Array(String)}",
        {"ids": list(captured.values())},
    )
    by_run = dict(rows)
    world.signatures = {kind: by_run[run_id] for kind, run_id in captured.items()}
    # The captures themselves are runs of the window: send the rest well after them.
    yield world
    thread.stop()


def test_clusters_match_an_oracle_of_what_was_sent(world: World) -> None:
    rng = random.Random(21)
    base = time.time_ns() - 200 * 24 * _HOUR_NS  # a window of its own, far from the captures
    sent: list[tuple[SourceKind, str, int]] = []
    for _ in range(14):
        kind = rng.choice(_KINDS)
        start = base + rng.randrange(0, 5 * 24 * _HOUR_NS)
        sent.append((kind, world.run_at(kind, start), start))
    outside = world.run_at(_KINDS[0], base - 2 * 24 * _HOUR_NS)
    window: dict[str, Any] = {"since": base, "until": base + 6 * 24 * _HOUR_NS}
    found = {c["signature"]: c for c in world.failures(**window)}

    oracle: dict[str, list[tuple[int, str]]] = {}
    for kind, run_id, start in sent:
        oracle.setdefault(world.signatures[kind], []).append((start, run_id))
    assert set(found) == set(oracle)
    for signature, runs in oracle.items():
        cluster = found[signature]
        runs.sort(reverse=True)
        assert cluster["runs"] == len(runs)
        assert cluster["first_seen_ns"] == runs[-1][0]
        assert cluster["last_seen_ns"] == runs[0][0]
        assert cluster["sample_run_ids"] == [run_id for _, run_id in runs[:5]]
        days = Counter(
            datetime.fromtimestamp(start / _NS, UTC).date().isoformat() for start, _ in runs
        )
        assert {d["day"]: d["runs"] for d in cluster["per_day"]} == dict(days)
        assert cluster["status"] == "open"
        assert cluster["fixed_by"] is None and cluster["guard"] is None
        assert outside not in cluster["sample_run_ids"]
        assert cluster["path"] and cluster["title"].endswith(" → ".join(cluster["path"]))
    # Open clusters by last seen, newest first.
    lasts = [c["last_seen_ns"] for c in world.failures(**window)]
    assert lasts == sorted(lasts, reverse=True)
    # A page of one at a time walks the same clusters in the same order.
    walked: list[str] = []
    cursor: str | None = None
    while True:
        page = world.running.api(
            "/api/v1/failures", limit=1, **window, **({"cursor": cursor} if cursor else {})
        ).json()
        walked += [c["signature"] for c in page["failures"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert walked == [c["signature"] for c in world.failures(**window)]

    signature = next(iter(oracle))
    detail = world.running.api(f"/api/v1/failures/{signature}", **window)
    assert detail.status_code == 200, detail.text
    assert detail.json()["failure"] == found[signature]


def test_open_fixed_guarded_recurring(world: World) -> None:
    base = time.time_ns() - 100 * 24 * _HOUR_NS
    window: dict[str, Any] = {"since": base, "until": base + 10 * 24 * _HOUR_NS}
    fixed_kind, guarded_kind, recurring_kind = _KINDS
    fixed_source = world.run_at(fixed_kind, base + _HOUR_NS)
    world.run_at(fixed_kind, base + 2 * _HOUR_NS)
    guarded_source = world.run_at(guarded_kind, base + _HOUR_NS)
    recurring_source = world.run_at(recurring_kind, base + _HOUR_NS)

    # A replay that did not fix it leaves the cluster open.
    world.linked_run(
        "replay", fixed_source, base + 3 * _HOUR_NS, {sc.METADATA_VERDICT: "STILL_FAILING"}
    )
    statuses = {c["signature"]: c["status"] for c in world.failures(**window)}
    assert set(statuses.values()) == {"open"}

    fix = world.linked_run(
        "replay", fixed_source, base + 4 * _HOUR_NS, {sc.METADATA_VERDICT: "FAILURE_FIXED"}
    )
    for source in (guarded_source, recurring_source):
        world.linked_run(
            "replay", source, base + 4 * _HOUR_NS, {sc.METADATA_VERDICT: "FAILURE_FIXED"}
        )
    guard_meta = {sc.METADATA_EVAL_NAME: "guards-it", sc.METADATA_EVAL_STATUS: "failed"}
    world.linked_run("eval", guarded_source, base + 5 * _HOUR_NS, guard_meta)
    last_guard = world.linked_run(
        "eval",
        guarded_source,
        base + 6 * _HOUR_NS,
        {**guard_meta, sc.METADATA_EVAL_STATUS: "passed"},
    )
    recur_meta = {sc.METADATA_EVAL_NAME: "passes-anyway", sc.METADATA_EVAL_STATUS: "passed"}
    eval_run = world.linked_run("eval", recurring_source, base + 5 * _HOUR_NS, recur_meta)
    # The same failure again after the eval first ran, though the eval passes.
    again = world.run_at(recurring_kind, base + 8 * _HOUR_NS)

    clusters = world.failures(**window)
    by_signature = {c["signature"]: c for c in clusters}
    fixed = by_signature[world.signatures[fixed_kind]]
    guarded = by_signature[world.signatures[guarded_kind]]
    recurring = by_signature[world.signatures[recurring_kind]]
    assert (fixed["status"], fixed["fixed_by"], fixed["guard"]) == ("fixed", fix, None)
    assert guarded["status"] == "guarded"
    assert guarded["guard"]["eval_name"] == "guards-it"
    assert guarded["guard"]["last_run_id"] == last_guard
    assert guarded["guard"]["last_outcome"] == "passed"
    assert guarded["guard"]["eval_runs"] == 2
    assert recurring["status"] == "recurring"
    assert recurring["guard"]["last_run_id"] == eval_run
    assert recurring["recurring_since_ns"] == base + 5 * _HOUR_NS
    assert recurring["runs_since_guard"] == 1
    assert recurring["sample_run_ids"][0] == again
    assert clusters[0] is not None and clusters[0]["signature"] == recurring["signature"]
    # Replays and evals are never members.
    assert recurring["runs"] == 2 and fixed["runs"] == 2 and guarded["runs"] == 1

    only = world.failures(status="recurring", **window)
    assert [c["signature"] for c in only] == [recurring["signature"]]


def test_bad_and_unknown_signatures_and_filters(world: World) -> None:
    api = world.running.api
    assert api("/api/v1/failures/not-a-signature").status_code == 400
    assert api("/api/v1/failures/0123456789abcdef").status_code == 404
    assert api("/api/v1/failures", status="nope").status_code == 400
    assert api("/api/v1/failures", cursor="%%%").status_code == 400
    assert api("/api/v1/failures", key="wrong").status_code == 401


def test_workflow_filter_and_project_scope(world: World) -> None:
    base = time.time_ns() - 300 * 24 * _HOUR_NS
    window: dict[str, Any] = {"since": base, "until": base + 24 * _HOUR_NS}
    kind = _KINDS[1]
    world.run_at(kind, base + _HOUR_NS, workflow="checkout")
    world.run_at(kind, base + 2 * _HOUR_NS, workflow="returns")
    everything = world.failures(**window)
    assert [c["runs"] for c in everything] == [2]
    assert sorted(everything[0]["workflows"]) == ["checkout", "returns"]
    (checkout,) = world.failures(workflow="checkout", **window)
    assert (checkout["runs"], checkout["workflows"]) == (1, ["checkout"])
    other = world.running.collector.keys.create("elsewhere")
    answer = world.running.api("/api/v1/failures", key=other, **window)
    assert answer.json()["failures"] == []


def test_only_the_fixes_of_runs_counted_decide_the_status(world: World) -> None:
    """A replay fixed a failing run of the window that the filter does not count (another
    workflow): the cluster of the runs counted stays open."""
    base = time.time_ns() - 500 * 24 * _HOUR_NS
    window: dict[str, Any] = {"since": base, "until": base + 24 * _HOUR_NS}
    kind = _KINDS[2]
    world.run_at(kind, base + _HOUR_NS, workflow="checkout")
    returns = world.run_at(kind, base + 2 * _HOUR_NS, workflow="returns")
    world.linked_run("replay", returns, base + 3 * _HOUR_NS, {sc.METADATA_VERDICT: "FAILURE_FIXED"})
    (checkout,) = world.failures(workflow="checkout", **window)
    assert (checkout["runs"], checkout["status"], checkout["fixed_by"]) == (1, "open", None)
    (everything,) = world.failures(**window)
    assert (everything["runs"], everything["status"]) == (2, "fixed")


def test_afr_failures_list_and_show(world: World) -> None:
    base = time.time_ns() - 400 * 24 * _HOUR_NS
    kind = _KINDS[0]
    source = world.run_at(kind, base + _HOUR_NS)
    world.linked_run("replay", source, base + 2 * _HOUR_NS, {sc.METADATA_VERDICT: "FAILURE_FIXED"})
    world.linked_run(
        "eval",
        source,
        base + 3 * _HOUR_NS,
        {sc.METADATA_EVAL_NAME: "refund-guard", sc.METADATA_EVAL_STATUS: "passed"},
    )
    newest = world.run_at(kind, base + 4 * _HOUR_NS)
    world.running.collector.flush()
    window = ["--since", str(base / _NS), "--until", str((base + 24 * _HOUR_NS) / _NS)]
    env = {"AFR_API_KEY": world.running.key, "NO_COLOR": "1"}

    def afr(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        args = build_parser().parse_args(["failures", *argv, "--url", world.running.http_url])
        code = run_failures(args, stdout=out, stderr=err, environ=env)
        return code, out.getvalue(), err.getvalue()

    code, out, err = afr("list", *window)
    assert code == 0, err
    lines = out.splitlines()
    signature = world.signatures[kind]
    assert lines[0].startswith("recurring") and lines[0].endswith(signature)
    assert "1 run since eval refund-guard first ran" in out
    code, out, _ = afr("list", *window, "--json")
    assert [json.loads(line)["signature"] for line in out.splitlines()] == [signature]
    code, out, err = afr("show", signature, *window)
    assert code == 0, err
    assert "eval refund-guard" in out and newest in out and source in out
    code, _, err = afr("show", "0123456789abcdef", *window)
    assert code == 2 and "no failure 0123456789abcdef" in err
    code, _, err = afr("show", "nope", *window)
    assert code == 2 and "16 hex digits" in err
