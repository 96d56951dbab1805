"""Whether a Docker engine runs here: tests marked ``docker`` skip, with their reason, where
none does (or where ``AFR_SKIP_DOCKER=1`` says not to use it)."""

from __future__ import annotations

import os
import shutil
import subprocess

__all__ = ["docker_available"]


def docker_available() -> bool:
    if os.environ.get("AFR_SKIP_DOCKER") == "1" or shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0  # noqa: S607
    except (OSError, subprocess.TimeoutExpired):
        return False
