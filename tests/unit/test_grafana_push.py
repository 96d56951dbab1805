"""``afr grafana push`` against a Grafana that is a real HTTP server on loopback: what it
sends (the token as a Bearer header, the datasource with its OTel trace settings and
password, the dashboards in the afr folder), that a second push changes nothing, and a line
a user can act on when the token is refused, the plugin is missing or Grafana is down —
never the token itself."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from afr.cli import main
from afr.grafana.dashboards import build_all
from afr.grafana.push import GrafanaError, target_from_url

TOKEN = "glsa_test_token_0123456789abcdef"
VIEWER_TOKEN = "glsa_viewer_token_fedcba9876543210"
PASSWORD = "sql-password-for-grafana"
PLUGIN = "grafana-clickhouse-datasource"


@dataclass
class Request:
    method: str
    path: str
    authorization: str | None
    body: Any


@dataclass
class FakeGrafana:
    """Grafana's HTTP API, the parts a push uses, with state."""

    plugin_installed: bool = True
    healthy: bool = True
    datasources: dict[str, dict[str, Any]] = field(default_factory=dict)
    folders: dict[str, dict[str, Any]] = field(default_factory=dict)
    dashboards: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)

    def answer(self, request: Request) -> tuple[int, Any]:
        self.requests.append(request)
        if request.authorization not in (f"Bearer {TOKEN}", f"Bearer {VIEWER_TOKEN}"):
            return 401, {"message": "invalid API key"}
        viewer = request.authorization == f"Bearer {VIEWER_TOKEN}"
        method, path, body = request.method, request.path, request.body
        if path == f"/api/plugins/{PLUGIN}/settings":
            return (
                (200, {"id": PLUGIN})
                if self.plugin_installed
                else (404, {"message": "Plugin not found"})
            )
        if viewer and method != "GET":
            return 403, {"message": "You'll need additional permissions to perform this action."}
        if match := re.fullmatch(r"/api/datasources/uid/([\w-]+)/health", path):
            if self.healthy:
                return 200, {"status": "OK", "message": "Data source is working"}
            return 400, {
                "status": "ERROR",
                "message": "dial tcp 10.0.0.9:8123: connect: connection refused",
            }
        if match := re.fullmatch(r"/api/datasources/uid/([\w-]+)", path):
            uid = match.group(1)
            if method == "GET":
                stored = self.datasources.get(uid)
                return (200, stored) if stored else (404, {"message": "Data source not found"})
            if method == "PUT":
                previous = self.datasources[uid]
                self.datasources[uid] = {
                    **body,
                    "id": previous["id"],
                    "version": previous["version"] + 1,
                }
                return 200, {"message": "Datasource updated", "id": previous["id"]}
        if path == "/api/datasources" and method == "POST":
            if any(d["name"] == body["name"] for d in self.datasources.values()):
                return 409, {"message": "data source with the same name already exists"}
            self.datasources[body["uid"]] = {**body, "id": len(self.datasources) + 1, "version": 1}
            return 200, {"message": "Datasource added", "id": len(self.datasources)}
        if match := re.fullmatch(r"/api/folders/([\w-]+)", path):
            folder = self.folders.get(match.group(1))
            return (200, folder) if folder else (404, {"message": "folder not found"})
        if path == "/api/folders" and method == "POST":
            self.folders[body["uid"]] = body
            return 200, body
        if match := re.fullmatch(r"/api/dashboards/uid/([\w-]+)", path):
            stored = self.dashboards.get(match.group(1))
            if not stored:
                return 404, {"message": "Dashboard not found"}
            return 200, {
                "dashboard": stored["dashboard"],
                "meta": {"folderUid": stored["folderUid"]},
            }
        if path == "/api/dashboards/db" and method == "POST":
            assert body["overwrite"] is True and body["folderUid"] in self.folders
            dashboard = body["dashboard"]
            earlier = self.dashboards.get(dashboard["uid"])
            version = earlier["dashboard"]["version"] + 1 if earlier else 1
            self.dashboards[dashboard["uid"]] = {
                "dashboard": {**dashboard, "id": 7, "version": version},
                "folderUid": body["folderUid"],
            }
            return 200, {"status": "success", "uid": dashboard["uid"], "version": version}
        return 404, {"message": "Not found"}

    def writes(self) -> list[Request]:
        return [r for r in self.requests if r.method != "GET"]


