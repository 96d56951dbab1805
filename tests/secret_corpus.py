"""Secrets and personal data generated at run time, for the redaction tests.

Nothing secret-shaped is written in this repository: every value is built from a seeded
``random.Random`` plus the checksum its kind carries (Luhn, IBAN mod 97, GitHub's CRC32), so
a scanner reading the repository finds nothing, and every run can use fresh values.

A generator returns a ``Secret``: the text to plant (a bare value, or a value in the context
it travels in: ``PRIVATE_KEY=<PEM>``, ``password: a b c``, a YAML or XML document, a URL) and
the parts of it that must not survive redaction. A leak is any part, or any 12-character
piece of one, found in what was stored (``LeakScanner``), in the stored text itself or in its
URL-decoded, base64-decoded or JSON-decoded forms.

``all_kinds()`` adds the provider generators of ``tests/secretgen.py`` when that module
exists (``PROVIDER_GENERATORS`` and ``secret_part``), and each prefix-distinctive format
there (``SHAPES``) damaged as ``damaged`` damages it: mistyped (its checksum, if it has one,
fails) and cut short, and a format that ends in a checksum also one character long — no
longer valid, still one character from a working credential, so redacted all the same.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import importlib
import json
import random
import re
import string
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import quote, unquote

__all__ = [
    "CORE_KINDS",
    "CUT_TRAILERS",
    "NESTED_PSEUDONYM",
    "PIECE_CHARS",
    "PSEUDONYM",
    "Kind",
    "LeakScanner",
    "Secret",
    "all_kinds",
    "card_digits",
    "format_card",
    "format_iban",
    "format_phone",
    "iban_compact",
    "look_alikes",
    "luhn_check_digit",
    "pieces",
    "strings_of",
    "texts_of",
]

PIECE_CHARS = 12
"""A leak is a whole part or any piece of it this long."""
_MIN_PART_CHARS = 8
"""Shorter parts (the tail line of a PEM body) are covered by their neighbours."""

# A pseudonym as the redactor writes it: <rule:hex digest>. A nested one (<a:<b:…>>) is a
# pseudonym that was scanned again.
PSEUDONYM = re.compile(r"<([a-z][a-z0-9_.]*):([0-9a-f]{8,64})>")
NESTED_PSEUDONYM = re.compile(r"<[a-z][a-z0-9_.]*:<")


class Secret(NamedTuple):
    text: str
    """What is planted."""
    parts: tuple[str, ...]
    """What must not survive (neither whole nor any PIECE_CHARS-long piece)."""


Generator = Callable[[random.Random], Secret]


@dataclass(frozen=True)
class Kind:
    name: str
    generate: Generator
    as_json_number: bool = False
    """Planted as a JSON number (not a string) where the placement is JSON."""

    def json_value(self, secret: Secret) -> Any:
        return int(secret.text) if self.as_json_number else secret.text


# --- building blocks ---------------------------------------------------------------------
_ALNUM = string.ascii_letters + string.digits
_BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase
_CONSONANTS = "bcdfghjklmnprstvz"
_VOWELS = "aeiou"
_DASHES = "-" * 5


def _rand(rng: random.Random, alphabet: str, length: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(length))


def _word(rng: random.Random, low: int = 6, high: int = 9) -> str:
    """A pronounceable non-word (no dictionary, so nothing real is ever planted)."""
    return "".join(
        rng.choice(_CONSONANTS if index % 2 == 0 else _VOWELS)
        for index in range(rng.randint(low, high))
    )


def _mixed_case(rng: random.Random, text: str) -> str:
    return "".join(c.upper() if rng.random() < 0.4 else c for c in text)


def _with_parts(text: str, *parts: str) -> Secret:
    kept = tuple(dict.fromkeys(p for p in parts if len(p) >= _MIN_PART_CHARS))
    if not kept:
        raise ValueError("a secret needs at least one part long enough to look for")
    return Secret(text, kept)


# --- checksums ---------------------------------------------------------------------------
def luhn_check_digit(payload: str) -> str:
    total = 0
    for index, char in enumerate(reversed(payload)):
        value = int(char)
        if index % 2 == 0:  # doubled: these sit at odd positions once the digit is appended
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return str((10 - total % 10) % 10)


def _luhn_valid(digits: str) -> bool:
    return luhn_check_digit(digits[:-1]) == digits[-1]


_CARD_BRANDS: tuple[tuple[Callable[[random.Random], str], int], ...] = (
    (lambda rng: "4", 16),  # Visa
    (lambda rng: str(rng.randint(51, 55)), 16),  # Mastercard
    (lambda rng: str(rng.randint(2221, 2720)), 16),  # Mastercard 2-series
    (lambda rng: rng.choice(["34", "37"]), 15),  # Amex
    (lambda rng: "6011", 16),  # Discover
)


def card_digits(rng: random.Random, *, valid: bool = True) -> str:
    prefix_of, length = rng.choice(_CARD_BRANDS)
    payload = prefix_of(rng)
    payload += _rand(rng, string.digits, length - 1 - len(payload))
    check = luhn_check_digit(payload)
    if not valid:
        check = str((int(check) + rng.randint(1, 9)) % 10)
    return payload + check


def format_card(digits: str, style: str) -> str:
    """``spaced`` (4-4-4-4, Amex 4-6-5), ``dashed`` or ``compact``."""
    if style == "compact":
        return digits
    groups = (4, 6, 5) if len(digits) == 15 else (4,) * (len(digits) // 4)
    chunks, start = [], 0
    for size in groups:
        chunks.append(digits[start : start + size])
        start += size
    return (" " if style == "spaced" else "-").join(chunks)


# Country -> BBAN shape: "n" digit, "a" upper-case letter, "c" either.
_IBAN_SHAPES = {
    "DE": "n" * 18,
    "FR": "n" * 23,
    "ES": "n" * 20,
    "BE": "n" * 12,
    "NL": "aaaa" + "n" * 10,
    "GB": "aaaa" + "n" * 14,
    "IT": "a" + "n" * 10 + "c" * 12,
    "AT": "n" * 16,
}


def _iban_check(country: str, bban: str) -> str:
    rearranged = bban + country + "00"
    number = int("".join(str(int(c, 36)) for c in rearranged))
    return f"{98 - number % 97:02d}"


def iban_compact(rng: random.Random, *, valid: bool = True) -> str:
    country = rng.choice(sorted(_IBAN_SHAPES))
    alphabets = {"n": string.digits, "a": string.ascii_uppercase, "c": _BASE62[:36]}
    bban = "".join(rng.choice(alphabets[c]) for c in _IBAN_SHAPES[country])
    check = _iban_check(country, bban)
    if not valid:
        check = f"{(int(check) + rng.randint(1, 50)) % 97 + 2:02d}"
        if check == _iban_check(country, bban):
            check = f"{(int(check) + 1) % 97 + 2:02d}"
    return country + check + bban


def format_iban(compact: str, style: str) -> str:
    """``upper``, ``lower``, ``spaced`` (upper, groups of four) or ``spaced_lower``."""
    spaced = " ".join(compact[i : i + 4] for i in range(0, len(compact), 4))
    return {
        "upper": compact,
        "lower": compact.lower(),
        "spaced": spaced,
        "spaced_lower": spaced.lower(),
    }[style]


def _nanp(rng: random.Random) -> tuple[str, str, str]:
    area = str(rng.randint(2, 9)) + f"{rng.randint(0, 99):02d}"
    exchange = str(rng.randint(2, 9)) + f"{rng.randint(0, 99):02d}"
    return area, exchange, f"{rng.randint(0, 9999):04d}"


def format_phone(area: str, exchange: str, line: str, style: str) -> str:
    """NANP number in an E.164-style (``+1 …``) or a national (``(415) …``) form."""
    return {
        "e164_spaced": f"+1 {area} {exchange} {line}",
        "e164_dashed": f"+1-{area}-{exchange}-{line}",
        "e164_compact": f"+1{area}{exchange}{line}",
        "e164_parens": f"+1 ({area}) {exchange}-{line}",
        "nanp_parens": f"({area}) {exchange}-{line}",
        "nanp_dashed": f"{area}-{exchange}-{line}",
        "nanp_dotted": f"{area}.{exchange}.{line}",
    }[style]


def _crc32_base62(body: str) -> str:
    value = binascii.crc32(body.encode())
    out = ""
    while value:
        value, digit = divmod(value, 62)
        out = _BASE62[digit] + out
    return out.rjust(6, "0")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _pem_block(rng: random.Random) -> tuple[str, list[str]]:
    label = rng.choice(["RSA", "EC", "OPENSSH", "ENCRYPTED", ""])
    label = (label + " " if label else "") + "PRIVATE" + " KEY"
    body = base64.b64encode(rng.randbytes(rng.randint(400, 700))).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    block = (
        f"{_DASHES}BEGIN {label}{_DASHES}\n" + "\n".join(lines) + f"\n{_DASHES}END {label}{_DASHES}"
    )
    return block, lines


def _host(rng: random.Random) -> str:
    return f"{_word(rng, 4, 7)}.{_word(rng, 4, 7)}.internal"


def _email(rng: random.Random) -> str:
    local = f"{_word(rng, 4, 7)}.{_word(rng, 4, 8)}{rng.randint(1, 99)}"
    domain = f"{_word(rng, 4, 7)}{_word(rng, 3, 5)}.{rng.choice(['com', 'org', 'net', 'io', 'de'])}"
    return f"{local}@{domain}"


def _openai(rng: random.Random) -> tuple[str, str]:
    body = _rand(rng, _ALNUM, 48)
    return rng.choice(["sk-", "sk-proj-", "sk-svcacct-"]) + body, body


# --- the core kinds ----------------------------------------------------------------------
def gen_email(rng: random.Random) -> Secret:
    address = _mixed_case(rng, _email(rng))
    return _with_parts(address, address, address.lower())


# Letters beyond ASCII, by script: an address may be written in any of them (RFC 6531).
_WIDE_LETTERS = ("äöüßéèñçøåłž", "αβγδελμπσω", "абвгдежзий", "张伟佐藤李王明", "محمدعلي", "אבגדה")


def gen_email_intl(rng: random.Random) -> Secret:
    """An address with letters beyond ASCII in its local part, and sometimes its domain
    (jürgen.müller@firma.de, 张伟@example.com, user@bücher.de)."""
    letters = rng.choice(_WIDE_LETTERS)

    def wide(word: str, count: int) -> str:
        chars = list(word)
        for index in rng.sample(range(len(chars)), min(count, len(chars))):
            chars[index] = rng.choice(letters)
        return "".join(chars)

    local = f"{wide(_word(rng, 4, 7), rng.randint(1, 3))}.{wide(_word(rng, 4, 8), 1)}"
    if rng.random() < 0.3:
        local = "".join(rng.choice(letters) for _ in range(rng.randint(2, 6)))
    domain = _word(rng, 4, 7) if rng.random() < 0.6 else wide(_word(rng, 4, 7), 2)
    tld = rng.choice(["com", "de", "org", "es", "fr", "рф", "中国"])
    address = f"{local}@{domain}.{tld}"
    return _with_parts(address, address, local + "@", address.lower())


def gen_phone_e164(rng: random.Random) -> Secret:
    style = rng.choice(["e164_spaced", "e164_dashed", "e164_compact", "e164_parens", "intl"])
    if style == "intl":
        text = rng.choice(
            [
                f"+44 20 {rng.randint(1000, 9999)} {rng.randint(1000, 9999)}",
                f"+49 30 {rng.randint(10_000_000, 99_999_999)}",
                f"+33 6 {rng.randint(10, 99)} {rng.randint(10, 99)} {rng.randint(10, 99)} {rng.randint(10, 99)}",
            ]
        )
    else:
        text = format_phone(*_nanp(rng), style)
    digits = "".join(c for c in text if c.isdigit())
    return _with_parts(text, text, digits)


def gen_phone_nanp(rng: random.Random) -> Secret:
    text = format_phone(*_nanp(rng), rng.choice(["nanp_parens", "nanp_dashed", "nanp_dotted"]))
    digits = "".join(c for c in text if c.isdigit())
    # Ten characters at most: the whole number is the part.
    return Secret(text, (text, digits))


# Separators beyond ASCII a number's groups are written with: the figure, thin and narrow
# no-break spaces (typesetting), the hyphen, the no-break hyphen (web pages keep a phone
# number on one line with it), the figure dash, the en and em dashes (a word processor's), the
# horizontal bar, the minus sign, the small and full-width hyphen-minus.
WIDE_SEPARATORS = "\u2007\u2009\u202f\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63\uff0d"


def gen_phone_wide_separator(rng: random.Random) -> Secret:
    """A phone number whose dashes are each one of ``WIDE_SEPARATORS`` (415\u2011555\u20110199)."""
    style = rng.choice(["e164_dashed", "e164_parens", "nanp_parens", "nanp_dashed"])
    text = format_phone(*_nanp(rng), style).replace("-", rng.choice(WIDE_SEPARATORS))
    digits = "".join(c for c in text if c.isdigit())
    return _with_parts(text, text, digits)


def gen_card_wide_separator(rng: random.Random) -> Secret:
    digits = card_digits(rng)
    text = format_card(digits, "dashed").replace("-", rng.choice(WIDE_SEPARATORS))
    return _with_parts(text, text, digits)


def gen_us_ssn_wide_separator(rng: random.Random) -> Secret:
    """An SSN split by a no-break space or one of ``WIDE_SEPARATORS``."""
    text = gen_us_ssn(rng).text.replace("-", rng.choice(WIDE_SEPARATORS + "\u00a0"))
    return Secret(text, (text, "".join(c for c in text if c.isdigit())))


def gen_iban_wide_separator(rng: random.Random) -> Secret:
    """An IBAN in groups of four split by a no-break space (an invoice's HTML) or one of
    ``WIDE_SEPARATORS``, in upper or lower case."""
    compact = iban_compact(rng)
    text = format_iban(compact, rng.choice(["spaced", "spaced_lower"]))
    text = text.replace(" ", rng.choice(WIDE_SEPARATORS + "\u00a0"))
    return _with_parts(text, text, compact)


def _card_kind(style: str) -> Generator:
    def generate(rng: random.Random) -> Secret:
        digits = card_digits(rng)
        return _with_parts(format_card(digits, style), format_card(digits, style), digits)

    return generate


def _iban_kind(style: str) -> Generator:
    def generate(rng: random.Random) -> Secret:
        compact = iban_compact(rng)
        return _with_parts(format_iban(compact, style), format_iban(compact, style), compact)

    return generate


def gen_us_ssn(rng: random.Random) -> Secret:
    area = rng.choice([n for n in range(1, 900) if n != 666])
    text = f"{area:03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"
    return Secret(text, (text, text.replace("-", "")))


def gen_pem_bare(rng: random.Random) -> Secret:
    block, lines = _pem_block(rng)
    return _with_parts(block, *lines)


def _pem_after(prefix: str) -> Generator:
    def generate(rng: random.Random) -> Secret:
        block, lines = _pem_block(rng)
        return _with_parts(prefix + block, *lines)

    return generate


# What follows a key cut short in a tool's output: its END line never came.
CUT_TRAILERS = (
    "",
    "\n... [output truncated]",
    "\u2026",
    "\n$ ",
    "\n```",
    " for the job.",
    "'}",
    "\n[truncated: 2048 more bytes]",
    "<EOF>",
    "\\n...",
)


def gen_pem_cut(rng: random.Random) -> Secret:
    """A key cut off after some of its body, anywhere up to its END line, and whatever
    comes after the cut (an output limit's note, an ellipsis, a closing quote)."""
    block, _ = _pem_block(rng)
    begin = block.index("\n") + 1
    cut = rng.randint(begin + 64, len(block) - 1)
    body = block[begin:cut]
    return _with_parts(block[:cut] + rng.choice(CUT_TRAILERS), *body.split("\n"))


def gen_cli_credentials(rng: random.Random) -> Secret:
    """``-u user:password`` (curl's flag), as the whole value too: the rule's start of text
    (``^``) holds for the value alone, not where it sits among a span's other texts."""
    user, password = _word(rng), _rand(rng, _ALNUM, 18)
    flag = rng.choice(["-u ", "--user ", "--user="])
    return _with_parts(f"{flag}{user}:{password}", password, f"{user}:{password}")


def gen_pem_env_dump(rng: random.Random) -> Secret:
    block, lines = _pem_block(rng)
    password = _rand(rng, _ALNUM, 20)
    text = "\n".join(
        [
            f"HOSTNAME={_word(rng)}-{rng.randint(1, 9)}",
            "HOME=/home/agent",
            f"PRIVATE_KEY={block}",
            "LANG=C.UTF-8",
            f"DB_PASSWORD={password}",
            "TERM=xterm",
        ]
    )
    return _with_parts(text, *lines, password)


def gen_jwt(rng: random.Random) -> Secret:
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = {"jti": _rand(rng, _ALNUM, 16), "sub": _email(rng), "iat": rng.randint(1, 2**31)}
    payload = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    signature = _b64url(rng.randbytes(32))
    return _with_parts(f"{header}.{payload}.{signature}", payload, signature)


def gen_openai_key(rng: random.Random) -> Secret:
    key, body = _openai(rng)
    return _with_parts(key, body)


def gen_anthropic_key(rng: random.Random) -> Secret:
    body = rng.choice(_ALNUM) + _rand(rng, _ALNUM + "_-", 92)
    return _with_parts("sk-ant-api03-" + body + "AA", body)


def gen_aws_access_key(rng: random.Random) -> Secret:
    key = rng.choice(["AKIA", "ASIA"]) + _rand(rng, string.ascii_uppercase + "234567", 16)
    return _with_parts(key, key)


def gen_github_token(rng: random.Random) -> Secret:
    """A classic token: prefix, 30 random base62 characters, then the CRC32 of those 30
    characters in base62 (0-9A-Za-z), zero-padded to 6: the checksum GitHub's own scanners
    verify."""
    body = _rand(rng, _ALNUM, 30)
    token = rng.choice(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]) + body + _crc32_base62(body)
    return _with_parts(token, token[4:])


def github_checksum_ok(token: str) -> bool:
    body, checksum = token[4:-6], token[-6:]
    return _crc32_base62(body) == checksum


def gen_bearer_token(rng: random.Random) -> Secret:
    token = rng.choice(_ALNUM) + _rand(rng, _ALNUM + "-._~+/", 38) + rng.choice(_ALNUM)
    text = rng.choice([f"Authorization: Bearer {token}", f"Bearer {token}", f"bearer {token}"])
    return _with_parts(text, token)


def gen_url_credentials(rng: random.Random) -> Secret:
    user, password = _word(rng), _rand(rng, _ALNUM, 18)
    scheme = rng.choice(["postgres", "mysql", "redis", "amqp", "https"])
    text = f"{scheme}://{user}:{password}@{_host(rng)}:{rng.randint(1024, 65535)}/{_word(rng)}"
    return _with_parts(text, password, f"{user}:{password}")


def gen_cookie_header(rng: random.Random) -> Secret:
    session, csrf = _rand(rng, _ALNUM, 32), _rand(rng, _ALNUM, 24)
    name = rng.choice(["Cookie", "cookie", "Set-Cookie"])
    return _with_parts(f"{name}: sessionid={session}; csrftoken={csrf}; theme=dark", session, csrf)


def _words(rng: random.Random, count: int) -> str:
    return " ".join(_word(rng) for _ in range(count))


def gen_password_multiword(rng: random.Random) -> Secret:
    key = rng.choice(["password", "Password", "DB_PASSWORD", "passphrase", "user.password"])
    separator = rng.choice([": ", "=", " = ", ":\t"])
    value = _words(rng, 4)
    return _with_parts(f"{key}{separator}{value}", value, value.split(" ", 1)[1])


def gen_password_quoted(rng: random.Random) -> Secret:
    """A quoted value after its key, as shells, .env files and configs print it: inside a
    JSON string (a tool's output) its quotes arrive escaped."""
    key = rng.choice(["password", "DB_PASSWORD", "api_key", "client_secret", "passphrase"])
    separator = rng.choice(["=", ": ", " = "])
    value = _words(rng, 3)
    return _with_parts(f'{key}{separator}"{value}"', value, value.split(" ", 1)[1])


def gen_token_quoted(rng: random.Random) -> Secret:
    key = rng.choice(["access_token", "refresh_token", "sessionid", "auth_token"])
    value = _rand(rng, _ALNUM, 32)
    return _with_parts(f'{key}{rng.choice(["=", ": "])}"{value}"', value)


def gen_authorization_quoted(rng: random.Random) -> Secret:
    value = _rand(rng, _ALNUM, 40)
    scheme = rng.choice(["Basic ", "Token ", ""])
    return _with_parts(f'Authorization: "{scheme}{value}"', value)


def gen_url_encoded_password(rng: random.Random) -> Secret:
    password = f"{_word(rng)} {_word(rng)}={_word(rng)}"
    encoded = quote(password, safe="")
    text = f"https://{_host(rng)}/login?user={_word(rng)}&password={encoded}&next=%2Fhome"
    return _with_parts(text, encoded, password)


def gen_url_encoded_email(rng: random.Random) -> Secret:
    address = _email(rng)
    encoded = quote(address, safe="")
    return _with_parts(f"https://{_host(rng)}/unsubscribe?email={encoded}&list=7", encoded, address)


def gen_url_encoded_url_credentials(rng: random.Random) -> Secret:
    user, password = _word(rng), _rand(rng, _ALNUM, 18)
    inner = f"postgres://{user}:{password}@{_host(rng)}:5432/{_word(rng)}"
    return _with_parts(
        f"https://{_host(rng)}/connect?dsn={quote(inner, safe='')}", password, f"{user}:{password}"
    )


def gen_base64_blob(rng: random.Random) -> Secret:
    address = _email(rng)
    key, body = _openai(rng)
    inner = json.dumps({"user": address, "api_key": key, "note": _words(rng, 3)})
    blob = base64.b64encode(inner.encode()).decode()
    text = rng.choice(
        [f"payload={blob}", f"data:application/json;base64,{blob}", f"X-Context: {blob}"]
    )
    # The blob itself may be kept re-encoded around a pseudonym: what counts is what decodes.
    return _with_parts(text, address, body)


def gen_yaml_block(rng: random.Random) -> Secret:
    first, second = _words(rng, 2), _words(rng, 2)
    text = (
        f"database:\n  host: {_host(rng)}\n  password: |\n    {first}\n    {second}\n  port: 5432"
    )
    return _with_parts(text, first, second)


def gen_yaml_api_key(rng: random.Random) -> Secret:
    value = _rand(rng, _ALNUM, 32)
    text = f"service:\n  name: {_word(rng)}\n  api_key: {value}\n  region: eu-west-1"
    return _with_parts(text, value)


def gen_xml_password(rng: random.Random) -> Secret:
    value = _words(rng, 3)
    text = (
        f"<config><user>{_word(rng)}</user><password>{value}</password><port>5432</port></config>"
    )
    return _with_parts(text, value)


def gen_xml_api_key(rng: random.Random) -> Secret:
    value = _rand(rng, _ALNUM, 32)
    return _with_parts(f"<request><apiKey>{value}</apiKey><region>eu</region></request>", value)


def _card_number(rng: random.Random) -> Secret:
    digits = card_digits(rng)
    return _with_parts(digits, digits)


CORE_KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind("email", gen_email),
        Kind("email_intl", gen_email_intl),
        Kind("phone_e164", gen_phone_e164),
        Kind("phone_nanp", gen_phone_nanp),
        Kind("phone_wide_separator", gen_phone_wide_separator),
        Kind("card_spaced", _card_kind("spaced")),
        Kind("card_dashed", _card_kind("dashed")),
        Kind("card_compact", _card_kind("compact")),
        Kind("card_wide_separator", gen_card_wide_separator),
        Kind("card_json_number", _card_number, as_json_number=True),
        Kind("iban_upper", _iban_kind("upper")),
        Kind("iban_lower", _iban_kind("lower")),
        Kind("iban_spaced", _iban_kind("spaced")),
        Kind("iban_wide_separator", gen_iban_wide_separator),
        Kind("us_ssn", gen_us_ssn),
        Kind("us_ssn_wide_separator", gen_us_ssn_wide_separator),
        Kind("pem_bare", gen_pem_bare),
        Kind("pem_env_assign", _pem_after("PRIVATE_KEY=")),
        Kind("pem_spaced_assign", _pem_after("PRIVATE_KEY = ")),
        Kind("pem_yaml", _pem_after("private_key: ")),
        Kind("pem_env_dump", gen_pem_env_dump),
        Kind("pem_cut", gen_pem_cut),
        Kind("cli_credentials", gen_cli_credentials),
        Kind("jwt", gen_jwt),
        Kind("openai_key", gen_openai_key),
        Kind("anthropic_key", gen_anthropic_key),
        Kind("aws_access_key", gen_aws_access_key),
        Kind("github_token", gen_github_token),
        Kind("bearer_token", gen_bearer_token),
        Kind("url_credentials", gen_url_credentials),
        Kind("cookie_header", gen_cookie_header),
        Kind("password_multiword", gen_password_multiword),
        Kind("password_quoted", gen_password_quoted),
        Kind("token_quoted", gen_token_quoted),
        Kind("authorization_quoted", gen_authorization_quoted),
        Kind("url_encoded_password", gen_url_encoded_password),
        Kind("url_encoded_email", gen_url_encoded_email),
        Kind("url_encoded_url_credentials", gen_url_encoded_url_credentials),
        Kind("base64_blob", gen_base64_blob),
        Kind("yaml_block", gen_yaml_block),
        Kind("yaml_api_key", gen_yaml_api_key),
        Kind("xml_password", gen_xml_password),
        Kind("xml_api_key", gen_xml_api_key),
    )
}


