"""Redaction: planted secrets never survive, look-alikes do, pseudonyms are keyed and stable."""

from __future__ import annotations

import base64
import copy
import dataclasses
import itertools
import json
import math
import random
import string
import sys
import uuid
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.collector_bench import make_requests
from collector.decode import decode_protobuf, to_records
from collector.model import SpanRecord, escape_surrogates
from collector.processors import prefilter
from collector.processors import redact as redact_module
from collector.processors.redact import FAILED_SENTINEL, Redactor
from collector.processors.rules import (
    VERIFIED,
    Detector,
    RedactionConfig,
    _card_brand_ok,
    _card_in,
    _iban,
    _iban_in,
    is_sensitive_key,
    luhn_valid,
)
from tests.records import span_record
from tests.secret_corpus import (
    CORE_KINDS,
    CUT_TRAILERS,
    WIDE_SEPARATORS,
    card_digits,
    gen_anthropic_key,
    gen_aws_access_key,
    gen_bearer_token,
    gen_email,
    gen_github_token,
    gen_jwt,
    gen_openai_key,
    gen_pem_bare,
    gen_phone_e164,
    gen_phone_nanp,
    gen_url_credentials,
    gen_us_ssn,
)
from tests.source_modules import source_module

KEY = b"unit-test-redaction-key"

# Every secret is generated at run time (nothing secret-shaped is written in the repository)
# from a fixed seed, so that parametrized test ids and values are the same in every process.
_rng = random.Random(20261130)
_ALNUM = string.ascii_letters + string.digits


def _chars(alphabet: str, count: int) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(count))


def _digits(count: int) -> str:
    return _rng.choice("123456789") + _chars(string.digits, count - 1)


OPENAI = gen_openai_key(_rng)
BEARER = gen_bearer_token(_rng)
PEM = gen_pem_bare(_rng)
URL_CREDENTIALS = gen_url_credentials(_rng)
CARD = CORE_KINDS["card_spaced"].generate(_rng).text
CARD_DIGITS = CARD.replace(" ", "")
EMAIL = gen_email(_rng).text

SECRETS: dict[str, str] = {
    "openai_key": OPENAI.text,
    "anthropic_key": gen_anthropic_key(_rng).text,
    "aws_access_key": gen_aws_access_key(_rng).text,
    "github_token": gen_github_token(_rng).text,
    "slack_token": f"xoxb-{_digits(12)}-{_digits(13)}-{_chars(_ALNUM, 24)}",
    "stripe_key": "sk_live_" + _chars(_ALNUM, 24),
    "google_api_key": "AIza" + _chars(_ALNUM + "_-", 34) + _rng.choice(_ALNUM),
    "jwt": gen_jwt(_rng).text,
    "bearer_token": f"Bearer {BEARER.parts[0]}",
    "pem_private_key": PEM.text,
    "url_credentials": URL_CREDENTIALS.text,
    "email": EMAIL,
    "phone": gen_phone_e164(_rng).text,
    "phone_nanp": gen_phone_nanp(_rng).text,
    "credit_card": CARD,
    "iban": CORE_KINDS["iban_spaced"].generate(_rng).text,
    "us_ssn": gen_us_ssn(_rng).text,
}
# The part of each secret that must never be stored (the scheme or "Bearer " may stay).
SECRET_CORES = {
    **SECRETS,
    "bearer_token": BEARER.parts[0],
    "url_credentials": URL_CREDENTIALS.parts[-1],  # user:password
    "pem_private_key": PEM.parts[0],  # the first line of the body
}
# For the bypass cases below: the key inside a longer text, a private key without its end.
OPENAI_BODY = OPENAI.parts[0]
_PEM_HEAD = gen_pem_bare(_rng)
PEM_WITHOUT_END = "\n".join(_PEM_HEAD.text.split("\n")[:2])
PEM_WITHOUT_END_BODY = _PEM_HEAD.parts[0]
SPACED_SSN = gen_us_ssn(_rng).text.replace("-", " ")

LOOK_ALIKES = [
    "550e8400-e29b-41d4-a716-446655440000",  # UUID
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",  # sha256
    "0af7651916cd43dd8448eb211c80319c",  # trace id
    "order A-1001 and ORD-2026-000123",
    "2026-11-30T09:36:47.123456+00:00",
    "1764000000000000000",
    "4111 1111 1111 1112",  # fails Luhn
    "amount 12.OO or 12.00 EUR",
    "version 1.45.2, build 20261130",
    "000-12-3456",  # not a valid SSN area
    "sk-short",
    "call_refund_1 span_0123456789abcdef01234567",
    "room 101-202-3030",  # phone-shaped, but no NANP area code starts with 1
]


def span(**fields: Any) -> SpanRecord:
    return span_record(**{"resource_attributes": {}, **fields})


def everything(record: SpanRecord) -> str:
    return json.dumps(
        [
            record.span_name,
            record.status_message,
            record.input,
            record.output,
            record.span_attributes,
            record.body_attributes,
            record.resource_attributes,
            record.event_names,
            record.event_attributes,
            record.link_attributes,
        ],
        ensure_ascii=False,
    )


@pytest.fixture
def redactor() -> Redactor:
    return Redactor(KEY)


@pytest.mark.parametrize(("rule", "secret"), sorted(SECRETS.items()), ids=sorted(SECRETS))
def test_each_detector_replaces_its_secret_with_a_typed_pseudonym(
    redactor: Redactor, rule: str, secret: str
) -> None:
    record = span(span_attributes={"note": f"before {secret} after"})
    redactor([record])
    note = record.span_attributes["note"]
    assert SECRET_CORES[rule] not in note
    # A secret found by its context (after "Bearer") is labelled by what it is, a secret.
    label = "secret" if rule in ("bearer_token", "url_credentials") else rule.removesuffix("_nanp")
    assert f"<{label}:" in note
    assert note.startswith("before ")
    assert note.endswith(" after")
    # A token whose format's check holds says so (its checksum verified).
    suffix = VERIFIED if rule == "github_token" else ""
    assert record.redactions == [f"attr.note:{rule.removesuffix('_nanp')}{suffix}"]


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_look_alikes_stay_untouched(redactor: Redactor, text: str) -> None:
    record = span(span_attributes={"note": text}, input=json.dumps({"value": text}))
    redactor([record])
    assert record.span_attributes["note"] == text
    assert json.loads(record.input) == {"value": text}
    assert record.redactions == []


def test_every_field_of_a_span_is_covered(redactor: Redactor) -> None:
    email = SECRETS["email"]
    record = span(
        span_name=f"lookup {email}",
        status_message=f"failed for {email}",
        input=f"hi, I am {email}",
        output=json.dumps({"reply": f"mailed {email}"}),
        span_attributes={"user": email, "tags": json.dumps([email, "x"])},
        body_attributes={"gen_ai.system_instructions": f"escalate to {email}"},
        resource_attributes={"owner": email},
        event_names=[f"sent to {email}"],
        event_timestamps=[1],
        event_attributes=[{"exception.message": f"bounce {email}"}],
        link_trace_ids=["a" * 32],
        link_span_ids=["b" * 16],
        link_trace_states=[""],
        link_attributes=[{"reason": f"retry {email}"}],
    )
    redactor([record])
    assert email not in everything(record)
    where = {entry.rsplit(":", 1)[0] for entry in record.redactions}
    assert where == {
        "name",
        "status",
        "input",
        "output$.reply",
        "attr.user",
        "attr.tags$[0]",
        "body.gen_ai.system_instructions",
        "resource.owner",
        "event[0].name",
        "event[0].attr.exception.message",
        "link[0].attr.reason",
    }
    assert all(entry.endswith(":email") for entry in record.redactions)


