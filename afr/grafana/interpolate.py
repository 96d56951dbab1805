"""What Grafana and the ClickHouse plugin do to a panel's SQL before ClickHouse sees it.

Three passes, in the order the plugin runs them, as grafana-clickhouse-datasource 4.20.0 does
(``panels.PLUGIN_VERSION``, pinned wherever afr installs the plugin; read from its source at
tag v4.20.0: ``src/data/CHDatasource.ts`` ``applyConditionalAll``, ``pkg/macros/macros.go`` over
``grafana/macropro`` v1.0.1). Re-check this module when the pin moves:

1. ``conditional_all`` — the plugin's frontend ``applyConditionalAll``:
   ``$__conditionalAll(<condition>, $var)`` becomes ``1=1`` when ``var`` is All or empty,
   else ``<condition>``; its arguments are split on commas at parenthesis depth one, quotes
   and brackets ignored, exactly like the plugin's ``getMacroArgs``.
2. ``replace_variables`` — Grafana's template service (``$var``, ``${var}``,
   ``${var:format}``, ``[[var]]``) with the plugin's format function (a multi-value becomes
   ``'a','b'``, a single value is inserted raw) when no format is named.
3. ``expand_macros`` — the plugin's backend (``pkg/macros/macros.go`` over
   ``grafana/macropro``): comments are blanked, then every ``$__name(args)`` is expanded,
   longest name first.

Grafana's query API (``POST /api/ds/query``) runs only the third pass: a client of it (the
docker test) applies the first two itself, as a dashboard does in the browser.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "ALL",
    "MacroError",
    "TimeRange",
    "Variable",
    "conditional_all",
    "expand_macros",
    "interpolate",
    "replace_variables",
    "resolve_variables",
]

ALL = "$__all"
"""The value Grafana stores for a variable whose All option is selected."""


class MacroError(ValueError):
    """A macro the plugin would refuse (wrong argument count, bad interval)."""


@dataclass(frozen=True)
class Variable:
    """A template variable as the dashboard holds it at query time."""

    name: str
    current: str | tuple[str, ...]
    """The selected value, a tuple for a multi-value variable; ``ALL`` or ``(ALL,)`` for All."""
    options: tuple[str, ...] = ()
    """Every value the variable offers (without All): what All expands to."""
    all_value: str | None = None
    """A custom All value, inserted raw instead of the options."""


@dataclass(frozen=True)
class TimeRange:
    start: datetime
    end: datetime
    interval: timedelta = field(default=timedelta(seconds=60))
    """The panel's interval (Grafana: range / max data points, rounded)."""


def interpolate(sql: str, variables: Mapping[str, Variable], time_range: TimeRange) -> str:
    """The SQL ClickHouse receives for a panel of a dashboard with these variables."""
    return expand_macros(replace_variables(conditional_all(sql, variables), variables), time_range)


# -- 1. $__conditionalAll (the plugin's frontend) --------------------------------------------

_CONDITIONAL_ALL = "$__conditionalAll("
_VARIABLE_IN_ARG = re.compile(r"(?<=\$\{)\w+(?=\})|(?<=\$)\w+")


def _macro_args(sql: str, paren: int) -> list[str]:
    """The plugin's ``getMacroArgs``: split at commas of depth one, counting parentheses
    only (quotes and brackets are not looked at); [] when the call never closes."""
    args: list[str] = []
    depth = 0
    last = 1
    text = sql[paren:]
    for match in re.finditer(r"[(),]", text):
        char = match.group()
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 1:
            args.append(text[last : match.start()])
            last = match.end()
        if depth == 0:
            args.append(text[last : match.start()])
            return args
    return []


