"""The docs in the repository hold together: every relative link in README.md, docs/*.md and
bench/README.md points at a file or folder that exists, and docs/configuration.md names
every variable the settings models read (a setting nobody can find is a setting nobody
sets)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.deploy.settings_env import MODELS, env_names

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")])

# [text](target) and [text](target "title"); images too. Fenced code blocks are skipped
# before this runs, so shell snippets with brackets are not read as links.
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_INLINE_CODE = re.compile(r"`[^`\n]*`")


def relative_links(markdown: str) -> list[str]:
    """The link targets of ``markdown`` that are paths: no scheme, no bare anchor; the
    anchor of a path is cut off."""
    text = _INLINE_CODE.sub("", _FENCE.sub("", markdown))
    targets = []
    for target in _LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue  # http(s)://, mailto: ... and anchors within the page
        targets.append(target.split("#", 1)[0])
    return targets


def test_relative_links_are_read_from_markdown() -> None:
    text = (
        'See [a](docs/a.md#part), [b](<b.md>), ![i](img.png "title"), [w](https://x.y/z),\n'
        "[m](mailto:a@b.c), [here](#anchor) and `[not](code.md)`.\n"
        "```sh\necho [x](fenced.md)\n```\n"
    )
    assert relative_links(text) == ["docs/a.md", "b.md", "img.png"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    missing = []
    for target in relative_links(doc.read_text(encoding="utf-8")):
        path = (doc.parent / target).resolve()
        if not path.exists():
            missing.append(target)
    assert not missing, f"{doc.relative_to(ROOT)} links to missing files: {missing}"


def test_the_docs_exist() -> None:
    names = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert {
        "architecture.md",
        "reference.md",
        "configuration.md",
        "redaction.md",
        "sql.md",
        "dashboards.md",
        "replay-and-evals.md",
        "deploy.md",
        "testing.md",
    } <= names


def test_readme_stays_short() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


@pytest.mark.parametrize("component", sorted(MODELS))
def test_configuration_names_every_setting(component: str) -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    # Names without the prefix are keyword aliases of install(), not variables.
    variables = [
        name for name in env_names(MODELS[component]) if name.startswith(("AFR_", "OTEL_"))
    ]
    undocumented = [name for name in variables if f"`{name}`" not in page]
    assert not undocumented, f"docs/configuration.md does not name: {undocumented}"
