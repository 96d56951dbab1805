"""Redaction rules: value detectors (with validation) and sensitive key names.

Every detector is one named group of a single RE2 pattern, so a whole span is scanned in
one linear-time pass (Python's ``re`` ran the same alternation at ~2 MB/s; RE2 at ~400 MB/s,
see ADR 6). A detector may name an inner ``<rule>__value`` group: only that part is replaced
(the token after ``Bearer``, the ``user:password`` of a URL). Validators turn look-alikes
(an order id, a timestamp, a number that fails Luhn) back into non-matches.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

__all__ = [
    "DETECTORS",
    "VERIFIED",
    "WIDE_DASHES",
    "WIDE_LETTER",
    "WIDE_SEPARATOR",
    "WIDE_SEPARATORS",
    "Detector",
    "RedactionConfig",
    "card_groups",
    "card_layout",
    "command_secret",
    "generated_value",
    "is_sensitive_key",
    "key_hints",
    "luhn_valid",
    "names_a_generated_key",
    "names_a_secret_flag",
    "value_in_text",
]


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


# The separators beyond ASCII that may split a number's groups (``WIDE_SEPARATOR``'s).
WIDE_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63\uff0d"
WIDE_SEPARATORS = "\u2007\u2009\u202f" + WIDE_DASHES  # the figure, thin, narrow no-break spaces


# What splits an SSN's or an IBAN's groups (``_GROUP_SEP``).
_GROUP_CHARACTERS = " -\u00a0" + WIDE_SEPARATORS
_GROUP_SEPARATORS = re.compile("[" + re.escape(_GROUP_CHARACTERS) + "]")


def _digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


def _card_brand_ok(digits: str) -> bool:
    """Issuer prefix and length of a real card scheme (Visa, Mastercard, Amex, Discover, JCB,
    Diners, UnionPay): most long numeric ids (decimal trace ids, order numbers) fail it."""
    n = len(digits)
    two, four = int(digits[:2]), int(digits[:4])
    if digits[0] == "4":
        return n in (13, 16, 19)
    if 51 <= two <= 55 or 2221 <= four <= 2720:
        return n == 16
    if two in (34, 37):
        return n == 15
    if digits.startswith(("6011", "65")) or 644 <= int(digits[:3]) <= 649:
        return 16 <= n <= 19
    if 3528 <= four <= 3589:
        return 16 <= n <= 19
    if two in (36, 38, 39) or 300 <= int(digits[:3]) <= 305:
        return 14 <= n <= 19
    if two == 62:
        return 16 <= n <= 19
    return False


def _card(text: str) -> bool:
    digits = _digits(text)
    return 13 <= len(digits) <= 19 and _card_brand_ok(digits) and luhn_valid(digits)


_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AT": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29, "CH": 21, "CY": 28,
    "CZ": 24, "DE": 22, "DK": 18, "EE": 20, "ES": 24, "FI": 18, "FR": 27, "GB": 22, "GI": 23,
    "GR": 27, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IS": 26, "IT": 27, "LI": 21, "LT": 20,
    "LU": 20, "LV": 21, "MC": 27, "MT": 31, "NL": 18, "NO": 15, "PL": 28, "PT": 25, "RO": 24,
    "SA": 24, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "TR": 26, "UA": 29, "QA": 29, "KW": 30,
    "JO": 30, "KZ": 20, "GE": 22, "AZ": 28, "BA": 20, "RS": 22, "ME": 22, "MK": 19, "AL": 28,
    "MD": 24, "LB": 28, "PK": 24, "PS": 29, "TN": 24, "EG": 29, "MR": 27, "DO": 28, "GT": 28,
    "CR": 22, "VG": 24, "XK": 20, "LC": 32, "SC": 31, "IQ": 23, "BY": 28, "SV": 28, "FO": 18,
    "GL": 18, "MU": 30, "TL": 23, "ST": 25, "VA": 22, "LY": 25, "SD": 18,
}  # fmt: skip


def _iban_compact(text: str) -> str:
    return _GROUP_SEPARATORS.sub("", text).upper()


def _iban(text: str) -> bool:
    compact = _iban_compact(text)
    if _IBAN_LENGTHS.get(compact[:2]) != len(compact):
        return False
    rearranged = compact[4:] + compact[:4]
    number = "".join(str(int(c, 36)) for c in rearranged)
    return int(number) % 97 == 1


def _iban_in(text: str) -> str | None:
    """The IBAN in a match: all of it, or its longest valid prefix that ends before a blank
    or a dash (in groups, and in lower case, the pattern cannot tell where the account
    number ends and the next group or word begins). Never a prefix that ends inside an
    unbroken run of letters and digits: a 32-digit hex id (a trace or run id) whose first
    20 characters are ``ba``, two digits and hex passes as a Bosnian IBAN one time in 97,
    and a replay's link to its source run was once cut that way. An IBAN written in groups
    is grouped in fours throughout (``_grouped_in_fours``): ``ad74-42da-951b-054acc9989f1``,
    the tail of a UUID, is no IBAN whatever its check digits say."""
    for end in range(len(text), 14, -1):
        candidate = text[:end]
        if candidate[-1] in _GROUP_CHARACTERS or (
            end < len(text) and text[end] not in _GROUP_CHARACTERS
        ):
            continue
        if _grouped_in_fours(candidate) and _iban(candidate):
            return candidate
    return None


def _grouped_in_fours(text: str) -> bool:
    """Unbroken, or in groups of four split by blanks or dashes (the last may be shorter)."""
    groups = _GROUP_SEPARATORS.split(text)
    return len(groups) == 1 or (
        all(len(group) == 4 for group in groups[:-1]) and 1 <= len(groups[-1]) <= 4
    )


def _ssn(text: str) -> bool:
    area, group, serial = _GROUP_SEPARATORS.split(text)
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def _phone(text: str) -> bool:
    digits = _digits(text)
    if text.lstrip().startswith("00") and text.strip().isdigit():
        # "00" and 7-13 more digits with no separator is a zero-padded id (an AWS account
        # in an ARN, an invoice number) far more often than a number dialled from abroad,
        # which is written in groups ("0044 20 7946 0958").
        return False
    if text.lstrip().startswith(("+", "00")):
        # No country code begins with 0 ("000-12-3456" is no number dialled from abroad).
        country = digits[2:] if text.lstrip().startswith("00") else digits
        return 9 <= len(digits) <= 15 and country[:1] != "0"
    # Without a country code only North American numbers are recognised, with the NANP's
    # rules (area code and exchange start with 2-9), which rejects most id-like triples.
    if len(digits) == 11 and digits[0] == "1":
        digits = digits[1:]
    return len(digits) == 10 and digits[0] in "23456789" and digits[3] in "23456789"


def _phone_canonical(text: str) -> str:
    digits = _digits(text)
    if text.lstrip().startswith("00"):
        digits = digits[2:]
    if len(digits) == 10 and not text.lstrip().startswith(("+", "00")):
        digits = "1" + digits  # a North American number written without its country code
    return digits


def value_in_text(value: str) -> str | None:
    """An unquoted value after a sensitive key runs to the end of its line ("password:
    correct horse battery staple"); a query string or a list of pairs ends it earlier, and
    trailing closers and spaces are not part of it. ``PASSWORD=x USER=y`` on one line loses
    ``USER=y`` too: a space cannot tell a second pair from a password holding "=" ."""
    cut = _NEXT_PAIR.search(value)
    if cut is not None:
        value = value[: cut.start()]
    value = value.rstrip(" \t\u00a0,;)}]>'`")
    return value if len(value) >= 3 else None


_NEXT_PAIR = re.compile(r"&[\w.-]+=|[,;]\s*[\w.-]+\s*[:=]")


def _whole(predicate: Callable[[str], bool]) -> Callable[[str], str | None]:
    return lambda value: value if predicate(value) else None


_PATH_START = re.compile(r"[~.]{0,2}/|[A-Za-z]:[\\/]|\\\\")
_DOTTED_NAME = re.compile(r"[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)+(?:\(\)?)?")
# A name in code: camelCase or snake_case words and numbers ("awsAccessKeyValue",
# "serviceAccountKeyJson2024", "SERVER_KEY_PATH"), which a generated value is not.
_IDENTIFIER = re.compile(r"(?:[A-Z]?[a-z]{2,}|[A-Z]{2,}(?![a-z])|[0-9]+|[_.:-])+")


def _generated(value: str) -> bool:
    """A value after a key that may also name a path, an id or a setting looks generated:
    16 characters or more, 8 of them different, two of lower case, upper case and digits,
    and no path ("/etc/ssl/client.key", "C:\\keys"), URL, dotted name ("com.example.app",
    "boto3.Session") or name in code ("awsAccessKeyValue")."""
    text = value.strip()
    if len(text) < 16 or len(set(text)) < 8 or "://" in text:
        return False
    base64 = "+" in text or text.endswith("=")  # ("/Ab3+Cd4..." is no path)
    if (_PATH_START.match(text) and not base64) or _DOTTED_NAME.fullmatch(text):
        return False
    if _IDENTIFIER.fullmatch(text):
        return False  # a name in code: "awsAccessKeyValue"
    kinds = (str.islower, str.isupper, str.isdigit)
    return sum(any(kind(c) for c in text) for kind in kinds) >= 2


def _signature_value(value: str) -> bool:
    """A signature or a code looks generated, percent-decoded; base64 may open with "/"
    ("sig=/Sz5…", no path: one "/" only)."""
    decoded = urllib.parse.unquote(value)
    if decoded.startswith("/") and decoded.count("/") == 1:
        decoded = decoded[1:]
    return _generated(decoded)


_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _token_value(value: str) -> bool:
    """A token key's value holds a letter; a "%" in it is an escape ("%2F"), not a format
    ("session_id=%s", "token=%08d", "%GHTOKEN%") nor a placeholder escaped ("%7B%7Btoken%7D%7D",
    "%3Ctoken%3E")."""
    if not any(c.isalpha() for c in value):
        return False
    if "%" not in value:
        return True
    if _PERCENT.search(value):
        return False
    decoded = urllib.parse.unquote(value)
    return not decoded.startswith(("{", "<", "$")) and all(c >= " " for c in decoded)


# The words a flag's name may hold before the secret's word ("--db-password", "--bind-pw").
_FLAG_FOR = (
    r"(?:db|database|admin|root|user|api|auth|access|bearer|app|master|sftp|ftp|http|https|"
    r"proxy|registry|docker|git|github|gitlab|npm|pypi|s3|aws|azure|account|service|store|"
    r"src|dest|srcstore|deststore|vault|redis|mysql|postgres|pg|smtp|mail|ldap|bind|become|"
    r"ssh|sudo|login|personal|refresh|id|session|oauth|slack|telegram|discord|openai|hf|"
    r"new|old|current|key|private|storage|hub|cloud|deploy|ci|bot|webhook|signing|encryption)"
)
# A flag's argument named in help or prose, or a type: "--token TOKEN", "--password string",
# "use the --token flag".
_NOT_A_VALUE = frozenset(
    {
        "flag", "flags", "option", "options", "argument", "arg", "parameter", "param",
        "switch", "value", "string", "str", "text", "int", "integer", "file", "path",
        "when", "and", "or", "is", "are", "with", "for", "in", "on", "of", "the", "as",
        "explicitly", "instead", "only", "too", "also", "here", "below", "above", "null",
        "none", "true", "false", "nil", "required", "optional", "must", "can", "will",
    }
)  # fmt: skip
_METAVAR = re.compile(r"[A-Z][A-Z_]*")  # TOKEN, API_KEY, PASSWORD
_PAIR_START = re.compile(r"[A-Za-z_]+=[^=]")
_FILE_NAME = re.compile(
    r"[\w.-]+\.(?:ya?ml|json|txt|pem|key|crt|cer|cfg|conf|ini|env|p12|pfx|jks|csv|log|gpg|asc|ovpn)"
    r"|id_(?:rsa|ed25519|ecdsa|dsa)(?:\.pub)?",
    re.IGNORECASE,
)


def command_secret(value: str) -> bool:
    """A flag's value is a secret given on the command line: not a template, a variable, a
    name for the argument, a file or a path, and not where a file or the environment holds
    it (openssl's "env:", "file:", az's "@file.json")."""
    text = value.strip()
    if len(text) < 3 or text.lower() in _NOT_A_VALUE or _METAVAR.fullmatch(text):
        return False
    if (
        text.startswith(("%", "@", "\\$", "#{", "env:", "file:", "fd:", "pass:$"))
        or text == "stdin"
    ):
        return False
    if "${" in text or "{{" in text or ("{" in text and text.endswith("}")):
        return False
    if _PAIR_START.match(text):
        return False  # "id=npm,src=...": BuildKit's --secret names a file, no secret
    return _PATH_START.match(text) is None and _FILE_NAME.fullmatch(text) is None


# A long flag that takes a secret (cli_password's, and an argument list's in the walk).
_SECRET_FLAG_NAME = (
    rf"--?(?i:(?:{_FLAG_FOR}[-_]?){{0,2}}(?:password|passwd|pass|pwd|pw|token|api[-_]?key|"
    r"passphrase|storepass|keypass|client[-_]?secret|secret[-_]?key|auth[-_]?key|"
    r"account[-_]?key|secret[-_]?access[-_]?key|private[-_]?key))"
)
_SECRET_FLAG = re.compile(_SECRET_FLAG_NAME)


def names_a_secret_flag(text: str) -> bool:
    """``text`` is a command's flag that takes a secret as the next argument ("--password",
    "--api-key", "--authToken"): cli_password's long flags, as an argument list has them."""
    return text[:1] == "-" and len(text) <= 48 and _SECRET_FLAG.fullmatch(text) is not None


