"""The secret corpus generates what it claims (valid checksums, fresh values), and the
repository holds no secret-shaped literal: tests build theirs at run time."""

from __future__ import annotations

import binascii
import os
import random
import re
from pathlib import Path

import pytest

from collector.processors.rules import luhn_valid
from tests.secret_corpus import (
    CORE_KINDS,
    LeakScanner,
    Secret,
    all_kinds,
    card_digits,
    iban_compact,
    look_alikes,
    pieces,
)

ROOT = Path(__file__).resolve().parents[2]
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _iban_valid(compact: str) -> bool:
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def _github_checksum_valid(token: str) -> bool:
    """Independently of the generator: the last six characters, read as a base62 number,
    are the CRC32 of the thirty before them."""
    body, checksum = token[4:-6], token[-6:]
    value = 0
    for char in checksum:
        value = value * 62 + _BASE62.index(char)
    return value == binascii.crc32(body.encode())


def test_generated_numbers_carry_valid_checksums() -> None:
    rng = random.Random()
    for _ in range(200):
        assert luhn_valid(card_digits(rng))
        assert not luhn_valid(card_digits(rng, valid=False))
        assert _iban_valid(iban_compact(rng))
        assert not _iban_valid(iban_compact(rng, valid=False))
        token = CORE_KINDS["github_token"].generate(rng).text
        assert re.fullmatch(r"gh[pousr]_[A-Za-z0-9]{36}", token)
        assert _github_checksum_valid(token)


@pytest.mark.parametrize("damage", ["mistyped", "cut_short", "one_long"])
def test_damaged_github_tokens_keep_the_shape_and_fail_the_checksum(damage: str) -> None:
    """What the matrix plants as a damaged token is one: the prefix and alphabet of a
    GitHub token, a character more, less or different, and a checksum that fails."""
    generate = all_kinds()[f"provider.github_token.classic.{damage}"].generate
    for seed in range(50):
        token = generate(random.Random(seed)).text
        assert re.fullmatch(r"gh[pousr]_[A-Za-z0-9]{35,37}", token), token
        assert not _github_checksum_valid(token), token


@pytest.mark.parametrize("kind", sorted(all_kinds()))
def test_each_kind_is_fresh_and_seen_by_the_scanner(kind: str) -> None:
    generate = all_kinds()[kind].generate
    first, second = generate(random.Random(1)), generate(random.Random(2))
    assert first.text != second.text
    assert first == generate(random.Random(1)), "a seed reproduces its secret"
    # Left unredacted, the planted text is a leak the scanner sees (as written or once
    # decoded), so a clean scan after redaction means the redactor removed it.
    assert LeakScanner({kind: first}).scan_all(first.text), first


def test_the_scanner_finds_pieces_in_decoded_forms_and_ignores_look_alikes() -> None:
    secret = Secret("ZqW8xK2mPv9LtR4nYb7C", ("ZqW8xK2mPv9LtR4nYb7C",))
    scanner = LeakScanner({"s": secret})
    assert scanner.scan_all({"k": "prefix xK2mPv9LtR4n suffix"}) == {"s": {"xk2mpv9ltr4n"}}
    assert scanner.scan_all(["Wm", "dGhlIFpxVzh4SzJtUHY5THRSNG5ZYjdDIGtleQ=="]), "base64"
    assert scanner.scan_all('{"a": "%5AqW8xK2mPv9LtR4nYb7C"}'), "url-encoded"
    assert not scanner.scan_all({"k": "ZqW8xK2mPv9"})
    assert len(pieces(["x" * 20])) == 1
    alikes = look_alikes(random.Random(0))
    assert sum(len(v) for v in alikes.values()) >= 300


# --- no secret-shaped literal in the repository ---------------------------------------------
# Written so that none matches its own source text.
_SHAPES = {
    "aws_access_key": r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    "github_token": r"\bgh[pousr]_[A-Za-z0-9]{36}\b",
    "github_pat": r"\bgithub_pat_[A-Za-z0-9_]{60,}",
    "openai_key": r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
    "slack_token": r"\bxox[abprs]-[0-9]{6,}-[A-Za-z0-9-]{6,}",
    "slack_webhook": r"hooks\.slack\.com/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{12,}",
    "stripe_key": r"\b[sr]k_live_[A-Za-z0-9]{16,}",
    "google_api_key": r"\bAIza[0-9A-Za-z_-]{35}\b",
    "gitlab_token": r"\bglpat-[A-Za-z0-9_-]{20}\b",
    "huggingface_token": r"\bhf_[A-Za-z]{34}\b",
    "sendgrid_key": r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}\b",
    "npm_token": r"\bnpm_[A-Za-z0-9]{36}\b",
    "pem_private_key": r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----",
    "jwt": r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    "azure_account_key": r"AccountKey=[A-Za-z0-9+/]{80,}={0,2}",
}
_SKIP_DIRS = {"node_modules", "__pycache__", "build", "dist"}
_MAX_FILE_BYTES = 2 * 1024 * 1024
_MIN_DISTINCT_CHARS = 10


def _repository_files() -> list[Path]:
    files: list[Path] = []
    for directory, subdirs, names in os.walk(ROOT):
        subdirs[:] = [
            d
            for d in subdirs
            if not d.startswith(".") and d not in _SKIP_DIRS and not d.endswith(".egg-info")
        ]
        files.extend(Path(directory) / name for name in names)
    return files


def test_no_secret_shaped_literal_in_the_repository() -> None:
    shapes = re.compile("|".join(f"(?P<{name}>{p})" for name, p in _SHAPES.items()))
    found = []
    for path in _repository_files():
        try:
            if path.stat().st_size > _MAX_FILE_BYTES:
                continue
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for match in shapes.finditer(text):
            if len(set(match.group())) < _MIN_DISTINCT_CHARS:
                continue  # a placeholder ("SG.xxxx…"), not a secret
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(ROOT)}:{line} {match.lastgroup}")
    assert not found, "secret-shaped literals (build them at run time): " + ", ".join(found)
