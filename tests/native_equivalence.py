"""What the ingest stage makes of a fixed corpus, one line per case: run once with the compiled
modules and once from source (``AFR_NATIVE=0``), the two outputs must be the same
(``tests/unit/collector/test_native.py``).

The corpus: the bench's agent requests, realistic and secret-free, through
``process_request`` (decode, records, redact, normalize, signature, truncate, encode); and
every kind of secret and look-alike the matrices know, each in several placements (prose,
a JSON document, JSON inside JSON, a query string, a key=value pair, text beyond ASCII, a
header pair), through the collector's processors; then hostile text (a lone surrogate, JSON
nested past the limit, a long text dense with turned-down matches). Each line is the case's
name, the SHA-256 of the encoded rows and the redaction counts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

from bench.collector_bench import DIALECT, REALISTIC_SECRET_EVERY_BYTES, make_requests
from collector import native
from collector.model import SpanRecord
from collector.pipeline import process_request
from collector.privacy import default_processors
from collector.settings import CollectorSettings
from tests.records import span_record
from tests.secret_corpus import CORE_KINDS, look_alikes
from tests.secretgen import PROVIDER_GENERATORS, PROVIDER_LOOK_ALIKES

NOW_NS = 1_760_000_000_000_000_000


def _placements(text: str) -> Iterator[tuple[str, dict[str, str]]]:
    yield "prose", {"note": f"please write to {text} before friday, thanks"}
    message = {"role": "user", "content": f"my key is {text}"}
    yield "json", {"input.value": json.dumps([message, {"role": "assistant", "content": "ok"}])}
    yield "json_in_json", {"tool.arguments": json.dumps({"args": json.dumps({"value": text})})}
    yield "query", {"http.url": f"https://api.example.com/v1/x?q=1&token={text}&page=2"}
    yield "key_value", {"log": f"user=bob api_key={text} retries=3"}
    yield "wide", {"note": f"\u2014 voil\u00e0 \u201c{text}\u201d \u2014 merci"}
    yield "header", {"headers": json.dumps([["Authorization", f"Bearer {text}"]])}


def _texts() -> Iterator[tuple[str, str]]:
    rng = random.Random(52)
    for name, kind in sorted(CORE_KINDS.items()):
        for index in range(2):
            yield f"{name}#{index}", kind.generate(rng).text
    for name, generate in sorted(PROVIDER_GENERATORS.items()):
        yield name, generate(rng)
    for name, generate in sorted(PROVIDER_LOOK_ALIKES.items()):
        yield f"look_alike:{name}", generate(rng)
    for category, texts in sorted(look_alikes(rng, per_category=3).items()):
        for index, text in enumerate(texts):
            yield f"look_alike:{category}#{index}", text


def _hostile() -> Iterator[tuple[str, dict[str, str]]]:
    yield "lone_surrogate", {"note": "mail bob@example.com \ud800 then sk-" + "a1B2" * 12}
    deep: Any = "sk-" + "a1B2" * 12
    for _ in range(300):
        deep = {"a": [deep]}
    yield "deep_json", {"input.value": json.dumps(deep)}
    yield "json_in_json_deep", {"input.value": json.dumps(json.dumps(json.dumps({"k": "x@y.co"})))}
    yield "dense", {"note": "sid=123456789 pwd=x&user=bob& " * 4000}
    yield "paths", {"note": "owner a@b.co " + "/srv/data/archive/2024/q " * 3000}
    yield "empty", {"note": ""}
    yield "numbers", {"input.value": json.dumps({"n": 4111111111111111, "f": 4.1e15, "g": 0.1})}


def _digest(records: list[SpanRecord]) -> str:
    """Every field of the records (a lone surrogate as Python keeps it: rows take none)."""
    fields = repr([dataclasses.asdict(record) for record in records])
    return hashlib.sha256(fields.encode("utf-8", "surrogatepass")).hexdigest()


def run() -> Iterator[str]:
    settings = CollectorSettings(
        data_dir=tempfile.mkdtemp(prefix="afr-native-eq-"), redaction_key="native-equivalence"
    )
    processors = default_processors(settings)
    for corpus, every in (("realistic", REALISTIC_SECRET_EVERY_BYTES), ("secret_free", 0)):
        with mock.patch("time.time_ns", return_value=NOW_NS):  # the spans' times: fixed
            requests = make_requests(3, secret_every_bytes=every, dialect=DIALECT)
        for index, raw in enumerate(requests):
            processed = process_request(processors, raw, False, "p", NOW_NS)
            body = hashlib.sha256(processed.payload).hexdigest()
            yield f"{corpus}#{index} {body} {processed.redactions} {processed.failed_closed}"
    cases: list[tuple[str, dict[str, str]]] = [
        (f"{name}@{where}", attributes)
        for name, text in _texts()
        for where, attributes in _placements(text)
    ]
    cases.extend(_hostile())
    for name, attributes in cases:
        records = [span_record(span_attributes=dict(attributes), timestamp_ns=NOW_NS)]
        for _, processor in processors:
            records = processor(records)
        yield f"{name} {_digest(records)} {json.dumps(sorted(records[0].redactions))}"


def main() -> None:
    began = time.perf_counter()
    lines: list[Any] = list(run())
    print(json.dumps({"status": native.status(), "seconds": time.perf_counter() - began}))
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
