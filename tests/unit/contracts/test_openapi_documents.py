"""The checked-in OpenAPI documents are what the models generate, and what the services serve
is what their models and error mappings say.

A model, an error kind or a route changed without ``afr openapi --write`` fails here, with
the command to run.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from afr.openapi_cli import DOCUMENTS, REGENERATE, main, rendered, stale
from collector.api import openapi as read_api
from collector.api.status import STATUS_BY_ERROR as READ_API_STATUSES
from replay_worker import openapi as worker_api
from replay_worker.hooks.status import STATUS_BY_ERROR as WORKER_STATUSES

ROOT = Path(__file__).resolve().parents[3]
CHECKED_IN = ROOT / "docs" / "openapi"


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_the_checked_in_document_is_what_the_models_generate(name: str) -> None:
    path = CHECKED_IN / name
    assert path.is_file(), f"{path} is missing: generate it with {REGENERATE}"
    assert path.read_text() == rendered()[name], (
        f"{path.relative_to(ROOT)} differs from what the models generate: "
        f"regenerate it with {REGENERATE} and commit it"
    )


def test_check_finds_a_drifted_document_and_write_repairs_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--write", "--dir", str(tmp_path)]) == 0
    assert stale(tmp_path) == []
    drifted = json.loads((tmp_path / "worker.json").read_text())
    drifted["paths"]["/jobs/{job_id}"]["get"]["responses"].pop("404")
    (tmp_path / "worker.json").write_text(json.dumps(drifted))
    assert main(["--check", "--dir", str(tmp_path)]) == 1
    assert f"worker.json is stale: regenerate with {REGENERATE}" in capsys.readouterr().err
    assert main(["--write", "--dir", str(tmp_path)]) == 0
    assert main(["--check", "--dir", str(tmp_path)]) == 0


def _error_statuses(document: dict[str, object], path: str, method: str) -> set[int]:
    operation = document["paths"][path][method]  # type: ignore[index]
    return {int(code) for code in operation["responses"] if int(code) >= 400}


@pytest.mark.parametrize("path", sorted(read_api.OPERATIONS))
def test_read_api_error_responses_come_from_its_status_mapping(path: str) -> None:
    operation = read_api.OPERATIONS[path]
    expected = {int(READ_API_STATUSES[kind]) for kind in operation.errors}
    assert _error_statuses(read_api.OPENAPI, path, "get") == expected


@pytest.mark.parametrize("path", sorted(worker_api.OPERATIONS))
def test_worker_error_responses_come_from_its_status_mapping(path: str) -> None:
    operation = worker_api.OPERATIONS[path]
    expected = {int(WORKER_STATUSES[kind]) for kind in operation.errors}
    assert _error_statuses(worker_api.OPENAPI, path, operation.method) == expected


def _status_literals(path: Path) -> list[str]:
    """Integer literals given as a status: a ``status``/``status_code`` keyword or parameter
    default, or a response's positional status."""
    found = []
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        candidates: list[ast.expr] = []
        if isinstance(node, ast.Call):
            candidates += [k.value for k in node.keywords if k.arg in ("status", "status_code")]
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if name in ("_answer", "JSONResponse", "Response") and len(node.args) > 1:
                candidates.append(node.args[1])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args.args[len(node.args.args) - len(node.args.defaults) :]
            candidates += [
                default
                for argument, default in zip(arguments, node.args.defaults, strict=True)
                if argument.arg in ("status", "status_code")
            ]
        found += [
            f"{path.relative_to(ROOT)}:{c.lineno}"
            for c in candidates
            if isinstance(c, ast.Constant) and isinstance(c.value, int)
        ]
    return found


def test_no_handler_spells_a_status_number() -> None:
    """Statuses come from the mappings (or ``HTTPStatus``), never a number in a handler."""
    handlers = [
        *sorted((ROOT / "collector" / "api").glob("*.py")),
        ROOT / "replay_worker" / "app.py",
        *sorted((ROOT / "replay_worker" / "hooks").glob("*.py")),
    ]
    found = [where for path in handlers for where in _status_literals(path)]
    assert found == [], "a literal status: raise an error kind of the surface's mapping"