@pytest.fixture
def grafana() -> Iterator[tuple[FakeGrafana, str]]:
    fake = FakeGrafana()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _handle(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            request = Request(
                self.command,
                self.path,
                self.headers.get("authorization"),
                json.loads(raw) if raw else None,
            )
            status, body = fake.answer(request)
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = _handle

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def push(url: str, *extra: str, token: str = TOKEN) -> int:
    return main(["grafana", "push", "--url", url, "--token", token, *extra])


def test_a_push_creates_the_datasource_folder_and_dashboards(
    grafana: tuple[FakeGrafana, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, url = grafana
    assert push(url, "--sql-password", PASSWORD) == 0
    out, err = capsys.readouterr()
    assert TOKEN not in out + err
    assert all(r.authorization == f"Bearer {TOKEN}" for r in fake.requests)

    source = fake.datasources["afr-clickhouse"]
    assert (source["type"], source["access"], source["name"]) == (PLUGIN, "proxy", "afr ClickHouse")
    data = source["jsonData"]
    assert (data["host"], data["port"], data["protocol"], data["username"]) == (
        "127.0.0.1",
        8123,
        "http",
        "afr",
    )
    assert data["defaultDatabase"] == "afr"
    assert data["traces"] == {
        "defaultDatabase": "afr",
        "defaultTable": "traces",
        "otelEnabled": True,
        "otelVersion": "latest",
        "durationUnit": "nanoseconds",
        "traceTimestampTableSuffix": "_trace_id_ts",
        "showTraceLinks": True,
    }
    assert source["secureJsonData"] == {"password": PASSWORD}
    assert PASSWORD not in out + err
    assert fake.folders == {"afr": {"uid": "afr", "title": "afr"}}
    expected = build_all()
    assert set(fake.dashboards) == set(expected)
    for uid, stored in fake.dashboards.items():
        assert stored["folderUid"] == "afr"
        sent = {k: v for k, v in stored["dashboard"].items() if k not in ("id", "version")}
        assert sent == {k: v for k, v in expected[uid].items() if k not in ("id", "version")}
    assert "datasource afr-clickhouse: created" in out
    assert "dashboard afr-runs: created" in out and "health OK" in out


def test_a_second_push_changes_nothing_but_the_datasource(
    grafana: tuple[FakeGrafana, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, url = grafana
    assert push(url, "--sql-password", PASSWORD) == 0
    before = {uid: d["dashboard"]["version"] for uid, d in fake.dashboards.items()}
    fake.requests.clear()
    capsys.readouterr()
    assert push(url, "--sql-password", PASSWORD) == 0
    out, _ = capsys.readouterr()
    assert [(r.method, r.path) for r in fake.writes()] == [
        ("PUT", "/api/datasources/uid/afr-clickhouse")
    ], "the datasource is written again (its password cannot be compared), nothing else"
    assert {uid: d["dashboard"]["version"] for uid, d in fake.dashboards.items()} == before
    assert len(fake.datasources) == 1 and fake.datasources["afr-clickhouse"]["version"] == 2
    assert out.count(": unchanged") == len(build_all())

    # A dashboard edited in Grafana is put back; the others stay untouched.
    fake.dashboards["afr-tools"]["dashboard"]["title"] = "edited by hand"
    fake.requests.clear()
    assert push(url, "--sql-password", PASSWORD) == 0
    posted = [r.body["dashboard"]["uid"] for r in fake.writes() if r.path == "/api/dashboards/db"]
    assert posted == ["afr-tools"]
    assert fake.dashboards["afr-tools"]["dashboard"]["title"] == "afr · Tools and failures"


def test_the_password_comes_from_the_data_dir_and_a_server_url_works_too(
    grafana: tuple[FakeGrafana, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, url = grafana
    assert push(url, "--data-dir", str(tmp_path)) == 2
    assert "sql.password" in capsys.readouterr().err
    (tmp_path / "sql.password").write_text("from-the-file\n")
    assert push(url, "--data-dir", str(tmp_path), "--sql-host", "afr", "--sql-port", "18123") == 0
    source = fake.datasources["afr-clickhouse"]
    assert source["secureJsonData"]["password"] == "from-the-file"
    assert (source["jsonData"]["host"], source["jsonData"]["port"]) == ("afr", 18123)

    assert (
        push(
            url,
            "--clickhouse-url",
            "https://grafana_ro:s%40cret@ch.example:8443/",
            "--database",
            "obs",
        )
        == 0
    )
    source = fake.datasources["afr-clickhouse"]
    data = source["jsonData"]
    assert (data["host"], data["port"], data["secure"], data["username"]) == (
        "ch.example",
        8443,
        True,
        "grafana_ro",
    )
    assert data["defaultDatabase"] == data["traces"]["defaultDatabase"] == "obs"
    assert source["secureJsonData"]["password"] == "s@cret"
    constants = [
        v["query"]
        for d in fake.dashboards.values()
        for v in d["dashboard"]["templating"]["list"]
        if v["name"] == "database"
    ]
    assert constants == ["obs"] * len(build_all()), (
        "the dashboards read the database the datasource names"
    )
    with pytest.raises(GrafanaError):
        target_from_url("ftp://nope")


def test_a_refused_token_says_so_without_printing_it(
    grafana: tuple[FakeGrafana, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, url = grafana
    wrong = "glsa_wrong_token_that_must_not_leak"
    assert push(url, "--sql-password", PASSWORD, token=wrong) == 1
    out, err = capsys.readouterr()
    assert "refused the token (401)" in err
    assert wrong not in out + err
    assert not fake.writes()

    assert push(url, "--sql-password", PASSWORD, token=VIEWER_TOKEN) == 1
    out, err = capsys.readouterr()
    assert "may not create the datasource (403)" in err and "Admin role" in err
    assert VIEWER_TOKEN not in out + err


def test_a_missing_plugin_is_named_before_anything_is_written(
    grafana: tuple[FakeGrafana, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, url = grafana
    fake.plugin_installed = False
    assert push(url, "--sql-password", PASSWORD) == 1
    err = capsys.readouterr().err
    assert "no grafana-clickhouse-datasource plugin" in err and "GF_PLUGINS_PREINSTALL" in err
    assert not fake.writes()


def test_an_unhealthy_datasource_is_pushed_and_reported(
    grafana: tuple[FakeGrafana, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, url = grafana
    fake.healthy = False
    assert push(url, "--sql-password", PASSWORD) == 1
    out = capsys.readouterr().out
    assert "Grafana cannot query ClickHouse: dial tcp 10.0.0.9:8123" in out
    assert len(fake.dashboards) == len(build_all())


def test_an_unreachable_grafana_and_a_missing_token_are_explained(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    assert push(closed, "--sql-password", PASSWORD, "--timeout-s", "2") == 1
    out, err = capsys.readouterr()
    assert f"cannot reach Grafana at {closed}" in err and TOKEN not in out + err
    # Basic-auth credentials written into the URL are not repeated in the message.
    with_password = closed.replace("//", "//admin:hunter2-basic@")
    assert push(with_password, "--sql-password", PASSWORD, "--timeout-s", "2") == 1
    out, err = capsys.readouterr()
    assert "cannot reach Grafana at http://admin:***@127.0.0.1:" in err
    assert "hunter2-basic" not in out + err
    assert main(["grafana", "push", "--url", closed, "--sql-password", PASSWORD]) == 2
    assert "AFR_GRAFANA_TOKEN" in capsys.readouterr().err
    monkeypatch.setenv("AFR_GRAFANA_TOKEN", TOKEN)
    monkeypatch.setenv("AFR_GRAFANA_URL", closed)
    assert main(["grafana", "push", "--sql-password", PASSWORD, "--timeout-s", "2"]) == 1
    assert "cannot reach Grafana" in capsys.readouterr().err


def test_a_project_push_binds_the_datasource_to_a_credential_of_that_project(
    grafana: tuple[FakeGrafana, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from collector.auth import SqlUserStore

    fake, url = grafana
    users = SqlUserStore(tmp_path / "keys.sqlite")
    assert push(url, "--data-dir", str(tmp_path), "--project", "shop") == 0  # no admin password
    source = fake.datasources["afr-clickhouse"]
    first = source["secureJsonData"]["password"]
    assert source["jsonData"]["username"] == "grafana_shop"
    assert users.project_for("grafana_shop", first) == "shop"
    out, err = capsys.readouterr()
    assert first not in out + err, "the credential goes to Grafana only"
    # Pushed again (a team's Grafana re-provisioned): re-keyed, the old password stops working.
    assert push(url, "--data-dir", str(tmp_path), "--project", "shop") == 0
    second = fake.datasources["afr-clickhouse"]["secureJsonData"]["password"]
    assert second != first
    assert users.project_for("grafana_shop", first) is None
    assert users.project_for("grafana_shop", second) == "shop"
    assert [(u.user, u.project) for u in users.list()] == [("grafana_shop", "shop")]
    assert push(url, "--data-dir", str(tmp_path), "--project", "no such/project") == 2
    assert "projects named" in capsys.readouterr().err
    # A server Grafana reaches, but afr's store is embedded: the user could not exist there.
    server = ("--clickhouse-url", "http://grafana_ro:pw@ch:8123")
    assert push(url, "--data-dir", str(tmp_path), "--project", "shop", *server) == 2
    assert "AFR_CLICKHOUSE_URL" in capsys.readouterr().err
