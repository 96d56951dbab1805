"""ClickHouse's lexical structure, enough to find calls, clauses and statement ends: words,
quoted identifiers, strings (with their escapes and doubled quotes), heredocs, numbers,
``{name:Type}`` substitutions and punctuation; comments (nested ones too) dropped. Why this
and not a SQL library's tokenizer: docs/adr/0033-sql-lexer.md."""

from __future__ import annotations

import re
from dataclasses import dataclass

from collector.sqlapi.errors import Code, SqlError

__all__ = ["Token", "tokens"]


@dataclass(frozen=True)
class Token:
    kind: str
    """``word`` (bare identifier or keyword), ``ident`` (quoted identifier), ``string``,
    ``number``, ``param`` (a ``{name:Type}`` substitution) or ``punct``."""
    text: str


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_NUMBER = re.compile(r"(?:0[xX][0-9A-Fa-f]+|0[bB][01]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)")
_HEREDOC = re.compile(r"\$([A-Za-z0-9_]*)\$")


def tokens(sql: str) -> list[Token]:
    """ClickHouse's lexical structure, enough to find calls, clauses and statement ends:
    comments are dropped, quoted text kept whole. An unterminated literal is a syntax error."""
    out: list[Token] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c.isspace():
            i += 1
        elif sql.startswith("--", i) or sql.startswith("# ", i) or sql.startswith("#!", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            i = _skip_block_comment(sql, i)
        elif c in "'\"`":
            end = _quoted_end(sql, i, c)
            out.append(Token("string" if c == "'" else "ident", _unquote(sql[i + 1 : end - 1], c)))
            i = end
        elif c == "$" and (heredoc := _HEREDOC.match(sql, i)) is not None:
            closing = sql.find(heredoc.group(0), heredoc.end())
            if closing < 0:
                raise SqlError(Code.SYNTAX_ERROR, "Syntax error: unterminated heredoc")
            out.append(Token("string", sql[heredoc.end() : closing]))
            i = closing + len(heredoc.group(0))
        elif c == "{":
            end = sql.find("}", i)
            if end < 0:
                raise SqlError(Code.SYNTAX_ERROR, "Syntax error: unterminated substitution")
            out.append(Token("param", sql[i : end + 1]))
            i = end + 1
        elif (word := _WORD.match(sql, i)) is not None:
            out.append(Token("word", word.group(0)))
            i = word.end()
        elif (number := _NUMBER.match(sql, i)) is not None:
            out.append(Token("number", number.group(0)))
            i = number.end()
        else:
            out.append(Token("punct", c))
            i += 1
    return out


def _skip_block_comment(sql: str, start: int) -> int:
    depth, i = 0, start
    while i < len(sql):
        if sql.startswith("/*", i):
            depth += 1
            i += 2
        elif sql.startswith("*/", i):
            depth -= 1
            i += 2
            if depth == 0:
                return i
        else:
            i += 1
    raise SqlError(Code.SYNTAX_ERROR, "Syntax error: unterminated comment")


def _quoted_end(sql: str, start: int, quote: str) -> int:
    i = start + 1
    while i < len(sql):
        c = sql[i]
        if c == "\\":
            i += 2
        elif c == quote:
            if sql.startswith(quote * 2, i):
                i += 2
            else:
                return i + 1
        else:
            i += 1
    raise SqlError(Code.SYNTAX_ERROR, "Syntax error: unterminated quoted literal")


def _unquote(body: str, quote: str) -> str:
    return re.sub(r"\\(.)", r"\1", body.replace(quote * 2, quote))
