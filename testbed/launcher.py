"""A fork server for collector processes: ``python -m testbed.launcher SOCKET``.

Most of a collector's start-up is importing (the Agents SDK alone takes ~4 s here), and a
fault scenario starts the collector many times. The launcher imports the collector once
(never the embedded engine: importing chDB starts threads, and a process with threads must
not fork), then forks one child per start. The child runs exactly ``afr up``
(``afr.cli.main``) or ``testbed.faulty_collector.main``, with its own environment,
working directory, stdout and stderr, in a fresh process that a signal kills like any other.
The test suite uses it to keep its wall time down; ``make bench`` starts plain processes, so
its restart times include the imports.

Protocol: one JSON request per connection on the Unix socket, one JSON answer:
``{"op": "start", "module", "argv", "env", "cwd", "stdout", "stderr"}`` -> ``{"pid"}``;
``{"op": "poll", "pid"}`` -> ``{"exit_code"}`` (null while it runs); ``{"op": "shutdown"}``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["Launcher", "main"]

ENTRY_POINTS = ("afr.cli", "testbed.faulty_collector")


def _run_child(request: dict[str, Any]) -> int:
    """In the forked child: become the requested process and run its entry point."""
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    for sig in (signal.SIGTERM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    module = request["module"]
    sys.argv = [module, *request["argv"]]
    argv = list(request["argv"])
    if module == "afr.cli":
        from afr.cli import main as afr_main

        return afr_main(argv)
    from testbed.faulty_collector import main as faulty_main

    return faulty_main(argv)


def _fork(request: dict[str, Any]) -> int:
    if request.get("module") not in ENTRY_POINTS:
        raise ValueError(f"unknown entry point {request.get('module')!r}")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        code = _run_child(request)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(path: Path) -> None:
    # Imported once here, inherited by every child. Nothing below starts a thread.
    import afr.cli
    import collector.server
    import collector.settings
    import collector.store.client
    import testbed.faulty_collector  # noqa: F401

    del afr, collector
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(16)
    exit_codes: dict[int, int] = {}
    children: set[int] = set()
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    try:
        while not stopping:
            readable, _, _ = select.select([listener], [], [], 0.05)
            while children:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                exit_codes[pid] = os.waitstatus_to_exitcode(status)
                children.discard(pid)
            if not readable:
                continue
            connection, _ = listener.accept()
            with connection:
                request = json.loads(connection.makefile("rb").readline())
                answer: dict[str, Any]
                if request["op"] == "start":
                    pid = _fork(request)
                    children.add(pid)
                    answer = {"pid": pid}
                elif request["op"] == "poll":
                    answer = {"exit_code": exit_codes.get(request["pid"])}
                else:
                    stopping = True
                    answer = {}
                connection.sendall(json.dumps(answer).encode() + b"\n")
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


class Launcher:
    """The client: starts the fork server, asks it for processes, shuts it down."""

    def __init__(self, *, timeout_s: float = 120) -> None:
        from testbed.collector import CODE_ROOT, child_environment

        # Unix socket paths are short (108 bytes): its own directory under the temp dir.
        self._directory = Path(tempfile.mkdtemp(prefix="afr-testbed-"))
        self.socket_path = self._directory / "launcher.sock"
        with (self._directory / "launcher.log").open("ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "testbed.launcher", str(self.socket_path)],
                env=child_environment({}),
                cwd=CODE_ROOT,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + timeout_s
        while not self._answers():
            if self._process.poll() is not None:
                raise RuntimeError(f"the launcher exited with {self._process.returncode}")
            if time.monotonic() > deadline:
                self.close()
                raise TimeoutError(f"the launcher did not come up in {timeout_s} s")
            time.sleep(0.02)

    @property
    def pid(self) -> int:
        return self._process.pid

    def _answers(self) -> bool:
        try:
            self._ask({"op": "poll", "pid": 0})
        except OSError:
            return False
        return True

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(str(self.socket_path))
            connection.sendall(json.dumps(request).encode() + b"\n")
            answer: dict[str, Any] = json.loads(connection.makefile("rb").readline())
            return answer

    def start(
        self,
        module: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        stdout: Path,
        stderr: Path,
    ) -> int:
        answer = self._ask(
            {
                "op": "start",
                "module": module,
                "argv": list(argv),
                "env": dict(env),
                "cwd": str(cwd),
                "stdout": str(stdout),
                "stderr": str(stderr),
            }
        )
        pid: int = answer["pid"]
        return pid

    def exit_code(self, pid: int) -> int | None:
        """The child's exit code (negative: killed by that signal), None while it runs."""
        code: int | None = self._ask({"op": "poll", "pid": pid})["exit_code"]
        return code

    def close(self) -> None:
        if self._process.poll() is None:
            with contextlib.suppress(OSError):
                self._ask({"op": "shutdown"})
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
        shutil.rmtree(self._directory, ignore_errors=True)

    def __enter__(self) -> Launcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    serve(Path(args[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
