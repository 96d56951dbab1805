"""``afr secrets init``: a deployment's secrets generated once, kept after, read by the services.

deploy/compose runs it on every start into the `secrets` volume; the collector and the worker
read the files through AFR_SECRETS_DIR / AFR_WORKER_SECRETS_DIR.
"""

from __future__ import annotations

import hashlib
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from pydantic import ValidationError

from afr.cli import main
from afr.secrets_cli import (
    CLICKHOUSE_PASSWORD,
    CLICKHOUSE_READER,
    CLICKHOUSE_WRITER,
    COLLECTOR_KEY,
    GENERATED,
    GRAFANA_CLICKHOUSE_PASSWORD,
    REDACTION_KEY,
    WEBHOOK_SECRET,
    init_secrets,
)
from collector.auth import KeyStore, digest
from collector.settings import CollectorSettings
from replay_worker.hooks.signature import sign, verify
from replay_worker.settings import WorkerSettings


def _values(directory: Path) -> dict[str, str]:
    return {p.name: p.read_text().strip() for p in directory.iterdir()}


def _init(tmp_path: Path) -> tuple[Path, Path, Path]:
    secrets, data, users = tmp_path / "secrets", tmp_path / "data", tmp_path / "users" / "afr.xml"
    init_secrets(secrets, data_dir=data, clickhouse_users=users)
    return secrets, data, users


def test_every_secret_is_created_once_mode_0600(tmp_path: Path) -> None:
    secrets, data, _ = _init(tmp_path)
    values = _values(secrets)
    assert set(values) == {*GENERATED, COLLECTOR_KEY}
    assert len(set(values.values())) == len(values), "no two secrets alike"
    assert all(len(v) >= 32 for v in values.values())
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    for path in secrets.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path.name
    # the key is an active key of the project, and `afr up` on this data dir makes no other
    key = values[COLLECTOR_KEY]
    assert KeyStore(data / "keys.sqlite").project_for(digest(key)) == "local"
    assert (data / "local-project.key").read_text().strip() == key
    # the webhook secret signs and verifies
    secret = values[WEBHOOK_SECRET]
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": "1000",
        "webhook-signature": sign(secret, "msg_1", 1000, b"{}"),
    }
    assert verify(secret, headers, b"{}", now=1000) == "msg_1"


def test_running_it_again_keeps_every_secret(tmp_path: Path) -> None:
    secrets, _, users = _init(tmp_path)
    before, users_before = _values(secrets), users.read_text()
    outcome = init_secrets(secrets, data_dir=tmp_path / "data", clickhouse_users=users)
    assert _values(secrets) == before
    assert users.read_text() == users_before
    assert all(what.startswith("kept") for what in outcome.values()), outcome


def test_a_missing_secret_is_created_and_a_lost_key_replaced(tmp_path: Path) -> None:
    secrets, data, _ = _init(tmp_path)
    before = _values(secrets)
    (secrets / WEBHOOK_SECRET).unlink()
    (data / "keys.sqlite").unlink()  # the store that knew the key is gone
    outcome = init_secrets(secrets, data_dir=data)
    after = _values(secrets)
    assert outcome[WEBHOOK_SECRET] == "created"
    assert after[WEBHOOK_SECRET] != before[WEBHOOK_SECRET]
    assert outcome[COLLECTOR_KEY].startswith("created")
    assert KeyStore(data / "keys.sqlite").project_for(digest(after[COLLECTOR_KEY])) == "local"
    assert after[CLICKHOUSE_PASSWORD] == before[CLICKHOUSE_PASSWORD]


def test_the_collectors_own_redaction_key_is_carried_over(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "redaction.key").write_text("ab" * 32 + "\n")
    init_secrets(tmp_path / "secrets", data_dir=data)
    assert (tmp_path / "secrets" / REDACTION_KEY).read_text().strip() == "ab" * 32


