"""Redact: nothing secret or personal reaches the log, the store, or a log line.

For each span every text it carries — name, status message, attribute values, the
normalized Input/Output bodies, event names and attributes, link attributes, resource
attributes — is one segment of a single NUL-joined string scanned in one RE2 pass. Only
segments with a hit (or a sensitive key) get more work:

- plain text: each validated match is replaced by a typed, keyed pseudonym
  ``<kind:hmac12>`` (HMAC-SHA256 with the collector's redaction key over the secret's
  canonical form), so one secret gets one pseudonym in every placement, request and restart
  and stays joinable without being readable. A pseudonym is never scanned again;
- JSON (a string holding an object or array): parsed, walked with a depth limit, keys
  scanned like values, values of sensitive keys replaced whatever they are, strings
  redacted as text, re-serialized; text that is not clean JSON (a repr, truncated or
  duplicate-key JSON) is scanned as text instead;
- encodings that hide a secret from the scan are looked through: percent-encoded text is
  decoded, base64 blobs that decode to text are scanned (bounded) and replaced whole when
  they hold a secret;
- anything that cannot be processed is replaced by a sentinel and counted (fail closed).

Each replacement is recorded on the span as ``<field><json path>:<rule>`` (never the
value; paths are built from what is stored, so a key that was a secret appears as its
pseudonym) in ``Redactions``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import hmac
import itertools
import json
import logging
import re
import sys
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import orjson
import re2

from collector.model import SpanRecord, escape_surrogates
from collector.processors import prefilter
from collector.processors.providers import PROVIDER_DETECTORS, REPLACED_RULES
from collector.processors.rules import (
    DETECTORS,
    VERIFIED,
    WIDE_DASHES,
    WIDE_LETTER,
    WIDE_SEPARATOR,
    WIDE_SEPARATORS,
    Detector,
    RedactionConfig,
    card_groups,
    card_layout,
    command_secret,
    generated_value,
    is_sensitive_key,
    key_hints,
    names_a_generated_key,
    names_a_secret_flag,
    value_in_text,
)

__all__ = ["BUILTIN_DETECTORS", "FAILED_SENTINEL", "Redactor", "RedactorStats"]

# Provider credentials first: at one start position the first alternative wins, and a
# generic rule that matches and then rejects (an IBAN-shaped GitLab runner token) would
# otherwise hide the credential.
BUILTIN_DETECTORS: tuple[Detector, ...] = (
    *PROVIDER_DETECTORS,
    *[d for d in DETECTORS if d.name not in REPLACED_RULES],
)

logger = logging.getLogger("afr.collector.redact")

FAILED_SENTINEL = "<redaction_failed>"
_SEPARATOR = "\x00"
_PSEUDONYM_CACHE = 16_384
_CLEAN_CACHE = 16_384
_CLEAN_MAX_CHARS = 256
# What became of a segment's text, for the same text in a later segment: an agent's spans
# repeat its conversation (each model call's input holds every message before it), so
# most of a run's text arrives several times. Texts from this long, up to this many
# characters held (texts and results; one text and its result at most a 16th of it), then
# forgotten all at once.
_RECALL_MIN_CHARS = 64
_RECALL_MAX_CHARS = 1 << 20
# A segment's text (this long at least) that came out as it went in is not scanned when it
# comes again: up to this many characters held, then forgotten all at once.
_UNCHANGED_MAX_CHARS = 1 << 22
# A JSON string inside a JSON string: an escaped backslash before a quote or a backslash.
_NESTED_JSON_STRING = r'\\\\[\\\\"]'
_MAX_SUBSETS = 1024  # exact matchers for the sets of detectors found together
# Matchers without a turned-down rule (_others): rarer, and one of all the detectors but
# one holds ~4 MB once used and takes ~35 ms to compile.
_MAX_WITHOUT = 32
_LOOK_PAST = 1024  # bytes past a turned-down span its second look may read (_within)
_LOOK_BUDGET = 4  # times a text's length its second looks may read in all (_scan_text)
_MAX_PATH_RUN = 1024  # a base64 run longer than this is no path (_path_words)
_MIN_PART = 8  # a path's part shorter than this (but the last) holds no token (_path_words)
_CLOSERS = b" \t\"'\\<>)]}"  # what may follow a value inside its match and close it
_MEASURE = 8  # one span in this many is timed on the engine in use
_BURST = 24  # consecutive spans the other engine gets when it is measured
_BURST_WARM = 8  # the first of them are not timed: it is cache-cold then
_FIRST_PERIOD = 512  # spans between two measures of the other engine, doubled while it
_MAX_PERIOD = 16_384  # loses by more than _CLEAR_LOSS (to this), reset when it wins
_CLEAR_LOSS = 1.5
# The other engine takes over when two bursts in a row cost less than this fraction of the
# one in use: a burst's 16 spans are not the spans the one in use was timed on, and one
# burst's measure was seen 2.5x off (RE2 at 16 ns per byte where it costs ~2x Hyperscan).
_CLEAR_WIN = 0.8
# More matches than one per this many bytes: the segments are found one search at a time.
_MAX_MATCH_DENSITY = 16
_MIN_SCAN_CHARS = 6  # shorter than the shortest thing any detector matches ("a@b.co")
# Our own output: never scanned again (a replay sends stored, pseudonymized text back in).
_PSEUDONYM = r"<[a-z0-9_]{1,64}:[0-9a-f]{12}>"
_IS_PSEUDONYM = re.compile(_PSEUDONYM).fullmatch
_PSEUDONYMS = re.compile(_PSEUDONYM)


def _named(key: str) -> str:
    """What a key names, without the pseudonyms in it: a key that held a secret is stored
    with its pseudonym, whose label (``<secret:…>``, ``<aws_access_key:…>``) names no key."""
    return _PSEUDONYMS.sub("", key) if "<" in key else key


# A base64 run long enough to hold a credential (or any bytes value the decoder kept as
# "base64:…"); tried last, so a detector matching at the same place (an Azure key) wins.
_BASE64_BLOB = r"base64:[A-Za-z0-9+/]{4,}={0,2}|(?:\b|[+/])[A-Za-z0-9+/]{31,}={0,2}"
_BASE64_BLOB_LOOSE = r"base64:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{31}"  # a superset of it
_MAX_BLOB_CHARS = 256 * 1024
_MAX_DECODE_DEPTH = 2  # base64 in base64, percent-encoding in base64: and no further
# Rules that find a secret by what surrounds it (a key name, a header, a URL or a provider's
# connection-string field: every rule whose match is wider than the secret, i.e. that names
# an inner value group): the value is labelled ``secret``, the one label a sensitive key's
# value gets too — unless the whole value is itself a secret some value detector knows (a
# GitHub token after "token="), which then labels and keys it. One secret, one pseudonym.
_CONTEXT_RULES = frozenset({"sensitive_key"})
# Rules whose match starts at a key's name ("db_password=…", "Authorization: …").
_KEYED_RULES = frozenset(
    {
        "key_value_secret",
        "key_value_key",
        "key_value_token",
        "authorization_header",
        "cookie_header",
    }
)
# How a map key's value is treated: scanned, replaced, left, or replaced when it looks
# generated and scanned otherwise (client_key: names_a_generated_key).
_SCAN, _SECRET, _ALLOWED, _GENERATED = range(4)
# (label prefix, owner, key or attribute name, text): owner[key] = redacted, or setattr on a
# span. The provenance label is only built for a segment that is processed.
_Slot = tuple[str, Any, Any, str]
_FIELD_LABELS = {
    "span_name": "name",
    "status_message": "status",
    "service_name": "service",
    "scope_name": "scope",
}


@dataclass
class RedactorStats:
    spans: int = 0
    redactions: int = 0
    failed_closed: int = 0
    by_rule: dict[str, int] = field(default_factory=dict)


class _Unprocessable(Exception):
    """Content the redactor will not vouch for: it is replaced, never stored raw."""


class _DuplicateKey(ValueError):
    """JSON with a repeated key: a parse keeps one value, so it is scanned as text."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) != len(pairs):
        raise _DuplicateKey
    return document


