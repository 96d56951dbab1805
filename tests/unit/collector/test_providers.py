"""Provider detectors: every generated credential is found wherever it sits in text, every
near miss stays, and the redactor (with these detectors added) never stores one. A token
whose prefix alone marks it is found by its shape: mistyped (its checksum failing), cut
short or one character long, it is replaced all the same, and its format's check only
tells a valid one apart."""

from __future__ import annotations

import base64
import json
import random
import re
import uuid
from collections.abc import Callable

import pytest
import re2
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.model import SpanRecord
from collector.processors import prefilter, providers
from collector.processors.providers import (
    PROVIDER_DETECTORS,
    REPLACED_RULES,
    base36_crc32,
    base62_crc32,
    bech32_valid,
    looks_random,
)
from collector.processors.redact import Redactor
from collector.processors.rules import DETECTORS, VERIFIED, Detector, RedactionConfig
from tests.records import span_record
from tests.secret_corpus import LeakScanner, Secret
from tests.secretgen import (
    ALNUM,
    B64URL,
    DAMAGES,
    DIGITS,
    GENERIC_SHAPES,
    HEX,
    LETTERS,
    LOWER,
    PROVIDER_GENERATORS,
    PROVIDER_LOOK_ALIKES,
    SHAPES,
    UPPER_ALNUM,
    Shape,
    chars,
    damaged,
    secret_part,
    typos,
)

# The alternation as the redactor builds it, with the rules this module replaces dropped
# from rules.DETECTORS and the provider detectors first: at one start position the first
# alternative wins, and a generic rule that matches there and then rejects (the IBAN check
# on "GR1348941...", on a Twilio "AC12..." or a hex Mailchimp key) would hide the token.
BASE_DETECTORS = tuple(d for d in DETECTORS if d.name not in REPLACED_RULES)
ALL: tuple[Detector, ...] = (*PROVIDER_DETECTORS, *BASE_DETECTORS)
_OPTIONS = re2.Options()
_OPTIONS.max_mem = 256 << 20  # as redact.py: the DFA outgrows RE2's 8 MiB default
TEXT_PATTERN = re2.compile("|".join(f"(?P<{d.name}>{d.pattern})" for d in ALL), _OPTIONS)
PATTERN = re2.compile(TEXT_PATTERN.pattern.encode(), _OPTIONS)  # on UTF-8, as redact.py
ACCEPT = {d.name: d.accept for d in ALL}
VERIFY = {d.name: d.verify for d in ALL if d.verify is not None}
CONTEXT_RULES = {d.name for d in ALL if f"(?P<{d.name}__value" in d.pattern}
GROUPS: dict[str, int] = TEXT_PATTERN.groupindex
RULE_OF_GROUP = {i: n for n, i in GROUPS.items() if "__value" not in n}
VALUE_GROUPS = {
    d.name: sorted(i for n, i in GROUPS.items() if n.startswith(f"{d.name}__value")) for d in ALL
}
NAMES = sorted(d.name for d in PROVIDER_DETECTORS)
SEEDS = range(4)


def findings(text: str) -> list[tuple[str, str]]:
    """(rule, replaced text) for each match the redactor would replace, as it decides."""
    data = text.encode()
    found = []
    for match in PATTERN.finditer(data):
        rule = RULE_OF_GROUP[match.lastindex]
        start, end = match.span()
        for group in VALUE_GROUPS[rule]:
            if match.span(group)[0] >= 0:
                start, end = match.span(group)
                break
        value = data[start:end].decode()
        accept = ACCEPT[rule]
        accepted = value if accept is None else accept(value)
        if accepted is not None:
            assert value.startswith(accepted) or value.endswith(accepted), (rule, value, accepted)
            found.append((rule, accepted))
    return found


def contexts(secret: str) -> list[str]:
    """Places a credential turns up in an agent's text."""
    return [
        secret,
        f"Here is the credential {secret} for the deploy job.",
        f"value={secret}",
        json.dumps({"message": secret}),
        json.dumps({"tool_output": f"export CONFIG={secret}\n"}),
        f"'{secret}'",
        f'"{secret}"',
        f"({secret}), [{secret}]",
        f"see: {secret}.",
        f"{secret},next",
        f"line one\n{secret}\nline three",
        f"\t{secret};",
        f"`{secret}`",
    ]