def _provider_kind(name: str, generate: Callable[[random.Random], str], part: Any) -> Kind:
    def wrapped(rng: random.Random) -> Secret:
        secret = generate(rng)
        return Secret(secret, (str(part(name, secret)),))

    return Kind(f"provider.{name}", wrapped)


def _damaged_kind(shape: Any, damage: str, module: Any) -> Kind:
    def generate(rng: random.Random) -> str:
        return str(module.damaged(shape.generate(rng), damage))

    kind = _provider_kind(shape.detector, generate, module.secret_part)
    return Kind(f"provider.{shape.detector}.{shape.variant}.{damage}", kind.generate)


def all_kinds() -> dict[str, Kind]:
    """The core kinds, plus one per provider of ``tests/secretgen.py`` when it exists and
    one per damaged prefix-distinctive format."""
    kinds = dict(CORE_KINDS)
    try:
        module = importlib.import_module("tests.secretgen")
    except ModuleNotFoundError as exc:
        if exc.name not in ("tests.secretgen", "tests"):
            raise
        return kinds
    generators: Mapping[str, Callable[[random.Random], str]] = module.PROVIDER_GENERATORS
    for name, generate in sorted(generators.items()):
        kind = _provider_kind(name, generate, module.secret_part)
        kinds[kind.name] = kind
    for shape in module.SHAPES:
        # Every prefix-distinctive format one character changed and one cut off (its check,
        # if it has one, failing); one that ends in a checksum also one character long.
        damages = module.DAMAGES[1:] if shape.check == "checksum" else _TYPO_AND_CUT
        for damage in damages:
            kind = _damaged_kind(shape, damage, module)
            kinds[kind.name] = kind
    return kinds


