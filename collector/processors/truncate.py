"""Truncate: a huge body never breaks a batch, and never silently loses its provenance.

Runs after redaction. A value over its limit becomes a sentinel that is still valid JSON::

    {"afr.truncated": true, "original_bytes": N, "sha256": "<hex of the redacted original>",
     "preview": "<first bytes, cut on a UTF-8 character boundary>"}

Limits: ``max_body_bytes`` per value (Input, Output, every attribute and event attribute),
overridable per field name (``input``, ``output`` or an attribute key), and
``max_span_bytes`` for a whole span, enforced by shrinking its largest values first. The
span is flagged ``Truncated`` so a replay knows its captured outputs are lossy.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from collector.model import SpanRecord

__all__ = ["TruncationConfig", "Truncator", "sentinel"]

SENTINEL_KEY = "afr.truncated"


@dataclass(frozen=True)
class TruncationConfig:
    max_body_bytes: int = 256 * 1024
    max_span_bytes: int = 4 * 1024 * 1024
    preview_bytes: int = 2048
    field_limits: dict[str, int] = field(default_factory=dict)


def sentinel(value: str, preview_bytes: int) -> str:
    raw = value.encode("utf-8", "surrogatepass")
    preview = raw[:preview_bytes].decode("utf-8", "ignore")
    return json.dumps(
        {
            SENTINEL_KEY: True,
            "original_bytes": len(raw),
            "sha256": hashlib.sha256(raw).hexdigest(),
            "preview": preview,
        },
        ensure_ascii=False,
    )


class Truncator:
    def __init__(self, config: TruncationConfig | None = None) -> None:
        self.config = config = config or TruncationConfig()
        self.truncated_values = 0
        self._quarter_limit = min([config.max_body_bytes, *config.field_limits.values()]) // 4

    def __call__(self, records: list[SpanRecord]) -> list[SpanRecord]:
        for record in records:
            self.truncate_span(record)
        return records

    def _limit(self, name: str) -> int:
        return self.config.field_limits.get(name, self.config.max_body_bytes)

    def _cut(self, value: str, limit: int) -> str | None:
        # Cheap test first: a string of n characters is at most 4n UTF-8 bytes.
        if len(value) * 4 <= limit or len(value.encode("utf-8", "surrogatepass")) <= limit:
            return None
        self.truncated_values += 1
        return sentinel(value, min(self.config.preview_bytes, max(0, limit - 200)))

    def _surely_fits(self, record: SpanRecord, maps: list[dict[str, str]]) -> bool:
        # No encoding needed to know most spans fit: n characters are at most 4n UTF-8 bytes.
        quarter = self._quarter_limit
        total = len(record.input) + len(record.output)
        if total > quarter:
            return False
        for mapping in maps:
            for value in mapping.values():
                size = len(value)
                if size > quarter:
                    return False
                total += size
        return total * 4 <= self.config.max_span_bytes

    def truncate_span(self, record: SpanRecord) -> None:
        maps = [record.span_attributes, record.body_attributes]
        if record.event_attributes or record.link_attributes:
            maps += [*record.event_attributes, *record.link_attributes]
        if self._surely_fits(record, maps):
            return
        changed = False
        for name in ("input", "output"):
            cut = self._cut(getattr(record, name), self._limit(name))
            if cut is not None:
                setattr(record, name, cut)
                changed = True
        for mapping in maps:
            for key, value in mapping.items():
                cut = self._cut(value, self._limit(key))
                if cut is not None:
                    mapping[key] = cut
                    changed = True
        changed = self._fit_span(record, maps) or changed
        if changed:
            record.truncated = True

    def _fit_span(self, record: SpanRecord, maps: list[dict[str, str]]) -> bool:
        limit = self.config.max_span_bytes
        sizes: list[tuple[int, str, dict[str, str] | None]] = [
            (len(record.input), "input", None),
            (len(record.output), "output", None),
        ]
        for mapping in maps:
            sizes.extend((len(value), key, mapping) for key, value in mapping.items())
        total = sum(size for size, _, _ in sizes)
        if total * 4 <= limit:
            return False
        total = len(record.input.encode()) + len(record.output.encode())
        total += sum(len(k.encode()) + len(v.encode()) for m in maps for k, v in m.items())
        if total <= limit:
            return False
        changed = False
        for _, name, owner in sorted(sizes, key=lambda item: item[0], reverse=True):
            if total <= limit:
                break
            value: str = getattr(record, name) if owner is None else owner[name]
            replacement = sentinel(value, min(self.config.preview_bytes, 256))
            if len(replacement) >= len(value):
                continue
            total -= len(value.encode()) - len(replacement.encode())
            if owner is None:
                setattr(record, name, replacement)
            else:
                owner[name] = replacement
            self.truncated_values += 1
            changed = True
        return changed