def _generated(name: str, seed: int) -> str:
    return PROVIDER_GENERATORS[name](random.Random(f"{name}:{seed}"))


def _assert_found(name: str, credential: str) -> None:
    part = secret_part(name, credential)
    for text in contexts(credential):
        hits = findings(text)
        assert any(rule == name and part in value for rule, value in hits), (text, hits)


# --- the combined pattern ----------------------------------------------------------------
def test_names_are_unique_identifiers_and_value_groups_are_named_for_their_rule() -> None:
    names = [d.name for d in ALL]
    assert len(names) == len(set(names))
    assert {d.name for d in DETECTORS} & set(NAMES) == REPLACED_RULES
    for detector in PROVIDER_DETECTORS:
        assert detector.name.isidentifier() and detector.name == detector.name.lower()
        inner = re.findall(r"\(\?P<(\w+)>", detector.pattern)
        assert all(group.startswith(f"{detector.name}__value") for group in inner)
    assert set(PROVIDER_GENERATORS) == set(NAMES) == set(PROVIDER_LOOK_ALIKES)


def test_no_character_class_admits_nul() -> None:
    """Segments are NUL-joined: a negated class must exclude NUL, "." is never used."""
    for detector in PROVIDER_DETECTORS:
        for negated in re.findall(r"\[\^((?:\\.|[^\]])*)\]", detector.pattern):
            assert "\\x00" in negated, (detector.name, negated)
        unescaped = re.sub(r"\\.|\[(?:\\.|[^\]])*\]", "", detector.pattern)
        assert "." not in unescaped, detector.name


def test_the_redactors_own_combination_compiles() -> None:
    redactor = _redactor()
    assert set(NAMES) <= set(redactor._full.text.groupindex)


@pytest.mark.parametrize("name", NAMES)
def test_a_match_never_crosses_a_segment_boundary(name: str) -> None:
    """Spans are scanned as NUL-joined segments: a credential split by NUL is not one."""
    for seed in SEEDS:
        credential = _generated(name, seed)
        part = secret_part(name, credential)
        middle = credential.index(part) + len(part) // 2
        text = "a\x00" + credential[:middle] + "\x00" + credential[middle:] + "\x00b"
        for _rule, value in findings(text):
            assert "\x00" not in value


# --- what is found, what is not ------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_generated_credentials_are_found_in_every_context(name: str) -> None:
    for seed in SEEDS:
        _assert_found(name, _generated(name, seed))


@pytest.mark.parametrize("name", NAMES)
def test_look_alikes_are_left_alone(name: str) -> None:
    for seed in range(12):
        text = PROVIDER_LOOK_ALIKES[name](random.Random(f"look-alike:{name}:{seed}"))
        for wrapped in (text, f"Note: {text} (from the docs).", json.dumps({"v": text})):
            hits = [hit for hit in findings(wrapped) if hit[0] in NAMES]
            assert hits == [], (wrapped, hits)


@pytest.mark.parametrize("name", NAMES)
def test_a_token_whose_body_holds_the_punctuation_its_format_allows_is_found(name: str) -> None:
    """A random body may hold any character its format allows, anywhere: a Fly.io ``fo1_``
    token is base64url, and one whose last ``_`` fell a few characters from the end was
    judged by those few characters (not random enough) and stored whole, about one token
    in a hundred. Each punctuation character the detector's own pattern takes is put at each
    of the last 12 places of the secret, and the token is still found; the punctuation is
    what the token's own random body holds elsewhere (a format's alphabet, not what a looser
    pattern around a keyword would take)."""
    tried = 0
    for seed in range(16):
        credential = _generated(name, seed)
        part = secret_part(name, credential)
        at = credential.index(part)
        for offset in range(max(len(part) - 12, 1), len(part) - 1):
            for char in set(part[8:]) & set("_-./+"):
                index = at + offset
                mutated = credential[:index] + char + credential[index + 1 :]
                secret = mutated[at : at + len(part)]
                if secret not in _matched_before_accept(name, f"x {mutated} y"):
                    continue  # not a character this format's body takes there
                tried += 1
                assert any(
                    rule == name and secret in value for rule, value in findings(f"x {mutated} y")
                ), mutated
    assert tried or name not in {"flyio_token", "contentful_token", "sendgrid_key"}


