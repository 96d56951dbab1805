"""chDB is the extra ``afr-server[embedded]``: an install without it that asks for the
embedded store is told what to do, not shown a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HIDE_CHDB = (
    "import sys; sys.modules['chdb'] = None\n"  # import chdb -> ImportError, as when absent
    "from afr.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def test_afr_up_without_chdb_says_which_extra_to_install(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", HIDE_CHDB, "up", "--data-dir", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "pip install 'afr-server[embedded]'" in done.stderr
    assert "AFR_CLICKHOUSE_URL" in done.stderr
    assert "Traceback" not in done.stderr
