"""Redaction cost of the provider detectors: MB/s of ``Redactor(records)`` with and without
``PROVIDER_DETECTORS``, in one process, on ~20 MB of agent-like text (prose, code, JSON tool
calls, logs, stack traces, lockfile hashes, base64 images, URLs), once with no secret and
once with a credential every ~2 KB. ``python -m bench.providers_bench [MB]``.

RE2 builds its DFA lazily: the first megabytes a fresh Redactor sees pay for building
states, so that warm-up is timed apart from the steady state.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import sys
import time
import uuid
from collections.abc import Callable

from afr_exporter.semconv import AFR_SPAN_TYPE, GEN_AI_TOOL_NAME
from collector.model import SpanRecord
from collector.processors.providers import PROVIDER_DETECTORS
from collector.processors.redact import Redactor
from collector.processors.rules import RedactionConfig
from tests.records import span_record
from tests.secretgen import PROVIDER_GENERATORS

_WORDS = [
    "the",
    "order",
    "customer",
    "refund",
    "please",
    "process",
    "payment",
    "card",
    "charged",
    "twice",
    "duplicate",
    "amount",
    "account",
    "storage",
    "deploy",
    "build",
    "test",
    "failed",
    "error",
    "retry",
    "api",
    "request",
    "response",
    "function",
    "return",
    "import",
    "class",
    "value",
    "config",
    "file",
    "path",
    "user",
    "agent",
    "model",
    "tool",
    "call",
    "result",
    "summary",
    "ticket",
    "status",
    "shipping",
    "address",
    "invoice",
    "update",
    "created",
    "pending",
    "approved",
    "rejected",
    "queue",
]
_TOOLS = ("search_orders", "refund_order", "read_file", "run_shell", "http_get", "query_db")


def _prose(rng: random.Random, size: int) -> str:
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(_WORDS)
        out.append(word.capitalize() + "." if rng.random() < 0.06 else word)
        length += len(out[-1]) + 1
    return " ".join(out)


def _code(rng: random.Random) -> str:
    name = f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}"
    return (
        f"def {name}(self, {rng.choice(_WORDS)}: str) -> dict[str, Any]:\n"
        f'    """{_prose(rng, 60)}"""\n'
        f'    result = self.client.get(f"/v1/{rng.choice(_WORDS)}/{{id}}", timeout=30)\n'
        f"    if result.status_code != 200:\n"
        f'        raise RuntimeError("{_prose(rng, 40)}")\n'
        f"    return result.json()\n"
    )


def _log(rng: random.Random) -> str:
    return (
        f"2026-11-30T09:{rng.randrange(60):02d}:{rng.randrange(60):02d}.{rng.randrange(10**6):06d}Z"
        f" INFO [{rng.choice(_WORDS)}] request_id={uuid.UUID(int=rng.getrandbits(128))}"
        f" trace={rng.randbytes(16).hex()} status={rng.choice([200, 201, 404, 500])}"
        f" duration_ms={rng.randrange(2000)} path=/api/{rng.choice(_WORDS)}/{rng.randrange(10**6)}"
    )


def _lockfile(rng: random.Random) -> str:
    package = f"{rng.choice(_WORDS)}-{rng.choice(_WORDS)}"
    entry = {
        "version": f"{rng.randrange(9)}.{rng.randrange(20)}.{rng.randrange(9)}",
        "resolved": f"https://registry.npmjs.org/{package}/-/{package}-1.2.3.tgz",
        "integrity": "sha512-" + base64.b64encode(rng.randbytes(64)).decode(),
    }
    return json.dumps({f"node_modules/{package}": entry}, indent=2)


def _url(rng: random.Random) -> str:
    cursor = base64.urlsafe_b64encode(rng.randbytes(24)).decode()
    return (
        f"https://api.example.com/v2/{rng.choice(_WORDS)}?page={rng.randrange(99)}&cursor={cursor}"
    )


def _traceback(rng: random.Random) -> str:
    frames = "".join(
        f'  File "/usr/lib/python3.11/site-packages/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}.py",'
        f" line {rng.randrange(900)}, in {rng.choice(_WORDS)}\n"
        for _ in range(4)
    )
    return f"Traceback (most recent call last):\n{frames}ValueError: {_prose(rng, 50)}\n"


def _hashes(rng: random.Random) -> str:
    commit = hashlib.sha1(rng.randbytes(8)).hexdigest()  # noqa: S324 - a fake commit id
    return f"git commit {commit} image sha256:{hashlib.sha256(rng.randbytes(8)).hexdigest()}"


def _image(rng: random.Random) -> str:
    return (
        "data:image/png;base64," + base64.b64encode(rng.randbytes(rng.randint(200, 900))).decode()
    )


_PIECES: tuple[tuple[float, Callable[[random.Random], str]], ...] = (
    (0.40, lambda rng: _prose(rng, rng.randint(80, 400))),
    (0.55, _code),
    (0.65, _log),
    (0.71, _lockfile),
    (0.78, _url),
    (0.84, _traceback),
    (0.90, _hashes),
    (0.94, _image),
    (1.00, lambda rng: json.dumps({"query": _prose(rng, 80), "limit": rng.randrange(50)})),
)


def _text(rng: random.Random, size: int) -> str:
    parts: list[str] = []
    length = 0
    while length < size:
        roll = rng.random()
        piece = next(make for bound, make in _PIECES if roll < bound)(rng)
        parts.append(piece)
        length += len(piece) + 1
    return "\n".join(parts)


def _with_secrets(rng: random.Random, text: str, every: int) -> str:
    names = sorted(PROVIDER_GENERATORS)
    pieces = []
    for start in range(0, len(text), every):
        pieces.append(text[start : start + every])
        pieces.append(f" {PROVIDER_GENERATORS[rng.choice(names)](rng)} ")
    return "".join(pieces)


def _span(rng: random.Random, body: str) -> SpanRecord:
    messages = [{"role": "user", "parts": [{"type": "text", "content": body}]}]
    tool = rng.choice(_TOOLS)
    return span_record(
        project_id="bench",
        trace_id=rng.randbytes(16).hex(),
        span_id=rng.randbytes(8).hex(),
        span_name=f"execute_tool {tool}",
        service_name="bench-agent",
        resource_attributes={"service.name": "bench-agent"},
        scope_name="afr.exporter",
        span_attributes={GEN_AI_TOOL_NAME: tool, AFR_SPAN_TYPE: "function"},
        input=json.dumps(messages),
        output=json.dumps({"result": _prose(rng, 200)}),
    )


def corpus(total_mb: float, *, seed: int, secret_every: int = 0) -> list[str]:
    """Span bodies of 1.5-3.5 KB adding up to ``total_mb``."""
    rng = random.Random(seed)
    bodies: list[str] = []
    size = 0
    while size < total_mb * 1e6:
        body = _text(rng, rng.randint(1500, 3500))
        if secret_every:
            body = _with_secrets(rng, body, secret_every)
        bodies.append(body)
        size += len(body)
    return bodies


def _records(bodies: list[str], seed: int) -> tuple[list[SpanRecord], int]:
    rng = random.Random(seed)
    records = [_span(rng, body) for body in bodies]
    size = sum(len(r.input) + len(r.output) + len(r.span_name) for r in records)
    return records, size


def _redactor(with_providers: bool) -> Redactor:
    """The redactor as the collector builds it, or with every provider detector disabled
    (its rules as a user's ``disabled_rules`` would turn them off). The detectors are fixed
    when redact.py is imported: patching its module-level lists after that changes nothing
    (an earlier version of this bench did, and measured the same redactor twice)."""
    if with_providers:
        return Redactor(b"bench-key")
    disabled = frozenset(d.name for d in PROVIDER_DETECTORS)
    return Redactor(b"bench-key", RedactionConfig(disabled_rules=disabled))


def _mb_per_s(redactor: Redactor, bodies: list[str], seed: int) -> float:
    records, size = _records(bodies, seed)
    started = time.perf_counter()
    for start in range(0, len(records), 500):
        redactor(records[start : start + 500])
    return size / (time.perf_counter() - started) / 1e6


def main(total_mb: float = 20.0) -> dict[str, float]:
    clean = corpus(total_mb, seed=1)
    dense = corpus(total_mb, seed=2, secret_every=2048)
    warmup = corpus(1.0, seed=3)
    figures: dict[str, float] = {}
    for with_providers in (False, True):
        label = "with providers" if with_providers else "base"
        redactor = _redactor(with_providers)
        figures[f"{label} warm-up (first 1 MB)"] = _mb_per_s(redactor, warmup, 3)
    for _round in range(2):  # interleaved, best of two: the machine is shared
        for with_providers in (False, True):
            label = "with providers" if with_providers else "base"
            redactor = _redactor(with_providers)
            _mb_per_s(redactor, warmup, 3)
            for name, bodies in (("no secrets", clean), ("secret every 2 KB", dense)):
                key = f"{label}, {name}"
                figures[key] = max(figures.get(key, 0.0), _mb_per_s(redactor, bodies, 4))
    for key, value in figures.items():
        print(f"  {key:<45} {value:8.1f} MB/s")
    for name in ("no secrets", "secret every 2 KB"):
        ratio = figures[f"with providers, {name}"] / figures[f"base, {name}"]
        print(f"  ratio with/without providers, {name:<20} {ratio:8.2f}")
    return figures


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 20.0)