@pytest.mark.parametrize("head", ["Q~E", "aQ~", "Q~Q", "~Q~"])
def test_an_entra_id_secret_whose_head_holds_its_marker_is_found(head: str) -> None:
    """<3 characters><digit>Q~<31-34>: the three may be "Q~" too (one secret in ~2,000),
    and the secret was cut at that first "Q~", judged too long and stored whole."""
    for seed in SEEDS:
        body = chars(random.Random(f"entra:{seed}"), "abcdefghijklmnopqrstuvwxyzABC0123~.-_", 33)
        secret = f"{head}8Q~{body}x"
        assert ("azure_ad_client_secret", secret) in findings(f"client secret {secret} ok")


@pytest.mark.parametrize("at", range(-12, -1))
def test_a_fly_io_token_with_an_underscore_near_its_end_is_found(at: int) -> None:
    for seed in SEEDS:
        body = chars(random.Random(f"fo1:{seed}"), "abcdefghijklmnopqrstuvwxyzABCDEF0123456789", 43)
        token = "fo1_" + body[:at] + "_" + body[at + 1 :]
        assert ("flyio_token", token) in findings(f"the deploy token is {token}."), token


def _matched_before_accept(name: str, text: str) -> list[str]:
    """What ``name``'s pattern takes for the secret in ``text``, before its ``accept``."""
    values = []
    for match in PATTERN.finditer(text.encode()):
        if RULE_OF_GROUP[match.lastindex] != name:
            continue
        start, end = match.span()
        for group in VALUE_GROUPS[name]:
            if match.span(group)[0] >= 0:
                start, end = match.span(group)
                break
        values.append(text.encode()[start:end].decode())
    return values


@settings(max_examples=100, deadline=None)
@given(name=st.sampled_from(NAMES), seed=st.integers(0, 2**32))
def test_any_seed_gives_a_credential_that_is_found(name: str, seed: int) -> None:
    _assert_found(name, PROVIDER_GENERATORS[name](random.Random(seed)))


@settings(max_examples=100, deadline=None)
@given(name=st.sampled_from(NAMES), seed=st.integers(0, 2**32))
def test_any_seed_gives_a_look_alike_that_stays(name: str, seed: int) -> None:
    text = PROVIDER_LOOK_ALIKES[name](random.Random(seed))
    assert [hit for hit in findings(f"x {text} y") if hit[0] in NAMES] == []


# --- by shape: valid, mistyped, cut short, one long -----------------------------------------
def _shape_id(shape: Shape) -> str:
    return f"{shape.detector}.{shape.variant}"


def _tokens(shape: Shape, damage: str) -> list[str]:
    return [
        damaged(shape.generate(random.Random(f"{_shape_id(shape)}:{seed}")), damage)
        for seed in SEEDS
    ]


def test_each_provider_is_matched_by_shape_or_named_generic_and_each_check_tested() -> None:
    """A provider detector is in the shape matrix or named generic (a new one must say
    which); a detector with a ``verify`` has a shape that exercises it, and the reverse."""
    shaped = {shape.detector for shape in SHAPES}
    assert shaped <= {d.name for d in ALL}
    assert set(NAMES) == (shaped & set(NAMES)) | GENERIC_SHAPES, set(NAMES) ^ (
        (shaped & set(NAMES)) | GENERIC_SHAPES
    )
    assert not shaped & GENERIC_SHAPES
    checked = {shape.detector for shape in SHAPES if shape.check}
    assert checked == set(VERIFY), checked ^ set(VERIFY)
    assert len({_shape_id(shape) for shape in SHAPES}) == len(SHAPES)


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
def test_a_prefixed_token_is_found_by_its_shape(shape: Shape, damage: str) -> None:
    for token in _tokens(shape, damage):
        part = secret_part(shape.detector, token)
        for text in contexts(token):
            hits = findings(text)
            assert any(rule == shape.detector and part in value for rule, value in hits), (
                text,
                hits,
            )


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
def test_the_redactor_replaces_a_prefixed_token_whatever_its_checksum(
    redactor: Redactor, shape: Shape, damage: str
) -> None:
    for token in _tokens(shape, damage):
        record = _span(f"before {token} after", json.dumps({"content": token}))
        redactor([record])
        stored = record.span_attributes["note"] + record.output
        part = secret_part(shape.detector, token)
        assert token not in stored, stored
        # Nor any 12-character piece of it (a checksum left behind, a tail not taken).
        assert not LeakScanner({shape.detector: Secret(token, (part,))}).scan(stored), stored
        # Labelled with its kind; a secret found by its context (a webhook's host) as such.
        label = "secret" if shape.detector in CONTEXT_RULES else shape.detector
        assert f"<{label}:" in stored, stored
        fired = {entry.rsplit(":", 1)[1].removesuffix(VERIFIED) for entry in record.redactions}
        assert shape.detector in fired, record.redactions