def _session_like(value: str) -> bool:
    """A session id or an auth token, not a timestamp, a version or a name with a date
    ("2024-05-01T12:00:00Z", "4.2.0-rc1-20240501", "main-2024-dev-window1"): generated,
    with a digit; mixing cases, or else 20+ letters and digits, 4+ of each, unbroken."""
    if not _generated(value) or not any(c.isdigit() for c in value):
        return False
    if any(c.islower() for c in value) and any(c.isupper() for c in value):
        return True
    digits = sum(c.isdigit() for c in value)
    return len(value) >= 20 and value.isalnum() and digits >= 4 and len(value) - digits >= 4


def _stripe(value: str) -> str | None:
    body = value.split("_", 2)[2]
    mixed = all(any(test(c) for c in body) for test in (str.isdigit, str.isupper, str.islower))
    return value if len(body) >= 16 or mixed else None


def _card_in(text: str) -> str | None:
    """The card number in a match: all of it, or — when more digits follow a card after a
    separator ("4111 1111 1111 1111 123") and the whole fails the checks — its longest
    valid prefix that ends before a separator. Never a prefix that ends inside a run of
    digits: one 19-digit decimal id in ~17 (a Datadog trace id, a snowflake id) begins with
    13 or 16 digits that pass as a Visa card. A card written in groups begins with a group
    of four (4-4-4-4, 4-6-5): ``4.123456789012345``, a float, is no card."""
    if _card_laid_out(text) and _card(text):
        return text
    first = len(_CARD_GROUPS.split(text, maxsplit=1)[0])
    if first != 4 and not 13 <= first <= 19:
        return None  # no prefix is laid out as a card: each begins with this group
    for end in range(len(text) - 1, 12, -1):
        if text[end] not in _CARD_SEPARATORS:
            continue
        candidate = text[:end].rstrip(_CARD_SEPARATORS)
        if candidate and _card_laid_out(candidate) and _card(candidate):
            return candidate
    return None


