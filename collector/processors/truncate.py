"""Truncate: a huge body never breaks a batch, and never silently loses its provenance.

Runs after redaction. A value over its limit becomes a sentinel that is still valid JSON::

    {"afr.truncated": true, "original_bytes": N, "sha256": "<hex of the redacted original>",
     "preview": "<first bytes, cut on a UTF-8 character boundary>"}

Limits: ``max_body_bytes`` per value (Input, Output, every attribute and event attribute),
overridable per field name (``input``, ``output`` or an attribute key), and
``max_span_bytes`` for a whole span, enforced by shrinking its largest values first. The
span is flagged ``Truncated`` so a replay knows its captured outputs are lossy.

Names are bounded too, by ``max_name_bytes``: the span, scope, service, event and attribute
key names and trace states, which are identifiers (several are LowCardinality columns) and
never bodies. A cut name keeps its first bytes and says what was cut::

    <first bytes>…[afr.truncated N bytes sha256:<16 hex>]

Resource attributes are stored on every span of their resource, so one large value costs
its size once per span: each is bounded by ``max_resource_value_bytes`` (and the status
message by ``max_body_bytes``). A resource is bounded once per batch, however many spans
share it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from afr_exporter.semconv import AFR_TRUNCATED
from collector.model import SpanRecord

__all__ = ["TruncationConfig", "Truncator", "cut_name", "sentinel"]

SENTINEL_KEY = AFR_TRUNCATED


@dataclass(frozen=True)
class TruncationConfig:
    max_body_bytes: int = 256 * 1024
    max_span_bytes: int = 4 * 1024 * 1024
    preview_bytes: int = 2048
    field_limits: dict[str, int] = field(default_factory=dict)
    max_name_bytes: int = 1024
    max_resource_value_bytes: int = 4096


_NAME_MARK_BYTES = 80  # room for the "…[afr.truncated N bytes sha256:…]" mark


def cut_name(value: str, limit: int) -> str | None:
    """``value`` cut to at most ``limit`` UTF-8 bytes with its mark, or None if it fits."""
    if len(value) * 4 <= limit:
        return None
    raw = value.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return None
    keep = raw[: max(0, limit - _NAME_MARK_BYTES)].decode("utf-8", "ignore")
    digest = hashlib.sha256(raw).hexdigest()[:16]
    return f"{keep}…[{SENTINEL_KEY} {len(raw)} bytes sha256:{digest}]"


def sentinel(value: str, preview_bytes: int, max_bytes: int | None = None) -> str:
    """The sentinel of ``value``; with ``max_bytes``, its preview is cut further until the
    whole sentinel fits (JSON escapes a control character in six bytes)."""
    raw = value.encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(raw).hexdigest()
    while True:
        preview = raw[:preview_bytes].decode("utf-8", "ignore")
        text = json.dumps(
            {SENTINEL_KEY: True, "original_bytes": len(raw), "sha256": digest, "preview": preview},
            ensure_ascii=False,
        )
        excess = 0 if max_bytes is None else len(text.encode()) - max_bytes
        if excess <= 0 or not preview:
            return text
        preview_bytes = max(0, len(preview.encode()) - excess)


class Truncator:
    def __init__(self, config: TruncationConfig | None = None) -> None:
        self.config = config = config or TruncationConfig()
        self.truncated_values = 0
        self._quarter_limit = min([config.max_body_bytes, *config.field_limits.values()]) // 4

    def __call__(self, records: list[SpanRecord]) -> list[SpanRecord]:
        resources: dict[int, bool] = {}
        for record in records:
            key = id(record.resource_attributes)
            if key not in resources:
                resources[key] = self._bound_resource(record.resource_attributes)
            self.truncate_span(record)
            if resources[key]:
                record.truncated = True
        return records

    def _bound_resource(self, resource: dict[str, str]) -> bool:
        """Bounds a resource's values and keys in place; True if anything was cut."""
        limit = self.config.max_resource_value_bytes
        name_limit = self.config.max_name_bytes
        changed = False
        for key, value in list(resource.items()):
            cut = self._cut(value, limit)
            if cut is not None:
                resource[key] = cut
                changed = True
        if any(len(key) * 4 > name_limit for key in resource):
            changed = self._bound_keys(resource) or changed
        return changed

    def _bound_keys(self, mapping: dict[str, str]) -> bool:
        limit = self.config.max_name_bytes
        renamed = {key: cut_name(key, limit) for key in mapping}
        if not any(renamed.values()):
            return False
        items = list(mapping.items())
        mapping.clear()
        for key, value in items:
            mapping[renamed[key] or key] = value
        self.truncated_values += sum(1 for name in renamed.values() if name)
        return True

    def _bound_names(self, record: SpanRecord) -> bool:
        limit = self.config.max_name_bytes
        changed = False
        for name in ("span_name", "scope_name", "scope_version", "service_name", "trace_state"):
            cut = cut_name(getattr(record, name), limit)
            if cut is not None:
                setattr(record, name, cut)
                changed = True
        cut = cut_name(record.status_message, self.config.max_body_bytes)
        if cut is not None:
            record.status_message = cut
            changed = True
        for names in (record.event_names, record.link_trace_states):
            for index, value in enumerate(names):
                cut = cut_name(value, limit)
                if cut is not None:
                    names[index] = cut
                    changed = True
        if changed:
            self.truncated_values += 1
        return changed

    def _limit(self, name: str) -> int:
        return self.config.field_limits.get(name, self.config.max_body_bytes)

    def _cut(self, value: str, limit: int) -> str | None:
        # Cheap test first: a string of n characters is at most 4n UTF-8 bytes.
        if len(value) * 4 <= limit or len(value.encode("utf-8", "surrogatepass")) <= limit:
            return None
        self.truncated_values += 1
        return sentinel(value, min(self.config.preview_bytes, max(0, limit - 200)), limit)

    def _surely_fits(self, record: SpanRecord, maps: list[dict[str, str]]) -> bool:
        # No encoding needed to know most spans fit: n characters are at most 4n UTF-8 bytes.
        quarter = self._quarter_limit
        total = len(record.input) + len(record.output)
        if total > quarter:
            return False
        key_quarter = self.config.max_name_bytes // 4
        for mapping in maps:
            for key, value in mapping.items():
                size = len(value)
                if size > quarter or len(key) > key_quarter:
                    return False
                total += size + len(key)
        return total * 4 <= self.config.max_span_bytes

    def truncate_span(self, record: SpanRecord) -> None:
        maps = [record.span_attributes, record.body_attributes]
        if record.event_attributes or record.link_attributes:
            maps += [*record.event_attributes, *record.link_attributes]
        named = self._bound_names(record)
        if self._surely_fits(record, maps):
            if named:
                record.truncated = True
            return
        changed = named
        name_limit = self.config.max_name_bytes
        for mapping in maps:
            if any(len(key) * 4 > name_limit for key in mapping):
                changed = self._bound_keys(mapping) or changed
        originals: dict[str, str] = {}  # sentinel -> the value it stands for
        for name in ("input", "output"):
            value = getattr(record, name)
            cut = self._cut(value, self._limit(name))
            if cut is not None:
                setattr(record, name, cut)
                originals[cut] = value
                changed = True
        for mapping in maps:
            for key, value in mapping.items():
                cut = self._cut(value, self._limit(key))
                if cut is not None:
                    mapping[key] = cut
                    originals[cut] = value
                    changed = True
        changed = self._fit_span(record, maps, originals) or changed
        if changed:
            record.truncated = True

    def _fit_span(
        self, record: SpanRecord, maps: list[dict[str, str]], originals: dict[str, str]
    ) -> bool:
        limit = self.config.max_span_bytes
        sizes: list[tuple[int, str, dict[str, str] | None]] = [
            (len(record.input), "input", None),
            (len(record.output), "output", None),
        ]
        for mapping in maps:
            sizes.extend((len(value), key, mapping) for key, value in mapping.items())
        total = sum(size for size, _, _ in sizes) + sum(len(k) for m in maps for k in m)
        if total * 4 <= limit:
            return False
        total = _size(record.input) + _size(record.output)
        total += sum(_size(k) + _size(v) for m in maps for k, v in m.items())
        if total <= limit:
            return False
        changed = False
        for _, name, owner in sorted(sizes, key=lambda item: item[0], reverse=True):
            if total <= limit:
                break
            value: str = getattr(record, name) if owner is None else owner[name]
            # A value cut above gets a smaller sentinel of its original, never one of a sentinel.
            source = originals.get(value, value)
            replacement = sentinel(source, min(self.config.preview_bytes, 256))
            if len(replacement) >= len(value):
                continue
            total -= _size(value) - _size(replacement)
            if owner is None:
                setattr(record, name, replacement)
            else:
                owner[name] = replacement
            self.truncated_values += 1
            changed = True
        return changed


def _size(text: str) -> int:
    # As sentinels measure text: a lone surrogate (never from the decoders) counts its 3 bytes.
    return len(text.encode("utf-8", "surrogatepass"))