_TYPO_AND_CUT = ("mistyped", "cut_short")


# --- finding leaks -----------------------------------------------------------------------
def pieces(parts: Iterable[str], width: int = PIECE_CHARS) -> set[str]:
    """Every ``width``-long piece of each part (lower case); a shorter part whole."""
    out: set[str] = set()
    for part in parts:
        low = part.lower()
        if len(low) <= width:
            out.add(low)
        else:
            out.update(low[i : i + width] for i in range(len(low) - width + 1))
    return out


_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")
_MAX_DECODED_RUN = 1 << 16
_MIN_PRINTABLE = 0.7
"""Decoded runs below this share of printable characters are binary: nothing to read there."""


def _base64_views(text: str) -> Iterator[str]:
    for match in _BASE64_RUN.finditer(text):
        run = match.group().rstrip("=")
        if len(run) > _MAX_DECODED_RUN:
            continue
        urlsafe = "-" in run or "_" in run
        decode = base64.urlsafe_b64decode if urlsafe else base64.b64decode
        for offset in range(4):  # the run may start inside a longer token
            chunk = run[offset:]
            chunk = chunk[: len(chunk) - len(chunk) % 4] if len(chunk) % 4 == 1 else chunk
            try:
                raw = decode(chunk + "=" * (-len(chunk) % 4))
            except (binascii.Error, ValueError):
                continue
            decoded = raw.decode("utf-8", "replace")
            printable = sum(c.isprintable() or c in "\n\t" for c in decoded)
            if decoded and printable >= _MIN_PRINTABLE * len(decoded):
                yield decoded