def _js_replacement(replacement: str, matched: str, before: str, after: str) -> str:
    """What JavaScript's ``String.replace(string, string)`` makes of ``$`` in the replacement."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        char = replacement[i]
        nxt = replacement[i + 1] if i + 1 < len(replacement) else ""
        if char == "$" and nxt in ("$", "&", "`", "'"):
            out.append({"$": "$", "&": matched, "`": before, "'": after}[nxt])
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _is_all_or_empty(variable: Variable | None) -> bool:
    if variable is None:
        return False
    current = variable.current
    text = ",".join(current) if isinstance(current, tuple) else current
    return text in ("", ALL)


def conditional_all(sql: str, variables: Mapping[str, Variable]) -> str:
    index = sql.rfind(_CONDITIONAL_ALL)
    while index != -1:
        args = _macro_args(sql, index + len(_CONDITIONAL_ALL) - 1)
        if len(args) != 2:
            return sql  # the plugin gives up on the whole query here
        phrase = args[0]
        name = _VARIABLE_IN_ARG.search(args[1].strip())
        if name and _is_all_or_empty(variables.get(name.group())):
            phrase = "1=1"
        call = f"{_CONDITIONAL_ALL}{args[0]},{args[1]})"
        at = sql.find(call)
        sql = (
            sql[:at]
            + _js_replacement(phrase, call, sql[:at], sql[at + len(call) :])
            + sql[at + len(call) :]
        )
        index = sql.rfind(_CONDITIONAL_ALL)
    return sql


# -- 2. template variables (Grafana's template service) -------------------------------------

# Grafana's variableRegex: $var | [[var:fmt]] | ${var.field:fmt}
_VARIABLE = re.compile(
    r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^\}]+))?(?::([^\}]+))?\}"
)

Formatter = Callable[[str | list[str]], str]


def _plugin_format(value: str | list[str]) -> str:
    """The ClickHouse plugin's ``format``: ``'a','b'`` for a list (nothing escaped), else raw."""
    if isinstance(value, list):
        return "'" + "','".join(value) + "'"
    return value


def _quoted(quote: str, escaped: str) -> Formatter:
    def formatter(value: str | list[str]) -> str:
        values = value if isinstance(value, list) else [value]
        return ",".join(quote + v.replace(quote, escaped) + quote for v in values)

    return formatter


def _joined(separator: str) -> Formatter:
    def formatter(value: str | list[str]) -> str:
        return separator.join(value) if isinstance(value, list) else value

    return formatter


_FORMATS: dict[str, Formatter] = {
    "singlequote": _quoted("'", "\\'"),
    "doublequote": _quoted('"', '\\"'),
    "sqlstring": _quoted("'", "''"),
    "csv": _joined(","),
    "pipe": _joined("|"),
    "raw": _joined(","),
}


def _queryparam(name: str, value: str | list[str]) -> str:
    from urllib.parse import quote

    values = value if isinstance(value, list) else [value]
    return "&".join(f"var-{name}={quote(v, safe='')}" for v in values)


def replace_variables(sql: str, variables: Mapping[str, Variable]) -> str:
    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(4)
        variable = variables.get(name)
        if variable is None:
            return match.group()  # unknown names (and macros) are left alone
        fmt = match.group(3) or match.group(6)
        current = variable.current
        value: str | list[str] = list(current) if isinstance(current, tuple) else current
        if current == ALL or (isinstance(value, list) and value[:1] == [ALL]):
            if variable.all_value is not None and fmt not in ("text", "percentencode"):
                return variable.all_value
            value = list(variable.options)
        if fmt == "queryparam":
            return _queryparam(variable.name, value)
        if fmt is None:
            return _plugin_format(value)
        if fmt not in _FORMATS:
            raise ValueError(f"${{{name}:{fmt}}}: this expander knows no format {fmt!r}")
        return _FORMATS[fmt](value)

    return _VARIABLE.sub(substitute, sql)


# -- 3. the plugin's backend macros (macros.go over macropro) ------------------------------


