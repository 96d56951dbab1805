"""What the SQL interface serves: the statement and function policy.

Pure functions over text. The engine's ``readonly=1`` is the guarantee against writes and
most outside reads (ADR 17); this module refuses what chDB lets through even so (scalar
``file()``, ``INTO OUTFILE``, ``KILL``, multi-statements, chDB's ``python()``), and says
clearly why. Statements are checked in the engine's own canonical rendering of the query
(``formatQuery``: no comments, no heredocs, one quoting style), so the lexer
(``collector.sqlapi.lexer``) never has to agree with ClickHouse's on the tricky corners.
Settings and caps are ``options``, output formats ``formats``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from collector.sqlapi.errors import Code, SqlError
from collector.sqlapi.lexer import Token, tokens

__all__ = [
    "READ_STATEMENTS",
    "Statement",
    "check_statement",
    "denied_functions",
    "refuse_writes",
]

READ_STATEMENTS = frozenset({"SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXISTS", "EXPLAIN"})

# Table functions that only compute, or read this engine's own tables; every other table
# function the engine knows (file, url, s3, remote, mysql, python, ...) is refused by name.
SAFE_TABLE_FUNCTIONS = frozenset(
    {
        "format",
        "fuzzjson",
        "fuzzquery",
        "generate_series",
        "generaterandom",
        "generateseries",
        "loop",
        "merge",
        "mergetreeanalyzeindexes",
        "mergetreeanalyzeindexesuuid",
        "mergetreecodecblockcounts",
        "mergetreeindex",
        "mergetreeprojection",
        "mergetreetextindex",
        "null",
        "numbers",
        "numbers_mt",
        "primes",
        "prometheusquery",
        "prometheusqueryrange",
        "timeseriesdata",
        "timeseriesmetricfamilies",
        "timeseriesmetrics",
        "timeseriessamples",
        "timeseriesselector",
        "timeseriestags",
        "values",
        "view",
        "viewexplain",
        "viewifpermitted",
        "zeros",
        "zeros_mt",
    }
)
# Known outside readers, refused even if the engine's catalog could not be read.
DENIED_TABLE_FUNCTIONS = frozenset(
    {
        "arrowstream",
        "azureblobstorage",
        "azureblobstoragecluster",
        "bigquery",
        "cluster",
        "clusterallreplicas",
        "cosn",
        "deltalake",
        "deltalakeazure",
        "deltalakecluster",
        "deltalakelocal",
        "deltalakes3",
        "dictionary",
        "eval",
        "executable",
        "file",
        "filecluster",
        "filesystem",
        "gcs",
        "hdfs",
        "hdfscluster",
        "hudi",
        "iceberg",
        "icebergazure",
        "iceberghdfs",
        "iceberglocal",
        "icebergs3",
        "input",
        "jdbc",
        "mongodb",
        "mysql",
        "odbc",
        "oss",
        "paimon",
        "postgresql",
        "python",
        "redis",
        "remote",
        "remotesecure",
        "s3",
        "s3cluster",
        "sqlite",
        "url",
        "urlcluster",
        "ytsaurus",
    }
)
# Scalar functions that read files (file() works under readonly=1 in chDB 26.9), call out to
# a model provider, or read the process's own memory.
DENIED_SCALAR_FUNCTIONS = frozenset(
    {
        "file",
        "addresstoline",
        "addresstolinewithinlines",
        "addresstosymbol",
        "demangle",
        "aiclassify",
        "aiembed",
        "aiextract",
        "aifilter",
        "aigenerate",
        "airedact",
        "aisimilarity",
        "aitranslate",
        "catboostevaluate",
        "naivebayesclassifier",
        "naivebayesclassifierwithallprobs",
        "naivebayesclassifierwithprob",
    }
)


def denied_functions(table_functions: Iterable[str] = ()) -> frozenset[str]:
    """Lower-case names refused in call position: the static lists, plus every table function
    of the engine's catalog that is not known to be safe (a new outside reader is refused)."""
    catalog = {name.lower() for name in table_functions}
    return DENIED_TABLE_FUNCTIONS | DENIED_SCALAR_FUNCTIONS | (catalog - SAFE_TABLE_FUNCTIONS)


@dataclass(frozen=True)
class Statement:
    kind: str
    format: str | None
    """The query's own ``FORMAT`` clause, if any: it overrides ``default_format``."""
    tokens: tuple[Token, ...] = ()


def check_statement(sql: str, denied: frozenset[str]) -> Statement:
    """Refuses what is not one read-only statement over the store; returns its kind and its
    ``FORMAT``."""
    toks = tokens(sql)
    if not toks:
        raise SqlError(Code.SYNTAX_ERROR, "Empty query")
    kind = _read_kind(toks[0])
    for index, tok in enumerate(toks):
        following = toks[index + 1] if index + 1 < len(toks) else None
        if tok.kind == "punct" and tok.text == ";" and following is not None:
            raise SqlError(Code.SYNTAX_ERROR, "Syntax error: Multi-statements are not allowed")
        if following is None or tok.kind not in ("word", "ident"):
            continue
        if following.text == "(" and following.kind == "punct" and tok.text.lower() in denied:
            raise SqlError(
                Code.ACCESS_DENIED,
                f"Function {tok.text}() reads outside the store: afr's SQL interface does not "
                "serve it",
            )
        if (
            tok.kind == "word"
            and tok.text.upper() == "INTO"
            and following.kind == "word"
            and following.text.upper() == "OUTFILE"
        ):
            raise SqlError(
                Code.READONLY, "INTO OUTFILE writes a file: afr's SQL interface is read-only"
            )
    return Statement(kind, _format_clause(toks), tuple(toks))


def refuse_writes(sql: str) -> None:
    """An early, cheap refusal of a write named by the query's first word, before its body
    (an INSERT's data) is read. It only ever refuses: ``check_statement`` still decides."""
    try:
        toks = tokens(sql)
    except SqlError:
        return
    if toks:
        _read_kind(toks[0])


def _read_kind(first: Token) -> str:
    kind = first.text.upper() if first.kind == "word" else first.text
    if kind not in READ_STATEMENTS and kind != "(":
        raise SqlError(
            Code.READONLY,
            f"Cannot execute {kind[:40]} queries: afr's SQL interface is read-only "
            "(it serves SELECT, WITH, SHOW, DESCRIBE, EXISTS and EXPLAIN)",
        )
    return kind


def _format_clause(toks: Sequence[Token]) -> str | None:
    """The statement's own ``FORMAT <name>``: outside parentheses, last but for a trailing
    ``SETTINGS`` clause (``FORMAT JSON SETTINGS readonly = 1`` is one too)."""
    depth, found = 0, None
    for index, tok in enumerate(toks):
        if tok.kind == "punct" and tok.text in "()":
            depth += 1 if tok.text == "(" else -1
            continue
        if depth or tok.kind != "word" or tok.text.upper() != "FORMAT":
            continue
        name = toks[index + 1] if index + 1 < len(toks) else None
        after = toks[index + 2] if index + 2 < len(toks) else None
        if (
            name is not None
            and name.kind in ("word", "ident")
            and (
                after is None
                or (after.kind == "punct" and after.text == ";")
                or (after.kind == "word" and after.text.upper() == "SETTINGS")
            )
        ):
            found = name.text
    return found