@pytest.mark.parametrize("length", [30, 31, 33, 36])
def test_a_new_relic_license_key_is_found_by_its_marker_whatever_its_length(length: int) -> None:
    """<32 hex>FFFFNRAL: the suffix marks the key, a body one character short or long
    (damage ``damaged`` cannot do: it would damage the marker) is one all the same."""
    for seed in SEEDS:
        key = chars(random.Random(f"nral:{length}:{seed}"), HEX, length) + "FFFFNRAL"
        _assert_found("newrelic_key", key)
    assert findings("0" * 31 + "FFFFNRAL") == [], "a placeholder stays"


@pytest.mark.parametrize("shape", [s for s in SHAPES if s.check], ids=_shape_id)
def test_the_format_check_tells_a_valid_token_from_a_typo(shape: Shape) -> None:
    """``verify`` passes the valid token and fails a one-character typo, which is still
    replaced: the check raises the confidence, it never decides."""
    verify = VERIFY[shape.detector]
    for token in _tokens(shape, "valid"):
        found = [value for rule, value in findings(token) if rule == shape.detector]
        assert found == [token] and verify(token), (token, found)
        if shape.check == "checksum":  # in its last character, or one more or less
            failing = [damaged(token, damage) for damage in DAMAGES[1:]]
        else:  # somewhere in what decodes
            failing = [next(typo for typo in typos(token) if not verify(typo))]
        for typo in failing:
            assert not verify(typo), typo
            assert [rule for rule, value in findings(typo) if value == typo] == [shape.detector]


@pytest.mark.parametrize("shape", [s for s in SHAPES if s.check == "checksum"], ids=_shape_id)
def test_the_manifest_says_which_tokens_passed_their_check(
    redactor: Redactor, shape: Shape
) -> None:
    """A valid token's Redactions entry carries VERIFIED; a mistyped one is replaced all the
    same, under the same pseudonym scheme, without it."""
    for token in _tokens(shape, "valid"):
        for candidate, verified in ((token, True), (damaged(token, DAMAGES[1]), False)):
            record = _span(f"before {candidate} after", json.dumps({"content": candidate}))
            redactor([record])
            assert candidate not in record.span_attributes["note"] + record.output
            entries = [e for e in record.redactions if shape.detector in e.rsplit(":", 1)[1]]
            assert entries, record.redactions
            assert all(e.endswith(VERIFIED) is verified for e in entries), (candidate, entries)


@pytest.mark.parametrize(
    "text",
    [
        "Hugging Face tokens start with hf_ and GitLab ones with glpat-.",
        "glpat is the prefix; npm_ tokens are 40 characters; use ghp_ or github_pat_.",
        "SG. stands for SendGrid; AKID and LTAI are access-key ids; dp.pt. is Doppler.",
        "integrity sha512-" + "Qm" * 43 + "==",
        "ETag 9f86d081884c7d659a2feaa0c55ad015 and trace 0af7651916cd43dd8448eb211c80319c",
        "request-id 550e8400-e29b-41d4-a716-446655440000, api key rotated",
        "datadog: enabled, mistral: mistral-large-latest, cohere: command-r-plus",
        "okta: https://dev-123456.okta.com, cloudflare zone 023e105f4ecef8ad9ca31a8372d0c353",
        "cache key-5d41402abc4b2a76b9719d911017c592 hit",
        "xoxb-placeholder-for-docs and hooks.slack.com/services/T00000000/B00000000/XXXX",
    ],
)
def test_prose_about_credentials_stays(text: str) -> None:
    assert [hit for hit in findings(text) if hit[0] in NAMES] == []


