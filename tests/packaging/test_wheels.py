"""Both distributions build as wheels, each holding what it should and nothing else, and
the server runs from its wheel with the checkout out of reach."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.packaging.wheels import (
    EXPORTER_PACKAGE,
    REPO,
    SERVER_PACKAGES,
    Wheels,
    package_files,
    requirement_closure,
    unconditional,
    undeclared_imports,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# What an agent app may be asked to install by afr-exporter: the SDK and OTel, nothing of
# the server.
EXPORTER_ALLOWED = frozenset(
    {
        "openai-agents",
        "opentelemetry-api",
        "opentelemetry-sdk",
        "opentelemetry-exporter-otlp-proto-grpc",
        "opentelemetry-exporter-otlp-proto-http",
        "pydantic-settings",
    }
)
SERVER_ONLY = frozenset(
    {
        "afr-server",
        "chdb",
        "pyarrow",
        "clickhouse-connect",
        "starlette",
        "uvicorn",
        "grpcio",
        "google-re2",
        "hyperscan",
        "orjson",
        "jsonschema",
        "cronsim",
        "httpx",
    }
)


def _dist_info_free(names: list[str]) -> set[str]:
    return {n for n in names if ".dist-info/" not in n}


def test_exporter_wheel_holds_only_afr_exporter(wheels: Wheels) -> None:
    assert wheels.exporter.top_level() == {EXPORTER_PACKAGE}
    shipped = _dist_info_free(wheels.exporter.names())
    assert shipped == package_files(wheels.source / "exporter" / "src", [EXPORTER_PACKAGE])
    assert f"{EXPORTER_PACKAGE}/py.typed" in shipped


def test_exporter_wheel_requires_only_the_sdk_and_otel(wheels: Wheels) -> None:
    requirements = wheels.exporter.requirements()
    assert unconditional(requirements) <= EXPORTER_ALLOWED
    named = {Requirement(r).name for r in requirements}
    assert not {n for n in named if n in SERVER_ONLY}, "server dependencies, even as extras"


def test_server_wheel_holds_exactly_the_four_server_packages(wheels: Wheels) -> None:
    assert wheels.server.top_level() == SERVER_PACKAGES
    # Every file of the four packages ships, data files included: a sub-package without an
    # __init__.py, or a data file left out of package-data, would be missing here.
    assert _dist_info_free(wheels.server.names()) == package_files(wheels.source, SERVER_PACKAGES)


def test_server_wheel_requires_this_exporter_and_installs_the_cli(wheels: Wheels) -> None:
    version = wheels.exporter.metadata()["Version"]
    assert f"afr-exporter=={version}" in wheels.server.requirements()
    assert "afr = afr.cli:main" in wheels.server.entry_points()


def test_every_import_comes_from_a_declared_dependency(wheels: Wheels) -> None:
    """A module-level import only the dev extra (or nothing) satisfies fails right after
    `pip install`; a lazy one must at least come with some extra."""
    exporter = wheels.exporter.requirements()
    closure = requirement_closure(exporter)
    assert undeclared_imports(wheels.exporter.sources(), [EXPORTER_PACKAGE], closure, closure) == []

    server = wheels.server.requirements()
    known = {"afr-exporter": exporter}
    always = requirement_closure(server, known)
    with_extras = requirement_closure(server, known, extras=wheels.server.extras())
    own = [*SERVER_PACKAGES, EXPORTER_PACKAGE]
    assert undeclared_imports(wheels.server.sources(), own, always, with_extras) == []


# Runs `afr demo` (collector, embedded store, bridge, replay worker and its child processes,
# evals, a sweep) from the unpacked wheels. The checkout's editable installs are taken out of
# reach first; spawned children run this file again as __mp_main__ and do the same.
_SERVER_PROBE = """\
import json
import sys

REPO = {repo!r}
sys.meta_path[:] = [
    f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")
]
sys.path[:] = [
    p for p in sys.path
    if not (p == REPO or p.startswith(REPO + "/") and not p.startswith(sys.prefix))
]

if __name__ == "__main__":
    from afr.cli import main

    code = main(["demo", "--data-dir", sys.argv[1]])
    owned = ("afr", "afr_common", "collector", "replay_worker", "afr_exporter")
    origins = {{
        name: getattr(module, "__file__", None)
        for name, module in list(sys.modules.items())
        if name.split(".")[0] in owned
    }}
    print("ORIGINS " + json.dumps(origins))
    sys.exit(code)
"""


def test_server_runs_from_its_wheel_away_from_the_checkout(wheels: Wheels, tmp_path: Path) -> None:
    site = tmp_path / "site"
    wheels.server.unpack_into(site)
    wheels.exporter.unpack_into(site)
    probe = tmp_path / "probe.py"
    probe.write_text(_SERVER_PROBE.format(repo=str(REPO)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AFR_", "OTEL_", "PYTHON"))}
    env["PYTHONPATH"] = str(site)
    done = subprocess.run(
        [sys.executable, str(probe), str(tmp_path / "demo")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    out = done.stdout
    assert "13 spans, dropped 0" in out
    assert "verdict FAILURE_FIXED" in out
    assert "exit codes: fixing model 0, original behaviour 1" in out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("ORIGINS ")]
    origins: dict[str, str | None] = json.loads(line.removeprefix("ORIGINS "))
    assert {"collector.server", "replay_worker.replay.engine", "afr_exporter.processor"} <= set(
        origins
    )
    outside = {n: f for n, f in origins.items() if f is not None and not f.startswith(str(site))}
    assert outside == {}
