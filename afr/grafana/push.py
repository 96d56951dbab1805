"""``afr grafana push``: the ClickHouse datasource and afr's dashboards into a Grafana, over
its HTTP API, as many times as you like.

Each object is read by its uid first, then created or updated: the datasource is always
written (its password cannot be read back to compare), the folder created when missing, a
dashboard posted (``overwrite``) only when it differs from the stored one, so a second push
changes nothing. Every failure becomes one ``GrafanaError`` line (``_refused`` is the only
place an HTTP status becomes a message); the token is sent as a header and never printed.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx

from afr.grafana.panels import DATASOURCE_UID, DEFAULT_DATABASE, FOLDER, PLUGIN_ID
from afr_common.urls import redact_url
from collector.store.schema import LOGS_VIEW, TRACES_VIEW, TRACES_VIEW_TRACE_ID_TS

__all__ = [
    "ClickHouseTarget",
    "GrafanaError",
    "PushReport",
    "datasource_model",
    "push",
    "target_from_url",
    "with_database",
]

DATASOURCE_NAME = "afr ClickHouse"
DEFAULT_TIMEOUT_S = 15.0


class GrafanaError(Exception):
    """What went wrong, in a line that is safe to print (it never holds the token)."""


@dataclass(frozen=True)
class ClickHouseTarget:
    """Where Grafana's ClickHouse datasource connects, as Grafana (not this machine) sees it:
    the collector's SQL interface over the embedded store, or a ClickHouse server."""

    host: str = "127.0.0.1"
    port: int = 8123
    username: str = "afr"
    password: str = field(default="", repr=False)
    database: str = DEFAULT_DATABASE
    protocol: str = "http"
    secure: bool = False
    path: str = ""


def target_from_url(url: str, database: str = DEFAULT_DATABASE) -> ClickHouseTarget:
    """``http(s)://user:password@host:port[/path]`` of a ClickHouse server's HTTP interface."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise GrafanaError("--clickhouse-url must look like http(s)://user:password@host:8123")
    secure = parts.scheme == "https"
    return ClickHouseTarget(
        host=parts.hostname,
        port=parts.port or (8443 if secure else 8123),
        username=unquote(parts.username or "default"),
        password=unquote(parts.password or ""),
        database=database,
        secure=secure,
        path=parts.path.strip("/"),
    )


def datasource_model(target: ClickHouseTarget, name: str = DATASOURCE_NAME) -> dict[str, Any]:
    """The datasource as Grafana's API takes it, with the plugin's OTel trace settings on
    afr's trace view: each span once, a project credential's project only, so Explore's query
    builder and the trace links need no hand-written SQL
    (deploy/grafana/provisioning/datasources/afr.yaml is the same)."""
    json_data: dict[str, Any] = {
        "host": target.host,
        "port": target.port,
        "protocol": target.protocol,
        "secure": target.secure,
        "username": target.username,
        "defaultDatabase": target.database,
        "traces": {
            "defaultDatabase": target.database,
            "defaultTable": TRACES_VIEW,
            "otelEnabled": True,
            "otelVersion": "latest",
            "durationUnit": "nanoseconds",
            "traceTimestampTableSuffix": TRACES_VIEW_TRACE_ID_TS.removeprefix(TRACES_VIEW),
            "showTraceLinks": True,
        },
        # The plugin's OTel logs mode on afr's log view (each record once, scoped like the
        # traces): a trace's logs from the trace view, a log's trace from Explore.
        "logs": {
            "defaultDatabase": target.database,
            "defaultTable": LOGS_VIEW,
            "otelEnabled": True,
            "otelVersion": "latest",
        },
    }
    if target.path:
        json_data["path"] = target.path
    return {
        "uid": DATASOURCE_UID,
        "name": name,
        "type": PLUGIN_ID,
        "access": "proxy",
        "isDefault": False,
        "jsonData": json_data,
        "secureJsonData": {"password": target.password},
    }


def with_database(dashboard: dict[str, Any], database: str) -> dict[str, Any]:
    """The dashboard with its ``database`` constant set (afr's database is ``AFR_DATABASE``)."""
    changed = copy.deepcopy(dashboard)
    for variable in changed["templating"]["list"]:
        if variable["name"] == "database" and variable["type"] == "constant":
            variable["query"] = database
            current = {"selected": True, "text": database, "value": database}
            variable["current"], variable["options"] = current, [current]
    return changed


@dataclass
class PushReport:
    lines: list[str] = field(default_factory=list)
    healthy: bool = True


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:200]
    if isinstance(body, dict):
        return str(body.get("message") or body.get("error") or body)[:200]
    return str(body)[:200]


