"""After ingestion, no planted secret is anywhere: not in any column of any table, not in the
write-ahead log on disk, not in a log line. And each one is accounted for in Redactions."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from collector.processors.rules import VERIFIED
from tests.integration.conftest import Running, start_collector
from tests.unit.collector.test_redact import SECRET_CORES, SECRETS

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _attr(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def corpus() -> dict[str, Any]:
    """A realistic agent run with secrets and personal data planted everywhere a span can
    carry them: messages, tool arguments and results, nested JSON, events, links, resource
    attributes, span names."""
    s = SECRETS
    messages = [
        {"role": "system", "parts": [{"type": "text", "content": "You are the refund agent."}]},
        {
            "role": "user",
            "parts": [{"type": "text", "content": f"I'm {s['email']}, call me on {s['phone']}"}],
        },
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "call_1", "name": "refund_order", "arguments": "{}"}
            ],
        },
        {
            "role": "user",
            "parts": [
                {"type": "text", "content": f"my card is {s['credit_card']}, ssn {s['us_ssn']}"}
            ],
        },
    ]
    arguments = {
        "order_id": "A-1001",
        "payment": {"iban": s["iban"], "card": {"number": s["credit_card"].replace(" ", "")}},
        "auth": {"api_key": "plain-looking-value", "password": "hunter2"},
    }
    result = {
        "status": "refunded",
        "notes": [f"used {s['stripe_key']}", {"db": s["url_credentials"]}],
    }
    start = 1_764_000_000_000_000_000
    spans = [
        {
            "traceId": TRACE,
            "spanId": "00f067aa0ba902b7",
            "name": f"invoke_workflow refund for {s['email']}",
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + 9_000_000),
            "attributes": [
                _attr("afr.span.type", "workflow"),
                _attr(
                    "afr.trace.metadata",
                    json.dumps({"customer_email": s["email"], "token": s["jwt"]}),
                ),
            ],
        },
        {
            "traceId": TRACE,
            "spanId": "00f067aa0ba902b8",
            "parentSpanId": "00f067aa0ba902b7",
            "name": "chat gpt-4.1-mini",
            "startTimeUnixNano": str(start + 1),
            "endTimeUnixNano": str(start + 2_000_000),
            "attributes": [
                _attr("afr.span.type", "response"),
                _attr("gen_ai.input.messages", json.dumps(messages)),
                _attr(
                    "gen_ai.output.messages",
                    json.dumps(
                        [
                            {
                                "role": "assistant",
                                "parts": [
                                    {
                                        "type": "text",
                                        "content": f"Keys: {s['openai_key']} {s['anthropic_key']}; header {s['bearer_token']}; jwt {s['jwt']}",
                                    }
                                ],
                            }
                        ]
                    ),
                ),
                _attr(
                    "gen_ai.system_instructions",
                    json.dumps(
                        [
                            {
                                "type": "text",
                                "content": f"Use {s['aws_access_key']} and {s['google_api_key']}. "
                                + "x" * 2000,
                            }
                        ]
                    ),
                ),
                _attr("http.request.header.authorization", s["bearer_token"]),
            ],
        },
        {
            "traceId": TRACE,
            "spanId": "00f067aa0ba902b9",
            "parentSpanId": "00f067aa0ba902b7",
            "name": "execute_tool refund_order",
            "startTimeUnixNano": str(start + 3),
            "endTimeUnixNano": str(start + 4_000_000),
            "attributes": [
                _attr("afr.span.type", "function"),
                _attr("gen_ai.tool.name", "refund_order"),
                _attr("gen_ai.tool.call.arguments", json.dumps(arguments)),
                _attr("gen_ai.tool.call.result", json.dumps(result)),
            ],
            "events": [
                {
                    "timeUnixNano": str(start + 5),
                    "name": f"exception for {s['email']}",
                    "attributes": [
                        _attr(
                            "exception.message",
                            f"github said no to {s['github_token']} / {s['slack_token']}",
                        ),
                        _attr("exception.stacktrace", s["pem_private_key"]),
                    ],
                }
            ],
            "links": [
                {
                    "traceId": TRACE,
                    "spanId": "00f067aa0ba902b8",
                    "attributes": [_attr("note", f"retry of {s['email']}")],
                }
            ],
            "status": {"code": 2, "message": f"refund failed for {s['email']}"},
        },
    ]
    resource = [
        _attr("service.name", "refund-desk"),
        _attr("owner.email", s["email"]),
        _attr("deploy.token", "tok_live_123"),
    ]
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": resource},
                "scopeSpans": [{"scope": {"name": "afr.exporter"}, "spans": spans}],
            }
        ]
    }


def _all_stored_text(running: Running) -> str:
    tables = running.store.query(
        "SELECT name FROM system.tables WHERE database = {db:String} AND engine NOT LIKE '%View%'",
        {"db": "afr"},
    )
    dump = []
    for (table,) in tables:
        # APPLY(toString): every column as text, aggregate states included (the runs table).
        rows = running.store.query(f"SELECT * APPLY(toString) FROM afr.`{table}`")  # noqa: S608 - names from system.tables
        dump.append(repr(rows))
    return "\n".join(dump)


@pytest.mark.parametrize("workers", [0, 1])
def test_no_planted_secret_reaches_disk_the_store_or_the_logs(
    tmp_path: Path, workers: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    thread, running = start_collector(tmp_path / "data", ingest_workers=workers)
    try:
        running.store.failing = True  # keep the acknowledged batch in the write-ahead log
        answer = httpx.post(
            running.http_url + "/v1/traces", json=corpus(), headers=running.headers(), timeout=60
        )
        assert answer.status_code == 200, answer.text
        wal_bytes = b"".join(p.read_bytes() for p in (tmp_path / "data" / "wal").glob("*.wal"))
        assert wal_bytes, "the batch is in the log"
        running.store.failing = False
        body = running.run(TRACE)
        stored = _all_stored_text(running)
        pipeline = httpx.get(running.http_url + "/healthz").json()["pipeline"]
    finally:
        thread.stop()

    for rule, core in SECRET_CORES.items():
        if rule == "phone_nanp":
            continue
        assert core.encode() not in wal_bytes, f"{rule} in the write-ahead log"
        assert core not in stored, f"{rule} in the store"
        assert core not in caplog.text, f"{rule} in the logs"
    for plain in ("hunter2", "plain-looking-value", "tok_live_123"):
        assert plain not in stored
    assert "A-1001" in stored, "ordinary content is kept"

    fired = {entry for span in body["spans"] for entry in span["redactions"]}
    # A token whose format's check holds is marked so (github_token+verified).
    rules = {entry.rsplit(":", 1)[1].removesuffix(VERIFIED) for entry in fired}
    expected = {r for r in SECRETS if r != "phone_nanp"} | {"sensitive_key"}
    assert expected <= rules, "every planted kind of secret is accounted for"
    assert any(entry.endswith(":github_token" + VERIFIED) for entry in fired), fired
    assert "attr.gen_ai.tool.call.arguments$.payment.iban:iban" in fired
    assert "attr.gen_ai.tool.call.arguments$.auth:sensitive_key" in fired, (
        "the whole object under a sensitive key"
    )
    assert "event[0].attr.exception.stacktrace:pem_private_key" in fired
    assert "resource.owner.email:email" in fired
    assert not any(core in entry for entry in fired for core in SECRET_CORES.values()), (
        "provenance never holds a value"
    )
    assert (tmp_path / "data" / "redaction.key").stat().st_mode & 0o777 == 0o600
    assert pipeline["redactions"] == sum(len(span["redactions"]) for span in body["spans"])
    assert pipeline["spans_accepted"] == 3
