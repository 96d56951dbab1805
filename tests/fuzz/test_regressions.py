"""What the fuzz tests found in the decoders and processors, pinned: each input below raised,
lost provenance, broke a limit or changed stored data before its fix. (The API's are in
test_api_schemathesis.py.)"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import random
import string
from pathlib import Path
from typing import Any

import pytest

from collector.blocks import encode_block, json_lines
from collector.decode import decode_json
from collector.errors import InvalidRequest
from collector.model import SpanRecord
from collector.pipeline import process_request
from collector.privacy import build_redactor
from collector.processors.normalize import normalize, normalize_trace
from collector.processors.redact import Redactor
from collector.processors.truncate import SENTINEL_KEY, TruncationConfig, Truncator
from collector.server import default_processors
from collector.settings import CollectorSettings
from tests.fuzz.strategies import BASE_NS, record
from tests.secret_corpus import LeakScanner, all_kinds


def _settings() -> CollectorSettings:
    return CollectorSettings(data_dir=Path("/nonexistent/afr-fuzz"), redaction_key="fuzz-key")


def _redactor() -> Redactor:
    return build_redactor(_settings(), {})


def _stored(span: SpanRecord) -> dict[str, Any]:
    return dataclasses.asdict(span)


def _request(attributes: dict[str, str], **span: object) -> bytes:
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "scopeSpans": [
                        {
                            "spans": [
                                {
                                    "traceId": "0af7651916cd43dd8448eb211c80319c",
                                    "spanId": "b7ad6b7169203331",
                                    "name": "step",
                                    "startTimeUnixNano": str(BASE_NS),
                                    "attributes": [
                                        {"key": k, "value": {"stringValue": v}}
                                        for k, v in attributes.items()
                                    ],
                                    **span,
                                }
                            ]
                        }
                    ]
                }
            ]
        }
    ).encode()


def test_a_number_too_long_for_python_is_an_invalid_request() -> None:
    # Was a ValueError out of json.loads: a 500 on OTLP/HTTP, INTERNAL on gRPC.
    with pytest.raises(InvalidRequest, match="number too long"):
        decode_json(b'{"resourceSpans": ' + b"9" * 5000 + b"}")


@pytest.mark.parametrize(
    "attributes",
    [
        # JSON the redactor rewrote: the escaped surrogate came out raw.
        {"note": '["\\ud800 bob@example.com"]'},
        # An error message parsed out of JSON: the ErrorType held a raw surrogate.
        {"gen_ai.operation.name": "chat", "error.type": '{"message": "\\ud800 boom"}'},
    ],
    ids=["redacted-json", "error-type"],
)
def test_an_escaped_lone_surrogate_never_poisons_a_batch(attributes: dict[str, str]) -> None:
    # Was a TypeError from the row encoder: the whole export answered 500.
    processed = process_request(
        default_processors(_settings()), _request(attributes), True, "p", BASE_NS
    )
    assert processed.rows == 1
    (line,) = json_lines(processed.payload)
    row = json.loads(line.decode("utf-8"))
    assert "\\ud800" in json.dumps(row, ensure_ascii=False)  # kept, as its escape


def test_a_tool_call_id_with_an_escaped_surrogate_is_served_as_text() -> None:
    # The read API's run view joined it raw: GET /api/v1/runs/{id} answered 500.
    output = json.dumps(
        [{"role": "assistant", "parts": [{"type": "tool_call", "id": "\ud800", "name": "lookup", "arguments": "{}"}]}]
    )  # fmt: skip
    model = record(
        span_id="1" * 16,
        parent_span_id="f" * 16,
        span_attributes={"gen_ai.operation.name": "chat", "gen_ai.output.messages": output},
    )
    tool = record(
        span_id="2" * 16,
        parent_span_id="f" * 16,
        timestamp_ns=BASE_NS + 1,
        span_attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
    )
    run = normalize([model, tool])
    normalize_trace(run)
    assert tool.tool_call_id == "\\ud800"
    encode_block(run)


def test_a_pseudonym_is_never_redacted_again() -> None:
    # A replay sends stored text back in: the value of a sensitive key, and the value under
    # a key that was itself a secret, got a second pseudonym.
    key = "AKIA" + "ABCDEFGHIJKLMNOP"  # built at run time: no secret-shaped literal in the repo
    span = record(span_attributes={"password": "hunter2hunter2", key: "x", f"api:{key}": "y"})
    redactor = _redactor()
    redactor([span])
    once = copy.deepcopy(span)
    redactor([span])
    assert span.span_attributes == once.span_attributes
    assert span.redactions == once.redactions


def test_the_redactor_does_not_raise_on_text_that_is_not_utf8() -> None:
    # RE2 takes UTF-8 only: a lone surrogate (never from the decoders) raised out of the scan.
    span = record(
        span_name="\ud800", span_attributes={"\udfff key": "\ud800", "password": "\ud800"}
    )
    _redactor()([span])
    assert span.span_attributes["password"].startswith("<secret:")


def test_a_sentinel_fits_its_limit_however_its_preview_escapes() -> None:
    # JSON writes a control character in six bytes: the sentinel of 5,000 of them was
    # 5,084 bytes against a 1,024-byte limit.
    span = record(output="\x01" * 5000, span_attributes={"a": '"' * 3000})
    Truncator(TruncationConfig(max_body_bytes=1024, preview_bytes=2048))([span])
    for stored in (span.output, span.span_attributes["a"]):
        assert len(stored.encode()) <= 1024
        assert json.loads(stored)[SENTINEL_KEY] is True


def test_a_trimmed_span_keeps_the_hash_of_each_original() -> None:
    # A value cut to its limit, then trimmed with its span, became a sentinel of a sentinel.
    original = "é" * 3000
    span = record(input=original, span_attributes={f"k{i}": "v" * 900 for i in range(3)})
    Truncator(TruncationConfig(max_body_bytes=4096, max_span_bytes=3000, preview_bytes=3000))(
        [span]
    )
    document = json.loads(span.input)
    assert document["sha256"] == hashlib.sha256(original.encode()).hexdigest()
    assert document["original_bytes"] == 6000


def test_a_span_over_its_limit_by_its_keys_is_trimmed() -> None:
    # The quick size estimate counted values only: keys could carry a span over the limit.
    values = ["v" * 900, "v" * 900, "", ""]
    span = record(span_attributes={f"{i}" + "k" * 1624: value for i, value in enumerate(values)})
    config = TruncationConfig(max_span_bytes=8000, max_name_bytes=2048)
    Truncator(config)([span])
    total = sum(len(k.encode()) + len(v.encode()) for k, v in span.span_attributes.items())
    assert total <= config.max_span_bytes
    assert span.truncated


def test_the_truncator_does_not_raise_on_text_that_is_not_utf8() -> None:
    span: SpanRecord = record(input="\ud800" * 4000, output="x" * 3000)
    Truncator(TruncationConfig(max_body_bytes=4096, max_span_bytes=2000))([span])
    assert json.loads(span.input)[SENTINEL_KEY] is True


def test_the_name_of_a_header_pair_is_redacted_too() -> None:
    # ["Set-Cookie: sid=…; csrftoken=…", …] was taken for a [name, value] header pair: the
    # value was replaced, and the "name", which held the cookies, stored as it was.
    header = "Set-Cookie: sessionid=2yW4Acq9GFz6Y1t9EwL56nGisiWgNZq6; theme=dark"
    span = record(span_attributes={"note": json.dumps([header, [None]])})
    _redactor()([span])
    assert "2yW4Acq9GFz6Y1t9EwL56nGisiWgNZq6" not in span.span_attributes["note"]


def test_a_json_key_with_an_escaped_surrogate_is_escaped_in_the_manifest() -> None:
    # The Redactions entry named the parsed key, raw surrogate and all: the row encoder
    # refused the span, and with it the export (500).
    span = record(service_name='{"\\uD800":27.112244495E14}')
    _redactor()([span])
    assert span.redactions == ["service$.\\ud800:credit_card"]
    encode_block([span])


def test_a_cookie_header_redacted_once_stays_as_it_is() -> None:
    # "Set-Cookie: <secret:…>" matched again from the space before the pseudonym: a second
    # pseudonym, and the space lost.
    span = record(span_attributes={"note": "Set-Cookie: sessionid=2yW4Acq9GFz6Y1t9EwL56nGi"})
    redactor = _redactor()
    redactor([span])
    once = dict(span.span_attributes)
    assert once["note"].startswith("Set-Cookie: <secret:")
    redactor([span])
    assert span.span_attributes == once


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345",  # the scheme word was taken
        "curl -u admin:hunter2hunter2 https://x",  # "admin:<secret:…>" matched again
        "dsn=postgres://user:pw12345678@db.internal:5432/x",  # "<secret:…>" holds a colon
    ],
)
def test_credentials_redacted_once_stay_as_they_are(text: str) -> None:
    span = record(span_attributes={"note": text})
    redactor = _redactor()
    redactor([span])
    once = dict(span.span_attributes)
    redactor([span])
    assert span.span_attributes == once


@pytest.mark.parametrize(
    "text",
    [
        # An e-mail address as the user: the URL rule stopped at the "@", and the e-mail
        # rule replaced only the address.
        "postgres://bob@example.com:pw12345678@host/db",
        # The CLI rule replaced only the password, hiding the address from the e-mail rule.
        "curl -u bob@example.com:pw12345678 https://x",
    ],
)
def test_credentials_with_an_email_as_user_go_whole(text: str) -> None:
    span = record(span_attributes={"note": text})
    _redactor()([span])
    assert "pw12345678" not in span.span_attributes["note"]
    assert "bob@example.com" not in span.span_attributes["note"]


def test_a_secret_after_an_escaped_newline_in_a_key_is_found() -> None:
    # Keys were scanned raw: "0\\nsk-ant-…" (JSON text as a key) put no word boundary before
    # the key, which survived as the attribute's name. Values were seen through the escape.
    secret = all_kinds()["anthropic_key"].generate(random.Random(0))
    key = json.dumps([None, f"0\n{secret.text}"])
    span = record(span_attributes={key: "x"})
    _redactor()([span])
    assert not LeakScanner({"anthropic_key": secret}).scan_all(_stored(span))


def test_an_azure_signature_redacted_once_stays_as_it_is() -> None:
    # "SharedAccessSignature=<secret:…>" is 20 characters of the value the rule takes.
    span = record(span_attributes={"note": "SharedAccessSignature=sv=2024&sig=" + "Ab1" * 12})
    redactor = _redactor()
    redactor([span])
    once = dict(span.span_attributes)
    assert "<secret:" in once["note"] or "<azure" in once["note"]
    redactor([span])
    assert span.span_attributes == once


def test_a_keyed_netlify_token_ending_in_a_dash_is_found() -> None:
    # "\\b" after a value ending in "-" needs a word character next: before a quote there is
    # none, so 1 in 64 legacy tokens went through.
    rng = random.Random(5)
    value = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(42)) + "-"
    span = record(span_attributes={"note": f'"netlify_pat": "{value}"'})
    _redactor()([span])
    assert value[:-1] not in span.span_attributes["note"]