def _refused(response: httpx.Response, action: str) -> GrafanaError:
    status = response.status_code
    if status == 401:
        return GrafanaError(
            f"Grafana refused the token (401) while trying to {action}: pass a valid service "
            "account token with --token or AFR_GRAFANA_TOKEN"
        )
    if status == 403:
        return GrafanaError(
            f"the token may not {action} (403): give its service account the Admin role "
            "(datasources need it)"
        )
    return GrafanaError(f"Grafana answered {status} while trying to {action}: {_message(response)}")


class _Api:
    """The calls a push makes, each answered or turned into a ``GrafanaError``."""

    def __init__(self, client: httpx.Client) -> None:
        self._client = client

    def call(
        self, method: str, path: str, action: str, *, body: Any = None, missing_ok: bool = False
    ) -> Any:
        try:
            response = self._client.request(method, path, json=body)
        except httpx.TimeoutException:
            raise GrafanaError(
                f"Grafana at {redact_url(str(self._client.base_url))} did not answer in time ({action})"
            ) from None
        except httpx.TransportError as exc:
            raise GrafanaError(
                f"cannot reach Grafana at {redact_url(str(self._client.base_url))}: {type(exc).__name__}: {exc}"
            ) from None
        if missing_ok and response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise _refused(response, action)
        return response.json() if response.content else {}

    def health(self, path: str) -> tuple[bool, str]:
        """(healthy, why not): a failed check answers 400 with the plugin's message."""
        try:
            response = self._client.get(path)
        except httpx.HTTPError as exc:
            return False, f"{type(exc).__name__}: {exc}"
        if response.status_code in (401, 403):
            raise _refused(response, "check the datasource")
        try:
            body = response.json()
        except ValueError:
            body = {}
        if response.status_code == 200 and isinstance(body, dict) and body.get("status") == "OK":
            return True, ""
        return False, _message(response)


def _comparable(dashboard: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in dashboard.items() if k not in ("id", "version")}


def push(
    client: httpx.Client,
    datasource: dict[str, Any],
    dashboards: Mapping[str, dict[str, Any]],
    *,
    folder: str = FOLDER,
) -> PushReport:
    """Creates or updates the datasource, the folder and the dashboards; checks the
    datasource's health. ``client`` carries Grafana's base URL and the token."""
    api = _Api(client)
    report = PushReport()
    plugin = api.call(
        "GET", f"/api/plugins/{PLUGIN_ID}/settings", "read the plugin's settings", missing_ok=True
    )
    if plugin is None:
        raise GrafanaError(
            f"Grafana has no {PLUGIN_ID} plugin: install it (GF_PLUGINS_PREINSTALL="
            f"{PLUGIN_ID}, or grafana cli plugins install {PLUGIN_ID}) and restart Grafana"
        )

    uid = datasource["uid"]
    existing = api.call(
        "GET", f"/api/datasources/uid/{uid}", "read the datasource", missing_ok=True
    )
    if existing is None:
        api.call("POST", "/api/datasources", "create the datasource", body=datasource)
        report.lines.append(f"datasource {uid}: created")
    else:
        body = {**datasource, "id": existing.get("id"), "version": existing.get("version")}
        api.call("PUT", f"/api/datasources/uid/{uid}", "update the datasource", body=body)
        report.lines.append(f"datasource {uid}: updated")

    if api.call("GET", f"/api/folders/{folder}", "read the folder", missing_ok=True) is None:
        api.call("POST", "/api/folders", "create the folder", body={"uid": folder, "title": folder})
        report.lines.append(f"folder {folder}: created")

    for dashboard_uid, dashboard in dashboards.items():
        stored = api.call(
            "GET", f"/api/dashboards/uid/{dashboard_uid}", "read a dashboard", missing_ok=True
        )
        if (
            stored is not None
            and stored.get("meta", {}).get("folderUid") == folder
            and _comparable(stored.get("dashboard", {})) == _comparable(dashboard)
        ):
            report.lines.append(f"dashboard {dashboard_uid}: unchanged")
            continue
        api.call(
            "POST",
            "/api/dashboards/db",
            "save a dashboard",
            body={
                "dashboard": {**dashboard, "id": None},
                "folderUid": folder,
                "overwrite": True,
                "message": "afr grafana push",
            },
        )
        state = "created" if stored is None else "updated"
        report.lines.append(f"dashboard {dashboard_uid}: {state}")

    healthy, detail = api.health(f"/api/datasources/uid/{uid}/health")
    report.healthy = healthy
    report.lines.append(
        f"datasource {uid}: health OK"
        if healthy
        else f"datasource {uid}: Grafana cannot query ClickHouse: {detail}"
    )
    return report


def client_for(url: str, token: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> httpx.Client:
    return httpx.Client(
        base_url=url.rstrip("/"),
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        timeout=timeout_s,
        follow_redirects=False,
    )
