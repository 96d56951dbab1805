"""Builds afr's two wheels from the checkout and reads what they hold.

The build runs on a copy of the checkout: setuptools keeps a ``build/`` directory next to
the sources and reuses it, so a module deleted from the tree would still ship from a stale
``build/lib``, and two builds at once would share it. The copy leaves out what is not a
source (dot-directories such as ``.git`` and ``.venv``, build output, caches). No build
isolation: the backend is this environment's setuptools (the dev extra), so no network.
"""

from __future__ import annotations

import ast
import email.message
import email.parser
import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
EXPORTER_PROJECT = REPO / "exporter"
SERVER_PACKAGES = frozenset({"afr", "afr_common", "collector", "replay_worker"})
EXPORTER_PACKAGE = "afr_exporter"
BUILD_TIMEOUT_S = 300

_NOT_SOURCES = shutil.ignore_patterns(
    ".*", "build", "dist", "*.egg-info", "__pycache__", "*.pyc", "node_modules"
)


@dataclass(frozen=True)
class Wheel:
    path: Path

    def names(self) -> list[str]:
        with zipfile.ZipFile(self.path) as archive:
            return archive.namelist()

    def top_level(self) -> set[str]:
        """First path components, the ``.dist-info`` directory left out."""
        return {
            PurePosixPath(name).parts[0]
            for name in self.names()
            if not PurePosixPath(name).parts[0].endswith(".dist-info")
        }

    def _dist_info_file(self, name: str) -> str:
        with zipfile.ZipFile(self.path) as archive:
            (member,) = [m for m in archive.namelist() if m.endswith(f".dist-info/{name}")]
            return archive.read(member).decode()

    def metadata(self) -> email.message.Message:
        return email.parser.Parser().parsestr(self._dist_info_file("METADATA"))

    def requirements(self) -> list[str]:
        """Requires-Dist lines, extras' included (their markers say so)."""
        return self.metadata().get_all("Requires-Dist") or []

    def extras(self) -> list[str]:
        return self.metadata().get_all("Provides-Extra") or []

    def entry_points(self) -> str:
        return self._dist_info_file("entry_points.txt")

    def sources(self) -> dict[str, str]:
        """Every ``.py`` file in the wheel by its path inside the wheel."""
        with zipfile.ZipFile(self.path) as archive:
            return {
                name: archive.read(name).decode()
                for name in archive.namelist()
                if name.endswith(".py")
            }

    def unpack_into(self, directory: Path) -> None:
        with zipfile.ZipFile(self.path) as archive:
            archive.extractall(directory)


@dataclass(frozen=True)
class Wheels:
    exporter: Wheel
    server: Wheel
    source: Path
    """The copy of the checkout they were built from."""


def build_wheels(workdir: Path) -> Wheels:
    """``afr-exporter`` and ``afr-server`` wheels built from a copy of the checkout."""
    source = workdir / "checkout"
    shutil.copytree(REPO, source, ignore=_NOT_SOURCES)
    out = workdir / "wheels"
    for project in (source / "exporter", source):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "--quiet",
                "--wheel-dir",
                str(out),
                str(project),
            ],
            check=True,
            timeout=BUILD_TIMEOUT_S,
        )
    (exporter,) = out.glob("afr_exporter-*.whl")
    (server,) = out.glob("afr_server-*.whl")
    return Wheels(exporter=Wheel(exporter), server=Wheel(server), source=source)


def package_files(root: Path, packages: Iterable[str]) -> set[str]:
    """Every file of ``packages`` under ``root`` as a wheel names it (caches left out, and
    the local build of the compiled modules, ``collector/_native``: the image builds its own,
    ADR 52)."""
    found: set[str] = set()
    for package in packages:
        for path in (root / package).rglob("*"):
            parts = path.relative_to(root).parts
            built = any(part == "_native" or part.startswith(".native-") for part in parts)
            if (
                path.is_file()
                and "__pycache__" not in parts
                and path.suffix != ".pyc"
                and not built
            ):
                found.add(path.relative_to(root).as_posix())
    return found


def unconditional(requirements: Iterable[str]) -> set[str]:
    """Canonical names of the requirements every install gets (no extra asked for)."""
    names: set[str] = set()
    for text in requirements:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            names.add(canonicalize_name(requirement.name))
    return names


def requirement_closure(
    requirements: Iterable[str],
    known: Mapping[str, list[str]] | None = None,
    extras: Iterable[str] = (),
) -> set[str]:
    """Canonical names of every distribution ``requirements`` bring in, transitively, for
    this interpreter (markers evaluated, extras followed), with ``extras`` of the top level
    asked for. A distribution's own requirements come from ``known`` (a freshly built
    wheel) or else from its installed metadata here; one not installed here ends there."""
    known = {canonicalize_name(k): v for k, v in (known or {}).items()}
    found: set[str] = set()
    seen: set[tuple[str, str]] = set()
    pending: list[tuple[Requirement, str]] = [
        (Requirement(t), extra) for t in requirements for extra in ("", *extras)
    ]
    while pending:
        requirement, extra = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        found.add(name)
        for wanted in ("", *sorted(requirement.extras)):
            if (name, wanted) in seen:
                continue
            seen.add((name, wanted))
            own = known.get(name)
            if own is None:
                try:
                    own = importlib.metadata.requires(name) or []
                except importlib.metadata.PackageNotFoundError:
                    own = []
            pending.extend((Requirement(t), wanted) for t in own)
    return found


@dataclass(frozen=True)
class Import:
    module: str
    """The top-level module."""
    path: str
    eager: bool
    """At module level, so importing the file needs it; else inside a function (lazy)."""

    def __str__(self) -> str:
        return f"{self.module} ({'module-level' if self.eager else 'lazy'}, in {self.path})"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def third_party_imports(sources: Mapping[str, str], own: Iterable[str]) -> list[Import]:
    """The third-party modules the sources import when they run (absolute imports; the
    standard library, ``own`` packages and ``if TYPE_CHECKING:`` blocks left out)."""
    skip = set(sys.stdlib_module_names) | set(own) | {"__future__"}
    found: list[Import] = []

    def visit(node: ast.AST, path: str, eager: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for statement in child.orelse:
                    visit(statement, path, eager)
                continue
            if isinstance(child, ast.Import):
                modules = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                modules = [child.module]
            else:
                inner = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                visit(child, path, eager and not inner)
                continue
            found.extend(
                Import(m.split(".")[0], path, eager) for m in modules if m.split(".")[0] not in skip
            )

    for path, text in sources.items():
        visit(ast.parse(text, filename=path), path, eager=True)
    return found


def undeclared_imports(
    sources: Mapping[str, str], own: Iterable[str], always: set[str], with_extras: set[str]
) -> list[str]:
    """Imports an install of the wheel would not satisfy: a module-level import from a
    distribution outside ``always`` (what a plain install brings), a lazy one from outside
    ``with_extras`` (what some extra brings). A module no installed distribution here
    provides counts too."""
    providers = importlib.metadata.packages_distributions()

    def provided(module: str, distributions: set[str]) -> bool:
        return bool({canonicalize_name(d) for d in providers.get(module, [])} & distributions)

    return sorted(
        {
            str(found)
            for found in third_party_imports(sources, own)
            if not provided(found.module, always if found.eager else with_extras)
        }
    )
