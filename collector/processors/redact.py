"""Redact: nothing secret or personal reaches the log, the store, or a log line.

For each span every text it carries — name, status message, attribute values, the
normalized Input/Output bodies, event names and attributes, link attributes, resource
attributes — is one segment of a single NUL-joined string scanned in one RE2 pass. Only
segments with a hit (or a sensitive key) get more work:

- plain text: each validated match is replaced by a typed, keyed pseudonym
  ``<rule:hmac12>`` (HMAC-SHA256 with the collector's redaction key), so equal values stay
  joinable across spans and restarts without being readable;
- JSON (a string holding an object or array): parsed, walked with a depth limit, values of
  sensitive keys replaced whatever they are, strings redacted as text, re-serialized;
- anything that cannot be processed is replaced by a sentinel and counted (fail closed).

Each replacement is recorded on the span as ``<field><json path>:<rule>`` (never the
value) in ``Redactions``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import re2

from collector.model import SpanRecord
from collector.processors.rules import DETECTORS, Detector, RedactionConfig, is_sensitive_key

__all__ = ["FAILED_SENTINEL", "Redactor", "RedactorStats"]

logger = logging.getLogger("afr.collector.redact")

FAILED_SENTINEL = "<redaction_failed>"
_KEY_HINT_WORDS = (
    "passw", "passphrase", "secret", "api.?key", "private.?key", "access.?key", "authorization",
    "cookie", "credential", "card.?number", "cvv", "cvc", "ssn", "token", "auth", "session",
    "pwd", "pin", "otp",
)  # fmt: skip
_SEPARATOR = "\x00"
_PSEUDONYM_CACHE = 16_384
_MIN_SCAN_CHARS = 6  # shorter than the shortest thing any detector matches ("a@b.co")
_SCAN, _SECRET, _ALLOWED, _SCAN_KEY = range(4)  # how a map key's value is treated
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


class Redactor:
    def __init__(self, secret: bytes, config: RedactionConfig | None = None) -> None:
        self._secret = secret
        self.config = config = config or RedactionConfig()
        detectors = [
            d for d in (*DETECTORS, *config.extra_detectors) if d.name not in config.disabled_rules
        ]
        self._accept: dict[str, Callable[[str], str | None] | None] = {
            d.name: d.accept for d in detectors
        }
        self._pattern = re2.compile("|".join(f"(?P<{d.name}>{d.pattern})" for d in detectors))
        self._bytes_pattern = re2.compile(self._pattern.pattern.encode())
        self._rule_of_group = {
            index: name for name, index in self._pattern.groupindex.items() if "__value" not in name
        }
        # Inner groups naming the part of a match to replace: <rule>__value, __value2, ...
        self._value_groups: dict[str, list[int]] = {
            d.name: [
                index
                for name, index in sorted(
                    self._pattern.groupindex.items(), key=lambda item: item[1]
                )
                if name.startswith(f"{d.name}__value")
            ]
            for d in detectors
        }
        self._extra_keys = tuple(config.extra_key_names)
        key_words = "|".join((*_KEY_HINT_WORDS, *(re2.escape(k) for k in self._extra_keys)))
        # The scan pattern adds one more group to the detectors: a JSON key that may hold a
        # secret whatever its value looks like. It only selects segments for a closer look;
        # replacements use the detectors alone (self._pattern).
        json_key = rf'(?P<json_sensitive_key>"[^"\x00]*(?i:{key_words})[^"\x00]*"\s*:)'
        # And an escaped character, which could hide a value from the raw scan: such JSON is
        # decoded and walked.
        json_escape = r"(?P<json_escape>\\u[0-9a-fA-F]{4})"
        # And a name/value pair whose name is sensitive ({"name": "authorization", "value":
        # ...} or ["x-api-key", ...]), as headers often travel.
        json_pair = (
            rf'(?P<json_sensitive_pair>"(?:name|key)"\s*:\s*"[^"\x00]*(?i:{key_words})[^"\x00]*"'
            rf'|\[\s*"[^"\x00]*(?i:{key_words})[^"\x00]*"\s*,)'
        )
        self._scan = re2.compile(
            "|".join((self._pattern.pattern, json_key, json_escape, json_pair))
        )
        self._key_classes: dict[str, int] = {}
        # A conversation repeats the same address or card in many messages: HMAC each once.
        self._pseudonyms: dict[tuple[str, str], str] = {}
        self.stats = RedactorStats()
        self._resource_cache: dict[int, tuple[dict[str, str], dict[str, str], list[str]]] = {}

    # --- the processor -------------------------------------------------------------------
    def __call__(self, records: list[SpanRecord]) -> list[SpanRecord]:
        self._resource_cache.clear()
        for record in records:
            self.redact_span(record)
        return records

    def pseudonym(self, rule: str, value: str) -> str:
        cached = self._pseudonyms.get((rule, value))
        if cached is None:
            digest = hmac.new(self._secret, f"{rule}:{value}".encode(), hashlib.sha256).hexdigest()
            cached = f"<{rule}:{digest[:12]}>"
            if len(self._pseudonyms) >= _PSEUDONYM_CACHE:
                self._pseudonyms.clear()
            self._pseudonyms[(rule, value)] = cached
        return cached

    def redact_span(self, record: SpanRecord) -> None:
        self.stats.spans += 1
        fired: list[str] = []
        # Resource attributes are shared by every span of a ResourceSpans: scan them once.
        key = id(record.resource_attributes)
        cached = self._resource_cache.get(key)
        if cached is None or cached[0] is not record.resource_attributes:
            original = record.resource_attributes
            resource_fired: list[str] = []
            redacted = dict(original)
            resource_slots: list[_Slot] = []
            self._map_slots("resource.", redacted, resource_slots, resource_fired)
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
        self._map_slots("attr.", record.span_attributes, slots, fired)
        if record.body_attributes:
            self._map_slots("body.", record.body_attributes, slots, fired)
        for index, name in enumerate(record.event_names):
            slots.append((f"event[{index}].name", record.event_names, index, name))
            self._map_slots(f"event[{index}].attr.", record.event_attributes[index], slots, fired)
        for index, attributes in enumerate(record.link_attributes):
            state = record.link_trace_states[index]
            slots.append((f"link[{index}].trace_state", record.link_trace_states, index, state))
            self._map_slots(f"link[{index}].attr.", attributes, slots, fired)
        self._scan_slots(slots, fired)
        if fired:
            record.redactions = record.redactions + fired

    # --- internals -----------------------------------------------------------------------
    def _classify_key(self, key: str) -> int:
        if key in self.config.allow_keys:
            known = _ALLOWED
        elif is_sensitive_key(key, self._extra_keys):
            known = _SECRET
        elif len(key) >= _MIN_SCAN_CHARS and self._pattern.search(key):
            known = _SCAN_KEY
        else:
            known = _SCAN
        if len(self._key_classes) > 65_536:
            self._key_classes.clear()
        self._key_classes[key] = known
        return known

    def _map_slots(
        self, prefix: str, mapping: dict[str, str], slots: list[_Slot], fired: list[str]
    ) -> None:
        renamed: list[str] = []
        classes = self._key_classes
        for key, value in mapping.items():
            kind = classes.get(key)
            if kind is None:
                kind = self._classify_key(key)
            if kind == _SCAN:
                slots.append((prefix, mapping, key, value))
            elif kind == _SECRET:
                if value and value not in self.config.allow_values:
                    mapping[key] = self.pseudonym("sensitive_key", value)
                    self._count(fired, f"{prefix}{key}:sensitive_key", "sensitive_key")
            elif kind == _SCAN_KEY:
                renamed.append(key)
        # Keys themselves can carry data (a user's e-mail as a map key).
        for key in renamed:
            redacted = self._redact_text(key, f"{prefix}<key>", fired)
            value = mapping.pop(key)
            mapping[redacted] = value
            slots.append((prefix, mapping, redacted, value))

    def _scan_slots(self, slots: list[_Slot], fired: list[str]) -> None:
        texts = [slot[3] for slot in slots]
        joined = _SEPARATOR.join(texts)
        if len(joined) > self.config.max_scan_bytes:
            for slot in slots:
                self._process(slot, fired)
            return
        view = _escape_view(joined)
        first = self._scan.search(view) if len(view) >= _MIN_SCAN_CHARS else None
        if first is None:
            return
        starts: list[int] = []
        offset = 0
        for text in texts:
            starts.append(offset)
            offset += len(text) + 1
        # Which segments hold a hit: one search per such segment, resuming at the next one
        # (text dense with secrets would otherwise pay for every hit twice).
        touched: list[int] = []
        hit: Any = first
        while hit is not None:
            index = bisect_right(starts, hit.start()) - 1
            touched.append(index)
            if index + 1 >= len(starts):
                break
            hit = self._scan.search(view, starts[index + 1])
        for index in touched:
            self._process(slots[index], fired)

    def _process(self, slot: _Slot, fired: list[str]) -> None:
        prefix, target, key, text = slot
        where: str
        if isinstance(key, int):
            where = prefix
        elif prefix:
            where = prefix + str(key)
        else:
            where = _FIELD_LABELS.get(str(key), str(key))
        try:
            if len(text) > self.config.max_scan_bytes:
                raise _Unprocessable("too large to scan")
            value = self._redact_value(text, where, fired)
        except (_Unprocessable, RecursionError, ValueError, TypeError) as exc:
            value = FAILED_SENTINEL
            self.stats.failed_closed += 1
            fired.append(f"{where}:redaction_failed")
            logger.debug("redaction failed closed on %s: %s", where, type(exc).__name__)
        if isinstance(target, SpanRecord):
            setattr(target, key, value)
        else:
            target[key] = value

    def _redact_value(self, text: str, where: str, fired: list[str], depth: int = 0) -> str:
        if text.lstrip()[:1] in ("{", "["):
            try:
                document = json.loads(text)
            except (ValueError, RecursionError):
                document = _NOT_JSON
            if document is not _NOT_JSON:
                before = len(fired)
                walked = self._walk(document, where + "$", fired, depth)
                if len(fired) != before:
                    text = json.dumps(walked, ensure_ascii=False, separators=(",", ":"))
        # Always a text pass too: it catches what a parse cannot see (duplicate keys, a
        # Python repr, truncated JSON) with the key-value and value detectors.
        return self._redact_text(text, where, fired)

    def _walk(self, node: Any, path: str, fired: list[str], depth: int) -> Any:
        if depth > self.config.max_depth:
            raise _Unprocessable("nested too deeply")
        if isinstance(node, str):
            if len(node) < _MIN_SCAN_CHARS:
                return node
            if node.lstrip()[:1] in ("{", "["):
                # JSON inside JSON (a tool call's arguments inside a message): walk it too.
                return self._redact_value(node, path, fired, depth + 1)
            return self._redact_text(node, path, fired)
        if isinstance(node, dict):
            pair_name = node.get("name", node.get("key"))
            if (
                isinstance(pair_name, str)
                and "value" in node
                and self._secret_value(pair_name, node["value"])
            ):
                # {"name": "authorization", "value": "..."}: the value belongs to the name.
                self._count(fired, f"{path}.value:sensitive_key", "sensitive_key")
                value = node["value"]
                plain = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
                node = {**node, "value": self.pseudonym("sensitive_key", plain)}
            out: dict[str, Any] = {}
            for key, value in node.items():
                child = f"{path}.{key}"
                new_key = (
                    self._redact_text(key, path + ".<key>", fired)
                    if len(key) >= _MIN_SCAN_CHARS
                    else key
                )
                if self._secret_value(key, value):
                    plain = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
                    out[new_key] = self.pseudonym("sensitive_key", plain)
                    self._count(fired, f"{child}:sensitive_key", "sensitive_key")
                else:
                    out[new_key] = self._walk(value, child, fired, depth + 1)
            return out
        if isinstance(node, list):
            if len(node) == 2 and isinstance(node[0], str) and self._secret_value(node[0], node[1]):
                # A [name, value] pair, as headers often travel.
                self._count(fired, f"{path}[1]:sensitive_key", "sensitive_key")
                plain = node[1] if isinstance(node[1], str) else json.dumps(node[1], sort_keys=True)
                return [node[0], self.pseudonym("sensitive_key", plain)]
            return [
                self._walk(value, f"{path}[{index}]", fired, depth + 1)
                for index, value in enumerate(node)
            ]
        if isinstance(node, float) and node.is_integer() and abs(node) >= 1e12:
            node = int(node)  # a card number sent as 4111111111111111.0
        if isinstance(node, int) and not isinstance(node, bool) and node >= 10**12:
            as_text = str(node)
            redacted = self._redact_text(as_text, path, fired)
            return node if redacted == as_text else redacted
        return node

    def _secret_value(self, key: str, value: Any) -> bool:
        """A value under a sensitive key is replaced whatever it looks like (unless empty or
        explicitly allowed)."""
        if value in (None, "", [], {}) or key in self.config.allow_keys:
            return False
        if isinstance(value, str) and value in self.config.allow_values:
            return False
        return is_sensitive_key(key, self._extra_keys)

    def _redact_text(self, text: str, where: str, fired: list[str]) -> str:
        # Matched on UTF-8 bytes: the RE2 wrapper maps every match position back to a
        # character offset on str input, which made dense text twice as slow.
        data = text.encode("utf-8", "surrogatepass")
        pieces: list[bytes] = []
        cursor = 0
        for match in self._bytes_pattern.finditer(_escape_view_bytes(data)):
            # lastindex is the rule's own group (it closes after any inner value group);
            # the wrapper's lastgroup recomputes the group table on every call.
            rule = self._rule_of_group.get(match.lastindex or 0)
            if rule is None:
                continue
            start, end = match.span()
            quote = False
            groups = self._value_groups.get(rule, ())
            for position, group_index in enumerate(groups):
                if match.span(group_index)[0] >= 0:
                    start, end = match.span(group_index)
                    # An unquoted value (key=value text, or a JSON number/literal).
                    quote = position == len(groups) - 1 and len(groups) > 1
                    break
            value = data[start:end].decode("utf-8", "surrogatepass")
            if quote:
                if value in ("null", "true", "false"):
                    continue  # nothing secret, and JSON must stay JSON
                quote = _NUMBER.fullmatch(value) is not None
            if value in self.config.allow_values:
                continue
            accept = self._accept.get(rule)
            if accept is not None:
                accepted = accept(value)
                if accepted is None:
                    continue
                if accepted != value:  # a secret inside the match (it is always a prefix)
                    end = start + len(accepted.encode())
                    value = accepted
            pieces.append(data[cursor:start])
            pseudonym = self.pseudonym(rule, value)
            pieces.append((f'"{pseudonym}"' if quote else pseudonym).encode())
            cursor = end
            self._count(fired, f"{where}:{rule}", rule)
        if not pieces:
            return text
        pieces.append(data[cursor:])
        return b"".join(pieces).decode("utf-8", "surrogatepass")

    def _count(self, fired: list[str], entry: str, rule: str) -> None:
        fired.append(entry)
        self.stats.redactions += 1
        self.stats.by_rule[rule] = self.stats.by_rule.get(rule, 0) + 1


_NOT_JSON = object()


def _escape_view(text: str) -> str:
    """``text`` with JSON whitespace escapes (``\\n``) shown as real whitespace, at the same
    offsets, so a secret right after an escaped newline still starts at a word boundary."""
    if "\\" not in text:
        return text
    return text.replace("\\n", " \n").replace("\\t", " \t").replace("\\r", " \r")


def _escape_view_bytes(data: bytes) -> bytes:
    if b"\\" not in data:
        return data
    return data.replace(b"\\n", b" \n").replace(b"\\t", b" \t").replace(b"\\r", b" \r")


_NUMBER = re.compile(r"-?\d[\d.eE+-]*")


def detector(name: str, pattern: str) -> Detector:
    """A user-defined detector (from the config file); validated to compile under RE2."""
    re2.compile(pattern)
    return Detector(name, pattern)
