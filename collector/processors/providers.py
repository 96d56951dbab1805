"""Provider credential detectors: one per service whose tokens have a documented shape.

Each detector is a named group of the redactor's single RE2 alternation, run on UTF-8
bytes of NUL-joined segments (see ``rules.py``). A pattern pins what the provider
documents — a literal prefix, a length, an alphabet — and ``accept`` checks what a regular
expression cannot: for random bodies an entropy floor (``looks_random``), so that
placeholders and prose stay as they are.

Where the prefix alone marks a credential (``ghp_``, ``npm_``, ``glpat-``, ``ATATT3xFfG``,
``glsa_``, ``AGE-SECRET-KEY-1``, ``hf_``...), a token is found by its shape, as gitleaks
and TruffleHog find it: its length is a window, from two characters short (for a format
ending in a checksum, down to the random part alone, from which the checksum is computed)
to four long, so a token mistyped, cut short or run on by a character — one character
from a working one — is replaced too. The format's own check is the detector's
``verify``, which raises a finding's confidence and never decides whether it is replaced:
a checksum (GitHub and npm: CRC32 in base62; GitLab routable tokens: CRC32 in base36;
Grafana, Atlassian and Bitbucket: CRC32 in hex; age: Bech32) or a payload that decodes
(the JSON inside Grafana, Sentry, 1Password, Mapbox and GitHub's JWT-shaped tokens, the
base64 of Artifactory's reference tokens, Groq's marker). Where the shape is generic — no
prefix, or one as common as ``secret_``, ``AC``/``SK``, ``sk_`` or ``key-`` — lengths
stay exact (or narrow) and the check still decides: Discord's base64 user id, Azure's
storage key size. A marker inside a token marks it as a prefix does (New Relic's
``FFFFNRAL`` suffix, Microsoft's ``JQQJ9`` signature, Telegram's ``:AA``): there the
random part's length is a window too.

Providers whose keys carry no prefix (Datadog, Cloudflare's pre-2026 tokens, Mistral,
Cohere, Okta, Azure account keys...) are only recognised after a keyword naming them, as
gitleaks does, and only the value after the keyword is replaced (``<rule>__value``).

Sources, noted per detector: gitleaks ``config/gitleaks.toml`` (gl), trufflehog
``pkg/detectors/<name>`` (th), CredSweeper ``credsweeper/rules/config.yaml`` (cs), and
the provider's own code or documentation where it publishes the format.

Order: put ``PROVIDER_DETECTORS`` before ``rules.DETECTORS`` (dropping ``REPLACED_RULES``).
At one start position the first alternative wins, and a match that ``accept`` rejects
still consumes its span: the case-insensitive IBAN rule matches, then rejects,
"GR1348941..." runner tokens, a third of Twilio SIDs ("AC12...") and some hex Mailchimp
and Mailgun keys, which would then never be seen. The reverse holds too, so patterns
here keep a floor near the documented length (``hf_[A-Za-z0-9]{32,38}``, not
``hf_[A-Za-z0-9]+``): a looser one would match and reject ``hf_token`` or
``ghp_PersonalBotAccessToken``, hiding the ``key=value`` after them from the rules that
redact it.

Cost: in one alternation with rules.DETECTORS these ~80 patterns need RE2's DFA budget
raised (redact.py sets max_mem) and roughly halve the warm scan rate; each new random
token also costs its DFA states (~1-2 ms the first time a state sequence is seen). A
window has a ceiling, not only a floor: with some fifty long counts open-ended
(``{32,}``), the DFA outgrew that budget on text dense with tokens and ran at a fifth of
its warm rate; closed (``{32,38}``) it costs what the exact lengths did.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import struct
import zlib
from collections import Counter
from collections.abc import Callable
from itertools import pairwise

from collector.processors.rules import Detector

__all__ = [
    "PROVIDER_DETECTORS",
    "REPLACED_RULES",
    "base36_crc32",
    "base62_crc32",
    "bech32_valid",
    "looks_random",
    "shannon_entropy",
]

# rules.DETECTORS entries that PROVIDER_DETECTORS supersedes under the same names: drop
# those when combining, or the alternation has duplicate group names.
REPLACED_RULES = frozenset({"github_token", "slack_token"})

Accept = Callable[[str], str | None]

_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_BECH32_GENERATOR = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)
_HEX = frozenset("0123456789abcdef")
_UPPER_HEX = frozenset("0123456789ABCDEF")


# --- checks ------------------------------------------------------------------------------
def _encode(number: int, alphabet: str, width: int) -> str:
    digits = ""
    while number:
        number, rest = divmod(number, len(alphabet))
        digits = alphabet[rest] + digits
    return digits.rjust(width, alphabet[0])


def base62_crc32(text: str) -> str:
    """GitHub's (and npm's) checksum: CRC32 of the random part as 6 base62 digits."""
    return _encode(zlib.crc32(text.encode()), _BASE62, 6)


def base36_crc32(text: str) -> str:
    """GitLab's routable-token checksum: CRC32 of all before it as 7 base36 digits."""
    return _encode(zlib.crc32(text.encode()), _BASE36, 7)


def bech32_valid(text: str) -> bool:
    """A Bech32 string (BIP 173, as age keys are) whose checksum verifies."""
    hrp, _, data = text.lower().rpartition("1")
    if not hrp or len(data) < 6 or any(c not in _BECH32 for c in data):
        return False
    values = [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]
    checksum = 1
    for value in values + [_BECH32.index(c) for c in data]:
        top = checksum >> 25
        checksum = (checksum & 0x1FFFFFF) << 5 ^ value
        for bit, constant in enumerate(_BECH32_GENERATOR):
            if (top >> bit) & 1:
                checksum ^= constant
    return checksum == 1


def shannon_entropy(text: str) -> float:
    length = len(text)
    return -sum(n / length * math.log2(n / length) for n in Counter(text).values())