_UNICODE_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")


def _views(text: str, depth: int, seen: set[str]) -> Iterator[str]:
    if text in seen:
        return
    seen.add(text)
    yield text
    if depth <= 0:
        return
    if "%" in text:
        decoded = unquote(text)
        if decoded != text:
            yield from _views(decoded, depth - 1, seen)
    for decoded in _base64_views(text):
        yield from _views(decoded, depth - 1, seen)
    if "\\u" in text:  # JSON's escapes, also where the JSON does not parse (cut short)
        unescaped = _UNICODE_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)
        unescaped = unescaped.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        if unescaped != text:
            yield from _views(unescaped, depth - 1, seen)
    if text.lstrip()[:1] in ("{", "[", '"'):
        try:
            document = json.loads(text)
        except (ValueError, RecursionError):
            return
        for inner in strings_of(document):
            yield from _views(inner, depth - 1, seen)


def strings_of(node: Any) -> Iterator[str]:
    """Every string in ``node`` as it is (keys too, numbers as text), repeats included."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, bytes):
            yield item.decode("utf-8", "replace")
        elif isinstance(item, Mapping):
            for key, value in item.items():
                stack.append(key)
                stack.append(value)
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int | float):
            yield repr(item) if isinstance(item, float) else str(item)
        else:
            yield str(item)


def texts_of(node: Any, depth: int = 3) -> Iterator[str]:
    """Every distinct string in ``node`` (keys too, numbers as text), and what each decodes
    to: its JSON strings, its URL-decoding, its base64 runs."""
    seen: set[str] = set()
    for text in strings_of(node):
        yield from _views(text, depth, seen)


class LeakScanner:
    """Finds, in a haystack, any piece of any secret: reports which secret and which pieces."""

    def __init__(self, secrets: Mapping[str, Secret], width: int = PIECE_CHARS) -> None:
        self._width = width
        self._owners: dict[str, set[str]] = {}
        self._short: dict[str, set[str]] = {}
        for name, secret in secrets.items():
            for piece in pieces(secret.parts, width):
                target = self._owners if len(piece) == width else self._short
                target.setdefault(piece, set()).add(name)

    def scan(self, haystack: str) -> dict[str, set[str]]:
        low = haystack.lower()
        found: dict[str, set[str]] = {}
        width, chunk = self._width, 1 << 20
        for start in range(0, max(len(low) - width + 1, 0), chunk):
            window = low[start : start + chunk + width - 1]
            seen = {window[i : i + width] for i in range(len(window) - width + 1)}
            for piece in seen & self._owners.keys():
                for name in self._owners[piece]:
                    found.setdefault(name, set()).add(piece)
        for piece, names in self._short.items():
            if piece in low:
                for name in names:
                    found.setdefault(name, set()).add(piece)
        return found

    def scan_all(self, node: Any) -> dict[str, set[str]]:
        return self.scan("\x00".join(texts_of(node)))


# --- look-alikes: never secrets, must stay byte-identical ---------------------------------
def _is_card(digits: str) -> bool:
    """Issuer prefix, length and Luhn: a number a card detector must take for a card."""
    n = len(digits)
    if not 13 <= n <= 19 or not _luhn_valid(digits):
        return False
    two, three, four = int(digits[:2]), int(digits[:3]), int(digits[:4])
    return (
        (digits[0] == "4" and n in (13, 16, 19))
        or ((51 <= two <= 55 or 2221 <= four <= 2720) and n == 16)
        or (two in (34, 37) and n == 15)
        or ((digits.startswith(("6011", "65")) or 644 <= three <= 649) and 16 <= n <= 19)
        or (3528 <= four <= 3589 and 16 <= n <= 19)
        or ((two in (36, 38, 39) or 300 <= three <= 305) and 14 <= n <= 19)
        or (two == 62 and 16 <= n <= 19)
    )


def _isbn13(rng: random.Random) -> str:
    core = rng.choice(["978", "979"]) + _rand(rng, string.digits, 9)
    total = sum(int(c) * (1 if i % 2 == 0 else 3) for i, c in enumerate(core))
    return core + str((10 - total % 10) % 10)


def look_alikes(rng: random.Random, per_category: int = 20) -> dict[str, list[str]]:
    """Text that looks like a secret to a careless detector, by category."""

    def many(make: Callable[[], str]) -> list[str]:
        return [make() for _ in range(per_category)]

    def decimal_trace_id() -> str:
        # A decimal id that is also a well-formed card number is ambiguous; not a look-alike.
        while True:
            number = str(rng.getrandbits(64))
            if not _is_card(number):
                return rng.choice(
                    [f"dd.trace_id={number}", f"x-datadog-trace-id: {number}", number]
                )

    def isbn() -> str:
        digits = _isbn13(rng)
        return rng.choice(
            [
                f"ISBN {digits[:3]}-{digits[3]}-{digits[4:6]}-{digits[6:12]}-{digits[12]}",
                f"ISBN-13 {digits}",
            ]
        )

    def invalid_card() -> str:
        return format_card(card_digits(rng, valid=False), rng.choice(["spaced", "compact"]))

    def invalid_iban() -> str:
        return format_iban(iban_compact(rng, valid=False), rng.choice(["upper", "lower", "spaced"]))

    def timestamp() -> str:
        seconds = rng.randint(1_600_000_000, 2_000_000_000)
        return rng.choice(
            [
                f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
                f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999999):06d}+00:00",
                str(seconds),
                str(seconds * 1000 + rng.randint(0, 999)),
                str(seconds * 10**9 + rng.randint(0, 10**9 - 1)),
            ]
        )

    def token_count() -> str:
        n = rng.randint(1, 200_000)
        return rng.choice(
            [
                f"max_tokens: {n}",
                f"gen_ai.usage.input_tokens={n}",
                f'"output_tokens": {n}',
                f"tokens={n}",
                f"token: {n}",
            ]
        )

    def arn() -> str:
        account = f"{rng.randint(0, 10**12 - 1):012d}"
        region = rng.choice(["us-east-1", "eu-west-1", "ap-south-1"])
        return rng.choice(
            [
                f"arn:aws:iam::{account}:role/{_word(rng)}-runner",
                f"arn:aws:lambda:{region}:{account}:function:{_word(rng)}",
                f"arn:aws:s3:::{_word(rng)}-{_word(rng)}/{_word(rng)}.json",
            ]
        )

    def order_id() -> str:
        return rng.choice(
            [
                f"ORD-{rng.randint(2020, 2030)}-{rng.randint(0, 999999):06d}",
                f"A-{rng.randint(1000, 99999)}",
                f"order #{rng.randint(10**7, 10**9)}",
                f"INV{rng.randint(10**5, 10**8)}",
            ]
        )

    def asset() -> str:
        return f"{_word(rng)}@{rng.randint(2, 4)}x.{rng.choice(['png', 'webp', 'jpg', 'svg'])}"

    def version() -> str:
        return rng.choice(
            [
                f"v{rng.randint(0, 20)}.{rng.randint(0, 99)}.{rng.randint(0, 99)}",
                f"build {rng.randint(2020, 2030)}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}.{rng.randint(1, 99)}",
            ]
        )

    def vendor_id() -> str:
        return rng.choice(
            [
                f"call_{_rand(rng, _ALNUM, 24)}",
                f"msg_{_rand(rng, _ALNUM, 24)}",
                f"resp_{_rand(rng, string.hexdigits.lower()[:16], 32)}",
                f"span_{_rand(rng, string.hexdigits.lower()[:16], 24)}",
            ]
        )

    def not_a_phone() -> str:
        return f"room {rng.randint(100, 199)}-{rng.randint(100, 199)}-{rng.randint(1000, 9999)}"

    def amount() -> str:
        return (
            f"{rng.randint(1, 99999)}.{rng.randint(0, 99):02d} {rng.choice(['EUR', 'USD', 'GBP'])}"
        )

    return {
        "uuid": many(lambda: str(uuid.UUID(int=rng.getrandbits(128), version=4))),
        "sha256": many(lambda: hashlib.sha256(rng.randbytes(16)).hexdigest()),
        "git_sha": many(lambda: hashlib.sha1(rng.randbytes(16)).hexdigest()),  # noqa: S324
        "trace_id_hex": many(lambda: rng.randbytes(16).hex()),
        "trace_id_decimal": many(decimal_trace_id),
        "order_id": many(order_id),
        "invalid_card": many(invalid_card),
        "invalid_iban": many(invalid_iban),
        "timestamp": many(timestamp),
        "token_count": many(token_count),
        "arn": many(arn),
        "isbn": many(isbn),
        "asset": many(asset),
        "version": many(version),
        "vendor_id": many(vendor_id),
        "not_a_phone": many(not_a_phone),
        "amount": many(amount),
    }
