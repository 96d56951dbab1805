"""Collector processes under control: start, SIGKILL, SIGTERM, restart, RSS.

A ``CollectorProcess`` is ``afr up --no-worker`` (or ``python -m testbed.faulty_collector``,
the same collector with store faults) on fixed ports and one data directory, so a restart
comes back where senders expect it and recovers the same write-ahead log. Its process tree
(the collector and its ingest worker processes) is what gets measured and, on exit, killed:
nothing started here outlives the scenario.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import collector as collector_package

if TYPE_CHECKING:
    from testbed.launcher import Launcher

__all__ = [
    "CODE_ROOT",
    "CollectorProcess",
    "KillResult",
    "Ports",
    "RssSampler",
    "StopResult",
    "child_environment",
    "descendants",
    "free_port",
    "rss_mib",
]

_READY_PREFIX = "  read API"
_RECOVERED = re.compile(r"^\s*recovered (\d+) acknowledged spans")
_TESTBED_ROOT = Path(__file__).resolve().parent.parent
# The tree the running code comes from (a checkout, or a copy of one): children import the
# same collector as this process, whatever the editable install points at.
CODE_ROOT = Path(collector_package.__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class Ports:
    grpc: int
    http: int

    @classmethod
    def pick(cls) -> Ports:
        return cls(free_port(), free_port())


def child_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """This environment without the host's AFR_/OTEL_ settings, plus ``extra``; children
    import this tree's packages (``testbed`` included)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AFR_", "OTEL_"))}
    paths = dict.fromkeys([str(CODE_ROOT), str(_TESTBED_ROOT)])
    env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra)
    return env


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (ingest workers and whatever they started)."""
    found: list[int] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            stack += children
    return found


def rss_mib(pid: int) -> float:
    """Resident set of one process (VmRSS), 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return 0.0
    return 0.0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@dataclass(frozen=True)
class KillResult:
    orphans: tuple[int, ...]
    """Descendants still alive 10 s after their collector was killed (then killed too)."""


@dataclass(frozen=True)
class StopResult:
    exit_code: int | None
    """None: it did not stop in time and was killed."""
    seconds: float
    orphans: tuple[int, ...]


def _reap(pids: list[int], timeout_s: float = 10) -> tuple[int, ...]:
    """Waits for ``pids`` to be gone; kills and returns those still alive after the wait."""
    deadline = time.monotonic() + timeout_s
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    orphans = tuple(pid for pid in pids if _alive(pid))
    for pid in orphans:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return orphans


class _Running(Protocol):
    pid: int

    def poll(self) -> int | None: ...

    def send_signal(self, sig: int) -> None: ...


class _Launched:
    """A process the fork server started: signalled by pid, its exit code asked of it."""

    def __init__(self, launcher: Launcher, pid: int) -> None:
        self._launcher = launcher
        self.pid = pid
        self._code: int | None = None

    def poll(self) -> int | None:
        if self._code is None:
            self._code = self._launcher.exit_code(self.pid)
        return self._code

    def send_signal(self, sig: int) -> None:
        os.kill(self.pid, sig)


def _wait(process: _Running, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while (code := process.poll()) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"process {process.pid} still running after {timeout_s} s")
        time.sleep(0.01)
    return code


