"""Builds the redaction and truncation processors from settings and the config file.

The redaction key comes from ``AFR_REDACTION_KEY``, or else from ``<data_dir>/redaction.key``,
which is generated (32 random bytes, mode 0600) on first start. The same key gives the same
pseudonyms across restarts; another key gives different ones.

The optional TOML file (``AFR_REDACTION_CONFIG``)::

    [redaction]
    disable = ["phone"]                      # rule names to turn off
    allow_values = ["support@shop.example"]  # exact values never redacted
    allow_keys = ["gen_ai.request.model"]    # keys whose values are never redacted
    extra_key_names = ["loyalty_number"]     # keys whose values are always replaced

    [[redaction.patterns]]                   # extra detectors (RE2 syntax)
    name = "employee_id"
    regex = "EMP-[0-9]{6}"

    [truncation]
    max_body_bytes = 262144
    max_span_bytes = 4194304
    preview_bytes = 2048
    [truncation.field_limits]
    "gen_ai.tool.definitions" = 65536
"""

from __future__ import annotations

import logging
import os
import secrets
import tomllib
from pathlib import Path
from typing import Any

from collector.pipeline import Processor
from collector.processors.normalize import normalize
from collector.processors.redact import BUILTIN_DETECTORS, Redactor, detector
from collector.processors.rules import RedactionConfig
from collector.processors.signature import failure_causes
from collector.processors.truncate import TruncationConfig, Truncator
from collector.settings import CollectorSettings

__all__ = [
    "ConfigError",
    "build_redactor",
    "build_truncator",
    "default_processors",
    "load_config_file",
    "redaction_secret",
]

logger = logging.getLogger("afr.collector")

KEY_FILE = "redaction.key"
_KNOWN_RULES = {d.name for d in BUILTIN_DETECTORS}


class ConfigError(ValueError):
    """The redaction config file is wrong: fail at start-up, never run half-configured."""


def redaction_secret(settings: CollectorSettings) -> bytes:
    if settings.redaction_key is not None:
        return settings.redaction_key.get_secret_value().encode()
    path = settings.data_dir / KEY_FILE
    if not path.exists():
        settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process created it first
        else:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_hex(32) + "\n")
    return path.read_text().strip().encode()


def load_config_file(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read redaction config {path}: {exc}") from None


def _strings(section: dict[str, Any], key: str) -> list[str]:
    value = section.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"redaction.{key} must be a list of strings")
    return value


def build_redactor(settings: CollectorSettings, document: dict[str, Any]) -> Redactor:
    section = document.get("redaction", {})
    disabled = set(_strings(section, "disable"))
    unknown = disabled - _KNOWN_RULES
    if unknown:
        raise ConfigError(
            f"redaction.disable names unknown rules {sorted(unknown)}; known: {sorted(_KNOWN_RULES)}"
        )
    extra = []
    for entry in section.get("patterns", []):
        try:
            extra.append(detector(str(entry["name"]), str(entry["regex"])))
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"redaction.patterns entries need name and regex: {exc}") from None
        except Exception as exc:
            raise ConfigError(
                f"redaction pattern {entry.get('name')!r} is refused: {exc}"
            ) from None
    config = RedactionConfig(
        disabled_rules=frozenset(disabled),
        allow_values=frozenset(_strings(section, "allow_values")),
        allow_keys=frozenset(_strings(section, "allow_keys")),
        extra_key_names=tuple(
            k.lower().replace("-", "_") for k in _strings(section, "extra_key_names")
        ),
        extra_detectors=tuple(extra),
    )
    return Redactor(redaction_secret(settings), config, use_prefilter=settings.redaction_prefilter)


def build_truncator(settings: CollectorSettings, document: dict[str, Any]) -> Truncator:
    section = document.get("truncation", {})
    limits = section.get("field_limits", {})
    if not isinstance(limits, dict) or not all(
        isinstance(v, int) and v > 0 for v in limits.values()
    ):
        raise ConfigError("truncation.field_limits maps field names to positive byte counts")
    return Truncator(
        TruncationConfig(
            max_body_bytes=int(section.get("max_body_bytes", settings.max_body_bytes)),
            max_span_bytes=int(section.get("max_span_bytes", settings.max_span_bytes)),
            preview_bytes=int(section.get("preview_bytes", 2048)),
            field_limits={str(k): int(v) for k, v in limits.items()},
        )
    )


def default_processors(settings: CollectorSettings) -> list[tuple[str, Processor]]:
    """redact -> normalize -> signature -> truncate. Redaction comes first so every field
    normalization derives (agent, tool, model, error type, the Input/Output bodies) is derived
    from redacted data; nothing is written (or logged) before it; the failure cause reads the
    canonical fields and the whole arguments, so it comes before truncation, which keeps the
    hash of the redacted value, never of a secret."""
    document = load_config_file(settings.redaction_config)
    processors: list[tuple[str, Processor]] = []
    if settings.redaction_enabled:
        processors.append(("redact", build_redactor(settings, document)))
    else:
        logger.warning("redaction is OFF: span content is stored exactly as received")
    processors.append(("normalize", normalize))
    if settings.failure_signatures:
        processors.append(("signature", failure_causes))
    else:
        logger.info("failure signatures are off: errored runs get no signature, never cluster")
    processors.append(("truncate", build_truncator(settings, document)))
    return processors