_CARD_SEPARATORS = " .-\u00a0" + WIDE_SEPARATORS
_CARD_GROUPS = re.compile("[" + re.escape(_CARD_SEPARATORS) + "]+")


def _card_laid_out(text: str) -> bool:
    """Unbroken, or in groups whose first is four digits: what may be a card (its checks
    decide), however its other groups fall."""
    groups = _CARD_GROUPS.split(text)
    return len(groups) == 1 or len(groups[0]) == 4


def card_groups(text: str) -> list[str]:
    """The groups of digits a number is written in (split at its separators)."""
    return _CARD_GROUPS.split(text)


def card_layout(text: str) -> bool:
    """Whether ``text`` is laid out as cards are: in one piece, or in groups 4-4-4-4 (the
    last shorter, or a fifth of up to 3 after it, for 13-19 digits), 4-6-5 or 4-6-4. A
    number in other groups that fails a card's checks may hold another number after a
    blank (the redactor's ``_numbers_within``)."""
    sizes = [len(group) for group in card_groups(text)]
    if len(sizes) == 1 or sizes[0] != 4:
        return len(sizes) == 1
    if sizes[1] == 6:
        return sizes[2:] in ([5], [4])
    return (
        sizes[1:3] == [4, 4]
        and (sizes[3:] == [] or 1 <= sizes[3] <= 4)
        and len(sizes) <= 5
        and (len(sizes) < 5 or (sizes[3] == 4 and 1 <= sizes[4] <= 3))
    )


@dataclass(frozen=True)
class Detector:
    name: str
    pattern: str
    accept: Callable[[str], str | None] | None = None
    """The part of a match that is the secret (often all of it; else its start, or its end
    where the match's run began before the secret: a URL's path before a password), or None
    for a look-alike (a failed checksum, an asset name); None as the field: every match is
    a secret."""
    canonical: Callable[[str], str] | None = None
    """The form the pseudonym is keyed on, where the kind has one (a card's digits, an
    address in lower case), so every written form of one secret gets one pseudonym."""
    verify: Callable[[str], bool] | None = None
    """For a format that carries its own check (a checksum, a payload that decodes): whether
    an accepted secret passes it. A pass raises the finding's confidence (its ``Redactions``
    entry names the rule with ``VERIFIED`` appended; the pseudonym is the same); a failure
    never keeps a secret from being replaced: a token mistyped or cut short by a character
    is one character away from a working one."""


