"""Compiles the ingest path's modules (``collector.native.MODULES``) with mypyc (ADR 52).

Run by ``make env`` (and ``make native``) after the project is installed; the Dockerfile runs
it in its build stage. It writes the compiled modules and a manifest of the sources they
were built from to ``collector/_native/``, which ``collector.native`` reads at import. A
build that fails (no C compiler, no Python headers) leaves no build behind and exits 0 with
a note: the modules then run from source, as they always can. It does nothing when the build
in place is current.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collector import native  # noqa: E402  (the checkout's, whatever is installed)


def current(directory: Path) -> bool:
    files, _ = native._usable(directory, ROOT)
    return files is not None


# mypyc's runtime slices bytes as Python does except when the start comes after the end
# (``data[i - 1 : i]`` at i = 0 is ``data[-1:0]``): Python gives b"", the runtime asks for
# a negative size and raises SystemError. The build compiles a copy of the runtime with
# that length clamped at 0, as CPython clamps it; a runtime without the line is not built
# against (the modules then run from source).
_RUNTIME_SLICE = "        Py_ssize_t slice_len = endn - startn;\n"
_RUNTIME_SLICE_FIXED = (
    _RUNTIME_SLICE + "        if (slice_len < 0) {\n            slice_len = 0;\n        }\n"
)


def _patched_runtime(into: Path) -> Path | str:
    """A copy of mypyc's C runtime with the bytes slice fixed; why not when it cannot be."""

    import mypyc

    runtime = Path(mypyc.__file__).resolve().parent / "lib-rt"
    copy = into / "lib-rt"
    shutil.copytree(runtime, copy)
    bytes_ops = copy / "bytes_ops.c"
    text = bytes_ops.read_text(encoding="utf-8")
    if text.count(_RUNTIME_SLICE) != 1:
        return "mypyc's runtime changed: its bytes slice could not be checked (see build_native)"
    bytes_ops.write_text(text.replace(_RUNTIME_SLICE, _RUNTIME_SLICE_FIXED), encoding="utf-8")
    return copy


# mypyc's warnings name code it compiles with another meaning than Python's: a generator
# expression it cannot compile as one is evaluated whole, as a list ("Treating generator
# comprehension as list"), and a lazy search over dense text became quadratic (ADR 52). A
# build with any warning is refused: the code is written so that it compiles as it reads.
_WARNING = re.compile(r"^(.*?): warning: (.*)$", re.MULTILINE)

_FIRST_PARTY = ("collector", "afr_common", "afr_exporter")


def first_party_reads(modules: Sequence[str], root: Path = ROOT) -> set[str]:
    """``modules`` and every first-party module they import, at any depth, with their
    packages: what mypyc reads to compile them (it copies their ``Final`` constants and
    checks their types), so what the manifest's digests must cover. Not ``collector.native``
    (the package's ``__init__`` imports it to load the build; nothing compiled reads it)."""
    found: set[str] = {"collector.native"}
    pending = list(modules)
    while pending:
        module = pending.pop()
        if module in found:
            continue
        try:
            source = native.source_of(module, root)
            tree = ast.parse(source.read_bytes())
        except (OSError, SyntaxError):
            continue  # a name imported from a module, not a module
        found.add(module)
        parts = module.split(".")
        pending.extend(".".join(parts[:n]) for n in range(1, len(parts)))
        package = module if source.name == "__init__.py" else ".".join(parts[:-1])
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            pending.extend(n for n in names if n.split(".")[0] in _FIRST_PARTY)
    return found - {"collector.native"}


def buildable() -> str | None:
    """Why no build can be made here (no C compiler, no Python headers, no mypyc); None when
    one can. Checked first: mypyc's own work takes a minute before the compiler is needed."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler})"
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not headers.is_file():
        return f"no Python headers ({headers}; Debian: python3-dev)"
    if importlib.util.find_spec("mypyc") is None:
        return "mypyc is not installed (it comes with mypy, a dev dependency)"
    return None


def generate(sources: list[str], target: Path, group: str) -> tuple[list[Any], list[str]]:
    """mypyc's C for ``sources`` (paths relative to the current directory) in ``target``:
    the extensions to build, and mypyc's warnings (``path:line: what``)."""
    from mypyc.build import mypycify

    said = io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        extensions = mypycify(sources, opt_level="3", group_name=group, target_dir=str(target))
    warnings = [f"{where}: {what}" for where, what in _WARNING.findall(said.getvalue())]
    return extensions, warnings


def build(directory: Path) -> str | None:
    """Compile into ``directory`` (replaced whole); None on success, else why not."""
    try:
        from setuptools import Distribution  # type: ignore[import-untyped]
    except ImportError as exc:
        return f"setuptools missing ({exc.name})"
    sources = [str(native.source_of(module, ROOT).relative_to(ROOT)) for module in native.MODULES]
    # The sources' digests before they are read: one edited during the build makes it stale.
    manifest = native.manifest_for(first_party_reads(native.MODULES), ROOT)
    with tempfile.TemporaryDirectory(prefix="afr-native-") as scratch, contextlib.chdir(ROOT):
        work = Path(scratch)
        staged = work / "out"
        try:
            extensions, warnings = generate(sources, work / "c", native.GROUP)
            if warnings:
                return "mypyc warns: " + "; ".join(warnings)
            runtime = _patched_runtime(work)
            if isinstance(runtime, str):
                return runtime
            for extension in extensions:
                extension.include_dirs.insert(0, str(runtime))
            distribution = Distribution({"name": "afr-native", "ext_modules": extensions})
            command = distribution.get_command_obj("build_ext")
            command.build_lib = str(staged)
            command.build_temp = str(work / "temp")
            command.inplace = False
            distribution.run_command("build_ext")
        except (Exception, SystemExit) as exc:  # mypyc's or a compiler's failure exits
            return f"{type(exc).__name__}: {str(exc)[:300]}"
        (staged / native.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        if not current(staged):
            return "the build is incomplete (a compiled module is missing)"
        _swap_in(staged, directory)
    return None


def _swap_in(staged: Path, directory: Path) -> None:
    """``staged`` becomes ``directory`` by renames: a process starting meanwhile sees the
    old build whole, or none, or the new one whole, never a manifest before its files."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    incoming = Path(tempfile.mkdtemp(prefix=".native-new-", dir=directory.parent))
    outgoing = directory.parent / f".native-old-{os.getpid()}"
    shutil.copytree(staged, incoming, dirs_exist_ok=True)
    if directory.exists():
        os.rename(directory, outgoing)
    os.rename(incoming, directory)
    shutil.rmtree(outgoing, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=native.NATIVE_DIR)
    args = parser.parse_args(argv)
    if current(args.dir):
        print(f"afr native build: current ({args.dir})")
        return 0
    cannot = buildable()
    if cannot is not None:
        print(f"afr native build: not built, the modules run from source: {cannot}")
        return 0
    print("afr native build: compiling the ingest modules with mypyc (~2-3 min)...", flush=True)
    failed = build(args.dir)
    if failed is not None:
        shutil.rmtree(args.dir, ignore_errors=True)
        print(f"afr native build: not built, the modules run from source: {failed}")
        return 0
    print(f"afr native build: done ({args.dir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