class CollectorProcess:
    def __init__(
        self,
        data_dir: Path,
        ports: Ports,
        *,
        env: Mapping[str, str],
        log_path: Path,
        fault_files: tuple[Path, Path] | None = None,
        launcher: Launcher | None = None,
    ) -> None:
        """``fault_files`` (control, status): run the faulty launcher instead of ``afr up``;
        ``launcher``: fork it from that server instead of starting a new interpreter."""
        self.data_dir = data_dir
        self.ports = ports
        self._env = dict(env)
        self._log_path = log_path
        self._fault_files = fault_files
        self._launcher = launcher
        self._process: _Running | None = None
        self._stdout_path = log_path
        self.lines: list[str] = []
        self.recovered_rows = 0
        self.starts = 0

    # --- lifecycle -----------------------------------------------------------------------
    def _argv(self) -> tuple[str, list[str]]:
        if self._fault_files is None:
            module, argv = "afr.cli", ["up", "--no-worker"]
        else:
            control, status = self._fault_files
            module = "testbed.faulty_collector"
            argv = ["--control", str(control), "--status", str(status)]
        argv += [
            "--data-dir",
            str(self.data_dir),
            "--grpc-port",
            str(self.ports.grpc),
            "--http-port",
            str(self.ports.http),
        ]
        return module, argv

    def start(self, *, wait: bool = True, timeout_s: float = 120) -> None:
        if self.alive:
            raise RuntimeError("collector already running")
        module, argv = self._argv()
        self.starts += 1
        self.lines = []
        self.recovered_rows = 0
        # Its stdout (the banner) goes to a file of its own, read by polling.
        self._stdout_path = self._log_path.with_name(f"{self._log_path.stem}-{self.starts}.out")
        env = child_environment(self._env)
        if self._launcher is not None:
            pid = self._launcher.start(
                module,
                argv,
                env=env,
                cwd=CODE_ROOT,
                stdout=self._stdout_path,
                stderr=self._log_path,
            )
            self._process = _Launched(self._launcher, pid)
        else:
            with self._stdout_path.open("wb") as out, self._log_path.open("ab") as err:
                self._process = subprocess.Popen(
                    [sys.executable, "-m", module, *argv],
                    env=env,
                    cwd=CODE_ROOT,
                    stdout=out,
                    stderr=err,
                )
        if wait:
            self.wait_ready(timeout_s)

    def _read_banner(self) -> bool:
        """True once the banner is complete. It is written with one flush, so when its
        ``read API`` line is there, so is the ``recovered`` line, if any."""
        try:
            text = self._stdout_path.read_text(errors="replace")
        except OSError:
            return False
        self.lines = text.splitlines()
        for line in self.lines:
            if match := _RECOVERED.match(line):
                self.recovered_rows = int(match.group(1))
        return any(line.startswith(_READY_PREFIX) for line in self.lines)

    def wait_ready(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while not self._read_banner():
            process = self._process
            code = None if process is None else process.poll()
            if process is None or code is not None:
                raise RuntimeError(
                    f"collector exited with {code} before it was up: {self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"collector not up in {timeout_s} s: {self.log_tail()}")
            time.sleep(0.02)

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def kill(self) -> KillResult:
        """SIGKILL, as a crash or the OOM killer would; its ingest workers must follow it out
        on their own (they watch their parent): any still alive after 10 s is an orphan."""
        process = self._process
        if process is None:
            return KillResult(())
        below = descendants(process.pid)
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGKILL)
        _wait(process, 30)
        orphans = _reap(below)
        self._process = None
        return KillResult(orphans)

    def terminate(self, timeout_s: float = 60) -> StopResult:
        """SIGTERM and wait for a graceful exit; killed if it takes longer than ``timeout_s``."""
        process = self._process
        if process is None:
            return StopResult(None, 0.0, ())
        below = descendants(process.pid)
        started = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            code: int | None = _wait(process, timeout_s)
        except TimeoutError:
            code = None
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGKILL)
            _wait(process, 30)
        seconds = time.monotonic() - started
        orphans = _reap(below)
        self._process = None
        return StopResult(code, seconds, orphans)

    def close(self) -> None:
        """Kills whatever is still running (a scenario's finally, also on failure)."""
        if self.alive:
            self.kill()

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self._log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # --- observation ---------------------------------------------------------------------
    def health(self) -> tuple[int, dict[str, Any]] | None:
        """``/healthz``: (HTTP status, body), None when it does not answer."""
        import httpx

        try:
            answer = httpx.get(f"http://127.0.0.1:{self.ports.http}/healthz", timeout=5)
            body: dict[str, Any] = answer.json()
        except (httpx.HTTPError, ValueError):
            return None
        return answer.status_code, body

    def rss_tree_mib(self) -> tuple[float, float]:
        """(collector, collector + its descendants) resident set, MiB."""
        pid = self.pid
        if pid is None or not self.alive:
            return 0.0, 0.0
        main = rss_mib(pid)
        return main, main + sum(rss_mib(child) for child in descendants(pid))


class RssSampler:
    """Samples the current collector's process tree every ``interval_s`` on a thread."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self._interval_s = interval_s
        self._target: CollectorProcess | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="testbed-rss", daemon=True)
        self.peak_main_mib = 0.0
        self.peak_tree_mib = 0.0
        self.samples = 0

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def watch(self, process: CollectorProcess) -> None:
        self._target = process

    def sample(self) -> tuple[float, float]:
        target = self._target
        main, tree = target.rss_tree_mib() if target is not None else (0.0, 0.0)
        if tree:
            self.samples += 1
            self.peak_main_mib = max(self.peak_main_mib, main)
            self.peak_tree_mib = max(self.peak_tree_mib, tree)
        return main, tree

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.sample()