VERIFIED = "+verified"
"""Appended to a rule in a ``Redactions`` entry when the secret passed its ``verify``."""


# Character classes never include NUL: spans are scanned as NUL-joined segments, and no
# match may cross from one segment into the next.
# An "address" whose top-level domain is a file extension is an asset (logo@2x.png).
_FILE_EXTENSIONS = frozenset(
    [
        "png",
        "jpg",
        "jpeg",
        "gif",
        "webp",
        "svg",
        "ico",
        "bmp",
        "tif",
        "tiff",
        "pdf",
        "js",
        "mjs",
        "ts",
        "css",
        "map",
        "json",
        "txt",
        "md",
        "py",
        "rb",
        "go",
        "rs",
        "java",
        "kt",
        "swift",
        "php",
        "html",
        "htm",
        "xml",
        "zip",
        "gz",
        "tar",
    ]
)

_AUTH_SCHEMES = frozenset(
    {"bearer", "digest", "apikey", "negotiate", "flyv1", "sharedaccesssignature"}
)
# (The class is written from WIDE_SEPARATORS: the pattern and the checks' splits agree.)
WIDE_SEPARATOR = "[" + "".join(f"\\x{{{ord(c):04x}}}" for c in WIDE_SEPARATORS) + "]"
"""A separator beyond ASCII that may split a number's groups. The spaces typesetting puts
between digit groups: the figure space, the thin space and the narrow no-break space (French
and SI typography). The dashes: the hyphens (U+2010; U+2011, the no-break hyphen web pages
put in phone numbers), the figure dash made for digit groups, the en and em dashes a word
processor puts in, the horizontal bar, the minus sign, the small and full-width
hyphen-minus. The prefilter's shadow stands for it with the byte of any character beyond
ASCII (``prefilter.shadow_pattern``)."""
_SEP = rf"(?:[ .\x{{00a0}}-]|{WIDE_SEPARATOR})"  # inside numbers: blanks, dots, dashes
# Between the groups of an SSN or an IBAN: a blank, a dash, not a dot.
_GROUP_SEP = rf"(?:[ \x{{00a0}}-]|{WIDE_SEPARATOR})"
WIDE_LETTER = r"[^\x00-\x7F\p{P}\p{S}\p{Z}\p{C}\p{N}]"
"""A letter (or combining mark) beyond ASCII: what is neither ASCII, punctuation, a symbol,
a separator, a control character nor a digit (RE2's ``\\b`` and ``\\w`` are ASCII only). The
prefilter's shadow stands for it with one byte (``prefilter.shadow_pattern``)."""
# A quote around a key or a value, escaped when the text sits inside a JSON string.
_QUOTE = r"(?:\\?[\"'])"
# One attribute of an XML element, its value quoted.
_XML_ATTRIBUTE = r"[a-z][a-z0-9_.:-]*[ \t]*=[ \t]*\\?[\"'][^\"'<>\x00]*\\?[\"']"
# Key names (not secrets) that announce a secret value in text.
_PASSWORD_KEYS = (
    r"password|passwd|pass[_-]?phrase|pass[_-]?code|pwd|secret|api[_-]?key|apikey|"  # noqa: S105
    r"private[_-]?key|credentials?"
)
# Key names that announce a secret only as their end: ACCESS_KEY=, clientKey: (not
# SharedAccessKeyName=, an AWS access_key_id). Some also name paths ("client-key:
# ~/.minikube/client.key"), public ids ("app_key" of a Pusher app) or settings
# ("encryption_key: aes256"): their values are replaced when they look generated
# (key_value_key).
_KEY_END_KEYS = (
    r"(?:access|app|consumer|master|signing|encryption|client|license|subscription|server|"
    r"write|admin|auth|service|account)[_-]?key"
)
# An XML attribute naming a secret (key="ClearTextPassword", name="auth_token"): it ends
# with the word ("PasswordMinLength", "token_type", "max_tokens" do not).
_XML_NAME = rf"(?:[a-z0-9_.:-]*?(?:{_PASSWORD_KEYS}|token|{_KEY_END_KEYS}))"
_TOKEN_KEYS = r"(?:access|auth|refresh|id|session|bearer|csrf)?[_-]?token|session[_-]?id|sessid|sid"  # noqa: S105

