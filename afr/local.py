"""The local project: what `afr up` sets up on first start for one-machine use."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `afr eval synthesize` reads the key without loading the key store
    from collector.auth import KeyStore

__all__ = [
    "LOCAL_KEY_FILE",
    "LOCAL_PROJECT",
    "WEBHOOK_SECRET_FILE",
    "ensure_local_key",
    "ensure_webhook_secret",
    "read_local_key",
]

LOCAL_PROJECT = "local"
LOCAL_KEY_FILE = "local-project.key"


def ensure_local_key(keys: KeyStore, data_dir: Path) -> str | None:
    """Creates the local project's key on first start; returns it only when created now.

    The clear key is written to a 0600 file under the data directory and nowhere else.
    """
    path = data_dir / LOCAL_KEY_FILE
    if path.exists():
        return None
    key = keys.create(LOCAL_PROJECT)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return key


def read_local_key(data_dir: Path) -> str | None:
    path = data_dir / LOCAL_KEY_FILE
    return path.read_text().strip() if path.exists() else None


WEBHOOK_SECRET_FILE = "webhook.secret"  # noqa: S105 - a file name, not a secret


def ensure_webhook_secret(data_dir: Path) -> str:
    """The replay hook's signing secret for one-machine use: generated once, mode 0600."""
    from replay_worker.hooks.signature import generate_secret

    path = data_dir / WEBHOOK_SECRET_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as handle:
                handle.write(generate_secret() + "\n")
    return path.read_text().strip()
