"""The ingest path's compiled modules (ADR 52): used where built and current, the same result as
their source, and never used when they no longer match it.

Where a C compiler is, ``make env`` (and ``make test``) builds them, so the suite runs on the
compiled modules, as ``afr up`` does; these tests check that this is so, that every case of
a corpus (the bench's requests, every secret and look-alike in seven placements, hostile
text) comes out the same from source, and that a stale, partial or foreign build is
refused whole.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from collector import native

ROOT = Path(__file__).resolve().parents[3]


def _build_script() -> ModuleType:
    path = ROOT / "scripts" / "build_native.py"
    spec = importlib.util.spec_from_file_location("build_native", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_CANNOT_BUILD = _build_script().buildable() or (
    "AFR_NATIVE=0" if os.environ.get("AFR_NATIVE", "").strip() == "0" else None
)


def _run(code: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(cwd), **env}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


_WHICH = (
    "import json, collector.native as n, importlib\n"
    "files = {m: importlib.import_module(m).__file__ for m in n.MODULES}\n"
    "print(json.dumps({'status': n.status(), 'files': files}))\n"
)


def _which(cwd: Path = ROOT, **env: str) -> dict[str, object]:
    done = _run(_WHICH, cwd, **env)
    assert done.returncode == 0, done.stderr
    loaded: dict[str, object] = json.loads(done.stdout)
    return loaded


@pytest.mark.skipif(
    _CANNOT_BUILD is not None, reason=f"the modules run from source: {_CANNOT_BUILD}"
)
def test_the_ingest_modules_run_compiled_where_they_can_be_built() -> None:
    """``make test`` built them (a compiler, the Python headers and mypyc are here) and they
    are current: the suite, like ``afr up``, runs them. (Run plainly after an edit to one of
    them or to what they import, this fails until ``make native``.)"""
    assert native.status() == "compiled", native.status()
    for module in native.MODULES:
        __import__(module)
        assert native.active(module), module


@pytest.mark.skipif(native.status() != "compiled", reason="no current compiled build")
def test_compiled_and_source_modules_give_the_same_result() -> None:
    """Every case of the corpus (tests/native_equivalence.py) stored the same, with the same
    Redactions, compiled and from source."""
    code = "from tests.native_equivalence import main; main()"
    compiled, source = _run(code), _run(code, AFR_NATIVE="0")
    assert compiled.returncode == 0, compiled.stderr[-2000:]
    assert source.returncode == 0, source.stderr[-2000:]
    header_c, *lines_c = compiled.stdout.splitlines()
    header_s, *lines_s = source.stdout.splitlines()
    assert json.loads(header_c)["status"] == "compiled"
    assert json.loads(header_s)["status"].startswith("off")
    assert len(lines_c) == len(lines_s) > 2900
    differ = [c.split()[0] for c, s in zip(lines_c, lines_s, strict=True) if c != s]
    assert not differ, f"{len(differ)} cases differ, the first: {differ[:5]}"
    # The corpus holds what it should: secrets redacted, look-alikes kept.
    assert sum(1 for line in lines_c if line.endswith(" []")) > 500
    assert sum(1 for line in lines_c if ":" in line.split(" ", 2)[-1]) > 1500


def test_afr_native_0_runs_every_module_from_source() -> None:
    found = _which(AFR_NATIVE="0")
    assert found["status"] == "off (AFR_NATIVE=0)"
    files = found["files"]
    assert isinstance(files, dict)
    assert all(str(path).endswith(".py") for path in files.values())


def _link(source: str, target: str) -> None:
    """A hard link where the file system takes one, else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _copy_build(tmp_path: Path) -> Path:
    copy = tmp_path / "native"
    shutil.copytree(native.NATIVE_DIR, copy, copy_function=_link)
    return copy


