"""``python -m afr.grafana.dashboards [DIR]``: writes the dashboards to ``DIR`` (default
``dashboards``), one file each, as ``dashboards/*.json`` are kept."""

from __future__ import annotations

import sys
from pathlib import Path

from afr.grafana.dashboards import FILE_NAMES, build_all, render

__all__ = ["main", "write_all"]


def write_all(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for uid, built in build_all().items():
        path = directory / FILE_NAMES[uid]
        path.write_text(render(built))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    directory = Path(args[0]) if args else Path("dashboards")
    for path in write_all(directory):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