# --- checksums against published vectors -----------------------------------------------
def test_checksums_match_published_vectors() -> None:
    # CredSweeper tests/samples: github_classic_token (31 zeros), npm (its fake body).
    assert base62_crc32("0" * 31) == "4WZ4EQ"
    assert base62_crc32("Alm0StFaK3t0kEN8uTval1DcRC32dc") == "1Bscp5"
    # age (BIP 173 Bech32): a single changed character always fails.
    data = "KZYHJJGJ5DEC3RXGPEUA97WG99HU4Z3Z9ZK69GHAFZWJ08SFVF0QZ3WFS"
    assert bech32_valid("AGE-SECRET-KEY-1" + data + "S")
    assert not bech32_valid("AGE-SECRET-KEY-1" + data + "X")
    assert base36_crc32("") == "0000000"


def test_generated_checksums_are_what_the_validators_expect() -> None:
    rng = random.Random(7)
    body = chars(rng, "abcdef0123456789", 30)
    assert len(base62_crc32(body)) == 6
    assert all(c.isalnum() for c in base36_crc32(body))


@pytest.mark.parametrize(
    "text",
    [
        "x" * 40,
        "0" * 32,
        "abcdefghijklmnopqrstuvwxyz0123",
        "abcdabcdabcdabcdabcdabcd",
        "123456789012",
    ],
)
def test_placeholders_do_not_look_random(text: str) -> None:
    assert not looks_random(text)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32), length=st.integers(16, 120))
def test_random_strings_look_random(seed: int, length: int) -> None:
    rng = random.Random(seed)
    for alphabet in (HEX, LOWER + DIGITS, ALNUM, B64URL):
        assert looks_random(chars(rng, alphabet, length), len(alphabet))


# --- through the redactor ---------------------------------------------------------------------
def _redactor() -> Redactor:
    """A Redactor as the collector builds it: the provider detectors first, the rules they
    replace dropped (``BUILTIN_DETECTORS``)."""
    return Redactor(b"unit-test-key", RedactionConfig())


def _span(note: str, body: str) -> SpanRecord:
    return span_record(span_attributes={"note": note}, output=body)


@pytest.fixture(scope="module")
def redactor() -> Redactor:
    return _redactor()


@pytest.mark.parametrize("name", NAMES)
def test_the_redactor_never_stores_a_generated_credential(redactor: Redactor, name: str) -> None:
    for seed in range(4):
        credential = _generated(name, seed)
        part = secret_part(name, credential)
        record = _span(f"before {credential} after", json.dumps({"content": credential}))
        redactor([record])
        stored = record.span_attributes["note"] + record.output
        assert part not in stored, (credential, stored)
        assert record.span_attributes["note"].startswith("before ")
        assert record.redactions


@pytest.mark.parametrize("name", NAMES)
def test_the_redactor_leaves_look_alikes_in_prose(redactor: Redactor, name: str) -> None:
    for seed in range(6):
        text = PROVIDER_LOOK_ALIKES[name](random.Random(f"prose:{name}:{seed}"))
        if any(hit[0] not in NAMES for hit in findings(text)):
            continue  # another rule's business (a key name, an e-mail address)
        record = _span(f"see {text} here", "")
        redactor([record])
        assert record.span_attributes["note"] == f"see {text} here"
        assert record.redactions == []


# --- a key named like a credential -------------------------------------------------------
# "aio_<26 letters>Token=…" is an Adafruit key's shape: at the key's start the provider
# alternative wins, and the rule for the value behind it never got its turn.
_KEY_CHARS = re.compile(r"[A-Za-z0-9._-]+")
_VALUE = "hunter2-Is-The-Password"
_KEY_FORMS = (
    "{key}={value}",
    "{key}: {value}",
    'config {key}="{value}" end',
    "{key} = '{value}'",
    "export {key}={value} && run",
)


def _keys_named_like(name: str, seed: int) -> list[str]:
    """Key names built from a generated credential: the token with a key word after it, and
    the token with its tail turned into one (which may still have the token's shape)."""
    token = _generated(name, seed)
    if not _KEY_CHARS.fullmatch(token) or len(token) < 12:
        return []  # no key name holds "+", "/" or "="
    return [f"{token}_password", f"{token}_token", f"{token[:-5]}Token", f"{token[:-6]}Secret"]