DETECTORS: tuple[Detector, ...] = (
    # A key cut off before its END line (an attribute length limit, a tool's output cut
    # short: "... [output truncated]", "…", a closing quote) is still a key: without its END
    # line the match runs over its body's characters as far as they go.
    Detector(
        "pem_private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[A-Za-z0-9+/=\s\\:,()-]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"|[A-Za-z0-9+/=\s\\:,()-]*)",
    ),
    Detector("anthropic_key", r"\bsk-ant-[A-Za-z0-9_-]{20,}"),
    Detector("openai_key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    # Key ids are 20 characters; one a character short or long is still one.
    # AKIA long-term, ASIA temporary, ABIA/ACCA (STS service bearer, context), A3T legacy
    # (gl aws-access-token).
    Detector("aws_access_key", r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[0-9A-Z]{15,17}\b"),
    Detector("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
    Detector("slack_token", r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    # Secret and restricted keys, live, test or prod (gl stripe-access-token); from 10
    # characters, below 16 only when they mix cases and digits (not "sk_test_XXXXXXXXXX").
    Detector("stripe_key", r"\b(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{10,}", _stripe),
    Detector("google_api_key", r"\bAIza[0-9A-Za-z_-]{33,39}"),  # 39 characters, give or take
    # Its header and payload JSON, base64url: "{"" is eyJ, "{\n" (pretty-printed) ewo.
    Detector(
        "jwt", r"\b(?:eyJ|ewo)[A-Za-z0-9_-]{8,}\.(?:eyJ|ewo)[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
    ),
    # Whitespace may arrive JSON-escaped (\n, \t) inside a raw JSON string.
    Detector(
        "bearer_token",
        r"(?i:\bbearer)(?:\s|\x{00a0}|\\[nrt])+(?P<bearer_token__value>[A-Za-z0-9._~+/=-]{16,})",
    ),
    # "Authorization: Basic …", "Cookie: a=b; c=d", as in curl commands and header dumps.
    Detector(
        "authorization_header",
        rf"(?i:\b(?:proxy-)?authorization){_QUOTE}?\s*[:=]\s*{_QUOTE}?"
        # Any scheme word (Basic, Bearer, SSWS, FlyV1, SharedAccessSignature...), then the
        # credential, which is what is replaced.
        r"(?:[A-Za-z][A-Za-z0-9_.-]{1,40}(?:\s|\\[nrt])+)?"
        r"(?P<authorization_header__value>[A-Za-z0-9._~+/=:%&,-]{6,})",
        # The scheme word alone is no credential: "Bearer <secret:…>" is one already replaced.
        _whole(lambda value: value.lower() not in _AUTH_SCHEMES),
    ),
    # The value never starts with a space: "Cookie: <secret:…>" (stored, sent back in by a
    # replay) would otherwise match from the space, and lose it to a second pseudonym.
    Detector(
        "cookie_header",
        rf"(?i:\b(?:set-)?cookie){_QUOTE}?\s*[:=]\s*{_QUOTE}?(?P<cookie_header__value>[^\s\"'\\<\x00][^\r\n\"'\\\x00]{{5,}})",
    ),
    Detector(
        "url_credentials",
        r"\b[a-zA-Z][a-zA-Z0-9+.-]*:(?://|\\/\\/)"
        r"(?P<url_credentials__value>(?:[^\s/:@\"'\\<\x00][^\s/:\"'\\\x00]*)?:[^\s/@\"'\\<\x00][^\s/@\"'\\\x00]*)@",
    ),
    # curl -u user:password, --user=user:password: the pair, as in a URL (the user may be an
    # e-mail address, which a narrower match would hide from the e-mail rule); the flag
    # starts a value or follows anything but a word (a blank, a quote, CURL_ARGS=-u x:y).
    Detector(
        "cli_credentials",
        # (not "-u http://app": a URL's "//" is no password)
        r"(?:^|[^A-Za-z0-9_-])(?:-u|--user)[= ]+['\"]?(?P<cli_credentials__value>[^\s:'\"<\x00][^\s:'\"\x00]*:"
        r"(?:[^\s'\"</\x00][^\s'\"\x00]{2,}|/[^\s'\"</\x00][^\s'\"\x00]+))",
    ),
    # A password or token given to a command (a coding agent's shell, a runbook): a long
    # flag named for one and its value after a blank or in an argument list ("--password
    # hunter2", "--api-key k3y", '"--authToken", "k3y"'; after "=", key_value_secret's),
    # the commands whose short flag or argument takes one ("mysql -pS3cret", "sshpass -p
    # pw", "docker login -u bob -p pw", "redis-cli -a pw", "sqlcmd -P pw", "ldapsearch -w
    # pw", "zip -P pw", "7z -ppw", openssl's "-passin pass:pw", "htpasswd -b f user pw",
    # "aws configure set aws_secret_access_key k", "sqlplus scott/tiger@db",
    # ConvertTo-SecureString 'pw') and a .netrc entry. A flag's name is the word, or the
    # word after one or two words that name what it is for ("--db-password", "--bind-pw":
    # not "--ask-become-pass", "--disabled-password", "--pad-token", "--starting-token").
    # Not a variable or a placeholder ("$PW", "{token}", "TOKEN", "<password>"), the next
    # flag, a file ("--private-key key.pem"), nor where a file or the environment holds it.
    Detector(
        "cli_password",
        r"(?:^|[\s'\"`(;&|\x00])(?:"
        # (sqlplus user/password@db: to the "@")
        r"sqlplus[ \t]+(?:-[A-Za-z]+[ \t]+)*[A-Za-z0-9_$#]+/"
        r"(?P<cli_password__value5>[^\s'\"<$@/\x00][^\s'\"@\x00]*)|(?:"
        r"-pass(?:in|out)?[ \t]+pass:"
        rf"|{_SECRET_FLAG_NAME}"
        r"(?:[ \t]+|['\"][ \t]*,[ \t]*)"
        r"|(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mysqlshow|mariadb|mariadb-dump)"
        r"[ \t](?:[^\r\n\x00|;&]*?[ \t])?-p"
        r"|sshpass[ \t]+-p[ \t]*"
        r"|(?:(?:docker|podman|nerdctl|buildah|skopeo|oras|crane|az)[ \t]+login|helm[ \t]+registry"
        r"[ \t]+login)[ \t](?:[^\r\n\x00|;&]*?[ \t])?(?:-p|--password)[ \t]+"
        r"|cargo[ \t]+login[ \t]+"
        r"|redis-cli[ \t](?:[^\r\n\x00|;&]*?[ \t])?-a[ \t]+"
        r"|(?:sqlcmd|bcp)[ \t](?:[^\r\n\x00|;&]*?[ \t])?-P[ \t]*"
        r"|ldap[a-z]+[ \t](?:[^\r\n\x00|;&]*?[ \t])?-w[ \t]+"
        r"|(?:zip|unzip)[ \t](?:[^\r\n\x00|;&]*?[ \t])?-P[ \t]+"
        r"|7za?[ \t](?:[^\r\n\x00|;&]*?[ \t])?-p"
        r"|ssh-keygen[ \t](?:[^\r\n\x00|;&]*?[ \t])?-[PN][ \t]+"
        r"|htpasswd[ \t]+-[A-Za-z]*b[A-Za-z]*[ \t]+[^\s\x00]+[ \t]+[^\s\x00]+[ \t]+"
        r"|doctl[ \t]+auth[ \t]+init[ \t](?:[^\r\n\x00|;&]*?[ \t])?-t[ \t]+"
        r"|gh[ \t]+secret[ \t]+set[ \t](?:[^\r\n\x00|;&]*?[ \t])?(?:-b|--body)[ \t]+"
        r"|aws[ \t]+configure[ \t]+set[ \t]+(?:[a-z0-9_-]+\.)?(?:aws_secret_access_key|"
        r"aws_session_token)[ \t]+"
        r"|ConvertTo-SecureString[ \t]+(?:-String[ \t]+)?"
        r"|machine[ \t]+[^\s\x00]+\s+login\s+[^\s\x00]+\s+password[ \t]+"
        r")(?:'(?P<cli_password__value>[^'<$\x00][^'\x00]*)'|"
        r"\"(?P<cli_password__value2>[^\"<$\x00][^\"\x00]*)\"|"
        # (quoted inside a JSON string: a shell's command in a tool call's arguments)
        r"\\\"(?P<cli_password__value4>[^\"\\<$\x00][^\"\\\x00]*)\\\"|"
        r"(?P<cli_password__value3>[^\s'\"<$(\[{`\\\x00-][^\s'\"\x00;&|)`,]*)))",
        _whole(command_secret),
    ),
    # "password: x", "DB_PASSWORD=x", "'api_key': 'x'", '"secret":"x"', "pwd=x&" in text,
    # logs, env dumps, reprs, query strings, YAML or broken JSON; the whole value is replaced:
    # to the closing quote, to the end of a PEM block or of an indented YAML block scalar,
    # or else to the end of the line (``__free``: trimmed by ``value_in_text``). Values
    # already pseudonymized (<...>) stay.
    Detector(
        "key_value_secret",
        rf"(?i)\b[a-z0-9._-]*?(?:{_PASSWORD_KEYS})[a-z0-9_-]*{_QUOTE}?[ \t]*[:=][ \t]*"
        r"(?:\"(?P<key_value_secret__value>[^\"<\x00][^\"\x00]*)\"|"
        r"'(?P<key_value_secret__value2>[^'<\x00][^'\x00]*)'|"
        # Quoted inside a JSON string (a shell's output in a tool result): to the \" that
        # closes it, escapes (\n, \\) included.
        r"\\\"(?P<key_value_secret__value4>(?:[^\"\\<\x00]|\\[^\"\x00])(?:[^\"\\\x00]|\\[^\"\x00])*)\\\"|"
        r"(?P<key_value_secret__value3>-----BEGIN [A-Z0-9 ]{0,64}-----[^\x00]*?(?:-----END [A-Z0-9 ]{0,64}-----|$))|"
        r"(?P<key_value_secret__block>[|>][-+]?[ \t]*(?:\r?\n[ \t]+[^\r\n\x00]*)+)|"
        # The unquoted value stops where the next pair on its line begins (", token=",
        # "&sig="), lazily: a match that ran to the end of the line, cut afterwards, made a
        # line of many pairs cost its length for each (quadratic).
        r"(?P<key_value_secret__free>[^\s\"',;&}\]<\x00][^\r\n\"<\x00]{2,}?)"
        r"(?:[,;][ \t]*[\w.-]+[ \t]*[:=]|&[\w.-]+=|[\r\n\"<\x00]|$))",
    ),
    # "ACCESS_KEY=…", "clientKey: …", "FCM_SERVER_KEY=…": a value that looks generated
    # (_generated: not a path, a dotted name or a word); one token, a blank ends it.
    Detector(
        "key_value_key",
        rf"(?i)\b[a-z0-9._-]*?{_KEY_END_KEYS}{_QUOTE}?[ \t]*[:=][ \t]*"
        r"(?:\"(?P<key_value_key__value>[^\"<\x00]+)\"|'(?P<key_value_key__value2>[^'<\x00]+)'|"
        r"\\\"(?P<key_value_key__value4>[^\"\\<\x00]+)\\\"|"
        r"(?P<key_value_key__value3>[^\s\"',;&(){}\[\]$<\x00]+))",
        lambda value: value if _generated(value) else None,
    ),
    # Token-like keys ("access_token=…", "JSESSIONID=…"); "max_tokens: 512" is not one (the
    # value must hold a letter).
    Detector(
        "key_value_token",
        rf"(?i)\b[a-z0-9._-]*?(?:{_TOKEN_KEYS}){_QUOTE}?\s*[:=]\s*{_QUOTE}?"
        # A ":" inside: "<bot id>:<secret>" (Telegram), "<client id>:<secret>".
        # Percent-encoded in a query string ("X-Amz-Security-Token=IQoJ...%2F%2F...").
        r"(?P<key_value_token__value>[A-Za-z0-9._~+/=%-][A-Za-z0-9._~+/=:%-]{7,})",
        _whole(_token_value),
    ),
    # A signed URL's signature and an OAuth redirect's code, as query parameters: the URL
    # grants what its signer or the user did until it expires (S3's and GCS's presigned
    # URLs, CloudFront's, Azure's sig= outside a SAS, an Azure Function's code=). The rest
    # of the URL stays. A value that looks generated (not "code=US", "code=print_hello").
    Detector(
        "url_signature",
        r"(?i:(?:^|[?&#;\x00]|&amp;)(?:x-amz-signature|x-goog-signature|signature|sig|code)=)"
        r"(?P<url_signature__value>[A-Za-z0-9._~+/=%-]{16,})",
        _whole(_signature_value),
    ),
    # "session=<id>", "x_auth: <token>" (as attribute keys, _KEY_ENDS): "session" and "auth"
    # are words and variables too ("auth: required", "session = boto3.Session()"), so the
    # value must look generated and hold a digit.
    Detector(
        "key_value_session",
        rf"(?i)\b(?:[a-z0-9.-]*_)?(?:session|auth){_QUOTE}?[ \t]*[:=][ \t]*{_QUOTE}?"
        r"(?P<key_value_session__value>[A-Za-z0-9._~+/=%-][A-Za-z0-9._~+/=:%-]{7,})",
        lambda value: value if _session_like(value) else None,
    ),
    # A PIN, a one-time code, a card's security code: "card_pin=4921", "OTP: 482913", "cvv:
    # 123" (as attribute keys: "pin", "otp", "cvv" are sensitive). Digits only: "otp:
    # enabled". Not a bare "pin": in a config it is a pin number ("- pin: 1022", GPIO).
    Detector(
        "key_value_code",
        rf"(?i)\b(?:[a-z0-9.-]*[_.-])?(?:otp|cvv2?|cvc|passcode|(?:card|atm|user|account)[_ -]?pin|"
        rf"pin[_ -]?(?:code|number)|(?:verification|security|one[_ -]?time|otp|auth|2fa|mfa)"
        rf"[_ -]?code){_QUOTE}?[ \t]*[:=][ \t]*{_QUOTE}?"
        r"(?P<key_value_code__value>[0-9]{3,8})\b",
    ),
    # <password>…</password>, <apiKey>…</apiKey>; <accessToken>…</accessToken> (a token holds a
    # letter: <max_tokens>512</max_tokens> is a count).
    Detector(
        "xml_secret",
        rf"<(?i:[a-z0-9_.:-]*?(?:{_PASSWORD_KEYS})[a-z0-9_.-]*)(?:[ \t][^>\x00]*)?>"
        r"\s*(?P<xml_secret__value>[^<\s\x00][^<\x00]*)<",
    ),
    # A name and its value as two attributes of one element: .NET's <add key="ApiKey"
    # value="..."/> (appSettings, NuGet's ClearTextPassword: gl nuget-config-password),
    # <param name="password" value="..."/>, <entry key=... value=...>.
    Detector(
        "xml_attribute_secret",
        rf"(?i:\b(?:key|name)[ \t]*=[ \t]*{_QUOTE}{_XML_NAME}{_QUOTE}"
        # the value, maybe after other attributes (xdt:Transform="Replace" xdt:Locator=...).
        # Not the value first, nor the element's text: <input value="Reset"
        # name="reset_password">, Android's <string name="prompt_password">Password</string>.
        rf"(?:[ \t\r\n]+{_XML_ATTRIBUTE}){{0,2}}[ \t\r\n]+value[ \t]*=[ \t]*)"
        r"(?:\\?\"(?P<xml_attribute_secret__value>[^\"\\<\x00]+)\\?\"|"
        r"'(?P<xml_attribute_secret__value2>[^'<\x00]+)')",
    ),
    Detector(
        "xml_token",
        rf"<(?i:[a-z0-9_.:-]*?(?:{_TOKEN_KEYS})[a-z0-9_.-]*)(?:[ \t][^>\x00]*)?>"
        r"\s*(?P<xml_token__value>[^<\s\x00][^<\x00]*)<",
        _whole(lambda value: any(c.isalpha() for c in value)),
    ),
    # Addresses of any script (RFC 6531: jürgen.müller@firma.de, josé@empresa.es,
    # 张伟@example.com, user@bücher.de): a letter beyond ASCII is part of the address, and
    # so is an apostrophe after its first character (o'brien@example.com).
    Detector(
        "email",
        rf"(?:\b[A-Za-z0-9._%+-]|{WIDE_LETTER})(?:[A-Za-z0-9._%+'-]|{WIDE_LETTER})*"
        rf"@(?:[A-Za-z0-9-]|{WIDE_LETTER})+(?:\.(?:[A-Za-z0-9-]|{WIDE_LETTER})+)*"
        rf"\.(?:[A-Za-z]{{2,}}\b|[A-Za-z]*{WIDE_LETTER}(?:[A-Za-z]|{WIDE_LETTER})*)",
        _whole(lambda value: value.rsplit(".", 1)[-1].lower() not in _FILE_EXTENSIONS),
        str.lower,
    ),
    Detector(
        "us_ssn",
        rf"\b\d{{3}}{_GROUP_SEP}\d{{2}}{_GROUP_SEP}\d{{4}}\b",
        _whole(_ssn),
        _digits,
    ),
    Detector("credit_card", rf"\b\d(?:{_SEP}?\d){{12,18}}\b", _card_in, _digits),
    Detector(
        "iban",
        rf"\b(?i:[A-Z]{{2}}\d{{2}}(?:{_GROUP_SEP}?[A-Z0-9]{{4}}){{2,7}}"
        rf"(?:{_GROUP_SEP}?[A-Z0-9]{{1,4}})?)\b",
        _iban_in,
        _iban_compact,
    ),
    Detector(
        "phone",
        rf"(?:\+\d{{1,3}}{_SEP}?)?\(?\b\d{{3}}\)?{_SEP}?\d{{3}}{_SEP}\d{{4}}\b"
        rf"|(?:\+|\b00)\d{{1,3}}(?:{_SEP}?\(?0?\)?{_SEP}?\d{{1,4}}){{2,6}}\b",
        _whole(_phone),
        _phone_canonical,
    ),
)


# Keys whose value is replaced whatever it looks like (attribute keys and JSON object keys),
# defined once for ``is_sensitive_key`` and for the scan that selects JSON holding such a key
# (``key_hints``). Each is a pattern over the key in lower case; ``{sep}`` is where a
# compound may be split by one separator ("pass word", "api-key", "apiKey" read as api_key).
_KEY_PARTS = (
    "pass{sep}w(?:or)?d", "pass{sep}phrase", "pass{sep}code", "secret", "api{sep}key",
    "private{sep}key", "access{sep}key", "authorization", "cookie", "credential",
    "card{sep}number", "cvv", "cvc", "ssn",
)  # fmt: skip
"""Sensitive wherever they are in the key; the three-letter ones as a word of it
(``_short_word``): three letters occur inside other words and generated ids."""
_SHORT_KEY_PARTS = frozenset({"cvv", "cvc", "ssn"})
_KEY_ENDS = (
    "token", "auth", "session", "session{sep}id", "sessid", "pwd", "pin", "otp", "sid",
    "(?:master|signing|encryption|license|subscription){sep}key",
)  # fmt: skip
"""Sensitive as the end of the key's last dotted part: the whole of it or after ``_``
(``auth``, ``x_pin``), and ``token``, ``sessid`` and ``sessionid`` after anything
(``csrftoken``, ``PHPSESSID``); ``input_tokens`` counts tokens."""
# Keys whose value is replaced when it looks generated (``generated_value``): they also
# name public ids and paths ("app_key" of a Pusher app, kubeconfig's "client-key"). The
# same names as key_value_key's in text.
_GENERATED_KEY_ENDS = (
    "(?:app|consumer|client|server|write|admin|auth|service|account){sep}key",
)  # fmt: skip
_KEY_SEPARATOR = "[ \\t\\n\\r\\f\\v_.]?"  # in the key normalized: "-" is "_" there
_SENSITIVE_KEY_PARTS = re.compile(
    "|".join(w.format(sep=_KEY_SEPARATOR) for w in _KEY_PARTS if w not in _SHORT_KEY_PARTS)
)
_SENSITIVE_KEY_WHOLE = re.compile(
    "(?:.*_)?(?:{})|.*(?:token|sessid|sessionid)".format(
        "|".join(w.format(sep="_?") for w in _KEY_ENDS if w != "sessid")
    )
)


def _short_word(word: str) -> str:
    """``word`` as a word of a key as written, not three letters inside another word or a
    generated id ("classname", "call_G5YCD4Q09zKRQ7CVvJ0X5Eiq"): in lower case after no
    letter, in title or upper case after no capital (``cardCvv``, ``customerSSN``), and
    before no lower-case letter (``cvvCode``, ``SSNLast4``, ``cvv2``)."""
    low, title, up = word, word.capitalize(), word.upper()
    return (
        f"(?<![A-Za-z]){low}(?![a-z])|(?<![A-Z]){title}(?![a-z])"
        f"|(?<![A-Z]){up}(?![a-z]|[A-Z](?![a-z]))"
    )


_SENSITIVE_KEY_WORDS = re.compile("|".join(_short_word(w) for w in sorted(_SHORT_KEY_PARTS)))
# A key as a JSON document holds it: one separator may be escaped (``\\n``, and ``_escape_view``
# shows that as two characters, three inside a JSON string); case is folded by the caller.
_HINT_SEPARATOR = '[^"\\x00]{0,3}'


def key_hints(extra: tuple[str, ...] = ()) -> tuple[str, str]:
    """(anywhere, at the end): two RE2 alternations, to be matched without case, such that
    every key ``is_sensitive_key`` accepts, as written in JSON text, holds a match of the
    first or ends with a match of the second (a superset: they select JSON for a closer
    look). A key holding a pseudonym or an escape (``\\u0041``) is selected by the scan's
    other patterns."""
    anywhere = [w.format(sep=_HINT_SEPARATOR) for w in _KEY_PARTS]
    anywhere += [_HINT_SEPARATOR.join(re.escape(p) for p in name.split("_")) for name in extra]
    ends = [w.format(sep="[_-]?") for w in (*_KEY_ENDS, *_GENERATED_KEY_ENDS)]
    return "|".join(anywhere), "|".join(ends)


@dataclass(frozen=True)
class RedactionConfig:
    """What the redactor does; defaults on. Loaded from a TOML file (``redaction.py``)."""

    disabled_rules: frozenset[str] = frozenset()
    allow_values: frozenset[str] = frozenset()
    """Exact values never redacted (e.g. the support address the agent is meant to give)."""
    allow_keys: frozenset[str] = frozenset()
    """Attribute or JSON keys whose values are never redacted."""
    extra_key_names: tuple[str, ...] = ()
    """More key names (lower case, ``_`` for ``-``) whose values are always replaced."""
    extra_detectors: tuple[Detector, ...] = field(default_factory=tuple)
    max_depth: int = 64
    max_scan_bytes: int = 64 * 1024 * 1024


def _normal_key(key: str) -> str:
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key)
    return snake.lower().replace("-", "_")


_GENERATED_KEY_WHOLE = re.compile(
    "(?:.*_)?(?:{})".format("|".join(w.format(sep="_?") for w in _GENERATED_KEY_ENDS))
)


@lru_cache(maxsize=65_536)
def names_a_generated_key(key: str) -> bool:
    """``client_key``, ``serverKey``, ``FCM_SERVER_KEY``: a key whose value is replaced when
    it looks generated (``generated_value``), as in text (key_value_key)."""
    return bool(_GENERATED_KEY_WHOLE.fullmatch(_normal_key(key).rsplit(".", 1)[-1]))


def generated_value(value: str) -> bool:
    """Whether ``value`` looks generated (``_generated``)."""
    return _generated(value)


@lru_cache(maxsize=65_536)
def is_sensitive_key(key: str, extra: tuple[str, ...] = ()) -> bool:
    """``password``, ``db.password.value``, ``clientSecret``, ``x-api-key`` are; token
    counts (``gen_ai.usage.input_tokens``) are not."""
    full = _normal_key(key)  # "passWord", "Pass word", "user.Password"
    last = full.rsplit(".", 1)[-1]
    if last.endswith("tokens") or last.endswith("token_count"):
        return False  # token counts, not tokens
    return bool(
        _SENSITIVE_KEY_PARTS.search(full)
        or _SENSITIVE_KEY_WORDS.search(key)
        or _SENSITIVE_KEY_WHOLE.fullmatch(last)
        or last in extra
        or full in extra
    )
