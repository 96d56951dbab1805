"""A compiled module (``collector.native``, ADR 52) run from its source, for the tests that
replace one of its internals to count or bound the work it does.

A compiled module calls its own functions and reads its own constants directly, past any
``monkeypatch`` of the module's attributes, and its classes' instances take no attribute of
their own: a patch there would change nothing and the test could not fail. These tests
get the module as its source runs: the same code, which the compiled one is built from and
checked against (``tests/unit/collector/test_native.py``). Without a compiled build in use
the module is the imported one itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

from collector import native

_loaded: dict[str, ModuleType] = {}


def source_module(name: str) -> ModuleType:
    """``name`` (one of ``collector.native.MODULES``) executed from its ``.py`` file, once
    per test session, under a name of its own (``<name>__source``)."""
    module = importlib.import_module(name)
    if not native.active(name):
        return module
    loaded = _loaded.get(name)
    if loaded is None:
        alias = f"{name}__source"
        spec = importlib.util.spec_from_file_location(alias, native.source_of(name))
        assert spec is not None and spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[alias] = loaded  # dataclasses look their module up while it runs
        spec.loader.exec_module(loaded)
        _loaded[name] = loaded
    return loaded
