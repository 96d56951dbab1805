"""Cost oracle: runs with cached and reasoning tokens against figures computed by hand from
the published rates (ADR 39), through the real collector: OTLP in, the read API, the
``run_summary`` view and the Agent runs dashboard out.

Rates (USD per million tokens) of the price database the constraints pin (genai-prices
0.2.3): gpt-4.1-mini 0.40 input, 0.10 cached input, 1.60 output; claude-sonnet-4 3 input,
0.30 cache read, 3.75 cache write, 15 output; o3 2 input, 0.50 cached, 8 output; gpt-4o
2.50 input, 1.25 cached, 10 output. Reasoning tokens are output tokens at the output rate
(no model of the database prices them apart). ``house-model`` is priced only by
``AFR_MODEL_PRICES``, which also overrides ``gpt-4o``; ``acme-llm-7`` nobody prices.

Then the real exporter on the real Agents SDK Runner against the scripted model server,
whose answers report cached and reasoning tokens, on the Responses and the Chat Completions
API: the tokens reach the span and the run, and the run is priced per kind.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import gen_trace_id

import afr_exporter
from afr.grafana.dashboards import RUNS_UID, build_all
from afr.grafana.interpolate import TimeRange, interpolate, resolve_variables
from afr.incident import build_model, failing_script, run_incident
from afr.scripted_model import ScriptedModelServer, ScriptedUsage
from afr_common.prices import PriceBook, Tokens
from tests.integration.conftest import Running, start_collector

pytestmark = pytest.mark.slow

OVERRIDES = {
    "house-model": {"input": 1.0, "output": 4.0, "cache_read": 0.25, "cache_write": 1.25},
    "gpt-4o": [2.0, 8.0],
}
M = 1e6

# Usage attributes under each name an instrumentation sends them by.
LATEST = (
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_creation.input_tokens",
    "gen_ai.usage.reasoning.output_tokens",
)
UNDERSCORED = (  # OpenLLMetry, Anthropic's names
    "gen_ai.usage.cache_read_input_tokens",
    "gen_ai.usage.cache_creation_input_tokens",
    "gen_ai.usage.reasoning_tokens",
)


@dataclasses.dataclass(frozen=True)
class Call:
    model: str
    tokens: Tokens
    names: tuple[str, str, str] | None = LATEST
    """The GenAI names of the detail tokens; None: OpenInference's attributes."""


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    calls: tuple[Call, ...]
    cost_usd: float | None
    priced_cost_usd: float
    unpriced: tuple[str, ...] = ()


CASES = [
    Case(
        "database-cached-and-reasoning",
        (
            Call("gpt-4.1-mini", Tokens(10_000, 500, cache_read=8_000)),
            Call("gpt-4.1-mini", Tokens(12_000, 1_000, cache_read=11_000, reasoning=600)),
        ),
        # 2k uncached, 8k cached, 500 out; 1k uncached, 11k cached, 1k out (600 reasoning)
        cost_usd=(
            2_000 * 0.40 + 8_000 * 0.10 + 500 * 1.60 + 1_000 * 0.40 + 11_000 * 0.10 + 1_000 * 1.60
        )
        / M,
        priced_cost_usd=0.0055,
    ),
    Case(
        "database-cache-write-underscored-names",
        (
            Call(
                "claude-sonnet-4-20250514",
                Tokens(20_000, 800, cache_read=15_000, cache_write=4_000, reasoning=300),
                UNDERSCORED,
            ),
        ),
        cost_usd=(1_000 * 3 + 15_000 * 0.30 + 4_000 * 3.75 + 800 * 15) / M,
        priced_cost_usd=0.0345,
    ),
    Case(
        "database-reasoning-openinference",
        (Call("o3", Tokens(1_000, 5_000, cache_read=0, reasoning=4_000), None),),
        cost_usd=(1_000 * 2 + 5_000 * 8) / M,
        priced_cost_usd=0.042,
    ),
    Case(
        "database-dated-model-name",
        (Call("gpt-4o-2024-08-06", Tokens(2_000, 200, cache_read=1_000)),),
        cost_usd=(1_000 * 2.5 + 1_000 * 1.25 + 200 * 10) / M,
        priced_cost_usd=0.00575,
    ),
    Case(
        "only-in-AFR_MODEL_PRICES",
        (Call("house-model", Tokens(4_000, 100, cache_read=2_000, cache_write=1_000)),),
        cost_usd=(1_000 * 1.0 + 2_000 * 0.25 + 1_000 * 1.25 + 100 * 4.0) / M,
        priced_cost_usd=0.00315,
    ),
    Case(
        "AFR_MODEL_PRICES-overrides-the-database",
        # [input, output] only: cached input at the input rate
        (Call("gpt-4o", Tokens(1_000, 100, cache_read=500)),),
        cost_usd=(1_000 * 2.0 + 100 * 8.0) / M,
        priced_cost_usd=0.0028,
    ),
    Case(
        "unknown-model-is-unpriced",
        (Call("acme-llm-7", Tokens(1_000, 100, cache_read=200)),),
        cost_usd=None,
        priced_cost_usd=0.0,
        unpriced=("acme-llm-7",),
    ),
    Case(
        "mixed-priced-and-unpriced",
        (
            Call("gpt-4.1-mini", Tokens(10_000, 500, cache_read=8_000)),
            Call("acme-llm-7", Tokens(3_000, 300)),
            Call("acme-llm-7", Tokens(0, 0)),  # no tokens: costs nothing, whatever its price
        ),
        cost_usd=None,
        priced_cost_usd=(2_000 * 0.40 + 8_000 * 0.10 + 500 * 1.60) / M,
        unpriced=("acme-llm-7",),
    ),
    Case(
        "no-tokens-costs-nothing",
        (Call("acme-llm-7", Tokens(0, 0)),),
        cost_usd=0.0,
        priced_cost_usd=0.0,
    ),
]


