"""What several command groups share: the ``--data-dir`` flag and the data directory it
names, the collector's settings from the flags, where the replay worker keeps its state, and
loading the Agents SDK."""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "WORKER_DATA_DIR_ENV",
    "add_data_dir_flag",
    "collector_settings",
    "data_dir",
    "loading_the_sdk",
    "worker_data_dir",
    "worker_data_dir_set",
]

WORKER_DATA_DIR_ENV = "AFR_WORKER_DATA_DIR"


def add_data_dir_flag(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--data-dir", type=Path, help="default ./.afr/data (AFR_DATA_DIR)")


def data_dir(flag: Path | None) -> Path:
    """``--data-dir``, else as the collector resolves it (``AFR_DATA_DIR``, ``./.afr/data``)."""
    if flag is not None:
        return flag
    from collector.settings import CollectorSettings

    return CollectorSettings().data_dir


def worker_data_dir(directory: Path) -> Path | None:
    """Where the replay worker of the data directory ``directory`` keeps its state (jobs, the
    day's spend, sweep slots): ``<directory>/worker``, as ``afr up`` starts it. None when
    ``AFR_WORKER_DATA_DIR`` names one: that wins for every command."""
    return None if WORKER_DATA_DIR_ENV in os.environ else directory / "worker"


@contextlib.contextmanager
def worker_data_dir_set(directory: Path | None) -> Iterator[None]:
    """``AFR_WORKER_DATA_DIR`` set to ``directory`` while the block runs (nothing when None),
    for code that builds the worker's settings from the environment itself, and for the
    processes it starts, which inherit it."""
    if directory is None:
        yield
        return
    os.environ[WORKER_DATA_DIR_ENV] = str(directory)
    try:
        yield
    finally:
        os.environ.pop(WORKER_DATA_DIR_ENV, None)


def collector_settings(args: argparse.Namespace) -> Any:
    from collector.settings import CollectorSettings

    overrides: dict[str, Any] = {}
    for name in ("data_dir", "grpc_port", "http_port", "grpc_host", "http_host"):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    if getattr(args, "no_auth", False):
        overrides["auth_enabled"] = False
    if getattr(args, "sql_port", None) is not None:
        overrides["sql_port"] = args.sql_port
    elif getattr(args, "sql", False) and "AFR_SQL_PORT" not in os.environ:
        from collector.settings import SQL_DEFAULT_PORT

        overrides["sql_port"] = SQL_DEFAULT_PORT
    settings = CollectorSettings(**overrides)
    if args.command == "up" and "AFR_INGEST_WORKERS" not in os.environ:
        settings = settings.model_copy(update={"ingest_workers": os.cpu_count() or 1})
    return settings


@contextlib.contextmanager
def loading_the_sdk() -> Iterator[None]:
    """Around a command's imports of the Agents SDK (openai, mcp, pydantic models: ~200,000
    objects that live as long as the process). The cyclic GC is paused while they load and
    what they built is then moved to the permanent generation (``gc.freeze``), so no
    collection walks them again: neither the dozens during the imports nor the full ones
    after, the last of them at exit. Measured on 2 cores: a process that imports the SDK
    this way takes ~0.6x the time (2.3 -> 1.5 s on a quiet machine). The few thousand
    cycles the imports leave as garbage stay (a few hundred KB). Once the SDK is loaded (a
    test calling ``main``) it does nothing."""
    if "agents" in sys.modules:
        yield
        return
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