def _blank_comments(sql: str) -> str:
    """macropro's ``StripComments`` with the plugin's flags: line and block comments become
    spaces of the same length; quoted strings (with backslash escapes), backtick identifiers
    and dollar-quoted strings are kept as they are."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        char = sql[i]
        if char in "'\"`":
            end = _scan_quoted(sql, i)
            out.append(sql[i:end])
            i = end
            continue
        if char == "$":
            end = _dollar_quote_end(sql, i)
            if end > 0:
                out.append(sql[i:end])
                i = end
                continue
        if sql.startswith("--", i):
            end = i
            while end < n and sql[end] not in "\r\n":
                end += 1
            out.append(" " * (end - i))
            i = end
            continue
        if sql.startswith("/*", i):
            close = sql.find("*/", i + 2)
            end = n if close == -1 else close + 2
            out.append(" " * (end - i))
            i = end
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _scan_quoted(sql: str, start: int) -> int:
    """The index just after the quoted string or identifier starting at ``start``."""
    quote = sql[start]
    i = start + 1
    while i < len(sql):
        char = sql[i]
        if char == "\\" and quote != "`":
            i += 2
            continue
        if char == quote:
            if sql.startswith(quote * 2, i):
                i += 2
                continue
            return i + 1
        i += 1
    return len(sql)


def _dollar_quote_end(sql: str, start: int) -> int:
    j = start + 1
    while j < len(sql) and sql[j] != "$":
        if not (sql[j].isascii() and (sql[j].isalnum() or sql[j] == "_")):
            return -1
        j += 1
    if j >= len(sql):
        return -1
    tag = sql[start : j + 1]
    close = sql.find(tag, j + 1)
    return -1 if close == -1 else close + len(tag)


def _closing_paren(sql: str, open_at: int) -> int:
    depth = 0
    i = open_at
    while i < len(sql):
        char = sql[i]
        if char in "'\"":
            i = _scan_quoted(sql, i)
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _split_args(raw: str) -> list[str]:
    raw = raw.strip()
    if not raw:
        return []
    args: list[str] = []
    depth, start, i = 0, 0, 0
    while i < len(raw):
        char = raw[i]
        if char in "'\"":
            i = _scan_quoted(raw, i)
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            if depth == 0:
                raise MacroError(f"unexpected ')' at position {i}")
            depth -= 1
        elif char == "," and depth == 0:
            args.append(raw[start:i].strip())
            start = i + 1
        i += 1
    if depth:
        raise MacroError("unbalanced parentheses in arguments")
    args.append(raw[start:].strip())
    return args


def _unix_s(t: datetime) -> int:
    return math.floor(t.timestamp())


def _unix_ms(t: datetime) -> int:
    return math.floor(t.timestamp() * 1000)


def _date(t: datetime) -> str:
    return f"toDate('{t.astimezone(UTC):%Y-%m-%d}')"


def _one(name: str, args: list[str]) -> str:
    if len(args) != 1:
        raise MacroError(f"{name} expected 1 argument(s), received {len(args)}")
    return args[0]


def _format_duration(d: timedelta) -> str:
    """macropro's ``FormatDuration``: the largest whole unit (5m, 2h, 300ms)."""
    us = abs(round(d / timedelta(microseconds=1)))
    if us == 0:
        return "0s"
    for unit, size in (("h", 3_600_000_000), ("m", 60_000_000), ("s", 1_000_000)):
        if us % size == 0:
            return f"{us // size}{unit}"
    return f"{us // 1000}ms"


_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _go_duration_s(text: str) -> float:
    parts = re.findall(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)", text)
    if not parts or "".join(a + b for a, b in parts) != text.lstrip("+"):
        raise MacroError(f"$__timeGroup: invalid interval {text!r}")
    return sum(float(amount) * _GO_UNITS[unit] for amount, unit in parts)


def _interval_s(r: TimeRange) -> int:
    return int(max(r.interval.total_seconds(), 1))


def _macros(r: TimeRange, table: str, column: str) -> dict[str, Callable[[list[str]], str]]:
    def dt(t: datetime) -> str:
        return f"toDateTime({_unix_s(t)})"

    def dt_ms(t: datetime) -> str:
        return f"fromUnixTimestamp64Milli({_unix_ms(t)})"

    def time_filter(args: list[str]) -> str:
        col = _one("$__timeFilter", args)
        return f"{col} >= {dt(r.start)} AND {col} <= {dt(r.end)}"

    def time_filter_ms(args: list[str]) -> str:
        col = _one("$__timeFilter_ms", args)
        return f"{col} >= {dt_ms(r.start)} AND {col} <= {dt_ms(r.end)}"

    def date_filter(args: list[str]) -> str:
        col = _one("$__dateFilter", args)
        return f"{col} >= {_date(r.start)} AND {col} <= {_date(r.end)}"

    def date_time_filter(args: list[str]) -> str:
        if len(args) != 2:
            raise MacroError(f"$__dateTimeFilter expected 2 argument(s), received {len(args)}")
        d, t = args
        return (
            f"({d} >= {_date(r.start)} AND {d} <= {_date(r.end)}) AND "
            f"({t} >= {dt(r.start)} AND {t} <= {dt(r.end)})"
        )

    def time_group(args: list[str]) -> str:
        if len(args) != 2:
            raise MacroError(f"$__timeGroup expected 2 argument(s), received {len(args)}")
        seconds = round(_go_duration_s(args[1].strip().strip("'\"")))
        if seconds <= 0:
            raise MacroError(f"$__timeGroup: interval must be positive, got {args[1]!r}")
        return f"toStartOfInterval(toDateTime({args[0].strip()}), INTERVAL {seconds} second)"

    def need(name: str, value: str) -> Callable[[list[str]], str]:
        def macro(args: list[str]) -> str:
            if not value:
                raise MacroError(f"$__{name}: no {name} name in query context")
            return value

        return macro

    interval_ms = int(r.interval / timedelta(milliseconds=1))
    return {
        "interval": lambda a: _format_duration(r.interval),
        "interval_ms": lambda a: str(interval_ms),
        "timeFilter": time_filter,
        "timeFrom": lambda a: f"{_one('$__timeFrom', a)} >= {dt(r.start)}",
        "timeTo": lambda a: f"{_one('$__timeTo', a)} <= {dt(r.end)}",
        "timeGroup": time_group,
        "table": need("table", table),
        "column": need("column", column),
        "fromTime": lambda a: dt(r.start),
        "toTime": lambda a: dt(r.end),
        "fromTime_ms": lambda a: dt_ms(r.start),
        "toTime_ms": lambda a: dt_ms(r.end),
        "timeFilter_ms": time_filter_ms,
        "dateFilter": date_filter,
        "dateTimeFilter": date_time_filter,
        "dt": date_time_filter,
        "timeInterval": lambda a: (
            f"toStartOfInterval(toDateTime({_one('$__timeInterval', a)}), "
            f"INTERVAL {_interval_s(r)} second)"
        ),
        "timeInterval_ms": lambda a: (
            f"toStartOfInterval(toDateTime64({_one('$__timeInterval_ms', a)}, 3), "
            f"INTERVAL {max(interval_ms, 1)} millisecond)"
        ),
        "interval_s": lambda a: str(_interval_s(r)),
    }