def test_the_clickhouse_users_file_holds_hashes_and_a_read_only_grafana(tmp_path: Path) -> None:
    secrets, _, users = _init(tmp_path)
    values = _values(secrets)
    text = users.read_text()
    assert values[CLICKHOUSE_PASSWORD] not in text
    assert values[GRAFANA_CLICKHOUSE_PASSWORD] not in text
    root = ET.fromstring(text)  # noqa: S314 - the file afr just wrote

    def sha(name: str) -> str:
        return hashlib.sha256(values[name].encode()).hexdigest()

    writer = root.find(f"users/{CLICKHOUSE_WRITER}")
    reader = root.find(f"users/{CLICKHOUSE_READER}")
    assert writer is not None
    assert reader is not None
    assert writer.findtext("password_sha256_hex") == sha(CLICKHOUSE_PASSWORD)
    assert reader.findtext("password_sha256_hex") == sha(GRAFANA_CLICKHOUSE_PASSWORD)
    profile = root.find(f"profiles/{reader.findtext('profile')}")
    assert profile is not None
    assert profile.findtext("readonly") == "1"
    assert profile.find("constraints/max_execution_time/changeable_in_readonly") is not None
    networks = root.find("users/default/networks")
    assert networks is not None
    assert networks.get("replace") == "replace"
    assert {ip.text for ip in networks} == {"::1", "127.0.0.1"}


def test_the_collector_and_the_worker_read_the_generated_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets, _, _ = _init(tmp_path)
    values = _values(secrets)
    monkeypatch.setenv("AFR_SECRETS_DIR", str(secrets))
    monkeypatch.setenv("AFR_WORKER_SECRETS_DIR", str(secrets))
    monkeypatch.setenv("AFR_CLICKHOUSE_URL", "http://afr@clickhouse:8123")
    collector = CollectorSettings()
    assert collector.store_dsn == f"http://afr:{values[CLICKHOUSE_PASSWORD]}@clickhouse:8123"
    assert collector.redaction_key is not None
    assert collector.redaction_key.get_secret_value() == values[REDACTION_KEY]
    worker = WorkerSettings()
    assert worker.collector_key is not None
    assert worker.webhook_secret is not None
    assert worker.collector_key.get_secret_value() == values[COLLECTOR_KEY]
    assert worker.webhook_secret.get_secret_value() == values[WEBHOOK_SECRET]
    # the environment wins over a file
    monkeypatch.setenv("AFR_WORKER_WEBHOOK_SECRET", "whsec_" + "A" * 44)
    from_env = WorkerSettings().webhook_secret
    assert from_env is not None
    assert from_env.get_secret_value() == "whsec_" + "A" * 44


def test_a_password_in_the_url_is_kept_and_one_is_quoted_into_it() -> None:
    given = CollectorSettings(clickhouse_url="http://u:inurl@h:8123/db", clickhouse_password="x")
    assert given.store_dsn == "http://u:inurl@h:8123/db"
    added = CollectorSettings(clickhouse_url="https://h:8443/db", clickhouse_password="a@b/c")
    assert added.store_dsn == "https://default:a%40b%2Fc@h:8443/db"
    # What `afr up` and the logs print: never the password, in the URL or given apart.
    assert given.store_location == "http://u:***@h:8123/db"
    assert added.store_location == "https://default:***@h:8443/db"
    embedded = CollectorSettings(data_dir=Path("/srv/afr"))
    assert embedded.store_location == "chdb:///srv/afr/chdb"


def test_a_secrets_dir_that_is_not_a_directory_stops_start_up(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="AFR_SECRETS_DIR"):
        CollectorSettings(secrets_dir=tmp_path / "missing")
    with pytest.raises(ValidationError, match="AFR_WORKER_SECRETS_DIR"):
        WorkerSettings(secrets_dir=tmp_path / "missing")


def test_the_command_prints_names_never_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secrets = tmp_path / "secrets"
    assert main(["secrets", "init", str(secrets), "--data-dir", str(tmp_path / "data")]) == 0
    out = capsys.readouterr().out
    for name, value in _values(secrets).items():
        assert name in out
        assert value not in out
    bad_project = ["--data-dir", str(tmp_path / "d2"), "--project", "no spaces"]
    assert main(["secrets", "init", str(tmp_path / "s2"), *bad_project]) == 2