def test_some_keys_named_like_a_credential_have_its_shape() -> None:
    """The matrix below holds the case that hid the value: a key its provider matches."""
    shaped = {
        name
        for name in NAMES
        for seed in SEEDS
        for key in _keys_named_like(name, seed)
        if any(rule == name for rule, _ in findings(f"{key}={_VALUE}"))
    }
    assert "adafruit_key" in shaped, shaped


@pytest.mark.parametrize("use_prefilter", [False, True], ids=["re2", "prefilter"])
@pytest.mark.parametrize("name", NAMES)
def test_a_key_named_like_a_credential_still_hides_its_value(
    name: str, use_prefilter: bool
) -> None:
    if use_prefilter and not prefilter.AVAILABLE:
        pytest.skip("hyperscan is not installed")
    redactor = Redactor(b"unit-test-key", use_prefilter=use_prefilter)
    for seed in SEEDS:
        for key in _keys_named_like(name, seed):
            for form in _KEY_FORMS:
                text = form.format(key=key, value=_VALUE)
                record = _span(text, json.dumps({"content": text}))
                redactor([record])
                stored = record.span_attributes["note"] + record.output
                assert _VALUE not in stored, (text, stored)
                assert record.redactions, text


def _letters_body(rng: random.Random, count: int) -> str:
    """``count`` random letters of both cases, and no digit: a body a random base62 token
    has 1 time in 66 (24 characters) to 1 in 280 (32). Not one that reads as a name."""
    while True:
        body = chars(rng, LETTERS, count)
        cases = any(c.islower() for c in body) and any(c.isupper() for c in body)
        if cases and not providers._a_name(body):
            return body


# Every provider whose check asks a random body to mix cases and digits: its token with a
# body of letters alone (the shape, built from the body).
DIGIT_FREE: dict[str, Callable[[random.Random], str]] = {
    "nightfall_key": lambda rng: "NF-" + _letters_body(rng, 32),
    "fireworks_key": lambda rng: "fw_" + _letters_body(rng, 24),
    "render_key": lambda rng: "rnd_" + _letters_body(rng, 32),
    "voyage_key": lambda rng: "pa-" + _letters_body(rng, 43),
    "gocardless_token": lambda rng: "live_" + _letters_body(rng, 40),
    "scalingo_token": lambda rng: "tk-us-" + _letters_body(rng, 48),
    "clickhouse_cloud_key": lambda rng: "4b1d" + _letters_body(rng, 38),
    "resend_key": lambda rng: f"re_{_letters_body(rng, 8)}_{_letters_body(rng, 24)}",
    "vault_token": lambda rng: "s." + _letters_body(rng, 24),
    "grafana_token": lambda rng: "glc_" + _letters_body(rng, 40),
    "sendgrid_key": lambda rng: f"SG.{_letters_body(rng, 22)}.{_letters_body(rng, 43)}",
}


@pytest.mark.parametrize("name", sorted(DIGIT_FREE))
def test_a_token_whose_random_body_holds_no_digit_is_found(redactor: Redactor, name: str) -> None:
    """A body of letters of both cases is as much the token's shape as one with digits: a
    random body has no digit often enough (1 in 66 at 24 characters) that asking for one
    let real credentials through."""
    for seed in range(6):
        token = DIGIT_FREE[name](random.Random(f"digit-free:{name}:{seed}"))
        assert (name, token) in findings(f"the key {token} here"), token
        record = _span(f"before {token} after", json.dumps({"content": token}))
        redactor([record])
        assert token not in record.span_attributes["note"] + record.output, token


@pytest.mark.parametrize(
    "text",
    [
        "NF-" + "qzkxmvbnwlprtyhgfdsaqwerzxcvbnml",  # one case only
        "fw_FirmwareUpdateControllerImplV",  # a name in both cases
        "SG.com.example.longpackagename.subpackage.module.ClassNameHere.method",
        "glc_This_Is_A_Placeholder_For_Your_Grafana_Cloud_Token",
        "s.ThisIsTheDefaultSessionName",
    ],
)
def test_a_body_of_letters_that_is_no_generated_token_stays(text: str) -> None:
    assert findings(f"see {text} here") == []