_STATEMENT_MACROS = ("columns", "rateColumns", "perSecondColumns", "increaseColumns", "lttb")


def expand_macros(sql: str, time_range: TimeRange, *, table: str = "", column: str = "") -> str:
    """The plugin backend's ``macros.Interpolate``. Statement macros (``$__columns`` and
    friends, which rewrite the whole query) are not supported: afr's dashboards use none."""
    if "$__" not in sql:
        return sql
    sql = _blank_comments(sql)
    for name in _STATEMENT_MACROS:
        if re.search(rf"\$__{name}\b", sql):
            raise MacroError(f"$__{name} is a statement macro this expander does not implement")
    macros = _macros(time_range, table, column)
    for name in sorted(macros, key=lambda n: (-len(n), n)):
        sql = _replace_macro(sql, "$__" + name, macros[name])
    return sql


def _replace_macro(sql: str, token: str, expand: Callable[[list[str]], str]) -> str:
    out: list[str] = []
    rest = sql
    while True:
        at = rest.find(token)
        if at == -1:
            out.append(rest)
            return "".join(out)
        after = at + len(token)
        if after < len(rest) and (
            rest[after].isascii() and (rest[after].isalnum() or rest[after] == "_")
        ):
            out.append(rest[:after])  # a longer name: not this macro
            rest = rest[after:]
            continue
        out.append(rest[:at])
        rest = rest[after:]
        raw = ""
        if rest.startswith("("):
            end = _closing_paren(rest, 0)
            if end != -1:
                raw, rest = rest[1:end], rest[end + 1 :]
        out.append(expand(_split_args(raw)))


def resolve_variables(
    dashboard: Mapping[str, Any],
    run_query: Callable[[str], list[tuple[Any, ...]]],
    time_range: TimeRange,
    chosen: Mapping[str, str | tuple[str, ...]],
    *,
    macros: bool = True,
) -> dict[str, Variable]:
    """The dashboard's variables as Grafana resolves them, in order: query variables' options
    from their SQL (run by ``run_query``; All selected unless ``chosen``), custom ones from
    their list, textboxes from ``chosen``. ``macros=False`` leaves the plugin's macros to
    whoever runs the query (Grafana's query API expands them itself)."""
    resolved: dict[str, Variable] = {}
    for spec in dashboard["templating"]["list"]:
        name, kind = spec["name"], spec["type"]
        if kind == "datasource":
            resolved[name] = Variable(name, "afr-clickhouse")
        elif kind == "constant":
            resolved[name] = Variable(name, spec["query"])
        elif kind == "textbox":
            value = chosen.get(name, "")
            assert isinstance(value, str)
            resolved[name] = Variable(name, value)
        else:
            if kind == "custom":
                options = tuple(o["value"] for o in spec["options"] if o["value"] != ALL)
            else:
                raw = spec["query"]["rawSql"]
                sql = (
                    interpolate(raw, resolved, time_range)
                    if macros
                    else replace_variables(conditional_all(raw, resolved), resolved)
                )
                options = tuple(str(row[0]) for row in run_query(sql))
            value = chosen.get(name, (ALL,))
            current = value if isinstance(value, tuple) else (value,)
            resolved[name] = Variable(name, current, options)
    return resolved