class Redactor:
    def __init__(
        self,
        secret: bytes,
        config: RedactionConfig | None = None,
        *,
        use_prefilter: bool | None = None,
    ) -> None:
        """``use_prefilter``: find candidates with Hyperscan first (``prefilter``); None:
        when the package is installed. The results are the same either way."""
        self._secret = secret
        self.config = config = config or RedactionConfig()
        detectors = [
            d
            for d in (*BUILTIN_DETECTORS, *config.extra_detectors)
            if d.name not in config.disabled_rules
        ]
        self._accept: dict[str, Callable[[str], str | None] | None] = {
            d.name: d.accept for d in detectors
        }
        self._verify = {d.name: d.verify for d in detectors if d.verify is not None}
        self._canonical: dict[str, Callable[[str], str]] = {
            d.name: d.canonical for d in detectors if d.canonical is not None
        }
        options = re2.Options()
        options.max_mem = 256 << 20  # the DFA of ~100 detectors outgrows RE2's 8 MiB default
        # Two exact matchers: all detectors, and all but the provider credentials. Exact
        # lengths make the providers' DFA costly to walk, so a loosened form of them (a
        # superset: counted repeats become + or *) decides cheaply whether a text can hold
        # one at all; most text cannot, and is matched without them.
        providers = {d.name for d in PROVIDER_DETECTORS}
        self._context_rules = _CONTEXT_RULES | {
            d.name for d in detectors if f"(?P<{d.name}__" in d.pattern
        }
        self._full = _matcher(detectors, options)
        self._base = _matcher([d for d in detectors if d.name not in providers], options)
        keyed = [d for d in detectors if d.name in _KEYED_RULES]
        self._keyed = _matcher(keyed, options) if keyed else None
        hint = (
            "|".join(_loosened(d.pattern) for d in detectors if d.name in providers) or r"[^\s\S]"
        )
        self._provider_hint = _Bytes(re2.compile(hint.encode(), options))
        self._extra_keys = tuple(config.extra_key_names)
        key_words, end_words = key_hints(self._extra_keys)
        # The scan pattern adds more groups to the detectors (the providers loosened): they
        # only select segments for a closer look; replacements use the exact matchers. It
        # runs without anchors: a value is scanned inside the span's joined text, where "^"
        # and "$" of a rule (a PEM cut short, "-u user:pass") do not hold for it.
        # A JSON key that may hold a secret whatever its value looks like: a sensitive word
        # in it, or at its end, before its closing quote (escaped in JSON inside a string).
        # Not from the key's opening quote: the end of the match (all the selection uses)
        # is the same, and a scan for the words first is ~2x faster.
        json_key = (
            rf'(?P<json_sensitive_key>(?i:{key_words})[^"\x00]*"\s*:'
            rf'|(?i:{end_words})\\*"\s*:)'
        )
        # An escaped character, which could hide a value from the raw scan: such JSON is
        # decoded and walked.
        json_escape = r"(?P<json_escape>\\u[0-9a-fA-F]{4})"
        # A name/value pair whose name is sensitive ({"name": "authorization", "value":
        # ...} or ["x-api-key", ...]), as headers often travel; the second form from the
        # word on, as the key above.
        pair_words = f"{key_words}|{end_words}"
        json_pair = (
            rf'(?P<json_sensitive_pair>"(?:name|key)"\s*:\s*"[^"\x00]*(?i:{pair_words})'
            rf'|(?i:{pair_words})[^"\x00]*"\s*,)'
        )
        # Percent-encoded text, decoded before it is scanned.
        percent = r"(?P<percent_encoded>%[0-9A-Fa-f]{2})"
        self._scan = re2.compile(
            prefilter.unanchored(
                "|".join(
                    (
                        self._base.text.pattern,
                        hint,
                        json_key,
                        json_escape,
                        json_pair,
                        percent,
                        _NESTED_JSON_STRING,
                    )
                )
            ),
            options,
        )
        self._detectors = detectors
        self._options = options
        self._numbers: dict[frozenset[str], _Matcher] = {}
        """Number detectors of some kinds, alone (``_number_matcher``)."""
        self._prefilter: prefilter.Prefilter | None = None
        self._shadowed = False
        """Whether the prefilter's patterns are over shadows (``_scanned``)."""
        if prefilter.AVAILABLE if use_prefilter is None else use_prefilter:
            # Pattern i + 1 is detector i; the scan's own patterns follow. The base64 runs
            # stay with RE2: a run of 31+ letters is costly for Hyperscan to count and cheap
            # for RE2 on its own.
            # Detectors match text as it is and JSON strings one level deep (\" is in their
            # patterns); a string inside a string inside JSON (\\\" or \\\\) is selected
            # so that it is decoded and matched exactly, as the loosened providers select it
            # for RE2.
            patterns = [_PSEUDONYM, *[d.pattern for d in detectors], _BASE64_BLOB]
            matched = len(patterns)  # what ids() reports; the rest only select segments
            patterns += [json_key, json_escape, json_pair, percent, _NESTED_JSON_STRING]
            selection: dict[str, Any] = {
                "side": [len(detectors) + 1],
                "select_only": range(matched, len(patterns)),
                # Which segments hold one, in the one scan of a span: 31 letters in a row
                # (no word boundary before them: that made the scan 3x slower).
                "loose": {len(detectors) + 1: _BASE64_BLOB_LOOSE},
            }
            # The patterns over shadows (prefilter.shadow): text beyond ASCII is scanned as
            # its shadow, as bytes, and no database for UTF-8 is built (they took 4-5 s of
            # a worker's start). Over UTF-8 only when a user's pattern names a character
            # beyond ASCII a shadow cannot stand for.
            shadows = [prefilter.shadow_pattern(p, WIDE_LETTER, WIDE_SEPARATOR) for p in patterns]
            self._shadowed = all(shadow is not None for shadow in shadows)
            if self._shadowed:
                patterns = [p for p in shadows if p is not None]
            self._prefilter = prefilter.Prefilter(patterns, bytes_only=self._shadowed, **selection)
        self._subsets: dict[frozenset[int], _Matcher] = {}
        self._without: dict[tuple[frozenset[str], bool], _Matcher] = {}  # _others
        self._matchable = frozenset(range(len(detectors) + 2))  # what a subset is made of
        self._scan_bytes = _Bytes(re2.compile(self._scan.pattern.encode(), options))
        self._chooser = _Chooser()
        # One span at a time: what is being processed (the segment's detectors, the decode
        # depth) lives on the instance, and inline ingest runs large requests on threads.
        self._lock = threading.RLock()
        self.forced_engine: int | None = None
        """Selection by RE2 (0) or Hyperscan (1) on every span, not the faster: for tests."""
        self._key_classes: dict[str, tuple[int, bool]] = {}
        self._sensitive_keys: dict[str, int] = {}  # JSON keys and pair names: _secret_value
        self._plain_keys: set[str] = set()  # classified keys that cannot hold a secret
        self._decode_depth = 0  # how many encodings (percent, base64) the text is inside
        self._clean: set[str] = set()  # short texts (JSON strings, keys, values) that hold nothing
        # A text -> (what it became, its Redactions entries after the text's label, the rule
        # of each count it made): _redact_recalling.
        self._recalled: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {}
        self._recalled_chars = 0
        # Segments' texts (_RECALL_MIN_CHARS and longer) that came out as they went in, JSON
        # documents too: left out of the next span's scan (_scan_slots).
        self._unchanged: set[str] = set()
        self._unchanged_chars = 0
        self._counted: list[str] | None = None  # the rules _count counted, to remember
        self._json_floats = False  # the document being walked holds a float
        # The patterns the span's scan found in the segment being processed (_scan_slots).
        self._segment_ids: set[int] | None = None
        # They stand only for texts without a character JSON escapes: the segment has
        # escapes of those (a JSON string inside a JSON string, a line break).
        self._plain_only = False
        # A conversation repeats the same address or card in many messages: HMAC each once.
        self._pseudonyms: dict[tuple[str, str], str] = {}
        self.stats = RedactorStats()
        self._resource_cache: dict[int, tuple[dict[str, str], dict[str, str], list[str]]] = {}

    # --- the processor -------------------------------------------------------------------
    def __call__(self, records: list[SpanRecord]) -> list[SpanRecord]:
        with self._lock:
            self._resource_cache.clear()
            for record in records:
                self._redact_span(record)
        return records

    def pseudonym(self, rule: str, value: str) -> str:
        """``<kind:hmac12>``. Keyed on the value's canonical form only, not on the rule that
        found it: one secret, one pseudonym, wherever it was and whatever found it."""
        cached = self._pseudonyms.get((rule, value))
        if cached is None:
            canonical = self._canonical.get(rule)
            if rule in self._context_rules:
                # "Bearer X", "token=X" and {"authorization": "Bearer X"}: one secret, X.
                label, keyed = "secret", _AUTH_SCHEME.sub("", value.strip(), count=1)
            else:
                label, keyed = rule, canonical(value) if canonical is not None else value.strip()
            raw = keyed.encode("utf-8", "surrogatepass")  # text, as scanned (see _scan_text)
            digest = hmac.digest(self._secret, raw, "sha256").hex()  # one call into C
            cached = f"<{label}:{digest[:12]}>"
            if len(self._pseudonyms) >= _PSEUDONYM_CACHE:
                self._pseudonyms.clear()
            self._pseudonyms[(rule, value)] = cached
        return cached

    def redact_span(self, record: SpanRecord) -> None:
        with self._lock:
            self._redact_span(record)

    def _redact_span(self, record: SpanRecord) -> None:
        self.stats.spans += 1
        fired: list[str] = []
        # Resource attributes are shared by every span of a ResourceSpans: scan them once.
        key = id(record.resource_attributes)
        cached = self._resource_cache.get(key)
        if cached is None or cached[0] is not record.resource_attributes:
            original = record.resource_attributes
            resource_fired: list[str] = []
            resource_slots: list[_Slot] = []
            redacted = self._map_slots("resource.", original, resource_slots, resource_fired)
            self._scan_slots(resource_slots, resource_fired)
            self._resource_cache[key] = cached = (original, redacted, resource_fired)
        record.resource_attributes = cached[1]
        fired.extend(cached[2])

        # Everything else of the span: one segment list, one scan.
        slots: list[_Slot] = [
            ("", record, "span_name", record.span_name),
            ("", record, "status_message", record.status_message),
            ("", record, "input", record.input),
            ("", record, "output", record.output),
            ("", record, "service_name", record.service_name),
            ("", record, "scope_name", record.scope_name),
            ("", record, "scope_version", record.scope_version),
            ("", record, "trace_state", record.trace_state),
        ]
        record.span_attributes = self._map_slots("attr.", record.span_attributes, slots, fired)
        if record.body_attributes:
            record.body_attributes = self._map_slots("body.", record.body_attributes, slots, fired)
        for index, name in enumerate(record.event_names):
            slots.append((f"event[{index}].name", record.event_names, index, name))
            record.event_attributes[index] = self._map_slots(
                f"event[{index}].attr.", record.event_attributes[index], slots, fired
            )
        for index, attributes in enumerate(record.link_attributes):
            state = record.link_trace_states[index]
            slots.append((f"link[{index}].trace_state", record.link_trace_states, index, state))
            record.link_attributes[index] = self._map_slots(
                f"link[{index}].attr.", attributes, slots, fired
            )
        self._scan_slots(slots, fired)
        if fired:
            record.redactions = record.redactions + fired

    # --- internals -----------------------------------------------------------------------
    def _key_kind(self, key: str) -> int:
        """How a key's value is treated: kept (allowed), replaced (a secret's name),
        replaced when it looks generated (``client_key``), or scanned as any text."""
        if key in self.config.allow_keys:
            return _ALLOWED
        named = _named(key)
        if is_sensitive_key(named, self._extra_keys):
            return _SECRET
        return _GENERATED if names_a_generated_key(named) else _SCAN

    def _classify_key(self, key: str) -> tuple[int, bool]:
        """How a key's value is treated, and whether the key itself holds a secret (keys
        are content: a user's e-mail, a PEM used as a key)."""
        known = self._key_kind(key)
        try:
            # Seen as the values are (_scan_slots): after "\n" in JSON text, a word starts.
            holds_secret = len(key) >= _MIN_SCAN_CHARS and self._may_hold(_escape_view(key))
        except UnicodeEncodeError:  # a lone surrogate: RE2 takes UTF-8 only; scanned as bytes
            holds_secret = True
        if len(self._key_classes) > 65_536:
            self._key_classes.clear()
            self._plain_keys.clear()
        self._key_classes[key] = (known, holds_secret)
        if not holds_secret:
            self._plain_keys.add(key)
        return known, holds_secret

    def _map_slots(
        self, prefix: str, mapping: dict[str, str], slots: list[_Slot], fired: list[str]
    ) -> dict[str, str]:
        """The map with its keys redacted and its sensitive values replaced; the values left
        to scan are added to ``slots`` (they are written into the returned map)."""
        classes = self._key_classes
        # The common case has no key to rename (every key classified, none can hold a
        # secret): the map is edited in place.
        renames = not self._plain_keys.issuperset(mapping)
        out: dict[str, str] = {} if renames else mapping
        for key, value in mapping.items():
            known = classes.get(key)
            kind, holds_secret = known if known is not None else self._classify_key(key)
            stored = key
            if holds_secret:
                stored = self._redact_text(key, f"{prefix}<key>", fired)
            if (
                (kind == _SECRET or (kind == _GENERATED and generated_value(value)))
                and value
                and value not in self.config.allow_values
            ):
                out[stored] = self._replace_whole(value, f"{prefix}{stored}", fired)
                continue
            out[stored] = value
            if kind in (_SCAN, _GENERATED):
                slots.append((prefix, out, stored, value))
        return out

    def _replace_whole(self, value: str, where: str, fired: list[str]) -> str:
        """A value under a sensitive key, whatever it looks like: one pseudonym (a pseudonym
        already is one: it is stored again as it is, as a replay sends it back)."""
        if _IS_PSEUDONYM(value):
            return value
        rule, secret = self._known_secret("sensitive_key", value)
        self._count(fired, f"{where}:{rule}{self._confidence(rule, secret)}", rule)
        return self.pseudonym(rule, secret)

    def _known_secret(self, rule: str, value: str) -> tuple[str, str]:
        """(rule, value) of a value found by its context, relabelled when the whole value is
        a secret some value detector recognises."""
        stripped = value.strip()
        if len(stripped) < _MIN_SCAN_CHARS or _IS_PSEUDONYM(stripped):
            return rule, value
        try:
            matcher = self._matcher_for(stripped.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate: no value detector matches one
            return rule, value
        match = None if matcher is None else matcher.text.fullmatch(stripped)
        if matcher is None or match is None:
            return rule, value
        inner = matcher.rule_of_group.get(match.lastindex or 0)
        if inner is None or inner in self._context_rules or inner in ("pseudonym", "base64_blob"):
            return rule, value
        accept = self._accept.get(inner)
        if accept is not None and accept(stripped) != stripped:
            return rule, value
        return inner, stripped

    def _scan_slots(self, slots: list[_Slot], fired: list[str]) -> None:
        # A text seen before in a segment is not scanned again: one that came out as it went
        # in does so again, and one whose outcome is recalled gets it (_redact_recalling),
        # in its turn among the others (its Redactions entries keep their order). What
        # redaction makes of a segment depends on its text alone, and an agent's spans
        # repeat their conversation's messages, each as an attribute of its own.
        unchanged, recalled = self._unchanged, self._recalled
        fresh: list[int] = []  # the positions of the slots scanned
        known: list[int] = []  # of those whose outcome is recalled
        for position, slot in enumerate(slots):
            text = slot[3]
            if len(text) >= _RECALL_MIN_CHARS:
                if text in unchanged:
                    continue
                if text in recalled and _recallable(text):
                    known.append(position)
                    continue
            fresh.append(position)
        texts = [slots[position][3] for position in fresh]
        joined = _SEPARATOR.join(texts)
        if len(joined) > self.config.max_scan_bytes:
            for position in sorted(fresh + known):
                self._process(slots[position], fired)
            return
        view = _escape_view(joined)
        if len(view) < _MIN_SCAN_CHARS:
            for position in known:
                self._process(slots[position], fired)
            return
        finder = self._prefilter
        engine, timed = 0, False
        if finder is not None:
            engine, timed = self._chooser.next()
            forced = self.forced_engine
            if forced is not None:
                engine = forced
        clock = self._chooser.clock
        began = clock() if timed else 0
        try:
            touched, found, engine = self._touched(view, texts, engine)
        except UnicodeEncodeError:
            # A lone surrogate (the decoders never hand one over): RE2 takes UTF-8 only, so
            # each text is looked at on its own, as bytes (or fails closed).
            for position in sorted(fresh + known):
                self._process(slots[position], fired)
            return
        # Each touched segment by its position among all, and the recalled ones (-1).
        turns = sorted([(fresh[index], index) for index in touched] + [(p, -1) for p in known])
        changed: set[int] = set()
        try:
            for position, index in turns:
                if index < 0:
                    self._segment_ids = None
                    self._process(slots[position], fired)
                    continue
                # The detectors Hyperscan found in the segment stand for every text matched
                # as it is in it, its bytes as they are there (``_plain_only``). Without
                # them each text is looked at again.
                text = texts[index]
                self._plain_only = escaped = "\\" in text
                hiding = escaped and _HIDING_ESCAPE.search(text.encode("utf-8", "surrogatepass"))
                self._segment_ids = None if found is None or hiding else found[index]
                before = len(fired)
                if self._process(slots[position], fired) is not text or len(fired) != before:
                    changed.add(index)
        finally:
            self._segment_ids = None
        for index, text in enumerate(texts):
            if len(text) >= _RECALL_MIN_CHARS and index not in changed:
                self._remember_unchanged(text)
        if timed:
            # What the engine costs is the selection and the work it leaves: RE2 names no
            # detectors, so each text it selects is looked at again.
            self._chooser.record(engine, clock() - began, len(view) + 64)

    def _redact_recalling(self, text: str, where: str, fired: list[str]) -> str:
        """``_redact_value(text)`` at the top (a segment, or a string of a JSON document
        that is not JSON itself, outside any encoding): what it gives depends on the text
        alone, so a text seen before gets the same value, the same ``Redactions`` entries
        (under its own label ``where``) and the same counts, without the work."""
        known = self._recalled.get(text)
        if known is not None:
            value, entries, rules = known
            if entries:
                fired.extend(where + entry for entry in entries)
                self._recount(rules)
            return value
        before = len(fired)
        outer = self._counted
        counted: list[str] = []
        self._counted = counted
        try:
            value = self._redact_value(text, where, fired)
        finally:
            self._counted = outer
        relative: tuple[str, ...] = ()
        if counted:
            if outer is not None:
                outer += counted
            relative = tuple(entry.removeprefix(where) for entry in fired[before:])
            if any(len(r) == len(e) for r, e in zip(relative, fired[before:], strict=True)):
                return value  # an entry under another label (escaped again): not to repeat
        size = len(text) + (0 if value is text else len(value))
        if size > _RECALL_MAX_CHARS // 16:
            return value  # one text does not take the memory of many (nor keep it alive)
        if self._recalled_chars + size > _RECALL_MAX_CHARS:
            self._recalled.clear()
            self._recalled_chars = 0
        self._recalled[text] = (value, relative, tuple(counted))
        self._recalled_chars += size
        return value

    def _remember_unchanged(self, text: str) -> None:
        if len(text) > _UNCHANGED_MAX_CHARS // 16:
            return  # one text does not take the memory of many
        if self._unchanged_chars + len(text) > _UNCHANGED_MAX_CHARS:
            self._unchanged.clear()
            self._unchanged_chars = 0
        if text not in self._unchanged:
            self._unchanged.add(text)
            self._unchanged_chars += len(text)

    def _recount(self, rules: tuple[str, ...]) -> None:
        if self._counted is not None:
            self._counted += rules
        stats = self.stats
        stats.redactions += len(rules)
        for rule in rules:
            stats.by_rule[rule] = stats.by_rule.get(rule, 0) + 1

    def _touched(
        self, view: str, texts: list[str], engine: int
    ) -> tuple[list[int], dict[int, set[int]] | None, int]:
        """The segments (indexes into ``texts``, NUL-joined as ``view``) a scan pattern hits,
        and when Hyperscan found them, the patterns that match in each (one scan of all);
        otherwise one search per such segment, resuming at the next one (text dense with
        secrets would otherwise pay for every hit twice); and the engine that found them.
        Raises UnicodeEncodeError on a lone surrogate.

        Two engines give the same answer: RE2's one alternation (``engine`` 0: fast on text
        like what it has seen, slow on new tokens, which grow its DFA) and the Hyperscan
        prefilter (1: the same speed on any text, where it can answer). Each span goes to
        the one measured cheaper per byte lately (``_Chooser``), so the choice follows the
        traffic."""
        finder = self._prefilter
        data = view.encode("utf-8")
        by_chars = len(data) == len(view)  # ASCII: byte and character offsets agree
        # Offsets in what was searched: characters, or UTF-8 bytes.
        starts: list[int] = []
        if engine and finder is not None and finder.covers(data):
            if not by_chars and self._shadowed:
                # Beyond ASCII the scan runs on the text's shadow, a byte per character,
                # which Hyperscan scans as bytes, ~1.7x faster than UTF-8 (prefilter.shadow).
                data, by_chars = prefilter.shadow(data), True
            offset = 0
            for text in texts:
                starts.append(offset)
                offset += (len(text) if by_chars else len(text.encode("utf-8"))) + 1
            # One scan says which segments hold a match and which patterns match in each.
            found = finder.segments(data, starts, len(data) // _MAX_MATCH_DENSITY + 16)
            if found is not None:
                return sorted(found), found, 1
            end = finder.first_end(data)  # dense with matches: one search per segment
        else:
            engine = 0
            hit = self._scan_bytes.search(data)
            end = -1 if hit is None else hit.end()
        if end < 0:
            return [], None, engine  # the common case: nothing to look at
        first_end: Callable[[int], int]
        if engine:
            assert finder is not None
            first_end = functools.partial(finder.first_end, data)
        else:
            search = self._scan_bytes.search

            def first_end(start: int) -> int:
                hit = search(data, start)
                return -1 if hit is None else int(hit.end())

        touched: list[int] = []
        if not starts:
            offset = 0
            for text in texts:
                starts.append(offset)
                offset += (len(text) if by_chars else len(text.encode("utf-8"))) + 1
        while end >= 0:
            # By its last character: a match may begin on the separator before its segment.
            index = bisect_right(starts, end - 1) - 1
            touched.append(index)
            if index + 1 >= len(starts):
                break
            # From the separator before it, which a match may use as its left context.
            end = first_end(starts[index + 1] - 1)
        return touched, None, engine

    def _may_hold(self, view: str) -> bool:
        """Whether any scan pattern matches ``view``."""
        try:
            data = view.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: RE2 takes UTF-8 only
            return True
        if self._prefilter is not None and self._prefilter.covers(data):
            return self._prefilter.first_end(self._scanned(data)) >= 0
        return self._scan.search(view) is not None

    def _scanned(self, data: bytes) -> bytes:
        """What the prefilter scans for ``data`` (valid UTF-8 it ``covers``): its shadow
        beyond ASCII when the prefilter's patterns are over shadows, else itself."""
        return prefilter.shadow(data) if self._shadowed and not data.isascii() else data

    def _every_detector(self, data: bytes) -> _Matcher:
        """The matcher of all detectors; the providers only when their loosened form is in
        ``data`` (without it, none of them can match)."""
        return self._full if self._provider_hint.search(data) else self._base

    def _matcher_for(self, data: bytes, in_segment: bool = False) -> _Matcher | None:
        """The exact matcher for ``data`` (UTF-8): only the detectors the prefilter finds in
        it (None: none can match), or without a prefilter all of them (the providers only
        when their loosened form is there). ``in_segment``: ``data`` is text of the segment
        being processed as it is there (not decoded), whose scan already found its
        detectors (``_segment_ids``)."""
        finder = self._prefilter
        if finder is None or not finder.covers(data):
            return self._every_detector(data)
        hinted = self._segment_ids
        if (
            in_segment
            and hinted is not None
            and self._decode_depth == 0
            and not (self._plain_only and _ESCAPED_IN_JSON.search(data))
        ):
            found = hinted
        else:
            found = finder.ids(self._scanned(data))
        # Ids 0 (pseudonyms) to len(detectors) + 1 (base64 runs); the scan's own above.
        chosen = self._matchable.intersection(found)
        if not chosen:
            return None
        matcher = self._subsets.get(chosen)
        if matcher is None:
            if len(self._subsets) >= _MAX_SUBSETS:
                self._subsets.clear()
            matcher = self._subsets[chosen] = _matcher(
                [d for i, d in enumerate(self._detectors, 1) if i in chosen], self._options
            )
        return matcher

    def _process(self, slot: _Slot, fired: list[str]) -> str:
        """Redacts one segment's text into its place; gives what it became."""
        _, target, key, text = slot
        where = _where(slot)
        try:
            if len(text) > self.config.max_scan_bytes:
                raise _Unprocessable("too large to scan")
            if len(text) <= _CLEAN_MAX_CHARS and text in self._clean:
                return text  # seen before, and it held nothing (an SDK trace id on every span)
            before = len(fired)
            if _recallable(text):
                value = self._redact_recalling(text, where, fired)
            else:  # (a JSON document: its strings are recalled as it is walked)
                value = self._redact_value(text, where, fired)
            if len(fired) == before:
                self._remember_clean(text, value)
        except (_Unprocessable, RecursionError, ValueError, TypeError) as exc:
            value = FAILED_SENTINEL
            self.stats.failed_closed += 1
            fired.append(f"{where}:redaction_failed")
            logger.debug("redaction failed closed on %s: %s", where, type(exc).__name__)
        if isinstance(target, SpanRecord):
            setattr(target, key, value)
        else:
            target[key] = value
        return value

    def _redact_value(self, text: str, where: str, fired: list[str], depth: int = 0) -> str:
        if text.lstrip()[:1] in ("{", "["):
            try:
                document = _STRICT_JSON.decode(text)
            except (ValueError, RecursionError):
                document = _NOT_JSON  # a repr, truncated or duplicate-key JSON: text below
            if document is not _NOT_JSON:
                before = len(fired)
                outer, self._json_floats = self._json_floats, False
                try:
                    walked = self._walk(document, where + "$", fired, depth)
                    floats = self._json_floats
                finally:
                    self._json_floats = outer
                if len(fired) == before:
                    return text
                return _json_text(walked, floats)
        return self._redact_text(text, where, fired)

    def _walk(self, node: Any, path: str, fired: list[str], depth: int) -> Any:
        if depth > self.config.max_depth:
            raise _Unprocessable("nested too deeply")
        if isinstance(node, str):
            if len(node) < _MIN_SCAN_CHARS or node in self._clean:
                return node
            if self._decode_depth == 0 and _recallable(node):
                # A message again, in the next model call's input: its outcome is known.
                return self._remember_clean(node, self._redact_recalling(node, path, fired))
            # JSON inside JSON (a tool call's arguments inside a message) is walked too.
            return self._remember_clean(node, self._redact_value(node, path, fired, depth + 1))
        if isinstance(node, dict):
            pair_name = node.get("name", node.get("key"))
            if (
                isinstance(pair_name, str)
                and "value" in node
                and self._secret_value(pair_name, node["value"])
            ):
                # {"name": "authorization", "value": "..."}: the value belongs to the name.
                node = {**node, "value": self._replace_json(node["value"], f"{path}.value", fired)}
            out: dict[str, Any] = {}
            for key, value in node.items():
                stored = (
                    self._remember_clean(key, self._redact_text(key, path + ".<key>", fired))
                    if len(key) >= _MIN_SCAN_CHARS and key not in self._clean
                    else key
                )
                child = f"{path}.{stored}"
                if self._secret_value(key, value):
                    out[stored] = self._replace_json(value, child, fired)
                else:
                    out[stored] = self._walk(value, child, fired, depth + 1)
            return out
        if isinstance(node, list):
            if len(node) == 2 and isinstance(node[0], str) and self._secret_value(node[0], node[1]):
                # A [name, value] pair, as headers often travel. The name is text like any
                # other ("Set-Cookie: sid=..." names a sensitive key and holds secrets too).
                name = self._walk(node[0], f"{path}[0]", fired, depth + 1)
                return [name, self._replace_json(node[1], f"{path}[1]", fired)]
            out_list: list[Any] = []
            after_flag = False
            for index, value in enumerate(node):
                where = f"{path}[{index}]"
                if after_flag and isinstance(value, str) and not _IS_PSEUDONYM(value):
                    # An argument list (a command as a tool call sends it): the argument
                    # after "--password", "--api-key"... is replaced, as in the text rule.
                    label, secret = self._known_secret("cli_password", value)
                    confidence = self._confidence(label, secret)
                    self._count(fired, f"{where}:cli_password{confidence}", "cli_password")
                    out_list.append(self.pseudonym(label, secret))
                else:
                    out_list.append(self._walk(value, where, fired, depth + 1))
                after_flag = (
                    isinstance(value, str)
                    and names_a_secret_flag(value)
                    and index + 1 < len(node)
                    and isinstance(node[index + 1], str)
                    and command_secret(node[index + 1])
                )
            return out_list
        number = node
        if isinstance(node, float):
            if not _written_alike(node):
                self._json_floats = True
            if node.is_integer() and abs(node) >= 1e12:
                number = int(node)  # a card number sent as 4111111111111111.0
        if isinstance(number, int) and not isinstance(number, bool) and abs(number) >= 10**12:
            # Not as the document has it (4.1e15): no segment's text. Its digits without a
            # sign: a card number sent negative (a sign flipped by a bug) is still one.
            as_text = str(abs(number))
            hinted, self._segment_ids = self._segment_ids, None
            try:
                redacted = self._redact_text(as_text, path, fired)
            finally:
                self._segment_ids = hinted
            return node if redacted == as_text else redacted
        return node

    def _remember_clean(self, text: str, redacted: str) -> str:
        """``redacted`` (what became of ``text``, a JSON document's string or key, or a
        segment: an attribute's value); a short text that came out as it went in is
        remembered, and not scanned again: the verdict depends on the text alone, and keys,
        roles, names and ids recur in every message and span. Not
        inside an encoding (percent, base64), where the decoders stop at a depth, nor JSON
        (nested too deeply at one depth and not at another)."""
        if (
            redacted is text
            and len(text) <= _CLEAN_MAX_CHARS
            and self._decode_depth == 0
            and text.lstrip()[:1] not in ("{", "[")
        ):
            if len(self._clean) >= _CLEAN_CACHE:
                self._clean.clear()
            self._clean.add(text)
        return redacted

    def _replace_json(self, value: Any, where: str, fired: list[str]) -> str:
        if isinstance(value, str) and re2.fullmatch(_PSEUDONYM, value):
            return value  # already ours
        plain = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        return self._replace_whole(plain, where, fired)

    def _secret_value(self, key: str, value: Any) -> bool:
        """A value under a sensitive key is replaced whatever it looks like (unless empty or
        explicitly allowed)."""
        kind = self._sensitive_keys.get(key)
        if kind is None:  # every key of every document comes here: classified once per key
            if len(self._sensitive_keys) > 65_536:
                self._sensitive_keys.clear()
            kind = self._sensitive_keys[key] = self._key_kind(key)
        if kind == _GENERATED:  # client_key: only a value that looks generated
            return (
                isinstance(value, str)
                and generated_value(value)
                and value not in self.config.allow_values
            )
        if kind != _SECRET:
            return False
        if value is None or value == "" or value == [] or value == {}:
            return False
        return not (isinstance(value, str) and value in self.config.allow_values)

    def _redact_text(self, text: str, where: str, fired: list[str]) -> str:
        if ("%" not in text and "\\u" not in text) or self._decode_depth >= _MAX_DECODE_DEPTH:
            return self._scan_text(text, where, fired)
        unescaped = _unicode_unescaped(text)
        if unescaped is not None:
            # JSON's \uXXXX escapes in text that did not parse as JSON (cut short, inside a
            # log line): looked at as what they stand for (the raw look finds at best the
            # part of an address after its last escaped letter), and stored so when that
            # holds a secret; else the text as sent is looked at as before.
            revealed, seen = self._redact_decoded(unescaped, where)
            if seen:
                fired.extend(seen)
                return revealed
            if "%" not in text:
                return self._scan_text(text, where, fired)
        # As sent first (a token may be percent-encoded itself), then what is left decoded:
        # when that shows a secret the encoding hid, the text is stored decoded.
        redacted = self._scan_text(text, where, fired)
        decoded = _percent_decoded(redacted)
        if decoded is None:
            return redacted
        revealed, hidden = self._redact_decoded(decoded, where)
        if not hidden:
            return redacted
        fired.extend(hidden)
        return revealed

    def _redact_decoded(self, decoded: str, where: str) -> tuple[str, list[str]]:
        """``decoded`` (what an encoding in a text stands for) redacted one encoding deeper,
        and what was found in it."""
        found: list[str] = []
        self._decode_depth += 1
        try:
            return self._redact_text(decoded, where, found), found
        finally:
            self._decode_depth -= 1

    def _scan_text(self, text: str, where: str, fired: list[str]) -> str:
        # Matched on UTF-8 bytes: the RE2 wrapper maps every match position back to a
        # character offset on str input, which made dense text twice as slow.
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: matched as the bytes Python keeps
            data = text.encode("utf-8", "surrogatepass")
            view = _escape_view_bytes(data)
            matcher: _Matcher | None = self._every_detector(view)
        else:
            view = _escape_view_bytes(data)
            matcher = self._matcher_for(view, in_segment=True)
        if matcher is None:
            return text
        pieces: list[bytes] = []
        cursor = 0
        matches = _paired(matcher, view, 0)
        # What the second looks at turned-down spans may read, in all: text dense with them
        # ("--token ./p " x 18,000) costs a few times its length, not its length for each.
        looked, budget = 0, _LOOK_BUDGET * len(view) + 4 * _LOOK_PAST
        while (item := next(matches, None)) is not None:
            match, used = item  # (used: the matcher that found it, for its group table)
            # lastindex is the rule's own group (it closes after any inner value group);
            # the wrapper's lastgroup recomputes the group table on every call.
            rule = used.rule_of_group.get(match.lastindex or 0)
            if rule is None or rule == "pseudonym" or match.start() < cursor:
                continue  # (before the cursor: inside the value of a key replaced below)
            replaced = self._replace(rule, match, used, data, pieces, cursor, where, fired)
            if replaced == cursor and rule in _NUMBER_RULES:
                # Each candidate the generator gives is tried; it goes on while they fail.
                for candidate in self._numbers_within(rule, match, view):
                    replaced = self._replace(*candidate, data, pieces, cursor, where, fired)
                    if replaced != cursor:  # the search resumes after it (rarely: anew)
                        matches = _paired(matcher, view, replaced)
                        break
            elif replaced == cursor and rule != "base64_blob":
                # A match its checks turn down hides nothing: at one start the first
                # alternative wins, and a provider's keyword match turned down
                # ("CLOUDFLARE_API_KEY=<not its key's shape>") took the span in which the
                # key=value rule finds the secret. The other detectors look at that span
                # again; then the search goes on after it, or after its value where the
                # match runs on past it (a key's value too short to be one, "pwd=x", ends
                # where the next pair's key begins: "&api_key=...").
                others = self._others(used, rule)
                resume = _value_end(match, used, rule)
                if others is not None and looked < budget:
                    looked += resume - match.start() + _LOOK_PAST
                    matches = itertools.chain(
                        _within(others, view, match.start(), resume),
                        _paired(matcher, view, resume),
                    )
                elif resume < match.end():
                    matches = _paired(matcher, view, resume)
            elif replaced == cursor and rule == "base64_blob":
                # A run of base64 characters that is no blob may be a path (a URL's, a
                # file's: "/api/sessions/eyJ...", ".../pkg/AKIA...") that took the span in
                # which a secret begins after one of its "/": the other detectors are
                # matched at the start of each part (_path_words), to the secret's whole
                # length, however far past the run it goes (a JWT of 2 KB).
                words = _path_words(view, match.start(), match.end())
                others = self._others(used, rule) if words else None
                if others is not None:
                    matches = itertools.chain(
                        _at(others, view, words, match.end()),
                        _paired(matcher, view, match.end()),
                    )
            elif cursor < replaced < match.end() and view[replaced : match.end()].strip(_CLOSERS):
                # (not when only a closing quote or "<" follows: the search goes on after)
                # The secret is the first part of its match (a card, and the first digits
                # of a phone after it; a key's unquoted value, trimmed where the line goes
                # on: "password: x, token=y"): the search resumes where it ends.
                matches = _paired(matcher, view, replaced)
            cursor = replaced
            keyed = self._named_like_credential(rule, view, match, used)
            if keyed is not None:
                cursor = self._replace(*keyed, data, pieces, cursor, where, fired)
        if not pieces:
            return text
        pieces.append(data[cursor:])
        return b"".join(pieces).decode("utf-8", "surrogatepass")

    def _numbers_within(
        self, rejected: str, match: Any, view: bytes
    ) -> Iterator[tuple[str, Any, _Matcher]]:
        """After a number the checks turned down, the numbers to try instead, one after
        another while they are turned down too (each an anchored match of the number
        detectors alone, a few dozen characters at most):

        - at the same start, another kind: at one start the first detector wins, and a run
          of digit groups long enough for a card matches as one ("0044 20 7946 0958" and
          "415-555-0123 415-555-0199", two phones read as one card that fails);
        - a number dialled from abroad that runs into the next number ("+44 20 7946 0958
          4111 1111 1111 1111": too many groups for one): the phone before a blank after
          which a number its checks accept begins;
        - after a blank inside it, when what was turned down is no card laid out in groups
          (4-4-4-4, 4-6-5) nor a national phone number (the card in "qty 2 4111 1111 1111
          1111", the phone in "PIN 1234 415-555-0123"); in a card laid out 4-4-4-4 (or
          4-4-4) the short group at its end, the first digits of the number that follows
          ("1234 5678 9012 3456 415-555-0123" matches as a 19-digit card);
        - last, a number dialled with ``+`` that holds none of those: its longest valid
          part before a blank ("+49 30 901820 12 34 56 78", an extension or more digits),
          or else the number after the ``+``, which may stand for a blank (a query
          string's ``q=my+card+4111111111111111``). Not with ``00``, which also begins
          grouped zero-padded ids.

        Nowhere else inside: a shorter number there is part of the one turned down (the
        card-like digits of an invalid IBAN, the "phone" ``0069 3752 7921`` of an invalid
        card, a float's fraction)."""
        start = match.start()
        matched = view[start : match.end()]
        afters = _afters_blanks(view, start, match.end())
        phone = match if rejected == "phone" else None
        for candidate in self._numbers_at(view, start, frozenset((rejected,))):
            yield candidate
            if candidate[0] == "phone":
                phone = candidate[1]  # (turned down too)
        parts = []
        if phone is not None and matched[:1] in (b"+", b"0"):
            parts = self._phone_parts(view, phone)
            for part, after in parts:
                if self._number_accepted_at(view, after):
                    yield "phone", part, self._phones
        starts: list[int] = []
        number = matched.decode("utf-8", "replace")
        if (rejected == "phone" and matched[:1] in (b"+", b"0")) or (
            rejected == "credit_card" and not card_layout(number)
        ):
            starts = afters
        elif rejected == "credit_card":
            groups = card_groups(number)
            if len(groups) >= 4 and len(groups[-1]) < 4:  # (digits: one byte each)
                starts = [match.end() - len(groups[-1])]
        for after in starts:
            yield from self._numbers_at(view, after, frozenset())
        if matched[:1] == b"+":
            for part, _ in parts:
                yield "phone", part, self._phones
            # Last, the number right after the "+", which may stand for a blank: a query
            # string's "q=my+card+4111111111111111" is no number dialled from abroad.
            yield from self._numbers_at(view, start + 1, frozenset())

    def _others(self, used: _Matcher, rule: str) -> _Matcher | None:
        """The matcher of ``used``'s detectors but ``rule`` (None: there is no other); after
        a base64 run, without base64 runs (which would take its tail again, from a "/") and
        without the numbers (in a path, digits between two "/" are an id: Asana's, Discord's,
        a post's; those of a short path are judged as before)."""
        names = frozenset(used.value_groups) - {rule}
        if rule == "base64_blob":
            names -= _NUMBER_RULES
        if not names:
            return None
        runs = rule != "base64_blob"
        others = self._without.get((names, runs))
        if others is None:
            if len(self._without) >= _MAX_WITHOUT:
                self._without.clear()
            others = self._without[names, runs] = _matcher(
                [d for d in self._detectors if d.name in names], self._options, extras=runs
            )
        return others

    @functools.cached_property
    def _phones(self) -> _Matcher:
        """The phone detector alone (there is one when a phone was matched)."""
        phones = self._number_matcher(frozenset({"phone"}))
        assert phones is not None
        return phones

    def _phone_parts(self, view: bytes, phone: Any) -> list[tuple[Any, int]]:
        """The phones that begin where ``phone`` (a number dialled from abroad, turned
        down) does and end before a blank inside it, longest first, each with the offset
        after its blank."""
        start = phone.start()
        parts = []
        for run in reversed(list(_SPLIT.finditer(view, start, phone.end()))):
            end, after = run.start(), run.end()
            part = self._phones.data.match(view, start, end)
            if part is not None and part.end() == end:
                parts.append((part, after))
        return parts

    def _numbers_at(
        self, view: bytes, start: int, tried: frozenset[str]
    ) -> Iterator[tuple[str, Any, _Matcher]]:
        """The anchored matches at ``start`` of the number detectors but ``tried``, one kind
        after another while they are turned down (asked for the next: this one was)."""
        while True:
            numbers = self._number_matcher(_NUMBER_RULES - tried)
            if numbers is None:
                return
            inner = numbers.data.match(view, start)
            rule = None if inner is None else numbers.rule_of_group.get(inner.lastindex or 0)
            if rule is None:
                return
            yield rule, inner, numbers
            tried |= {rule}

    def _number_matcher(self, kinds: frozenset[str]) -> _Matcher | None:
        """The matcher of the number detectors of ``kinds`` alone (None: none is enabled)."""
        numbers = self._numbers.get(kinds)
        if numbers is None:
            chosen = [d for d in self._detectors if d.name in kinds]
            if not chosen:
                return None
            numbers = self._numbers[kinds] = _matcher(chosen, self._options, extras=False)
        return numbers

    def _number_accepted_at(self, view: bytes, start: int) -> bool:
        """Whether a number its checks accept begins at ``start``."""
        for rule, inner, _ in self._numbers_at(view, start, frozenset()):
            accept = self._accept.get(rule)
            value = view[inner.start() : inner.end()].decode("utf-8", "replace")
            if (accept is None or accept(value) is not None) and not _inside_uuid(
                view, inner.start(), inner.end()
            ):
                return True
        return False

    def _named_like_credential(
        self, rule: str, view: bytes, match: Any, matcher: _Matcher
    ) -> tuple[str, Any, _Matcher] | None:
        """A key that looks like a credential ("aio_<26 letters>=…", an Adafruit key's shape)
        hides the rule for its value at the same start (the first alternative wins there):
        the value is matched by the keyed rules alone, anchored where the key starts."""
        if (
            self._keyed is None
            or rule in _KEYED_RULES
            or rule == "base64_blob"
            # a credential found after its own key ("vercel_token: …") is a value already
            or any(match.span(group)[0] >= 0 for group, _ in matcher.value_groups.get(rule, ()))
            # (a base64 token's padding may have taken the "=" of "key=value")
            or (view[match.end() - 1] != _EQUALS and not _KEY_SEPARATOR.match(view, match.end()))
        ):
            return None
        keyed = self._keyed.data.match(view, match.start())
        if keyed is None:
            return None
        key_rule = self._keyed.rule_of_group.get(keyed.lastindex or 0)
        if key_rule is None or key_rule == "pseudonym":
            return None
        return key_rule, keyed, self._keyed

    def _replace(
        self,
        rule: str,
        match: Any,
        matcher: _Matcher,
        data: bytes,
        pieces: list[bytes],
        cursor: int,
        where: str,
        fired: list[str],
    ) -> int:
        """Append what precedes ``match`` and its replacement to ``pieces``; the new cursor
        (unchanged when the match is left as it is)."""
        start: int
        end: int
        start, end = match.span()
        if rule == "base64_blob":
            replacement = self._blob(data[start:end], where, fired)
            if replacement is None:
                return cursor
            pieces += (data[cursor:start], replacement.encode())
            return end
        quote = False
        for group_index, group_kind in matcher.value_groups.get(rule, ()):
            if match.span(group_index)[0] >= 0:
                value_start, end = match.span(group_index)
                if group_kind == "block":
                    end = _block_end(data, start, value_start, end)
                # An unquoted value (key=value text, or a JSON number/literal).
                quote = group_kind == "free"
                start = value_start
                break
        if start < cursor:
            return cursor
        if rule in _NUMBER_RULES and _inside_uuid(data, start, end):
            return cursor  # "3df8ee1f-0071-4991-9662-…": digits of an id, not a phone
        value = data[start:end].decode("utf-8", "surrogatepass")
        if quote:
            if value in ("null", "true", "false"):
                return cursor  # nothing secret, and JSON must stay JSON
            trimmed = value_in_text(value)
            if trimmed is None:
                return cursor
            end = start + len(trimmed.encode())
            value = trimmed
            quote = _NUMBER.fullmatch(value) is not None
        if value in self.config.allow_values:
            return cursor
        accept = self._accept.get(rule)
        if accept is not None:
            accepted = accept(value)
            if accepted is None:
                return cursor
            if accepted != value:  # a secret inside the match: its start, or its end
                if value.startswith(accepted):
                    end = start + len(accepted.encode())
                else:
                    start = end - len(accepted.encode())
                value = accepted
        label = rule
        if rule in self._context_rules:
            label, value = self._known_secret(rule, value)
        pieces.append(data[cursor:start])
        pseudonym = self.pseudonym(label, value)
        pieces.append((f'"{pseudonym}"' if quote else pseudonym).encode())
        self._count(fired, f"{where}:{rule}{self._confidence(label, value)}", rule)
        return end

    def _blob(self, blob: bytes, where: str, fired: list[str]) -> str | None:
        """A base64 blob that decodes to text holding a secret is replaced whole; any other
        run of base64 characters (an id, a hash, binary) is left as it is."""
        if self._decode_depth >= _MAX_DECODE_DEPTH or len(blob) > _MAX_BLOB_CHARS:
            return None
        decoded = _base64_text(blob.removeprefix(b"base64:"))
        if decoded is None:
            return None
        inner: list[str] = []
        self._decode_depth += 1
        try:
            self._redact_value(decoded, where, inner)
        finally:
            self._decode_depth -= 1
        if not inner:
            return None
        rules = sorted({entry.rsplit(":", 1)[-1] for entry in inner})
        for rule in rules:
            self._count(fired, f"{where}:base64({rule})", rule)
        return self.pseudonym("base64_blob", blob.decode("ascii"))

    def _confidence(self, rule: str, secret: str) -> str:
        """``VERIFIED`` when the secret passes its format's check (a checksum that holds):
        found by its shape it is replaced either way; the check only says it is well-formed."""
        verify = self._verify.get(rule)
        return VERIFIED if verify is not None and verify(secret) else ""

    def _count(self, fired: list[str], entry: str, rule: str) -> None:
        # A path may name a JSON key that held an escaped lone surrogate: escaped again.
        fired.append(escape_surrogates(entry))
        if self._counted is not None:
            self._counted.append(rule)
        self.stats.redactions += 1
        self.stats.by_rule[rule] = self.stats.by_rule.get(rule, 0) + 1


def _value_end(match: Any, matcher: _Matcher, rule: str) -> int:
    """Where the value of ``match`` (of ``rule``) ends: its value group's end, or the match's."""
    for group_index, _ in matcher.value_groups.get(rule, ()):
        start, end = match.span(group_index)
        if start >= 0:
            return max(int(end), int(match.start()) + 1)
    return int(match.end())


def _paired(matcher: _Matcher, view: bytes, start: int) -> Iterator[tuple[Any, _Matcher]]:
    """``matcher``'s matches in ``view`` from ``start``, each with the matcher, one at a
    time (a generator function: compiled, mypyc evaluates a generator expression here whole,
    and text dense with matches its caller turns down became quadratic, ADR 52)."""
    for match in matcher.data.finditer(view, start):
        yield match, matcher


def _within(matcher: _Matcher, view: bytes, start: int, end: int) -> Iterator[tuple[Any, _Matcher]]:
    """``matcher``'s matches in ``view`` that start in ``[start, end)``, each with the
    matcher, each as long as the whole text makes it. Each search stops ``_LOOK_PAST``
    bytes after ``end``: one running on to the next match anywhere after would make text
    dense with turned-down matches cost its length for each (quadratic); a match found is
    matched again, anchored at its start, over the whole text (it may run on further)."""
    search, anchored = matcher.data.search, matcher.data.match
    # (a little past the end, so that a match that starts inside and needs more text to
    # match at all is found: a token run on from a turned-down one)
    endpos = min(len(view), end + _LOOK_PAST)
    while start < end and (bounded := search(view, start, endpos)) is not None:
        if bounded.start() >= end:
            return
        whole = anchored(view, bounded.start())
        if whole is None:
            start = bounded.start() + 1
            continue
        yield whole, matcher
        start = max(whole.end(), whole.start() + 1)


def _path_words(view: bytes, start: int, end: int) -> list[int]:
    """Where a part begins after a separator of the base64 run ``view[start:end]`` when the
    run may be a path: after each "/" (a path's parts), or else after each "+" (a query's
    words). None when the run is longer than any path or follows "base64," or "base64:": that is
    base64, whose random letters between two separators a detector would take for a token
    ("/AAAAAAAAAAAAAAAAAAAA…" of zero bytes, "+ATBB…"); ``_at`` keeps, in a run with a "/",
    only what ends at a "/" or at the run's end or past it."""
    run = view[start:end]
    if len(run) > _MAX_PATH_RUN or run.startswith(b"base64:"):
        return []
    if view[max(0, start - 7) : start].lower() == b"base64,":
        return []
    separator = b"/" if b"/" in run else b"+"
    cuts = []
    index = run.find(separator)
    while index >= 0:
        cuts.append(index)
        index = run.find(separator, index + 1)
    cuts.append(len(run))
    words = []
    for k, index in enumerate(cuts[:-1]):
        # A part long enough for a token, or the last, which may run on past the run (an
        # address, a JWT), or digits before a long part (Asana's "1/<16 digits>:…"):
        # "/a/b/c/…" costs a match per run, not one per part.
        if (
            cuts[k + 1] - index > _MIN_PART
            or k + 2 == len(cuts)
            or (cuts[k + 2] - cuts[k + 1] > _MIN_PART and run[index + 1 : cuts[k + 1]].isdigit())
        ) and run[index + 1 : index + 2] not in (b"", b"/", b"+"):
            words.append(start + index + 1)
    return words


def _at(
    matcher: _Matcher, view: bytes, starts: list[int], run_end: int
) -> Iterator[tuple[Any, _Matcher]]:
    """``matcher``'s matches anchored at each of ``starts`` (parts of the run that ends at
    ``run_end``, in order, or the separators before them), each with the matcher; a start
    inside a match found is skipped.
    When the parts follow "/", a match must end where its part does (at a "/") or at the
    run's end or past it: one that ends at a "+" inside the run is letters of base64."""
    anchored = matcher.data.match
    path = view[starts[0] - 1] == 0x2F if starts else False
    found_end = -1
    for start in starts:
        if start < found_end:
            continue
        # (from the separator too: a pattern may open with the character before its value)
        found = anchored(view, start - 1) or anchored(view, start)
        if found is None:
            continue
        end = found.end()
        if path and end < run_end and view[end] != 0x2F:
            continue
        yield found, matcher
        found_end = end


def _recallable(text: str) -> bool:
    """Whether what redaction makes of ``text`` (at the top, outside any encoding) is kept
    for its next coming: not short, not JSON (whose outcome depends on how deep it sits:
    too deep to walk at one depth and not at another)."""
    return len(text) >= _RECALL_MIN_CHARS and text.lstrip()[:1] not in ("{", "[")


def _where(slot: _Slot) -> str:
    """The label of a slot's text in ``Redactions`` (a JSON path inside it follows)."""
    prefix, _, key, _ = slot
    if isinstance(key, int):
        return prefix
    if prefix:
        return prefix + str(key)
    return _FIELD_LABELS.get(str(key), str(key))


class _Chooser:
    """Which engine selects a span's segments (RE2 0, Hyperscan 1): the one measured cheaper
    per byte, the selection and the redaction of what it selected together (after RE2,
    which names no detectors, each selected text is looked at again). The engine in use is
    timed on every ``_MEASURE``-th span (its last 9 together, ``_per_byte``). Every so often
    the other one gets ``_BURST`` consecutive spans, timed after the first ``_BURST_WARM``
    (run once among the other engine's spans it runs cache-cold: RE2's DFA measured 15
    ns/byte on secret-free text that way, 2.5 in a run), and takes over when those, and a
    second burst's run at once, each cost clearly less per byte (``_CLEAR_WIN``). The period
    doubles while it loses clearly, so a much slower engine costs about 1% more, and stays
    while it loses narrowly (RE2 warms up over its first bursts).
    When the engine in use turns clearly dearer than the other was last measured (the
    traffic changed), the other is measured at once."""

    def __init__(self, clock: Callable[[], int] = time.thread_time_ns) -> None:
        self.clock = clock
        """What a span is timed with: the CPU time of the thread, not the wall clock. Under
        load a worker is descheduled mid-span (two ingest workers, the gRPC loop, the writer
        and ClickHouse's merges share the cores), and that wall time, landing on one engine's
        spans, once made the dearer engine look cheaper: RE2 took 12-14% of realistic spans
        in loaded workers (1-3% in a quiet process), at ~5x Hyperscan's cost there."""
        self.current = 1
        self.ns_per_byte = [0.0, 0.0]
        """The latest measure of each engine: RE2, Hyperscan."""
        self._recent: list[tuple[float, int]] = [(float("inf"), 1)] * 9  # (ns, bytes)
        self._spans = 0
        self._period = _FIRST_PERIOD
        self._explore_at = len(self._recent) * _MEASURE + 1  # once the one in use is measured
        self._burst: list[tuple[float, int]] = []
        self._first: float | None = None
        """The cost of a burst that won clearly, while the burst after it confirms it."""

    def next(self) -> tuple[int, bool]:
        """(engine, whether to time it) for the next span."""
        self._spans = spans = self._spans + 1
        phase = spans - self._explore_at
        if 0 <= phase < _BURST:
            return 1 - self.current, phase >= _BURST_WARM
        if phase == _BURST:
            self._explored()
            if self._first is not None:  # this span begins the second burst
                return 1 - self.current, False
        return self.current, spans % _MEASURE == 0

    def record(self, engine: int, ns: float, size: int = 1) -> None:
        """A timed span: ``ns`` for ``size`` bytes."""
        if engine != self.current:
            self._burst.append((ns, size))
            return
        recent = self._recent
        recent[self._spans // _MEASURE % len(recent)] = (ns, size)
        cost = self.ns_per_byte[engine] = _per_byte(recent)
        other = self.ns_per_byte[1 - engine]
        if other and cost > _CLEAR_LOSS * other and self._explore_at > self._spans:
            # The traffic changed (fresh tokens slow RE2 down): measure the other one now.
            self._explore_at, self._period = self._spans + 1, _FIRST_PERIOD

    def _explored(self) -> None:
        burst, self._burst = self._burst, []
        first, self._first = self._first, None
        if burst:
            other = 1 - self.current
            cost = self.ns_per_byte[other] = _per_byte(burst)
            in_use = self.ns_per_byte[self.current]
            wins = cost < _CLEAR_WIN * in_use
            if wins and first is None:
                # A clear win is measured again at once, on the next burst's spans, before
                # the other engine takes over: each of the two must win on its own.
                self._first = cost
                self._explore_at = self._spans
                return
            if wins:
                cost = self.ns_per_byte[other] = max(cost, first or cost)
                self.current = other
                self._recent = [(cost, 1)] * len(self._recent)
                self._period = _FIRST_PERIOD
            elif cost > _CLEAR_LOSS * in_use:  # a close loss (RE2 still warming) is retried
                self._period = min(self._period * 2, _MAX_PERIOD)
        self._explore_at = self._spans + self._period


def _per_byte(timings: list[tuple[float, int]]) -> float:
    """ns per byte over the spans timed, all bytes weighed alike (spans of one trace differ
    in size and kind far more than the two engines do), without the dearest per byte (a
    pause in one span does not turn the choice)."""
    if len(timings) > 2:
        timings = sorted(timings, key=lambda timing: timing[0] / timing[1])[:-1]
    return sum(ns for ns, _ in timings) / sum(size for _, size in timings)


# --- RE2 over bytes, called without the re2 module's Python layer ------------------------
# The re2 module runs each search through a Python generator and builds a Python match
# object whose every ``start()``, ``end()`` and ``span()`` asks the pattern, through the
# binding, how many groups it has: ~0.9 us a search (against ~0.7 us for the binding's own
# call) and ~0.2 us for each offset read, on the ~2 searches and ~10 reads of each realistic
# span's redaction. ``_Bytes`` calls the binding's ``Match`` itself, the way the module does
# for bytes, and gives a ``_Found`` with the same offsets, groups and ``lastindex``.
_RAW_UNANCHORED: Any = None
_RAW_ANCHOR_START: Any = None
with contextlib.suppress(AttributeError):  # (another re2 build: its Python layer is used)
    _RAW_UNANCHORED = re2._re2.RE2.Anchor.UNANCHORED
    _RAW_ANCHOR_START = re2._re2.RE2.Anchor.ANCHOR_START
_NO_SPAN = (-1, -1)


class _Found:
    """A match of a ``_Bytes`` pattern: what the re2 module's match object gives for it
    (``start``, ``end``, ``span`` of a group, -1 for one that did not take part, and its
    bytes, ``group``; ``lastindex``: the group whose closing parenthesis is rightmost, the
    outermost of those ending there, None when no group took part)."""

    __slots__ = ("data", "lastindex", "spans")

    def __init__(self, data: bytes, spans: list[tuple[int, int]]) -> None:
        self.data = data
        self.spans = spans
        last: int | None = None
        last_end = -1
        for group in range(1, len(spans)):
            end = spans[group][1]
            if last_end < end:
                last_end, last = end, group
        self.lastindex = last

    def start(self, group: int = 0) -> int:
        return self.spans[group][0]

    def end(self, group: int = 0) -> int:
        return self.spans[group][1]

    def span(self, group: int = 0) -> tuple[int, int]:
        return self.spans[group]

    def group(self, group: int = 0) -> bytes | None:
        start, end = self.spans[group]
        return None if start < 0 else self.data[start:end]


class _Bytes:
    """An RE2 pattern over bytes (compiled by the re2 module: ``compiled``), searched and
    matched as the module does, without its Python layer (when this re2 has the binding the
    module is built on; else through the module)."""

    __slots__ = ("compiled", "regexp")

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        regexp = getattr(compiled, "_regexp", None)
        self.regexp: Any = (
            regexp if _RAW_UNANCHORED is not None and hasattr(regexp, "Match") else None
        )

    @property
    def pattern(self) -> bytes:
        return bytes(self.compiled.pattern)

    def _at(self, anchor: Any, data: bytes, pos: int, endpos: int) -> _Found | None:
        size = len(data)
        pos = max(0, min(pos, size))
        endpos = size if endpos < 0 else max(0, min(endpos, size))
        if pos > endpos:
            return None
        spans = self.regexp.Match(anchor, data, pos, endpos)
        return None if spans[0] == _NO_SPAN else _Found(data, spans)

    def search(self, data: bytes, pos: int = 0, endpos: int = -1) -> Any:
        """The first match in ``data[pos:endpos]`` (``endpos`` -1: to the end), or None."""
        if self.regexp is None:
            return self.compiled.search(data, pos, None if endpos < 0 else endpos)
        return self._at(_RAW_UNANCHORED, data, pos, endpos)

    def match(self, data: bytes, pos: int = 0, endpos: int = -1) -> Any:
        """The match that begins at ``pos`` (anchored there), or None."""
        if self.regexp is None:
            return self.compiled.match(data, pos, None if endpos < 0 else endpos)
        return self._at(_RAW_ANCHOR_START, data, pos, endpos)

    def finditer(self, data: bytes, pos: int = 0) -> Iterator[Any]:
        """Each match from ``pos`` on, resuming where the last one ended (one byte on after
        an empty one), as the re2 module's ``finditer``."""
        if self.regexp is None:
            yield from self.compiled.finditer(data, pos)
            return
        endpos = len(data)
        pos = max(0, min(pos, endpos))
        regexp = self.regexp
        while True:
            spans = regexp.Match(_RAW_UNANCHORED, data, pos, endpos)
            if spans[0] == _NO_SPAN:
                return
            yield _Found(data, spans)
            end = spans[0][1]
            if pos == endpos:
                return
            pos = pos + 1 if pos == end else end


@dataclass(frozen=True)
class _Matcher:
    text: Any  # re2 pattern over str (key checks, whole-value checks)
    data: _Bytes  # the same over UTF-8 bytes (replacements)
    rule_of_group: dict[int, str]
    value_groups: dict[str, list[tuple[int, str]]]
    """Inner groups naming the part of a match to replace: <rule>__value, __value2, ...
    (taken whole), <rule>__free (an unquoted value in text, trimmed by value_in_text),
    <rule>__block (an indented YAML block scalar, cut where the indentation ends)."""


def _matcher(detectors: list[Detector], options: Any, *, extras: bool = True) -> _Matcher:
    """The alternation of ``detectors``; ``extras``: after a pseudonym (kept as it is) and
    before base64 runs (decoded and looked into)."""
    groups = [f"(?P<pseudonym>{_PSEUDONYM})"] if extras else []
    groups += [f"(?P<{d.name}>{d.pattern})" for d in detectors]
    if extras:
        groups.append(f"(?P<base64_blob>{_BASE64_BLOB})")
    text = re2.compile("|".join(groups), options)
    ordered = sorted(text.groupindex.items(), key=lambda item: item[1])
    return _Matcher(
        text,
        _Bytes(re2.compile(text.pattern.encode(), options)),
        {index: name for name, index in text.groupindex.items() if "__" not in name},
        {
            d.name: [
                (index, name.rsplit("__", 1)[1].rstrip("0123456789"))
                for name, index in ordered
                if name.startswith(f"{d.name}__")
            ]
            for d in detectors
        },
    )


_COUNTED = re.compile(r"\{(\d+)(,\d*)?\}")
_NAMED = re.compile(r"\(\?P<[A-Za-z0-9_]+>")


def _loosened(pattern: str) -> str:
    """A superset of ``pattern`` that RE2 walks cheaply: counted repeats become ``+`` (or
    ``*`` from zero), named groups plain ones."""
    loose = _COUNTED.sub(lambda m: "*" if m.group(1) == "0" else "+", pattern)
    return "(?:" + _NAMED.sub("(?:", loose) + ")"


_NOT_JSON = object()
# json.loads / json.dumps with these arguments, without building a decoder or an encoder per
# document (a redacted message body is parsed and written again: ~4 us of the two calls).
_STRICT_JSON = json.JSONDecoder(object_pairs_hook=_no_duplicates)
_COMPACT_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_AUTH_SCHEME = re.compile(r"(?i)^(?:bearer|basic|token|digest|apikey)\s+")
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")


def _json_text(document: Any, floats: bool) -> str:
    """A walked document written again, compact, as ``_COMPACT_JSON`` writes it: by orjson
    (~10x faster, the same text) unless ``floats`` (it holds a float orjson writes
    otherwise: ``_written_alike``) or orjson refuses it (an integer beyond 64 bits, a lone
    surrogate)."""
    if not floats:
        try:
            return orjson.dumps(document).decode()
        except TypeError:
            pass
    # A lone surrogate arrived escaped ("\ud800") and leaves escaped: raw, the text would
    # not be UTF-8 and no row could hold it.
    return escape_surrogates(_COMPACT_JSON.encode(document))


def _written_alike(value: float) -> bool:
    """Whether orjson writes ``value`` as the json module does: everywhere but from 1e-9 to
    1e-4 (orjson writes ``0.00001`` and ``1e-7`` for ``1e-05`` and ``1e-07``) and NaN or an
    infinity (``null`` for ``NaN``). A model's response carries a float or two
    (``created_at``, a score): with the json module, writing it again took ~30 µs of the ~190
    a touched one cost."""
    magnitude = abs(value)
    return magnitude < 1e-9 or 1e-4 <= magnitude <= sys.float_info.max


_UNICODE_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")


def _unicode_unescaped(text: str) -> str | None:
    """``text`` with JSON's ``\\uXXXX`` escapes decoded (those of a character: a surrogate's
    half stays escaped), or None when it holds none. Python's ``json.dumps`` escapes every
    character beyond ASCII so: a no-break hyphen in a phone number, a letter of an
    address."""
    if "\\u" not in text:
        return None

    def character(escape: re.Match[str]) -> str:
        code = int(escape.group(1), 16)
        return escape.group(0) if 0xD800 <= code < 0xE000 else chr(code)

    decoded = _UNICODE_ESCAPE.sub(character, text)
    return decoded if decoded != text else None


def _percent_decoded(text: str) -> str | None:
    if _PERCENT.search(text) is None:
        return None
    try:
        decoded = unquote(text, errors="strict")
    except UnicodeDecodeError:  # escapes of bytes that are not UTF-8: look at the rest
        decoded = unquote(text, errors="replace")
    return decoded if decoded != text else None


def _base64_text(blob: bytes) -> str | None:
    """The text a base64 blob holds: all of it when it decodes to text, else its printable
    runs (as ``strings`` finds them, in UTF-8), so a key inside a binary payload is still
    seen."""
    if all(c in b"0123456789abcdefABCDEF" for c in blob):
        return None  # a hex id or hash
    padded = blob.rstrip(b"=")
    padded += b"=" * (-len(padded) % 4)
    try:
        raw = base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        printable = sum(1 for c in text if c.isprintable() or c in "\r\n\t")
        if text and printable >= 0.95 * len(text):
            return text
    runs = _PRINTABLE_RUN.findall(raw.decode("utf-8", "replace"))
    return "\n".join(runs) if runs else None


# Printable text in binary, in any script (a UTF-8 address of jürgen.müller@… whole): no
# control character, and no byte that is not UTF-8 (decoded as U+FFFD).
_PRINTABLE_RUN = re.compile("[^\x00-\x08\x0a-\x1f\x7f-\x9f\ufffd]{6,}")


def _block_end(data: bytes, key_start: int, value_start: int, value_end: int) -> int:
    """Where a YAML block scalar (``password: |`` and its lines) ends: at the first line
    indented no deeper than the key's own line."""
    line_start = data.rfind(b"\n", 0, key_start) + 1
    key_indent = len(data[line_start:key_start]) - len(data[line_start:key_start].lstrip())
    end = data.find(b"\n", value_start)
    while 0 <= end < value_end:
        following = data.find(b"\n", end + 1)
        line = data[end + 1 : value_end if following < 0 else min(following, value_end)]
        if len(line) - len(line.lstrip()) <= key_indent:
            break
        end = value_end if following < 0 else following
    return min(end, value_end) if end >= 0 else value_end


# Detectors of numbers written in groups (a phone, a card, an IBAN, a US SSN): a match of
# theirs inside a UUID is a run of its hex digits that happen to be decimal ("...-0071-4991-
# 9662-..." is no number dialled from abroad), never redacted (``_inside_uuid``).
_NUMBER_RULES = frozenset({"phone", "credit_card", "iban", "us_ssn"})
# A UUID's dash may be one beyond ASCII (rules.WIDE_DASHES: text through a word processor),
# as a number's may: 36 characters, up to 44 bytes.
_UUID_DASH = b"(?:" + b"|".join([re.escape(c.encode()) for c in "-" + WIDE_DASHES]) + b")"
_UUID = re.compile(
    rb"[0-9A-Fa-f]{8}%(d)s[0-9A-Fa-f]{4}%(d)s[0-9A-Fa-f]{4}%(d)s[0-9A-Fa-f]{4}%(d)s[0-9A-Fa-f]{12}"
    % {b"d": _UUID_DASH}
)
_UUID_MAX_BYTES = 36 + 4 * 2


def _inside_uuid(data: bytes, start: int, end: int) -> bool:
    """Whether ``data[start:end]`` lies within a UUID of ``data`` (8-4-4-4-12 hex digits,
    not part of a longer run of hex digits: ``run-<uuid>`` is one, ``a<uuid>`` is not)."""
    if end - start > _UUID_MAX_BYTES:
        return False
    window_start = max(start - _UUID_MAX_BYTES, 0)
    for found in _UUID.finditer(data, window_start, min(end + _UUID_MAX_BYTES, len(data))):
        if found.start() <= start and end <= found.end():
            before = data[found.start() - 1 : found.start()]
            after = data[found.end() : found.end() + 1]
            return before not in _HEX_DIGIT and after not in _HEX_DIGIT
        if found.start() > start:
            break
    return False


_HEX_DIGIT = frozenset(bytes([c]) for c in b"0123456789abcdefABCDEF")
# What may part one number from the next inside a match (ADR 48), as UTF-8: a run of blanks
# (the no-break space too) and separators beyond ASCII (rules.WIDE_SEPARATOR: a thin space,
# an en dash), which join two numbers into one match as a blank does.
_SPLIT = re.compile(
    b"(?:" + b"|".join([re.escape(c.encode()) for c in " \u00a0" + WIDE_SEPARATORS]) + b")+"
)


def _afters_blanks(view: bytes, start: int, end: int) -> list[int]:
    """The offsets right after each run of blanks (or separators beyond ASCII) in
    ``view[start:end]``."""
    return [found.end() for found in _SPLIT.finditer(view, start, end)]


# In a segment with no escape but of ", \ and control characters (\u0041 or \/ could stand
# for any character), a decoded string holding none of those is there byte for byte: the
# detectors the segment's scan found stand for it (_matcher_for).
_HIDING_ESCAPE = _Bytes(re2.compile(rb"\\[u/]"))
_ESCAPED_IN_JSON = _Bytes(re2.compile(rb'["\\\x00-\x1f]'))
# CPython looks for a two-character string at ~1.2 ns a character, RE2 for this at ~0.25:
# JSON inside JSON has a backslash before every quote, and seldom a whitespace escape.
_WHITESPACE_ESCAPE = _Bytes(re2.compile(rb"\\[nrt]"))


def _escape_view(text: str) -> str:
    """``text`` with JSON whitespace escapes (``\\n``) shown as real whitespace, at the same
    offsets, so a secret right after an escaped newline still starts at a word boundary."""
    if "\\" not in text or not _WHITESPACE_ESCAPE.search(text.encode("utf-8", "surrogatepass")):
        return text
    return text.replace("\\n", " \n").replace("\\t", " \t").replace("\\r", " \r")


def _escape_view_bytes(data: bytes) -> bytes:
    if b"\\" not in data or not _WHITESPACE_ESCAPE.search(data):
        return data
    return data.replace(b"\\n", b" \n").replace(b"\\t", b" \t").replace(b"\\r", b" \r")


# The rest of a key's name, its closing quote (escaped in a JSON string), blanks, ":" or "=".
# Bounded: looked for after every match that could be a key, it once ran to the end of a long
# run of name characters each time ("000-12-3456-" repeated: 11 s for 64 KB).
_KEY_SEPARATOR = re.compile(rb"[A-Za-z0-9._-]{0,128}(?:\\?[\"'])?[ \t]{0,64}[:=]")
_EQUALS = ord("=")
_NUMBER = re.compile(r"-?\d[\d.eE+-]*")


def detector(name: str, pattern: str) -> Detector:
    """A user-defined detector (from the config file); validated to compile under RE2 (an
    error names what is wrong, never the pattern: it may spell out a secret), and
    to need at least one character: a pattern that matches the empty text somewhere
    (``x*``, ``\\b``) would find a "secret" of no length between every two characters, and
    the selection of segments, which resumes after each match, would never get past one
    (the collector hung on the first span)."""
    quiet = re2.Options()
    quiet.log_errors = False  # RE2 would log the whole pattern to stderr
    try:
        re2.compile(pattern, quiet)
    except re2.error as exc:
        # Only what is wrong ("missing )"), not where: RE2 quotes the pattern from there on.
        raise ValueError(f"it does not compile: {_compile_error(exc)}") from None
    if re2.compile(_assertions_always_hold(pattern), quiet).fullmatch("") is not None:
        # (Not the pattern itself: it may spell out the very secret it is there to hide.)
        raise ValueError("it can match the empty text; a detector needs at least one character")
    return Detector(name, pattern)


def _compile_error(exc: Exception) -> str:
    message = exc.args[0] if exc.args else ""
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    return str(message).split(":", 1)[0]


def _assertions_always_hold(pattern: str) -> str:
    """``pattern`` with its zero-width assertions (``^ $ \\A \\z \\b \\B``) made empty: it
    matches the empty text exactly when ``pattern`` matches an empty text somewhere."""
    return prefilter.unanchored(pattern, also=("\\b", "\\B"))