# Every provider whose check asks whether a random body reads as a name (``_a_name``) or
# counts its digits: its token at the shortest body its pattern takes, where a random body
# reads as words most often.
SHORTEST: dict[str, Callable[[random.Random], str]] = {
    "ory_token": lambda rng: "ory_at_" + chars(rng, ALNUM, 28),
    "bitbucket_dc_token": lambda rng: "BBDC-" + chars(rng, B64URL, 40),
    "flexport_key": lambda rng: "shltm_" + chars(rng, B64URL, 38),
    "gocardless_token": lambda rng: "live_" + chars(rng, B64URL, 38),
    "nightfall_key": lambda rng: "NF-" + chars(rng, ALNUM, 30),
    "saladcloud_key": lambda rng: f"salad_cloud_{chars(rng, ALNUM, 5)}_{chars(rng, ALNUM, 20)}",
    "typeform_token": lambda rng: "tfp_" + chars(rng, B64URL, 40),
    "fireworks_key": lambda rng: "fw_" + chars(rng, ALNUM, 22),
    "jina_key": lambda rng: "jina_" + chars(rng, B64URL, 40),
    "voyage_key": lambda rng: "pa-" + chars(rng, B64URL, 41),
    "resend_key": lambda rng: f"re_{chars(rng, ALNUM, 8)}_{chars(rng, ALNUM, 22)}",
    "render_key": lambda rng: "rnd_" + chars(rng, ALNUM, 26),
    "octopus_key": lambda rng: "API-" + chars(rng, UPPER_ALNUM, 26),
}


@pytest.mark.parametrize("name", sorted(SHORTEST))
def test_random_bodies_at_the_shortest_read_as_no_name(name: str) -> None:
    """2,000 random tokens of each, all found. With the vowels alone deciding what reads as
    a name, 1 in 368 of Fireworks' 22-character bodies did (``fw_pokceJShuYEieOo838XQCI``:
    "pokce", "Shu", "Yiei"...) and 1 in 77 Octopus keys had too few digits, each stored
    whole; the 20 characters of a SaladCloud key's last field alone read as one 1 time in
    ~3,000. The first of each through the whole alternation, the rest by the check."""
    generate, accept = SHORTEST[name], ACCEPT[name]
    assert accept is not None, name
    kept = []
    for seed in range(2000):
        token = generate(random.Random(f"shortest:{name}:{seed}"))
        if seed < 10:
            assert (name, token) in findings(f"the key {token} here"), token
        elif accept(token) != token:
            kept.append(token)
    assert not kept, kept[:5]


# Tokens the vowels alone read as names, and Octopus keys with fewer than three digits.
ONCE_KEPT = [
    "ory_at_UcsiyFqyYd7AFIYyDzdgieJzcuhu",
    "ory_at_muelFULJVrdwdwu1uAMEYdxJalB3",
    "shltm_xectyqaslqMdaiqjoZ5NZohqIDR6Hes0odLizl",
    "NF-BnaljaskktyAycqhS90f76TYWXUiew",
    "salad_cloud_uHHQP_Ncig6sagmarJEwAazAkj",
    "salad_cloud_59Dgt_POuXDR7masn994XABYIE",
    "fw_8mWbybIrjdib5WYMP2JWNR",
    "fw_pokceJShuYEieOo838XQCI",
    "re_akhyyYLV_GJPIkdgfDiR4ZOlmy9zawe",
    "rnd_IMEYZUlzqYTTOuvOCCC4o1WoiE",
    "API-COPJM3OOGQRC6EDFAKCKTXYXVJ",
    "API-MPEYGNEQTLOGMDFOYFQCCXWJNF",
]


@pytest.mark.parametrize("token", ONCE_KEPT)
def test_a_random_body_that_once_read_as_a_name_is_redacted(redactor: Redactor, token: str) -> None:
    record = _span(f"before {token} after", json.dumps({"content": f"key: {token}"}))
    redactor([record])
    stored = record.span_attributes["note"] + record.output
    assert token not in stored and token[-12:] not in stored, stored
    assert record.redactions, token


def _stepping(rng: random.Random, count: int, start: str = "") -> str:
    """``count`` hex characters after ``start``, none a step of -1, 0 or 1 from the one
    before (no run: what ``looks_random`` asks of a text apart from its blocks)."""
    out = start
    while len(out) < len(start) + count:
        char = rng.choice(HEX)
        if not out or abs(ord(char) - ord(out[-1])) > 1:
            out += char
    return out[len(start) :]