def _value(value: Any) -> dict[str, Any]:
    return {"intValue": str(value)} if isinstance(value, int) else {"stringValue": str(value)}


def _attrs(pairs: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in pairs.items()]


def _llm_attributes(call: Call) -> dict[str, Any]:
    t = call.tokens
    if call.names is None:
        return {
            "openinference.span.kind": "LLM",
            "llm.model_name": call.model,
            "llm.token_count.prompt": t.input,
            "llm.token_count.completion": t.output,
            "llm.token_count.prompt_details.cache_read": t.cache_read,
            "llm.token_count.prompt_details.cache_write": t.cache_write,
            "llm.token_count.completion_details.reasoning": t.reasoning,
        }
    read, creation, reasoning = call.names
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": call.model,
        "gen_ai.usage.input_tokens": t.input,
        "gen_ai.usage.output_tokens": t.output,
        read: t.cache_read,
        creation: t.cache_write,
        reasoning: t.reasoning,
    }


def _run_body(trace_id: str, case: Case, start_ns: int) -> dict[str, Any]:
    root = {
        "traceId": trace_id,
        "spanId": "a" * 16,
        "name": f"invoke_agent {case.name}",
        "kind": "SPAN_KIND_INTERNAL",
        "startTimeUnixNano": str(start_ns),
        "endTimeUnixNano": str(start_ns + 10_000_000 * (len(case.calls) + 1)),
        "attributes": _attrs({"gen_ai.operation.name": "invoke_agent"}),
    }
    spans = [root]
    for index, call in enumerate(case.calls, 1):
        begins = start_ns + index * 10_000_000
        spans.append(
            {
                "traceId": trace_id,
                "spanId": f"{index:016x}",
                "parentSpanId": "a" * 16,
                "name": f"chat {call.model}",
                "kind": "SPAN_KIND_CLIENT",
                "startTimeUnixNano": str(begins),
                "endTimeUnixNano": str(begins + 5_000_000),
                "attributes": _attrs(_llm_attributes(call)),
            }
        )
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attrs({"service.name": "cost-oracle"})},
                "scopeSpans": [{"scope": {"name": "cost-oracle"}, "spans": spans}],
            }
        ]
    }