@pytest.mark.skipif(native.status() != "compiled", reason="no current compiled build")
@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("stale", "stale: a module's source changed"),
        ("stale_import", "stale: a module's source changed"),
        ("other_modules", "built by an earlier build script"),
        ("missing_module", "incomplete: collector.processors.redact is missing"),
        ("missing_group", f"incomplete: {native.GROUP}__mypyc is missing"),
        ("other_python", "built for another Python"),
        ("earlier_build", "built by an earlier build script"),
        ("broken_manifest", "unreadable manifest (JSONDecodeError)"),
        ("no_manifest", "not built"),
    ],
)
def test_a_build_that_is_not_whole_and_current_is_not_used(
    tmp_path: Path, damage: str, reason: str
) -> None:
    """A build is used whole or not at all: a module compiled from other source, or against
    another version of a module it imports (mypyc copied its constants), a file missing,
    another interpreter's or an earlier build script's build, a manifest that does not
    read."""
    copy = _copy_build(tmp_path)
    manifest_path = copy / native.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    if damage == "stale":
        manifest["sources"]["collector.processors.truncate"] = "0" * 64
    elif damage == "stale_import":
        manifest["sources"]["afr_exporter.semconv"] = "0" * 64
    elif damage == "other_modules":
        manifest["modules"] = manifest["modules"][1:]
    elif damage == "other_python":
        manifest["tag"] = "cpython-312.cpython-312-x86_64-linux-gnu.so"
    elif damage == "earlier_build":
        manifest["build"] = native.BUILD - 1
    elif damage == "missing_module":
        next(copy.glob("collector/processors/redact.*")).unlink()
    elif damage == "missing_group":
        next(copy.glob("collector/_native_group__mypyc.*")).unlink()
    manifest_path.unlink()  # a hard link to the build's own: written anew, not through it
    manifest_path.write_text(json.dumps(manifest))
    if damage == "broken_manifest":
        manifest_path.write_text('{"build": ')
    elif damage == "no_manifest":
        manifest_path.unlink()
    files, why = native._usable(copy)
    assert files is None and why.startswith(reason), why
    assert native._usable(_copy_build(tmp_path / "again"))[0] is not None  # the copy works


@pytest.mark.skipif(native.status() != "compiled", reason="no current compiled build")
@pytest.mark.parametrize("edited", ["processors/truncate.py", "model.py"])
def test_a_source_edited_after_the_build_runs_from_source(tmp_path: Path, edited: str) -> None:
    """An engineer edits a compiled module, or a module one imports (mypyc copied its
    constants into the build), and runs it: the edit is what runs (every module from
    source, the build being stale), not the compiled code of before."""
    tree = tmp_path / "tree"
    shutil.copytree(
        ROOT / "collector",
        tree / "collector",
        ignore=shutil.ignore_patterns("__pycache__"),
        copy_function=_link,
    )
    assert _which(tree)["status"] == "compiled"
    path = tree / "collector" / edited
    text = path.read_text()
    path.unlink()  # a hard link to the checkout's file: written anew, not through it
    path.write_text(text + "\nEDITED = True\n")
    after = _which(tree)
    assert str(after["status"]).startswith("stale"), after["status"]
    files = after["files"]
    assert isinstance(files, dict)
    assert all(str(file).endswith(".py") for file in files.values())
    truncate = tree / "collector" / "processors" / "truncate.py"
    assert files["collector.processors.truncate"] == str(truncate)


_GENERATE = (
    "import importlib.util, json\n"
    "spec = importlib.util.spec_from_file_location('b', {script!r})\n"
    "build = importlib.util.module_from_spec(spec); spec.loader.exec_module(build)\n"
    "print(json.dumps(build.generate(['lazy.py'], build.Path('c'), 'lazy_group')[1]))\n"
)


@pytest.mark.skipif(importlib.util.find_spec("mypyc") is None, reason="mypyc is not installed")
def test_code_mypyc_would_compile_with_another_meaning_is_refused(tmp_path: Path) -> None:
    """A generator expression mypyc cannot compile lazily (it evaluates it whole, as a list:
    a lazy search over dense text became quadratic) is a warning, and a warning refuses
    the build; the same code written as a generator function gives none. (mypyc runs in a
    process of its own: mypy's build changes the garbage collector's settings.)"""
    lazy = tmp_path / "lazy.py"

    def warnings() -> list[str]:
        done = _run(_GENERATE.format(script=str(ROOT / "scripts" / "build_native.py")), tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        found: list[str] = json.loads(done.stdout.splitlines()[-1])
        return found

    signature = "def pairs(items: list[int]) -> Iterator[tuple[int, int]]:\n"
    head = "from collections.abc import Iterator\n" + signature
    lazy.write_text(head + "    return ((item, item) for item in items)\n")
    assert warnings() == ["lazy.py:3: Treating generator comprehension as list"]
    lazy.write_text(head + "    for item in items:\n        yield item, item\n")
    assert warnings() == []