def test_json_bodies_are_walked_and_stay_valid(redactor: Redactor) -> None:
    messages = [
        {"role": "system", "content": "be nice"},
        {"role": "user", "content": "order A-1001"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": f"card {SECRETS['credit_card']}, mail {SECRETS['email']}"},
    ]
    arguments = {
        "card": {"number": CARD_DIGITS, "exp": "12/29"},
        "password": "hunter2",
        "pin": 4321,
    }
    record = span(
        span_attributes={"gen_ai.input.messages": json.dumps(messages)},
        input=json.dumps(arguments),
    )
    redactor([record])
    walked = json.loads(record.span_attributes["gen_ai.input.messages"])
    assert walked[1]["content"] == "order A-1001"
    assert CARD not in walked[3]["content"]
    assert CARD_DIGITS not in walked[3]["content"].replace(" ", "")
    assert EMAIL.split("@")[0] not in walked[3]["content"]
    args = json.loads(record.input)
    assert args["card"]["number"].startswith("<credit_card:")
    assert args["card"]["exp"] == "12/29"
    assert args["password"].startswith("<secret:")
    assert args["pin"].startswith("<secret:"), "a sensitive key's value goes whatever its type"
    assert set(record.redactions) == {
        "attr.gen_ai.input.messages$[3].content:credit_card",
        "attr.gen_ai.input.messages$[3].content:email",
        "input$.card.number:credit_card",
        "input$.password:sensitive_key",
        "input$.pin:sensitive_key",
    }


def test_sensitive_attribute_keys_are_replaced_whatever_the_value(redactor: Redactor) -> None:
    record = span(
        span_attributes={
            "http.request.header.authorization": "Basic dXNlcjpwYXNz",
            "db.password": "x",
            "session_id": "abc",
            "gen_ai.usage.input_tokens": "740",
            "gen_ai.request.max_tokens": "1024",
        }
    )
    redactor([record])
    attrs = record.span_attributes
    assert attrs["http.request.header.authorization"].startswith("<secret:")
    assert attrs["db.password"].startswith("<secret:")
    assert attrs["session_id"].startswith("<secret:")
    assert attrs["gen_ai.usage.input_tokens"] == "740", "token counts are not tokens"
    assert attrs["gen_ai.request.max_tokens"] == "1024"


def test_escaped_json_cannot_smuggle_a_secret(redactor: Redactor) -> None:
    local, domain = EMAIL.split("@")
    record = span(input=f'{{"note": "write to {local}\\u0040{domain}"}}')
    redactor([record])
    assert local not in json.loads(record.input)["note"]


def test_pseudonyms_are_stable_per_key_and_differ_across_keys() -> None:
    first, again = (
        span(span_attributes={"a": SECRETS["email"]}),
        span(input=f"x {SECRETS['email']}"),
    )
    Redactor(KEY)([first])
    Redactor(KEY)([again])  # a new instance: as after a restart with the same key
    pseudonym = first.span_attributes["a"]
    assert pseudonym in again.input
    other = span(span_attributes={"a": SECRETS["email"]})
    Redactor(b"another key")([other])
    assert other.span_attributes["a"] != pseudonym
    assert other.span_attributes["a"].startswith("<email:")


def test_unprocessable_content_fails_closed(redactor: Redactor) -> None:
    deep: Any = EMAIL
    for _ in range(200):
        deep = [deep]
    record = span(input=json.dumps(deep), span_attributes={"ok": "fine"})
    redactor([record])
    assert record.input == FAILED_SENTINEL
    assert record.redactions == ["input:redaction_failed"]
    assert redactor.stats.failed_closed == 1
    assert record.span_attributes == {"ok": "fine"}


def test_configuration_disables_allows_and_extends() -> None:
    config = RedactionConfig(
        disabled_rules=frozenset({"phone"}),
        allow_values=frozenset({"support@shop.example"}),
        allow_keys=frozenset({"customer.contact"}),
        extra_key_names=("loyalty_number",),
        extra_detectors=(Detector("employee_id", r"EMP-[0-9]{6}"),),
    )
    record = span(
        span_attributes={
            "a": f"call {SECRETS['phone']} or support@shop.example, not {EMAIL}",
            "customer.contact": EMAIL,
            "loyalty_number": "LN-42",
            "b": "by EMP-123456",
        }
    )
    Redactor(KEY, config)([record])
    attrs = record.span_attributes
    assert SECRETS["phone"] in attrs["a"]
    assert "support@shop.example" in attrs["a"]
    assert EMAIL not in attrs["a"]
    assert attrs["customer.contact"] == EMAIL
    assert attrs["loyalty_number"].startswith("<secret:")
    assert attrs["b"] == "by <employee_id:" + attrs["b"].split(":", 1)[1]


def test_luhn() -> None:
    assert luhn_valid(CARD_DIGITS)
    assert all(luhn_valid(card_digits(_rng)) for _ in range(20))
    assert not any(luhn_valid(card_digits(_rng, valid=False)) for _ in range(20))


# --- property: random JSON with embedded secrets never leaks and never crashes ------------

_text = st.text(alphabet=string.ascii_letters + string.digits + ' .,:-_/@é😀"\\\n', max_size=30)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**6), max_value=10**6) | _text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=12,
)


def _plant(document: Any, secret: str, choice: int) -> Any:
    """Puts the secret into the document: inside a string, as a value, or as a new key's value."""
    if isinstance(document, dict):
        key = sorted(document)[choice % len(document)] if document else "k"
        return {**document, key: f"see {secret} here"}
    if isinstance(document, list):
        return [*document, {"nested": [f"{secret}"]}]
    if isinstance(document, str):
        return f"{document} {secret} {document}"
    return {"value": document, "text": f"{secret}"}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    document=_json,
    rule=st.sampled_from(sorted(SECRETS)),
    choice=st.integers(0, 10),
    as_body=st.booleans(),
)
def test_random_json_with_secrets_never_leaks(
    document: Any, rule: str, choice: int, as_body: bool
) -> None:
    planted = json.dumps(_plant(document, SECRETS[rule], choice), ensure_ascii=choice % 2 == 0)
    record = span(input=planted) if as_body else span(span_attributes={"payload": planted})
    Redactor(KEY)([record])
    stored = record.input if as_body else record.span_attributes["payload"]
    assert SECRET_CORES[rule] not in stored
    assert SECRET_CORES[rule] not in json.dumps(json.loads(stored), ensure_ascii=False)
    assert record.redactions


@pytest.mark.parametrize(
    ("text", "leak"),
    [
        (
            json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [
                            {
                                "type": "tool_call",
                                "name": "login",
                                "arguments": json.dumps({"user": "bob", "password": "hunter2xyz"}),
                            }
                        ],
                    }
                ]
            ),
            "hunter2xyz",
        ),
        (' {"password":"hunter2xyz"}', "hunter2xyz"),
        ("{'password': 'hunter2xyz', 'user': 'bob'}", "hunter2xyz"),
        ('{"password":"hunter2xyz","note":"ab', "hunter2xyz"),
        ('{"password":"hunter2xyz","password":""}', "hunter2xyz"),
        ('{"pin": 1234, "password": 987654}', "987654"),
        ("login failed: password=hunter2xyz for bob", "hunter2xyz"),
        ('{"url":"postgres:\\/\\/admin:hunter2xyz@10.0.0.5:5432\\/x"}', "hunter2xyz"),
        (
            '{"t":"Authorization: Bearer\\nabcdefghijklmnopqrstuvwxyz"}',
            "abcdefghijklmnopqrstuvwxyz",
        ),
        (f"pay with {CARD} 123", CARD),
        (f'{{"cc": {CARD_DIGITS}.0}}', CARD_DIGITS),
        ('{"db": {"password.value": "hunter2xyz"}}', "hunter2xyz"),
    ],
    ids=[
        "arguments-inside-messages",
        "leading-space",
        "python-repr",
        "truncated-json",
        "duplicate-keys",
        "numeric-secret",
        "key-value-text",
        "escaped-slashes",
        "escaped-newline",
        "card-then-digits",
        "card-as-float",
        "dotted-key",
    ],
)
def test_known_bypasses_stay_closed(redactor: Redactor, text: str, leak: str) -> None:
    record = span(span_attributes={"payload": text}, input=text)
    redactor([record])
    assert leak not in record.span_attributes["payload"]
    assert leak not in record.input
    assert record.redactions
    if text.lstrip().startswith(("{", "[")) and not text.endswith("ab"):
        try:
            json.loads(text)
        except ValueError:
            return
        json.loads(record.input)  # valid JSON in, valid JSON out


def test_link_trace_state_and_dotted_attribute_keys(redactor: Redactor) -> None:
    record = span(
        span_attributes={"db.password.value": "x1", "gen_ai.usage.input_tokens": "5"},
        link_trace_ids=["a" * 32],
        link_span_ids=["b" * 16],
        link_trace_states=[f"vendor={EMAIL}"],
        link_attributes=[{}],
    )
    redactor([record])
    assert record.span_attributes["db.password.value"].startswith("<secret:")
    assert record.span_attributes["gen_ai.usage.input_tokens"] == "5"
    assert EMAIL not in record.link_trace_states[0]


