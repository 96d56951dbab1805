"""API keys: shown once, stored as digests, compared by digest, revocable, never echoed."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.auth import DEFAULT_PROJECT, Authenticator, KeyStore
from collector.errors import Unauthenticated


def test_keys_are_stored_only_as_digests(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys.sqlite")
    key = store.create("shop")
    assert key.startswith("afr_")
    assert len(key) > 40
    raw = (tmp_path / "keys.sqlite").read_bytes()
    assert key.encode() not in raw
    assert key[4:20].encode() not in raw
    assert (tmp_path / "keys.sqlite").stat().st_mode & 0o777 == 0o600
    (info,) = store.list()
    assert info.project == "shop"
    assert info.last4 == key[-4:]
    assert info.revoked_at is None


def test_authenticator_maps_keys_to_projects_and_refuses_the_rest(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys.sqlite")
    shop, other = store.create("shop"), store.create("other")
    auth = Authenticator(store)
    assert auth.authenticate(f"Bearer {shop}") == "shop"
    assert auth.authenticate(f"bearer   {other}  ") == "other"
    for header in (None, "", f"Basic {shop}", "Bearer ", f"Bearer {shop}x", shop):
        with pytest.raises(Unauthenticated) as caught:
            auth.authenticate(header)
        assert shop not in str(caught.value)


def test_revoked_keys_stop_working(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys.sqlite")
    key = store.create("shop")
    (info,) = store.list()
    assert store.revoke(info.key_id)
    assert not store.revoke(info.key_id), "already revoked"
    assert not store.revoke("abc"), "ids shorter than 8 characters match nothing"
    with pytest.raises(Unauthenticated):
        Authenticator(store).authenticate(f"Bearer {key}")


def test_project_names_are_validated(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys.sqlite")
    for bad in ("", "a b", "x" * 200, "drop;table"):
        with pytest.raises(ValueError, match="project names"):
            store.create(bad)


def test_auth_off_is_explicit_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    auth = Authenticator(None)
    assert not auth.enabled
    assert auth.authenticate(None) == DEFAULT_PROJECT
    assert "authentication is OFF" in caplog.text
