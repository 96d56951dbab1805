"""The replay worker's settings as the e2e tests run it: on a collector of the tests, against
the scripted model server, with a signing secret of the test's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replay_worker.settings import WorkerSettings
from tests.integration.conftest import Running

__all__ = ["scripted_worker_settings"]


def scripted_worker_settings(
    running: Running, secret: str, model_url: str, data_dir: Path, **overrides: Any
) -> WorkerSettings:
    """A worker reading runs from and writing replays to ``running``, its model the scripted
    server at ``model_url`` (Responses API unless ``model_api`` says), its state in
    ``data_dir``; ``overrides``: any other setting."""
    values: dict[str, Any] = dict(
        port=0,
        collector_url=running.http_url,
        collector_otlp_endpoint=running.grpc_endpoint,
        collector_key=running.key,
        webhook_secret=secret,
        model_base_url=model_url,
        model_api_key="scripted",
        model_api="responses",
        data_dir=data_dir,
    )
    values.update(overrides)
    return WorkerSettings(**values)
