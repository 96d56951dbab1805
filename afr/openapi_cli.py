"""``afr openapi``: the HTTP APIs' OpenAPI documents, generated from their models.

``afr openapi`` prints them; ``--write`` regenerates the checked-in copies under
``docs/openapi/`` (what a reviewer reads, and what CI compares); ``--check`` exits 1 when a
copy differs from what the models generate. Stdlib only at import: the services' modules
load when the command runs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_DIR", "DOCUMENTS", "add_openapi_parser", "main", "render", "rendered", "stale"]

DEFAULT_DIR = Path("docs/openapi")
DOCUMENTS: dict[str, str] = {
    "read-api.json": "collector.api.openapi",
    "worker.json": "replay_worker.openapi",
}
"""File name under ``docs/openapi/`` -> the module whose ``OPENAPI`` it holds."""
REGENERATE = "afr openapi --write (or: python -m afr.openapi_cli --write)"


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def rendered() -> dict[str, str]:
    """Each document as its checked-in file should read."""
    return {
        name: render(importlib.import_module(module).OPENAPI) for name, module in DOCUMENTS.items()
    }


def stale(directory: Path) -> list[str]:
    """The documents whose file under ``directory`` is missing or differs."""
    return [
        name
        for name, text in rendered().items()
        if not (directory / name).is_file() or (directory / name).read_text() != text
    ]


def _command(args: argparse.Namespace) -> int:
    directory: Path = args.dir
    if args.check:
        found = stale(directory)
        for name in found:
            print(f"{directory / name} is stale: regenerate with {REGENERATE}", file=sys.stderr)
        return 1 if found else 0
    if args.write:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in rendered().items():
            (directory / name).write_text(text)
            print(directory / name)
        return 0
    for text in rendered().values():
        sys.stdout.write(text)
    return 0


def add_openapi_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "openapi",
        help="print, write or check the OpenAPI documents of the read API and the worker",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="regenerate the checked-in files")
    mode.add_argument("--check", action="store_true", help="exit 1 when a checked-in file is stale")
    parser.add_argument(
        "--dir", type=Path, default=DEFAULT_DIR, help=f"default {DEFAULT_DIR} (of the checkout)"
    )
    parser.set_defaults(func=_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m afr.openapi_cli")
    add_openapi_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["openapi", *(sys.argv[1:] if argv is None else argv)])
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
