"""The whole CPU-bound ingest stage (decode -> redact -> normalize -> truncate -> row encoding,
``process_request`` with the collector's default processors) on arbitrary requests: it
raises nothing but ``InvalidRequest``, so an export is answered 200 (or 400), never 500, and
the block it hands to the write-ahead log reads back as rows of valid UTF-8, one per kept
span, each as wide as the table.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from collector.blocks import json_lines, payload_rows
from collector.errors import InvalidRequest
from collector.model import COLUMN_NAMES
from collector.pipeline import Processor, process_request
from collector.server import default_processors
from collector.settings import CollectorSettings
from tests.fuzz.strategies import BASE_NS, fuzz_settings, utf8_text
from tests.fuzz.test_decode_fuzz import _serialize, json_requests
from tests.fuzz.test_normalize_fuzz import attribute_maps, error_texts


@functools.cache
def processors() -> list[tuple[str, Processor]]:
    settings = CollectorSettings(data_dir=Path("/nonexistent/afr-fuzz"), redaction_key="fuzz-key")
    return default_processors(settings)


def _ingest(raw: bytes) -> None:
    try:
        processed = process_request(processors(), raw, True, "p", BASE_NS)
    except InvalidRequest:
        return
    lines = json_lines(processed.payload) if processed.payload else []
    assert len(lines) == processed.rows == payload_rows(processed.payload)
    for line in lines:
        assert len(json.loads(line.decode("utf-8"))) == len(COLUMN_NAMES)


def _utf8(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


def _attributes(attributes: dict[str, str]) -> list[dict[str, Any]]:
    return [{"key": _utf8(k), "value": {"stringValue": _utf8(v)}} for k, v in attributes.items()]


@st.composite
def agent_requests(draw: st.DrawFn) -> dict[str, Any]:
    """Well-formed spans whose attributes mix the dialects (JSON bodies with escapes, tool
    calls, error dicts, huge values): everything past the decoder sees them."""
    spans = []
    for index in range(draw(st.integers(1, 4))):
        spans.append(
            {
                "traceId": "0af7651916cd43dd8448eb211c80319c",
                "spanId": f"{index + 1:016x}",
                "parentSpanId": f"{index:016x}" if index else "",
                "name": draw(utf8_text),
                "startTimeUnixNano": str(BASE_NS + draw(st.integers(0, 3))),
                "endTimeUnixNano": str(BASE_NS + 10),
                "attributes": _attributes(draw(attribute_maps())),
                "status": {"code": draw(st.integers(0, 2)), "message": _utf8(draw(error_texts))},
            }
        )
    resource = {"service.name": draw(utf8_text)}
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attributes(resource)},
                "scopeSpans": [{"scope": {"name": "fuzz"}, "spans": spans}],
            }
        ]
    }


@fuzz_settings(40)
@given(agent_requests())
def test_ingest_of_agent_spans_answers_and_stores_valid_rows(document: dict[str, Any]) -> None:
    _ingest(json.dumps(document).encode())


@fuzz_settings(100)
@given(json_requests, st.booleans())
def test_ingest_of_json_ish_requests_raises_only_invalid_request(
    document: Any, ascii_only: bool
) -> None:
    _ingest(_serialize(document, ascii_only))