def test_name_value_pairs_and_header_lists(redactor: Redactor) -> None:
    headers = json.dumps(
        {
            "headers": [
                {"name": "Authorization", "value": "abcdef123456"},
                ["x-api-key", "zyx987654"],
                {"name": "accept", "value": "json"},
            ]
        }
    )
    record = span(input=headers)
    redactor([record])
    stored = json.loads(record.input)
    assert "abcdef123456" not in record.input
    assert "zyx987654" not in record.input
    assert stored["headers"][2] == {"name": "accept", "value": "json"}


_CUT_KEY = gen_pem_bare(random.Random("a key cut short"))
_CUT_BEGIN = _CUT_KEY.text.index("\n") + 1


@pytest.mark.parametrize("trailer", CUT_TRAILERS, ids=repr)
@pytest.mark.parametrize(
    "cut",
    [_CUT_BEGIN + 64, _CUT_BEGIN + 200, len(_CUT_KEY.text) - 20, len(_CUT_KEY.text) - 3],
    ids=["first-line", "mid-body", "before-end-line", "in-end-line"],
)
@pytest.mark.parametrize("carrier", ["text", "json", "repr"])
def test_a_key_cut_short_is_replaced_whatever_follows_the_cut(
    redactor: Redactor, trailer: str, cut: int, carrier: str
) -> None:
    """A tool's output cut off inside a private key: without its END line, the body is
    replaced up to the cut, whatever text follows it."""
    output = _CUT_KEY.text[:cut] + trailer
    payload = {
        "text": output,
        "json": json.dumps({"stdout": output, "exit_code": 0}),
        "repr": repr({"stdout": output}),
    }[carrier]
    record = span(span_attributes={"tool.output": payload})
    redactor([record])
    stored = record.span_attributes["tool.output"]
    body = _CUT_KEY.text[_CUT_BEGIN:cut].replace("\n", "")
    flat = stored.replace("\\n", "").replace("\n", "")
    assert not any(body[i : i + 12] in flat for i in range(0, len(body) - 11)), stored
    assert any(f.endswith(":pem_private_key") for f in record.redactions), record.redactions


@pytest.mark.parametrize(
    ("text", "leak"),
    [
        (
            f'[{{"role":"user","content":"My card:\\n{CARD_DIGITS}, key:\\n{OPENAI.text}"}}]',
            CARD_DIGITS,
        ),
        (f'[{{"role":"user","content":"key:\\n{OPENAI.text}"}}]', OPENAI_BODY),
        ("DB_PASSWORD=hunter2xyz\nHOME=/root", "hunter2xyz"),
        ("export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENG", "wJalrXUtnFEMIK7MDENG"),
        ("dbPassword: hunter2xyz", "hunter2xyz"),
        ("curl -H 'Authorization: Basic YWRtaW46aHVudGVyMg==' https://x", "YWRtaW46aHVudGVyMg=="),
        ("Cookie: sessionid=hunter2xyz; theme=dark", "hunter2xyz"),
        ("redis://:hunter2xyz@cache:6379/0", "hunter2xyz"),
        ("https://app/login?user=bob&pwd=hunter2xyz&x=1", "hunter2xyz"),
        ("JSESSIONID=abcdef123456XYZ", "abcdef123456XYZ"),
        (PEM_WITHOUT_END, PEM_WITHOUT_END_BODY),
        ("BEARER abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz"),
        ("call (415)555-0132 or +33 6 12 34 56 78", "12 34 56 78"),
        (f"card {CARD.replace(' ', '.')}", CARD.replace(" ", ".")),
        (f"SSN {SPACED_SSN}", SPACED_SSN),
        ("curl -u bob:hunter2xyz https://api.example", "hunter2xyz"),
    ],
    ids=[
        "escaped-newline-card",
        "escaped-newline-key",
        "env-prefixed-key",
        "aws-secret-env",
        "camel-case-key",
        "basic-auth-header",
        "cookie-header",
        "empty-user-url",
        "query-string-pwd",
        "jsessionid",
        "pem-without-end",
        "bearer-upper",
        "phones",
        "dotted-card",
        "spaced-ssn",
        "curl-user",
    ],
)
def test_second_review_bypasses_stay_closed(redactor: Redactor, text: str, leak: str) -> None:
    record = span(span_attributes={"payload": text})
    redactor([record])
    assert leak not in record.span_attributes["payload"]


@pytest.mark.parametrize(
    "text",
    [
        "dd.trace_id=5736898051598250357",
        '{"trace_id": 5736898051598250357, "order": 573689805159825035}',
        "logo@2x.png and image@3x.webp",
        "max_tokens: 512, token: 512, tokens=740",
        '{"usage": {"input_tokens": 740, "output_tokens": 147}}',
    ],
)
def test_second_review_false_positives_are_gone(redactor: Redactor, text: str) -> None:
    record = span(span_attributes={"payload": text})
    redactor([record])
    assert record.span_attributes["payload"] == text
    assert record.redactions == []


def test_attribute_keys_with_odd_spelling_are_sensitive(redactor: Redactor) -> None:
    keys = [
        "passWord",
        "userPassWord",
        "Pass word",
        "accesstoken",
        "JSESSIONID",
        "PHPSESSID",
        "connect.sid",
        "csrftoken",
    ]
    record = span(span_attributes={key: "hunter2xyz" for key in keys})
    redactor([record])
    assert all(value.startswith("<secret:") for value in record.span_attributes.values()), (
        record.span_attributes
    )


@pytest.mark.parametrize("scheme", ["SSWS", "FlyV1", "SharedAccessSignature", "Bearer", "Basic"])
def test_an_authorization_header_loses_its_credential_whatever_the_scheme(
    redactor: Redactor, scheme: str
) -> None:
    credential = "".join(random.Random(scheme).choices(string.ascii_letters + string.digits, k=40))
    record = span(span_attributes={"curl": f"curl -H 'Authorization: {scheme} {credential}' x"})
    redactor([record])
    assert credential[:12] not in record.span_attributes["curl"]
    assert f"Authorization: {scheme} <secret:" in record.span_attributes["curl"]


def test_a_text_left_alone_inside_layers_of_encoding_is_still_scanned_in_plain_view() -> None:
    """Short JSON strings that hold nothing are remembered and not scanned again; one left
    alone because the decoders stop (percent-encoding inside base64 inside base64) must not
    be remembered as clean, or the same text in plain JSON would be stored as it came."""
    redactor = Redactor(KEY)
    inner = json.dumps({"q": "mail to user%40example.com"})
    deep = base64.b64encode(base64.b64encode(inner.encode())).decode()
    for _ in range(2):  # and the verdict is the same the second time
        layered, plain = span_record(), span_record()
        layered.span_attributes["blob"] = json.dumps({"data": deep})
        plain.span_attributes["doc"] = inner
        redactor([layered, plain])
        assert plain.redactions == ["attr.doc$.q:email"]
        assert "user%40example.com" not in plain.span_attributes["doc"]


# --- short values seen clean are not scanned again -------------------------------------
def _trace_span(trace_id: str, note: str = "refund the order") -> SpanRecord:
    record = span_record()
    record.span_attributes["afr.sdk.trace_id"] = trace_id
    record.span_attributes["afr.note"] = note
    return record


