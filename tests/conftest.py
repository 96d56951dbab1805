from __future__ import annotations

from collections.abc import Iterator

import pytest
from agents.tracing import set_trace_processors

import afr_exporter


@pytest.fixture(autouse=True)
def _isolated_sdk_tracing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with no SDK trace processors and no OTLP environment of the host."""
    import os

    for name in list(os.environ):
        if name.startswith(("OTEL_", "AFR_")):
            monkeypatch.delenv(name)
    set_trace_processors([])
    yield
    installed = afr_exporter.installed()
    if installed is not None:
        installed.shutdown(timeout=1)
    afr_exporter._installed = None
    set_trace_processors([])
