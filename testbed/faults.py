"""Store faults for a real collector process, driven from outside through a control file.

``FaultyStore`` wraps the collector's real store (as ``tests/fakes.FlakyStore`` does in
process) and raises what clickhouse-connect raises for each fault, with ClickHouse's own
codes, names and message shape (``Code: 252. DB::Exception: ... (TOO_MANY_PARTS)``):

- ``transient``: every insert fails with a retryable server error (too many parts, memory
  limit, timeout, socket timeout, network error, in turn) while ``SELECT 1`` still answers:
  the store is up, just not taking this insert now;
- ``down``: inserts and queries fail as on a refused connection;
- ``poison``: rows of the given span ids are refused for good (CANNOT_PARSE_INPUT...), alone
  or in any batch, as data the store cannot take;
- ``insert_delay_s`` (+ per row): a slow store.

The test driver writes a ``FaultPlan`` (``FaultControl.apply``); the store reads it again
whenever the file changes and writes what it did to a status file, so the driver can wait
for a fault to have happened instead of sleeping.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from collector.blocks import block_rows, is_native_payload, payload_rows

__all__ = [
    "TRANSIENT_ERRORS",
    "FaultControl",
    "FaultPlan",
    "FaultStatus",
    "FaultyStore",
    "down_error",
    "poison_error",
    "transient_error",
]

Mode = Literal["ok", "transient", "down"]

# ClickHouse error codes a store returns while it is up but cannot take an insert now.
TRANSIENT_ERRORS: dict[int, tuple[str, str]] = {
    252: (
        "TOO_MANY_PARTS",
        "Too many parts (3001 with average size of 1.20 KiB) in table 'afr.otel_traces'. "
        "Merges are processing significantly slower than inserts",
    ),
    241: (
        "MEMORY_LIMIT_EXCEEDED",
        "Memory limit (total) exceeded: would use 3.52 GiB (attempt to allocate chunk of "
        "4194304 bytes), maximum: 3.46 GiB",
    ),
    159: ("TIMEOUT_EXCEEDED", "Timeout exceeded: elapsed 30.001 seconds, maximum: 30"),
    209: (
        "SOCKET_TIMEOUT",
        "Timeout exceeded while reading from socket (peer: 10.0.0.7:9000, 300000 ms)",
    ),
    210: ("NETWORK_ERROR", "Connection reset by peer, while reading from socket (10.0.0.7:9000)"),
}
_VERSION = "(version 26.9.2.1)"


def transient_error(code: int) -> Exception:
    from clickhouse_connect.driver.exceptions import DatabaseError

    name, text = TRANSIENT_ERRORS[code]
    return DatabaseError(
        f"Code: {code}. DB::Exception: {text}. ({name}) {_VERSION}", code=code, name=name
    )


def poison_error() -> Exception:
    from clickhouse_connect.driver.exceptions import DatabaseError

    name = "CANNOT_PARSE_INPUT_ASSERTION_FAILED"
    return DatabaseError(
        "Code: 27. DB::Exception: Cannot parse input: expected ',' before: 'x\\n': "
        f"(at row 1): While executing ParallelParsingBlockInputFormat. ({name}) {_VERSION}",
        code=27,
        name=name,
    )


def down_error() -> Exception:
    from clickhouse_connect.driver.exceptions import OperationalError

    return OperationalError(
        "Error HTTPConnectionPool(host='clickhouse', port=8123): Max retries exceeded with url: "
        "/ (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object>: Failed "
        "to establish a new connection: [Errno 111] Connection refused')) executing HTTP "
        "request attempt 1 (http://clickhouse:8123)"
    )


@dataclass(frozen=True)
class FaultPlan:
    mode: Mode = "ok"
    transient_codes: tuple[int, ...] = tuple(TRANSIENT_ERRORS)
    poison_span_ids: tuple[str, ...] = ()
    insert_delay_s: float = 0.0
    insert_delay_per_row_s: float = 0.0
    generation: int = 0

    @classmethod
    def load(cls, path: Path) -> FaultPlan:
        data = json.loads(path.read_text())
        data["transient_codes"] = tuple(data.get("transient_codes", TRANSIENT_ERRORS))
        data["poison_span_ids"] = tuple(data.get("poison_span_ids", ()))
        return cls(**data)


@dataclass
class FaultStatus:
    """What the store did, since its process started (``pid``)."""

    pid: int = 0
    generation: int = -1
    inserts: int = 0
    rows_inserted: int = 0
    failed_inserts: int = 0
    transient_failures: int = 0
    down_failures: int = 0
    poison_refusals: int = 0
    failed_queries: int = 0
    delayed_inserts: int = 0
    insert_running: bool = False
    codes: dict[str, int] = field(default_factory=dict)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    temporary = path.with_name(path.name + f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data))
    temporary.replace(path)


class FaultControl:
    """The driver's side: writes plans, reads the store's status."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.control_path = directory / "faults.json"
        self.status_path = directory / "faults-status.json"
        self._generation = 0
        self.apply(FaultPlan())

    def apply(self, plan: FaultPlan) -> int:
        """Writes ``plan``; returns its generation (``FaultStatus.generation`` once seen)."""
        self._generation += 1
        data = asdict(plan)
        data["generation"] = self._generation
        _write_json(self.control_path, data)
        return self._generation

    def status(self) -> FaultStatus | None:
        try:
            data = json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return None
        return FaultStatus(**data)

    def wait(
        self, predicate: Callable[[FaultStatus], bool], timeout_s: float, what: str
    ) -> FaultStatus:
        """Polls the status until ``predicate(status)``; raises TimeoutError naming ``what``."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.status()
            if status is not None and predicate(status):
                return status
            if time.monotonic() > deadline:
                raise TimeoutError(f"store fault status: {what} not seen in {timeout_s} s")
            time.sleep(0.02)


class FaultyStore:
    """The store the collector is given: the real one, faults in front of it."""

    def __init__(self, inner: Any, control_path: Path, status_path: Path) -> None:
        self.inner = inner
        self._control_path = control_path
        self._status_path = status_path
        self._stamp: tuple[int, int] | None = None
        self._plan = FaultPlan()
        self._lock = threading.Lock()
        self._next_code = 0
        self.status = FaultStatus(pid=os.getpid())
        self._publish()

    def _current(self) -> FaultPlan:
        try:
            stat = self._control_path.stat()
        except OSError:
            return self._plan
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            try:
                self._plan = FaultPlan.load(self._control_path)
                self._stamp = stamp
            except (OSError, ValueError, TypeError):
                pass  # caught mid-replace: keep the last plan, read it again next call
            self.status.generation = self._plan.generation
        return self._plan

    def _publish(self) -> None:
        _write_json(self._status_path, asdict(self.status))

    def _fail(self, error: Exception, counter: str) -> Exception:
        status = self.status
        status.failed_inserts += 1
        setattr(status, counter, getattr(status, counter) + 1)
        code = str(getattr(error, "code", None) or type(error).__name__)
        status.codes[code] = status.codes.get(code, 0) + 1
        return error

    def insert_rows(self, payload: bytes) -> None:
        with self._lock:
            plan = self._current()
            self.status.inserts += 1
            self.status.insert_running = True
            self._publish()
        rows = payload_rows(payload)
        try:
            if plan.mode == "down":
                raise self._fail(down_error(), "down_failures")
            if plan.mode == "transient":
                code = plan.transient_codes[self._next_code % len(plan.transient_codes)]
                self._next_code += 1
                raise self._fail(transient_error(code), "transient_failures")
            if plan.insert_delay_s or plan.insert_delay_per_row_s:
                self.status.delayed_inserts += 1
                time.sleep(plan.insert_delay_s + plan.insert_delay_per_row_s * rows)
            if plan.poison_span_ids and _holds_any(payload, plan.poison_span_ids):
                raise self._fail(poison_error(), "poison_refusals")
            self.inner.insert_rows(payload)
            self.status.rows_inserted += rows
        finally:
            with self._lock:
                self.status.insert_running = False
                self._publish()

    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        plan = self._current()
        if plan.mode == "down":
            self.status.failed_queries += 1
            self._publish()
            raise down_error()
        result: list[tuple[Any, ...]] = self.inner.query(sql, parameters)
        return result

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        # Anything else the collector asks of its store (future methods) goes to the real one.
        return getattr(self.inner, name)


def _holds_any(payload: bytes, span_ids: tuple[str, ...]) -> bool:
    """True when a row of ``payload`` (Native blocks, or JSONCompactEachRow as a refused
    batch is bisected into) is one of ``span_ids``: only the SpanId column counts, never a
    link or parent naming that span."""
    import orjson

    from collector.model import COLUMN_NAMES

    column = COLUMN_NAMES.index("SpanId")
    wanted = set(span_ids)
    if is_native_payload(payload):
        return any(
            row[names.index("SpanId")] in wanted
            for names, rows in block_rows(payload)
            for row in rows
        )
    return any(line and orjson.loads(line)[column] in wanted for line in payload.splitlines())
