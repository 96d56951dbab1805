"""The ``afr.*`` names are defined once, in ``afr_exporter.semconv``, and imported: a name
retyped as a string in the collector, the worker or the CLI fails here.

The scan reads every string literal of ``collector/``, ``replay_worker/`` and ``afr/`` (not
docstrings, not logger names) and finds ``afr.*`` names in it: the literal itself, or one
quoted inside it (SQL, JSON). What is left is listed in ``ALLOWED`` with the reason.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import afr_exporter.semconv as semconv

ROOT = Path(__file__).resolve().parents[3]
SCANNED = ("collector", "replay_worker", "afr")
_NAME = r"afr(?:\.[a-z0-9_]+)+"
WHOLE = re.compile(rf"^{_NAME}$")
QUOTED = re.compile(rf"""['"]({_NAME})['"]""")

_STORE_SQL = "the store's SQL, owned by collector/store/ (to be built from semconv)"
_JUNIT = "a JUnit report's suite and property names, not span attributes"
ALLOWED: dict[tuple[str, str], str] = {
    ("collector/store/schema.py", semconv.AFR_TRACE_METADATA): _STORE_SQL,
    ("collector/store/schema.py", semconv.METADATA_EVAL_STATUS): _STORE_SQL,
    ("collector/store/schema.py", semconv.METADATA_EVAL_NAME): _STORE_SQL,
    ("collector/store/schema.py", semconv.METADATA_VERDICT): _STORE_SQL,
    ("collector/store/schema.py", semconv.METADATA_SWEEP_ID): _STORE_SQL,
    ("replay_worker/evals/junit.py", "afr.eval"): _JUNIT,
    ("replay_worker/evals/junit.py", "afr.eval.run_id"): _JUNIT,
    ("replay_worker/evals/junit.py", "afr.eval.verdict"): _JUNIT,
    ("replay_worker/evals/junit.py", "afr.eval.cost_usd"): _JUNIT,
}
"""(file, name) -> why the name is spelled there."""


def _is_logger_name(node: ast.Constant, parents: dict[ast.AST, ast.AST]) -> bool:
    call = parents.get(node)
    return (
        isinstance(call, ast.Call)
        and bool(call.args)
        and call.args[0] is node
        and getattr(call.func, "attr", getattr(call.func, "id", "")) == "getLogger"
    )


def _docstrings(tree: ast.Module) -> set[ast.AST]:
    found: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
        else:
            continue
        # A module's, class's or function's docstring, and the string documenting a constant.
        for statement in body:
            if (
                isinstance(statement, ast.Expr)
                and isinstance(statement.value, ast.Constant)
                and isinstance(statement.value.value, str)
            ):
                found.add(statement.value)
    return found


def spelled_names(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` of every ``afr.*`` name a literal of ``source`` spells."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    skipped = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if node in skipped or _is_logger_name(node, parents):
            continue
        names = [node.value] if WHOLE.match(node.value) else QUOTED.findall(node.value)
        found += [(node.lineno, name) for name in names]
    return found


def _sources() -> list[Path]:
    return sorted(path for root in SCANNED for path in (ROOT / root).rglob("*.py"))


def test_no_afr_name_is_retyped() -> None:
    retyped = [
        f"{path.relative_to(ROOT)}:{line}: {name!r}"
        for path in _sources()
        for line, name in spelled_names(path.read_text())
        if (path.relative_to(ROOT).as_posix(), name) not in ALLOWED
    ]
    assert retyped == [], (
        "afr.* names spelled as strings; import them from afr_exporter.semconv (add a "
        "constant there when the name is new): " + "; ".join(retyped)
    )


def test_every_allowed_spelling_is_still_there() -> None:
    """An allowance is removed with the literal it allowed, so the list stays the truth."""
    spelled = {
        (path.relative_to(ROOT).as_posix(), name)
        for path in _sources()
        for _, name in spelled_names(path.read_text())
    }
    assert set(ALLOWED) - spelled == set()


def test_the_scan_finds_a_retyped_name_and_skips_what_is_not_one() -> None:
    source = '''"""Module docstring naming afr.span.type."""
import logging
logger = logging.getLogger("afr.collector.http")
KIND = "afr.run.kind"
SQL = "SELECT SpanAttributes['afr.trace.metadata'] FROM spans"
VERSION = "afr.eval/v1"
"""The constant's docstring, with 'afr.verdict'."""
def f(attrs):
    """Reads "afr.source_run_id"."""
    return attrs.get("afr.handoff.from_agent")
'''
    assert spelled_names(source) == [
        (4, "afr.run.kind"),
        (5, "afr.trace.metadata"),
        (10, "afr.handoff.from_agent"),
    ]
