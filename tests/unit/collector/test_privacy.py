"""The redaction config file and key: validated at start-up, key generated once, 0600."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.privacy import (
    ConfigError,
    build_redactor,
    build_truncator,
    load_config_file,
    redaction_secret,
)
from collector.settings import CollectorSettings
from tests.unit.collector.test_redact import span


def settings(tmp_path: Path, **overrides: object) -> CollectorSettings:
    return CollectorSettings(data_dir=tmp_path, **overrides)  # type: ignore[arg-type]


def test_key_is_generated_once_with_mode_0600(tmp_path: Path) -> None:
    first = redaction_secret(settings(tmp_path))
    assert len(first) == 64
    assert redaction_secret(settings(tmp_path)) == first
    assert (tmp_path / "redaction.key").stat().st_mode & 0o777 == 0o600
    assert redaction_secret(settings(tmp_path, redaction_key="from-env")) == b"from-env"


def test_config_file_rules_take_effect(tmp_path: Path) -> None:
    path = tmp_path / "redaction.toml"
    path.write_text(
        """
[redaction]
disable = ["phone"]
allow_values = ["support@shop.example"]
extra_key_names = ["loyalty-number"]
[[redaction.patterns]]
name = "employee_id"
regex = "EMP-[0-9]{6}"
[truncation]
max_body_bytes = 2048
[truncation.field_limits]
"gen_ai.tool.definitions" = 1024
"""
    )
    document = load_config_file(path)
    redactor = build_redactor(settings(tmp_path), document)
    truncator = build_truncator(settings(tmp_path), document)
    record = span(
        span_attributes={
            "a": "EMP-123456 at +1 415-555-0132 or support@shop.example",
            "loyalty_number": "L1",
            "gen_ai.tool.definitions": "d" * 1500,
        }
    )
    truncator(redactor([record]))
    assert record.span_attributes["a"].startswith("<employee_id:")
    assert "+1 415-555-0132 or support@shop.example" in record.span_attributes["a"]
    assert record.span_attributes["loyalty_number"].startswith("<secret:")
    assert record.truncated


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[redaction]\ndisable = ["emails"]', "unknown rules"),
        ('[[redaction.patterns]]\nname = "x"\nregex = "(unclosed"', "does not compile"),
        ('[[redaction.patterns]]\nname = "x"\nregex = "(hunter2"', "does not compile: missing"),
        ('[[redaction.patterns]]\nname = "x"\nregex = "hunter2{2,1}"', "does not compile"),
        # A pattern that can match no character at all would hang the scan (each match
        # of nothing is found again where the last one ended).
        ('[[redaction.patterns]]\nname = "x"\nregex = "x*"', "empty text"),
        ('[[redaction.patterns]]\nname = "x"\nregex = "\\\\b|id=\\\\d+"', "empty text"),
        ('[[redaction.patterns]]\nname = "x"\nregex = "^$|hunter2"', "empty text"),
        ("[redaction]\nallow_values = 3", "list of strings"),
        ("[redaction\n", "cannot read"),
        ('[truncation.field_limits]\n"x" = -1', "positive byte counts"),
    ],
)
def test_bad_config_fails_at_start_up(
    tmp_path: Path, text: str, message: str, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "redaction.toml"
    path.write_text(text)

    def start_up() -> None:
        document = load_config_file(path)
        build_redactor(settings(tmp_path), document)
        build_truncator(settings(tmp_path), document)

    with pytest.raises(ConfigError, match=message) as raised:
        start_up()
    # A pattern may spell out the secret it is there to hide: neither the error nor a log
    # line (RE2 logs a pattern it cannot parse to stderr) repeats it.
    assert "hunter2" not in str(raised.value)
    assert "hunter2" not in "".join(capfd.readouterr())