def looks_random(text: str, alphabet_size: int = 62) -> bool:
    """Random enough for a generated secret: not a placeholder (``xxxx``, ``0000``), a
    run (``abcdef``, ``123456``) or a repeated block (``abcdabcd``). A uniformly random
    string of the same length and alphabet fails only astronomically rarely."""
    length = len(text)
    if length < 8:
        return True
    if shannon_entropy(text) < 0.5 * math.log2(min(length, alphabet_size)):
        return False
    steps = [ord(b) - ord(a) for a, b in pairwise(text)]
    if 2 * max(steps.count(1), steps.count(-1), steps.count(0)) > len(steps):
        return False
    # A block repeated: twice at least (with a longer period a random text's head and tail
    # agree by chance: 1 in 16 of nine hex characters against a period of 8).
    periods = range(1, min(9, length // 2 + 1))
    return not any(text == (text[:period] * length)[:length] for period in periods)


def _classes(text: str) -> int:
    """How many of lower case, upper case and digits ``text`` holds."""
    return sum(
        (
            any(c.islower() for c in text),
            any(c.isupper() for c in text),
            any(c.isdigit() for c in text),
        )
    )


def _mixes(text: str, classes: int) -> bool:
    """Whether ``text`` mixes ``classes`` of lower case, upper case and digits. Three is met
    by both cases without a digit too where ``text`` reads as no name (``_a_name``): a random
    base62 body of 24 characters holds no digit 1 time in 66 (of 32, 1 in 280; of 48 in
    base64url, 1 in 3,500), and a token whose prefix marks it is redacted by its shape, not
    by luck; what the digit kept out, a name in both cases (``SG.com.example.Class``), is
    still kept out."""
    found = _classes(text)
    if classes < 3 or found >= 3:
        return found >= classes
    return any(c.islower() for c in text) and any(c.isupper() for c in text) and not _a_name(text)


def _b64decode(text: str) -> bytes:
    """Standard or URL-safe base64, padded or not; raises ``binascii.Error``."""
    cleaned = text.rstrip("=").replace("-", "+").replace("_", "/")
    return base64.b64decode(cleaned + "=" * (-len(cleaned) % 4), validate=True)


def _json_object(text: str, *keys: str) -> bool:
    """Base64 text that decodes to a JSON object holding ``keys``."""
    try:
        document = json.loads(_b64decode(text))
    except (ValueError, binascii.Error):
        return False
    return isinstance(document, dict) and all(key in document for key in keys)


def _random_part(part: Callable[[str], str], alphabet_size: int = 62, classes: int = 1) -> Accept:
    """Accept a value when ``part(value)`` looks generated (and mixes ``classes``)."""

    def accept(value: str) -> str | None:
        body = part(value)
        return value if looks_random(body, alphabet_size) and _mixes(body, classes) else None

    return accept


def _tail(length: int, alphabet_size: int = 62, classes: int = 1) -> Accept:
    """The last ``length`` characters look generated."""
    return _random_part(lambda value: value[-length:], alphabet_size, classes)


def _after(prefix_length: int, alphabet_size: int = 62, classes: int = 1) -> Accept:
    """What follows a ``prefix_length``-character prefix looks generated."""
    return _random_part(lambda value: value[prefix_length:], alphabet_size, classes)


def _last_field(separator: str, alphabet_size: int = 62, classes: int = 1) -> Accept:
    """The part after the last ``separator`` looks generated."""
    return _random_part(lambda value: value.rsplit(separator, 1)[-1], alphabet_size, classes)


# --- per-format validators -----------------------------------------------------------
# For a prefix that alone marks a credential, ``accept`` turns away only placeholders and
# prose, and the format's own check (a checksum, a payload that decodes) is the detector's
# ``verify``: it raises a finding's confidence, never decides whether it is replaced.
def _crc62_ok(body: str) -> bool:
    """<30 random base62><their CRC32 in 6 base62 digits> (GitHub, npm)."""
    return len(body) == 36 and base62_crc32(body[:30]) == body[30:]


def _github(value: str) -> str | None:
    if value.startswith("github_pat_"):
        # github_pat_<22>_<59>: no published checksum; both parts must look generated.
        first, _, second = value[11:].partition("_")
        return value if looks_random(first) and looks_random(second) else None
    if "_eyJ" in value:  # ghs_<app id>_<JWT>: the classic body holds no "_"
        return value if looks_random(value.split("_", 2)[2], 64) else None
    body = value[4:]
    return value if looks_random(body) and _classes(body) >= 2 else None


def _github_verified(value: str) -> bool:
    if value.startswith("github_pat_"):
        return False  # no published checksum
    if "_eyJ" in value:  # a stateless installation token: its JWT header decodes
        return _json_object(value.split("_", 2)[2].split(".", 1)[0], "alg")
    return _crc62_ok(value[4:])


def _gitlab(value: str) -> str | None:
    if value.startswith("GR1348941"):
        body = value[9:]
        return value if looks_random(body, 64) and _classes(body) >= 2 else None
    prefix, _, rest = value.partition("-")
    if prefix == "glptt":
        return value if looks_random(rest, 16) else None
    body = rest.split(".", 1)[0]  # a routable token's payload, before its version
    return value if looks_random(body, 64) and _classes(body) >= 2 else None


def _gitlab_verified(value: str) -> bool:
    # Routable: <prefix>-<base64 payload>.<version>.<payload length, 2 base36><CRC32 of
    # all before it, 7 base36>. The others carry no check.
    parts = value.partition("-")[2].rsplit(".", 2)
    if len(parts) != 3 or len(parts[2]) != 9:
        return False
    payload, _version, tail = parts
    return int(tail[:2], 36) == len(payload) and base36_crc32(value[:-7]) == tail[2:]


def _unescaped(value: str) -> str:
    """An Atlassian token with its "=" as sent in JSON (``\\=``) or a URL (``%3D``)."""
    return value.replace("\\=", "=").replace("%3D", "=").replace("%3d", "=")


def _atlassian(value: str) -> str | None:
    body = value[4:] if value.startswith("ATBB") else _unescaped(value)[10:].split("=", 1)[0]
    return value if looks_random(body, 64) and _classes(body) >= 2 else None


def _atlassian_verified(value: str) -> bool:
    # <token><CRC32 of all before it, 8 upper-case hex>: ATBB<24><8>, ATATT3xFfG...=<8>.
    plain = _unescaped(value)
    head, checksum = plain[:-8], plain[-8:]
    shaped = len(plain) == 36 if plain.startswith("ATBB") else head.endswith("=")
    if not shaped or not set(checksum) <= _UPPER_HEX:
        return False
    return zlib.crc32(head.encode()) == int(checksum, 16)


def _grafana(value: str) -> str | None:
    if value.startswith("glsa_"):
        body = value[5:].split("_", 1)[0]
        return value if looks_random(body) and _classes(body) >= 2 else None
    if value.startswith("glc_"):
        # Base64 JSON, or any base64 mixing cases and digits (not a placeholder of words).
        body = value[4:]
        mixed = body.startswith("eyJ") or _mixes(body, 3)
        return value if looks_random(body, 64) and mixed else None
    # Legacy: eyJrIjoi is the base64 of '{"k":"', a prefix no other format opens with.
    return value if looks_random(value[8:].rstrip("="), 64) else None


def _grafana_verified(value: str) -> bool:
    if value.startswith("glsa_"):
        # glsa_<32>_<CRC32 of "glsa_<32>", 4 little-endian bytes in hex> (satokengen)
        checksum = struct.pack("<I", zlib.crc32(value[:37].encode())).hex()
        return len(value) == 46 and value[37:38] == "_" and value[38:] == checksum
    if value.startswith("glc_"):
        return _json_object(value[4:], "k")  # {"o":..,"n":..,"k":..}
    return _json_object(value, "k", "n")  # legacy: {"k":..,"n":..,"id":..}


def _discord_bot(value: str) -> str | None:
    # <base64 of the bot's numeric user id>.<timestamp>.<HMAC>
    user_id, _, rest = value.partition(".")
    if not 23 <= len(user_id) <= 26:
        return None
    try:
        decoded = _b64decode(user_id)
    except binascii.Error:
        return None
    signature = rest.partition(".")[2]
    ok = decoded.isdigit() and 15 <= len(decoded) <= 20 and looks_random(signature, 64)
    return value if ok else None


def _azure_storage_key(value: str) -> str | None:
    # 64 random bytes in base64: 88 characters ending "==".
    try:
        size = len(_b64decode(value))
    except binascii.Error:
        return None
    return value if size == 64 and looks_random(value[:-2], 64) else None


def _azure_ad_secret(value: str) -> str | None:
    # <3><digit>Q~<31-34>; the pattern takes the whole run of the alphabet, which holds
    # ".", so a full stop after the secret is dropped.
    # (After its 4th character: the three before the digit may hold "Q~" themselves.)
    if len(value[6:]) > 34:
        value = value.rstrip(".")
    tail = value[6:]
    return value if 31 <= len(tail) <= 34 and looks_random(value, 66) else None


def _mapbox_verified(value: str) -> bool:
    # sk.<base64 JSON {"u": user, "a": ...}>.<signature>
    return _json_object(value.split(".")[1], "u")


def _sentry(value: str) -> str | None:
    if value.startswith("sntryu_"):
        return value if looks_random(value[7:], 16) else None
    secret = value.rsplit("_", 1)[1]  # sntrys_<base64 JSON>_<secret>
    return value if looks_random(secret, 64) else None


def _sentry_verified(value: str) -> bool:
    return value.startswith("sntrys_") and _json_object(value[7:].rsplit("_", 1)[0], "iat")


def _onepassword(value: str) -> str | None:
    if value.startswith("ops_"):
        return value if looks_random(value[4:], 64) else None
    return value if looks_random(value[3:].replace("-", ""), 36) else None  # A3-... key


def _artifactory(value: str) -> str | None:
    body = value[5:] if value.startswith("cmVmd") else value[4:]  # base64 of "ref" + t..w
    return value if looks_random(body) and _classes(body) >= 2 else None


def _artifactory_verified(value: str) -> bool:
    if not value.startswith("cmVmd"):
        return False  # AKCp keys carry no check
    try:
        return _b64decode(value).startswith(b"reftkn:")
    except binascii.Error:
        return False


def _notion(value: str) -> str | None:
    if value.startswith("ntn_"):
        return value if looks_random(value[13:]) else None
    return value if looks_random(value[7:]) and _classes(value[7:]) >= 2 else None


def _planetscale(value: str) -> str | None:
    # The alphabet holds "."; one ending a sentence is not part of the token.
    token = value.rstrip(".")
    body = token.split("_", 2)[2]
    return token if len(body) >= 32 and looks_random(body, 64) else None


def _slack(value: str) -> str | None:
    # Slack tokens hold numeric ids, or (legacy xoxa/xoxr, gl slack-legacy-workspace-token)
    # a random body; prose ("xoxb-your-bot-token") neither.
    body = value[5:]
    random_body = looks_random(body) and _classes(body) >= 2
    return value if any(c.isdigit() for c in body) or random_body else None


def _supabase(value: str) -> str | None:
    body = value.removeprefix("sbp_").removeprefix("v0_") if value[:4] == "sbp_" else value[10:]
    return value if looks_random(body, 64) else None


def _cloudflare(value: str) -> str | None:
    if value.startswith(("cfut_", "cfat_", "cfk_")):
        return value if looks_random(value.split("_", 1)[1][:40]) else None
    if value.startswith("v1.0-"):  # Origin CA key
        return value if looks_random(value[30:], 16) else None
    # Pre-2026: a 40-character API token, or a 37-45 character hex global API key.
    if len(value) == 40 and _classes(value) >= 2 and not set(value) <= _HEX:
        return value if looks_random(value, 64) else None
    return value if set(value) <= _HEX and looks_random(value, 16) else None


def _newrelic(value: str) -> str | None:
    if value.endswith("FFFFNRAL"):  # <32 hex> or eu01xx<26 hex>, then FFFFNRAL
        body = value[:-8]  # its length a window: the marker, not the length, says what it is
        ok = 30 <= len(body) <= 36 and looks_random(body.removeprefix("eu01xx"), 16)
        return value if ok else None
    return value if looks_random(value[5:], 36) else None


def _yandex_iam(value: str) -> str | None:
    """t1.<base64url>.<86 base64url>: both parts look generated."""
    _, first, second = value.split(".", 2)
    ok = looks_random(first.rstrip("="), 64) and looks_random(second.rstrip("="), 64)
    return value if ok else None


def _square(value: str) -> str | None:
    body = value[4:] if value[:4] == "EAAA" else value.removeprefix("sandbox-")[7:]
    return value if looks_random(body, 64) and _classes(body) >= 2 else None


def _mailgun(value: str) -> str | None:
    if value.startswith(("key-", "pubkey-")):  # <32 hex>, or base36 in older keys
        body = value[-32:]
        return value if looks_random(body, 36) and _classes(body) >= 2 else None
    key = value.split("-", 1)[0]  # <32 hex>-<8 hex>-<8 hex>
    return value if len(key) == 32 and looks_random(key, 16) else None


# Counted runs at a word start ("[A-Za-z0-9]{52}JQQJ9") make RE2's DFA track every
# length at once; these patterns take the run unbounded and check its length here.
def _azure_identifiable(value: str) -> str | None:
    # 52 random, JQQJ9 + version, then a block with the service signature (AZDO, AZFU...);
    # the signature marks the key, so the random part's length is a window (50-56).
    at = value.find("JQQJ9")
    return value if 50 <= at <= 56 and looks_random(value[:at]) else None


def _vault(value: str) -> str | None:
    if value.startswith("s."):
        body = value[2:]
        return value if looks_random(body) and _mixes(body, 3) else None
    body = value[4:]
    return value if looks_random(body, 64) and _classes(body) >= 2 else None


def _facebook(value: str) -> str | None:
    if value.startswith("EAA"):
        body = value[4:]
        return value if looks_random(body) and _classes(body) >= 2 else None
    # An app secret after "<app id>|": no words joined by "_" ("|1000…|extract_text_v2|",
    # a table's cells).
    ok = (
        looks_random(value, 64)
        and _classes(value) >= 2
        and value.count("_") + value.count("-") <= 2
    )
    return value if ok else None


def _flutterwave_body(value: str) -> str:
    # FLWSECK_TEST-<body>-X, FLWPUBK-<body>-X, FLWSECK_TEST<body>
    value = value.removesuffix("-X")
    return value.split("-", 1)[1] if "-" in value else value[12:]


def _terraform(value: str) -> str | None:
    head, _, secret = value.split(".", 2)  # <14>.atlasv1.<60-70>
    return value if len(head) == 14 and looks_random(secret, 64) else None


def _telegram(value: str) -> str | None:
    bot_id, _, secret = value.partition(":")
    ok = 5 <= len(bot_id) <= 16 and looks_random(secret, 64) and _classes(secret) >= 2
    return value if ok else None


def _mailchimp(value: str) -> str | None:
    key = value.split("-", 1)[0]
    return value if len(key) == 32 and looks_random(key, 16) else None


def _airtable(value: str) -> str | None:
    head, _, secret = value.partition(".")
    return value if len(head) == 17 and looks_random(secret, 16) else None


# A name in code or a file's: its letters and digits in words ("Uniform", "Random", "2024")
# that are most of it, each word of three or more with a vowel unless in capitals (HTTP) or
# short (Mcp), spelled as words are (_spelled_as_words).
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
_VOWELS = frozenset("aeiouyAEIOUY")
# How a pair of letters inside a word reads: log2 of how much more often it occurs in names
# and prose than among random letters, held to -6..3, as one digit (score + 6) per pair from
# "aa" to "zz" ("th" 9, "qx" 0). Counted by scripts/name_pairs.py, which prints it.
_PAIR_SCORES = (
    "278815707059890709896555726243700256072163054270105080428318607743941758611040"
    "842692408106227205666102408588687242398947699937686270226620800511810745600030"
    "501180556005355107645200218002900070134270042540002066877670404879963789460506"
    "200060000000004000403000004001702260030312014020401084369910801823840378732060"
    "854391007014567801536000208289968270555586129966004056784450525889770978866421"
    "853482046018138608577020600000000000040100000070000093669471805468942788653070"
    "717294468065437843897340608265941990354386087782428265657540500778370878000000"
    "700080006000104000000000006003500670030450064000200041616200500220060017000220"
    "2323400040033637026601300240006000400000200000000020"
)


_LETTER_RUNS = re.compile(r"[a-z]+")


def _scored(word: str) -> bool:
    """Whether a word's letter pairs are scored (and counted, scripts/name_pairs.py): three
    letters or more, not in capitals (an acronym is not spelled)."""
    return len(word) >= 3 and word.isalpha() and not word.isupper()


def _spelled_as_words(words: list[str]) -> bool:
    """Whether the letter pairs of ``words`` (those ``_scored``) score 0 or more on average:
    "Uniform", "Random", "postgresql" do; "Kzgxjay", "Hbgbkdyxf", which a random token cut
    at its case changes is made of, do not."""
    score = 0
    for word in words:
        if not _scored(word):
            continue
        letters = word.lower()
        for index in range(len(letters) - 1):
            pair = (ord(letters[index]) - 97) * 26 + ord(letters[index + 1]) - 97
            score += ord(_PAIR_SCORES[pair]) - 54  # the digit's value less 6
    return score >= 0


def _a_name(text: str) -> bool:
    """``text`` reads as a name (``recording-2024-05-01-Team-Standup``,
    ``UniformRandomNumberGenerator32Bit``, ``reranker_v2_base_multilingual``,
    ``RealtimeMcpApprovalRequestParam``), not a generated token: four of five of its letters
    and digits in words of three or more, each with a vowel but two of four letters at most
    (``Mcp``, ``Http``, ``Sql``), spelled as words are. Of 64,000 identifiers of 20 to 60
    characters (Python's own and its packages') 98.8% read so. A random token of mixed-case
    letters and digits reads so 1 time in ~1,750 at 20 characters, ~17,000 at 24 (by the
    vowels alone, 1 in 176 and ~700); so it is checked only where a short prefix meets
    words."""
    words = _WORD.findall(text)
    total = sum(map(len, words))
    if not total or 5 * sum(len(w) for w in words if len(w) >= 3) < 4 * total:
        return False
    voiceless = [w for w in words if len(w) >= 3 and w[-1].islower() and _VOWELS.isdisjoint(w)]
    if len(voiceless) > 2 or any(len(w) > 4 for w in voiceless):
        return False
    return _spelled_as_words(words)


def _octopus(value: str) -> str | None:
    """API-<26 of A-Z0-9>, looking generated: three digits or more, or fewer where its runs
    of letters are not spelled as words (``API-V2ENDPOINTSFORPRODUCTIONUSE`` is a name). A
    random body has fewer than three digits 1 time in 77, none 1 in 4,700: asking for three
    stored those keys whole."""
    body = value[4:]
    if not looks_random(body, 36):
        return None
    if sum(c.isdigit() for c in body) >= 3:
        return value
    return None if _spelled_as_words(_LETTER_RUNS.findall(body.lower())) else value


def _no_name(named: Callable[[str], str], generated: Accept) -> Accept:
    """``generated``, unless ``named(value)`` reads as a name (``_a_name``)."""
    return lambda value: None if _a_name(named(value)) else generated(value)


def _token(prefix_length: int, alphabet_size: int = 62, classes: int = 1) -> Accept:
    """What follows the prefix looks generated, mixes ``classes``, and is no name."""
    generated = _after(prefix_length, alphabet_size, classes)
    return _no_name(lambda value: value[prefix_length:], generated)


def _token_field(separator: str, alphabet_size: int = 62, classes: int = 1) -> Accept:
    """The part after the last ``separator`` looks generated, mixes ``classes``, and is
    no name."""
    generated = _last_field(separator, alphabet_size, classes)
    return _no_name(lambda value: value.rsplit(separator, 1)[-1], generated)


def _sk_prefixed(value: str) -> str | None:
    """sk_<18+>: generated, mixing two classes; one in both cases is no name (a body of
    lower case and digits is read as words by no test of names: ``_a_name`` splits at
    case changes)."""
    body = value[3:]
    if not looks_random(body) or _classes(body) < 2:
        return None
    return None if body.lower() != body and _a_name(body) else value


def _marked(value: str, marker: str, length: int) -> str | None:
    """``length`` base64 characters (a window of two either way), ``marker``, then the
    rest (Azure Container Registry's <42>+ACR<6>, Tableau's <22>==:<32>). The run before
    the marker, matched unbounded, may have begun earlier (a URL's path: "/" is base64 too):
    then the secret is its last ``length`` characters and what follows."""
    at = value.index(marker)
    if at < length - 2:
        return None
    secret = value[at - length :] if at > length + 2 else value
    head, tail = secret.split(marker, 1)
    return secret if looks_random(head, 64) and looks_random(tail) else None


def _mixed(value: str) -> str | None:
    return value if looks_random(value) and _classes(value) >= 2 else None


# --- pattern helpers -----------------------------------------------------------------
# "<keyword>[name characters]<sep><quote?>": "DATADOG_APP_KEY=", '"datadogKey": "',
# "Datadog API key: ", and quotes escaped inside a JSON string. Nothing looser (a window
# of any words, a counted {0,24}): each "account" or "datadog" in prose would open one,
# and together they multiply the DFA's states until its cache thrashes. No class admits
# NUL.
_ASSIGN = (
    r"[\w.-]*(?i:[ \t](?:(?:api|app|application|global|access|account|auth|client|private|"
    r"prod|production|dev|test|secret)[ \t])?(?:key|token|secret))?"
    r"\\?[\"']?[ \t]*(?:=>|:=|[=:])[ \t]*\\?[\"'`]?"
)
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# A UUID that is (part of) a secret: its last group may be cut short or run on.
_UUID_CUT = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{10,16}"
_ANY_CASE_UUID = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"


def _keyed(name: str, keywords: str, value: str, suffix: str = r"\b", group: str = "") -> str:
    """``value`` after a keyword naming the provider; only the value is the secret."""
    return rf"(?i:{keywords}){_ASSIGN}(?P<{name}__value{group}>{value}){suffix}"


PROVIDER_DETECTORS: tuple[Detector, ...] = (
    # --- source hosting, CI, package registries ---------------------------------------
    # Replaces rules.github_token. gh[pousr]_<30><CRC32 base62 6> (github.blog 2021-04-05;
    # cs ValueGitHubCheck), from the 30 random characters (the checksum is computed from
    # them) to 40; github_pat_<22>_<59>, or any 82 word characters after the prefix (gl
    # github-fine-grained-pat); ghs_<app id>_<JWT> (GitHub changelog 2026-04, cs), also cut
    # before its signature.
    Detector(
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{30,40}\b|ghs_[0-9]{1,20}_eyJ[A-Za-z0-9_-]{10,}"
        r"(?:\.[A-Za-z0-9_-]*){0,2}|github_pat_[A-Za-z0-9]{20,26}_[A-Za-z0-9]{57,63}\b|"
        r"github_pat_\w{78,86}\b)",
        _github,
        verify=_github_verified,
    ),
    # gl*-<20..64> (gl gitlab-*, GitLab docs "token prefixes"), from two characters short:
    # the alphabet holds "-" and "_", so a shorter floor would take (and, rejected, hide)
    # more kebab-case names; routable tokens (GitLab lib/authn/token_field/generator/
    # routable_token.rb): <prefix>-<base64 payload>.01.<payload length base36 2><CRC32
    # base36 7>; GR1348941<20>: runner registration.
    Detector(
        "gitlab_token",
        r"\b(?:gl(?:pat|oas|dt|rtr|rt|cbt|ptt|ft|imt|agent|soat|ffct|wt)-[0-9A-Za-z_-]{18,}"
        r"(?:\.[0-9a-z]{2}\.[0-9a-z]{7,13}\b)?|GR1348941[0-9A-Za-z_-]{18,26})",
        _gitlab,
        verify=_gitlab_verified,
    ),
    Detector(  # the session cookie's value, outside a Cookie header (gl gitlab-session-cookie)
        "gitlab_session",
        r"\b_gitlab_session=(?P<gitlab_session__value>[0-9a-z]{30,34})\b",
        _random_part(lambda value: value, 36),
    ),
    # ATATT3xFfG... Jira/Confluence API tokens, ATCTT3xFfG... Bitbucket repository tokens,
    # ATBB<24><8> app passwords: CRC32 of the token in the last 8 hex (gl, cs).
    Detector(
        "atlassian_token",
        r"\b(?:AT[AC]TT3xFfG[A-Za-z0-9_-]{60,}(?:(?:=|\\=|%3[Dd])[A-Za-z0-9]*)?|"
        r"ATBB[A-Za-z0-9]{24,36}\b)",
        _atlassian,
        verify=_atlassian_verified,
    ),
    # npm_<30><CRC32 base62 6> (github.blog 2021-09-23; gl, th npmtokenv2, cs).
    Detector(
        "npm_token",
        r"\bnpm_[A-Za-z0-9]{30,40}\b",
        _after(4, 62, 2),
        verify=lambda value: _crc62_ok(value[4:]),
    ),
    # A macaroon whose base64 opens with the location pypi.org / test.pypi.org (gl, th).
    Detector(
        "pypi_token",
        r"\bpypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{50,}",
        _tail(50, 64),
    ),
    Detector("rubygems_token", r"\brubygems_[A-Za-z0-9]{46,52}\b", _after(9, 16)),  # gl, th
    Detector(  # th dockerhub v2, cs
        "docker_hub_token",
        r"\bdckr_(?:pat_[A-Za-z0-9_-]{25,31}|oat_[A-Za-z0-9_-]{30,36})",
        _after(9, 64),
    ),
    Detector(  # th circleci v2
        "circleci_token", r"\bCCIPAT_[A-Za-z0-9]{22}_[A-Za-z0-9]{38,44}\b", _after(7)
    ),
    Detector("buildkite_token", r"\bbkua_[A-Za-z0-9]{38,44}\b", _after(5, 16)),  # th buildkite v2
    # AKCp<69> API keys; cmVmd<59> reference tokens, the base64 of "reftkn:..." (gl
    # artifactory-reference-token, th, cs).
    Detector(
        "artifactory_token",
        r"\b(?:AKCp[A-Za-z0-9]{67,73}|cmVmd[A-Za-z0-9]{57,63})\b",
        _artifactory,
        verify=_artifactory_verified,
    ),
    Detector(  # sgp_<16 hex or "local">_<40 hex>, legacy sgp_<40 hex> (gl sourcegraph-access-token)
        "sourcegraph_token",
        r"\bsgp_(?:(?:[a-fA-F0-9]{16}|local)_)?[a-fA-F0-9]{38,44}\b",
        _last_field("_", 16),
    ),
    Detector(  # gl clojars-api-token
        "clojars_token", r"\bCLOJARS_[A-Za-z0-9]{58,64}\b", _after(8, 36)
    ),
    Detector("readme_token", r"\brdme_[a-z0-9]{68,74}\b", _after(5, 36)),  # gl readme-api-token
    Detector(  # (pat|sat).<22>.<24>.<20> (gl harness-api-key)
        "harness_token",
        r"\b(?:pat|sat)\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{18,24}\b",
        _last_field("."),
    ),
    Detector(  # API-<26> (gl octopus-deploy-api-key); "API-V2ENDPOINTS…" is a name
        "octopus_key", r"\bAPI-[A-Z0-9]{24,36}\b", _octopus
    ),
    Detector("prefect_token", r"\bpnu_[A-Za-z0-9]{34,40}\b", _after(4, 62, 2)),  # gl
    Detector("infracost_token", r"\bico-[A-Za-z0-9]{30,36}\b", _after(4, 62, 2)),  # gl
    # gl; its body mixes cases and digits (a kebab-case name "tk-us-east-1-…" does not)
    Detector("scalingo_token", r"\btk-us-[A-Za-z0-9_-]{46,52}", _after(6, 64, 3)),
    Detector(  # sm_aat_/sm_pat_/sm_sat_<16> (gl settlemint-*)
        "settlemint_token", r"\bsm_[aps]at_[A-Za-z0-9]{14,20}\b", _after(7, 62, 2)
    ),
    Detector("frameio_token", r"\bfio-u-[A-Za-z0-9_=-]{62,68}", _after(6, 64)),  # gl
    # Sidekiq Enterprise/Pro gem server credentials, <8 hex>:<8 hex> after the Bundler
    # setting that names its host (gl sidekiq-secret); in a URL they are url_credentials'.
    Detector(
        "sidekiq_secret",
        r"(?i:\bBUNDLE_(?:ENTERPRISE|GEMS)__CONTRIBSYS__COM)\\?[\"']?[ \t]*[=:][ \t]*\\?[\"']?"
        r"(?P<sidekiq_secret__value>[a-fA-F0-9]{8}:[a-fA-F0-9]{8})\b",
    ),
    # --- chat and webhooks ----------------------------------------------------------------
    # Replaces rules.slack_token, adding xoxc/xoxd (browser token and cookie, as used by
    # unofficial clients and MCP servers), xoxe.xox[bp]/xoxe refresh tokens and xapp
    # app-level tokens (gl slack-*, cs).
    Detector(
        "slack_token",
        r"\b(?:xox[abcdeoprs]|xoxe\.xox[bp]|xapp)-[A-Za-z0-9%-]{10,}",
        _slack,
    ),
    # hooks.slack.com/services/T../B../<24> (th slackwebhook, gl, cs); the ids stay.
    Detector(
        "slack_webhook_url",
        r"\bhooks\.slack\.com/(?:services/T[A-Z0-9]{6,12}/B[A-Z0-9]{6,12}|workflows/T[A-Z0-9]{6,12}"
        r"/A[A-Z0-9]{6,12}/[0-9]{17,19}|triggers/T[A-Z0-9]{6,12}/[0-9]{8,20})/"
        r"(?P<slack_webhook_url__value>[A-Za-z0-9]{23,32})\b|"
        # Any path of gitleaks' slack-webhook-url shape: all of it replaced.
        r"\bhooks\.slack\.com/(?:services|workflows|triggers)/"
        r"(?P<slack_webhook_url__value2>[A-Za-z0-9+/]{43,56})",
        lambda value: _mixed(value.replace("/", "").replace("+", "")),
    ),
    Detector(  # th discordwebhook, cs: .../webhooks/<id>/<68>
        "discord_webhook_url",
        r"\b(?:ptb\.|canary\.)?discord(?:app)?\.com/api/(?:v[0-9]{1,2}/)?webhooks/[0-9]{17,20}/"
        r"(?P<discord_webhook_url__value>[A-Za-z0-9_-]{60,80})",
        _random_part(lambda value: value, 64, 2),
    ),
    Detector(  # gl microsoft-teams-webhook, th microsoftteamswebhook
        "teams_webhook_url",
        rf"\b[A-Za-z0-9-]+\.webhook\.office\.com/webhookb2/{_UUID}@{_UUID}/IncomingWebhook/"
        rf"(?P<teams_webhook_url__value>[0-9a-f]{{32}}/{_UUID_CUT}(?:/[A-Za-z0-9_-]{{20,}})?)",
    ),
    # <base64 of the numeric bot id>.<6>.<27-38> (th discordbottoken, cs).
    Detector(
        "discord_bot_token",
        r"\b[MNO][A-Za-z0-9_-]+\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}",
        _discord_bot,
    ),
    # <bot id>:AA<33> (th, cs), from two short to four long; after "telegr(am)", as gl
    # telegram-bot-api-token asks, one "A" (<5-16 digits>:A<34>): without the name,
    # "1715000000:AWSLambdaBasicExecutionRole2024" is no token.
    Detector(
        "telegram_bot_token",
        r"\b[0-9]+:AA[A-Za-z0-9_-]{31,37}|"
        + _keyed("telegram_bot_token", r"telegr", r"[0-9]{5,16}:A[A-Za-z0-9_-]{32,38}"),
        _telegram,
    ),
    # --- cloud -----------------------------------------------------------------------------
    # Azure storage account keys (88-character base64) after a keyword naming them,
    # including AccountKey= in connection strings (th azure_storage).
    Detector(
        "azure_storage_key",
        _keyed(
            "azure_storage_key",
            r"(?:account|storage|azure)[\w.-]*key",
            r"[A-Za-z0-9+/]{86}==",
            suffix="",
        ),
        _azure_storage_key,
    ),
    # Service Bus / Event Hubs keys and SAS strings in connection strings.
    Detector(
        "azure_connection_string",
        r"\bSharedAccessKey[ \t]*=[ \t]*(?P<azure_connection_string__value>[A-Za-z0-9+/]{42,43}=)"
        # Not from "<": "SharedAccessSignature=<secret:…>" is one already replaced.
        r"|\bSharedAccessSignature[ =](?P<azure_connection_string__value2>[^;\"'\s<\x00][^;\"'\s\x00]{19,})",
    ),
    # A SAS URL's signature: sv=<date>&...&sig=<url-encoded base64 HMAC> (th azuresastoken).
    Detector(
        "azure_sas_token",
        r"\bsv=[0-9]{4}-[0-9]{2}-[0-9]{2}&[^\s\"'<>\x00]*?\bsig="
        r"(?P<azure_sas_token__value>[A-Za-z0-9%+/=]{30,})",
    ),
    # Entra ID (Azure AD) client secrets: <3><digit>Q~<31-34> (gl, th azure_entra, cs).
    Detector(
        "azure_ad_client_secret",
        r"(?:^|\x00|[^A-Za-z0-9_~.\x00-])(?P<azure_ad_client_secret__value>[A-Za-z0-9_~.]{3}[0-9]Q~"
        r"[A-Za-z0-9_~.-]{31,})",
        _azure_ad_secret,
    ),
    # Microsoft "identifiable" keys (Azure DevOps PATs, Function keys...): 52 random, then
    # JQQJ9 + version, then a block with the service signature (AZDO, AZFU...) (cs).
    Detector(
        "azure_identifiable_key",
        # 84 characters, or 86 and "==": after the version 26 or 28, give or take.
        r"\b[A-Za-z0-9]+JQQJ9[9DH][A-Za-z0-9]{24,32}(?:={1,2}|\b)",
        _azure_identifiable,
    ),
    # GCP service-account JSON, also escaped inside another JSON string; its PEM is
    # rules.pem_private_key's (th gcp).
    Detector(
        "gcp_service_account",
        r"\\?\"private_key_id\\?\"[ \t]*:[ \t]*\\?\"(?P<gcp_service_account__value>[0-9a-f]{40})\\?\"",
    ),
    Detector("google_oauth_secret", r"\bGOCSPX-[A-Za-z0-9_-]{26,32}", _after(7, 64)),  # cs
    # ya29.<access token>, 1//0<refresh token> (th googleoauth2, cs).
    Detector(
        "google_oauth_token",
        r"\b(?:ya29\.[A-Za-z0-9_-]{20,}|1//0[A-Za-z0-9_-]{40,})",
        _after(5, 64),
    ),
    Detector("alibaba_key", r"\bLTAI[A-Za-z0-9]{12,24}\b", _after(4, 62, 2)),  # gl, th, cs
    Detector(  # gl alibaba-secret-key
        "alibaba_secret",
        _keyed("alibaba_secret", r"alibaba|aliyun", r"[A-Za-z0-9]{30}"),
        _mixed,
    ),
    # Tencent Cloud SecretId: AKID<32> (Tencent Cloud CAM docs; not in gl/th).
    Detector("tencent_key", r"\bAKID[A-Za-z0-9]{30,36}\b", _after(4, 62, 2)),
    # Yandex Cloud: AQVN<35-38> API keys; t1.<base64url>.<86> IAM tokens (gl yandex-*,
    # which ask for "yandex" before them: the prefix and the two parts mark them alone).
    Detector("yandex_key", r"\bAQVN[A-Za-z0-9_-]{33,40}", _token(4, 64, 2)),
    Detector(
        "yandex_token",
        r"\bt1\.[A-Za-z0-9_-]+={0,2}\.[A-Za-z0-9_-]{80,92}={0,2}",
        _yandex_iam,
    ),
    # ABSK<base64> long-lived keys (base64 of "BedrockAPIKey-..."); short-lived ones open
    # with the base64 of "bedrock.amazonaws.com" (gl aws-amazon-bedrock-api-key-*).
    Detector(
        "aws_bedrock_key",
        r"\b(?:ABSK[A-Za-z0-9+/]{100,}={0,2}|"
        r"bedrock-api-key-YmVkcm9jay5hbWF6b25hd3MuY29t[A-Za-z0-9+/=%_-]*)",
        lambda value: value if value[0] == "b" or looks_random(value[4:], 64) else None,
    ),
    # 4b1d<38> ClickHouse Cloud API secret keys (gl clickhouse-cloud-api-secret-key): "4b1d"
    # opens a SHA-1 digest in 65,536, so the 38 must mix cases and digits.
    Detector("clickhouse_cloud_key", r"\b4b1d[A-Za-z0-9]{36,42}\b", _after(4, 62, 3)),
    Detector(  # gl digitalocean-*, th digitaloceanv2
        "digitalocean_token", r"\bdo[opr]_v1_[a-fA-F0-9]{62,68}\b", _after(7, 16)
    ),
    # cfut_/cfat_/cfk_<40><8 hex> (Cloudflare docs "Token formats", 2026; th v2);
    # v1.0-<24>-<146> Origin CA keys (gl); pre-2026 tokens and hex global keys only
    # after a keyword (gl cloudflare-api-key, cloudflare-global-api-key).
    Detector(
        "cloudflare_token",
        r"\b(?:cf(?:ut|at|k)_[A-Za-z0-9]{40,52}\b|v1\.0-[a-f0-9]{24}-[a-f0-9]{144,150}\b)|"
        + _keyed(
            "cloudflare_token",
            r"cloudflare|\bcf[_-]?(?:api[_-]?)?(?:key|token)",
            r"[A-Za-z0-9_-]{37,45}",
            suffix="",
        ),
        _cloudflare,
    ),
    # HRKU-AA<58> (gl heroku-api-key-v2, th heroku v2); legacy UUID after "heroku" (gl).
    Detector(
        "heroku_key",
        rf"\bHRKU-(?:AA[A-Za-z0-9_-]{{56,62}}|{_UUID_CUT})|"
        + _keyed("heroku_key", r"heroku", _ANY_CASE_UUID),
        _random_part(lambda value: value.removeprefix("HRKU-AA").replace("-", ""), 64),
    ),
    Detector(  # gl flyio-access-token, th flyio
        "flyio_token",
        r"\b(?:fo1_[A-Za-z0-9_-]{41,47}|fm[12][ar]?_[A-Za-z0-9+/]{100,}={0,3})",
        # After the prefix: a fo1_ body is base64url and holds "_" itself.
        _random_part(lambda value: value.split("_", 1)[1], 64),
    ),
    Detector(  # vcp_<56> (cs); legacy 24 after "vercel" (th vercel)
        "vercel_token",
        r"\bvcp_[A-Za-z0-9]{54,60}\b|" + _keyed("vercel_token", r"vercel", r"[A-Za-z0-9]{24}"),
        _mixed,
    ),
    Detector(  # nfp_<36> (th netlify v2, cs); legacy after "netlify" (gl, th)
        "netlify_token",
        # No \b after the legacy value: one that ends in "-" has none before a quote (as okta).
        r"\bnfp_[A-Za-z0-9]{34,40}\b|"
        + _keyed("netlify_token", r"netlify", r"[A-Za-z0-9_-]{43,45}", suffix=""),
        _random_part(lambda value: value.removeprefix("nfp_"), 64),
    ),
    Detector(  # sbp_<40 hex> (th supabasetoken, cs); sb_secret_ keys (Supabase, 2025)
        "supabase_token",
        r"\b(?:sbp_(?:v0_)?[A-Za-z0-9]{38,44}\b|sb_secret_[A-Za-z0-9_-]{20,})",
        _supabase,
    ),
    Detector(  # gl planetscale-*, th planetscale, cs
        "planetscale_token", r"\bpscale_(?:tkn|pw|oauth)_[A-Za-z0-9_=.-]{32,}", _planetscale
    ),
    Detector(  # gl, th databrickstoken, cs
        "databricks_token",
        r"\bdapi[a-f0-9]{30,36}(?:-[0-9])?\b",
        _random_part(lambda v: v[4:].split("-", 1)[0], 16),
    ),
    Detector(  # th doppler, gl, cs
        "doppler_token",
        r"\bdp\.(?:pt|sa|ct|scim|audit|st(?:\.[a-z0-9_-]{2,35})?)\.[A-Za-z0-9]{38,48}\b",
        _last_field("."),
    ),
    Detector("pulumi_token", r"\bpul-[A-Za-z0-9]{38,44}\b", _after(4, 16)),  # gl, th
    # hvs./hvb./hvr.: service, batch, recovery tokens; OSS Vault service tokens are
    # sha256~<43> OpenShift user (OAuth access) tokens (gl openshift-user-token, th).
    Detector("openshift_token", r"\bsha256~[A-Za-z0-9_-]{40,46}", _token(7, 64, 2)),
    # hvs.<24>, HCP ones ~90 (gl vault-*, th hashicorpvault, cs).
    # Before Vault 1.10: s.<24> service tokens (gl vault-service-token), only when the 24
    # mix upper case, lower case and digits ("s.getElementsByTagNameNS" is code).
    Detector("vault_token", r"\b(?:hv[sbr]\.[A-Za-z0-9_-]{22,}|s\.[A-Za-z0-9]{22,26}\b)", _vault),
    Detector(  # <14>.atlasv1.<67> (gl hashicorp-tf-api-token, th, cs)
        "terraform_token",
        r"\b[A-Za-z0-9]+\.atlasv1\.[A-Za-z0-9_=-]{60,70}",
        _terraform,
    ),
    # ops_eyJ<base64 JSON> service-account tokens; A3-... account secret keys (gl, cs).
    Detector(
        "onepassword_token",
        r"\b(?:ops_eyJ[A-Za-z0-9+/_-]{100,}={0,3}|A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-"
        r"[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{4,8}\b)",
        _onepassword,
        verify=lambda value: value.startswith("ops_") and _json_object(value[4:]),
    ),
    # AGE-SECRET-KEY-1<52 data><6 checksum>, Bech32 (gl age-secret-key, cs); any upper-case
    # letter or digit, as a typo may not keep to the Bech32 alphabet.
    Detector(
        "age_secret_key",
        r"\bAGE-SECRET-KEY-1[0-9A-Z]{52,62}\b",
        _after(16, 32),
        verify=bech32_valid,
    ),
    # --- observability ------------------------------------------------------------------
    # 32-hex API keys / 40-hex application keys after "datadog" or DD_APP_KEY-like
    # names (gl datadog-access-token, th datadogtoken).
    Detector(
        "datadog_key",
        _keyed(
            "datadog_key",
            r"datadog|\bdd[_-]?(?:api|app(?:lication)?|client)[_-]?(?:key|token)",
            r"[a-f0-9]{40}|[a-f0-9]{32}",
        ),
        _random_part(lambda value: value, 16),
    ),
    # glsa_<32>_<CRC32 hex> (Grafana satokengen, gl, cs); glc_<base64 JSON> (th), any
    # base64 of 32+ after glc_ (gl grafana-cloud-api-token);
    # eyJrIjoi<base64 JSON> legacy API keys (gl, cs).
    Detector(
        "grafana_token",
        r"\b(?:glsa_[A-Za-z0-9]{30,36}(?:_[A-Za-z0-9]*)?\b|glc_[A-Za-z0-9+/_-]{32,}={0,3}|"
        r"eyJrIjoi[A-Za-z0-9+/_-]{40,}={0,3})",
        _grafana,
        verify=_grafana_verified,
    ),
    # NRAK-<27> user keys, NRII/NRIQ insights keys, NRJS-<19 hex> browser keys, <32
    # hex>FFFFNRAL license keys (gl new-relic-*, th newrelic*).
    Detector(
        "newrelic_key",
        r"\b(?:NRAK-[A-Za-z0-9]{25,31}\b|NRI[IQ]-[A-Za-z0-9_-]{23,36}|NRJS-[a-fA-F0-9]{17,21}\b|"
        r"(?:eu01xx)?[0-9a-f]+FFFFNRAL\b)",
        _newrelic,
    ),
    # sntryu_<64 hex>; sntrys_<base64 JSON>_<43> org tokens (gl sentry-*, th, cs).
    Detector(
        "sentry_token",
        r"\b(?:sntryu_[a-f0-9]{62,68}\b|sntrys_eyJ[A-Za-z0-9+/]{10,}={0,2}_[A-Za-z0-9+/]{41,47})",
        _sentry,
        verify=_sentry_verified,
    ),
    Detector(  # gl dynatrace-api-token, cs
        "dynatrace_token",
        r"\bdt0[a-z][0-9]{2}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{62,68}\b",
        _last_field(".", 36),
    ),
    Detector("posthog_key", r"\bphx_[A-Za-z0-9_]{41,52}\b", _after(4, 63, 2)),  # th posthog
    # App-only bearer tokens: 21-22 "A"s, then URL-encoded base64 (gl twitter-bearer-token;
    # X's documentation's example has 21).
    Detector(
        "twitter_bearer_token",
        r"\bAAAAAAAAAAAAAAAAAAAA[A-Za-z0-9%]{80,110}",
        _random_part(lambda value: value[20:].lstrip("A").replace("%", ""), 64, 2),
    ),
    # --- identity and productivity --------------------------------------------------------
    # 00<40> after "okta" or the SSWS scheme (gl okta-access-token, th okta).
    Detector(
        "okta_token",
        r"\bSSWS[ \t]+(?P<okta_token__value>00[A-Za-z0-9_-]{40})|"
        + _keyed("okta_token", r"okta", r"00[A-Za-z0-9_-]{40}", suffix="", group="2"),
        _after(2, 64, 2),
    ),
    Detector(  # gl linear-api-key, th linearapi, cs
        "linear_key",
        r"\b(?:lin_api_[A-Za-z0-9]{38,44}|lin_oauth_[a-f0-9]{62,68})\b",
        _last_field("_"),
    ),
    Detector(  # <sc|ext|scauth|authress>_<id>.<4-6>.acc_<id>.<secret> (gl authress-*)
        "authress_key",
        r"\b(?:sc|ext|scauth|authress)_[A-Za-z0-9]{5,30}\.[A-Za-z0-9]{4,6}\.acc[_-]"
        r"[A-Za-z0-9-]{10,32}\.[A-Za-z0-9+/_=-]{30,120}",
        _last_field(".", 64),
    ),
    Detector(  # p8e-<32> (gl adobe-client-secret)
        "adobe_client_secret", r"\bp8e-[A-Za-z0-9]{30,36}\b", _after(4, 62, 2)
    ),
    Detector(  # s-s4t2ud-/s-s4t2af-<64 hex> (gl intra42-client-secret)
        "intra42_secret", r"\bs-s4t2(?:ud|af)-[a-fA-F0-9]{62,68}\b", _after(9, 16)
    ),
    Detector(  # <6>_<29>_mmk (gl maxmind-license-key)
        "maxmind_key",
        r"\b[A-Za-z0-9]{6}_[A-Za-z0-9]{27,31}_mmk\b",
        _random_part(lambda value: value[:-4].replace("_", "")),
    ),
    # secret_<43> (th notion): "secret_" is a common word, the length stays exact;
    # ntn_<46> (gl notion-api-token, cs).
    Detector(
        "notion_token", r"\b(?:secret_[A-Za-z0-9]{43}|ntn_[0-9]{9}[A-Za-z0-9]{35,41})\b", _notion
    ),
    Detector(  # gl airtable-personnal-access-token, th
        "airtable_token", r"\bpat[A-Za-z0-9]+\.[a-f0-9]{64}\b", _airtable
    ),
    Detector(  # <n>/<16+>[/<16+>]:<32> (th asanapersonalaccesstoken)
        "asana_token", r"\b[0-9]/[0-9]{16,}(?:/[0-9]{16,})?:[A-Za-z0-9]{32}\b", _tail(32)
    ),
    Detector(  # figd_<40> (cs, th figmapersonalaccesstoken)
        "figma_token",
        r"\bfig(?:d|u|o|p|ur|uh|or|oh)_[A-Za-z0-9_-]{38,}",
        _random_part(lambda value: value.split("_", 1)[1], 64),
    ),
    Detector(  # gl postman-api-token, th, cs
        "postman_key",
        r"\b(?:PMAK-[A-Za-z0-9]{22,26}-[A-Za-z0-9]{32,38}|PMAT-[0-9A-Z]{24,30})\b",
        _after(5, 16),
    ),
    Detector(  # pat-<region>-<uuid> private app tokens (th hubspot_apikey v2)
        "hubspot_token",
        r"\bpat-(?:na|eu|ap)[0-9]-[A-Za-z0-9]{8}-[A-Za-z0-9]{4}-[A-Za-z0-9]{4}-[A-Za-z0-9]{4}-[A-Za-z0-9]{10,16}\b",
        _random_part(lambda value: value[8:].replace("-", ""), 16),
    ),
    Detector("contentful_token", r"\bCFPAT-[A-Za-z0-9_-]{41,47}", _after(6, 64)),  # th
    Detector(  # sk.<base64 JSON>.<signature> (th mapbox, gl)
        "mapbox_token",
        r"\bsk\.eyJ[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}",
        _last_field(".", 64),
        verify=_mapbox_verified,
    ),
    Detector("adafruit_key", r"\baio_[A-Za-z0-9]{26,32}\b", _after(4, 62, 2)),  # th adafruitio
    # --- email, messaging, payments ----------------------------------------------------
    Detector(  # SG.<22>.<43> (th sendgrid, cs); any 66 of [\w=.-] (gl sendgrid-api-token)
        "sendgrid_key",
        r"\bSG\.[A-Za-z0-9_=.-]{64,70}",
        # (mixing cases and digits: "SG.com.example.package.Class" is a name)
        _random_part(lambda value: value[3:].replace(".", ""), 64, 3),
    ),
    # AC<32 hex> account SIDs, SK<32 hex> API key SIDs (gl twilio-api-key, th twilio,
    # cs); 32-hex auth tokens after "twilio".
    Detector(
        "twilio_key",
        r"\b(?:AC|SK)[0-9a-fA-F]{32}\b|" + _keyed("twilio_key", r"twilio", r"[0-9a-f]{32}"),
        _tail(32, 16),
    ),
    # <32 hex>-<8 hex>-<8 hex> (th mailgun); key-<32 of a-z0-9> (hex, or base36 in older
    # keys) as curl's api:key-... or after "mailgun" (gl mailgun-*): alone, "key-<md5>"
    # is as often a cache key's name.
    Detector(
        "mailgun_key",
        r"\b[0-9a-f]+-[0-9a-f]{8}-[0-9a-f]{8}\b|\bapi:(?P<mailgun_key__value>key-[0-9a-z]{32})\b|"
        + _keyed("mailgun_key", r"mailgun", r"(?:pub)?key-[0-9a-z]{32}", group="2"),
        _mailgun,
    ),
    Detector(  # th mailchimp, gl, cs
        "mailchimp_key", r"\b[0-9a-f]+-us[0-9]{1,2}\b", _mailchimp
    ),
    Detector(  # gl sendinblue-api-token, th sendinbluev2, cs
        "brevo_key",
        r"\bx(?:keysib|smtpsib)-[a-f0-9]{64}-[A-Za-z0-9]{14,20}\b",
        _random_part(lambda v: v.split("-")[1], 16),
    ),
    Detector(  # gl shopify-*, th shopify, cs
        "shopify_token", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{30,36}\b", _after(6, 16)
    ),
    # Facebook before Square: both may open with "EAAA"; Facebook's are far longer
    # (gl facebook-page-access-token, cs).
    # EAA<100+> user and page tokens; <app id>|<app secret> app tokens, "|" maybe
    # percent-encoded (gl facebook-access-token).
    Detector(
        "facebook_token",
        r"\bEAA[A-Za-z0-9]{100,}\b|\b[0-9]{15,16}(?:\||%7[Cc])"
        r"(?P<facebook_token__value>[A-Za-z0-9_-]{27,40})\b",
        _facebook,
    ),
    Detector(  # EAAA<60>, from 22 (gl square-access-token, th square, cs); sq0atp/sq0csp (cs)
        "square_token",
        r"\b(?:EAAA[A-Za-z0-9_-]{22,64}|sq0atp-[A-Za-z0-9_-]{20,26}|"
        r"(?:sandbox-)?sq0cs[pb]-[A-Za-z0-9_-]{41,47})",
        _square,
    ),
    Detector(  # gl shippo-api-token
        "shippo_token", r"\bshippo_(?:live|test)_[a-fA-F0-9]{38,44}\b", _after(12, 16)
    ),
    Detector(  # gl duffel-api-token
        "duffel_token", r"\bduffel_(?:test|live)_[A-Za-z0-9_=-]{41,47}", _after(12, 64)
    ),
    Detector(  # EZAK/EZTK<54> (gl easypost-*)
        "easypost_key", r"\bEZ[AT]K[A-Za-z0-9]{52,58}\b", _after(4, 62, 2)
    ),
    # FLWSECK-/FLWPUBK-<32 hex>-X, FLWSECK_TEST<12 hex> encryption keys (gl flutterwave-*).
    Detector(
        "flutterwave_key",
        r"\bFLW(?:SECK|PUBK)(?:_TEST)?-?[A-Za-z0-9]{10,36}(?:-X)?\b",
        _random_part(_flutterwave_body, 36),
    ),
    Detector(  # access_token$production$<16>$<32> (cs PayPal Braintree Access Token)
        "braintree_token",
        r"\baccess_token\$(?:production|sandbox)\$[0-9a-z]{16}\$[0-9a-f]{30,36}\b",
        _last_field("$", 16),
    ),
    # Stripe webhook signing secrets; Svix, Clerk and Resend use the same whsec_ shape (cs).
    Detector("stripe_webhook_secret", r"\bwhsec_[A-Za-z0-9+/]{30,}={0,2}", _after(6, 64, 2)),
    # --- more prefix-distinctive formats (trufflehog's detectors without a keyword) -------
    Detector(  # ory_pat_/ory_at_/ory_rt_/ory_apikey_ (Ory Network)
        "ory_token", r"\bory_(?:pat|at|rt|ac|apikey)_[A-Za-z0-9]{28,}\b", _token_field("_", 62, 2)
    ),
    # access-<environment>-<uuid> (gl, th plaid): the environment makes the prefix.
    Detector(
        "plaid_token",
        r"\baccess-(?:sandbox|development|production)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-"
        r"[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{10,16}\b",
        _random_part(lambda value: value.split("-", 2)[2].replace("-", ""), 16),
    ),
    Detector(  # sl.<130+> short-lived tokens (gl dropbox-short-lived-api-token, th dropbox)
        "dropbox_token", r"\bsl\.(?:u\.)?[A-Za-z0-9_=-]{130,}", _last_field(".", 64, 2)
    ),
    Detector(  # squ_/sqp_/sqa_<40 hex> (gl sonar-api-token, th sonarcloud)
        "sonar_token",
        r"\b(?:sq[upa]_[a-f0-9]{38,44}|sqco_[A-Za-z0-9]{55,63})\b",
        _last_field("_", 62, 2),
    ),
    Detector(  # live_/test_<35 hex> secret keys (gl lob-api-key); the publishable pub_ ones stay
        "lob_key", r"\b(?:live|test)_[a-f0-9]{33,37}\b", _after(5, 16)
    ),
    Detector("apify_token", r"\bapify_api_[A-Za-z0-9]{34,40}\b", _after(10, 62, 2)),  # th
    Detector(  # Bitbucket Data Center HTTP access tokens (th atlassiandatacenter)
        "bitbucket_dc_token", r"\bBBDC-[A-Za-z0-9+/@_-]{40,50}", _token(5, 64, 2)
    ),
    Detector("bannerbear_key", r"\bbb_(?:pr|ma)_[a-f0-9]{28,34}\b", _after(6, 16)),  # th
    Detector("endorlabs_key", r"\bendr\+[A-Za-z0-9-]{14,20}\b", _after(5, 62, 2)),  # th
    Detector("fleetbase_key", r"\bflb_live_[A-Za-z0-9]{18,24}\b", _after(9, 62, 2)),  # th
    Detector("flexport_key", r"\bshltm_[A-Za-z0-9_-]{38,44}", _token(6, 64, 2)),  # th
    Detector(  # na1.<100 base64> (th fullstory v2)
        "fullstory_key", r"\bna1\.[A-Za-z0-9+/]{98,104}={0,2}", _after(4, 64, 2)
    ),
    # live_<40> (th gocardless); "live_" is a word in names, so the body mixes cases and
    # digits ("live_stream_configuration_for_the_app" is a name).
    Detector("gocardless_token", r"\blive_[A-Za-z0-9_=-]{38,44}", _token(5, 64, 3)),
    # pk_<34 hex> private keys, pk_<6>_<34 hex> (th klaviyo): not 32 or 40 (digests).
    Detector(
        "klaviyo_key",
        r"\bpk_(?:[A-Za-z0-9]{6}_)?[a-f0-9]{33,36}\b",
        _last_field("_", 16),
    ),
    Detector("locationiq_token", r"\bpk\.[a-f0-9]{30,36}\b", _after(3, 16)),  # th locationiq
    Detector("nightfall_key", r"\bNF-[A-Za-z0-9]{30,36}\b", _token(3, 62, 3)),  # th
    Detector(  # th pagarme
        "pagarme_key", r"\bak_(?:live|test)_[A-Za-z0-9]{28,34}\b", _after(8, 62, 2)
    ),
    # pub-c-/sub-c-<uuid> (th pubnub*), sec-c-<base64> secret keys.
    Detector(
        "pubnub_key",
        r"\b(?:(?:pub|sub)-c-[0-9a-z]{8}-[0-9a-z]{4}-[0-9a-z]{4}-[0-9a-z]{4}-[0-9a-z]{10,16}\b|"
        r"sec-c-[A-Za-z0-9]{40,56})",
        _random_part(lambda value: value[6:].replace("-", ""), 36),
    ),
    Detector(  # rh-api-<uuid> (th robinhoodcrypto)
        "robinhood_key",
        r"\brh-api-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{10,16}\b",
        _random_part(lambda value: value[7:].replace("-", ""), 16),
    ),
    Detector("rootly_key", r"\brootly_[a-f0-9]{62,68}\b", _after(7, 16)),  # th
    Detector(  # th saladcloudapikey; both fields read as one name or not (20 characters
        # alone read as one 1 time in ~3,000)
        "saladcloud_key",
        r"\bsalad_cloud_[A-Za-z0-9]{1,7}_[A-Za-z0-9]{20,}",
        _no_name(lambda value: value[12:], _last_field("_")),
    ),
    # 3MVG9<80+> connected-app consumer keys, 5AEP861<80+> refresh tokens, <org id>!<token>
    # access tokens (th salesforceoauth2, salesforcerefreshtoken, salesforce).
    Detector(
        "salesforce_token",
        r"\b(?:3MVG9[A-Za-z0-9._+/=]{78,}|5AEP861[A-Za-z0-9._=]{78,}|"
        r"00D[A-Za-z0-9]{12,15}![A-Za-z0-9_.]{90,})",
        _random_part(lambda value: value[7:].replace(".", ""), 64, 2),
    ),
    Detector("sourcegraph_cody_token", r"\bslk_[a-f0-9]{62,68}\b", _after(4, 16)),  # th
    # A PaymentIntent's or SetupIntent's client secret (th stripepaymentintent).
    Detector(
        "stripe_client_secret",
        r"\b(?:pi|seti)_[A-Za-z0-9]{14,30}_secret_[A-Za-z0-9]{20,30}\b",
        _last_field("_", 62, 2),
    ),
    # dnkey-<26>-<52> Defined Networking (Nebula) API keys (gl, th definednetworking).
    # (no test of a name: bodies in capitals read as words 1 time in 8)
    Detector("defined_networking_key", r"\bdnkey-[A-Za-z0-9=_-]{72,86}", _after(6, 64, 2)),
    # tskey-<kind>-<id>-<secret> (th tailscale)
    Detector(
        "tailscale_key",
        r"\btskey-[a-z]{3,8}-[A-Za-z0-9]{6,24}-[A-Za-z0-9]{20,48}\b",
        _last_field("-", 62, 2),
    ),
    Detector(  # th trufflehogenterprise
        "trufflehog_key",
        r"\bthog-(?:key-[0-9a-f]{14,20}|secret-[0-9a-f]{30,36})\b",
        _last_field("-", 16),
    ),
    Detector("typeform_token", r"\btfp_[A-Za-z0-9_.=-]{40,63}", _token(4, 64, 2)),  # gl, th
    Detector("ubidots_token", r"\bBBFF-[A-Za-z0-9]{28,34}\b", _after(5, 62, 2)),  # th
    Detector(  # th voiceflow
        "voiceflow_key",
        r"\bVF\.(?:(?:DM|WS)\.)?[a-fA-F0-9]{24}\.[A-Za-z0-9]{14,20}\b",
        _last_field(".", 62, 2),
    ),
    # The catch hook's id after the account's (th zapierwebhook); a Tines webhook's secret
    # after its path (th tineswebhook). The hosts and ids stay.
    Detector(
        "zapier_webhook_url",
        r"\bhooks\.zapier\.com/hooks/catch/[0-9]{4,12}/(?P<zapier_webhook_url__value>[A-Za-z0-9]{5,16})\b",
    ),
    Detector(
        "tines_webhook_url",
        r"\b[\w-]+\.tines\.com/webhook/[a-z0-9]{32}/(?P<tines_webhook_url__value>[a-z0-9]{30,36})\b",
    ),
    # --- AI providers ------------------------------------------------------------------------
    Detector(  # hf_<34>, api_org_<34> (gl huggingface-*, th huggingface, cs)
        "huggingface_token",
        r"\b(?:hf_|api_org_)[A-Za-z0-9]{32,38}\b",
        _last_field("_", 62, 2),
    ),
    Detector("replicate_token", r"\br8_[A-Za-z0-9_-]{35,41}", _after(3, 64, 2)),  # th replicate
    # gsk_<52> (th groq); the body carries "WGdyb3FY" (base64 of "Xgroq", cs).
    Detector(
        "groq_key",
        r"\bgsk_[A-Za-z0-9]{50,56}\b",
        _after(4, 62, 2),
        verify=lambda value: "WGdyb3FY" in value,
    ),
    Detector("perplexity_key", r"\bpplx-[A-Za-z0-9]{46,52}\b", _after(5, 62, 2)),  # gl, cs
    Detector("xai_key", r"\bxai-[A-Za-z0-9_]{78,84}\b", _after(4, 63, 2)),  # th xai, cs
    Detector(  # no prefix: 32 characters after "mistral"
        "mistral_key", _keyed("mistral_key", r"mistral", r"[A-Za-z0-9]{32}"), _mixed
    ),
    Detector(  # no prefix: 40 characters after "cohere"/CO_API_KEY (gl cohere-api-token)
        "cohere_key",
        _keyed("cohere_key", r"cohere|\bco[_-]api[_-]key", r"[A-Za-z0-9]{40}"),
        _mixed,
    ),
    Detector(  # th langsmith
        "langsmith_key", r"\blsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{8,14}\b", _after(8, 16)
    ),
    Detector(  # th pinecone
        "pinecone_key",
        r"\bpcsk_[A-Za-z0-9]{5,6}_[A-Za-z0-9]{61,67}\b",
        _last_field("_", 62, 2),
    ),
    Detector(  # cs Tavily API Key
        "tavily_key", r"\btvly-(?:dev-|prod-)?[A-Za-z0-9]{30,36}\b", _last_field("-", 62, 2)
    ),
    Detector("together_key", r"\btgp_v1_[A-Za-z0-9_-]{41,47}", _after(7, 64)),  # cs
    Detector("nvidia_key", r"\bnvapi-[A-Za-z0-9_-]{62,68}", _after(6, 64)),  # th nvapi
    # sk_<48 hex> (th elevenlabs v2): "sk_" is common, so a narrow range that no hex digest
    # (32, 40, 56, 64) falls in.
    Detector("elevenlabs_key", r"\bsk_[a-f0-9]{46,52}\b", _after(3, 16)),
    # Keys of agent tooling and model hosts, each prefix documented by its provider.
    Detector("fireworks_key", r"\bfw_[A-Za-z0-9]{22,28}\b", _token(3, 62, 3)),
    Detector("cerebras_key", r"\bcsk-[a-z0-9]{46,52}\b", _after(4, 36, 2)),
    Detector("jina_key", r"\bjina_[A-Za-z0-9_-]{40,72}", _token(5, 64, 2)),
    Detector("firecrawl_key", r"\bfc-[a-f0-9]{30,36}\b", _after(3, 16)),
    Detector("e2b_key", r"\be2b_[a-f0-9]{38,44}\b", _after(4, 16)),
    Detector("voyage_key", r"\bpa-[A-Za-z0-9_-]{41,47}", _token(3, 64, 3)),
    Detector(  # re_<8>_<24> (Resend)
        "resend_key", r"\bre_[A-Za-z0-9]{6,10}_[A-Za-z0-9]{22,28}\b", _token(3, 62, 3)
    ),
    Detector("render_key", r"\brnd_[A-Za-z0-9]{26,34}\b", _token(4, 62, 3)),
    Detector("neon_key", r"\bnapi_[a-z0-9]{60,68}\b", _after(5, 36, 2)),
    # Prefixes and markers of TruffleHog's detectors (which ask for a keyword in the text
    # too; the prefix or the marker with the shape marks these alone).
    Detector("razorpay_key", r"\brzp_(?:live|test)_[A-Za-z0-9]{12,16}\b", _after(9, 62, 2)),
    Detector("ramp_key", r"\bramp_sec_[A-Za-z0-9]{44,52}\b", _after(9, 62, 2)),
    # <0|1>.A<50+>.Ag<250+> Microsoft Entra ID refresh tokens (th azure_entra refreshtoken).
    Detector(
        "azure_refresh_token",
        r"\b[01]\.A[A-Za-z0-9_-]{50,}(?:\.[0-9])?\.Ag[A-Za-z0-9_-]{250,}",
        _last_field(".", 64, 2),
    ),
    # <42>+ACR<6> Azure Container Registry passwords (th azurecontainerregistry): the run
    # before the marker unbounded, its length checked (as _azure_identifiable).
    Detector(
        "azure_container_registry_key",
        r"\b[A-Za-z0-9+/]+\+ACR[A-Za-z0-9]{5,7}\b",
        lambda value: _marked(value, "+ACR", 42),
    ),
    Detector(  # git&<12 digits>&<86>== (th azureapimanagement repository keys)
        "azure_apim_key",
        r"\bgit&[0-9]{12}&[A-Za-z0-9/+]{80,90}={0,2}",
        _last_field("&", 64, 2),
    ),
    Detector("deno_token", r"\bdd[pw]_[A-Za-z0-9]{34,38}\b", _token(4, 62, 2)),
    Detector("spectralops_token", r"\bspu-[a-z0-9]{30,34}\b", _after(4, 36, 2)),
    Detector("pganalyze_key", r"\bpgar_[A-Za-z0-9]{25,29}\b", _after(5, 62, 2)),
    # ptr_<20-60>: "ptr_" opens names in C, so the body mixes cases and digits, no name.
    Detector("portainer_token", r"\bptr_[A-Za-z0-9/+=_-]{20,60}", _token(4, 64, 3)),
    Detector("aws_appsync_key", r"\bda2-[a-z0-9]{24,28}\b", _after(4, 36, 2)),
    Detector("teamwork_token", r"\btkn\.v1_[A-Za-z0-9]{68,74}={0,2}", _after(7, 62, 2)),
    Detector(  # 1000.<32 hex>.<32 hex> Zoho OAuth tokens (th zohocrm)
        "zoho_token", r"\b1000\.[a-f0-9]{30,34}\.[a-f0-9]{30,34}\b", _last_field(".", 16)
    ),
    Detector(  # api-/sdk-<UUID v4> (th launchdarkly); mob- keys are public
        "launchdarkly_key",
        r"\b(?:api|sdk)-[a-f0-9]{8}-[a-f0-9]{4}-4[a-f0-9]{3}-[89ab][a-f0-9]{3}-[a-f0-9]{10,14}\b",
        _random_part(lambda value: value[4:].replace("-", ""), 16),
    ),
    Detector(  # master-/account-<20> Gemini exchange keys (th gemini)
        "gemini_exchange_key",
        r"\b(?:master|account)-[A-Za-z0-9]{18,22}\b",
        _token_field("-", 62, 3),
    ),
    Detector(  # <22 base64>==:<32> Tableau personal access tokens (th tableau)
        "tableau_token",
        r"\b[A-Za-z0-9+/]+==:[A-Za-z0-9]{30,34}\b",
        lambda value: _marked(value, "==:", 22),
    ),
    Detector(  # <22>tt-<6 digits>-<20> Storyblok tokens (th storyblok)
        "storyblok_token",
        r"\b[A-Za-z0-9]+tt-[0-9]{6}-[A-Za-z0-9_-]{18,22}",
        lambda value: (
            value
            if 20 <= value.index("tt-") <= 24 and looks_random(value[: value.index("tt-")])
            else None
        ),
    ),
    Detector(  # <id>.v1.<payload>.<hex> Airtable OAuth tokens (th airtableoauth)
        "airtable_oauth_token",
        r"\b[A-Za-z0-9]+\.v1\.[A-Za-z0-9_-]{20,}\.[a-f0-9]{16,}",
        lambda value: (
            value if value.index(".v1.") >= 10 and looks_random(value.split(".")[2], 64) else None
        ),
    ),
    Detector("alchemy_token", r"\balcht_[A-Za-z0-9]{28,32}\b", _after(6, 62, 2)),
    # sk_live_<93> (th apideck): before Stripe's, whose body stops at a "-".
    Detector("apideck_key", r"\bsk_live_[A-Za-z0-9-]{88,98}", _after(8, 63, 2)),
    Detector(  # sk_(test_)?<UUID> (th checkout)
        "checkout_key",
        r"\bsk_(?:sbox_|test_)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{10,14}\b",
        _random_part(lambda value: value.rsplit("_", 1)[1].replace("-", ""), 16),
    ),
    Detector(  # sk_<4 digits>_<6 digits>_<32 hex> (th tickettailor)
        "tickettailor_key", r"\bsk_[0-9]{4}_[0-9]{6}_[a-f0-9]{30,34}\b", _last_field("_", 16)
    ),
    Detector(  # sk_pr_<name>_<40 hex> (th photoroom)
        "photoroom_key",
        r"\bsk_pr_(?:[A-Za-z0-9-]+_)*[a-f0-9]{38,42}\b",
        _last_field("_", 16),
    ),
    Detector(  # sk_(test_)?<n>x<n>_<64 hex> (th rechargepayments)
        "recharge_key",
        r"\bsk_(?:test_)?(?:1|2|3|5|10)x[123]_[0-9a-fA-F]{60,68}\b",
        _last_field("_", 16),
    ),
    # sk_<18+>, no "_" in it (th iexapis, baremetrics): "sk_" is common, so the body mixes
    # two classes at least and reads as no name. After Stripe's, ElevenLabs' and the above.
    Detector("sk_prefixed_key", r"\bsk_[A-Za-z0-9]{18,}\b", _sk_prefixed),
    Detector("clickup_key", r"\bpk_[0-9]{6,10}_[0-9A-Z]{30,34}\b", _last_field("_", 36, 2)),
    # KEY<55> (th telnyx): names in capitals (KEY_VAULT_...) hold no lower case.
    Detector("telnyx_key", r"\bKEY[0-9A-Za-z_-]{52,58}", _token(3, 64, 3)),
    Detector("ecostruxure_key", r"\bAK1[0-9A-Za-z/]{48,57}", _token(3, 63, 3)),
    Detector("close_key", r"\bapi_[A-Za-z0-9.]{42,48}", _token(4, 63, 3)),
    # (a random body of 16 reads as a name 1 time in ~1,200: no such test, three classes)
    Detector("convertapi_key", r"\bsecret_[0-9A-Za-z]{14,18}\b", _after(7, 62, 3)),
    Detector("column_key", r"\b(?:test|live)_[A-Za-z0-9]{25,29}\b", _token(5, 62, 3)),
    Detector("finage_key", r"\bAPI_KEY[0-9A-Z]{30,34}\b", _after(7, 36, 2)),
    Detector("smooch_key", r"\bact_[0-9a-z]{22,26}\b", _after(4, 36, 2)),
    Detector("dfuse_key", r"\bweb_[0-9a-z]{30,34}\b", _after(4, 36, 2)),
    Detector("besttime_key", r"\bpri_[a-f0-9]{30,34}\b", _after(4, 16)),
)