@pytest.fixture(scope="module")
def priced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, dict[str, str]]]:
    root: Path = tmp_path_factory.mktemp("cost-oracle")
    thread, running = start_collector(root / "data", model_prices=OVERRIDES)
    try:
        start_ns = time.time_ns() - 60 * 1_000_000_000
        run_ids = {}
        for number, case in enumerate(CASES):
            trace_id = f"{number + 1:032x}"
            body = _run_body(trace_id, case, start_ns + number * 1_000_000_000)
            answer = httpx.post(
                running.http_url + "/v1/traces", json=body, headers=running.headers(), timeout=30
            )
            assert answer.status_code == 200, answer.text
            run_ids[case.name] = trace_id
        for trace_id in run_ids.values():
            running.run(trace_id)
        running.collector.model_prices.flush()  # the rows of the models just seen
        yield running, run_ids
    finally:
        thread.stop()


def _approx(value: float | None) -> Any:
    return None if value is None else pytest.approx(value, abs=1e-12)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_read_api_prices_each_token_kind_at_its_rate(
    priced: tuple[Running, dict[str, str]], case: Case
) -> None:
    running, run_ids = priced
    run = running.run(run_ids[case.name])["run"]
    calls = [c.tokens for c in case.calls]
    assert run["input_tokens"] == sum(t.input for t in calls)
    assert run["output_tokens"] == sum(t.output for t in calls)
    assert run["cache_read_tokens"] == sum(t.cache_read for t in calls)
    assert run["cache_creation_tokens"] == sum(t.cache_write for t in calls)
    assert run["reasoning_tokens"] == sum(t.reasoning for t in calls)
    assert run["cost_usd"] == _approx(case.cost_usd)
    assert run["priced_cost_usd"] == pytest.approx(case.priced_cost_usd, abs=1e-12)
    assert run["unpriced_models"] == list(case.unpriced)
    listed = running.api("/api/v1/runs", limit=50).json()["runs"]
    (in_list,) = [r for r in listed if r["run_id"] == run_ids[case.name]]
    assert in_list["cost_usd"] == run["cost_usd"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_run_summary_view_agrees_with_the_hand_figures(
    priced: tuple[Running, dict[str, str]], case: Case
) -> None:
    running, run_ids = priced
    ((cost, priced_cost, unpriced, cache_read, reasoning),) = running.store.query(
        "SELECT cost_usd, priced_cost_usd, unpriced_models, cache_read_tokens, reasoning_tokens "
        "FROM {db}.run_summary WHERE project = 'shop' AND run_id = {r:String}",
        {"r": run_ids[case.name]},
    )
    assert cost == _approx(case.cost_usd)
    assert priced_cost == pytest.approx(case.priced_cost_usd, abs=1e-12)
    assert unpriced == list(case.unpriced)
    assert cache_read == sum(c.tokens.cache_read for c in case.calls)
    assert reasoning == sum(c.tokens.reasoning for c in case.calls)


def test_the_store_prices_each_model_seen_and_only_those_a_price_knows(
    priced: tuple[Running, dict[str, str]],
) -> None:
    running, _ = priced
    rows = running.store.query(
        "SELECT Model, InputUsdPerMTok, CacheReadUsdPerMTok, CacheWriteUsdPerMTok, Source "
        "FROM {db}.model_prices FINAL ORDER BY Model"
    )
    table = {row[0]: row[1:] for row in rows}
    assert "acme-llm-7" not in table, "an unknown model has no price, not a price of 0"
    assert table["gpt-4o-2024-08-06"][:2] == (2.5, 1.25)
    assert table["gpt-4o-2024-08-06"][3].startswith("genai-prices ")
    assert table["gpt-4o"] == (2.0, 2.0, 2.0, "AFR_MODEL_PRICES")
    assert table["claude-sonnet-4-20250514"][:3] == (3.0, 0.3, 3.75)


def test_the_agent_runs_dashboard_shows_unpriced_not_zero(
    priced: tuple[Running, dict[str, str]],
) -> None:
    running, run_ids = priced
    store: Any = running.store.inner
    dashboard = build_all()[RUNS_UID]
    now = datetime.now(UTC)
    window = TimeRange(now - timedelta(hours=1), now + timedelta(minutes=1))

    def query(sql: str) -> list[dict[str, Any]]:
        with store._lock:
            result = store._client.query(sql)
        return [dict(zip(result.column_names, row, strict=True)) for row in result.result_rows]

    def panel(title: str) -> list[dict[str, Any]]:
        (found,) = [p for p in dashboard["panels"] if p["title"] == title]
        variables = resolve_variables(
            dashboard,
            lambda sql: [tuple(r.values()) for r in query(sql)],
            window,
            {"project": "shop"},
        )
        return query(interpolate(found["targets"][0]["rawSql"], variables, window))

    rows = {r["run_id"]: r for r in panel("Recent runs")}
    for case in CASES:
        assert rows[run_ids[case.name]]["cost_usd"] == _approx(case.cost_usd), case.name
    (overview,) = panel("Runs in the window")
    assert overview["unpriced_runs"] == sum(bool(c.unpriced) for c in CASES)
    assert overview["cost_usd"] == pytest.approx(sum(c.priced_cost_usd for c in CASES))
    assert overview["cache_read_tokens"] == sum(
        call.tokens.cache_read for c in CASES for call in c.calls
    )
    cost_panel = panel("Cost")
    assert sum(r["cost_usd"] or 0 for r in cost_panel) == pytest.approx(overview["cost_usd"])


# -- the real exporter, the real Runner, the scripted model -----------------------------------

USAGES = (
    ScriptedUsage(1_000, 50, cached_tokens=800, cache_write_tokens=100, reasoning_tokens=20),
    ScriptedUsage(2_000, 80, cached_tokens=1_500, reasoning_tokens=40),
    ScriptedUsage(2_500, 60, cached_tokens=2_000),
)
# gpt-4.1-mini: 100 plain + 100 written (no cache-write rate: the input rate) + 800 cached,
# 50 out; 500 + 1500 cached, 80 out; 500 + 2000 cached, 60 out.
AGENT_RUN_COST = (
    (200 * 0.40 + 800 * 0.10 + 50 * 1.60)
    + (500 * 0.40 + 1_500 * 0.10 + 80 * 1.60)
    + (500 * 0.40 + 2_000 * 0.10 + 60 * 1.60)
) / M


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_an_agent_run_with_cached_and_reasoning_tokens_is_priced_per_kind(
    priced: tuple[Running, dict[str, str]], api: str
) -> None:
    running, _ = priced  # one embedded engine per process; a project of its own
    key = running.collector.keys.create(f"agents-{api}")
    processor = afr_exporter.install(endpoint=running.grpc_endpoint, headers=running.headers(key))
    try:
        script = [
            dataclasses.replace(turn, usage=usage)
            for turn, usage in zip(failing_script(), USAGES, strict=True)
        ]
        trace_id = gen_trace_id()
        with ScriptedModelServer(script) as model:
            asyncio.run(run_incident(build_model(api, model.base_url), trace_id=trace_id))  # type: ignore[arg-type]
        assert processor.force_flush(10)
        run_id = trace_id.removeprefix("trace_")
        served = running.run(run_id, key)
        llm = [s for s in served["spans"] if s["span_type"] == "llm"]
        assert [
            (s["input_tokens"], s["cache_read_tokens"], s["reasoning_tokens"]) for s in llm
        ] == [(u.input_tokens, u.cached_tokens, u.reasoning_tokens) for u in USAGES]
        run = served["run"]
        assert run["cache_read_tokens"] == 4_300
        assert run["reasoning_tokens"] == 60
        assert run["cost_usd"] == pytest.approx(AGENT_RUN_COST, abs=1e-12)
        # What it would have cost with every input token uncached: the overstatement.
        assert run["input_tokens"] * 0.40 / M + run["output_tokens"] * 1.60 / M > 2 * AGENT_RUN_COST
        running.collector.model_prices.flush()
        ((view_cost,),) = running.store.query(
            "SELECT cost_usd FROM {db}.run_summary WHERE run_id = {r:String}", {"r": run_id}
        )
        assert view_cost == pytest.approx(AGENT_RUN_COST, abs=1e-12)
        # The price book the worker budgets with gives the same figure per call.
        book = PriceBook()
        by_call = sum(
            book.cost_usd(
                s["model"],
                Tokens(
                    s["input_tokens"],
                    s["output_tokens"],
                    s["cache_read_tokens"],
                    s["cache_creation_tokens"],
                    s["reasoning_tokens"],
                ),
            )
            or 0.0
            for s in llm
        )
        assert by_call == pytest.approx(AGENT_RUN_COST, abs=1e-12)
        assert json.dumps(run)  # served as JSON: no float NaN or infinity
    finally:
        processor.shutdown(timeout=1)
