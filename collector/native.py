"""The ingest path's modules compiled to C with mypyc, used only while they match their source.

The CPU-bound stage of ingest (``process_request``: records, redaction, normalization,
truncation) is plain Python; mypyc compiles the same modules, unchanged, into one C
extension library (ADR 52). ``scripts/build_native.py`` (run by ``make env``) writes the
compiled modules to ``NATIVE_DIR`` with a manifest of the source they were built from.
``install`` (called when the ``collector`` package is imported) puts a finder ahead of the
normal import system that serves a module of ``MODULES`` from that build when, and only
when, the build is whole, for this Python, and the source of every module it was built from
(``MODULES`` and the first-party modules they import, whose constants mypyc copies) is byte
for byte what is checked out now. Otherwise (no compiler, a source edited since the build,
another Python, ``AFR_NATIVE=0``) every module is imported from its source as before: the
same behaviour, slower. The group is taken all or none: compiled modules call each other
directly, so one stale module would otherwise mix two versions of the code.

Nothing here changes what a module does; ``tests/unit/collector/test_native.py`` checks
that the compiled and the source modules give the same result.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["MODULES", "NATIVE_DIR", "active", "digests", "install", "manifest_for", "status"]

# The modules compiled, as importable names. Kept to the ingest stage's hot path: the
# modules every span goes through in the ingest workers.
MODULES: tuple[str, ...] = (
    "collector.blocks",
    "collector.decode",
    "collector.model",
    "collector.processors.normalize",
    "collector.processors.prefilter",
    "collector.processors.redact",
    "collector.processors.rules",
    "collector.processors.signature",
    "collector.processors.tool_calls",
    "collector.processors.truncate",
    "collector.wire",
)
# The shared library the modules are compiled into (mypyc's group).
GROUP = "collector._native_group"
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # the directory holding collector/
NATIVE_DIR = Path(__file__).resolve().parent / "_native"
MANIFEST = "manifest.json"
# The build's own version (scripts/build_native.py: its options, its runtime fix): a build
# of an earlier one is not used. Raised with every change to how the modules are built.
BUILD = 3
_DISABLE = "AFR_NATIVE"

_status = "not installed"


def source_of(module: str, root: Path = _PACKAGE_ROOT) -> Path:
    """``module``'s source file: under ``root`` for ``collector``'s modules, else where its
    top-level package is installed (found, not imported)."""
    top, _, rest = module.partition(".")
    if top == "collector":
        base = root / "collector"
    else:
        spec = importlib.util.find_spec(top)
        locations = None if spec is None else spec.submodule_search_locations
        if not locations:
            raise FileNotFoundError(module)
        base = Path(next(iter(locations)))
    path = base.joinpath(*rest.split(".")) if rest else base
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def build_tag() -> str:
    """What a compiled module is only good for: this interpreter's ABI."""
    return f"{sys.implementation.cache_tag}{importlib.machinery.EXTENSION_SUFFIXES[0]}"


def digests(modules: Iterable[str], root: Path = _PACKAGE_ROOT) -> dict[str, str]:
    """Each module's source SHA-256. Raises OSError for a source that is not there."""
    return {
        module: hashlib.sha256(source_of(module, root).read_bytes()).hexdigest()
        for module in modules
    }


def manifest_for(read: Iterable[str], root: Path = _PACKAGE_ROOT) -> dict[str, object]:
    """The manifest of a build of ``MODULES`` that read the first-party modules ``read``
    (``MODULES`` and what they import: mypyc copies another module's constants and checks
    its types, so a change there makes the build stale too): the build's version, the
    interpreter it is for, and each source's digest."""
    return {
        "build": BUILD,
        "tag": build_tag(),
        "group": GROUP,
        "modules": list(MODULES),
        "sources": digests(sorted({*MODULES, *read}), root),
    }


def _extension(directory: Path, module: str) -> Path | None:
    parts = module.split(".")
    folder = directory.joinpath(*parts[:-1])
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = folder / f"{parts[-1]}{suffix}"
        if candidate.is_file():
            return candidate
    return None


def _usable(directory: Path, root: Path = _PACKAGE_ROOT) -> tuple[dict[str, Path] | None, str]:
    """The compiled file of each module (and of the group) when the build in ``directory``
    is whole and current; else None and why not."""
    try:
        recorded = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "not built (make env builds it; the modules run from source)"
    except (OSError, ValueError) as exc:
        return None, f"unreadable manifest ({type(exc).__name__})"
    if not isinstance(recorded, dict) or recorded.get("tag") != build_tag():
        return None, "built for another Python"
    if recorded.get("build") != BUILD or recorded.get("modules") != list(MODULES):
        return None, "built by an earlier build script (make env rebuilds it)"
    sources = recorded.get("sources")
    if not isinstance(sources, dict) or not set(MODULES) <= set(sources):
        return None, "unreadable manifest (no sources)"
    try:
        changed = digests(sources, root) != sources
    except OSError:
        changed = True  # a module it read is gone
    if changed:
        return None, "stale: a module's source changed since the build (make env rebuilds it)"
    files: dict[str, Path] = {}
    for module in (*MODULES, f"{GROUP}__mypyc"):
        found = _extension(directory, module)
        if found is None:
            return None, f"incomplete: {module} is missing"
        files[module] = found
    return files, "compiled"


class _NativeFinder:
    """Serves the compiled modules of one current build, nothing else (a meta path finder;
    not subclassing ``importlib.abc``, whose import costs ~10 ms at every start)."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        file = self.files.get(fullname)
        if file is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(file))
        spec = importlib.machinery.ModuleSpec(fullname, loader, origin=str(file))
        spec.has_location = True  # the module's __file__ is the compiled file
        return spec


def install(directory: Path = NATIVE_DIR) -> bool:
    """Put the finder in place when the build in ``directory`` is usable (before any of its
    modules is imported); True when the compiled modules will be used."""
    global _status
    if any(isinstance(finder, _NativeFinder) for finder in sys.meta_path):
        return True
    if os.environ.get(_DISABLE, "").strip().lower() in ("0", "false", "no", "off"):
        _status = f"off ({_DISABLE}=0)"
        return False
    if any(module in sys.modules for module in MODULES):
        _status = "not used: a module was imported from source first"
        return False
    files, _status = _usable(directory)
    if files is None:
        return False
    sys.meta_path.insert(0, _NativeFinder(files))
    return True


def active(module: str) -> bool:
    """Whether ``module`` (one of ``MODULES``, imported) runs compiled."""
    loaded = sys.modules.get(module)
    spec = None if loaded is None else loaded.__spec__
    return spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader)


def status() -> str:
    """Whether the compiled modules are in use, or why not (``afr up`` logs it at start)."""
    return _status
