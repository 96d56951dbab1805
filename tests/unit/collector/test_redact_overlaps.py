"""What one match may hide from the others, and key names the text rules share with the
attribute rules.

At one start the first alternative of the redactor's one alternation wins, and a match
covers a span: a match turned down by its checks, or a key's unquoted value trimmed where
the line goes on, must not leave a secret inside that span in the clear. Every secret is
generated at run time from a fixed seed (nothing secret-shaped is in the repository).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import string
import sys
from collections.abc import Callable
from typing import Any

import pytest

from collector.processors.redact import Redactor
from collector.processors.rules import is_sensitive_key
from tests.records import span_record
from tests.secret_corpus import (
    CORE_KINDS,
    gen_aws_access_key,
    gen_email,
    gen_github_token,
    gen_openai_key,
)
from tests.secretgen import PROVIDER_GENERATORS
from tests.source_modules import source_module

KEY = b"unit-test-overlaps-key"
_rng = random.Random(20261206)
_ALNUM = string.ascii_letters + string.digits


def _mixed(count: int) -> str:
    """Random letters of both cases and digits (a generated secret's look)."""
    while True:
        value = "".join(_rng.choice(_ALNUM) for _ in range(count))
        if not (value.isalpha() or value.isdigit() or value.islower() or value.isupper()):
            return value


def _redacted(redactor: Redactor, text: str) -> tuple[str, list[str]]:
    record = span_record(span_attributes={"note": text})
    redactor([record])
    return record.span_attributes["note"], [e.rsplit(":", 1)[1] for e in record.redactions]


def _placements(text: str) -> list[str]:
    """The text alone, inside a sentence, and as a tool message's content in JSON."""
    return [text, f"the tool said: {text} (done)", json.dumps({"role": "tool", "content": text})]


def _assert_left_alone(text: str) -> None:
    """Nothing of ``text`` is replaced, in each placement."""
    redactor = Redactor(KEY)
    for placement in _placements(text):
        stored, rules = _redacted(redactor, placement)
        assert text in stored or json.dumps(text)[1:-1] in stored, (placement, stored)
        assert rules == [], (placement, rules)


# --- a match turned down hides nothing ----------------------------------------------------
# Provider keywords whose detectors take "<keyword>...KEY=<value>" and check the value's shape.
# Each value here fails that check (the wrong alphabet, length or case), yet it follows a
# key named like a secret, whose rule replaces any value.
_KEYED_TURNED_DOWN: dict[str, Callable[[], str]] = {
    "CLOUDFLARE_API_KEY": lambda: _mixed(37),  # a global key is lower-case hex
    "DATADOG_API_KEY": lambda: "0" * 31 + "a",  # hex, but no random one
    "MISTRAL_API_KEY": lambda: "a" * 32,
    "COHERE_API_KEY": lambda: "b" * 40,
    "TWILIO_SECRET": lambda: "c" * 32,
    "ALIBABA_SECRET": lambda: "d" * 30,
    "VERCEL_API_KEY": lambda: "e" * 24,
    "NETLIFY_SECRET": lambda: "f" * 43,
    "HEROKU_API_KEY": lambda: "00000000-0000-0000-0000-000000000000",
    "OKTA_API_KEY": lambda: "00" + "g" * 40,
}


@pytest.mark.parametrize("key", sorted(_KEYED_TURNED_DOWN))
@pytest.mark.parametrize("engine", [0, 1])
def test_a_provider_match_turned_down_hides_no_key_value_secret(key: str, engine: int) -> None:
    """ "CLOUDFLARE_API_KEY=<not a Cloudflare key's shape>": the provider's keyword match is
    turned down by its check, and the value is still replaced, as after any key named like
    a secret (before, the turned-down match took the span and the value was stored)."""
    redactor = Redactor(KEY)
    redactor.forced_engine = engine
    value = _KEYED_TURNED_DOWN[key]()
    for separator, placement in itertools.product(("=", ": ", " = "), range(3)):
        text = _placements(f"{key}{separator}{value}")[placement]
        stored, rules = _redacted(redactor, text)
        assert value not in stored, (text, stored)
        assert rules == ["key_value_secret"], (text, rules)


# --- a trimmed value hides nothing after it ------------------------------------------------
_LEADING = {  # a key and its unquoted value, then what goes on in the same line
    "password: hunter2, ": "key_value_secret",
    "db_password=hunter2;": "key_value_secret",
    "secret=s3cr3t& ": "key_value_secret",
    "API_KEY=k3y-v4lue; ": "key_value_secret",
    "access_token=abcdefgh12345 ": "key_value_token",
}


def _following() -> dict[str, tuple[str, str]]:
    """text -> (the part never stored, its rule); generated."""
    card = CORE_KINDS["card_spaced"].generate(_rng).text
    github = gen_github_token(_rng).text
    aws = gen_aws_access_key(_rng).text
    openai = gen_openai_key(_rng).text
    email = gen_email(_rng).text
    token = _mixed(24)
    shared = _mixed(43) + "="
    return {
        f"token={token}": (token, "key_value_token"),
        f"api_key={token[::-1]}": (token[::-1], "key_value_secret"),
        f"owner {email}": (email, "email"),
        f"card {card}": (card, "credit_card"),
        f"gh {github}": (github, "github_token"),
        f"aws {aws}": (aws, "aws_access_key"),
        f"llm {openai}": (openai, "openai_key"),
        f"SharedAccessKey={shared}": (shared, "azure_connection_string"),
    }


_FOLLOWING = _following()


@pytest.mark.parametrize("leading", sorted(_LEADING))
@pytest.mark.parametrize("engine", [0, 1])
def test_a_trimmed_value_hides_no_secret_after_it_on_the_line(leading: str, engine: int) -> None:
    """ "password: hunter2, token=<secret>": the key's unquoted value runs to the end of the
    line in its match and is trimmed where it ends; every secret after it was stored in the
    clear (8 kinds x 5 leading keys x 3 placements, all of them before)."""
    redactor = Redactor(KEY)
    redactor.forced_engine = engine
    for following, (secret, rule) in sorted(_FOLLOWING.items()):
        for text in _placements(leading + following):
            stored, rules = _redacted(redactor, text)
            assert secret not in stored, (text, stored)
            # Found on its own, or inside the value when the value is taken to run on (a
            # password of several words: "hunter2, aws AKIA...").
            found = [r.removesuffix("+verified") for r in rules]
            assert found in ([_LEADING[leading], rule], [_LEADING[leading]]), (text, rules)
            assert "hunter2" not in stored and "abcdefgh12345" not in stored, stored


# --- key names: the text rules and the attribute rules agree --------------------------------
_KEY_ENDING_NAMES = [
    "ACCESS_KEY", "access_key", "accessKey", "APP_KEY", "TWITTER_CONSUMER_KEY",
    "RAILS_MASTER_KEY", "signing_key", "ENCRYPTION_KEY", "clientKey", "LICENSE_KEY",
    "FCM_SERVER_KEY", "SEGMENT_WRITE_KEY", "AZURE_SUBSCRIPTION_KEY", "ALGOLIA_ADMIN_KEY",
    "DEEPL_AUTH_KEY", "passcode", "PASSCODE",
]  # fmt: skip
# As attribute or JSON keys, replaced whatever the value (the others name public ids too).
_ATTRIBUTE_KEY_NAMES = {
    "ACCESS_KEY", "access_key", "accessKey", "RAILS_MASTER_KEY", "signing_key",
    "ENCRYPTION_KEY", "LICENSE_KEY", "AZURE_SUBSCRIPTION_KEY", "passcode", "PASSCODE",
}  # fmt: skip
_NOT_SECRET_NAMES = [
    "SharedAccessKeyName", "access_key_id", "cache_key", "primary_key", "partition_key",
    "client_key_name", "keyboard",
]  # fmt: skip


@pytest.mark.parametrize("name", _KEY_ENDING_NAMES)
def test_a_generated_value_after_a_key_ending_in_key_is_replaced(name: str) -> None:
    """ACCESS_KEY=, clientKey:, FCM_SERVER_KEY=, <add key="AppKey" value=...>: in text (an
    env dump, YAML, a repr, XML) the value was stored; an attribute or a JSON key of the
    unambiguous names was replaced already (whatever its value), of the others now too
    when the value looks generated."""
    assert is_sensitive_key(name) == (name in _ATTRIBUTE_KEY_NAMES)
    redactor = Redactor(KEY)
    value = _mixed(20)
    forms = [
        f"{name}={value}",
        f"{name}: {value}\n",
        f"{{'{name}': '{value}'}}",
        f'{{"{name}": "{value}", "cut',
        f'<add key="{name}" value="{value}" />',
    ]
    for form in forms:
        for text in _placements(form):
            stored, rules = _redacted(redactor, text)
            assert value not in stored, (text, stored)
            assert len(rules) == 1, (text, rules)
    record = span_record(span_attributes={name: value})
    redactor([record])
    assert value not in record.span_attributes[name]  # (a generated value: any of them)


@pytest.mark.parametrize(
    "text",
    [
        "client-key: /Users/me/.minikube/profiles/minikube/client.key",
        "CLIENT_KEY=/etc/ssl/private/client-key.pem", "signing_key = ~/.ssh/id_ed25519",
        "APP_KEY=C:\\keys\\app.key", "license_key: MIT", "encryption_key: aes256",
        '"app_key": "com.mycompany.myapp"', "consumer_key=your-consumer-key-here",
        "ACCESS_KEY=https://vault.example.com/v1/secret/data/app", "client_key: null",
        "client_key = base64.b64decode(data)", "accessKey: awsAccessKeyValue",
        "serviceKey: serviceAccountKeyJson2024,", "let server_key = ServerKey::from_pem(&pem2)?;",
        "const clientKey = fs.readFileSync(path.join(__dirname, 'client.key'));",
    ],
)  # fmt: skip
def test_a_path_a_name_or_a_word_after_a_key_ending_in_key_stays(text: str) -> None:
    """Those names also name files (kubeconfig's client-key), ids and settings."""
    _assert_left_alone(text)


@pytest.mark.parametrize("name", _NOT_SECRET_NAMES)
def test_a_key_that_only_holds_a_secret_word_keeps_its_value(name: str) -> None:
    """A key's name, an id, a cache key: their values stay (in text; as attributes)."""
    assert not is_sensitive_key(name) or name in ("SharedAccessKeyName", "access_key_id")
    redactor = Redactor(KEY)
    value = "RootManagePolicy"
    for text in [*_placements(f"{name}={value}"), f'<add key="{name}" value="{value}" />']:
        stored, rules = _redacted(redactor, text)
        assert value in stored and rules == [], (text, stored)


@pytest.mark.parametrize(
    "form",
    [
        '<add key="{k}" xdt:Transform="Replace" value="{v}" />',  # an attribute between
        '<add key="{k}" xdt:Transform="SetAttributes" xdt:Locator="Match(key)" value="{v}"/>',
        '<add  key = "{k}"\n     value = "{v}"/>',
    ],
)
def test_a_secret_in_other_xml_name_value_layouts_is_replaced(form: str) -> None:
    redactor = Redactor(KEY)
    secret = _mixed(18)
    for key in ("ClearTextPassword", "ApiKey", "auth_token"):
        for text in _placements(form.format(k=key, v=secret)):
            stored, rules = _redacted(redactor, text)
            assert secret not in stored, (text, stored)
            assert rules == ["xml_attribute_secret"], (text, rules)


@pytest.mark.parametrize(
    "text",
    [
        '<input type="number" name="max_tokens" value="1024">',
        '<param name="token_count" value="4096"/>', '<entry key="tokenizer" value="cl100k"/>',
        '<add key="token_type" value="bearer"/>', '<setting name="PasswordMinLength" value="12"/>',
        '<add key="TokenEndpoint" value="https://login.example.com/oauth2/token"/>',
        '<add key="ApiKeyHeaderName" value="X-Api-Key"/>',
        # (the value first, or the element's text: a form's button, an app's labels)
        '<input type="submit" value="Reset" name="reset_password">',
        '<string name="prompt_password">Password</string>',
        '<Button name="refresh_token">Refresh</Button>',
    ],
)  # fmt: skip
def test_xml_pairs_whose_name_only_holds_a_secret_word_stay(text: str) -> None:
    _assert_left_alone(text)


@pytest.mark.parametrize("quote", ['"', "'", '\\"'])
def test_a_secret_in_an_xml_name_value_attribute_pair_is_replaced(quote: str) -> None:
    """NuGet's <add key="ClearTextPassword" value="..."/>, .NET appSettings, <param
    name="token" value="...">: the value belongs to the name, as {"name": ..., "value":
    ...} does in JSON; the element's other pairs stay."""
    redactor = Redactor(KEY)
    secret = _mixed(16)
    for element, name in (("add", "key"), ("param", "name"), ("entry", "key")):
        for key in ("ClearTextPassword", "ApiKey", "auth_token", "client_secret"):
            text = (
                f"<{element} {name}={quote}Username{quote} value={quote}builder{quote} />"
                f"<{element} {name}={quote}{key}{quote} value={quote}{secret}{quote} />"
            )
            stored, rules = _redacted(redactor, text)
            assert secret not in stored and "builder" in stored, (text, stored)
            assert rules == ["xml_attribute_secret"], (text, rules)


def test_a_token_key_takes_an_id_and_a_secret_joined_by_a_colon() -> None:
    """ "token: <bot id>:<secret>" (a Telegram token of any shape, a client id and secret):
    the value ran to the colon, was digits alone, turned down, and the secret after it
    stayed."""
    redactor = Redactor(KEY)
    secret = "A" + _mixed(34)
    for key in ("token", "bot_token", "TELEGRAM_TOKEN", "auth_token"):
        for text in _placements(f"{key}: 8439201:{secret}"):
            stored, _ = _redacted(redactor, text)
            assert secret not in stored and "8439201" not in stored, (text, stored)


@pytest.mark.parametrize("name", sorted(PROVIDER_GENERATORS))
def test_every_provider_credential_after_a_trimmed_value_is_replaced(name: str) -> None:
    """Each provider's generated credential after "password: x, note: " on one line (the
    value trimmed where the next pair begins)."""
    from tests.secretgen import secret_part

    redactor = Redactor(KEY)
    credential = PROVIDER_GENERATORS[name](random.Random(name))
    secret = secret_part(name, credential)
    text = f"password: hunter2, note: {credential} there"
    stored, rules = _redacted(redactor, text)
    assert secret not in stored, (text, stored)
    assert rules[0] == "key_value_secret" and len(rules) >= 2, rules


_CODE_KEYS = ["card_pin", "user_pin", "pin_code", "OTP", "otp_code", "cvv", "CVV2", "cvc",
              "passcode", "verification code", "security_code", "one-time code"]  # fmt: skip


@pytest.mark.parametrize("key", _CODE_KEYS)
def test_a_code_after_its_key_in_text_is_replaced(key: str) -> None:
    """ "pin=4921", "Your OTP: 482913.", "cvv: 123": as attribute keys these were replaced;
    in a tool's text the digits were stored."""
    redactor = Redactor(KEY)
    code = str(_rng.randrange(100, 99_999_999))
    for form in (f"{key}={code}", f"Your {key}: {code}.", f'{{"{key}": "{code}", "cut'):
        for text in _placements(form):
            stored, rules = _redacted(redactor, text)
            assert code not in stored, (text, stored)
            # (passcode is also a password's key name)
            assert rules in (["key_value_code"], ["key_value_secret"]), (text, rules)


@pytest.mark.parametrize("key", ["session", "SESSION", "auth", "x_auth", "proxy-auth"])
def test_a_session_or_auth_value_in_text_is_replaced(key: str) -> None:
    """ "session=<id>" in a log line, "x_auth: <token>": as attribute keys these were
    replaced; in text the value was stored."""
    redactor = Redactor(KEY)
    value = _mixed(26)
    for form in (f"{key}={value}", f"{key}: {value}\n", f"Set {key}={value}; Path=/"):
        for text in _placements(form):
            stored, _ = _redacted(redactor, text)
            assert value not in stored, (text, stored)


@pytest.mark.parametrize(
    "text",
    [
        "auth: required", "session: morning", "oauth=enabled", "pin: enabled", "spin=1234",
        "session_count=12345678", "pin: 12", "cvv: not stored", "opinion: 1234",
        "session = boto3.Session()", "auth = base64.b64encode(creds)",
        "session: sess_2024_abc", "auth=HTTPBasicAuth2(user)", "pin: 5000", "- pin: 1022",
        "session=2024-05-01T12:00:00Z", "session: 4.2.0-rc1-20240501",
        "tmux_session=main-2024-dev-window1",
    ],
)  # fmt: skip
def test_words_after_session_auth_and_code_keys_stay(text: str) -> None:
    _assert_left_alone(text)


class _Recording:
    """An RE2 pattern that records the bounds of each search."""

    def __init__(self, pattern: Any) -> None:
        self.pattern = pattern
        self.bounds: list[tuple[int, int]] = []

    def search(self, text: bytes, pos: int, endpos: int = sys.maxsize) -> Any:
        self.bounds.append((pos, min(endpos, len(text))))
        return self.pattern.search(text, pos, endpos)

    def match(self, text: bytes, pos: int) -> Any:
        return self.pattern.match(text, pos)


def test_looking_again_at_a_turned_down_span_searches_only_that_span() -> None:
    """Text dense with turned-down matches ("sid=123456789 " x 10,000: digits, no token) must
    not cost its length for each of them: every search of a span stops a little past its
    end. A match found there keeps its whole length, and one after the span is not taken."""
    redactor = Redactor(KEY)
    email = gen_email(_rng).text
    # The searches are recorded in the module run from source (a compiled matcher takes
    # only its own kind of pattern).
    source = source_module("collector.processors.redact")
    others = source._matcher(
        [d for d in redactor._detectors if d.name in ("email", "key_value_secret")],
        redactor._options,
    )
    recording = _Recording(others.data)
    spy = dataclasses.replace(others, data=recording)
    view = f"note: password: hunter2 and more words\nthen {email}".encode()
    start, end = view.index(b"password"), view.index(b"hunter2") + 3  # the span cuts the value
    found = list(source._within(spy, view, start, end))
    assert [m.group().rstrip() for m, _ in found] == [b"password: hunter2 and more words"]
    limit = end + source._LOOK_PAST  # (a match starting inside may need more text)
    assert recording.bounds and all(endpos <= limit for _, endpos in recording.bounds)
    assert list(source._within(others, view, end, view.index(b"then"))) == []
    # Dense text: each turned-down match costs its span, not the rest of the text.
    text = "owner " + email + " " + "sid=123456789 " * 10_000
    stored, rules = _redacted(redactor, text)
    assert email not in stored and rules == ["email"]


_GENERATED_KEY_NAMES = ["client_key", "serverKey", "FCM_SERVER_KEY", "consumer_key", "app_key"]


@pytest.mark.parametrize("name", _GENERATED_KEY_NAMES)
def test_a_generated_value_under_such_a_key_is_replaced_in_attributes_and_json(
    name: str,
) -> None:
    """As in text (key_value_key): an attribute, a JSON key, a {"name", "value"} pair named
    client_key / serverKey / ... hold a generated value replaced; before, text replaced it
    and the same pair as an attribute or in parsed JSON was stored."""
    redactor = Redactor(KEY)
    value = _mixed(22)
    record = span_record(span_attributes={name: value, "doc": json.dumps({"cfg": {name: value}})})
    redactor([record])
    assert value not in json.dumps(record.span_attributes), record.span_attributes
    pair = json.dumps({"settings": [{"name": name, "value": value}], "n": 1})
    stored, _ = _redacted(redactor, pair)
    assert value not in stored, stored


@pytest.mark.parametrize("name", _GENERATED_KEY_NAMES)
@pytest.mark.parametrize(
    "value", ["/etc/ssl/private/client.key", "com.mycompany.myapp", "aes256", "awsAccessKeyValue"]
)
def test_a_path_or_a_name_under_such_a_key_stays_in_attributes_and_json(
    name: str, value: str
) -> None:
    redactor = Redactor(KEY)
    record = span_record(span_attributes={name: value, "doc": json.dumps({"cfg": {name: value}})})
    redactor([record])
    assert record.span_attributes[name] == value and record.redactions == []
    assert json.loads(record.span_attributes["doc"]) == {"cfg": {name: value}}