@pytest.mark.parametrize("length", range(8, 17))
def test_a_random_short_body_is_no_repeat_unless_a_block_repeats(length: int) -> None:
    """A repeat is a block twice at least: against a period longer than half the text, a
    random text's head and tail agree by chance (1 in 16 of nine hex characters against a
    period of 8; every text of eight), and such keys were stored whole."""
    rng = random.Random(f"repeat:{length}")
    checked = 0
    for _ in range(300):
        head = _stepping(rng, 3)
        middle = _stepping(rng, length - 6, head)
        body = head + middle + head  # its head recurs at its tail
        if len(body) == length and abs(ord(head[0]) - ord(body[-4])) > 1 and len(set(body)) >= 5:
            assert looks_random(body, 16), body
            checked += 1
        block = chars(rng, HEX, max(1, length // 3))
        assert not looks_random((block * length)[:length], 16), block
    assert checked > 100


@pytest.mark.parametrize("token", ["FLWSECK_TEST541c730e541", "FLWSECK_TEST3f9a0c7e3f"])
def test_a_short_body_whose_head_recurs_at_its_tail_is_found(token: str) -> None:
    """Flutterwave's FLWSECK_TEST<12 hex>, cut short by one: its tail repeats its head."""
    assert findings(f"see {token} here") == [("flutterwave_key", token)]


# --- forms a provider's tokens take beyond their first pattern (stop 55) -------------------
def _b64url_json(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _widened(seed: str) -> list[tuple[str, str]]:
    """(rule, token) for forms each of which the rule missed before: a pretty-printed JWT,
    SonarCloud's sqco_, a long Figma token, Square's sandbox secret, a long Octopus key, a
    New Relic key in lower case, Plaid's UUID in capitals, "=" in Dropbox's and GoCardless'
    bodies, a Yandex IAM token with a short first part, an older Mailgun key in base36."""
    rng = random.Random(seed)
    octopus = "".join(rng.sample(UPPER_ALNUM, 26)) + "".join(rng.choices(DIGITS, k=6))
    jwt_header = _b64url_json('{\n  "alg": "HS256",\n  "typ": "JWT"\n}')
    jwt_payload = _b64url_json('{\n  "sub": "' + chars(rng, DIGITS, 10) + '"\n}')
    return [
        ("jwt", f"{jwt_header}.{jwt_payload}.{chars(rng, ALNUM, 43)}"),
        ("sonar_token", "sqco_" + chars(rng, ALNUM, 59)),
        ("figma_token", "figp_" + chars(rng, B64URL, 51) + rng.choice(ALNUM)),
        ("square_token", "sandbox-sq0csb-" + chars(rng, B64URL, 42) + rng.choice(ALNUM)),
        ("octopus_key", "API-" + octopus),
        ("newrelic_key", "NRAK-" + chars(rng, LOWER + DIGITS, 27)),
        ("plaid_token", "access-sandbox-" + str(uuid.UUID(int=rng.getrandbits(128))).upper()),
        ("dropbox_token", "sl." + chars(rng, ALNUM, 60) + "=" + chars(rng, B64URL, 79) + "x"),
        ("gocardless_token", "live_" + chars(rng, ALNUM, 20) + "=" + chars(rng, ALNUM, 19)),
        ("yandex_token", "t1.9euelZ." + chars(rng, B64URL, 85) + rng.choice(ALNUM)),
    ]


@pytest.mark.parametrize("form", range(len(_widened(""))))
def test_a_providers_other_forms_are_found(redactor: Redactor, form: int) -> None:
    for seed in range(3):
        rule, token = _widened(f"widened:{seed}")[form]
        _assert_found(rule, token)
        record = _span(f"see {token} here", json.dumps({"content": f"use {token}"}))
        redactor([record])
        assert token not in record.span_attributes["note"] + record.output, (rule, token)
        assert any(entry.split(":", 1)[1].startswith(rule) for entry in record.redactions)


def test_an_older_mailgun_key_in_base36_is_found_after_its_name(redactor: Redactor) -> None:
    key = "key-" + chars(random.Random("mailgun base36"), LOWER + DIGITS, 31) + "7"
    for text in (f"MAILGUN_API_KEY={key}", f'"mailgun_key": "{key}"', f"api:{key}"):
        record = _span(text, "")
        redactor([record])
        assert key not in record.span_attributes["note"], text
