"""constraints.txt is current: every dependency the two pyproject.toml files declare (with the
extras `make env` installs) has a pin there, within its declared range; and `make env` and
the Dockerfile install from it. When this fails after a change to a dependency: `make lock`.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.deploy.test_compose import _dockerfile

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"
PYPROJECTS = (ROOT / "pyproject.toml", ROOT / "exporter" / "pyproject.toml")
EXTRAS = ("dev", "embedded")  # what the Makefile installs, and scripts/lock.py resolves
_ENVIRONMENT_LINE = "# environment: "


def _lines() -> list[str]:
    return CONSTRAINTS.read_text().splitlines()


def _pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in _lines():
        if not line or line.startswith("#"):
            continue
        name, separator, version = line.partition("==")
        assert separator and canonicalize_name(name) == name, f"not a name==version pin: {line}"
        assert name not in pins, f"pinned twice: {name}"
        pins[name] = Version(version)
    return pins


def _lock_environment() -> dict[str, str]:
    """The markers' values where the lock was resolved (its header), so a marker decides
    the same here as there, on whatever machine this test runs (``evaluate`` takes the
    rest from this one)."""
    (line,) = [line for line in _lines() if line.startswith(_ENVIRONMENT_LINE)]
    recorded: dict[str, str] = json.loads(line.removeprefix(_ENVIRONMENT_LINE))
    return {**recorded, "extra": ""}


def _declared() -> Iterator[tuple[str, Requirement]]:
    for pyproject in PYPROJECTS:
        project = tomllib.loads(pyproject.read_text())["project"]
        for text in project["dependencies"]:
            yield project["name"], Requirement(text)
        for extra in EXTRAS:
            for text in project.get("optional-dependencies", {}).get(extra, []):
                yield f"{project['name']}[{extra}]", Requirement(text)


def _ours() -> set[str]:
    return {canonicalize_name(tomllib.loads(p.read_text())["project"]["name"]) for p in PYPROJECTS}


def test_every_declared_dependency_is_pinned_within_its_range() -> None:
    pins = _pins()
    environment = _lock_environment()
    missing: list[str] = []
    outside: list[str] = []
    checked = 0
    for where, requirement in _declared():
        name = canonicalize_name(requirement.name)
        if name in _ours():
            continue  # installed from the checkout, never from an index
        if requirement.marker and not requirement.marker.evaluate(environment):
            continue  # another platform's (hyperscan where it has no wheel)
        checked += 1
        pin = pins.get(name)
        if pin is None:
            missing.append(f"{where}: {requirement}")
        elif not requirement.specifier.contains(pin, prereleases=True):
            outside.append(f"{where}: {requirement}, pinned {name}=={pin}")
    assert checked > 20, "the declared dependencies were read"
    assert not missing and not outside, "run `make lock`; " + "; ".join(
        [*(f"no pin for {m}" for m in missing), *(f"outside the range: {o}" for o in outside)]
    )


def test_the_lock_pins_neither_distribution_of_this_checkout() -> None:
    assert not _ours() & set(_pins()), "afr-server and afr-exporter come from the checkout"


def test_make_env_installs_with_the_constraints_and_reinstalls_when_they_change() -> None:
    makefile = (ROOT / "Makefile").read_text()
    (stamp,) = re.findall(r"^\$\(STAMP\):(.*)$", makefile, flags=re.MULTILINE)
    assert "constraints.txt" in stamp.split(), "a new lock re-runs the install"
    recipe = makefile.split("$(STAMP):", 1)[1].split("\n\n", 1)[0]
    installs = [line for line in recipe.splitlines() if "pip install" in line and " -e " in line]
    assert len(installs) == 2, recipe
    assert all("-c constraints.txt" in line for line in installs), installs
    assert re.search(r"^lock:", makefile, flags=re.MULTILINE), "`make lock` writes it"


def test_the_image_builds_its_wheels_within_the_constraints() -> None:
    instructions = _dockerfile()
    copies = " ".join(i.arguments for i in instructions if i.keyword == "COPY")
    assert "constraints.txt" in copies.split()
    (build,) = [i.arguments for i in instructions if "pip wheel" in i.arguments]
    assert re.search(r"(PIP_CONSTRAINT=|(-c|--constraint)\s+)\S*constraints\.txt", build), build
