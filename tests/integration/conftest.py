from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import gen_trace_id

import afr_exporter
from afr.scripted_model import ScriptedModelServer
from afr_exporter import semconv as sc
from collector.server import Collector, CollectorThread
from collector.settings import CollectorSettings
from collector.store.client import ClickHouseStore
from tests.booking_agent import BookingDesk, SourceKind, build_model, run_booking, source_script
from tests.fakes import FlakyStore
from tests.waiting import wait_until


@dataclass
class Running:
    collector: Collector
    key: str
    settings: CollectorSettings
    store: FlakyStore

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.collector.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.collector.http_port}"

    def headers(self, key: str | None = None) -> dict[str, str]:
        return {"authorization": f"Bearer {key or self.key}"}

    def api(self, path: str, key: str | None = None, **params: Any) -> httpx.Response:
        return httpx.get(self.http_url + path, headers=self.headers(key), params=params, timeout=30)

    def run(self, run_id: str, key: str | None = None, timeout_s: float = 10) -> dict[str, Any]:
        """The run from the read API once it is stored (flushes the writer first)."""

        def stored() -> httpx.Response | None:
            self.collector.flush()
            response = self.api(f"/api/v1/runs/{run_id}", key)
            return response if response.status_code == 200 else None

        response = wait_until(
            stored, timeout_s=timeout_s, what=f"run {run_id} in the read API", interval_s=0.1
        )
        body: dict[str, Any] = response.json()
        return body

    def evaluations(self, run_id: str) -> list[dict[str, str]]:
        """The attributes of the ``gen_ai.evaluation.result`` events on the run's workflow
        root, as the store holds them (every value a string), in order."""
        (root,) = [s for s in self.run(run_id)["spans"] if s["parent_span_id"] == ""]
        return [
            e["attributes"]
            for e in root["events"]
            if e["name"] == sc.EVENT_GEN_AI_EVALUATION_RESULT
        ]


def start_collector(data_dir: Path, **overrides: Any) -> tuple[CollectorThread, Running]:
    # Fixed-time and recorded test data predates any window of accepted start times:
    # tests of the window set it themselves.
    overrides.setdefault("max_span_age_days", 0)
    settings = CollectorSettings(
        data_dir=data_dir, grpc_port=0, http_port=0, batch_interval_s=0.2, **overrides
    )
    store = FlakyStore(_store(settings))
    thread = CollectorThread(settings, store=store)
    collector = thread.__enter__()
    key = collector.keys.create("shop")
    return thread, Running(collector, key, settings, store)


def _store(settings: CollectorSettings) -> ClickHouseStore:
    store = ClickHouseStore(settings.store_dsn, settings.database)
    store.migrate()
    return store


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    thread, running = start_collector(tmp_path / "data")
    yield running
    running.store.failing = False
    thread.stop()


def capture_failures(
    running: Running, kinds: Iterable[SourceKind]
) -> dict[SourceKind, tuple[str, dict[str, Any]]]:
    """Each failure kind of the booking agent run once through the real Runner and exporter
    into ``running``: (its run id, the run as OTLP/JSON from the read API, to send again)."""
    processor = afr_exporter.install(endpoint=running.grpc_endpoint, headers=running.headers())
    captured: dict[SourceKind, str] = {}
    for kind in kinds:
        trace_id = gen_trace_id()
        with ScriptedModelServer(source_script(kind)) as model, contextlib.suppress(Exception):
            asyncio.run(
                run_booking(
                    build_model("responses", model.base_url), BookingDesk(), kind, trace_id=trace_id
                )
            )
        captured[kind] = trace_id.removeprefix("trace_")
    assert processor.force_flush(10)
    processor.shutdown(timeout=1)
    runs: dict[SourceKind, tuple[str, dict[str, Any]]] = {}
    for kind, run_id in captured.items():
        running.run(run_id)
        runs[kind] = run_id, running.api(f"/api/v1/runs/{run_id}/otlp").json()
    return runs