def _texts_passed_to(redactor: Any, method: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts the redactor's real ``method`` is called with from now on, in order."""
    texts: list[str] = []
    real = getattr(redactor, method)

    def counting(text: str, *args: Any, **kwargs: Any) -> str:
        texts.append(text)
        return str(real(text, *args, **kwargs))

    monkeypatch.setattr(redactor, method, counting)
    return texts


def test_a_value_seen_clean_is_not_scanned_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """An SDK trace id (``trace_`` and 32 hex digits: a run the base64 selection looks at)
    rides on every span of a trace: it is looked at once, and stored as it came."""
    redactor = source_module("collector.processors.redact").Redactor(KEY)
    trace_id = "trace_" + "5a67036f9b540d6b" * 2
    scanned = _texts_passed_to(redactor, "_redact_value", monkeypatch)
    spans = [_trace_span(trace_id) for _ in range(9)]
    redactor(spans)
    assert [s.span_attributes["afr.sdk.trace_id"] for s in spans] == [trace_id] * 9
    assert scanned.count(trace_id) == 1


@pytest.mark.parametrize(
    "secret",
    [
        "alice.smith@example.com",
        "+1 415 555 0134",
        "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4",
        "AKIA" + "Q3ZL7XW2RTB4NVPM",
    ],
)
def test_a_value_that_held_a_secret_is_redacted_every_time(secret: str) -> None:
    """Only clean values are remembered: the same secret in every span of a trace is
    replaced in each, and a clean value under a sensitive key is replaced whatever it is."""
    redactor = Redactor(KEY)
    spans = [_trace_span("trace_" + "ab" * 16, note=f"reach {secret} today") for _ in range(3)]
    redactor(spans)
    notes = {s.span_attributes["afr.note"] for s in spans}
    assert len(notes) == 1 and secret not in notes.pop()
    clean = "trace_" + "cd" * 16
    redactor([_trace_span(clean)])
    keyed = span_record()
    keyed.span_attributes["session_token"] = clean
    redactor([keyed])
    assert keyed.span_attributes["session_token"] != clean
    assert any(entry.startswith("attr.session_token:") for entry in keyed.redactions)


# --- sensitive JSON keys: the scan selects every one the key rules name ------------------
_KEY_WORDS = (
    "pass", "word", "wd", "phrase", "secret", "api", "key", "private", "access",
    "authorization", "cookie", "credential", "card", "number", "cvv", "cvc", "ssn", "token",
    "tokens", "auth", "session", "id", "sessid", "pwd", "pin", "otp", "sid", "user", "input",
    "count", "max", "db", "value", "header", "shipping", "spin", "loyalty", "x",
)  # fmt: skip
_KEY_JOINTS = ("", "", "_", "-", ".", " ", "__", "\n", "\t", "<email:0123456789ab>")
_PLAIN_VALUE = "hunter2xyz"  # what no value detector finds: only a key's rule replaces it


def _generated_keys(count: int, seed: int) -> list[str]:
    """Keys as people and instrumentations spell them: words from the key rules, neighbours
    and look-alikes, joined by separators (an escaped one in JSON), in any case, sometimes
    around a pseudonym (a key that held a secret, sent back by a replay)."""
    rng = random.Random(seed)
    cases = (str.lower, str.upper, str.capitalize)
    keys = {
        "Pass word", "pass_word", "userPassWord", "x-api-key", "apiKey", "API_KEY", "clientSecret",
        "card-number", "sessionId", "SESSION_ID", "PHPSESSID", "csrftoken", "connect.sid",
        "x_pin", "xAuth", "auth_header", "input_tokens", "max_output_tokens", "tokens",
        "token.value", "shipping", "spin", "loyaltyNumber", "Loyalty-Number", "api\nkey",
    }  # fmt: skip
    while len(keys) < count:
        words = [rng.choice(cases)(rng.choice(_KEY_WORDS)) for _ in range(rng.randint(1, 4))]
        key = words[0]
        for word in words[1:]:
            key += rng.choice(_KEY_JOINTS) + word
        keys.add(key)
    return sorted(keys)


def _key_placements(key: str) -> dict[str, str]:
    """The key with a plain value, in each form a JSON document gives a key a value."""
    return {
        "object": json.dumps({"note": "refund", key: _PLAIN_VALUE}),
        "in a string": json.dumps({"arguments": json.dumps({key: _PLAIN_VALUE, "n": 1})}),
        "name/value": json.dumps([{"name": key, "value": _PLAIN_VALUE}]),
        "pair": json.dumps({"headers": [[key, _PLAIN_VALUE]]}),
    }


def _key_redactors() -> list[tuple[str, Redactor]]:
    config = RedactionConfig(extra_key_names=("loyalty_number",))
    redactors = [("re2 only", Redactor(KEY, config, use_prefilter=False))]
    if prefilter.AVAILABLE:
        for engine, name in ((1, "hyperscan"), (0, "re2 selection")):
            redactor = Redactor(KEY, config, use_prefilter=True)
            redactor.forced_engine = engine
            redactors.append((name, redactor))
    return redactors


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_sensitive_json_key_is_selected_and_replaced_in_every_placement(seed: int) -> None:
    """A JSON key the key rules call sensitive has its value replaced whatever the value is,
    so the scan that picks which JSON to decode must pick every document holding one: in an
    object, in JSON inside a string, as a name/value pair, as a [name, value] pair, with
    each selection engine. A key that is not sensitive leaves its document as it came.
    (Before, keys split inside a word of the rules, such as "pass_word", were sensitive as
    attributes and passed through JSON whole.)"""
    keys = _generated_keys(160, seed)
    for engine, redactor in _key_redactors():
        records = []
        for key in keys:
            record = span_record()  # one document per segment: each is selected on its own
            record.span_attributes.update(
                (f"doc.{where}", text) for where, text in _key_placements(key).items()
            )
            records.append(record)
        originals = [dict(r.span_attributes) for r in records]
        redactor(records)
        for key, record, original in zip(keys, records, originals, strict=True):
            sensitive = is_sensitive_key(
                key.replace("<email:0123456789ab>", ""), ("loyalty_number",)
            )
            for name, stored in record.span_attributes.items():
                if not name.startswith("doc."):
                    continue
                if sensitive:
                    assert _PLAIN_VALUE not in stored, (engine, key, name, stored)
                else:
                    assert stored == original[name], (engine, key, name, stored)


# --- a text seen before: the same outcome, without the work -----------------------------
def _agent_records(dialect: str, seed: int) -> list[SpanRecord]:
    (raw,) = make_requests(1, seed=seed, secret_every_bytes=2048, dialect=dialect)
    return to_records(decode_protobuf(raw), "p", 1, None).records


@pytest.mark.parametrize("dialect", ["afr", "openinference"])
def test_a_text_seen_before_is_stored_labelled_and_counted_as_the_first_time(
    dialect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agents resend their conversation: every model call's input holds each message before
    it (OpenInference records it twice, as JSON and flattened). A text redacted before is
    not redacted again; what is stored, each span's Redactions (its own labels and JSON
    paths) and the counts are what redacting it again gives."""
    records = _agent_records(dialect, seed=4)
    recalled = copy.deepcopy(records)
    source = source_module("collector.processors.redact")
    redactor = source.Redactor(KEY)
    redactor(recalled)
    monkeypatch.setattr(source, "_RECALL_MIN_CHARS", 10**9)  # nothing is recalled
    fresh = source.Redactor(KEY)
    fresh(records)
    assert [dataclasses.asdict(r) for r in recalled] == [dataclasses.asdict(r) for r in records]
    assert redactor.stats == fresh.stats
    assert redactor.stats.redactions > 100  # the corpus holds secrets


def test_a_message_resent_in_each_model_call_is_redacted_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The customer's message (an e-mail in it) in three model calls, each time as JSON and
    flattened: scanned once; replaced in all six places, each labelled where it is."""
    message = f"please refund order A-1001, write to {EMAIL} " + "thanks " * 40
    spans = []
    for call in range(3):
        history = [{"role": "user", "content": message}] + [
            {"role": "assistant", "content": f"step {n} done"} for n in range(call)
        ]
        spans.append(
            span_record(
                span_attributes={
                    "input.value": json.dumps(history),
                    "llm.input_messages.0.message.content": message,
                }
            )
        )
    redactor = source_module("collector.processors.redact").Redactor(KEY)
    scanned = _texts_passed_to(redactor, "_redact_text", monkeypatch)
    redactor(spans)
    assert scanned.count(message) == 1
    for record in spans:
        assert EMAIL not in str(record.span_attributes)
        assert sorted(record.redactions) == [
            "attr.input.value$[0].content:email",
            "attr.llm.input_messages.0.message.content:email",
        ]
    assert redactor.stats.by_rule == {"email": 6}


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(st.characters(codec=None, blacklist_categories=()), max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)


@given(_JSON_VALUES)
@settings(max_examples=300, deadline=None)
def test_a_redacted_document_is_written_as_the_json_module_writes_it(document: Any) -> None:
    """Redacted JSON is written by orjson when it can (~10x faster): the same text as the
    json module's compact form, lone surrogates escaped, integers beyond 64 bits kept, and
    floats as the json module writes them (the walk says when one is not ``_written_alike``)."""

    def floats(node: Any) -> list[float]:
        if isinstance(node, float):
            return [node]
        children = node.values() if isinstance(node, dict) else node
        return [f for c in children for f in floats(c)] if isinstance(node, dict | list) else []

    unlike = not all(redact_module._written_alike(f) for f in floats(document))
    expected = escape_surrogates(redact_module._COMPACT_JSON.encode(document))
    assert redact_module._json_text(document, floats=unlike) == expected


# Floats of every magnitude (each power of ten, mantissas at both ends of the decade), the
# edges of orjson's own notation (1e-9, 1e-4), and those no JSON can hold.
_FLOATS = [
    sign * float(f"{mantissa}e{exponent}")
    for exponent in range(-323, 309)
    for mantissa in ("1", "1.5", "9.999999999999998")
    for sign in (1, -1)
    if float(f"{mantissa}e{exponent}") != math.inf
] + [0.0, -0.0, 5e-324, sys.float_info.max, 1e-9, 1e-4, math.nextafter(1e-4, 0),
     math.nextafter(1e-9, 0), 1733490000.123456, 0.93, math.nan, math.inf, -math.inf]  # fmt: skip


def test_a_float_is_written_by_orjson_only_where_it_writes_what_the_json_module_writes() -> None:
    """orjson writes 1e-7 and 0.00001 where the json module writes 1e-07 and 1e-05 (and null
    for NaN): a document holding such a float is written by the json module; one holding
    only floats orjson writes alike (a timestamp, a score) by orjson, ~10x faster."""
    alike = [value for value in _FLOATS if redact_module._written_alike(value)]
    for value in alike:
        assert orjson.dumps(value).decode() == json.dumps(value), value
    assert {1733490000.123456, 0.93, 1e-4, 5e-324, 1e300, -0.0} <= set(alike)
    assert not {1e-9, 1e-7, 1e-5, math.nextafter(1e-4, 0)} & set(alike)
    assert not any(redact_module._written_alike(v) for v in (math.nan, math.inf, -math.inf))


@pytest.mark.parametrize("value", _FLOATS[::7] + _FLOATS[-13:], ids=repr)
def test_a_redacted_document_keeps_its_numbers_as_written_before(
    redactor: Redactor, value: float
) -> None:
    """A document's numbers read as they did after a secret in it was replaced, whichever
    writer wrote it again."""
    document = {"password": "hunter2", "v": value, "x": 0.5, "n": 3, "at": 1733490000.25}
    record = span(input=json.dumps(document))
    redactor([record])
    assert record.input.endswith(
        json.dumps({"v": value, "x": 0.5, "n": 3, "at": 1733490000.25}, separators=(",", ":"))[1:]
    )
    assert "hunter2" not in record.input


@pytest.mark.parametrize(
    "written",
    [
        "4111111111111111.0",
        "4.111111111111111e15",
        "4111111111111111",
        "-4111111111111111",
        "-4111111111111111.0",
    ],
)
@pytest.mark.parametrize("beside", ["1733490000000.0", "1.7e+16", "-1733490000000.0", "0.25"])
def test_a_card_sent_as_a_json_number_is_redacted_and_other_numbers_keep_their_form(
    redactor: Redactor, written: str, beside: str
) -> None:
    """A card number a tool sent as a float (or with a sign) is read as its digits and
    replaced; a number beside it that is no secret (a timestamp in ms as a float, a large
    float, a negative one) is written again as the document had it, not as an integer."""
    record = span(input=f'{{"card": {written}, "at": {beside}, "note": "x"}}')
    redactor([record])
    assert "4111111111111111" not in record.input and "4.111111111111111" not in record.input
    assert record.input.startswith('{"card":"<credit_card:')
    assert record.input.endswith(f',"at":{json.dumps(json.loads(beside))},"note":"x"}}')


# Numbers as people write them with an ASCII hyphen; each is written below with every
# separator beyond ASCII in its place.
_HYPHENATED = {
    "phone": ["415-555-0199", "+1-415-555-0199", "(415) 555-0199", "1-800-555-0199"],
    "credit_card": ["4111-1111-1111-1111", "3782-822463-10005", "5555-5555-5555-4444"],
    "us_ssn": ["123-45-6789"],
    "iban": ["DE89-3704-0044-0532-0130-00", "gb82-west-1234-5698-7654-32"],
}


def _hyphenated_placements(number: str) -> SpanRecord:
    """``number`` as a value, in a chat message, in a tool call's arguments (JSON in JSON) and
    in text beyond ASCII."""
    text = f"Reach me at {number} today"
    return span(
        span_attributes={
            "note": text,
            "gen_ai.input.messages": json.dumps([{"role": "user", "content": text}]),
            "wide": f"\u201cN\u00fcmmer\u201d: {number}\u2026",
        },
        input=json.dumps({"arguments": json.dumps({"query": text})}),
    )


@pytest.mark.parametrize(
    "separator",
    [*WIDE_SEPARATORS, "\u00a0"],
    ids=[f"U+{ord(d):04X}" for d in [*WIDE_SEPARATORS, "\u00a0"]],
)
@pytest.mark.parametrize("engine", [None, 0, 1])
def test_a_number_split_by_a_separator_beyond_ascii_is_redacted_as_with_a_hyphen(
    separator: str, engine: int | None
) -> None:
    """A phone, card, SSN or IBAN whose groups are split by a separator beyond ASCII (a web
    page's no-break hyphen or no-break space, a word processor's en dash, a minus sign, a
    typesetter's thin space) is found as with an ASCII hyphen, in every placement and by each engine, and gets
    the same pseudonym: searching the store for one finds both."""
    redactor = Redactor(KEY)
    redactor.forced_engine = engine
    for rule, numbers in _HYPHENATED.items():
        for number in numbers:
            ascii_record = _hyphenated_placements(number)
            wide_number = number.replace("-", separator)
            wide_record = _hyphenated_placements(wide_number)
            redactor([ascii_record, wide_record])
            assert everything(wide_record).replace(separator, "-") == everything(ascii_record)
            assert f"<{rule}:" in everything(wide_record), (rule, wide_number)
            assert wide_number not in everything(wide_record)
            assert wide_record.redactions == ascii_record.redactions


def test_separators_beyond_ascii_in_what_is_no_number_leave_it_alone(redactor: Redactor) -> None:
    texts = [
        f"pages 1990{d}2005, season 2024{d}2025, 10{d}12 people, order 1234{d}5678{d}9012, "
        f"id 123{d}4567{d}8901, at 12:00{d}13:30, ZIP 94105{d}1234, ticket 555{d}0199, "
        f"range 4111{d}4112, ref 2024{d}0001{d}0042, room 101{d}202{d}3030"
        for d in WIDE_SEPARATORS
    ]
    # A UUID written with a dash beyond ASCII: its decimal-looking groups ("0069-4082-9311")
    # are no phone, as with "-".
    texts += [
        f"run d5bc303d{d}0069{d}4082{d}9311{d}bc180a15b729 ok"
        for d in WIDE_SEPARATORS
        if d not in "\u2007\u2009\u202f"
    ]
    records = [span(span_attributes={"note": text}) for text in texts]
    redactor(records)
    assert [r.span_attributes["note"] for r in records] == texts
    assert all(not r.redactions for r in records)


def test_a_redacted_document_keeps_a_tiny_float_as_the_json_module_writes_it(
    redactor: Redactor,
) -> None:
    record = span(input=json.dumps({"password": "hunter2", "tiny": 1e-7, "x": 0.5, "n": 3}))
    redactor([record])
    assert record.input.endswith('"tiny":1e-07,"x":0.5,"n":3}')
    assert "hunter2" not in record.input


def test_what_the_redactor_recalls_is_bounded() -> None:
    """Bounded memory under any traffic: the texts kept for recall (and what they became)
    stay under the limit, and one large text is not kept at all (nor kept alive)."""
    redactor = Redactor(KEY)
    large = f"mail {EMAIL} " + "words " * 20_000
    texts = [f"note {n}: write to {EMAIL} " + "refund " * 500 for n in range(400)]
    redactor([span_record(span_attributes={"note": text}) for text in [large, *texts]])
    held = sum(len(text) + len(value) for text, (value, _, _) in redactor._recalled.items())
    assert held <= redact_module._RECALL_MAX_CHARS
    assert large not in redactor._recalled
    assert texts[-1] in redactor._recalled  # the newest are the ones kept


def _scanned_segments(redactor: Any, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The texts each of the redactor's span scans (``_touched``) is given, scan by scan."""
    scans: list[list[str]] = []
    real = redactor._touched

    def spying(view: str, texts: list[str], engine: int) -> Any:
        scans.append(list(texts))
        return real(view, texts, engine)

    monkeypatch.setattr(redactor, "_touched", spying)
    return scans


def test_a_segment_seen_before_is_not_scanned_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent's spans repeat their messages, each as an attribute of its own: a text that
    came out as it went in (a JSON document too), or whose outcome is recalled, is left out
    of the next span's scan. A JSON document that held a secret is scanned again (its
    outcome is not recalled); every span is stored as a redactor seeing it first stores it."""
    clean = "please refund order A-1001, it arrived broken " * 3
    document = json.dumps({"model": "gpt-4.1-mini", "tool_choice": "auto", "parallel": True})
    secret = f"write to {EMAIL} about the refund of order A-1001, thanks " * 2
    secret_document = json.dumps([{"role": "user", "content": secret}])
    attributes = {"a": clean, "b": document, "c": secret, "d": secret_document}
    spans = [span_record(span_id=f"{n:016x}", span_attributes=dict(attributes)) for n in range(3)]
    reference = [copy.deepcopy(span) for span in spans]
    source = source_module("collector.processors.redact")
    redactor = source.Redactor(KEY)
    scans = _scanned_segments(redactor, monkeypatch)
    redactor(spans)
    assert clean in scans[0] and secret in scans[0] and document in scans[0]
    for later in scans[1:]:
        assert clean not in later and document not in later and secret not in later
        assert secret_document in later
    for record in reference:
        source.Redactor(KEY)([record])
    assert [dataclasses.asdict(r) for r in spans] == [dataclasses.asdict(r) for r in reference]
    assert EMAIL not in str([s.span_attributes for s in spans])


@pytest.mark.parametrize("recalled_at", [0, 1, 2])
def test_a_recalled_segment_keeps_its_place_among_the_span_s_redactions(recalled_at: int) -> None:
    """A segment whose outcome is recalled is not scanned, but its Redactions entries come in
    its turn among those of the segments scanned with it: the span's list is what redacting
    every segment again gives, in the same order."""
    known = f"first message, mail {EMAIL} " + "and more words " * 6
    fresh = [f"call +1 415 555 01{n:02d} about order {n} " + "more words " * 6 for n in range(3)]
    texts = [*fresh[:recalled_at], known, *fresh[recalled_at:]]
    later = span_record(span_attributes={f"m{n}": text for n, text in enumerate(texts)})
    reference = copy.deepcopy(later)
    redactor = Redactor(KEY)
    redactor([span_record(span_attributes={"seen": known})])
    redactor([later])
    Redactor(KEY)([reference])
    assert later.redactions == reference.redactions
    assert [entry.split(":")[0] for entry in later.redactions] == [f"attr.m{n}" for n in range(4)]
    assert later.span_attributes == reference.span_attributes


@pytest.mark.parametrize("dialect", ["afr", "openinference"])
def test_requests_after_requests_are_stored_as_each_alone(
    dialect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One redactor over several requests of agent traces (messages and documents repeated
    within and across traces) stores, labels and counts what redactors without any memory
    of texts do, request by request."""
    requests = make_requests(3, seed=9, secret_every_bytes=2048, dialect=dialect)
    batches = [to_records(decode_protobuf(raw), "p", 1, None).records for raw in requests]
    reference = copy.deepcopy(batches)
    source = source_module("collector.processors.redact")
    redactor = source.Redactor(KEY)
    for batch in batches:
        redactor(batch)
    assert redactor._unchanged, "texts came again and were left out of scans"
    monkeypatch.setattr(source, "_RECALL_MIN_CHARS", 10**9)  # no memory of texts at all
    counts = []
    for batch in reference:
        alone = source.Redactor(KEY)
        alone(batch)
        counts.append(alone.stats.redactions)
    flat = [dataclasses.asdict(r) for batch in batches for r in batch]
    assert flat == [dataclasses.asdict(r) for batch in reference for r in batch]
    assert redactor.stats.redactions == sum(counts) > 100


def test_the_texts_left_out_of_scans_are_bounded() -> None:
    redactor = Redactor(KEY)
    large = "words " * (redact_module._UNCHANGED_MAX_CHARS // 16)
    texts = [f"note {n}: " + "refund " * 2000 for n in range(400)]
    for text in [large, *texts]:
        redactor([span_record(span_attributes={"note": text})])
    held = sum(len(text) for text in redactor._unchanged)
    assert held <= redact_module._UNCHANGED_MAX_CHARS
    assert large not in redactor._unchanged
    assert texts[-1] in redactor._unchanged  # the newest are the ones kept


# --- ids that begin like an IBAN --------------------------------------------------------
_IBAN_LENGTHS = {"ad": 24, "ae": 23, "ba": 20, "be": 16, "de": 22}  # the hex-letter countries


def _ids_with_an_iban_prefix(country: str, count: int) -> list[tuple[str, str]]:
    """(id, its IBAN prefix): 32-digit hex ids (trace and run ids) whose first characters
    are a valid IBAN of ``country`` (one in ~97 of those starting with its code and two
    digits)."""
    rng = random.Random(country)
    length = _IBAN_LENGTHS[country]
    found: list[tuple[str, str]] = []
    while len(found) < count:
        candidate = country + "".join(rng.choice("0123456789abcdef") for _ in range(30))
        prefix = candidate[:length]
        if prefix[2:4].isdigit() and _iban_in(prefix) == prefix:
            found.append((candidate, prefix))
    return found


@pytest.mark.parametrize("country", sorted(_IBAN_LENGTHS))
def test_a_hex_id_that_begins_like_an_iban_is_stored_whole(country: str) -> None:
    """A replay's link to its source run (a trace id) once came out as
    ``<iban:…>c5db5f7789cf``: its first 20 characters passed as a Bosnian IBAN. An IBAN is
    not found inside an unbroken run of letters and digits, in any placement; the same
    IBAN on its own, or followed by a blank or a dash, still is."""
    redactor = Redactor(KEY)
    for trace_id, iban in _ids_with_an_iban_prefix(country, 3):
        record = span(
            status_message=f"replay of {trace_id}",
            span_attributes={
                "afr.replay.source_run_id": trace_id,
                "input.value": json.dumps({"run": trace_id, "note": f"see {trace_id}."}),
            },
        )
        redactor([record])
        assert record.span_attributes["afr.replay.source_run_id"] == trace_id
        assert json.loads(record.span_attributes["input.value"]) == {
            "run": trace_id,
            "note": f"see {trace_id}.",
        }
        assert (record.status_message, record.redactions) == (f"replay of {trace_id}", [])
        for text in (iban, f"pay to {iban} today", f"{iban}-", f"iban: {iban.upper()}"):
            alone = span(span_attributes={"note": text})
            redactor([alone])
            assert iban not in alone.span_attributes["note"].lower(), text
            assert alone.redactions == ["attr.note:iban"], text


# --- ids and numbers that hold a phone, a card or an IBAN -----------------------------------
def _decimal_ids_with_a_card_prefix(count: int) -> list[str]:
    """17-19 digit decimal ids (a Datadog trace id, a snowflake id) that are no card
    themselves and whose first 13 or 16 digits are one (about one in 17 of those)."""
    rng = random.Random("card-prefix")
    found: list[str] = []
    while len(found) < count:
        number = str(rng.randrange(10**16, 10**19))
        if _card_in(number) is not None and _card_in(number) != number:
            raise AssertionError(f"a card taken out of {number}")  # never, as the fix says
        digits = number[: rng.choice((13, 16))]
        if not _is_card_number(number) and _is_card_number(digits):
            found.append(number)
    return found


def _is_card_number(digits: str) -> bool:
    return 13 <= len(digits) <= 19 and luhn_valid(digits) and _card_brand_ok(digits)


def _uuids_holding(kind: str, count: int) -> list[str]:
    """UUIDs one of whose groups of digits reads as a ``kind`` (a number dialled from abroad,
    an IBAN) to a detector that looks no further than the match."""
    rng = random.Random(kind)
    found: list[str] = []
    while len(found) < count:
        value = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        groups = value.split("-")
        if kind == "phone":
            groups[1] = "00" + f"{rng.randrange(100):02d}"
            groups[2] = "4" + f"{rng.randrange(1000):03d}"
            groups[3] = rng.choice("89") + f"{rng.randrange(1000):03d}"
        else:  # an Andorran IBAN's shape: "ad", two digits, then 20 letters and digits
            groups[1] = "ad" + f"{rng.randrange(100):02d}"
            if not _iban("".join(groups[1:]).upper()):
                continue
        found.append("-".join(groups))
    return found


_DIGITS_WORTH_KEEPING = {
    "decimal trace id": lambda: _decimal_ids_with_a_card_prefix(6),
    "AWS account id": lambda: [f"00{n:010d}" for n in (7902047506, 6541565242, 1234567890)],
    "zero-padded invoice number": lambda: ["0012345678", "000987654321", "000000123456"],
    "float": lambda: ["4.111111111111111", "5.105105105105100", "3.782822463100050"],
    "invalid card in groups": lambda: ["4723 7595 5650 2508", "4111-1111-1111-1112"],
    "UUID with a phone in it": lambda: _uuids_holding("phone", 4),
    "UUID with an IBAN in it": lambda: _uuids_holding("iban", 2),
    "UUID in a prefixed id": lambda: [
        f"{prefix}{value}"
        for prefix in ("run-", "lc_run--")
        for value in _uuids_holding("phone", 2)
    ],
}


@pytest.mark.parametrize("kind", sorted(_DIGITS_WORTH_KEEPING))
def test_ids_and_numbers_are_not_cut_into_a_phone_a_card_or_an_iban(kind: str) -> None:
    """A detector of numbers in groups judges the digits it matched: a valid card or IBAN
    at the start of a longer run of digits (6% of 19-digit decimal ids), an AWS account id
    that begins "00" (a number dialled from abroad?), a float's digits, a UUID's groups
    that happen to be decimal. Each is an id or a number, stored whole in every placement;
    the real thing beside it is still redacted."""
    redactor = Redactor(KEY)
    for value in _DIGITS_WORTH_KEEPING[kind]():
        placements = {
            "value": value,
            "after a key": f"dd.trace_id={value}",
            "arn": f"arn:aws:iam::{value}:role/deploy",
            "sentence": f"see {value}, then retry",
        }
        document: dict[str, Any] = {"id": value, "note": f"ref {value}."}
        if value.isdigit():
            document["number"] = int(value)
        record = span(
            status_message=f"failed for {value}",
            span_attributes={**placements, "input.value": json.dumps(document)},
        )
        redactor([record])
        assert record.span_attributes == {**placements, "input.value": json.dumps(document)}, value
        assert (record.status_message, record.redactions) == (f"failed for {value}", []), value
    real = span(
        span_attributes={
            "a": "4111 1111 1111 1111 123",
            "b": "call +44 20 7946 0958",
            "c": "DE89 3704 0044 0532 0130 00",
            "d": "social security 123-45-6789",
        }
    )
    redactor([real])
    assert real.redactions == ["attr.a:credit_card", "attr.b:phone", "attr.c:iban", "attr.d:us_ssn"]


_NUMBERS_BEHIND_A_LONGER_ONE = {
    # At one start the first detector wins: a run of digit groups long enough for a card is
    # matched as one, turned down by its checks, and the number in it was stored whole.
    "a number dialled from abroad": ("0044 20 7946 0958", ["phone"]),
    "two phones side by side": ("415-555-0123 415-555-0199", ["phone", "phone"]),
    "a phone then more digits": ("212 555 0123 4567 8901", ["phone"]),
    "an SSN then a date": ("123-45-6789 2024 01 01", ["us_ssn"]),
    "a phone after a group of digits": ("PIN 1234 415-555-0123", ["phone"]),
    "a card after a quantity": ("qty 2 4111 1111 1111 1111", ["credit_card"]),
    "a card after a date": ("2024-01-15 4111 1111 1111 1111", ["credit_card"]),
    "a card after a country code": ("+1 4111 1111 1111 1111", ["credit_card"]),
}


@pytest.mark.parametrize("case", sorted(_NUMBERS_BEHIND_A_LONGER_ONE))
def test_a_number_inside_a_longer_run_of_digit_groups_is_still_found(case: str) -> None:
    text, rules = _NUMBERS_BEHIND_A_LONGER_ONE[case]
    redactor = Redactor(KEY)
    digits = [c for c in text if c.isdigit()]
    for placement in (text, f"call me: {text}.", json.dumps({"messages": [{"content": text}]})):
        record = span(span_attributes={"note": placement})
        redactor([record])
        stored = record.span_attributes["note"]
        assert [entry.rsplit(":", 1)[1] for entry in record.redactions] == rules, placement
        assert stored.count("<") == len(rules), stored
        assert len([c for c in stored if c.isdigit()]) < len(digits), stored
    # Only at the same start: inside a number turned down, a shorter one is part of it (a
    # float's fraction, the digits of an invalid IBAN or card), even where it would pass the
    # checks on its own.
    for number in (
        "0.4111111111111111",
        "12.5105105105105100",
        "ES81 5570 6360 6071 0431 9554",
        "6011 0069 3752 7921",
        "000-12-3456",
    ):
        record = span(span_attributes={"note": f"score {number}"})
        redactor([record])
        assert (record.span_attributes["note"], record.redactions) == (f"score {number}", [])


_WIDE_ADDRESSES = (
    "jürgen.müller@firma.de",
    "josé@empresa.es",
    "Émile.Zola@exemple.fr",
    "张伟@example.com",
    "user@bücher.de",
    "søren.kierkegaard@universitet.dk",
    "иван@пример.рф",
    "o'brien@example.com",
)


@pytest.mark.parametrize("address", _WIDE_ADDRESSES)
def test_an_address_with_letters_beyond_ascii_is_replaced_whole(address: str) -> None:
    """An address in any script (RFC 6531) is one e-mail, not the ASCII run before its "@"
    (before: "jürgen.mü<email:…>", and josé@…, 张伟@…, user@bücher.de kept whole), in
    every placement, with one pseudonym; the punctuation around it stays."""
    redactor = Redactor(KEY)
    expected = redactor.pseudonym("email", address)
    binary = b"\xff\xfe" + address.encode() + b"\x00\x01"
    record = span(
        span_attributes={
            "value": address,
            "sentence": f"Kontakt\uff1a{address}。Danke",
            "json": json.dumps({"from": address}),
            "json_utf8": json.dumps({"from": address}, ensure_ascii=False),
            "key": json.dumps({address: {"role": "customer"}}),
            "binary": "base64:" + base64.b64encode(binary).decode(),
        }
    )
    redactor([record])
    stored = record.span_attributes
    assert stored["value"] == expected
    assert stored["sentence"] == f"Kontakt\uff1a{expected}。Danke"
    assert json.loads(stored["json"]) == {"from": expected}
    assert json.loads(stored["json_utf8"]) == {"from": expected}
    assert json.loads(stored["key"]) == {expected: {"role": "customer"}}
    assert stored["binary"].startswith("<base64_blob:")
    local = address.split("@")[0]
    assert not [v for v in stored.values() if local in v or local.lower() in v], stored
    assert redactor.pseudonym("email", address.upper()) == expected  # one address, any case


@pytest.mark.parametrize(
    "around", ["\u300c{}\u300d", "\u2014{}\u2014", "\u2192{}\u2190", "{}\u3002", "\u00bf{}?"]
)
def test_an_address_is_not_made_of_what_is_no_letter(around: str) -> None:
    """Beyond ASCII only letters (and marks) are part of an address: full-width and CJK
    punctuation, dashes and arrows around it stay, as do assets named like addresses."""
    redactor = Redactor(KEY)
    address = redactor.pseudonym("email", "a.b@example.com")
    kept = "logo@2x.png \u00fcnd icon@3x.webp"
    record = span(span_attributes={"a": around.format("a.b@example.com"), "d": kept})
    redactor([record])
    assert record.span_attributes == {"a": around.format(address), "d": kept}


# A number, then another after one blank: the first regex match runs on into the second
# (up to 19 digits for a card, six groups for a number dialled from abroad). Before: a card
# accepted as the first part of its match, and a card (or card-like id) turned down with
# the short fifth group of a 4-4-4-4 layout, hid the phone or SSN after them; a number
# dialled from abroad with too many groups hid itself (and, with 00, the card after it).
_LEADING_NUMBERS = {
    "+44 20 7946 0958": ["phone"],
    "0044 20 7946 0958": ["phone"],
    "+49 30 901820": ["phone"],
    "+1 415 555 0123": ["phone"],
    "415-555-0123": ["phone"],
    "(415) 555-0123": ["phone"],
    "123-45-6789": ["us_ssn"],
    "4111 1111 1111 1111": ["credit_card"],
    "5555-5555-5555-4444": ["credit_card"],
    "3782 822463 10005": ["credit_card"],
    "DE89 3704 0044 0532 0130 00": ["iban"],
    "4111 1111 1111 1113": [],  # fails its check digit
    "4111-1111-1111-1113": [],
    "4111111111111113": [],
    "1234 5678 9012 3456": [],  # an id laid out as a card
    "2024 01 15": [],
    "qty 12": [],
}
_FOLLOWING_NUMBERS = {
    "GB82 WEST 1234 5698 7654 32": ["iban"],
    "4111-1111-1111-1111": ["credit_card"],
    "415.555.0199": ["phone"],
    "5555 5555 5555 4444": ["credit_card"],
    "4111111111111111": ["credit_card"],
    "3782 822463 10005": ["credit_card"],
    "415 555 0199": ["phone"],
    "(415) 555-0199": ["phone"],
    "415-555-0199": ["phone"],
    "+1 212 555 0100": ["phone"],
    "+44 20 7946 0959": ["phone"],
    "0044 20 7946 0959": ["phone"],
    "123-45-6789": ["us_ssn"],
}


@pytest.mark.parametrize("leading", sorted(_LEADING_NUMBERS))
def test_a_number_hides_no_number_right_after_it(leading: str) -> None:
    """Every pair of a leading number (a secret, or digits that are none) and a secret
    number after a blank (one, two, a no-break space, a comma) or a separator beyond ASCII
    (a thin space, an en dash: numbers are written with them, so they join two into one
    match as a blank does), in three placements: each secret is replaced, nothing of it
    stays in the clear, and the digits that are no secret stay."""
    redactor = Redactor(KEY)
    for (following, rules), blank in itertools.product(
        sorted(_FOLLOWING_NUMBERS.items()), (" ", "  ", "\u00a0", ", ", *WIDE_SEPARATORS)
    ):
        text = f"{leading}{blank}{following}"
        expected = _LEADING_NUMBERS[leading] + rules
        secrets = [following] + ([leading] if _LEADING_NUMBERS[leading] else [])
        for placement in (text, f"note: {text}.", json.dumps({"m": [{"content": text}]})):
            record = span(span_attributes={"note": placement})
            redactor([record])
            stored = record.span_attributes["note"]
            assert [e.rsplit(":", 1)[1] for e in record.redactions] == expected, placement
            assert not [s for s in secrets if s in stored], stored
            assert stored.count("<") == len(expected), stored
            if not _LEADING_NUMBERS[leading]:
                assert leading in stored, stored


@pytest.mark.parametrize(
    ("number", "rule"),
    [
        ("4111111111111111", "credit_card"),
        ("4111-1111-1111-1111", "credit_card"),
        ("5555555555554444", "credit_card"),
        ("4111111111111112", None),  # no card (its check digit), too long for a phone
    ],
)
@pytest.mark.parametrize("engine", [0, 1])
def test_a_number_after_a_plus_that_stands_for_a_blank_is_found(
    number: str, rule: str | None, engine: int
) -> None:
    """In a query string "+" is a blank: "q=my+card+4111111111111111" is no number dialled
    from abroad turned down, but a card after a blank; digits that are none stay."""
    redactor = Redactor(KEY)
    redactor.forced_engine = engine
    for text in (
        f"q=my+card+{number}",
        f"https://shop.example/search?q=card+{number}&page=2",
        json.dumps(
            {"tool": "search", "url": f"/search?q=pay+with+{number}"}, separators=(",", ":")
        ),
    ):
        record = span(span_attributes={"note": text})
        redactor([record])
        stored = record.span_attributes["note"]
        if rule is None:
            assert stored == text
            continue
        assert number not in stored and "4111" not in stored.replace("+", " "), stored
        assert [entry.rsplit(":", 1)[1] for entry in record.redactions] == [rule]
        assert stored == text.replace(number, redactor.pseudonym(rule, number))


def test_a_number_dialled_from_abroad_with_more_digits_is_replaced_in_its_longest_part() -> None:
    """A number written with "+" whose groups are too many for one phone (an extension,
    digits after it) has its longest valid part replaced, not all of it kept; with "00"
    (grouped zero-padded ids begin so too) it is kept."""
    redactor = Redactor(KEY)
    record = span(
        span_attributes={
            "a": "tel +49 30 901820 12 34 56 78",
            "b": "tel +1 415 555 0123 12345678",
            "c": "id 0049 30 901820 12 34 56 78",
        }
    )
    redactor([record])
    assert (
        record.span_attributes["a"]
        == "tel " + redactor.pseudonym("phone", "+49 30 901820 12 34") + " 56 78"
    )
    assert (
        record.span_attributes["b"]
        == "tel " + redactor.pseudonym("phone", "+1 415 555 0123") + " 12345678"
    )
    assert record.span_attributes["c"] == "id 0049 30 901820 12 34 56 78"
    assert record.redactions == ["attr.a:phone", "attr.b:phone"]


def test_a_number_turned_down_costs_a_look_at_the_number_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The other numbers are looked for in what was turned down by the number detectors
    alone: with the base64 rule among them, each look ran to the end of a run of base64
    characters, and ``1111111111111111+`` repeated (a "phone" turned down every 17 bytes)
    took 6 s for 64 KB. Every look is a match of a few dozen bytes at most."""
    looks: list[int] = []
    source = source_module("collector.processors.redact")
    built = source._matcher

    def counting(*args: Any, **kwargs: Any) -> Any:
        matcher = built(*args, **kwargs)
        anchored = matcher.data.match

        class Data:
            def __getattr__(self, name: str) -> Any:
                return getattr(matcher.data, name)

            def match(self, *call: Any) -> Any:
                found = anchored(*call)
                looks.append(0 if found is None else found.end() - found.start())
                return found

        return dataclasses.replace(matcher, data=Data())

    redactor = source.Redactor(KEY)
    monkeypatch.setattr(source, "_matcher", counting)  # the matchers built from now
    text = "1111111111111111+" * 1000
    record = span(span_attributes={"note": text})
    redactor([record])
    assert len(looks) >= 900  # one look (at least) per number turned down
    assert max(looks) <= 64


def test_the_look_for_a_key_after_a_match_is_bounded() -> None:
    """After each match that could be a key, the rest of its name and its ":" or "=" are
    looked for; unbounded, that look ran to the end of a long run of name characters every
    time ("000-12-3456-" repeated, an SSN turned down every 12 bytes: 11 s for 64 KB). A key
    name runs on for 128 characters at most, and its blanks for 64 (an aligned .env file)."""
    separator = redact_module._KEY_SEPARATOR
    assert separator.match(b"x" * 128 + b" " * 64 + b"=") is not None
    assert separator.match(b'_token\\" : ') is not None
    assert separator.match(b"0" * 10_000 + b"=") is None


_WORD_KEYS = ("cvv", "card_cvv", "cvv2", "CVV", "cardCvv", "CardCVC", "card-cvc", "card cvv",
              "cvvCode", "ssn", "user_ssn", "customerSSN", "ssnLast4", "SSNLast4", "SSN_LAST4")  # fmt: skip
_NOT_WORD_KEYS = ("classname", "className", "lesson", "call_G5YCD4Q09zKRQ7CVvJ0X5Eiq",
                  "NL79 CVVG 5872 1253 67", "fcvvx", "SSNX_RAW", "xcvc9")  # fmt: skip


def _ids_with_a_short_word_inside(count: int) -> list[str]:
    """Generated ids (a tool call's, a vendor's) that hold "cvv", "cvc" or "ssn" among
    other letters and digits, in a mix of cases no word is written in ("CVv", "sSn"), as
    one id in a few hundred does."""
    rng = random.Random("short-words")
    alphabet = string.ascii_letters + string.digits
    found: list[str] = []
    while len(found) < count:
        word = "".join(rng.choice((c, c.upper())) for c in rng.choice(("cvv", "cvc", "ssn")))
        if word in (word.lower(), word.capitalize(), word.upper()):
            continue
        head = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 10)))
        tail = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 10)))
        found.append(f"call_{head}{word}{tail}")
    return found


def test_a_three_letter_key_word_counts_as_a_word_not_as_letters_inside_one() -> None:
    """ "cvv", "cvc" and "ssn" name a secret as a word of a key, in any of the ways keys are
    written; inside another word or a generated id used as a key ("classname", a tool call
    id, an IBAN's letters) they are three letters, and the value under that key was
    replaced ("<secret:…>") before."""
    redactor = Redactor(KEY)
    plain = "refund issued"
    for key in _WORD_KEYS:
        record = span(span_attributes={key: plain}, input=json.dumps({key: plain}))
        redactor([record])
        assert record.span_attributes[key].startswith("<secret:"), key
        assert json.loads(record.input)[key].startswith("<secret:"), key
    for key in (*_NOT_WORD_KEYS, *_ids_with_a_short_word_inside(40)):
        record = span(span_attributes={key: plain}, input=json.dumps({key: plain}))
        redactor([record])
        assert (record.span_attributes, record.redactions) == ({key: plain}, []), key
        assert json.loads(record.input) == {key: plain}, key
