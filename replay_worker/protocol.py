"""What the worker's own process and its replay and sweep processes exchange: the job and
the sweep a process is given, its configuration, its answer, its exit code when the worker
is gone, and the functions the processes start in.

The worker's process never imports a module that loads the Agents SDK (``child``,
``sweeps``, and what they import): a process is started at a function *named* here
(``ProcessEntry``), which its module resolves in the new process, where the fork server has
loaded it already. The import contracts in ``pyproject.toml`` check the rule (ADR 32): an
import of ``replay_worker.child`` from the worker's side would break them.
"""

from __future__ import annotations

import importlib
import multiprocessing
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import Any

from replay_worker.money import Clock
from replay_worker.settings import WorkerSettings
from replay_worker.state import Owner

__all__ = [
    "CHILD_ENTRY",
    "EXIT_PARENT_GONE",
    "SWEEP_ENTRY",
    "ChildConfig",
    "JobSpec",
    "Outcome",
    "ProcessEntry",
    "SweepTask",
    "default_context",
]

_PRELOAD = ["replay_worker.preload"]  # loads and warms the SDK once, in the fork server

Outcome = dict[str, Any]
"""A replay process's answer: ``{"state": "succeeded", "result": {...}}`` or
``{"state": "failed", "error": {"status", "reason"}}``."""

EXIT_PARENT_GONE = 75
"""A replay process whose worker died exits with this at once rather than spend on a result
nobody will read (its job is re-queued by the next worker)."""


@dataclass(frozen=True)
class JobSpec:
    job_id: str
    run_id: str
    model: str | None
    stubs: dict[str, str]
    policy: str = "exact"
    fork: dict[str, Any] | None = None
    """A ``Fork`` (hooks/models.py) as JSON: fork the run at its step with its overrides."""


@dataclass(frozen=True)
class ChildConfig:
    settings: WorkerSettings
    clock: Clock
    """Must pickle (a module-level function or object): each replay process gets a copy."""


@dataclass(frozen=True)
class SweepTask:
    """What a sweep process is given: the sweep it runs, and whose claim it runs under."""

    sweep_id: str
    owner: Owner


@dataclass(frozen=True)
class ProcessEntry:
    """A function a replay or sweep process starts in, by module and name: it pickles as
    those two strings, and its module is imported only in the process it runs in."""

    module: str
    function: str

    def __call__(self, *args: Any) -> None:
        getattr(importlib.import_module(self.module), self.function)(*args)


CHILD_ENTRY = ProcessEntry("replay_worker.child", "child_main")
"""A replay process: ``child_main(conn, lifeline, config)``."""
SWEEP_ENTRY = ProcessEntry("replay_worker.sweeps", "sweep_process_main")
"""A sweep process: ``sweep_process_main(conn, lifeline, config, task)``."""


def default_context() -> BaseContext:
    """The fork server where there is one (Linux, macOS), spawn elsewhere; never plain fork
    (the worker's process runs threads: uvicorn, gRPC, the collector under ``afr up``)."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(_PRELOAD)  # no effect once the server runs
        return context
    return multiprocessing.get_context("spawn")
