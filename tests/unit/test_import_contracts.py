"""The layers and the rules between packages (``[tool.importlinter]`` in pyproject.toml,
docs/adr/0032-layers.md) hold, under plain ``pytest`` as under ``make lint``; and they are
not vacuous: a cycle, an upward import or the Agents SDK in the worker's own process,
added to a copy of the code, breaks them."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from replay_worker.protocol import CHILD_ENTRY, SWEEP_ENTRY, ProcessEntry

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = REPO / "pyproject.toml"
# The server's packages; afr_exporter is installed (its own distribution) and stays put.
SERVER_PACKAGES = ("afr", "afr_common", "collector", "replay_worker")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with this repository's contracts over the packages under ``root``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(PYPROJECT)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _verdict(output: str, name: str) -> str:
    """KEPT or BROKEN for the contract whose name starts with ``name`` (long names wrap)."""
    lines = output.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith(name))
    return next(line for line in lines[start:] if line.endswith((" KEPT", " BROKEN"))).split()[-1]


def _contracts() -> list[dict[str, Any]]:
    contracts: list[dict[str, Any]] = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"][
        "contracts"
    ]
    return contracts


@pytest.fixture
def copy_of_the_server(tmp_path: Path) -> Path:
    for package in SERVER_PACKAGES:
        shutil.copytree(
            REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    return tmp_path


def test_the_import_contracts_hold() -> None:
    done = _lint_imports(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in done.stdout


def test_each_package_has_an_exhaustive_layers_contract() -> None:
    """A new module of the collector or the worker must be given its place in the order."""
    exhaustive = {
        container
        for contract in _contracts()
        if contract["type"] == "layers" and contract.get("exhaustive")
        for container in contract["containers"]
    }
    packages = {"collector", "replay_worker", "replay_worker.evals", "replay_worker.replay"}
    assert packages | {"replay_worker.state"} <= exhaustive


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # A cycle: the state store importing the app above it.
        ("replay_worker/state/jobs.py", "import replay_worker.app", "No import cycle"),
        # An arrow up into the composition root.
        ("collector/model.py", "import afr.cli", "Nothing of the server imports"),
        # The Agents SDK in the worker's own process, indirectly: the pool importing the
        # replay process's module (which imports the SDK) instead of naming it.
        ("replay_worker/pool.py", "import replay_worker.child", "The worker's own process never"),
        # A module outside the written order.
        ("replay_worker/unplaced.py", "X = 1", "Worker: app"),
    ],
)
def test_a_change_that_breaks_the_layers_is_reported(
    copy_of_the_server: Path, module: str, line: str, broken: str
) -> None:
    path = copy_of_the_server / module
    text = path.read_text() if path.exists() else ""
    path.write_text(f"{text}\n{line}  # noqa\n")
    done = _lint_imports(copy_of_the_server)
    assert done.returncode == 1, done.stdout + done.stderr
    assert _verdict(done.stdout, broken) == "BROKEN", done.stdout


@pytest.mark.parametrize("entry", [CHILD_ENTRY, SWEEP_ENTRY])
def test_the_process_entries_name_real_functions(entry: ProcessEntry) -> None:
    """The worker names the function its processes start in rather than importing it: the
    names must resolve (in the process that runs them)."""
    assert callable(getattr(importlib.import_module(entry.module), entry.function))
