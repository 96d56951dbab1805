"""Small builders for Grafana's dashboard JSON model (schemaVersion 39: Grafana 11.6 and 12).

Every panel and template variable queries ``${datasource}``, a datasource variable over the
ClickHouse plugin, so the same JSON works on any Grafana; every table is qualified with
``${database}``, a hidden constant (``afr``; ``afr grafana push --database`` rewrites it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DATASOURCE",
    "DATASOURCE_UID",
    "DEFAULT_DATABASE",
    "FOLDER",
    "PLUGIN_ID",
    "PLUGIN_VERSION",
    "SCHEMA_VERSION",
    "TAG",
    "Grid",
    "constant",
    "custom_variable",
    "dashboard",
    "datasource_variable",
    "link",
    "override",
    "panel",
    "query_variable",
    "target",
    "textbox",
]

PLUGIN_ID = "grafana-clickhouse-datasource"
PLUGIN_VERSION = "4.20.0"
"""The plugin version afr is built and tested against, pinned wherever it is installed
(deploy/compose, the Grafana container test: ``PLUGIN_ID@PLUGIN_VERSION``): its query
generator and macros are the ones ``interpolate.py`` reproduces, and its editor reads a
target's ``pluginVersion`` (a target without one is migrated as a v3 query)."""
DATASOURCE_UID = "afr-clickhouse"
"""The datasource ``afr grafana push`` and deploy/grafana provision; the variable's default."""
DEFAULT_DATABASE = "afr"
FOLDER = "afr"
TAG = "afr"
SCHEMA_VERSION = 39
DATASOURCE: dict[str, str] = {"type": PLUGIN_ID, "uid": "${datasource}"}

# The plugin's query formats (sqlds): what frame a query returns.
FORMAT_TIME_SERIES = 0
FORMAT_TABLE = 1
FORMAT_LOGS = 2
FORMAT_TRACE = 3
_QUERY_TYPES = {
    FORMAT_TIME_SERIES: "timeseries",
    FORMAT_TABLE: "table",
    FORMAT_LOGS: "logs",
    FORMAT_TRACE: "traces",
}


def target(sql: str, fmt: int, ref_id: str = "A", **extra: Any) -> dict[str, Any]:
    """A SQL-editor query of the ClickHouse plugin."""
    return {
        "refId": ref_id,
        "datasource": DATASOURCE,
        "pluginVersion": PLUGIN_VERSION,
        "editorType": "sql",
        "format": fmt,
        "queryType": _QUERY_TYPES[fmt],
        "rawSql": sql.strip(),
        **extra,
    }


def link(title: str, dashboard_uid: str, *params: str) -> dict[str, Any]:
    """A data link to one of afr's dashboards, keeping the time range and the datasource.

    ``params`` are query parameters such as ``var-run_id=${__value.raw}`` or
    ``${project:queryparam}``."""
    query = "&".join((*params, "${datasource:queryparam}", "${__url_time_range}"))
    return {"title": title, "url": f"/d/{dashboard_uid}/{dashboard_uid}?{query}"}


def override(column: str, **properties: Any) -> dict[str, Any]:
    """Field overrides for one column; ``custom_width=90`` sets ``custom.width``."""
    return {
        "matcher": {"id": "byName", "options": column},
        "properties": [
            {
                "id": name.replace("custom_", "custom.") if name.startswith("custom_") else name,
                "value": value,
            }
            for name, value in properties.items()
        ],
    }


def panel(
    kind: str,
    title: str,
    targets: list[dict[str, Any]],
    *,
    description: str = "",
    defaults: dict[str, Any] | None = None,
    overrides: list[dict[str, Any]] | None = None,
    options: dict[str, Any] | None = None,
    transformations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    built: dict[str, Any] = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": targets,
        "fieldConfig": {"defaults": defaults or {}, "overrides": overrides or []},
        "options": options or {},
    }
    if transformations:
        built["transformations"] = transformations
    return built


@dataclass
class Grid:
    """Lays panels out left to right on Grafana's 24-column grid, one row at a time."""

    panels: list[dict[str, Any]] = field(default_factory=list)
    _x: int = 0
    _y: int = 0
    _row_height: int = 0

    def add(self, built: dict[str, Any], width: int, height: int) -> None:
        if not 0 < width <= 24:
            raise ValueError(f"panel width {width} is not within 1..24")
        if self._x + width > 24:
            self.newline()
        built["id"] = len(self.panels) + 1
        built["gridPos"] = {"h": height, "w": width, "x": self._x, "y": self._y}
        self.panels.append(built)
        self._x += width
        self._row_height = max(self._row_height, height)

    def newline(self) -> None:
        self._y += self._row_height
        self._x, self._row_height = 0, 0


def _current(value: str | list[str], text: str | list[str] | None = None) -> dict[str, Any]:
    return {"selected": True, "text": value if text is None else text, "value": value}


_ALL_CURRENT = _current(["$__all"], ["All"])


def datasource_variable() -> dict[str, Any]:
    return {
        "type": "datasource",
        "name": "datasource",
        "label": "ClickHouse",
        "query": PLUGIN_ID,
        "current": _current(DATASOURCE_UID, "afr ClickHouse"),
        "options": [],
        "refresh": 1,
        "regex": "",
        "hide": 0,
        "multi": False,
        "includeAll": False,
    }


def constant(name: str, value: str) -> dict[str, Any]:
    return {
        "type": "constant",
        "name": name,
        "query": value,
        "current": _current(value),
        "options": [_current(value)],
        "hide": 2,
        "skipUrlSync": True,
    }


def query_variable(name: str, label: str, sql: str, *, multi: bool = True) -> dict[str, Any]:
    """Options from SQL, refreshed when the time range changes; multi-value with All (which
    expands to every option: ``IN (${name:singlequote})`` always has values)."""
    sql = sql.strip()
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DATASOURCE,
        "query": {"editorType": "sql", "rawSql": sql, "format": FORMAT_TABLE, "refId": name},
        "definition": sql,
        "current": _ALL_CURRENT if multi else {},
        "options": [],
        "refresh": 2,
        "sort": 1,
        "regex": "",
        "hide": 0,
        "multi": multi,
        "includeAll": multi,
    }


def custom_variable(name: str, label: str, values: tuple[str, ...]) -> dict[str, Any]:
    return {
        "type": "custom",
        "name": name,
        "label": label,
        "query": ",".join(values),
        "current": _ALL_CURRENT,
        "options": [{"selected": True, "text": "All", "value": "$__all"}]
        + [{"selected": False, "text": v, "value": v} for v in values],
        "hide": 0,
        "multi": True,
        "includeAll": True,
    }


def textbox(name: str, label: str, description: str) -> dict[str, Any]:
    return {
        "type": "textbox",
        "name": name,
        "label": label,
        "description": description,
        "query": "",
        "current": _current(""),
        "options": [_current("")],
        "hide": 0,
    }


def dashboard(
    uid: str,
    title: str,
    description: str,
    variables: list[dict[str, Any]],
    grid: Grid,
    *,
    time_from: str = "now-24h",
) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": [TAG],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "timezone": "browser",
        "time": {"from": time_from, "to": "now"},
        "refresh": "",
        "annotations": {"list": []},
        "links": [
            {
                "type": "dashboards",
                "title": "afr",
                "tags": [TAG],
                "asDropdown": False,
                "includeVars": False,
                "keepTime": True,
                "targetBlank": False,
                "icon": "external link",
                "tooltip": "",
                "url": "",
            }
        ],
        "templating": {"list": variables},
        "panels": grid.panels,
    }
